//! Preemption (Kueue's classical preemption, `pkg/scheduler/preemption`): which admitted
//! Workloads to evict so that a pending one fits.
//!
//! Candidates are admitted Workloads that use a (flavor, resource) the preemptor is short of:
//! in its own ClusterQueue per `withinClusterQueue` (`LowerPriority`, or
//! `LowerOrNewerEqualPriority`), and in other ClusterQueues of its cohort tree per
//! `reclaimWithinCohort` (`LowerPriority` or `Any`) where the tree says the quota they use is
//! borrowed: Kueue v0.19.2's hierarchical cohorts (kubernetes-sigs/kueue#4806, issues #3779 and
//! #3948), mirrored from `classical/hierarchical_preemption.go` (`classifyPreemptionVariant`,
//! `collectSameQueueCandidates`, `collectCandidatesForHierarchicalReclaim`,
//! `collectCandidatesInSubtree`), `classical/candidate_generator.go` (`NewCandidateIterator`,
//! `candidateIsValid`), `preemption.go` (`classicalPreemptions`, `fillBackWorkloads`,
//! `workloadFits`, `queueUnderNominalInResourcesNeedingPreemption`) and
//! `pkg/cache/scheduler/resource_node.go` (`QuantitiesFitInQuota`,
//! `IsWithinNominalInResources`). A ClusterQueue over its nominal quota inside a Cohort that is
//! within its own subtree quota is not borrowing from outside that Cohort; a preemptor whose
//! ClusterQueue, or a Cohort on its path, holds its request within quota is closer to the quota
//! and may reclaim it even while borrowing. They are tried in Kueue's order (already being
//! evicted first; hierarchical reclaim, then reclaim by priority, then the own ClusterQueue;
//! lower priority first, most recently admitted first), added until the preemptor fits, then
//! every one that is not needed is dropped again walking back: a minimal set.

use super::ids::{CqIx, FrIx, NodeIx, TiSlice, WorkloadIx};
use super::index::Index;
use super::quota::{Charges, Usage};
use crate::quantity::Quantity;
use crate::types::kueue::{ReclaimWithinCohort, WithinClusterQueue};

/// A Workload to evict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Victim {
    pub workload: WorkloadIx,
    /// In the preemptor's own ClusterQueue (else reclaimed from another one in the cohort).
    pub same_queue: bool,
}

/// The preemptor.
pub(crate) struct Preemptor<'a> {
    pub workload: WorkloadIx,
    pub cq: CqIx,
    /// What must fit, per (flavor, resource).
    pub need: &'a [(FrIx, Quantity)],
    /// Pairs where it does not fit now.
    pub short: &'a [FrIx],
    /// A Workload that must not be chosen (the slice a replacement replaces).
    pub spare: Option<WorkloadIx>,
}

/// Quota held by a Workload admitted earlier in the same pass: (ClusterQueue, usage per
/// (flavor, resource)). Indexed by Workload; empty when only the pass's starting holders count.
pub(crate) type Admitted = TiSlice<WorkloadIx, Option<(CqIx, Charges)>>;

/// Holders per ClusterQueue.
pub(crate) type Holders = TiSlice<CqIx, Vec<WorkloadIx>>;

/// Per-cycle facts about Workloads the search must respect.
pub(crate) struct Exclusions<'a> {
    /// Gone this cycle (finished): hold nothing.
    pub gone: &'a TiSlice<WorkloadIx, bool>,
    /// Already being evicted (status or earlier this cycle): preferred, not evicted twice.
    pub evicting: &'a TiSlice<WorkloadIx, bool>,
    /// Admitted in this pass (see [`Admitted`]): what they hold, for a search that counts them.
    pub admitted: &'a Admitted,
}

/// The ClusterQueue and usage `w` holds: from this pass's admissions, else from its status.
fn holding<'a>(
    ix: &'a Index,
    ex: &Exclusions<'a>,
    w: WorkloadIx,
) -> Option<(CqIx, &'a [(FrIx, Quantity)])> {
    if let Some(Some((cq, usage))) = ex.admitted.get(w) {
        return Some((*cq, usage.as_slice()));
    }
    let held = ix.workloads[w].held.as_ref()?;
    Some((held.cq?, held.usage.as_slice()))
}

