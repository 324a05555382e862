//! The ReplicaSet controller, after kubernetes `pkg/controller/replicaset/replica_set.go`:
//! claims pods by selector (adopts matching orphans, releases owned pods that stopped
//! matching), keeps `spec.replicas` active pods (not terminal, not deleting) from the template
//! with a controller ownerReference — an evicted or deleted pod is replaced at once — deletes
//! surplus pods in `ActivePodsWithRanks` order, and writes `status` (`calculateStatus`):
//! replicas, fullyLabeledReplicas, readyReplicas, availableReplicas (minReadySeconds),
//! observedGeneration.
//!
//! [`decide`] is pure; [`run`] is the IO loop over caches of ReplicaSets and Pods; the loop's
//! expectations ([`support::Expect`]) stand in for the controller's `ControlleeExpectations`: no
//! sync runs before the cache shows the pods the last one created or deleted.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Clock;
use crate::server::selector::selector_object_matches;
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};
use raygate::runtime::SortedState;

/// `burstReplicas`: at most this many creates or deletes per sync.
pub const BURST_REPLICAS: usize = 500;

/// What one sync of a ReplicaSet does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods to create from the template.
    pub create: Vec<Pod>,
    /// Pods to delete (surplus), by name.
    pub delete: Vec<String>,
    /// Orphans to adopt, by name.
    pub adopt: Vec<String>,
    /// Owned pods that no longer match the selector, by name.
    pub release: Vec<String>,
    /// The status to write, if it changed.
    pub status: Option<ReplicaSetStatus>,
    /// When to sync again for `minReadySeconds` availability.
    pub recheck_after: Option<Duration>,
}

/// The controller reference a ReplicaSet puts on its pods.
pub fn controller_ref(rs: &ReplicaSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: rs.name_any(),
        uid: rs.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn matches(rs: &ReplicaSet, pod: &Pod) -> bool {
    let selector = rs
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_value(&s.selector).ok());
    let labels = serde_json::to_value(&pod.metadata.labels).ok();
    // an empty selector is rejected by validation; treat it as matching nothing here
    selector
        .as_ref()
        .is_some_and(|s| s.as_object().is_some_and(|o| !o.is_empty()))
        && selector_object_matches(selector.as_ref(), labels.as_ref()) == Some(true)
}

fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// `controller.IsPodActive`.
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
        })
}

/// `podutil.IsPodAvailable`.
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    ready_since(pod).is_some_and(|since| {
        min_ready_seconds == 0
            || since + SignedDuration::from_secs(i64::from(min_ready_seconds)) < now
    })
}

/// `GetPodFromTemplate`: labels, annotations and finalizers of the template, `generateName`
/// `<rs>-`, the controller reference, the template's spec.
pub fn pod_from_template(rs: &ReplicaSet) -> Pod {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.name_any())),
            namespace: rs.namespace(),
            labels: tmeta.labels,
            annotations: tmeta.annotations,
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![controller_ref(rs)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

fn phase_rank(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 3,
    }
}

