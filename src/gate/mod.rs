//! The gate (pure): what to do about one opted-in RayService, its children and its slices.
//!
//! [`decide`] reads a RayService, its child RayClusters and its Workloads and returns
//! [`GateAction`]s and [`Event`]s; `crate::controller` applies them. The rules:
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
//! * **Tamper**: a child that is unsuspended, not covered and never released is suspended again
//!   (a child whose `spec.suspend=false` raygate's field manager wrote was released by raygate:
//!   its record is written instead, e.g. after a crash between the release's two writes).
//!   A released child that grows past its slice (an autoscaler scale-up) is not stopped: the
//!   growth shows as a pending replacement slice.
//! * **Stop and preemption**: an evicted slice or one with `spec.active=false` suspends the whole
//!   RayService (`spec.suspend=true`, marked [`SUSPENDED_BY_ANNOTATION`]); raygate clears it when
//!   a slice is admitted again. A suspend set by someone else is theirs: raygate never clears it,
//!   and releases the chain's quota once the children are gone. An upgrade's evicted slice stops
//!   only the upgrade ([`upgrade_evicted`]): the serving child keeps running on its reservation.

pub mod pod_gate;
pub mod pods_held;
pub mod pods_ready;

#[cfg(test)]
mod incremental_tests;

use std::collections::BTreeSet;

pub mod children;
mod coverage;
mod decision;
pub mod flavors;
mod release;
mod upgrade_evicted;

use k8s_openapi::jiff::Timestamp;

use crate::events::{Event, EventType};
use crate::podsets::{self, PodSet};
use crate::slices::{self, SliceAction, SliceContext, SliceOwner};
use crate::types::kueue::{
    PRIORITY_CLASS_LABEL, PriorityClassRef, QUEUE_NAME_LABEL, Workload, condition, reason,
};
use crate::types::ray::{RayCluster, RayService};
use crate::{conditions, meta, workload};

pub use decision::{GateAction, GateDecision, GateOptions};
use release::release_or_hold;
pub use release::{GATE_FIELD_MANAGER, QUOTA_HELD, QUOTA_RELEASED};
pub use upgrade_evicted::UPGRADE_EVICTED_ANNOTATION;

/// RayService annotation: comma-separated children raygate released (or found running at opt-in).
/// Its presence also marks the RayService as gated.
pub const RELEASED_ANNOTATION: &str = "raygate.io/released-children";
/// RayService annotation: set while raygate holds `spec.suspend=true`, with the reason.
pub const SUSPENDED_BY_ANNOTATION: &str = "raygate.io/suspended-by-raygate";
/// RayService annotation: why raygate cannot gate it (e.g. invalid PodSets); removed once fixed.
pub const ERROR_ANNOTATION: &str = "raygate.io/error";
/// RayService annotation: left by the last step of an opt-out, so a child KubeRay creates
/// afterwards from a template it read still gated is released too; removed on opting in again.
pub const OPTED_OUT_ANNOTATION: &str = "raygate.io/opted-out";

/// raygate's own opt-in label on a RayService: the LocalQueue its upgrades are charged to. Unlike
/// Kueue's [`QUEUE_NAME_LABEL`], which raygate also reads, no Kueue integration acts on it, so
/// Kueue's RayCluster and RayService integrations can stay on for everything else.
pub const OPT_IN_LABEL: &str = "raygate.io/queue-name";

/// The labels that opt a RayService in, in the order they count: raygate's own first.
pub const OPT_IN_LABELS: [&str; 2] = [OPT_IN_LABEL, QUEUE_NAME_LABEL];

/// The LocalQueue a RayService opts into: its [`OPT_IN_LABEL`], else its Kueue
/// [`QUEUE_NAME_LABEL`] (an empty value counts as none).
pub fn queue_name(service: &RayService) -> Option<&str> {
    OPT_IN_LABELS
        .iter()
        .find_map(|key| meta::label(&service.metadata, key).filter(|q| !q.is_empty()))
}

fn annotation<'a>(service: &'a RayService, key: &str) -> Option<&'a str> {
    meta::annotation(&service.metadata, key)
}

