//! Running children without an admitted slice, with a real Kueue admitting.
//!
//! Kueue stops a running job whose Workload vanished and creates a new one
//! (`pkg/controller/jobframework/reconciler.go`: `ensureOneWorkload`, "job with no matching
//! workload, suspending", then `handleJobWithNoWorkload`). raygate creates the new slice the same
//! way ([`crate::slices::plan`]) but never stops a released child for it: stopping the serving
//! child is the outage the gate exists to avoid. Builtin admission keeps the deleted slice charged
//! until the new one is admitted ([`crate::slices::lapsed`]); a real Kueue cannot be told, so
//! the gate says what runs uncounted until then.

use super::{Facts, GateDecision, child_name, is_suspended};
use crate::admission::AdmissionMode;
use crate::events::EventType;
use crate::workload;

/// A Warning while released children run and no slice of the RayService holds quota (Kueue
/// mode; not while an eviction drains or the RayService is suspended).
pub(super) fn warn_uncovered(
    f: &Facts,
    released: &std::collections::BTreeSet<String>,
    d: &mut GateDecision,
) {
    if f.opts.mode != AdmissionMode::Kueue
        || f.suspended
        || f.live.iter().any(|w| {
            workload::holds_quota(w.status.as_ref()) || workload::is_evicted(w.status.as_ref())
        })
    {
        return;
    }
    let running: Vec<String> = f
        .children
        .iter()
        .filter(|c| !is_suspended(c) && c.metadata.deletion_timestamp.is_none())
        .map(|c| child_name(c))
        .filter(|n| released.contains(n))
        .collect();
    if running.is_empty() {
        return;
    }
    let queued = d
        .target
        .as_deref()
        .map(|t| format!("slice {t} is queued"))
        .unwrap_or_else(|| "no slice is queued yet".into());
    d.event(
        EventType::Warning,
        "CoverageLapsed",
        format!(
            "{} run without an admitted slice (its Workload was deleted, or they ran before opt-in): not stopped, a released child is never stopped for a missing Workload; {queued}, and Kueue counts their usage only once it is admitted",
            running.join(", ")
        ),
        None,
    );
}
