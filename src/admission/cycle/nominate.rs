//! Kueue's `nominate`: the pending Workloads of each ClusterQueue in its queue order, and the
//! rounds in which the heads of all ClusterQueues are processed, as Kueue's scheduling cycles.

use k8s_openapi::jiff::Timestamp;

use super::pass::Pass;
use crate::admission::ids::{CqIx, TiSlice, TiVec, WorkloadIx};
use crate::admission::index::Index;

/// Per ClusterQueue: its pending Workloads, in its queue order.
pub(super) type Queued = TiVec<CqIx, Vec<WorkloadIx>>;

/// Pending Workloads: those with no ClusterQueue to queue in, and per ClusterQueue its pending
/// Workloads in its own queue order: a Workload that preempted in an earlier pass first (Kueue
/// keeps it at the front of its queue until its victims are gone), then priority (higher first),
/// then the queue order time, then the key (by rank).
pub(super) fn nominate(ix: &Index) -> (Vec<WorkloadIx>, Queued) {
    let stray: Vec<WorkloadIx> = ix
        .sorted
        .iter()
        .copied()
        .filter(|&i| ix.workloads[i].is_pending() && ix.workloads[i].target.is_err())
        .collect();
    let mut queues: Queued = TiVec::from(vec![Vec::new(); ix.q.cqs.len()]);
    let mut place = |i: WorkloadIx| {
        if let Ok(t) = &ix.workloads[i].target
            && ix.workloads[i].is_pending()
        {
            queues[t.cq].push(i);
        }
    };
    match &ix.order {
        Some(order) => order.iter().for_each(|&i| place(i)),
        None => {
            let mut keyed: Vec<_> = ix
                .sorted
                .iter()
                .filter(|&&i| ix.workloads[i].is_pending())
                .filter_map(|&i| ix.queue_key(i))
                .collect();
            keyed.sort_unstable();
            keyed.into_iter().for_each(|k| place(k.5));
        }
    }
    (stray, queues)
}

/// Kueue's scheduling cycles, folded into one pass. Each round is one Kueue cycle: the next
/// pending Workload of every ClusterQueue still in the round (its head), ordered as Kueue's
/// `classicalIterator` orders them (with `PrioritizePreemptorWorkloads`: a Workload that preempted
/// in an earlier pass first, so the room its victims freed is its; then by borrowing distance,
/// against the usage at the start of the round (entries that fit without borrowing first, then
/// those whose lowest Cohort holding them is lower in the tree); then higher priority; then the
/// older queue order time; then the key), each processed against the usage the ones before it
/// left, on the flavors it was given on the usage at the round's start (Kueue's nomination, see
/// [`Pass::nominated`]: a head whose flavors no longer fit is its queue's head again in the next
/// round). A ClusterQueue stays in the next round while its head was admitted or cannot be
/// admitted whatever is preempted (BestEffortFIFO: Kueue moves on to the next Workload in its
/// next cycle); it leaves the pass when its head preempts (Kueue keeps that head at the front
/// until its victims are gone) or blocks a StrictFIFO queue, and the rest of its Workloads wait
/// behind that head. Only Workloads that held quota when the pass started are preemption
/// candidates, so quota lent in this pass is never reclaimed in it.
pub(super) fn rounds(pass: &mut Pass, queues: &TiSlice<CqIx, Vec<WorkloadIx>>) {
    let ix = pass.ix;
    let mut cursor: TiVec<CqIx, usize> = TiVec::from(vec![0; queues.len()]);
    let mut live: Vec<CqIx> = queues.keys().filter(|&c| !queues[c].is_empty()).collect();
    let mut heads: Vec<(HeadKey, CqIx, WorkloadIx)> = Vec::new();
    while !live.is_empty() {
        heads.clear();
        for &c in &live {
            let i = queues[c][cursor[c]];
            cursor[c] += 1;
            let w = &ix.workloads[i];
            let borrows = pass.borrows(i, c);
            let key = (
                !w.preemptor,
                borrows,
                std::cmp::Reverse(w.priority),
                w.order_time,
                ix.rank[i],
            );
            heads.push((key, c, i));
        }
        heads.sort_unstable_by_key(|h| h.0);
        match &mut pass.round_start {
            _ if heads.len() < 2 => pass.round_start = None,
            Some(start) => start.clone_from(&pass.usage),
            None => pass.round_start = Some(pass.usage.clone()),
        }
        let mut next = Vec::with_capacity(live.len());
        for &(_, c, i) in &heads {
            match pass.process_entry(i) {
                Outcome::Continue if cursor[c] < queues[c].len() => next.push(c),
                Outcome::Continue => {}
                Outcome::Retry => {
                    cursor[c] -= 1;
                    next.push(c);
                }
                Outcome::Stop => {
                    let start = pass.round_start.take();
                    for &rest in &queues[c][cursor[c]..] {
                        pass.process_entry(rest);
                    }
                    pass.round_start = start;
                    cursor[c] = queues[c].len();
                }
            }
        }
        next.sort_unstable();
        live = next;
    }
    pass.round_start = None;
}

/// A head's place in a round: a preemptor from an earlier pass first, then the borrowing
/// distance (0: none), priority (higher first), queue order time, rank.
type HeadKey = (bool, u8, std::cmp::Reverse<i32>, Timestamp, u32);

/// What processing a ClusterQueue's head means for the rest of the ClusterQueue in this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Its next Workload is looked at in the next round.
    Continue,
    /// The rest wait behind this head (it preempts, or blocks a StrictFIFO queue).
    Stop,
    /// It is its queue's head again in the next round: it fitted at the start of this round and
    /// no longer did after the heads before it (no decision yet).
    Retry,
}
