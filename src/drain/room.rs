//! The fixed-capacity dead end (pure): a domain whose drain can never finish because the groups it
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
//! The health gate's own dead end ([`gate_dead_ends`]): with hand-off `None` a drained domain's
//! nodes stay cordoned, and its health gate waits until every group evicted from it is Ready
//! again, so every group of the domains drained so far must fit outside them (outside the rollout
//! with `taintOutdated`), whatever its budget tolerates. Where it cannot, the gate fails after
//! `healthCheckRetryTimeout`. Counted the same optimistic way. [`NoRoom`] holds both findings.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use serde::Serialize;

use super::pdb::{self, PdbIndex};
use super::rules::tolerates;
use super::{Cluster, FastMap, FastSet, Plan, PlanOptions, is_finished, list, name, namespace};
use crate::quantity::{Quantity, Resources};

/// Whether the drained domains' nodes come back to take pods (a `Reboot` or `Replace` hand-off)
/// or stay cordoned (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returns {
    /// Hand-off `None`: drained nodes stay cordoned (and tainted).
    Never,
    /// Hand-off `Reboot` or `Replace`: a handed-off domain's capacity comes back.
    AfterHandOff,
}

/// One domain that cannot be drained: the budget whose refusals would never end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadEnd {
    pub domain: String,
    /// `ns/name` of the budget.
    pub pdb: String,
    /// The domain's groups under that budget (group label values, or pod names without one).
    pub groups: Vec<String>,
    /// What the budget tolerates down at once with every group healthy.
    pub tolerated: i64,
    /// Groups that must be Ready elsewhere before the domain's last protected pod can go.
    pub must_move: usize,
    /// Groups of the same budget moved out of earlier domains (hand-off `None`) that take room
    /// first.
    pub moved_before: usize,
    /// How many such groups the room outside holds (before the earlier domains' groups).
    pub room: usize,
    /// What one group requests (`pods` counted too).
    pub group_requests: String,
}

impl DeadEnd {
    /// What is wrong, in words (the controller's `NoRoomToRecover` message and the CLI's).
    pub fn problem(&self) -> String {
        let g = self.groups.len();
        let left = self.room.saturating_sub(self.moved_before);
        let earlier = match self.moved_before {
            0 => String::new(),
            n => format!(
                ", of which the {n} group(s) moved out of earlier domains (which stay cordoned) \
                 take {}",
                n.min(self.room)
            ),
        };
        format!(
            "upgrade domain {} holds {g} group(s) under PodDisruptionBudget {} ({}), which \
             tolerates {} down: {} of them must be Ready elsewhere before the domain's last \
             protected pod can be evicted, but with taintOutdated every outdated node refuses new \
             pods and the nodes outside the rollout have room for {} such group(s){earlier} (one \
             group requests {}); the evictions would be refused (429) until the domain times out",
            self.domain,
            self.pdb,
            list(&self.groups, 3),
            self.tolerated,
            self.must_move,
            left,
            self.group_requests,
        )
    }

    /// The ways out.
    pub fn fix(&self) -> String {
        let short = (self.must_move + self.moved_before).saturating_sub(self.room);
        format!(
            "add capacity outside the rollout (a node of the new generation) for {short} more \
             group(s), or set spec.taintOutdated to false, or let the budget tolerate {} down \
             (maxUnavailable, or a lower minAvailable)",
            self.tolerated + short as i64,
        )
    }
}

impl std::fmt::Display for DeadEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}. Fix: {}", self.problem(), self.fix())
    }
}

/// The one-line summary of `dead` the controller's `NoRoomToRecover` condition and the CLI's
/// refusal start with (each domain's [`DeadEnd`] text, `|`-separated).
pub fn no_room_message(dead: &[DeadEnd]) -> String {
    let each: Vec<String> = dead.iter().map(ToString::to_string).collect();
    format!(
        "{} upgrade domain(s) cannot be drained, their groups would have nowhere to run: {}",
        dead.len(),
        each.join(" | ")
    )
}

