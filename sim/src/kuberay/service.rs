//! The RayService side: KubeRay v1.7's `RayServiceReconciler.Reconcile` (rayservice_controller.go)
//! for the NewCluster and the NewClusterWithIncrementalUpgrade strategies (the latter's numbers in
//! [`super::incremental`]), without Services, Gateway objects, Serve applications or the dashboard.
//!
//! Order, as upstream: skip when `managedBy` names another controller → clean up dangling children
//! (deletion delay, in-memory timers) → finalizer → `handleSuspend` → `reconcileRayCluster`
//! (create the pending child by name, update a child in place when worker groups were appended) →
//! readiness (emulated, see [`Shared::is_ready`]) → traffic switch and promotion →
//! `calculateStatus` (copy child statuses, prepare a new pending name, conditions).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::cluster::worker_replicas;
use super::hash::cluster_spec_hash;
use super::incremental::{self, Role, Side, Upgrade};
use super::status::{merge_diff, remove_condition};
use super::{
    DEFAULT_DELETION_DELAY, EmulatorError, RAYSERVICE_FINALIZER, SERVICE_REQUEUE, Shared, later,
    managed_externally, requeue_at,
};
use raygate::conditions::{self, find, is_true};
use raygate::duration::kuberay_timeout;
use raygate::meta;
use raygate::types::ray::INITIALIZING_TIMEOUT_ANNOTATION;
use raygate::types::ray::{
    HASH_WITHOUT_REPLICAS_ANNOTATION, KUBERAY_VERSION_ANNOTATION, NUM_WORKER_GROUPS_ANNOTATION,
    ORIGINATED_FROM_CR_NAME_LABEL, ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE,
    RayCluster, RayClusterStatus, RayService, RayServiceClusterStatus, RayServiceStatus,
};

pub(crate) const READY: &str = "Ready";
pub(crate) const UPGRADE_IN_PROGRESS: &str = "UpgradeInProgress";
pub(crate) const ROLLBACK_IN_PROGRESS: &str = "RollbackInProgress";
pub(crate) const SUSPENDING: &str = "Suspending";
pub(crate) const SUSPENDED: &str = "Suspended";

/// Characters of `k8s.io/apimachinery/pkg/util/rand.String` (no vowels, no 0/1/3).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `utils.GenerateRayClusterName`: `<rayservice>-<5 random chars>`. The randomness is a hash of
/// the service, the emulator's clock and a sequence number: the same run on the sim's virtual
/// clock names its clusters the same, and two names in one instant differ.
pub fn generate_cluster_name(service: &str, now: Timestamp, seq: u64) -> String {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: deterministic, unlike `RandomState`
    let mut h = std::hash::DefaultHasher::new();
    (service, now.as_nanosecond(), seq).hash(&mut h);
    let mut bits = h.finish();
    let suffix: String = (0..5)
        .map(|_| {
            let c = NAME_ALPHABET[(bits % NAME_ALPHABET.len() as u64) as usize] as char;
            bits /= NAME_ALPHABET.len() as u64;
            c
        })
        .collect();
    format!("{service}-{suffix}")
}

fn active_name(s: &RayServiceStatus) -> &str {
    s.active_service_status
        .as_ref()
        .and_then(|a| a.ray_cluster_name.as_deref())
        .unwrap_or("")
}

fn pending_name(s: &RayServiceStatus) -> &str {
    s.pending_service_status
        .as_ref()
        .and_then(|a| a.ray_cluster_name.as_deref())
        .unwrap_or("")
}

/// `isClusterSpecHashEqual`: the goal hash (of the first n worker groups when `partial`, n from
/// the child's `ray.io/num-worker-groups`) against the child's annotation, never its live spec.
fn is_hash_equal(rs: &RayService, c: &RayCluster, partial: bool) -> Result<bool, EmulatorError> {
    let hash_err = |source| EmulatorError::Hash {
        name: rs.name_any(),
        source,
    };
    let cluster_hash =
        meta::annotation(&c.metadata, HASH_WITHOUT_REPLICAS_ANNOTATION).unwrap_or("");
    let goal = &rs.spec.ray_cluster_config;
    let goal_hash = if !partial {
        cluster_spec_hash(goal, None).map_err(hash_err)?
    } else {
        let Some(n) = meta::annotation(&c.metadata, NUM_WORKER_GROUPS_ANNOTATION)
            .and_then(|n| n.parse().ok())
        else {
            // upstream: an unparsable count counts as equal
            return Ok(true);
        };
        if goal.worker_group_specs.as_ref().map_or(0, Vec::len) >= n {
            cluster_spec_hash(goal, Some(n)).map_err(hash_err)?
        } else {
            String::new()
        }
    };
    Ok(cluster_hash == goal_hash)
}

/// `isZeroDowntimeUpgradeEnabled` (the `ENABLE_ZERO_DOWNTIME` env var of the operator is not
/// emulated: unset `type` means enabled).
fn zero_downtime_enabled(rs: &RayService) -> bool {
    match rs
        .spec
        .upgrade_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref())
    {
        None => true,
        Some(t) => t == "NewCluster" || t == "NewClusterWithIncrementalUpgrade",
    }
}

