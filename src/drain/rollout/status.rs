//! A `NodeRollout`'s whole status from what the controller observed (pure): [`next`] is the one
//! call; [`status`] (the engine runs) and [`waiting_status`] (it does not) are its two halves, and
//! the group contract's condition is set on either.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::{
    BLOCKED, COMPLETE, COMPLETED, CONTRACT_SATISFIED, Contract, FAILED, FAILED_PHASE, NotReady,
    PAUSED, PENDING, PROGRESSING, READY, RESUME_ANNOTATION, RUNNING, compact, count, step_name,
};
use crate::drain::engine::{BUDGET_NOT_SYNCED, DomainState, Phase, State, Step};
use crate::types::rollout::{DomainStatus, NodeRolloutStatus};

/// What the controller observed of a rollout, for its next status.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    /// The object's `metadata.generation`.
    pub generation: Option<i64>,
    pub now: Timestamp,
    pub run: Run<'a>,
    pub contract: ContractCondition<'a>,
}

/// Whether the rollout runs.
#[derive(Clone, Copy, Debug)]
pub enum Run<'a> {
    /// The engine runs (or has finished) with this state.
    Engine(&'a State),
    /// It does not run: the spec is unusable, the plan not possible or a node held elsewhere
    /// (`why`), or `spec.paused`.
    Waiting {
        why: Option<&'a NotReady>,
        paused: bool,
    },
}

/// The `ContractSatisfied` condition to write.
#[derive(Clone, Copy, Debug)]
pub enum ContractCondition<'a> {
    /// The spec has no `groups`: none (removed).
    Unset,
    /// Not checked yet: the previous one stays.
    Unchecked,
    Checked(&'a Contract),
}

/// The rollout's next status from the `previous` one (what the state does not keep: planned pod
/// counts, finish times, the selection) and what was observed.
pub fn next(previous: Option<&NodeRolloutStatus>, obs: &Observation<'_>) -> NodeRolloutStatus {
    let (generation, now) = (obs.generation, obs.now);
    let mut s = match obs.run {
        Run::Engine(state) => status(previous, state, generation, now),
        Run::Waiting { why, paused } => waiting_status(previous, why, paused, generation, now),
    };
    match obs.contract {
        ContractCondition::Unset => set_contract(&mut s, None, generation, now),
        ContractCondition::Unchecked => {}
        ContractCondition::Checked(c) => set_contract(&mut s, Some(c), generation, now),
    }
    s
}

/// The status of a running (or finished) rollout from the engine's `state`. `prev` keeps what
/// the state does not: planned pod counts and domains' finish times (a domain newly `Done` is
/// stamped `now`).
pub fn status(
    prev: Option<&NodeRolloutStatus>,
    state: &State,
    generation: Option<i64>,
    now: Timestamp,
) -> NodeRolloutStatus {
    let mut s = prev.cloned().unwrap_or_default();
    s.observed_generation = generation;
    s.target_generation = state.target_generation.clone();
    s.engine = serde_json::to_string(&compact(state)).ok();
    let awaiting = state.domains.iter().any(|d| d.step == Step::AwaitingResume);
    s.phase = Some(
        match (&state.phase, awaiting) {
            (Phase::Running, false) => RUNNING,
            (Phase::Running, true) | (Phase::Paused { .. }, _) => PAUSED,
            (Phase::Completed, _) => COMPLETED,
            (Phase::Failed { .. }, _) => FAILED_PHASE,
        }
        .to_string(),
    );
    let current: Vec<&str> = state
        .domains
        .iter()
        .filter(|d| d.step.is_unavailable() || d.step == Step::AwaitingResume)
        .map(|d| d.name.as_str())
        .collect();
    s.current_domain = (!current.is_empty()).then(|| current.join(","));
    let done = state
        .domains
        .iter()
        .filter(|d| d.step == Step::Done)
        .count();
    s.progress = Some(format!("{done}/{}", state.domains.len()));
    let old = std::mem::take(&mut s.domains);
    s.domains = state
        .domains
        .iter()
        .map(|d| domain_status(d, old.iter().find(|o| o.name == d.name), now))
        .collect();
    conditions(&mut s, state, generation, now);
    s
}

