//! Admission: ClusterQueue quota decisions on a snapshot (pure: no IO, no clock).
//!
//! Given the Kueue objects of a cluster ([`Snapshot`]), [`cycle`] decides for every Workload what
//! should happen now, Kueue v0.19-compatible on the wire:
//!
//! * **queues**: `spec.queueName` → LocalQueue (same namespace) → ClusterQueue, whose
//!   `namespaceSelector` must select the namespace; a stopped queue (`stopPolicy`) admits nothing
//!   and `HoldAndDrain` evicts what it holds; a deactivated Workload (`spec.active: false`) is
//!   evicted;
//! * **quota**: `resourceGroups` with ordered flavors (first fit wins, honouring `nodeSelector`
//!   against flavor `nodeLabels`), `nominalQuota`, `borrowingLimit`, `lendingLimit`, and a cohort
//!   tree (Cohort objects with `parentName` and their own quota) with Kueue's resource-node
//!   arithmetic ([`quota`]);
//! * **order**: every pending Workload of every ClusterQueue in one pass, by priority
//!   (WorkloadPriorityClass or `spec.priority`) then creation or last eviction time, each against
//!   the usage the ones before it left; `StrictFIFO` queues stop at the first that does not fit;
//! * **workload slices**: a replacement slice (`kueue.x-k8s.io/workload-slice-replacement-for`)
//!   is charged only its delta over the slice it replaces, per (flavor, resource) over the whole
//!   Workload — so PodSets may be added, removed or renamed — keeps that slice's flavors, and the
//!   old slice is finished in the same pass, after the replacement is admitted, never before
//!   (one evicted and requeued before its replacement was admitted in full is finished too,
//!   never admitted beside it);
//! * **preemption**: `withinClusterQueue` and `reclaimWithinCohort`, minimal victim sets chosen
//!   as Kueue does; the replaced slice is never a victim of its replacement.
//!
//! Usage of an admitted Workload comes from `status.admission`, scaled to
//! `min(spec count, admitted count) − reclaimable pods`, so an in-place scale-down releases at
//! once. Bad objects become per-object reasons (an inactive ClusterQueue, an inadmissible
//! Workload), never an error for the others. Output is deterministic: the same snapshot gives the
//! same [`CycleResult`], whatever the order of its objects.
//!
//! [`Scheduler`] keeps the indexed snapshot between passes (the controller's loop, the CLI, the
//! benchmark); [`run_until_stable`] runs passes until nothing changes.
//!
//! Modules, in the order data flows through them: `index` builds the view once, its tables keyed
//! by the typed ids of `ids` (`catalog`: flavors, resources and (flavor, resource) pairs;
//! `cohorts`: quotas and the cohort tree; `queues`: ClusterQueues, LocalQueues, priority classes;
//! `workloads`: one entry per Workload with its requests and held quota); `cycle` runs a pass
//! (`pass`: evictions without quota; `nominate`: queues and rounds; `entry`: one Workload →
//! `flavors::assign_with`, `preempt` → `preemption::targets`; `hold` and `late`: Workloads held back;
//! `lookahead`: what the next passes would undo; `usage`: the report) over `quota`'s
//! resource-node arithmetic; `status` turns decisions into Kueue status values.

mod catalog;
mod cohorts;
mod cycle;
mod events;
mod flavors;
mod ids;
mod index;
mod preemption;
mod queues;
mod quota;
mod status;
mod workloads;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_kueue_cycles;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

pub use status::{
    PREEMPTED_IN_CLUSTER_QUEUE, PREEMPTED_IN_COHORT, apply_decision, cluster_queue_status, finish,
    local_queue_status, pending_unchanged, release_quota,
};

use crate::types::kueue::{
    Admission, ClusterQueue, Cohort, FlavorUsage, LocalQueue, LocalQueueFlavorUsage,
    ResourceFlavor, Workload, WorkloadPriorityClass, WorkloadStatus,
};
pub use events::admission_events;
use ids::WorkloadIx;
use index::Index;

/// Who admits Workloads: the one setting the controller (`--admission`), the slice chains and the
/// startup checks all read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AdmissionMode {
    /// raygate's own admission loop reserves ClusterQueue quota; a replacement slice may add and
    /// drop PodSets and is charged by its delta.
    #[default]
    Builtin,
    /// A real Kueue admits (RayServices opted in with `raygate.io/queue-name`, which no Kueue
    /// integration acts on); raygate only reads conditions, and a replacement slice keeps its
    /// chain's PodSet list identical (Kueue's flavor assigner panics otherwise).
    Kueue,
}

