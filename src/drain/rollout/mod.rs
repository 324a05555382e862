//! A `NodeRollout`'s status, Events and metric deltas from the engine's state (pure).
//!
//! The controller (`controller::drain::rollout`) runs the engine through the drain loop; everything it
//! tells people is decided here from plain data: [`status::next`] turns what it observed (the
//! engine's [`State`], or why the rollout does not run, and the group contract) and the status
//! written before (for what the state does not keep: planned pod counts, finish times) into the
//! whole `NodeRollout` status with its conditions; [`changes()`] compares two states and says
//! which Events to publish and what to count; [`conflict`] finds a node another active rollout
//! already drains; [`engine_options`] maps the checked spec onto the engine's knobs;
//! [`contract`] turns the group-contract preflight's findings into the `ContractSatisfied`
//! condition.

use std::collections::BTreeSet;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::engine::{FailureAction, Handoff, Options, State, Step};
use super::{Check, DrainError, Exposure, Finding, Plan, RolloutOptions};
use crate::types::rollout::{DomainStatus, FailureActionSpec, NodeRolloutStatus};

mod changes;
pub mod status;

pub use changes::{Counts, changes};
pub use status::{set_contract, status, waiting_status};

/// The annotation an operator bumps to resume a rollout the engine paused (a failure with
/// `failureAction: Pause`, or manual mode after a domain): a counter, e.g.
/// `kubectl annotate nro NAME raygate.io/resume=1 --overwrite`, then 2, 3, …
pub const RESUME_ANNOTATION: &str = "raygate.io/resume";

/// The annotation that asks a rollout to abort (`raygate rollout abort NAME` sets it to `true`):
/// the drained nodes are given back (raygate's cordons, taints and upgrade labels lifted) and the
/// rollout fails, whatever its failure action.
pub const ABORT_ANNOTATION: &str = "raygate.io/abort";