fn deletion_cost(pod: &Pod) -> i64 {
    pod.annotations()
        .get("controller.kubernetes.io/pod-deletion-cost")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

/// `ActivePodsWithRanks.Less`: the pod to delete first sorts first — unassigned before
/// assigned, Pending < Unknown < Running, not ready before ready, lower deletion cost, more
/// pods of the same set on its node, ready for a shorter time, more restarts, newer.
pub fn deletion_order(a: &Pod, b: &Pod, rank_a: usize, rank_b: usize) -> Ordering {
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let (na, nb) = (node(a), node(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    let ready = |p: &Pod| ready_since(p).is_some();
    phase_rank(a)
        .cmp(&phase_rank(b))
        .then(ready(a).cmp(&ready(b)))
        .then(deletion_cost(a).cmp(&deletion_cost(b)))
        .then(rank_b.cmp(&rank_a))
        .then_with(|| match (ready_since(a), ready_since(b)) {
            (Some(x), Some(y)) => y.cmp(&x),
            _ => Ordering::Equal,
        })
        .then(restarts(b).cmp(&restarts(a)))
        .then_with(|| {
            let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            t(b).cmp(&t(a))
        })
}

/// One sync of `rs` over the pods of its namespace.
pub fn decide(rs: &ReplicaSet, pods: &[Pod], now: Timestamp) -> Plan {
    let mut plan = Plan::default();
    let rs_deleting = rs.metadata.deletion_timestamp.is_some();
    let owned = claim(rs, pods, &mut plan);
    let active: Vec<&Pod> = owned.iter().copied().filter(|p| is_active(p)).collect();
    let spec = rs.spec.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1).max(0) as usize;
    if !rs_deleting {
        if active.len() < want {
            let n = (want - active.len()).min(BURST_REPLICAS);
            plan.create = (0..n).map(|_| pod_from_template(rs)).collect();
        } else if active.len() > want {
            let n = (active.len() - want).min(BURST_REPLICAS);
            plan.delete = surplus(&active, n);
        }
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let old = rs.status.clone().unwrap_or_default();
    let status = status_of(rs, &spec, &active, &old, now);
    if min_ready > 0 && status.ready_replicas != status.available_replicas {
        plan.recheck_after = Some(Duration::from_secs(min_ready as u64));
    }
    if status != old {
        plan.status = Some(status);
    }
    plan
}

/// The pods `rs` owns after claiming: its own that match its selector, and matching orphans
/// (added to `plan.adopt`); its own that stopped matching go to `plan.release`. A deleting
/// ReplicaSet adopts and releases nothing.
fn claim<'a>(rs: &ReplicaSet, pods: &'a [Pod], plan: &mut Plan) -> Vec<&'a Pod> {
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let rs_deleting = rs.metadata.deletion_timestamp.is_some();
    let mut owned: Vec<&Pod> = vec![];
    for pod in pods {
        match controller_uid(pod) {
            Some(u) if u == uid => {
                if matches(rs, pod) {
                    owned.push(pod);
                } else if !rs_deleting {
                    plan.release.push(pod.name_any());
                }
            }
            None if !rs_deleting
                && pod.metadata.deletion_timestamp.is_none()
                && matches(rs, pod) =>
            {
                plan.adopt.push(pod.name_any());
                owned.push(pod);
            }
            _ => {}
        }
    }
    owned
}

/// The `n` active pods to delete first ([`deletion_order`], ranked by how many active pods
/// share their node).
fn surplus(active: &[&Pod], n: usize) -> Vec<String> {
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in active {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let rank = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| per_node.get(n).copied())
            .unwrap_or(0)
    };
    let mut ranked = active.to_vec();
    ranked.sort_by(|a, b| deletion_order(a, b, rank(a), rank(b)));
    ranked.iter().take(n).map(|p| p.name_any()).collect()
}

/// `calculateStatus` over the active pods, keeping `old`'s conditions and terminating count.
fn status_of(
    rs: &ReplicaSet,
    spec: &ReplicaSetSpec,
    active: &[&Pod],
    old: &ReplicaSetStatus,
    now: Timestamp,
) -> ReplicaSetStatus {
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let count = |f: &dyn Fn(&Pod) -> bool| active.iter().filter(|p| f(p)).count() as i32;
    ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: Some(count(&|p| {
            template_labels
                .iter()
                .all(|(k, v)| p.labels().get(k) == Some(v))
        })),
        ready_replicas: Some(count(&|p| ready_since(p).is_some())),
        available_replicas: Some(count(&|p| is_available(p, min_ready, now))),
        observed_generation: rs.metadata.generation,
        conditions: old.conditions.clone(),
        terminating_replicas: old.terminating_replicas,
    }
}

/// The controller's knobs.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Reaction lag after a change.
    pub lag: Duration,
}

/// The controller's failing steps (none yet: a failed write is logged and the next pass retries).
#[derive(Debug, thiserror::Error)]
pub enum Error {}

/// Runs the ReplicaSet controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) -> Result<(), Error> {
    let mut c = Caches::default();
    let (sets, pods) = (c.all(&client), c.all(&client));
    let actor = Controller { client, sets, pods };
    support::run(actor, c, clock, config.lag, shutdown).await
}

struct Controller {
    client: Client,
    sets: Store<ReplicaSet>,
    pods: Store<Pod>,
}

impl Actor for Controller {
    type Error = Error;

