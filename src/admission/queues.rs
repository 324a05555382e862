//! The queues of a [`Snapshot`] as admission sees them: ResourceFlavors, ClusterQueues (with their
//! parsed quota, queueing and preemption policy, namespace selector and why they are inactive),
//! LocalQueues and WorkloadPriorityClasses, with flavors, resources and (flavor, resource) pairs
//! interned to dense ids ([`Catalog`]).
//!
//! Decides which ClusterQueue a Workload's `spec.queueName` leads to, whether a ClusterQueue
//! selects a namespace, and whether a ClusterQueue is active (its own quota, its flavors, its
//! cohort). Ids are assigned in name order, so nothing depends on the order of the input.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::catalog::Catalog;
use super::cohorts::{self, CohortTree, ParsedQuota, QuotaGroup};
use super::ids::{CqIx, FrIx, LqIx, NodeIx, ResourceIx, TiVec};
use super::quota::Tree;
use super::{Options, Snapshot};
use crate::labels::Selector;
use crate::types::kueue::{
    ClusterQueue, LocalQueue, QueueingStrategy, ReclaimWithinCohort, ResourceFlavor, StopPolicy,
    WithinClusterQueue, Workload, WorkloadPriorityClass,
};

/// A ClusterQueue; its id is also its node id in the tree.
#[derive(Clone, Debug)]
pub(crate) struct ClusterQueueEntry {
    pub name: String,
    pub groups: Vec<QuotaGroup>,
    /// resource → (group, position in the group)
    pub group_of: TiVec<ResourceIx, Option<(usize, usize)>>,
    pub strategy: QueueingStrategy,
    pub stop: StopPolicy,
    pub within: WithinClusterQueue,
    pub reclaim: ReclaimWithinCohort,
    /// `spec.preemption.borrowWithinCohort`: `None` when its policy is `Never` (the default),
    /// else its `maxPriorityThreshold` (`Some(None)`: no threshold).
    pub borrow_within: Option<Option<i32>>,
    /// `spec.flavorFungibility`.
    pub fungibility: Fungibility,
    /// `None`: every namespace. Kueue's CRD says a null selector selects *no* namespace (only
    /// `{}` selects all, [`Selector::from_optional`]); raygate is lenient here because its own
    /// manifests and tests omit it. `namespace_matches` is the one place to change to follow
    /// Kueue strictly.
    pub selector: Option<Selector>,
    /// Why the ClusterQueue admits nothing (`None`: active), and the Active condition's reason.
    pub inactive: Option<(&'static str, String)>,
    /// Root node of its cohort tree (itself without a cohort).
    pub root: NodeIx,
    /// (flavor, resource) pairs of its quota in spec order, for usage reports.
    pub frs: Vec<FrIx>,
}

/// `spec.flavorFungibility`: whether the flavor search goes on past a flavor where the Workload
/// fits only by borrowing (`whenCanBorrow: TryNextFlavor`; Kueue's default `MayStopSearch`), or
/// only by preempting (`whenCanPreempt: TryNextFlavor`, Kueue's default; `MayStopSearch`), and
/// which flavor wins when all need borrowing or preemption (`preference`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fungibility {
    pub borrow_try_next: bool,
    pub preempt_try_next: bool,
    /// `preference: PreemptionOverBorrowing` (Kueue's default is `BorrowingOverPreemption`).
    pub preemption_over_borrowing: bool,
}

impl Fungibility {
    /// Kueue's CRD also takes the deprecated names `Borrow` and `Preempt` for `MayStopSearch`.
    pub fn of(spec: Option<&crate::types::kueue::FlavorFungibility>) -> Fungibility {
        let policy = |v: Option<&String>, default: bool| match v.map(String::as_str) {
            Some("TryNextFlavor") => true,
            Some("MayStopSearch" | "Borrow" | "Preempt") => false,
            _ => default,
        };
        Fungibility {
            borrow_try_next: policy(spec.and_then(|f| f.when_can_borrow.as_ref()), false),
            preempt_try_next: policy(spec.and_then(|f| f.when_can_preempt.as_ref()), true),
            preemption_over_borrowing: spec.and_then(|f| f.preference.as_deref())
                == Some("PreemptionOverBorrowing"),
        }
    }
}

/// `spec.preemption.borrowWithinCohort` read: `None` for the policy `Never` (or none), else
/// the threshold; an unknown policy is an error naming the field (Kueue's CRD allows `Never` and
/// `LowerPriority`).
fn borrow_within(
    spec: Option<&crate::types::kueue::BorrowWithinCohort>,
) -> Result<Option<Option<i32>>, String> {
    let Some(b) = spec else { return Ok(None) };
    match b.policy.as_deref() {
        None | Some("Never") => Ok(None),
        Some("LowerPriority") => Ok(Some(b.max_priority_threshold)),
        Some(other) => Err(format!(
            "spec.preemption.borrowWithinCohort.policy: unknown value {other:?} (Never or LowerPriority)"
        )),
    }
}

