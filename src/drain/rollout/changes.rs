//! The Events and metric deltas of the change between two engine states (pure).

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{Note, RESUME_ANNOTATION};
use crate::drain::engine::{DomainState, Phase, State, Step};

/// What to count (the metrics) for one state change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub domains_completed: u64,
    pub evicted: u64,
    pub refused: u64,
    pub failed: u64,
    /// Seconds of PDB refusals that ended in this change.
    pub blocked_seconds: f64,
}

/// The Events and counts of the change `old` → `new` at `now`: every domain start and finish, a
/// 429 block and its end, a pause (a timeout says so), completion and failure.
pub fn changes(old: &State, new: &State, now: Timestamp) -> (Vec<Note>, Counts) {
    let mut notes = Vec::new();
    let mut counts = Counts::default();
    for d in &new.domains {
        let before = old.domains.iter().find(|o| o.name == d.name);
        step_notes(d, before, &mut notes, &mut counts);
        eviction_counts(d, before, &mut counts);
        refusal_notes(d, before, now, &mut notes, &mut counts);
        let old_retry = before.and_then(|b| b.retry_at);
        if d.retry_at.is_some() && d.retry_at != old_retry {
            counts.failed += 1;
        }
    }
    if old.phase != new.phase {
        notes.extend(phase_notes(old, new));
    }
    (notes, counts)
}

fn note(warning: bool, reason: &'static str, message: String) -> Note {
    Note {
        warning,
        reason,
        message,
    }
}

/// A domain started, awaiting the operator, or done.
fn step_notes(
    d: &DomainState,
    before: Option<&DomainState>,
    notes: &mut Vec<Note>,
    counts: &mut Counts,
) {
    let was = before.map_or(Step::Pending, |b| b.step);
    if was == Step::Pending && d.step != Step::Pending {
        notes.push(note(
            false,
            "DomainStarted",
            format!(
                "upgrade domain {} started: {} node(s) ({})",
                d.name,
                d.nodes.len(),
                d.nodes.join(", ")
            ),
        ));
    }
    if was != d.step && d.step == Step::AwaitingResume {
        notes.push(note(
            false,
            "AwaitingResume",
            format!(
                "upgrade domain {} is healthy; manual mode: `raygate rollout resume NAME` \
                 (or bump the {RESUME_ANNOTATION} annotation) to go on",
                d.name
            ),
        ));
    }
    if was != Step::Done && d.step == Step::Done {
        counts.domains_completed += 1;
        notes.push(note(
            false,
            "DomainCompleted",
            format!("upgrade domain {} is done ({} pod(s) evicted)", d.name, {
                let (protected, other) = d.evicted_counts();
                protected + other
            }),
        ));
    }
}

/// The evictions new in `d`: sent, refused (429) or failed.
fn eviction_counts(d: &DomainState, before: Option<&DomainState>, counts: &mut Counts) {
    let old_evicted = before.map_or(&[][..], |b| &b.evicted[..]);
    for e in d.evicted.iter().filter(|e| !old_evicted.contains(e)) {
        match e.refused.as_deref() {
            None => counts.evicted += 1,
            Some(r) if r.starts_with("429") => counts.refused += 1,
            Some(_) => counts.failed += 1,
        }
    }
}

/// A budget's refusal starting, renewed or ending.
fn refusal_notes(
    d: &DomainState,
    before: Option<&DomainState>,
    now: Timestamp,
    notes: &mut Vec<Note>,
    counts: &mut Counts,
) {
    let old_refusal = before.and_then(|b| b.refusal.as_ref());
    match (old_refusal, &d.refusal) {
        (None, Some(r)) => {
            counts.refused += 1;
            notes.push(note(
                true,
                "EvictionBlocked",
                format!(
                    "upgrade domain {}: PodDisruptionBudget {} refused evicting {}: {}; \
                     waiting until it allows a disruption again",
                    d.name, r.pdb, r.pod, r.message
                ),
            ));
        }
        (Some(o), Some(r)) if o.since != r.since => {
            counts.refused += 1;
            counts.blocked_seconds += seconds(now.duration_since(o.since));
        }
        (Some(o), None) => {
            let blocked = now.duration_since(o.since);
            counts.blocked_seconds += seconds(blocked);
            notes.push(note(
                false,
                "EvictionUnblocked",
                format!(
                    "upgrade domain {}: PodDisruptionBudget {} allows a disruption again \
                     after {}s",
                    d.name,
                    o.pdb,
                    blocked.as_secs()
                ),
            ));
        }
        _ => {}
    }
}

/// The rollout paused, failed, completed or resumed.
fn phase_notes(old: &State, new: &State) -> Vec<Note> {
    let timed_out = |reason: &String| {
        reason
            .contains("within its timeout")
            .then(|| note(true, "TimedOut", reason.clone()))
    };
    match &new.phase {
        Phase::Paused { reason } => timed_out(reason)
            .into_iter()
            .chain([note(
                true,
                "RolloutPaused",
                format!(
                    "{reason}; `raygate rollout resume NAME` (or bump the {RESUME_ANNOTATION} \
                     annotation) to resume"
                ),
            )])
            .collect(),
        Phase::Failed { reason } => timed_out(reason)
            .into_iter()
            .chain([note(true, "RolloutFailed", reason.clone())])
            .collect(),
        Phase::Completed => vec![note(
            false,
            "RolloutCompleted",
            format!("every upgrade domain ({}) is done", new.domains.len()),
        )],
        Phase::Running if matches!(old.phase, Phase::Paused { .. }) => vec![note(
            false,
            "RolloutResumed",
            "resumed by the operator".into(),
        )],
        Phase::Running => Vec::new(),
    }
}

fn seconds(d: SignedDuration) -> f64 {
    d.as_secs_f64().max(0.0)
}