/// Kueue's `preemptionVariant`, less `Never` (not a candidate) and `ReclaimWhileBorrowing`
/// (needs `borrowWithinCohort`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// In the preemptor's own ClusterQueue.
    WithinClusterQueue,
    /// The preemptor's ClusterQueue, or a Cohort on its path below the two's lowest common
    /// ancestor, holds what it asks for within its own subtree quota: the preemptor is closer to
    /// the quota the candidate uses, and may take it back even while borrowing.
    HierarchicalReclaim,
    /// Reclaimed only if the preemptor then fits without borrowing.
    ReclaimWithoutBorrowing,
    /// Reclaimed even if the preemptor still borrows then: `borrowWithinCohort: LowerPriority`
    /// and a candidate of lower priority than the preemptor, at most its
    /// `maxPriorityThreshold`.
    ReclaimWhileBorrowing,
}

struct Candidate {
    workload: WorkloadIx,
    cq: CqIx,
    same_queue: bool,
    evicting: bool,
    variant: Variant,
    /// The lowest Cohort holding both the candidate's and the preemptor's ClusterQueue (`None`
    /// in the preemptor's own ClusterQueue).
    lca: Option<NodeIx>,
}

fn uses_any(ix: &Index, ex: &Exclusions, w: WorkloadIx, frs: &[FrIx]) -> bool {
    holding(ix, ex, w)
        .is_some_and(|(_, usage)| usage.iter().any(|(fr, q)| !q.is_zero() && frs.contains(fr)))
}

/// Kueue's `IsWithinNominalInResources`: `node` (ClusterQueue or Cohort) uses no more than its
/// subtree quota (a ClusterQueue's: its nominal quota) of any of `frs`.
fn within_nominal(ix: &Index, usage: &Usage, node: impl Into<NodeIx>, frs: &[FrIx]) -> bool {
    let node = node.into();
    frs.iter()
        .all(|&fr| usage.get(node, fr) <= ix.q.tree.nodes[node].subtree[fr])
}

/// Kueue's `candidateIsValid`, as earlier candidates are removed: one of another ClusterQueue
/// while that ClusterQueue, and every Cohort above it below the lowest common ancestor, is
/// still over its quota where the preemptor is short (and, without borrowing allowed, not one
/// reclaimable only without borrowing).
fn still_valid(ix: &Index, usage: &Usage, p: &Preemptor, c: &Candidate, borrow: bool) -> bool {
    if c.same_queue {
        return true;
    }
    if borrow && c.variant == Variant::ReclaimWithoutBorrowing {
        return false;
    }
    if within_nominal(ix, usage, c.cq, p.short) {
        return false;
    }
    let mut at = ix.q.tree.node(c.cq).parent;
    while let Some(x) = at {
        if Some(x) == c.lca {
            break;
        }
        if within_nominal(ix, usage, x, p.short) {
            return false;
        }
        at = ix.q.tree.nodes[x].parent;
    }
    true
}

fn charge(ix: &Index, ex: &Exclusions, usage: &mut Usage, w: WorkloadIx, add: bool) {
    let Some((cq, held)) = holding(ix, ex, w) else {
        return;
    };
    for &(fr, v) in held {
        if add {
            ix.q.tree.add_usage(usage, cq, fr, v);
        } else {
            ix.q.tree.remove_usage(usage, cq, fr, v);
        }
    }
}

fn fits(ix: &Index, usage: &Usage, p: &Preemptor, allow_borrowing: bool) -> bool {
    let tree = &ix.q.tree;
    p.need.iter().all(|&(fr, need)| {
        need <= tree.available(usage, p.cq, fr)
            && (allow_borrowing || usage.get(p.cq, fr) + need <= tree.node(p.cq).subtree[fr])
    })
}

/// One attempt of Kueue's `classicalPreemptions`: remove valid candidates in order until the
/// preemptor fits, then `fillBackWorkloads`. `usage` is restored before returning.
fn minimal(
    ix: &Index,
    ex: &Exclusions,
    usage: &mut Usage,
    p: &Preemptor,
    candidates: &[&Candidate],
    allow_borrowing: bool,
) -> Vec<Victim> {
    let mut removed: Vec<&Candidate> = Vec::new();
    let mut found = false;
    for c in candidates {
        if !still_valid(ix, usage, p, c, allow_borrowing) {
            continue;
        }
        charge(ix, ex, usage, c.workload, false);
        removed.push(c);
        if fits(ix, usage, p, allow_borrowing) {
            found = true;
            break;
        }
    }
    if !found {
        for c in removed.iter().rev() {
            charge(ix, ex, usage, c.workload, true);
        }
        return Vec::new();
    }
    // walk back: put each earlier victim back if the preemptor still fits without evicting it
    let mut i = removed.len().saturating_sub(1);
    while i > 0 {
        i -= 1;
        charge(ix, ex, usage, removed[i].workload, true);
        if fits(ix, usage, p, allow_borrowing) {
            removed.remove(i);
        } else {
            charge(ix, ex, usage, removed[i].workload, false);
        }
    }
    for c in removed.iter().rev() {
        charge(ix, ex, usage, c.workload, true);
    }
    removed
        .iter()
        .map(|c| Victim {
            workload: c.workload,
            same_queue: c.same_queue,
        })
        .collect()
}

