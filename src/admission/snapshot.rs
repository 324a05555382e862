//! The validated, indexed view admission works on, built once from the raw objects of a
//! [`Snapshot`]: quotas parsed into exact quantities and laid out as a cohort [`Tree`], every
//! Workload's queue, priority, per-PodSet requests and held usage resolved up front.
//!
//! Bad objects never stop the build: a ClusterQueue with a bad quota or a missing flavor is kept
//! with the reason it is inactive, a Workload with a bad template keeps the reason it cannot be
//! admitted. Ids (ClusterQueues, cohorts, flavors, resources) are assigned in name order, so the
//! view does not depend on the order of the input.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::jiff::Timestamp;

use super::quota::{FrQuota, Tree};
use super::{Options, Snapshot};
use crate::podsets::pod_requests;
use crate::quantity::{Format, Quantity};
use crate::types::kueue::{
    self, ClusterQueue, Cohort, QueueingStrategy, ReclaimWithinCohort, ResourceGroup, StopPolicy,
    WithinClusterQueue, Workload, condition,
};

/// A ResourceFlavor (or a flavor name something refers to).
#[derive(Clone, Debug)]
pub(crate) struct FlavorInfo {
    pub name: String,
    pub exists: bool,
    pub node_labels: BTreeMap<String, String>,
}

/// One resource group of a ClusterQueue: `fr[flavor position][resource position]`.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub resources: Vec<usize>,
    pub flavors: Vec<usize>,
    pub fr: Vec<Vec<usize>>,
}

/// A label selector with its operators checked.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selector {
    labels: Vec<(String, String)>,
    exprs: Vec<(String, SelectorOp, Vec<String>)>,
}

#[derive(Clone, Copy, Debug)]
enum SelectorOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Selector {
    fn parse(sel: &LabelSelector, field: &str) -> Result<Selector, String> {
        let mut out = Selector {
            labels: sel
                .match_labels
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            exprs: Vec::new(),
        };
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            let values = e.values.clone().unwrap_or_default();
            let op = match e.operator.as_str() {
                "In" => SelectorOp::In,
                "NotIn" => SelectorOp::NotIn,
                "Exists" => SelectorOp::Exists,
                "DoesNotExist" => SelectorOp::DoesNotExist,
                other => {
                    return Err(format!(
                        "{field}.matchExpressions[{i}].operator: unknown operator {other:?}"
                    ));
                }
            };
            let needs_values = matches!(op, SelectorOp::In | SelectorOp::NotIn);
            if needs_values == values.is_empty() {
                return Err(format!(
                    "{field}.matchExpressions[{i}].values: {} for operator {}",
                    if needs_values {
                        "must not be empty"
                    } else {
                        "must be empty"
                    },
                    e.operator
                ));
            }
            out.exprs.push((e.key.clone(), op, values));
        }
        Ok(out)
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.labels
            .iter()
            .all(|(k, v)| get(k).is_some_and(|x| x == v))
            && self.exprs.iter().all(|(k, op, values)| match op {
                SelectorOp::In => get(k).is_some_and(|x| values.contains(x)),
                SelectorOp::NotIn => get(k).is_none_or(|x| !values.contains(x)),
                SelectorOp::Exists => get(k).is_some(),
                SelectorOp::DoesNotExist => get(k).is_none(),
            })
    }
}

/// A ClusterQueue; its id is also its node id in the tree.
#[derive(Clone, Debug)]
pub(crate) struct CqInfo {
    pub name: String,
    pub groups: Vec<Group>,
    /// resource id → (group, position in the group)
    pub group_of: Vec<Option<(usize, usize)>>,
    pub strategy: QueueingStrategy,
    pub stop: StopPolicy,
    pub within: WithinClusterQueue,
    pub reclaim: ReclaimWithinCohort,
    /// `None`: every namespace. Kueue's CRD says a null selector selects *no* namespace (only
    /// `{}` selects all); raygate is lenient here because its own manifests and tests omit it.
    /// `namespace_matches` is the one place to change to follow Kueue strictly.
    pub selector: Option<Selector>,
    /// Why the ClusterQueue admits nothing (`None`: active), and the Active condition's reason.
    pub inactive: Option<(&'static str, String)>,
    /// Root node of its cohort tree (itself without a cohort).
    pub root: usize,
    /// (flavor, resource) pairs of its quota in spec order, for usage reports.
    pub frs: Vec<usize>,
}

/// A LocalQueue.
#[derive(Clone, Debug)]
pub(crate) struct LqInfo {
    pub namespace: String,
    pub name: String,
    pub cluster_queue: Option<String>,
    pub stop: StopPolicy,
}

/// The queue a pending Workload goes to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Target {
    pub cq: usize,
}