/// `shouldPrepareNewCluster`.
fn should_prepare_new_cluster(
    rs: &RayService,
    active: Option<&RayCluster>,
    pending: Option<&RayCluster>,
    pending_serving: bool,
) -> Result<bool, EmulatorError> {
    if pending_serving {
        return Ok(false);
    }
    let conditions = rs
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if is_true(conditions, ROLLBACK_IN_PROGRESS) {
        return Ok(false);
    }
    let Some(cluster) = pending.or(active) else {
        return Ok(true);
    };
    if is_hash_equal(rs, cluster, false)? || is_hash_equal(rs, cluster, true)? {
        return Ok(false);
    }
    Ok(zero_downtime_enabled(rs))
}

/// `shouldUpdateCluster`.
fn should_update_cluster(
    rs: &RayService,
    cluster: Option<&RayCluster>,
    is_active: bool,
    version: &str,
) -> Result<bool, EmulatorError> {
    let Some(cluster) = cluster else {
        return Ok(false);
    };
    if is_active {
        let conditions = rs
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        if is_true(conditions, UPGRADE_IN_PROGRESS) {
            return Ok(false);
        }
        if meta::annotation(&cluster.metadata, KUBERAY_VERSION_ANNOTATION).unwrap_or("") != version
        {
            return Ok(true);
        }
    }
    if is_hash_equal(rs, cluster, false)? {
        return Ok(false);
    }
    is_hash_equal(rs, cluster, true)
}

