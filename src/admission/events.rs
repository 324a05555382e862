//! The Events Kueue records on a Workload for an admission decision, for the decisions raygate's
//! builtin loop writes.

use super::Decision;
use crate::events::{Event, EventType};

/// The Events Kueue records on a Workload for an admission decision raygate's builtin loop wrote:
/// `QuotaReserved` and `Admitted` on admission, `Preempted` (Warning) or `Evicted` (Warning, the
/// reason in the message) on eviction. Pending decisions and finished slices leave conditions only.
pub fn admission_events(d: &Decision) -> Vec<Event> {
    let ev = |type_, reason, message: String| Event {
        type_,
        reason,
        message,
        child: None,
    };
    match d {
        Decision::Admit { admission, .. } => vec![
            ev(
                EventType::Normal,
                "QuotaReserved",
                format!("Quota reserved in ClusterQueue {}", admission.cluster_queue),
            ),
            ev(
                EventType::Normal,
                "Admitted",
                format!("Admitted by ClusterQueue {}", admission.cluster_queue),
            ),
        ],
        Decision::Evict {
            reason, message, ..
        } if reason == "Preempted" => vec![ev(EventType::Warning, "Preempted", message.clone())],
        Decision::Evict {
            reason, message, ..
        } => vec![ev(
            EventType::Warning,
            "Evicted",
            format!("{reason}: {message}"),
        )],
        Decision::Pending { .. } | Decision::FinishReplaced { .. } => vec![],
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn admitting_and_evicting_leave_kueues_events_on_the_workload() {
        let admit = Decision::Admit {
            workload: "serving/s-1".into(),
            admission: serde_json::from_value(
                json!({"clusterQueue": "team", "podSetAssignments": []}),
            )
            .unwrap(),
        };
        let events: Vec<(EventType, &str, String)> = admission_events(&admit)
            .into_iter()
            .map(|e| (e.type_, e.reason, e.message))
            .collect();
        assert_eq!(
            events,
            vec![
                (
                    EventType::Normal,
                    "QuotaReserved",
                    "Quota reserved in ClusterQueue team".to_string()
                ),
                (
                    EventType::Normal,
                    "Admitted",
                    "Admitted by ClusterQueue team".to_string()
                ),
            ]
        );
        let preempt = Decision::Evict {
            workload: "serving/s-1".into(),
            reason: "Preempted".into(),
            message: "Preempted to accommodate a workload (UID: u2) due to prioritization in the ClusterQueue".into(),
        };
        let e = admission_events(&preempt);
        assert_eq!((e[0].type_, e[0].reason), (EventType::Warning, "Preempted"));
        let stop = Decision::Evict {
            workload: "serving/s-1".into(),
            reason: "ClusterQueueStopped".into(),
            message: "The ClusterQueue is stopped".into(),
        };
        let e = admission_events(&stop);
        assert_eq!(
            (e[0].reason, e[0].message.as_str()),
            (
                "Evicted",
                "ClusterQueueStopped: The ClusterQueue is stopped"
            )
        );
        let pending = Decision::Pending {
            workload: "serving/s-1".into(),
            reason: "Pending",
            message: String::new().into(),
        };
        assert!(admission_events(&pending).is_empty());
    }
}
