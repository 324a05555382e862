//! Upgrade-domain aware drains (pure): what to drain, in which order, and whether the cluster
//! keeps the contract that makes a gang-aware drain safe.
//!
//! * [`plan()`] turns nodes, pods and PodDisruptionBudgets into a [`Plan`]: the target nodes
//!   (a selector and/or an outdated node generation), grouped into upgrade domains (UDs) by a
//!   node label and ordered; per domain the nodes to cordon (and taint), phase 1 (pods a PDB
//!   protects: evicted first, the Eviction API may refuse them), phase 2 (the rest), and the pods
//!   skipped or blocking by `kubectl drain`'s rules and flags ([`rules`]).
//! * [`preflight()`] checks the three-layer contract (groups packed into one domain, delegated
//!   readiness on one representative per group, a PDB over the representatives only) and returns
//!   [`Finding`]s, each naming the workload, the object and the fix.
//!
//! * [`dead_ends()`] finds the domains a plan cannot finish draining because their groups would
//!   have nowhere to run (`taintOutdated` and no room outside the rollout); [`health_dead_ends()`]
//!   those whose health check cannot pass (hand-off `None`: no room outside the drained domains).
//!
//! * [`rollout_options()`] checks a `NodeRollout`'s spec and turns it into those options.
//!
//! Nothing here does IO or reads a clock: the caller passes the objects it observed and `now`.

mod capacity;
pub mod engine;
pub(crate) mod exposure;
mod generation;
mod group_labels;
/// What an active NodeRollout holds on to: its selection and its finalizer.
pub mod lifecycle;
mod pdb;
mod plan;
mod preflight;
/// A NodeRollout's status, Events and metric deltas from the engine's state.
pub mod rollout;
pub mod rules;
pub mod services;
mod spec;
mod taint;

#[cfg(test)]
mod preflight_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::labels::SelectorError;

pub use capacity::{
    CapacityCheck, DeadEnd, HealthDeadEnd, Returns, dead_end_message, dead_ends, health_dead_ends,
    health_message,
};
pub use exposure::{Exposure, exposures};
pub use generation::{Generation, GenerationSource, GenerationTarget, NodeInfoField};
pub use generation::{compare_generations, node_generation};
pub use group_labels::{GroupLabel, GroupLabels};
pub use plan::{
    BlockReason, BlockedPod, DomainOrder, DomainPlan, NodeAction, Plan, PlanOptions, PodRef,
    ProtectedPod, SkipReason, SkippedPod, Warning, plan,
};
pub use preflight::{Check, Finding, GroupContract, PreflightOptions, preflight};
pub use preflight::{KUBERAY_REPLICA_NAME, LWS_GROUP_KEY};
pub use rules::{DrainRules, tolerates_cordon};
pub use spec::{
    InvalidSpec, RolloutOptions, SpecError, outdated_taint, parse_duration, rollout_options,
};
pub use taint::{AutoTaint, auto_taint};

/// A map keyed by strings borrowed from the observed objects, hashed with foldhash (fixed seed:
/// deterministic). The plan looks up every pod's node and label pairs; SipHash cost more there
/// than the rest of the plan.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;
pub(crate) type FastSet<K> = HashSet<K, foldhash::fast::FixedState>;

/// Why a plan or a preflight cannot be made: bad options or input the operator must fix. Each
/// variant names what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DrainError {
    #[error("no node carries the upgrade-domain label {key:?}")]
    UnknownDomainLabel { key: String },
    #[error(
        "{count} target node(s) lack the upgrade-domain label {key:?}: {}",
        nodes.join(", ")
    )]
    NodesWithoutDomain {
        key: String,
        count: usize,
        nodes: Vec<String>,
    },
    #[error("node selector: {0}")]
    NodeSelector(#[source] SelectorError),
    #[error("--pod-selector: {0}")]
    PodSelector(#[source] SelectorError),
    #[error("representative selector of the group contract: {0}")]
    RepresentativeSelector(#[source] SelectorError),
    #[error("no node matched: {what}")]
    NoNodesMatched { what: String },
    #[error("no node has a value for {from}, so there is no newest generation")]
    NoGeneration { from: String },
    #[error("domain order \"oldest generation first\" needs a node generation option")]
    OrderNeedsGeneration,
    #[error("the explicit domain order names {domain:?}, but no node has {key}={domain}")]
    UnknownDomain { key: String, domain: String },
    #[error("the explicit domain order does not list domain(s) {}", domains.join(", "))]
    DomainsNotListed { domains: Vec<String> },
}

/// The observed objects a plan or preflight reads.
#[derive(Clone, Copy, Debug)]
pub struct Cluster<'a> {
    pub nodes: &'a [Node],
    pub pods: &'a [Pod],
    pub pdbs: &'a [PodDisruptionBudget],
    /// The DaemonSets that exist, for `kubectl drain`'s orphaned-DaemonSet-pod rule. `None`: not
    /// observed, every DaemonSet a pod names is taken to exist.
    pub daemon_sets: Option<&'a [DaemonSet]>,
}

impl<'a> Cluster<'a> {
    pub fn new(nodes: &'a [Node], pods: &'a [Pod], pdbs: &'a [PodDisruptionBudget]) -> Self {
        Cluster {
            nodes,
            pods,
            pdbs,
            daemon_sets: None,
        }
    }

    fn daemon_set_keys(&self) -> Option<HashSet<(&'a str, &'a str)>> {
        self.daemon_sets.map(|sets| {
            sets.iter()
                .map(|d| {
                    (
                        d.metadata.namespace.as_deref().unwrap_or_default(),
                        d.metadata.name.as_deref().unwrap_or_default(),
                    )
                })
                .collect()
        })
    }
}

/// The upgrade domain of a node: the value of `key`, if the node has that label.
pub fn node_domain<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// `metav1.GetControllerOf`: the owner reference with `controller: true`.
pub fn controller_of(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Whether `pod` is in namespace `ns` and a member of `group` (see [`GroupLabels::group`]).
pub fn in_group(pod: &Pod, ns: &str, kinds: &GroupLabels, group: &str) -> bool {
    namespace(&pod.metadata) == ns && kinds.group(pod) == Some(group)
}

/// Phase `Succeeded` or `Failed`.
pub fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn namespace(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

/// Checks that some node carries the domain label at all (a typo in the key is the usual cause).
fn check_domain_label(nodes: &[Node], key: &str) -> Result<(), DrainError> {
    if nodes.iter().any(|n| node_domain(n, key).is_some()) {
        Ok(())
    } else {
        Err(DrainError::UnknownDomainLabel {
            key: key.to_string(),
        })
    }
}

/// `"a, b, c"`, or the first `max` and `"(and N more)"`.
fn list(items: &[String], max: usize) -> String {
    match items.len() {
        n if n <= max => items.join(", "),
        n => format!("{} (and {} more)", items[..max].join(", "), n - max),
    }
}
