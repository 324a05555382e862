//! The RayCluster side: KubeRay v1.7's `calculateStatus` (raycluster_controller.go) over emulated
//! pods, for every RayCluster (owned by a RayService or not).
//!
//! Pods follow `reconcilePods` with the `RayClusterStatusConditions` gate on (its default):
//! - `spec.suspend=true` on a running cluster: the first reconcile only sets
//!   `RayClusterSuspending=True`; the next one deletes the pods and sets `RayClusterSuspended=True`,
//!   `RayClusterProvisioned=False` and `state=suspended`. The suspend is atomic: once Suspending is
//!   written it completes even if `suspend` went back to false.
//! - `Suspended` and `spec.suspend=false`: `RayClusterSuspended=False`, and the pods are created on
//!   the next reconcile (a `suspend` removed altogether keeps the cluster suspended, as in v1.7).
//! - Otherwise the pods exist from the first reconcile that sees the cluster unsuspended and turn
//!   running and ready [`EmulatorConfig::start_delay`](super::EmulatorConfig) later.
//!
//! Before all of it, the Redis cleanup of GCS fault tolerance ([`super::redis_cleanup`]); then a
//! cluster being deleted is left alone ("RayCluster is being deleted, just ignore").

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::desired::{desired_resources, is_gpu, worker_replicas};
use super::names::generate_cluster_name;
use super::pods::{self, CLUSTER_LABEL, PodsView, SuspendStatus};
use super::redis_cleanup;
use super::status::merge_diff;
use super::{EmulatorError, Shared, earlier, later, managed_externally, requeue_at};
use raygate::conditions::{self, find, is_true};
use raygate::quantity::Quantity;
use raygate::types::ray::{RayCluster, RayClusterStatus};

pub(crate) const PROVISIONED: &str = "RayClusterProvisioned";
pub(crate) const HEAD_POD_READY: &str = "HeadPodReady";
pub(crate) const SUSPENDING: &str = "RayClusterSuspending";
pub(crate) const SUSPENDED: &str = "RayClusterSuspended";

/// `utils.FindRayClusterSuspendStatus`.
fn suspend_status(status: &RayClusterStatus) -> SuspendStatus {
    if is_true(&status.conditions, SUSPENDING) {
        SuspendStatus::Suspending
    } else if is_true(&status.conditions, SUSPENDED) {
        SuspendStatus::Suspended
    } else {
        SuspendStatus::None
    }
}

/// What the status is computed from: the pods (real ones, or emulated by time) and whether
/// `reconcilePods` failed this pass.
struct Observed {
    pods: PodsView,
    /// `reconcilePods` returned an error: the state is not moved to ready.
    failed: bool,
    /// When to look again (emulated pods becoming ready).
    next: Option<Timestamp>,
}

/// Pods emulated by time (no core/v1 served): they exist from the first reconcile that sees the
/// cluster unsuspended and are ready `start_delay` later.
fn observe_by_time(
    rc: &RayCluster,
    old: &RayClusterStatus,
    phase: SuspendStatus,
    ctx: &Shared,
    now: Timestamp,
) -> Observed {
    let ns = rc.namespace().unwrap_or_default();
    let name = rc.name_any();
    let since = match phase {
        SuspendStatus::Suspending | SuspendStatus::Suspended => {
            ctx.pods_deleted(&ns, &name);
            None
        }
        // going to suspend: existing pods stay until the next reconcile, none are created
        SuspendStatus::None if rc.spec.suspend == Some(true) => ctx.pods_since(rc),
        SuspendStatus::None => {
            // a cluster that was ready before this emulator started keeps running
            let at = if is_true(&old.conditions, HEAD_POD_READY) {
                earlier(now, ctx.config.start_delay)
            } else {
                now
            };
            Some(ctx.pods_created(rc, at))
        }
    };
    let ready_at = since
        .filter(|_| !ctx.never_ready(rc))
        .map(|t| later(t, ctx.config.start_delay));
    let ready = ready_at.is_some_and(|t| t <= now);
    let (desired, _, _) = worker_replicas(&rc.spec);
    let total = usize::try_from(desired).unwrap_or(0) + 1;
    let pods = match (since, ready) {
        (None, _) => PodsView {
            total: 0,
            ready_workers: 0,
            available_workers: 0,
            all_running: false,
            head: None,
        },
        (Some(_), false) => PodsView {
            total,
            ready_workers: 0,
            available_workers: 0,
            all_running: false,
            head: Some((
                "False".into(),
                "ContainersNotReady".into(),
                "containers with unready status: [ray-head]".into(),
            )),
        },
        (Some(_), true) => PodsView {
            total,
            ready_workers: desired,
            available_workers: desired,
            all_running: true,
            head: Some((
                "True".into(),
                "HeadPodRunningAndReady".into(),
                String::new(),
            )),
        },
    };
    Observed {
        pods,
        failed: false,
        next: ready_at.filter(|_| !ready),
    }
}