/// Victims that make `p` fit, or none. `admitted_by_cq` lists holders per ClusterQueue.
///
/// Kueue v0.19.2's `classicalPreemptions` (`pkg/scheduler/preemption/preemption.go`) with
/// `borrowWithinCohort` unset (raygate does not read it): candidates from
/// `NewCandidateIterator` (`classical/candidate_generator.go`), i.e. `collectSameQueueCandidates`
/// and `collectCandidatesForHierarchicalReclaim` (`classical/hierarchical_preemption.go`), each
/// list in `CandidatesOrdering` (`common/ordering.go`); one or two attempts, with and without
/// borrowing, in Kueue's order; each attempt skips candidates `candidateIsValid` rejects as the
/// earlier ones are removed. In a flat cohort (every ClusterQueue directly under the root) this
/// is what raygate did before: a ClusterQueue is reclaimed from while over its nominal quota.
pub(crate) fn targets(
    ix: &Index,
    usage: &mut Usage,
    admitted_by_cq: &Holders,
    p: &Preemptor,
    ex: &Exclusions,
) -> Vec<Victim> {
    let same = within_queue(ix, admitted_by_cq, p, ex);
    let (hierarchy, priority) = in_cohort(ix, usage, admitted_by_cq, p, ex);
    let no_other_queue = hierarchy.is_empty() && priority.is_empty();
    let no_hierarchy = hierarchy.is_empty();
    if no_other_queue && same.is_empty() {
        return Vec::new();
    }
    let mut candidates = Vec::with_capacity(same.len() + hierarchy.len() + priority.len());
    let hierarchy = in_kueue_order(ix, ex, hierarchy);
    let priority = in_kueue_order(ix, ex, priority);
    let same = in_kueue_order(ix, ex, same);
    // Kueue: the ones already being evicted of each list first, the lists in this order
    for evicting in [true, false] {
        for list in [&hierarchy, &priority, &same] {
            candidates.extend(list.iter().filter(|c| c.evicting == evicting));
        }
    }
    // Kueue's `queueUnderNominalInResourcesNeedingPreemption`
    let under_nominal = p
        .short
        .iter()
        .all(|&fr| usage.get(p.cq, fr) < ix.q.tree.node(p.cq).subtree[fr]);
    // without `borrowWithinCohort`, reclaiming by priority alone needs the preemptor to fit
    // without borrowing; which attempt goes first is Kueue's (its comment: compatibility)
    let forbidden = ix.q.cqs[p.cq].borrow_within.is_none();
    let attempts: &[bool] = if no_other_queue || (forbidden && !under_nominal) {
        &[true]
    } else if forbidden && no_hierarchy {
        &[false, true]
    } else {
        &[true, false]
    };
    for &allow_borrowing in attempts {
        let t = minimal(ix, ex, usage, p, &candidates, allow_borrowing);
        if !t.is_empty() {
            return t;
        }
    }
    Vec::new()
}

/// What preempting would find for a preemptor: Kueue's `PreemptionOracle.SimulatePreemption`
/// (`pkg/scheduler/preemption/preemption_oracle.go` v0.19.2), asked by the flavor assigner for one
/// (flavor, resource) at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Simulation {
    pub kind: SimulatedKind,
    /// [`super::quota::Tree::borrowing_height`] of the need once the victims are gone (with no
    /// victims: as things are).
    pub borrow_after: u8,
}

/// Kueue's `PreemptionPossibility`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SimulatedKind {
    NoCandidates,
    /// A victim in the preemptor's own ClusterQueue.
    Preempt,
    /// Every victim in another ClusterQueue of the cohort.
    Reclaim,
}

