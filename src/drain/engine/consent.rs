//! Whose eviction the workload allows now (pure): the engine's own guard in front of the
//! Eviction API, from the groups as their members show them ([`super::groups`]).
//!
//! - **Protected pods** go only while the workload's available groups, counted from their
//!   members, stay at or above the budget's floor after the eviction, whatever the budget's own
//!   `disruptionsAllowed` says (it counts representatives, whose readiness lags); and before a
//!   domain's first protected eviction (after a refusal lifts, after a restart) only once those
//!   counts have not dropped for the stable window.
//! - **Other rollouts**: before both, the protected pods of a budget that other NodeRollouts'
//!   domains already disrupt as often as this rollout allows wait ([`super::peers`]).
//! - **A member is its group**: a pod with no budget of its own whose group has a representative
//!   a budget protects goes only after that representative was evicted through the Eviction API
//!   in this domain. A representative outside the domain (a group split across domains) is
//!   evicted by this domain first, with its budget's consent like a protected pod of its own:
//!   the group moves whole, disrupted once; until then the domain holds.

use std::collections::{BTreeMap, BTreeSet};

use super::{EvictTarget, Hold, PodRef, Stepper, human};
use crate::events::EventType;

/// The hold reasons (the `Blocked` condition's reason).
pub const GROUPS_UNAVAILABLE: &str = "GroupsUnavailable";
pub const SPLIT_GROUP: &str = "SplitGroup";

fn group_key(t: &EvictTarget) -> String {
    t.group
        .clone()
        .unwrap_or_else(|| format!("pod:{}", t.pod.name))
}