/// Replica counts and desired resources (`calculateStatus`' first half).
fn set_counts(s: &mut RayClusterStatus, rc: &RayCluster, pods: &PodsView) {
    let ns = rc.namespace().unwrap_or_default();
    let name = rc.name_any();
    s.observed_generation = rc.metadata.generation;
    let (desired, min, max) = worker_replicas(&rc.spec);
    s.ready_worker_replicas = Some(pods.ready_workers);
    s.available_worker_replicas = Some(pods.available_workers);
    s.desired_worker_replicas = Some(desired);
    s.min_worker_replicas = Some(min);
    s.max_worker_replicas = Some(max);
    let object = format!("RayCluster {ns}/{name}");
    let res = desired_resources(&rc.spec, &object);
    let gpu: Quantity = res.iter().filter(|(k, _)| is_gpu(k)).map(|(_, q)| *q).sum();
    s.desired_cpu = Some(res.get("cpu").to_k8s());
    s.desired_memory = Some(res.get("memory").to_k8s());
    s.desired_gpu = Some(gpu.to_k8s());
    s.desired_tpu = Some(res.get("google.com/tpu").to_k8s());
}

/// `HeadPodReady` and `RayClusterProvisioned`.
fn set_pod_conditions(
    s: &mut RayClusterStatus,
    phase: SuspendStatus,
    pods: &PodsView,
    now: Timestamp,
) {
    let c = &mut s.conditions;
    match &pods.head {
        None => conditions::set(
            c,
            HEAD_POD_READY,
            "False",
            "HeadPodNotFound",
            "Head Pod not found",
            None,
            now,
        ),
        Some((status, reason, message)) => {
            conditions::set(c, HEAD_POD_READY, status, reason, message, None, now)
        }
    }
    if !is_true(c, PROVISIONED) && phase != SuspendStatus::Suspended {
        let (status, reason, message) = if pods.all_running {
            (
                "True",
                "AllPodRunningAndReadyFirstTime",
                "All Ray Pods are ready for the first time",
            )
        } else {
            (
                "False",
                "RayClusterPodsProvisioning",
                "RayCluster Pods are being provisioned for first time",
            )
        };
        conditions::set(c, PROVISIONED, status, reason, message, None, now);
    }
}

/// The suspend state machine's conditions.
fn set_suspend_conditions(
    s: &mut RayClusterStatus,
    rc: &RayCluster,
    phase: SuspendStatus,
    pods: &PodsView,
    now: Timestamp,
) {
    let c = &mut s.conditions;
    match phase {
        // suspended once the last pod (terminating ones included) is gone
        SuspendStatus::Suspending if pods.total == 0 => {
            conditions::set(
                c,
                PROVISIONED,
                "False",
                "RayClusterPodsProvisioning",
                "RayCluster has been suspended",
                None,
                now,
            );
            conditions::set(c, SUSPENDING, "False", SUSPENDING, "", None, now);
            conditions::set(c, SUSPENDED, "True", SUSPENDED, "", None, now);
        }
        SuspendStatus::Suspending => {}
        SuspendStatus::Suspended => {
            if rc.spec.suspend == Some(false) {
                conditions::set(c, SUSPENDED, "False", SUSPENDED, "", None, now);
            }
        }
        SuspendStatus::None => {
            conditions::set(c, SUSPENDED, "False", SUSPENDED, "", None, now);
            let suspending = if rc.spec.suspend == Some(true) {
                "True"
            } else {
                "False"
            };
            conditions::set(c, SUSPENDING, suspending, SUSPENDING, "", None, now);
        }
    }
}

/// `stateTransitionTimes[state] = now` when the state changed.
fn stamp_state_transition(s: &mut RayClusterStatus, old: &RayClusterStatus, now: Timestamp) {
    if s.state == old.state {
        return;
    }
    let Some(state) = s.state.clone() else {
        return;
    };
    let times = s
        .other
        .entry("stateTransitionTimes".to_string())
        .or_insert_with(|| json!({}));
    if !times.is_object() {
        *times = json!({});
    }
    if let (Some(map), Ok(now)) = (times.as_object_mut(), serde_json::to_value(Time(now))) {
        map.insert(state, now);
    }
}

/// `calculateStatus` over what was observed.
fn compute(
    rc: &RayCluster,
    old: &RayClusterStatus,
    phase: SuspendStatus,
    seen: &Observed,
    now: Timestamp,
) -> RayClusterStatus {
    let mut s = old.clone();
    set_counts(&mut s, rc, &seen.pods);
    let desired = s.desired_worker_replicas.unwrap_or(0);
    let expected = usize::try_from(desired).unwrap_or(0) + 1;
    if !seen.failed && seen.pods.total == expected && seen.pods.all_running {
        s.state = Some("ready".into());
        s.other.remove("reason");
    }
    set_pod_conditions(&mut s, phase, &seen.pods, now);
    set_suspend_conditions(&mut s, rc, phase, &seen.pods, now);
    if rc.spec.suspend == Some(true) && seen.pods.total == 0 {
        s.state = Some("suspended".into());
    }
    stamp_state_transition(&mut s, old, now);
    s
}

