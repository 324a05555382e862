//! Retention: which finished slices are deleted, and when (like Kueue's
//! `objectRetentionPolicies.workloads.afterFinished`).

use crate::types::kueue::{Workload, condition};
use crate::{conditions, meta, workload};

/// How long finished slices are kept (like Kueue's `objectRetentionPolicies.workloads.afterFinished`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A finished slice older than this (since its `Finished` condition) may be deleted.
    pub after_finished: std::time::Duration,
    /// The newest this many finished slices of each RayService are kept whatever their age, for
    /// debugging.
    pub keep_newest: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            after_finished: std::time::Duration::from_secs(3600),
            keep_newest: 3,
        }
    }
}

/// When `w` finished (`Finished=True`'s transition time).
fn finished_at(w: &Workload) -> Option<k8s_openapi::jiff::Timestamp> {
    conditions::find_true(&w.status.as_ref()?.conditions, condition::FINISHED)
        .map(|c| c.last_transition_time.0)
}

/// The finished slices of one RayService (`workloads`) to delete at `now`: finished longer than
/// `after_finished` ago and not among its newest `keep_newest` finished slices (by finish time,
/// then name), whichever chain they belong to — each eviction starts a new chain, so a count per
/// chain would keep slices without bound. Oldest first.
pub fn expired(
    workloads: &[Workload],
    now: k8s_openapi::jiff::Timestamp,
    retention: &Retention,
) -> Vec<String> {
    let mut finished: Vec<(k8s_openapi::jiff::Timestamp, String)> = workloads
        .iter()
        .filter(|w| workload::is_finished(w.status.as_ref()))
        .filter_map(|w| Some((finished_at(w)?, meta::name(&w.metadata))))
        .collect();
    finished.sort();
    let after = k8s_openapi::jiff::SignedDuration::try_from(retention.after_finished)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    let old = finished.len().saturating_sub(retention.keep_newest);
    finished
        .drain(..old)
        .filter(|(at, _)| {
            at.checked_add(after)
                .map(|deadline| deadline <= now)
                .unwrap_or(false)
        })
        .map(|(_, name)| name)
        .collect()
}
