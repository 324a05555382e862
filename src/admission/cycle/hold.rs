//! Workloads held back for a reclaimer, and the quota kept for them.
//!
//! A Workload is held back in a pass (`forbidden`) when a Workload left waiting could preempt it
//! in the next pass to take back the quota it would use. What the held-back Workloads of a
//! ClusterQueue need of its unused nominal quota is reserved: kept from other ClusterQueues'
//! borrowing, and from the ClusterQueue's own Workloads until the reclaimer is decided.

use super::memo::{Memo, same_podsets};
use super::nominate::Outcome;
use super::pass::{Block, Pass, charge};
use crate::admission::flavors::Mode;
use crate::admission::ids::{CqIx, FrIx, WorkloadIx};
use crate::admission::quota::{Charges, Usage, add_charge};
use crate::admission::workloads::PodSetRequests;
use crate::quantity::Quantity;
use crate::types::kueue::{QueueingStrategy, WithinClusterQueue, reason};

impl<'a> Pass<'a> {
    /// How far Workload `i`, queued in ClusterQueue `c`, would borrow if admitted on the usage
    /// as it stands (Kueue's `Assignment.Borrows()`, computed at nomination): 0 when it fits
    /// in what is left of the ClusterQueue's own nominal quota, else, per (flavor, resource) it
    /// needs more of, the height of the lowest Cohort that holds it (`Tree::borrowing_height`;
    /// in a flat cohort 1), the largest. A ClusterQueue without a cohort that needs more than
    /// its nominal quota (it preempts in its own queue) counts 1, as before the distance.
    pub fn borrows(&mut self, i: WorkloadIx, c: CqIx) -> u8 {
        if self.reserved[c].is_empty() && self.held_in[c].0.is_none() {
            return self.borrows_now(i, c);
        }
        let (old, own) = self.lift_own(c);
        let b = self.borrows_now(i, c);
        self.restore_own(c, old, &own);
        b
    }

    fn borrows_now(&mut self, i: WorkloadIx, c: CqIx) -> u8 {
        let ix = self.ix;
        let Ok(podsets) = &ix.workloads[i].podsets else {
            return 0;
        };
        let epoch = self.memo.epoch(ix, c);
        let memo = self.resume[i].is_none();
        if memo
            && let Some(&b) =
                Memo::find(&mut self.memo.borrows[c], epoch, |r| same_podsets(ix, r, i))
        {
            return b;
        }
        let a = self.assign_on(&self.usage, (i, c), podsets, None, false);
        let tree = &ix.q.tree;
        let b = if a.mode == Mode::NoFit {
            0
        } else {
            a.need
                .iter()
                .filter(|&&(fr, need)| self.usage.get(c, fr) + need > tree.node(c).subtree[fr])
                .map(|&(fr, need)| {
                    tree.borrowing_height(&self.usage, c, fr, need)
                        .max(u8::from(tree.node(c).parent.is_none()))
                })
                .max()
                .unwrap_or(0)
        };
        if memo {
            Memo::remember(&mut self.memo.borrows[c], (i, epoch, b));
        }
        b
    }

    /// What the ClusterQueues with a Workload held back for reclaimer `by` keep from their own
    /// Workloads changes with `by` looked at or admitted (see [`Pass::lift_own`]).
    pub fn reclaimer_decided(&mut self, by: WorkloadIx) {
        let ix = self.ix;
        for &(h, c, _) in &self.held {
            if self.forbidden[h] == Some(by) {
                self.memo.changed(ix, c);
            }
        }
    }

