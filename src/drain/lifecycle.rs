//! What an active `NodeRollout` holds on to (pure): the selection it started with, and the
//! finalizer that gives its nodes back when it is deleted.
//!
//! * [`check_selection`]: `udLabel`, `nodeSelector` and `generation` are recorded in the status
//!   when the rollout starts (`status.selection`); while it is active (started, not finished) a
//!   spec that selects otherwise pauses it, `Ready=False` with reason [`SELECTION_CHANGED`] naming
//!   each changed field, until the spec selects the same again. The CRD's transition rules refuse
//!   such a change where the API server runs them; this covers the servers that do not, and a
//!   change that lands between the plan and its first status.
//! * [`finalizer_step`]: the finalizer [`FINALIZER`] is held exactly while the rollout is
//!   active. Deleting an active rollout gives its nodes back first
//!   ([`crate::drain::engine::give_back`]); a finished one (or one never started) holds nothing,
//!   so deleting it, or uninstalling raygate, never waits on the controller.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use crate::types::rollout::{NodeRolloutSpec, NodeRolloutStatus, RolloutSelection};

use super::engine::{Action, State, Step, is_cordoned};
use super::rollout::{COMPLETED, FAILED_PHASE, NotReady};

/// The finalizer an active NodeRollout carries.
pub const FINALIZER: &str = "raygate.io/node-cleanup";
/// The `Ready=False` reason (and the Warning Event's) of a rollout paused because its spec's
/// selection differs from the one it started with.
pub const SELECTION_CHANGED: &str = "SelectionChanged";
/// The Normal Event's reason when its spec selects the same again and the rollout goes on.
pub const SELECTION_RESTORED: &str = "SelectionRestored";

/// What a rollout's spec selection means for it.
#[derive(Clone, Debug, PartialEq)]
pub enum SelectionCheck {
    /// Not started, or finished: the selection may change.
    Free,
    /// Started, and the spec selects what it started with.
    Same,
    /// Started before its selection was recorded: record the spec's now.
    Unrecorded(RolloutSelection),
    /// Started, and the spec selects otherwise: pause, saying why.
    Changed(NotReady),
}

/// Whether `status` says the rollout is active: started (the engine's state is stored) and
/// neither completed nor failed.
pub fn is_active(status: Option<&NodeRolloutStatus>) -> bool {
    status.is_some_and(|s| {
        s.engine.is_some() && !matches!(s.phase.as_deref(), Some(COMPLETED | FAILED_PHASE))
    })
}

/// Compares the spec's selection with the one the rollout started with.
pub fn check_selection(
    spec: &NodeRolloutSpec,
    status: Option<&NodeRolloutStatus>,
) -> SelectionCheck {
    if !is_active(status) {
        return SelectionCheck::Free;
    }
    let now = RolloutSelection::of(spec);
    let Some(started) = status.and_then(|s| s.selection.as_ref()) else {
        return SelectionCheck::Unrecorded(now);
    };
    let changed = changed_fields(started, &now);
    if changed.is_empty() {
        return SelectionCheck::Same;
    }
    SelectionCheck::Changed(NotReady {
        reason: SELECTION_CHANGED,
        message: format!(
            "{} while the rollout is active: nothing more is cordoned or evicted until the spec \
             selects what the rollout started with (status.selection); set it back to go on, or \
             delete this rollout (raygate takes its taint and cordons off the nodes not drained \
             yet) and create a new one",
            changed.join("; ")
        ),
    })
}

/// `spec.FIELD changed from OLD to NEW` for each field that differs.
fn changed_fields(started: &RolloutSelection, now: &RolloutSelection) -> Vec<String> {
    let mut changed = Vec::new();
    let mut differs = |field: &str, old: String, new: String| {
        if old != new {
            changed.push(format!("spec.{field} changed from {old} to {new}"));
        }
    };
    differs("udLabel", json(&started.ud_label), json(&now.ud_label));
    differs(
        "nodeSelector",
        json(&started.node_selector),
        json(&now.node_selector),
    );
    differs(
        "generation",
        json(&started.generation),
        json(&now.generation),
    );
    changed
}

