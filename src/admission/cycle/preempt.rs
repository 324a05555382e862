//! A Workload short of quota preempting: the victims it evicts (Kueue's classical preemption,
//! [`preemption::targets`]) on the holders at the start of the pass, and the admissions of this
//! pass a preemption one cycle later would pick instead (conflicts: the pass is redone without
//! them).

use std::cell::RefCell;
use std::sync::Arc;

use super::entry::pending;
use super::nominate::Outcome;
use super::pass::{Block, Pass, charge};
use crate::admission::flavors::{self, Assignment, Oracle, Replacing};
use crate::admission::ids::{CqIx, FrIx, TiSlice, WorkloadIx};
use crate::admission::index::Index;
use crate::admission::preemption::{
    self, Admitted, Exclusions, Holders, Preemptor, SimulatedKind, Simulation,
};
use crate::admission::quota::Usage;
use crate::admission::status::{PREEMPTED_IN_CLUSTER_QUEUE, PREEMPTED_IN_COHORT};
use crate::admission::workloads::PodSetRequests;
use crate::admission::{Decision, PendingMessage};
use crate::quantity::Quantity;
use crate::types::kueue::{ReclaimWithinCohort, WithinClusterQueue, reason};

/// What a Workload short of quota did about it.
pub(super) enum Preempted {
    /// Evicts this many Workloads (some may already be on their way out).
    Victims(usize),
    /// A victim it needs is already claimed by another Workload in this pass: it waits.
    Overlapping,
}

/// The flavor assigner's preemption oracle on the pass's state: the victims Workload `workload`
/// of ClusterQueue `cq` would find among `holders`, as [`Pass::preempt`] looks for them.
struct PassOracle<'p> {
    ix: &'p Index,
    usage: &'p Usage,
    holders: &'p Holders,
    admitted: &'p Admitted,
    gone: &'p TiSlice<WorkloadIx, bool>,
    evicting: &'p TiSlice<WorkloadIx, bool>,
    workload: WorkloadIx,
    cq: CqIx,
    spare: Option<WorkloadIx>,
    /// A copy of `usage` to simulate on (made at the first question).
    scratch: RefCell<Option<Usage>>,
}

impl Oracle for PassOracle<'_> {
    fn simulate(&self, fr: FrIx, need: Quantity) -> Simulation {
        let ix = self.ix;
        let info = &ix.q.cqs[self.cq];
        if info.within == WithinClusterQueue::Never && info.reclaim == ReclaimWithinCohort::Never {
            // no policy names a candidate: the answer, without copying the usage to search
            return Simulation {
                kind: SimulatedKind::NoCandidates,
                borrow_after: ix.q.tree.borrowing_height(self.usage, self.cq, fr, need),
            };
        }
        let mut scratch = self.scratch.borrow_mut();
        let usage = scratch.get_or_insert_with(|| self.usage.clone());
        let p = Preemptor {
            workload: self.workload,
            cq: self.cq,
            need: &[(fr, need)],
            short: &[fr],
            spare: self.spare,
        };
        let ex = Exclusions {
            gone: self.gone,
            evicting: self.evicting,
            admitted: self.admitted,
        };
        preemption::simulate(self.ix, usage, self.holders, &p, &ex)
    }
}

impl<'a> Pass<'a> {
    /// Flavors for Workload `i` in ClusterQueue `c` on `usage` ([`flavors::assign_with`]), a
    /// flavor that needs preemption judged by the victims it would find (Kueue's preemption
    /// oracle): among the holders at the start of the pass, or with `next_pass` among those the
    /// next pass starts with (this pass's admissions included).
    pub fn assign_on(
        &self,
        usage: &Usage,
        (i, c): (WorkloadIx, CqIx),
        podsets: &[PodSetRequests],
        replacing: Option<&Replacing>,
        next_pass: bool,
    ) -> Assignment {
        let ix = self.ix;
        let spare = ix.workloads[i]
            .replaces
            .as_ref()
            .and_then(|k| ix.by_key.get(k).copied());
        let (holders, admitted): (&Holders, &Admitted) = if next_pass {
            (&self.holders_now, &self.admitted_now)
        } else {
            (&self.admitted_by_cq, Admitted::from_ref(&[]))
        };
        let oracle = PassOracle {
            ix,
            usage,
            holders,
            admitted,
            gone: &self.gone,
            evicting: &self.evicting,
            workload: i,
            cq: c,
            spare,
            scratch: RefCell::new(None),
        };
        // the pass's own attempt resumes a scan cut short ([`Pass::nominated`])
        let resume = match &self.resume[i] {
            Some(from) if !next_pass => from.as_slice(),
            _ => &[],
        };
        flavors::assign_with(&ix.q, usage, c, podsets, replacing, &oracle, resume)
    }

