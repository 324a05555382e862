//! The node family: every node at the target generation at the end.

use super::violation::{Invariant, Violation};
use crate::history::{History, State};

/// **Every node at the target generation at the end**: node label `label` = `target`.
pub fn every_node_at_target(h: &History, label: &str, target: &str) -> Vec<Violation> {
    let Some((_, end)) = h.span() else {
        return vec![];
    };
    h.current()
        .iter()
        .filter_map(|(k, s)| match s {
            State::Node(n) if n.labels.get(label).map(String::as_str) != Some(target) => {
                Some(Violation {
                    invariant: Invariant::NodeNotAtTarget,
                    from: end,
                    until: None,
                    objects: vec![k.to_string()],
                    message: format!(
                        "{label}={} at the end, target {target}",
                        n.labels.get(label).map_or("<none>", String::as_str)
                    ),
                })
            }
            _ => None,
        })
        .collect()
}