/// The domains of `plan` whose drain cannot finish for want of room (see the module's doc), in
/// plan order. Empty without a taint in `options` (nothing predicted).
pub fn dead_ends(
    cluster: &Cluster,
    plan: &Plan,
    options: &PlanOptions,
    returns: Returns,
) -> Vec<DeadEnd> {
    let Some(taint) = options.taint.as_ref() else {
        return Vec::new();
    };
    let live: Vec<&Pod> = cluster.pods.iter().filter(|p| !is_finished(p)).collect();
    let index = PdbIndex::new(cluster.pdbs);
    let mut selected: FastMap<(&str, &str), i64> = FastMap::default();
    for pod in &live {
        for p in index.matching(pod) {
            *selected
                .entry((namespace(&pod.metadata), p.name()))
                .or_default() += 1;
        }
    }
    let group_label = options.group_label.as_deref();
    let mut group_requests: FastMap<(&str, &str), Resources> = FastMap::default();
    if let Some(label) = group_label {
        for pod in &live {
            if let Some(v) = pod.metadata.labels.as_ref().and_then(|l| l.get(label)) {
                let r = group_requests
                    .entry((namespace(&pod.metadata), v.as_str()))
                    .or_default();
                r.add(&requests(pod));
            }
        }
    }
    let pods_by_name: FastMap<(&str, &str), &Pod> = live
        .iter()
        .map(|p| ((namespace(&p.metadata), name(&p.metadata)), *p))
        .collect();
    let target: BTreeSet<&str> = plan
        .domains
        .iter()
        .flat_map(|d| d.nodes.iter().map(|n| n.name.as_str()))
        .collect();
    let used = used_by_node(&live);
    // groups of each budget moved out of the domains drained so far (hand-off None)
    let mut moved: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (k, domain) in plan.domains.iter().enumerate() {
        // the domain's groups by budget: (ns, budget) → group → its representative
        let mut by_pdb: BTreeMap<(&str, &str), BTreeMap<&str, &Pod>> = BTreeMap::new();
        for p in &domain.phase1 {
            let Some(pod) = pods_by_name.get(&(p.pod.namespace, p.pod.name)) else {
                continue;
            };
            let group = p.group.unwrap_or(p.pod.name);
            by_pdb
                .entry((p.pod.namespace, p.pdb))
                .or_default()
                .entry(group)
                .or_insert(pod);
        }
        let returned: BTreeSet<&str> = match returns {
            Returns::Never => BTreeSet::new(),
            Returns::AfterHandOff => plan.domains[..k]
                .iter()
                .flat_map(|d| d.nodes.iter().map(|n| n.name.as_str()))
                .collect(),
        };
        for ((ns, pdb_name), groups) in by_pdb {
            let key = (ns.to_string(), pdb_name.to_string());
            let moved_before = moved.get(&key).copied().unwrap_or(0);
            if returns == Returns::Never {
                *moved.entry(key).or_default() += groups.len();
            }
            let Some(budget) = cluster
                .pdbs
                .iter()
                .find(|b| namespace(&b.metadata) == ns && name(&b.metadata) == pdb_name)
            else {
                continue;
            };
            let count = selected.get(&(ns, pdb_name)).copied().unwrap_or(0);
            // a budget that never allows a disruption is the preflight's finding, not this one
            let Some(tolerated) = pdb::tolerated(budget, count).filter(|t| *t > 0) else {
                continue;
            };
            let must_move = groups
                .len()
                .saturating_sub(usize::try_from(tolerated).unwrap_or(0));
            if must_move == 0 {
                continue;
            }
            let Some((group, rep)) = groups.iter().next() else {
                continue;
            };
            let need = match group_label.and_then(|_| group_requests.get(&(ns, *group))) {
                Some(r) => with_pods(r.clone(), group_pods(&live, group_label, ns, group)),
                None => with_pods(requests(rep), 1),
            };
            let mut free = Resources::new();
            for node in cluster.nodes {
                let n = name(&node.metadata);
                let candidate = (!target.contains(n) && schedulable(node, rep, None))
                    || (returned.contains(n) && schedulable(node, rep, Some(taint)));
                if candidate {
                    // a node handed off comes back empty (optimistic: its pods' groups may
                    // come back to it too)
                    let pods = if returned.contains(n) {
                        None
                    } else {
                        used.get(n)
                    };
                    free.add(&free_on(node, pods));
                }
            }
            let Some(room) = slots(&free, &need) else {
                continue;
            };
            if room < must_move + moved_before {
                out.push(DeadEnd {
                    domain: domain.name.clone(),
                    pdb: format!("{ns}/{pdb_name}"),
                    groups: groups.keys().map(|g| g.to_string()).collect(),
                    tolerated,
                    must_move,
                    moved_before,
                    room,
                    group_requests: describe(&need),
                });
            }
        }
    }
    out
}

/// One upgrade domain whose health gate cannot pass (hand-off `None`): the drained nodes stay
/// cordoned, so every group the gate waits for must run again on nodes outside the domains drained
/// so far (outside the rollout with `taintOutdated`), and those nodes cannot hold them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateDeadEnd {
    pub domain: String,
    /// The domain's groups the health gate waits for (group label values).
    pub groups: Vec<String>,
    /// Groups moved out of earlier domains (which stay cordoned) that need the same room.
    pub moved_before: usize,
    /// `taintOutdated`: the later domains' outdated nodes refuse the groups too.
    pub taint_outdated: bool,
    /// With `taintOutdated`: whether the later domains' nodes would hold the groups without it.
    pub room_without_taint: bool,
    /// What those groups (the domain's and the earlier ones) request in all (`pods` counted).
    pub requests: String,
    /// What is free on the nodes they may run on.
    pub free: String,
    /// The requests the free room lacks.
    pub short: String,
    /// How many such groups the room holds, when every one of them requests the same.
    pub room: Option<usize>,
    /// What one group requests, when every one of them requests the same.
    pub group_requests: Option<String>,
}

