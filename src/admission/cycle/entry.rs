//! Kueue's `processEntry`: one pending Workload decided against the usage the ones before it
//! left: admitted if it fits, preempting if that can make it fit, else left pending (and a
//! StrictFIFO queue waits behind it).

use std::sync::Arc;

use super::memo::{Memo, same_standing};
use super::nominate::Outcome;
use super::pass::{Block, Pass, charge};
use crate::admission::flavors::{self, Assignment, Mode, Replacing};
use crate::admission::ids::{CqIx, WorkloadIx};
use crate::admission::index::Index;
use crate::admission::queues::Queues;
use crate::admission::workloads::{PodSetRequests, WorkloadEntry};
use crate::admission::{Decision, PendingMessage, WaitingBehind};
use crate::types::kueue::{Admission, PodSetAssignment, QueueingStrategy, StopPolicy, reason};

/// A head's assignment as Kueue nominates it ([`Pass::nominated`]).
enum Nominated {
    /// Its flavors at the start of the round fit now.
    Fits(Assignment),
    /// Its flavors at the start of the round fitted then and no longer do.
    NoLonger,
    /// Assigned on the usage now: the round has one head, nothing changed since it started, or
    /// it did not fit at the start.
    Now,
}

/// How many times a Workload is put back at the front of its queue in one pass.
const MAX_RETRIES_PER_PASS: u8 = 64;

/// A Pending decision for Workload `w`, or none when `w` already shows this very reason and
/// message: the result leaves out what would change nothing (a status is then kept as it is),
/// unless the index reports every Pending decision ([`Index::report_unchanged`]).
pub(super) fn pending(
    ix: &Index,
    w: &WorkloadEntry,
    reason: &'static str,
    message: PendingMessage,
) -> Option<Decision> {
    if !ix.report_unchanged && w.shown.as_ref().is_some_and(|s| s.is(reason, &message)) {
        return None;
    }
    Some(Decision::Pending {
        workload: w.key.clone(),
        reason,
        message,
    })
}

/// The `status.admission` of a Workload with `podsets` admitted in `cq` as `a` assigns them.
fn admission(q: &Queues, cq: CqIx, podsets: &[PodSetRequests], a: &Assignment) -> Admission {
    Admission {
        cluster_queue: q.cqs[cq].name.clone(),
        pod_set_assignments: podsets
            .iter()
            .zip(&a.flavors)
            .map(|(ps, chosen)| PodSetAssignment {
                name: ps.name.clone(),
                flavors: chosen
                    .iter()
                    .map(|&(ri, f)| {
                        (
                            ps.requests[ri].name.clone(),
                            q.catalog.flavors[f].name.clone(),
                        )
                    })
                    .collect(),
                resource_usage: chosen
                    .iter()
                    .map(|&(ri, _)| (ps.requests[ri].name.clone(), ps.requests[ri].total.to_k8s()))
                    .collect(),
                count: Some(ps.count),
            })
            .collect(),
    }
}

impl<'a> Pass<'a> {
    /// Kueue's `processEntry` for one pending Workload: admit it if it fits, else preempt for it
    /// if that can make it fit, and leave it pending. Its own ClusterQueue's reservation for
    /// held-back Workloads does not count against it.
    ///
    /// Other ClusterQueues' reservations keep quota from borrowing only: a Workload that fits
    /// within its own ClusterQueue's nominal quota on the usage without them is looked at without
    /// them (see [`Pass::see_through`]).
    pub fn process_entry(&mut self, i: WorkloadIx) -> Outcome {
        if let Some(r) = self.replaced_now[i] {
            self.finish_replaced(i, r);
            return Outcome::Continue;
        }
        let Ok(t) = &self.ix.workloads[i].target else {
            return self.evaluate(i, false);
        };
        let c = t.cq;
        if self.reclaimer[i] {
            self.deciding = Some(i);
            self.reclaimer_decided(i);
        }
        let lifted = self.see_through(i, c);
        let fresh = !lifted.is_empty();
        let outcome = if self.reserved[c].is_empty() && self.held_in[c].0.is_none() {
            let before = self.held.len();
            let outcome = self.evaluate(i, fresh);
            if self.held.len() != before {
                self.reserve(c, Vec::new());
            }
            outcome
        } else {
            let (old, own) = self.lift_own(c);
            let outcome = self.evaluate(i, fresh);
            self.restore_own(c, old, &own);
            outcome
        };
        for (o, r) in lifted {
            charge(&self.ix.q, &mut self.usage, o, &r, true);
            self.reserved[o] = r;
        }
        if self.deciding.take().is_some() {
            self.reclaimer_decided(i);
        }
        outcome
    }