fn child_name(c: &RayCluster) -> String {
    meta::name(&c.metadata)
}

fn is_suspended(c: &RayCluster) -> bool {
    c.spec.suspend == Some(true)
}

fn admitted_at(w: &Workload) -> Option<Timestamp> {
    conditions::find_true(&w.status.as_ref()?.conditions, condition::ADMITTED)
        .map(|c| c.last_transition_time.0)
}

/// What every rule reads: one gated RayService, its children that count and its Workloads.
struct Facts<'a> {
    service: &'a RayService,
    queue: &'a str,
    /// The live children, without those KubeRay abandoned before they ran.
    children: &'a [&'a RayCluster],
    /// The child KubeRay names active, when it runs ([`upgrade_evicted::serving`]).
    serving: Option<&'a RayCluster>,
    workloads: &'a [Workload],
    /// The Workloads not finished.
    live: Vec<&'a Workload>,
    /// The desired PodSets, `None` when they cannot be computed.
    podsets: Option<&'a [PodSet]>,
    /// `spec.suspend=true`, and whether raygate set it.
    suspended: bool,
    raygate_suspended: bool,
    priority: Option<&'a (PriorityClassRef, i32)>,
    opts: &'a GateOptions,
}

/// Decides what to do about `service`, given its live child RayClusters (see
/// [`podsets::children_of`]) and the Workloads it owns.
pub fn decide(
    service: &RayService,
    children: &[&RayCluster],
    workloads: &[Workload],
    opts: &GateOptions,
) -> GateDecision {
    let (priority, warning) = resolve_priority(service, &opts.priority_classes);
    let mut d = match queue_name(service) {
        None => opt_out::decide(service, children, workloads),
        Some(queue) => {
            decide_opted_in(service, queue, children, workloads, priority.as_ref(), opts)
        }
    };
    // The unresolved class is told first, whatever else the decision says.
    d.events.splice(0..0, warning);
    d.priority = priority;
    d
}

/// The `kueue.x-k8s.io/priority-class` label resolved against `classes` (name → value): the class
/// and its value, or a Warning when the class does not exist (slices then get priority 0).
pub fn resolve_priority(
    service: &RayService,
    classes: &std::collections::BTreeMap<String, i32>,
) -> (Option<(PriorityClassRef, i32)>, Option<Event>) {
    let Some(class) = meta::label(&service.metadata, PRIORITY_CLASS_LABEL) else {
        return (None, None);
    };
    match classes.get(class) {
        Some(value) => (
            Some((
                PriorityClassRef {
                    group: "kueue.x-k8s.io".into(),
                    kind: "WorkloadPriorityClass".into(),
                    name: class.to_string(),
                },
                *value,
            )),
            None,
        ),
        None => (
            None,
            Some(Event {
                type_: EventType::Warning,
                reason: "PriorityClassNotFound",
                message: format!(
                    "WorkloadPriorityClass {class} (label {PRIORITY_CLASS_LABEL}) does not exist; slices get priority 0"
                ),
                child: None,
            }),
        ),
    }
}

/// The decision for a RayService with a queue label.
fn decide_opted_in(
    service: &RayService,
    queue: &str,
    children: &[&RayCluster],
    workloads: &[Workload],
    priority: Option<&(PriorityClassRef, i32)>,
    opts: &GateOptions,
) -> GateDecision {
    let mut d = GateDecision::default();
    let mut released = recorded_released(service, children);
    // Children KubeRay abandoned that never ran: neither released nor charged.
    let kept = children::without_abandoned(service, children, &released, &mut d);
    template_gate(service, queue, &kept, &mut released, &mut d);
    if opts.pod_gate {
        gate_pods(service, &kept, &mut d);
    }
    let podsets = desired_podsets(service, &kept, &mut d).map(|p| {
        with_pods_held(
            service,
            p,
            workloads,
            (opts.pods.as_deref(), opts.now),
            &mut d,
        )
    });
    let suspended = service.spec.suspend == Some(true);
    let facts = Facts {
        service,
        queue,
        children: &kept,
        serving: upgrade_evicted::serving(service, &kept),
        workloads,
        live: workloads
            .iter()
            .filter(|w| !workload::is_finished(w.status.as_ref()))
            .collect(),
        podsets: podsets.as_deref(),
        suspended,
        raygate_suspended: suspended && annotation(service, SUSPENDED_BY_ANNOTATION).is_some(),
        priority,
        opts,
    };
    decide_gated(&facts, released, &mut d);
    d.podsets = podsets.unwrap_or_default();
    d
}

