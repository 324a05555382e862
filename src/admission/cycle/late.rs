//! Held-back Workloads looked at again at the end of a pass: those whose reclaimer was admitted
//! after all or that could not be admitted anyway, what waited behind them, and what a
//! reservation that is gone now kept out.

use super::hold::tally_held;
use super::nominate::{Queued, rounds};
use super::pass::{Block, Pass};
use crate::admission::Decision;
use crate::admission::flavors::Mode;
use crate::admission::ids::{CqIx, NodeIx, TiVec, WorkloadIx};
use crate::admission::quota::Charges;

impl Pass<'_> {
    /// The Workloads held back by a retry (see [`super::run`]) whose reclaimer was admitted
    /// after all (with, in a StrictFIFO queue, everything that waited behind them), looked at
    /// once more against the usage the pass left, all such ClusterQueues together in Kueue's
    /// round order ([`rounds`]): their next pass would admit them just so. Reopening them one
    /// ClusterQueue after another would let the first one's borrowing entries take quota a later
    /// one's entry needs without borrowing, which that entry then reclaims on the next pass (seed
    /// 6123 of `static_cohorts_do_not_churn`). When a reopened Workload's reservation is gone (it
    /// is not held back again), what was left pending in its cohort tree is looked at again too
    /// ([`Pass::reopen_kept_out`]; seeds 24105, 28596 and 33920).
    pub fn late(&mut self, queues: &Queued) {
        let ix = self.ix;
        if self.held.is_empty() {
            return;
        }
        let mut admitted = TiVec::from(vec![false; ix.workloads.len()]);
        // per cohort tree root: a reservation there shrank in the last reopening
        let mut released = TiVec::from(vec![false; ix.q.tree.nodes.len()]);
        // reopening a ClusterQueue may admit the reclaimer another one's Workload was held back for
        loop {
            for (i, _, _) in &self.newly {
                admitted[*i] = true;
            }
            let mut reopened = TiVec::from(vec![false; ix.workloads.len()]);
            let mut any = self.reopen_stale_holds(&admitted, &mut reopened);
            // quota a reservation kept is free again: what it kept out is looked at again
            any |= self.reopen_kept_out(queues, &released, &mut reopened);
            if !any {
                return;
            }
            let reserved_before = self.reserved.clone();
            self.reopen_behind_held_heads(queues, &admitted, &mut reopened);
            self.release_reopened(&reopened);
            let tails: Queued = queues
                .iter()
                .map(|queue| queue.iter().copied().filter(|&i| reopened[i]).collect())
                .collect();
            self.decisions.retain(|d| {
                !(matches!(d, Decision::Pending { .. })
                    && ix.by_key.get(d.workload()).is_some_and(|&i| reopened[i]))
            });
            rounds(self, &tails);
            released = self.shrunk_reservations(&reserved_before);
        }
    }

    /// Marks in `reopened` (and lets go) the held-back Workloads whose reclaimer is `admitted`
    /// or that are held back in vain ([`Pass::moot_holds`]). Returns whether there were any.
    fn reopen_stale_holds(
        &mut self,
        admitted: &TiVec<WorkloadIx, bool>,
        reopened: &mut TiVec<WorkloadIx, bool>,
    ) -> bool {
        let moot = self.moot_holds();
        let mut any = false;
        for &(i, _, _) in &self.held {
            if self.forbidden[i].is_some_and(|by| admitted[by]) || moot[i] {
                self.forbidden[i] = None;
                reopened[i] = true;
                any = true;
            }
        }
        any
    }

    /// Marks in `reopened` what waited behind a reopened held-back head (a StrictFIFO queue's
    /// rest, a BestEffortFIFO queue's Workloads that head could preempt); one held back for a
    /// reclaimer still waiting stays held back.
    fn reopen_behind_held_heads(
        &mut self,
        queues: &Queued,
        admitted: &TiVec<WorkloadIx, bool>,
        reopened: &mut TiVec<WorkloadIx, bool>,
    ) {
        for (c, queue) in queues.iter_enumerated() {
            let Some((head, Block::HeldBack)) = self.blocked[c] else {
                continue;
            };
            if !reopened[head] {
                continue;
            }
            let Some(at) = queue.iter().position(|&i| i == head) else {
                continue;
            };
            self.blocked[c] = None;
            for &i in &queue[at..] {
                if self.admitted_now[i].is_some() {
                    continue;
                }
                if self.forbidden[i].is_some_and(|by| admitted[by]) {
                    self.forbidden[i] = None;
                }
                reopened[i] = true;
            }
        }
    }

    /// Reopened Workloads reserve nothing until held back again: their ClusterQueues' tallies
    /// and reservations are made anew from the Workloads still held back.
    fn release_reopened(&mut self, reopened: &TiVec<WorkloadIx, bool>) {
        let mut touched: TiVec<CqIx, bool> = TiVec::from(vec![false; self.ix.q.cqs.len()]);
        self.held.retain(|&(i, c, _)| {
            touched[c] |= reopened[i];
            !reopened[i]
        });
        for c in touched.keys().filter(|&c| touched[c]) {
            self.held_in[c] = (None, Vec::new());
        }
        for (i, c, need) in &self.held {
            if touched[*c] {
                tally_held(&mut self.held_in[*c], *i, need);
            }
        }
        for c in touched.keys().filter(|&c| touched[c]) {
            let old = self.lift(c);
            self.reserve(c, old);
        }
    }

    /// Per cohort tree root: whether a reservation there shrank since `before`.
    fn shrunk_reservations(&self, before: &TiVec<CqIx, Charges>) -> TiVec<NodeIx, bool> {
        let ix = self.ix;
        let mut released = TiVec::from(vec![false; ix.q.tree.nodes.len()]);
        for (c, before) in before.iter_enumerated() {
            let after = &self.reserved[c];
            let shrank = before.iter().any(|&(fr, v)| {
                after
                    .iter()
                    .find(|(f, _)| *f == fr)
                    .is_none_or(|&(_, w)| w < v)
            });
            if shrank {
                released[ix.q.cqs[c].root] = true;
            }
        }
        released
    }

    /// Per Workload: held back, but it would not fit on the usage the pass leaves (without its
    /// reservations) even by preemption, so the next pass does not admit it whatever its
    /// reclaimer does, and what its reservation keeps is not its to keep.
    fn moot_holds(&self) -> TiVec<WorkloadIx, bool> {
        let ix = self.ix;
        let mut moot = TiVec::from(vec![false; ix.workloads.len()]);
        let usage = self.usage_without_reservations();
        for &(i, c, _) in &self.held {
            let Ok(podsets) = &ix.workloads[i].podsets else {
                continue;
            };
            let replacing = self.replacing(self.replaced(i), c);
            let a = self.assign_on(&usage, (i, c), podsets, replacing.as_ref(), true);
            moot[i] = a.mode == Mode::NoFit;
        }
        moot
    }

    /// Marks in `reopened` the Workloads of the cohort trees in `released` that were left
    /// pending without preempting and without being held back (with, in a StrictFIFO queue,
    /// what waited behind its pending head): they were looked at while a reservation that is
    /// gone now kept quota from them, and the next pass, without it, would admit them.
    fn reopen_kept_out(
        &mut self,
        queues: &Queued,
        released: &TiVec<NodeIx, bool>,
        reopened: &mut TiVec<WorkloadIx, bool>,
    ) -> bool {
        let ix = self.ix;
        let mut any = false;
        for (c, queue) in queues.iter_enumerated() {
            if !released[ix.q.cqs[c].root] {
                continue;
            }
            let from = match self.blocked[c] {
                None => 0,
                Some((head, Block::StrictFifo)) => {
                    let Some(at) = queue.iter().position(|&i| i == head) else {
                        continue;
                    };
                    self.blocked[c] = None;
                    self.waiting[c] = None;
                    at
                }
                Some(_) => continue,
            };
            for &i in &queue[from..] {
                if self.admitted_now[i].is_none() && self.forbidden[i].is_none() && !reopened[i] {
                    reopened[i] = true;
                    any = true;
                }
            }
        }
        any
    }
}
