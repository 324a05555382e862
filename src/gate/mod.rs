//! The gate (pure): what to do about one opted-in RayService, its children and its slices.
//!
//! [`decide`] reads a RayService, its child RayClusters and its Workloads and returns
//! [`GateAction`]s and [`GateEvent`]s; `crate::controller` applies them. The rules:
//!
//! * **Template gate**: `spec.rayClusterConfig.suspend=true` on the RayService, so every child
//!   KubeRay creates (the upgrade's pending one included) is born suspended. When raygate first
//!   gates a RayService it records the children already running in [`RELEASED_ANNOTATION`]: they
//!   are accounted for but never stopped (opting in does not take a service down).
//! * **Slices**: the desired PodSets of the live children go through [`slices::plan`].
//! * **Release**: a suspended child is unsuspended only when the newest *admitted* slice covers the
//!   PodSets of all live children, shape by shape ([`slices::covers`]); the child's name is
//!   recorded in [`RELEASED_ANNOTATION`] on the RayService first. KubeRay rewrites a child's own
//!   annotations on in-place updates, so the record lives on the RayService.
//! * **Tamper**: a child that is unsuspended, not covered and never released is suspended again.
//!   A released child that grows past its slice (an autoscaler scale-up) is not stopped: the
//!   growth shows as a pending replacement slice.
//! * **Stop and preemption**: an evicted slice or one with `spec.active=false` suspends the whole
//!   RayService (`spec.suspend=true`, marked [`SUSPENDED_BY_ANNOTATION`]); raygate clears it when
//!   a slice is admitted again. A suspend set by someone else is theirs: raygate never clears it,
//!   and releases the chain's quota once the children are gone.

pub mod pods_ready;

use std::collections::BTreeSet;

pub mod children;
pub mod flavors;

use k8s_openapi::jiff::Timestamp;

use crate::podsets::{self, PodSet};
use crate::slices::{self, ChainMode, SliceAction, SliceContext, SliceOwner};
use crate::types::kueue::{PriorityClassRef, QUEUE_NAME_LABEL, Workload, condition, reason};
use crate::types::ray::{RayCluster, RayService};

/// RayService annotation: comma-separated children raygate released (or found running at opt-in).
/// Its presence also marks the RayService as gated.
pub const RELEASED_ANNOTATION: &str = "raygate.io/released-children";
/// RayService annotation: set while raygate holds `spec.suspend=true`, with the reason.
pub const SUSPENDED_BY_ANNOTATION: &str = "raygate.io/suspended-by-raygate";
/// RayService annotation: why raygate cannot gate it (e.g. invalid PodSets); removed once fixed.
pub const ERROR_ANNOTATION: &str = "raygate.io/error";

/// What the controller must do for one RayService, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum GateAction {
    /// Set `spec.rayClusterConfig.suspend=true` and [`RELEASED_ANNOTATION`] to `released`.
    GateTemplate { released: Vec<String> },
    /// A change to the slice chain.
    Slice(SliceAction),
    /// Merge-patch the child's `spec.suspend=false`, then record it in [`RELEASED_ANNOTATION`].
    /// (A crash in between is healed by [`GateAction::RecordReleased`].)
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
    /// Opt-out: drop the child's `kueue.x-k8s.io/queue-name` label (so the admission policy no
    /// longer applies to it) and, when `unsuspend`, merge-patch its `spec.suspend=false`.
    OptOutChild { child: String, unsuspend: bool },
    /// Opt-out, last step: lift the template gate (`spec.rayClusterConfig.suspend`), clear the
    /// `spec.suspend` raygate set when `resume`, and remove raygate's annotations.
    OptOut { resume: bool },
    /// Merge-patch a child RayCluster (its flavors' node selector and tolerations, before it is
    /// released; carries the child's resourceVersion).
    PatchChild {
        child: String,
        patch: serde_json::Value,
    },
    /// Set (`Some`) or clear (`None`) an annotation on the RayService.
    Annotate {
        key: &'static str,
        value: Option<String>,
    },
}

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An Event to record on the RayService (or one of its children).
#[derive(Clone, Debug, PartialEq)]
pub struct GateEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
    /// `Some(child)` for an Event on a child RayCluster, `None` for the RayService.
    pub child: Option<String>,
}

