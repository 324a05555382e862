//! Opting out (pure): a RayService raygate gated whose `kueue.x-k8s.io/queue-name` label is gone.
//!
//! Labels are live: removing the queue label hands the service back to KubeRay alone. Its slices
//! are finished (quota freed), the children raygate holds are released, every child loses the queue
//! label (so the admission policy stops applying to it), and the template gate, a suspend raygate
//! set and raygate's annotations are removed, in that order: the annotations mark the service as
//! raygate's until the very last step, so a failed step is retried on the next reconcile.

use super::{
    ERROR_ANNOTATION, EventType, GateAction, GateDecision, RELEASED_ANNOTATION,
    SUSPENDED_BY_ANNOTATION, annotation, child_name, is_suspended,
};
use crate::slices::{self, SliceAction};
use crate::types::kueue::{QUEUE_NAME_LABEL, Workload, reason};
use crate::types::ray::{RayCluster, RayService};

/// Whether raygate has left state on `service` (gated it, suspended it, or reported an error).
pub fn has_state(service: &RayService) -> bool {
    [
        RELEASED_ANNOTATION,
        SUSPENDED_BY_ANNOTATION,
        ERROR_ANNOTATION,
    ]
    .iter()
    .any(|k| annotation(service, k).is_some())
}

fn has_queue_label(c: &RayCluster) -> bool {
    c.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(QUEUE_NAME_LABEL))
}

/// What to do about a RayService without the queue label: nothing unless raygate has state on it.
pub(super) fn decide(
    service: &RayService,
    children: &[&RayCluster],
    workloads: &[Workload],
) -> GateDecision {
    let mut d = GateDecision::default();
    if !has_state(service) {
        return d;
    }
    let raygate_suspended = service.spec.suspend == Some(true)
        && annotation(service, SUSPENDED_BY_ANNOTATION).is_some();
    // The owner's own suspend stays: KubeRay deletes those children anyway.
    let owner_suspended = service.spec.suspend == Some(true) && !raygate_suspended;

    let mut finished = Vec::new();
    for w in workloads.iter().filter(|w| !slices::is_finished(w)) {
        let name = w.metadata.name.clone().unwrap_or_default();
        d.actions.push(GateAction::Slice(SliceAction::Finish {
            name: name.clone(),
            reason: reason::OUT_OF_SYNC,
            message: format!(
                "the RayService opted out (label {QUEUE_NAME_LABEL} removed): quota released"
            ),
        }));
        finished.push(name);
    }
    let mut released = Vec::new();
    for c in children {
        let unsuspend =
            is_suspended(c) && !owner_suspended && c.metadata.deletion_timestamp.is_none();
        if unsuspend || has_queue_label(c) {
            if unsuspend {
                released.push(child_name(c));
            }
            d.actions.push(GateAction::OptOutChild {
                child: child_name(c),
                unsuspend,
            });
        }
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    d.announce(
        GateAction::OptOut {
            resume: raygate_suspended,
        },
        EventType::Normal,
        "OptedOut",
        format!(
            "label {QUEUE_NAME_LABEL} removed: finished slices {} (quota released), released held children {}, lifted spec.rayClusterConfig.suspend{} and removed raygate's annotations",
            list(&finished),
            list(&released),
            if raygate_suspended {
                " and the spec.suspend raygate set"
            } else {
                ""
            }
        ),
        None,
    );
    d
}