/// Compact JSON (`"a"`, `{"matchLabels":{"pool":"old"}}`); absent: `unset`.
fn json<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Null) | Err(_) => "unset".into(),
        Ok(v) => v.to_string(),
    }
}

/// When the rollout was paused for a changed selection (the transition of its `Ready=False`
/// [`SELECTION_CHANGED`] condition): `None` when it was not.
pub fn selection_paused_at(status: Option<&NodeRolloutStatus>) -> Option<Timestamp> {
    let ready = crate::conditions::find(&status?.conditions, super::rollout::READY)?;
    (ready.status == "False" && ready.reason == SELECTION_CHANGED)
        .then_some(ready.last_transition_time.0)
}

/// What the controller does with the finalizer at a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerStep {
    /// Active and not held yet: add it before anything else is done.
    Add,
    /// Deleted while active: give the nodes back, then remove it.
    GiveBack,
    /// Held but not active (finished, never started, or deleted then): remove it.
    Remove,
    /// Deleted and not held: the object goes; nothing is started or done.
    Gone,
    /// Nothing to do.
    Keep,
}

/// The finalizer's step for an object `deleting` (its `deletionTimestamp` set) that `holds` it,
/// with the engine's `state` (`None`: not started).
pub fn finalizer_step(deleting: bool, holds: bool, state: Option<&State>) -> FinalizerStep {
    let active = state.is_some_and(|s| !s.is_finished());
    match (deleting, holds, active) {
        (true, true, true) => FinalizerStep::GiveBack,
        (true, true, false) | (false, true, false) => FinalizerStep::Remove,
        (true, false, _) => FinalizerStep::Gone,
        (false, false, true) => FinalizerStep::Add,
        (false, false, false) | (false, true, true) => FinalizerStep::Keep,
    }
}

/// The Normal Event's reason while a deleted rollout gives its nodes back.
pub const GIVING_BACK: &str = "GivingBackNodes";

