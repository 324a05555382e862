//! Workload slice chains (pure): which Workloads a RayService's current PodSets need.
//!
//! Kueue's workload slicing (`pkg/workloadslicing`) models an elastic job as a chain of Workloads:
//! a scale-up of a slice that holds quota is a *replacement* slice with the full new counts,
//! charged only its delta over the old one, which is finished once the replacement is admitted; a
//! scale-down shrinks the reserved slice in place. [`plan`] makes the same decisions from the
//! RayService's desired PodSets and its not-finished Workloads, and goes beyond Kueue in two ways:
//!
//! * PodSets are matched to the chain's PodSets by shape (worker group, per-pod requests and
//!   placement: node selector and tolerations), not by name.
//!   Names from [`crate::podsets::of_service`] move when children come and go (after a promotion
//!   the surviving child's shape gets the plain name back); matching by shape keeps a slice from
//!   being "scaled down in place" onto a cheaper shape of the same name.
//! * A change of the PodSet set (a worker group added, removed, renamed, or split by shape) is still
//!   a replacement charged by its delta ([`ChainMode::Builtin`]). A real Kueue's flavor assigner
//!   panics on such a replacement, so with [`ChainMode::KueueCompatible`] the replacement keeps the
//!   chain's PodSet list identical (vanished groups keep count 0) and a PodSet new to the chain
//!   starts a new chain (annotated [`SUPERSEDES_ANNOTATION`]), charged in full.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::conditions;
use crate::meta;
use crate::podsets::{Placement, PodSet, pod_requests, shape_name};
use crate::quantity::Resources;
use crate::types::kueue::{
    self, ELASTIC_JOB_ANNOTATION, PriorityClassRef, QUEUE_NAME_LABEL,
    WORKLOAD_SLICE_NAME_ANNOTATION, WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION, Workload,
    WorkloadSpec, condition, reason,
};
use crate::workload::{self, SUPERSEDES_ANNOTATION};

/// Annotation on a Workload PodSet template naming the KubeRay worker group (`headgroup` for heads).
pub const GROUP_ANNOTATION: &str = "raygate.io/worker-group";
/// Label on raygate's Workloads naming their RayService.
pub const RAYSERVICE_LABEL: &str = "raygate.io/rayservice";
/// `app.kubernetes.io/managed-by` value on raygate's Workloads.
pub const MANAGED_BY: &str = "raygate";

/// How a chain may change its PodSet list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ChainMode {
    /// raygate admits: a replacement may add and drop PodSets; it is charged by its delta.
    #[default]
    Builtin,
    /// A real Kueue admits: a replacement keeps the chain's PodSet list identical.
    KueueCompatible,
}

/// The RayService a chain belongs to.
#[derive(Clone, Debug, Default)]
pub struct SliceOwner {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Everything about the owner that goes into a new Workload.
#[derive(Clone, Debug, Default)]
pub struct SliceContext {
    pub owner: SliceOwner,
    /// `spec.queueName` (the owner's `kueue.x-k8s.io/queue-name` label).
    pub queue_name: String,
    pub priority_class_ref: Option<PriorityClassRef>,
    pub priority: Option<i32>,
    pub mode: ChainMode,
    /// Whether any child RayCluster still exists (an evicted slice keeps its quota until none does).
    pub children_exist: bool,
}

/// One change to the owner's Workloads.
#[derive(Clone, Debug, PartialEq)]
pub enum SliceAction {
    /// Create this Workload (server-side apply of metadata and spec).
    Create {
        workload: Box<Workload>,
        replaces: Option<String>,
    },
    /// Replace `spec.podSets` of an existing slice: a pending slice's change, or a scale-down in place.
    SetPodSets {
        name: String,
        pod_sets: Vec<kueue::PodSet>,
        why: &'static str,
    },
    /// Mark a slice `Finished=True` with this reason.
    Finish {
        name: String,
        reason: &'static str,
        message: String,
    },
}

/// The actions that bring the chain in line with the desired PodSets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlicePlan {
    pub actions: Vec<SliceAction>,
    /// The slice that covers the desired PodSets once admitted (`None` while an eviction drains).
    pub target: Option<String>,
}

/// What makes PodSets the same for quota: KubeRay group, per-pod requests and placement (node
/// selector, tolerations), whatever the name.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Shape {
    pub group: String,
    pub requests: Resources,
    pub placement: Placement,
}