    /// The reservations of the other ClusterQueues in `c`'s cohort tree, taken out of the usage,
    /// when Workload `i` (of `c`) fits on the usage without any reservation and within `c`'s
    /// nominal quota; else none, and nothing is taken out. A reservation keeps a held-back
    /// Workload's unused nominal quota from other ClusterQueues' *borrowing* (what its owner
    /// would reclaim on the next pass); a Workload within its own nominal quota borrows nothing
    /// and cannot be reclaimed from, and the next pass, which starts without the reservations,
    /// admits it. Kept from it, it stayed pending while the quota sat reserved, took it on the
    /// next pass, and the held-back Workload, short under its nominal quota, reclaimed it from a
    /// borrower instead (seed 14785 of `static_cohorts_do_not_churn`). The caller puts the
    /// reservations back once `i` is decided.
    pub fn see_through(&mut self, i: WorkloadIx, c: CqIx) -> Vec<(CqIx, Charges)> {
        let ix = self.ix;
        let root = ix.q.cqs[c].root;
        let own = usize::from(!self.reserved[c].is_empty());
        if self.reserving[root] <= own {
            return Vec::new();
        }
        let w = &ix.workloads[i];
        let Ok(podsets) = &w.podsets else {
            return Vec::new();
        };
        let mut lifted = Vec::new();
        for &o in ix.q.tree_cqs.get(&root).into_iter().flatten() {
            if !self.reserved[o].is_empty() {
                let r = std::mem::take(&mut self.reserved[o]);
                charge(&ix.q, &mut self.usage, o, &r, false);
                lifted.push((o, r));
            }
        }
        let old = self.replaced(i);
        let replacing = self.replacing(old, c);
        let a = self.assign_on(&self.usage, (i, c), podsets, replacing.as_ref(), false);
        let nominal = &ix.q.tree.node(c).subtree;
        let within = a.mode == Mode::Fit
            && a.need
                .iter()
                .all(|&(fr, need)| self.usage.get(c, fr) + need <= nominal[fr]);
        // `c`'s own reservation goes back: the caller lifts it as before
        if let Some(k) = lifted.iter().position(|&(o, _)| o == c) {
            let (_, r) = lifted.swap_remove(k);
            charge(&ix.q, &mut self.usage, c, &r, true);
            self.reserved[c] = r;
        }
        if !within {
            for (o, r) in lifted.drain(..) {
                charge(&ix.q, &mut self.usage, o, &r, true);
                self.reserved[o] = r;
            }
        }
        lifted
    }

    /// Whether Workload `x` of ClusterQueue `c` may preempt Workload `v` of the same queue
    /// (`withinClusterQueue`).
    pub fn could_preempt_own(&self, c: CqIx, x: WorkloadIx, v: WorkloadIx) -> bool {
        let (x, v) = (&self.ix.workloads[x], &self.ix.workloads[v]);
        match self.ix.q.cqs[c].within {
            WithinClusterQueue::Never => false,
            WithinClusterQueue::LowerPriority => v.priority < x.priority,
            WithinClusterQueue::LowerOrNewerEqualPriority => {
                v.priority < x.priority || (v.priority == x.priority && v.order_time > x.order_time)
            }
        }
    }

    /// Takes ClusterQueue `c`'s reservation out of the usage; returns it.
    pub fn lift(&mut self, c: CqIx) -> Charges {
        let old = std::mem::take(&mut self.reserved[c]);
        if !old.is_empty() {
            self.reserving[self.ix.q.cqs[c].root] -= 1;
        }
        charge(&self.ix.q, &mut self.usage, c, &old, false);
        old
    }

    /// Charges ClusterQueue `c` (its reservation lifted, `old` what it was) with what its
    /// held-back Workloads need of its unused nominal quota: a Workload held back in this pass
    /// is one the next pass may admit, and quota within the nominal quota that another
    /// ClusterQueue borrowed meanwhile is quota that Workload would reclaim by preemption
    /// (Kueue likewise keeps a preempting entry's usage, `cq.AddUsage`, from the entries after
    /// it in a cycle). What it would borrow is not kept from them: it could not reclaim that.
    /// Its own queue's Workloads see what it needs taken until its reclaimer is admitted
    /// ([`Pass::lift_own`]).
    pub fn reserve(&mut self, c: CqIx, old: Charges) {
        let ix = self.ix;
        let nominal = &ix.q.tree.node(c).subtree;
        let new: Charges = self.held_in[c]
            .1
            .iter()
            .filter_map(|&(fr, v)| {
                let room = nominal[fr] - self.usage.get(c, fr);
                let r = std::cmp::min(v, room);
                (r > Quantity::ZERO).then_some((fr, r))
            })
            .collect();
        charge(&ix.q, &mut self.usage, c, &new, true);
        if new != old {
            self.memo.changed(ix, c);
        }
        if !new.is_empty() {
            self.reserving[ix.q.cqs[c].root] += 1;
        }
        self.reserved[c] = new;
    }

