//! What the gate decides: the actions the controller applies, in order, and the Events that
//! announce them or tell what the gate sees.

use k8s_openapi::jiff::Timestamp;

use super::{pod_gate, pods_held};
use crate::admission::AdmissionMode;
use crate::events::{Event, EventType};
use crate::podsets::PodSet;
use crate::slices::SliceAction;
use crate::types::kueue::PriorityClassRef;

/// What the controller must do for one RayService, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum GateAction {
    /// Set `spec.rayClusterConfig.suspend=true` and [`RELEASED_ANNOTATION`] to `released`.
    GateTemplate { released: Vec<String> },
    /// A change to the slice chain.
    Slice(SliceAction),
    /// Merge-patch the child's `spec.suspend=false`, then record it in [`RELEASED_ANNOTATION`].
    /// (A crash in between is healed by [`GateAction::RecordReleased`]: the child is known as
    /// released by raygate's field manager owning its `spec.suspend`.)
    Release {
        child: String,
        released: Vec<String>,
        slice: String,
        admitted_at: Option<Timestamp>,
    },
    /// Record running, covered children in [`RELEASED_ANNOTATION`].
    RecordReleased { released: Vec<String> },
    /// Merge-patch `spec.suspend=true` on a child that runs without quota.
    Hold { child: String },
    /// Set the RayService's `spec.suspend=true` (KubeRay deletes every child).
    SuspendService { reason: String },
    /// Clear the RayService's `spec.suspend` that raygate set.
    ResumeService,
    /// Set (`Some`) or clear (`None`) [`ERROR_ANNOTATION`].
    ReportError { message: Option<String> },
    /// Opt-out: drop the child's opt-in labels (copied by KubeRay from its RayService; the
    /// admission policy then no longer applies to it) and, when `unsuspend`, merge-patch its `spec.suspend=false`.
    OptOutChild { child: String, unsuspend: bool },
    /// Opt-out, last step: lift the template gate (`spec.rayClusterConfig.suspend`), clear the
    /// `spec.suspend` raygate set when `resume`, remove raygate's annotations and, when
    /// `pod_templates` (a merge patch of `spec.rayClusterConfig`), the [`pod_gate::POD_GATE`]
    /// scheduling gate (sent with the RayService's `resourceVersion`).
    OptOut {
        resume: bool,
        pod_templates: Option<serde_json::Value>,
    },
    /// Merge-patch a child RayCluster (its flavors' node selector and tolerations, before it is
    /// released; carries the child's resourceVersion).
    PatchChild {
        child: String,
        patch: serde_json::Value,
    },
    /// Merge-patch `spec.rayClusterConfig` with `patch` (the [`pod_gate::POD_GATE`] scheduling
    /// gate on every pod template; sent with the RayService's `resourceVersion`).
    GatePodTemplates { patch: serde_json::Value },
    /// Set (`Some`) or clear (`None`) an annotation on the RayService.
    Annotate {
        key: &'static str,
        value: Option<String>,
    },
}

/// The decision for one RayService.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GateDecision {
    pub actions: Vec<GateAction>,
    pub events: Vec<Event>,
    /// Which Event announces which action: `(event index, action index)`. An announcing Event
    /// is published only once its action is applied; the other Events are observations
    /// (`Holding`, `InvalidPodSets`) and always published.
    pub announced: Vec<(usize, usize)>,
    /// The desired PodSets (empty when they could not be computed).
    pub podsets: Vec<PodSet>,
    /// Why PodSets could not be computed, if so (also an Event).
    pub error: Option<String>,
    /// The slice that must be admitted for the children to run.
    pub target: Option<String>,
    /// The `kueue.x-k8s.io/priority-class` label resolved: the class and its value (`None`
    /// without the label or when the class does not exist, with a Warning Event).
    pub priority: Option<(PriorityClassRef, i32)>,
    /// Head PodSets kept charged past what the children need, for pods still holding resources
    /// (with the pod gate on; see [`pods_held`]). While not empty, a pod going away changes the
    /// decision: the controller looks again soon.
    pub held_back: Vec<pods_held::HeldBack>,
}

impl GateDecision {
    /// The index of the action the `event`-th Event announces, if it announces one.
    pub fn announces(&self, event: usize) -> Option<usize> {
        self.announced
            .iter()
            .find(|(e, _)| *e == event)
            .map(|(_, a)| *a)
    }

    /// Pushes `action` and the Event that announces it, paired.
    pub(super) fn announce(
        &mut self,
        action: GateAction,
        type_: EventType,
        reason: &'static str,
        message: String,
        child: Option<&str>,
    ) {
        self.announced.push((self.events.len(), self.actions.len()));
        self.actions.push(action);
        self.event(type_, reason, message, child);
    }

    /// One more Event announcing the last pushed action (e.g. on the child it changes).
    pub(super) fn announce_last(
        &mut self,
        type_: EventType,
        reason: &'static str,
        message: String,
        child: Option<&str>,
    ) {
        if let Some(action) = self.actions.len().checked_sub(1) {
            self.announced.push((self.events.len(), action));
            self.event(type_, reason, message, child);
        }
    }

    pub(super) fn event(
        &mut self,
        type_: EventType,
        reason: &'static str,
        message: String,
        child: Option<&str>,
    ) {
        self.events.push(Event {
            type_,
            reason,
            message,
            child: child.map(str::to_string),
        });
    }
}

/// Inputs besides the objects.
#[derive(Clone, Debug, Default)]
pub struct GateOptions {
    pub mode: AdmissionMode,
    /// WorkloadPriorityClasses: name → value (the `kueue.x-k8s.io/priority-class` label is
    /// resolved against them).
    pub priority_classes: std::collections::BTreeMap<String, i32>,
    /// The time of the decision (for deadlines shown to the user).
    pub now: Option<Timestamp>,
    /// ResourceFlavors by name (their node labels and tolerations reach released children).
    pub flavors: std::collections::BTreeMap<String, crate::types::kueue::ResourceFlavorSpec>,
    /// Put [`pod_gate::POD_GATE`] on the pod templates of the RayService and its children (the
    /// server serves Pods and the pod ungater runs).
    pub pod_gate: bool,
    /// The RayService's Ray pods, of live and deleted children (`None`: pods are not watched,
    /// only the children are charged). A slice shrinks or finishes only once they are gone.
    pub pods: Option<Vec<pod_gate::PodView>>,
}