/// `constructRayClusterForRayService`.
pub(crate) fn construct_cluster(
    rs: &RayService,
    name: &str,
    version: &str,
) -> Result<RayCluster, EmulatorError> {
    let mut labels: BTreeMap<String, String> = rs.labels().clone();
    labels.insert(ORIGINATED_FROM_CR_NAME_LABEL.into(), rs.name_any());
    labels.insert(
        ORIGINATED_FROM_CRD_LABEL.into(),
        ORIGINATED_FROM_RAYSERVICE.into(),
    );
    let mut annotations: BTreeMap<String, String> = rs.annotations().clone();
    let hash = cluster_spec_hash(&rs.spec.ray_cluster_config, None).map_err(|source| {
        EmulatorError::Hash {
            name: rs.name_any(),
            source,
        }
    })?;
    annotations.insert(HASH_WITHOUT_REPLICAS_ANNOTATION.into(), hash);
    annotations.insert(
        NUM_WORKER_GROUPS_ANNOTATION.into(),
        rs.spec
            .ray_cluster_config
            .worker_group_specs
            .as_ref()
            .map_or(0, Vec::len)
            .to_string(),
    );
    annotations.insert(KUBERAY_VERSION_ANNOTATION.into(), version.to_string());
    let uid = rs
        .metadata
        .uid
        .clone()
        .ok_or_else(|| EmulatorError::Construct {
            name: name.to_string(),
            reason: format!("RayService {} has no uid", rs.name_any()),
        })?;
    let mut spec = rs.spec.ray_cluster_config.clone();
    let status = rs.status.clone().unwrap_or_default();
    if incremental::is_enabled(rs) && !active_name(&status).is_empty() {
        // an incremental upgrade's pending cluster starts without `replicas`, "so that it
        // autoscales based on the value of target_capacity from MinReplicas"
        for g in spec.worker_group_specs.iter_mut().flatten() {
            g.replicas = None;
        }
    }
    let mut cluster = RayCluster::new(name, spec);
    cluster.metadata.namespace = rs.namespace();
    cluster.metadata.labels = Some(labels);
    cluster.metadata.annotations = Some(annotations);
    cluster.metadata.owner_references = Some(vec![OwnerReference {
        api_version: RayService::api_version(&()).to_string(),
        kind: RayService::kind(&()).to_string(),
        name: rs.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    Ok(cluster)
}

/// `modifyRayCluster`: the goal's spec, labels and annotations, keeping the child's `suspend`.
fn modify_cluster(current: &RayCluster, goal: RayCluster) -> RayCluster {
    let mut updated = current.clone();
    let suspend = current.spec.suspend;
    updated.spec = goal.spec;
    updated.spec.suspend = suspend;
    updated.metadata.labels = goal.metadata.labels;
    updated.metadata.annotations = goal.metadata.annotations;
    updated.metadata.managed_fields = None;
    updated.status = None;
    updated
}

struct Ctx<'a> {
    shared: &'a Shared,
    /// The emulator's clock when this reconcile started.
    now: Timestamp,
    services: Api<RayService>,
    clusters: Api<RayCluster>,
    ns: String,
    name: String,
}

impl Ctx<'_> {
    fn full(&self, name: &str) -> String {
        format!("{}/{}", self.ns, name)
    }

    async fn get_cluster(&self, name: &str) -> Result<Option<RayCluster>, EmulatorError> {
        if name.is_empty() {
            return Ok(None);
        }
        self.shared
            .get_opt(&self.clusters, name)
            .await
            .map_err(|source| EmulatorError::GetCluster {
                name: self.full(name),
                source,
            })
    }

    /// `RayServiceRayClustersAssociationOptions`: the labelled children.
    async fn children(&self) -> Result<Vec<RayCluster>, EmulatorError> {
        let selector = format!(
            "{ORIGINATED_FROM_CR_NAME_LABEL}={},{ORIGINATED_FROM_CRD_LABEL}={ORIGINATED_FROM_RAYSERVICE}",
            self.name
        );
        self.shared
            .list(&self.clusters, &ListParams::default().labels(&selector))
            .await
            .map_err(|source| EmulatorError::ListChildren {
                name: self.full(&self.name),
                source,
            })
    }

    async fn delete_cluster(&self, name: &str, why: &str) -> Result<(), EmulatorError> {
        match self
            .clusters
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => {
                tracing::info!(service = %self.full(&self.name), cluster = name, reason = why, "deleted RayCluster");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(EmulatorError::DeleteCluster {
                    name: self.full(name),
                    source,
                });
            }
        }
        self.shared.forget_deletion(&meta::key_of(&self.ns, name));
        self.shared.pods_deleted(&self.ns, name);
        Ok(())
    }

    /// Writes `new` as the status when it differs from the object's (merge patch of the
    /// difference, with the object's resourceVersion as precondition); returns the fresh object.
    async fn write_status(
        &self,
        rs: RayService,
        mut new: RayServiceStatus,
    ) -> Result<RayService, EmulatorError> {
        let old = rs.status.clone().unwrap_or_default();
        if old == new {
            return Ok(rs);
        }
        new.other.insert(
            "lastUpdateTime".into(),
            serde_json::to_value(Time(self.now)).unwrap_or(Value::Null),
        );
        let to_json = |s: &RayServiceStatus| serde_json::to_value(s).unwrap_or_else(|_| json!({}));
        let old_json = rs.status.as_ref().map_or_else(|| json!({}), to_json);
        let Some(diff) = merge_diff(&old_json, &to_json(&new)) else {
            return Ok(rs);
        };
        let patch = json!({
            "metadata": {"resourceVersion": rs.meta().resource_version},
            "status": diff,
        });
        let updated = self
            .services
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| EmulatorError::ServiceStatus {
                name: self.full(&self.name),
                source,
            })?;
        let s = updated.status.clone().unwrap_or_default();
        let cond = |t: &str| {
            find(&s.conditions, t)
                .map(|c| format!("{}/{}", c.status, c.reason))
                .unwrap_or_default()
        };
        tracing::info!(
            service = %self.full(&self.name),
            active = active_name(&s),
            pending = pending_name(&s),
            ready = %cond(READY),
            upgrade_in_progress = %cond(UPGRADE_IN_PROGRESS),
            suspending = %cond(SUSPENDING),
            suspended = %cond(SUSPENDED),
            "RayService status"
        );
        Ok(updated)
    }

    /// Sets the finalizer list (with the object's resourceVersion as precondition).
    async fn set_finalizers(
        &self,
        rs: &RayService,
        finalizers: Vec<String>,
    ) -> Result<RayService, EmulatorError> {
        let patch = json!({"metadata": {
            "resourceVersion": rs.meta().resource_version,
            "finalizers": finalizers,
        }});
        self.services
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| EmulatorError::Finalizer {
                name: self.full(&self.name),
                source,
            })
    }

    /// `cleanUpRayClusterInstance`: schedules dangling children for deletion after the delay and
    /// deletes those whose time has come. Returns whether any child still needs cleaning up, and
    /// the earliest pending deletion time.
    async fn clean_up(
        &self,
        rs: &RayService,
        children: &[RayCluster],
    ) -> Result<(bool, Option<Timestamp>), EmulatorError> {
        let deleting = rs.metadata.deletion_timestamp.is_some();
        let delay = if deleting {
            Duration::ZERO
        } else {
            rs.spec
                .ray_cluster_deletion_delay_seconds
                .map_or(DEFAULT_DELETION_DELAY, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                })
        };
        let status = rs.status.clone().unwrap_or_default();
        let (active, pending) = (active_name(&status), pending_name(&status));
        let (mut has_to_clean, mut next) = (false, None::<Timestamp>);
        let now = self.now;
        for c in children {
            let name = c.name_any();
            if !deleting && (name == active || name == pending) {
                continue;
            }
            has_to_clean = true;
            let k = meta::key_of(&self.ns, &name);
            match self.shared.deletion_time(&k) {
                _ if deleting => {
                    self.delete_cluster(&name, "RayService is being deleted")
                        .await?
                }
                Some(at) if now >= at => {
                    self.delete_cluster(&name, "deletion delay passed").await?
                }
                Some(at) => next = Some(next.map_or(at, |n| n.min(at))),
                None => {
                    let at = later(now, delay);
                    self.shared.schedule_deletion(&k, at);
                    tracing::info!(service = %self.full(&self.name), cluster = %name, ?delay, "scheduled dangling RayCluster for deletion");
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
            }
        }
        Ok((has_to_clean, next))
    }

    /// `deleteRayServiceOwnedResources` (RayClusters only: no Services here). True when none
    /// remained.
    async fn delete_all_children(&self, children: &[RayCluster]) -> Result<bool, EmulatorError> {
        for c in children {
            if c.metadata.deletion_timestamp.is_none() {
                self.delete_cluster(&c.name_any(), "RayService suspend")
                    .await?;
            }
        }
        Ok(children.is_empty())
    }
}

