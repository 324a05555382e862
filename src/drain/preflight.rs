//! The preflight of the three-layer contract that makes a gang-aware drain safe:
//!
//! 1. *Topology*: each group lives in one upgrade domain, and one workload's groups are spread
//!    over domains (no more in one domain than its budget tolerates).
//! 2. *Delegated readiness*: one representative pod per group, Ready only while its group is
//!    (it needs a readiness probe or readiness gate to express that).
//! 3. *A PDB on the representatives*: exactly one budget, over representatives only, that can
//!    allow a disruption at all.
//!
//! Every [`Finding`] names the workload, the object and the fix.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;

use super::group_labels::{GroupLabel, GroupLabels};
use super::pdb::{self, PdbIndex};
use super::{Cluster, DrainError, check_domain_label, controller_of, is_finished, list};
use super::{FastMap, name, namespace, node_domain};
use crate::labels::Selector;

pub use super::group_labels::{
    KUBERAY_CLUSTER, KUBERAY_GROUP, KUBERAY_HOST_INDEX, KUBERAY_REPLICA_NAME, LWS_GROUP_KEY,
    LWS_NAME, LWS_WORKER_INDEX,
};

/// Controller kinds `(API group, kind)` with no scale subresource: a `maxUnavailable` or
/// percentage budget over their pods makes the disruption controller fail (`SyncFailed`).
const SCALELESS: [(&str, &str); 3] = [
    ("ray.io", "RayCluster"),
    ("batch", "Job"),
    ("apps", "DaemonSet"),
];

/// How groups, their representatives and their workloads are recognised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupContract {
    /// The pod label whose value names a group.
    pub group_label: String,
    /// A label query selecting a group's representative among its pods.
    pub representative: String,
    /// Labels whose values (with the namespace) name a group's workload; empty: the
    /// representative's controller.
    pub workload_labels: Vec<String>,
    /// What a workload is called in findings.
    pub workload_kind: String,
}

impl GroupContract {
    /// LeaderWorkerSet: groups by `group-key`, the leader (`worker-index=0`) represents.
    pub fn leader_worker_set() -> Self {
        GroupContract {
            group_label: LWS_GROUP_KEY.to_string(),
            representative: format!("{LWS_WORKER_INDEX}=0"),
            workload_labels: vec![LWS_NAME.to_string()],
            workload_kind: "LeaderWorkerSet".to_string(),
        }
    }

    /// KubeRay multi-host worker groups: groups by replica name, host 0 represents; the
    /// workload is a RayCluster's worker group.
    pub fn kuberay() -> Self {
        GroupContract {
            group_label: KUBERAY_REPLICA_NAME.to_string(),
            representative: format!("{KUBERAY_HOST_INDEX}=0"),
            workload_labels: vec![KUBERAY_CLUSTER.to_string(), KUBERAY_GROUP.to_string()],
            workload_kind: "RayCluster worker group".to_string(),
        }
    }

    /// Every preset, in order of precedence: [`GroupContract::leader_worker_set`],
    /// [`GroupContract::kuberay`].
    pub fn presets() -> Vec<Self> {
        vec![GroupContract::leader_worker_set(), GroupContract::kuberay()]
    }

