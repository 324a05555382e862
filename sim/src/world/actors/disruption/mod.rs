//! The disruption controller, after kubernetes `pkg/controller/disruption/disruption.go`
//! (`../shared/reference/eviction-pdb-drain.md` §2): per PodDisruptionBudget, the selected pods
//! (terminating and unready ones included), `expectedPods` and `desiredHealthy` from
//! `minAvailable`/`maxUnavailable` (int or percent, rounded up), the pods' controllers' scale
//! through ownerReferences (ReplicaSet, Deployment through its ReplicaSet, StatefulSet, then any
//! kind's `scale` subresource), `currentHealthy`, the pruned `disruptedPods` (2 min), the
//! `DisruptionAllowed` condition, and `failSafe` (`SyncFailed`, observedGeneration unchanged)
//! when the expected count cannot be computed — e.g. a RayCluster, which has no `scale`.
//!
//! [`decide`] is the pure sync; [`run`] is the IO loop, which reacts to pod, PDB and workload
//! changes after [`Config::lag`] (the controller's reaction lag: its informers and queue).

/// The controller's IO loop.
mod controller;
/// `expectedPods` and `desiredHealthy`.
mod expected;
/// A PDB's pods.
mod pods;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub use controller::run;
pub use expected::{controller_scale, expected_pod_count, expected_scale, scaled_value};
pub use pods::{
    STALE_POD_DISRUPTION_TIMEOUT, count_healthy, disrupted_pod_map, multiple_budgets, pods_for,
    reset_disruption_target, stale_disruption_target,
};

/// `DeletionTimeout`: how long an eviction's `disruptedPods` entry keeps a pod out of
/// `currentHealthy` while the pod is not seen deleting.
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// A pod controller's answer to the `scale` finder (`getScaleController`).
#[derive(Clone, Debug, PartialEq)]
pub enum ScaleAnswer {
    /// The Scale's uid and `spec.replicas`.
    Scale { uid: String, replicas: i32 },
    /// The object is gone (or the kind serves `scale` but this one is not found): no controller.
    NotFound,
    /// An error the finder returns, e.g. "rayclusters.ray.io does not implement the scale
    /// subresource" or the RESTMapper's "no matches for kind ...".
    Error(String),
}

/// `(namespace, apiVersion, kind, name)` of a pod controller.
pub type ScaleKey = (String, String, String, String);

/// The workloads the finders read (listers in Kubernetes), and the `scale` answers for
/// controllers of other kinds, keyed by [`ScaleKey`].
#[derive(Clone, Debug, Default)]
pub struct Workloads {
    pub replicasets: Vec<ReplicaSet>,
    pub deployments: Vec<Deployment>,
    pub statefulsets: Vec<StatefulSet>,
    pub scales: BTreeMap<ScaleKey, ScaleAnswer>,
}

/// An Event the sync publishes.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    /// `None`: on the PDB; `Some(pod)`: on that pod.
    pub pod: Option<String>,
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// One sync's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The status to write; `None` when the stored one is up to date.
    pub status: Option<PodDisruptionBudgetStatus>,
    pub notes: Vec<Note>,
    /// When a `disruptedPods` entry expires (`recheckQueue.AddAfter`).
    pub recheck_at: Option<Timestamp>,
    /// The failSafe error, if the sync failed.
    pub failed: Option<String>,
}

/// `apimeta.SetStatusCondition`: `lastTransitionTime` moves only when the status changes.
fn set_condition(conditions: &mut Vec<Condition>, mut c: Condition) {
    match conditions.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) => {
            if x.status != c.status {
                x.status = c.status;
                x.last_transition_time = c.last_transition_time;
            }
            x.reason = c.reason;
            x.message = c.message;
            x.observed_generation = c.observed_generation;
        }
        None => {
            c.last_transition_time = c.last_transition_time.clone();
            conditions.push(c);
        }
    }
}

fn allowed_condition(
    status: &PodDisruptionBudgetStatus,
    reason: &str,
    message: String,
    now: Timestamp,
) -> Condition {
    let ok = reason == "SufficientPods";
    Condition {
        type_: "DisruptionAllowed".into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        observed_generation: status.observed_generation,
        last_transition_time: Time(Timestamp::from_second(now.as_second()).unwrap_or(now)),
    }
}