/// A LocalQueue.
#[derive(Clone, Debug)]
pub(crate) struct LocalQueueEntry {
    pub namespace: String,
    pub name: String,
    pub cluster_queue: Option<String>,
    pub stop: StopPolicy,
}

/// The queue a pending Workload goes to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Target {
    pub cq: CqIx,
}

/// Everything but the Workloads.
#[derive(Clone, Debug, Default)]
pub(crate) struct Queues {
    pub catalog: Catalog,
    pub tree: Tree,
    pub cqs: TiVec<CqIx, ClusterQueueEntry>,
    pub cq_ids: HashMap<String, CqIx>,
    /// Root node → ClusterQueues in that tree.
    pub tree_cqs: HashMap<NodeIx, Vec<CqIx>>,
    pub lqs: TiVec<LqIx, LocalQueueEntry>,
    lq_ids: HashMap<(String, String), LqIx>,
    pub(super) priorities: HashMap<String, i32>,
    namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    pub(super) pod_defaults: crate::podsets::PodDefaults,
    pub(super) release_evicted: bool,
}

/// Named objects in name order, the first of each name only (stable: input order breaks ties).
fn by_name<T>(objects: &[T], meta: impl Fn(&T) -> &ObjectMeta) -> Vec<(&str, &T)> {
    let mut out: Vec<(&str, &T)> = objects
        .iter()
        .filter_map(|o| meta(o).name.as_deref().map(|n| (n, o)))
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out.dedup_by_key(|(n, _)| *n);
    out
}

impl Queues {
    /// Builds everything but the Workloads' own entries. Objects without a name are ignored; of
    /// two objects with the same name, the first (in name order, then input order) is used.
    pub fn build(snapshot: &Snapshot, options: &Options) -> Queues {
        let mut q = Queues {
            release_evicted: options.release_evicted_immediately,
            namespace_labels: snapshot.namespace_labels.clone(),
            pod_defaults: snapshot.pod_defaults.clone(),
            ..Queues::default()
        };
        q.add_flavors(&snapshot.flavors);
        // interning order: flavors, ClusterQueue quotas, Cohort quotas, then held usage
        let cluster_queues = by_name(&snapshot.cluster_queues, |c| &c.metadata);
        let cq_quotas: TiVec<CqIx, ParsedQuota> = cluster_queues
            .iter()
            .map(|(_, c)| cohorts::parse_groups(&mut q.catalog, &c.spec.resource_groups))
            .collect();
        let cohorts = by_name(&snapshot.cohorts, |c| &c.metadata);
        let cohort_quotas: BTreeMap<&str, ParsedQuota> = cohorts
            .iter()
            .map(|(n, c)| {
                let quota = cohorts::parse_groups(&mut q.catalog, &c.spec.resource_groups);
                (*n, quota)
            })
            .collect();
        q.intern_held_pairs(&snapshot.workloads);
        let mut tree = cohorts::build(
            q.catalog.frs.len(),
            &cluster_queues,
            &cq_quotas,
            &cohorts,
            &cohort_quotas,
        );
        q.tree = std::mem::take(&mut tree.tree);
        q.add_cluster_queues(&cluster_queues, cq_quotas, &tree);
        q.finish_tree();
        q.add_local_queues(&snapshot.local_queues);
        q.add_priority_classes(&snapshot.priority_classes);
        q
    }

    fn add_flavors(&mut self, flavors: &[ResourceFlavor]) {
        for (name, f) in by_name(flavors, |f| &f.metadata) {
            let id = self.catalog.intern_flavor(name);
            let flavor = &mut self.catalog.flavors[id];
            flavor.exists = true;
            flavor.node_labels = f.spec.node_labels.clone().unwrap_or_default();
        }
    }

    /// Held usage may name (flavor, resource) pairs no quota has.
    fn intern_held_pairs(&mut self, workloads: &[Workload]) {
        let assignments = workloads
            .iter()
            .filter_map(|w| w.status.as_ref()?.admission.as_ref())
            .flat_map(|adm| &adm.pod_set_assignments);
        for psa in assignments {
            for (res, fl) in &psa.flavors {
                let f = self.catalog.intern_flavor(fl);
                let r = self.catalog.intern_resource(res);
                self.catalog.intern_fr(f, r);
            }
        }
    }

