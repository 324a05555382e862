//! The health check's dead end (hand-off `None`): every group of the domains drained so far must
//! fit outside them, and the nodes there cannot hold them (see the parent module's doc).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use serde::Serialize;

use super::{Returns, describe, free_on, requests, schedulable, slots, used_by_node, with_pods};
use crate::drain::{
    Cluster, DomainPlan, FastMap, FastSet, GroupLabels, Plan, PlanOptions, is_finished, list, name,
    namespace,
};
use crate::quantity::Resources;

/// One upgrade domain whose health check cannot pass (hand-off `None`): the drained nodes stay
/// cordoned, so every group the gate waits for must run again on nodes outside the domains drained
/// so far (outside the rollout with `taintOutdated`), and those nodes cannot hold them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthDeadEnd {
    pub domain: String,
    /// The domain's groups the health check waits for (group label values).
    pub groups: Vec<String>,
    /// Groups moved out of earlier domains (which stay cordoned) that need the same capacity.
    pub moved_before: usize,
    /// `taintOutdated`: the later domains' outdated nodes refuse the groups too.
    pub taint_outdated: bool,
    /// With `taintOutdated`: whether the later domains' nodes would hold the groups without it.
    #[serde(rename = "roomWithoutTaint")]
    pub capacity_without_taint: bool,
    /// What those groups (the domain's and the earlier ones) request in all (`pods` counted).
    pub requests: String,
    /// What is free on the nodes they may run on.
    pub free: String,
    /// The requests the free capacity lacks.
    pub short: String,
    /// How many such groups the free capacity holds, when every one of them requests the same.
    #[serde(rename = "room")]
    pub capacity: Option<usize>,
    /// What one group requests, when every one of them requests the same.
    pub group_requests: Option<String>,
}

impl HealthDeadEnd {
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
        let capacity = match (self.capacity, &self.group_requests) {
            (Some(r), Some(one)) => {
                format!(" (room for {r} such group(s); one group requests {one})")
            }
            _ => String::new(),
        };
        format!(
            "upgrade domain {}: with hand-off None its nodes stay cordoned{taint}, so its health \
             check waits until its {g} group(s) ({}) are Ready again on nodes outside {}{earlier}; \
             those nodes have {} free and the {} group(s) request {}{capacity}: the health check \
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
        let groups = match self.capacity {
            Some(r) => format!(
                " ({} more group(s))",
                (self.groups.len() + self.moved_before).saturating_sub(r)
            ),
            None => String::new(),
        };
        let taint = match self.capacity_without_taint {
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

impl std::fmt::Display for HealthDeadEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}. Fix: {}", self.problem(), self.fix())
    }
}

/// The one-line summary of the health check's dead ends (each domain's [`HealthDeadEnd`] text,
/// `|`-separated), after [`dead_end_message`]'s in the `NoRoomToRecover` condition.
pub fn health_message(dead: &[HealthDeadEnd]) -> String {
    let each: Vec<String> = dead.iter().map(ToString::to_string).collect();
    format!(
        "{} upgrade domain(s) would fail their health check, their groups would have nowhere to \
         run again: {}",
        dead.len(),
        each.join(" | ")
    )
}