/// The objects admission decides on.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub flavors: Vec<ResourceFlavor>,
    pub cohorts: Vec<Cohort>,
    pub cluster_queues: Vec<ClusterQueue>,
    pub local_queues: Vec<LocalQueue>,
    pub priority_classes: Vec<WorkloadPriorityClass>,
    pub workloads: Vec<Workload>,
    /// namespace name -> labels, for ClusterQueue namespaceSelector; a namespace not listed has no labels.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// What LimitRanges and RuntimeClasses add to the PodSets' requests, charged as Kueue charges
    /// it ([`crate::podsets::PodDefaults`]).
    pub pod_defaults: crate::podsets::PodDefaults,
}

/// How decisions play out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// true (CLI): an evicted workload's quota is released at once. false (controller): an evicted
    /// workload keeps its reservation until its owner clears `status.admission` (pods gone).
    pub release_evicted_immediately: bool,
}

/// What should happen to one Workload, keyed by `<namespace>/<name>`.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Reserve quota: set `status.admission` and `QuotaReserved=True`.
    Admit {
        workload: String,
        admission: Admission,
    },
    /// Stay pending: `QuotaReserved=False` with `reason` (`Pending` or `Inadmissible`) and
    /// `message`, which is kept in parts and written out only where a status changes.
    Pending {
        workload: String,
        reason: &'static str,
        message: PendingMessage,
    },
    /// Evict (`Preempted`, `ClusterQueueStopped`, `LocalQueueStopped` or `Deactivated`).
    Evict {
        workload: String,
        reason: String,
        message: String,
    },
    /// Finish an old slice (`Finished=True`, `WorkloadSliceReplaced`): its replacement was
    /// admitted earlier in the same cycle, or already holds quota.
    FinishReplaced {
        workload: String,
        replaced_by: String,
    },
}

/// The message of a `QuotaReserved=False` condition, in parts: a pass decides it for thousands of
/// pending Workloads and a status write needs it for the few whose message changed, so it is
/// shared (one allocation per ClusterQueue, shape and pass, not per Workload) and formatted
/// ([`std::fmt::Display`]) only by a write. Compared with a condition's text without formatting
/// ([`PendingMessage::is`]). Two messages are equal when they read the same.
#[derive(Clone, Debug)]
pub enum PendingMessage {
    /// Formatted where decided (a flavor assignment failure: once per ClusterQueue, shape and
    /// pass; the rare inadmissible reasons).
    Text(Arc<str>),
    /// `<text>. Pending the preemption of <victims> workload(s)`: it preempted for its quota.
    Preempting { text: Arc<str>, victims: usize },
    /// Waiting behind another Workload of its ClusterQueue for the rest of the pass.
    WaitingBehind(Arc<WaitingBehind>),
}

/// Why the rest of a ClusterQueue waits behind `head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitingFor {
    /// `head` does not fit and the queue is `StrictFIFO`.
    StrictFifo,
    /// `head` is held back in this pass (a Workload left waiting could preempt it).
    HeldBack,
    /// `head` is preempting for quota.
    Preemption,
}

/// A Workload the rest of a ClusterQueue waits behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingBehind {
    pub head: String,
    pub cluster_queue: String,
    pub why: WaitingFor,
}

impl PendingMessage {
    /// Whether the Workload preempted others for its quota (Kueue keeps it at the front of its
    /// queue until they are gone).
    pub fn is_preemptor(&self) -> bool {
        matches!(self, PendingMessage::Preempting { .. })
    }

    /// Whether it reads `text`, compared piece by piece as it would be written.
    pub fn is(&self, text: &str) -> bool {
        if let PendingMessage::Text(t) = self {
            return **t == *text;
        }
        let mut rest = Expect(text);
        std::fmt::write(&mut rest, format_args!("{self}")).is_ok() && rest.0.is_empty()
    }
}

/// A writer that only checks its input is the next part of the expected text.
struct Expect<'a>(&'a str);

impl std::fmt::Write for Expect<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        match self.0.strip_prefix(s) {
            Some(rest) => {
                self.0 = rest;
                Ok(())
            }
            None => Err(std::fmt::Error),
        }
    }
}

impl std::fmt::Display for PendingMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PendingMessage::Text(t) => f.write_str(t),
            PendingMessage::Preempting { text, victims } => {
                write!(
                    f,
                    "{text}{}{victims} workload(s)",
                    workloads::PREEMPTOR_MARK
                )
            }
            PendingMessage::WaitingBehind(w) => {
                let (head, cq) = (&w.head, &w.cluster_queue);
                match w.why {
                    WaitingFor::StrictFifo => write!(
                        f,
                        "waiting behind workload {head} in StrictFIFO ClusterQueue {cq}"
                    ),
                    WaitingFor::HeldBack => write!(
                        f,
                        "waiting behind workload {head}, which is held back in this pass, in ClusterQueue {cq}"
                    ),
                    WaitingFor::Preemption => write!(
                        f,
                        "waiting behind workload {head}, which is preempting for quota in ClusterQueue {cq}"
                    ),
                }
            }
        }
    }
}

