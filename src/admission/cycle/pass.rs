//! One pass in progress ([`Pass`]): the usage as decided so far and what happened to each
//! Workload; the evictions that need no quota (deactivated Workloads, stopped queues) and the
//! replaced slices finished before any Workload is looked at.

use super::memo::Memo;
use super::{Forbidden, Pins};
use crate::admission::ids::{CqIx, FrIx, NodeIx, TiVec, WorkloadIx};
use crate::admission::index::Index;
use crate::admission::queues::Queues;
use crate::admission::quota::{Charges, Usage};
use crate::admission::workloads::WorkloadEntry;
use crate::admission::{Decision, PendingMessage, WaitingFor};
use crate::quantity::Quantity;
use crate::types::kueue::{StopPolicy, reason};

/// Charges (`add`) or releases `items` in ClusterQueue `cq`.
pub(super) fn charge(
    q: &Queues,
    usage: &mut Usage,
    cq: CqIx,
    items: &[(FrIx, Quantity)],
    add: bool,
) {
    for &(fr, v) in items {
        if add {
            q.tree.add_usage(usage, cq, fr, v);
        } else {
            q.tree.remove_usage(usage, cq, fr, v);
        }
    }
}

/// Why a ClusterQueue's Workloads wait behind one of them for the rest of a pass.
pub(super) type Block = WaitingFor;

/// One pass in progress: usage as decided so far and what happened to each Workload.
pub(super) struct Pass<'a> {
    pub ix: &'a Index,
    pub usage: Usage,
    pub decisions: Vec<Decision>,

    // who holds quota
    /// Holders per ClusterQueue at the start of the pass: preemption candidates.
    pub admitted_by_cq: TiVec<CqIx, Vec<WorkloadIx>>,
    /// Holders per ClusterQueue, the pass's admissions included.
    pub holders_now: TiVec<CqIx, Vec<WorkloadIx>>,
    /// Per ClusterQueue: the Workloads admitted in this pass.
    pub newly_by_cq: TiVec<CqIx, Vec<WorkloadIx>>,
    /// Per Workload admitted in this pass: its ClusterQueue and usage.
    pub admitted_now: TiVec<WorkloadIx, Option<(CqIx, Charges)>>,
    /// (Workload, ClusterQueue, usage per (flavor, resource)) admitted in this pass.
    pub newly: Vec<(WorkloadIx, CqIx, Charges)>,

    // who leaves
    /// Finished in this pass (a replaced slice): holds nothing.
    pub gone: TiVec<WorkloadIx, bool>,
    /// Per slice that holds nothing: its replacement, admitted in this pass (in full).
    pub replaced_now: TiVec<WorkloadIx, Option<WorkloadIx>>,
    /// Per slice: a slice that replaces it and is neither finished nor evicted.
    pub replacer: TiVec<WorkloadIx, Option<WorkloadIx>>,
    /// Being evicted (by its status, or by a decision of this pass).
    pub evicting: TiVec<WorkloadIx, bool>,
    /// Evicted by a decision of this pass.
    pub evicted_now: TiVec<WorkloadIx, bool>,
    /// Chosen as a preemption victim in this pass (Kueue's `preemptedWorkloads`).
    pub claimed: TiVec<WorkloadIx, bool>,
    /// (victim, preemptor) for every eviction a preemption of this pass decided.
    pub preempted_by: Vec<(WorkloadIx, WorkloadIx)>,
    /// (admitted in this pass, pending Workload whose preemption in this pass would pick it):
    /// the pass is redone without that admission (see [`super::run`]).
    pub conflicts: Vec<(WorkloadIx, WorkloadIx)>,

    // who waits
    /// Per ClusterQueue: the Workload the rest wait behind for the rest of the pass.
    pub blocked: TiVec<CqIx, Option<(WorkloadIx, Block)>>,
    /// Per ClusterQueue: the message of the Workloads waiting behind `blocked`, made once.
    pub waiting: TiVec<CqIx, Option<PendingMessage>>,

    // who is held back, and the quota kept for them (see [`super::hold`])
    /// Not admitted in this pass: the Workload that could preempt it in the next one.
    pub forbidden: Forbidden,
    /// Per Workload: the flavors it would have after preempting a Workload held back for it
    /// ([`Pass::reclaimable`]), tried when its own assignment does not fit.
    pub pins: Pins,
    /// Left pending in this pass because of `forbidden`, in the order they were looked at:
    /// (Workload, ClusterQueue, what it needs per (flavor, resource)).
    pub held: Vec<(WorkloadIx, CqIx, Charges)>,
    /// Per ClusterQueue: its first held-back Workload, and what its held-back ones need summed.
    pub held_in: TiVec<CqIx, (Option<WorkloadIx>, Charges)>,
    /// Per ClusterQueue: the part of its nominal quota kept from other ClusterQueues' borrowing
    /// for its held-back Workloads, charged to it in `usage` (see [`Pass::reserve`]).
    pub reserved: TiVec<CqIx, Charges>,
    /// Per cohort tree root: how many of its ClusterQueues have a non-empty `reserved`.
    pub reserving: TiVec<NodeIx, usize>,
    /// Per Workload: some Workload is held back in this pass because this one could preempt it.
    pub reclaimer: TiVec<WorkloadIx, bool>,
    /// The reclaimer being looked at: the Workloads held back for it keep nothing they would
    /// borrow from it (see [`Pass::lift_own`]).
    pub deciding: Option<WorkloadIx>,

    pub memo: Memo,

    // Kueue's nomination (see [`super::nominate::rounds`])
    /// The usage at the start of the round being processed, when it has more than one head.
    pub round_start: Option<Usage>,
    /// How often it was put back at the front of its queue in this pass: its flavors at the
    /// start of a round no longer fitted after the heads before it.
    pub retried: TiVec<WorkloadIx, u8>,
    /// Per Workload put back so: where its next flavor scan resumes (Kueue keeps a skipped
    /// Workload's scan progress, `FlavorFungibilityPreserveScanProgress`).
    pub resume: TiVec<WorkloadIx, Option<crate::admission::flavors::ScanFrom>>,
}

