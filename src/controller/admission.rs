//! The built-in admission loop: on any change to Workloads or queues (and on a resync tick) it
//! snapshots the stores, runs one [`crate::admission::cycle`], and writes what changed: Workload
//! conditions and `status.admission`, ClusterQueue and LocalQueue status, each with the
//! `raygate-admission` field manager.
//!
//! The stores lag the loop's own writes by a watch round trip, so statuses it wrote are kept as
//! *assumed* until the store shows that resourceVersion: a cycle never re-spends quota that the
//! previous cycle handed out (Kueue's cache assumes workloads the same way).

use std::collections::{HashMap, HashSet};
use std::future::Future;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

mod observe;

use observe::{AssumedStatus, Assumptions, Observer, UNCONFIRMED_FOR, key, rv};

use super::coverage::{Coverage, keep_lapsed_coverage};
use super::metrics::{CqLabels, CqReasonLabels, StepLabels};
use super::runner::Pass;
use super::{ADMISSION_MANAGER, Context, Error, Monotonic};
use crate::admission::{
    self, ClusterQueueUsage, CycleResult, Decision, LocalQueueUsage, Options, Snapshot,
};
use crate::runtime::{Backoff, Retry};
use crate::types::kueue::{ClusterQueue, LocalQueue, Workload, WorkloadStatus, condition};

/// Condition types the admission loop owns on a Workload.
const OWNED: [&str; 5] = [
    condition::QUOTA_RESERVED,
    condition::ADMITTED,
    condition::EVICTED,
    condition::PREEMPTED,
    condition::REQUEUED,
];

/// The one condition the admission loop owns on a ClusterQueue and a LocalQueue (the status
/// values come from [`admission::cluster_queue_status`] / [`admission::local_queue_status`]).
const ACTIVE: &str = "Active";

/// Whether a failed write may still have been committed: the server answered with a Status
/// (a rejection, a 409) means no; a transport failure or timeout means it may have.
fn may_have_committed(e: &kube::Error) -> bool {
    !matches!(e, kube::Error::Api(_))
}

/// The per-object backoff of the loop's failing writes (key: `workload/ns/name`,
/// `clusterqueue/name`, `localqueue/ns/name`): after `n` consecutive failures a write of that
/// object waits [`crate::runtime::backoff_delay`]`(n)` (2 s doubling, capped at 5 min, like the
/// gate's) instead of being retried on every trigger and resync. A success forgets the object; a
/// 409 is not a failure here (the loop re-reads and re-decides at once).
type WriteBackoff = Backoff;

/// The admission loop's memory between cycles.
#[derive(Default)]
pub(super) struct Admission {
    assumed: Assumptions,
    backoff: WriteBackoff,
    observer: Observer,
    coverage: Coverage,
}

impl Pass for Admission {
    const NAME: &'static str = "admission loop";

    /// One admission cycle: observe (the stores with the loop's assumptions laid over) → decide
    /// ([`admission::cycle`]) → apply (the statuses that changed) → report (metrics, logs).
    /// Wants the next cycle when a held-back write may be retried.
    async fn pass(&mut self, ctx: &Context, woke: Monotonic) -> Option<Monotonic> {
        let observed = self.observer.snapshot(ctx, &mut self.assumed);
        let lapsed = keep_lapsed_coverage(ctx, observed, &mut self.coverage).await;
        let snapshot = lapsed.as_ref().map_or(observed, |(s, _)| s);
        forget_gone(&mut self.backoff, snapshot);
        let options = Options {
            release_evicted_immediately: false,
        };
        let mut result = off_the_runtime(|| admission::cycle(snapshot, &options));
        // a stand-in is no object: nothing is written to it
        if let Some((_, stand_ins)) = &lapsed {
            result
                .decisions
                .retain(|d| !stand_ins.contains(d.workload()));
        }
        let now = ctx.clock.now();
        let (assumed, backoff) = (&mut self.assumed, &mut self.backoff);
        let failed = apply(ctx, snapshot, &result, now, assumed, backoff).await;
        report(ctx, snapshot, &result, &failed);
        self.backoff.next_retry(woke)
    }
}