impl PendingMessage {
    /// Whether it reads the same as `other`. Parts that are equal read the same, so messages made
    /// alike compare without formatting (a pass compares one with what each pending Workload
    /// shows); messages made differently are compared as text.
    pub fn reads_as(&self, other: &PendingMessage) -> bool {
        use PendingMessage::{Preempting, Text, WaitingBehind};
        match (self, other) {
            (Text(a), Text(b)) => Arc::ptr_eq(a, b) || a == b,
            (WaitingBehind(a), WaitingBehind(b)) if Arc::ptr_eq(a, b) || a == b => true,
            (
                Preempting {
                    text: a,
                    victims: x,
                },
                Preempting {
                    text: b,
                    victims: y,
                },
            ) if x == y && a == b => true,
            (Text(t), m) | (m, Text(t)) => m.is(t),
            (a, b) => a.to_string() == b.to_string(),
        }
    }
}

impl PartialEq for PendingMessage {
    fn eq(&self, other: &Self) -> bool {
        self.reads_as(other)
    }
}

impl From<&str> for PendingMessage {
    fn from(text: &str) -> Self {
        PendingMessage::Text(text.into())
    }
}

impl From<String> for PendingMessage {
    fn from(text: String) -> Self {
        PendingMessage::Text(text.into())
    }
}

impl Decision {
    /// The `<namespace>/<name>` of the Workload it is about.
    pub fn workload(&self) -> &str {
        match self {
            Decision::Admit { workload, .. }
            | Decision::Pending { workload, .. }
            | Decision::Evict { workload, .. }
            | Decision::FinishReplaced { workload, .. } => workload,
        }
    }
}

/// Usage of a ClusterQueue once a cycle's decisions are applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterQueueUsage {
    pub name: String,
    /// Per flavor (spec order): per resource `total` and `borrowed` (`max(0, total − nominal)`).
    pub reservation: Vec<FlavorUsage>,
    pub pending: i32,
    pub reserving: i32,
    pub admitted: i32,
    /// Err: why it admits nothing (a missing flavor, a bad quota, a cohort cycle, stopped).
    pub active: Result<(), String>,
    /// Reason of the `Active` condition: `Ready`, `Stopped`, `FlavorNotFound`, `InvalidSpec`,
    /// `CohortCycle`.
    pub active_reason: String,
}

/// Usage of a LocalQueue once a cycle's decisions are applied.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalQueueUsage {
    pub namespace: String,
    pub name: String,
    pub reservation: Vec<LocalQueueFlavorUsage>,
    pub pending: i32,
    pub reserving: i32,
    pub admitted: i32,
    /// Err: why Workloads submitted to it cannot be admitted.
    pub active: Result<(), String>,
}

/// One admission pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleResult {
    /// In the order they were decided: quota-independent evictions, then queue order (a
    /// preemptor's victims just before it, an old slice's finish just after its replacement).
    pub decisions: Vec<Decision>,
    /// By name.
    pub cluster_queues: Vec<ClusterQueueUsage>,
    /// By namespace, name.
    pub local_queues: Vec<LocalQueueUsage>,
}

/// One admission pass over a snapshot.
pub fn cycle(snapshot: &Snapshot, options: &Options) -> CycleResult {
    cycle::run(&Index::build(snapshot, options), options)
}

/// Runs passes, applying each pass's decisions to the Workloads (with `now` as the time of every
/// change), until a pass changes nothing or `max_cycles` passes ran.
pub fn run_until_stable(
    snapshot: Snapshot,
    options: &Options,
    now: Timestamp,
    max_cycles: usize,
) -> (Snapshot, Vec<CycleResult>) {
    let mut scheduler = Scheduler::new(snapshot, options);
    let mut results = Vec::new();
    for _ in 0..max_cycles {
        let result = scheduler.cycle();
        let changed = scheduler.apply(&result, now);
        results.push(result);
        if !changed {
            break;
        }
    }
    (scheduler.into_snapshot(), results)
}

/// A snapshot with its index kept between passes: requests and quotas are parsed once, and
/// applying decisions updates only the Workloads they name.
#[derive(Clone, Debug)]
pub struct Scheduler {
    snapshot: Snapshot,
    index: Index,
    options: Options,
}