impl GateDeadEnd {
    fn outside(&self) -> &'static str {
        match self.taint_outdated {
            true => "the rollout",
            false => "the domains drained so far",
        }
    }

    /// What is wrong, in words (the controller's `NoRoomToRecover` message and the CLI's).
    pub fn problem(&self) -> String {
        let g = self.groups.len();
        let taint = match self.taint_outdated {
            true => " and with taintOutdated every outdated node refuses new pods",
            false => "",
        };
        let earlier = match self.moved_before {
            0 => String::new(),
            n => format!(", as must the {n} group(s) moved out of earlier domains"),
        };
        let room = match (self.room, &self.group_requests) {
            (Some(r), Some(one)) => {
                format!(" (room for {r} such group(s); one group requests {one})")
            }
            _ => String::new(),
        };
        format!(
            "upgrade domain {}: with hand-off None its nodes stay cordoned{taint}, so its health \
             gate waits until its {g} group(s) ({}) are Ready again on nodes outside {}{earlier}; \
             those nodes have {} free and the {} group(s) request {}{room}: the health check \
             would fail after healthCheckRetryTimeout",
            self.domain,
            list(&self.groups, 3),
            self.outside(),
            self.free,
            g + self.moved_before,
            self.requests,
        )
    }

    /// The ways out.
    pub fn fix(&self) -> String {
        let groups = match self.room {
            Some(r) => format!(
                " ({} more group(s))",
                (self.groups.len() + self.moved_before).saturating_sub(r)
            ),
            None => String::new(),
        };
        let taint = match self.room_without_taint {
            true => ", or set spec.taintOutdated to false (the later domains' nodes have room)",
            false => "",
        };
        format!(
            "add capacity outside {} (a node of the new generation) for {}{groups}, or hand the \
             nodes back (spec.handOff.mode Reboot or Replace: the drained nodes take groups \
             again){taint}",
            self.outside(),
            self.short,
        )
    }
}

impl std::fmt::Display for GateDeadEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}. Fix: {}", self.problem(), self.fix())
    }
}

/// The one-line summary of the health gate's dead ends (each domain's [`GateDeadEnd`] text,
/// `|`-separated), after [`no_room_message`]'s in the `NoRoomToRecover` condition.
pub fn gate_message(dead: &[GateDeadEnd]) -> String {
    let each: Vec<String> = dead.iter().map(ToString::to_string).collect();
    format!(
        "{} upgrade domain(s) would fail their health check, their groups would have nowhere to \
         run again: {}",
        dead.len(),
        each.join(" | ")
    )
}

/// Every dead end of a plan: the budget's ([`dead_ends`]) and the health gate's
/// ([`gate_dead_ends`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoRoom {
    pub dead_ends: Vec<DeadEnd>,
    pub gate_dead_ends: Vec<GateDeadEnd>,
}