impl Shape {
    /// Whether the desired PodSet `p` has this shape.
    pub(crate) fn fits(&self, p: &PodSet) -> bool {
        self.group == p.group && self.requests == p.requests && self.placement == p.placement()
    }
}

/// The shape of a Workload PodSet (`None` when its template cannot be read). The template is the
/// user's (desired PodSets leave out what raygate injected, see [`crate::podsets::of_child`]).
pub(crate) fn shape(ps: &kueue::PodSet) -> Option<Shape> {
    let group = ps
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(GROUP_ANNOTATION))
        .cloned()
        .unwrap_or_else(|| ps.name.clone());
    let requests = match &ps.template.spec {
        Some(spec) => pod_requests(spec, "template.spec", &ps.name).ok()?,
        None => Resources::new(),
    };
    Some(Shape {
        group,
        requests,
        placement: Placement::of(&ps.template),
    })
}

/// What an admitted slice grants, PodSet by PodSet: KubeRay group, per-pod requests and granted
/// count (for the pod ungater; a PodSet whose template cannot be read grants nothing).
pub fn grants(w: &Workload) -> Vec<crate::gate::pod_gate::Grant> {
    w.spec
        .pod_sets
        .iter()
        .filter_map(|ps| {
            shape(ps).map(|s| crate::gate::pod_gate::Grant {
                group: s.group,
                requests: s.requests,
                count: granted(w, ps),
            })
        })
        .collect()
}

/// Count a slice grants a PodSet: the admitted count capped by the spec count; 0 when unassigned.
fn granted(w: &Workload, ps: &kueue::PodSet) -> i32 {
    let admitted = w
        .status
        .as_ref()
        .and_then(|s| s.admission.as_ref())
        .and_then(|a| a.pod_set_assignments.iter().find(|p| p.name == ps.name))
        // An assignment without a count (older Kueue) grants the spec count; a PodSet with no
        // assignment, or a slice with no admission, grants nothing.
        .map(|p| p.count.unwrap_or(ps.count))
        .unwrap_or(0);
    admitted.min(ps.count)
}

// ------------------------------------------------------------------------------------------------
// Aligning desired PodSets with a chain
// ------------------------------------------------------------------------------------------------

/// A Workload PodSet for a desired PodSet: its template with metadata cut to labels and
/// annotations (all Kueue accepts there) plus the group annotation.
fn workload_podset(p: &PodSet, name: &str) -> kueue::PodSet {
    let meta = p.template.metadata.clone().unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(GROUP_ANNOTATION.to_string(), p.group.clone());
    kueue::PodSet {
        name: name.to_string(),
        count: p.count,
        min_count: None,
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: meta.labels,
                annotations: Some(annotations),
                ..Default::default()
            }),
            spec: p.template.spec.clone(),
        },
    }
}

/// Desired PodSets renamed onto `chain`'s PodSets by shape (group, per-pod requests, placement),
/// in the chain's order; chain PodSets nothing matches follow with count 0; desired PodSets new
/// to the chain come last, under their own name or a shape-suffixed one when the chain uses that
/// name already.
fn align(desired: &[PodSet], chain: &[kueue::PodSet]) -> Aligned {
    let chain_shapes: Vec<Option<Shape>> = chain.iter().map(shape).collect();
    let mut matched: Vec<Option<&PodSet>> = vec![None; chain.len()];
    let mut unmatched: Vec<&PodSet> = Vec::new();
    for d in desired {
        let slot = (0..chain.len())
            .find(|&i| matched[i].is_none() && chain_shapes[i].as_ref().is_some_and(|s| s.fits(d)));
        match slot {
            Some(i) => matched[i] = Some(d),
            None => unmatched.push(d),
        }
    }
    let mut out: Vec<kueue::PodSet> = chain
        .iter()
        .zip(&matched)
        .map(|(c, m)| match m {
            Some(d) => workload_podset(d, &c.name),
            None => kueue::PodSet {
                count: 0,
                ..c.clone()
            },
        })
        .collect();
    let leftover: Vec<bool> = matched.iter().map(Option::is_none).collect();
    let new = unmatched.len();
    for d in unmatched {
        let mut candidate = d.name.clone();
        for hex_len in [8, 16, 64] {
            if !out.iter().any(|o| o.name == candidate) {
                break;
            }
            candidate = shape_name(&d.name, d, hex_len);
        }
        out.push(workload_podset(d, &candidate));
    }
    Aligned {
        list: out,
        leftover,
        new,
    }
}