    /// Any group label, with a label query for the representative.
    pub fn custom(group_label: &str, representative: &str) -> Self {
        GroupContract {
            group_label: group_label.to_string(),
            representative: representative.to_string(),
            workload_labels: Vec::new(),
            workload_kind: String::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreflightOptions {
    pub domain_label: String,
    /// The contracts checked, in order of precedence: a pod belongs to the group named by the
    /// first contract whose group label it carries.
    pub contracts: Vec<GroupContract>,
}

impl PreflightOptions {
    /// The kinds of groups the contracts recognise, for the drain's plan.
    pub fn group_labels(&self) -> GroupLabels {
        GroupLabels::new(
            self.contracts
                .iter()
                .map(|c| GroupLabel::with_workload(&c.group_label, c.workload_labels.clone())),
        )
    }
}

/// Which part of the contract a finding is about (also a condition reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Check {
    GroupSplitAcrossDomains,
    GroupsShareDomain,
    NoPdbOnRepresentatives,
    MultiplePdbs,
    PdbSelectsWorkers,
    PdbNeverAllowsDisruption,
    RepresentativeWithoutReadinessProbe,
}

/// One broken part of the contract, in words an operator can act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: Check,
    pub workload: String,
    /// The object at fault (`PodDisruptionBudget ns/name`, `Pod ns/name`, `group ns/key`).
    pub object: String,
    pub problem: String,
    pub fix: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?}: {}: {}: {}. Fix: {}",
            self.check, self.workload, self.object, self.problem, self.fix
        )
    }
}

/// Checks the contract on `cluster`; findings are sorted by check, workload and object.
pub fn preflight(
    cluster: &Cluster,
    options: &PreflightOptions,
) -> Result<Vec<Finding>, DrainError> {
    check_domain_label(cluster.nodes, &options.domain_label)?;
    let contracts = options
        .contracts
        .iter()
        .map(|c| Ok((c, Selector::parse_query(&c.representative)?)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(DrainError::RepresentativeSelector)?;
    let view = View::new(cluster, options, contracts);
    let mut findings = view.split_groups();
    for workload in view.workloads.values() {
        findings.extend(view.workload_findings(workload));
    }
    findings.extend(view.never_allowing_pdbs());
    findings
        .sort_by(|a, b| (a.check, &a.workload, &a.object).cmp(&(b.check, &b.workload, &b.object)));
    Ok(findings)
}

#[derive(Default)]
struct Group<'a> {
    /// Its contract (an index into [`View::contracts`]).
    contract: usize,
    pods: Vec<&'a Pod>,
    representatives: Vec<&'a Pod>,
}

/// A gang workload (pods sharing the contract's workload labels, e.g. one LeaderWorkerSet) and
/// its groups; not Kueue's Workload.
#[derive(Default)]
struct GangWorkload<'a> {
    name: String,
    namespace: String,
    /// The contract of its groups (an index into [`View::contracts`]).
    contract: usize,
    /// Group keys `(namespace, group value)`.
    groups: Vec<(&'a str, &'a str)>,
}

struct View<'a> {
    options: &'a PreflightOptions,
    /// Each contract with its parsed representative selector.
    contracts: Vec<(&'a GroupContract, Selector)>,
    domains: FastMap<&'a str, &'a str>,
    groups: BTreeMap<(&'a str, &'a str), Group<'a>>,
    workloads: BTreeMap<String, GangWorkload<'a>>,
    pdbs: PdbIndex<'a>,
    /// The live pods each budget selects, by the budget's address in the observed slice (every
    /// `&PodDisruptionBudget` here points into it): no `ns/name` string per selected pod.
    selected: FastMap<usize, (&'a PodDisruptionBudget, Vec<&'a Pod>)>,
}