/// Runs the pure, CPU-bound `f` (an admission cycle over every Workload) without holding up the
/// other tasks of the runtime's worker: on a multi-threaded runtime the worker's queue moves to
/// another thread meanwhile (`block_in_place`); a current-thread runtime (the simulated cluster's
/// tests on a paused clock) runs it in place.
fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Drops the backoff of objects no longer in the snapshot.
fn forget_gone(backoff: &mut WriteBackoff, snapshot: &Snapshot) {
    if backoff.is_empty() {
        return;
    }
    let mut present: HashSet<String> = snapshot
        .workloads
        .iter()
        .map(|w| format!("workload/{}", key(w)))
        .collect();
    present.extend(snapshot.cluster_queues.iter().map(|c| {
        format!(
            "clusterqueue/{}",
            c.metadata.name.as_deref().unwrap_or_default()
        )
    }));
    present.extend(snapshot.local_queues.iter().map(|q| {
        format!(
            "localqueue/{}/{}",
            q.metadata.namespace.as_deref().unwrap_or_default(),
            q.metadata.name.as_deref().unwrap_or_default()
        )
    }));
    backoff.retain(|k| present.contains(k));
}

/// A write that failed, and when the loop tries it again.
struct Failed {
    error: Error,
    /// `None` for a conflict (re-decided on the next cycle); else the object's backoff.
    backoff: Option<Retry>,
}

/// Writes `key` through `write` unless its backoff holds it back (`None`), recording the outcome.
async fn with_backoff<F>(
    ctx: &Context,
    backoff: &mut WriteBackoff,
    key: &str,
    failed: &mut Vec<Failed>,
    write: F,
) -> Option<bool>
where
    F: Future<Output = Result<(), Error>>,
{
    let now = ctx.clock.monotonic();
    if !backoff.ready(key, now) {
        tracing::debug!(object = key, "admission write held back by its backoff");
        return None;
    }
    match write.await {
        Ok(()) => {
            backoff.succeeded(key);
            Some(true)
        }
        Err(error) => {
            let b = (!error.is_conflict()).then(|| backoff.failed(key.to_string(), now));
            failed.push(Failed { error, backoff: b });
            Some(false)
        }
    }
}

/// Writes a cycle's decisions, then the queues' status; returns the writes that failed (a later
/// cycle retries them, after the object's backoff; a write still backing off is not sent).
async fn apply(
    ctx: &Context,
    snapshot: &Snapshot,
    result: &CycleResult,
    now: Timestamp,
    assumed: &mut Assumptions,
    backoff: &mut WriteBackoff,
) -> Vec<Failed> {
    let mut failed = vec![];
    let by_key: HashMap<String, &Workload> = if result.decisions.is_empty() {
        HashMap::new()
    } else {
        snapshot.workloads.iter().map(|w| (key(w), w)).collect()
    };
    // admissions whose write succeeded: only these finish the slice they replace
    let mut admitted: HashSet<&str> = HashSet::new();
    for d in &result.decisions {
        let Some(w) = by_key.get(d.workload()).copied() else {
            continue;
        };
        // (or whose replacement already held quota before this cycle: its finish failed then)
        if let Decision::FinishReplaced { replaced_by, .. } = d
            && !admitted.contains(replaced_by.as_str())
            && !by_key
                .get(replaced_by.as_str())
                .is_some_and(|r| crate::workload::holds_quota(r.status.as_ref()))
        {
            tracing::info!(
                workload = d.workload(),
                replaced_by,
                "not finishing the replaced slice: its replacement's admission was not written"
            );
            continue;
        }
        if !ctx.is_leader() {
            tracing::info!("leadership lost: the admission loop stops writing");
            break;
        }
        let key = format!("workload/{}", d.workload());
        let write = write_decision(ctx, w, d, now, assumed);
        if with_backoff(ctx, backoff, &key, &mut failed, write).await == Some(true)
            && let Decision::Admit { workload, .. } = d
        {
            admitted.insert(workload.as_str());
        }
    }
    for cq in &result.cluster_queues {
        if !ctx.is_leader() {
            break;
        }
        let key = format!("clusterqueue/{}", cq.name);
        let write = write_cluster_queue(ctx, cq, now);
        with_backoff(ctx, backoff, &key, &mut failed, write).await;
    }
    for lq in &result.local_queues {
        if !ctx.is_leader() {
            break;
        }
        let key = format!("localqueue/{}/{}", lq.namespace, lq.name);
        let write = write_local_queue(ctx, lq, now);
        with_backoff(ctx, backoff, &key, &mut failed, write).await;
    }
    failed
}

