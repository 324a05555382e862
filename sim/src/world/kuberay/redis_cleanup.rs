//! KubeRay v1.7's Redis cleanup of a RayCluster with GCS fault tolerance: the block at the top of
//! `rayClusterReconcile` (raycluster_controller.go L222–352), `buildRedisCleanupJob` (L1807–1899)
//! and the deletion timeout (`getGCSFTDeletionTimeout`, `forceRemoveGCSFTFinalizer`,
//! L2434–2478), with `ENABLE_GCS_FT_REDIS_CLEANUP` at its default (on).
//!
//! - A cluster with GCS fault tolerance (`IsGCSFaultToleranceEnabled`, raygate's
//!   [`gcs_fault_tolerance`]) on the Redis backend gets the finalizer [`FINALIZER`] before anything
//!   else; that reconcile does nothing more (KubeRay requeues after 2 s).
//! - Deleted, it goes through `deletion`: its head and worker pods are deleted; while a head pod
//!   is left (terminating ones included) it waits (requeue 10 s); then, once [`deletion_timeout`]
//!   has passed since its `deletionTimestamp` the finalizer is removed whatever the Job does;
//!   else the Job labelled `ray.io/cluster=<name>,ray.io/node-type=redis-cleanup` is created
//!   (`cleanup_job`) or, once finished (`IsJobFinished`: `Complete`, `Failed` or
//!   `FailureTarget` true), the finalizer is removed. Requeues every 2 s meanwhile.
//! - A deleted cluster on the embedded (`rocksdb`) backend that still carries the finalizer has it
//!   removed at once.
//!
//! With pods emulated by time (no core/v1 nor batch/v1 served), the pods are gone at once and the
//! cleanup "Job" runs [`EmulatorConfig::start_delay`](super::EmulatorConfig) from the
//! `deletionTimestamp`. Left out: the Events KubeRay records, and the Redis env KubeRay injects
//! into the head (`RAY_REDIS_ADDRESS`, `REDIS_PASSWORD`, the `ray.io/external-storage-namespace`
//! annotation), so the Job's pod has what the head template has.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{EnvVar, Pod, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::pods::{self, CLUSTER_LABEL, NODE_TYPE_LABEL};
use super::{EmulatorError, Shared, later, requeue_at};
use raygate::podsets::{REDIS_CLEANUP_REQUESTS, gcs_fault_tolerance};
use raygate::types::ray::RayCluster;

/// `GCSFaultToleranceRedisCleanupFinalizer`.
pub const FINALIZER: &str = "ray.io/gcs-ft-redis-cleanup-finalizer";
/// `RayClusterGCSFTDeletionTimeoutAnnotation`: the deletion timeout in whole seconds.
pub const DELETION_TIMEOUT_ANNOTATION: &str = "ray.io/gcs-ft-deletion-timeout";
/// `RAYCLUSTER_GCS_FT_DELETION_TIMEOUT_DEFAULT` (300 s).
pub const DEFAULT_DELETION_TIMEOUT: Duration = Duration::from_secs(300);
/// `rayv1.RedisCleanupNode`: the `ray.io/node-type` of the Job and its pod.
pub const REDIS_CLEANUP_NODE: &str = "redis-cleanup";
/// `DefaultRequeueDuration`.
const REQUEUE: Duration = Duration::from_secs(2);
/// The requeue while the head pod terminates.
const HEAD_WAIT: Duration = Duration::from_secs(10);
/// The init container `buildRedisCleanupJob` drops.
const TLS_INIT_CONTAINER: &str = "wait-for-tls-ip-san";

