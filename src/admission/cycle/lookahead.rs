//! What the passes after a pass would undo: the Workloads it admitted that a Workload it left
//! waiting could preempt in the next pass ([`Pass::reclaimable`]), and those the next passes,
//! run on its decisions applied, would evict ([`later_pass_victims`]). [`super::run`] redoes the
//! pass with them held back.

use k8s_openapi::jiff::Timestamp;

use super::memo::{MEMO_WIDTH, same_standing};
use super::pass::{Block, Pass};
use super::{Forbidden, converge};
use crate::admission::Decision;
use crate::admission::Options;
use crate::admission::flavors::{self, Mode};
use crate::admission::ids::{CqIx, TiVec, WorkloadIx};
use crate::admission::index::Index;
use crate::admission::preemption::{self, Admitted, Exclusions, Preemptor};
use crate::admission::quota::Usage;
use crate::admission::workloads::{HeldQuota, PodSetRequests};
use crate::types::kueue::{ReclaimWithinCohort, WithinClusterQueue, reason};

/// How many passes after it a pass is checked against.
const LOOKAHEAD_PASSES: usize = 4;

/// (admitted in `pass`, the Workload that evicts it) for every Workload `pass` admitted that one
/// of the passes after it would evict, nothing else having changed (each pass run on the
/// Workloads as the one before left them, until one changes nothing, at most
/// [`LOOKAHEAD_PASSES`]). Of the passes that only admit, only one that held Workloads back can
/// leave such a case: a held-back Workload, admitted by the next pass before the Workload the
/// end of this pass was checked for, takes the room that Workload then preempts for (seed 51152
/// of `static_cohorts_do_not_churn`), and one left out by a reservation takes its quota in the
/// next pass, which leaves the held-back one to reclaim from a borrower instead (seed 53550).
/// The end of a pass cannot show those; the passes after it, run on the decisions applied, do.
///
/// A Workload that preempts in this pass is checked too: if a later pass evicts it once it is
/// admitted, its preemption only starts a ring (seed 75654: cq1's w07, within its nominal
/// quota, reclaims cq2's w13 from a Cohort over its quota; admitted, w07 takes a borrowing
/// flavor, as Kueue's `MayStopSearch` does, and w13, whose Cohort holds it, reclaims it
/// back; Kueue's own rules allow both steps, so Kueue repeats them), and it is held back
/// for the Workload that would evict it instead.
pub(super) fn later_pass_victims(
    ix: &Index,
    pass: &Pass,
    options: &Options,
) -> Vec<(WorkloadIx, WorkloadIx)> {
    let preempted = !pass.preempted_by.is_empty();
    if !preempted && (pass.newly.is_empty() || !pass.forbidden_any()) {
        return Vec::new();
    }
    let preemptor = |w: WorkloadIx| pass.preempted_by.iter().any(|&(_, by)| by == w);
    let mut next = applied(ix, &pass.decisions, &pass.admitted_now, options);
    for _ in 0..LOOKAHEAD_PASSES {
        let mut forbidden: Forbidden = TiVec::from(vec![None; next.workloads.len()]);
        let Pass {
            decisions,
            admitted_now,
            preempted_by,
            ..
        } = converge(&next, &mut forbidden);
        let victims: Vec<(WorkloadIx, WorkloadIx)> = preempted_by
            .into_iter()
            .filter(|&(v, _)| pass.admitted_now[v].is_some() || preemptor(v))
            .collect();
        let changed = decisions
            .iter()
            .any(|d| !matches!(d, Decision::Pending { .. }));
        if !victims.is_empty() || !changed {
            return victims;
        }
        next = applied(&next, &decisions, &admitted_now, options);
    }
    Vec::new()
}

/// The index as a pass's decisions leave the Workloads (what [`crate::admission::Scheduler::apply`] makes of
/// them): admitted ones hold their quota (admitted after every other holder), evicted ones are
/// requeued behind every Workload of their priority (and release their quota at once if the
/// options say so), replaced slices are finished, preemptors go first in their queue.
fn applied(
    ix: &Index,
    decisions: &[Decision],
    admitted_now: &Admitted,
    options: &Options,
) -> Index {
    let mut next = ix.clone();
    let later = Timestamp::MAX;
    for d in decisions {
        let Some(&i) = ix.by_key.get(d.workload()) else {
            continue;
        };
        let e = &mut next.workloads[i];
        match d {
            Decision::Admit { admission, .. } => {
                let Some((c, totals)) = &admitted_now[i] else {
                    continue;
                };
                let mut usage = totals.clone();
                usage.sort_unstable_by_key(|&(fr, _)| fr);
                let flavors = admission
                    .pod_set_assignments
                    .iter()
                    .map(|psa| (psa.name.clone(), ix.q.catalog.flavor_ids_of(psa)))
                    .collect();
                e.held = Some(HeldQuota {
                    cq: Some(*c),
                    usage,
                    flavors,
                    admitted_at: later,
                });
                e.evicted = false;
                e.preemptor = false;
            }
            Decision::Evict { .. } => {
                e.evicted = true;
                e.preemptor = false;
                if options.release_evicted_immediately {
                    e.held = None;
                    e.order_time = later;
                }
            }
            Decision::FinishReplaced { .. } => {
                e.finished = Some(reason::WORKLOAD_SLICE_REPLACED.to_string());
                e.held = None;
            }
            Decision::Pending { message, .. } => {
                e.preemptor = e.held.is_none() && message.is_preemptor();
            }
        }
    }
    next.order = None;
    next
}

