//! What gives a rollout's nodes back (pure): on an abort, and when an active `NodeRollout` is
//! deleted. Only what raygate made goes: its taint, the cordons it recorded
//! ([`DomainState::cordoned`]) and its hand-off label; a node cordoned before the rollout stays
//! cordoned. Domains handed off already (health check, done) keep what their hand-off left: with
//! hand-off `None` their drained nodes stay cordoned and tainted for the infrastructure.

use k8s_openapi::api::core::v1::{Node, Taint};

use super::{Action, DomainState, State, Step, has_taint, is_cordoned};
use crate::drain::name;

/// The actions that give back `state`'s nodes as `nodes` show them: the taint off every node of
/// a domain not started (its cordon, if any, was not raygate's), and off every node of a domain
/// draining or handing off, with raygate's cordon lifted and `mark` (the hand-off label)
/// removed. Nothing for a node that shows none of them, so a caller repeats it until it is
/// empty.
pub fn give_back(
    state: &State,
    nodes: &[Node],
    taint: Option<&Taint>,
    mark: Option<&str>,
) -> Vec<Action> {
    let find = |n: &str| nodes.iter().find(|node| name(&node.metadata) == n);
    let mut actions = Vec::new();
    for d in &state.domains {
        let giving_back = matches!(d.step, Step::Draining | Step::HandingOff);
        if d.step != Step::Pending && !giving_back {
            continue;
        }
        for n in &d.nodes {
            let Some(node) = find(n) else { continue };
            let taint = taint.filter(|t| has_taint(node, t)).cloned();
            let label = mark
                .filter(|key| giving_back && has_label_key(node, key))
                .map(str::to_string);
            let uncordon = giving_back && is_cordoned(node) && cordoned_by_raygate(d, n);
            if uncordon || taint.is_some() || label.is_some() {
                actions.push(Action::Uncordon {
                    node: n.clone(),
                    keep_cordon: !uncordon,
                    remove_taint: taint,
                    remove_label: label,
                });
            }
        }
    }
    actions
}

/// Whether raygate made the node's cordon (a domain whose state predates the record: every
/// cordon counts as raygate's).
pub(super) fn cordoned_by_raygate(d: &DomainState, node: &str) -> bool {
    d.cordoned.as_ref().is_none_or(|mine| mine.contains(node))
}

fn has_label_key(node: &Node, key: &str) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(key))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use raygate_testing::core::{NodeExt, node};

    use super::*;
    use crate::drain::outdated_taint;

    fn domain(name: &str, step: Step, nodes: &[&str], mine: Option<&[&str]>) -> DomainState {
        DomainState {
            name: name.into(),
            step,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            cordoned: mine.map(|m| m.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>()),
            ..DomainState::default()
        }
    }

    fn uncordon(node: &str, keep_cordon: bool, label: Option<&str>) -> Action {
        Action::Uncordon {
            node: node.into(),
            keep_cordon,
            remove_taint: Some(outdated_taint()),
            remove_label: label.map(str::to_string),
        }
    }

    #[test]
    fn only_raygate_s_taint_cordons_and_label_go_and_handed_off_domains_keep_theirs() {
        let state = State {
            domains: vec![
                // drained, hand-off None: stays as the infrastructure expects it
                domain("ud-0", Step::Done, &["d1"], Some(&["d1"])),
                // draining: raygate cordoned a1; a2 was cordoned by an admin before
                domain("ud-1", Step::Draining, &["a1", "a2"], Some(&["a1"])),
                // not started: tainted from the first step, b1 quarantined by an admin
                domain("ud-2", Step::Pending, &["b1", "b2"], None),
            ],
            ..State::default()
        };
        let taint = outdated_taint();
        let drained = |name: &str| node(name, "").cordoned().tainted(taint.clone());
        let nodes = vec![
            drained("d1"),
            drained("a1").label("raygate.io/upgrade", "requested"),
            drained("a2"),
            drained("b1"),
            node("b2", "").tainted(taint.clone()),
        ];
        let actions = give_back(&state, &nodes, Some(&taint), Some("raygate.io/upgrade"));
        assert_eq!(
            actions,
            vec![
                uncordon("a1", false, Some("raygate.io/upgrade")),
                uncordon("a2", true, None),
                uncordon("b1", true, None),
                uncordon("b2", true, None),
            ]
        );
    }

    #[test]
    fn nodes_given_back_already_need_nothing_more() {
        let state = State {
            domains: vec![
                domain("ud-1", Step::HandingOff, &["a1"], Some(&["a1"])),
                domain("ud-2", Step::Pending, &["b1", "gone"], None),
            ],
            ..State::default()
        };
        let nodes = vec![node("a1", ""), node("b1", "").cordoned()];
        let taint = outdated_taint();
        assert_eq!(
            give_back(&state, &nodes, Some(&taint), Some("raygate.io/upgrade")),
            Vec::<Action>::new()
        );
    }

    #[test]
    fn a_state_stored_before_cordons_were_recorded_takes_every_cordon_as_raygate_s() {
        let state = State {
            domains: vec![domain("ud-1", Step::Draining, &["a1"], None)],
            ..State::default()
        };
        let nodes = vec![node("a1", "").cordoned()];
        assert_eq!(
            give_back(&state, &nodes, None, None),
            vec![Action::Uncordon {
                node: "a1".into(),
                keep_cordon: false,
                remove_taint: None,
                remove_label: None,
            }]
        );
    }
}