impl Stepper<'_> {
    /// Phase 1's targets that go now: those no other rollout's domain holds ([`super::peers`]),
    /// once the window is waited out, that the workload's groups allow. `None` while the domain
    /// waits as a whole (its message says why).
    pub(super) fn consented_phase1(
        &mut self,
        i: usize,
        targets: Vec<EvictTarget>,
    ) -> Option<Vec<EvictTarget>> {
        let (targets, elsewhere) = self.not_disrupted_elsewhere(i, targets);
        let held_elsewhere = !elsewhere.is_empty();
        if targets.is_empty() && held_elsewhere {
            self.set_hold(i, super::OTHER_ROLLOUT, elsewhere);
            let d = &mut self.s.domains[i];
            d.message = d
                .hold
                .as_ref()
                .map(|h| h.message.clone())
                .unwrap_or_default();
            return None;
        }
        if !self.window_held(i, &targets) {
            return None;
        }
        let targets = self.consented_protected(i, targets);
        if held_elsewhere {
            // the other rollout's hold says more than the groups' (it outlasts them)
            self.set_hold(i, super::OTHER_ROLLOUT, elsewhere);
        }
        Some(targets)
    }

    /// Phase 1's targets the workload's groups allow now; the rest are held with the reason.
    fn consented_protected(&mut self, i: usize, targets: Vec<EvictTarget>) -> Vec<EvictTarget> {
        if self.groups.is_none() {
            return targets;
        }
        let going = self.going(i);
        let Some(view) = self.groups.as_ref() else {
            return targets;
        };
        let mut going = going;
        let (mut allowed, mut held) = (Vec::new(), BTreeMap::<String, Vec<String>>::new());
        for t in targets {
            let budget = t
                .pdb
                .as_ref()
                .and_then(|p| Some((p.clone(), view.budgets.get(p)?)));
            let Some((pdb, b)) = budget else {
                allowed.push(t);
                continue;
            };
            let key = group_key(&t);
            let g = going.entry(pdb.clone()).or_default();
            if b.allows(&key, g) {
                g.insert(key);
                allowed.push(t);
            } else {
                held.entry(pdb).or_default().push(t.pod.to_string());
            }
        }
        let lines: Vec<String> = held
            .iter()
            .filter_map(|(pdb, pods)| {
                let b = view.budgets.get(pdb)?;
                let hidden = b.hidden();
                Some(format!(
                    "PodDisruptionBudget {pdb} has {} group(s) available counted from their \
                     members and a floor of {}: evicting {} would go below it{}",
                    b.available_count(),
                    b.floor.unwrap_or_default(),
                    pods.join(", "),
                    if hidden.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (Ready representatives, members not all Ready: {})",
                            hidden.join(", ")
                        )
                    }
                ))
            })
            .collect();
        if !allowed.is_empty() {
            let name = self.s.domains[i].name.clone();
            self.s.memory.windowed.insert(name);
        }
        self.set_hold(i, GROUPS_UNAVAILABLE, lines);
        allowed
    }

    /// Phase 2's targets whose group no budget protects elsewhere, or whose protected
    /// representative this domain evicted; the rest are held, and the representatives outside
    /// the domain of their groups are returned beside them, to be evicted first.
    pub(super) fn consented_members(
        &mut self,
        i: usize,
        targets: Vec<EvictTarget>,
    ) -> (Vec<EvictTarget>, Vec<EvictTarget>) {
        let Some(view) = self.groups.as_ref() else {
            return (targets, vec![]);
        };
        let consented = self.consented_groups(i);
        let (mut allowed, mut held) = (Vec::new(), BTreeMap::<String, Vec<String>>::new());
        let mut split: BTreeSet<(String, String, String)> = BTreeSet::new();
        for t in targets {
            let ns = t.pod.namespace.as_str();
            let protector = t.group.as_deref().and_then(|g| {
                let consent = consented.contains(&(ns.to_string(), g.to_string()));
                view.protector(ns, g).filter(|_| !consent)
            });
            match (protector, t.group.as_deref()) {
                (Some(pdb), Some(g)) => {
                    split.insert((ns.to_string(), g.to_string(), pdb.to_string()));
                    held.entry(pdb.to_string())
                        .or_default()
                        .push(format!("{} (group {g})", t.pod));
                }
                _ => allowed.push(t),
            }
        }
        let (representatives, waiting) = self.representatives_elsewhere(i, &split);
        let lines: Vec<String> = held
            .iter()
            .map(|(pdb, pods)| {
                format!(
                    "{} has no budget of its own and its group's representative, which \
                     PodDisruptionBudget {pdb} protects, runs outside this domain: the \
                     representative goes first, through the Eviction API, so the group moves \
                     whole{}",
                    pods.join(", "),
                    if waiting.is_empty() {
                        String::new()
                    } else {
                        format!(" (waiting for {} to go)", waiting.join(", "))
                    }
                )
            })
            .collect();
        self.set_hold(i, SPLIT_GROUP, lines);
        (allowed, representatives)
    }

    /// The representatives, outside domain `i`, of the `(namespace, group, budget)`s whose
    /// members it holds, as protected targets; and those already on their way out (terminating,
    /// or evicted by this domain), which are waited for.
    fn representatives_elsewhere(
        &self,
        i: usize,
        split: &BTreeSet<(String, String, String)>,
    ) -> (Vec<EvictTarget>, Vec<String>) {
        let Some(view) = self.groups.as_ref() else {
            return (vec![], vec![]);
        };
        let d = &self.s.domains[i];
        let mine: BTreeSet<&str> = d.nodes.iter().map(String::as_str).collect();
        let (mut targets, mut waiting) = (vec![], vec![]);
        for (ns, g, pdb) in split {
            let budget = pdb.split_once('/').map_or(pdb.as_str(), |(_, b)| b);
            for name in view.representatives(ns, g) {
                let Some(pod) = self.pods.get(&(ns.as_str(), name.as_str())) else {
                    continue;
                };
                let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if on.is_some_and(|n| mine.contains(n)) {
                    continue;
                }
                let sent = d.evicted.iter().chain(&d.sending).any(|e| {
                    e.refused.is_none()
                        && e.pod == format!("{ns}/{name}")
                        && e.uid == pod.metadata.uid
                });
                if sent || pod.metadata.deletion_timestamp.is_some() {
                    waiting.push(format!("{ns}/{name}"));
                    continue;
                }
                let r = PodRef {
                    namespace: ns.as_str(),
                    name: name.as_str(),
                    node: on.unwrap_or_default(),
                };
                targets.push(self.target(&r, Some(budget), Some(g.clone())));
            }
        }
        (targets, waiting)
    }

    /// Whether the domain may send its first protected eviction: the budgets of `targets` had
    /// no drop in available groups for the stable window (once per domain start, refusal lift
    /// or caller start).
    pub(super) fn window_held(&mut self, i: usize, targets: &[EvictTarget]) -> bool {
        let name = &self.s.domains[i].name;
        if self.groups.is_none() || self.s.memory.windowed.contains(name) {
            return true;
        }
        let stable = self.o.eviction_window.unwrap_or_else(|| self.stable());
        let budgets: BTreeSet<&str> = targets.iter().filter_map(|t| t.pdb.as_deref()).collect();
        let waiting: Vec<String> = budgets
            .into_iter()
            .filter_map(|pdb| {
                let w = self.s.memory.windows.get(pdb)?;
                let held = self.now.duration_since(w.since);
                (held < stable).then(|| format!("{pdb} for {} of {}", human(held), human(stable)))
            })
            .collect();
        if waiting.is_empty() {
            return true;
        }
        self.s.domains[i].message = format!(
            "waiting for the groups to stay available, counted from their members, for the \
             stable window before evicting: {}",
            waiting.join(", ")
        );
        false
    }

    /// Per budget: the groups whose protected eviction this domain sent and whose pod the
    /// stores still show running (not yet counted as unavailable).
    fn going(&self, i: usize) -> BTreeMap<String, BTreeSet<String>> {
        let mut going: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let d = &self.s.domains[i];
        for e in d.evicted.iter().chain(&d.sending) {
            let (Some(pdb), None) = (&e.pdb, &e.refused) else {
                continue;
            };
            let (ns, name) = e.pod.split_once('/').unwrap_or(("", e.pod.as_str()));
            let running = self.pods.get(&(ns, name)).is_some_and(|p| {
                p.metadata.uid == e.uid && p.metadata.deletion_timestamp.is_none()
            });
            if running {
                let key = e.group.clone().unwrap_or_else(|| format!("pod:{name}"));
                going.entry(pdb.clone()).or_default().insert(key);
            }
        }
        going
    }

    /// `(namespace, group)` of the groups whose protected representative this domain evicted.
    fn consented_groups(&self, i: usize) -> BTreeSet<(String, String)> {
        let d = &self.s.domains[i];
        let recorded = d
            .evicted
            .iter()
            .filter(|e| e.pdb.is_some() && e.refused.is_none())
            .filter_map(|e| {
                let ns = e.pod.split_once('/').map_or("", |(ns, _)| ns);
                Some((ns.to_string(), e.group.clone()?))
            });
        // folded evictions are named by their workload's baseline or by `namespace/group`
        let folded_baselines = d
            .workloads
            .iter()
            .filter(|(_, b)| b.folded)
            .flat_map(|(k, b)| {
                let ns = k.split_once('/').map_or("", |(ns, _)| ns).to_string();
                b.groups.iter().map(move |g| (ns.clone(), g.clone()))
            });
        let folded = d.folded.groups.iter().filter_map(|g| {
            let (ns, g) = g.split_once('/')?;
            Some((ns.to_string(), g.to_string()))
        });
        recorded.chain(folded_baselines).chain(folded).collect()
    }

    /// Sets (or clears, with no lines) the domain's hold of `reason` (announced by
    /// [`Stepper::announce_hold`] once the step is decided).
    pub(super) fn set_hold(&mut self, i: usize, reason: &str, lines: Vec<String>) {
        self.s.domains[i].hold = (!lines.is_empty()).then(|| Hold {
            reason: reason.to_string(),
            message: format!("holding: {}", lines.join("; ")),
        });
    }

    /// A Warning Event for a hold that is new or changed since `before` (the step's start).
    pub(super) fn announce_hold(&mut self, i: usize, before: Option<&Hold>) {
        let d = &self.s.domains[i];
        let Some(hold) = d.hold.as_ref().filter(|h| Some(*h) != before) else {
            return;
        };
        let (node, message) = (
            d.nodes.first().cloned().unwrap_or_default(),
            format!("upgrade domain {}: {}", d.name, hold.message),
        );
        let reason = match hold.reason.as_str() {
            SPLIT_GROUP => SPLIT_GROUP,
            super::evict::UNREACHABLE_NODE => super::evict::UNREACHABLE_NODE,
            super::evict::DOMAIN_LABEL_CHANGED => super::evict::DOMAIN_LABEL_CHANGED,
            super::OTHER_ROLLOUT => super::OTHER_ROLLOUT,
            super::MOVE_HELD => super::MOVE_HELD,
            super::NODE_NOT_RETURNING => super::NODE_NOT_RETURNING,
            _ => GROUPS_UNAVAILABLE,
        };
        self.report(&node, EventType::Warning, reason, message);
    }
}
