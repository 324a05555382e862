//! Opting out (pure): a RayService raygate gated whose opt-in labels ([`OPT_IN_LABELS`]:
//! `raygate.io/queue-name`, `kueue.x-k8s.io/queue-name`) are gone.
//!
//! Labels are live: removing the queue label hands the service back to KubeRay alone. Its slices
//! are finished (quota freed), the children raygate holds are released, every child loses the queue
//! label (so the admission policy stops applying to it), and the template gate, a suspend raygate
//! set and raygate's annotations are removed, in that order: the annotations mark the service as
//! raygate's until the very last step, so a failed step is retried on the next reconcile.
//!
//! Opting out is not one-shot. The last step leaves [`OPTED_OUT_ANNOTATION`], and a service
//! with it is looked at again whenever its children change: a child KubeRay creates afterwards
//! from a template it read before the gate was lifted (born suspended, perhaps with the queue
//! label) is released too. And a RayService without any of raygate's annotations (a `kubectl
//! replace` from the user's own manifest) is still opted out while raygate's traces remain
//! ([`left_behind`]): live slices, a child with the queue label (the admission policy would keep
//! its owner from releasing it) or with the pod gate.
//!
//! The pod scheduling gate ([`pod_gate::POD_GATE`]) goes too, whether `--pod-gate` is on now or
//! not: from each child's templates (before its queue label, while the child is still found as
//! raygate's), then from `spec.rayClusterConfig` in the last step. Pods already gated are lifted
//! by the ungater (`src/controller/ungater.rs`), which lifts the gate from every pod of a
//! RayService without the queue label.

use super::{
    ERROR_ANNOTATION, GateAction, GateDecision, OPT_IN_LABEL, OPT_IN_LABELS, OPTED_OUT_ANNOTATION,
    RELEASED_ANNOTATION, SUSPENDED_BY_ANNOTATION, annotation, child_name, is_suspended, pod_gate,
};
use crate::events::EventType;
use crate::slices::SliceAction;
use crate::types::kueue::{QUEUE_NAME_LABEL, Workload, reason};
use crate::types::ray::{RayCluster, RayService};
use crate::workload;

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
        .is_some_and(|l| OPT_IN_LABELS.iter().any(|k| l.contains_key(*k)))
}

/// Whether the owner holds the children: its own `spec.suspend` (KubeRay deletes the children
/// anyway), or, once raygate's state is gone, its own `spec.rayClusterConfig.suspend`.
fn owner_suspended(service: &RayService) -> bool {
    let raygate_suspended = annotation(service, SUSPENDED_BY_ANNOTATION).is_some();
    (service.spec.suspend == Some(true) && !raygate_suspended)
        || (service.spec.ray_cluster_config.suspend == Some(true) && !has_state(service))
}

/// Whether raygate's traces remain on a RayService without the queue label, its state
/// annotations gone or not: a live slice, the pod gate on its templates, a child with the queue
/// label or the pod gate, or, once it opted out ([`OPTED_OUT_ANNOTATION`]), a suspended child its
/// owner does not hold.
pub fn left_behind(service: &RayService, children: &[&RayCluster], workloads: &[Workload]) -> bool {
    let opted_out = annotation(service, OPTED_OUT_ANNOTATION).is_some();
    workloads
        .iter()
        .any(|w| !workload::is_finished(w.status.as_ref()))
        || pod_gate::any_template_gated(&service.spec.ray_cluster_config)
        || children.iter().any(|c| {
            has_queue_label(c)
                || pod_gate::any_template_gated(&c.spec)
                || (opted_out && held(c, owner_suspended(service)))
        })
}

/// A child to release: suspended, not being deleted, and not held by its owner.
fn held(c: &RayCluster, owner_suspended: bool) -> bool {
    is_suspended(c) && !owner_suspended && c.metadata.deletion_timestamp.is_none()
}

/// What to do about a RayService without the queue label: nothing unless raygate has state or
/// traces ([`left_behind`]) on it.
pub(super) fn decide(
    service: &RayService,
    children: &[&RayCluster],
    workloads: &[Workload],
) -> GateDecision {
    let mut d = GateDecision::default();
    if !has_state(service) && !left_behind(service, children, workloads) {
        return d;
    }
    let raygate_suspended = service.spec.suspend == Some(true)
        && annotation(service, SUSPENDED_BY_ANNOTATION).is_some();
    let owner_suspended = owner_suspended(service);

    let finished = release_quota(workloads, &mut d);
    let released = release_children(children, owner_suspended, &mut d);
    let pod_templates = pod_gate::ungate_templates_patch(&service.spec.ray_cluster_config);
    let ungated = if pod_templates.is_some() {
        format!(", removed scheduling gate {}", pod_gate::POD_GATE)
    } else {
        String::new()
    };
    let action = GateAction::OptOut {
        resume: raygate_suspended,
        pod_templates,
    };
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    d.announce(
        action,
        EventType::Normal,
        "OptedOut",
        format!(
            "opt-in labels {OPT_IN_LABEL} and {QUEUE_NAME_LABEL} gone: finished slices {} (quota released), released held children {}, lifted spec.rayClusterConfig.suspend{}{ungated} and removed raygate's annotations",
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

/// Finishes every live slice (their quota is released); returns their names.
fn release_quota(workloads: &[Workload], d: &mut GateDecision) -> Vec<String> {
    let mut finished = Vec::new();
    for w in workloads
        .iter()
        .filter(|w| !workload::is_finished(w.status.as_ref()))
    {
        let name = w.metadata.name.clone().unwrap_or_default();
        d.actions.push(GateAction::Slice(SliceAction::Finish {
            name: name.clone(),
            reason: reason::OUT_OF_SYNC,
            message: format!(
                "the RayService opted out (labels {OPT_IN_LABEL} and {QUEUE_NAME_LABEL} gone): quota released"
            ),
        }));
        finished.push(name);
    }
    finished
}

/// Removes the pod scheduling gate from the children's templates, drops the queue label from
/// the children and unsuspends the held ones (unless the owner suspended the RayService);
/// returns the names of those unsuspended.
fn release_children(
    children: &[&RayCluster],
    owner_suspended: bool,
    d: &mut GateDecision,
) -> Vec<String> {
    let mut released = Vec::new();
    for c in children {
        if let Some(patch) = pod_gate::child_ungate_patch(c)
            && c.metadata.deletion_timestamp.is_none()
        {
            d.actions.push(GateAction::PatchChild {
                child: child_name(c),
                patch,
            });
        }
        let unsuspend = held(c, owner_suspended);
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
    released
}
