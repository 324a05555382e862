//! The cohort tree: `resourceGroups` of ClusterQueues and Cohorts parsed into exact quotas, one
//! [`Tree`] node per ClusterQueue (ids first, in name order) and per cohort (then, in name order),
//! cohort parents linked with cycles cut.
//!
//! Decides when quota is unusable: a bad quota (`InvalidSpec`; its pairs then lend and borrow
//! nothing), a cohort on a `parentName` cycle, and a cohort under a broken ancestor, whose
//! ClusterQueues become inactive.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::catalog::Catalog;
use super::ids::{CqIx, FlavorIx, FrIx, NodeIx, ResourceIx, TiSlice, TiVec};
use super::quota::{FlavorResourceQuota, Tree};
use crate::quantity::Quantity;
use crate::types::kueue::{ClusterQueue, Cohort, FlavorQuotas, ResourceGroup, ResourceQuota};

/// One resource group of a ClusterQueue or Cohort, as ids: `fr[flavor position][resource
/// position]` is the (flavor, resource) pair.
#[derive(Clone, Debug)]
pub(crate) struct QuotaGroup {
    pub resources: Vec<ResourceIx>,
    pub flavors: Vec<FlavorIx>,
    pub fr: Vec<Vec<FrIx>>,
}

/// Parsed quota of one ClusterQueue or Cohort, before the tree exists.
pub(super) struct ParsedQuota {
    pub groups: Vec<QuotaGroup>,
    pub quotas: Vec<(FrIx, FlavorResourceQuota)>,
    pub frs: Vec<FrIx>,
    /// The first error (`InvalidSpec`, message naming the field).
    pub error: Option<(&'static str, String)>,
    pub missing_flavors: BTreeSet<String>,
}

impl ParsedQuota {
    fn fail(&mut self, msg: String) {
        if self.error.is_none() {
            self.error = Some(("InvalidSpec", msg));
        }
    }
}

/// The tree, its cohort nodes and why cohorts are broken.
pub(super) struct CohortTree<'a> {
    /// Every node, ClusterQueues first (not yet linked to their cohorts).
    pub tree: Tree,
    /// Cohort name → node.
    pub node: BTreeMap<&'a str, NodeIx>,
    /// Cohort name → why it is broken: its own bad quota, a cycle through it (the message says
    /// "part of a cycle"), or a broken ancestor.
    pub broken: BTreeMap<&'a str, String>,
}

fn parse_quantity(q: &K8sQuantity, field: &str) -> Result<Quantity, String> {
    let v = Quantity::try_from(q).map_err(|e| format!("{field}: invalid quantity: {e}"))?;
    if v.is_negative() {
        return Err(format!("{field}: must not be negative (got {v})"));
    }
    Ok(v)
}

/// One `resources[]` entry; the first error in field order.
fn parse_resource_quota(rq: &ResourceQuota, field: &str) -> Result<FlavorResourceQuota, String> {
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
    Ok(FlavorResourceQuota {
        nominal: nominal?,
        borrowing_limit: bl?,
        lending_limit: ll?,
    })
}

/// Lend nothing and borrow nothing: the safe side for everyone else when a quota is bad.
const LOCKED: FlavorResourceQuota = FlavorResourceQuota {
    nominal: Quantity::ZERO,
    borrowing_limit: Some(Quantity::ZERO),
    lending_limit: Some(Quantity::ZERO),
};

/// Parses `resourceGroups` (interning flavors, resources and pairs); errors name the field
/// (`spec.resourceGroups[..]`).
pub(super) fn parse_groups(catalog: &mut Catalog, groups: &[ResourceGroup]) -> ParsedQuota {
    let mut raw = ParsedQuota {
        groups: Vec::new(),
        quotas: Vec::new(),
        frs: Vec::new(),
        error: None,
        missing_flavors: BTreeSet::new(),
    };
    let mut covered: BTreeMap<&str, usize> = BTreeMap::new();
    let mut seen_flavors: BTreeMap<&str, usize> = BTreeMap::new();
    for (gi, g) in groups.iter().enumerate() {
        let resources: Vec<ResourceIx> = g
            .covered_resources
            .iter()
            .map(|r| catalog.intern_resource(r))
            .collect();
        for r in &g.covered_resources {
            if let Some(prev) = covered.insert(r, gi) {
                raw.fail(format!(
                    "spec.resourceGroups[{gi}].coveredResources: resource {r} is already covered by resourceGroups[{prev}]"
                ));
            }
        }
        let mut group = QuotaGroup {
            resources: resources.clone(),
            flavors: Vec::new(),
            fr: Vec::new(),
        };
        for (fi, f) in g.flavors.iter().enumerate() {
            if let Some(prev) = seen_flavors.insert(&f.name, gi) {
                raw.fail(format!(
                    "spec.resourceGroups[{gi}].flavors[{fi}]: flavor {:?} is already used in resourceGroups[{prev}]",
                    f.name
                ));
            }
            let (fid, row) = parse_flavor(catalog, &mut raw, g, &resources, (gi, fi), f);
            group.flavors.push(fid);
            group.fr.push(row);
        }
        raw.groups.push(group);
    }
    raw
}

