//! Groups as their members show them (pure), not as their representatives say.
//!
//! A budget over one representative per group counts a group healthy while the representative
//! is Ready, and a representative's readiness lags its group's by its own probe (period ×
//! failureThreshold) plus the disruption controller's lag. So before every protected eviction the
//! engine counts each budget's groups from their members: a group is **available** only while
//! every member exists (as many pods as the budget's largest group), is Ready and is not
//! terminating. A representative without the group label is a group of its own (its budget's
//! view, as the Eviction API has it).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;

use super::super::group_labels::GroupLabels;
use super::super::pdb::{self, PdbIndex};
use super::super::{is_finished, name, namespace};
use super::pod_serving;

/// One group of a budget, counted from its members.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Group {
    /// Pods with the group's label value (not finished).
    pub members: usize,
    /// Of them, Ready and not terminating.
    pub serving: usize,
    /// Pods the group needs to be whole: the budget's largest group (1 for an ungrouped pod).
    pub expected: usize,
    /// The representative the budget selects is Ready and not terminating (what the budget
    /// counts).
    pub representative_serving: bool,
}

impl Group {
    pub fn available(&self) -> bool {
        self.members >= self.expected && self.serving == self.members
    }
}

/// A budget's groups and its floor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct BudgetGroups {
    /// `desiredHealthy`: from the status when it is current, else as the disruption controller
    /// computes it from the spec over the selected pods. `None`: the budget cannot say.
    pub floor: Option<i64>,
    /// By the group label's value (`pod:<name>` for a representative without one).
    pub groups: BTreeMap<String, Group>,
}

impl BudgetGroups {
    pub fn available(&self, group: &str) -> bool {
        self.groups.get(group).is_some_and(Group::available)
    }

    pub fn available_count(&self) -> usize {
        self.groups.values().filter(|g| g.available()).count()
    }

    /// Groups the budget counts healthy (their representative is Ready) that are not available.
    pub fn hidden(&self) -> Vec<&str> {
        self.groups
            .iter()
            .filter(|(_, g)| g.representative_serving && !g.available())
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// Whether evicting `group` (with `going` already on their way out) keeps the available
    /// groups at or above the floor. A group that is not available costs nothing to evict.
    pub fn allows(&self, group: &str, going: &BTreeSet<String>) -> bool {
        let Some(floor) = self.floor else {
            return true;
        };
        let gone = going.iter().filter(|g| self.available(g)).count();
        let this = usize::from(self.available(group) && !going.contains(group));
        let after = self.available_count().saturating_sub(gone + this);
        i64::try_from(after).unwrap_or(i64::MAX) >= floor
    }
}

/// Every budget's groups (`namespace/name` → groups), and which groups a budget protects.
#[derive(Clone, Debug, Default)]
pub(super) struct GroupView {
    pub budgets: BTreeMap<String, BudgetGroups>,
    /// `(namespace, group)` → the budget selecting a member of it (its representative).
    protected: HashMap<(String, String), String>,
    /// `(namespace, group)` → the names of its pods a budget selects (its representatives).
    representatives: HashMap<(String, String), Vec<String>>,
}

/// The key a pod's group goes by: its group's name, or the pod itself.
fn group_key(pod: &Pod, kinds: &GroupLabels) -> String {
    match kinds.group(pod) {
        Some(g) => g.to_string(),
        None => format!("pod:{}", name(&pod.metadata)),
    }
}

impl GroupView {
    pub fn new(pods: &[Pod], pdbs: &[PodDisruptionBudget], kinds: &GroupLabels) -> GroupView {
        let live = || pods.iter().filter(|p| !is_finished(p));
        // (namespace, group) → (members, serving)
        let mut members: HashMap<(&str, &str), (usize, usize)> = HashMap::new();
        for p in live() {
            let Some(g) = kinds.group(p) else {
                continue;
            };
            let m = members.entry((namespace(&p.metadata), g)).or_default();
            m.0 += 1;
            m.1 += usize::from(pod_serving(p));
        }
        let index = PdbIndex::new(pdbs);
        let mut view = GroupView::default();
        let mut selected: HashMap<String, i64> = HashMap::new();
        for p in live() {
            for b in index.matching(p) {
                let key = format!("{}/{}", namespace(&p.metadata), b.name());
                *selected.entry(key.clone()).or_default() += 1;
                let ns = namespace(&p.metadata);
                let group = group_key(p, kinds);
                let (m, s) = members
                    .get(&(ns, group.as_str()))
                    .copied()
                    .unwrap_or((1, usize::from(pod_serving(p))));
                let g = view
                    .budgets
                    .entry(key.clone())
                    .or_default()
                    .groups
                    .entry(group.clone())
                    .or_default();
                (g.members, g.serving) = (m, s);
                g.representative_serving |= pod_serving(p);
                let at = (ns.to_string(), group);
                let reps = view.representatives.entry(at.clone()).or_default();
                if !reps.iter().any(|r| r == name(&p.metadata)) {
                    reps.push(name(&p.metadata).to_string());
                }
                view.protected.insert(at, key);
            }
        }
        for b in pdbs {
            let key = crate::meta::key(&b.metadata);
            let Some(groups) = view.budgets.get_mut(&key) else {
                continue;
            };
            let count = selected.get(&key).copied().unwrap_or(0);
            groups.floor = pdb::observed(b)
                .or_else(|| pdb::expected_and_desired(b, count))
                .map(|(_, desired)| desired);
            let largest = groups
                .groups
                .iter()
                .filter(|(k, _)| !k.starts_with("pod:"))
                .map(|(_, g)| g.members)
                .max()
                .unwrap_or(1);
            for (k, g) in &mut groups.groups {
                g.expected = if k.starts_with("pod:") { 1 } else { largest };
            }
        }
        view
    }

    /// The pods a budget selects in `group` of `namespace` (its representatives).
    pub fn representatives(&self, namespace: &str, group: &str) -> &[String] {
        self.representatives
            .get(&(namespace.to_string(), group.to_string()))
            .map_or(&[], Vec::as_slice)
    }

    /// The budget whose representative stands for `group` in `namespace`, if any.
    pub fn protector(&self, namespace: &str, group: &str) -> Option<&str> {
        self.protected
            .get(&(namespace.to_string(), group.to_string()))
            .map(String::as_str)
    }
}

/// Since when a budget's available groups have not dropped (the stable window before a domain's
/// first protected eviction). Kept in memory only: a restarted controller starts it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub available: usize,
    pub since: Timestamp,
}

/// The windows after this step's look: a budget seen for the first time or with fewer available
/// groups than before starts again; one no longer seen is dropped.
pub(super) fn windows(
    old: &BTreeMap<String, Window>,
    view: &GroupView,
    now: Timestamp,
) -> BTreeMap<String, Window> {
    view.budgets
        .iter()
        .map(|(key, b)| {
            let available = b.available_count();
            let since = match old.get(key) {
                Some(w) if available >= w.available => w.since,
                _ => now,
            };
            (key.clone(), Window { available, since })
        })
        .collect()
}