impl Scheduler {
    pub fn new(snapshot: Snapshot, options: &Options) -> Self {
        let index = Index::build(&snapshot, options);
        Scheduler {
            snapshot,
            index,
            options: *options,
        }
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    pub fn into_snapshot(self) -> Snapshot {
        self.snapshot
    }

    /// Reports every Pending decision, also those that would change nothing (a pass leaves them
    /// out by default): tests compare the two.
    #[cfg(test)]
    pub(crate) fn report_unchanged_pending(&mut self) {
        self.index.report_unchanged = true;
    }

    /// One admission pass on the current state.
    pub fn cycle(&self) -> CycleResult {
        cycle::run(&self.index, &self.options)
    }

    /// Applies a pass's decisions to the Workloads' status (releasing evicted Workloads at once
    /// when the options say so). Returns whether any status changed.
    pub fn apply(&mut self, result: &CycleResult, now: Timestamp) -> bool {
        let mut changed = false;
        for d in &result.decisions {
            let Some(&i) = self.index.by_key.get(d.workload()) else {
                continue;
            };
            let w = &mut self.snapshot.workloads[usize::from(i)];
            let generation = w.metadata.generation;
            if let Decision::Pending {
                reason, message, ..
            } = d
            {
                // only QuotaReserved=False changes: admission reads only whether it preempts
                let s = w.status.get_or_insert_with(WorkloadStatus::default);
                // unchanged: the entry was derived from this very message
                if status::apply_pending_in_place(s, generation, reason, message, now) {
                    changed = true;
                    if message.is_preemptor() != self.index.workloads[i].preemptor {
                        self.refresh_status(i);
                    }
                    // what it shows now, in parts: the next pass compares without formatting
                    self.index.workloads[i].shown = Some(workloads::Shown {
                        reason: (*reason).into(),
                        message: message.clone(),
                    });
                }
                continue;
            }
            let mut s = apply_decision(w.status.as_ref(), generation, d, now);
            if matches!(d, Decision::Evict { .. }) && self.options.release_evicted_immediately {
                s = release_quota(Some(&s), generation, now);
            }
            if w.status.as_ref() == Some(&s) {
                continue;
            }
            w.status = Some(s);
            changed = true;
            self.refresh_status(i);
        }
        if self.index.order.is_none() {
            self.index.sort_queues();
        }
        changed
    }

    /// Changes one Workload (e.g. a finished run, a scale-down); false if there is no such key.
    pub fn update_workload(&mut self, key: &str, change: impl FnOnce(&mut Workload)) -> bool {
        let Some(&i) = self.index.by_key.get(key) else {
            return false;
        };
        change(&mut self.snapshot.workloads[usize::from(i)]);
        self.refresh(i);
        true
    }

    /// Sets one Workload's status to what `change` returns for it (`None`: leaves it as it is);
    /// cheaper than [`Scheduler::update_workload`], as its spec is not read again. False if
    /// there is no such key.
    pub fn update_status(
        &mut self,
        key: &str,
        change: impl FnOnce(&Workload) -> Option<WorkloadStatus>,
    ) -> bool {
        let Some(&i) = self.index.by_key.get(key) else {
            return false;
        };
        if let Some(s) = change(&self.snapshot.workloads[usize::from(i)]) {
            self.snapshot.workloads[usize::from(i)].status = Some(s);
            self.refresh_status(i);
        }
        true
    }

    /// Marks a Workload finished (`Finished=True` with `reason`): it releases its quota.
    pub fn finish(&mut self, key: &str, reason: &str, message: &str, now: Timestamp) -> bool {
        self.update_status(key, |w| {
            Some(finish(
                w.status.as_ref(),
                w.metadata.generation,
                reason,
                message,
                now,
            ))
        })
    }

    /// Workload `i`'s status changed, not its spec.
    fn refresh_status(&mut self, i: WorkloadIx) {
        let old_place = self.index.queue_key(i);
        let w = &self.snapshot.workloads[usize::from(i)];
        self.index.q.derive_status(w, &mut self.index.workloads[i]);
        if self.index.queue_key(i) != old_place {
            // it moved in its queue: sort again before the next pass
            self.index.order = None;
        }
    }

    fn refresh(&mut self, i: WorkloadIx) {
        let old_key = std::mem::take(&mut self.index.workloads[i].key);
        let old_place = self.index.queue_key(i);
        let info = self
            .index
            .q
            .derive(&self.snapshot.workloads[usize::from(i)]);
        let rekey = info.key != old_key;
        let duplicate = self.index.workloads[i].duplicate;
        self.index.workloads[i] = workloads::WorkloadEntry { duplicate, ..info };
        self.index.intern_shape(i);
        if rekey {
            self.index.reindex_keys();
        } else if self.index.queue_key(i) != old_place {
            // it moved in its queue (or to another): sort again before the next pass
            self.index.order = None;
        }
    }
}

/// The status a Workload has after `decision` (see [`apply_decision`]), for callers holding a
/// Workload object.
pub fn status_after(workload: &Workload, decision: &Decision, now: Timestamp) -> WorkloadStatus {
    apply_decision(
        workload.status.as_ref(),
        workload.metadata.generation,
        decision,
        now,
    )
}
