//! `reconcileServe` and `calculateStatus`: which child serves, promotion, the incremental upgrade's
//! steps, a new pending cluster's name and the serve endpoints.

use kube::ResourceExt;
use serde_json::Value;

use super::children::{active_name, pending_name, should_prepare_new_cluster};
use super::conditions::calculate_conditions;
use super::ctx::Ctx;
use super::{READY, UPGRADE_IN_PROGRESS};
use crate::world::kuberay::EmulatorError;
use crate::world::kuberay::desired::worker_replicas;
use crate::world::kuberay::incremental::{self, Role, Side, Upgrade};
use crate::world::kuberay::names::generate_cluster_name;
use raygate::conditions::is_true;
use raygate::duration::kuberay_timeout;
use raygate::types::ray::INITIALIZING_TIMEOUT_ANNOTATION;
use raygate::types::ray::{
    RayCluster, RayClusterStatus, RayService, RayServiceClusterStatus, RayServiceStatus,
};

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

/// The serving candidates' readiness (`reconcileServe`).
struct Readiness {
    /// The NewClusterWithIncrementalUpgrade strategy.
    incremental: bool,
    /// `UpgradeInProgress` is true in the stored status.
    upgrading: bool,
    pending_ready: bool,
    active_ready: bool,
}

impl Readiness {
    fn of(
        ctx: &Ctx<'_>,
        rs: &RayService,
        active: Option<&RayCluster>,
        pending: Option<&RayCluster>,
    ) -> Result<Readiness, EmulatorError> {
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
        Ok(Readiness {
            incremental,
            upgrading,
            pending_ready,
            active_ready,
        })
    }
}

/// `reconcileServe` and `calculateStatus`: the serving candidates' readiness, promotion, a new
/// pending cluster's name, serve endpoints and conditions.
pub(super) fn serving_status(
    ctx: &Ctx<'_>,
    rs: &RayService,
    active: Option<&RayCluster>,
    pending: Option<&RayCluster>,
) -> Result<RayServiceStatus, EmulatorError> {
    // readiness of the serving candidates (reconcileServe)
    let ready = Readiness::of(ctx, rs, active, pending)?;

    // calculateStatus
    let mut status = rs.status.clone().unwrap_or_default();
    status.observed_generation = rs.metadata.generation;
    let (a_name, p_name) = (
        active_name(&status).to_string(),
        pending_name(&status).to_string(),
    );
    set_slot(&mut status.active_service_status, &a_name, active);
    set_slot(&mut status.pending_service_status, &p_name, pending);

    let names = (a_name.as_str(), p_name.as_str());
    let (serving, pending_serving) = if ready.incremental {
        promote_incremental(ctx, rs, &mut status, (active, pending), names, &ready)
    } else if ready.pending_ready || ready.active_ready {
        promote_ready(ctx, &mut status, (active, pending), names, &ready)
    } else {
        (active, false)
    };
    if should_prepare_new_cluster(rs, active, pending, pending_serving)? {
        prepare_pending(ctx, &mut status, ready.incremental);
    }
    let endpoints = serve_endpoint_count(ctx, rs, &status, serving, (active, pending), &ready);
    status.num_serve_endpoints = Some(endpoints);
    let initializing_timeout = rs
        .annotations()
        .get(INITIALIZING_TIMEOUT_ANNOTATION)
        .and_then(|t| kuberay_timeout(t));
    calculate_conditions(&mut status, initializing_timeout, ctx.now);
    status.service_status = is_true(&status.conditions, READY).then(|| "Running".to_string());
    Ok(status)
}

/// The incremental upgrade's serving: its steps ([`step_incremental`]), then, once a child is
/// ready, where the Services point and the promotion (`reconcilePromotionAndServingStatus`).
/// Returns the serving child and whether the pending one serves.
fn promote_incremental<'a>(
    ctx: &Ctx<'_>,
    rs: &RayService,
    status: &mut RayServiceStatus,
    clusters: (Option<&'a RayCluster>, Option<&'a RayCluster>),
    (a_name, p_name): (&str, &str),
    ready: &Readiness,
) -> (Option<&'a RayCluster>, bool) {
    let (active, pending) = clusters;
    let mut pending_serving = false;
    let mut serving = active;
    let any_ready = ready.pending_ready || ready.active_ready;
    let u = step_incremental(ctx, rs, status, clusters, ready.upgrading, any_ready);
    if any_ready {
        // the Services point at the active child during the upgrade (each child has its
        // own Serve Service behind the HTTPRoute), else at the ready pending one
        let points_to = if ready.pending_ready && !ready.upgrading {
            p_name
        } else {
            a_name
        };
        // reconcilePromotionAndServingStatus, incremental: promote once the active capacity
        // is 0 and the pending child takes all traffic; a first cluster at once
        let promote = if ready.upgrading {
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
    (serving, pending_serving)
}

/// NewCluster's serving, with a ready child: the head and serve Services point at the ready
/// cluster; when that is not the active one, `reconcilePromotionAndServingStatus` promotes the
/// pending cluster. Returns the serving child and whether the pending one serves.
fn promote_ready<'a>(
    ctx: &Ctx<'_>,
    status: &mut RayServiceStatus,
    (active, pending): (Option<&'a RayCluster>, Option<&'a RayCluster>),
    (a_name, p_name): (&str, &str),
    ready: &Readiness,
) -> (Option<&'a RayCluster>, bool) {
    let mut serving = active;
    let target = if ready.pending_ready { pending } else { active };
    let points_to = target.map(ResourceExt::name_any).unwrap_or_default();
    if a_name != points_to {
        tracing::info!(service = %ctx.full(&ctx.name), old = %a_name, new = %p_name, "promoting the pending RayCluster to active");
        status.active_service_status = status.pending_service_status.take();
        serving = pending;
    }
    (serving, points_to == p_name)
}

/// A new pending cluster's name in `status` (an incremental upgrade's also its starting target
/// capacity).
fn prepare_pending(ctx: &Ctx<'_>, status: &mut RayServiceStatus, incremental: bool) {
    let new_name = generate_cluster_name(&ctx.name, ctx.shared.now(), ctx.shared.next_name_seq());
    tracing::info!(service = %ctx.full(&ctx.name), cluster = %new_name, "preparing a new pending RayCluster");
    let mut slot = RayServiceClusterStatus {
        ray_cluster_name: Some(new_name),
        ..Default::default()
    };
    if incremental {
        // a first cluster starts at full capacity, an upgrade's pending one at 0
        let first = active_name(status).is_empty()
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

/// The serve endpoints: the serving child's once an active one has served, and during an
/// incremental upgrade the ready pending child's too.
fn serve_endpoint_count(
    ctx: &Ctx<'_>,
    rs: &RayService,
    status: &RayServiceStatus,
    serving: Option<&RayCluster>,
    (active, pending): (Option<&RayCluster>, Option<&RayCluster>),
    ready: &Readiness,
) -> i32 {
    // the serve Service selects the active cluster's pods once one has served
    let mut endpoints = match serving {
        Some(c) if !active_name(status).is_empty() && ctx.shared.is_ready(c) => {
            serve_endpoints(rs, c)
        }
        _ => 0,
    };
    // "During NewClusterWithIncrementalUpgrade, the pending RayCluster is also serving."
    if ready.incremental
        && active.is_some()
        && let Some(p) = pending.filter(|p| ctx.shared.is_ready(p))
        && !pending_name(status).is_empty()
    {
        endpoints = endpoints.saturating_add(serve_endpoints(rs, p));
    }
    endpoints
}
