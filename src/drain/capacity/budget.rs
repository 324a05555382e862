//! The budget's dead end: a domain whose budget keeps refusing evictions because the groups that
//! must be Ready elsewhere first have no capacity outside it (see the parent module's doc).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;

use super::{
    Returns, describe, free_on, group_pods, requests, schedulable, slots, used_by_node, with_pods,
};
use crate::drain::pdb::{self, PdbIndex};
use crate::drain::{
    Cluster, DomainPlan, FastMap, GroupLabels, Plan, PlanOptions, is_finished, list, name,
    namespace,
};
use crate::quantity::Resources;

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
    #[serde(rename = "room")]
    pub capacity: usize,
    /// What one group requests (`pods` counted too).
    pub group_requests: String,
}

impl DeadEnd {
    /// What is wrong, in words (the controller's `NoRoomToRecover` message and the CLI's).
    pub fn problem(&self) -> String {
        let g = self.groups.len();
        let left = self.capacity.saturating_sub(self.moved_before);
        let earlier = match self.moved_before {
            0 => String::new(),
            n => format!(
                ", of which the {n} group(s) moved out of earlier domains (which stay cordoned) \
                 take {}",
                n.min(self.capacity)
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
        let short = (self.must_move + self.moved_before).saturating_sub(self.capacity);
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
pub fn dead_end_message(dead: &[DeadEnd]) -> String {
    let each: Vec<String> = dead.iter().map(ToString::to_string).collect();
    format!(
        "{} upgrade domain(s) cannot be drained, their groups would have nowhere to run: {}",
        dead.len(),
        each.join(" | ")
    )
}

/// The domains of `plan` whose drain cannot finish for want of capacity (see the module's doc),
/// in plan order. Empty without a taint in `options` (nothing predicted).
pub fn dead_ends(
    cluster: &Cluster,
    plan: &Plan,
    options: &PlanOptions,
    returns: Returns,
) -> Vec<DeadEnd> {
    let Some(taint) = options.taint.as_ref() else {
        return Vec::new();
    };
    let view = View::new(cluster, plan, &options.groups);
    // groups of each budget moved out of the domains drained so far (hand-off None)
    let mut moved: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (k, domain) in plan.domains.iter().enumerate() {
        let returned: BTreeSet<&str> = match returns {
            Returns::Never => BTreeSet::new(),
            Returns::AfterHandOff => plan.domains[..k]
                .iter()
                .flat_map(|d| d.nodes.iter().map(|n| n.name.as_str()))
                .collect(),
        };
        for ((ns, pdb_name), groups) in view.by_budget(domain) {
            let key = (ns.to_string(), pdb_name.to_string());
            let moved_before = moved.get(&key).copied().unwrap_or(0);
            if returns == Returns::Never {
                *moved.entry(key).or_default() += groups.len();
            }
            let budget = Budget {
                domain: &domain.name,
                ns,
                name: pdb_name,
                groups: &groups,
                moved_before,
            };
            out.extend(view.dead_end(&budget, &returned, taint));
        }
    }
    out
}

/// One budget's groups in one domain.
struct Budget<'b, 'a> {
    domain: &'b str,
    ns: &'b str,
    name: &'b str,
    /// Group → its representative pod.
    groups: &'b BTreeMap<&'b str, &'a Pod>,
    moved_before: usize,
}

/// What the check reads of the cluster, indexed once.
struct View<'a> {
    nodes: &'a [Node],
    pdbs: &'a [PodDisruptionBudget],
    live: Vec<&'a Pod>,
    /// Pods each budget selects, by (namespace, budget).
    selected: FastMap<(&'a str, &'a str), i64>,
    groups: &'a GroupLabels,
    /// What each group's pods request in all, by (namespace, group).
    group_requests: FastMap<(&'a str, &'a str), Resources>,
    pods_by_name: FastMap<(&'a str, &'a str), &'a Pod>,
    /// The nodes the rollout drains.
    target: BTreeSet<&'a str>,
    used: FastMap<&'a str, Resources>,
}

impl<'a> View<'a> {
    fn new(cluster: &Cluster<'a>, plan: &'a Plan, groups: &'a GroupLabels) -> Self {
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
        let mut group_requests: FastMap<(&str, &str), Resources> = FastMap::default();
        for pod in &live {
            if let Some(v) = groups.group(pod) {
                let r = group_requests
                    .entry((namespace(&pod.metadata), v))
                    .or_default();
                r.add(&requests(pod));
            }
        }
        View {
            nodes: cluster.nodes,
            pdbs: cluster.pdbs,
            pods_by_name: live
                .iter()
                .map(|p| ((namespace(&p.metadata), name(&p.metadata)), *p))
                .collect(),
            target: plan
                .domains
                .iter()
                .flat_map(|d| d.nodes.iter().map(|n| n.name.as_str()))
                .collect(),
            used: used_by_node(&live),
            live,
            selected,
            groups,
            group_requests,
        }
    }

    /// The domain's groups by budget: (ns, budget) → group → its representative.
    fn by_budget<'d>(
        &self,
        domain: &'d DomainPlan<'_>,
    ) -> BTreeMap<(&'d str, &'d str), BTreeMap<&'d str, &'a Pod>> {
        let mut by_pdb: BTreeMap<(&str, &str), BTreeMap<&str, &Pod>> = BTreeMap::new();
        for p in &domain.phase1 {
            let Some(pod) = self.pods_by_name.get(&(p.pod.namespace, p.pod.name)) else {
                continue;
            };
            let group = p.group.unwrap_or(p.pod.name);
            by_pdb
                .entry((p.pod.namespace, p.pdb))
                .or_default()
                .entry(group)
                .or_insert(pod);
        }
        by_pdb
    }

    /// The budget's dead end, if the capacity outside holds fewer groups than must move.
    fn dead_end(&self, b: &Budget, returned: &BTreeSet<&str>, taint: &Taint) -> Option<DeadEnd> {
        let budget = self
            .pdbs
            .iter()
            .find(|p| namespace(&p.metadata) == b.ns && name(&p.metadata) == b.name)?;
        let count = self.selected.get(&(b.ns, b.name)).copied().unwrap_or(0);
        // a budget that never allows a disruption is the preflight's finding, not this one
        let tolerated = pdb::tolerated(budget, count).filter(|t| *t > 0)?;
        let must_move = b
            .groups
            .len()
            .saturating_sub(usize::try_from(tolerated).unwrap_or(0));
        if must_move == 0 {
            return None;
        }
        let (group, rep) = b.groups.iter().next()?;
        let need = match self.group_requests.get(&(b.ns, *group)) {
            Some(r) => with_pods(r.clone(), group_pods(&self.live, self.groups, b.ns, group)),
            None => with_pods(requests(rep), 1),
        };
        let capacity = slots(&self.free_outside(rep, returned, taint), &need)?;
        (capacity < must_move + b.moved_before).then(|| DeadEnd {
            domain: b.domain.to_string(),
            pdb: format!("{}/{}", b.ns, b.name),
            groups: b.groups.keys().map(|g| g.to_string()).collect(),
            tolerated,
            must_move,
            moved_before: b.moved_before,
            capacity,
            group_requests: describe(&need),
        })
    }

    /// What is free for `rep`'s group outside the rollout and on the domains handed off before.
    fn free_outside(&self, rep: &Pod, returned: &BTreeSet<&str>, taint: &Taint) -> Resources {
        let mut free = Resources::new();
        for node in self.nodes {
            let n = name(&node.metadata);
            let candidate = (!self.target.contains(n) && schedulable(node, rep, None))
                || (returned.contains(n) && schedulable(node, rep, Some(taint)));
            if candidate {
                // a node handed off comes back empty (optimistic: its pods' groups may
                // come back to it too)
                let pods = if returned.contains(n) {
                    None
                } else {
                    self.used.get(n)
                };
                free.add(&free_on(node, pods));
            }
        }
        free
    }
}