/// Every trace a cycle leaves: the cycle and pending counts, each ClusterQueue's usage, the
/// failed writes (log and error metric).
fn report(ctx: &Context, snapshot: &Snapshot, result: &CycleResult, failed: &[Failed]) {
    ctx.metrics.admission_cycles.inc();
    tracing::debug!(
        workloads = snapshot.workloads.len(),
        cluster_queues = snapshot.cluster_queues.len(),
        decisions = ?result.decisions,
        "admission cycle"
    );
    // raygate_pending_slices is computed at scrape time from the Workload cache (both modes)
    ctx.metrics
        .queues
        .set_queues(snapshot, &result.cluster_queues);
    for f in failed {
        let e = &f.error;
        match f.backoff {
            Some(b) => tracing::warn!(
                error = %e,
                consecutive_failures = b.failures,
                retry_in_seconds = b.wait(ctx.clock.monotonic()).as_secs(),
                "admission write failed; retrying after a backoff (2 s doubling, at most 5 min)"
            ),
            None => {
                tracing::info!(error = %e, "admission write conflicted; re-deciding on the next cycle")
            }
        }
        ctx.metrics
            .errors
            .get_or_create(&StepLabels {
                step: e.metric_label().into(),
            })
            .inc();
    }
}

/// The part of a status the admission loop owns.
fn owned(status: &WorkloadStatus, finished: bool) -> serde_json::Value {
    let conditions: Vec<&Condition> = status
        .conditions
        .iter()
        .filter(|c| {
            OWNED.contains(&c.type_.as_str()) || (finished && c.type_ == condition::FINISHED)
        })
        .collect();
    // an unset admission is omitted (Kueue's schema rejects null; under server-side apply an
    // omitted field we owned is removed)
    match &status.admission {
        Some(a) => json!({"conditions": conditions, "admission": a}),
        None => json!({"conditions": conditions}),
    }
}

async fn write_decision(
    ctx: &Context,
    w: &Workload,
    d: &Decision,
    now: Timestamp,
    assumed: &mut Assumptions,
) -> Result<(), Error> {
    let k = d.workload();
    // the common case, checked without formatting or cloning: a pending Workload already shows
    // this very reason and message
    if let Decision::Pending {
        reason, message, ..
    } = d
        && admission::pending_unchanged(w.status.as_ref(), w.metadata.generation, reason, message)
    {
        return Ok(());
    }
    let current = w.status.clone().unwrap_or_default();
    let next = admission::apply_decision(w.status.as_ref(), w.metadata.generation, d, now);
    let finished = matches!(d, Decision::FinishReplaced { .. });
    if owned(&current, finished) == owned(&next, finished) {
        return Ok(());
    }
    let (ns, name) = k.split_once('/').unwrap_or_default();
    // conditioned on the version decided on: a 409 means re-read and re-decide next cycle
    let decided_rv = w.metadata.resource_version.clone().unwrap_or_default();
    let body = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"resourceVersion": decided_rv},
        "status": owned(&next, finished),
    });
    let written = Api::<Workload>::namespaced(ctx.client.clone(), ns)
        .patch_status(
            name,
            &super::apply_params(ADMISSION_MANAGER),
            &Patch::Apply(&body),
        )
        .await;
    let updated = match written {
        Ok(u) => u,
        Err(source) => return Err(write_failed(ctx, (k, w), next, decided_rv, assumed, source)),
    };
    // Kueue's Events on the Workload (QuotaReserved + Admitted, Preempted/Evicted), once written
    let reference = kube::Resource::object_ref(&updated, &());
    for ev in crate::admission::admission_events(d) {
        ctx.events.publish(&reference, &ev).await;
    }
    count_decision(ctx, w, d, now);
    assumed.assume(
        k.to_string(),
        AssumedStatus::new(
            rv(&updated),
            updated
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default(),
            updated.status.unwrap_or_default(),
        ),
    );
    Ok(())
}

/// A failed status write: one that may have landed is assumed committed until the store tells
/// (so nothing is spent twice), with a log line; the error names the Workload.
fn write_failed(
    ctx: &Context,
    (k, w): (&str, &Workload),
    next: WorkloadStatus,
    decided_rv: String,
    assumed: &mut Assumptions,
    source: kube::Error,
) -> Error {
    if may_have_committed(&source) {
        tracing::warn!(workload = k, error = %source, "admission write outcome unknown: assuming it committed");
        assumed.assume_until(
            k.to_string(),
            AssumedStatus::new(rv(w).saturating_add(1), decided_rv, next),
            ctx.clock.monotonic() + UNCONFIRMED_FOR,
        );
    }
    Error::WorkloadStatus {
        name: k.to_string(),
        source,
    }
}

