//! Status values from admission decisions, as Kueue writes them: Workload conditions
//! (`QuotaReserved`, `Admitted`, `Evicted`, `Preempted`, `Requeued`, `Finished`) and
//! `status.admission`, and ClusterQueue / LocalQueue usage status. Pure: the caller applies them.
//!
//! Conditions follow `meta.SetStatusCondition`: `lastTransitionTime` moves only when the status
//! flips; reason, message and `observedGeneration` are always refreshed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::{ClusterQueueUsage, Decision, LocalQueueUsage, PendingMessage};
use crate::conditions;
use crate::types::kueue::{
    ClusterQueueStatus, LocalQueueFlavorUsage, LocalQueueResourceUsage, LocalQueueStatus,
    WorkloadStatus, condition, reason,
};

/// Message of a preemption inside the preemptor's ClusterQueue (Kueue's wording).
pub const PREEMPTED_IN_CLUSTER_QUEUE: &str = "due to prioritization in the ClusterQueue";
/// Message of a preemption that reclaims quota lent to the cohort.
pub const PREEMPTED_IN_COHORT: &str = "due to reclamation within the cohort";

/// Sets a True condition to False with `reason` and "Previously: <message>" (Kueue's reset of
/// `Evicted`/`Preempted` on a new reservation).
fn reset(
    conds: &mut [Condition],
    type_: &str,
    reason: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    if let Some(c) = conds
        .iter_mut()
        .find(|c| c.type_ == type_ && c.status == "True")
    {
        c.status = "False".to_string();
        c.reason = reason.to_string();
        c.message = format!("Previously: {}", c.message);
        c.observed_generation = generation;
        c.last_transition_time = Time(now);
    }
}

/// Applies a Pending decision in place (the hot path of a busy queue: no clone of the status).
/// Returns whether anything changed.
pub(crate) fn apply_pending_in_place(
    status: &mut WorkloadStatus,
    generation: Option<i64>,
    reason: &str,
    message: &PendingMessage,
    now: Timestamp,
) -> bool {
    if pending_unchanged(Some(status), generation, reason, message) {
        return false;
    }
    conditions::set(
        &mut status.conditions,
        condition::QUOTA_RESERVED,
        "False",
        reason,
        &message.to_string(),
        generation,
        now,
    );
    true
}

/// True when applying a Pending decision would change nothing (the common case, checked cheaply:
/// the message is compared without being formatted).
pub fn pending_unchanged(
    status: Option<&WorkloadStatus>,
    generation: Option<i64>,
    reason: &str,
    message: &PendingMessage,
) -> bool {
    status
        .and_then(|s| conditions::find(&s.conditions, condition::QUOTA_RESERVED))
        .is_some_and(|c| {
            c.status == "False"
                && c.reason == reason
                && c.observed_generation == generation
                && message.is(&c.message)
        })
}

/// The Workload status after `decision`. An eviction keeps `status.admission` and
/// `QuotaReserved=True` (the quota is held until the Workload's pods are gone; see
/// [`release_quota`]), as Kueue does.
pub fn apply_decision(
    status: Option<&WorkloadStatus>,
    generation: Option<i64>,
    decision: &Decision,
    now: Timestamp,
) -> WorkloadStatus {
    let mut s = status.cloned().unwrap_or_default();
    let c = &mut s.conditions;
    match decision {
        Decision::Admit { admission, .. } => {
            set_reserved(c, &admission.cluster_queue, generation, now);
            s.admission = Some(admission.clone());
        }
        Decision::Pending {
            reason, message, ..
        } => {
            conditions::set(
                c,
                condition::QUOTA_RESERVED,
                "False",
                reason,
                &message.to_string(),
                generation,
                now,
            );
        }
        Decision::Evict {
            reason: why,
            message,
            ..
        } => set_evicted(c, why, message, generation, now),
        Decision::FinishReplaced { replaced_by, .. } => {
            conditions::set(
                c,
                condition::FINISHED,
                "True",
                reason::WORKLOAD_SLICE_REPLACED,
                &format!("Replaced by workload slice {replaced_by}"),
                generation,
                now,
            );
        }
    }
    s
}

