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

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinityTerm, Taint, Toleration,
};
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

/// Whether one of `tols` tolerates `taint` (`Toleration.ToleratesTaint`).
pub(crate) fn tolerates(tols: &[Toleration], taint: &Taint) -> bool {
    tols.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key = t.key.as_deref().unwrap_or_default();
        let key_ok = key.is_empty() || key == taint.key;
        let value_ok = match t.operator.as_deref() {
            Some("Exists") => true,
            None | Some("") | Some("Equal") => {
                !key.is_empty()
                    && t.value.as_deref().unwrap_or_default()
                        == taint.value.as_deref().unwrap_or_default()
            }
            _ => false,
        };
        // an empty key with `Exists` tolerates everything
        effect_ok && key_ok && value_ok
    })
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let vals = r.values.as_deref().unwrap_or_default();
    let num = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| vals.contains(v)),
        "NotIn" => value.is_none_or(|v| !vals.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => match (
            value.and_then(|v| num(v)),
            vals.first().and_then(|v| num(v)),
        ) {
            (Some(a), Some(b)) => {
                if r.operator == "Gt" {
                    a > b
                } else {
                    a < b
                }
            }
            _ => false,
        },
        _ => false,
    }
}

fn term_matches(t: &NodeSelectorTerm, node: &NodeInfo) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false; // an empty term matches no objects
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, node.labels.get(&r.key)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(&node.name)))
}

/// nodeSelector and required node affinity (`NodeAffinity` filter).
fn node_affinity_ok(pod: &Pod, node: &NodeInfo) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    selector_ok
        && required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term_matches(t, node)))
}