/// One flavor of group `gi`: its (flavor, resource) row and the quota of each resource.
fn parse_flavor(
    catalog: &mut Catalog,
    raw: &mut ParsedQuota,
    g: &ResourceGroup,
    resources: &[ResourceIx],
    (gi, fi): (usize, usize),
    f: &FlavorQuotas,
) -> (FlavorIx, Vec<FrIx>) {
    let fid = catalog.intern_flavor(&f.name);
    if !catalog.flavors[fid].exists {
        raw.missing_flavors.insert(f.name.clone());
    }
    let row: Vec<FrIx> = resources
        .iter()
        .map(|&r| catalog.intern_fr(fid, r))
        .collect();
    raw.frs.extend(row.iter().copied());
    for (ri, rq) in f.resources.iter().enumerate() {
        let field = format!("spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}]");
        let Some(pos) = g.covered_resources.iter().position(|c| *c == rq.name) else {
            raw.fail(format!(
                "{field}: resource {} is not in coveredResources",
                rq.name
            ));
            continue;
        };
        let quota = parse_resource_quota(rq, &field).unwrap_or_else(|e| {
            raw.fail(e);
            LOCKED
        });
        raw.quotas.push((row[pos], quota));
    }
    (fid, row)
}

fn dense(n_fr: usize, quotas: &[(FrIx, FlavorResourceQuota)]) -> TiVec<FrIx, FlavorResourceQuota> {
    let mut v = TiVec::from(vec![FlavorResourceQuota::default(); n_fr]);
    for (fr, q) in quotas {
        v[*fr] = *q;
    }
    v
}

/// Lays out the tree over `n_fr` (flavor, resource) pairs: ClusterQueue nodes first (node =
/// ClusterQueue id, not yet linked to their cohorts), then every cohort named anywhere, by name,
/// linked to its parent.
pub(super) fn build<'a>(
    n_fr: usize,
    cluster_queues: &[(&'a str, &'a ClusterQueue)],
    cq_quotas: &TiSlice<CqIx, ParsedQuota>,
    cohorts: &[(&'a str, &'a Cohort)],
    cohort_quotas: &BTreeMap<&'a str, ParsedQuota>,
) -> CohortTree<'a> {
    let parent: BTreeMap<&str, &str> = cohorts
        .iter()
        .filter_map(|(n, c)| c.spec.parent_name.as_deref().map(|p| (*n, p)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    let mut tree = Tree::new(n_fr);
    for raw in cq_quotas {
        tree.push(dense(n_fr, &raw.quotas));
    }
    let mut names: BTreeSet<&str> = cohorts.iter().map(|(n, _)| *n).collect();
    names.extend(parent.values().copied());
    names.extend(
        cluster_queues
            .iter()
            .filter_map(|(_, c)| c.spec.cohort_name.as_deref())
            .filter(|n| !n.is_empty()),
    );
    let mut node: BTreeMap<&str, NodeIx> = BTreeMap::new();
    for name in &names {
        let quotas = cohort_quotas
            .get(name)
            .map(|r| r.quotas.as_slice())
            .unwrap_or_default();
        node.insert(name, tree.push(dense(n_fr, quotas)));
    }
    let broken = own_breakage(&names, &parent, cohort_quotas);
    for name in &names {
        let on_cycle = broken
            .get(name)
            .is_some_and(|m| m.contains("part of a cycle"));
        if let (Some(p), false) = (parent.get(name), on_cycle) {
            tree.nodes[node[name]].parent = Some(node[p]);
        }
    }
    let broken = inherit_breakage(&tree, &names, &node, &broken);
    CohortTree { tree, node, broken }
}

/// Cohorts broken by their own bad quota, or by being on a `parentName` cycle.
fn own_breakage<'a>(
    names: &BTreeSet<&'a str>,
    parent: &BTreeMap<&str, &'a str>,
    cohort_quotas: &BTreeMap<&'a str, ParsedQuota>,
) -> BTreeMap<&'a str, String> {
    let mut broken: BTreeMap<&str, String> = BTreeMap::new();
    for (name, raw) in cohort_quotas {
        if let Some((_, e)) = &raw.error {
            broken.insert(name, format!("Cohort {name}: {e}"));
        }
    }
    for name in names {
        let mut path = vec![*name];
        let mut cur = *name;
        while let Some(&p) = parent.get(cur) {
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
    broken
}

/// Each cohort's breakage or its nearest broken ancestor's (the parent links are acyclic now).
fn inherit_breakage<'a>(
    tree: &Tree,
    names: &BTreeSet<&'a str>,
    node: &BTreeMap<&'a str, NodeIx>,
    broken: &BTreeMap<&'a str, String>,
) -> BTreeMap<&'a str, String> {
    let name_of: BTreeMap<NodeIx, &str> = node.iter().map(|(n, id)| (*id, *n)).collect();
    let mut inherited: BTreeMap<&str, String> = BTreeMap::new();
    for name in names {
        let mut cur = Some(*name);
        let mut hops = 0;
        while let Some(c) = cur {
            if let Some(m) = broken.get(c) {
                inherited.insert(name, m.clone());
                break;
            }
            cur = tree.nodes[node[c]]
                .parent
                .and_then(|p| name_of.get(&p).copied());
            hops += 1;
            if hops > names.len() {
                break;
            }
        }
    }
    inherited
}