/// The Ray container's args (`buildRedisCleanupJob`), up to the cleanup call.
const ARGS_PREFIX: &str = concat!(
    "echo \"To get more information about manually deleting the storage namespace in Redis and ",
    "removing the RayCluster's finalizer, please check ",
    "https://docs.ray.io/en/master/cluster/kubernetes/user-guides/kuberay-gcs-ft.html for more ",
    "details.\" && python -c \"from ray._private.gcs_utils import cleanup_redis_storage; ",
    "from urllib.parse import urlparse; import os; import sys; ",
    "redis_address = os.getenv('RAY_REDIS_ADDRESS', '').split(',')[0]; ",
    "redis_address = redis_address if '://' in redis_address else 'redis://' + redis_address; ",
    "parsed = urlparse(redis_address); ",
);
/// The cleanup call, with `REDIS_USERNAME` in the container's env.
const ARGS_WITH_USERNAME: &str = concat!(
    "sys.exit(1) if not cleanup_redis_storage(host=parsed.hostname, port=parsed.port, ",
    "username=os.getenv('REDIS_USERNAME', parsed.username), ",
    "password=os.getenv('REDIS_PASSWORD', parsed.password or ''), ",
    "use_ssl=parsed.scheme=='rediss', ",
    "storage_namespace=os.getenv('RAY_external_storage_namespace')) else None\"",
);
/// The cleanup call without `REDIS_USERNAME`.
const ARGS_WITHOUT_USERNAME: &str = concat!(
    "sys.exit(1) if not cleanup_redis_storage(host=parsed.hostname, port=parsed.port, ",
    "password=os.getenv('REDIS_PASSWORD', parsed.password or ''), ",
    "use_ssl=parsed.scheme=='rediss', ",
    "storage_namespace=os.getenv('RAY_external_storage_namespace')) else None\"",
);

/// `IsGCSFaultToleranceEmbedded`: `gcsFaultToleranceOptions.backend` is `rocksdb`.
fn embedded(rc: &RayCluster) -> bool {
    rc.spec
        .other
        .get("gcsFaultToleranceOptions")
        .and_then(|o| o.get("backend"))
        .and_then(|b| b.as_str())
        == Some("rocksdb")
}

/// GCS fault tolerance on the Redis backend: the clusters whose deletion runs the cleanup Job.
pub(crate) fn redis_fault_tolerance(rc: &RayCluster) -> bool {
    gcs_fault_tolerance(&rc.spec, rc.metadata.annotations.as_ref()) && !embedded(rc)
}

fn has_finalizer(rc: &RayCluster) -> bool {
    rc.finalizers().iter().any(|f| f == FINALIZER)
}

/// `getGCSFTDeletionTimeout`: the annotation's whole seconds when a positive integer, else 300 s.
pub(crate) fn deletion_timeout(rc: &RayCluster) -> Duration {
    rc.annotations()
        .get(DELETION_TIMEOUT_ANNOTATION)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_DELETION_TIMEOUT, Duration::from_secs)
}

/// `utils.IsJobFinished`: the terminal condition type (`Complete` or `Failed`; a `True`
/// `FailureTarget` counts as `Failed`), if any.
pub(crate) fn job_finished(job: &Job) -> Option<&'static str> {
    let conditions = job
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten());
    conditions
        .filter(|c| c.status == "True")
        .find_map(|c| match c.type_.as_str() {
            "Complete" => Some("Complete"),
            "Failed" | "FailureTarget" => Some("Failed"),
            _ => None,
        })
}

/// The name of the cluster's cleanup Job: `TrimJobName("<cluster>-redis-cleanup")`.
pub(crate) fn job_name(rc: &RayCluster) -> String {
    pods::check_label(&format!("{}-{REDIS_CLEANUP_NODE}", rc.name_any()))
}

/// The Ray container of the Job's pod as `buildRedisCleanupJob` changes it.
fn cleanup_container(spec: &mut k8s_openapi::api::core::v1::PodSpec) {
    spec.containers.truncate(1);
    if let Some(init) = spec.init_containers.as_mut() {
        init.retain(|c| c.name != TLS_INIT_CONTAINER);
    }
    spec.restart_policy = Some("Never".into());
    let Some(ray) = spec.containers.first_mut() else {
        return;
    };
    let env = ray.env.get_or_insert_default();
    let call = if env.iter().any(|e| e.name == "REDIS_USERNAME") {
        ARGS_WITH_USERNAME
    } else {
        ARGS_WITHOUT_USERNAME
    };
    ray.command = Some(vec!["/bin/bash".into(), "-c".into(), "--".into()]);
    ray.args = Some(vec![format!("{ARGS_PREFIX}{call}")]);
    ray.liveness_probe = None;
    ray.readiness_probe = None;
    for (name, value) in [
        ("RAY_redis_db_connect_retries", "120"),
        ("RAY_redis_db_connect_wait_milliseconds", "500"),
    ] {
        env.push(EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..EnvVar::default()
        });
    }
    let fixed: std::collections::BTreeMap<String, Quantity> = REDIS_CLEANUP_REQUESTS
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
    ray.resources = Some(ResourceRequirements {
        limits: Some(fixed.clone()),
        requests: Some(fixed),
        ..ResourceRequirements::default()
    });
}