/// Desired PodSets laid onto a chain's list (see [`align`]).
struct Aligned {
    list: Vec<kueue::PodSet>,
    /// Per chain PodSet (a prefix of `list`): nothing desired matched it; it stays at count 0.
    leftover: Vec<bool>,
    /// How many entries at the end of `list` are new to the chain.
    new: usize,
}

impl Aligned {
    /// The list without the chain's leftovers (for slices whose PodSet list may change).
    fn without_leftovers(self) -> Vec<kueue::PodSet> {
        let leftover = self.leftover;
        self.list
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !leftover.get(*i).copied().unwrap_or(false))
            .map(|(_, p)| p)
            .collect()
    }
}

#[cfg(test)]
fn counts(list: &[kueue::PodSet]) -> Vec<(&str, i32)> {
    list.iter().map(|p| (p.name.as_str(), p.count)).collect()
}

/// `stored` with each PodSet's count taken from `counts` (same order and length), nothing else
/// changed.
fn scaled_down(stored: &[kueue::PodSet], counts: &[kueue::PodSet]) -> Vec<kueue::PodSet> {
    stored
        .iter()
        .zip(counts)
        .map(|(s, c)| kueue::PodSet {
            count: c.count.min(s.count),
            ..s.clone()
        })
        .collect()
}

/// Same names, counts and shapes (group, per-pod requests, placement), in order.
fn same_podsets(a: &[kueue::PodSet], b: &[kueue::PodSet]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.name == y.name && x.count == y.count && shape(x) == shape(y))
}

/// Whether `w`, once admitted, grants every desired pod: each desired PodSet matches one of its
/// PodSets by shape (group, per-pod requests, placement) with a granted count at least as large. This is the
/// gate's shape-exact race guard.
pub fn covers(w: &Workload, desired: &[PodSet]) -> bool {
    let aligned = align(desired, &w.spec.pod_sets);
    aligned.new == 0
        && aligned
            .list
            .iter()
            .zip(&w.spec.pod_sets)
            .all(|(a, have)| a.count <= granted(w, have))
}

// ------------------------------------------------------------------------------------------------
// Planning
// ------------------------------------------------------------------------------------------------

/// The Workload object of a new slice.
fn build(
    ctx: &SliceContext,
    name: &str,
    pod_sets: Vec<kueue::PodSet>,
    root: &str,
    replacing: Option<(&str, &str)>,
) -> Workload {
    let mut annotations = std::collections::BTreeMap::from([
        (ELASTIC_JOB_ANNOTATION.to_string(), "true".to_string()),
        (WORKLOAD_SLICE_NAME_ANNOTATION.to_string(), root.to_string()),
    ]);
    if let Some((annotation, old)) = replacing {
        annotations.insert(annotation.to_string(), old.to_string());
    }
    let labels = std::collections::BTreeMap::from([
        (QUEUE_NAME_LABEL.to_string(), ctx.queue_name.clone()),
        (RAYSERVICE_LABEL.to_string(), ctx.owner.name.clone()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            MANAGED_BY.to_string(),
        ),
    ]);
    let mut w = Workload::new(
        name,
        WorkloadSpec {
            pod_sets,
            queue_name: Some(ctx.queue_name.clone()),
            priority_class_ref: ctx.priority_class_ref.clone(),
            priority: ctx.priority,
            active: None,
        },
    );
    w.metadata = ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(ctx.owner.namespace.clone()),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: Some(vec![OwnerReference {
            api_version: "ray.io/v1".into(),
            kind: "RayService".into(),
            name: ctx.owner.name.clone(),
            uid: ctx.owner.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..Default::default()
    };
    w
}

/// Whether a slice carries the owner's current queue and priority class. A class that does not
/// resolve (label removed, or the WorkloadPriorityClass missing or not yet seen) changes nothing,
/// so a transiently missing class never recreates a slice at priority 0.
fn same_queue_and_priority(ctx: &SliceContext, w: &Workload) -> bool {
    let same_class = match &ctx.priority_class_ref {
        Some(want) => w.spec.priority_class_ref.as_ref().map(|r| &r.name) == Some(&want.name),
        None => true,
    };
    w.spec.queue_name.as_deref() == Some(ctx.queue_name.as_str()) && same_class
}

/// Plans the owner's slices for `desired` PodSets, given its Workloads (any state; finished ones
/// only reserve their names).
pub fn plan(ctx: &SliceContext, desired: &[PodSet], workloads: &[Workload]) -> SlicePlan {
    let taken: BTreeSet<String> = workloads.iter().map(|w| meta::name(&w.metadata)).collect();
    let mut live: Vec<&Workload> = workloads
        .iter()
        .filter(|w| !workload::is_finished(w.status.as_ref()))
        .collect();
    workload::sort_chain_order(&mut live, workloads);
    let mut actions = Vec::new();
    let Some(live) = finish_evicted(ctx, live, &mut actions) else {
        return SlicePlan {
            actions,
            target: None,
        };
    };
    let head = finish_older_reserved(&live, &mut actions);
    let candidate = finish_stale_pending(&live, head, &mut actions);
    let target = match head {
        None => track_without_quota(ctx, desired, candidate, &taken, &mut actions),
        Some(head) => follow_head(ctx, desired, head, candidate, &taken, &mut actions),
    };
    SlicePlan {
        actions,
        target: Some(target),
    }
}

/// Evicted slices (preempted, queue stopped) keep their quota until the owner's pods are gone,
/// then finish; a deactivated one (`spec.active=false`) is the user's stop and stays. Returns the
/// slices not evicted, or `None` while an eviction drains.
fn finish_evicted<'a>(
    ctx: &SliceContext,
    live: Vec<&'a Workload>,
    actions: &mut Vec<SliceAction>,
) -> Option<Vec<&'a Workload>> {
    let (evicted, live): (Vec<&Workload>, Vec<&Workload>) = live
        .into_iter()
        .partition(|w| workload::is_evicted(w.status.as_ref()) && w.spec.active != Some(false));
    if !evicted.is_empty() && ctx.children_exist {
        return None;
    }
    for e in &evicted {
        actions.push(SliceAction::Finish {
            name: meta::name(&e.metadata),
            reason: reason::OUT_OF_SYNC,
            message: "evicted and the RayService's pods are gone; a new slice is queued".into(),
        });
    }
    Some(live)
}