/// The domains of `plan` whose health check cannot pass for want of room, in plan order. Only with
/// hand-off `None` (`Returns::Never`: a rebooted or replaced domain takes its groups back) and a
/// group label (without one the gate waits for budgets only, which [`dead_ends`] covers).
///
/// With hand-off `None` a drained domain stays cordoned, and its health check waits until every
/// group evicted from it is Ready again, so each group of domains `0..=k` must fit on the nodes
/// outside them (outside the rollout with `taintOutdated`). Counted optimistically, so a finding
/// is certain: the free requests of the nodes a group may use (schedulable, its taints
/// tolerated) summed as if groups could be split across nodes, a node's pods of the groups that
/// move counted as gone, pods without a group and pending groups ignored, and, where the groups
/// are recognised by workload (its Ready groups counted again), only groups Ready now. Groups
/// that tolerate different taints are checked together on every node set one of them may use
/// (each group whose nodes lie within that set).
pub fn health_dead_ends(
    cluster: &Cluster,
    plan: &Plan,
    options: &PlanOptions,
    returns: Returns,
) -> Vec<HealthDeadEnd> {
    if options.groups.is_empty() || returns != Returns::Never {
        return Vec::new();
    }
    let mut gate = Gate::new(cluster, plan, &options.groups, options.taint.is_some());
    let mut out = Vec::new();
    for domain in &plan.domains {
        gate.drained
            .extend(domain.nodes.iter().map(|n| n.name.as_str()));
        let own = gate.take_groups(domain);
        if own.is_empty() {
            continue;
        }
        out.extend(gate.dead_end(domain, &own));
    }
    out
}

/// The health check's check as it walks the plan's domains.
struct Gate<'a> {
    nodes: &'a [Node],
    /// The kinds of groups; those recognised by workload: only those Ready now must come back.
    kinds: &'a GroupLabels,
    /// `taintOutdated`: the rollout's nodes refuse the groups.
    tainted: bool,
    pods_by_name: FastMap<(&'a str, &'a str), &'a Pod>,
    /// Every live pod of each group.
    members: FastMap<(&'a str, &'a str), Vec<&'a Pod>>,
    used: FastMap<&'a str, Resources>,
    target: BTreeSet<&'a str>,
    /// Classes of groups by their representative's tolerations: the nodes each may use now.
    classes: Vec<(&'a [Toleration], BTreeSet<&'a str>)>,
    /// Per class: the groups moved so far, what they request in all, and their one shape.
    moved: Vec<Moved>,
    /// `within[a][b]`: class a's nodes lie within class b's.
    within: Vec<Vec<bool>>,
    seen: FastSet<(&'a str, &'a str)>,
    /// Requests of the moving groups' pods per node: gone from there once the group moves.
    moved_on: FastMap<&'a str, Resources>,
    drained: FastSet<&'a str>,
}

impl<'a> Gate<'a> {
    fn new(cluster: &Cluster<'a>, plan: &'a Plan, kinds: &'a GroupLabels, tainted: bool) -> Self {
        let live: Vec<&Pod> = cluster.pods.iter().filter(|p| !is_finished(p)).collect();
        let mut members: FastMap<(&str, &str), Vec<&Pod>> = FastMap::default();
        for pod in &live {
            if let Some(v) = kinds.group(pod) {
                members
                    .entry((namespace(&pod.metadata), v))
                    .or_default()
                    .push(*pod);
            }
        }
        Gate {
            nodes: cluster.nodes,
            kinds,
            tainted,
            pods_by_name: live
                .iter()
                .map(|p| ((namespace(&p.metadata), name(&p.metadata)), *p))
                .collect(),
            members,
            used: used_by_node(&live),
            target: plan
                .domains
                .iter()
                .flat_map(|d| d.nodes.iter().map(|n| n.name.as_str()))
                .collect(),
            classes: Vec::new(),
            moved: Vec::new(),
            within: Vec::new(),
            seen: FastSet::default(),
            moved_on: FastMap::default(),
            drained: FastSet::default(),
        }
    }

