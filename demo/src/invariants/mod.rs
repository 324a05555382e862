//! Invariants over a cluster's [`History`] (pure): each returns its violations with when they
//! started, when they ended (`None`: still at the end of the history) and the objects involved.
//!
//! All of them read the cluster's own record (pods, nodes, budgets, queues, slices), never what
//! raygate says it did, so a baseline drainer is judged by the same code as raygate.
//!
//! One file per family: [`quota`], [`coverage`] (slices), [`groups`], [`budgets`], [`serving`], [`nodes`]; a
//! [`violation`] and its intervals, and whose a pod is ([`owners`]), shared by them.

mod budgets;
mod coverage;
mod groups;
mod nodes;
mod owners;
mod quota;
mod serving;
mod violation;

use crate::history::History;

pub use budgets::{
    never_below_group_floor, never_below_pdb_floor, pdb_floor, seconds_below_group_floor,
    seconds_below_pdb_floor, selector_matches,
};
pub use coverage::{no_child_ran_uncovered, no_slice_leaked};
pub use groups::{group_disruptions, no_group_disrupted_more_than_once};
pub use nodes::every_node_at_target;
pub use owners::{ORIGINATED_FROM_NAME, RAY_CLUSTER_LABEL, queue_of_pod};
pub use quota::{QuotaOverrun, quota_never_exceeded, quota_overrun};
pub use serving::{SERVE_LABEL, never_stopped_serving, serving_pods, serving_seconds_lost};
pub use violation::{Invariant, Violation, Window};

/// What a story expects, for [`check_all`].
#[derive(Clone, Debug, Default)]
pub struct Expect {
    /// The pod label naming a group (e.g. LeaderWorkerSet's group key); `None`: no group check.
    pub group_label: Option<String>,
    /// The rollout's window, for the group check (default: the whole history).
    pub rollout: Option<Window>,
    /// (node label, target value) every node must have at the end.
    pub generation: Option<(String, String)>,
}

/// Every invariant, in the order of [`Invariant`].
pub fn check_all(h: &History, expect: &Expect) -> Vec<Violation> {
    let mut out = quota_never_exceeded(h);
    out.extend(no_child_ran_uncovered(h));
    if let (Some(label), Some((from, to))) = (&expect.group_label, h.span()) {
        let window = expect.rollout.unwrap_or(Window { from, to });
        out.extend(no_group_disrupted_more_than_once(h, label, window));
    }
    out.extend(never_below_pdb_floor(h, expect.group_label.as_deref()));
    if let Some(label) = &expect.group_label {
        out.extend(never_below_group_floor(h, label));
    }
    out.extend(never_stopped_serving(h));
    out.extend(no_slice_leaked(h));
    if let Some((label, target)) = &expect.generation {
        out.extend(every_node_at_target(h, label, target));
    }
    out
}

#[cfg(test)]
mod tests;