/// The rules after the template gate, in order; each may end the decision.
fn decide_gated(f: &Facts, mut released: BTreeSet<String>, d: &mut GateDecision) {
    if owner_suspended(f, d) || children::after_timeout(f.service, f.children, &f.live, d) {
        return;
    }
    let target = plan_slices(f, d);
    if stop(f, d) || resume(f, target, d) {
        return;
    }
    let holding = release_or_hold(f, target, &mut released, d);
    coverage::warn_uncovered(f, &released, d);
    children::warn_deadline(f.service, holding, f.opts.now, d);
}

/// The recorded released children that are still live.
fn recorded_released(service: &RayService, children: &[&RayCluster]) -> BTreeSet<String> {
    let live: BTreeSet<String> = children.iter().map(|c| child_name(c)).collect();
    annotation(service, RELEASED_ANNOTATION)
        .unwrap_or_default()
        .split(',')
        .filter(|n| live.contains(*n))
        .map(str::to_string)
        .collect()
}

/// Template gate: `spec.rayClusterConfig.suspend=true`; the children running at opt-in are
/// grandfathered into `released`.
fn template_gate(
    service: &RayService,
    queue: &str,
    children: &[&RayCluster],
    released: &mut BTreeSet<String>,
    d: &mut GateDecision,
) {
    let recorded = annotation(service, RELEASED_ANNOTATION).is_some();
    if service.spec.ray_cluster_config.suspend == Some(true) && recorded {
        return;
    }
    if !recorded {
        released.extend(
            children
                .iter()
                .filter(|c| !is_suspended(c))
                .map(|c| child_name(c)),
        );
    }
    let action = GateAction::GateTemplate {
        released: released.iter().cloned().collect(),
    };
    let running = if released.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = released.iter().map(String::as_str).collect();
        format!(" (already running, not stopped: {})", names.join(", "))
    };
    d.announce(
        action,
        EventType::Normal,
        "TemplateGated",
        format!(
            "set spec.rayClusterConfig.suspend=true: KubeRay now creates every child suspended until an admitted slice in LocalQueue {queue} covers it{running}"
        ),
        None,
    );
}

/// Pod gate: [`pod_gate::POD_GATE`] on the pod templates of `spec.rayClusterConfig` and of every
/// live child still without it, so every pod created from now on waits for the ungater.
fn gate_pods(service: &RayService, children: &[&RayCluster], d: &mut GateDecision) {
    if let Some(patch) = pod_gate::gate_templates_patch(&service.spec.ray_cluster_config) {
        d.announce(
            GateAction::GatePodTemplates { patch },
            EventType::Normal,
            "PodsGated",
            format!(
                "set scheduling gate {} on the pod templates of spec.rayClusterConfig: new pods wait until an admitted slice grants them (KubeRay's child hash ignores schedulingGates: no upgrade)",
                pod_gate::POD_GATE
            ),
            None,
        );
    }
    for child in children
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        if let Some(patch) = pod_gate::child_patch(child) {
            let name = child_name(child);
            d.announce(
                GateAction::PatchChild {
                    child: name.clone(),
                    patch,
                },
                EventType::Normal,
                "PodsGated",
                format!(
                    "set scheduling gate {} on {name}'s pod templates: its new pods wait until an admitted slice grants them",
                    pod_gate::POD_GATE
                ),
                Some(&name),
            );
        }
    }
}