/// At most one reserved slice: the newest (the head). Older ones were replaced (or are strays)
/// and finish.
fn finish_older_reserved<'a>(
    live: &[&'a Workload],
    actions: &mut Vec<SliceAction>,
) -> Option<&'a Workload> {
    let reserved: Vec<&Workload> = live
        .iter()
        .copied()
        .filter(|w| workload::holds_quota(w.status.as_ref()))
        .collect();
    let head = reserved.last().copied();
    for old in reserved.iter().rev().skip(1) {
        let replaced = live
            .iter()
            .any(|w| workload::predecessor(w) == Some(meta::key(&old.metadata)));
        actions.push(SliceAction::Finish {
            name: meta::name(&old.metadata),
            reason: if replaced {
                reason::WORKLOAD_SLICE_REPLACED
            } else {
                reason::OUT_OF_SYNC
            },
            message: match head {
                Some(h) if replaced => format!("replaced by {}", meta::name(&h.metadata)),
                Some(h) => format!("superseded by reserved slice {}", meta::name(&h.metadata)),
                None => String::new(),
            },
        });
    }
    head
}

/// At most one pending slice: the newest that replaces the head (or, with no head, the newest);
/// the other pending slices finish.
fn finish_stale_pending<'a>(
    live: &[&'a Workload],
    head: Option<&Workload>,
    actions: &mut Vec<SliceAction>,
) -> Option<&'a Workload> {
    let pending: Vec<&Workload> = live
        .iter()
        .copied()
        .filter(|w| !workload::holds_quota(w.status.as_ref()))
        .collect();
    let candidate = match head {
        Some(h) => pending
            .iter()
            .rev()
            .find(|w| workload::predecessor(w) == Some(meta::key(&h.metadata)))
            .copied(),
        None => pending.last().copied(),
    };
    for p in pending
        .iter()
        .filter(|p| !candidate.is_some_and(|c| std::ptr::eq(c, **p)))
    {
        actions.push(SliceAction::Finish {
            name: meta::name(&p.metadata),
            reason: reason::OUT_OF_SYNC,
            message: "a stale pending slice; the chain moved on".into(),
        });
    }
    candidate
}

