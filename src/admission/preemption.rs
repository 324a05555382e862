//! Preemption (Kueue's classical preemption, `pkg/scheduler/preemption`): which admitted
//! Workloads to evict so that a pending one fits.
//!
//! Candidates are admitted Workloads that use a (flavor, resource) the preemptor is short of:
//! in its own ClusterQueue per `withinClusterQueue` (`LowerPriority`, or
//! `LowerOrNewerEqualPriority`), and in other ClusterQueues of its cohort tree that are borrowing
//! there per `reclaimWithinCohort` (`LowerPriority` or `Any`). They are tried in Kueue's order
//! (already being evicted first, other ClusterQueues first, lower priority first, most recently
//! admitted first), added until the preemptor fits, then every one that is not needed is dropped
//! again walking back: a minimal set.

use super::index::Index;
use super::quota::Usage;
use crate::quantity::Quantity;
use crate::types::kueue::{ReclaimWithinCohort, WithinClusterQueue};

/// A Workload to evict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Victim {
    pub workload: usize,
    /// In the preemptor's own ClusterQueue (else reclaimed from another one in the cohort).
    pub same_queue: bool,
}

/// The preemptor.
pub(crate) struct Preemptor<'a> {
    pub workload: usize,
    pub cq: usize,
    /// What must fit, per (flavor, resource).
    pub need: &'a [(usize, Quantity)],
    /// Pairs where it does not fit now.
    pub short: &'a [usize],
    /// A Workload that must not be chosen (the slice a replacement replaces).
    pub spare: Option<usize>,
}

/// Quota held by a Workload admitted earlier in the same pass: (ClusterQueue, usage per
/// (flavor, resource)). Indexed by Workload; empty when only the pass's starting holders count.
pub(crate) type Admitted = [Option<(usize, Vec<(usize, Quantity)>)>];

/// Per-cycle facts about Workloads the search must respect.
pub(crate) struct Exclusions<'a> {
    /// Gone this cycle (finished): hold nothing.
    pub gone: &'a [bool],
    /// Already being evicted (status or earlier this cycle): preferred, not evicted twice.
    pub evicting: &'a [bool],
    /// Admitted in this pass (see [`Admitted`]): what they hold, for a search that counts them.
    pub admitted: &'a Admitted,
}

/// The ClusterQueue and usage `w` holds: from this pass's admissions, else from its status.
fn holding<'a>(
    ix: &'a Index,
    ex: &Exclusions<'a>,
    w: usize,
) -> Option<(usize, &'a [(usize, Quantity)])> {
    if let Some(Some((cq, usage))) = ex.admitted.get(w) {
        return Some((*cq, usage.as_slice()));
    }
    let held = ix.workloads[w].held.as_ref()?;
    Some((held.cq?, held.usage.as_slice()))
}

struct Candidate {
    workload: usize,
    cq: usize,
    same_queue: bool,
    evicting: bool,
}

fn uses_any(ix: &Index, ex: &Exclusions, w: usize, frs: &[usize]) -> bool {
    holding(ix, ex, w)
        .is_some_and(|(_, usage)| usage.iter().any(|(fr, q)| !q.is_zero() && frs.contains(fr)))
}

fn borrowing(ix: &Index, usage: &Usage, cq: usize, frs: &[usize]) -> bool {
    frs.iter()
        .any(|&fr| usage.get(cq, fr) > ix.q.tree.nodes[cq].subtree[fr])
}

fn charge(ix: &Index, ex: &Exclusions, usage: &mut Usage, w: usize, add: bool) {
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
            && (allow_borrowing || usage.get(p.cq, fr) + need <= tree.nodes[p.cq].subtree[fr])
    })
}

/// Kueue's `minimalPreemptions`: `usage` is restored before returning.
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
        if !c.same_queue && !borrowing(ix, usage, c.cq, p.short) {
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
pub(crate) fn targets(
    ix: &Index,
    usage: &mut Usage,
    admitted_by_cq: &[Vec<usize>],
    p: &Preemptor,
    ex: &Exclusions,
) -> Vec<Victim> {
    let cq = &ix.q.cqs[p.cq];
    let mut candidates = within_queue(ix, admitted_by_cq, p, ex);
    // Candidates from other ClusterQueues are only ever tried while the preemptor's is under its
    // nominal quota where it is short (see below): otherwise do not collect them.
    let under_nominal = p
        .short
        .iter()
        .all(|&fr| usage.get(p.cq, fr) < ix.q.tree.nodes[p.cq].subtree[fr]);
    if under_nominal
        && cq.reclaim != ReclaimWithinCohort::Never
        && ix.q.tree.nodes[p.cq].parent.is_some()
    {
        candidates.extend(in_cohort(ix, usage, admitted_by_cq, p, ex));
    }
    if candidates.is_empty() {
        return Vec::new();
    }
    let candidates = in_kueue_order(ix, ex, candidates);
    let all: Vec<&Candidate> = candidates.iter().collect();
    if all.iter().all(|c| c.same_queue) {
        return minimal(ix, ex, usage, p, &all, true);
    }
    // reclaim from the cohort only while under nominal quota where it is short
    if under_nominal {
        let t = minimal(ix, ex, usage, p, &all, false);
        if !t.is_empty() {
            return t;
        }
    }
    let own: Vec<&Candidate> = candidates.iter().filter(|c| c.same_queue).collect();
    minimal(ix, ex, usage, p, &own, true)
}

fn eligible(p: &Preemptor, ex: &Exclusions, w: usize) -> bool {
    !ex.gone[w] && Some(w) != p.spare && w != p.workload
}

/// Holders in the preemptor's own ClusterQueue that `withinClusterQueue` lets it preempt.
fn within_queue(
    ix: &Index,
    admitted_by_cq: &[Vec<usize>],
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
            });
        }
    }
    candidates
}

/// Holders in other ClusterQueues of the cohort tree, borrowing where the preemptor is short,
/// that `reclaimWithinCohort` lets it preempt.
fn in_cohort(
    ix: &Index,
    usage: &Usage,
    admitted_by_cq: &[Vec<usize>],
    p: &Preemptor,
    ex: &Exclusions,
) -> Vec<Candidate> {
    let cq = &ix.q.cqs[p.cq];
    let me = &ix.workloads[p.workload];
    let mut candidates = Vec::new();
    for &other in ix.q.tree_cqs.get(&cq.root).into_iter().flatten() {
        if other == p.cq || !borrowing(ix, usage, other, p.short) {
            continue;
        }
        for &w in &admitted_by_cq[other] {
            let v = &ix.workloads[w];
            let allowed = cq.reclaim == ReclaimWithinCohort::Any || v.priority < me.priority;
            if eligible(p, ex, w) && allowed && uses_any(ix, ex, w, p.short) {
                candidates.push(Candidate {
                    workload: w,
                    cq: other,
                    same_queue: false,
                    evicting: ex.evicting[w],
                });
            }
        }
    }
    candidates
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