impl NoRoom {
    /// Both checks over one plan.
    pub fn check(cluster: &Cluster, plan: &Plan, options: &PlanOptions, returns: Returns) -> Self {
        NoRoom {
            dead_ends: dead_ends(cluster, plan, options, returns),
            gate_dead_ends: gate_dead_ends(cluster, plan, options, returns),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dead_ends.is_empty() && self.gate_dead_ends.is_empty()
    }

    /// The distinct domains named.
    pub fn domains(&self) -> usize {
        let names: BTreeSet<&str> = self
            .dead_ends
            .iter()
            .map(|d| d.domain.as_str())
            .chain(self.gate_dead_ends.iter().map(|d| d.domain.as_str()))
            .collect();
        names.len()
    }

    /// [`no_room_message`], then [`gate_message`], each when it has something to say.
    pub fn message(&self) -> String {
        let mut parts = Vec::new();
        if !self.dead_ends.is_empty() {
            parts.push(no_room_message(&self.dead_ends));
        }
        if !self.gate_dead_ends.is_empty() {
            parts.push(gate_message(&self.gate_dead_ends));
        }
        parts.join(". ")
    }
}

/// The domains of `plan` whose health gate cannot pass for want of room, in plan order. Only with
/// hand-off `None` (`Returns::Never`: a rebooted or replaced domain takes its groups back) and a
/// group label (without one the gate waits for budgets only, which [`dead_ends`] covers).
///
/// With hand-off `None` a drained domain stays cordoned, and its health gate waits until every
/// group evicted from it is Ready again, so each group of domains `0..=k` must fit on the nodes
/// outside them (outside the rollout with `taintOutdated`). Counted optimistically, so a finding
/// is certain: the free requests of the nodes a group may use (schedulable, its taints
/// tolerated) summed as if groups could be split across nodes, a node's pods of the groups that
/// move counted as gone, pods without a group and pending groups ignored, and, where the groups
/// are recognised by workload (its Ready groups counted again), only groups Ready now. Groups
/// that tolerate different taints are checked together on every node set one of them may use
/// (each group whose nodes lie within that set).
pub fn gate_dead_ends(
    cluster: &Cluster,
    plan: &Plan,
    options: &PlanOptions,
    returns: Returns,
) -> Vec<GateDeadEnd> {
    let Some(label) = options.group_label.as_deref() else {
        return Vec::new();
    };
    if returns != Returns::Never {
        return Vec::new();
    }
    let by_workload = !options.workload_keys().is_empty();
    let live: Vec<&Pod> = cluster.pods.iter().filter(|p| !is_finished(p)).collect();
    let pods_by_name: FastMap<(&str, &str), &Pod> = live
        .iter()
        .map(|p| ((namespace(&p.metadata), name(&p.metadata)), *p))
        .collect();
    // every live pod of each group
    let mut members: FastMap<(&str, &str), Vec<&Pod>> = FastMap::default();
    for pod in &live {
        if let Some(v) = pod.metadata.labels.as_ref().and_then(|l| l.get(label)) {
            members
                .entry((namespace(&pod.metadata), v.as_str()))
                .or_default()
                .push(*pod);
        }
    }
    let used = used_by_node(&live);
    let target: BTreeSet<&str> = plan
        .domains
        .iter()
        .flat_map(|d| d.nodes.iter().map(|n| n.name.as_str()))
        .collect();
    // classes of groups by their representative's tolerations: the nodes each may use now
    let mut classes: Vec<(&[Toleration], BTreeSet<&str>)> = Vec::new();
    // per class: the groups moved so far, what they request in all, and their one shape
    let mut moved: Vec<Moved> = Vec::new();
    // `within[a][b]`: class a's nodes lie within class b's
    let mut within: Vec<Vec<bool>> = Vec::new();
    let mut seen: FastSet<(&str, &str)> = FastSet::default();
    // requests of the moving groups' pods per node: gone from there once the group moves
    let mut moved_on: FastMap<&str, Resources> = FastMap::default();
    let mut drained: FastSet<&str> = FastSet::default();
    let tainted = options.taint.is_some();
    let mut out = Vec::new();
    for domain in &plan.domains {
        drained.extend(domain.nodes.iter().map(|n| n.name.as_str()));
        // this domain's groups: (class, name)
        let mut own: Vec<(usize, &str)> = Vec::new();
        let evicted = domain
            .phase1
            .iter()
            .map(|p| &p.pod)
            .chain(&domain.phase2)
            .filter_map(|p| pods_by_name.get(&(p.namespace, p.name)).copied());
        for pod in evicted {
            let ns = namespace(&pod.metadata);
            let Some(group) = pod.metadata.labels.as_ref().and_then(|l| l.get(label)) else {
                continue;
            };
            let key = (ns, group.as_str());
            if !seen.insert(key) {
                continue;
            }
            let pods = members.get(&key).map(Vec::as_slice).unwrap_or_default();
            // a workload counts its Ready groups: one not Ready now need not come back
            if by_workload && !pods.iter().all(|p| super::engine::pod_serving(p)) {
                continue;
            }
            let mut need = Resources::new();
            for p in pods {
                let r = with_pods(requests(p), 1);
                need.add(&r);
                if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    moved_on.entry(node).or_default().add(&r);
                }
            }
            let class = class_of(&mut classes, cluster.nodes, pod);
            if class == moved.len() {
                moved.push(Moved::default());
                within = classes
                    .iter()
                    .map(|(_, a)| classes.iter().map(|(_, b)| a.is_subset(b)).collect())
                    .collect();
            }
            moved[class].add(need);
            own.push((class, group.as_str()));
        }
        if own.is_empty() {
            continue;
        }
        let free_on_nodes = |nodes: &BTreeSet<&str>, tainted: bool| {
            let mut free = Resources::new();
            for node in cluster.nodes {
                let n = name(&node.metadata);
                if !nodes.contains(n) || drained.contains(n) || (tainted && target.contains(n)) {
                    continue;
                }
                let mut u = used.get(n).cloned().unwrap_or_default();
                if let Some(m) = moved_on.get(n) {
                    u.sub(m);
                }
                free.add(&free_on(node, Some(&u)));
            }
            free
        };
        // the widest node set first: its finding names the most groups
        let mut order: Vec<usize> = (0..classes.len()).collect();
        order.sort_by_key(|c| std::cmp::Reverse(classes[*c].1.len()));
        for c in order {
            let mut groups: Vec<String> = own
                .iter()
                .filter(|(a, _)| within[*a][c])
                .map(|(_, g)| g.to_string())
                .collect();
            if groups.is_empty() {
                continue;
            }
            // every group confined to this class's nodes
            let mut all = Moved::default();
            for (_, m) in moved.iter().enumerate().filter(|(a, _)| within[*a][c]) {
                all.merge(m);
            }
            let free = free_on_nodes(&classes[c].1, tainted);
            if all.need.fits_within(&free) {
                continue;
            }
            let mut short = all.need.clone();
            short.sub(&free);
            groups.sort();
            let one = match &all.shape {
                Shape::One(one) => Some(one),
                Shape::None | Shape::Mixed => None,
            };
            out.push(GateDeadEnd {
                domain: domain.name.clone(),
                moved_before: all.groups - groups.len(),
                groups,
                taint_outdated: tainted,
                room_without_taint: tainted
                    && all.need.fits_within(&free_on_nodes(&classes[c].1, false)),
                requests: describe(&all.need),
                free: match describe(&free) {
                    d if d.is_empty() => "nothing".into(),
                    d => d,
                },
                short: describe(&short.clamp_non_negative()),
                room: one.and_then(|one| slots(&free, one)),
                group_requests: one.map(describe),
            });
            break;
        }
    }
    out
}