impl<'a> Pass<'a> {
    /// Every held quota charged to its ClusterQueue.
    pub fn new(ix: &'a Index, forbidden: Forbidden, pins: Pins) -> Self {
        let q = &ix.q;
        let n = ix.workloads.len();
        let per_cq = q.cqs.len();
        let mut usage = Usage::new(&q.tree);
        let mut admitted_by_cq: TiVec<CqIx, Vec<WorkloadIx>> =
            TiVec::from(vec![Vec::new(); per_cq]);
        for &i in &ix.sorted {
            if let Some(h) = &ix.workloads[i].held
                && let Some(c) = h.cq
            {
                charge(q, &mut usage, c, &h.usage, true);
                admitted_by_cq[c].push(i);
            }
        }
        let mut reclaimer = TiVec::from(vec![false; n]);
        for by in forbidden.iter().flatten() {
            reclaimer[*by] = true;
        }
        Pass {
            ix,
            usage,
            decisions: Vec::new(),
            holders_now: admitted_by_cq.clone(),
            newly_by_cq: TiVec::from(vec![Vec::new(); per_cq]),
            admitted_now: TiVec::from(vec![None; n]),
            admitted_by_cq,
            newly: Vec::new(),
            gone: TiVec::from(vec![false; n]),
            replaced_now: TiVec::from(vec![None; n]),
            replacer: replacers(ix),
            evicting: ix
                .workloads
                .iter()
                .map(|w| w.held.is_some() && w.evicted)
                .collect(),
            evicted_now: TiVec::from(vec![false; n]),
            claimed: TiVec::from(vec![false; n]),
            preempted_by: Vec::new(),
            conflicts: Vec::new(),
            blocked: TiVec::from(vec![None; per_cq]),
            waiting: TiVec::from(vec![None; per_cq]),
            forbidden,
            pins,
            held: Vec::new(),
            held_in: TiVec::from(vec![(None, Vec::new()); per_cq]),
            reserved: TiVec::from(vec![Vec::new(); per_cq]),
            reserving: TiVec::from(vec![0; q.tree.nodes.len()]),
            reclaimer,
            deciding: None,
            memo: Memo::new(ix),
            round_start: None,
            retried: TiVec::from(vec![0; n]),
            resume: TiVec::from(vec![None; n]),
        }
    }

    /// Whether any Workload was held back in this pass (or a retry before it) for a reclaimer.
    pub fn forbidden_any(&self) -> bool {
        self.forbidden.iter().any(Option::is_some)
    }

