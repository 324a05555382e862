//! The scheduler. Pure part: [`Snapshot::place`] runs kube-scheduler's filters, in the default
//! profile's order (`pkg/scheduler/apis/config/v1/default_plugins.go`): NodeUnschedulable,
//! TaintToleration, NodeAffinity (nodeSelector + required node affinity), NodeResourcesFit
//! (exact requests vs allocatable, and the `pods` count), PodTopologySpread (`DoNotSchedule`),
//! InterPodAffinity (existing pods' anti-affinity, the pod's anti-affinity, its affinity). A node's
//! first failing filter gives its reason; an unschedulable pod gets `FitError`'s message
//! (`0/N nodes are available: <count> <reason>, ….`). Among feasible nodes the least allocated
//! (cpu and memory, `NodeResourcesFit`'s default `LeastAllocated` score) wins, ties by name.
//! Gated pods (`spec.schedulingGates`) are never placed (the `SchedulingGates` PreEnqueue plugin).
//!
//! IO part: [`run`] watches Pods and Nodes, places pending pods in priority order (then creation
//! time), binds through `pods/binding`, and writes `PodScheduled=False/Unschedulable` with the
//! message when a pod fits nowhere. No preemption, no scoring plugins beyond LeastAllocated.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::resources::{self, Resources};

type Labels = BTreeMap<String, String>;
/// Matching pods per (topology key, value).
type DomainCounts = HashMap<(String, String), i64>;

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

// Reasons, as the plugins word them.
const R_UNSCHEDULABLE: &str = "node(s) were unschedulable";
const R_NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
const R_TOO_MANY_PODS: &str = "Too many pods";
const R_SPREAD: &str = "node(s) didn't match pod topology spread constraints";
const R_SPREAD_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const R_EXISTING_ANTI: &str = "node(s) didn't satisfy existing pods anti-affinity rules";
const R_ANTI: &str = "node(s) didn't match pod anti-affinity rules";
const R_AFFINITY: &str = "node(s) didn't match pod affinity rules";

/// A pod as the filters see it.
#[derive(Clone, Debug)]
struct PodInfo {
    namespace: String,
    labels: Labels,
    terminating: bool,
    /// Required anti-affinity terms (with the pod's `matchLabelKeys` folded in).
    anti: Vec<Term>,
}

/// A required pod (anti-)affinity term, resolved against its pod.
#[derive(Clone, Debug)]
struct Term {
    /// `None`: all namespaces (an empty `namespaceSelector`).
    namespaces: Option<BTreeSet<String>>,
    selector: Selector,
    topology_key: String,
}

/// A `metav1.LabelSelector` (nil matches nothing).
#[derive(Clone, Debug, Default)]
struct Selector {
    nothing: bool,
    labels: Labels,
    exprs: Vec<LabelSelectorRequirement>,
}

impl Selector {
    fn from(sel: Option<&LabelSelector>) -> Self {
        match sel {
            None => Selector {
                nothing: true,
                ..Default::default()
            },
            Some(s) => Selector {
                nothing: false,
                labels: s.match_labels.clone().unwrap_or_default(),
                exprs: s.match_expressions.clone().unwrap_or_default(),
            },
        }
    }

    fn require(&mut self, key: &str, op: &str, value: &str) {
        self.nothing = false;
        self.exprs.push(LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(vec![value.into()]),
        });
    }

    fn matches(&self, labels: &Labels) -> bool {
        if self.nothing {
            return false;
        }
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.exprs.iter().all(|e| {
                let vals = e.values.as_deref().unwrap_or_default();
                let got = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => got.is_some_and(|v| vals.contains(v)),
                    "NotIn" => got.is_none_or(|v| !vals.contains(v)),
                    "Exists" => got.is_some(),
                    "DoesNotExist" => got.is_none(),
                    _ => false,
                }
            })
    }
}

fn labels_of(pod: &Pod) -> Labels {
    pod.metadata.labels.clone().unwrap_or_default()
}

