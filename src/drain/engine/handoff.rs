//! The hand-off of a drained domain (pure): none, or label its nodes for an upgrade agent and
//! wait for them (reboot) or for new nodes (replace) at the target generation; then give back
//! what raygate took (its cordons, taint and label).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;

use super::{
    Action, Handoff, Health, NODE_NOT_RETURNING, NODE_RETURN_GRACE, Step, Stepper, has_label,
    has_taint, human, is_cordoned, node_ready,
};
use crate::drain::{compare_generations, name, node_domain, node_generation};
use crate::events::EventType;

impl<'a> Stepper<'a> {
    pub(super) fn hand_off(&mut self, i: usize) {
        let done = match &self.o.handoff {
            Handoff::None => true,
            Handoff::Reboot { label, value } => self.reboot(i, label, value),
            Handoff::Replace { label, value } => self.replace(i, label, value),
        };
        if !done {
            self.handoff_waits(i);
            return;
        }
        let d = &mut self.s.domains[i];
        d.step = Step::HealthCheck;
        d.handed_off = Some(self.now);
        if d.hold
            .as_ref()
            .is_some_and(|h| h.reason == NODE_NOT_RETURNING)
        {
            d.hold = None;
        }
        d.health = Health::default();
        d.message = "health check".into();
        let (node, message) = (
            d.nodes.first().cloned().unwrap_or_default(),
            format!("upgrade domain {} handed off; health check follows", d.name),
        );
        self.report(&node, EventType::Normal, "DomainHandedOff", message);
        self.health_check(i);
    }

    /// A hand-off still waiting: past [`NODE_RETURN_GRACE`] the domain holds naming the nodes
    /// (`Blocked`), past the hand-off timeout the failure action decides.
    fn handoff_waits(&mut self, i: usize) {
        let d = &self.s.domains[i];
        let Some(since) = d.drained_at.or(d.started) else {
            return;
        };
        let waited = self.now.duration_since(since);
        let line = format!(
            "upgrade domain {}'s nodes have not returned from the hand-off within {}: {}",
            d.name,
            human(NODE_RETURN_GRACE),
            d.message
        );
        if let Some(limit) = self.o.handoff_timeout
            && waited >= limit
        {
            self.fail(format!("{line} (handOff.timeout {})", human(limit)));
            return;
        }
        if waited >= NODE_RETURN_GRACE {
            let before = d.hold.clone();
            self.set_hold(i, NODE_NOT_RETURNING, vec![line]);
            let changed = before.as_ref().map(|h| h.reason.as_str()) != Some(NODE_NOT_RETURNING);
            if changed {
                self.announce_hold(i, before.as_ref());
            }
        }
    }

    pub(super) fn node(&self, name: &str) -> Option<&'a Node> {
        self.obs
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
    }

    /// Whether the node's generation is at (or past) the target.
    pub(super) fn at_target(&self, node: &Node) -> bool {
        let (Some(target), Some(generation)) = (&self.s.target_generation, &self.o.plan.generation)
        else {
            return false;
        };
        node_generation(node, &generation.source)
            .is_some_and(|g| compare_generations(g, target) != std::cmp::Ordering::Less)
    }

    pub(super) fn label_for_upgrade(&mut self, node: &Node, label: &str, value: &str) {
        if !has_label(node, label, value) {
            self.actions.push(Action::LabelForUpgrade {
                node: name(&node.metadata).to_string(),
                key: label.to_string(),
                value: value.to_string(),
            });
        }
    }

    pub(super) fn reboot(&mut self, i: usize, label: &str, value: &str) -> bool {
        let names = self.s.domains[i].nodes.clone();
        let mut waiting = Vec::new();
        for n in &names {
            let Some(node) = self.node(n) else {
                waiting.push(format!("{n} (gone)"));
                continue;
            };
            if !self.at_target(node) {
                self.label_for_upgrade(node, label, value);
                waiting.push(format!("{n} (upgrading)"));
                continue;
            }
            if !node_ready(node) {
                waiting.push(format!("{n} (not Ready)"));
                continue;
            }
            let taint = self.o.plan.taint.clone().filter(|t| has_taint(node, t));
            let mark = node
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(label))
                .then(|| label.to_string());
            let uncordon = is_cordoned(node) && self.cordoned_by_me(i, n);
            if uncordon || taint.is_some() || mark.is_some() {
                self.actions.push(Action::Uncordon {
                    node: n.clone(),
                    keep_cordon: !uncordon,
                    remove_taint: taint,
                    remove_label: mark,
                });
                waiting.push(format!("{n} (uncordoning)"));
            }
        }
        self.s.domains[i].message = format!("reboot: waiting for {}", waiting.join(", "));
        waiting.is_empty()
    }

    /// Whether raygate made the node's cordon (see [`DomainState::cordoned`]).
    pub(super) fn cordoned_by_me(&self, i: usize, node: &str) -> bool {
        super::give_back::cordoned_by_raygate(&self.s.domains[i], node)
    }

    pub(super) fn replace(&mut self, i: usize, label: &str, value: &str) -> bool {
        let d = &self.s.domains[i];
        let drained: BTreeSet<String> = d.nodes.iter().cloned().collect();
        let domain = d.name.clone();
        for n in &drained {
            if let Some(node) = self.node(n)
                && !self.at_target(node)
            {
                let node = node.clone();
                self.label_for_upgrade(&node, label, value);
            }
        }
        let new = self
            .obs
            .nodes
            .iter()
            .filter(|n| !drained.contains(name(&n.metadata)))
            .filter(|n| node_domain(n, &self.o.plan.domain_label) == Some(domain.as_str()))
            .filter(|n| node_ready(n) && !is_cordoned(n) && self.at_target(n))
            .count();
        self.s.domains[i].message = format!(
            "replace: {new} of {} new node(s) Ready at the target generation",
            drained.len()
        );
        new >= drained.len()
    }
}