/// `handleSuspend`: mutates `status`; returns nothing, the caller persists it.
async fn handle_suspend(
    ctx: &Ctx<'_>,
    rs: &RayService,
    status: &mut RayServiceStatus,
) -> Result<(), EmulatorError> {
    let (generation, now) = (rs.metadata.generation, ctx.now);
    let spec_suspend = rs.spec.suspend == Some(true);
    if is_true(&status.conditions, SUSPENDED) {
        if !spec_suspend {
            mark_resumed(status, generation, now);
        }
        return Ok(());
    }
    if !is_true(&status.conditions, SUSPENDING) {
        if spec_suspend {
            mark_suspending(status, generation, now);
        }
        return Ok(());
    }
    // Suspending is committed: the deletion runs to the end whatever the spec says now
    let children = ctx.children().await?;
    let g = status.observed_generation;
    if ctx.delete_all_children(&children).await? {
        mark_suspended(&mut status.conditions, g, now);
    } else {
        conditions::set(
            &mut status.conditions,
            SUSPENDING,
            "True",
            "SuspendInProgress",
            "Waiting for all Kubernetes resources owned by this RayService to be deleted.",
            g,
            now,
        );
    }
    Ok(())
}

/// A suspended RayService whose `spec.suspend` went false: resumed, initializing again.
fn mark_resumed(status: &mut RayServiceStatus, generation: Option<i64>, now: Timestamp) {
    status.observed_generation = generation;
    let g = status.observed_generation;
    let c = &mut status.conditions;
    conditions::set(
        c,
        SUSPENDED,
        "False",
        "RayServiceResumed",
        "Spec.Suspend is false; RayService has resumed.",
        g,
        now,
    );
    let initializing = "RayService is initializing after resuming from suspend.";
    remove_condition(c, READY);
    conditions::set(c, READY, "False", "Initializing", initializing, g, now);
    remove_condition(c, UPGRADE_IN_PROGRESS);
    conditions::set(
        c,
        UPGRADE_IN_PROGRESS,
        "False",
        "Initializing",
        initializing,
        g,
        now,
    );
}

/// `spec.suspend` set on a running RayService: Suspending, serving status cleared.
fn mark_suspending(status: &mut RayServiceStatus, generation: Option<i64>, now: Timestamp) {
    status.observed_generation = generation;
    let g = status.observed_generation;
    let c = &mut status.conditions;
    conditions::set(
        c,
        SUSPENDING,
        "True",
        "SuspendRequested",
        "Spec.Suspend is true; will delete all Kubernetes resources owned by this RayService.",
        g,
        now,
    );
    let reason = "SuspendInProgress";
    conditions::set(
        c,
        READY,
        "False",
        reason,
        "RayService is suspending.",
        g,
        now,
    );
    conditions::set(
        c,
        UPGRADE_IN_PROGRESS,
        "False",
        reason,
        "No upgrade in progress.",
        g,
        now,
    );
    conditions::set(
        c,
        ROLLBACK_IN_PROGRESS,
        "False",
        reason,
        "No rollback in progress.",
        g,
        now,
    );
    status.active_service_status = None;
    status.pending_service_status = None;
    status.num_serve_endpoints = Some(0);
    status.service_status = None;
}

/// Every owned child gone: Suspended.
fn mark_suspended(c: &mut Vec<Condition>, g: Option<i64>, now: Timestamp) {
    let done = "All owned resources have been deleted.";
    let reason = "SuspendComplete";
    conditions::set(c, SUSPENDING, "False", reason, done, g, now);
    conditions::set(c, SUSPENDED, "True", reason, done, g, now);
    conditions::set(
        c,
        READY,
        "False",
        reason,
        "RayService is suspended.",
        g,
        now,
    );
    conditions::set(
        c,
        UPGRADE_IN_PROGRESS,
        "False",
        reason,
        "No upgrade in progress.",
        g,
        now,
    );
    conditions::set(
        c,
        ROLLBACK_IN_PROGRESS,
        "False",
        reason,
        "No rollback in progress.",
        g,
        now,
    );
}