/// Groups moved out of drained domains (one class of them, or several together).
#[derive(Default)]
struct Moved {
    groups: usize,
    need: Resources,
    shape: Shape,
}

/// What each of some groups requests: nothing yet, all the same, or not.
#[derive(Default)]
enum Shape {
    #[default]
    None,
    One(Resources),
    Mixed,
}

impl Shape {
    fn with(&mut self, other: &Resources) {
        *self = match std::mem::take(self) {
            Shape::None => Shape::One(other.clone()),
            Shape::One(r) if r == *other => Shape::One(r),
            Shape::One(_) | Shape::Mixed => Shape::Mixed,
        };
    }
}

impl Moved {
    fn add(&mut self, need: Resources) {
        self.groups += 1;
        self.need.add(&need);
        self.shape.with(&need);
    }

    fn merge(&mut self, other: &Moved) {
        self.groups += other.groups;
        self.need.add(&other.need);
        match &other.shape {
            Shape::None => {}
            Shape::One(r) => self.shape.with(r),
            Shape::Mixed => self.shape = Shape::Mixed,
        }
    }
}

/// The class of `pod`'s group: its tolerations, and the nodes it may use now (see
/// [`schedulable`]); a new class is added to `classes`.
fn class_of<'a>(
    classes: &mut Vec<(&'a [Toleration], BTreeSet<&'a str>)>,
    nodes: &'a [Node],
    pod: &'a Pod,
) -> usize {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    if let Some(i) = classes.iter().position(|(t, _)| *t == tolerations) {
        return i;
    }
    let usable = nodes
        .iter()
        .filter(|n| schedulable(n, pod, None))
        .map(|n| name(&n.metadata))
        .collect();
    classes.push((tolerations, usable));
    classes.len() - 1
}