/// One domain's status from its engine state; `before` (its last status) keeps what the state
/// does not: planned pod counts and the finish time.
fn domain_status(d: &DomainState, before: Option<&DomainStatus>, now: Timestamp) -> DomainStatus {
    let (protected, other) = d.evicted_counts();
    let (protected, other) = (
        usize::try_from(protected).unwrap_or(usize::MAX),
        usize::try_from(other).unwrap_or(usize::MAX),
    );
    let finished = matches!(d.step, Step::Done | Step::Aborted);
    // a finished domain's evictions are not kept in `engine` (see `compact`): its
    // counts stay as the status last had them
    let (protected, other) = match before {
        Some(b) if finished => (
            protected.max(usize::try_from(b.protected_evicted).unwrap_or(0)),
            other.max(usize::try_from(b.other_evicted).unwrap_or(0)),
        ),
        _ => (protected, other),
    };
    DomainStatus {
        name: d.name.clone(),
        phase: step_name(d.step).into(),
        nodes: d.nodes.clone(),
        protected_evicted: count(protected),
        protected_total: before
            .map_or(0, |b| b.protected_total)
            .max(count(protected)),
        other_evicted: count(other),
        other_total: before.map_or(0, |b| b.other_total).max(count(other)),
        tolerating_pods: before
            .map(|b| b.tolerating_pods.clone())
            .unwrap_or_default(),
        serving_at_risk: before
            .map(|b| b.serving_at_risk.clone())
            .unwrap_or_default(),
        blocked_by: d.refusal.as_ref().map(|r| {
            format!(
                "PodDisruptionBudget {} refused evicting {}: {}",
                r.pdb, r.pod, r.message
            )
        }),
        started_at: d.started.map(Time),
        finished_at: if finished {
            before
                .and_then(|b| b.finished_at.clone())
                .or(Some(Time(now)))
        } else {
            None
        },
        message: (!d.message.is_empty()).then(|| d.message.clone()),
    }
}