/// The traces of a written admission or eviction: a log line and the admission time (the gate's
/// latency starts there), and Kueue's counters per ClusterQueue: the wait is from the Workload's
/// creation, or its last requeue (Kueue's `QueuedWaitTime`).
fn count_decision(ctx: &Context, w: &Workload, d: &Decision, now: Timestamp) {
    let q = &ctx.metrics.queues;
    match d {
        Decision::Admit {
            admission,
            workload,
        } => {
            tracing::info!(workload, "admitted");
            if let Ok(mut m) = ctx.admitted_at.lock() {
                m.insert(workload.clone(), ctx.clock.monotonic());
            }
            let labels = CqLabels {
                cluster_queue: admission.cluster_queue.clone(),
            };
            q.admitted_total.get_or_create(&labels).inc();
            let requeued = w.status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == condition::REQUEUED && c.status == "True")
            });
            let queued = requeued.map(|c| c.last_transition_time.0).or(w
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0));
            if let Some(since) = queued {
                let waited = now.duration_since(since).as_secs_f64().max(0.0);
                q.admission_wait.get_or_create(&labels).observe(waited);
            }
        }
        Decision::Evict { reason, .. } => {
            let cq = w.status.as_ref().and_then(|s| s.admission.as_ref());
            if let Some(a) = cq {
                let labels = CqReasonLabels {
                    cluster_queue: a.cluster_queue.clone(),
                    reason: reason.clone(),
                };
                q.evicted_total.get_or_create(&labels).inc();
            }
        }
        Decision::Pending { .. } | Decision::FinishReplaced { .. } => {}
    }
}

async fn write_cluster_queue(
    ctx: &Context,
    usage: &ClusterQueueUsage,
    now: Timestamp,
) -> Result<(), Error> {
    let existing = ctx.stores.cluster_queues.get(&ObjectRef::new(&usage.name));
    let previous = existing.as_ref().and_then(|c| c.status.as_ref());
    let generation = existing.as_ref().and_then(|c| c.metadata.generation);
    let mut next = admission::cluster_queue_status(usage, previous, generation, now);
    if previous == Some(&next) {
        return Ok(());
    }
    next.conditions.retain(|c| c.type_ == ACTIVE);
    let body =
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "status": next});
    Api::<ClusterQueue>::all(ctx.client.clone())
        .patch_status(
            &usage.name,
            &super::apply_params(ADMISSION_MANAGER),
            &Patch::Apply(&body),
        )
        .await
        .map(|_| ())
        .map_err(|source| Error::ClusterQueueStatus {
            name: usage.name.clone(),
            source,
        })
}

async fn write_local_queue(
    ctx: &Context,
    usage: &LocalQueueUsage,
    now: Timestamp,
) -> Result<(), Error> {
    let existing = ctx
        .stores
        .local_queues
        .get(&ObjectRef::new(&usage.name).within(&usage.namespace));
    let previous = existing.as_ref().and_then(|q| q.status.as_ref());
    let generation = existing.as_ref().and_then(|q| q.metadata.generation);
    let mut next = admission::local_queue_status(usage, previous, generation, now);
    if previous == Some(&next) {
        return Ok(());
    }
    next.conditions.retain(|c| c.type_ == ACTIVE);
    let body =
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "status": next});
    Api::<LocalQueue>::namespaced(ctx.client.clone(), &usage.namespace)
        .patch_status(
            &usage.name,
            &super::apply_params(ADMISSION_MANAGER),
            &Patch::Apply(&body),
        )
        .await
        .map(|_| ())
        .map_err(|source| Error::LocalQueueStatus {
            name: format!("{}/{}", usage.namespace, usage.name),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::may_have_committed;

    #[test]
    fn only_a_server_answer_proves_a_write_did_not_commit() {
        let conflict = kube::Error::Api(
            kube::core::Status::failure("conflict", "Conflict")
                .with_code(409)
                .boxed(),
        );
        assert!(!may_have_committed(&conflict));
        let timeout = kube::Error::Service("request timed out".into());
        assert!(may_have_committed(&timeout));
    }
}
