//! The controller's IO loop: the `scale` finder's requests, the stale condition resets, and per
//! PDB the sync's Events and status write.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use super::expected::{controller_of, controller_scale, group_of};
use super::pods::{multiple_budgets, pods_for, reset_disruption_target, stale_disruption_target};
use super::{Config, Error, Note, ScaleAnswer, Workloads, decide};
use crate::Clock;
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Recorder, Shutdown};
use raygate::runtime::SortedState;

/// The `scale` finder's IO: RESTMapper through discovery, GET `.../scale`, and on 404 whether the
/// resource implements `scale` at all (`implementsScale`).
async fn scale_answer(client: &Client, ns: &str, r: &OwnerReference) -> ScaleAnswer {
    let (plural, _) = match support::rest_mapping(client, &r.api_version, &r.kind).await {
        Ok(m) => m,
        Err(e) => return ScaleAnswer::Error(e),
    };
    let group = group_of(&r.api_version);
    let prefix = if group.is_empty() {
        format!("/api/{}", r.api_version)
    } else {
        format!("/apis/{}", r.api_version)
    };
    let url = format!("{prefix}/namespaces/{ns}/{plural}/{}/scale", r.name);
    let req = match http::Request::get(url).body(Vec::new()) {
        Ok(r) => r,
        Err(e) => return ScaleAnswer::Error(e.to_string()),
    };
    match client
        .request::<k8s_openapi::api::autoscaling::v1::Scale>(req)
        .await
    {
        Ok(s) => ScaleAnswer::Scale {
            uid: s.metadata.uid.unwrap_or_default(),
            replicas: s.spec.and_then(|s| s.replicas).unwrap_or(0),
        },
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let implements = support::resources(client, &r.api_version)
                .await
                .map(|l| {
                    l.resources
                        .iter()
                        .any(|x| x.name == format!("{plural}/scale"))
                })
                .unwrap_or(false);
            if implements {
                ScaleAnswer::NotFound
            } else {
                let gr = if group.is_empty() {
                    plural
                } else {
                    format!("{plural}.{group}")
                };
                ScaleAnswer::Error(format!("{gr} does not implement the scale subresource"))
            }
        }
        Err(e) => ScaleAnswer::Error(e.to_string()),
    }
}

/// Runs the disruption controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) -> Result<(), Error> {
    let mut c = Caches::default();
    let actor = Controller {
        pods: c.all(&client),
        pdbs: c.all(&client),
        replicasets: c.all(&client),
        deployments: c.all(&client),
        statefulsets: c.all(&client),
        recorder: Recorder::new(client.clone(), clock.clone(), "controllermanager"),
        client,
    };
    support::run(actor, c, clock, config.lag, shutdown).await
}

struct Controller {
    client: Client,
    pods: Store<Pod>,
    pdbs: Store<PodDisruptionBudget>,
    replicasets: Store<ReplicaSet>,
    deployments: Store<Deployment>,
    statefulsets: Store<StatefulSet>,
    recorder: Recorder,
}

fn owned<K>(store: &Store<K>) -> Vec<K>
where
    K: kube::Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.sorted_state().iter().map(|o| (**o).clone()).collect()
}

impl Actor for Controller {
    type Error = Error;

    /// Syncs every PDB once; the earliest recheck time.
    async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Error> {
        let pdbs = owned(&self.pdbs);
        let mut recheck = self.reset_stale_conditions(now, expect).await;
        if pdbs.is_empty() {
            return Ok(recheck.map(|t| t + Duration::from_millis(1)));
        }
        // the cache's own pods: a pass runs on every pod change and copies only the pods each
        // PDB selects
        let pods = self.pods.sorted_state();
        let mut w = Workloads {
            replicasets: owned(&self.replicasets),
            deployments: owned(&self.deployments),
            statefulsets: owned(&self.statefulsets),
            scales: BTreeMap::new(),
        };
        for (i, message) in multiple_budgets(&pdbs, &pods) {
            self.recorder
                .publish(
                    support::reference(&*pods[i]),
                    "Warning",
                    "MultiplePodDisruptionBudgets",
                    &message,
                )
                .await;
        }
        for pdb in &pdbs {
            let ns = pdb.namespace().unwrap_or_default();
            let selected = pods_for(pdb, &pods);
            find_scales(&self.client, &ns, &selected, &mut w).await;
            let d = decide(pdb, &selected, &w, now);
            self.publish_notes(pdb, &selected, &d.notes).await;
            if let Some(e) = &d.failed {
                tracing::info!(pdb = %pdb.name_any(), namespace = %ns, error = %e, "disruption controller: failSafe");
            }
            if let Some(status) = d.status
                && self.write_status(pdb, status, expect).await? == Written::Requeue
            {
                recheck = Some(now);
                continue;
            }
            if let Some(at) = d.recheck_at {
                recheck = Some(recheck.map_or(at, |r| r.min(at)));
            }
        }
        Ok(recheck.map(|t| t + Duration::from_millis(1)))
    }
}