    /// What the Workloads of ClusterQueue `c` held back for a reclaimer not admitted (nor being
    /// looked at) yet need, summed per (flavor, resource).
    fn waiting_need(&self, c: CqIx) -> Charges {
        let mut sum: Charges = Vec::new();
        for (h, hc, need) in &self.held {
            let waiting = self.forbidden[*h]
                .is_some_and(|by| self.admitted_now[by].is_none() && self.deciding != Some(by));
            if *hc != c || !waiting {
                continue;
            }
            for &(fr, v) in need {
                add_charge(&mut sum, fr, v);
            }
        }
        sum
    }

    /// Takes ClusterQueue `c`'s reservation out of the usage for one of its own Workloads, and
    /// charges instead what its held-back Workloads waiting for a reclaimer need (as much as is
    /// available): Kueue would have admitted them, and what they use stays taken, for their own
    /// queue too, until the reclaimer evicts them; a later Workload of the queue that found it
    /// free chose another flavor than Kueue's (seeds 36870 and 25890). Returns (the
    /// reservation, what was charged instead).
    pub fn lift_own(&mut self, c: CqIx) -> (Charges, Charges) {
        let old = self.lift(c);
        let ix = self.ix;
        let tree = &ix.q.tree;
        let own: Charges = self
            .waiting_need(c)
            .into_iter()
            .filter_map(|(fr, v)| {
                let r = std::cmp::min(v, tree.available(&self.usage, c, fr));
                (r > Quantity::ZERO).then_some((fr, r))
            })
            .collect();
        charge(&ix.q, &mut self.usage, c, &own, true);
        (old, own)
    }

    /// Undoes [`Pass::lift_own`].
    pub fn restore_own(&mut self, c: CqIx, old: Charges, own: &[(FrIx, Quantity)]) {
        charge(&self.ix.q, &mut self.usage, c, own, false);
        self.reserve(c, old);
    }

    /// The usage as the next pass starts it: without this pass's reservations.
    pub fn usage_without_reservations(&self) -> Usage {
        let mut usage = self.usage.clone();
        for (c, r) in self.reserved.iter_enumerated() {
            charge(&self.ix.q, &mut usage, c, r, false);
        }
        usage
    }

    /// Leaves Workload `i` of ClusterQueue `c` pending in this pass for `by`, the Workload that
    /// could preempt it in the next one, and counts what it needs for the reservation.
    pub fn hold_back(
        &mut self,
        i: WorkloadIx,
        c: CqIx,
        podsets: &[PodSetRequests],
        by: WorkloadIx,
    ) -> Outcome {
        let ix = self.ix;
        let message = format!(
            "not admitted in this pass: workload {} could preempt it to take back the quota it would use",
            ix.workloads[by].key
        );
        self.decisions.extend(super::entry::pending(
            ix,
            &ix.workloads[i],
            reason::PENDING,
            message.into(),
        ));
        let a = self.assign_on(&self.usage, (i, c), podsets, None, false);
        let need = if a.mode == Mode::NoFit {
            Vec::new()
        } else {
            a.need
        };
        tally_held(&mut self.held_in[c], i, &need);
        self.held.push((i, c, need));
        // BestEffortFIFO goes on to the next Workload, as Kueue's does whatever its head
        // does, but for those this head could preempt; StrictFIFO waits behind it
        if ix.q.cqs[c].strategy == QueueingStrategy::StrictFIFO {
            self.block(c, i, Block::HeldBack);
            return Outcome::Stop;
        }
        Outcome::Continue
    }
}

/// Adds held-back Workload `i`'s need to its ClusterQueue's tally (`Pass::held_in`): the first
/// held back there, and what they need summed.
pub(super) fn tally_held(
    tally: &mut (Option<WorkloadIx>, Charges),
    i: WorkloadIx,
    need: &[(FrIx, Quantity)],
) {
    let (first, sum) = tally;
    first.get_or_insert(i);
    for &(fr, v) in need {
        add_charge(sum, fr, v);
    }
}