    /// Evicts holders whatever the quota: deactivated Workloads, and Workloads of a ClusterQueue
    /// or LocalQueue stopped with `HoldAndDrain`.
    pub fn evict_without_quota(&mut self) {
        let ix = self.ix;
        for &i in &ix.sorted {
            let w = &ix.workloads[i];
            let Some(h) = &w.held else { continue };
            if w.evicted {
                continue;
            }
            let Some((why, message)) = eviction_without_quota(&ix.q, w, h.cq) else {
                continue;
            };
            self.decisions.push(Decision::Evict {
                workload: w.key.clone(),
                reason: why.to_string(),
                message,
            });
            self.evicting[i] = true;
            self.evicted_now[i] = true;
        }
    }

    /// Finishes an old slice whose replacement already holds quota, whether the old one still
    /// holds quota or not. Held: the pass that admitted the replacement finishes the old one, but
    /// when that write failed (or the controller died between the two writes) no later admission
    /// of the replacement comes to do it, and both slices would stay charged. Not held: it was
    /// evicted and requeued before its replacement was admitted (in full, as nothing was left to
    /// replace); admitted again, it would charge PodSets its replacement already holds. Kueue's
    /// job reconciler finishes both: its `workloadslicing.normalizeActiveSlices` (v0.19.2) keeps
    /// the newest reserved slice that no reserved slice replaces and that one's pending
    /// replacement, never an evicted slice, and finishes every other one (`WorkloadSliceReplaced`
    /// when a slice not evicted replaces it). Here as if the admitting pass had finished it.
    /// Returns whether it finished a pending slice, which the pass's queues then leave out
    /// ([`super::one_pass`]).
    pub fn finish_stale_replaced(&mut self) -> bool {
        let ix = self.ix;
        let mut finished_pending = false;
        for &r in &ix.sorted {
            let w = &ix.workloads[r];
            if w.held.is_none() || w.evicted || self.evicting[r] {
                continue;
            }
            let Some(o) = w.replaces.as_ref().and_then(|k| ix.by_key.get(k).copied()) else {
                continue;
            };
            let ow = &ix.workloads[o];
            if ow.finished.is_some() || ow.duplicate || self.gone[o] {
                continue;
            }
            match &ow.held {
                Some(h) => {
                    if let Some(oc) = h.cq {
                        charge(&ix.q, &mut self.usage, oc, &h.usage, false);
                    }
                }
                None => finished_pending = true,
            }
            self.finish_replaced(o, r);
        }
        finished_pending
    }

    /// Finishes slice `o`, replaced by `r` (its quota, if it held any, already uncharged).
    pub fn finish_replaced(&mut self, o: WorkloadIx, r: WorkloadIx) {
        let ix = self.ix;
        self.gone[o] = true;
        self.decisions.push(Decision::FinishReplaced {
            workload: ix.workloads[o].key.clone(),
            replaced_by: ix.workloads[r].key.clone(),
        });
    }
}

/// Per slice, a live slice that replaces it (not finished, not evicted, not a duplicate).
fn replacers(ix: &Index) -> TiVec<WorkloadIx, Option<WorkloadIx>> {
    let mut out = TiVec::from(vec![None; ix.workloads.len()]);
    for &r in &ix.sorted {
        let w = &ix.workloads[r];
        if w.finished.is_some() || w.evicted || w.duplicate {
            continue;
        }
        if let Some(o) = w.replaces.as_ref().and_then(|k| ix.by_key.get(k).copied()) {
            out[o] = Some(r);
        }
    }
    out
}

/// Why a holder is evicted whatever the quota, if it is.
fn eviction_without_quota(
    q: &Queues,
    w: &WorkloadEntry,
    cq: Option<CqIx>,
) -> Option<(&'static str, String)> {
    let cq_stop = cq.map(|c| q.cqs[c].stop);
    let lq = w.lq.map(|l| &q.lqs[l]);
    if !w.active {
        return Some((
            reason::DEACTIVATED,
            "The workload is deactivated".to_string(),
        ));
    }
    if cq_stop == Some(StopPolicy::HoldAndDrain) {
        let name = cq.map_or("", |c| q.cqs[c].name.as_str());
        return Some((
            reason::CLUSTER_QUEUE_STOPPED,
            format!("The ClusterQueue {name} is stopped"),
        ));
    }
    let l = lq.filter(|l| l.stop == StopPolicy::HoldAndDrain)?;
    Some((
        reason::LOCAL_QUEUE_STOPPED,
        format!("The LocalQueue {}/{} is stopped", l.namespace, l.name),
    ))
}