/// `reconcileRayCluster`: returns the active and the pending child after creating or updating.
async fn reconcile_clusters(
    ctx: &Ctx<'_>,
    rs: &RayService,
) -> Result<(Option<RayCluster>, Option<RayCluster>), EmulatorError> {
    let status = rs.status.clone().unwrap_or_default();
    let version = ctx.shared.config.version.as_str();
    let mut active = ctx.get_cluster(active_name(&status)).await?;
    let mut pending = ctx.get_cluster(pending_name(&status)).await?;
    let pending_wanted = pending_name(&status);
    if !pending_wanted.is_empty() && pending.is_none() {
        let child = construct_cluster(rs, pending_wanted, version)?;
        let created = match ctx.clusters.create(&PostParams::default(), &child).await {
            Ok(c) => c,
            Err(source) => {
                return Err(EmulatorError::CreateCluster {
                    name: ctx.full(pending_wanted),
                    source,
                });
            }
        };
        tracing::info!(
            service = %ctx.full(&ctx.name),
            cluster = pending_wanted,
            suspend = created.spec.suspend.unwrap_or(false),
            "created pending RayCluster"
        );
        return Ok((active, Some(created)));
    }
    for (slot, is_active) in [(&mut active, true), (&mut pending, false)] {
        if !should_update_cluster(rs, slot.as_ref(), is_active, version)? {
            continue;
        }
        let Some(current) = slot.as_ref() else {
            continue;
        };
        let name = current.name_any();
        let goal = construct_cluster(rs, &name, version)?;
        let updated = ctx
            .clusters
            .replace(
                &name,
                &PostParams::default(),
                &modify_cluster(current, goal),
            )
            .await
            .map_err(|source| EmulatorError::UpdateCluster {
                name: ctx.full(&name),
                source,
            })?;
        tracing::info!(
            service = %ctx.full(&ctx.name),
            cluster = %name,
            role = if is_active { "active" } else { "pending" },
            "updated RayCluster in place"
        );
        *slot = Some(updated);
    }
    Ok((active, pending))
}

/// Serve endpoints of a ready cluster: its workers (`ray.io/serve=true`) and the head unless
/// `excludeHeadPodFromServeSvc`.
fn serve_endpoints(rs: &RayService, c: &RayCluster) -> i32 {
    let head = rs
        .spec
        .other
        .get("excludeHeadPodFromServeSvc")
        .and_then(Value::as_bool)
        != Some(true);
    worker_replicas(&c.spec).0.saturating_add(i32::from(head))
}

