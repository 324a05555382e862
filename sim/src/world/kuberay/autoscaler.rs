//! The emulated Ray autoscaler of an incremental upgrade's children (a test knob,
//! [`AutoscalerConfig`](super::AutoscalerConfig)): it sizes each worker group to the Serve demand
//! of the cluster's `target_capacity` ([`incremental::goal_replicas`]) one step at a time, as
//! Ray's autoscaler writes a RayCluster: `replicas`, and on a scale-down the pods to remove in
//! `scaleStrategy.workersToDelete` (KubeRay deletes only those when autoscaling is on). A name
//! stays listed until its pod is gone.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::incremental::{self, Worker};
use super::pods::{CLUSTER_LABEL, GROUP_LABEL, NODE_TYPE_LABEL, REPLICA_NAME_LABEL};
use super::{EmulatorError, Shared, later};
use raygate::meta::key_of;
use raygate::types::ray::{RayCluster, RayService, ScaleStrategy, WorkerGroupSpec};

fn never_started(p: &Pod) -> bool {
    let spec = p.spec.as_ref();
    spec.and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
        || spec.and_then(|s| s.node_name.as_ref()).is_none()
}

/// One autoscaler look at child `c` of `rs`, whose Serve `target_capacity` is `tc` %. Returns
/// the updated child when it wrote one.
pub(super) async fn autoscale(
    shared: &Shared,
    rs: &RayService,
    c: &RayCluster,
    tc: i32,
) -> Result<Option<RayCluster>, EmulatorError> {
    let Some(cfg) = shared.config.autoscaler else {
        return Ok(None);
    };
    // the autoscaler runs in the head pod: nothing happens before it is up
    if c.spec.enable_in_tree_autoscaling != Some(true)
        || c.metadata.deletion_timestamp.is_some()
        || !shared.is_ready(c)
    {
        return Ok(None);
    }
    let ns = c.namespace().unwrap_or_default();
    let name = c.name_any();
    let key = key_of(&ns, &name);
    let now = shared.now();
    if shared
        .autoscaled_at(&key)
        .is_some_and(|at| now < later(at, cfg.period))
    {
        return Ok(None);
    }
    let pods = worker_pods(shared, &ns, &name, &key).await?;
    let mut groups = c.spec.worker_group_specs.clone().unwrap_or_default();
    let mut changed = Vec::new();
    for g in groups.iter_mut().filter(|g| g.suspend != Some(true)) {
        let full = full_replicas(rs, &g.group_name);
        changed.extend(scale_group(
            g,
            full,
            tc,
            cfg.step,
            &pods,
            shared.config.pods,
        ));
    }
    if changed.is_empty() {
        return Ok(None);
    }
    let patch = json!({
        "metadata": {"resourceVersion": c.metadata.resource_version},
        "spec": {"workerGroupSpecs": groups},
    });
    let updated = Api::<RayCluster>::namespaced(shared.client.clone(), &ns)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| EmulatorError::Autoscale {
            name: key.clone(),
            source,
        })?;
    shared.autoscaled(&key, now);
    for (group, from, to, deleting) in changed {
        tracing::info!(cluster = %key, %group, target_capacity = tc, from, to, deleting, "emulated autoscaler scaled a worker group");
    }
    Ok(Some(updated))
}

/// The worker pods of cluster `name` (none when the sim runs without pods).
async fn worker_pods(
    shared: &Shared,
    ns: &str,
    name: &str,
    key: &str,
) -> Result<Vec<Pod>, EmulatorError> {
    if !shared.config.pods {
        return Ok(Vec::new());
    }
    let lp =
        ListParams::default().labels(&format!("{CLUSTER_LABEL}={name},{NODE_TYPE_LABEL}=worker"));
    Ok(Api::<Pod>::namespaced(shared.client.clone(), ns)
        .list(&lp)
        .await
        .map_err(|source| EmulatorError::ListPods {
            name: key.to_string(),
            source,
        })?
        .items)
}

/// Worker group `group`'s full size: its `replicas` in the RayService's `rayClusterConfig`.
fn full_replicas(rs: &RayService, group: &str) -> Option<i32> {
    rs.spec
        .ray_cluster_config
        .worker_group_specs
        .iter()
        .flatten()
        .find(|g| g.group_name == group)
        .and_then(|g| g.replicas)
}

/// One autoscaler step for worker group `g`: `replicas` one step toward its goal at `tc` % of
/// `full` (else of its own `replicas`), and on a scale-down with pods the pods to remove added
/// to `workersToDelete` (a listed name stays while its pod exists). Returns (group, from, to,
/// names listed) when `g` changed.
fn scale_group(
    g: &mut WorkerGroupSpec,
    full: Option<i32>,
    tc: i32,
    step: i32,
    pods: &[Pod],
    with_pods: bool,
) -> Option<(String, i32, i32, usize)> {
    let min = g.min_replicas.unwrap_or(0);
    let max = g.max_replicas.unwrap_or(i32::MAX);
    let current = g.replicas.unwrap_or(0).clamp(min, max.max(min));
    let full = full.or(g.replicas).unwrap_or(min);
    let goal = incremental::goal_replicas(full, tc, min, max);
    let next = incremental::step_toward(current, goal, step);
    let mine: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.labels().get(GROUP_LABEL) == Some(&g.group_name))
        .collect();
    let listed: Vec<String> = g
        .scale_strategy
        .as_ref()
        .and_then(|s| s.workers_to_delete.clone())
        .unwrap_or_default();
    let alive: BTreeSet<String> = mine.iter().map(|p| p.name_any()).collect();
    let mut to_delete: Vec<String> = listed
        .iter()
        .filter(|n| alive.contains(*n))
        .cloned()
        .collect();
    if next < current && with_pods {
        let candidates = removable(&mine, &to_delete);
        let n = usize::try_from(current - next).unwrap_or(0);
        to_delete.extend(incremental::victims(&candidates, n));
    }
    if g.replicas == Some(next) && to_delete == listed {
        return None;
    }
    let change = (g.group_name.clone(), current, next, to_delete.len());
    g.replicas = Some(next);
    let strategy = g.scale_strategy.get_or_insert_with(ScaleStrategy::default);
    strategy.workers_to_delete = Some(to_delete);
    Some(change)
}

/// The group's pods the autoscaler may still remove (not deleting, not listed in `to_delete`),
/// as it sees them.
fn removable(mine: &[&Pod], to_delete: &[String]) -> Vec<Worker> {
    mine.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !to_delete.contains(&p.name_any()))
        .map(|p| Worker {
            name: p.name_any(),
            replica: p
                .labels()
                .get(REPLICA_NAME_LABEL)
                .cloned()
                .unwrap_or_else(|| p.name_any()),
            idle_never_started: never_started(p),
            created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
        })
        .collect()
}
