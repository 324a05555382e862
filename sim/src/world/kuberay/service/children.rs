//! Which RayClusters a RayService wants: the active and pending names its status holds, the
//! spec-hash comparisons that call for a new or an updated child (`shouldPrepareNewCluster`,
//! `shouldUpdateCluster`), and the child it builds (`constructRayClusterForRayService`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use super::{ROLLBACK_IN_PROGRESS, UPGRADE_IN_PROGRESS};
use crate::world::kuberay::EmulatorError;
use crate::world::kuberay::hash::cluster_spec_hash;
use crate::world::kuberay::incremental;
use raygate::conditions::is_true;
use raygate::meta;
use raygate::types::ray::{
    HASH_WITHOUT_REPLICAS_ANNOTATION, KUBERAY_VERSION_ANNOTATION, NUM_WORKER_GROUPS_ANNOTATION,
    ORIGINATED_FROM_CR_NAME_LABEL, ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE,
    RayCluster, RayService, RayServiceStatus,
};

pub(super) fn active_name(s: &RayServiceStatus) -> &str {
    s.active_service_status
        .as_ref()
        .and_then(|a| a.ray_cluster_name.as_deref())
        .unwrap_or("")
}

pub(super) fn pending_name(s: &RayServiceStatus) -> &str {
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
pub(super) fn should_prepare_new_cluster(
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
pub(super) fn should_update_cluster(
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
pub(super) fn modify_cluster(current: &RayCluster, goal: RayCluster) -> RayCluster {
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