    /// ClusterQueues in name order (id = node id), linked to their cohorts.
    fn add_cluster_queues(
        &mut self,
        cluster_queues: &[(&str, &ClusterQueue)],
        quotas: TiVec<CqIx, ParsedQuota>,
        tree: &CohortTree,
    ) {
        for ((i, raw), (name, cq)) in quotas.into_iter_enumerated().zip(cluster_queues) {
            let cohort = cq.spec.cohort_name.as_deref().filter(|n| !n.is_empty());
            if let Some(c) = cohort {
                self.tree.nodes[i.node()].parent = Some(tree.node[c]);
            }
            let mut inactive = quota_inactive(name, &raw).or_else(|| {
                let m = cohort.and_then(|c| tree.broken.get(c))?;
                let reason = if m.contains("part of a cycle") {
                    "CohortCycle"
                } else {
                    "InvalidSpec"
                };
                Some((reason, format!("ClusterQueue {name} is inactive: {m}")))
            });
            let selector = match &cq.spec.namespace_selector {
                None => None,
                Some(s) => match Selector::from_label_selector(s, "spec.namespaceSelector") {
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
            let borrow_within = borrow_within(preemption.borrow_within_cohort.as_ref())
                .unwrap_or_else(|e| {
                    inactive.get_or_insert((
                        "InvalidSpec",
                        format!("ClusterQueue {name} is inactive: {e}"),
                    ));
                    None
                });
            self.cq_ids.insert(name.to_string(), i);
            self.cqs.push(ClusterQueueEntry {
                name: name.to_string(),
                groups: raw.groups,
                group_of: TiVec::new(),
                strategy: cq.spec.queueing_strategy.unwrap_or_default(),
                stop: cq.spec.stop_policy.unwrap_or_default(),
                within: preemption.within_cluster_queue.unwrap_or_default(),
                reclaim: preemption.reclaim_within_cohort.unwrap_or_default(),
                borrow_within,
                fungibility: Fungibility::of(cq.spec.flavor_fungibility.as_ref()),
                selector,
                inactive,
                root: i.node(),
                frs: raw.frs,
            });
        }
    }

    /// Finalizes the tree's quotas, then each ClusterQueue's resource → group map and root.
    fn finish_tree(&mut self) {
        self.tree.finalize();
        let n_res = self.catalog.resources.len();
        for c in self.cqs.keys() {
            let mut group_of = TiVec::from(vec![None; n_res]);
            for (gi, g) in self.cqs[c].groups.iter().enumerate() {
                for (pos, &r) in g.resources.iter().enumerate() {
                    group_of[r].get_or_insert((gi, pos));
                }
            }
            let mut root = c.node();
            let mut hops = 0;
            while let Some(p) = self.tree.nodes[root].parent {
                root = p;
                hops += 1;
                if hops > self.tree.nodes.len() {
                    break;
                }
            }
            self.cqs[c].group_of = group_of;
            self.cqs[c].root = root;
            self.tree_cqs.entry(root).or_default().push(c);
        }
    }

    fn add_local_queues(&mut self, local_queues: &[LocalQueue]) {
        let mut lqs: Vec<_> = local_queues
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
            let id = self.lqs.push_and_get_key(LocalQueueEntry {
                namespace: ns.to_string(),
                name: name.to_string(),
                cluster_queue: l.spec.cluster_queue.clone().filter(|c| !c.is_empty()),
                stop: l.spec.stop_policy.unwrap_or_default(),
            });
            self.lq_ids.insert((ns.to_string(), name.to_string()), id);
        }
    }

    fn add_priority_classes(&mut self, classes: &[WorkloadPriorityClass]) {
        for (n, p) in by_name(classes, |p| &p.metadata) {
            self.priorities.entry(n.to_string()).or_insert(p.spec.value);
        }
    }

    pub fn namespace_matches(&self, cq: CqIx, namespace: &str) -> bool {
        match &self.cqs[cq].selector {
            None => true,
            Some(s) => s.matches(self.namespace_labels.get(namespace)),
        }
    }

    /// The LocalQueue a Workload names and the ClusterQueue it leads to (or why none).
    pub(super) fn resolve_queue(
        &self,
        namespace: &str,
        queue: Option<&str>,
    ) -> (Option<LqIx>, Result<Target, String>) {
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
}

/// Why a ClusterQueue's own quota makes it inactive: a bad spec, else a missing flavor.
fn quota_inactive(name: &str, raw: &ParsedQuota) -> Option<(&'static str, String)> {
    if let Some((r, m)) = &raw.error {
        return Some((*r, format!("ClusterQueue {name} is inactive: {m}")));
    }
    if raw.missing_flavors.is_empty() {
        return None;
    }
    let list: Vec<String> = raw
        .missing_flavors
        .iter()
        .map(|f| format!("{f:?}"))
        .collect();
    Some((
        "FlavorNotFound",
        format!(
            "ClusterQueue {name} is inactive: {} {} not found",
            if list.len() == 1 { "flavor" } else { "flavors" },
            list.join(", ")
        ),
    ))
}