fn namespace_of(pod: &Pod) -> String {
    pod.metadata.namespace.clone().unwrap_or_default()
}

/// Resolves a term for `pod`: namespaces (empty = the pod's; an empty `namespaceSelector` = all),
/// and `matchLabelKeys` / `mismatchLabelKeys` folded into the selector with the pod's values.
fn term(pod: &Pod, t: &PodAffinityTerm) -> Term {
    let mut selector = Selector::from(t.label_selector.as_ref());
    let labels = labels_of(pod);
    if t.label_selector.is_some() {
        for k in t.match_label_keys.iter().flatten() {
            if let Some(v) = labels.get(k) {
                selector.require(k, "In", v);
            }
        }
        for k in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = labels.get(k) {
                selector.require(k, "NotIn", v);
            }
        }
    }
    let all = t.namespace_selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
    });
    let namespaces = if all {
        None
    } else {
        let listed: BTreeSet<String> = t.namespaces.iter().flatten().cloned().collect();
        Some(if listed.is_empty() {
            BTreeSet::from([namespace_of(pod)])
        } else {
            listed
        })
    };
    Term {
        namespaces,
        selector,
        topology_key: t.topology_key.clone(),
    }
}

impl Term {
    fn matches(&self, p: &PodInfo) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|ns| ns.contains(&p.namespace))
            && self.selector.matches(&p.labels)
    }
}

fn affinity_terms(pod: &Pod, anti: bool) -> Vec<Term> {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        a.and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    } else {
        a.and_then(|a| a.pod_affinity.as_ref()).and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    };
    terms.into_iter().flatten().map(|t| term(pod, t)).collect()
}

fn pod_info(pod: &Pod) -> PodInfo {
    PodInfo {
        namespace: namespace_of(pod),
        labels: labels_of(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        anti: affinity_terms(pod, true),
    }
}

/// A node and what is placed on it.
#[derive(Clone, Debug)]
struct NodeInfo {
    name: String,
    labels: Labels,
    taints: Vec<Taint>,
    unschedulable: bool,
    allocatable: Resources,
    requested: Resources,
    pods: Vec<PodInfo>,
}

/// The cluster as the scheduler sees it (its cache): nodes, and the pods bound to them.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether `pod` is waiting for the scheduler: unbound, not deleting, not terminal.
pub fn is_pending(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .is_some_and(|s| s.node_name.as_deref().is_none_or(str::is_empty))
        && pod.metadata.deletion_timestamp.is_none()
        && !is_terminal(pod)
}

/// Whether `pod` carries scheduling gates.
pub fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// A hard topology spread constraint, resolved for the incoming pod.
struct Spread {
    max_skew: i64,
    min_domains: i64,
    key: String,
    self_match: i64,
    /// domain value → matching pods
    counts: BTreeMap<String, i64>,
}

/// Why a pod fits no node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FitError {
    pub nodes: usize,
    /// reason → number of nodes
    pub reasons: BTreeMap<String, usize>,
}

impl std::fmt::Display for FitError {
    /// `framework.FitError.Error()`: "0/N nodes are available: " + sorted "count reason" + ".".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self
            .reasons
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        parts.sort();
        write!(
            f,
            "0/{} nodes are available: {}.",
            self.nodes,
            parts.join(", ")
        )
    }
}