/// Whether the annotation asks to abort (`true`, any case).
pub fn abort_asked(annotation: Option<&str>) -> bool {
    annotation.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Condition types on a `NodeRollout`.
pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const BLOCKED: &str = "Blocked";
pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
/// The group contract's preflight (`raygate drain check`) over the live cluster, for a rollout
/// whose spec names `groups`.
pub const CONTRACT_SATISFIED: &str = "ContractSatisfied";

/// How many findings the `ContractSatisfied` message spells out (the rest are counted).
const FINDINGS_SHOWN: usize = 3;

/// `status.phase` values.
pub const PENDING: &str = "Pending";
pub const RUNNING: &str = "Running";
pub const PAUSED: &str = "Paused";
pub const COMPLETED: &str = "Completed";
pub const FAILED_PHASE: &str = "Failed";

/// The engine's options for a checked spec. The health check waits for every evicted group's
/// workload to be Ready again by count (KubeRay recreates a multi-host replica under a new name,
/// so groups are not waited for by name), whatever the preset.
pub fn engine_options(o: &RolloutOptions) -> Options {
    let mark = (o.hand_off.label.clone(), o.hand_off.value.clone());
    Options {
        plan: o.plan.clone(),
        health_check_wait: o.health_check_wait,
        health_check_stable: o.health_check_stable,
        health_check_retry_timeout: o.health_check_retry_timeout,
        domain_timeout: o.domain_timeout,
        drain_timeout: o.drain_timeout,
        rollout_timeout: o.rollout_timeout,
        failure_action: match o.failure_action {
            FailureActionSpec::Pause => FailureAction::Pause,
            FailureActionSpec::Abort => FailureAction::Abort,
        },
        max_unavailable_domains: o.max_unavailable_domains,
        manual: o.manual,
        wait_for_evicted_groups: true,
        moves: o.moves.clone(),
        handoff_timeout: o.handoff_timeout,
        handoff: Handoff::of(o.hand_off.mode, mark),
        ..Options::default()
    }
}

/// The operator's resume counter from the annotation (absent or not a number: 0).
pub fn resumes(annotation: Option<&str>) -> u64 {
    annotation.and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// The first node of `mine` another active rollout drains: `(other rollout, its nodes among
/// mine)`. `others` are `(name, nodes)` of rollouts that started and have not finished.
pub fn conflict(
    mine: &BTreeSet<String>,
    others: &[(String, BTreeSet<String>)],
) -> Option<(String, Vec<String>)> {
    others.iter().find_map(|(name, nodes)| {
        let shared: Vec<String> = mine.intersection(nodes).cloned().collect();
        (!shared.is_empty()).then(|| (name.clone(), shared))
    })
}

/// The nodes a status says its rollout drains, while it is active (started, not finished).
pub fn claimed_nodes(status: Option<&NodeRolloutStatus>) -> Option<BTreeSet<String>> {
    let s = status?;
    s.engine.as_ref()?;
    if matches!(s.phase.as_deref(), Some(COMPLETED | FAILED_PHASE)) {
        return None;
    }
    Some(
        s.domains
            .iter()
            .flat_map(|d| d.nodes.iter().cloned())
            .collect(),
    )
}

/// Why the controller does not run a rollout (yet): the `Ready=False` condition's reason and
/// message, and the Event's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotReady {
    pub reason: &'static str,
    pub message: String,
}

/// The status for a rollout just planned: every domain with its planned pod counts.
pub fn planned(plan: &Plan, exposed: &[Exposure]) -> NodeRolloutStatus {
    let at_risk = |domain: &str| -> Vec<String> {
        exposed
            .iter()
            .filter(|e| e.domain == domain)
            .take(SERVING_SHOWN)
            .map(|e| match e.at_least_seconds {
                0 => format!("{}: {} pod(s)", e.workload, e.pods.len()),
                s => format!("{}: {} pod(s), at least {s} s", e.workload, e.pods.len()),
            })
            .collect()
    };
    NodeRolloutStatus {
        domains: plan
            .domains
            .iter()
            .map(|d| DomainStatus {
                name: d.name.clone(),
                phase: step_name(Step::Pending).into(),
                nodes: d.nodes.iter().map(|n| n.name.clone()).collect(),
                protected_total: count(d.phase1.len()),
                other_total: count(d.phase2.len()),
                tolerating_pods: d
                    .tolerating
                    .iter()
                    .take(TOLERATING_SHOWN)
                    .map(ToString::to_string)
                    .collect(),
                serving_at_risk: at_risk(&d.name),
                ..DomainStatus::default()
            })
            .collect(),
        target_generation: plan.target_generation.clone(),
        ..NodeRolloutStatus::default()
    }
}

/// How many workloads at risk a domain's status names.
const SERVING_SHOWN: usize = 10;

/// The Warning Event's reason when a planned rollout will interrupt workloads' serving.
pub const SERVING_AT_RISK: &str = "ServingAtRisk";

/// The message of that Event for a planned status, if any domain takes a workload's whole
/// serving capacity.
pub fn serving_note(planned: &NodeRolloutStatus) -> Option<String> {
    let at_risk: Vec<String> = planned
        .domains
        .iter()
        .flat_map(|d| {
            d.serving_at_risk
                .iter()
                .map(move |w| format!("{w} (domain {})", d.name))
        })
        .collect();
    (!at_risk.is_empty()).then(|| {
        format!(
            "{} workload(s) have every serving pod in one domain and no budget keeping one \
             running; draining that domain interrupts each until a replacement is Ready \
             elsewhere, but a RayService's, which is moved off the domain first (unless \
             spec.rayServices.move is false): {}",
            at_risk.len(),
            at_risk.join("; ")
        )
    })
}

/// How many pods that tolerate the cordon a domain's status names.
const TOLERATING_SHOWN: usize = 10;

/// The Warning Event's reason when a planned rollout has pods that tolerate the cordon.
pub const TOLERATE_CORDON: &str = "PodsTolerateCordon";

/// The message of that Event for a planned status, if any domain has such pods.
pub fn tolerating_note(planned: &NodeRolloutStatus) -> Option<String> {
    let pods: Vec<String> = planned
        .domains
        .iter()
        .flat_map(|d| {
            d.tolerating_pods
                .iter()
                .map(move |p| format!("{p} ({})", d.name))
        })
        .collect();
    (!pods.is_empty()).then(|| {
        format!(
            "{} pod(s) tolerate the cordon, so a replacement may be scheduled back onto a \
             cordoned node: {}; each is evicted once and a replacement found there later is left \
             alone (as DaemonSet pods are), with a PodReturned Event",
            pods.len(),
            pods.join(", ")
        )
    })
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The domain step as the status writes it.
pub fn step_name(step: Step) -> &'static str {
    match step {
        Step::Pending => "Pending",
        Step::Draining => "Draining",
        Step::HandingOff => "HandingOff",
        Step::HealthCheck => "HealthCheck",
        Step::AwaitingResume => "AwaitingResume",
        Step::Done => "Done",
        Step::Aborted => "Aborted",
    }
}

/// The accepted evictions `status.engine` keeps one by one per domain in progress (the newest);
/// the older ones are folded into counts, budgets and groups ([`State::compacted`]).
pub const STORED_EVICTIONS: usize = 256;

/// The state as `status.engine` keeps it ([`State::compacted`] with [`STORED_EVICTIONS`]): a
/// finished domain keeps its counts only, a domain in progress its newest evictions and what
/// its health check reads of the older ones, so the record grows with the domains, their nodes,
/// groups and budgets, not with the pods evicted.
pub fn compact(state: &State) -> State {
    state.compacted(STORED_EVICTIONS)
}

/// The Warning Event's reason when a spec leaving `taintOutdated` to the controller gets no
/// taint: the taint would leave groups nowhere to run.
pub const TAINT_SKIPPED: &str = "TaintSkipped";

/// Why the outdated nodes are not tainted: what the room check found with the taint.
pub fn taint_skipped(tainted: &crate::drain::CapacityCheck) -> String {
    let mut why: Vec<String> = tainted.dead_ends.iter().map(ToString::to_string).collect();
    why.extend(tainted.health_dead_ends.iter().map(|g| g.problem()));
    format!(
        "the outdated nodes are not tainted (taintOutdated is unset): with the taint, {}; without \
         it, a group evicted from one domain may land on a later domain's node and be disrupted \
         again (add room outside the outdated nodes, or set taintOutdated to decide)",
        why.join(" | ")
    )
}

/// The `ContractSatisfied` condition's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contract {
    /// `True`, `False`, or `Unknown` (the preflight could not run).
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

/// How much a broken check endangers the rollout, most severe first: a budget that never allows
/// a disruption or a pod under two budgets stops the drain (every eviction refused); a split
/// group is broken by more than one domain; unprotected representatives or a budget over workers
/// let the drain take several groups down at once; a representative without a readiness signal
/// hides a broken group from its budget; crowded domains only slow the drain down.
pub fn severity(check: Check) -> u8 {
    match check {
        Check::PdbNeverAllowsDisruption => 0,
        Check::MultiplePdbs => 1,
        Check::GroupSplitAcrossDomains => 2,
        Check::NoPdbOnRepresentatives => 3,
        Check::PdbSelectsWorkers => 4,
        Check::RepresentativeWithoutReadinessProbe => 5,
        Check::GroupsShareDomain => 6,
    }
}

/// The `ContractSatisfied` condition for a preflight's outcome: `True`/`ContractHolds` without
/// findings; `False` with the most severe finding's check as the reason and, as the message, the
/// count and the first findings, each naming its workload, object, problem and fix (as
/// `raygate drain check` prints them); `Unknown`/`CheckFailed` when the preflight could not run.
pub fn contract(findings: Result<&[Finding], &DrainError>) -> Contract {
    let findings = match findings {
        Ok(f) => f,
        Err(e) => {
            return Contract {
                status: "Unknown",
                reason: "CheckFailed".into(),
                message: format!("the group contract could not be checked: {e}"),
            };
        }
    };
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    // stable: within one severity, the preflight's order (check, workload, object)
    sorted.sort_by_key(|f| severity(f.check));
    let Some(worst) = sorted.first() else {
        return Contract {
            status: "True",
            reason: "ContractHolds".into(),
            message: "the group contract holds: no findings".into(),
        };
    };
    let shown: Vec<String> = sorted
        .iter()
        .take(FINDINGS_SHOWN)
        .map(ToString::to_string)
        .collect();
    let more = sorted.len().saturating_sub(FINDINGS_SHOWN);
    let mut message = format!(
        "{} finding(s); the rollout goes on, with raygate's own guards: a protected pod goes \
         only while its workload's groups, counted from their members, stay at or above its \
         budget's floor, and a pod whose group's representative is protected in another domain \
         goes only after that representative was evicted first, with its budget's consent \
         (the group moves whole; SplitGroup while it waits): {}",
        sorted.len(),
        shown.join(" | ")
    );
    if more > 0 {
        message.push_str(&format!(
            " | and {more} more: see `raygate drain check --groups ...`"
        ));
    }
    Contract {
        status: "False",
        reason: format!("{:?}", worst.check),
        message,
    }
}

/// The Event of a contract change: a Warning `ContractBroken` when it turns `False` (or its most
/// severe finding changes), a Normal `ContractSatisfied` when it holds again.
pub fn contract_note(old: Option<&Contract>, new: &Contract) -> Option<Note> {
    let was = old.map(|c| (c.status, c.reason.as_str()));
    match new.status {
        "False" if was != Some(("False", new.reason.as_str())) => Some(Note {
            warning: true,
            reason: "ContractBroken",
            message: new.message.clone(),
        }),
        "True" if was.is_some_and(|(s, _)| s == "False") => Some(Note {
            warning: false,
            reason: "ContractSatisfied",
            message: new.message.clone(),
        }),
        _ => None,
    }
}

/// An Event to publish on the `NodeRollout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Whether the change `old` → `new` must reach the status at once (a restarted controller needs
/// it: a step, an eviction, a refusal, the health check's clock starting or breaking), rather than
/// with the next periodic write (what only ticks: "why it waits" lines, the last healthy check).
pub fn needs_write_now(old: &State, new: &State) -> bool {
    fn shape(s: &State) -> State {
        let mut s = s.clone();
        s.waiting.clear();
        for d in &mut s.domains {
            d.message.clear();
            d.health.last_healthy = None;
            d.health.current_healthy.clear();
        }
        s
    }
    shape(old) != shape(new)
}

/// The state to go on from after `spec.paused` held the rollout from `paused_at` to `now`: the
/// pause does not count against the domain and rollout timeouts (their start moves on by the
/// pause), and the health check's stable period starts over (nothing was watched meanwhile).
pub fn after_spec_pause(state: &State, paused_at: Timestamp, now: Timestamp) -> State {
    let pause = now.duration_since(paused_at).max(SignedDuration::ZERO);
    let shift = |t: Option<Timestamp>| t.map(|t| t.checked_add(pause).unwrap_or(t));
    let mut s = state.clone();
    s.started = shift(s.started);
    for d in s.domains.iter_mut().filter(|d| d.step.is_unavailable()) {
        d.started = shift(d.started);
        d.health = Default::default();
    }
    s
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::drain::engine::{Baseline, DomainState, Evicted, Phase, Refusal};

    /// Issue #32 item 2: the planned status names each domain's workloads at risk, and one
    /// Warning names them all with their domains.
    #[test]
    fn the_workloads_a_domain_takes_whole_are_named_in_its_status_and_one_warning() {
        let status = |d: &str, risk: &[&str]| DomainStatus {
            name: d.into(),
            serving_at_risk: risk.iter().map(|r| r.to_string()).collect(),
            ..DomainStatus::default()
        };
        let planned = NodeRolloutStatus {
            domains: vec![
                status("ud-0", &["Deployment ns/web: 1 pod(s), at least 25 s"]),
                status("ud-1", &[]),
                status("ud-2", &["RayCluster ns/llm-x (serve pods): 2 pod(s)"]),
            ],
            ..NodeRolloutStatus::default()
        };
        let note = serving_note(&planned).unwrap();
        assert!(
            note.starts_with("2 workload(s) have every serving pod in one domain"),
            "{note}"
        );
        assert!(
            note.ends_with(
                "Deployment ns/web: 1 pod(s), at least 25 s (domain ud-0); RayCluster \
                 ns/llm-x (serve pods): 2 pod(s) (domain ud-2)"
            ),
            "{note}"
        );
        let none = NodeRolloutStatus {
            domains: vec![status("ud-1", &[])],
            ..NodeRolloutStatus::default()
        };
        assert_eq!(serving_note(&none), None);
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn two_domains() -> State {
        State {
            started: Some(t(0)),
            domains: vec![
                DomainState {
                    name: "ud-a".into(),
                    nodes: vec!["n1".into(), "n2".into()],
                    ..DomainState::default()
                },
                DomainState {
                    name: "ud-b".into(),
                    nodes: vec!["n3".into()],
                    ..DomainState::default()
                },
            ],
            ..State::default()
        }
    }

    fn evicted(pod: &str, pdb: Option<&str>, at: Timestamp) -> Evicted {
        Evicted {
            pod: pod.into(),
            uid: Some(format!("uid-{pod}")),
            pdb: pdb.map(Into::into),
            group: None,
            at,
            refused: None,
        }
    }

    #[test]
    fn the_status_shows_phase_progress_domains_and_the_blocking_budget() {
        let mut s = two_domains();
        s.domains[0].step = Step::Done;
        s.domains[0].evicted = vec![
            evicted("ns/leader-0", Some("ns/leaders"), t(10)),
            evicted("ns/worker-0", None, t(20)),
        ];
        s.domains[1].step = Step::Draining;
        s.domains[1].started = Some(t(60));
        s.domains[1].refusal = Some(Refusal {
            pdb: "ns/leaders".into(),
            pod: "ns/leader-1".into(),
            message: "The disruption budget leaders needs 2 healthy pods and has 2 currently"
                .into(),
            since: t(70),
            retry_after: None,
        });
        s.waiting = "domain ud-b: paused".into();
        let mut prev = NodeRolloutStatus {
            domains: vec![DomainStatus {
                name: "ud-a".into(),
                protected_total: 1,
                other_total: 1,
                ..DomainStatus::default()
            }],
            ..NodeRolloutStatus::default()
        };
        prev.domains.push(DomainStatus {
            name: "ud-b".into(),
            protected_total: 1,
            other_total: 3,
            ..DomainStatus::default()
        });
        let out = status(Some(&prev), &s, Some(4), t(80));
        assert_eq!(out.phase.as_deref(), Some("Running"));
        assert_eq!(out.progress.as_deref(), Some("1/2"));
        assert_eq!(out.current_domain.as_deref(), Some("ud-b"));
        assert_eq!(out.observed_generation, Some(4));
        let a = &out.domains[0];
        assert_eq!(
            (a.phase.as_str(), a.protected_evicted, a.other_evicted),
            ("Done", 1, 1)
        );
        assert_eq!(a.finished_at, Some(Time(t(80))));
        let b = &out.domains[1];
        assert_eq!((b.protected_total, b.other_total), (1, 3));
        assert_eq!(b.started_at, Some(Time(t(60))));
        assert_eq!(
            b.blocked_by.as_deref(),
            Some(
                "PodDisruptionBudget ns/leaders refused evicting ns/leader-1: The disruption \
                 budget leaders needs 2 healthy pods and has 2 currently"
            )
        );
        let blocked = crate::conditions::find(&out.conditions, BLOCKED).unwrap();
        assert_eq!(
            (blocked.status.as_str(), blocked.reason.as_str()),
            ("True", "EvictionRefused")
        );
        assert!(blocked.message.contains("needs 2 healthy pods and has 2"));
        assert!(crate::conditions::is_true(&out.conditions, PROGRESSING));
        assert!(!crate::conditions::is_true(&out.conditions, COMPLETE));
        // the engine state round-trips through the status, without a done domain's evictions
        let back: State = serde_json::from_str(out.engine.as_deref().unwrap()).unwrap();
        assert_eq!(back, compact(&s));
        assert!(back.domains[0].evicted.is_empty());
        assert_eq!(back.domains[1], s.domains[1]);
        // a finish time and a done domain's counts, once written, stay (also from the compact
        // state a new leader reads)
        let later = status(Some(&out), &back, Some(4), t(500));
        assert_eq!(later.domains[0].finished_at, Some(Time(t(80))));
        assert_eq!(
            (
                later.domains[0].protected_evicted,
                later.domains[0].other_evicted
            ),
            (1, 1)
        );
    }

    #[test]
    fn a_failed_rollout_names_its_timeout_and_a_manual_pause_says_how_to_resume() {
        let mut s = two_domains();
        s.phase = Phase::Failed {
            reason: "upgrade domain ud-a did not finish within its timeout (10m0s): x".into(),
        };
        let out = status(None, &s, Some(1), t(0));
        assert_eq!(out.phase.as_deref(), Some("Failed"));
        let failed = crate::conditions::find(&out.conditions, FAILED).unwrap();
        assert_eq!(
            (failed.status.as_str(), failed.reason.as_str()),
            ("True", "TimedOut")
        );
        let mut s = two_domains();
        s.domains[0].step = Step::AwaitingResume;
        s.resumes = 2;
        let out = status(None, &s, Some(1), t(0));
        assert_eq!(out.phase.as_deref(), Some("Paused"));
        let p = crate::conditions::find(&out.conditions, PROGRESSING).unwrap();
        assert_eq!(p.reason, "AwaitingResume");
        assert!(p.message.contains("raygate.io/resume=3"), "{}", p.message);
    }

    #[test]
    fn changes_announce_domain_starts_finishes_blocks_and_count_evictions() {
        let old = two_domains();
        let mut new = old.clone();
        new.domains[0].step = Step::Draining;
        new.domains[0].evicted = vec![evicted("ns/leader-0", Some("ns/l"), t(5))];
        new.domains[0].refusal = Some(Refusal {
            pdb: "ns/l".into(),
            pod: "ns/leader-1".into(),
            message: "needs 2 healthy pods and has 2".into(),
            since: t(5),
            retry_after: None,
        });
        let (notes, counts) = changes(&old, &new, t(5));
        let reasons: Vec<&str> = notes.iter().map(|n| n.reason).collect();
        assert_eq!(reasons, vec!["DomainStarted", "EvictionBlocked"]);
        assert!(notes[1].warning);
        assert_eq!((counts.evicted, counts.refused), (1, 1));
        let mut done = new.clone();
        done.domains[0].refusal = None;
        done.domains[0].step = Step::Done;
        let (notes, counts) = changes(&new, &done, t(65));
        let reasons: Vec<&str> = notes.iter().map(|n| n.reason).collect();
        assert_eq!(reasons, vec!["DomainCompleted", "EvictionUnblocked"]);
        assert_eq!(counts.domains_completed, 1);
        assert_eq!(counts.blocked_seconds, 60.0);
        assert_eq!(counts.evicted, 0, "an eviction is counted once");
        let mut paused = done.clone();
        paused.phase = Phase::Paused {
            reason: "upgrade domain ud-b did not finish within its timeout (5m0s): x".into(),
        };
        let (notes, _) = changes(&done, &paused, t(400));
        let reasons: Vec<&str> = notes.iter().map(|n| n.reason).collect();
        assert_eq!(reasons, vec!["TimedOut", "RolloutPaused"]);
    }

    #[test]
    fn a_node_in_an_active_rollout_is_a_conflict_naming_it() {
        let mine: BTreeSet<String> = ["n1".into(), "n2".into()].into();
        let others = vec![
            ("a".to_string(), ["n9".to_string()].into()),
            ("b".to_string(), ["n2".to_string(), "n3".to_string()].into()),
        ];
        assert_eq!(
            conflict(&mine, &others),
            Some(("b".to_string(), vec!["n2".to_string()]))
        );
        assert_eq!(conflict(&mine, &others[..1]), None);
        let done = NodeRolloutStatus {
            phase: Some("Completed".into()),
            engine: Some("{}".into()),
            domains: vec![DomainStatus {
                name: "ud".into(),
                nodes: vec!["n1".into()],
                ..DomainStatus::default()
            }],
            ..NodeRolloutStatus::default()
        };
        assert_eq!(
            claimed_nodes(Some(&done)),
            None,
            "a finished rollout claims nothing"
        );
        let running = NodeRolloutStatus {
            phase: Some("Running".into()),
            ..done
        };
        assert_eq!(
            claimed_nodes(Some(&running)),
            Some(["n1".to_string()].into())
        );
    }

    #[test]
    fn a_spec_pause_does_not_count_against_the_timeouts() {
        let mut s = two_domains();
        s.domains[0].step = Step::HealthCheck;
        s.domains[0].started = Some(t(100));
        s.domains[0].health.healthy_since = Some(t(150));
        let out = after_spec_pause(&s, t(200), t(500));
        assert_eq!(out.started, Some(t(300)));
        assert_eq!(out.domains[0].started, Some(t(400)));
        assert_eq!(out.domains[0].health.healthy_since, None);
        assert_eq!(out.domains[1].started, None);
    }

    fn finding(check: Check, workload: &str) -> Finding {
        Finding {
            check,
            workload: format!("LeaderWorkerSet serving/{workload}"),
            object: format!("group serving/{workload}-0"),
            problem: "the group's pods are in 2 upgrade domains".into(),
            fix: "pack each group into one domain".into(),
        }
    }

    #[test]
    fn the_contract_condition_takes_the_most_severe_finding_and_names_the_first_ones() {
        let findings = vec![
            finding(Check::GroupsShareDomain, "a"),
            finding(Check::GroupSplitAcrossDomains, "b"),
            finding(Check::RepresentativeWithoutReadinessProbe, "c"),
            finding(Check::GroupSplitAcrossDomains, "d"),
            finding(Check::NoPdbOnRepresentatives, "e"),
        ];
        let c = contract(Ok(&findings));
        assert_eq!(c.status, "False");
        assert_eq!(c.reason, "GroupSplitAcrossDomains");
        assert!(c.message.starts_with("5 finding(s)"), "{}", c.message);
        // the first three by severity, each with its workload, object and fix
        let b = c
            .message
            .find("GroupSplitAcrossDomains: LeaderWorkerSet serving/b: group serving/b-0");
        let d = c.message.find("serving/d: group serving/d-0");
        let e = c
            .message
            .find("NoPdbOnRepresentatives: LeaderWorkerSet serving/e");
        assert!(b < d && d < e && b.is_some(), "{}", c.message);
        assert!(
            c.message.contains("Fix: pack each group into one domain"),
            "{}",
            c.message
        );
        assert!(!c.message.contains("serving/a:"), "{}", c.message);
        assert!(c.message.contains("and 2 more"), "{}", c.message);
        let ok = contract(Ok(&[]));
        assert_eq!((ok.status, ok.reason.as_str()), ("True", "ContractHolds"));
        let e = DrainError::UnknownDomainLabel { key: "x/ud".into() };
        let unknown = contract(Err(&e));
        assert_eq!(
            (unknown.status, unknown.reason.as_str()),
            ("Unknown", "CheckFailed")
        );
    }

    #[test]
    fn the_contract_condition_is_set_and_removed_and_an_event_marks_it_turning() {
        let broken = contract(Ok(&[finding(Check::PdbSelectsWorkers, "a")]));
        let ok = contract(Ok(&[]));
        let mut s = NodeRolloutStatus::default();
        set_contract(&mut s, Some(&broken), Some(2), t(0));
        let c = crate::conditions::find(&s.conditions, CONTRACT_SATISFIED).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "PdbSelectsWorkers")
        );
        assert_eq!(c.observed_generation, Some(2));
        set_contract(&mut s, None, Some(3), t(1));
        assert!(crate::conditions::find(&s.conditions, CONTRACT_SATISFIED).is_none());
        let n = contract_note(None, &broken).unwrap();
        assert_eq!((n.warning, n.reason), (true, "ContractBroken"));
        assert!(
            contract_note(Some(&broken), &broken).is_none(),
            "no news, no Event"
        );
        let worse = contract(Ok(&[finding(Check::PdbNeverAllowsDisruption, "a")]));
        assert_eq!(
            contract_note(Some(&broken), &worse).map(|n| n.reason),
            Some("ContractBroken")
        );
        let n = contract_note(Some(&broken), &ok).unwrap();
        assert_eq!((n.warning, n.reason), (false, "ContractSatisfied"));
        assert!(
            contract_note(None, &ok).is_none(),
            "holding from the start is no news"
        );
    }

    /// The Warning a broken contract raises says what raygate still guarantees, in the words
    /// the README uses: no protected pod below its budget's floor (counted from the members),
    /// and a split group moved whole, its representative first with its budget's consent.
    #[test]
    fn a_broken_contract_states_what_raygate_still_guarantees_as_the_readme_does() {
        let broken = contract(Ok(&[finding(Check::PdbSelectsWorkers, "a")]));
        for promise in [
            "the rollout goes on",
            "counted from their members, stay at or above its budget's floor",
            "goes only after that representative was evicted first, with its budget's consent",
            "the group moves whole",
        ] {
            assert!(
                broken.message.contains(promise),
                "{promise:?} in {}",
                broken.message
            );
        }
        let readme = include_str!("../../../README.md").replace('\n', " ");
        for promise in [
            "Without the contract raygate still evicts no protected pod below its budget's floor",
            "moves a group split across domains whole (its representative first, with its \
             budget's consent)",
        ] {
            assert!(readme.contains(promise), "the README says {promise:?}");
        }
    }

    #[test]
    fn the_resume_counter_is_the_annotation_s_number() {
        assert_eq!(resumes(None), 0);
        assert_eq!(resumes(Some("3")), 3);
        assert_eq!(resumes(Some("yes")), 0);
        assert!(abort_asked(Some("true")) && abort_asked(Some(" True ")));
        assert!(!abort_asked(None) && !abort_asked(Some("false")) && !abort_asked(Some("1")));
    }

    /// A rollout whose every pod was evicted: `domains` × `nodes` nodes (EC2-style names),
    /// `pods` pods per domain in LeaderWorkerSet groups of 8 (40-hex group keys, the leader
    /// protected by its workload's budget; 25 workloads per domain, uid preconditions); the
    /// first `done` domains done, the rest in their health check.
    fn evicted_rollout(domains: usize, nodes: usize, pods: usize, done: usize) -> State {
        let mut s = State {
            started: Some(t(0)),
            target_generation: Some("v1.36.3".into()),
            ..State::default()
        };
        for d in 0..domains {
            let mut dom = DomainState {
                name: format!("ud-{d:02}"),
                nodes: (0..nodes)
                    .map(|i| format!("ip-10-{}-{}-{}.eu-west-1.compute.internal", d / 250, d % 250, i))
                    .collect(),
                step: if d < done { Step::Done } else { Step::HealthCheck },
                started: Some(t(10)),
                handed_off: Some(t(20)),
                message: "waiting for health: workload ns-0/leaderworkerset.sigs.k8s.io/name=llm-0 has 9 of its 10 Ready groups back".into(),
                ..DomainState::default()
            };
            for p in 0..pods {
                let (g, m) = (p / 8, p % 8);
                let w = g % 25;
                let ns = format!("team-{}", d % 7);
                let group = format!("{:040x}", d * 1_000_000 + g);
                dom.workloads
                    .entry(format!("{ns}/leaderworkerset.sigs.k8s.io/name=llm-{w}"))
                    .or_insert_with(|| Baseline {
                        ready_groups: pods / 8 / 25,
                        group_size: 8,
                        ..Baseline::default()
                    })
                    .groups
                    .insert(group.clone());
                dom.evicted.push(Evicted {
                    pod: format!("{ns}/llm-{w}-{g}-{m}"),
                    uid: Some(format!("{:08x}-0000-4000-8000-{:012x}", d, p)),
                    pdb: (m == 0).then(|| format!("{ns}/llm-{w}-leaders")),
                    group: Some(group),
                    at: t(10 + p as i64),
                    refused: None,
                });
            }
            s.domains.push(dom);
        }
        s
    }

    /// The bound `status.engine` keeps (docs/drain.md, "NodeRollout"): a rollout of 5,000 nodes and
    /// 100,000 pods in 50 domains stores under 640 KiB of status with one domain in progress
    /// (1 MiB with five), where its state in memory is ~17 MB; even all of it in one domain in
    /// progress stays under etcd's 1.5 MiB. A restart from it is pinned by the engine's
    /// `a_restart_from_the_compacted_state_*` property.
    #[test]
    fn the_stored_status_of_a_5000_node_100000_pod_rollout_stays_under_its_bound() {
        for (domains, nodes, pods, done, bound) in [
            // 50 domains of 2,000 pods, the last in its health check
            (50, 100, 2_000, 49, 640 * 1024),
            // max_unavailable_domains 5: five in progress at once
            (50, 100, 2_000, 45, 1024 * 1024),
            // one domain of 5,000 nodes and 100,000 pods, in progress
            (1, 5_000, 100_000, 0, 1536 * 1024),
        ] {
            let s = evicted_rollout(domains, nodes, pods, done);
            let memory = serde_json::to_vec(&s).unwrap().len();
            let out = status(None, &s, Some(1), t(200_000));
            let stored = serde_json::to_vec(&out).unwrap().len();
            let engine = out.engine.as_deref().unwrap_or_default().len();
            eprintln!(
                "{domains} domains x {nodes} nodes, {pods} pods each, {} in progress: \
                 state {memory} B, status {stored} B (engine {engine} B)",
                domains - done
            );
            assert!(stored < bound, "{stored} B of status, bound {bound} B");
            assert!(memory > 10 * stored, "the uncompacted state: {memory} B");
            // the counts survive
            let back: State = serde_json::from_str(out.engine.as_deref().unwrap()).unwrap();
            let evicted: u64 = back
                .domains
                .iter()
                .map(|d| {
                    let (p, o) = d.evicted_counts();
                    p + o
                })
                .sum();
            assert_eq!(evicted, (domains * pods) as u64);
            let last = out.domains.last().unwrap();
            assert_eq!(
                (last.protected_evicted, last.other_evicted),
                ((pods / 8) as i32, (pods - pods / 8) as i32)
            );
        }
    }
}