/// What giving back `state`'s nodes does (`actions`, from [`super::engine::give_back`] on
/// `nodes`), and what it leaves, for people.
pub fn give_back_note(state: &State, nodes: &[Node], actions: &[Action]) -> String {
    let mut untaint = Vec::new();
    let mut uncordon = Vec::new();
    let mut unlabel = Vec::new();
    let mut kept = Vec::new();
    for a in actions {
        let Action::Uncordon {
            node,
            keep_cordon,
            remove_taint,
            remove_label,
        } = a
        else {
            continue;
        };
        if remove_taint.is_some() {
            untaint.push(node.as_str());
        }
        if !keep_cordon {
            uncordon.push(node.as_str());
        }
        if remove_label.is_some() {
            unlabel.push(node.as_str());
        }
        let cordoned = nodes
            .iter()
            .find(|n| super::name(&n.metadata) == node)
            .is_some_and(is_cordoned);
        if *keep_cordon && cordoned {
            kept.push(node.as_str());
        }
    }
    let mut parts = vec!["deleted while active: giving its nodes back".to_string()];
    let mut said = |what: &str, nodes: &[&str]| {
        if !nodes.is_empty() {
            parts.push(format!("{what} node(s) {}", nodes.join(", ")));
        }
    };
    said("taking raygate's taint off", &untaint);
    said("lifting raygate's cordon on", &uncordon);
    said("removing the hand-off label from", &unlabel);
    said("leaving the cordon raygate did not make on", &kept);
    let handed_off: Vec<&str> = state
        .domains
        .iter()
        .filter(|d| {
            matches!(
                d.step,
                Step::HealthCheck | Step::AwaitingResume | Step::Done
            )
        })
        .map(|d| d.name.as_str())
        .collect();
    if !handed_off.is_empty() {
        parts.push(format!(
            "upgrade domain(s) {} stay as their hand-off left them",
            handed_off.join(", ")
        ));
    }
    parts.push(format!(
        "the finalizer {FINALIZER} goes once the nodes show it"
    ));
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;
    use crate::drain::engine::Phase;
    use crate::types::rollout::GenerationSpec;

    fn spec(pool: &str, ud_label: &str) -> NodeRolloutSpec {
        NodeRolloutSpec {
            node_selector: Some(LabelSelector {
                match_labels: Some([("pool".to_string(), pool.to_string())].into()),
                ..LabelSelector::default()
            }),
            ud_label: ud_label.into(),
            ..NodeRolloutSpec::default()
        }
    }

    fn started(phase: &str, with: &NodeRolloutSpec) -> NodeRolloutStatus {
        NodeRolloutStatus {
            phase: Some(phase.into()),
            engine: Some("{}".into()),
            selection: Some(RolloutSelection::of(with)),
            ..NodeRolloutStatus::default()
        }
    }

    #[test]
    fn a_running_rollout_whose_selection_changed_pauses_naming_each_field() {
        let before = spec("old", "raygate.io/upgrade-domain");
        let mut after = spec("new", "example.com/rack");
        after.generation = Some(GenerationSpec {
            label: Some("example.com/gen".into()),
            ..GenerationSpec::default()
        });
        let SelectionCheck::Changed(why) =
            check_selection(&after, Some(&started("Running", &before)))
        else {
            panic!("a changed selection is not Changed")
        };
        assert_eq!(why.reason, "SelectionChanged");
        for says in [
            "spec.udLabel changed from \"raygate.io/upgrade-domain\" to \"example.com/rack\"",
            "spec.nodeSelector changed from {\"matchLabels\":{\"pool\":\"old\"}} to \
             {\"matchLabels\":{\"pool\":\"new\"}}",
            "spec.generation changed from unset to {\"label\":\"example.com/gen\"}",
            "while the rollout is active: nothing more is cordoned or evicted",
            "set it back to go on",
        ] {
            assert!(why.message.contains(says), "no {says:?} in {}", why.message);
        }
    }

    #[test]
    fn one_changed_field_is_the_only_one_named() {
        let before = spec("old", "raygate.io/upgrade-domain");
        let after = spec("old", "example.com/rack");
        let SelectionCheck::Changed(why) =
            check_selection(&after, Some(&started("Paused", &before)))
        else {
            panic!("a paused rollout is active too")
        };
        assert!(
            why.message.starts_with("spec.udLabel changed"),
            "{}",
            why.message
        );
        assert!(
            !why.message.contains("spec.nodeSelector"),
            "{}",
            why.message
        );
    }

    #[test]
    fn the_same_selection_or_another_field_changed_goes_on() {
        let before = spec("old", "raygate.io/upgrade-domain");
        let mut after = before.clone();
        after.paused = true;
        after.health_check_stable = Some("1m".into());
        assert_eq!(
            check_selection(&after, Some(&started("Running", &before))),
            SelectionCheck::Same
        );
    }

    #[test]
    fn before_the_start_and_after_the_end_the_selection_is_free() {
        let before = spec("old", "raygate.io/upgrade-domain");
        let after = spec("new", "example.com/rack");
        assert_eq!(check_selection(&after, None), SelectionCheck::Free);
        // pending, or paused by the spec before its start: no engine state
        let waiting = NodeRolloutStatus {
            phase: Some("Paused".into()),
            ..NodeRolloutStatus::default()
        };
        assert_eq!(
            check_selection(&after, Some(&waiting)),
            SelectionCheck::Free
        );
        for phase in ["Completed", "Failed"] {
            let done = started(phase, &before);
            assert_eq!(check_selection(&after, Some(&done)), SelectionCheck::Free);
        }
    }

    #[test]
    fn a_selection_pause_is_dated_by_its_ready_condition() {
        let before = spec("old", "raygate.io/upgrade-domain");
        let after = spec("new", "raygate.io/upgrade-domain");
        let status = started("Running", &before);
        assert_eq!(selection_paused_at(Some(&status)), None);
        let SelectionCheck::Changed(why) = check_selection(&after, Some(&status)) else {
            panic!("changed")
        };
        let at = Timestamp::from_second(1_800_000_000).unwrap();
        let paused =
            super::super::rollout::waiting_status(Some(&status), Some(&why), false, Some(2), at);
        assert_eq!(paused.phase.as_deref(), Some("Paused"));
        assert_eq!(selection_paused_at(Some(&paused)), Some(at));
    }

    #[test]
    fn a_rollout_started_without_a_record_records_the_spec_s_selection() {
        let s = spec("old", "raygate.io/upgrade-domain");
        let mut status = started("Running", &s);
        status.selection = None;
        assert_eq!(
            check_selection(&s, Some(&status)),
            SelectionCheck::Unrecorded(RolloutSelection::of(&s))
        );
    }

    #[test]
    fn the_give_back_note_names_each_node_by_what_it_gets_and_what_stays() {
        use crate::drain::engine::{DomainState, give_back};
        use raygate_testing::core::{NodeExt, node};

        let tainted = |name: &str| node(name, "").tainted(crate::drain::outdated_taint());
        let domain = |name: &str, step: Step, nodes: &[&str], mine: &[&str]| DomainState {
            name: name.into(),
            step,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            cordoned: Some(mine.iter().map(|n| n.to_string()).collect()),
            ..DomainState::default()
        };
        let state = State {
            domains: vec![
                domain("ud-0", Step::Done, &["d1"], &["d1"]),
                domain("ud-1", Step::Draining, &["a1", "a2"], &["a1"]),
                domain("ud-2", Step::Pending, &["b1"], &[]),
            ],
            ..State::default()
        };
        let nodes = vec![
            tainted("d1").cordoned(),
            tainted("a1").cordoned(),
            tainted("a2").cordoned(),
            tainted("b1"),
        ];
        let actions = give_back(&state, &nodes, Some(&crate::drain::outdated_taint()), None);
        assert_eq!(
            give_back_note(&state, &nodes, &actions),
            "deleted while active: giving its nodes back; taking raygate's taint off node(s) a1, \
             a2, b1; lifting raygate's cordon on node(s) a1; leaving the cordon raygate did not \
             make on node(s) a2; upgrade domain(s) ud-0 stay as their hand-off left them; the \
             finalizer raygate.io/node-cleanup goes once the nodes show it"
        );
    }

    #[test]
    fn the_finalizer_is_held_exactly_while_the_rollout_is_active() {
        use FinalizerStep::*;
        let running = State::default();
        let done = State {
            phase: Phase::Completed,
            ..State::default()
        };
        let failed = State {
            phase: Phase::Failed {
                reason: "timeout".into(),
            },
            ..State::default()
        };
        let paused = State {
            phase: Phase::Paused {
                reason: "health".into(),
            },
            ..State::default()
        };
        // (deleting, holds, state) → step
        let cases = [
            (false, false, None, Keep),
            (false, false, Some(&running), Add),
            (false, false, Some(&paused), Add),
            (false, true, Some(&running), Keep),
            (false, true, Some(&done), Remove),
            (false, true, Some(&failed), Remove),
            (false, true, None, Remove),
            (true, true, Some(&running), GiveBack),
            (true, true, Some(&paused), GiveBack),
            (true, true, Some(&done), Remove),
            (true, true, None, Remove),
            (true, false, Some(&running), Gone),
            (true, false, None, Gone),
        ];
        for (deleting, holds, state, step) in cases {
            assert_eq!(
                finalizer_step(deleting, holds, state),
                step,
                "deleting {deleting}, holds {holds}, {:?}",
                state.map(|s| &s.phase)
            );
        }
    }
}