/// `QuotaReserved=True` and `Admitted=True` in `cluster_queue`; a past eviction or preemption is
/// reset to False ("Previously: ...").
fn set_reserved(
    c: &mut Vec<Condition>,
    cluster_queue: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    let message = format!("Quota reserved in ClusterQueue {cluster_queue}");
    conditions::set(
        c,
        condition::QUOTA_RESERVED,
        "True",
        reason::QUOTA_RESERVED,
        &message,
        generation,
        now,
    );
    conditions::set(
        c,
        condition::ADMITTED,
        "True",
        reason::ADMITTED,
        "The workload is admitted",
        generation,
        now,
    );
    for type_ in [condition::EVICTED, condition::PREEMPTED] {
        reset(c, type_, reason::QUOTA_RESERVED, generation, now);
    }
}

/// `Evicted=True` with `why`; a preemption also sets `Preempted=True` with Kueue's kind of
/// preemption (read from the message).
fn set_evicted(
    c: &mut Vec<Condition>,
    why: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    conditions::set(c, condition::EVICTED, "True", why, message, generation, now);
    if why == reason::PREEMPTED {
        let kind = if message.contains(PREEMPTED_IN_COHORT) {
            "InCohortReclamation"
        } else {
            "InClusterQueue"
        };
        conditions::set(
            c,
            condition::PREEMPTED,
            "True",
            kind,
            message,
            generation,
            now,
        );
    }
}

