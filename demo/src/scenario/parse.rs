//! Reading a scenario file: serde-saphyr's own errors (unknown field, wrong type, with line and
//! column), then the checks serde cannot make (a step with no action or two, a bad duration, a
//! fault rate out of range), each pointing at the step's line.

use std::collections::BTreeMap;
use std::time::Duration;

use raygate_sim::Verb;

use super::format::{
    Action, Checked, InjectFault, Scenario, StartRollout, Step, StrategyName, duration,
};

/// Why a scenario file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: {message}")]
    Yaml { file: String, message: String },
    #[error("{file}: line {line}: {field}: {reason}")]
    Field {
        file: String,
        line: u64,
        field: String,
        reason: String,
    },
}

/// A field at fault and why (the line is the caller's).
type FieldError = (String, String);

/// Reads a scenario file (`source` names it in errors).
pub fn parse(text: &str, source: &str) -> Result<Checked, ScenarioError> {
    let scenario: Scenario =
        raygate::manifest::from_yaml(text).map_err(|e| ScenarioError::Yaml {
            file: source.into(),
            message: raygate::manifest::yaml_error_line(&e, 1),
        })?;
    let field = |line: u64, field: String, reason: String| ScenarioError::Field {
        file: source.into(),
        line,
        field,
        reason,
    };
    if scenario.cluster.upgrade_domains == 0 || scenario.cluster.nodes_per_domain == 0 {
        return Err(field(
            1,
            "cluster".into(),
            "needs at least one upgrade domain and one node per domain".into(),
        ));
    }
    let mut steps = vec![];
    let mut notes = BTreeMap::new();
    for (i, s) in scenario.timeline.iter().enumerate() {
        let line = s.referenced.line();
        if let Some(note) = &s.value.note {
            notes.insert(line, note.clone());
        }
        let at = duration(&s.value.at)
            .map_err(|reason| field(line, format!("timeline[{i}].at"), reason))?;
        let action = step_action(&s.value, i).map_err(|(f, reason)| field(line, f, reason))?;
        steps.push((at, action, line));
    }
    steps.sort_by_key(|(at, _, line)| (*at, *line));
    let within = match &scenario.expect.within {
        Some(w) => duration(w).map_err(|r| field(1, "expect.within".into(), r))?,
        None => Duration::from_secs(4 * 3600),
    };
    let settle = match &scenario.expect.settle {
        Some(w) => duration(w).map_err(|r| field(1, "expect.settle".into(), r))?,
        None => Duration::from_secs(120),
    };
    Ok(Checked {
        scenario,
        steps,
        notes,
        within,
        settle,
    })
}

/// The one action of timeline step `i`.
fn step_action(step: &Step, i: usize) -> Result<Action, FieldError> {
    let step = step.clone();
    let mut actions: Vec<(&str, Action)> = vec![];
    if let Some(v) = step.apply {
        actions.push(("apply", Action::Apply(v)));
    }
    if let Some(v) = step.patch {
        actions.push(("patch", Action::Patch(v)));
    }
    if let Some(v) = step.raise_quota {
        actions.push(("raiseQuota", Action::RaiseQuota(v)));
    }
    if let Some(v) = step.start_rollout {
        check_start_rollout(&v, i)?;
        actions.push(("startRollout", Action::StartRollout(v)));
    }
    if let Some(k) = step.kill_controller {
        actions.push((
            "killController",
            k.after_writes
                .map_or(Action::KillController, Action::KillControllerAfterWrites),
        ));
    }
    if step.restart_controller.is_some() {
        actions.push(("restartController", Action::RestartController));
    }
    if let Some(v) = step.inject_fault {
        check_inject_fault(&v, i)?;
        actions.push(("injectFault", Action::InjectFault(v)));
    }
    if step.clear_faults.is_some() {
        actions.push(("clearFaults", Action::ClearFaults));
    }
    if let Some(v) = step.fail_node {
        actions.push(("failNode", Action::FailNode(v.node)));
    }
    if let Some(v) = step.restore_node {
        actions.push(("restoreNode", Action::RestoreNode(v.node)));
    }
    if actions.len() > 1 {
        let names: Vec<&str> = actions.iter().map(|(n, _)| *n).collect();
        return Err((
            format!("timeline[{i}]"),
            format!("one action per step, found {}", names.join(" and ")),
        ));
    }
    actions.pop().map(|(_, a)| a).ok_or_else(|| {
        (
            format!("timeline[{i}]"),
            "no action: give one of apply, patch, raiseQuota, startRollout, killController, restartController, injectFault, clearFaults, failNode, restoreNode".into(),
        )
    })
}

fn check_start_rollout(v: &StartRollout, i: usize) -> Result<(), FieldError> {
    if v.strategy == StrategyName::RandomConcurrent && v.k.unwrap_or(0) == 0 {
        return Err((
            format!("timeline[{i}].startRollout.k"),
            "randomConcurrent needs k ≥ 1 (nodes drained at once)".into(),
        ));
    }
    Ok(())
}

fn check_inject_fault(v: &InjectFault, i: usize) -> Result<(), FieldError> {
    if !(0.0..=1.0).contains(&v.rate) {
        return Err((
            format!("timeline[{i}].injectFault.rate"),
            format!("{} is not a share between 0 and 1", v.rate),
        ));
    }
    for verb in &v.verbs {
        if verb_of(verb).is_none() {
            return Err((
                format!("timeline[{i}].injectFault.verbs"),
                format!("unknown verb {verb:?} (get, list, watch, create, update, patch, delete)"),
            ));
        }
    }
    Ok(())
}

/// An `injectFault` verb's name as the sim's verb.
pub(super) fn verb_of(name: &str) -> Option<Verb> {
    Some(match name {
        "get" => Verb::Get,
        "list" => Verb::List,
        "watch" => Verb::Watch,
        "create" => Verb::Create,
        "update" => Verb::Update,
        "patch" => Verb::Patch,
        "delete" => Verb::Delete,
        _ => return None,
    })
}
