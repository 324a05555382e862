//! `raygate rollout get|pause|resume NAME` (pure half): what a NodeRollout's status says, and what
//! a resume writes. The IO half (read, patch, retry on 409) is [`crate::client::rollout`].
//!
//! Two pauses exist: the operator's (`spec.paused`) and the engine's (a failure with
//! `failureAction: Pause`, or manual mode after a domain), which only the resume counter
//! annotation ([`pure::RESUME_ANNOTATION`]) lifts. `resume` lifts both.

use serde::Serialize;
use serde_json::{Value, json};

use crate::drain::engine::{Phase, State, Step};
use crate::drain::rollout as pure;
use crate::types::rollout::NodeRollout;

/// Exit codes of `raygate rollout get|pause|resume` (the table of `raygate drain plan|check`).
pub mod exit {
    pub const OK: u8 = 0;
    /// The name names no NodeRollout (input that names nothing, as an unknown label for `drain`).
    pub const NOT_FOUND: u8 = super::super::drain::exit::BAD_INPUT;
    /// The cluster could not be read or written (kubeconfig, connection, permission, conflicts
    /// that outlasted the retries).
    pub const API: u8 = super::super::drain::exit::UNREADABLE;
}

/// A condition as `get` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// What `raygate rollout get NAME` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    pub name: String,
    pub phase: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// `spec.paused`: the operator's pause.
    pub paused_by_spec: bool,
    /// Why the engine paused it (a failure, or manual mode after a domain); `None`: it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_by_engine: Option<String>,
    /// The resume counter annotation's value (0 when absent).
    pub resume_count: u64,
    /// Ready, Progressing and Blocked, as the status holds them.
    pub conditions: Vec<ConditionView>,
}

/// The engine's state as the status keeps it (`None`: not started, or unreadable).
fn engine_state(o: &NodeRollout) -> Option<State> {
    let text = o.status.as_ref()?.engine.as_deref()?;
    serde_json::from_str(text).ok()
}

/// Why the engine holds the rollout until a resume: its pause on a failure, or manual mode
/// after a domain's health check.
pub fn engine_pause(state: &State) -> Option<String> {
    if let Phase::Paused { reason } = &state.phase {
        return Some(reason.clone());
    }
    let awaiting = (state.phase == Phase::Running)
        .then(|| {
            state
                .domains
                .iter()
                .find(|d| d.step == Step::AwaitingResume)
        })
        .flatten()?;
    Some(format!(
        "manual mode: upgrade domain {} is done",
        awaiting.name
    ))
}

/// The resume counter annotation's value.
pub fn resume_count(o: &NodeRollout) -> u64 {
    pure::resumes(crate::meta::annotation(
        &o.metadata,
        pure::RESUME_ANNOTATION,
    ))
}

