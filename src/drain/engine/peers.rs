//! Other NodeRollouts (pure): at most `maxUnavailableDomains` upgrade domains, of any rollout,
//! disrupt one workload at a time.
//!
//! A workload here is a PodDisruptionBudget: the pods it selects and, with a group label, the
//! groups whose representative it selects. A domain disrupts it from its start to the end of its
//! health check when its nodes hold such a pod while it drains, or once it evicted a pod the budget
//! protected ([`Disruption`]). The domains that disrupt one budget stand in one order, the same
//! for every rollout: by when each was first started, then by rollout and domain name. A domain
//! evicts a budget's protected pods, and a domain not started yet starts, only while fewer than
//! this rollout's `maxUnavailableDomains` domains before it disrupt that budget; otherwise it
//! holds (`Blocked=True`, [`OTHER_ROLLOUT`], naming the other rollout and its domain). The order
//! is total, so the first domain of it is never held by another and no two rollouts wait for
//! each other.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::jiff::Timestamp;

use super::super::pdb::PdbIndex;
use super::super::{is_finished, namespace};
use super::{Disruption, EvictTarget, Stepper};
use crate::events::EventType;

/// The hold's reason (the `Blocked` condition's).
pub const OTHER_ROLLOUT: &str = "OtherRolloutDisrupting";

/// A domain's place in the order: first started, rollout, domain.
type Place<'s> = (Option<Timestamp>, &'s str, &'s str);

/// A domain that disrupts budgets now, with those budgets.
struct Disrupting {
    d: Disruption,
    budgets: BTreeSet<String>,
}

impl Disrupting {
    fn place(&self) -> Place<'_> {
        (self.d.since, &self.d.rollout, &self.d.domain)
    }
}

