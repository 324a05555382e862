//! Removing the pod gate (IO): every [`POD_GATE`] raygate left, from the pod templates of
//! RayServices (`spec.rayClusterConfig`) and RayClusters and from the pods themselves.
//!
//! With `--pod-gate` off nothing lifts the gate any more: a pod born gated would wait forever.
//! So the controller started without the flag runs [`run`] once it leads, and `raygate
//! remove-pod-gate` runs [`remove_pod_gates`] for an uninstall. Templates go first, so a pod
//! created meanwhile from a gated template is found by the next pass; passes repeat until one
//! finds nothing. The template patches carry the `resourceVersion` read (a 409 is retried by the
//! next pass); a pod's patch pins the gate list read, as the ungater's does.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch};
use serde_json::json;
use tokio::sync::watch;

use crate::controller::{Context, Error, GATE_MANAGER, ungater};
use crate::gate::pod_gate::{self, POD_GATE};
use crate::types::ray::{RayCluster, RayService};

/// How long between two passes while gates are still found (or a pass failed).
const RETRY: Duration = Duration::from_secs(5);

/// What one pass removed the gate from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub services: usize,
    pub clusters: usize,
    pub pods: usize,
    /// The pods could not be listed or patched (no RBAC for pods: installed without
    /// `config/pod-gate`); their gates are left.
    pub pods_forbidden: bool,
}

impl Removed {
    pub fn total(&self) -> usize {
        self.services + self.clusters + self.pods
    }
}

fn failed(what: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::RemovePodGate { what, source }
}

fn is_conflict_or_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 404 || s.code == 422)
}

fn key(meta: &kube::api::ObjectMeta) -> String {
    crate::meta::key(meta)
}

/// A writer may write only while `may_write()`.
type MayWrite<'a> = &'a (dyn Fn() -> bool + Sync);

/// One pass: the gate removed from every RayService's and RayCluster's pod templates, then from
/// every Ray pod, each write only while `may_write()`. A write that lost a race (409, 404, 422)
/// is left to the next pass.
pub async fn remove_pod_gates_once(
    client: &Client,
    may_write: MayWrite<'_>,
) -> Result<Removed, Error> {
    let mut removed = Removed::default();
    let services = Api::<RayService>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(failed("listing RayServices".into()))?;
    for s in &services.items {
        if let Some(patch) = pod_gate::ungate_templates_patch(&s.spec.ray_cluster_config) {
            let body = json!({
                "metadata": {"resourceVersion": s.metadata.resource_version},
                "spec": {"rayClusterConfig": patch},
            });
            let api = Api::<RayService>::namespaced(client.clone(), ns_of(&s.metadata));
            if patch_templates(&api, &s.metadata, &body, may_write).await? {
                removed.services += 1;
            }
        }
    }
    let clusters = Api::<RayCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(failed("listing RayClusters".into()))?;
    for c in &clusters.items {
        if let Some(body) = pod_gate::child_ungate_patch(c) {
            let api = Api::<RayCluster>::namespaced(client.clone(), ns_of(&c.metadata));
            if patch_templates(&api, &c.metadata, &body, may_write).await? {
                removed.clusters += 1;
            }
        }
    }
    remove_from_pods(client, may_write, &mut removed).await?;
    Ok(removed)
}

fn ns_of(meta: &kube::api::ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

/// Merge-patches the object `meta` names with `body`; `false` when it lost a race.
async fn patch_templates<K>(
    api: &Api<K>,
    meta: &kube::api::ObjectMeta,
    body: &serde_json::Value,
    may_write: MayWrite<'_>,
) -> Result<bool, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if !may_write() {
        return Err(Error::NotLeader { name: key(meta) });
    }
    let params = crate::controller::merge_params(GATE_MANAGER);
    let name = meta.name.clone().unwrap_or_default();
    match api.patch(&name, &params, &Patch::Merge(body)).await {
        Ok(_) => Ok(true),
        Err(e) if is_conflict_or_gone(&e) => Ok(false),
        Err(e) => Err(failed(format!("the pod templates of {}", key(meta)))(e)),
    }
}

fn forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// Whether discovery lists `pods` in the core group (`false` when it cannot be read either).
async fn serves_pods(client: &Client) -> bool {
    client
        .list_core_api_resources("v1")
        .await
        .is_ok_and(|l| l.resources.iter().any(|r| r.name == "pods"))
}

/// The pod part of [`remove_pod_gates_once`].
async fn remove_from_pods(
    client: &Client,
    may_write: MayWrite<'_>,
    removed: &mut Removed,
) -> Result<(), Error> {
    let lp = ListParams::default().labels(crate::controller::stores::RAY_PODS);
    let pods = match Api::<Pod>::all(client.clone()).list(&lp).await {
        Ok(pods) => pods,
        Err(e) if forbidden(&e) => {
            removed.pods_forbidden = true;
            return Ok(());
        }
        // a server that serves no Pods (a bare CRD test server) has no gated pod either (its
        // plain-text 404 reaches here without a status code: discovery says which it is)
        Err(e) if !serves_pods(client).await => {
            tracing::debug!(error = %e, "the server serves no Pods: no pod gate to remove");
            return Ok(());
        }
        Err(e) => return Err(failed("listing Ray pods".into())(e)),
    };
    for p in &pods.items {
        let read = ungater::gates(p);
        if p.metadata.deletion_timestamp.is_some() || !read.iter().any(|g| g == POD_GATE) {
            continue;
        }
        if !may_write() {
            return Err(Error::NotLeader {
                name: key(&p.metadata),
            });
        }
        match ungater::lift(client, p, &read, None).await {
            Ok(()) => removed.pods += 1,
            Err(e) if is_conflict_or_gone(&e) => {}
            Err(e) if forbidden(&e) => removed.pods_forbidden = true,
            Err(e) => return Err(failed(format!("Pod {}", key(&p.metadata)))(e)),
        }
    }
    Ok(())
}

/// Passes of [`remove_pod_gates_once`] until one finds nothing; returns the totals.
pub async fn remove_pod_gates(client: &Client) -> Result<Removed, Error> {
    let mut total = Removed::default();
    loop {
        let r = remove_pod_gates_once(client, &|| true).await?;
        total.services += r.services;
        total.clusters += r.clusters;
        total.pods += r.pods;
        total.pods_forbidden |= r.pods_forbidden;
        if r.total() == 0 {
            return Ok(total);
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The controller without `--pod-gate`: once it leads, passes until one finds nothing (retried
/// after a failure), one log line per pass that removed something; then waits for `shutdown`.
pub async fn run(ctx: std::sync::Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    loop {
        if ctx.is_leader() {
            match remove_pod_gates_once(&ctx.client, &|| ctx.is_leader()).await {
                Ok(r) if r.total() == 0 => {
                    if r.pods_forbidden {
                        tracing::warn!(
                            gate = POD_GATE,
                            "--pod-gate is off and raygate may not list or patch pods: gated Ray pods, if any, keep the gate (see the README, \"Opting out and uninstalling\")"
                        );
                    }
                    break;
                }
                Ok(r) => tracing::info!(
                    gate = POD_GATE,
                    services = r.services,
                    clusters = r.clusters,
                    pods = r.pods,
                    "--pod-gate is off: removed the scheduling gate"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "removing the pod scheduling gate failed; retrying")
                }
            }
        }
        tokio::select! {
            changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { return },
            () = tokio::time::sleep(RETRY) => {}
        }
    }
    while shutdown.changed().await.is_ok() && !*shutdown.borrow() {}
}
