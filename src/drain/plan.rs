//! The drain plan: target nodes → upgrade domains in order → per domain, the nodes to cordon
//! (and taint) and the pods in two phases, skipped, or blocking.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::generation::{Generation, GenerationTarget, compare_generations, node_generation};
use super::group_labels::GroupLabels;
use super::pdb::PdbIndex;
use super::rules::{self, DrainRules, Rules, Verdict};
use super::{Cluster, DrainError, check_domain_label, list, name, namespace, node_domain};
use super::{FastMap, FastSet};
use crate::labels::Selector;

/// The order in which domains are drained.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DomainOrder {
    /// By domain name (the label value).
    #[default]
    Name,
    /// Domains whose drain disrupts the fewest protected groups first (ties by name).
    FewestProtectedGroups,
    /// Domains holding the oldest generation first (by each domain's oldest target node; ties by
    /// name). Needs [`PlanOptions::generation`].
    OldestGeneration,
    /// Exactly this order; every domain with target nodes must be listed.
    Explicit(Vec<String>),
}

/// What to drain and how.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanOptions {
    /// The node label whose value names a node's upgrade domain.
    pub domain_label: String,
    /// kubectl's `--selector` for nodes ("" = every node).
    pub node_selector: String,
    /// Narrow the selected nodes to the outdated ones.
    pub generation: Option<Generation>,
    pub order: DomainOrder,
    /// Taint each target node (typically `NoSchedule`, so new work avoids an old generation).
    pub taint: Option<Taint>,
    /// The kinds of groups (e.g. LeaderWorkerSet's group key, KubeRay's multi-host replica name):
    /// protected pods of one group count once in [`DomainPlan::protected_groups`]. Empty: each
    /// protected pod counts.
    #[serde(skip_serializing_if = "GroupLabels::is_empty")]
    pub groups: GroupLabels,
    pub rules: DrainRules,
}

/// A pod, where it runs. The plan's pods borrow from the observed objects (`PodRef<&str>`: no
/// string copied per pod); [`PodRef::owned`] makes the owned one the engine keeps.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PodRef<S = String> {
    pub namespace: S,
    pub name: S,
    pub node: S,
}

impl<'a> PodRef<&'a str> {
    fn of(pod: &'a Pod) -> Self {
        PodRef {
            namespace: namespace(&pod.metadata),
            name: name(&pod.metadata),
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or_default(),
        }
    }

    pub fn owned(&self) -> PodRef {
        PodRef {
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
            node: self.node.to_string(),
        }
    }
}

impl<S: std::fmt::Display> std::fmt::Display for PodRef<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A phase-1 pod: the one PodDisruptionBudget that guards it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProtectedPod<'a> {
    pub pod: PodRef<&'a str>,
    pub pdb: &'a str,
    /// The pod's group (see [`PlanOptions::groups`]).
    pub group: Option<&'a str>,
}

/// Why a pod on a target node is left alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum SkipReason {
    /// `--pod-selector` does not select it.
    NotSelected,
    /// Deleting for longer than `--skip-wait-for-delete-timeout`.
    DeletingTooLong,
    /// `Succeeded` or `Failed`: holds nothing, and its logs stay.
    Finished,
    /// DaemonSet-managed, with `--ignore-daemonsets`.
    DaemonSet,
    /// A static pod's mirror.
    Mirror,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SkippedPod<'a> {
    pub pod: PodRef<&'a str>,
    pub reason: SkipReason,
}

/// Why a pod stops its domain's drain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum BlockReason {
    /// DaemonSet-managed, without `--ignore-daemonsets`.
    DaemonSet,
    /// Its DaemonSet is gone, without `--force`.
    DaemonSetMissing { name: String },
    /// `emptyDir` data, without `--delete-emptydir-data`.
    LocalStorage,
    /// No controller, without `--force`.
    Unmanaged,
    /// More than one PodDisruptionBudget selects it: the Eviction API refuses it (HTTP 500), and
    /// raygate never deletes around a budget.
    MultiplePdbs { pdbs: Vec<String> },
}