/// The status once an evicted Workload's pods are gone: the reservation is released and the
/// Workload is requeued (`QuotaReserved=False`, `Admitted=False`, `Requeued=True`, no admission).
pub fn release_quota(
    status: Option<&WorkloadStatus>,
    generation: Option<i64>,
    now: Timestamp,
) -> WorkloadStatus {
    let mut s = status.cloned().unwrap_or_default();
    let (why, message) = conditions::find(&s.conditions, condition::EVICTED)
        .filter(|c| c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_else(|| (reason::PENDING.to_string(), "Quota released".to_string()));
    let c = &mut s.conditions;
    conditions::set(
        c,
        condition::QUOTA_RESERVED,
        "False",
        reason::PENDING,
        &message,
        generation,
        now,
    );
    if conditions::find(c, condition::ADMITTED).is_some() {
        conditions::set(
            c,
            condition::ADMITTED,
            "False",
            "NoReservation",
            "The workload has no reservation",
            generation,
            now,
        );
    }
    conditions::set(
        c,
        condition::REQUEUED,
        "True",
        &why,
        &message,
        generation,
        now,
    );
    s.admission = None;
    s
}

/// The status of a Workload that finished (`Finished=True` with `reason`); it holds no quota.
pub fn finish(
    status: Option<&WorkloadStatus>,
    generation: Option<i64>,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> WorkloadStatus {
    let mut s = status.cloned().unwrap_or_default();
    conditions::set(
        &mut s.conditions,
        condition::FINISHED,
        "True",
        reason,
        message,
        generation,
        now,
    );
    s
}

/// A ClusterQueue's status from its usage row (`flavorsUsage` equals `flavorsReservation`:
/// raygate has no admission checks).
pub fn cluster_queue_status(
    usage: &ClusterQueueUsage,
    previous: Option<&ClusterQueueStatus>,
    generation: Option<i64>,
    now: Timestamp,
) -> ClusterQueueStatus {
    let mut s = previous.cloned().unwrap_or_default();
    let (active, message) = match &usage.active {
        Ok(()) => (true, "Can admit new workloads"),
        Err(m) => (false, m.as_str()),
    };
    // a condition's reason must not be empty (the API server rejects it)
    let reason = match usage.active_reason.as_str() {
        "" => "Ready",
        r => r,
    };
    conditions::set(
        &mut s.conditions,
        "Active",
        if active { "True" } else { "False" },
        reason,
        message,
        generation,
        now,
    );
    s.flavors_reservation = usage.reservation.clone();
    s.flavors_usage = usage.reservation.clone();
    s.pending_workloads = Some(usage.pending);
    s.reserving_workloads = Some(usage.reserving);
    s.admitted_workloads = Some(usage.admitted);
    s
}

/// A LocalQueue's status from its usage row.
pub fn local_queue_status(
    usage: &LocalQueueUsage,
    previous: Option<&LocalQueueStatus>,
    generation: Option<i64>,
    now: Timestamp,
) -> LocalQueueStatus {
    let mut s = previous.cloned().unwrap_or_default();
    let (active, reason, message) = match &usage.active {
        Ok(()) => (true, "Ready", "Can submit new workloads to localQueue"),
        Err(m) => (false, "Inactive", m.as_str()),
    };
    conditions::set(
        &mut s.conditions,
        "Active",
        if active { "True" } else { "False" },
        reason,
        message,
        generation,
        now,
    );
    s.flavors_reservation = usage.reservation.clone();
    s.flavors_usage = usage
        .reservation
        .iter()
        .map(|f| LocalQueueFlavorUsage {
            name: f.name.clone(),
            resources: f
                .resources
                .iter()
                .map(|r| LocalQueueResourceUsage {
                    name: r.name.clone(),
                    total: r.total.clone(),
                })
                .collect(),
        })
        .collect();
    s.pending_workloads = Some(usage.pending);
    s.reserving_workloads = Some(usage.reserving);
    s.admitted_workloads = Some(usage.admitted);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::find;
    use crate::types::kueue::Admission;
    use crate::workload::{holds_quota, is_evicted, is_finished};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn cond<'a>(s: &'a WorkloadStatus, type_: &str) -> &'a Condition {
        conditions::find(&s.conditions, type_).unwrap()
    }

    #[test]
    fn pending_then_admitted_then_preempted_then_released() {
        let pending = Decision::Pending {
            workload: "ns/w".into(),
            reason: "Pending",
            message: "couldn't assign flavors".into(),
        };
        let s1 = apply_decision(None, Some(1), &pending, t(10));
        assert_eq!(cond(&s1, "QuotaReserved").status, "False");
        // the same decision again: nothing moves, not even the time
        let s2 = apply_decision(Some(&s1), Some(1), &pending, t(20));
        assert_eq!(s1, s2);
        assert!(pending_unchanged(
            Some(&s1),
            Some(1),
            "Pending",
            &"couldn't assign flavors".into()
        ));

        let admit = Decision::Admit {
            workload: "ns/w".into(),
            admission: Admission {
                cluster_queue: "cq".into(),
                pod_set_assignments: vec![],
            },
        };
        let s3 = apply_decision(Some(&s2), Some(1), &admit, t(30));
        assert!(holds_quota(Some(&s3)));
        assert_eq!(cond(&s3, "QuotaReserved").last_transition_time, Time(t(30)));
        assert_eq!(cond(&s3, "Admitted").reason, "Admitted");

        let evict = Decision::Evict {
            workload: "ns/w".into(),
            reason: "Preempted".into(),
            message: format!("Preempted to accommodate a workload (ns/x) {PREEMPTED_IN_COHORT}"),
        };
        let s4 = apply_decision(Some(&s3), Some(2), &evict, t(40));
        assert!(is_evicted(Some(&s4)));
        assert!(
            holds_quota(Some(&s4)),
            "quota is held until the pods are gone"
        );
        assert_eq!(cond(&s4, "Preempted").reason, "InCohortReclamation");
        assert_eq!(cond(&s4, "Evicted").observed_generation, Some(2));

        let s5 = release_quota(Some(&s4), Some(2), t(50));
        assert!(!holds_quota(Some(&s5)));
        assert_eq!(cond(&s5, "Requeued").reason, "Preempted");
        assert_eq!(cond(&s5, "Admitted").status, "False");

        let s6 = apply_decision(Some(&s5), Some(2), &admit, t(60));
        assert_eq!(cond(&s6, "Evicted").status, "False");
        assert!(cond(&s6, "Evicted").message.starts_with("Previously: "));
        assert_eq!(cond(&s6, "Preempted").status, "False");
    }

    #[test]
    fn replaced_slice_is_finished_with_the_kueue_reason() {
        let d = Decision::FinishReplaced {
            workload: "ns/old".into(),
            replaced_by: "ns/new".into(),
        };
        let s = apply_decision(None, None, &d, t(1));
        assert!(is_finished(Some(&s)));
        assert_eq!(cond(&s, "Finished").reason, "WorkloadSliceReplaced");
        assert_eq!(
            cond(&s, "Finished").message,
            "Replaced by workload slice ns/new"
        );
    }

    fn cq_usage(active: Result<(), String>, reason: &str) -> ClusterQueueUsage {
        ClusterQueueUsage {
            name: "cq".into(),
            reservation: vec![],
            pending: 1,
            reserving: 0,
            admitted: 0,
            active,
            active_reason: reason.into(),
        }
    }

    fn lq_usage(active: Result<(), String>) -> LocalQueueUsage {
        LocalQueueUsage {
            namespace: "ns".into(),
            name: "lq".into(),
            reservation: vec![],
            pending: 1,
            reserving: 0,
            admitted: 0,
            active,
        }
    }

    #[test]
    fn cluster_queue_active_moves_its_transition_time_only_when_the_status_flips() {
        let missing = |f: &str| {
            Err(format!(
                "ClusterQueue cq is inactive: flavor \"{f}\" not found"
            ))
        };
        let s1 = cluster_queue_status(
            &cq_usage(missing("a"), "FlavorNotFound"),
            None,
            Some(1),
            t(10),
        );
        let c1 = find(&s1.conditions, "Active").unwrap();
        assert_eq!(
            (c1.status.as_str(), c1.reason.as_str()),
            ("False", "FlavorNotFound")
        );
        assert_eq!(c1.last_transition_time, Time(t(10)));
        // only the message changes: the time stays, the message and generation are refreshed
        let s2 = cluster_queue_status(
            &cq_usage(missing("b"), "FlavorNotFound"),
            Some(&s1),
            Some(2),
            t(20),
        );
        let c2 = find(&s2.conditions, "Active").unwrap();
        assert_eq!(c2.last_transition_time, Time(t(10)));
        assert!(c2.message.contains("\"b\""), "{}", c2.message);
        assert_eq!(c2.observed_generation, Some(2));
        // the same usage again: nothing changes (the loop writes nothing)
        let s3 = cluster_queue_status(
            &cq_usage(missing("b"), "FlavorNotFound"),
            Some(&s2),
            Some(2),
            t(30),
        );
        assert_eq!(s3, s2);
        // it flips: now the time moves
        let s4 = cluster_queue_status(&cq_usage(Ok(()), "Ready"), Some(&s3), Some(2), t(40));
        let c4 = find(&s4.conditions, "Active").unwrap();
        assert_eq!((c4.status.as_str(), c4.reason.as_str()), ("True", "Ready"));
        assert_eq!(c4.last_transition_time, Time(t(40)));
        // an empty reason is never written
        let s5 = cluster_queue_status(&cq_usage(Ok(()), ""), None, None, t(50));
        assert_eq!(find(&s5.conditions, "Active").unwrap().reason, "Ready");
    }

    #[test]
    fn local_queue_status_carries_its_active_condition() {
        let inactive = Err("ClusterQueue cq doesn't exist".to_string());
        let s1 = local_queue_status(&lq_usage(inactive), None, Some(1), t(10));
        let c1 = find(&s1.conditions, "Active").unwrap();
        assert_eq!(
            (c1.status.as_str(), c1.reason.as_str()),
            ("False", "Inactive")
        );
        assert_eq!(c1.message, "ClusterQueue cq doesn't exist");
        assert_eq!(s1.pending_workloads, Some(1));
        let s2 = local_queue_status(&lq_usage(Ok(())), Some(&s1), Some(1), t(20));
        let c2 = find(&s2.conditions, "Active").unwrap();
        assert_eq!((c2.status.as_str(), c2.reason.as_str()), ("True", "Ready"));
        assert_eq!(c2.last_transition_time, Time(t(20)));
        assert_eq!(
            local_queue_status(&lq_usage(Ok(())), Some(&s2), Some(1), t(30)),
            s2
        );
    }
}