/// `buildRedisCleanupJob`: the head pod KubeRay would build, labelled `redis-cleanup`, with only
/// the Ray container (KubeRay's cleanup command, no probes, 200m CPU / 256Mi requests = limits)
/// and `restartPolicy: Never`, in a Job `<cluster>-redis-cleanup` with the pod's labels and
/// annotations, `backoffLimit: 0`, `activeDeadlineSeconds: 300` and a controller reference to
/// the cluster.
pub(crate) fn cleanup_job(rc: &RayCluster) -> Job {
    let mut pod: Pod = pods::head_pod(rc);
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert(NODE_TYPE_LABEL.into(), REDIS_CLEANUP_NODE.into());
    let mut spec = pod.spec.unwrap_or_default();
    cleanup_container(&mut spec);
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(rc)),
            namespace: rc.namespace(),
            labels: pod.metadata.labels.clone(),
            annotations: pod.metadata.annotations.clone(),
            owner_references: Some(vec![pods::owner(rc)]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(300),
            template: PodTemplateSpec {
                metadata: Some(pod.metadata),
                spec: Some(spec),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// The Redis cleanup block of `rayClusterReconcile`: `Some(answer)` when it ends the reconcile,
/// `None` when the reconcile goes on (a live cluster, its finalizer in place, or no Redis FT).
pub(super) async fn reconcile(
    rc: &RayCluster,
    ctx: &Shared,
) -> Result<Option<Action>, EmulatorError> {
    let deleting = rc.metadata.deletion_timestamp.is_some();
    if deleting && embedded(rc) && has_finalizer(rc) {
        set_finalizer(rc, ctx, false).await?;
        return Ok(Some(Action::await_change()));
    }
    if !redis_fault_tolerance(rc) {
        return Ok(None);
    }
    if deleting {
        return deletion(rc, ctx).await.map(Some);
    }
    if has_finalizer(rc) {
        return Ok(None);
    }
    set_finalizer(rc, ctx, true).await?;
    Ok(Some(Action::requeue(REQUEUE)))
}

/// Adds (`present`) or removes the finalizer: a merge patch of the list, guarded by the
/// resourceVersion read (KubeRay's `Update`). Nothing to write: no request.
async fn set_finalizer(rc: &RayCluster, ctx: &Shared, present: bool) -> Result<(), EmulatorError> {
    let mut finalizers: Vec<String> = rc
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if present {
        finalizers.push(FINALIZER.into());
    }
    if finalizers == rc.finalizers() {
        return Ok(());
    }
    let ns = rc.namespace().unwrap_or_default();
    let name = rc.name_any();
    let patch = json!({"metadata": {
        "resourceVersion": rc.meta().resource_version,
        "finalizers": finalizers,
    }});
    let api: Api<RayCluster> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| EmulatorError::ClusterFinalizer {
            name: format!("{ns}/{name}"),
            source,
        })?;
    let done = if present { "added" } else { "removed" };
    tracing::info!(cluster = %format!("{ns}/{name}"), finalizer = FINALIZER, "{done} the Redis cleanup finalizer");
    Ok(())
}

/// When the deleted cluster's finalizer goes whatever its Job does.
fn timeout_at(rc: &RayCluster) -> Option<Timestamp> {
    let deleted = rc.metadata.deletion_timestamp.as_ref()?.0;
    Some(later(deleted, deletion_timeout(rc)))
}

/// The deleted cluster's cleanup: pods, head gone, the Job, the finalizer.
async fn deletion(rc: &RayCluster, ctx: &Shared) -> Result<Action, EmulatorError> {
    if !ctx.config.pods {
        return deletion_by_time(rc, ctx).await;
    }
    let heads = delete_all_pods(rc, ctx, "head").await?;
    delete_all_pods(rc, ctx, "worker").await?;
    if !heads.is_empty() {
        tracing::info!(cluster = %rc.name_any(), "waiting for the head pod to be gone before the Redis cleanup");
        return Ok(Action::requeue(HEAD_WAIT));
    }
    let jobs = list_jobs(rc, ctx).await?;
    if has_finalizer(rc) && timeout_at(rc).is_some_and(|t| ctx.now() >= t) {
        tracing::warn!(cluster = %rc.name_any(), "Redis cleanup stuck past the GCS FT deletion timeout; force-removing the finalizer");
        set_finalizer(rc, ctx, false).await?;
        return Ok(Action::await_change());
    }
    if let Some(job) = jobs.first() {
        if let Some(how) = job_finished(job) {
            tracing::info!(cluster = %rc.name_any(), job = %job.name_any(), finished = how, "Redis cleanup Job finished");
            set_finalizer(rc, ctx, false).await?;
            return Ok(Action::await_change());
        }
        return Ok(Action::requeue(REQUEUE));
    }
    create_job(rc, ctx).await?;
    Ok(Action::requeue(REQUEUE))
}

/// Pods emulated by time: gone at once; the cleanup runs `start_delay` (at most the timeout).
async fn deletion_by_time(rc: &RayCluster, ctx: &Shared) -> Result<Action, EmulatorError> {
    ctx.pods_deleted(&rc.namespace().unwrap_or_default(), &rc.name_any());
    let Some(deleted) = rc.metadata.deletion_timestamp.as_ref().map(|t| t.0) else {
        return Ok(Action::await_change());
    };
    let done = later(deleted, ctx.config.start_delay.min(deletion_timeout(rc)));
    if ctx.now() < done {
        return Ok(requeue_at(Some(done), ctx.now(), REQUEUE));
    }
    set_finalizer(rc, ctx, false).await?;
    Ok(Action::await_change())
}

/// `deleteAllPods`: the cluster's pods of `node_type` (terminating ones included), those not yet
/// deleting deleted.
async fn delete_all_pods(
    rc: &RayCluster,
    ctx: &Shared,
    node_type: &str,
) -> Result<Vec<Pod>, EmulatorError> {
    let ns = rc.namespace().unwrap_or_default();
    let full = format!("{ns}/{}", rc.name_any());
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = format!(
        "{CLUSTER_LABEL}={},{NODE_TYPE_LABEL}={node_type}",
        rc.name_any()
    );
    let pods = ctx
        .list(&api, &ListParams::default().labels(&selector))
        .await
        .map_err(|source| EmulatorError::ListPods { name: full, source })?;
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let name = pod.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(cluster = %rc.name_any(), pod = %name, "deleted Ray pod of a deleted cluster")
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                let name = format!("{ns}/{name}");
                return Err(EmulatorError::DeletePod { name, source });
            }
        }
    }
    Ok(pods)
}