impl<'a> View<'a> {
    fn new(
        cluster: &Cluster<'a>,
        options: &'a PreflightOptions,
        contracts: Vec<(&'a GroupContract, Selector)>,
    ) -> Self {
        let key = options.domain_label.as_str();
        let domains = cluster
            .nodes
            .iter()
            .filter_map(|n| Some((name(&n.metadata), node_domain(n, key)?)))
            .collect();
        let mut view = View {
            options,
            contracts,
            domains,
            groups: BTreeMap::new(),
            workloads: BTreeMap::new(),
            pdbs: PdbIndex::new(cluster.pdbs),
            selected: FastMap::default(),
        };
        for pod in cluster.pods.iter().filter(|p| !is_finished(p)) {
            view.add_pod(pod);
        }
        view.add_workloads();
        view
    }

    fn add_pod(&mut self, pod: &'a Pod) {
        for p in self.pdbs.matching(pod) {
            let entry = self.selected.entry(address(p.pdb));
            entry.or_insert_with(|| (p.pdb, Vec::new())).1.push(pod);
        }
        let Some((contract, group)) = self.group_of(pod) else {
            return;
        };
        let represents = self.contracts[contract]
            .1
            .matches(pod.metadata.labels.as_ref());
        let g = self
            .groups
            .entry((namespace(&pod.metadata), group))
            .or_default();
        g.contract = contract;
        g.pods.push(pod);
        if represents {
            g.representatives.push(pod);
        }
    }

    /// The pod's contract (the first whose group label it carries) and its group.
    fn group_of(&self, pod: &'a Pod) -> Option<(usize, &'a str)> {
        let labels = pod.metadata.labels.as_ref()?;
        self.contracts
            .iter()
            .enumerate()
            .find_map(|(i, (c, _))| Some((i, labels.get(&c.group_label)?.as_str())))
    }

    fn contract(&self, i: usize) -> &'a GroupContract {
        self.contracts[i].0
    }

    fn add_workloads(&mut self) {
        for (key, group) in &self.groups {
            let name = self.workload_name(key.0, group);
            let w = self.workloads.entry(name.clone()).or_default();
            w.name = name;
            w.namespace = key.0.to_string();
            w.contract = group.contract;
            w.groups.push(*key);
        }
    }

    /// `<kind> <ns>/<label values>` or the representative's controller `<Kind> <ns>/<name>`.
    fn workload_name(&self, ns: &str, group: &Group) -> String {
        let contract = self.contract(group.contract);
        let pod = group.representatives.first().or(group.pods.first());
        let labels = pod.and_then(|p| p.metadata.labels.as_ref());
        if !contract.workload_labels.is_empty() {
            let values: Vec<&str> = contract
                .workload_labels
                .iter()
                .map(|k| labels.and_then(|l| l.get(k)).map_or("?", String::as_str))
                .collect();
            return format!("{} {ns}/{}", contract.workload_kind, values.join("/"));
        }
        match pod.and_then(|p| controller_of(p)) {
            Some(owner) => format!("{} {ns}/{}", owner.kind, owner.name),
            None => format!(
                "unmanaged pods {ns}/{}",
                pod.map_or("", |p| name(&p.metadata))
            ),
        }
    }

    fn domain_of(&self, pod: &Pod) -> Option<&'a str> {
        let node = pod.spec.as_ref()?.node_name.as_deref()?;
        Some(
            self.domains
                .get(node)
                .copied()
                .unwrap_or("(no domain label)"),
        )
    }

    fn group(&self, key: &(&'a str, &'a str)) -> Option<&Group<'a>> {
        self.groups.get(key)
    }

    /// Whether `pod` is a representative under `workload`'s contract.
    fn is_representative(&self, workload: &GangWorkload, pod: &Pod) -> bool {
        self.contracts[workload.contract]
            .1
            .matches(pod.metadata.labels.as_ref())
    }
}

/// Checks 1: groups split over domains, and groups sharing a domain beyond the budget.
impl<'a> View<'a> {
    fn split_groups(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        for workload in self.workloads.values() {
            for key in &workload.groups {
                let Some(group) = self.group(key) else {
                    continue;
                };
                let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
                for pod in &group.pods {
                    if let Some(d) = self.domain_of(pod) {
                        *counts.entry(d).or_default() += 1;
                    }
                }
                if counts.len() > 1 {
                    findings.push(self.split_finding(workload, key.1, &counts));
                }
            }
        }
        findings
    }

    fn split_finding(
        &self,
        workload: &GangWorkload,
        group: &str,
        counts: &BTreeMap<&str, usize>,
    ) -> Finding {
        let spread: Vec<String> = counts.iter().map(|(d, n)| format!("{n} in {d}")).collect();
        let key = &self.options.domain_label;
        Finding {
            check: Check::GroupSplitAcrossDomains,
            workload: workload.name.clone(),
            object: format!("group {}/{group}", workload.namespace),
            problem: format!(
                "the group's pods are in {} upgrade domains ({}): draining any of them breaks it",
                counts.len(),
                spread.join(", ")
            ),
            fix: format!(
                "pack each group into one domain: give its pods a required podAffinity to their \
                 representative on topologyKey {key} (labelSelector on {}), then recreate the group",
                self.contract(workload.contract).group_label
            ),
        }
    }