/// [`targets`] for `p`, and the borrowing height once they are gone. `usage` is restored.
pub(crate) fn simulate(
    ix: &Index,
    usage: &mut Usage,
    admitted_by_cq: &Holders,
    p: &Preemptor,
    ex: &Exclusions,
) -> Simulation {
    let victims = targets(ix, usage, admitted_by_cq, p, ex);
    let height = |usage: &Usage| {
        p.need
            .iter()
            .map(|&(fr, need)| ix.q.tree.borrowing_height(usage, p.cq, fr, need))
            .max()
            .unwrap_or(0)
    };
    if victims.is_empty() {
        return Simulation {
            kind: SimulatedKind::NoCandidates,
            borrow_after: height(usage),
        };
    }
    for v in &victims {
        charge(ix, ex, usage, v.workload, false);
    }
    let borrow_after = height(usage);
    for v in victims.iter().rev() {
        charge(ix, ex, usage, v.workload, true);
    }
    let kind = if victims.iter().any(|v| v.same_queue) {
        SimulatedKind::Preempt
    } else {
        SimulatedKind::Reclaim
    };
    Simulation { kind, borrow_after }
}

fn eligible(p: &Preemptor, ex: &Exclusions, w: WorkloadIx) -> bool {
    !ex.gone[w] && Some(w) != p.spare && w != p.workload
}

/// Holders in the preemptor's own ClusterQueue that `withinClusterQueue` lets it preempt.
fn within_queue(
    ix: &Index,
    admitted_by_cq: &Holders,
    p: &Preemptor,
    ex: &Exclusions,
) -> Vec<Candidate> {
    let cq = &ix.q.cqs[p.cq];
    let me = &ix.workloads[p.workload];
    if cq.within == WithinClusterQueue::Never {
        return Vec::new();
    }
    let mut candidates = Vec::new();
    for &w in &admitted_by_cq[p.cq] {
        let v = &ix.workloads[w];
        let allowed = v.priority < me.priority
            || (cq.within == WithinClusterQueue::LowerOrNewerEqualPriority
                && v.priority == me.priority
                // Kueue: the preemptor's queue order timestamp strictly before the victim's
                && v.order_time > me.order_time);
        if eligible(p, ex, w) && allowed && uses_any(ix, ex, w, p.short) {
            candidates.push(Candidate {
                workload: w,
                cq: p.cq,
                same_queue: true,
                evicting: ex.evicting[w],
                variant: Variant::WithinClusterQueue,
                lca: None,
            });
        }
    }
    candidates
}

/// Holders in other ClusterQueues of the cohort tree that `reclaimWithinCohort` lets it
/// preempt, over their quota where the preemptor is short, in two lists: (hierarchical reclaim,
/// reclaim without borrowing). Kueue's `collectCandidatesForHierarchicalReclaim`: walking from
/// the preemptor's parent to the root, a ClusterQueue is a candidate at its lowest common
/// ancestor with the preemptor's if it and every Cohort between it and that ancestor are over
/// their subtree quota (a subtree within its quota is not borrowing, whatever one ClusterQueue
/// in it does: `collectCandidatesInSubtree` does not descend into it); the preemptor has the
/// advantage there once its ClusterQueue or a Cohort below that ancestor holds its requests
/// (`QuantitiesFitInQuota`, what each lower node guarantees taken off on the way up).
fn in_cohort(
    ix: &Index,
    usage: &Usage,
    admitted_by_cq: &Holders,
    p: &Preemptor,
    ex: &Exclusions,
) -> (Vec<Candidate>, Vec<Candidate>) {
    let cq = &ix.q.cqs[p.cq];
    let me = &ix.workloads[p.workload];
    let tree = &ix.q.tree;
    let (mut hierarchy, mut priority) = (Vec::new(), Vec::new());
    if cq.reclaim == ReclaimWithinCohort::Never || tree.node(p.cq).parent.is_none() {
        return (hierarchy, priority);
    }
    let advantage = advantage_by_ancestor(ix, usage, p);
    for &other in ix.q.tree_cqs.get(&cq.root).into_iter().flatten() {
        if other == p.cq || within_nominal(ix, usage, other, p.short) {
            continue;
        }
        // up to the lowest common ancestor, every Cohort on the way over its quota
        let mut at = tree.node(other).parent;
        let mut found = None;
        while let Some(x) = at {
            if let Some(&(_, adv)) = advantage.iter().find(|(a, _)| *a == x) {
                found = Some((x, adv));
                break;
            }
            if within_nominal(ix, usage, x, p.short) {
                break;
            }
            at = tree.nodes[x].parent;
        }
        let Some((lca, adv)) = found else {
            continue;
        };
        let list = if adv { &mut hierarchy } else { &mut priority };
        for &w in &admitted_by_cq[other] {
            let v = &ix.workloads[w];
            let allowed = cq.reclaim == ReclaimWithinCohort::Any || v.priority < me.priority;
            if eligible(p, ex, w) && allowed && uses_any(ix, ex, w, p.short) {
                let variant = variant(cq.borrow_within, adv, v.priority, me.priority);
                list.push(Candidate {
                    workload: w,
                    cq: other,
                    same_queue: false,
                    evicting: ex.evicting[w],
                    variant,
                    lca: Some(lca),
                });
            }
        }
    }
    (hierarchy, priority)
}