/// The desired PodSets, or `None` with a Warning and [`ERROR_ANNOTATION`] when they cannot be
/// computed (then no slice changes and nothing is released; the stop and tamper protections
/// still guard the children). A fixed error clears the annotation.
fn desired_podsets(
    service: &RayService,
    children: &[&RayCluster],
    d: &mut GateDecision,
) -> Option<Vec<PodSet>> {
    let recorded_error = annotation(service, ERROR_ANNOTATION);
    match podsets::of_service(service, children) {
        Ok(p) => {
            if recorded_error.is_some() {
                d.actions.push(GateAction::ReportError { message: None });
            }
            Some(p.podsets)
        }
        Err(e) => {
            let svc = meta::key(&service.metadata);
            d.event(
                EventType::Warning,
                "InvalidPodSets",
                format!("cannot compute the PodSets of {svc}: {e}"),
                None,
            );
            let message = e.to_string();
            if recorded_error != Some(message.as_str()) {
                d.actions.push(GateAction::ReportError {
                    message: Some(message.clone()),
                });
            }
            d.error = Some(message);
            None
        }
    }
}

/// The desired PodSets with the pods that still hold resources counted in ([`pods_held`]), with
/// an Event naming what stays charged; as they are without pods.
fn with_pods_held(
    service: &RayService,
    desired: Vec<PodSet>,
    workloads: &[Workload],
    (pods, now): (Option<&[pod_gate::PodView]>, Option<Timestamp>),
    d: &mut GateDecision,
) -> Vec<PodSet> {
    let Some(pods) = pods else {
        return desired;
    };
    if let Some(now) = now {
        warn_stuck(service, pods, now, d);
    }
    let needed = pods_held::needed(&desired, workloads, pods);
    if !needed.held_back.is_empty() {
        let kept: Vec<String> = needed
            .held_back
            .iter()
            .map(|h| {
                format!(
                    "{} {} of PodSet {} (group {}; the children need {})",
                    h.slice, h.kept, h.podset, h.group, h.desired
                )
            })
            .collect();
        d.event(
            EventType::Normal,
            "PodsTerminating",
            format!(
                "quota stays charged until the pods are gone: {}; RayService {}",
                kept.join(", "),
                meta::key(&service.metadata)
            ),
            None,
        );
    }
    d.held_back = needed.held_back;
    needed.podsets
}