fn untolerated_taint<'a>(tols: &[Toleration], node: &'a NodeInfo) -> Option<&'a Taint> {
    node.taints
        .iter()
        .find(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerates(tols, t))
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
        let (affinity_counts, anti_counts, existing_anti) = counts;
        // NodeUnschedulable
        if n.unschedulable {
            let t = Taint {
                key: UNSCHEDULABLE_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            };
            if !tolerates(tols, &t) {
                return vec![R_UNSCHEDULABLE.into()];
            }
        }
        // TaintToleration
        if let Some(t) = untolerated_taint(tols, n) {
            return vec![format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or_default()
            )];
        }
        // NodeAffinity
        if !node_affinity_ok(pod, n) {
            return vec![R_NODE_AFFINITY.into()];
        }
        // NodeResourcesFit
        let mut insufficient = vec![];
        if let Some(max) = n.allocatable.get("pods")
            && (n.pods.len() as i128 + 1) * 1_000_000_000 > *max
        {
            insufficient.push(R_TOO_MANY_PODS.to_string());
        }
        for (r, want) in request {
            if *want == 0 {
                continue;
            }
            let have = n.allocatable.get(r).copied().unwrap_or(0)
                - n.requested.get(r).copied().unwrap_or(0);
            if *want > have {
                insufficient.push(format!("Insufficient {r}"));
            }
        }
        if !insufficient.is_empty() {
            return insufficient;
        }
        // PodTopologySpread
        if spreads.iter().any(|s| !n.labels.contains_key(&s.key)) {
            return vec![R_SPREAD_LABEL.into()];
        }
        for s in spreads {
            let global_min = if (s.counts.len() as i64) < s.min_domains {
                0
            } else {
                s.counts.values().copied().min().unwrap_or(0)
            };
            let here = s.counts.get(&n.labels[&s.key]).copied().unwrap_or(0);
            if here + s.self_match - global_min > s.max_skew {
                return vec![R_SPREAD.into()];
            }
        }
        // InterPodAffinity: existing pods' anti-affinity, then the pod's, then its affinity
        if n.labels.iter().any(|(k, v)| {
            existing_anti
                .get(&(k.clone(), v.clone()))
                .is_some_and(|c| *c > 0)
        }) {
            return vec![R_EXISTING_ANTI.into()];
        }
        for t in &me.anti {
            if let Some(v) = n.labels.get(&t.topology_key)
                && anti_counts
                    .get(&(t.topology_key.clone(), v.clone()))
                    .is_some_and(|c| *c > 0)
            {
                return vec![R_ANTI.into()];
            }
        }
        let mut pods_exist = true;
        for t in affinity {
            match n.labels.get(&t.topology_key) {
                None => return vec![R_AFFINITY.into()],
                Some(v) => {
                    if affinity_counts
                        .get(&(t.topology_key.clone(), v.clone()))
                        .is_none_or(|c| *c <= 0)
                    {
                        pods_exist = false;
                    }
                }
            }
        }
        // the first pod of a series with affinity to itself may go anywhere
        if !(pods_exist || affinity_counts.is_empty() && matches_own_affinity) {
            return vec![R_AFFINITY.into()];
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

pub use io::{Config, run};

mod io {
    use raygate::runtime::SortedState;
    use std::sync::Arc;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Node, Pod};
    use k8s_openapi::jiff::Timestamp;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use kube::runtime::reflector::{ObjectRef, Store};
    use serde_json::json;

    use super::{Snapshot, queue_order, unschedulable_condition};
    use crate::Clock;
    use crate::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};

    /// Scheduler settings.
    #[derive(Clone, Debug)]
    pub struct Config {
        /// The scheduler's name (`spec.schedulerName`); pods naming another are left alone.
        pub name: String,
        /// How often unschedulable pods are retried without a cluster event (the queue's
        /// `podMaxInUnschedulablePodsDuration` flush is 5 min).
        pub retry: Duration,
    }

    impl Default for Config {
        fn default() -> Self {
            Config {
                name: "default-scheduler".into(),
                retry: Duration::from_secs(300),
            }
        }
    }

    /// Runs the scheduler until `shutdown`.
    pub async fn run(
        client: kube::Client,
        clock: Clock,
        config: Config,
        shutdown: impl Into<Shutdown>,
    ) {
        let mut c = Caches::default();
        let (pods, nodes) = (c.all(&client), c.all(&client));
        let actor = Scheduler {
            client,
            clock: clock.clone(),
            config,
            pods,
            nodes,
        };
        support::drive(actor, c, clock, Duration::ZERO, shutdown.into()).await;
    }

    struct Scheduler {
        client: kube::Client,
        clock: Clock,
        config: Config,
        pods: Store<Pod>,
        nodes: Store<Node>,
    }

    impl Actor for Scheduler {
        type Error = std::convert::Infallible;

        async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Self::Error> {
            let bound = pass(
                &self.client,
                &self.clock,
                &self.config,
                &self.pods.sorted_state(),
                &self.nodes.sorted_state(),
            )
            .await;
            // kube-scheduler's assume cache: the next pass waits until the pod cache shows every
            // binding of this one, else it would count those pods as pending (no node, no
            // requests) and place others into the room they took (a node over its allocatable)
            for (key, uid) in bound {
                let pods = self.pods.clone();
                expect.until(move || {
                    pods.get(&key).is_none_or(|p| {
                        p.metadata.uid.as_deref() != Some(uid.as_str())
                            || p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
                    })
                });
            }
            // unschedulable pods are retried on every change and after `retry`
            Ok(Some(now + self.config.retry))
        }
    }

    /// One scheduling pass; the pods it bound (cache key, uid).
    async fn pass(
        client: &kube::Client,
        clock: &Clock,
        config: &Config,
        pods: &[Arc<Pod>],
        nodes: &[Arc<Node>],
    ) -> Vec<(ObjectRef<Pod>, String)> {
        let mut bound = vec![];
        let mut snapshot = Snapshot::new(nodes.iter().map(|n| &**n), pods.iter().map(|p| &**p));
        for pod in queue_order(pods) {
            let spec_name = pod.spec.as_ref().and_then(|s| s.scheduler_name.clone());
            if spec_name.as_deref().unwrap_or("default-scheduler") != config.name {
                continue;
            }
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            match snapshot.place(&pod) {
                Ok(node) => {
                    let binding = json!({
                        "apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": name, "namespace": ns},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                    });
                    match api
                        .create_subresource::<_, serde_json::Value>(
                            "binding",
                            &name,
                            &PostParams::default(),
                            &binding,
                        )
                        .await
                    {
                        Ok(_) => {
                            tracing::debug!(pod = %name, %node, "bound");
                            snapshot.assume(&pod, &node);
                            bound.push((
                                ObjectRef::from_obj(&*pod),
                                pod.metadata.uid.clone().unwrap_or_default(),
                            ));
                        }
                        Err(e) => tracing::debug!(pod = %name, %node, error = %e, "binding failed"),
                    }
                }
                Err(fit) => {
                    let message = fit.to_string();
                    if let Some((reason, message)) = unschedulable_condition(&pod, &message) {
                        tracing::debug!(pod = %name, %message, "unschedulable");
                        let mut cond = json!({
                            "type": "PodScheduled", "status": "False",
                            "reason": reason, "message": message,
                        });
                        // the transition time moves only when the status does
                        let was_false = pod
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
                            .is_some_and(|c| c.status == "False");
                        if !was_false {
                            cond["lastTransitionTime"] = json!(clock.now_rfc3339());
                        }
                        let patch = json!({"status": {"conditions": [cond]}});
                        if let Err(e) = api
                            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                            .await
                        {
                            tracing::debug!(pod = %name, error = %e, "writing PodScheduled failed");
                        }
                    }
                }
            }
        }
        bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, ud: &str, extra: serde_json::Value) -> Node {
        let mut v = json!({"metadata": {"name": name, "labels": {"ud": ud}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "10"}}});
        if let Some(spec) = extra.get("spec") {
            v["spec"] = spec.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, labels: serde_json::Value, spec: serde_json::Value) -> Pod {
        let mut s = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]});
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": s}),
        )
        .unwrap()
    }

    fn bound(mut p: Pod, node: &str) -> Pod {
        p.spec.as_mut().unwrap().node_name = Some(node.into());
        p
    }

    #[test]
    fn requests_are_compared_exactly_and_the_fit_error_reads_as_kube_scheduler_s() {
        // framework.FitError.Error(): "0/N nodes are available: " + sorted "count reason" + "."
        let nodes = [
            node("a", "1", json!({})),
            node(
                "b",
                "1",
                json!({"spec": {"taints": [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}]}}),
            ),
            node("c", "2", json!({"spec": {"unschedulable": true}})),
        ];
        let full = bound(
            pod(
                "x",
                json!({}),
                json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "3001m"}}}]}),
            ),
            "a",
        );
        let s = Snapshot::new(&nodes, [&full]);
        let p = pod("p", json!({}), json!({}));
        let err = s.place(&p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {gpu: h100}, 1 node(s) were unschedulable."
        );
        // 999m fits in what 3001m left
        let small = pod(
            "q",
            json!({}),
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "999m"}}}]}),
        );
        assert_eq!(s.place(&small).unwrap(), "a");
        // tolerations open the tainted and the cordoned node
        let tol = pod(
            "t",
            json!({}),
            json!({"tolerations": [{"operator": "Exists"}]}),
        );
        assert_eq!(s.place(&tol).unwrap(), "b", "least allocated, then name");
    }

    #[test]
    fn node_selector_and_required_node_affinity_filter_nodes() {
        let nodes = [node("a", "1", json!({})), node("b", "2", json!({}))];
        let s = Snapshot::new(&nodes, []);
        let sel = pod("p", json!({}), json!({"nodeSelector": {"ud": "2"}}));
        assert_eq!(s.place(&sel).unwrap(), "b");
        let aff = pod(
            "p",
            json!({}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "ud", "operator": "NotIn", "values": ["1", "2"]}]}]}}}}),
        );
        assert_eq!(
            s.place(&aff).unwrap_err().to_string(),
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        );
    }

    #[test]
    fn the_first_pod_of_a_self_affine_series_may_go_anywhere_then_the_rest_follow_it() {
        // interpodaffinity.satisfyPodAffinity: no pod matches anywhere and the pod matches its
        // own terms → allowed
        let nodes = [node("a", "1", json!({})), node("b", "2", json!({}))];
        let term = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}, "matchLabelKeys": ["group"], "topologyKey": "ud"}]}}});
        let first = pod("p0", json!({"app": "x", "group": "g1"}), term.clone());
        let s = Snapshot::new(&nodes, []);
        assert!(s.place(&first).is_ok());
        let placed = bound(first, "b");
        let s = Snapshot::new(&nodes, [&placed]);
        let second = pod("p1", json!({"app": "x", "group": "g1"}), term.clone());
        assert_eq!(s.place(&second).unwrap(), "b");
        // another group: matchLabelKeys makes the selector group=g2, which matches no pod, and
        // the pod matches its own term → anywhere
        let other = pod("q0", json!({"app": "x", "group": "g2"}), term);
        assert!(s.place(&other).is_ok());
    }

    #[test]
    fn anti_affinity_is_checked_both_ways() {
        let nodes = [node("a", "1", json!({})), node("b", "2", json!({}))];
        let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"role": "leader"}}, "topologyKey": "ud"}]}}});
        let existing = bound(pod("l0", json!({"role": "leader"}), anti.clone()), "a");
        let s = Snapshot::new(&nodes, [&existing]);
        let plain = pod("l1", json!({"role": "leader"}), json!({}));
        assert_eq!(
            s.place(&plain).unwrap(),
            "b",
            "the existing pod's anti-affinity keeps it out of ud 1"
        );
        let existing_plain = bound(pod("l0", json!({"role": "leader"}), json!({})), "a");
        let s = Snapshot::new(&nodes, [&existing_plain]);
        let with_anti = pod("l1", json!({"role": "leader"}), anti);
        assert_eq!(s.place(&with_anti).unwrap(), "b");
    }

    #[test]
    fn topology_spread_do_not_schedule_bounds_the_skew() {
        // podtopologyspread Filter: matchNum + selfMatch - minMatchNum <= maxSkew
        let nodes = [
            node("a", "1", json!({})),
            node("b", "2", json!({})),
            node("c", "2", json!({})),
        ];
        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "ud",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"role": "leader"}}}]});
        let l0 = bound(pod("l0", json!({"role": "leader"}), json!({})), "b");
        let s = Snapshot::new(&nodes, [&l0]);
        let p = pod("l1", json!({"role": "leader"}), spread.clone());
        assert_eq!(s.place(&p).unwrap(), "a");
        let mut only_ud2 = p.clone();
        only_ud2.spec.as_mut().unwrap().node_selector =
            Some([("ud".to_string(), "2".to_string())].into());
        // nodeAffinityPolicy Honor: ud 1 is not a domain for this pod, so ud 2 is the minimum
        assert!(s.place(&only_ud2).is_ok());
        // a node without the key is no domain; minDomains 2 with one domain makes the global
        // minimum 0 (skew on ud 2 = 1 + 1 - 0 > 1)
        let mut unlabeled = nodes.to_vec();
        unlabeled[0].metadata.labels = None;
        let s = Snapshot::new(&unlabeled, [&l0]);
        assert_eq!(s.place(&p).unwrap(), "c", "one domain: its own minimum");
        let mut min2 = p.clone();
        min2.spec
            .as_mut()
            .unwrap()
            .topology_spread_constraints
            .as_mut()
            .unwrap()[0]
            .min_domains = Some(2);
        let err = s.place(&min2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label), 2 node(s) didn't match pod topology spread constraints."
        );
    }

    #[test]
    fn gated_bound_and_deleting_pods_are_not_queued_and_priority_goes_first() {
        let mut gated = pod("g", json!({}), json!({"schedulingGates": [{"name": "x"}]}));
        gated.metadata.creation_timestamp = None;
        let low = pod("b-low", json!({}), json!({"priority": 1}));
        let high = pod("c-high", json!({}), json!({"priority": 100}));
        let bound_pod = bound(pod("a", json!({}), json!({})), "n");
        let q = queue_order(&[
            Arc::new(gated),
            Arc::new(low),
            Arc::new(high),
            Arc::new(bound_pod),
        ]);
        let names: Vec<_> = q.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["c-high", "b-low"]);
    }
}