/// No quota held: one pending slice tracks the desired PodSets in place (or a new one is
/// created). Returns the target slice's name.
fn track_without_quota(
    ctx: &SliceContext,
    desired: &[PodSet],
    candidate: Option<&Workload>,
    taken: &BTreeSet<String>,
    actions: &mut Vec<SliceAction>,
) -> String {
    match candidate.filter(|p| requeue_unless_current(ctx, p, actions)) {
        Some(p) => {
            let aligned = align(desired, &p.spec.pod_sets).without_leftovers();
            if !same_podsets(&aligned, &p.spec.pod_sets) {
                actions.push(SliceAction::SetPodSets {
                    name: meta::name(&p.metadata),
                    pod_sets: aligned,
                    why: "pending slice follows the PodSets",
                });
            }
            meta::name(&p.metadata)
        }
        None => {
            let pod_sets = align(desired, &[]).list;
            let n = workload::slice_name(&ctx.owner.name, &ctx.owner.uid, None, &pod_sets, taken);
            actions.push(SliceAction::Create {
                workload: Box::new(build(ctx, &n, pod_sets, &n, None)),
                replaces: None,
            });
            n
        }
    }
}

/// Whether pending slice `p` carries the current queue and priority; if not, it holds no quota
/// and finishes, so a new slice (a fixed queue label typo, a raised priority class) takes effect.
fn requeue_unless_current(
    ctx: &SliceContext,
    p: &Workload,
    actions: &mut Vec<SliceAction>,
) -> bool {
    if same_queue_and_priority(ctx, p) {
        return true;
    }
    actions.push(SliceAction::Finish {
        name: meta::name(&p.metadata),
        reason: reason::OUT_OF_SYNC,
        message: format!(
            "the RayService's queue or priority class changed (LocalQueue {}, priority class {}): a new slice replaces it",
            ctx.queue_name,
            ctx.priority_class_ref
                .as_ref()
                .map(|r| r.name.as_str())
                .unwrap_or("none")
        ),
    });
    false
}

/// The reserved head covers an equal or smaller need: shrink it in place, drop any pending
/// replacement. Otherwise a scale-up. Returns the target slice's name.
fn follow_head(
    ctx: &SliceContext,
    desired: &[PodSet],
    head: &Workload,
    candidate: Option<&Workload>,
    taken: &BTreeSet<String>,
    actions: &mut Vec<SliceAction>,
) -> String {
    let aligned = align(desired, &head.spec.pod_sets);
    let within_head = aligned.new == 0
        && aligned
            .list
            .iter()
            .zip(&head.spec.pod_sets)
            .all(|(a, h)| a.count <= h.count);
    if !within_head {
        return scale_up(ctx, head, aligned, candidate, taken, actions);
    }
    // Kueue keeps a reserved Workload's PodSets immutable but for count decreases: Kueue
    // v0.19.2 `pkg/webhooks/workload_webhook.go`, `ValidateWorkloadUpdate` →
    // `validateImmutablePodSets` (same length, index by index) → `validateImmutablePodSet`
    // (semantically equal once a lower `count` is put back; elastic workloads only). So the
    // in-place list is the head's own with new counts (as Kueue's `ApplyPodSetCounts`); a
    // template change of the same shape (an image-only upgrade) is not written to a reserved
    // slice.
    let shrunk = scaled_down(&head.spec.pod_sets, &aligned.list);
    if shrunk != head.spec.pod_sets {
        actions.push(SliceAction::SetPodSets {
            name: meta::name(&head.metadata),
            pod_sets: shrunk,
            why: "scale-down in place",
        });
    }
    if let Some(p) = candidate {
        actions.push(SliceAction::Finish {
            name: meta::name(&p.metadata),
            reason: reason::OUT_OF_SYNC,
            message: format!(
                "no longer needed: {} covers the PodSets",
                meta::name(&head.metadata)
            ),
        });
    }
    meta::name(&head.metadata)
}

