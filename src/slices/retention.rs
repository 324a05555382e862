//! Retention: which finished slices are deleted, and when (like Kueue's
//! `objectRetentionPolicies.workloads.afterFinished`).

use crate::types::kueue::{WORKLOAD_SLICE_NAME_ANNOTATION, Workload, condition};
use crate::{conditions, meta, workload};

/// How long finished slices are kept (like Kueue's `objectRetentionPolicies.workloads.afterFinished`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A finished slice older than this (since its `Finished` condition) may be deleted.
    pub after_finished: std::time::Duration,
    /// The newest this many finished slices of each chain are kept whatever their age, for debugging.
    pub keep_per_chain: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            after_finished: std::time::Duration::from_secs(3600),
            keep_per_chain: 3,
        }
    }
}

/// When `w` finished (`Finished=True`'s transition time).
fn finished_at(w: &Workload) -> Option<k8s_openapi::jiff::Timestamp> {
    conditions::find_true(&w.status.as_ref()?.conditions, condition::FINISHED)
        .map(|c| c.last_transition_time.0)
}

/// The finished slices to delete at `now`: finished longer than `after_finished` ago and not among
/// the newest `keep_per_chain` finished slices of their chain (`workload-slice-name`, else their
/// own name). Oldest first.
pub fn expired(
    workloads: &[Workload],
    now: k8s_openapi::jiff::Timestamp,
    retention: &Retention,
) -> Vec<String> {
    let mut by_chain: std::collections::BTreeMap<String, Vec<&Workload>> = Default::default();
    for w in workloads
        .iter()
        .filter(|w| workload::is_finished(w.status.as_ref()))
    {
        let chain = meta::annotation(&w.metadata, WORKLOAD_SLICE_NAME_ANNOTATION)
            .map(str::to_string)
            .unwrap_or_else(|| meta::name(&w.metadata));
        by_chain.entry(chain).or_default().push(w);
    }
    let after = k8s_openapi::jiff::SignedDuration::try_from(retention.after_finished)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    let mut out = Vec::new();
    for mut chain in by_chain.into_values() {
        workload::sort_chain_order(&mut chain, workloads);
        let old = chain.len().saturating_sub(retention.keep_per_chain);
        for w in &chain[..old] {
            let expired = finished_at(w).is_some_and(|at| {
                at.checked_add(after)
                    .map(|deadline| deadline <= now)
                    .unwrap_or(false)
            });
            if expired {
                out.push(meta::name(&w.metadata));
            }
        }
    }
    out
}
