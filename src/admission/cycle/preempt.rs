//! A Workload short of quota preempting: the victims it evicts (Kueue's classical preemption,
//! [`preemption::targets`]) on the holders at the start of the pass, and the admissions of this
//! pass a preemption one cycle later would pick instead (conflicts: the pass is redone without
//! them).

use std::sync::Arc;

use super::entry::pending;
use super::nominate::Outcome;
use super::pass::{Block, Pass, charge};
use crate::admission::flavors::Assignment;
use crate::admission::ids::{CqIx, WorkloadIx};
use crate::admission::preemption::{self, Admitted, Exclusions, Preemptor};
use crate::admission::status::{PREEMPTED_IN_CLUSTER_QUEUE, PREEMPTED_IN_COHORT};
use crate::admission::{Decision, PendingMessage};
use crate::types::kueue::reason;

/// What a Workload short of quota did about it.
pub(super) enum Preempted {
    /// Evicts this many Workloads (some may already be on their way out).
    Victims(usize),
    /// A victim it needs is already claimed by another Workload in this pass: it waits.
    Overlapping,
}

impl<'a> Pass<'a> {
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
