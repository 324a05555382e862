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
//!   a replacement charged by its delta ([`AdmissionMode::Builtin`]). A real Kueue's flavor assigner
//!   panics on such a replacement, so with [`AdmissionMode::Kueue`] the replacement keeps the
//!   chain's PodSet list identical (vanished groups keep count 0) and a PodSet new to the chain
//!   starts a new chain (annotated [`SUPERSEDES_ANNOTATION`]), charged in full.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use crate::admission::AdmissionMode;
use crate::meta;
use crate::podsets::PodSet;
use crate::types::kueue::{
    self, ELASTIC_JOB_ANNOTATION, PriorityClassRef, QUEUE_NAME_LABEL,
    WORKLOAD_SLICE_NAME_ANNOTATION, WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION, Workload,
    WorkloadSpec, reason,
};
use crate::workload::{self, SUPERSEDES_ANNOTATION};

pub mod lapsed;
mod retention;
mod shapes;
mod upgrade;

pub use retention::{Retention, expired};
#[cfg(test)]
use shapes::counts;
use shapes::{Aligned, align, same_podsets, scaled_down};
pub use shapes::{Grant, covers, grants};
pub(crate) use shapes::{Shape, shape};
pub use upgrade::{ServingCover, beyond};

/// Annotation on a Workload PodSet template naming the KubeRay worker group (`headgroup` for heads).
pub const GROUP_ANNOTATION: &str = "raygate.io/worker-group";
/// Label on raygate's Workloads naming their RayService.
pub const RAYSERVICE_LABEL: &str = "raygate.io/rayservice";
/// `app.kubernetes.io/managed-by` value on raygate's Workloads.
pub const MANAGED_BY: &str = "raygate";

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
    pub mode: AdmissionMode,
    /// Whether any child RayCluster still exists (an evicted slice keeps its quota until none does).
    pub children_exist: bool,
    /// Set while an upgrade's slice is evicted and the serving child keeps running (see
    /// [`upgrade`]).
    pub serving: Option<ServingCover>,
    /// The decision's time, for Kueue's requeuing backoff of an evicted slice (`None`: no
    /// backoff is waited for).
    pub now: Option<Timestamp>,
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
    /// Set a live slice's `spec.priorityClassRef` and `spec.priority` in place: the owner's
    /// priority class or its value changed (as Kueue v0.19.2's job reconciler
    /// `UpdateWorkloadPriority` and its WorkloadPriorityClass controller update Workloads).
    SetPriority {
        name: String,
        priority_class_ref: PriorityClassRef,
        priority: i32,
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

/// Whether a slice carries the owner's current queue.
fn same_queue(ctx: &SliceContext, w: &Workload) -> bool {
    w.spec.queue_name.as_deref() == Some(ctx.queue_name.as_str())
}

/// Plans the owner's slices for `desired` PodSets, given its Workloads (any state; finished ones
/// only reserve their names).
pub fn plan(ctx: &SliceContext, desired: &[PodSet], workloads: &[Workload]) -> SlicePlan {
    let mut p = plan_chain(ctx, desired, workloads);
    follow_priority(ctx, workloads, &mut p.actions);
    p
}

/// Every slice left live by `actions` carries the owner's current priority class and value,
/// updated in place so a pending slice keeps its place in the queue. A class that does not
/// resolve (label removed, or the WorkloadPriorityClass missing or not yet seen) changes nothing,
/// so a transiently missing class never drops a slice to priority 0; and a slice that reserved
/// quota without a class keeps none (Kueue's Workload CEL: `priorityClassRef is immutable while
/// workload quota reserved`, which Kueue's `classifyWorkloadsForPriorityUpdate` respects too).
fn follow_priority(ctx: &SliceContext, workloads: &[Workload], actions: &mut Vec<SliceAction>) {
    let (Some(want), Some(value)) = (&ctx.priority_class_ref, ctx.priority) else {
        return;
    };
    let finished: BTreeSet<String> = actions
        .iter()
        .filter_map(|a| match a {
            SliceAction::Finish { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    for w in workloads
        .iter()
        .filter(|w| !workload::is_finished(w.status.as_ref()))
        .filter(|w| !finished.contains(&meta::name(&w.metadata)))
    {
        let current = w.spec.priority_class_ref.as_ref();
        if current.is_none() && workload::holds_quota(w.status.as_ref()) {
            continue;
        }
        if current == Some(want) && w.spec.priority == Some(value) {
            continue;
        }
        actions.push(SliceAction::SetPriority {
            name: meta::name(&w.metadata),
            priority_class_ref: want.clone(),
            priority: value,
        });
    }
}

fn plan_chain(ctx: &SliceContext, desired: &[PodSet], workloads: &[Workload]) -> SlicePlan {
    let taken: BTreeSet<String> = workloads.iter().map(|w| meta::name(&w.metadata)).collect();
    let mut live: Vec<&Workload> = workloads
        .iter()
        .filter(|w| !workload::is_finished(w.status.as_ref()))
        .collect();
    workload::sort_chain_order(&mut live, workloads);
    if let Some(serving) = &ctx.serving
        && let Some(plan) = upgrade::requeue(ctx, serving, desired, &live, &taken)
    {
        return plan;
    }
    let mut actions = Vec::new();
    let Some((live, requeued)) = finish_evicted(ctx, live, &mut actions) else {
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
    carry_requeue_count(requeued, &mut actions);
    SlicePlan {
        actions,
        target: Some(target),
    }
}

/// Evicted slices (preempted, queue stopped) keep their quota until the owner's pods are gone,
/// then finish; a deactivated one (`spec.active=false`) is the user's stop and stays. One Kueue
/// evicted for `waitForPodsReady` finishes only once its requeuing backoff
/// (`status.requeueState.requeueAt`, Kueue's `UpdateRequeueState`) has passed. Returns the slices
/// not evicted and the highest requeue count of those finished, or `None` while an eviction
/// drains or backs off.
fn finish_evicted<'a>(
    ctx: &SliceContext,
    live: Vec<&'a Workload>,
    actions: &mut Vec<SliceAction>,
) -> Option<(Vec<&'a Workload>, Option<i32>)> {
    let (evicted, live): (Vec<&Workload>, Vec<&Workload>) = live
        .into_iter()
        .partition(|w| workload::is_evicted(w.status.as_ref()) && w.spec.active != Some(false));
    if !evicted.is_empty() && ctx.children_exist {
        return None;
    }
    let requeue = |w: &Workload| w.status.as_ref().and_then(|s| s.requeue_state.clone());
    let backing_off = |w: &&Workload| {
        let at = requeue(w).and_then(|r| r.requeue_at).map(|t| t.0);
        matches!((at, ctx.now), (Some(at), Some(now)) if at > now)
    };
    if evicted.iter().any(backing_off) {
        return None;
    }
    for e in &evicted {
        actions.push(SliceAction::Finish {
            name: meta::name(&e.metadata),
            reason: reason::OUT_OF_SYNC,
            message: "evicted and the RayService's pods are gone; a new slice is queued".into(),
        });
    }
    let count = evicted.iter().filter_map(|w| requeue(w)?.count).max();
    Some((live, count))
}

/// When the earliest requeuing backoff of the evicted live slices ends, if after `now`: nothing
/// else wakes the gate then, so the controller looks again at that moment.
pub fn backoff_ends(workloads: &[Workload], now: Timestamp) -> Option<Timestamp> {
    workloads
        .iter()
        .filter(|w| {
            workload::is_evicted(w.status.as_ref()) && !workload::is_finished(w.status.as_ref())
        })
        .filter_map(|w| {
            w.status
                .as_ref()?
                .requeue_state
                .as_ref()?
                .requeue_at
                .as_ref()
        })
        .map(|t| t.0)
        .filter(|at| *at > now)
        .min()
}

/// A new slice queued after an eviction carries the evicted slice's requeue count in its status,
/// so Kueue's next `waitForPodsReady` eviction counts on from it and `backoffLimitCount`
/// deactivates a RayService that never gets ready, as it would a job.
fn carry_requeue_count(count: Option<i32>, actions: &mut [SliceAction]) {
    let Some(count) = count else { return };
    for a in actions {
        if let SliceAction::Create { workload, .. } = a {
            workload
                .status
                .get_or_insert_with(Default::default)
                .requeue_state = Some(crate::types::kueue::RequeueState {
                count: Some(count),
                requeue_at: None,
            });
        }
    }
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

/// Whether pending slice `p` is in the current queue; if not, it holds no quota and finishes,
/// so a new slice (a fixed queue label typo) takes effect.
fn requeue_unless_current(
    ctx: &SliceContext,
    p: &Workload,
    actions: &mut Vec<SliceAction>,
) -> bool {
    if same_queue(ctx, p) {
        return true;
    }
    actions.push(SliceAction::Finish {
        name: meta::name(&p.metadata),
        reason: reason::OUT_OF_SYNC,
        message: format!(
            "the RayService's queue changed (LocalQueue {}): a new slice replaces it",
            ctx.queue_name
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
    let new_chain = ctx.mode == AdmissionMode::Kueue && aligned.new > 0;
    let (pod_sets, link) = if new_chain {
        (aligned.without_leftovers(), SUPERSEDES_ANNOTATION)
    } else if ctx.mode == AdmissionMode::Kueue {
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

#[cfg(test)]
mod tests;