/// Real pods (core/v1 served): `reconcilePods`' plan applied, then the pods as they are now.
async fn observe_pods(
    rc: &RayCluster,
    phase: SuspendStatus,
    ctx: &Shared,
) -> Result<Observed, EmulatorError> {
    let ns = rc.namespace().unwrap_or_default();
    let full = format!("{ns}/{}", rc.name_any());
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let list = |api: Api<Pod>, full: String| async move {
        let lp = ListParams::default().labels(&format!("{CLUSTER_LABEL}={}", rc.name_any()));
        ctx.list(&api, &lp)
            .await
            .map_err(|source| EmulatorError::ListPods { name: full, source })
    };
    let pods = list(api.clone(), full.clone()).await?;
    let now = ctx.now();
    let plan = pods::plan(rc, phase, &pods, &mut |group| {
        generate_cluster_name(group, now, ctx.next_name_seq())
    });
    for pod in &plan.create {
        let created = api
            .create(&PostParams::default(), pod)
            .await
            .map_err(|source| EmulatorError::CreatePod {
                name: full.clone(),
                source,
            })?;
        tracing::info!(cluster = %full, pod = %created.name_any(), "created Ray pod");
    }
    for name in &plan.delete {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(cluster = %full, pod = %name, "deleted Ray pod"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(EmulatorError::DeletePod {
                    name: format!("{ns}/{name}"),
                    source,
                });
            }
        }
    }
    if let Some(why) = &plan.requeue {
        tracing::info!(cluster = %full, reason = %why, "reconcilePods requeues");
    }
    let pods = if plan.create.is_empty() && plan.delete.is_empty() {
        pods
    } else {
        list(api, full).await?
    };
    Ok(Observed {
        pods: pods::view(&pods),
        failed: plan.requeue.is_some(),
        // pods changing wake this reconciler; a failed pass retries soon, as KubeRay's does
        next: plan
            .requeue
            .is_some()
            .then(|| later(ctx.now(), Duration::from_secs(2))),
    })
}

/// Writes the status when it changed (a merge patch of the difference, guarded by the
/// resourceVersion read).
async fn write_status(
    api: &Api<RayCluster>,
    rc: &RayCluster,
    mut new: RayClusterStatus,
    now: Timestamp,
) -> Result<(), EmulatorError> {
    let name = rc.name_any();
    let full = format!("{}/{name}", rc.namespace().unwrap_or_default());
    new.other.insert(
        "lastUpdateTime".into(),
        serde_json::to_value(Time(now)).unwrap_or(Value::Null),
    );
    let to_json = |s: &RayClusterStatus| serde_json::to_value(s).unwrap_or_else(|_| json!({}));
    let old_json = rc.status.as_ref().map_or_else(|| json!({}), to_json);
    let Some(diff) = merge_diff(&old_json, &to_json(&new)) else {
        return Ok(());
    };
    let patch = json!({
        "metadata": {"resourceVersion": rc.meta().resource_version},
        "status": diff,
    });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| EmulatorError::ClusterStatus {
            name: full.clone(),
            source,
        })?;
    tracing::info!(
        cluster = %full,
        state = new.state.as_deref().unwrap_or(""),
        ready_workers = new.ready_worker_replicas.unwrap_or(0),
        desired_workers = new.desired_worker_replicas.unwrap_or(0),
        suspended = is_true(&new.conditions, SUSPENDED),
        head_ready = find(&new.conditions, HEAD_POD_READY).is_some_and(|c| c.status == "True"),
        "RayCluster status"
    );
    Ok(())
}

/// Reconciles one RayCluster: its pods (real or emulated), then its status.
pub(super) async fn reconcile(
    obj: Arc<RayCluster>,
    ctx: Arc<Shared>,
) -> Result<Action, EmulatorError> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api: Api<RayCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let full = format!("{ns}/{name}");
    let Some(rc) = ctx
        .get_opt(&api, &name)
        .await
        .map_err(|source| EmulatorError::GetCluster {
            name: full.clone(),
            source,
        })?
    else {
        ctx.pods_deleted(&ns, &name);
        return Ok(Action::await_change());
    };
    if let Some(manager) = managed_externally(rc.spec.managed_by.as_deref()) {
        tracing::debug!(cluster = %full, %manager, "skipping RayCluster managed by a custom controller");
        return Ok(Action::await_change());
    }
    if let Some(action) = redis_cleanup::reconcile(&rc, &ctx).await? {
        return Ok(action);
    }
    if rc.metadata.deletion_timestamp.is_some() {
        tracing::debug!(cluster = %full, "RayCluster is being deleted, just ignore");
        return Ok(Action::await_change());
    }
    let old = rc.status.clone().unwrap_or_default();
    let phase = suspend_status(&old);
    let seen = if ctx.config.pods {
        observe_pods(&rc, phase, &ctx).await?
    } else {
        observe_by_time(&rc, &old, phase, &ctx, ctx.now())
    };
    let now = ctx.now();
    let new = compute(&rc, &old, phase, &seen, now);
    if new != old {
        write_status(&api, &rc, new, now).await?;
    }
    Ok(match seen.next {
        Some(t) => requeue_at(Some(t), ctx.now(), Duration::from_secs(300)),
        None => Action::await_change(),
    })
}