/// Whether a PDB's status write went through or asks for another pass.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    Done,
    /// A 409 or 404: requeued without failSafe; the next wake reads the newer PDB.
    Requeue,
}

/// Asks the `scale` finder ([`scale_answer`]) for the controllers of `selected` that no typed
/// finder knows and no earlier answer covers.
async fn find_scales(client: &Client, ns: &str, selected: &[Pod], w: &mut Workloads) {
    for pod in selected {
        if let Some(r) = controller_of(&pod.metadata) {
            let key = (
                ns.to_string(),
                r.api_version.clone(),
                r.kind.clone(),
                r.name.clone(),
            );
            let typed = matches!(controller_scale(r, ns, w), Ok(Some(_)));
            if !typed && !w.scales.contains_key(&key) {
                let answer = scale_answer(client, ns, r).await;
                w.scales.insert(key, answer);
            }
        }
    }
}

impl Controller {
    /// Resets the due stale `DisruptionTarget` conditions; when the next one is due.
    async fn reset_stale_conditions(
        &mut self,
        now: Timestamp,
        expect: &mut Expect,
    ) -> Option<Timestamp> {
        let client = &self.client;
        let mut recheck: Option<Timestamp> = None;
        for pod in self.pods.sorted_state() {
            let Some(at) = stale_disruption_target(&pod) else {
                continue;
            };
            if at > now {
                recheck = Some(recheck.map_or(at, |r| r.min(at)));
                continue;
            }
            let mut next = (*pod).clone();
            reset_disruption_target(&mut next, now);
            let api: Api<Pod> =
                Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
            match api
                .replace_status(&pod.name_any(), &PostParams::default(), &next)
                .await
            {
                Ok(written) => {
                    expect.written(&self.pods, &written);
                    tracing::info!(pod = %pod.name_any(), "disruption controller: reset a stale DisruptionTarget condition to False")
                }
                Err(e) => {
                    tracing::debug!(pod = %pod.name_any(), error = %e, "disruption controller: stale condition reset failed (next wake retries)")
                }
            }
        }
        recheck
    }

    /// Publishes a sync's Events: on the PDB, or on a selected pod (skipped when it is not one).
    async fn publish_notes(&mut self, pdb: &PodDisruptionBudget, selected: &[Pod], notes: &[Note]) {
        for n in notes {
            let on = match &n.pod {
                Some(p) => match selected.iter().find(|x| x.name_any() == *p) {
                    Some(pod) => support::reference(pod),
                    None => continue,
                },
                None => support::reference(pdb),
            };
            self.recorder
                .publish(on, n.type_, n.reason, &n.message)
                .await;
        }
    }

    /// Writes a PDB's new status through the status subresource.
    async fn write_status(
        &mut self,
        pdb: &PodDisruptionBudget,
        status: PodDisruptionBudgetStatus,
        expect: &mut Expect,
    ) -> Result<Written, Error> {
        let ns = pdb.namespace().unwrap_or_default();
        let mut next = pdb.clone();
        next.status = Some(status);
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &ns);
        match api
            .replace_status(&pdb.name_any(), &PostParams::default(), &next)
            .await
        {
            Ok(written) => expect.written(&self.pdbs, &written),
            // a 409 requeues without failSafe: the next wake reads the newer PDB
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                return Ok(Written::Requeue);
            }
            Err(source) => {
                return Err(Error::WriteStatus {
                    namespace: ns,
                    name: pdb.name_any(),
                    source,
                });
            }
        }
        Ok(Written::Done)
    }
}