    /// Evicts the victims that make Workload `i` fit, if there are any, and keeps what it needs
    /// for the rest of the pass (the room its victims free is its). `None` when nothing can make
    /// it fit; [`Preempted::Overlapping`] when a victim it needs is already being evicted by
    /// another Workload in this pass (Kueue skips an entry with overlapping preemption targets).
    pub fn preempt(
        &mut self,
        i: WorkloadIx,
        c: CqIx,
        a: &Assignment,
        spare: Option<WorkloadIx>,
    ) -> Option<Preempted> {
        let ix = self.ix;
        let p = Preemptor {
            workload: i,
            cq: c,
            need: &a.need,
            short: &a.short,
            spare,
        };
        if !self.newly.is_empty() {
            self.note_conflicts(&p);
        }
        let ex = Exclusions {
            gone: &self.gone,
            evicting: &self.evicting,
            admitted: Admitted::from_ref(&[]),
        };
        let victims = preemption::targets(ix, &mut self.usage, &self.admitted_by_cq, &p, &ex);
        if victims.is_empty() {
            return None;
        }
        if victims.iter().any(|v| self.claimed[v.workload]) {
            return Some(Preempted::Overlapping);
        }
        let preemptor = &ix.workloads[i].key;
        for v in &victims {
            self.claimed[v.workload] = true;
            if self.evicting[v.workload] {
                continue;
            }
            let why = if v.same_queue {
                PREEMPTED_IN_CLUSTER_QUEUE
            } else {
                PREEMPTED_IN_COHORT
            };
            self.decisions.push(Decision::Evict {
                workload: ix.workloads[v.workload].key.clone(),
                reason: reason::PREEMPTED.to_string(),
                message: format!("Preempted to accommodate a workload ({preemptor}) {why}"),
            });
            self.evicting[v.workload] = true;
            self.evicted_now[v.workload] = true;
            self.preempted_by.push((v.workload, i));
        }
        charge(&ix.q, &mut self.usage, c, &a.need, true);
        Some(Preempted::Victims(victims.len()))
    }

    /// Kueue, one cycle later, would count this pass's admissions as candidates (the most
    /// recently admitted first): one it would pick for `p` is not admitted in this pass after
    /// all (a conflict).
    fn note_conflicts(&mut self, p: &Preemptor) {
        let ix = self.ix;
        let ex = Exclusions {
            gone: &self.gone,
            evicting: &self.evicting,
            admitted: &self.admitted_now,
        };
        let mut all = preemption::targets(ix, &mut self.usage, &self.holders_now, p, &ex);
        if !all.iter().any(|v| self.admitted_now[v.workload].is_some()) {
            // it would evict an older holder: if this pass's admissions alone could make
            // room, they took what it reclaims (quota lent in this pass), and the pass is
            // redone without them rather than evicting the older holder
            all = preemption::targets(ix, &mut self.usage, &self.newly_by_cq, p, &ex);
        }
        for v in all {
            if self.admitted_now[v.workload].is_some()
                && !ix.workloads[v.workload].preemptor
                && !self.conflicts.iter().any(|&(x, _)| x == v.workload)
            {
                self.conflicts.push((v.workload, p.workload));
            }
        }
    }

    /// Leaves Workload `i` of ClusterQueue `c` pending as it preempts (`text`: why it does not
    /// fit now); the rest of its queue waits behind it.
    pub fn preempting(
        &mut self,
        i: WorkloadIx,
        c: CqIx,
        text: Arc<str>,
        preempted: Preempted,
    ) -> Outcome {
        let ix = self.ix;
        let message = match preempted {
            Preempted::Victims(victims) => PendingMessage::Preempting { text, victims },
            Preempted::Overlapping => PendingMessage::from(format!(
                "{text}. Workload has overlapping preemption targets with another workload"
            )),
        };
        self.memo.changed(ix, c);
        self.block(c, i, Block::Preemption);
        self.decisions
            .extend(pending(ix, &ix.workloads[i], reason::PENDING, message));
        Outcome::Stop
    }
}
