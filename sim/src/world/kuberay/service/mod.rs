//! The RayService side: KubeRay v1.7's `RayServiceReconciler.Reconcile` (rayservice_controller.go)
//! for the NewCluster and the NewClusterWithIncrementalUpgrade strategies (the latter's numbers in
//! [`super::incremental`]), without Services, Gateway objects, Serve applications or the dashboard.
//!
//! Order, as upstream: skip when `managedBy` names another controller → clean up dangling children
//! (deletion delay, in-memory timers) → finalizer → `handleSuspend` → `reconcileRayCluster`
//! (create the pending child by name, update a child in place when worker groups were appended) →
//! readiness (emulated, see [`Shared::is_ready`]) → traffic switch and promotion →
//! `calculateStatus` (copy child statuses, prepare a new pending name, conditions).

/// The children a RayService wants.
mod children;
/// `reconcileRayCluster`.
mod clusters;
/// `calculateConditions`.
mod conditions;
/// One reconcile's context and API calls.
mod ctx;
/// `reconcileServe` and `calculateStatus`.
mod serving;
/// `handleSuspend`.
mod suspend;

use std::ops::ControlFlow;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::incremental::{self, Side, Upgrade};
use super::{
    EmulatorError, RAYSERVICE_FINALIZER, SERVICE_REQUEUE, Shared, managed_externally, requeue_at,
};
use children::pending_name;
use clusters::reconcile_clusters;
use conditions::is_initializing_timeout;
use ctx::Ctx;
use raygate::conditions::is_true;
use raygate::types::ray::{RayCluster, RayService};
use serving::serving_status;
use suspend::handle_suspend;

pub(crate) const READY: &str = "Ready";
pub(crate) const UPGRADE_IN_PROGRESS: &str = "UpgradeInProgress";
pub(crate) const ROLLBACK_IN_PROGRESS: &str = "RollbackInProgress";
pub(crate) const SUSPENDING: &str = "Suspending";
pub(crate) const SUSPENDED: &str = "Suspended";

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

    rs = match finalizer(&ctx, rs, has_to_clean, next_deletion).await? {
        ControlFlow::Break(action) => return Ok(action),
        ControlFlow::Continue(rs) => rs,
    };

    // handleSuspend, persisted on its own as upstream does
    let mut status = rs.status.clone().unwrap_or_default();
    handle_suspend(&ctx, &rs, &mut status).await?;
    rs = ctx.write_status(rs, status).await?;
    if let Some(action) = held(&shared, &rs, has_to_clean, next_deletion) {
        return Ok(action);
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

/// The finalizer: on a RayService being deleted, removed once no child is left to clean up
/// (else a look again at the next deletion); otherwise added when missing. Breaks with the
/// reconcile's answer, or continues with the fresh object.
async fn finalizer(
    ctx: &Ctx<'_>,
    rs: RayService,
    has_to_clean: bool,
    next_deletion: Option<Timestamp>,
) -> Result<ControlFlow<Action, RayService>, EmulatorError> {
    let finalizers = rs.finalizers().to_vec();
    if rs.metadata.deletion_timestamp.is_some() {
        if !has_to_clean && finalizers.iter().any(|f| f == RAYSERVICE_FINALIZER) {
            let rest = finalizers
                .into_iter()
                .filter(|f| f != RAYSERVICE_FINALIZER)
                .collect();
            ctx.set_finalizers(&rs, rest).await?;
            tracing::info!(service = %ctx.full(&ctx.name), "no RayClusters left; removed the finalizer");
            return Ok(ControlFlow::Break(Action::await_change()));
        }
        return Ok(ControlFlow::Break(requeue_at(
            next_deletion,
            ctx.shared.now(),
            SERVICE_REQUEUE,
        )));
    }
    if !finalizers.iter().any(|f| f == RAYSERVICE_FINALIZER) {
        let mut with = finalizers;
        with.push(RAYSERVICE_FINALIZER.to_string());
        return Ok(ControlFlow::Continue(ctx.set_finalizers(&rs, with).await?));
    }
    Ok(ControlFlow::Continue(rs))
}

/// The reconcile's answer when the RayService is held after `handleSuspend`: suspending or
/// suspended, or failed on its initializing timeout (terminal: only the clean-up runs; the user
/// must recreate the RayService). `None` when it goes on.
fn held(
    shared: &Shared,
    rs: &RayService,
    has_to_clean: bool,
    next_deletion: Option<Timestamp>,
) -> Option<Action> {
    let conditions = rs
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if is_true(&conditions, SUSPENDING) || is_true(&conditions, SUSPENDED) {
        return Some(requeue_at(next_deletion, shared.now(), SERVICE_REQUEUE));
    }
    if is_initializing_timeout(&conditions) {
        if has_to_clean {
            return Some(requeue_at(next_deletion, shared.now(), SERVICE_REQUEUE));
        }
        return Some(Action::await_change());
    }
    None
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