    /// The slice replacement slice `i` replaces, if that one still holds quota.
    pub fn replaced(&self, i: WorkloadIx) -> Option<WorkloadIx> {
        let ix = self.ix;
        let spare = ix.workloads[i]
            .replaces
            .as_ref()
            .and_then(|k| ix.by_key.get(k).copied());
        spare.filter(|&o| {
            let ow = &ix.workloads[o];
            ow.held.is_some() && !ow.evicted && !self.evicting[o] && !self.gone[o]
        })
    }

    /// The quota the replaced slice `old` holds in ClusterQueue `c`, for the flavor assigner to
    /// count as the replacement's own (Kueue's workload slices: the replacement is charged only
    /// its delta).
    pub fn replacing(&self, old: Option<WorkloadIx>, c: CqIx) -> Option<Replacing<'a>> {
        let ix = self.ix;
        old.and_then(|o| {
            let ow = &ix.workloads[o];
            let held = ow.held.as_ref()?;
            (held.cq == Some(c)).then_some(Replacing { key: &ow.key, held })
        })
    }

    /// `fresh`: other ClusterQueues' reservations are lifted for it (see [`Pass::see_through`]),
    /// so what the pass remembered for another Workload on the usage with them does not apply.
    fn evaluate(&mut self, i: WorkloadIx, fresh: bool) -> Outcome {
        let ix = self.ix;
        let w = &ix.workloads[i];
        let (c, podsets) = match self.admissible(w) {
            Ok(found) => found,
            Err((why, message)) => {
                self.decisions.extend(pending(ix, w, why, message));
                return Outcome::Continue;
            }
        };
        if let Some(outcome) = self.waits_first(i, c) {
            return outcome;
        }
        if let Some(by) = self.forbidden[i] {
            return self.hold_back(i, c, podsets, by);
        }
        let epoch = self.memo.epoch(ix, c);
        let memo =
            w.replaces.is_none() && !fresh && self.pins[i].is_none() && self.resume[i].is_none();
        if memo
            && let Some(message) = Memo::find(&mut self.memo.pending[c], epoch, |r| {
                same_standing(ix, c, r, i)
            })
        {
            let message = message.clone();
            self.decisions
                .extend(pending(ix, w, reason::PENDING, message));
            return self.after_pending(i, c);
        }
        // a replacement slice: the slice it replaces, if that one still holds quota
        let spare = w.replaces.as_ref().and_then(|k| ix.by_key.get(k).copied());
        let old = self.replaced(i);
        let replacing = self.replacing(old, c);
        let a = match self.nominated(i, c, podsets, replacing.as_ref()) {
            Nominated::Fits(b) => {
                self.resume[i] = None;
                self.admit(i, c, podsets, b, old);
                return Outcome::Continue;
            }
            Nominated::NoLonger => return Outcome::Retry,
            Nominated::Now => {
                let a = self.assign_on(&self.usage, (i, c), podsets, replacing.as_ref(), false);
                self.resume[i] = None;
                a
            }
        };
        if a.mode == Mode::Fit {
            self.admit(i, c, podsets, a, old);
            return Outcome::Continue;
        }
        if let Some(pin) = &self.pins[i]
            && old.is_none()
        {
            let b = flavors::assign_pinned(&ix.q, &self.usage, c, podsets, pin);
            if b.mode == Mode::Fit {
                self.admit(i, c, podsets, b, old);
                return Outcome::Continue;
            }
        }
        let text: Arc<str> = a
            .failure
            .as_ref()
            .map(|f| flavors::message(&ix.q, c, f, replacing.as_ref().map(|r| r.key)))
            .unwrap_or_default()
            .into();
        if a.mode == Mode::Preempt
            && let Some(preempted) = self.preempt(i, c, &a, spare)
        {
            return self.preempting(i, c, text, preempted);
        }
        self.left_pending(i, c, text, memo.then_some(epoch))
    }

    /// Workload `i` of ClusterQueue `c` left pending before its flavors are looked at: an
    /// evicted slice that a live slice replaces (admitted first, as it queues at its creation
    /// time before its replacement, it would charge the chain's PodSets twice; its replacement's
    /// admission finishes it), or one that the queue's held-back head could preempt
    /// (`withinClusterQueue`): admitted now, it would be that head's victim once the head is
    /// admitted, and everything after it in the queue waits too.
    fn waits_first(&mut self, i: WorkloadIx, c: CqIx) -> Option<Outcome> {
        let ix = self.ix;
        let w = &ix.workloads[i];
        if w.evicted
            && w.held.is_none()
            && let Some(r) = self.replacer[i]
        {
            let message = format!("replaced by workload slice {}", ix.workloads[r].key);
            self.decisions.extend(pending(
                ix,
                w,
                reason::PENDING,
                PendingMessage::from(message),
            ));
            return Some(Outcome::Continue);
        }
        let x = self.held_in[c].0?;
        if !self.could_preempt_own(c, x, i) {
            return None;
        }
        let message = self.block(c, x, Block::HeldBack);
        self.decisions
            .extend(pending(ix, w, reason::PENDING, message));
        Some(Outcome::Stop)
    }

    /// Kueue's nomination: the heads of a cycle are assigned flavors on the usage at its start,
    /// and each is then admitted on those flavors if they still fit the usage the heads before
    /// it left. One that no longer fits ("Workload no longer fits after processing another
    /// workload", `processEntry`) is requeued at once (`RequeueReasonFailedAfterNomination`, an
    /// immediate requeue in `ClusterQueue.RequeueIfNotPresent`,
    /// `pkg/cache/queue/cluster_queue.go`) and is its queue's head again in the next cycle, even
    /// where another flavor would fit now; that cycle's scan resumes after the flavor this one
    /// stopped at (`markSkipped` keeps `LastAssignment` with
    /// `FlavorFungibilityPreserveScanProgress`, beta and on in v0.19). A replacement slice is
    /// assigned on the usage now.
    fn nominated(
        &mut self,
        i: WorkloadIx,
        c: CqIx,
        podsets: &[PodSetRequests],
        replacing: Option<&Replacing>,
    ) -> Nominated {
        let Some(start) = self.round_start.as_ref() else {
            return Nominated::Now;
        };
        if replacing.is_some() || self.retried[i] >= MAX_RETRIES_PER_PASS || *start == self.usage {
            return Nominated::Now;
        }
        let at_start = self.assign_on(start, (i, c), podsets, None, false);
        if at_start.mode != Mode::Fit {
            return Nominated::Now;
        }
        let b = flavors::assign_pinned(&self.ix.q, &self.usage, c, podsets, &at_start.flavors);
        if b.mode == Mode::Fit {
            return Nominated::Fits(b);
        }
        self.retried[i] += 1;
        self.resume[i] = Some(at_start.scan);
        Nominated::NoLonger
    }

    /// Leaves Workload `i` of ClusterQueue `c` pending with `text` (why it does not fit), the
    /// message remembered for its shape at `epoch` if given.
    fn left_pending(
        &mut self,
        i: WorkloadIx,
        c: CqIx,
        text: Arc<str>,
        epoch: Option<u64>,
    ) -> Outcome {
        let ix = self.ix;
        let w = &ix.workloads[i];
        let mut message = PendingMessage::Text(text);
        // what it shows already, if it reads the same: the Workloads given this message by the
        // memo after it show that very text too, and compare with it by address
        if let Some(shown) = &w.shown
            && shown.message.reads_as(&message)
        {
            message = shown.message.clone();
        }
        if let Some(epoch) = epoch {
            Memo::remember(&mut self.memo.pending[c], (i, epoch, message.clone()));
        }
        self.decisions
            .extend(pending(ix, w, reason::PENDING, message));
        self.after_pending(i, c)
    }

    /// A Workload left pending without preempting: a StrictFIFO queue waits behind it.
    fn after_pending(&mut self, i: WorkloadIx, c: CqIx) -> Outcome {
        if self.ix.q.cqs[c].strategy == QueueingStrategy::StrictFIFO {
            self.block(c, i, Block::StrictFifo);
            return Outcome::Stop;
        }
        Outcome::Continue
    }

    /// The rest of ClusterQueue `c` waits behind Workload `i` for the rest of the pass.
    /// Returns the message of the Workloads waiting behind it.
    pub fn block(&mut self, c: CqIx, i: WorkloadIx, why: Block) -> PendingMessage {
        self.blocked[c] = Some((i, why));
        let message = PendingMessage::WaitingBehind(Arc::new(WaitingBehind {
            head: self.ix.workloads[i].key.clone(),
            cluster_queue: self.ix.q.cqs[c].name.clone(),
            why,
        }));
        self.waiting[c] = Some(message.clone());
        message
    }

    /// The ClusterQueue and PodSets of a Workload that may be admitted now, or why it may not
    /// (the reason of its `QuotaReserved=False`).
    fn admissible(
        &self,
        w: &'a WorkloadEntry,
    ) -> Result<(CqIx, &'a [PodSetRequests]), (&'static str, PendingMessage)> {
        let q = &self.ix.q;
        let inadmissible = |m: String| (reason::INADMISSIBLE, PendingMessage::from(m));
        if !w.active {
            return Err(inadmissible("the workload is deactivated".to_string()));
        }
        let c = w.target.as_ref().map_err(|m| inadmissible(m.clone()))?.cq;
        let info = &q.cqs[c];
        if let Some((_, m)) = &info.inactive {
            return Err(inadmissible(m.clone()));
        }
        if info.stop != StopPolicy::None {
            return Err(inadmissible(format!(
                "ClusterQueue {} is stopped",
                info.name
            )));
        }
        if let Some(l) =
            w.lq.map(|l| &q.lqs[l])
                .filter(|l| l.stop != StopPolicy::None)
        {
            return Err(inadmissible(format!(
                "LocalQueue {}/{} is stopped",
                l.namespace, l.name
            )));
        }
        if !q.namespace_matches(c, &w.namespace) {
            return Err(inadmissible(format!(
                "namespace {} doesn't match the namespaceSelector of ClusterQueue {}",
                w.namespace, info.name
            )));
        }
        let podsets = w.podsets.as_ref().map_err(|m| inadmissible(m.clone()))?;
        if self.blocked[c].is_some()
            && let Some(m) = &self.waiting[c]
        {
            return Err((reason::PENDING, m.clone()));
        }
        Ok((c, podsets))
    }

    /// Reserves quota for Workload `i`; a replacement's old slice finishes right after it.
    fn admit(
        &mut self,
        i: WorkloadIx,
        c: CqIx,
        podsets: &[PodSetRequests],
        a: Assignment,
        old: Option<WorkloadIx>,
    ) {
        let ix = self.ix;
        let w = &ix.workloads[i];
        self.memo.changed(ix, c);
        charge(&ix.q, &mut self.usage, c, &a.totals, true);
        self.decisions.push(Decision::Admit {
            workload: w.key.clone(),
            admission: admission(&ix.q, c, podsets, &a),
        });
        if let Some(o) = old {
            let ow = &ix.workloads[o];
            if let Some(h) = &ow.held
                && let Some(oc) = h.cq
            {
                charge(&ix.q, &mut self.usage, oc, &h.usage, false);
            }
            self.finish_replaced(o, i);
        } else if let Some(o) = w.replaces.as_ref().and_then(|k| ix.by_key.get(k).copied()) {
            // charged in full, the slice it replaces holding nothing: that one is finished when
            // the pass comes to it, not admitted beside it (see [`Pass::finish_stale_replaced`])
            let ow = &ix.workloads[o];
            if ow.held.is_none() && ow.finished.is_none() && !ow.duplicate && !self.gone[o] {
                self.replaced_now[o] = Some(i);
            }
        }
        self.holders_now[c].push(i);
        self.newly_by_cq[c].push(i);
        self.admitted_now[i] = Some((c, a.totals.clone()));
        self.newly.push((i, c, a.totals));
    }
}