    async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Error> {
        let sets = self.sets.sorted_state();
        if sets.is_empty() {
            return Ok(None);
        }
        let pods = self.pods.sorted_state();
        let mut recheck: Option<Duration> = None;
        for rs in &sets {
            let ns = rs.namespace().unwrap_or_default();
            let in_ns: Vec<Pod> = pods
                .iter()
                .filter(|p| p.namespace().as_deref() == Some(&ns))
                .map(|p| (**p).clone())
                .collect();
            let plan = decide(rs, &in_ns, now);
            if let Some(d) = self.apply(rs, &ns, &in_ns, plan, expect).await {
                recheck = Some(recheck.map_or(d, |r| r.min(d)));
            }
        }
        Ok(recheck.map(|d| now + d))
    }
}

/// The uid of the pod named `name` in `pods`.
fn uid_of(pods: &[Pod], name: &str) -> Option<String> {
    pods.iter()
        .find(|x| x.name_any() == name)
        .and_then(|x| x.metadata.uid.clone())
}

impl Controller {
    /// Carries out `rs`'s plan over the pods of its namespace `ns`: adoptions, releases,
    /// creates, deletes, then the status; a failed write is logged and left to the next sync.
    /// Returns when to sync again for `minReadySeconds`.
    async fn apply(
        &self,
        rs: &ReplicaSet,
        ns: &str,
        in_ns: &[Pod],
        plan: Plan,
        expect: &mut Expect,
    ) -> Option<Duration> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let name = rs.name_any();
        let owner = controller_ref(rs);
        for p in &plan.adopt {
            let body = json!({"metadata": {"ownerReferences": [owner], "uid": uid_of(in_ns, p)}});
            if let Err(e) = self.patch_pod(&api, p, body, expect).await {
                tracing::debug!(rs = %name, pod = %p, error = %e, "replicaset controller: adoption failed")
            }
        }
        for p in &plan.release {
            let body = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner.uid}], "uid": uid_of(in_ns, p)}});
            if let Err(e) = self.patch_pod(&api, p, body, expect).await {
                tracing::debug!(rs = %name, pod = %p, error = %e, "replicaset controller: release failed")
            }
        }
        if !plan.create.is_empty() {
            tracing::info!(rs = %name, namespace = %ns, count = plan.create.len(), "replicaset controller: creating pods");
        }
        for p in &plan.create {
            match api.create(&PostParams::default(), p).await {
                Ok(created) => expect.written(&self.pods, &created),
                Err(e) => {
                    tracing::warn!(rs = %name, error = %e, "replicaset controller: pod create failed")
                }
            }
        }
        for p in &plan.delete {
            tracing::info!(rs = %name, pod = %p, "replicaset controller: deleting a surplus pod");
            let uid = uid_of(in_ns, p);
            match api.delete(p, &DeleteParams::default()).await {
                Ok(_) => expect.deleted(&self.pods, ObjectRef::new(p).within(ns), uid),
                Err(e) => {
                    tracing::debug!(rs = %name, pod = %p, error = %e, "replicaset controller: delete failed")
                }
            }
        }
        if let Some(status) = plan.status {
            self.write_status(rs, ns, status, expect).await;
        }
        plan.recheck_after
    }

    /// A strategic-merge patch of pod `pod` (its owner references), expected in the cache once
    /// written.
    async fn patch_pod(
        &self,
        api: &Api<Pod>,
        pod: &str,
        body: serde_json::Value,
        expect: &mut Expect,
    ) -> Result<(), kube::Error> {
        let written = api
            .patch(pod, &PatchParams::default(), &Patch::Strategic(body))
            .await?;
        expect.written(&self.pods, &written);
        Ok(())
    }

    /// Replaces `rs`'s status with `status`.
    async fn write_status(
        &self,
        rs: &ReplicaSet,
        ns: &str,
        status: ReplicaSetStatus,
        expect: &mut Expect,
    ) {
        let name = rs.name_any();
        let mut next = rs.clone();
        next.status = Some(status);
        let rs_api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
        match rs_api
            .replace_status(&name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => expect.written(&self.sets, &written),
            Err(e) => {
                tracing::debug!(rs = %name, error = %e, "replicaset controller: status write failed (next sync retries)")
            }
        }
    }
}

#[cfg(test)]
mod tests;
