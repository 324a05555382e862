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

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::pods::{self, CLUSTER_LABEL, PodsView, SuspendStatus};
use super::status::merge_diff;
use super::{EmulatorError, Shared, earlier, later, managed_externally, requeue_at};
use raygate::conditions::{self, find, is_true};
use raygate::podsets::container_requests;
use raygate::quantity::{Quantity, Resources};
use raygate::types::ray::{RayCluster, RayClusterSpec, RayClusterStatus};

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

/// Worker counts of a spec: (desired, min, max), as `CalculateDesired/Min/MaxReplicas`.
pub(crate) fn worker_replicas(spec: &RayClusterSpec) -> (i32, i32, i32) {
    let (mut desired, mut min, mut max) = (0i64, 0i64, 0i64);
    for g in spec.worker_group_specs.iter().flatten() {
        if g.suspend == Some(true) {
            continue;
        }
        let hosts = i64::from(g.num_of_hosts.unwrap_or(1));
        let lo = g.min_replicas.unwrap_or(0);
        let hi = g.max_replicas.unwrap_or(i32::MAX);
        // GetWorkerGroupDesiredReplicas: below min (or unset) → min; above max → max
        let replicas = match g.replicas {
            None => lo,
            Some(r) if r < lo => lo,
            Some(r) if r > hi => hi,
            Some(r) => r,
        };
        desired += i64::from(replicas) * hosts;
        min += i64::from(lo) * hosts;
        max += i64::from(hi) * hosts;
    }
    let clamp = |n: i64| n.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    (clamp(desired), clamp(min), clamp(max))
}

/// `CalculatePodResource`: the sum over app containers of requests, limits standing in.
fn pod_resources(pod: Option<&PodSpec>, object: &str, field: &str) -> Resources {
    let mut total = Resources::new();
    for (i, c) in pod
        .map(|p| p.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        match container_requests(
            c.resources.as_ref(),
            &format!("{field}.containers[{i}]"),
            object,
        ) {
            Ok(r) => total.add(&r),
            // the CRD schema validates quantities; a bad one counts as nothing, as in Go
            Err(e) => tracing::warn!(error = %e, "ignoring an unparsable quantity"),
        }
    }
    total
}

/// `CalculateDesiredResources`: head + Σ over unsuspended groups of `replicas × numOfHosts` pods
/// (KubeRay multiplies by the raw `replicas`, default 0, not the clamped count).
pub(crate) fn desired_resources(spec: &RayClusterSpec, object: &str) -> Resources {
    let mut total = pod_resources(
        spec.head_group_spec.template.spec.as_ref(),
        object,
        "spec.headGroupSpec.template.spec",
    );
    for (i, g) in spec.worker_group_specs.iter().flatten().enumerate() {
        if g.suspend == Some(true) {
            continue;
        }
        let pods = i64::from(g.replicas.unwrap_or(0)) * i64::from(g.num_of_hosts.unwrap_or(1));
        let per_pod = pod_resources(
            g.template.spec.as_ref(),
            object,
            &format!("spec.workerGroupSpecs[{i}].template.spec"),
        );
        total.add(&per_pod.times(pods));
    }
    total
}

/// `utils.IsGPUResourceKey`: `…gpu`, or NVIDIA MIG `nvidia.com/mig-<n>g.<m>gb`.
fn is_gpu(name: &str) -> bool {
    if name.ends_with("gpu") {
        return true;
    }
    let Some(rest) = name
        .rfind("nvidia.com/mig-")
        .map(|i| &name[i + "nvidia.com/mig-".len()..])
    else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    rest.strip_suffix("gb")
        .and_then(|r| r.split_once("g."))
        .is_some_and(|(a, b)| digits(a) && digits(b))
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
        super::service::generate_cluster_name(group, now, ctx.next_name_seq())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> RayClusterSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn replicas_and_resources_follow_kuberay() {
        let s = spec(json!({
            "headGroupSpec": {"template": {"spec": {"containers": [
                {"name": "h", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "2Gi"}}}]}}},
            "workerGroupSpecs": [
                {"groupName": "a", "replicas": 5, "minReplicas": 1, "maxReplicas": 3, "numOfHosts": 2,
                 "template": {"spec": {"containers": [{"name": "w", "resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "1"}}}]}}},
                {"groupName": "b", "minReplicas": 1,
                 "template": {"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}]}}},
                {"groupName": "c", "replicas": 4, "suspend": true,
                 "template": {"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}]}}}
            ]
        }));
        // a: clamp(5,1,3)=3 ×2 = 6; b: replicas unset → min 1; c suspended
        let (desired, min, max) = worker_replicas(&s);
        assert_eq!((desired, min), (7, 3));
        assert_eq!(max, i32::MAX);
        let r = desired_resources(&s, "t");
        // head 1 + a: 0.5 × (5 × 2) = 5 + b: replicas unset → 0 pods
        assert_eq!(r.get("cpu"), Quantity::parse("6").unwrap());
        assert_eq!(r.get("memory"), Quantity::parse("2Gi").unwrap());
        assert_eq!(r.get("nvidia.com/gpu"), Quantity::parse("10").unwrap());
    }

    #[test]
    fn gpu_keys() {
        assert!(is_gpu("nvidia.com/gpu"));
        assert!(is_gpu("amd.com/gpu"));
        assert!(is_gpu("nvidia.com/mig-2g.32gb"));
        assert!(!is_gpu("nvidia.com/mig-xg.32gb"));
        assert!(!is_gpu("google.com/tpu"));
    }
}