/// `isInitializingTimeout`: `Ready=False/InitializingTimeout`, terminal.
fn is_initializing_timeout(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> bool {
    find(conditions, READY)
        .is_some_and(|c| c.status == "False" && c.reason == "InitializingTimeout")
}

/// `markFailedOnInitializingTimeout`: with `ray.io/initializing-timeout` set and `Ready` at
/// `False/Initializing` for that long, clears both cluster names (every child becomes dangling)
/// and sets `Ready=False/InitializingTimeout`.
fn mark_failed_on_initializing_timeout(
    status: &mut RayServiceStatus,
    timeout: Option<Duration>,
    now: Timestamp,
) {
    let Some(timeout) = timeout else {
        return;
    };
    let Some(ready) = find(&status.conditions, READY) else {
        return;
    };
    if ready.status != "False" || ready.reason != "Initializing" {
        return;
    }
    let spent = now.duration_since(ready.last_transition_time.0);
    if spent.as_secs_f64() < timeout.as_secs_f64() {
        return;
    }
    for slot in [
        &mut status.active_service_status,
        &mut status.pending_service_status,
    ]
    .into_iter()
    .flatten()
    {
        slot.ray_cluster_name = None;
    }
    let message = format!(
        "RayService failed to become ready within the configured timeout of {}s. Time spent initializing: {}s",
        timeout.as_secs(),
        spent.as_secs()
    );
    let g = status.observed_generation;
    conditions::set(
        &mut status.conditions,
        READY,
        "False",
        "InitializingTimeout",
        &message,
        g,
        now,
    );
    tracing::warn!(%message, "RayService initializing timeout exceeded");
}

/// `calculateConditions`.
fn calculate_conditions(
    status: &mut RayServiceStatus,
    initializing_timeout: Option<Duration>,
    now: Timestamp,
) {
    let g = status.observed_generation;
    let endpoints = status.num_serve_endpoints.unwrap_or(0);
    let c = &mut status.conditions;
    if c.is_empty() {
        let m = "RayService is initializing";
        conditions::set(c, READY, "False", "Initializing", m, g, now);
        conditions::set(c, UPGRADE_IN_PROGRESS, "False", "Initializing", m, g, now);
    }
    if endpoints > 0 {
        conditions::set(
            c,
            READY,
            "True",
            "NonZeroServeEndpoints",
            "Number of serve endpoints is greater than 0",
            g,
            now,
        );
    } else if is_true(c, READY) {
        conditions::set(
            c,
            READY,
            "False",
            "ZeroServeEndpoints",
            "Number of serve endpoints dropped to 0",
            g,
            now,
        );
    } else {
        mark_failed_on_initializing_timeout(status, initializing_timeout, now);
    }
    let (active, pending) = (
        active_name(status).to_string(),
        pending_name(status).to_string(),
    );
    let c = &mut status.conditions;
    if !active.is_empty() && !pending.is_empty() {
        conditions::set(
            c,
            UPGRADE_IN_PROGRESS,
            "True",
            "BothActivePendingClustersExist",
            "Both active and pending Ray clusters exist",
            g,
            now,
        );
    } else if !active.is_empty() {
        conditions::set(
            c,
            UPGRADE_IN_PROGRESS,
            "False",
            "NoPendingCluster",
            "Active Ray cluster exists and no pending Ray cluster",
            g,
            now,
        );
    } else {
        let keep = find(c, UPGRADE_IN_PROGRESS)
            .is_some_and(|u| u.reason == "Initializing" || u.reason == "InitializingTimeout");
        if !keep {
            conditions::set(
                c,
                UPGRADE_IN_PROGRESS,
                "Unknown",
                "NoActiveCluster",
                "No active Ray cluster exists, and the RayService is not initializing. Please open a GitHub issue in the KubeRay repository.",
                g,
                now,
            );
        }
    }
}

fn cluster_status(c: Option<&RayCluster>) -> Option<RayClusterStatus> {
    c.and_then(|c| c.status.clone())
}

/// Sets the child status copy in a `RayServiceStatus` slot, dropping an empty slot.
fn set_slot(slot: &mut Option<RayServiceClusterStatus>, name: &str, cluster: Option<&RayCluster>) {
    if name.is_empty() && slot.as_ref().is_none_or(|s| s.other.is_empty()) {
        *slot = None;
        return;
    }
    let s = slot.get_or_insert_with(Default::default);
    s.ray_cluster_name = (!name.is_empty()).then(|| name.to_string());
    s.ray_cluster_status = cluster_status(cluster);
}

/// Reconciles one RayService.
pub(super) async fn reconcile(
    obj: Arc<RayService>,
    shared: Arc<Shared>,
) -> Result<Action, EmulatorError> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let ctx = Ctx {
        shared: &shared,
        now: shared.now(),
        services: Api::namespaced(shared.client.clone(), &ns),
        clusters: Api::namespaced(shared.client.clone(), &ns),
        ns: ns.clone(),
        name: name.clone(),
    };
    // read fresh: decisions on a stale cache would write stale names
    let Some(mut rs) = shared
        .get_opt(&ctx.services, &name)
        .await
        .map_err(|source| EmulatorError::GetService {
            name: ctx.full(&name),
            source,
        })?
    else {
        return Ok(Action::await_change());
    };
    if let Some(manager) = managed_externally(rs.spec.managed_by.as_deref()) {
        tracing::debug!(service = %ctx.full(&name), %manager, "skipping RayService managed by a custom controller");
        return Ok(Action::await_change());
    }

    let children = ctx.children().await?;
    let (has_to_clean, next_deletion) = ctx.clean_up(&rs, &children).await?;

    let finalizers = rs.finalizers().to_vec();
    if rs.metadata.deletion_timestamp.is_some() {
        if !has_to_clean && finalizers.iter().any(|f| f == RAYSERVICE_FINALIZER) {
            let rest = finalizers
                .into_iter()
                .filter(|f| f != RAYSERVICE_FINALIZER)
                .collect();
            ctx.set_finalizers(&rs, rest).await?;
            tracing::info!(service = %ctx.full(&name), "no RayClusters left; removed the finalizer");
            return Ok(Action::await_change());
        }
        return Ok(requeue_at(next_deletion, shared.now(), SERVICE_REQUEUE));
    }
    if !finalizers.iter().any(|f| f == RAYSERVICE_FINALIZER) {
        let mut with = finalizers;
        with.push(RAYSERVICE_FINALIZER.to_string());
        rs = ctx.set_finalizers(&rs, with).await?;
    }

    // handleSuspend, persisted on its own as upstream does
    let mut status = rs.status.clone().unwrap_or_default();
    handle_suspend(&ctx, &rs, &mut status).await?;
    rs = ctx.write_status(rs, status).await?;
    let conditions = rs
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if is_true(&conditions, SUSPENDING) || is_true(&conditions, SUSPENDED) {
        return Ok(requeue_at(next_deletion, shared.now(), SERVICE_REQUEUE));
    }
    // terminal: only the clean-up above runs; the user must recreate the RayService
    if is_initializing_timeout(&conditions) {
        if has_to_clean {
            return Ok(requeue_at(next_deletion, shared.now(), SERVICE_REQUEUE));
        }
        return Ok(Action::await_change());
    }

    let (mut active, mut pending) = reconcile_clusters(&ctx, &rs).await?;
    if incremental::is_enabled(&rs) {
        autoscale_children(&ctx, &rs, &mut active, &mut pending).await?;
    }

    let status = serving_status(&ctx, &rs, active.as_ref(), pending.as_ref())?;
    let rs = ctx.write_status(rs, status).await?;
    let next = next_look(
        &shared,
        &rs,
        active.as_ref(),
        pending.as_ref(),
        next_deletion,
    );
    Ok(requeue_at(next, shared.now(), SERVICE_REQUEUE))
}