    /// Groups of `workload` per domain, when more share one domain than `tolerated`.
    fn crowded_domains(&self, workload: &GangWorkload, pdb: &str, tolerated: i64) -> Vec<Finding> {
        let mut per_domain: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for key in &workload.groups {
            for pod in self.group(key).map_or(&[][..], |g| &g.pods) {
                if let Some(d) = self.domain_of(pod) {
                    per_domain.entry(d).or_default().insert(key.1);
                }
            }
        }
        let key = &self.options.domain_label;
        per_domain
            .into_iter()
            .filter(|(_, groups)| groups.len() >= 2 && groups.len() as i64 > tolerated)
            .map(|(domain, groups)| Finding {
                check: Check::GroupsShareDomain,
                workload: workload.name.clone(),
                object: format!("upgrade domain {key}={domain}"),
                problem: format!(
                    "{} groups share this domain but PodDisruptionBudget {}/{pdb} tolerates {} \
                     disruption(s): its drain pauses until groups recover in other domains",
                    groups.len(),
                    workload.namespace,
                    tolerated
                ),
                fix: format!(
                    "spread the groups over domains: a topologySpreadConstraint (maxSkew 1, \
                     DoNotSchedule) or a podAntiAffinity on the representatives with topologyKey \
                     {key}"
                ),
            })
            .collect()
    }
}

/// Checks 2 and 3: representatives, their budgets and their readiness.
impl<'a> View<'a> {
    fn workload_findings(&self, workload: &GangWorkload<'a>) -> Vec<Finding> {
        let reps: Vec<&Pod> = workload
            .groups
            .iter()
            .filter_map(|k| self.group(k))
            .flat_map(|g| g.representatives.iter().copied())
            .collect();
        let mut findings = Vec::new();
        let mut unprotected = Vec::new();
        let mut budgets: BTreeMap<String, &PodDisruptionBudget> = BTreeMap::new();
        for rep in &reps {
            let pdbs = self.pdbs.matching(rep);
            if pdbs.is_empty() {
                unprotected.push(pod_key(rep));
            }
            if pdbs.len() > 1 {
                findings.push(multiple_pdbs(workload, rep, &pdbs));
            }
            budgets.extend(pdbs.iter().map(|p| (p.name().to_string(), p.pdb)));
        }
        if !unprotected.is_empty() {
            findings.push(self.no_pdb(workload, &unprotected, reps.len()));
        }
        for (name, pdb) in &budgets {
            findings.extend(self.selects_workers(workload, name, pdb));
        }
        if let [(name, pdb)] = budgets.iter().collect::<Vec<_>>()[..] {
            findings.extend(self.crowding_under(workload, name, pdb));
        }
        findings.extend(self.readiness(workload, &reps));
        findings
    }

    fn crowding_under(
        &self,
        workload: &GangWorkload,
        name: &str,
        pdb: &PodDisruptionBudget,
    ) -> Vec<Finding> {
        let selected = self.selected_by(pdb).len() as i64;
        match pdb::tolerated(pdb, selected) {
            Some(t) if t > 0 && !self.never_allows(pdb) => self.crowded_domains(workload, name, t),
            _ => Vec::new(),
        }
    }