/// A scale-up of the reserved head: a replacement slice (or, Kueue-compatible with PodSets new
/// to the chain, the root of a new chain); a pending one of the same kind follows the PodSets.
fn scale_up(
    ctx: &SliceContext,
    head: &Workload,
    aligned: Aligned,
    candidate: Option<&Workload>,
    taken: &BTreeSet<String>,
    actions: &mut Vec<SliceAction>,
) -> String {
    let new_chain = ctx.mode == ChainMode::KueueCompatible && aligned.new > 0;
    let (pod_sets, link) = if new_chain {
        (aligned.without_leftovers(), SUPERSEDES_ANNOTATION)
    } else if ctx.mode == ChainMode::KueueCompatible {
        (aligned.list, WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION)
    } else {
        (
            aligned.without_leftovers(),
            WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION,
        )
    };
    let pod_sets = match candidate {
        Some(p) => match follow_pending_replacement(p, link, pod_sets, actions) {
            Ok(target) => return target,
            Err(pod_sets) => pod_sets,
        },
        None => pod_sets,
    };
    let head_key = meta::key(&head.metadata);
    let n = workload::slice_name(
        &ctx.owner.name,
        &ctx.owner.uid,
        Some(&head_key),
        &pod_sets,
        taken,
    );
    let root = if new_chain {
        n.clone()
    } else {
        meta::annotation(&head.metadata, WORKLOAD_SLICE_NAME_ANNOTATION)
            .map(str::to_string)
            .unwrap_or_else(|| meta::name(&head.metadata))
    };
    let workload = build(ctx, &n, pod_sets, &root, Some((link, &head_key)));
    actions.push(SliceAction::Create {
        workload: Box::new(workload),
        replaces: Some(meta::name(&head.metadata)),
    });
    n
}

/// A pending replacement linked the same way (`link`) follows `pod_sets` and stays the target
/// (`Ok`); one linked the other way finishes and the PodSets go to a new slice (`Err`).
fn follow_pending_replacement(
    p: &Workload,
    link: &str,
    pod_sets: Vec<kueue::PodSet>,
    actions: &mut Vec<SliceAction>,
) -> Result<String, Vec<kueue::PodSet>> {
    if meta::annotation(&p.metadata, link).is_none() {
        actions.push(SliceAction::Finish {
            name: meta::name(&p.metadata),
            reason: reason::OUT_OF_SYNC,
            message: "the PodSets changed shape; a new slice replaces it".into(),
        });
        return Err(pod_sets);
    }
    if !same_podsets(&p.spec.pod_sets, &pod_sets) {
        actions.push(SliceAction::SetPodSets {
            name: meta::name(&p.metadata),
            pod_sets,
            why: "pending replacement follows the PodSets",
        });
    }
    Ok(meta::name(&p.metadata))
}

// ------------------------------------------------------------------------------------------------
// Retention
// ------------------------------------------------------------------------------------------------

/// How long finished slices are kept (like Kueue's `objectRetentionPolicies.workloads.afterFinished`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A finished slice older than this (since its `Finished` condition) may be deleted.
    pub after_finished: std::time::Duration,
    /// The newest this many finished slices of each chain are kept whatever their age, for debugging.
    pub keep_per_chain: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            after_finished: std::time::Duration::from_secs(3600),
            keep_per_chain: 3,
        }
    }
}

/// When `w` finished (`Finished=True`'s transition time).
fn finished_at(w: &Workload) -> Option<k8s_openapi::jiff::Timestamp> {
    conditions::find_true(&w.status.as_ref()?.conditions, condition::FINISHED)
        .map(|c| c.last_transition_time.0)
}

/// The finished slices to delete at `now`: finished longer than `after_finished` ago and not among
/// the newest `keep_per_chain` finished slices of their chain (`workload-slice-name`, else their
/// own name). Oldest first.
pub fn expired(
    workloads: &[Workload],
    now: k8s_openapi::jiff::Timestamp,
    retention: &Retention,
) -> Vec<String> {
    let mut by_chain: std::collections::BTreeMap<String, Vec<&Workload>> = Default::default();
    for w in workloads
        .iter()
        .filter(|w| workload::is_finished(w.status.as_ref()))
    {
        let chain = meta::annotation(&w.metadata, WORKLOAD_SLICE_NAME_ANNOTATION)
            .map(str::to_string)
            .unwrap_or_else(|| meta::name(&w.metadata));
        by_chain.entry(chain).or_default().push(w);
    }
    let after = k8s_openapi::jiff::SignedDuration::try_from(retention.after_finished)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    let mut out = Vec::new();
    for mut chain in by_chain.into_values() {
        workload::sort_chain_order(&mut chain, workloads);
        let old = chain.len().saturating_sub(retention.keep_per_chain);
        for w in &chain[..old] {
            let expired = finished_at(w).is_some_and(|at| {
                at.checked_add(after)
                    .map(|deadline| deadline <= now)
                    .unwrap_or(false)
            });
            if expired {
                out.push(meta::name(&w.metadata));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
