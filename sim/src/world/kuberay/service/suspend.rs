//! `handleSuspend`: the suspend state machine of a RayService (Suspending, then Suspended once
//! every child is gone; resumed when `spec.suspend` goes false).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use super::ctx::Ctx;
use super::{READY, ROLLBACK_IN_PROGRESS, SUSPENDED, SUSPENDING, UPGRADE_IN_PROGRESS};
use crate::world::kuberay::EmulatorError;
use crate::world::kuberay::status::remove_condition;
use raygate::conditions::{self, is_true};
use raygate::types::ray::{RayService, RayServiceStatus};

/// `handleSuspend`: mutates `status`; returns nothing, the caller persists it.
pub(super) async fn handle_suspend(
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
    no_upgrade_or_rollback(c, reason, g, now);
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
    no_upgrade_or_rollback(c, reason, g, now);
}

/// `UpgradeInProgress` and `RollbackInProgress` False for `reason`, as a suspend sets them.
fn no_upgrade_or_rollback(c: &mut Vec<Condition>, reason: &str, g: Option<i64>, now: Timestamp) {
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