impl Snapshot {
    /// The scheduler's view: every node, and every bound, non-terminal pod on its node.
    pub fn new<'a>(
        nodes: impl IntoIterator<Item = &'a Node>,
        pods: impl IntoIterator<Item = &'a Pod>,
    ) -> Self {
        let mut s = Snapshot::default();
        for n in nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            let status = n.status.as_ref();
            let allocatable = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
            let spec = n.spec.as_ref();
            s.index.insert(name.clone(), s.nodes.len());
            s.nodes.push(NodeInfo {
                name,
                labels: n.metadata.labels.clone().unwrap_or_default(),
                taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
                unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
                allocatable: resources::list(allocatable),
                requested: Resources::new(),
                pods: vec![],
            });
        }
        s.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        s.index = s
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        for p in pods {
            if is_terminal(p) {
                continue;
            }
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                s.assume(p, &node);
            }
        }
        s
    }

    /// Counts `pod` on `node` (after a bind, before the watch shows it: the scheduler's assume).
    pub fn assume(&mut self, pod: &Pod, node: &str) {
        if let Some(&i) = self.index.get(node) {
            let n = &mut self.nodes[i];
            resources::add(&mut n.requested, &resources::pod_requests(pod));
            n.pods.push(pod_info(pod));
        }
    }

    fn existing(&self) -> impl Iterator<Item = (&NodeInfo, &PodInfo)> {
        self.nodes
            .iter()
            .flat_map(|n| n.pods.iter().map(move |p| (n, p)))
    }

    fn spreads(&self, pod: &Pod) -> Vec<Spread> {
        let Some(spec) = pod.spec.as_ref() else {
            return vec![];
        };
        let labels = labels_of(pod);
        let ns = namespace_of(pod);
        let hard: Vec<_> = spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
            .collect();
        let keys: Vec<&str> = hard.iter().map(|c| c.topology_key.as_str()).collect();
        let tols = spec.tolerations.clone().unwrap_or_default();
        hard.iter()
            .map(|c| {
                let mut selector = Selector::from(c.label_selector.as_ref());
                for k in c.match_label_keys.iter().flatten() {
                    if let Some(v) = labels.get(k) {
                        selector.require(k, "In", v);
                    }
                }
                let honor_affinity = c.node_affinity_policy.as_deref() != Some("Ignore");
                let honor_taints = c.node_taints_policy.as_deref() == Some("Honor");
                let mut counts = BTreeMap::new();
                for n in &self.nodes {
                    let eligible = keys.iter().all(|k| n.labels.contains_key(*k))
                        && (!honor_affinity || node_affinity_ok(pod, n))
                        && (!honor_taints || untolerated_taint(&tols, n).is_none());
                    if !eligible {
                        continue;
                    }
                    let matching = n
                        .pods
                        .iter()
                        .filter(|p| {
                            !p.terminating && p.namespace == ns && selector.matches(&p.labels)
                        })
                        .count() as i64;
                    *counts.entry(n.labels[&c.topology_key].clone()).or_insert(0) += matching;
                }
                Spread {
                    max_skew: i64::from(c.max_skew),
                    min_domains: i64::from(c.min_domains.unwrap_or(1)),
                    key: c.topology_key.clone(),
                    self_match: i64::from(selector.matches(&labels)),
                    counts,
                }
            })
            .collect()
    }

    /// Places `pod`: the chosen node, or why none fits.
    pub fn place(&self, pod: &Pod) -> Result<String, FitError> {
        let spec = pod.spec.clone().unwrap_or_default();
        let tols = spec.tolerations.clone().unwrap_or_default();
        let request = resources::pod_requests(pod);
        let spreads = self.spreads(pod);
        let me = pod_info(pod);
        let affinity = affinity_terms(pod, false);
        // InterPodAffinity PreFilter: counts per (topology key, value)
        let mut affinity_counts: HashMap<(String, String), i64> = HashMap::new();
        let mut anti_counts: HashMap<(String, String), i64> = HashMap::new();
        let mut existing_anti: HashMap<(String, String), i64> = HashMap::new();
        for (n, p) in self.existing() {
            if !affinity.is_empty() && affinity.iter().all(|t| t.matches(p)) {
                for t in &affinity {
                    if let Some(v) = n.labels.get(&t.topology_key) {
                        *affinity_counts
                            .entry((t.topology_key.clone(), v.clone()))
                            .or_default() += 1;
                    }
                }
            }
            for t in &me.anti {
                if t.matches(p)
                    && let Some(v) = n.labels.get(&t.topology_key)
                {
                    *anti_counts
                        .entry((t.topology_key.clone(), v.clone()))
                        .or_default() += 1;
                }
            }
            for t in &p.anti {
                if t.matches(&me)
                    && let Some(v) = n.labels.get(&t.topology_key)
                {
                    *existing_anti
                        .entry((t.topology_key.clone(), v.clone()))
                        .or_default() += 1;
                }
            }
        }
        let matches_own_affinity = affinity.iter().all(|t| t.matches(&me));
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut best: Option<(i128, &str)> = None;
        for n in &self.nodes {
            let why = self.filter(
                n,
                pod,
                &tols,
                &request,
                &spreads,
                &affinity,
                &me,
                (&affinity_counts, &anti_counts, &existing_anti),
                matches_own_affinity,
            );
            if why.is_empty() {
                let score = least_allocated(n, &request);
                if best.is_none_or(|(s, _)| score > s) {
                    best = Some((score, &n.name));
                }
            }
            for r in why {
                *reasons.entry(r).or_default() += 1;
            }
        }
        match best {
            Some((_, name)) => Ok(name.to_string()),
            None => Err(FitError {
                nodes: self.nodes.len(),
                reasons,
            }),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn filter(
        &self,
        n: &NodeInfo,
        pod: &Pod,
        tols: &[Toleration],
        request: &Resources,
        spreads: &[Spread],
        affinity: &[Term],
        me: &PodInfo,
        counts: (&DomainCounts, &DomainCounts, &DomainCounts),
        matches_own_affinity: bool,
    ) -> Vec<String> {
        if let Some(reason) = node_filters(n, pod, tols) {
            return vec![reason];
        }
        // NodeResourcesFit
        let insufficient = insufficient_resources(n, request);
        if !insufficient.is_empty() {
            return insufficient;
        }
        if let Some(reason) = topology_spread(n, spreads) {
            return vec![reason.into()];
        }
        if let Some(reason) = inter_pod_affinity(n, affinity, me, counts, matches_own_affinity) {
            return vec![reason.into()];
        }
        vec![]
    }
}

/// `LeastAllocated` over cpu and memory (weight 1 each), scaled to avoid rounding: higher is
/// emptier.
fn least_allocated(n: &NodeInfo, request: &Resources) -> i128 {
    ["cpu", "memory"]
        .iter()
        .map(|r| {
            let cap = n.allocatable.get(*r).copied().unwrap_or(0);
            if cap <= 0 {
                return 0;
            }
            let used =
                n.requested.get(*r).copied().unwrap_or(0) + request.get(*r).copied().unwrap_or(0);
            (cap - used).max(0) * 1_000_000 / cap
        })
        .sum()
}

/// Pending, ungated pods in the order the scheduling queue pops them (`PrioritySort`: priority,
/// then creation time), then by namespace/name.
pub fn queue_order(pods: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
    let mut q: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| is_pending(p) && !is_gated(p))
        .cloned()
        .collect();
    q.sort_by(|a, b| {
        let prio = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        prio(b)
            .cmp(&prio(a))
            .then_with(|| {
                a.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
            })
            .then_with(|| a.metadata.namespace.cmp(&b.metadata.namespace))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    q
}

/// The condition a pod that fits nowhere should carry, or `None` when it already does.
pub fn unschedulable_condition(pod: &Pod, message: &str) -> Option<(String, String)> {
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    let same = current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message)
    });
    (!same).then(|| ("Unschedulable".to_string(), message.to_string()))
}

pub(crate) use filters::tolerates;
use filters::{
    insufficient_resources, inter_pod_affinity, node_affinity_ok, node_filters, topology_spread,
    untolerated_taint,
};
pub use io::{Config, run};

/// The filter plugins.
mod filters;
/// The IO loop.
mod io;

#[cfg(test)]
mod tests;