/// One request of a PodSet: the total over its pods (non-zero entries only).
#[derive(Clone, Debug)]
pub(crate) struct Req {
    /// `None`: no ClusterQueue or Cohort has quota for this resource.
    pub res: Option<usize>,
    pub name: String,
    pub total: Quantity,
}

/// A PodSet's needs.
#[derive(Clone, Debug)]
pub(crate) struct PodSetReq {
    pub name: String,
    pub count: i32,
    pub requests: Vec<Req>,
    pub node_selector: BTreeMap<String, String>,
}

/// Quota a Workload holds.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    /// `None`: its ClusterQueue does not exist (it is counted nowhere).
    pub cq: Option<usize>,
    /// Per (flavor, resource), aggregated and sorted.
    pub usage: Vec<(usize, Quantity)>,
    /// PodSet name → (resource name → flavor id), for sticky flavors of a replacement.
    pub flavors: Vec<(String, Vec<(String, usize)>)>,
    pub admitted_at: Timestamp,
}

/// A Workload as admission sees it.
#[derive(Clone, Debug)]
pub(crate) struct WlInfo {
    pub key: String,
    pub namespace: String,
    pub priority: i32,
    pub created: Timestamp,
    pub active: bool,
    pub target: Result<Target, String>,
    pub lq: Option<usize>,
    pub podsets: Result<Vec<PodSetReq>, String>,
    /// Key of the slice it replaces (same namespace only).
    pub replaces: Option<String>,
    /// Reason of `Finished=True`.
    pub finished: Option<String>,
    pub held: Option<Held>,
    pub evicted: bool,
    /// Queue order time: the eviction time for a requeued Workload, else the creation time.
    pub order_time: Timestamp,
    /// A second object with the same key: ignored.
    pub duplicate: bool,
}

impl WlInfo {
    /// True when it is waiting for quota (not holding any, not finished).
    pub fn is_pending(&self) -> bool {
        !self.duplicate && self.finished.is_none() && self.held.is_none()
    }
}

/// Everything but the Workloads.
#[derive(Clone, Debug, Default)]
pub(crate) struct Queues {
    pub flavors: Vec<FlavorInfo>,
    flavor_ids: HashMap<String, usize>,
    pub resources: Vec<String>,
    resource_ids: HashMap<String, usize>,
    /// (flavor id, resource id) per fr id.
    pub frs: Vec<(usize, usize)>,
    fr_ids: HashMap<(usize, usize), usize>,
    pub tree: Tree,
    pub cqs: Vec<CqInfo>,
    pub cq_ids: HashMap<String, usize>,
    /// Cohort node id → name.
    pub cohort_names: BTreeMap<usize, String>,
    /// Root node id → ClusterQueues in that tree.
    pub tree_cqs: HashMap<usize, Vec<usize>>,
    pub lqs: Vec<LqInfo>,
    lq_ids: HashMap<(String, String), usize>,
    priorities: HashMap<String, i32>,
    namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    release_evicted: bool,
}

/// The whole indexed view.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    pub q: Queues,
    /// Parallel to `Snapshot::workloads`.
    pub workloads: Vec<WlInfo>,
    pub by_key: HashMap<String, usize>,
    /// Workload indexes sorted by key.
    pub sorted: Vec<usize>,
    /// Position of each Workload in `sorted`: compares like its key, without comparing strings.
    pub rank: Vec<u32>,
}

fn is_true<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

fn parse_quantity(q: &K8sQuantity, field: &str) -> Result<Quantity, String> {
    let v = Quantity::try_from(q).map_err(|e| format!("{field}: invalid quantity: {e}"))?;
    if v.is_negative() {
        return Err(format!("{field}: must not be negative (got {v})"));
    }
    Ok(v)
}

/// A quantity of `nanos` nano-units printed in the family of `like`.
pub(crate) fn quantity_from_nanos(nanos: i128, like: Quantity) -> Quantity {
    const NANO: i128 = 1_000_000_000;
    if like.format() == Format::BinarySI
        && nanos % NANO == 0
        && let Ok(units) = i64::try_from(nanos / NANO)
    {
        return Quantity::from_bytes(units);
    }
    let text = if like.format() == Format::DecimalExponent {
        format!("{nanos}e-9")
    } else {
        format!("{nanos}n")
    };
    Quantity::parse(&text).unwrap_or(like)
}

/// Largest request total accepted (2^100 nano-units, about 10^21 units): sums of many stay far
/// from overflowing the 128-bit arithmetic.
const MAX_REQUEST_NANOS: i128 = 1 << 100;