/// The decision for one RayService.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GateDecision {
    pub actions: Vec<GateAction>,
    pub events: Vec<GateEvent>,
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
    fn announce(
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

    fn event(
        &mut self,
        type_: EventType,
        reason: &'static str,
        message: String,
        child: Option<&str>,
    ) {
        self.events.push(GateEvent {
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
    pub mode: ChainMode,
    /// Resolved from the `kueue.x-k8s.io/priority-class` label: the class and its value.
    pub priority: Option<(PriorityClassRef, i32)>,
    /// The time of the decision (for deadlines shown to the user).
    pub now: Option<Timestamp>,
    /// ResourceFlavors by name (their node labels and tolerations reach released children).
    pub flavors: std::collections::BTreeMap<String, crate::types::kueue::ResourceFlavorSpec>,
}

/// The LocalQueue a RayService opts into (its `kueue.x-k8s.io/queue-name` label).
pub fn queue_name(service: &RayService) -> Option<&str> {
    service
        .metadata
        .labels
        .as_ref()?
        .get(QUEUE_NAME_LABEL)
        .map(String::as_str)
        .filter(|q| !q.is_empty())
}

fn annotation<'a>(service: &'a RayService, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn child_name(c: &RayCluster) -> String {
    c.metadata.name.clone().unwrap_or_default()
}

fn is_suspended(c: &RayCluster) -> bool {
    c.spec.suspend == Some(true)
}

fn admitted_at(w: &Workload) -> Option<Timestamp> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition::ADMITTED && c.status == "True")
        .map(|c| c.last_transition_time.0)
}

/// Decides what to do about `service`, given its live child RayClusters (see
/// [`podsets::children_of`]) and the Workloads it owns.
pub fn decide(
    service: &RayService,
    children: &[&RayCluster],
    workloads: &[Workload],
    opts: &GateOptions,
) -> GateDecision {
    let Some(queue) = queue_name(service) else {
        return opt_out::decide(service, children, workloads);
    };
    let mut d = GateDecision::default();
    let svc = format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    );
    let live_names: BTreeSet<String> = children.iter().map(|c| child_name(c)).collect();

    // Template gate; the children running at opt-in are grandfathered.
    let recorded = annotation(service, RELEASED_ANNOTATION);
    let mut released: BTreeSet<String> = recorded
        .unwrap_or_default()
        .split(',')
        .filter(|n| live_names.contains(*n))
        .map(str::to_string)
        .collect();
    // Children KubeRay abandoned that never ran: neither released nor charged.
    let kept = children::without_abandoned(service, children, &released, &mut d);
    let children = &kept[..];
    if service.spec.ray_cluster_config.suspend != Some(true) || recorded.is_none() {
        if recorded.is_none() {
            released.extend(
                children
                    .iter()
                    .filter(|c| !is_suspended(c))
                    .map(|c| child_name(c)),
            );
        }
        d.announce(
            GateAction::GateTemplate {
                released: released.iter().cloned().collect(),
            },
            EventType::Normal,
            "TemplateGated",
            format!(
                "set spec.rayClusterConfig.suspend=true: KubeRay now creates every child suspended until an admitted slice in LocalQueue {queue} covers it{}",
                if released.is_empty() { String::new() } else { format!(" (already running, not stopped: {})", released.iter().cloned().collect::<Vec<_>>().join(", ")) }
            ),
            None,
        );
    }

    let (podsets, invalid) = match podsets::of_service(service, children) {
        Ok(p) => (p.podsets, false),
        Err(e) => {
            d.event(
                EventType::Warning,
                "InvalidPodSets",
                format!("cannot compute the PodSets of {svc}: {e}"),
                None,
            );
            if annotation(service, ERROR_ANNOTATION) != Some(e.to_string().as_str()) {
                d.actions.push(GateAction::ReportError {
                    message: Some(e.to_string()),
                });
            }
            d.error = Some(e.to_string());
            // No slice change and no release on PodSets that cannot be computed; the stop and
            // tamper protections below still guard the children.
            (Vec::new(), true)
        }
    };
    if !invalid && annotation(service, ERROR_ANNOTATION).is_some() {
        d.actions.push(GateAction::ReportError { message: None });
    }

    let suspended = service.spec.suspend == Some(true);
    let raygate_suspended = suspended && annotation(service, SUSPENDED_BY_ANNOTATION).is_some();
    let live: Vec<&Workload> = workloads
        .iter()
        .filter(|w| !slices::is_finished(w))
        .collect();

    // Suspended by its owner: release the chain's quota once the pods are gone, make no new slice.
    if suspended && !raygate_suspended {
        if children.is_empty() {
            for w in &live {
                d.actions.push(GateAction::Slice(SliceAction::Finish {
                    name: w.metadata.name.clone().unwrap_or_default(),
                    reason: reason::OUT_OF_SYNC,
                    message: "the RayService is suspended by its owner and its pods are gone"
                        .into(),
                }));
            }
        }
        d.podsets = podsets;
        return d;
    }

    if children::after_timeout(service, children, &live, &mut d) {
        d.podsets = podsets;
        return d;
    }

    let ctx = SliceContext {
        owner: SliceOwner {
            namespace: service.metadata.namespace.clone().unwrap_or_default(),
            name: service.metadata.name.clone().unwrap_or_default(),
            uid: service.metadata.uid.clone().unwrap_or_default(),
        },
        queue_name: queue.to_string(),
        priority_class_ref: opts.priority.as_ref().map(|(r, _)| r.clone()),
        priority: opts.priority.as_ref().map(|(_, v)| *v),
        mode: opts.mode,
        children_exist: !children.is_empty(),
    };
    let plan = if invalid {
        slices::SlicePlan::default()
    } else {
        slices::plan(&ctx, &podsets, workloads)
    };
    for a in plan.actions {
        if let SliceAction::Create { workload, replaces } = &a {
            let n = workload.metadata.name.as_deref().unwrap_or_default();
            let msg = match replaces {
                Some(old) => format!(
                    "created slice {n} replacing {old}: charged only its delta once admitted"
                ),
                None => format!("created slice {n} in LocalQueue {queue}"),
            };
            d.announce(
                GateAction::Slice(a),
                EventType::Normal,
                "SliceCreated",
                msg,
                None,
            );
        } else {
            d.actions.push(GateAction::Slice(a));
        }
    }
    d.target = plan.target.clone();

    // Stop: an evicted or deactivated slice stops the RayService.
    let stopping = live
        .iter()
        .find(|w| slices::is_evicted(w) || w.spec.active == Some(false));
    if let Some(w) = stopping {
        if !suspended {
            let why = if w.spec.active == Some(false) {
                "Deactivated"
            } else {
                eviction_reason(w)
            };
            d.announce(
                GateAction::SuspendService {
                    reason: why.to_string(),
                },
                EventType::Warning,
                "Stopped",
                format!(
                    "slice {} was {}: set spec.suspend=true (KubeRay deletes the children); raygate resumes it when a slice is admitted again",
                    w.metadata.name.as_deref().unwrap_or_default(),
                    if why == "Deactivated" { "deactivated".to_string() } else { format!("evicted ({why})") }
                ),
                None,
            );
        }
        d.podsets = podsets;
        return d;
    }

    let target = plan.target.as_deref().and_then(|t| {
        workloads
            .iter()
            .find(|w| w.metadata.name.as_deref() == Some(t))
    });
    if raygate_suspended {
        if target.is_some_and(slices::is_admitted) {
            d.announce(
                GateAction::ResumeService,
                EventType::Normal,
                "Resumed",
                format!(
                    "slice {} is admitted: cleared spec.suspend",
                    d.target.clone().unwrap_or_default()
                ),
                None,
            );
        }
        d.podsets = podsets;
        return d;
    }

    // Release or hold children against the newest admitted slice.
    let mut admitted: Vec<&Workload> = live
        .iter()
        .copied()
        .filter(|w| slices::is_admitted(w))
        .collect();
    slices::sort_chain_order(&mut admitted, workloads);
    let cover = admitted
        .last()
        .copied()
        .filter(|w| !invalid && slices::covers(w, &podsets));
    let mut holding = false;
    for child in children {
        let name = child_name(child);
        match (is_suspended(child), cover) {
            (true, Some(slice)) if child.metadata.deletion_timestamp.is_none() => {
                if !flavors::before_release(child, slice, &opts.flavors, &mut d) {
                    continue;
                }
                released.insert(name.clone());
                let slice_name = slice.metadata.name.clone().unwrap_or_default();
                let message = format!(
                    "slice {slice_name} is admitted and covers every child: unsuspended {name}"
                );
                d.announce(
                    GateAction::Release {
                        child: name,
                        released: released.iter().cloned().collect(),
                        slice: slice_name,
                        admitted_at: admitted_at(slice),
                    },
                    EventType::Normal,
                    "Released",
                    message,
                    None,
                );
            }
            (true, None) => {
                holding = true;
                let why = if invalid {
                    "the RayService's PodSets are invalid (see the InvalidPodSets Event)".into()
                } else {
                    target
                        .map(pending_message)
                        .unwrap_or_else(|| "no slice yet".into())
                };
                d.event(
                    EventType::Normal,
                    "Holding",
                    format!("holding {name} suspended until an admitted slice covers it: {why}"),
                    None,
                );
            }
            (false, Some(_)) if !released.contains(&name) => {
                released.insert(name);
                d.actions.push(GateAction::RecordReleased {
                    released: released.iter().cloned().collect(),
                });
            }
            (false, None) if !released.contains(&name) => {
                d.announce(
                    GateAction::Hold {
                        child: name.clone(),
                    },
                    EventType::Warning,
                    "Tampered",
                    format!("{name} was unsuspended without an admitted slice covering it: suspended it again"),
                    Some(&name),
                );
            }
            _ => {}
        }
    }
    children::warn_deadline(service, holding, opts.now, &mut d);
    d.podsets = podsets;
    d
}

fn eviction_reason(w: &Workload) -> &str {
    w.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == condition::EVICTED && c.status == "True")
        })
        .map(|c| c.reason.as_str())
        .unwrap_or("Evicted")
}

/// The slice's `QuotaReserved=False` message, or a placeholder.
fn pending_message(w: &Workload) -> String {
    let name = w.metadata.name.as_deref().unwrap_or_default();
    w.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == condition::QUOTA_RESERVED && c.status != "True")
        })
        .map(|c| format!("slice {name} is pending: {}", c.message))
        .unwrap_or_else(|| format!("slice {name} is not admitted yet"))
}

mod opt_out;
pub use opt_out::has_state;

#[cfg(test)]
mod tests;