impl Stepper<'_> {
    /// Whether another rollout has a domain in progress (else nothing here applies: this
    /// rollout's own domains are bounded by `maxUnavailableDomains` already).
    fn others_active(&self) -> bool {
        self.obs
            .elsewhere
            .iter()
            .any(|d| d.rollout != self.o.rollout)
    }

    /// Every domain in progress, this rollout's and the others', with the budgets it disrupts.
    fn disrupting(&self) -> Vec<Disrupting> {
        let mine = self.s.disruptions(&self.o.rollout);
        let others = self
            .obs
            .elsewhere
            .iter()
            .filter(|d| d.rollout != self.o.rollout);
        let all: Vec<Disruption> = mine.into_iter().chain(others.cloned()).collect();
        let nodes: Vec<&[String]> = all.iter().map(|d| d.nodes.as_slice()).collect();
        let on_nodes = self.budgets_on(&nodes);
        all.into_iter()
            .zip(on_nodes)
            .map(|(d, mut budgets)| {
                budgets.extend(d.budgets.iter().cloned());
                Disrupting { d, budgets }
            })
            .filter(|x| !x.budgets.is_empty())
            .collect()
    }

    /// Per node set: the budgets of the pods on those nodes (selected by the budget, or in a
    /// group whose representative it selects), in one pass over the pods.
    fn budgets_on(&self, sets: &[&[String]]) -> Vec<BTreeSet<String>> {
        let mut out = vec![BTreeSet::new(); sets.len()];
        let mut by_node: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, nodes) in sets.iter().enumerate() {
            for n in nodes.iter() {
                by_node.entry(n.as_str()).or_default().push(i);
            }
        }
        if by_node.is_empty() {
            return out;
        }
        let index = PdbIndex::new(self.obs.pdbs);
        for p in self.obs.pods.iter().filter(|p| !is_finished(p)) {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            let Some(sets) = node.and_then(|n| by_node.get(n)) else {
                continue;
            };
            let ns = namespace(&p.metadata);
            let mut budgets: Vec<String> = index
                .matching(p)
                .iter()
                .map(|b| format!("{ns}/{}", b.name()))
                .collect();
            let group = self
                .o
                .plan
                .groups
                .group(p)
                .and_then(|value| self.groups.as_ref()?.protector(ns, value));
            budgets.extend(group.map(str::to_string));
            for &i in sets {
                out[i].extend(budgets.iter().cloned());
            }
        }
        out
    }

    /// The domains before `me` in the order that disrupt `budget`, when they are as many as this
    /// rollout allows and one of them is another rollout's: they hold `me` for it.
    fn ahead<'s>(
        &self,
        all: &'s [Disrupting],
        budget: &str,
        me: Place<'_>,
    ) -> Option<Vec<&'s Disruption>> {
        let ahead: Vec<&Disruption> = all
            .iter()
            .filter(|x| x.place() < me && x.budgets.contains(budget))
            .map(|x| &x.d)
            .collect();
        let full = ahead.len() >= self.o.max_unavailable_domains.max(1);
        let other = ahead.iter().any(|d| d.rollout != self.o.rollout);
        (full && other).then_some(ahead)
    }

    /// One line per budget held, naming the other rollouts' domains before this one.
    fn ahead_lines(&self, held: &BTreeMap<String, (Vec<&Disruption>, Vec<String>)>) -> Vec<String> {
        let max = self.o.max_unavailable_domains.max(1);
        held.iter()
            .map(|(budget, (ahead, pods))| {
                let by: Vec<String> = ahead
                    .iter()
                    .filter(|d| d.rollout != self.o.rollout)
                    .map(|d| format!("NodeRollout {}'s upgrade domain {}", d.rollout, d.domain))
                    .collect();
                format!(
                    "PodDisruptionBudget {budget} is disrupted by {} and at most {max} upgrade \
                     domain(s) may disrupt one workload at a time (maxUnavailableDomains): {} \
                     waits until that domain is through its health check",
                    by.join(", "),
                    pods.join(", ")
                )
            })
            .collect()
    }

    /// Of domain `i`'s protected `targets`, those no other rollout's domain before it holds;
    /// and the lines saying why the rest wait.
    pub(super) fn not_disrupted_elsewhere(
        &self,
        i: usize,
        targets: Vec<EvictTarget>,
    ) -> (Vec<EvictTarget>, Vec<String>) {
        if !self.others_active() {
            return (targets, Vec::new());
        }
        let all = self.disrupting();
        let d = &self.s.domains[i];
        let me = (
            d.since.or(d.started),
            self.o.rollout.as_str(),
            d.name.as_str(),
        );
        let mut held: BTreeMap<String, (Vec<&Disruption>, Vec<String>)> = BTreeMap::new();
        let mut allowed = Vec::new();
        for t in targets {
            let ahead = t.pdb.as_deref().and_then(|b| self.ahead(&all, b, me));
            match (ahead, t.pdb.clone()) {
                (Some(ahead), Some(pdb)) => {
                    let entry = held.entry(pdb).or_insert_with(|| (ahead, Vec::new()));
                    entry.1.push(format!("evicting {}", t.pod));
                }
                _ => allowed.push(t),
            }
        }
        (allowed, self.ahead_lines(&held))
    }

    /// Whether domain `i`, not started yet, waits for another rollout's domain that disrupts a
    /// budget of the pods on its nodes; it then holds, not cordoned, with the reason.
    pub(super) fn start_held(&mut self, i: usize) -> bool {
        if !self.others_active() {
            return false;
        }
        let all = self.disrupting();
        let d = &self.s.domains[i];
        let budgets = self.budgets_on(&[d.nodes.as_slice()]);
        let me = (Some(self.now), self.o.rollout.as_str(), d.name.as_str());
        let held: BTreeMap<String, (Vec<&Disruption>, Vec<String>)> = budgets
            .iter()
            .flatten()
            .filter_map(|b| {
                let pods = vec![format!("starting upgrade domain {}", d.name)];
                Some((b.clone(), (self.ahead(&all, b, me)?, pods)))
            })
            .collect();
        let lines = self.ahead_lines(&held);
        let before = self.s.domains[i].hold.clone();
        let waits = !lines.is_empty();
        self.set_hold(i, OTHER_ROLLOUT, lines);
        if let Some(hold) = &self.s.domains[i].hold {
            self.s.domains[i].message = format!("not started: {}", hold.message);
        }
        if self.s.domains[i].hold != before
            && let Some(hold) = self.s.domains[i].hold.clone()
        {
            let d = &self.s.domains[i];
            let node = d.nodes.first().cloned().unwrap_or_default();
            let message = format!("upgrade domain {} is not started: {}", d.name, hold.message);
            self.report(&node, EventType::Warning, OTHER_ROLLOUT, message);
        }
        waits
    }
}