fn key_of(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Parsed quota of one ClusterQueue or Cohort, before the tree exists.
struct RawQuota {
    groups: Vec<Group>,
    quotas: Vec<(usize, FrQuota)>,
    frs: Vec<usize>,
    error: Option<(&'static str, String)>,
    missing_flavors: BTreeSet<String>,
}

impl Queues {
    fn flavor_id(&mut self, name: &str) -> usize {
        if let Some(&id) = self.flavor_ids.get(name) {
            return id;
        }
        self.flavors.push(FlavorInfo {
            name: name.to_string(),
            exists: false,
            node_labels: BTreeMap::new(),
        });
        self.flavor_ids
            .insert(name.to_string(), self.flavors.len() - 1);
        self.flavors.len() - 1
    }

    fn resource_id(&mut self, name: &str) -> usize {
        if let Some(&id) = self.resource_ids.get(name) {
            return id;
        }
        self.resources.push(name.to_string());
        self.resource_ids
            .insert(name.to_string(), self.resources.len() - 1);
        self.resources.len() - 1
    }

    fn fr_id(&mut self, flavor: usize, resource: usize) -> usize {
        if let Some(&id) = self.fr_ids.get(&(flavor, resource)) {
            return id;
        }
        self.frs.push((flavor, resource));
        self.fr_ids.insert((flavor, resource), self.frs.len() - 1);
        self.frs.len() - 1
    }

    /// The (flavor, resource) id of names, if any quota or held usage mentions the pair.
    pub fn find_fr(&self, flavor: &str, resource: &str) -> Option<usize> {
        let f = self.flavor_ids.get(flavor)?;
        let r = self.resource_ids.get(resource)?;
        self.fr_ids.get(&(*f, *r)).copied()
    }

    pub fn flavor_name(&self, fr: usize) -> &str {
        &self.flavors[self.frs[fr].0].name
    }

    pub fn resource_name(&self, fr: usize) -> &str {
        &self.resources[self.frs[fr].1]
    }

    /// Parses `resourceGroups`; `what` names the object for errors (`spec.resourceGroups[..]`).
    fn parse_groups(&mut self, groups: &[ResourceGroup]) -> RawQuota {
        let mut raw = RawQuota {
            groups: Vec::new(),
            quotas: Vec::new(),
            frs: Vec::new(),
            error: None,
            missing_flavors: BTreeSet::new(),
        };
        let mut covered: BTreeMap<&str, usize> = BTreeMap::new();
        let mut seen_flavors: BTreeMap<&str, usize> = BTreeMap::new();
        let fail = |raw: &mut RawQuota, reason: &'static str, msg: String| {
            if raw.error.is_none() {
                raw.error = Some((reason, msg));
            }
        };
        for (gi, g) in groups.iter().enumerate() {
            let resources: Vec<usize> = g
                .covered_resources
                .iter()
                .map(|r| self.resource_id(r))
                .collect();
            for r in &g.covered_resources {
                if let Some(prev) = covered.insert(r, gi) {
                    fail(
                        &mut raw,
                        "InvalidSpec",
                        format!(
                            "spec.resourceGroups[{gi}].coveredResources: resource {r} is already covered by resourceGroups[{prev}]"
                        ),
                    );
                }
            }
            let mut group = Group {
                resources: resources.clone(),
                flavors: Vec::new(),
                fr: Vec::new(),
            };
            for (fi, f) in g.flavors.iter().enumerate() {
                let fid = self.flavor_id(&f.name);
                if !self.flavors[fid].exists {
                    raw.missing_flavors.insert(f.name.clone());
                }
                if let Some(prev) = seen_flavors.insert(&f.name, gi) {
                    fail(
                        &mut raw,
                        "InvalidSpec",
                        format!(
                            "spec.resourceGroups[{gi}].flavors[{fi}]: flavor {:?} is already used in resourceGroups[{prev}]",
                            f.name
                        ),
                    );
                }
                let row: Vec<usize> = resources.iter().map(|&r| self.fr_id(fid, r)).collect();
                raw.frs.extend(row.iter().copied());
                for (ri, rq) in f.resources.iter().enumerate() {
                    let field = format!("spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}]");
                    let Some(pos) = g.covered_resources.iter().position(|c| *c == rq.name) else {
                        fail(
                            &mut raw,
                            "InvalidSpec",
                            format!("{field}: resource {} is not in coveredResources", rq.name),
                        );
                        continue;
                    };
                    let nominal = match &rq.nominal_quota {
                        Some(q) => parse_quantity(q, &format!("{field}.nominalQuota")),
                        None => Err(format!("{field}.nominalQuota: required")),
                    };
                    let bl = rq
                        .borrowing_limit
                        .as_ref()
                        .map(|q| parse_quantity(q, &format!("{field}.borrowingLimit")))
                        .transpose();
                    let ll = rq
                        .lending_limit
                        .as_ref()
                        .map(|q| parse_quantity(q, &format!("{field}.lendingLimit")))
                        .transpose();
                    match (nominal, bl, ll) {
                        (Ok(nominal), Ok(borrowing_limit), Ok(lending_limit)) => {
                            raw.quotas.push((
                                row[pos],
                                FrQuota {
                                    nominal,
                                    borrowing_limit,
                                    lending_limit,
                                },
                            ));
                        }
                        (a, b, c) => {
                            let msg = [a.err(), b.err(), c.err()].into_iter().flatten().next();
                            fail(&mut raw, "InvalidSpec", msg.unwrap_or_default());
                            // lend nothing and borrow nothing: the safe side for everyone else
                            raw.quotas.push((
                                row[pos],
                                FrQuota {
                                    nominal: Quantity::ZERO,
                                    borrowing_limit: Some(Quantity::ZERO),
                                    lending_limit: Some(Quantity::ZERO),
                                },
                            ));
                        }
                    }
                }
                group.flavors.push(fid);
                group.fr.push(row);
            }
            raw.groups.push(group);
        }
        raw
    }
}

fn dense(n_fr: usize, quotas: &[(usize, FrQuota)]) -> Vec<FrQuota> {
    let mut v = vec![FrQuota::default(); n_fr];
    for (fr, q) in quotas {
        v[*fr] = *q;
    }
    v
}

impl Index {
    /// Builds the view. Objects without a name are ignored; of two objects with the same name,
    /// the first (in name order, then input order) is used.
    pub fn build(snapshot: &Snapshot, options: &Options) -> Index {
        let mut q = Queues {
            release_evicted: options.release_evicted_immediately,
            namespace_labels: snapshot.namespace_labels.clone(),
            ..Queues::default()
        };

        // ResourceFlavors
        let mut flavors: Vec<_> = snapshot
            .flavors
            .iter()
            .filter_map(|f| f.metadata.name.as_deref().map(|n| (n, f)))
            .collect();
        flavors.sort_by_key(|(n, _)| *n);
        for (name, f) in flavors {
            if q.flavor_ids.contains_key(name) {
                continue;
            }
            let id = q.flavor_id(name);
            q.flavors[id].exists = true;
            q.flavors[id].node_labels = f.spec.node_labels.clone().unwrap_or_default();
        }

        // ClusterQueues and Cohorts: parse quotas (interning flavors, resources, pairs)
        let mut cqs: Vec<(&str, &ClusterQueue)> = snapshot
            .cluster_queues
            .iter()
            .filter_map(|c| c.metadata.name.as_deref().map(|n| (n, c)))
            .collect();
        cqs.sort_by_key(|(n, _)| *n);
        cqs.dedup_by_key(|(n, _)| *n);
        let cq_raw: Vec<RawQuota> = cqs
            .iter()
            .map(|(_, c)| q.parse_groups(&c.spec.resource_groups))
            .collect();
        let mut cohorts: Vec<(&str, &Cohort)> = snapshot
            .cohorts
            .iter()
            .filter_map(|c| c.metadata.name.as_deref().map(|n| (n, c)))
            .collect();
        cohorts.sort_by_key(|(n, _)| *n);
        cohorts.dedup_by_key(|(n, _)| *n);
        let cohort_raw: BTreeMap<&str, RawQuota> = cohorts
            .iter()
            .map(|(n, c)| (*n, q.parse_groups(&c.spec.resource_groups)))
            .collect();
        let cohort_parent: BTreeMap<&str, &str> = cohorts
            .iter()
            .filter_map(|(n, c)| c.spec.parent_name.as_deref().map(|p| (*n, p)))
            .filter(|(_, p)| !p.is_empty())
            .collect();

        // held usage may name pairs no quota has
        for w in &snapshot.workloads {
            let Some(status) = &w.status else { continue };
            let Some(adm) = &status.admission else {
                continue;
            };
            for psa in &adm.pod_set_assignments {
                for (res, fl) in &psa.flavors {
                    let f = q.flavor_id(fl);
                    let r = q.resource_id(res);
                    q.fr_id(f, r);
                }
            }
        }

        // the tree: ClusterQueue nodes first (node id = ClusterQueue id), then cohorts by name
        let n_fr = q.frs.len();
        q.tree = Tree::new(n_fr);
        for raw in &cq_raw {
            q.tree.push(dense(n_fr, &raw.quotas));
        }
        let mut cohort_names: BTreeSet<&str> = cohorts.iter().map(|(n, _)| *n).collect();
        cohort_names.extend(cohort_parent.values().copied());
        cohort_names.extend(
            cqs.iter()
                .filter_map(|(_, c)| c.spec.cohort_name.as_deref())
                .filter(|n| !n.is_empty()),
        );
        let mut cohort_node: BTreeMap<&str, usize> = BTreeMap::new();
        for name in &cohort_names {
            let quotas = cohort_raw
                .get(name)
                .map(|r| r.quotas.as_slice())
                .unwrap_or_default();
            let id = q.tree.push(dense(n_fr, quotas));
            cohort_node.insert(name, id);
            q.cohort_names.insert(id, name.to_string());
        }

        // cohort parents, cutting cycles; a cohort is broken by its own bad quota, by being on a
        // cycle, or by a broken ancestor
        let mut broken: BTreeMap<&str, String> = BTreeMap::new();
        for (name, raw) in &cohort_raw {
            if let Some((_, e)) = &raw.error {
                broken.insert(name, format!("Cohort {name}: {e}"));
            }
        }
        for name in &cohort_names {
            let mut path = vec![*name];
            let mut cur = *name;
            while let Some(&p) = cohort_parent.get(cur) {
                if p == *name {
                    path.push(p);
                    broken.entry(name).or_insert_with(|| {
                        format!("cohort {name} is part of a cycle ({})", path.join(" -> "))
                    });
                    break;
                }
                if path.contains(&p) {
                    break; // a cycle above, not through this cohort
                }
                path.push(p);
                cur = p;
            }
        }
        for name in &cohort_names {
            let on_cycle = broken
                .get(name)
                .is_some_and(|m| m.contains("part of a cycle"));
            if let (Some(p), false) = (cohort_parent.get(name), on_cycle) {
                q.tree.nodes[cohort_node[name]].parent = Some(cohort_node[p]);
            }
        }
        // inherit breakage from ancestors (the parent links are acyclic now)
        let mut inherited: BTreeMap<&str, String> = BTreeMap::new();
        for name in &cohort_names {
            let mut cur = Some(*name);
            let mut hops = 0;
            while let Some(c) = cur {
                if let Some(m) = broken.get(c) {
                    inherited.insert(name, m.clone());
                    break;
                }
                let node = cohort_node[c];
                cur = q.tree.nodes[node]
                    .parent
                    .and_then(|p| q.cohort_names.get(&p))
                    .and_then(|n| cohort_names.get(n.as_str()).copied());
                hops += 1;
                if hops > cohort_names.len() {
                    break;
                }
            }
        }

        // ClusterQueues
        for (i, ((name, cq), raw)) in cqs.iter().zip(cq_raw).enumerate() {
            let cohort = cq.spec.cohort_name.as_deref().filter(|n| !n.is_empty());
            if let Some(c) = cohort {
                q.tree.nodes[i].parent = Some(cohort_node[c]);
            }
            let mut inactive = raw
                .error
                .map(|(r, m)| (r, format!("ClusterQueue {name} is inactive: {m}")));
            if inactive.is_none() && !raw.missing_flavors.is_empty() {
                let list: Vec<String> = raw
                    .missing_flavors
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect();
                inactive = Some((
                    "FlavorNotFound",
                    format!(
                        "ClusterQueue {name} is inactive: {} {} not found",
                        if list.len() == 1 { "flavor" } else { "flavors" },
                        list.join(", ")
                    ),
                ));
            }
            if inactive.is_none()
                && let Some(m) = cohort.and_then(|c| inherited.get(c))
            {
                let reason = if m.contains("part of a cycle") {
                    "CohortCycle"
                } else {
                    "InvalidSpec"
                };
                inactive = Some((reason, format!("ClusterQueue {name} is inactive: {m}")));
            }
            let selector = match &cq.spec.namespace_selector {
                None => None,
                Some(s) => match Selector::parse(s, "spec.namespaceSelector") {
                    Ok(s) => Some(s),
                    Err(e) => {
                        inactive.get_or_insert((
                            "InvalidSpec",
                            format!("ClusterQueue {name} is inactive: {e}"),
                        ));
                        None
                    }
                },
            };
            let preemption = cq.spec.preemption.clone().unwrap_or_default();
            q.cq_ids.insert(name.to_string(), i);
            q.cqs.push(CqInfo {
                name: name.to_string(),
                groups: raw.groups,
                group_of: Vec::new(),
                strategy: cq.spec.queueing_strategy.unwrap_or_default(),
                stop: cq.spec.stop_policy.unwrap_or_default(),
                within: preemption.within_cluster_queue.unwrap_or_default(),
                reclaim: preemption.reclaim_within_cohort.unwrap_or_default(),
                selector,
                inactive,
                root: i,
                frs: raw.frs,
            });
        }
        q.tree.finalize();
        let n_res = q.resources.len();
        for c in 0..q.cqs.len() {
            let mut group_of = vec![None; n_res];
            for (gi, g) in q.cqs[c].groups.iter().enumerate() {
                for (pos, &r) in g.resources.iter().enumerate() {
                    group_of[r].get_or_insert((gi, pos));
                }
            }
            let mut root = c;
            let mut hops = 0;
            while let Some(p) = q.tree.nodes[root].parent {
                root = p;
                hops += 1;
                if hops > q.tree.nodes.len() {
                    break;
                }
            }
            q.cqs[c].group_of = group_of;
            q.cqs[c].root = root;
            q.tree_cqs.entry(root).or_default().push(c);
        }

        // LocalQueues
        let mut lqs: Vec<_> = snapshot
            .local_queues
            .iter()
            .filter_map(|l| {
                let name = l.metadata.name.as_deref()?;
                let ns = l.metadata.namespace.as_deref().unwrap_or("default");
                Some(((ns, name), l))
            })
            .collect();
        lqs.sort_by_key(|(k, _)| *k);
        lqs.dedup_by_key(|(k, _)| *k);
        for ((ns, name), l) in lqs {
            q.lq_ids
                .insert((ns.to_string(), name.to_string()), q.lqs.len());
            q.lqs.push(LqInfo {
                namespace: ns.to_string(),
                name: name.to_string(),
                cluster_queue: l.spec.cluster_queue.clone().filter(|c| !c.is_empty()),
                stop: l.spec.stop_policy.unwrap_or_default(),
            });
        }

        // WorkloadPriorityClasses
        let mut classes: Vec<_> = snapshot
            .priority_classes
            .iter()
            .filter_map(|p| p.metadata.name.as_deref().map(|n| (n, p.spec.value)))
            .collect();
        classes.sort_by_key(|(n, _)| *n);
        for (n, v) in classes {
            q.priorities.entry(n.to_string()).or_insert(v);
        }

        let workloads: Vec<WlInfo> = snapshot.workloads.iter().map(|w| q.derive(w)).collect();
        let mut ix = Index {
            q,
            workloads,
            by_key: HashMap::new(),
            sorted: Vec::new(),
            rank: Vec::new(),
        };
        ix.reindex_keys();
        ix
    }

    /// Rebuilds the key map and marks duplicates (the first in input order wins).
    pub fn reindex_keys(&mut self) {
        self.by_key.clear();
        for (i, w) in self.workloads.iter_mut().enumerate() {
            w.duplicate = self.by_key.contains_key(&w.key);
            if !w.duplicate {
                self.by_key.insert(w.key.clone(), i);
            }
        }
        let mut sorted: Vec<usize> = self.by_key.values().copied().collect();
        sorted.sort_by(|&a, &b| self.workloads[a].key.cmp(&self.workloads[b].key));
        self.rank = vec![u32::MAX; self.workloads.len()];
        for (r, &i) in sorted.iter().enumerate() {
            self.rank[i] = u32::try_from(r).unwrap_or(u32::MAX);
        }
        self.sorted = sorted;
    }
}

impl Queues {
    pub fn namespace_matches(&self, cq: usize, namespace: &str) -> bool {
        match &self.cqs[cq].selector {
            None => true,
            Some(s) => s.matches(self.namespace_labels.get(namespace)),
        }
    }

    /// Everything admission needs to know about one Workload.
    pub fn derive(&self, w: &Workload) -> WlInfo {
        let namespace = w.metadata.namespace.as_deref().unwrap_or("default");
        let name = w.metadata.name.as_deref().unwrap_or_default();
        let key = key_of(namespace, name);
        let spec = &w.spec;
        let priority = match &spec.priority_class_ref {
            Some(r) if r.kind == "WorkloadPriorityClass" => self
                .priorities
                .get(&r.name)
                .copied()
                .or(spec.priority)
                .unwrap_or(0),
            _ => spec.priority.unwrap_or(0),
        };
        let created = w
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let (lq, target) = self.resolve_queue(namespace, spec.queue_name.as_deref());
        let podsets = self.podset_requests(w, &key);
        let replaces = w
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(kueue::WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION))
            .and_then(|v| match v.split_once('/') {
                Some((ns, n)) if ns == namespace && !n.is_empty() => Some(key_of(ns, n)),
                Some(_) => None, // another namespace: ignored, as Kueue does
                None if !v.is_empty() => Some(key_of(namespace, v)),
                None => None,
            });
        let conds = w
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let finished = is_true(conds, condition::FINISHED).map(|c| c.reason.clone());
        let evicted_cond = is_true(conds, condition::EVICTED);
        let evicted = evicted_cond.is_some();
        let reserved = is_true(conds, condition::QUOTA_RESERVED);
        let held = match (
            &finished,
            reserved,
            w.status.as_ref().and_then(|s| s.admission.as_ref()),
        ) {
            (None, Some(qr), Some(adm)) if !(evicted && self.release_evicted) => {
                Some(self.held(w, adm, qr.last_transition_time.0))
            }
            _ => None,
        };
        let order_time = match (evicted_cond, &held) {
            (Some(e), None) => e.last_transition_time.0,
            _ => created,
        };
        WlInfo {
            key,
            namespace: namespace.to_string(),
            priority,
            created,
            active: spec.active != Some(false),
            target,
            lq,
            podsets,
            replaces,
            finished,
            held,
            evicted,
            order_time,
            duplicate: false,
        }
    }

    fn resolve_queue(
        &self,
        namespace: &str,
        queue: Option<&str>,
    ) -> (Option<usize>, Result<Target, String>) {
        let Some(queue) = queue.filter(|q| !q.is_empty()) else {
            return (None, Err("Workload has no spec.queueName".to_string()));
        };
        let Some(&lq) = self.lq_ids.get(&(namespace.to_string(), queue.to_string())) else {
            return (
                None,
                Err(format!("LocalQueue {namespace}/{queue} doesn't exist")),
            );
        };
        let target = match &self.lqs[lq].cluster_queue {
            None => Err(format!(
                "LocalQueue {namespace}/{queue} has no spec.clusterQueue"
            )),
            Some(cq) => match self.cq_ids.get(cq) {
                Some(&c) => Ok(Target { cq: c }),
                None => Err(format!("ClusterQueue {cq} doesn't exist")),
            },
        };
        (Some(lq), target)
    }

    fn podset_requests(&self, w: &Workload, key: &str) -> Result<Vec<PodSetReq>, String> {
        let object = format!("Workload {key}");
        let empty = PodSpec::default();
        let mut out = Vec::with_capacity(w.spec.pod_sets.len());
        for (i, ps) in w.spec.pod_sets.iter().enumerate() {
            if ps.count < 0 {
                return Err(format!(
                    "{object}: spec.podSets[{i}].count: must not be negative (got {})",
                    ps.count
                ));
            }
            let spec = ps.template.spec.as_ref().unwrap_or(&empty);
            let field = format!("spec.podSets[{i}].template.spec");
            let per_pod = pod_requests(spec, &field, &object).map_err(|e| e.to_string())?;
            let mut requests = Vec::new();
            for (name, q) in per_pod.iter() {
                if q.is_negative() {
                    return Err(format!(
                        "{object}: {field}: request for {name} must not be negative (got {q})"
                    ));
                }
                let total = q.times(i64::from(ps.count));
                if total.is_zero() {
                    continue;
                }
                if total.nanos() > MAX_REQUEST_NANOS {
                    return Err(format!(
                        "{object}: {field}: {name} for {} pods is too large to account ({q} each)",
                        ps.count
                    ));
                }
                requests.push(Req {
                    res: self.resource_ids.get(name).copied(),
                    name: name.to_string(),
                    total,
                });
            }
            out.push(PodSetReq {
                name: ps.name.clone(),
                count: ps.count,
                requests,
                node_selector: spec.node_selector.clone().unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// Usage of an admitted Workload: per PodSet `resourceUsage / admitted count` (rounded up)
    /// × `min(spec count, admitted count) − reclaimable pods`.
    fn held(&self, w: &Workload, adm: &kueue::Admission, admitted_at: Timestamp) -> Held {
        let status = w.status.as_ref();
        let mut usage: BTreeMap<usize, Quantity> = BTreeMap::new();
        let mut flavors = Vec::new();
        for psa in &adm.pod_set_assignments {
            let spec_count = w
                .spec
                .pod_sets
                .iter()
                .find(|p| p.name == psa.name)
                .map(|p| p.count);
            let admitted = i64::from(psa.count.or(spec_count).unwrap_or(0).max(0));
            let reclaimable = status
                .and_then(|s| s.reclaimable_pods.iter().find(|r| r.name == psa.name))
                .map_or(0, |r| i64::from(r.count.max(0)));
            let charged = (i64::from(spec_count.unwrap_or(i32::MAX).max(0)).min(admitted)
                - reclaimable)
                .max(0);
            for (res, q) in &psa.resource_usage {
                let Some(flavor) = psa.flavors.get(res) else {
                    continue;
                };
                let Some(fr) = self.find_fr(flavor, res) else {
                    continue;
                };
                let Ok(total) = Quantity::try_from(q) else {
                    continue; // unreadable usage: the template requests below stand in
                };
                if total.is_negative() || admitted == 0 {
                    continue;
                }
                let charge = if charged == admitted {
                    total
                } else {
                    let n = i128::from(admitted);
                    let per_pod = (total.nanos() + n - 1) / n;
                    quantity_from_nanos(per_pod * i128::from(charged), total)
                };
                *usage.entry(fr).or_insert(Quantity::ZERO) += charge;
            }
            // entries whose usage could not be read: charge the template's requests instead
            for (res, flavor) in &psa.flavors {
                let unreadable = psa
                    .resource_usage
                    .get(res)
                    .is_some_and(|q| Quantity::try_from(q).is_err());
                if !unreadable {
                    continue;
                }
                let Some(fr) = self.find_fr(flavor, res) else {
                    continue;
                };
                let Some((i, ps)) = w
                    .spec
                    .pod_sets
                    .iter()
                    .enumerate()
                    .find(|(_, p)| p.name == psa.name)
                else {
                    continue;
                };
                let spec = ps.template.spec.clone().unwrap_or_default();
                if let Ok(per_pod) = pod_requests(&spec, &format!("spec.podSets[{i}]"), "")
                    && !per_pod.get(res).is_negative()
                {
                    *usage.entry(fr).or_insert(Quantity::ZERO) += per_pod.get(res).times(charged);
                }
            }
            let fl: Vec<(String, usize)> = psa
                .flavors
                .iter()
                .filter_map(|(res, f)| self.flavor_ids.get(f).map(|&id| (res.clone(), id)))
                .collect();
            flavors.push((psa.name.clone(), fl));
        }
        Held {
            cq: self.cq_ids.get(&adm.cluster_queue).copied(),
            usage: usage.into_iter().filter(|(_, q)| !q.is_zero()).collect(),
            flavors,
            admitted_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::testing::*;

    #[test]
    fn held_usage_follows_scale_down_and_reclaimable_pods() {
        // admitted: 4 workers × 1 cpu = 4; spec scaled down to 3, one more pod reclaimable → 2
        let mut w = admitted_wl("w", "lq", "cq", &[("worker", 4, "1")], "default");
        w.spec.pod_sets[0].count = 3;
        w.status.as_mut().unwrap().reclaimable_pods = vec![kueue::ReclaimablePod {
            name: "worker".into(),
            count: 1,
        }];
        let s = Snapshot {
            flavors: vec![flavor("default")],
            cluster_queues: vec![cq("cq", None, &[("default", "cpu", "10")])],
            local_queues: vec![lq("lq", "cq")],
            workloads: vec![w],
            ..Snapshot::default()
        };
        let ix = Index::build(&s, &Options::default());
        let held = ix.workloads[0].held.as_ref().unwrap();
        assert_eq!(held.usage, vec![(0, Quantity::from_units(2))]);
    }

    #[test]
    fn odd_per_pod_usage_rounds_up() {
        // 10 cpu over 3 pods → 3.333333334 per pod; scaled to 2 pods → 6.666666668
        let mut w = admitted_wl("w", "lq", "cq", &[("worker", 3, "1")], "default");
        w.status
            .as_mut()
            .unwrap()
            .admission
            .as_mut()
            .unwrap()
            .pod_set_assignments[0]
            .resource_usage
            .insert("cpu".into(), K8sQuantity("10".into()));
        w.spec.pod_sets[0].count = 2;
        let s = Snapshot {
            flavors: vec![flavor("default")],
            cluster_queues: vec![cq("cq", None, &[("default", "cpu", "10")])],
            local_queues: vec![lq("lq", "cq")],
            workloads: vec![w],
            ..Snapshot::default()
        };
        let ix = Index::build(&s, &Options::default());
        let held = ix.workloads[0].held.as_ref().unwrap();
        assert_eq!(held.usage[0].1.to_string(), "6666666668n");
    }

    #[test]
    fn quantities_keep_their_family() {
        let gi = Quantity::parse("1Gi").unwrap();
        assert_eq!(quantity_from_nanos(gi.nanos() * 3, gi).to_string(), "3Gi");
        let e = Quantity::parse("1e3").unwrap();
        assert_eq!(quantity_from_nanos(e.nanos() * 2, e).to_string(), "2e3");
        assert_eq!(
            quantity_from_nanos(1_500_000_000, Quantity::ZERO).to_string(),
            "1500m"
        );
    }
}