impl BlockReason {
    /// kubectl's message (raygate's for [`BlockReason::MultiplePdbs`]).
    pub fn message(&self) -> String {
        match self {
            BlockReason::DaemonSet => rules::DAEMON_SET_FATAL.to_string(),
            BlockReason::DaemonSetMissing { name } => {
                format!("daemonsets.apps {name:?} not found (use --force to override)")
            }
            BlockReason::LocalStorage => rules::LOCAL_STORAGE_FATAL.to_string(),
            BlockReason::Unmanaged => rules::UNMANAGED_FATAL.to_string(),
            BlockReason::MultiplePdbs { pdbs } => format!(
                "Pods with more than one PodDisruptionBudget ({}), which the eviction subresource \
                 does not support (make the budgets' selectors disjoint)",
                pdbs.join(", ")
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockedPod<'a> {
    pub pod: PodRef<&'a str>,
    pub reasons: Vec<BlockReason>,
}

/// A pod a flag let through, as kubectl warns about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Warning {
    DaemonSetMissing { name: String },
    LocalStorage,
    Unmanaged,
}

impl Warning {
    pub fn message(&self) -> String {
        match self {
            Warning::DaemonSetMissing { name } => format!("daemonsets.apps {name:?} not found"),
            Warning::LocalStorage => rules::LOCAL_STORAGE_WARNING.to_string(),
            Warning::Unmanaged => rules::UNMANAGED_WARNING.to_string(),
        }
    }
}

/// One target node: cordon it unless it already is, taint it unless it already has the taint.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeAction {
    pub name: String,
    pub generation: Option<String>,
    pub cordon: bool,
    pub taint: Option<Taint>,
}

/// The warning line for [`DomainPlan::tolerating`].
pub const TOLERATING_WARNING: &str = "Pods that tolerate the cordon (evicted once; a replacement \
     scheduled back onto these nodes is left there, as DaemonSet pods)";

/// One upgrade domain's drain.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainPlan<'a> {
    pub name: String,
    /// The oldest generation among its target nodes (with a generation option).
    pub generation: Option<String>,
    /// Distinct groups among the phase-1 pods (see [`PlanOptions::groups`]).
    pub protected_groups: usize,
    pub nodes: Vec<NodeAction>,
    /// Evicted first, one PDB each; the Eviction API may refuse them (429) until groups recover.
    pub phase1: Vec<ProtectedPod<'a>>,
    /// Evicted once phase 1 is gone; no PDB selects them.
    pub phase2: Vec<PodRef<&'a str>>,
    pub skipped: Vec<SkippedPod<'a>>,
    pub blocked: Vec<BlockedPod<'a>>,
    /// Pods evicted although a rule would have stopped them, because of a flag.
    pub warnings: Vec<(PodRef<&'a str>, Warning)>,
    /// Pods of phase 1 or 2 that tolerate the cordon (and the taint), e.g. with a toleration
    /// `operator: Exists` and no key: a replacement may be scheduled back onto the cordoned node.
    /// Each is evicted once; a replacement found there later is left alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerating: Vec<PodRef<&'a str>>,
}

impl DomainPlan<'_> {
    /// Whether a pod stops this domain's drain.
    pub fn is_blocked(&self) -> bool {
        !self.blocked.is_empty()
    }

    /// kubectl's error lines: `cannot delete <message>: ns/a, ns/b`, one per message.
    pub fn errors(&self) -> Vec<String> {
        let mut by_message: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for b in &self.blocked {
            for r in &b.reasons {
                by_message
                    .entry(r.message())
                    .or_default()
                    .push(b.pod.to_string());
            }
        }
        by_message
            .into_iter()
            .map(|(msg, pods)| {
                let prefix = match msg.to_lowercase().starts_with("cannot delete") {
                    true => "",
                    false => "cannot delete ",
                };
                format!("{prefix}{msg}: {}", pods.join(", "))
            })
            .collect()
    }

    /// kubectl's warning lines: `<message>: ns/a, ns/b` (DaemonSet pods skipped included).
    pub fn warning_lines(&self) -> Vec<String> {
        let mut by_message: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let skipped_ds = self
            .skipped
            .iter()
            .filter(|s| s.reason == SkipReason::DaemonSet)
            .map(|s| (rules::DAEMON_SET_WARNING.to_string(), &s.pod));
        let let_through = self.warnings.iter().map(|(pod, w)| (w.message(), pod));
        let tolerating = self
            .tolerating
            .iter()
            .map(|pod| (TOLERATING_WARNING.to_string(), pod));
        for (msg, pod) in skipped_ds.chain(let_through).chain(tolerating) {
            by_message.entry(msg).or_default().push(pod.to_string());
        }
        by_message
            .into_iter()
            .map(|(msg, pods)| format!("{msg}: {}", pods.join(", ")))
            .collect()
    }
}

