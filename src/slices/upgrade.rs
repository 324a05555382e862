//! An upgrade's slice evicted while the serving child keeps running.
//!
//! Once Kueue admits a replacement slice it finishes the slice it replaces
//! (`pkg/scheduler/scheduler.go`, `replaceWorkloadSlice`), so during an upgrade the replacement
//! is the serving child's only coverage; when it is evicted (preempted, or `waitForPodsReady`),
//! Kueue keeps its quota reserved until the job's integration stops the job and clears the
//! reservation (`pkg/controller/jobframework/reconciler.go`, `ReconcileGenericJob`: an evicted
//! Workload's job is stopped, then `UnsetQuotaReservationWithCondition`). raygate is that
//! integration and stops only the upgrade: the pending children are held, the evicted slice
//! keeps its reservation for the serving child, shrinks in place to the serving child's PodSets
//! once the others are held (a count decrease, which Kueue's webhook allows on a reserved
//! Workload), and the upgrade's delta is queued again as a replacement of it. Nothing the
//! serving child runs is ever left without a reservation.

use std::collections::BTreeSet;

use super::shapes::{align, scaled_down};
use super::{SliceAction, SliceContext, SlicePlan, finish_stale_pending, follow_head};
use crate::meta;
use crate::podsets::PodSet;
use crate::types::kueue::Workload;
use crate::workload;

/// The serving child's coverage while an upgrade's slice is evicted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServingCover {
    /// The serving child's PodSets.
    pub podsets: Vec<PodSet>,
    /// Every other child is suspended again: the evicted slice may shrink to `podsets`.
    pub upgrade_held: bool,
}

/// Whether `w` grants more than the `serving` PodSets need (an upgrade's delta is part of it).
pub fn beyond(w: &Workload, serving: &[PodSet]) -> bool {
    let aligned = align(serving, &w.spec.pod_sets);
    aligned
        .list
        .iter()
        .zip(&w.spec.pod_sets)
        .any(|(s, g)| g.count > s.count)
}

/// The plan while an evicted slice covers the serving child (`None` when no slice is evicted):
/// the newest evicted slice stays the target until the upgrade's children are held, then it
/// shrinks to the serving child's PodSets and the desired PodSets follow it as from a reserved
/// head (a replacement slice charged the upgrade's delta, or nothing when no upgrade is left).
pub(super) fn requeue(
    ctx: &SliceContext,
    serving: &ServingCover,
    desired: &[PodSet],
    live: &[&Workload],
    taken: &BTreeSet<String>,
) -> Option<SlicePlan> {
    let evicted = live
        .iter()
        .copied()
        .rfind(|w| workload::is_evicted(w.status.as_ref()) && w.spec.active != Some(false))?;
    let mut actions = Vec::new();
    let others: Vec<&Workload> = live
        .iter()
        .copied()
        .filter(|w| !workload::is_evicted(w.status.as_ref()))
        .collect();
    let candidate = finish_stale_pending(&others, Some(evicted), &mut actions);
    let name = meta::name(&evicted.metadata);
    let aligned = align(&serving.podsets, &evicted.spec.pod_sets);
    let within = aligned.new == 0
        && aligned
            .list
            .iter()
            .zip(&evicted.spec.pod_sets)
            .all(|(a, e)| a.count <= e.count);
    if !serving.upgrade_held || !within {
        return Some(SlicePlan {
            actions,
            target: Some(name),
        });
    }
    let shrunk = scaled_down(&evicted.spec.pod_sets, &aligned.list);
    if shrunk != evicted.spec.pod_sets {
        actions.push(SliceAction::SetPodSets {
            name,
            pod_sets: shrunk.clone(),
            why: "evicted during an upgrade: keeps only the serving child",
        });
    }
    let mut head = evicted.clone();
    head.spec.pod_sets = shrunk;
    let target = follow_head(ctx, desired, &head, candidate, taken, &mut actions);
    Some(SlicePlan {
        actions,
        target: Some(target),
    })
}