impl Pass<'_> {
    /// Workloads admitted in this pass that a Workload left waiting in it could preempt in the
    /// next pass (quota lent in this pass that its owner would reclaim, or a lower-priority
    /// Workload of its own queue), each with that Workload: admitting them now would only make
    /// the next pass evict them again.
    pub(super) fn reclaimable(&self) -> Vec<(WorkloadIx, WorkloadIx, flavors::PodSetFlavors)> {
        let ix = self.ix;
        if self.newly.is_empty() {
            return Vec::new();
        }
        let admitted = &self.admitted_now;
        let ex = Exclusions {
            gone: &self.gone,
            evicting: &self.evicting,
            admitted,
        };
        let lowest = self.lowest_admitted();
        // the next pass starts without this pass's reservations
        let mut usage = self.usage_without_reservations();
        let mut out = Vec::new();
        // per ClusterQueue: Workloads already looked at (one with the same standing finds the
        // same victims, on the same usage)
        let mut seen: TiVec<CqIx, Vec<WorkloadIx>> = TiVec::from(vec![Vec::new(); ix.q.cqs.len()]);
        for &w in &ix.sorted {
            let Some((c, podsets)) = self.next_pass_preemptor(w, &usage, &lowest, &mut seen) else {
                continue;
            };
            let a = self.assign_on(&usage, (w, c), podsets, None, true);
            if a.mode != Mode::Preempt {
                continue;
            }
            let p = Preemptor {
                workload: w,
                cq: c,
                need: &a.need,
                short: &a.short,
                spare: None,
            };
            for v in preemption::targets(ix, &mut usage, &self.holders_now, &p, &ex) {
                // a Workload that preempted for this room keeps it (else it would preempt again)
                if admitted[v.workload].is_some()
                    && !ix.workloads[v.workload].preemptor
                    && !out.iter().any(|(x, _, _)| *x == v.workload)
                {
                    out.push((v.workload, w, a.flavors.clone()));
                }
            }
        }
        out
    }

    /// Per ClusterQueue: the lowest priority admitted in this pass.
    fn lowest_admitted(&self) -> TiVec<CqIx, Option<i32>> {
        let ix = self.ix;
        let mut lowest = TiVec::from(vec![None; ix.q.cqs.len()]);
        for (i, c, _) in &self.newly {
            let p = ix.workloads[*i].priority;
            lowest[*c] = Some(lowest[*c].map_or(p, |l: i32| l.min(p)));
        }
        lowest
    }

    /// Workload `w`'s ClusterQueue and PodSets if, left waiting in this pass, it may preempt in
    /// the next one (on `usage`, with `lowest` the lowest priority admitted per ClusterQueue)
    /// and no Workload of the same standing in its queue was looked at (`seen`, which it joins).
    fn next_pass_preemptor<'p>(
        &'p self,
        w: WorkloadIx,
        usage: &Usage,
        lowest: &TiVec<CqIx, Option<i32>>,
        seen: &mut TiVec<CqIx, Vec<WorkloadIx>>,
    ) -> Option<(CqIx, &'p [PodSetRequests])> {
        let ix = self.ix;
        let we = &ix.workloads[w];
        // a replaced slice finished in this pass is not there to reclaim anything
        if !we.is_pending()
            || self.admitted_now[w].is_some()
            || we.replaces.is_some()
            || self.gone[w]
        {
            return None;
        }
        let (Ok(t), Ok(podsets)) = (&we.target, &we.podsets) else {
            return None;
        };
        let c = t.cq;
        // one waiting behind a StrictFIFO head that does not fit waits in the next pass too
        // (more usage does not make that head fit; if it could preempt, it is looked at here)
        if matches!(self.blocked[c], Some((h, Block::StrictFifo)) if h != w) {
            return None;
        }
        if seen[c].iter().any(|&r| same_standing(ix, c, r, w)) {
            return None;
        }
        if seen[c].len() < MEMO_WIDTH {
            seen[c].push(w);
        }
        let cq = &ix.q.cqs[c];
        let tree = &ix.q.tree;
        // below a sub-cohort, a ClusterQueue at its nominal quota may still reclaim what
        // its sub-cohort holds within quota (`preemption::targets`, hierarchical reclaim)
        let parent = tree.node(c).parent;
        let in_sub_cohort = parent.is_some_and(|x| tree.nodes[x].parent.is_some());
        let under_nominal = cq
            .frs
            .iter()
            .any(|&fr| usage.get(c, fr) < tree.node(c).subtree[fr]);
        let may_reclaim = cq.reclaim != ReclaimWithinCohort::Never
            && parent.is_some()
            && (under_nominal || in_sub_cohort);
        let may_preempt_own = lowest[c].is_some_and(|l| {
            l < we.priority
                || (l == we.priority && cq.within == WithinClusterQueue::LowerOrNewerEqualPriority)
        });
        (may_reclaim || may_preempt_own).then_some((c, podsets.as_slice()))
    }
}