/// The whole drain, domain by domain in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan<'a> {
    pub domains: Vec<DomainPlan<'a>>,
    /// The generation nodes are brought to (with a generation option).
    pub target_generation: Option<String>,
    /// Things the operator should know that change nothing (nodes left out, budgets ignored).
    pub notes: Vec<String>,
}

/// Plans the drain of `cluster` with `options`; `now` is only used for
/// `--skip-wait-for-delete-timeout`.
pub fn plan<'a>(
    cluster: &Cluster<'a>,
    options: &PlanOptions,
    now: Timestamp,
) -> Result<Plan<'a>, DrainError> {
    plan_of(cluster, options, now, None)
}

/// The plan of exactly the nodes named `nodes` (neither selector nor generation applies), as
/// the engine re-plans a domain it already chose; `None` when none of them exists.
pub(super) fn plan_nodes<'a>(
    cluster: &Cluster<'a>,
    options: &PlanOptions,
    now: Timestamp,
    nodes: &std::collections::BTreeSet<&str>,
) -> Result<Plan<'a>, DrainError> {
    plan_of(cluster, options, now, Some(nodes))
}

fn plan_of<'a>(
    cluster: &Cluster<'a>,
    options: &PlanOptions,
    now: Timestamp,
    only: Option<&std::collections::BTreeSet<&str>>,
) -> Result<Plan<'a>, DrainError> {
    if options.order == DomainOrder::OldestGeneration && options.generation.is_none() {
        return Err(DrainError::OrderNeedsGeneration);
    }
    check_domain_label(cluster.nodes, &options.domain_label)?;
    let rules = Rules {
        flags: &options.rules,
        pod_selector: Selector::parse_query(&options.rules.pod_selector)
            .map_err(DrainError::PodSelector)?,
        now,
    };
    let targets = match only {
        None => select_targets(cluster.nodes, options)?,
        Some(names) => {
            let nodes: Vec<&Node> = cluster
                .nodes
                .iter()
                .filter(|n| names.contains(name(&n.metadata)))
                .collect();
            if nodes.is_empty() {
                return Err(DrainError::NoNodesMatched {
                    what: "the domain's nodes".into(),
                });
            }
            Targets {
                nodes,
                generation: None,
                notes: Vec::new(),
            }
        }
    };
    let domains = by_domain(&targets.nodes, &options.domain_label)?;
    let context = DomainContext {
        options,
        rules,
        pods: pods_by_node(cluster.pods, &targets.nodes),
        pdbs: PdbIndex::new(cluster.pdbs),
        daemon_sets: cluster.daemon_set_keys(),
    };
    let mut notes = targets.notes;
    if !context.pdbs.invalid.is_empty() {
        notes.push(format!(
            "PodDisruptionBudget(s) with a selector that does not parse protect nothing (the \
             Eviction API skips them): {}",
            list(&context.pdbs.invalid, 10)
        ));
    }
    let mut domains: Vec<DomainPlan<'a>> = domains
        .into_iter()
        .map(|(name, nodes)| context.domain(name, &nodes))
        .collect();
    order_domains(&mut domains, cluster.nodes, options, &mut notes)?;
    Ok(Plan {
        domains,
        target_generation: targets.generation,
        notes,
    })
}

struct Targets<'a> {
    nodes: Vec<&'a Node>,
    generation: Option<String>,
    notes: Vec<String>,
}

fn select_targets<'a>(nodes: &'a [Node], options: &PlanOptions) -> Result<Targets<'a>, DrainError> {
    let selector =
        Selector::parse_query(&options.node_selector).map_err(DrainError::NodeSelector)?;
    let selected: Vec<&Node> = nodes
        .iter()
        .filter(|n| selector.matches(n.metadata.labels.as_ref()))
        .collect();
    let described = format!("node selector {:?}", options.node_selector);
    let Some(generation) = &options.generation else {
        if selected.is_empty() {
            return Err(DrainError::NoNodesMatched { what: described });
        }
        return Ok(Targets {
            nodes: selected,
            generation: None,
            notes: Vec::new(),
        });
    };
    let source = &generation.source;
    let target = match &generation.target {
        GenerationTarget::Value(v) => v.clone(),
        GenerationTarget::Newest => selected
            .iter()
            .filter_map(|n| node_generation(n, source))
            .max_by(|a, b| compare_generations(a, b))
            .ok_or_else(|| DrainError::NoGeneration {
                from: source.to_string(),
            })?
            .to_string(),
    };
    let unknown: Vec<String> = selected
        .iter()
        .filter(|n| node_generation(n, source).is_none())
        .map(|n| name(&n.metadata).to_string())
        .collect();
    let outdated: Vec<&Node> = selected
        .into_iter()
        .filter(|n| node_generation(n, source).is_some_and(|g| g != target))
        .collect();
    if outdated.is_empty() {
        return Err(DrainError::NoNodesMatched {
            what: format!("{described}: every selected node is at {source} = {target}"),
        });
    }
    let mut notes = Vec::new();
    if !unknown.is_empty() {
        notes.push(format!(
            "{} selected node(s) have no {source} and are left alone: {}",
            unknown.len(),
            list(&unknown, 10)
        ));
    }
    Ok(Targets {
        nodes: outdated,
        generation: Some(target),
        notes,
    })
}