/// The emulated Ray autoscaler (when configured) on the active and the pending child of an
/// incremental upgrade, each sized to its `targetCapacity` as the status holds it.
async fn autoscale_children(
    ctx: &Ctx<'_>,
    rs: &RayService,
    active: &mut Option<RayCluster>,
    pending: &mut Option<RayCluster>,
) -> Result<(), EmulatorError> {
    let status = rs.status.clone().unwrap_or_default();
    let sides = [
        (active, &status.active_service_status, 100),
        (pending, &status.pending_service_status, 0),
    ];
    for (slot, side, default) in sides {
        let Some(c) = slot.as_ref() else {
            continue;
        };
        let tc = Side::read(side.as_ref()).target_capacity.unwrap_or(default);
        if let Some(updated) = super::autoscaler::autoscale(ctx.shared, rs, c, tc).await? {
            *slot = Some(updated);
        }
    }
    Ok(())
}

/// The incremental upgrade's part of `reconcileServe` and `calculateStatus`, on `status` (after
/// the child statuses were copied, before promotion): the target capacities of the pending then
/// the active child (`checkIfNeedTargetCapacityUpdate`, `reconcileServeTargetCapacity`, on a
/// child whose dashboard answers: a ready one), the HTTPRoute's weights
/// (`calculateTrafficRoutedPercent`, once the active child exists) and, when a Service points at
/// a ready child, `trafficRoutedPercent` and `lastTrafficMigratedTime`. Returns the numbers.
fn step_incremental(
    ctx: &Ctx<'_>,
    rs: &RayService,
    status: &mut RayServiceStatus,
    clusters: (Option<&RayCluster>, Option<&RayCluster>),
    upgrading: bool,
    any_ready: bool,
) -> Upgrade {
    let (active, pending) = clusters;
    let mut u = Upgrade {
        active: Side::read(status.active_service_status.as_ref()),
        pending: Side::read(status.pending_service_status.as_ref()),
    };
    let Some(opts) = incremental::options(rs) else {
        tracing::warn!(service = %ctx.full(&ctx.name), "ClusterUpgradeOptions are not set during upgrade");
        return u;
    };
    let both_named = !active_name(status).is_empty() && !pending_name(status).is_empty();
    if upgrading && both_named {
        for (role, cluster) in [(Role::Pending, pending), (Role::Active, active)] {
            let Some(c) = cluster.filter(|c| ctx.shared.is_ready(c)) else {
                continue;
            };
            if !incremental::need_target_capacity_update(&u) {
                continue;
            }
            if let Some(goal) = incremental::reconcile_target_capacity(&mut u, &opts, role) {
                tracing::info!(service = %ctx.full(&ctx.name), cluster = %c.name_any(), ?role, target_capacity = goal, "updated target_capacity of serve applications");
            }
        }
    }
    if active.is_some() {
        let pending_ready = pending.is_some_and(|c| ctx.shared.is_ready(c));
        let weights = incremental::traffic_weights(&u, &opts, pending_ready, ctx.now);
        if any_ready {
            incremental::record_weights(&mut u, weights, pending.is_some(), ctx.now);
        }
    }
    if let Some(slot) = status.active_service_status.as_mut() {
        u.active.write(slot);
    }
    if let Some(slot) = status.pending_service_status.as_mut() {
        u.pending.write(slot);
    }
    u
}