    fn no_pdb(&self, workload: &GangWorkload, unprotected: &[String], reps: usize) -> Finding {
        let contract = self.contract(workload.contract);
        Finding {
            check: Check::NoPdbOnRepresentatives,
            workload: workload.name.clone(),
            object: format!("Pod {}", list(unprotected, 3)),
            problem: format!(
                "{} of {reps} representative(s) are selected by no PodDisruptionBudget: the drain \
                 can take all their groups down at once",
                unprotected.len()
            ),
            fix: format!(
                "create one PodDisruptionBudget in {} selecting only the representatives ({} \
                 and the workload's labels) with an integer minAvailable (e.g. {} of {reps}); an \
                 integer minAvailable works for any controller",
                workload.namespace,
                contract.representative,
                reps.saturating_sub(1)
            ),
        }
    }

    fn selects_workers(
        &self,
        workload: &GangWorkload,
        pdb_name: &str,
        pdb: &PodDisruptionBudget,
    ) -> Option<Finding> {
        let workers: Vec<String> = self
            .selected_by(pdb)
            .iter()
            .filter(|p| !self.is_representative(workload, p))
            .map(|p| pod_key(p))
            .collect();
        (!workers.is_empty()).then(|| Finding {
            check: Check::PdbSelectsWorkers,
            workload: workload.name.clone(),
            object: format!("PodDisruptionBudget {}/{pdb_name}", workload.namespace),
            problem: format!(
                "it selects {} pod(s) that are not representatives ({}): it budgets pods, not \
                 groups, and a worker evicted before its representative breaks a group unseen",
                workers.len(),
                list(&workers, 3)
            ),
            fix: format!(
                "add the representative selector ({}) to its spec.selector",
                self.contract(workload.contract).representative
            ),
        })
    }

    fn readiness(&self, workload: &GangWorkload, reps: &[&Pod]) -> Option<Finding> {
        let blind: Vec<String> = reps
            .iter()
            .filter(|p| !has_readiness_signal(p))
            .map(|p| pod_key(p))
            .collect();
        (!blind.is_empty()).then(|| Finding {
            check: Check::RepresentativeWithoutReadinessProbe,
            workload: workload.name.clone(),
            object: format!("Pod {}", list(&blind, 3)),
            problem: format!(
                "{} representative(s) have no readiness probe or readiness gate: they are Ready \
                 while their group is broken, so the budget counts broken groups as available",
                blind.len()
            ),
            fix: "give the representative a readiness probe that fails while any pod of its group \
                  is not ready (delegated readiness)"
                .to_string(),
        })
    }

    fn selected_by(&self, pdb: &PodDisruptionBudget) -> &[&'a Pod] {
        self.selected
            .get(&address(pdb))
            .map_or(&[], |(_, pods)| pods.as_slice())
    }
}

/// A budget's identity within one preflight (see [`View::selected`]).
fn address(pdb: &PodDisruptionBudget) -> usize {
    std::ptr::from_ref(pdb) as usize
}

/// Check 3: budgets that can never allow a disruption.
impl<'a> View<'a> {
    fn never_allowing_pdbs(&self) -> Vec<Finding> {
        let mut findings: Vec<Finding> = self
            .selected
            .values()
            .filter_map(|(pdb, pods)| self.never_allows_finding(pdb, pods))
            .collect();
        findings.sort_by(|a, b| a.object.cmp(&b.object));
        findings
    }

    fn never_allows(&self, pdb: &PodDisruptionBudget) -> bool {
        self.never_allows_finding(pdb, self.selected_by(pdb))
            .is_some()
    }

    fn never_allows_finding(&self, pdb: &PodDisruptionBudget, pods: &[&Pod]) -> Option<Finding> {
        let n = pods.len() as i64;
        let (problem, fix) = scaleless_problem(pdb, pods)
            .or_else(|| pdb::sync_failed(pdb).map(sync_failed_problem))
            .or_else(|| budget_problem(pdb, n))?;
        Some(Finding {
            check: Check::PdbNeverAllowsDisruption,
            workload: self.workload_of(pods),
            object: format!("PodDisruptionBudget {}", crate::meta::key(&pdb.metadata)),
            problem,
            fix,
        })
    }