fn by_domain<'a>(
    nodes: &[&'a Node],
    key: &str,
) -> Result<BTreeMap<&'a str, Vec<&'a Node>>, DrainError> {
    let mut domains: BTreeMap<&str, Vec<&Node>> = BTreeMap::new();
    let mut missing = Vec::new();
    for &node in nodes {
        match node_domain(node, key) {
            Some(d) => domains.entry(d).or_default().push(node),
            None => missing.push(name(&node.metadata).to_string()),
        }
    }
    if missing.is_empty() {
        return Ok(domains);
    }
    missing.sort();
    Err(DrainError::NodesWithoutDomain {
        key: key.to_string(),
        count: missing.len(),
        nodes: missing.into_iter().take(10).collect(),
    })
}

/// The pods bound to the target nodes, by node name (one lookup per pod).
fn pods_by_node<'a>(pods: &'a [Pod], targets: &[&'a Node]) -> FastMap<&'a str, Vec<&'a Pod>> {
    let mut by_node: FastMap<&str, Vec<&Pod>> = FastMap::default();
    by_node.reserve(targets.len());
    for node in targets {
        by_node.insert(name(&node.metadata), Vec::new());
    }
    for pod in pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if let Some(on_node) = node.and_then(|n| by_node.get_mut(n)) {
            on_node.push(pod);
        }
    }
    by_node
}

struct DomainContext<'a, 'o> {
    options: &'o PlanOptions,
    rules: Rules<'o>,
    pods: FastMap<&'a str, Vec<&'a Pod>>,
    pdbs: PdbIndex<'a>,
    daemon_sets: Option<HashSet<(&'a str, &'a str)>>,
}

impl<'a> DomainContext<'a, '_> {
    fn domain(&self, domain: &str, nodes: &[&'a Node]) -> DomainPlan<'a> {
        let mut plan = DomainPlan {
            name: domain.to_string(),
            ..DomainPlan::default()
        };
        let source = self.options.generation.as_ref().map(|g| &g.source);
        for node in nodes {
            let generation = source.and_then(|s| node_generation(node, s));
            plan.nodes.push(self.node_action(node, generation));
            for pod in self.pods.get(name(&node.metadata)).into_iter().flatten() {
                self.place(pod, &mut plan);
            }
        }
        plan.generation = plan
            .nodes
            .iter()
            .filter_map(|n| n.generation.clone())
            .min_by(|a, b| compare_generations(a, b));
        plan.protected_groups = plan
            .phase1
            .iter()
            .map(|p| match p.group {
                Some(g) => (p.pod.namespace, g),
                None => (p.pod.namespace, p.pod.name),
            })
            .collect::<FastSet<_>>()
            .len();
        sort(&mut plan);
        plan
    }

    fn node_action(&self, node: &Node, generation: Option<&str>) -> NodeAction {
        let spec = node.spec.as_ref();
        let has_taint = |t: &Taint| {
            spec.and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|x| x.key == t.key && x.effect == t.effect))
        };
        NodeAction {
            name: name(&node.metadata).to_string(),
            generation: generation.map(str::to_string),
            cordon: !spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taint: self.options.taint.clone().filter(|t| !has_taint(t)),
        }
    }

    /// Puts one pod into phase 1, phase 2, skipped or blocked.
    fn place(&self, pod: &'a Pod, plan: &mut DomainPlan<'a>) {
        let ns = namespace(&pod.metadata);
        let exists = |ds: &str| {
            self.daemon_sets
                .as_ref()
                .is_none_or(|s| s.contains(&(ns, ds)))
        };
        let verdict = self.rules.verdict(pod, exists);
        let pod_ref = PodRef::of(pod);
        let (mut reasons, warnings) = match verdict {
            Verdict::Skip(reason) => {
                plan.skipped.push(SkippedPod {
                    pod: pod_ref,
                    reason,
                });
                return;
            }
            Verdict::Block(reasons) => (reasons, Vec::new()),
            Verdict::Evict(warnings) => (Vec::new(), warnings),
        };
        let (pdb, count) = self.pdbs.first_matching(pod);
        if count > 1 {
            let pdbs = self.pdbs.matching(pod);
            let pdbs = pdbs.iter().map(|p| p.name().to_string()).collect();
            reasons.push(BlockReason::MultiplePdbs { pdbs });
        }
        if !reasons.is_empty() {
            plan.blocked.push(BlockedPod {
                pod: pod_ref,
                reasons,
            });
            return;
        }
        let warnings = warnings.into_iter().map(|w| (pod_ref.clone(), w));
        plan.warnings.extend(warnings);
        if rules::tolerates_cordon(pod, self.options.taint.as_ref()) {
            plan.tolerating.push(pod_ref.clone());
        }
        match pdb {
            None => plan.phase2.push(pod_ref),
            Some(pdb) => plan.phase1.push(ProtectedPod {
                group: self.group_of(pod),
                pdb: pdb.name(),
                pod: pod_ref,
            }),
        }
    }

    fn group_of(&self, pod: &'a Pod) -> Option<&'a str> {
        self.options.groups.group(pod)
    }
}