/// A condition's status, reason and message.
type Condition = (&'static str, String, String);

fn conditions(s: &mut NodeRolloutStatus, state: &State, generation: Option<i64>, now: Timestamp) {
    let planned = format!(
        "{} upgrade domain(s), {} node(s)",
        state.domains.len(),
        state.nodes().count()
    );
    let ready = ("True", "Planned".to_string(), planned.clone());
    for (t, (st, reason, message)) in [
        (READY, ready),
        (PROGRESSING, progressing(state)),
        (BLOCKED, blocked(state)),
        (COMPLETE, complete(state, &planned)),
        (FAILED, failed(state)),
    ] {
        crate::conditions::set(&mut s.conditions, t, st, &reason, &message, generation, now);
    }
}

fn progressing(state: &State) -> Condition {
    let awaiting = state
        .domains
        .iter()
        .find(|d| d.step == Step::AwaitingResume);
    let resume = format!(
        "to go on: raygate rollout resume NAME (or kubectl annotate nro NAME {RESUME_ANNOTATION}={} --overwrite)",
        state.resumes + 1
    );
    match (&state.phase, awaiting) {
        (Phase::Running, None) => ("True", "Draining".into(), state.waiting.clone()),
        (Phase::Running, Some(d)) => (
            "False",
            "AwaitingResume".into(),
            format!("manual mode: upgrade domain {} is done; {resume}", d.name),
        ),
        (Phase::Paused { reason }, _) => (
            "False",
            "PausedOnFailure".into(),
            format!("{reason}; {resume}"),
        ),
        (Phase::Completed, _) => ("False", "Completed".into(), "every domain is done".into()),
        (Phase::Failed { reason }, _) => ("False", "Failed".into(), reason.clone()),
    }
}

/// What holds the rollout, most telling first: a budget's refusal, a hold (another rollout, a
/// budget not synced), the health check, pods that block the drain.
fn blocked(state: &State) -> Condition {
    let not_blocked = ("False", "NotBlocked".to_string(), String::new());
    if state.is_finished() {
        return not_blocked;
    }
    let refused = state.domains.iter().find_map(|d| {
        let r = d.refusal.as_ref()?;
        Some(format!(
            "upgrade domain {}: PodDisruptionBudget {} refused evicting {}: {}",
            d.name, r.pdb, r.pod, r.message
        ))
    });
    // a domain not started may hold too (another rollout disrupts its workloads)
    let held = state
        .domains
        .iter()
        .filter(|d| matches!(d.step, Step::Draining | Step::Pending))
        .find_map(|d| Some((d, d.hold.as_ref().or(d.failed.as_ref())?)));
    // a refusal whose budget never syncs says so rather than what the budget answered
    let refused = match held {
        Some((_, h)) if h.reason == BUDGET_NOT_SYNCED => None,
        _ => refused,
    };
    if let Some(m) = refused {
        return ("True", "EvictionRefused".into(), m);
    }
    if let Some((d, h)) = held {
        let message = format!("upgrade domain {}: {}", d.name, h.message);
        return ("True", h.reason.clone(), message);
    }
    let waiting = |step: Step, starts: &str| {
        let d = state
            .domains
            .iter()
            .find(|d| d.step == step && d.message.starts_with(starts))?;
        Some(format!("upgrade domain {}: {}", d.name, d.message))
    };
    if let Some(m) = waiting(Step::HealthCheck, "waiting for health") {
        return ("True", "HealthCheck".into(), m);
    }
    if let Some(m) = waiting(Step::Draining, "blocked") {
        return ("True", "PodsBlockDrain".into(), m);
    }
    not_blocked
}

fn complete(state: &State, planned: &str) -> Condition {
    match &state.phase {
        Phase::Completed if !state.joined.is_empty() => (
            "True",
            "CompletedWithNodesLeft".into(),
            format!(
                "{planned}; node(s) {} joined at an outdated generation after the plan and were \
                 not drained",
                state.joined.join(", ")
            ),
        ),
        Phase::Completed => ("True", "Completed".into(), planned.to_string()),
        _ => ("False", "NotComplete".into(), String::new()),
    }
}

fn failed(state: &State) -> Condition {
    match &state.phase {
        Phase::Failed { reason } => ("True", failure_reason(reason).into(), reason.clone()),
        _ => ("False", "NotFailed".into(), String::new()),
    }
}

/// `AbortedOnRequest` for the operator's abort, `TimedOut` for the engine's timeout failures,
/// `HealthCheckFailed` otherwise.
fn failure_reason(reason: &str) -> &'static str {
    if reason == crate::drain::engine::ABORTED_ON_REQUEST {
        "AbortedOnRequest"
    } else if reason.contains("within its timeout") {
        "TimedOut"
    } else {
        "HealthCheckFailed"
    }
}

/// The status of a rollout that does not run: `phase` (`Pending` or `Paused`), `Ready=False`
/// with `why` (or, with `why` `None`, the previous Ready), and no engine state change.
pub fn waiting_status(
    prev: Option<&NodeRolloutStatus>,
    why: Option<&NotReady>,
    paused: bool,
    generation: Option<i64>,
    now: Timestamp,
) -> NodeRolloutStatus {
    let mut s = prev.cloned().unwrap_or_default();
    s.observed_generation = generation;
    let started = s.engine.is_some();
    let c = &mut s.conditions;
    match why {
        Some(why) => {
            crate::conditions::set(c, READY, "False", why.reason, &why.message, generation, now)
        }
        None if !crate::conditions::is_true(c, READY) => crate::conditions::set(
            c,
            READY,
            "True",
            "SpecValid",
            "the spec is valid",
            generation,
            now,
        ),
        None => {}
    }
    if paused {
        s.phase = Some(PAUSED.into());
        crate::conditions::set(
            c,
            PROGRESSING,
            "False",
            "PausedBySpec",
            "spec.paused is true: no new evictions (those already sent finish); set it to false \
             to go on",
            generation,
            now,
        );
    } else if why.is_some() {
        // a started rollout whose spec became unusable stops where it is
        s.phase = Some(if started { PAUSED } else { PENDING }.into());
        let message = why.map(|w| w.message.as_str()).unwrap_or_default();
        crate::conditions::set(
            c,
            PROGRESSING,
            "False",
            "NotReady",
            message,
            generation,
            now,
        );
    }
    for (t, reason) in [(COMPLETE, "NotComplete"), (FAILED, "NotFailed")] {
        if crate::conditions::find(c, t).is_none() {
            crate::conditions::set(c, t, "False", reason, "", generation, now);
        }
    }
    s
}

