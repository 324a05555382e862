//! One admission pass over an [`Index`]: evictions that do not depend on quota (deactivated,
//! stopped queues), then every pending Workload of every ClusterQueue in one global queue order,
//! each against the usage left by the ones before it; then the usage and counts per queue as they
//! stand once the decisions are applied.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::flavors::{self, Assignment, Mode, Replacing};
use super::index::Index;
use super::preemption::{self, Exclusions, Preemptor};
use super::queues::{LocalQueueEntry, Queues};
use super::quota::Usage;
use super::status::{PREEMPTED_IN_CLUSTER_QUEUE, PREEMPTED_IN_COHORT};
use super::workloads::{HeldQuota, NO_SHAPE, PodSetRequests, WorkloadEntry};
use super::{
    ClusterQueueUsage, CycleResult, Decision, LocalQueueUsage, Options, PendingMessage,
    WaitingBehind, WaitingFor,
};
use crate::quantity::Quantity;
use crate::types::kueue::{
    Admission, FlavorUsage, LocalQueueFlavorUsage, LocalQueueResourceUsage, PodSetAssignment,
    QueueingStrategy, ReclaimWithinCohort, ResourceUsage, StopPolicy, WithinClusterQueue, reason,
};
use k8s_openapi::jiff::Timestamp;

/// Usage per (flavor, resource) id.
type Charges = Vec<(usize, Quantity)>;