    fn workload_of(&self, pods: &[&Pod]) -> String {
        let grouped = pods.iter().find_map(|p| {
            let (_, group) = self.group_of(p)?;
            let key = (namespace(&p.metadata), group);
            Some(self.workload_name(key.0, self.group(&key)?))
        });
        grouped.unwrap_or_else(|| match pods.first().and_then(|p| controller_of(p)) {
            Some(o) => format!(
                "{} {}/{}",
                o.kind,
                pods.first().map_or("", |p| namespace(&p.metadata)),
                o.name
            ),
            None => format!(
                "unmanaged pods ({})",
                pods.first().map_or(String::new(), |p| pod_key(p))
            ),
        })
    }
}

/// `maxUnavailable` or a percentage over pods whose controller has no scale subresource.
fn scaleless_problem(pdb: &PodDisruptionBudget, pods: &[&Pod]) -> Option<(String, String)> {
    if !pdb::needs_scale(pdb) {
        return None;
    }
    let owner = pods.iter().filter_map(|p| controller_of(p)).find(|o| {
        let group = o.api_version.split_once('/').map_or("", |(g, _)| g);
        SCALELESS.contains(&(group, o.kind.as_str()))
    })?;
    let problem = format!(
        "{} over pods controlled by {} {}, which has no scale subresource: the disruption \
         controller cannot count the expected pods (DisruptionAllowed=False, reason SyncFailed) \
         and allows no disruption, so every eviction is refused",
        pdb::describe_spec(pdb),
        owner.kind,
        owner.name
    );
    let n = pods.len();
    let fix = format!(
        "use an integer minAvailable instead (e.g. minAvailable: {} for its {n} pods)",
        n.saturating_sub(1)
    );
    Some((problem, fix))
}

fn sync_failed_problem(message: &str) -> (String, String) {
    (
        format!(
            "the disruption controller failed on it (SyncFailed: {message}), so it allows no disruption"
        ),
        "fix what the message names; an integer minAvailable needs no controller scale".to_string(),
    )
}

/// `desiredHealthy >= expectedPods`, or a budget that expects no pod at all.
fn budget_problem(pdb: &PodDisruptionBudget, pods: i64) -> Option<(String, String)> {
    if pods == 0 {
        return None;
    }
    let observed = pdb::observed(pdb).filter(|(expected, _)| *expected > 0);
    let (expected, desired) = observed.or_else(|| pdb::expected_and_desired(pdb, pods))?;
    if expected > 0 && desired < expected {
        return None;
    }
    let problem = match expected {
        0 => format!("it sets {} and so expects no pod", pdb::describe_spec(pdb)),
        _ => format!(
            "{} needs {desired} healthy pod(s) of {expected} expected: it never allows a disruption",
            pdb::describe_spec(pdb)
        ),
    };
    let fix = format!(
        "allow at least one disruption: minAvailable at most {} (or maxUnavailable: 1 when the \
         pods' controller has a scale subresource)",
        pods - 1
    );
    Some((problem, fix))
}

fn multiple_pdbs(workload: &GangWorkload, rep: &Pod, pdbs: &[&pdb::IndexedPdb]) -> Finding {
    let names: Vec<String> = pdbs.iter().map(|p| p.name().to_string()).collect();
    Finding {
        check: Check::MultiplePdbs,
        workload: workload.name.clone(),
        object: format!("Pod {}", pod_key(rep)),
        problem: format!(
            "{} PodDisruptionBudgets select it ({}): the Eviction API refuses such a pod (HTTP \
             500), so the drain cannot evict it",
            names.len(),
            names.join(", ")
        ),
        fix: "keep one budget per pod: make the budgets' selectors disjoint".to_string(),
    }
}

/// A readiness probe in some container, or a readiness gate.
fn has_readiness_signal(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.containers.iter().any(|c| c.readiness_probe.is_some())
        || spec.readiness_gates.as_ref().is_some_and(|g| !g.is_empty())
}

fn pod_key(pod: &Pod) -> String {
    crate::meta::key(&pod.metadata)
}