/// `RayClusterRedisCleanupJobAssociationOptions`: the cluster's Jobs labelled `redis-cleanup`.
async fn list_jobs(rc: &RayCluster, ctx: &Shared) -> Result<Vec<Job>, EmulatorError> {
    let ns = rc.namespace().unwrap_or_default();
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = format!(
        "{CLUSTER_LABEL}={},{NODE_TYPE_LABEL}={REDIS_CLEANUP_NODE}",
        rc.name_any()
    );
    ctx.list(&api, &ListParams::default().labels(&selector))
        .await
        .map_err(|source| EmulatorError::ListJobs {
            name: format!("{ns}/{}", rc.name_any()),
            source,
        })
}

/// Creates the cleanup Job; one already there (`AlreadyExists`) is left for the next look.
async fn create_job(rc: &RayCluster, ctx: &Shared) -> Result<(), EmulatorError> {
    let ns = rc.namespace().unwrap_or_default();
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    match api.create(&PostParams::default(), &cleanup_job(rc)).await {
        Ok(job) => {
            tracing::info!(cluster = %rc.name_any(), job = %job.name_any(), "created the Redis cleanup Job");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(source) => Err(EmulatorError::CreateJob {
            name: format!("{ns}/{}", rc.name_any()),
            source,
        }),
    }
}

#[cfg(test)]
mod tests;