/// A Pending decision for Workload `w`, or none when `w` already shows this very reason and
/// message: the result leaves out what would change nothing (a status is then kept as it is),
/// unless the index reports every Pending decision ([`Index::report_unchanged`]).
fn pending(
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

fn admission(q: &Queues, cq: usize, podsets: &[PodSetRequests], a: &Assignment) -> Admission {
    Admission {
        cluster_queue: q.cqs[cq].name.clone(),
        pod_set_assignments: podsets
            .iter()
            .zip(&a.flavors)
            .map(|(ps, chosen)| PodSetAssignment {
                name: ps.name.clone(),
                flavors: chosen
                    .iter()
                    .map(|&(ri, f)| (ps.requests[ri].name.clone(), q.flavors[f].name.clone()))
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

fn charge(q: &Queues, usage: &mut Usage, cq: usize, items: &[(usize, Quantity)], add: bool) {
    for &(fr, v) in items {
        if add {
            q.tree.add_usage(usage, cq, fr, v);
        } else {
            q.tree.remove_usage(usage, cq, fr, v);
        }
    }
}

/// Runs one pass, in Kueue's phases: quota-independent evictions, then the pending Workloads in
/// rounds of one head per ClusterQueue (see [`rounds`]), then the usage report.
///
/// A pass is checked against the passes after it ([`later_pass_victims`]): with its decisions
/// applied and nothing else changed, they must not evict what this one admitted or what preempted
/// in it. If they would, this pass is redone with those Workloads held back for the ones that
/// would evict them, as Kueue would have had those take the quota first.
pub(crate) fn run(ix: &Index, options: &Options) -> CycleResult {
    let mut forbidden = vec![None; ix.workloads.len()];
    let mut pass = converge(ix, &mut forbidden);
    for _ in 0..MAX_LOOKAHEADS {
        let victims = later_pass_victims(ix, &pass, options);
        if victims.is_empty() {
            break;
        }
        for (v, by) in victims {
            forbidden[v] = Some(by);
        }
        pass = converge(ix, &mut forbidden);
    }
    let (cluster_queues, local_queues) = report_usage(&pass, options);
    CycleResult {
        decisions: pass.decisions,
        cluster_queues,
        local_queues,
    }
}

/// A pass redone until none of its admissions is one a Workload it left waiting could preempt
/// (as far as the end of the pass shows: [`Pass::reclaimable`] and the conflicts preemption met);
/// `forbidden` gains each Workload held back so.
fn converge<'a>(ix: &'a Index, forbidden: &mut [Option<usize>]) -> Pass<'a> {
    let mut pass = one_pass(ix, forbidden.to_vec());
    for _ in 0..MAX_RETRIES {
        let mut extra = std::mem::take(&mut pass.conflicts);
        for (v, by) in pass.reclaimable() {
            if !extra.iter().any(|&(x, _)| x == v) {
                extra.push((v, by));
            }
        }
        if extra.is_empty() {
            break;
        }
        for (v, by) in extra {
            forbidden[v] = Some(by);
        }
        pass = one_pass(ix, forbidden.to_vec());
    }
    pass
}

/// How many times a pass is redone without the Workloads a waiting one could reclaim.
const MAX_RETRIES: usize = 64;

/// How many times a pass is redone because a later pass would evict what it admitted.
const MAX_LOOKAHEADS: usize = 8;

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
fn later_pass_victims(ix: &Index, pass: &Pass, options: &Options) -> Vec<(usize, usize)> {
    let preempted = !pass.preempted_by.is_empty();
    if !preempted && (pass.newly.is_empty() || !pass.forbidden_any()) {
        return Vec::new();
    }
    let preemptor = |w: usize| pass.preempted_by.iter().any(|&(_, by)| by == w);
    let mut next = applied(ix, &pass.decisions, &pass.admitted_now, options);
    for _ in 0..LOOKAHEAD_PASSES {
        let mut forbidden = vec![None; next.workloads.len()];
        let Pass {
            decisions,
            admitted_now,
            preempted_by,
            ..
        } = converge(&next, &mut forbidden);
        let victims: Vec<(usize, usize)> = preempted_by
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

/// The index as a pass's decisions leave the Workloads (what [`super::Scheduler::apply`] makes of
/// them): admitted ones hold their quota (admitted after every other holder), evicted ones are
/// requeued behind every Workload of their priority (and release their quota at once if the
/// options say so), replaced slices are finished, preemptors go first in their queue.
fn applied(
    ix: &Index,
    decisions: &[Decision],
    admitted_now: &[Option<(usize, Charges)>],
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
                    .map(|psa| (psa.name.clone(), ix.q.flavor_ids_of(psa)))
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

fn one_pass(ix: &Index, forbidden: Vec<Option<usize>>) -> Pass<'_> {
    let mut pass = Pass::new(ix, forbidden);
    pass.evict_without_quota();
    let finished_pending = pass.finish_stale_replaced();
    let (mut stray, mut queues) = nominate(ix);
    if finished_pending {
        stray.retain(|&i| !pass.gone[i]);
        queues.iter_mut().for_each(|q| q.retain(|&i| !pass.gone[i]));
    }
    for i in stray {
        pass.process_entry(i);
    }
    rounds(&mut pass, &queues);
    pass.late(&queues);
    pass
}

/// Pending Workloads: those with no ClusterQueue to queue in, and per ClusterQueue its pending
/// Workloads in its own queue order: a Workload that preempted in an earlier pass first (Kueue
/// keeps it at the front of its queue until its victims are gone), then priority (higher first),
/// then the queue order time, then the key (by rank).
fn nominate(ix: &Index) -> (Vec<usize>, Vec<Vec<usize>>) {
    let stray: Vec<usize> = ix
        .sorted
        .iter()
        .copied()
        .filter(|&i| ix.workloads[i].is_pending() && ix.workloads[i].target.is_err())
        .collect();
    let mut queues = vec![Vec::new(); ix.q.cqs.len()];
    let mut place = |i: usize| {
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
/// left. A ClusterQueue stays in the next round while its head was admitted or cannot be admitted whatever is preempted
/// (BestEffortFIFO: Kueue moves on to the next Workload in its next cycle); it leaves the pass
/// when its head preempts (Kueue keeps that head at the front until its victims are gone) or
/// blocks a StrictFIFO queue, and the rest of its Workloads wait behind that head. Only
/// Workloads that held quota when the pass started are preemption candidates, so quota lent
/// in this pass is never reclaimed in it.
fn rounds(pass: &mut Pass, queues: &[Vec<usize>]) {
    let ix = pass.ix;
    let mut cursor: Vec<usize> = vec![0; queues.len()];
    let mut live: Vec<usize> = (0..queues.len())
        .filter(|&c| !queues[c].is_empty())
        .collect();
    let mut heads: Vec<(HeadKey, usize, usize)> = Vec::new();
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
        let mut next = Vec::with_capacity(live.len());
        for &(_, c, i) in &heads {
            match pass.process_entry(i) {
                Outcome::Continue if cursor[c] < queues[c].len() => next.push(c),
                Outcome::Continue => {}
                Outcome::Stop => {
                    for &rest in &queues[c][cursor[c]..] {
                        pass.process_entry(rest);
                    }
                    cursor[c] = queues[c].len();
                }
            }
        }
        next.sort_unstable();
        live = next;
    }
}

/// A head's place in a round: a preemptor from an earlier pass first, then the borrowing
/// distance (0: none), priority (higher first), queue order time, rank.
type HeadKey = (
    bool,
    u8,
    std::cmp::Reverse<i32>,
    k8s_openapi::jiff::Timestamp,
    u32,
);

/// What processing a ClusterQueue's head means for the rest of the ClusterQueue in this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Its next Workload is looked at in the next round.
    Continue,
    /// The rest wait behind this head (it preempts, or blocks a StrictFIFO queue).
    Stop,
}

/// Why a ClusterQueue's Workloads wait behind one of them for the rest of a pass.
type Block = WaitingFor;

/// How many shapes per ClusterQueue [`Memo`] remembers.
const MEMO_WIDTH: usize = 8;

/// What a pass decided for a Workload that changed nothing, reused for the next Workload of the
/// same ClusterQueue with the same PodSets (and, for a pending one, the same standing in
/// preemption) while nothing changed in its cohort tree: a pass looks at thousands of pending
/// Workloads of a few shapes against the same usage. Decisions are exactly those computed
/// afresh; only the work is saved.
struct Memo {
    /// Per cohort tree root: bumped when usage, victims or the pass's admissions change in it.
    epoch: Vec<u64>,
    /// Per ClusterQueue: (a Workload, epoch, how far it would borrow).
    borrows: Vec<Vec<(usize, u64, u8)>>,
    /// Per ClusterQueue: (a Workload left pending without any change, epoch, its message).
    pending: Vec<Vec<(usize, u64, PendingMessage)>>,
}

impl Memo {
    fn new(ix: &Index) -> Self {
        Memo {
            epoch: vec![0; ix.q.tree.nodes.len()],
            borrows: vec![Vec::new(); ix.q.cqs.len()],
            pending: vec![Vec::new(); ix.q.cqs.len()],
        }
    }

    fn epoch(&self, ix: &Index, c: usize) -> u64 {
        self.epoch[ix.q.cqs[c].root]
    }

    fn changed(&mut self, ix: &Index, c: usize) {
        self.epoch[ix.q.cqs[c].root] += 1;
    }

    /// A remembered entry for `i` in `c` at the current epoch, `same` telling which Workloads
    /// stand for `i`; stale entries are dropped.
    fn find<T>(
        entries: &mut Vec<(usize, u64, T)>,
        epoch: u64,
        same: impl Fn(usize) -> bool,
    ) -> Option<&T> {
        entries.retain(|e| e.1 == epoch);
        entries.iter().find(|e| same(e.0)).map(|e| &e.2)
    }

    fn remember<T>(entries: &mut Vec<(usize, u64, T)>, entry: (usize, u64, T)) {
        if entries.len() >= MEMO_WIDTH {
            entries.remove(0);
        }
        entries.push(entry);
    }
}

/// Same PodSets (names, counts, requests, node selectors): the same interned shape.
fn same_podsets(ix: &Index, a: usize, b: usize) -> bool {
    let shape = ix.workloads[a].shape;
    a == b || (shape != NO_SHAPE && shape == ix.workloads[b].shape)
}

/// Same PodSets, and the same standing as a preemptor in ClusterQueue `c`: priority, and the
/// queue order time where `withinClusterQueue` compares it.
fn same_standing(ix: &Index, c: usize, a: usize, b: usize) -> bool {
    let (x, y) = (&ix.workloads[a], &ix.workloads[b]);
    x.priority == y.priority
        && (ix.q.cqs[c].within != WithinClusterQueue::LowerOrNewerEqualPriority
            || x.order_time == y.order_time)
        && same_podsets(ix, a, b)
}

/// What a Workload short of quota did about it.
enum Preempted {
    /// Evicts this many Workloads (some may already be on their way out).
    Victims(usize),
    /// A victim it needs is already claimed by another Workload in this pass: it waits.
    Overlapping,
}

/// One pass in progress: usage as decided so far and what happened to each Workload.
struct Pass<'a> {
    ix: &'a Index,
    usage: Usage,
    /// Holders per ClusterQueue at the start of the pass: preemption candidates.
    admitted_by_cq: Vec<Vec<usize>>,
    /// Holders per ClusterQueue, the pass's admissions included.
    holders_now: Vec<Vec<usize>>,
    /// Per ClusterQueue: the Workloads admitted in this pass.
    newly_by_cq: Vec<Vec<usize>>,
    /// Per Workload admitted in this pass: its ClusterQueue and usage.
    admitted_now: Vec<Option<(usize, Charges)>>,
    /// (admitted in this pass, pending Workload whose preemption in this pass would pick it):
    /// the pass is redone without that admission (see [`run`]).
    conflicts: Vec<(usize, usize)>,
    decisions: Vec<Decision>,
    /// Finished in this pass (a replaced slice): holds nothing.
    gone: Vec<bool>,
    /// Per slice that holds nothing: its replacement, admitted in this pass (in full).
    replaced_now: Vec<Option<usize>>,
    /// Being evicted (by its status, or by a decision of this pass).
    evicting: Vec<bool>,
    /// Evicted by a decision of this pass.
    evicted_now: Vec<bool>,
    /// Chosen as a preemption victim in this pass (Kueue's `preemptedWorkloads`).
    claimed: Vec<bool>,
    /// (victim, preemptor) for every eviction a preemption of this pass decided.
    preempted_by: Vec<(usize, usize)>,
    /// (Workload, ClusterQueue, usage per (flavor, resource)) admitted in this pass.
    newly: Vec<(usize, usize, Charges)>,
    /// Per ClusterQueue: the Workload the rest wait behind for the rest of the pass.
    blocked: Vec<Option<(usize, Block)>>,
    /// Per ClusterQueue: the message of the Workloads waiting behind `blocked`, made once.
    waiting: Vec<Option<PendingMessage>>,
    /// Not admitted in this pass: the Workload that could preempt it in the next one.
    forbidden: Vec<Option<usize>>,
    /// Left pending in this pass because of `forbidden`, in the order they were looked at:
    /// (Workload, ClusterQueue, what it needs per (flavor, resource)).
    held: Vec<(usize, usize, Charges)>,
    /// Per ClusterQueue: its first held-back Workload, and what its held-back ones need summed.
    held_in: Vec<(Option<usize>, Charges)>,
    /// Per ClusterQueue: the part of its nominal quota kept from other ClusterQueues' borrowing
    /// for its held-back Workloads, charged to it in `usage` (see [`Pass::reserve`]).
    reserved: Vec<Charges>,
    /// Per cohort tree root: how many of its ClusterQueues have a non-empty `reserved`.
    reserving: Vec<usize>,
    /// Per Workload: some Workload is held back in this pass because this one could preempt it.
    reclaimer: Vec<bool>,
    /// The reclaimer being looked at: the Workloads held back for it keep nothing they would
    /// borrow from it (see [`Pass::lift_own`]).
    deciding: Option<usize>,
    memo: Memo,
}

impl<'a> Pass<'a> {
    /// Every held quota charged to its ClusterQueue.
    fn new(ix: &'a Index, forbidden: Vec<Option<usize>>) -> Self {
        let q = &ix.q;
        let n = ix.workloads.len();
        let mut usage = Usage::new(&q.tree);
        let mut admitted_by_cq: Vec<Vec<usize>> = vec![Vec::new(); q.cqs.len()];
        for &i in &ix.sorted {
            if let Some(h) = &ix.workloads[i].held
                && let Some(c) = h.cq
            {
                charge(q, &mut usage, c, &h.usage, true);
                admitted_by_cq[c].push(i);
            }
        }
        let mut reclaimer = vec![false; n];
        for by in forbidden.iter().flatten() {
            reclaimer[*by] = true;
        }
        Pass {
            ix,
            usage,
            holders_now: admitted_by_cq.clone(),
            newly_by_cq: vec![Vec::new(); q.cqs.len()],
            admitted_now: vec![None; n],
            conflicts: Vec::new(),
            admitted_by_cq,
            decisions: Vec::new(),
            gone: vec![false; n],
            replaced_now: vec![None; n],
            evicting: ix
                .workloads
                .iter()
                .map(|w| w.held.is_some() && w.evicted)
                .collect(),
            evicted_now: vec![false; n],
            claimed: vec![false; n],
            preempted_by: Vec::new(),
            newly: Vec::new(),
            blocked: vec![None; q.cqs.len()],
            waiting: vec![None; q.cqs.len()],
            forbidden,
            held: Vec::new(),
            held_in: vec![(None, Vec::new()); q.cqs.len()],
            reserved: vec![Vec::new(); q.cqs.len()],
            reserving: vec![0; q.tree.nodes.len()],
            reclaimer,
            deciding: None,
            memo: Memo::new(ix),
        }
    }

    /// Whether any Workload was held back in this pass (or a retry before it) for a reclaimer.
    fn forbidden_any(&self) -> bool {
        self.forbidden.iter().any(Option::is_some)
    }

    /// Evicts holders whatever the quota: deactivated Workloads, and Workloads of a ClusterQueue
    /// or LocalQueue stopped with `HoldAndDrain`.
    fn evict_without_quota(&mut self) {
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
    /// ([`one_pass`]).
    fn finish_stale_replaced(&mut self) -> bool {
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
    fn finish_replaced(&mut self, o: usize, r: usize) {
        let ix = self.ix;
        self.gone[o] = true;
        self.decisions.push(Decision::FinishReplaced {
            workload: ix.workloads[o].key.clone(),
            replaced_by: ix.workloads[r].key.clone(),
        });
    }

    /// How far Workload `i`, queued in ClusterQueue `c`, would borrow if admitted on the usage
    /// as it stands (Kueue's `Assignment.Borrows()`, computed at nomination): 0 when it fits
    /// in what is left of the ClusterQueue's own nominal quota, else, per (flavor, resource) it
    /// needs more of, the height of the lowest Cohort that holds it (`Tree::borrowing_height`;
    /// in a flat cohort 1), the largest. A ClusterQueue without a cohort that needs more than
    /// its nominal quota (it preempts in its own queue) counts 1, as before the distance.
    fn borrows(&mut self, i: usize, c: usize) -> u8 {
        if self.reserved[c].is_empty() && self.held_in[c].0.is_none() {
            return self.borrows_now(i, c);
        }
        let (old, own) = self.lift_own(c);
        let b = self.borrows_now(i, c);
        self.restore_own(c, old, &own);
        b
    }

    fn borrows_now(&mut self, i: usize, c: usize) -> u8 {
        let ix = self.ix;
        let Ok(podsets) = &ix.workloads[i].podsets else {
            return 0;
        };
        let epoch = self.memo.epoch(ix, c);
        if let Some(&b) = Memo::find(&mut self.memo.borrows[c], epoch, |r| same_podsets(ix, r, i)) {
            return b;
        }
        let a = flavors::assign(&ix.q, &self.usage, c, podsets, None);
        let tree = &ix.q.tree;
        let b = if a.mode == Mode::NoFit {
            0
        } else {
            a.need
                .iter()
                .filter(|&&(fr, need)| self.usage.get(c, fr) + need > tree.nodes[c].subtree[fr])
                .map(|&(fr, need)| {
                    tree.borrowing_height(&self.usage, c, fr, need)
                        .max(u8::from(tree.nodes[c].parent.is_none()))
                })
                .max()
                .unwrap_or(0)
        };
        Memo::remember(&mut self.memo.borrows[c], (i, epoch, b));
        b
    }

    /// Kueue's `processEntry` for one pending Workload: admit it if it fits, else preempt for it
    /// if that can make it fit, and leave it pending. Its own ClusterQueue's reservation for
    /// held-back Workloads does not count against it.
    ///
    /// Other ClusterQueues' reservations keep quota from borrowing only: a Workload that fits
    /// within its own ClusterQueue's nominal quota on the usage without them is looked at without
    /// them (see [`Pass::see_through`]).
    fn process_entry(&mut self, i: usize) -> Outcome {
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

    /// What the ClusterQueues with a Workload held back for reclaimer `by` keep from their own
    /// Workloads changes with `by` looked at or admitted (see [`Pass::lift_own`]).
    fn reclaimer_decided(&mut self, by: usize) {
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
    fn see_through(&mut self, i: usize, c: usize) -> Vec<(usize, Charges)> {
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
        let a = flavors::assign(&ix.q, &self.usage, c, podsets, replacing.as_ref());
        let nominal = &ix.q.tree.nodes[c].subtree;
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

    /// The slice replacement slice `i` replaces, if that one still holds quota.
    fn replaced(&self, i: usize) -> Option<usize> {
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
    fn replacing(&self, old: Option<usize>, c: usize) -> Option<Replacing<'a>> {
        let ix = self.ix;
        old.and_then(|o| {
            let ow = &ix.workloads[o];
            let held = ow.held.as_ref()?;
            (held.cq == Some(c)).then_some(Replacing { key: &ow.key, held })
        })
    }

    /// Whether Workload `x` of ClusterQueue `c` may preempt Workload `v` of the same queue
    /// (`withinClusterQueue`).
    fn could_preempt_own(&self, c: usize, x: usize, v: usize) -> bool {
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
    fn lift(&mut self, c: usize) -> Charges {
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
    fn reserve(&mut self, c: usize, old: Charges) {
        let ix = self.ix;
        let nominal = &ix.q.tree.nodes[c].subtree;
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
    fn waiting_need(&self, c: usize) -> Charges {
        let mut sum: Charges = Vec::new();
        for (h, hc, need) in &self.held {
            let waiting = self.forbidden[*h]
                .is_some_and(|by| self.admitted_now[by].is_none() && self.deciding != Some(by));
            if *hc != c || !waiting {
                continue;
            }
            for &(fr, v) in need {
                match sum.iter_mut().find(|(f, _)| *f == fr) {
                    Some((_, w)) => *w += v,
                    None => sum.push((fr, v)),
                }
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
    fn lift_own(&mut self, c: usize) -> (Charges, Charges) {
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
    fn restore_own(&mut self, c: usize, old: Charges, own: &[(usize, Quantity)]) {
        charge(&self.ix.q, &mut self.usage, c, own, false);
        self.reserve(c, old);
    }

    /// `fresh`: other ClusterQueues' reservations are lifted for it (see [`Pass::see_through`]),
    /// so what the pass remembered for another Workload on the usage with them does not apply.
    fn evaluate(&mut self, i: usize, fresh: bool) -> Outcome {
        let ix = self.ix;
        let w = &ix.workloads[i];
        let (c, podsets) = match self.admissible(w) {
            Ok(found) => found,
            Err((why, message)) => {
                self.decisions.extend(pending(ix, w, why, message));
                return Outcome::Continue;
            }
        };
        // one its held-back head could preempt (`withinClusterQueue`) waits behind it, and so
        // does everything after it in the queue's order: admitted now, it would be that head's
        // victim once the head is admitted
        if let Some(x) = self.held_in[c].0
            && self.could_preempt_own(c, x, i)
        {
            let message = self.block(c, x, Block::HeldBack);
            self.decisions
                .extend(pending(ix, w, reason::PENDING, message));
            return Outcome::Stop;
        }
        if let Some(by) = self.forbidden[i] {
            let message = format!(
                "not admitted in this pass: workload {} could preempt it to take back the quota it would use",
                ix.workloads[by].key
            );
            self.decisions
                .extend(pending(ix, w, reason::PENDING, message.into()));
            let a = flavors::assign(&ix.q, &self.usage, c, podsets, None);
            let need = if a.mode == Mode::NoFit {
                Vec::new()
            } else {
                a.need
            };
            let (first, sum) = &mut self.held_in[c];
            first.get_or_insert(i);
            for &(fr, v) in &need {
                match sum.iter_mut().find(|(f, _)| *f == fr) {
                    Some((_, w)) => *w += v,
                    None => sum.push((fr, v)),
                }
            }
            self.held.push((i, c, need));
            // BestEffortFIFO goes on to the next Workload, as Kueue's does whatever its head
            // does, but for those this head could preempt (above); StrictFIFO waits behind it
            if ix.q.cqs[c].strategy == QueueingStrategy::StrictFIFO {
                self.block(c, i, Block::HeldBack);
                return Outcome::Stop;
            }
            return Outcome::Continue;
        }
        let epoch = self.memo.epoch(ix, c);
        let memo = w.replaces.is_none() && !fresh;
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
        let a = flavors::assign(&ix.q, &self.usage, c, podsets, replacing.as_ref());
        if a.mode == Mode::Fit {
            self.admit(i, c, podsets, a, old);
            return Outcome::Continue;
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
            let message = match preempted {
                Preempted::Victims(victims) => PendingMessage::Preempting { text, victims },
                Preempted::Overlapping => PendingMessage::from(format!(
                    "{text}. Workload has overlapping preemption targets with another workload"
                )),
            };
            self.memo.changed(ix, c);
            self.block(c, i, Block::Preemption);
            self.decisions
                .extend(pending(ix, w, reason::PENDING, message));
            return Outcome::Stop;
        }
        let mut message = PendingMessage::Text(text);
        // what it shows already, if it reads the same: the Workloads given this message by the
        // memo after it show that very text too, and compare with it by address
        if let Some(shown) = &w.shown
            && shown.message.reads_as(&message)
        {
            message = shown.message.clone();
        }
        if memo {
            Memo::remember(&mut self.memo.pending[c], (i, epoch, message.clone()));
        }
        self.decisions
            .extend(pending(ix, w, reason::PENDING, message));
        self.after_pending(i, c)
    }

    /// A Workload left pending without preempting: a StrictFIFO queue waits behind it.
    fn after_pending(&mut self, i: usize, c: usize) -> Outcome {
        if self.ix.q.cqs[c].strategy == QueueingStrategy::StrictFIFO {
            self.block(c, i, Block::StrictFifo);
            return Outcome::Stop;
        }
        Outcome::Continue
    }

    /// The rest of ClusterQueue `c` waits behind Workload `i` for the rest of the pass.
    /// Returns the message of the Workloads waiting behind it.
    fn block(&mut self, c: usize, i: usize, why: Block) -> PendingMessage {
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
    ) -> Result<(usize, &'a [PodSetRequests]), (&'static str, PendingMessage)> {
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
        i: usize,
        c: usize,
        podsets: &[PodSetRequests],
        a: Assignment,
        old: Option<usize>,
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

    /// Evicts the victims that make Workload `i` fit, if there are any, and keeps what it needs
    /// for the rest of the pass (the room its victims free is its). `None` when nothing can make
    /// it fit; [`Preempted::Overlapping`] when a victim it needs is already being evicted by
    /// another Workload in this pass (Kueue skips an entry with overlapping preemption targets).
    fn preempt(
        &mut self,
        i: usize,
        c: usize,
        a: &Assignment,
        spare: Option<usize>,
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
            // Kueue, one cycle later, would count this pass's admissions as candidates (the most
            // recently admitted first): one it would pick is not admitted in this pass after all
            let ex = Exclusions {
                gone: &self.gone,
                evicting: &self.evicting,
                admitted: &self.admitted_now,
            };
            let mut all = preemption::targets(ix, &mut self.usage, &self.holders_now, &p, &ex);
            if !all.iter().any(|v| self.admitted_now[v.workload].is_some()) {
                // it would evict an older holder: if this pass's admissions alone could make
                // room, they took what it reclaims (quota lent in this pass), and the pass is
                // redone without them rather than evicting the older holder
                all = preemption::targets(ix, &mut self.usage, &self.newly_by_cq, &p, &ex);
            }
            for v in all {
                if self.admitted_now[v.workload].is_some()
                    && !ix.workloads[v.workload].preemptor
                    && !self.conflicts.iter().any(|&(x, _)| x == v.workload)
                {
                    self.conflicts.push((v.workload, i));
                }
            }
        }
        let ex = Exclusions {
            gone: &self.gone,
            evicting: &self.evicting,
            admitted: &[],
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
}

impl Pass<'_> {
    /// The Workloads held back by a retry (see [`run`]) whose reclaimer was admitted after all
    /// (with, in a StrictFIFO queue, everything that waited behind them), looked at once more
    /// against the usage the pass left, all such ClusterQueues together in Kueue's round order
    /// ([`rounds`]): their next pass would admit them just so. Reopening them one ClusterQueue
    /// after another would let the first one's borrowing entries take quota a later one's entry
    /// needs without borrowing, which that entry then reclaims on the next pass (seed 6123 of
    /// `static_cohorts_do_not_churn`). When a reopened Workload's reservation is gone (it is not
    /// held back again), what was left pending in its cohort tree is looked at again too
    /// ([`Pass::reopen_kept_out`]; seeds 24105, 28596 and 33920).
    fn late(&mut self, queues: &[Vec<usize>]) {
        let ix = self.ix;
        if self.held.is_empty() {
            return;
        }
        let mut admitted = vec![false; ix.workloads.len()];
        // per cohort tree root: a reservation there shrank in the last reopening
        let mut released = vec![false; ix.q.tree.nodes.len()];
        // reopening a ClusterQueue may admit the reclaimer another one's Workload was held back for
        loop {
            for (i, _, _) in &self.newly {
                admitted[*i] = true;
            }
            let stale = |forbidden: &Option<usize>| forbidden.is_some_and(|by| admitted[by]);
            let mut reopened = vec![false; ix.workloads.len()];
            let mut any = false;
            let moot = self.moot_holds();
            for &(i, _, _) in &self.held {
                if stale(&self.forbidden[i]) || moot[i] {
                    self.forbidden[i] = None;
                    reopened[i] = true;
                    any = true;
                }
            }
            // quota a reservation kept is free again: what it kept out is looked at again
            any |= self.reopen_kept_out(queues, &released, &mut reopened);
            if !any {
                return;
            }
            let reserved_before = self.reserved.clone();
            for (c, queue) in queues.iter().enumerate() {
                // what waited behind a held-back head is looked at again (a StrictFIFO queue's
                // rest, a BestEffortFIFO queue's Workloads that head could preempt); one held
                // back for a reclaimer still waiting stays held back
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
                    if stale(&self.forbidden[i]) {
                        self.forbidden[i] = None;
                    }
                    reopened[i] = true;
                }
            }
            // reopened Workloads reserve nothing until held back again
            let mut touched = vec![false; queues.len()];
            self.held.retain(|&(i, c, _)| {
                touched[c] |= reopened[i];
                !reopened[i]
            });
            for c in (0..queues.len()).filter(|&c| touched[c]) {
                self.held_in[c] = (None, Vec::new());
            }
            for (i, c, need) in &self.held {
                if !touched[*c] {
                    continue;
                }
                let (first, sum) = &mut self.held_in[*c];
                first.get_or_insert(*i);
                for &(fr, v) in need {
                    match sum.iter_mut().find(|(f, _)| *f == fr) {
                        Some((_, w)) => *w += v,
                        None => sum.push((fr, v)),
                    }
                }
            }
            for c in (0..queues.len()).filter(|&c| touched[c]) {
                let old = self.lift(c);
                self.reserve(c, old);
            }
            let tails: Vec<Vec<usize>> = queues
                .iter()
                .map(|queue| queue.iter().copied().filter(|&i| reopened[i]).collect())
                .collect();
            self.decisions.retain(|d| {
                !(matches!(d, Decision::Pending { .. })
                    && ix.by_key.get(d.workload()).is_some_and(|&i| reopened[i]))
            });
            rounds(self, &tails);
            released.iter_mut().for_each(|r| *r = false);
            for (c, before) in reserved_before.iter().enumerate() {
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
        }
    }

    /// Per Workload: held back, but it would not fit on the usage the pass leaves (without its
    /// reservations) even by preemption, so the next pass does not admit it whatever its
    /// reclaimer does, and what its reservation keeps is not its to keep.
    fn moot_holds(&self) -> Vec<bool> {
        let ix = self.ix;
        let mut moot = vec![false; ix.workloads.len()];
        let mut usage = self.usage.clone();
        for (c, r) in self.reserved.iter().enumerate() {
            charge(&ix.q, &mut usage, c, r, false);
        }
        for &(i, c, _) in &self.held {
            let Ok(podsets) = &ix.workloads[i].podsets else {
                continue;
            };
            let replacing = self.replacing(self.replaced(i), c);
            let a = flavors::assign(&ix.q, &usage, c, podsets, replacing.as_ref());
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
        queues: &[Vec<usize>],
        released: &[bool],
        reopened: &mut [bool],
    ) -> bool {
        let ix = self.ix;
        let mut any = false;
        for (c, queue) in queues.iter().enumerate() {
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

    /// Workloads admitted in this pass that a Workload left waiting in it could preempt in the
    /// next pass (quota lent in this pass that its owner would reclaim, or a lower-priority
    /// Workload of its own queue), each with that Workload: admitting them now would only make
    /// the next pass evict them again.
    fn reclaimable(&self) -> Vec<(usize, usize)> {
        let ix = self.ix;
        if self.newly.is_empty() {
            return Vec::new();
        }
        let admitted = &self.admitted_now;
        let by_cq = &self.holders_now;
        let ex = Exclusions {
            gone: &self.gone,
            evicting: &self.evicting,
            admitted,
        };
        // per ClusterQueue: the lowest priority admitted in this pass
        let mut lowest: Vec<Option<i32>> = vec![None; ix.q.cqs.len()];
        for (i, c, _) in &self.newly {
            let p = ix.workloads[*i].priority;
            lowest[*c] = Some(lowest[*c].map_or(p, |l| l.min(p)));
        }
        let tree = &ix.q.tree;
        let under_nominal = |usage: &Usage, c: usize| {
            ix.q.cqs[c]
                .frs
                .iter()
                .any(|&fr| usage.get(c, fr) < tree.nodes[c].subtree[fr])
        };
        // the next pass starts without this pass's reservations
        let mut usage = self.usage.clone();
        for (c, r) in self.reserved.iter().enumerate() {
            charge(&ix.q, &mut usage, c, r, false);
        }
        let mut out = Vec::new();
        // per ClusterQueue: Workloads already looked at (one with the same standing finds the
        // same victims, on the same usage)
        let mut seen: Vec<Vec<usize>> = vec![Vec::new(); ix.q.cqs.len()];
        for &w in &ix.sorted {
            let we = &ix.workloads[w];
            // a replaced slice finished in this pass is not there to reclaim anything
            if !we.is_pending() || admitted[w].is_some() || we.replaces.is_some() || self.gone[w] {
                continue;
            }
            let (Ok(t), Ok(podsets)) = (&we.target, &we.podsets) else {
                continue;
            };
            // one waiting behind a StrictFIFO head that does not fit waits in the next pass too
            // (more usage does not make that head fit; if it could preempt, it is looked at here)
            if matches!(self.blocked[t.cq], Some((h, Block::StrictFifo)) if h != w) {
                continue;
            }
            if seen[t.cq].iter().any(|&r| same_standing(ix, t.cq, r, w)) {
                continue;
            }
            if seen[t.cq].len() < MEMO_WIDTH {
                seen[t.cq].push(w);
            }
            let cq = &ix.q.cqs[t.cq];
            // below a sub-cohort, a ClusterQueue at its nominal quota may still reclaim what
            // its sub-cohort holds within quota (`preemption::targets`, hierarchical reclaim)
            let parent = tree.nodes[t.cq].parent;
            let in_sub_cohort = parent.is_some_and(|x| tree.nodes[x].parent.is_some());
            let may_reclaim = cq.reclaim != ReclaimWithinCohort::Never
                && parent.is_some()
                && (under_nominal(&usage, t.cq) || in_sub_cohort);
            let may_preempt_own = lowest[t.cq].is_some_and(|l| {
                l < we.priority
                    || (l == we.priority
                        && cq.within == WithinClusterQueue::LowerOrNewerEqualPriority)
            });
            if !may_reclaim && !may_preempt_own {
                continue;
            }
            let a = flavors::assign(&ix.q, &usage, t.cq, podsets, None);
            if a.mode != Mode::Preempt {
                continue;
            }
            let p = Preemptor {
                workload: w,
                cq: t.cq,
                need: &a.need,
                short: &a.short,
                spare: None,
            };
            for v in preemption::targets(ix, &mut usage, by_cq, &p, &ex) {
                // a Workload that preempted for this room keeps it (else it would preempt again)
                if admitted[v.workload].is_some()
                    && !ix.workloads[v.workload].preemptor
                    && !out.iter().any(|&(x, _)| x == v.workload)
                {
                    out.push((v.workload, w));
                }
            }
        }
        out
    }
}

/// Why a holder is evicted whatever the quota, if it is.
fn eviction_without_quota(
    q: &Queues,
    w: &WorkloadEntry,
    cq: Option<usize>,
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

/// Where each Workload's quota stands once a pass's decisions are applied.
struct Settled<'p> {
    /// `Some(cq)`: holds quota (in `cq`, `None` if that ClusterQueue does not exist).
    held_in: Vec<Option<Option<usize>>>,
    usage_of: Vec<&'p [(usize, Quantity)]>,
    usage: Usage,
}

fn settle<'p>(pass: &'p Pass, release_evicted: bool) -> Settled<'p> {
    let ix = pass.ix;
    let q = &ix.q;
    let n = ix.workloads.len();
    let mut s = Settled {
        held_in: vec![None; n],
        usage_of: vec![&[]; n],
        usage: Usage::new(&q.tree),
    };
    for &i in &ix.sorted {
        let w = &ix.workloads[i];
        if let Some(h) = &w.held
            && !pass.gone[i]
            && !(release_evicted && pass.evicted_now[i])
        {
            s.held_in[i] = Some(h.cq);
            s.usage_of[i] = &h.usage;
            if let Some(c) = h.cq {
                charge(q, &mut s.usage, c, &h.usage, true);
            }
        }
    }
    for (i, c, totals) in &pass.newly {
        s.held_in[*i] = Some(Some(*c));
        s.usage_of[*i] = totals;
        charge(q, &mut s.usage, *c, totals, true);
    }
    s
}

/// (pending, reserving) per ClusterQueue and LocalQueue, and each LocalQueue's usage.
struct Counts {
    cq: Vec<(i32, i32)>,
    lq: Vec<(i32, i32)>,
    lq_usage: Vec<BTreeMap<usize, Quantity>>,
}

fn count(pass: &Pass, settled: &Settled) -> Counts {
    let ix = pass.ix;
    let q = &ix.q;
    let mut n = Counts {
        cq: vec![(0, 0); q.cqs.len()],
        lq: vec![(0, 0); q.lqs.len()],
        lq_usage: vec![BTreeMap::new(); q.lqs.len()],
    };
    for &i in &ix.sorted {
        let w = &ix.workloads[i];
        if w.finished.is_some() || pass.gone[i] {
            continue;
        }
        match settled.held_in[i] {
            Some(c) => {
                if let Some(c) = c {
                    n.cq[c].1 += 1;
                }
                if let Some(l) = w.lq {
                    n.lq[l].1 += 1;
                    for &(fr, v) in settled.usage_of[i] {
                        *n.lq_usage[l].entry(fr).or_insert(Quantity::ZERO) += v;
                    }
                }
            }
            None if w.active => {
                if let Ok(t) = &w.target {
                    n.cq[t.cq].0 += 1;
                }
                if let Some(l) = w.lq {
                    n.lq[l].0 += 1;
                }
            }
            None => {}
        }
    }
    n
}

/// Usage and counts per queue as they stand once the decisions are applied.
fn report_usage(pass: &Pass, options: &Options) -> (Vec<ClusterQueueUsage>, Vec<LocalQueueUsage>) {
    let q = &pass.ix.q;
    let settled = settle(pass, options.release_evicted_immediately);
    let counts = count(pass, &settled);
    let cluster_queues = (0..q.cqs.len())
        .map(|c| cluster_queue_usage(q, c, &settled.usage, counts.cq[c]))
        .collect();
    let local_queues = (0..q.lqs.len())
        .map(|l| local_queue_usage(q, l, &counts.lq_usage[l], counts.lq[l]))
        .collect();
    (cluster_queues, local_queues)
}

fn cluster_queue_usage(
    q: &Queues,
    c: usize,
    usage: &Usage,
    (pending, reserving): (i32, i32),
) -> ClusterQueueUsage {
    let info = &q.cqs[c];
    let extra =
        (0..q.tree.n_fr).filter(|fr| !usage.get(c, *fr).is_zero() && !info.frs.contains(fr));
    let frs: Vec<usize> = info.frs.iter().copied().chain(extra).collect();
    let nominal = |fr: usize| q.tree.nodes[c].subtree[fr];
    let (active, active_reason) = match (&info.inactive, info.stop) {
        (Some((r, m)), _) => (Err(m.clone()), r.to_string()),
        (None, StopPolicy::None) => (Ok(()), "Ready".to_string()),
        (None, _) => (
            Err(format!("ClusterQueue {} is stopped", info.name)),
            "Stopped".to_string(),
        ),
    };
    ClusterQueueUsage {
        name: info.name.clone(),
        reservation: flavor_rows(q, &frs, |fr| {
            let used = usage.get(c, fr);
            let borrowed = used - nominal(fr);
            ResourceUsage {
                name: q.resource_name(fr).to_string(),
                total: Some(used.to_k8s()),
                borrowed: Some(if borrowed.is_negative() {
                    Quantity::ZERO.to_k8s()
                } else {
                    borrowed.to_k8s()
                }),
            }
        }),
        pending,
        reserving,
        admitted: reserving,
        active,
        active_reason,
    }
}

fn local_queue_usage(
    q: &Queues,
    l: usize,
    usage: &BTreeMap<usize, Quantity>,
    (pending, reserving): (i32, i32),
) -> LocalQueueUsage {
    let info = &q.lqs[l];
    let cq = info
        .cluster_queue
        .as_ref()
        .and_then(|n| q.cq_ids.get(n).copied());
    let mut frs: Vec<usize> = cq.map(|c| q.cqs[c].frs.clone()).unwrap_or_default();
    frs.extend(
        usage
            .keys()
            .filter(|fr| !frs.contains(fr))
            .copied()
            .collect::<Vec<_>>(),
    );
    LocalQueueUsage {
        namespace: info.namespace.clone(),
        name: info.name.clone(),
        reservation: flavor_rows(q, &frs, |fr| LocalQueueResourceUsage {
            name: q.resource_name(fr).to_string(),
            total: Some(usage.get(&fr).copied().unwrap_or(Quantity::ZERO).to_k8s()),
        })
        .into_iter()
        .map(|(name, resources)| LocalQueueFlavorUsage { name, resources })
        .collect(),
        pending,
        reserving,
        admitted: reserving,
        active: local_queue_active(q, info, cq),
    }
}

/// Why Workloads submitted to a LocalQueue cannot be admitted, if they cannot.
fn local_queue_active(q: &Queues, info: &LocalQueueEntry, cq: Option<usize>) -> Result<(), String> {
    match (&info.cluster_queue, cq) {
        (None, _) => Err(format!(
            "LocalQueue {}/{} has no spec.clusterQueue",
            info.namespace, info.name
        )),
        (Some(name), None) => Err(format!("ClusterQueue {name} doesn't exist")),
        (Some(_), Some(c)) => match &q.cqs[c].inactive {
            Some((_, m)) => Err(m.clone()),
            None if info.stop != StopPolicy::None => Err(format!(
                "LocalQueue {}/{} is stopped",
                info.namespace, info.name
            )),
            None => Ok(()),
        },
    }
}

/// Groups (flavor, resource) rows by flavor, keeping the order of first appearance.
fn flavor_rows<R, T>(q: &Queues, frs: &[usize], row: impl Fn(usize) -> R) -> Vec<T>
where
    T: FromFlavorRows<R>,
{
    let mut out: Vec<(String, Vec<R>)> = Vec::new();
    for &fr in frs {
        let flavor = q.flavor_name(fr);
        match out.iter_mut().find(|(n, _)| n == flavor) {
            Some((_, rows)) => rows.push(row(fr)),
            None => out.push((flavor.to_string(), vec![row(fr)])),
        }
    }
    out.into_iter().map(T::from_rows).collect()
}

/// A flavor row built from its resource rows.
trait FromFlavorRows<R> {
    fn from_rows(rows: (String, Vec<R>)) -> Self;
}

impl FromFlavorRows<ResourceUsage> for FlavorUsage {
    fn from_rows((name, resources): (String, Vec<ResourceUsage>)) -> Self {
        FlavorUsage { name, resources }
    }
}

impl<R> FromFlavorRows<R> for (String, Vec<R>) {
    fn from_rows(rows: (String, Vec<R>)) -> Self {
        rows
    }
}