/// `pdbhelper.ConditionsAreUpToDate`.
fn conditions_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = &pdb.status else {
        return false;
    };
    let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed")
    else {
        return false;
    };
    if status.observed_generation != pdb.metadata.generation {
        return false;
    }
    if status.disruptions_allowed.unwrap_or(0) > 0 {
        c.status == "True" && c.reason == "SufficientPods"
    } else {
        c.status == "False" && c.reason == "InsufficientPods"
    }
}

/// One PDB's sync (`trySync`, and `failSafe` when it fails). `pods` are the pods the PDB
/// selects.
pub fn decide(pdb: &PodDisruptionBudget, pods: &[Pod], w: &Workloads, now: Timestamp) -> Decision {
    let mut notes = vec![];
    if pods.is_empty() {
        notes.push(Note {
            pod: None,
            type_: "Normal",
            reason: "NoPods",
            message: "No matching pods found".into(),
        });
    }
    let old = pdb.status.clone().unwrap_or_default();
    let (expected, desired, unmanaged) = match expected_pod_count(pdb, pods, w) {
        Ok(x) => x,
        Err(e) => return fail_safe(&old, notes, e, now),
    };
    if !unmanaged.is_empty() {
        notes.push(unmanaged_pods(pdb));
    }
    let (disrupted, recheck_at, expired) = disrupted_pod_map(pdb, pods, now);
    notes.extend(expired);
    let healthy = count_healthy(pods, &disrupted, now);
    let allowed = if expected <= 0 || healthy - desired <= 0 {
        0
    } else {
        healthy - desired
    };
    let old_disrupted = old.disrupted_pods.clone().unwrap_or_default();
    let up_to_date = old.current_healthy == Some(healthy)
        && old.desired_healthy == Some(desired)
        && old.expected_pods == Some(expected)
        && old.disruptions_allowed == Some(allowed)
        && old_disrupted == disrupted
        && old.observed_generation == pdb.metadata.generation
        && conditions_up_to_date(pdb);
    if up_to_date {
        return Decision {
            status: None,
            notes,
            recheck_at,
            failed: None,
        };
    }
    let mut status = PodDisruptionBudgetStatus {
        current_healthy: Some(healthy),
        desired_healthy: Some(desired),
        expected_pods: Some(expected),
        disruptions_allowed: Some(allowed),
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        observed_generation: pdb.metadata.generation,
        conditions: None,
    };
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let reason = if allowed > 0 {
        "SufficientPods"
    } else {
        "InsufficientPods"
    };
    set_condition(
        &mut conditions,
        allowed_condition(&status, reason, String::new(), now),
    );
    status.conditions = Some(conditions);
    Decision {
        status: Some(status),
        notes,
        recheck_at,
        failed: None,
    }
}

/// `failSafe`: the expected count failed with `e`: no disruption allowed, `SyncFailed`, the
/// Warning after `notes`.
fn fail_safe(
    old: &PodDisruptionBudgetStatus,
    mut notes: Vec<Note>,
    e: String,
    now: Timestamp,
) -> Decision {
    notes.push(Note {
        pod: None,
        type_: "Warning",
        reason: "CalculateExpectedPodCountFailed",
        message: format!("Failed to calculate the number of expected pods: {e}"),
    });
    let mut status = old.clone();
    status.disruptions_allowed = Some(0);
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_condition(
        &mut conditions,
        allowed_condition(&status, "SyncFailed", e.clone(), now),
    );
    status.conditions = Some(conditions);
    Decision {
        status: (status != *old).then_some(status),
        notes,
        recheck_at: None,
        failed: Some(e),
    }
}

/// The Warning for selected pods without a controller.
fn unmanaged_pods(pdb: &PodDisruptionBudget) -> Note {
    Note {
        pod: None,
        type_: "Warning",
        reason: "UnmanagedPods",
        message: format!(
            "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.",
            pdb.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| serde_json::to_string(s).ok())
                .unwrap_or_default()
        ),
    }
}

/// The controller's knobs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Reaction lag: after a change, the controller waits this long before it syncs (its
    /// informers' and queue's delay). A PDB's status therefore trails the pods by about this.
    pub lag: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lag: Duration::from_millis(100),
        }
    }
}

/// The disruption controller's failing steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status of PodDisruptionBudget {namespace}/{name}: {source}")]
    WriteStatus {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

#[cfg(test)]
mod tests;