/// Sets (or, with `None`: a spec without `groups`, removes) the `ContractSatisfied` condition.
pub fn set_contract(
    s: &mut NodeRolloutStatus,
    c: Option<&Contract>,
    generation: Option<i64>,
    now: Timestamp,
) {
    match c {
        Some(c) => crate::conditions::set(
            &mut s.conditions,
            CONTRACT_SATISFIED,
            c.status,
            &c.reason,
            &c.message,
            generation,
            now,
        ),
        None => s.conditions.retain(|x| x.type_ != CONTRACT_SATISFIED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn one_domain() -> State {
        State {
            started: Some(t(0)),
            domains: vec![DomainState {
                name: "ud-a".into(),
                nodes: vec!["n1".into()],
                ..DomainState::default()
            }],
            ..State::default()
        }
    }

    fn observed<'a>(run: Run<'a>, contract: ContractCondition<'a>) -> Observation<'a> {
        Observation {
            generation: Some(2),
            now: t(10),
            run,
            contract,
        }
    }

    fn contract_of(s: &NodeRolloutStatus) -> Option<(String, String)> {
        crate::conditions::find(&s.conditions, CONTRACT_SATISFIED)
            .map(|c| (c.status.clone(), c.reason.clone()))
    }

    #[test]
    fn next_is_the_engine_s_status_with_the_contract_s_condition_on_it() {
        let state = one_domain();
        let holds = Contract {
            status: "True",
            reason: "ContractHolds".into(),
            message: "every group contract holds".into(),
        };
        let s = next(
            None,
            &observed(Run::Engine(&state), ContractCondition::Checked(&holds)),
        );
        let mut expected = status(None, &state, Some(2), t(10));
        set_contract(&mut expected, Some(&holds), Some(2), t(10));
        assert_eq!(s, expected);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
        assert_eq!(
            contract_of(&s),
            Some(("True".into(), "ContractHolds".into()))
        );
        // not checked again yet: the condition stays; a spec without groups: it goes
        let kept = next(
            Some(&s),
            &observed(Run::Engine(&state), ContractCondition::Unchecked),
        );
        assert_eq!(contract_of(&kept), contract_of(&s));
        let gone = next(
            Some(&s),
            &observed(Run::Engine(&state), ContractCondition::Unset),
        );
        assert_eq!(contract_of(&gone), None);
        assert_eq!(gone.engine, s.engine);
    }

    #[test]
    fn next_of_a_rollout_that_does_not_run_says_why_and_keeps_the_engine_s_record() {
        let state = one_domain();
        let running = next(
            None,
            &observed(Run::Engine(&state), ContractCondition::Unset),
        );
        let why = NotReady {
            reason: "NodeConflict",
            message: "node(s) n1 are drained by NodeRollout other".into(),
        };
        let waiting = Run::Waiting {
            why: Some(&why),
            paused: false,
        };
        let s = next(Some(&running), &observed(waiting, ContractCondition::Unset));
        assert_eq!(
            s,
            waiting_status(Some(&running), Some(&why), false, Some(2), t(10))
        );
        // started: held where it is, its engine state kept for when it goes on
        assert_eq!(s.phase.as_deref(), Some(PAUSED));
        assert_eq!(s.engine, running.engine);
        let ready = crate::conditions::find(&s.conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NodeConflict")
        );
        let paused = Run::Waiting {
            why: None,
            paused: true,
        };
        let s = next(None, &observed(paused, ContractCondition::Unset));
        assert_eq!(s.phase.as_deref(), Some(PAUSED));
        let progressing = crate::conditions::find(&s.conditions, PROGRESSING).unwrap();
        assert_eq!(progressing.reason, "PausedBySpec");
    }
}