/// Kueue's `classifyPreemptionVariant` for a candidate of another ClusterQueue
/// (`pkg/scheduler/preemption/classical/hierarchical_preemption.go` v0.19.2): hierarchical
/// reclaim where the preemptor has the advantage; else reclaim while borrowing when the
/// preemptor's ClusterQueue allows `borrowWithinCohort` and the candidate is below the
/// preemptor's priority and not above the threshold (`isAboveBorrowingThreshold`); else
/// reclaim only without borrowing.
fn variant(borrow_within: Option<Option<i32>>, adv: bool, candidate: i32, me: i32) -> Variant {
    if adv {
        return Variant::HierarchicalReclaim;
    }
    match borrow_within {
        Some(threshold) if candidate < me && threshold.is_none_or(|t| candidate <= t) => {
            Variant::ReclaimWhileBorrowing
        }
        _ => Variant::ReclaimWithoutBorrowing,
    }
}

/// The preemptor's ancestors from its parent to the root, each with whether the preemptor has
/// the hierarchical advantage over candidates whose lowest common ancestor with it is that
/// Cohort (the `hasHierarchicalAdvantage` of Kueue's loop when it collects there).
fn advantage_by_ancestor(ix: &Index, usage: &Usage, p: &Preemptor) -> Vec<(NodeIx, bool)> {
    let tree = &ix.q.tree;
    let (mut adv, mut remaining) = fits_in_quota(ix, usage, p.cq.node(), p.need);
    let mut out = Vec::new();
    let mut at = tree.node(p.cq).parent;
    while let Some(x) = at {
        out.push((x, adv));
        let (fits, rest) = fits_in_quota(ix, usage, x, &remaining);
        adv = adv || fits;
        remaining = rest;
        at = tree.nodes[x].parent;
    }
    out
}

/// Kueue's `QuantitiesFitInQuota`: whether `requests` fit in `node`'s subtree quota on top of
/// its usage, and what of them is left for its parent once its unused guaranteed quota (what it
/// does not lend) is taken off.
fn fits_in_quota(
    ix: &Index,
    usage: &Usage,
    node: NodeIx,
    requests: &[(FrIx, Quantity)],
) -> (bool, Charges) {
    let n = &ix.q.tree.nodes[node];
    let mut fits = true;
    let mut remaining = Vec::with_capacity(requests.len());
    for &(fr, v) in requests {
        let used = usage.get(node, fr);
        if n.subtree[fr] < used + v {
            fits = false;
        }
        let local = max0(n.guaranteed[fr] - used);
        remaining.push((fr, max0(v - local)));
    }
    (fits, remaining)
}

fn max0(q: Quantity) -> Quantity {
    if q.is_negative() { Quantity::ZERO } else { q }
}

/// Kueue's order: being evicted already, other ClusterQueues, lower priority, most recently
/// admitted first; then the key.
fn in_kueue_order(ix: &Index, ex: &Exclusions, candidates: Vec<Candidate>) -> Vec<Candidate> {
    let mut keyed: Vec<_> = candidates
        .into_iter()
        .map(|c| {
            let w = &ix.workloads[c.workload];
            let key = (
                !c.evicting,
                c.same_queue,
                w.priority,
                // admitted in this pass: the most recent of all
                !matches!(ex.admitted.get(c.workload), Some(Some(_))),
                std::cmp::Reverse(w.held.as_ref().map(|h| h.admitted_at)),
                ix.rank[c.workload],
            );
            (key, c)
        })
        .collect();
    keyed.sort_unstable_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, c)| c).collect()
}
