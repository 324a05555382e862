//! The `PodsReady` condition of a RayService's covering slice (pure).
//!
//! Kueue v0.19 enables `waitForPodsReady` by default and evicts an admitted Workload whose
//! `PodsReady` never turns `True`. Kueue's own job integrations write it; raygate owns these
//! Workloads, so it writes it the way `jobframework.generatePodsReadyCondition` does, with
//! Kueue's RayCluster integration's readiness (`status.state == ready`) for each released child.
//!
//! Kueue evicts the whole Workload when `PodsReady` stays `False` past the timeout
//! (`pkg/controller/core/workload_controller.go`, `reconcileNotReadyTimeout`), and once a
//! replacement slice is admitted the slice it replaces is finished (`pkg/scheduler/scheduler.go`,
//! `replaceWorkloadSlice`): during an upgrade the covering slice is the serving child's only
//! coverage. So while KubeRay names an active (serving) child that runs, `PodsReady` follows that
//! child alone: a pending child that never gets ready (a bad new image) never makes the covering
//! slice time out. KubeRay keeps serving from the active child and retries the pending one; the
//! upgrade's fate is KubeRay's, not Kueue's.

use std::collections::BTreeSet;

use crate::types::kueue::{Workload, condition};
use crate::types::ray::RayCluster;
use crate::{meta, workload};

/// Kueue's reasons (`kueue.WorkloadStarted`, `WorkloadRecovered`, `WorkloadWaitForStart`,
/// `WorkloadWaitForRecovery`) and messages.
pub mod reason {
    pub const STARTED: &str = "Started";
    pub const RECOVERED: &str = "Recovered";
    pub const WAIT_FOR_START: &str = "WaitForStart";
    pub const WAIT_FOR_RECOVERY: &str = "WaitForRecovery";
    pub const READY_MESSAGE: &str = "All pods reached readiness and the workload is running";
    pub const NOT_READY_MESSAGE: &str = "Not all pods are ready or succeeded";
    pub const RECOVERY_MESSAGE: &str = "At least one pod has failed, waiting for recovery";
}

/// The `PodsReady` condition one slice should carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodsReady {
    /// The slice's name.
    pub slice: String,
    pub ready: bool,
    pub reason: &'static str,
    pub message: &'static str,
}

impl PodsReady {
    /// Whether `w` already carries this condition (status and reason).
    pub fn is_set_on(&self, w: &Workload) -> bool {
        current(w).is_some_and(|c| {
            c.status == if self.ready { "True" } else { "False" } && c.reason == self.reason
        })
    }
}

fn current(w: &Workload) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition::PODS_READY)
}

/// The slice whose admission lets the children run: the admitted live slice no other admitted
/// live slice replaces (the newest by creation time and name if the links do not tell).
pub fn covering_slice(workloads: &[Workload]) -> Option<&Workload> {
    let admitted: Vec<&Workload> = workloads
        .iter()
        .filter(|w| {
            !workload::is_finished(w.status.as_ref()) && workload::is_admitted(w.status.as_ref())
        })
        .collect();
    let replaced: BTreeSet<String> = admitted
        .iter()
        .filter_map(|w| workload::predecessor(w))
        .collect();
    admitted
        .iter()
        .copied()
        .filter(|w| !replaced.contains(&meta::key(&w.metadata)))
        .max_by_key(|w| {
            (
                w.metadata.creation_timestamp.as_ref().map(|t| t.0),
                w.metadata.name.clone(),
            )
        })
}

/// Kueue's RayCluster integration: a cluster's pods are ready when `status.state == ready`.
fn is_ready(c: &RayCluster) -> bool {
    c.status.as_ref().and_then(|s| s.state.as_deref()) == Some("ready")
}