/// `reconcileServe` and `calculateStatus`: the serving candidates' readiness, promotion, a new
/// pending cluster's name, serve endpoints and conditions.
fn serving_status(
    ctx: &Ctx<'_>,
    rs: &RayService,
    active: Option<&RayCluster>,
    pending: Option<&RayCluster>,
) -> Result<RayServiceStatus, EmulatorError> {
    // readiness of the serving candidates (reconcileServe)
    let incremental = incremental::is_enabled(rs);
    let upgrading = rs
        .status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, UPGRADE_IN_PROGRESS));
    let pending_ready = pending.is_some_and(|c| ctx.shared.is_ready(c));
    let active_ready = match (active, pending) {
        (Some(a), None) => {
            !should_prepare_new_cluster(rs, Some(a), None, false)? && ctx.shared.is_ready(a)
        }
        // an incremental upgrade serves from both children
        (Some(a), Some(_)) if incremental => ctx.shared.is_ready(a),
        _ => false,
    };

    // calculateStatus
    let mut status = rs.status.clone().unwrap_or_default();
    status.observed_generation = rs.metadata.generation;
    let (a_name, p_name) = (
        active_name(&status).to_string(),
        pending_name(&status).to_string(),
    );
    set_slot(&mut status.active_service_status, &a_name, active);
    set_slot(&mut status.pending_service_status, &p_name, pending);

    let mut pending_serving = false;
    let mut serving = active;
    if incremental {
        let any_ready = pending_ready || active_ready;
        let u = step_incremental(
            ctx,
            rs,
            &mut status,
            (active, pending),
            upgrading,
            any_ready,
        );
        if any_ready {
            // the Services point at the active child during the upgrade (each child has its
            // own Serve Service behind the HTTPRoute), else at the ready pending one
            let points_to = if pending_ready && !upgrading {
                p_name.as_str()
            } else {
                a_name.as_str()
            };
            // reconcilePromotionAndServingStatus, incremental: promote once the active capacity
            // is 0 and the pending child takes all traffic; a first cluster at once
            let promote = if upgrading {
                pending.is_some() && incremental::is_complete(&u)
            } else {
                a_name.is_empty() && !p_name.is_empty()
            };
            if promote {
                tracing::info!(service = %ctx.full(&ctx.name), old = %a_name, new = %p_name, "incremental upgrade complete: promoting the pending RayCluster to active");
                status.active_service_status = status.pending_service_status.take();
                serving = pending;
            }
            pending_serving = !p_name.is_empty() && points_to == p_name;
        }
    } else if pending_ready || active_ready {
        // the head and serve Services point at the ready cluster; when that is not the active
        // one, reconcilePromotionAndServingStatus promotes the pending cluster
        let target = if pending_ready { pending } else { active };
        let points_to = target.map(ResourceExt::name_any).unwrap_or_default();
        if a_name != points_to {
            tracing::info!(service = %ctx.full(&ctx.name), old = %a_name, new = %p_name, "promoting the pending RayCluster to active");
            status.active_service_status = status.pending_service_status.take();
            serving = pending;
        }
        pending_serving = points_to == p_name;
    }
    if should_prepare_new_cluster(rs, active, pending, pending_serving)? {
        let new_name =
            generate_cluster_name(&ctx.name, ctx.shared.now(), ctx.shared.next_name_seq());
        tracing::info!(service = %ctx.full(&ctx.name), cluster = %new_name, "preparing a new pending RayCluster");
        let mut slot = RayServiceClusterStatus {
            ray_cluster_name: Some(new_name),
            ..Default::default()
        };
        if incremental {
            // a first cluster starts at full capacity, an upgrade's pending one at 0
            let first = active_name(&status).is_empty()
                && Side::read(status.active_service_status.as_ref())
                    .target_capacity
                    .is_none();
            Side {
                target_capacity: Some(if first { 100 } else { 0 }),
                ..Default::default()
            }
            .write(&mut slot);
        }
        status.pending_service_status = Some(slot);
    }
    // the serve Service selects the active cluster's pods once one has served
    let mut endpoints = match serving {
        Some(c) if !active_name(&status).is_empty() && ctx.shared.is_ready(c) => {
            serve_endpoints(rs, c)
        }
        _ => 0,
    };
    // "During NewClusterWithIncrementalUpgrade, the pending RayCluster is also serving."
    if incremental
        && active.is_some()
        && let Some(p) = pending.filter(|p| ctx.shared.is_ready(p))
        && !pending_name(&status).is_empty()
    {
        endpoints = endpoints.saturating_add(serve_endpoints(rs, p));
    }
    status.num_serve_endpoints = Some(endpoints);
    let initializing_timeout = rs
        .annotations()
        .get(INITIALIZING_TIMEOUT_ANNOTATION)
        .and_then(|t| kuberay_timeout(t));
    calculate_conditions(&mut status, initializing_timeout, ctx.now);
    status.service_status = is_true(&status.conditions, READY).then(|| "Running".to_string());
    Ok(status)
}

/// When to look again: a child becoming ready, a deletion due, a pending child to create; else
/// KubeRay's 2 s resync.
fn next_look(
    shared: &Shared,
    rs: &RayService,
    active: Option<&RayCluster>,
    pending: Option<&RayCluster>,
    next_deletion: Option<Timestamp>,
) -> Option<Timestamp> {
    let status = rs.status.clone().unwrap_or_default();
    let mut next = next_deletion;
    for c in [active, pending].into_iter().flatten() {
        if c.spec.suspend != Some(true)
            && let Some(t) = shared.ready_at(c)
            && t > shared.now()
        {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
    }
    if !pending_name(&status).is_empty() && pending.is_none() {
        // the pending child is created on the next reconcile
        next = Some(shared.now());
    }
    if incremental::is_enabled(rs)
        && let Some(opts) = incremental::options(rs)
    {
        let u = Upgrade {
            active: Side::read(status.active_service_status.as_ref()),
            pending: Side::read(status.pending_service_status.as_ref()),
        };
        if let Some(t) = incremental::next_traffic_step(&u, &opts) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_look_like_kuberay() {
        let t = Timestamp::from_second(1_767_225_600).unwrap();
        let n = generate_cluster_name("svc", t, 1);
        let suffix = n.strip_prefix("svc-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(suffix.bytes().all(|b| NAME_ALPHABET.contains(&b)));
        // deterministic on the same clock, different for the next name in the same instant
        assert_eq!(generate_cluster_name("svc", t, 1), n);
        assert_ne!(generate_cluster_name("svc", t, 2), n);
    }
}