/// `get`'s view of a NodeRollout.
pub fn view(o: &NodeRollout) -> RolloutView {
    let status = o.status.clone().unwrap_or_default();
    let conditions = [pure::READY, pure::PROGRESSING, pure::BLOCKED]
        .iter()
        .filter_map(|t| crate::conditions::find(&status.conditions, t))
        .map(|c| ConditionView {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect();
    RolloutView {
        name: o.metadata.name.clone().unwrap_or_default(),
        phase: status.phase.unwrap_or_else(|| pure::PENDING.into()),
        current_domain: status.current_domain,
        progress: status.progress,
        paused_by_spec: o.spec.paused,
        paused_by_engine: engine_state(o).as_ref().and_then(engine_pause),
        resume_count: resume_count(o),
        conditions,
    }
}

/// `get`'s table.
impl super::View for RolloutView {
    fn table(&self) -> String {
        view_table(self)
    }

    fn names(&self) -> Vec<String> {
        vec![super::object_name("noderollout.raygate.io", &self.name)]
    }
}

pub fn view_table(v: &RolloutView) -> String {
    let mut out = format!("NodeRollout {}\n", v.name);
    let dash = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".into());
    out += &format!("  Phase:     {}\n", v.phase);
    out += &format!("  Domain:    {}\n", dash(&v.current_domain));
    out += &format!("  Progress:  {}\n", dash(&v.progress));
    let mut paused = Vec::new();
    if v.paused_by_spec {
        paused.push("by spec.paused".to_string());
    }
    if let Some(why) = &v.paused_by_engine {
        paused.push(format!("by the engine ({why})"));
    }
    if !paused.is_empty() {
        out += &format!(
            "  Paused:    {}; `raygate rollout resume {}` goes on\n",
            paused.join(", "),
            v.name
        );
    }
    for c in &v.conditions {
        out += &format!("  {}={} {}", c.type_, c.status, c.reason);
        if !c.message.is_empty() {
            out += &format!(": {}", c.message);
        }
        out.push('\n');
    }
    out
}

/// What `resume` writes on a rollout as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    /// Set `spec.paused` back to false.
    pub unpause_spec: bool,
    /// The resume counter's next value, when the engine paused it: one past both the annotation
    /// and what the engine took already (an annotation set back lower would resume nothing).
    pub bump_to: Option<u64>,
}

impl Resume {
    /// Nothing to do: neither pause holds it.
    pub fn is_noop(&self) -> bool {
        !self.unpause_spec && self.bump_to.is_none()
    }

    /// The merge patch, conditioned on `resource_version` (a concurrent bump or edit makes it a
    /// 409, so two resumes never write the same counter value).
    pub fn patch(&self, resource_version: Option<&str>) -> Value {
        let mut patch = json!({"metadata": {"resourceVersion": resource_version}});
        if self.unpause_spec {
            patch["spec"] = json!({"paused": false});
        }
        if let Some(n) = self.bump_to {
            patch["metadata"]["annotations"] = json!({pure::RESUME_ANNOTATION: n.to_string()});
        }
        patch
    }

    /// The line `resume` prints.
    pub fn line(&self, name: &str) -> String {
        let mut did = Vec::new();
        if self.unpause_spec {
            did.push("spec.paused set to false".to_string());
        }
        if let Some(n) = self.bump_to {
            did.push(format!("{} set to {n}", pure::RESUME_ANNOTATION));
        }
        match did.is_empty() {
            true => format!("noderollout {name} is not paused: nothing to resume\n"),
            false => format!("noderollout {name} resumed: {}\n", did.join(", ")),
        }
    }
}

/// What resuming `o` takes.
pub fn resume(o: &NodeRollout) -> Resume {
    let bump_to = engine_state(o).and_then(|s| {
        engine_pause(&s)?;
        Some(resume_count(o).max(s.resumes) + 1)
    });
    Resume {
        unpause_spec: o.spec.paused,
        bump_to,
    }
}

/// The merge patch of `pause`.
pub fn pause_patch() -> Value {
    json!({"spec": {"paused": true}})
}

/// Why `abort` has nothing to do (`None`: the rollout has not finished).
pub fn abort_noop(o: &NodeRollout) -> Option<String> {
    let phase = o.status.as_ref().and_then(|s| s.phase.as_deref());
    match phase {
        Some(pure::COMPLETED) => Some("completed: nothing to abort".into()),
        Some(pure::FAILED_PHASE) => Some("already failed: nothing to abort".into()),
        _ => None,
    }
}

/// The merge patch of `abort`: the abort annotation, and `spec.paused=false` so that a rollout
/// paused by its spec runs the step that aborts it.
pub fn abort_patch() -> Value {
    json!({"metadata": {"annotations": {pure::ABORT_ANNOTATION: "true"}}, "spec": {"paused": false}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::engine::DomainState;
    use crate::types::rollout::{NodeRolloutSpec, NodeRolloutStatus};

    fn rollout(paused: bool, annotation: Option<&str>, state: Option<&State>) -> NodeRollout {
        let mut o = NodeRollout::new(
            "r",
            NodeRolloutSpec {
                paused,
                ..NodeRolloutSpec::default()
            },
        );
        if let Some(a) = annotation {
            o.metadata.annotations =
                Some([(pure::RESUME_ANNOTATION.to_string(), a.to_string())].into());
        }
        o.status = Some(NodeRolloutStatus {
            phase: Some(pure::PAUSED.into()),
            engine: state.map(|s| serde_json::to_string(s).unwrap()),
            ..NodeRolloutStatus::default()
        });
        o
    }

    fn paused_state(resumes: u64) -> State {
        State {
            phase: Phase::Paused {
                reason: "upgrade domain a did not finish within its timeout".into(),
            },
            resumes,
            ..State::default()
        }
    }

    #[test]
    fn resume_of_an_engine_pause_bumps_the_counter_past_the_annotation_and_the_engine() {
        let r = resume(&rollout(false, Some("2"), Some(&paused_state(2))));
        assert_eq!(
            r,
            Resume {
                unpause_spec: false,
                bump_to: Some(3)
            }
        );
        let p = r.patch(Some("41"));
        assert_eq!(p["metadata"]["resourceVersion"], "41");
        assert_eq!(p["metadata"]["annotations"][pure::RESUME_ANNOTATION], "3");
        assert!(p.get("spec").is_none());
        // an annotation set back below what the engine took still resumes
        let r = resume(&rollout(false, None, Some(&paused_state(4))));
        assert_eq!(r.bump_to, Some(5));
    }

    #[test]
    fn resume_of_a_spec_pause_only_unpauses_and_a_running_rollout_is_left_alone() {
        let running = State::default();
        let r = resume(&rollout(true, Some("1"), Some(&running)));
        assert_eq!(
            r,
            Resume {
                unpause_spec: true,
                bump_to: None
            }
        );
        assert_eq!(r.patch(None)["spec"]["paused"], false);
        let r = resume(&rollout(false, None, Some(&running)));
        assert!(r.is_noop());
        assert!(r.line("r").contains("nothing to resume"), "{}", r.line("r"));
        // never started: no engine state, nothing the counter could resume
        assert!(resume(&rollout(false, None, None)).is_noop());
    }

    #[test]
    fn manual_mode_after_a_domain_is_an_engine_pause() {
        let mut s = State::default();
        s.domains.push(DomainState {
            name: "ud-a".into(),
            step: Step::AwaitingResume,
            ..DomainState::default()
        });
        assert_eq!(
            engine_pause(&s).as_deref(),
            Some("manual mode: upgrade domain ud-a is done")
        );
        let r = resume(&rollout(true, None, Some(&s)));
        assert_eq!(
            r.line("r"),
            "noderollout r resumed: spec.paused set to false, raygate.io/resume set to 1\n"
        );
    }

    /// The value `resume` writes is one the engine's step takes: it goes on from its pause,
    /// where the counter as it was leaves it paused.
    #[test]
    fn the_engine_takes_the_bumped_counter() {
        use crate::drain::engine::{Observation, Options, decide};
        let state = paused_state(2);
        let o = rollout(false, Some("2"), Some(&state));
        let step = |resumes: u64| {
            let obs = Observation {
                nodes: &[],
                pods: &[],
                pdbs: &[],
                daemon_sets: None,
                outcomes: &[],
                resumes,
                abort: false,
                elsewhere: &[],
                services: &[],
            };
            let now = k8s_openapi::jiff::Timestamp::UNIX_EPOCH;
            decide(&state, &obs, now, &Options::default()).0
        };
        assert!(matches!(step(resume_count(&o)).phase, Phase::Paused { .. }));
        let bumped = step(resume(&o).bump_to.unwrap());
        assert!(!matches!(bumped.phase, Phase::Paused { .. }), "{bumped:?}");
        assert_eq!(bumped.resumes, 3);
    }

    #[test]
    fn get_shows_phase_domain_pauses_and_conditions() {
        let mut o = rollout(true, Some("1"), Some(&paused_state(1)));
        let s = o.status.as_mut().unwrap();
        s.current_domain = Some("ud-b".into());
        s.progress = Some("1/2".into());
        let now = k8s_openapi::jiff::Timestamp::UNIX_EPOCH;
        let c = &mut s.conditions;
        crate::conditions::set(c, pure::READY, "True", "Planned", "2 domains", None, now);
        crate::conditions::set(c, pure::BLOCKED, "True", "Refused", "pdb x", None, now);
        let v = view(&o);
        assert_eq!(v.conditions.len(), 2);
        let t = view_table(&v);
        for want in [
            "Phase:     Paused",
            "Domain:    ud-b",
            "Progress:  1/2",
            "by spec.paused, by the engine (upgrade domain a did not finish",
            "`raygate rollout resume r` goes on",
            "Ready=True Planned: 2 domains",
            "Blocked=True Refused: pdb x",
        ] {
            assert!(t.contains(want), "{want:?} in\n{t}");
        }
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["pausedBySpec"], true);
        assert_eq!(j["resumeCount"], 1);
        assert_eq!(j["conditions"][1]["type"], "Blocked");
    }

    #[test]
    fn abort_asks_once_unpaused_and_leaves_a_finished_rollout_alone() {
        let mut o = rollout(true, None, None);
        assert_eq!(abort_noop(&o), None);
        let p = abort_patch();
        assert_eq!(p["metadata"]["annotations"][pure::ABORT_ANNOTATION], "true");
        assert_eq!(p["spec"]["paused"], false);
        for (phase, why) in [
            (pure::COMPLETED, "completed: nothing to abort"),
            (pure::FAILED_PHASE, "already failed: nothing to abort"),
        ] {
            o.status.as_mut().unwrap().phase = Some(phase.into());
            assert_eq!(abort_noop(&o).as_deref(), Some(why));
        }
    }
}