/// A Warning naming the pods stuck terminating ([`pods_held::stuck`]) and how to free their quota.
fn warn_stuck(
    service: &RayService,
    pods: &[pod_gate::PodView],
    now: Timestamp,
    d: &mut GateDecision,
) {
    let stuck = pods_held::stuck(pods, now);
    if stuck.is_empty() {
        return;
    }
    let shown: Vec<&str> = stuck.iter().take(5).copied().collect();
    let more = match stuck.len() - shown.len() {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    d.event(
        EventType::Warning,
        "PodsStuckTerminating",
        format!(
            "pods {}{more} of RayService {} are still terminating over {}s after their grace period ended and keep their quota (their node may still run them); if their node is down, taint it node.kubernetes.io/out-of-service=nodeshutdown:NoExecute (PodGC then deletes them) or delete them with --force --grace-period=0",
            shown.join(", "),
            meta::key(&service.metadata),
            pods_held::STUCK_AFTER.as_secs()
        ),
        None,
    );
}

/// Whether any child or any pod still holding resources remains.
fn anything_runs(f: &Facts) -> bool {
    !f.children.is_empty()
        || f.opts
            .pods
            .as_deref()
            .is_some_and(|p| p.iter().any(pods_held::holds))
}

/// Suspended by its owner: release the chain's quota once the pods are gone, make no new slice.
fn owner_suspended(f: &Facts, d: &mut GateDecision) -> bool {
    if !f.suspended || f.raygate_suspended {
        return false;
    }
    if !anything_runs(f) {
        for w in &f.live {
            d.actions.push(GateAction::Slice(SliceAction::Finish {
                name: meta::name(&w.metadata),
                reason: reason::OUT_OF_SYNC,
                message: "the RayService is suspended by its owner and its pods are gone".into(),
            }));
        }
    }
    true
}

/// The slice chain's changes for the desired PodSets (none while they are invalid); returns the
/// slice that must be admitted for the children to run.
fn plan_slices<'a>(f: &Facts<'a>, d: &mut GateDecision) -> Option<&'a Workload> {
    let ctx = SliceContext {
        owner: SliceOwner {
            namespace: f.service.metadata.namespace.clone().unwrap_or_default(),
            name: meta::name(&f.service.metadata),
            uid: f.service.metadata.uid.clone().unwrap_or_default(),
        },
        queue_name: f.queue.to_string(),
        priority_class_ref: f.priority.map(|(r, _)| r.clone()),
        priority: f.priority.map(|(_, v)| *v),
        mode: f.opts.mode,
        children_exist: anything_runs(f),
        serving: upgrade_evicted::cover(f),
        now: f.opts.now,
    };
    let plan = match f.podsets {
        Some(podsets) => slices::plan(&ctx, podsets, f.workloads),
        None => slices::SlicePlan::default(),
    };
    for a in plan.actions {
        if let SliceAction::Create { workload, replaces } = &a {
            let n = workload.metadata.name.as_deref().unwrap_or_default();
            let msg = match replaces {
                Some(old) => format!(
                    "created slice {n} replacing {old}: charged only its delta once admitted"
                ),
                None => format!("created slice {n} in LocalQueue {}", f.queue),
            };
            d.announce(
                GateAction::Slice(a),
                EventType::Normal,
                "SliceCreated",
                msg,
                None,
            );
        } else if let SliceAction::SetPriority {
            name,
            priority_class_ref,
            priority,
        } = &a
        {
            let msg = format!(
                "slice {name} now has priority class {} ({priority}), in place: a pending slice keeps its place in the queue",
                priority_class_ref.name
            );
            d.announce(
                GateAction::Slice(a),
                EventType::Normal,
                "SlicePriorityUpdated",
                msg,
                None,
            );
        } else {
            d.actions.push(GateAction::Slice(a));
        }
    }
    d.target = plan.target;
    let target = d.target.as_deref()?;
    f.workloads
        .iter()
        .find(|w| w.metadata.name.as_deref() == Some(target))
}

/// Stop: an evicted or deactivated slice stops the RayService (`spec.suspend=true`), but for an
/// upgrade's slice evicted while a child serves, which stops only the upgrade
/// ([`upgrade_evicted`]).
fn stop(f: &Facts, d: &mut GateDecision) -> bool {
    let kept = upgrade_evicted::evicted(f);
    upgrade_evicted::clear_mark(f, kept, d);
    if let Some(w) = kept {
        upgrade_evicted::hold_upgrade(f, w, d);
        return false;
    }
    let Some(w) = f
        .live
        .iter()
        .find(|w| workload::is_evicted(w.status.as_ref()) || w.spec.active == Some(false))
    else {
        return false;
    };
    if f.suspended {
        return true;
    }
    let deactivated = w.spec.active == Some(false);
    let why = if deactivated {
        "Deactivated"
    } else {
        eviction_reason(w)
    };
    let action = GateAction::SuspendService {
        reason: why.to_string(),
    };
    let what = if deactivated {
        "deactivated".to_string()
    } else {
        format!("evicted ({why})")
    };
    d.announce(
        action,
        EventType::Warning,
        "Stopped",
        format!(
            "slice {} was {what}: set spec.suspend=true (KubeRay deletes the children); raygate resumes it when a slice is admitted again",
            meta::name(&w.metadata),
        ),
        None,
    );
    true
}

/// Resume: while raygate holds `spec.suspend`, clear it once the target slice is admitted.
fn resume(f: &Facts, target: Option<&Workload>, d: &mut GateDecision) -> bool {
    if !f.raygate_suspended {
        return false;
    }
    if target.is_some_and(|w| workload::is_admitted(w.status.as_ref())) {
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
    true
}

fn eviction_reason(w: &Workload) -> &str {
    w.status
        .as_ref()
        .and_then(|s| conditions::find_true(&s.conditions, condition::EVICTED))
        .map(|c| c.reason.as_str())
        .unwrap_or("Evicted")
}

mod opt_out;
pub use opt_out::{has_state, left_behind};

#[cfg(test)]
mod tests;