/// Each list by pod. A pod is in one list once, so the keys are distinct and an unstable sort
/// gives the same order as a stable one, without its buffer.
fn sort(plan: &mut DomainPlan<'_>) {
    plan.phase1.sort_unstable_by(|a, b| a.pod.cmp(&b.pod));
    plan.phase2.sort_unstable();
    plan.skipped.sort_unstable_by(|a, b| a.pod.cmp(&b.pod));
    plan.blocked.sort_unstable_by(|a, b| a.pod.cmp(&b.pod));
    plan.warnings.sort_by(|a, b| a.0.cmp(&b.0));
    plan.tolerating.sort_unstable();
}

fn order_domains(
    domains: &mut [DomainPlan<'_>],
    nodes: &[Node],
    options: &PlanOptions,
    notes: &mut Vec<String>,
) -> Result<(), DrainError> {
    // `domains` arrive sorted by name; the sorts below are stable, so ties stay by name.
    match &options.order {
        DomainOrder::Name => {}
        DomainOrder::FewestProtectedGroups => domains.sort_by_key(|d| d.protected_groups),
        DomainOrder::OldestGeneration => domains.sort_by(|a, b| {
            let (a, b) = (a.generation.as_deref(), b.generation.as_deref());
            compare_generations(a.unwrap_or_default(), b.unwrap_or_default())
        }),
        DomainOrder::Explicit(order) => explicit_order(domains, nodes, order, options, notes)?,
    }
    Ok(())
}

fn explicit_order(
    domains: &mut [DomainPlan<'_>],
    nodes: &[Node],
    order: &[String],
    options: &PlanOptions,
    notes: &mut Vec<String>,
) -> Result<(), DrainError> {
    let key = &options.domain_label;
    let known: HashSet<&str> = nodes.iter().filter_map(|n| node_domain(n, key)).collect();
    if let Some(unknown) = order.iter().find(|d| !known.contains(d.as_str())) {
        return Err(DrainError::UnknownDomain {
            key: key.clone(),
            domain: unknown.clone(),
        });
    }
    let position: HashMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, d)| (d.as_str(), i))
        .collect();
    let unlisted: Vec<String> = domains
        .iter()
        .filter(|d| !position.contains_key(d.name.as_str()))
        .map(|d| d.name.clone())
        .collect();
    if !unlisted.is_empty() {
        return Err(DrainError::DomainsNotListed { domains: unlisted });
    }
    let planned: HashSet<&str> = domains.iter().map(|d| d.name.as_str()).collect();
    let idle: Vec<String> = order
        .iter()
        .filter(|d| !planned.contains(d.as_str()))
        .cloned()
        .collect();
    if !idle.is_empty() {
        notes.push(format!(
            "listed domain(s) with no target node, nothing to drain: {}",
            idle.join(", ")
        ));
    }
    domains.sort_by_key(|d| position.get(d.name.as_str()).copied().unwrap_or(usize::MAX));
    Ok(())
}
