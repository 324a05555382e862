//! The capacity check (pure): the fixed-capacity dead end: a domain whose drain can never finish because the groups it
//! must move have nowhere to run.
//!
//! A budget over a domain's `g` groups tolerates `t` of them down at once; the drain of that
//! domain's protected pods gets past the `t`-th eviction only as evicted groups become Ready again
//! elsewhere, so at least `g − t` of them must find room outside the domain first. With
//! `taintOutdated` every outdated node is tainted `NoSchedule` at the rollout's first step, so that
//! room is only on nodes outside the rollout (and, with a `Reboot` or `Replace` hand-off, on the
//! domains handed off before; with hand-off `None` those stay cordoned, and the groups moved out of
//! earlier domains use up room first). When that room holds fewer groups than must move, the
//! Eviction API refuses the domain's next protected pod (429) until the domain times out.
//!
//! The room is counted optimistically (the free requests of every candidate node summed, as if
//! the groups could be split across nodes and domains; a node counts if it is schedulable and the
//! group's representative tolerates its taints), so a dead end reported here is certain for what
//! the scheduler checks by requests: it cannot be a false alarm from fragmentation. What it cannot
//! see (an autoscaler adding nodes when the groups are pending) is the operator's to say.
//! Without `taintOutdated` the later domains' outdated nodes still take new pods, and nothing is
//! predicted.
//!
//! The health check's own dead end ([`health_dead_ends`]): with hand-off `None` a drained domain's
//! nodes stay cordoned, and its health check waits until every group evicted from it is Ready
//! again, so every group of the domains drained so far must fit outside them (outside the rollout
//! with `taintOutdated`), whatever its budget tolerates. Where it cannot, the gate fails after
//! `healthCheckRetryTimeout`. Counted the same optimistic way. [`CapacityCheck`] holds both findings.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};

use super::rules::tolerates;
use super::{Cluster, FastMap, GroupLabels, Plan, PlanOptions, in_group};
use crate::quantity::{Quantity, Resources};

mod budget;
mod health_check;
#[cfg(test)]
pub(super) mod tests;

pub use budget::{DeadEnd, dead_end_message, dead_ends};
pub use health_check::{HealthDeadEnd, health_dead_ends, health_message};

/// Whether the drained domains' nodes come back to take pods (a `Reboot` or `Replace` hand-off)
/// or stay cordoned (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returns {
    /// Hand-off `None`: drained nodes stay cordoned (and tainted).
    Never,
    /// Hand-off `Reboot` or `Replace`: a handed-off domain's capacity comes back.
    AfterHandOff,
}

/// Every dead end of a plan: the budget's ([`dead_ends`]) and the health check's
/// ([`health_dead_ends`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapacityCheck {
    pub dead_ends: Vec<DeadEnd>,
    pub health_dead_ends: Vec<HealthDeadEnd>,
}

impl CapacityCheck {
    /// Both checks over one plan.
    pub fn check(cluster: &Cluster, plan: &Plan, options: &PlanOptions, returns: Returns) -> Self {
        CapacityCheck {
            dead_ends: dead_ends(cluster, plan, options, returns),
            health_dead_ends: health_dead_ends(cluster, plan, options, returns),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dead_ends.is_empty() && self.health_dead_ends.is_empty()
    }

    /// The distinct domains named.
    pub fn domains(&self) -> usize {
        let names: BTreeSet<&str> = self
            .dead_ends
            .iter()
            .map(|d| d.domain.as_str())
            .chain(self.health_dead_ends.iter().map(|d| d.domain.as_str()))
            .collect();
        names.len()
    }

    /// [`dead_end_message`], then [`health_message`], each when it has something to say.
    pub fn message(&self) -> String {
        let mut parts = Vec::new();
        if !self.dead_ends.is_empty() {
            parts.push(dead_end_message(&self.dead_ends));
        }
        if !self.health_dead_ends.is_empty() {
            parts.push(health_message(&self.health_dead_ends));
        }
        parts.join(". ")
    }

    /// Why a drain is not started, the controller's and `drain run --local`'s one text: `None`
    /// when nothing was found or the operator said to start anyway (`skip`); `start_anyway` says
    /// how (an annotation, a flag).
    pub fn refusal(&self, skip: bool, start_anyway: &str) -> Option<String> {
        if self.is_empty() || skip {
            return None;
        }
        Some(format!(
            "{}. Nothing was cordoned or evicted; {start_anyway}",
            self.message()
        ))
    }
}

/// The pods of group `group` in `ns` (1 without a group label).
fn group_pods(live: &[&Pod], kinds: &GroupLabels, ns: &str, group: &str) -> i64 {
    if kinds.is_empty() {
        return 1;
    }
    let n = live
        .iter()
        .filter(|p| in_group(p, ns, kinds, group))
        .count();
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn with_pods(mut r: Resources, pods: i64) -> Resources {
    r.set("pods", Quantity::from_units(pods));
    r
}

/// A pod's effective requests (an unparsable quantity counts as nothing).
fn requests(pod: &Pod) -> Resources {
    pod.spec
        .as_ref()
        .and_then(|s| crate::podsets::pod_requests(s, "spec", "").ok())
        .unwrap_or_default()
}

/// What the live pods bound to each node request, `pods` counted.
fn used_by_node<'a>(live: &[&'a Pod]) -> FastMap<&'a str, Resources> {
    let mut used: FastMap<&str, Resources> = FastMap::default();
    for pod in live {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let r = used.entry(node).or_default();
        r.add(&with_pods(requests(pod), 1));
    }
    used
}

/// A node's allocatable less what its pods request, never below zero.
fn free_on(node: &Node, used: Option<&Resources>) -> Resources {
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| Resources::from_k8s(a).ok())
        .unwrap_or_default();
    let mut free = allocatable;
    if let Some(u) = used {
        free.sub(u);
    }
    free.clamp_non_negative()
}

/// Whether a new copy of `pod` may land on `node`: not cordoned, and every `NoSchedule` or
/// `NoExecute` taint tolerated (`removed`: a taint the hand-off takes off).
fn schedulable(node: &Node, pod: &Pod, removed: Option<&Taint>) -> bool {
    let spec = node.spec.as_ref();
    if spec.and_then(|s| s.unschedulable) == Some(true) && removed.is_none() {
        return false;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    spec.and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .filter(|t| removed.is_none_or(|r| !(r.key == t.key && r.effect == t.effect)))
        .all(|t| tolerations.iter().any(|x| tolerates(x, t)))
}

/// How many copies of `need` fit in `free` by every resource it requests; `None` when it
/// requests nothing (capacity cannot be judged).
fn slots(free: &Resources, need: &Resources) -> Option<usize> {
    need.iter()
        .filter(|(_, q)| q.nanos() > 0)
        .map(|(r, q)| {
            let n = free.get(r).nanos().max(0) / q.nanos();
            usize::try_from(n).unwrap_or(usize::MAX)
        })
        .min()
}

fn describe(r: &Resources) -> String {
    let parts: Vec<String> = r
        .iter()
        .filter(|(_, q)| q.nanos() > 0)
        .map(|(k, q)| format!("{k} {q}"))
        .collect();
    parts.join(", ")
}