/// `PodsReady` for the covering slice of `workloads`, given the RayService's live children, those
/// just released (their unsuspend may not show in `children` yet) and the child KubeRay names
/// active (`serving`); `None` when no slice is admitted. The children that count: the serving
/// child when it is released and live, else every released (unsuspended or just released, not
/// deleting) child. `True` once they all are ready and at least one counts; else `False`,
/// `WaitForStart` until it was first ready, `WaitForRecovery` after.
pub fn decide(
    children: &[&RayCluster],
    just_released: &BTreeSet<String>,
    serving: Option<&str>,
    workloads: &[Workload],
) -> Option<PodsReady> {
    let slice = covering_slice(workloads)?;
    let released: Vec<&&RayCluster> = children
        .iter()
        .filter(|c| {
            (c.spec.suspend != Some(true)
                || c.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| just_released.contains(n)))
                && c.metadata.deletion_timestamp.is_none()
        })
        .collect();
    let is_serving = |c: &&&RayCluster| serving.is_some() && c.metadata.name.as_deref() == serving;
    let counted: Vec<&&RayCluster> = if released.iter().any(is_serving) {
        released.into_iter().filter(|c| is_serving(c)).collect()
    } else {
        released
    };
    let ready = !counted.is_empty() && counted.iter().all(|c| is_ready(c));
    let previous = current(slice);
    let was = |r: &str| previous.is_some_and(|c| c.reason == r);
    let (reason, message) = if ready {
        if was(reason::WAIT_FOR_RECOVERY) || was(reason::RECOVERED) {
            (reason::RECOVERED, reason::READY_MESSAGE)
        } else {
            (reason::STARTED, reason::READY_MESSAGE)
        }
    } else if previous.is_some_and(|c| c.status == "True") || was(reason::WAIT_FOR_RECOVERY) {
        (reason::WAIT_FOR_RECOVERY, reason::RECOVERY_MESSAGE)
    } else {
        (reason::WAIT_FOR_START, reason::NOT_READY_MESSAGE)
    };
    Some(PodsReady {
        slice: slice.metadata.name.clone().unwrap_or_default(),
        ready,
        reason,
        message,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use k8s_openapi::jiff::Timestamp;
    use raygate_testing::{
        MetaBuilder, PodSetBuilder, RayClusterBuilder, RayClusterSpecBuilder, WorkloadBuilder,
        admit_counts, condition, podset, ray_cluster, workload,
    };

    use super::{PodsReady, reason};
    use crate::types::kueue::{WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION, Workload};
    use crate::types::ray::RayCluster;

    pub(super) fn slice(
        name: &str,
        second: i64,
        admitted: bool,
        replaces: Option<&str>,
    ) -> Workload {
        let t: Timestamp = format!("2026-01-01T00:00:{second:02}Z")
            .parse()
            .expect("time");
        let status = if admitted { "True" } else { "False" };
        let annotations = replaces
            .map(|r| {
                (
                    WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION.to_string(),
                    r.to_string(),
                )
            })
            .into_iter()
            .collect();
        let mut w = workload(name)
            .in_namespace("ns")
            .queue("lq")
            .podset(podset("head").template(PodTemplateSpec::default()))
            .created_at(t)
            .annotations(annotations);
        admit_counts(&mut w); // then the conditions say whether it is admitted, at `t`
        w.condition(condition("QuotaReserved", status, "QuotaReserved", t))
            .condition(condition("Admitted", status, "Admitted", t))
    }

    fn with_pods_ready(w: Workload, status: &str, reason: &str) -> Workload {
        let t: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        w.condition(condition("PodsReady", status, reason, t))
    }

    fn child(name: &str, suspend: bool, state: Option<&str>) -> RayCluster {
        let c = ray_cluster(name).in_namespace("ns").suspend(suspend);
        match state {
            Some(s) => c.state(s),
            None => c,
        }
    }

    fn decide(children: &[&RayCluster], workloads: &[Workload]) -> Option<PodsReady> {
        super::decide(children, &BTreeSet::new(), None, workloads)
    }

    fn expect(slice: &str, ready: bool, reason: &'static str) -> Option<PodsReady> {
        Some(PodsReady {
            slice: slice.into(),
            ready,
            reason,
            message: if ready {
                reason::READY_MESSAGE
            } else if reason == reason::WAIT_FOR_START {
                reason::NOT_READY_MESSAGE
            } else {
                reason::RECOVERY_MESSAGE
            },
        })
    }

    #[test]
    fn no_admitted_slice_means_no_condition() {
        let running = child("a", false, Some("ready"));
        assert_eq!(decide(&[&running], &[slice("s1", 1, false, None)]), None);
    }

    #[test]
    fn an_admitted_slice_waits_for_start_until_every_released_child_is_ready() {
        let s = [slice("s1", 1, true, None)];
        let held = child("a", true, None);
        assert_eq!(
            decide(&[&held], &s),
            expect("s1", false, reason::WAIT_FOR_START)
        );
        let starting = child("a", false, None);
        assert_eq!(
            decide(&[&starting], &s),
            expect("s1", false, reason::WAIT_FOR_START)
        );
        let ready = child("a", false, Some("ready"));
        assert_eq!(decide(&[&ready], &s), expect("s1", true, reason::STARTED));
        // a held (suspended) sibling does not count: it has no pods
        assert_eq!(
            decide(&[&ready, &held], &s),
            expect("s1", true, reason::STARTED)
        );
        // a released sibling not ready yet does
        assert_eq!(
            decide(&[&ready, &starting], &s),
            expect("s1", false, reason::WAIT_FOR_START)
        );
    }

    #[test]
    fn after_being_ready_it_waits_for_recovery_then_recovers() {
        let not_ready = child("a", false, Some("suspended"));
        let ready = child("a", false, Some("ready"));
        let was_ready = [with_pods_ready(
            slice("s1", 1, true, None),
            "True",
            reason::STARTED,
        )];
        assert_eq!(
            decide(&[&not_ready], &was_ready),
            expect("s1", false, reason::WAIT_FOR_RECOVERY)
        );
        let recovering = [with_pods_ready(
            slice("s1", 1, true, None),
            "False",
            reason::WAIT_FOR_RECOVERY,
        )];
        assert_eq!(
            decide(&[&ready], &recovering),
            expect("s1", true, reason::RECOVERED)
        );
    }

    #[test]
    fn the_covering_slice_is_the_replacement_even_when_created_in_the_same_second() {
        let ready = child("a", false, Some("ready"));
        // "s-a" sorts before "s-b", but "s-a" replaces "s-b": the links decide, not names
        let ws = [
            slice("s-b", 5, true, None),
            slice("s-a", 5, true, Some("ns/s-b")),
        ];
        assert_eq!(decide(&[&ready], &ws), expect("s-a", true, reason::STARTED));
    }

    #[test]
    fn a_child_released_in_this_reconcile_counts_as_not_ready_yet() {
        // the upgrade's replacement slice was admitted; the pending child is released now
        let s = [slice("s2", 2, true, Some("ns/s1"))];
        let active = child("a", false, Some("ready"));
        let pending = child("b", true, None);
        let none = BTreeSet::new();
        let just: BTreeSet<String> = ["b".to_string()].into();
        assert!(super::decide(&[&active, &pending], &none, None, &s).is_some_and(|p| p.ready));
        let p = super::decide(&[&active, &pending], &just, None, &s).expect("a condition");
        assert!(!p.ready);
        assert_eq!(p.reason, reason::WAIT_FOR_START);
    }

    #[test]
    fn during_an_upgrade_only_the_serving_child_counts() {
        // the replacement slice covers both; the new image never gets ready
        let s = [with_pods_ready(
            slice("s2", 2, true, Some("ns/s1")),
            "True",
            reason::STARTED,
        )];
        let active = child("a", false, Some("ready"));
        let failing = child("b", false, Some("failed"));
        let none = BTreeSet::new();
        assert_eq!(
            super::decide(&[&active, &failing], &none, Some("a"), &s),
            expect("s2", true, reason::STARTED)
        );
        // the serving child failing is the service's own failure: Kueue may evict
        let down = child("a", false, Some("failed"));
        assert_eq!(
            super::decide(&[&down, &failing], &none, Some("a"), &s),
            expect("s2", false, reason::WAIT_FOR_RECOVERY)
        );
        // an active name that is not a released live child (the first deploy, or promoted
        // and gone): every released child counts
        assert_eq!(
            super::decide(&[&failing], &none, Some("a"), &s),
            expect("s2", false, reason::WAIT_FOR_RECOVERY)
        );
    }
}