/// The pods of group `group` in `ns` (1 without a group label).
fn group_pods(live: &[&Pod], label: Option<&str>, ns: &str, group: &str) -> i64 {
    let Some(label) = label else { return 1 };
    let n = live
        .iter()
        .filter(|p| namespace(&p.metadata) == ns)
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(label))
                .is_some_and(|v| v == group)
        })
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
/// requests nothing (room cannot be judged).
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

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Node, Pod, ResourceRequirements, Toleration};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::drain::testing::*;

    const OUTDATED: &str = "raygate.io/outdated";

    fn gpus(n: &str) -> BTreeMap<String, K8sQuantity> {
        [
            ("cpu".to_string(), K8sQuantity("1".into())),
            ("nvidia.com/gpu".to_string(), K8sQuantity(n.into())),
        ]
        .into()
    }

    /// `gpu` GPUs, 64 CPUs, 110 pods.
    fn allocatable(gpu: &str) -> BTreeMap<String, K8sQuantity> {
        [
            ("cpu".to_string(), K8sQuantity("64".into())),
            ("nvidia.com/gpu".to_string(), K8sQuantity(gpu.into())),
            ("pods".to_string(), K8sQuantity("110".into())),
        ]
        .into()
    }

    /// A node with 8 GPUs.
    pub(in crate::drain) fn gpu_node(name: &str, domain: &str, pool: &str) -> Node {
        let mut n = node(name, domain).label("pool", pool);
        n.status.get_or_insert_default().allocatable = Some(allocatable("8"));
        n
    }

    fn requesting(mut p: Pod, gpu: &str) -> Pod {
        if let Some(c) = p.spec.get_or_insert_default().containers.first_mut() {
            c.resources = Some(ResourceRequirements {
                requests: Some(gpus(gpu)),
                ..ResourceRequirements::default()
            });
        }
        p
    }

    /// Group `g` on `node`: a leader and a worker, one GPU each.
    fn group(g: &str, node: &str) -> Vec<Pod> {
        ["leader", "worker"]
            .iter()
            .map(|role| {
                requesting(pod(&format!("ns/{g}-{role}"), node), "1")
                    .label("g", g)
                    .label("role", role)
            })
            .collect()
    }

    pub(in crate::drain) fn leaders_pdb(min_available: i32) -> PodDisruptionBudget {
        pdb("ns/leaders", &[("role", "leader")]).min_available(int(min_available))
    }

    pub(in crate::drain) fn options(taint_outdated: bool) -> PlanOptions {
        PlanOptions {
            domain_label: UD.to_string(),
            node_selector: "pool=old".to_string(),
            taint: taint_outdated.then(|| taint(OUTDATED, "NoSchedule")),
            group_label: Some("g".to_string()),
            ..PlanOptions::default()
        }
    }

    /// `a` groups in ud-a (node old-a), `b` in ud-b (node old-b), plus `extra` nodes.
    pub(in crate::drain) fn world(a: usize, b: usize, extra: Vec<Node>) -> (Vec<Node>, Vec<Pod>) {
        let mut nodes = vec![
            gpu_node("old-a", "ud-a", "old"),
            gpu_node("old-b", "ud-b", "old"),
        ];
        nodes.extend(extra);
        let mut pods = Vec::new();
        for i in 0..a {
            pods.extend(group(&format!("a{i}"), "old-a"));
        }
        for i in 0..b {
            pods.extend(group(&format!("b{i}"), "old-b"));
        }
        (nodes, pods)
    }

    fn check(
        nodes: &[Node],
        pods: &[Pod],
        budget: PodDisruptionBudget,
        taint_outdated: bool,
        returns: Returns,
    ) -> Vec<DeadEnd> {
        let pdbs = vec![budget];
        let cluster = Cluster::new(nodes, pods, &pdbs);
        let options = options(taint_outdated);
        let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
        dead_ends(&cluster, &plan, &options, returns)
    }

    #[test]
    fn a_domain_with_more_groups_than_tolerated_and_no_room_outside_is_a_dead_end() {
        // 4 leaders, minAvailable 2: two down at once; ud-a holds 3, so one must run elsewhere
        let (nodes, pods) = world(3, 1, Vec::new());
        let found = check(&nodes, &pods, leaders_pdb(2), true, Returns::Never);
        assert_eq!(found.len(), 1, "{found:?}");
        let d = &found[0];
        assert_eq!(
            (
                d.domain.as_str(),
                d.pdb.as_str(),
                d.tolerated,
                d.must_move,
                d.room
            ),
            ("ud-a", "ns/leaders", 2, 1, 0)
        );
        assert_eq!(d.groups, vec!["a0", "a1", "a2"]);
        assert_eq!(d.group_requests, "cpu 2, nvidia.com/gpu 2, pods 2");
        let m = d.to_string();
        for says in [
            "upgrade domain ud-a holds 3 group(s) under PodDisruptionBudget ns/leaders (a0, a1, a2)",
            "tolerates 2 down: 1 of them must be Ready elsewhere",
            "room for 0 such group(s)",
            "Fix: add capacity outside the rollout (a node of the new generation) for 1 more group(s)",
            "set spec.taintOutdated to false",
            "let the budget tolerate 3 down",
        ] {
            assert!(m.contains(says), "no {says:?} in {m}");
        }
    }

    #[test]
    fn room_outside_the_rollout_for_the_groups_that_must_move_is_no_dead_end() {
        let (nodes, pods) = world(3, 1, vec![gpu_node("new-1", "ud-n", "new")]);
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(2), true, Returns::Never),
            Vec::new()
        );
    }

    #[test]
    fn exactly_as_many_groups_as_the_budget_tolerates_need_no_room() {
        // minAvailable 1 of 4: three down at once, exactly ud-a's three groups
        let (nodes, pods) = world(3, 1, Vec::new());
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(1), true, Returns::Never),
            Vec::new()
        );
        // one more than tolerated, room for exactly one group (2 GPUs free): not a dead end
        let mut tight = gpu_node("new-1", "ud-n", "new");
        tight.status.get_or_insert_default().allocatable = Some(allocatable("2"));
        let (nodes, pods) = world(3, 1, vec![tight.clone()]);
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(2), true, Returns::Never),
            Vec::new()
        );
        // one GPU short of one group (2 each): a dead end, room 0
        tight.status.get_or_insert_default().allocatable = Some(allocatable("1"));
        let (nodes, pods) = world(3, 1, vec![tight]);
        let found = check(&nodes, &pods, leaders_pdb(2), true, Returns::Never);
        assert_eq!(found.iter().map(|d| d.room).collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn without_taint_outdated_nothing_is_predicted() {
        let (nodes, pods) = world(3, 1, Vec::new());
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(2), false, Returns::Never),
            Vec::new()
        );
    }

    #[test]
    fn a_cordoned_or_untolerated_tainted_node_outside_is_no_room_and_a_tolerated_one_is() {
        let (nodes, pods) = world(3, 1, vec![gpu_node("new-1", "ud-n", "new").cordoned()]);
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(2), true, Returns::Never).len(),
            1
        );
        let gpu_taint = taint("nvidia.com/gpu", "NoSchedule");
        let tainted = gpu_node("new-1", "ud-n", "new").tainted(gpu_taint);
        let (nodes, mut pods) = world(3, 1, vec![tainted]);
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(2), true, Returns::Never).len(),
            1
        );
        for p in &mut pods {
            p.spec.get_or_insert_default().tolerations = Some(vec![Toleration {
                key: Some("nvidia.com/gpu".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            }]);
        }
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(2), true, Returns::Never),
            Vec::new()
        );
    }

    #[test]
    fn a_reboot_hand_off_brings_the_earlier_domains_back_and_none_keeps_their_groups_outside() {
        // ud-a (first) holds 1 group, ud-b 3; 4 leaders, two down at once
        let (nodes, pods) = world(1, 3, Vec::new());
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(2), true, Returns::AfterHandOff),
            Vec::new(),
            "ud-a's rebooted node takes ud-b's groups"
        );
        let found = check(&nodes, &pods, leaders_pdb(2), true, Returns::Never);
        assert_eq!(
            found.iter().map(|d| d.domain.as_str()).collect::<Vec<_>>(),
            vec!["ud-b"]
        );
        // hand-off None: ud-a's group took the one free group's room outside first
        let mut one = gpu_node("new-1", "ud-n", "new");
        one.status.get_or_insert_default().allocatable = Some(allocatable("2"));
        let (nodes, pods) = world(1, 3, vec![one]);
        let found = check(&nodes, &pods, leaders_pdb(2), true, Returns::Never);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (
                found[0].domain.as_str(),
                found[0].room,
                found[0].moved_before
            ),
            ("ud-b", 1, 1)
        );
        assert!(
            found[0]
                .to_string()
                .contains("of which the 1 group(s) moved out of earlier domains"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn a_budget_that_never_allows_a_disruption_is_left_to_the_preflight() {
        let (nodes, pods) = world(3, 1, Vec::new());
        assert_eq!(
            check(&nodes, &pods, leaders_pdb(4), true, Returns::Never),
            Vec::new()
        );
    }

    fn gate(nodes: &[Node], pods: &[Pod], taint_outdated: bool, returns: Returns) -> NoRoom {
        // three leaders, two down at once: the budget's dead end stays out of these
        let pdbs = vec![leaders_pdb(1)];
        let cluster = Cluster::new(nodes, pods, &pdbs);
        let options = options(taint_outdated);
        let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
        NoRoom::check(&cluster, &plan, &options, returns)
    }

    fn spare(gpus: &str) -> Node {
        let mut n = gpu_node("new-1", "ud-n", "new");
        n.status.get_or_insert_default().allocatable = Some(allocatable(gpus));
        n
    }

    fn named(found: &NoRoom) -> Vec<(&str, usize, usize)> {
        found
            .gate_dead_ends
            .iter()
            .map(|d| (d.domain.as_str(), d.groups.len(), d.moved_before))
            .collect()
    }

    #[test]
    fn hand_off_none_needs_room_outside_the_rollout_for_every_group_drained_so_far() {
        // ud-a holds a0 and a1, ud-b holds b0 (2 GPUs each); tainted, only new-1 is room: ud-a's
        // gate needs 4 GPUs there, ud-b's 6 (a0 and a1 stay there, the domains stay cordoned)
        let (nodes, pods) = world(2, 1, vec![spare("6")]);
        let at = gate(&nodes, &pods, true, Returns::Never);
        assert_eq!(at, NoRoom::default(), "exactly room for the three groups");
        // one GPU short: ud-b's gate cannot pass, ud-a's can
        let (nodes, pods) = world(2, 1, vec![spare("5")]);
        let below = gate(&nodes, &pods, true, Returns::Never);
        assert_eq!(below.dead_ends, Vec::new(), "the budget tolerates ud-a's 2");
        assert_eq!(named(&below), vec![("ud-b", 1, 2)]);
        let d = &below.gate_dead_ends[0];
        assert_eq!(d.groups, vec!["b0"]);
        assert_eq!(
            (d.room, d.group_requests.as_deref()),
            (Some(2), Some("cpu 2, nvidia.com/gpu 2, pods 2"))
        );
        assert_eq!(d.requests, "cpu 6, nvidia.com/gpu 6, pods 6");
        assert_eq!(d.free, "cpu 64, nvidia.com/gpu 5, pods 110");
        assert_eq!(d.short, "nvidia.com/gpu 1");
        assert!(d.taint_outdated && !d.room_without_taint, "{d:?}");
        // 3 GPUs: not even ud-a's two groups fit
        let (nodes, pods) = world(2, 1, vec![spare("3")]);
        let found = gate(&nodes, &pods, true, Returns::Never);
        assert_eq!(named(&found), vec![("ud-a", 2, 0), ("ud-b", 1, 2)]);
        assert_eq!(found.domains(), 2);
        // a reboot or replace hand-off gives the drained nodes back: nothing to predict
        assert_eq!(
            gate(&nodes, &pods, true, Returns::AfterHandOff),
            NoRoom::default()
        );
    }

    #[test]
    fn without_taint_outdated_the_later_domains_are_room_until_the_last_one() {
        // a0 on old-a, b0 on old-b, nothing outside the pool
        let (nodes, pods) = world(1, 1, Vec::new());
        let found = gate(&nodes, &pods, false, Returns::Never);
        // ud-a's group runs again on old-b; ud-b's gate needs room for both outside the pool
        assert_eq!(named(&found), vec![("ud-b", 1, 1)]);
        let d = &found.gate_dead_ends[0];
        assert!(!d.taint_outdated && !d.room_without_taint, "{d:?}");
        let m = d.to_string();
        for says in [
            "upgrade domain ud-b: with hand-off None its nodes stay cordoned, so its health gate \
             waits until its 1 group(s) (b0) are Ready again on nodes outside the domains drained \
             so far, as must the 1 group(s) moved out of earlier domains",
            "those nodes have nothing free and the 2 group(s) request cpu 4, nvidia.com/gpu 4, pods 4",
            "(room for 0 such group(s); one group requests cpu 2, nvidia.com/gpu 2, pods 2)",
            "the health check would fail after healthCheckRetryTimeout",
            "Fix: add capacity outside the domains drained so far (a node of the new generation) \
             for cpu 4, nvidia.com/gpu 4, pods 4 (2 more group(s)), or hand the nodes back \
             (spec.handOff.mode Reboot or Replace",
        ] {
            assert!(m.contains(says), "no {says:?} in {m}");
        }
        assert!(!m.contains("taintOutdated"), "{m}");
        // tainted, ud-a's group cannot use old-b either; without the taint it could
        let found = gate(&nodes, &pods, true, Returns::Never);
        assert_eq!(named(&found), vec![("ud-a", 1, 0), ("ud-b", 1, 1)]);
        let d = &found.gate_dead_ends[0];
        assert!(d.room_without_taint, "{d:?}");
        assert!(
            d.fix().ends_with(
                "or set spec.taintOutdated to false (the later domains' nodes have room)"
            ),
            "{}",
            d.fix()
        );
        assert!(!found.gate_dead_ends[1].room_without_taint);
        // room for both outside the pool: nothing
        let (nodes, pods) = world(1, 1, vec![spare("4")]);
        assert_eq!(gate(&nodes, &pods, true, Returns::Never), NoRoom::default());
        assert_eq!(
            gate(&nodes, &pods, false, Returns::Never),
            NoRoom::default()
        );
    }

    #[test]
    fn a_node_only_some_groups_tolerate_is_room_for_those_only() {
        let gpu_taint = taint("nvidia.com/gpu", "NoSchedule");
        let (nodes, mut pods) = world(1, 0, vec![spare("8").tainted(gpu_taint)]);
        assert_eq!(
            named(&gate(&nodes, &pods, true, Returns::Never)),
            vec![("ud-a", 1, 0)]
        );
        for p in &mut pods {
            p.spec.get_or_insert_default().tolerations = Some(vec![Toleration {
                key: Some("nvidia.com/gpu".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            }]);
        }
        assert_eq!(gate(&nodes, &pods, true, Returns::Never), NoRoom::default());
        // a second, untolerating group: checked on the nodes it may use, alone
        let mut more = group("a1", "old-a");
        pods.append(&mut more);
        let found = gate(&nodes, &pods, true, Returns::Never);
        assert_eq!(named(&found), vec![("ud-a", 1, 0)]);
        assert_eq!(found.gate_dead_ends[0].groups, vec!["a1"]);
    }

    #[test]
    fn without_a_group_label_the_gate_waits_for_budgets_only_and_nothing_is_predicted() {
        let (nodes, pods) = world(1, 1, Vec::new());
        let pdbs = vec![leaders_pdb(1)];
        let cluster = Cluster::new(&nodes, &pods, &pdbs);
        let options = PlanOptions {
            group_label: None,
            ..options(true)
        };
        let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
        assert_eq!(
            gate_dead_ends(&cluster, &plan, &options, Returns::Never),
            Vec::new()
        );
    }

    #[test]
    fn the_condition_message_names_the_budgets_dead_ends_then_the_health_gates() {
        let (nodes, pods) = world(3, 1, Vec::new());
        let pdbs = vec![leaders_pdb(2)];
        let cluster = Cluster::new(&nodes, &pods, &pdbs);
        let options = options(true);
        let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
        let found = NoRoom::check(&cluster, &plan, &options, Returns::Never);
        assert_eq!(found.dead_ends.len(), 1);
        assert_eq!(named(&found), vec![("ud-a", 3, 0), ("ud-b", 1, 3)]);
        assert_eq!(found.domains(), 2);
        let m = found.message();
        assert!(m.starts_with(&no_room_message(&found.dead_ends)), "{m}");
        assert!(
            m.contains(
                ". 2 upgrade domain(s) would fail their health check, their groups would \
                        have nowhere to run again: upgrade domain ud-a: with hand-off None"
            ),
            "{m}"
        );
        let only_gate = NoRoom {
            dead_ends: Vec::new(),
            ..found.clone()
        };
        assert!(
            only_gate
                .message()
                .starts_with("2 upgrade domain(s) would fail")
        );
    }

    #[test]
    fn by_workload_only_the_groups_ready_now_must_come_back() {
        use k8s_openapi::api::core::v1::PodCondition;
        let (nodes, mut pods) = world(1, 1, Vec::new());
        let check = |pods: &[Pod]| {
            let pdbs = vec![leaders_pdb(1)];
            let cluster = Cluster::new(&nodes, pods, &pdbs);
            let options = PlanOptions {
                workload_labels: vec!["role".to_string()],
                ..options(true)
            };
            let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
            gate_dead_ends(&cluster, &plan, &options, Returns::Never)
                .iter()
                .map(|d| (d.domain.clone(), d.groups.clone()))
                .collect::<Vec<_>>()
        };
        // no pod Ready: the workloads count no Ready group to restore
        assert_eq!(check(&pods), Vec::new());
        for p in pods
            .iter_mut()
            .filter(|p| name(&p.metadata).starts_with("a0"))
        {
            p.status.get_or_insert_default().conditions = Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..PodCondition::default()
            }]);
        }
        assert_eq!(
            check(&pods),
            vec![("ud-a".to_string(), vec!["a0".to_string()])]
        );
    }
}