    /// The groups `domain` evicts that were not moved before, as (class, name), each counted as
    /// moved.
    fn take_groups(&mut self, domain: &DomainPlan) -> Vec<(usize, &'a str)> {
        let mut own = Vec::new();
        let evicted: Vec<&'a Pod> = domain
            .phase1
            .iter()
            .map(|p| &p.pod)
            .chain(&domain.phase2)
            .filter_map(|p| self.pods_by_name.get(&(p.namespace, p.name)).copied())
            .collect();
        for pod in evicted {
            let ns = namespace(&pod.metadata);
            let Some((kind, group)) = self.kinds.kind_of(pod.metadata.labels.as_ref()) else {
                continue;
            };
            let key = (ns, group);
            if !self.seen.insert(key) {
                continue;
            }
            let pods = self
                .members
                .get(&key)
                .map(Vec::as_slice)
                .unwrap_or_default();
            // a workload counts its Ready groups: one not Ready now need not come back
            if kind.by_workload() && !pods.iter().all(|p| crate::drain::engine::pod_serving(p)) {
                continue;
            }
            let mut need = Resources::new();
            for p in pods {
                let r = with_pods(requests(p), 1);
                need.add(&r);
                if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    self.moved_on.entry(node).or_default().add(&r);
                }
            }
            let class = class_of(&mut self.classes, self.nodes, pod);
            if class == self.moved.len() {
                self.moved.push(Moved::default());
                let classes = &self.classes;
                self.within = classes
                    .iter()
                    .map(|(_, a)| classes.iter().map(|(_, b)| a.is_subset(b)).collect())
                    .collect();
            }
            self.moved[class].add(need);
            own.push((class, group));
        }
        own
    }

    /// What is free on `nodes` outside the domains drained so far (and, `tainted`, outside the
    /// rollout), the moving groups' pods counted as gone.
    fn free_on_nodes(&self, nodes: &BTreeSet<&str>, tainted: bool) -> Resources {
        let mut free = Resources::new();
        for node in self.nodes {
            let n = name(&node.metadata);
            if !nodes.contains(n)
                || self.drained.contains(n)
                || (tainted && self.target.contains(n))
            {
                continue;
            }
            let mut u = self.used.get(n).cloned().unwrap_or_default();
            if let Some(m) = self.moved_on.get(n) {
                u.sub(m);
            }
            free.add(&free_on(node, Some(&u)));
        }
        free
    }

    /// The domain's dead end on the widest node set that cannot hold the groups confined to it
    /// (its finding names the most groups).
    fn dead_end(&self, domain: &DomainPlan, own: &[(usize, &str)]) -> Option<HealthDeadEnd> {
        let mut order: Vec<usize> = (0..self.classes.len()).collect();
        order.sort_by_key(|c| std::cmp::Reverse(self.classes[*c].1.len()));
        for c in order {
            let mut groups: Vec<String> = own
                .iter()
                .filter(|(a, _)| self.within[*a][c])
                .map(|(_, g)| g.to_string())
                .collect();
            if groups.is_empty() {
                continue;
            }
            // every group confined to this class's nodes
            let mut all = Moved::default();
            for (_, m) in self
                .moved
                .iter()
                .enumerate()
                .filter(|(a, _)| self.within[*a][c])
            {
                all.merge(m);
            }
            let free = self.free_on_nodes(&self.classes[c].1, self.tainted);
            if all.need.fits_within(&free) {
                continue;
            }
            groups.sort();
            return Some(self.finding(domain, c, groups, &all, &free));
        }
        None
    }

    fn finding(
        &self,
        domain: &DomainPlan,
        class: usize,
        groups: Vec<String>,
        all: &Moved,
        free: &Resources,
    ) -> HealthDeadEnd {
        let mut short = all.need.clone();
        short.sub(free);
        let one = match &all.shape {
            Shape::One(one) => Some(one),
            Shape::None | Shape::Mixed => None,
        };
        let untainted = || self.free_on_nodes(&self.classes[class].1, false);
        HealthDeadEnd {
            domain: domain.name.clone(),
            moved_before: all.groups - groups.len(),
            groups,
            taint_outdated: self.tainted,
            capacity_without_taint: self.tainted && all.need.fits_within(&untainted()),
            requests: describe(&all.need),
            free: match describe(free) {
                d if d.is_empty() => "nothing".into(),
                d => d,
            },
            short: describe(&short.clamp_non_negative()),
            capacity: one.and_then(|one| slots(free, one)),
            group_requests: one.map(describe),
        }
    }
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
