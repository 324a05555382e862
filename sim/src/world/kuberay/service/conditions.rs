//! `calculateConditions`: `Ready` from the serve endpoints, `UpgradeInProgress` from the cluster
//! names, and the terminal initializing timeout.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::children::{active_name, pending_name};
use super::{READY, UPGRADE_IN_PROGRESS};
use raygate::conditions::{self, find, is_true};
use raygate::types::ray::RayServiceStatus;

/// `isInitializingTimeout`: `Ready=False/InitializingTimeout`, terminal.
pub(super) fn is_initializing_timeout(
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
pub(super) fn calculate_conditions(
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
