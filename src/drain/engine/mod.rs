//! The drain's execution engine (pure): one step of a rollout, upgrade domain by upgrade domain,
//! with Service Fabric's monitored-upgrade knobs.
//!
//! [`decide`] takes the rollout's [`State`], what the caller observed (nodes, pods, budgets, the
//! outcomes of the evictions it sent since the last step, the operator's resumes), the time and
//! the [`Options`], and returns the next state and the [`Action`]s to apply. Per domain:
//!
//! 1. **cordon** every node (and taint it, with a taint option);
//! 2. **phase 1**: evict the pods a PodDisruptionBudget protects, through the Eviction API only.
//!    A 429 pauses the domain: the budget's message is kept, `Retry-After` is honoured, and
//!    evictions resume only once the *observed* budget is current and allows a disruption again;
//! 3. **phase 2**, once no protected pod is left on the domain's nodes: the rest, at most
//!    [`Options::eviction_concurrency`] terminating at a time;
//! 4. once no pod is left: the **hand-off** ([`Handoff`]);
//! 5. the **health gate**: after [`Options::health_check_wait`], every affected budget current
//!    and satisfied and every evicted group Ready again, held for the stable period; unhealthy
//!    for [`Options::health_check_retry_timeout`] is a failure.
//!
//! A domain over [`Options::domain_timeout`], or the rollout over [`Options::rollout_timeout`],
//! fails too; a failure pauses the rollout or aborts it ([`FailureAction`]). At most
//! [`Options::max_unavailable_domains`] domains are between cordon and the end of their health
//! gate at once. The state is plain data (serde): every decision is re-derived from it and the
//! live view, so a restarted caller goes on where the last one stopped.

mod consent;
mod groups;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
pub use k8s_openapi::jiff::SignedDuration;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use groups::GroupView;
pub use groups::Window;

use super::{
    Cluster, DomainOrder, DomainPlan, Plan, PlanOptions, PodRef, compare_generations, name,
    namespace, node_domain, node_generation,
};

/// The label [`Handoff::Reboot`] and [`Handoff::Replace`] put on drained nodes by default, for an
/// upgrade agent (e.g. a system-upgrade-controller Plan selecting it).
pub const UPGRADE_LABEL: &str = "raygate.io/upgrade";
/// Its default value.
pub const UPGRADE_REQUESTED: &str = "requested";

/// What a failure (a timeout, a health check that never passes) does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureAction {
    /// Stop where it is (nodes stay cordoned) until the operator resumes; the timers restart.
    #[default]
    Pause,
    /// End the rollout: uncordon (and untaint) the nodes of the domains not yet handed off.
    Abort,
}

/// Who upgrades a drained domain's nodes, and what raygate waits for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Handoff {
    /// Drain only: the nodes stay cordoned (and tainted) for the infrastructure to remove later.
    #[default]
    None,
    /// Label the drained nodes `label=value` for an upgrade agent, wait until each is Ready at
    /// the target generation, then uncordon it (and remove the taint and the label).
    Reboot { label: String, value: String },
    /// Label the drained nodes `label=value`; the infrastructure adds new nodes and deletes the
    /// drained ones. Wait until the domain has as many Ready, schedulable nodes at the target
    /// generation (other than the drained ones) as were drained.
    Replace { label: String, value: String },
}

impl Handoff {
    pub fn reboot() -> Self {
        Handoff::Reboot {
            label: UPGRADE_LABEL.into(),
            value: UPGRADE_REQUESTED.into(),
        }
    }

    pub fn replace() -> Self {
        Handoff::Replace {
            label: UPGRADE_LABEL.into(),
            value: UPGRADE_REQUESTED.into(),
        }
    }

    fn mark(&self) -> Option<(&str, &str)> {
        match self {
            Handoff::None => None,
            Handoff::Reboot { label, value } | Handoff::Replace { label, value } => {
                Some((label, value))
            }
        }
    }
}

/// The knobs, with Service Fabric's monitored-upgrade semantics where SF has the knob.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// What to drain (the same options as the plan).
    pub plan: PlanOptions,
    /// SF `HealthCheckWaitDuration`: after the hand-off, wait this long before the first health
    /// check.
    pub health_check_wait: SignedDuration,
    /// SF `HealthCheckStableDuration`: how long the domain must stay healthy before the next
    /// one starts. `None`: the representatives' readiness probes (period × failureThreshold, the
    /// slowest) plus [`Options::disruption_controller_lag`].
    pub health_check_stable: Option<SignedDuration>,
    /// SF `HealthCheckRetryTimeout`: unhealthy this long (since the checks began or since the
    /// domain was last healthy) is a failure.
    pub health_check_retry_timeout: SignedDuration,
    /// SF `UpgradeDomainTimeout`: from cordon to the end of the health gate (`None`: no limit).
    pub domain_timeout: Option<SignedDuration>,
    /// SF `UpgradeTimeout`: the whole rollout (`None`: no limit).
    pub rollout_timeout: Option<SignedDuration>,
    /// SF `FailureAction` (Rollback/Manual → Abort/Pause).
    pub failure_action: FailureAction,
    /// Domains between cordon and the end of their health gate at once (at least 1).
    pub max_unavailable_domains: usize,
    /// SF's manual mode: pause after each domain's health gate until resumed.
    pub manual: bool,
    /// Pods of a domain terminating (evicted, not gone yet) at once (at least 1).
    pub eviction_concurrency: usize,
    /// How long the disruption controller takes to reflect a pod's readiness in its budget.
    pub disruption_controller_lag: SignedDuration,
    /// Before a domain's first protected eviction (and after a refusal lifts, and after the
    /// caller restarts), each budget's groups, counted from their members, must not have
    /// dropped for this long. `None`: the stable period in force.
    pub eviction_window: Option<SignedDuration>,
    /// The health gate waits until every evicted group is Ready again: as many Ready groups in
    /// its workload as before the eviction (see [`PlanOptions::workload_keys`]; KubeRay
    /// recreates a multi-host replica under a new name), or, without workload labels, the
    /// group's name Ready again. Off: budgets only.
    pub wait_for_evicted_groups: bool,
    /// After an eviction failed other than with a 429, wait this long before the domain's next.
    pub eviction_retry: SignedDuration,
    pub handoff: Handoff,
    /// Server-side dry-run evictions only: no cordon, no wait, no hand-off, no health gate.
    pub dry_run: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            plan: PlanOptions::default(),
            health_check_wait: SignedDuration::ZERO,
            health_check_stable: None,
            health_check_retry_timeout: SignedDuration::from_mins(10),
            domain_timeout: None,
            rollout_timeout: None,
            failure_action: FailureAction::Pause,
            max_unavailable_domains: 1,
            manual: false,
            eviction_concurrency: 10,
            disruption_controller_lag: SignedDuration::from_secs(10),
            eviction_window: None,
            wait_for_evicted_groups: true,
            eviction_retry: SignedDuration::from_secs(5),
            handoff: Handoff::None,
            dry_run: false,
        }
    }
}

/// Why the engine cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error(
        "the {handoff} hand-off waits for nodes at the target generation: give a node generation \
         option (a label or a status.nodeInfo field, and a target)"
    )]
    HandoffNeedsGeneration { handoff: &'static str },
}

/// The rollout as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "phase")]
pub enum Phase {
    #[default]
    Running,
    /// A failure with [`FailureAction::Pause`]; resumed by the operator.
    Paused {
        reason: String,
    },
    /// A failure with [`FailureAction::Abort`]; final.
    Failed {
        reason: String,
    },
    Completed,
}

/// Where one domain is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    #[default]
    Pending,
    /// Cordon, phase 1, phase 2, waiting for pods to go.
    Draining,
    HandingOff,
    HealthCheck,
    /// Manual mode: through the health gate, waiting for the operator.
    AwaitingResume,
    Done,
    /// The rollout was aborted while this domain was in progress.
    Aborted,
}

impl Step {
    /// Past cordon and not yet through the health gate.
    pub fn is_unavailable(self) -> bool {
        matches!(self, Step::Draining | Step::HandingOff | Step::HealthCheck)
    }
}

/// A pod whose eviction the API accepted (or, in a dry run, answered).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Evicted {
    /// `namespace/name`.
    pub pod: String,
    pub uid: Option<String>,
    /// The budget that protected it (`namespace/name`), for a phase-1 pod.
    pub pdb: Option<String>,
    /// Its group (see [`PlanOptions::group_label`]).
    pub group: Option<String>,
    pub at: Timestamp,
    /// Dry run: how the API answered, when it refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// A 429 that pauses a domain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// `namespace/name` of the budget.
    pub pdb: String,
    pub pod: String,
    /// The API's message (the budget's: "needs N healthy pods and has M currently").
    pub message: String,
    pub since: Timestamp,
    /// `Retry-After`, when the API sent one.
    pub retry_after: Option<Timestamp>,
}

/// Why a domain in its drain evicts nothing for now, when it is not a budget's 429: the
/// NodeRollout's `Blocked` condition shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// `GroupsUnavailable` (evicting would take a workload's groups, counted from their
    /// members, below its budget's floor) or `SplitGroup` (a pod whose group's representative a
    /// budget protects elsewhere).
    pub reason: String,
    pub message: String,
}

/// What the engine keeps in memory only, never stored and never compared: a restarted caller
/// starts it afresh, so the stable window before evictions is waited out again after a restart.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// Per budget (`namespace/name`): since when its groups at pod level have not dropped.
    pub windows: BTreeMap<String, Window>,
    /// Domains that waited out the stable window since they started (or since their last
    /// refusal lifted, or since this caller started).
    pub windowed: BTreeSet<String>,
}

impl PartialEq for Memory {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Memory {}

/// The health gate's clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// The first check (after the health-check wait).
    pub checking_since: Option<Timestamp>,
    /// Healthy without a break since.
    pub healthy_since: Option<Timestamp>,
    /// The last check that found it healthy.
    pub last_healthy: Option<Timestamp>,
    /// Each affected budget's `currentHealthy` at the last check: a drop restarts the stable
    /// period even while the budget stays satisfied.
    pub current_healthy: BTreeMap<String, i32>,
}

/// One upgrade domain's progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainState {
    pub name: String,
    pub nodes: Vec<String>,
    pub step: Step,
    /// When it was started (cordon): the domain timeout runs from here.
    pub started: Option<Timestamp>,
    pub evicted: Vec<Evicted>,
    /// Evictions decided in the last step whose answer has not been taken yet (the caller may
    /// store the state before it sends them: a caller that died after sending finds them here
    /// and [`decide`] settles them from the live view).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sending: Vec<Evicted>,
    /// Older accepted evictions, folded into counts ([`State::compacted`]).
    #[serde(default, skip_serializing_if = "Folded::is_empty")]
    pub folded: Folded,
    pub refusal: Option<Refusal>,
    /// Why it evicts nothing for now (see [`Hold`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
    /// After a failed eviction: no eviction before this time.
    pub retry_at: Option<Timestamp>,
    /// The API server throttled an eviction (a 429 without a budget's cause): no eviction
    /// before this time (its `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_until: Option<Timestamp>,
    pub handed_off: Option<Timestamp>,
    /// The nodes raygate cordoned (a node cordoned before stays cordoned when raygate gives the
    /// domain back). `None`: a state stored before raygate recorded them; every cordon counts
    /// as raygate's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordoned: Option<BTreeSet<String>>,
    pub health: Health,
    /// Per workload (`namespace/label=value,...`) with a group about to be evicted: its Ready
    /// groups just before, which the health gate waits to see again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workloads: BTreeMap<String, Baseline>,
    /// What it does or waits for, for people.
    pub message: String,
}

/// A workload's groups just before this domain evicted one of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// Groups whose every pod was Ready and not terminating, with at least `group_size` pods.
    pub ready_groups: usize,
    /// The largest group's pod count (a recreated group counts once all its pods are back).
    pub group_size: usize,
    /// The groups of this domain the engine set out to evict.
    pub groups: BTreeSet<String>,
    /// Some of its evictions were folded ([`State::compacted`]): its groups count as evicted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub folded: bool,
}

/// Evictions folded out of [`DomainState::evicted`] to bound the stored state
/// ([`State::compacted`]): their counts, and what the health gate reads of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Folded {
    /// Accepted evictions of pods a budget protected.
    #[serde(default)]
    pub protected: u64,
    /// Accepted evictions of the other pods.
    #[serde(default)]
    pub other: u64,
    /// The budgets that protected them (`namespace/name`): the health gate checks them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub budgets: BTreeSet<String>,
    /// Their groups (`namespace/group`) no workload baseline names: the health gate waits for
    /// them by name.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub groups: BTreeSet<String>,
}

impl Folded {
    pub fn is_empty(&self) -> bool {
        *self == Folded::default()
    }
}

impl DomainState {
    /// Accepted evictions (kept and folded): `(protected, other)`.
    pub fn evicted_counts(&self) -> (u64, u64) {
        let accepted = self.evicted.iter().filter(|e| e.refused.is_none());
        let protected = accepted.clone().filter(|e| e.pdb.is_some()).count() as u64;
        let other = accepted.filter(|e| e.pdb.is_none()).count() as u64;
        (self.folded.protected + protected, self.folded.other + other)
    }

    /// Folds every accepted eviction but the newest `keep` (see [`State::compacted`]).
    fn fold(&mut self, keep: usize) {
        let finished = matches!(self.step, Step::Done | Step::Aborted);
        let keep = if finished { 0 } else { keep };
        let accepted = self.evicted.iter().filter(|e| e.refused.is_none()).count();
        let mut fold = accepted.saturating_sub(keep);
        let mut kept = Vec::with_capacity(self.evicted.len() - fold);
        for e in std::mem::take(&mut self.evicted) {
            if fold == 0 || e.refused.is_some() {
                kept.push(e);
                continue;
            }
            fold -= 1;
            match &e.pdb {
                Some(pdb) => {
                    self.folded.protected += 1;
                    self.folded.budgets.insert(pdb.clone());
                }
                None => self.folded.other += 1,
            }
            let Some(group) = &e.group else { continue };
            let ns = e.pod.split_once('/').map_or("", |(ns, _)| ns);
            let baseline = self.workloads.iter_mut().find(|(key, b)| {
                key.split_once('/').is_some_and(|(n, _)| n == ns) && b.groups.contains(group)
            });
            match baseline {
                Some((_, b)) => b.folded = true,
                None => {
                    self.folded.groups.insert(format!("{ns}/{group}"));
                }
            }
        }
        self.evicted = kept;
        if finished {
            // nothing reads a finished domain's health any more: its counts are enough
            self.folded.budgets.clear();
            self.folded.groups.clear();
            self.workloads.clear();
            self.health = Health::default();
        }
    }
}

/// The rollout's state: plain data, the only memory between steps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    #[serde(flatten)]
    pub phase: Phase,
    pub started: Option<Timestamp>,
    pub target_generation: Option<String>,
    /// The stable period in force (computed once, at the first step).
    pub stable: Option<SignedDuration>,
    /// The operator's resumes taken into account (see [`Observation::resumes`]).
    pub resumes: u64,
    pub domains: Vec<DomainState>,
    /// Why it waits (or what it does), one line.
    pub waiting: String,
    #[serde(skip)]
    pub memory: Memory,
}

impl State {
    /// The state before the first step of `plan`.
    pub fn new(plan: &Plan, options: &Options) -> Result<State, EngineError> {
        let handoff = match options.handoff {
            Handoff::None => None,
            Handoff::Reboot { .. } => Some("reboot"),
            Handoff::Replace { .. } => Some("replace"),
        };
        if let Some(handoff) = handoff
            && !options.dry_run
            && (plan.target_generation.is_none() || options.plan.generation.is_none())
        {
            return Err(EngineError::HandoffNeedsGeneration { handoff });
        }
        Ok(State {
            target_generation: plan.target_generation.clone(),
            domains: plan
                .domains
                .iter()
                .map(|d| DomainState {
                    name: d.name.clone(),
                    nodes: d.nodes.iter().map(|n| n.name.clone()).collect(),
                    ..DomainState::default()
                })
                .collect(),
            ..State::default()
        })
    }

    /// Every node the rollout may act on.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.domains
            .iter()
            .flat_map(|d| d.nodes.iter().map(String::as_str))
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Completed | Phase::Failed { .. })
    }

    /// The state with its size bounded for storing (the NodeRollout's `status.engine`, under
    /// etcd's object limit): in each domain every accepted eviction but the newest `keep` is
    /// folded into [`DomainState::folded`] (its count, its budget, its group, or a mark on the
    /// workload baseline naming the group), and a finished domain keeps only its counts.
    /// [`decide`] reads the folded state as it reads the full one: the same health gate (every
    /// affected budget, every evicted group) and the same counts. What a domain in progress
    /// then stores grows with its groups, budgets and workloads, and with at most `keep`
    /// evictions, not with its pods. Refused (dry-run) answers and unanswered evictions
    /// (`sending`) are kept as they are.
    pub fn compacted(&self, keep: usize) -> State {
        let mut s = self.clone();
        for d in &mut s.domains {
            d.fold(keep);
        }
        s
    }
}

/// What the API answered to an eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionResult {
    /// 2xx.
    Evicted,
    /// 404: the pod is already gone.
    Gone,
    /// 429: a budget refused (or is still being processed). `retry_after` from the header.
    TooManyRequests {
        message: String,
        retry_after: Option<SignedDuration>,
    },
    /// 429 without a budget's cause: the API server's max-in-flight or priority-and-fairness
    /// filter (plain text, `Retry-After` in a header). Nothing about any budget.
    Throttled { retry_after: Option<SignedDuration> },
    /// Anything else (e.g. 500 for a pod under two budgets, 403).
    Failed { code: u16, message: String },
}

/// A pod to evict, with what the engine needs back with the outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictTarget {
    pub pod: PodRef,
    /// The uid the decision saw (sent as a precondition).
    pub uid: Option<String>,
    /// `namespace/name` of the budget protecting it (phase 1).
    pub pdb: Option<String>,
    pub group: Option<String>,
    /// `--grace-period` ([`super::DrainRules::grace_period_seconds`]): the pod's grace period in
    /// the Eviction's delete options (`None`: the pod's own).
    pub grace_period_seconds: Option<u64>,
}

/// An eviction the caller sent, and its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub target: EvictTarget,
    pub result: EvictionResult,
}

/// What the caller observed since the last step.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    pub nodes: &'a [Node],
    pub pods: &'a [Pod],
    pub pdbs: &'a [PodDisruptionBudget],
    /// The DaemonSets that exist (see [`Cluster::daemon_sets`]): a pod of one that is gone is
    /// evicted with `--force` and blocks its domain without. `None`: not observed, every
    /// DaemonSet a pod names is taken to exist.
    pub daemon_sets: Option<&'a [DaemonSet]>,
    /// Outcomes of the evictions sent since the last step.
    pub outcomes: &'a [Outcome],
    /// How many times the operator asked to resume, ever (a counter: a restart that replays it
    /// resumes nothing twice).
    pub resumes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// What to do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// `spec.unschedulable=true`.
    Cordon { node: String },
    /// Add `taint` to the node.
    Taint { node: String, taint: Taint },
    /// Through the Eviction API, never a delete.
    Evict { target: EvictTarget, dry_run: bool },
    /// Hand the node to the upgrade agent: label `key=value`.
    LabelForUpgrade {
        node: String,
        key: String,
        value: String,
    },
    /// `spec.unschedulable` off (unless `keep_cordon`: a cordon raygate did not make stays), and
    /// remove the taint and the upgrade label if given.
    Uncordon {
        node: String,
        keep_cordon: bool,
        remove_taint: Option<Taint>,
        remove_label: Option<String>,
    },
    /// Tell people: an Event on `node` (and a log line).
    Report {
        node: String,
        type_: EventType,
        reason: &'static str,
        message: String,
    },
}

/// One step: the next state and the actions to apply (see the module header).
pub fn decide(
    state: &State,
    obs: &Observation,
    now: Timestamp,
    options: &Options,
) -> (State, Vec<Action>) {
    let mut step = Stepper {
        s: state.clone(),
        obs,
        now,
        o: options,
        actions: Vec::new(),
        pods: obs
            .pods
            .iter()
            .map(|p| ((namespace(&p.metadata), name(&p.metadata)), p))
            .collect(),
        untainted: 0,
        groups: options
            .plan
            .group_label
            .as_deref()
            .filter(|_| !options.dry_run)
            .map(|label| GroupView::new(obs.pods, obs.pdbs, label)),
    };
    step.run();
    (step.s, step.actions)
}

struct Stepper<'a> {
    s: State,
    obs: &'a Observation<'a>,
    now: Timestamp,
    o: &'a Options,
    actions: Vec<Action>,
    pods: HashMap<(&'a str, &'a str), &'a Pod>,
    /// Nodes of domains not started yet that do not show the taint yet.
    untainted: usize,
    /// Each budget's groups counted from their members (with a group label).
    groups: Option<GroupView>,
}

impl<'a> Stepper<'a> {
    fn run(&mut self) {
        if self.s.is_finished() {
            return;
        }
        if self.s.started.is_none() {
            self.s.started = Some(self.now);
            self.s.stable = Some(match self.o.health_check_stable {
                Some(stable) => stable,
                None => self.derived_stable(),
            });
        }
        self.take_outcomes();
        self.settle_unanswered();
        self.take_resumes();
        if let Some(view) = &self.groups {
            self.s.memory.windows = groups::windows(&self.s.memory.windows, view, self.now);
        }
        if self.s.phase == Phase::Running {
            self.check_rollout_timeout();
        }
        if self.s.phase == Phase::Running {
            self.taint_waiting_domains();
        }
        if self.s.phase == Phase::Running {
            for i in 0..self.s.domains.len() {
                if self.s.domains[i].step.is_unavailable() {
                    self.domain(i);
                }
                if self.s.phase != Phase::Running {
                    break;
                }
            }
        }
        if self.s.phase == Phase::Running {
            self.start_domains();
        }
        if self.s.phase == Phase::Running && self.s.domains.iter().all(|d| d.step == Step::Done) {
            self.s.phase = Phase::Completed;
            let node = self.s.nodes().next().unwrap_or_default().to_string();
            self.report(
                &node,
                EventType::Normal,
                "RolloutCompleted",
                format!("every upgrade domain ({}) is done", self.s.domains.len()),
            );
        }
        self.s.waiting = self.waiting_line();
    }

    fn stable(&self) -> SignedDuration {
        self.s.stable.unwrap_or(SignedDuration::ZERO)
    }

    /// The slowest representative's readiness probe (period × failureThreshold, Kubernetes'
    /// defaults for unset fields) plus the disruption controller's lag.
    fn derived_stable(&self) -> SignedDuration {
        let nodes: BTreeSet<&str> = self.s.nodes().collect();
        let Ok(plan) = replan(self.obs, &nodes, &self.o.plan, self.now) else {
            return self.o.disruption_controller_lag;
        };
        let probe = plan
            .domains
            .iter()
            .flat_map(|d| &d.phase1)
            .filter_map(|p| self.pods.get(&(p.pod.namespace, p.pod.name)))
            .filter_map(|p| p.spec.as_ref())
            .flat_map(|s| &s.containers)
            .filter_map(|c| c.readiness_probe.as_ref())
            .map(|p| {
                i64::from(p.period_seconds.unwrap_or(10).max(1))
                    * i64::from(p.failure_threshold.unwrap_or(3).max(1))
            })
            .max()
            .unwrap_or(0);
        SignedDuration::from_secs(probe) + self.o.disruption_controller_lag
    }

    /// The nodes of the domains not started yet.
    fn nodes_of_pending_domains(&self) -> Vec<String> {
        self.s
            .domains
            .iter()
            .filter(|d| d.step == Step::Pending)
            .flat_map(|d| d.nodes.iter().cloned())
            .collect()
    }

    /// With a taint option: taints the nodes of every domain not started yet, so new work avoids
    /// the whole outdated generation from the first step (the cordon follows domain by domain),
    /// and evicted pods do not land on a node drained later.
    fn taint_waiting_domains(&mut self) {
        let Some(taint) = self.o.plan.taint.clone().filter(|_| !self.o.dry_run) else {
            return;
        };
        for n in self.nodes_of_pending_domains() {
            if let Some(node) = self.node(&n)
                && !has_taint(node, &taint)
            {
                self.actions.push(Action::Taint {
                    node: n,
                    taint: taint.clone(),
                });
                self.untainted += 1;
            }
        }
    }

    fn domain_of_node(&self, node: &str) -> Option<usize> {
        self.s
            .domains
            .iter()
            .position(|d| d.nodes.iter().any(|n| n == node))
    }

    fn take_outcomes(&mut self) {
        for outcome in self.obs.outcomes {
            let t = &outcome.target;
            let Some(i) = self.domain_of_node(&t.pod.node) else {
                continue;
            };
            let pod = t.pod.to_string();
            self.s.domains[i]
                .sending
                .retain(|e| !(e.pod == pod && e.uid == t.uid));
            let now = self.now;
            let record = |refused: Option<String>| Evicted {
                pod: t.pod.to_string(),
                uid: t.uid.clone(),
                pdb: t.pdb.clone(),
                group: t.group.clone(),
                at: now,
                refused,
            };
            match &outcome.result {
                EvictionResult::Evicted | EvictionResult::Gone => {
                    let r = record(None);
                    let d = &mut self.s.domains[i];
                    if !d.evicted.iter().any(|e| e.pod == r.pod && e.uid == r.uid) {
                        d.evicted.push(r);
                    }
                }
                EvictionResult::Throttled { .. } if self.o.dry_run => {
                    let r = record(Some("429: throttled by the API server".into()));
                    self.s.domains[i].evicted.push(r);
                }
                EvictionResult::Throttled { retry_after } => {
                    let wait = retry_after.unwrap_or(SignedDuration::from_secs(1));
                    let until = self.now.checked_add(wait).unwrap_or(self.now);
                    let d = &mut self.s.domains[i];
                    let first = d.throttled_until.is_none_or(|u| u <= self.now);
                    d.throttled_until = Some(d.throttled_until.map_or(until, |u| u.max(until)));
                    if first {
                        let node = t.pod.node.clone();
                        self.report(
                            &node,
                            EventType::Normal,
                            "EvictionThrottled",
                            format!(
                                "evicting {} was throttled by the API server (429, Retry-After \
                                 {}); no budget refused it; the domain tries again then",
                                t.pod,
                                human(wait)
                            ),
                        );
                    }
                }
                EvictionResult::TooManyRequests { message, .. } if self.o.dry_run => {
                    let r = record(Some(format!("429: {message}")));
                    self.s.domains[i].evicted.push(r);
                }
                EvictionResult::TooManyRequests {
                    message,
                    retry_after,
                } => {
                    let pdb = t.pdb.clone().unwrap_or_default();
                    let retry_after = retry_after.and_then(|d| self.now.checked_add(d).ok());
                    let node = t.pod.node.clone();
                    self.report(
                        &node,
                        EventType::Warning,
                        "EvictionRefused",
                        format!(
                            "evicting {} refused by PodDisruptionBudget {pdb}: {message}; the \
                             domain waits until the budget allows a disruption again",
                            t.pod
                        ),
                    );
                    self.s.domains[i].refusal = Some(Refusal {
                        pdb,
                        pod: t.pod.to_string(),
                        message: message.clone(),
                        since: self.now,
                        retry_after,
                    });
                }
                EvictionResult::Failed { code, message } if self.o.dry_run => {
                    let r = record(Some(format!("{code}: {message}")));
                    self.s.domains[i].evicted.push(r);
                }
                EvictionResult::Failed { code, message } => {
                    let node = t.pod.node.clone();
                    let retry = self.now.checked_add(self.o.eviction_retry).ok();
                    self.report(
                        &node,
                        EventType::Warning,
                        "EvictionFailed",
                        format!("evicting {} failed ({code}): {message}", t.pod),
                    );
                    let d = &mut self.s.domains[i];
                    d.retry_at = retry;
                    d.message = format!("evicting {} failed ({code}): {message}", t.pod);
                }
            }
        }
    }

    /// Evictions decided before whose answer never came (the caller stopped, or died, between
    /// sending them and the next step): a pod that is gone, replaced (another uid) or terminating
    /// was evicted (its group is waited for, it is counted); one still running was not (it is a
    /// target again).
    fn settle_unanswered(&mut self) {
        for i in 0..self.s.domains.len() {
            for e in std::mem::take(&mut self.s.domains[i].sending) {
                let (ns, name) = e.pod.split_once('/').unwrap_or(("", e.pod.as_str()));
                let live = self.pods.get(&(ns, name)).copied();
                let evicted = match live {
                    None => true,
                    Some(p) => p.metadata.uid != e.uid || p.metadata.deletion_timestamp.is_some(),
                };
                let d = &mut self.s.domains[i];
                if evicted && !d.evicted.iter().any(|x| x.pod == e.pod && x.uid == e.uid) {
                    d.evicted.push(e);
                }
            }
        }
    }

    fn take_resumes(&mut self) {
        if self.obs.resumes <= self.s.resumes {
            return;
        }
        self.s.resumes = self.obs.resumes;
        let was_paused = matches!(self.s.phase, Phase::Paused { .. });
        let awaiting = self
            .s
            .domains
            .iter()
            .any(|d| d.step == Step::AwaitingResume);
        if !was_paused && !awaiting {
            return;
        }
        if was_paused {
            self.s.phase = Phase::Running;
            // a resumed rollout gets fresh timers (SF restarts the domain's timeout)
            for d in self
                .s
                .domains
                .iter_mut()
                .filter(|d| d.step.is_unavailable())
            {
                d.started = Some(self.now);
                d.health = Health::default();
                d.refusal = None;
                d.retry_at = None;
            }
            self.s.started = Some(self.now);
        }
        for d in &mut self.s.domains {
            if d.step == Step::AwaitingResume {
                d.step = Step::Done;
                d.message = "done".into();
            }
        }
        let node = self.s.nodes().next().unwrap_or_default().to_string();
        self.report(
            &node,
            EventType::Normal,
            "RolloutResumed",
            "resumed by the operator".into(),
        );
    }

    fn check_rollout_timeout(&mut self) {
        if let (Some(limit), Some(started)) = (self.o.rollout_timeout, self.s.started)
            && self.now.duration_since(started) >= limit
        {
            self.fail(format!(
                "the rollout did not finish within its timeout ({})",
                human(limit)
            ));
        }
    }

    fn start_domains(&mut self) {
        if self
            .s
            .domains
            .iter()
            .any(|d| d.step == Step::AwaitingResume)
        {
            return;
        }
        let max = self.o.max_unavailable_domains.max(1);
        while self.s.phase == Phase::Running
            && self
                .s
                .domains
                .iter()
                .filter(|d| d.step.is_unavailable())
                .count()
                < max
        {
            let Some(i) = self.s.domains.iter().position(|d| d.step == Step::Pending) else {
                return;
            };
            let d = &mut self.s.domains[i];
            d.step = Step::Draining;
            d.started = Some(self.now);
            d.cordoned = Some(BTreeSet::new());
            self.s.memory.windowed.remove(&d.name);
            let (node, message) = (
                d.nodes.first().cloned().unwrap_or_default(),
                format!(
                    "upgrade domain {} started: cordoning {} node(s)",
                    d.name,
                    d.nodes.len()
                ),
            );
            self.report(&node, EventType::Normal, "DomainStarted", message);
            self.domain(i);
        }
    }

    /// One active domain.
    fn domain(&mut self, i: usize) {
        if let (Some(limit), Some(started)) = (self.o.domain_timeout, self.s.domains[i].started)
            && self.now.duration_since(started) >= limit
        {
            let d = &self.s.domains[i];
            self.fail(format!(
                "upgrade domain {} did not finish within its timeout ({}): {}",
                d.name,
                human(limit),
                d.message
            ));
            return;
        }
        match self.s.domains[i].step {
            Step::Draining if self.o.dry_run => self.dry_run(i),
            Step::Draining => self.drain(i),
            Step::HandingOff => self.hand_off(i),
            Step::HealthCheck => self.health_gate(i),
            _ => {}
        }
    }

    /// The domain's plan as its nodes are now: `Ok(None)` once every node is gone. An error
    /// names what no longer fits the rollout (a node's domain label changed or removed): the
    /// domain is not drained, and never handed off, on a plan it cannot make.
    fn domain_plan(&self, i: usize) -> Result<Option<DomainPlan<'a>>, String> {
        let d = &self.s.domains[i];
        let nodes: BTreeSet<&str> = d.nodes.iter().map(String::as_str).collect();
        let plan = match replan(self.obs, &nodes, &self.o.plan, self.now) {
            Ok(plan) => plan,
            Err(super::DrainError::NoNodesMatched { .. }) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        if let Some(other) = plan.domains.iter().find(|p| p.name != d.name) {
            let moved: Vec<&str> = other.nodes.iter().map(|n| n.name.as_str()).collect();
            return Err(format!(
                "node(s) {} of upgrade domain {} now carry {}={}",
                moved.join(", "),
                d.name,
                self.o.plan.domain_label,
                other.name
            ));
        }
        Ok(plan.domains.into_iter().next())
    }

    /// The domain's plan, or `None` having paused the rollout over why it cannot be made.
    fn domain_plan_or_pause(&mut self, i: usize) -> Option<Option<DomainPlan<'a>>> {
        match self.domain_plan(i) {
            Ok(plan) => Some(plan),
            Err(why) => {
                let reason = format!(
                    "upgrade domain {} cannot be planned again: {why}; restore the label (or \
                     the NodeRollout's spec), then resume",
                    self.s.domains[i].name
                );
                self.pause(reason);
                None
            }
        }
    }

    fn pod<S: AsRef<str>>(&self, p: &PodRef<S>) -> Option<&'a Pod> {
        let key = (p.namespace.as_ref(), p.name.as_ref());
        self.pods.get(&key).copied()
    }

    fn target(&self, pod: &PodRef<&str>, pdb: Option<&str>, group: Option<String>) -> EvictTarget {
        EvictTarget {
            pod: pod.owned(),
            uid: self.pod(pod).and_then(|p| p.metadata.uid.clone()),
            pdb: pdb.map(|b| format!("{}/{b}", pod.namespace)),
            group,
            grace_period_seconds: self.o.plan.rules.grace_period_seconds,
        }
    }

    fn group_of(&self, pod: &PodRef<&str>) -> Option<String> {
        let key = self.o.plan.group_label.as_ref()?;
        self.pod(pod)?.metadata.labels.as_ref()?.get(key).cloned()
    }

    fn drain(&mut self, i: usize) {
        let Some(plan) = self.domain_plan_or_pause(i) else {
            return;
        };
        let Some(plan) = plan else {
            // every node of the domain is gone: nothing left to drain
            self.drained(i);
            return;
        };
        // 1. cordon (and taint), observed before anything is evicted
        let mut cordoning = 0;
        for n in &plan.nodes {
            if n.cordon {
                self.actions.push(Action::Cordon {
                    node: n.name.clone(),
                });
                if let Some(mine) = self.s.domains[i].cordoned.as_mut() {
                    mine.insert(n.name.clone());
                }
            }
            let tainting = |a: &Action| matches!(a, Action::Taint { node, .. } if *node == n.name);
            if let Some(taint) = &n.taint
                && !self.actions.iter().any(tainting)
            {
                self.actions.push(Action::Taint {
                    node: n.name.clone(),
                    taint: taint.clone(),
                });
            }
            cordoning += usize::from(n.cordon || n.taint.is_some());
        }
        if cordoning > 0 {
            self.s.domains[i].message = format!("cordoning {cordoning} node(s)");
            return;
        }
        if self.untainted > 0 {
            self.s.domains[i].message = format!(
                "tainting {} node(s) of later domains before evicting",
                self.untainted
            );
            return;
        }
        if plan.is_blocked() {
            self.s.domains[i].message =
                format!("blocked (nothing evicted): {}", plan.errors().join("; "));
            return;
        }
        // 2. a refusal holds the domain until the budget allows a disruption again
        if let Some(refusal) = self.s.domains[i].refusal.clone() {
            match self.refusal_lifted(&refusal) {
                Ok(()) => {
                    let node = self.s.domains[i].nodes.first().cloned().unwrap_or_default();
                    self.report(
                        &node,
                        EventType::Normal,
                        "EvictionResumed",
                        format!(
                            "PodDisruptionBudget {} allows a disruption again after {}",
                            refusal.pdb,
                            human(self.now.duration_since(refusal.since))
                        ),
                    );
                    self.s.domains[i].refusal = None;
                    // the groups that came back must stay available for the window first
                    let name = self.s.domains[i].name.clone();
                    self.s.memory.windowed.remove(&name);
                    if let Some(w) = self.s.memory.windows.get_mut(&refusal.pdb) {
                        w.since = self.now;
                    }
                }
                Err(why) => {
                    self.s.domains[i].message = format!(
                        "paused: PodDisruptionBudget {} refused evicting {}: {} ({why})",
                        refusal.pdb, refusal.pod, refusal.message
                    );
                    return;
                }
            }
        }
        if let Some(at) = self.s.domains[i].retry_at {
            if at > self.now {
                return;
            }
            self.s.domains[i].retry_at = None;
        }
        if let Some(at) = self.s.domains[i].throttled_until {
            if at > self.now {
                self.s.domains[i].message =
                    format!("the API server throttles evictions (429): next try at {at}");
                return;
            }
            self.s.domains[i].throttled_until = None;
        }
        // 3. phase 1, then phase 2, at most `eviction_concurrency` terminating at once
        let terminating = plan
            .phase1
            .iter()
            .map(|p| &p.pod)
            .chain(&plan.phase2)
            .filter(|p| {
                self.pod(p)
                    .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
            })
            .count();
        let room = self
            .o
            .eviction_concurrency
            .max(1)
            .saturating_sub(terminating);
        let (targets, what, left): (Vec<EvictTarget>, &str, usize) = if !plan.phase1.is_empty() {
            let targets = plan
                .phase1
                .iter()
                .filter(|p| !self.is_terminating(&p.pod))
                .map(|p| self.target(&p.pod, Some(p.pdb), self.group_of(&p.pod)))
                .collect();
            (targets, "protected", plan.phase1.len())
        } else {
            let targets = plan
                .phase2
                .iter()
                .filter(|p| !self.is_terminating(p))
                .map(|p| self.target(p, None, self.group_of(p)))
                .collect();
            (targets, "unprotected", plan.phase2.len())
        };
        if left == 0 {
            self.drained(i);
            return;
        }
        // an accepted eviction whose pod the stores do not show terminating yet is not sent again
        let accepted: HashSet<(String, Option<&str>)> = self.s.domains[i]
            .evicted
            .iter()
            .filter(|e| e.refused.is_none())
            .map(|e| (e.pod.clone(), e.uid.as_deref()))
            .collect();
        let targets: Vec<EvictTarget> = targets
            .into_iter()
            .filter(|t| !accepted.contains(&(t.pod.to_string(), t.uid.as_deref())))
            .collect();
        let targets = if plan.phase1.is_empty() {
            self.consented_members(i, targets)
        } else if self.window_held(i, &targets) {
            self.consented_protected(i, targets)
        } else {
            return;
        };
        let targets: Vec<EvictTarget> = targets.into_iter().take(room).collect();
        if targets.is_empty()
            && let Some(hold) = &self.s.domains[i].hold
        {
            self.s.domains[i].message = hold.message.clone();
            return;
        }
        for t in &targets {
            self.note_baseline(i, t);
            let intent = Evicted {
                pod: t.pod.to_string(),
                uid: t.uid.clone(),
                pdb: t.pdb.clone(),
                group: t.group.clone(),
                at: self.now,
                refused: None,
            };
            self.s.domains[i].sending.push(intent);
        }
        for target in targets {
            self.actions.push(Action::Evict {
                target,
                dry_run: false,
            });
        }
        self.s.domains[i].message = format!(
            "evicting {what} pods: {left} left on the domain's nodes ({terminating} terminating)"
        );
    }

    /// Before `t`'s group is first evicted: its workload's Ready groups now, kept for the health
    /// gate.
    fn note_baseline(&mut self, i: usize, t: &EvictTarget) {
        let (Some(group), Some(pod)) = (&t.group, self.pod(&t.pod)) else {
            return;
        };
        let Some(workload) = self.workload_of(pod) else {
            return;
        };
        if !self.s.domains[i].workloads.contains_key(&workload.key) {
            let (ready_groups, group_size) = self.ready_groups(&workload, None);
            let baseline = Baseline {
                ready_groups,
                group_size,
                ..Baseline::default()
            };
            self.s.domains[i]
                .workloads
                .insert(workload.key.clone(), baseline);
        }
        if let Some(b) = self.s.domains[i].workloads.get_mut(&workload.key) {
            b.groups.insert(group.clone());
        }
    }

    /// The workload of a grouped pod: its namespace and its values of the workload labels (all
    /// of them present), if the options name any.
    fn workload_of(&self, pod: &Pod) -> Option<Workload> {
        let group_key = self.o.plan.group_label.as_deref()?;
        let keys = self.o.plan.workload_keys();
        if keys.is_empty() {
            return None;
        }
        let labels = pod.metadata.labels.as_ref()?;
        labels.get(group_key)?;
        let values = keys
            .iter()
            .map(|k| Some((k.to_string(), labels.get(*k)?.clone())))
            .collect::<Option<Vec<_>>>()?;
        let ns = namespace(&pod.metadata).to_string();
        let key = format!(
            "{ns}/{}",
            values
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        Some(Workload {
            key,
            namespace: ns,
            labels: values,
        })
    }

    /// The workload's groups that are Ready (every pod Ready and not terminating, at least
    /// `size` pods; `None`: the largest group's size), and that size.
    fn ready_groups(&self, w: &Workload, size: Option<usize>) -> (usize, usize) {
        let Some(group_key) = self.o.plan.group_label.as_deref() else {
            return (0, 0);
        };
        let mut groups: BTreeMap<&str, (usize, bool)> = BTreeMap::new();
        for p in self.obs.pods {
            if namespace(&p.metadata) != w.namespace || super::is_finished(p) {
                continue;
            }
            let Some(labels) = p.metadata.labels.as_ref() else {
                continue;
            };
            if !w.labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                continue;
            }
            let Some(group) = labels.get(group_key) else {
                continue;
            };
            let g = groups.entry(group.as_str()).or_insert((0, true));
            g.0 += 1;
            g.1 &= pod_serving(p);
        }
        let size = size.unwrap_or_else(|| groups.values().map(|g| g.0).max().unwrap_or(0));
        let ready = groups
            .values()
            .filter(|(count, serving)| *serving && *count >= size)
            .count();
        (ready, size)
    }

    fn is_terminating(&self, p: &PodRef<&str>) -> bool {
        self.pod(p)
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    }

    /// Whether a 429 no longer holds: `Retry-After` passed and the observed budget is current
    /// and allows a disruption.
    fn refusal_lifted(&self, r: &Refusal) -> Result<(), String> {
        if let Some(at) = r.retry_after
            && at > self.now
        {
            return Err(format!("Retry-After until {at}"));
        }
        let Some(pdb) = self
            .obs
            .pdbs
            .iter()
            .find(|b| crate::meta::key(&b.metadata) == r.pdb)
        else {
            // the budget is gone: nothing refuses any more
            return Ok(());
        };
        let status = pdb.status.as_ref();
        let observed = status.and_then(|s| s.observed_generation);
        if observed != pdb.metadata.generation {
            return Err("the budget's status is not current".into());
        }
        let allowed = status.and_then(|s| s.disruptions_allowed).unwrap_or(0);
        if allowed <= 0 {
            return Err(format!(
                "{} disruptions allowed; needs {} healthy, has {}",
                allowed.max(0),
                status.and_then(|s| s.desired_healthy).unwrap_or(0),
                status.and_then(|s| s.current_healthy).unwrap_or(0)
            ));
        }
        Ok(())
    }

    fn drained(&mut self, i: usize) {
        let d = &mut self.s.domains[i];
        d.step = Step::HandingOff;
        d.message = "drained".into();
        d.hold = None;
        let (node, message) = (
            d.nodes.first().cloned().unwrap_or_default(),
            format!("upgrade domain {} drained ({} pod(s) evicted)", d.name, {
                let (protected, other) = d.evicted_counts();
                protected + other
            }),
        );
        self.report(&node, EventType::Normal, "DomainDrained", message);
        self.hand_off(i);
    }

    fn dry_run(&mut self, i: usize) {
        let Some(plan) = self.domain_plan_or_pause(i) else {
            return;
        };
        let Some(plan) = plan else {
            self.s.domains[i].step = Step::Done;
            return;
        };
        let tried: BTreeSet<String> = self.s.domains[i]
            .evicted
            .iter()
            .map(|e| e.pod.clone())
            .collect();
        let targets: Vec<EvictTarget> = plan
            .phase1
            .iter()
            .map(|p| self.target(&p.pod, Some(p.pdb), self.group_of(&p.pod)))
            .chain(
                plan.phase2
                    .iter()
                    .map(|p| self.target(p, None, self.group_of(p))),
            )
            .filter(|t| !tried.contains(&t.pod.to_string()))
            .collect();
        if targets.is_empty() {
            let d = &mut self.s.domains[i];
            d.step = Step::Done;
            let refused = d.evicted.iter().filter(|e| e.refused.is_some()).count();
            d.message = format!(
                "dry run: {} eviction(s) sent, {refused} refused",
                d.evicted.len()
            );
            return;
        }
        for target in targets {
            self.actions.push(Action::Evict {
                target,
                dry_run: true,
            });
        }
        self.s.domains[i].message = "dry run: evicting".into();
    }

    fn hand_off(&mut self, i: usize) {
        let done = match &self.o.handoff {
            Handoff::None => true,
            Handoff::Reboot { label, value } => self.reboot(i, label, value),
            Handoff::Replace { label, value } => self.replace(i, label, value),
        };
        if done {
            let d = &mut self.s.domains[i];
            d.step = Step::HealthCheck;
            d.handed_off = Some(self.now);
            d.health = Health::default();
            d.message = "health check".into();
            let (node, message) = (
                d.nodes.first().cloned().unwrap_or_default(),
                format!("upgrade domain {} handed off; health check follows", d.name),
            );
            self.report(&node, EventType::Normal, "DomainHandedOff", message);
            self.health_gate(i);
        }
    }

    fn node(&self, name: &str) -> Option<&'a Node> {
        self.obs
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
    }

    /// Whether the node's generation is at (or past) the target.
    fn at_target(&self, node: &Node) -> bool {
        let (Some(target), Some(generation)) = (&self.s.target_generation, &self.o.plan.generation)
        else {
            return false;
        };
        node_generation(node, &generation.source)
            .is_some_and(|g| compare_generations(g, target) != std::cmp::Ordering::Less)
    }

    fn label_for_upgrade(&mut self, node: &Node, label: &str, value: &str) {
        if !has_label(node, label, value) {
            self.actions.push(Action::LabelForUpgrade {
                node: name(&node.metadata).to_string(),
                key: label.to_string(),
                value: value.to_string(),
            });
        }
    }

    fn reboot(&mut self, i: usize, label: &str, value: &str) -> bool {
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
    fn cordoned_by_me(&self, i: usize, node: &str) -> bool {
        self.s.domains[i]
            .cordoned
            .as_ref()
            .is_none_or(|mine| mine.contains(node))
    }

    fn replace(&mut self, i: usize, label: &str, value: &str) -> bool {
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

    fn health_gate(&mut self, i: usize) {
        let Some(handed_off) = self.s.domains[i].handed_off else {
            return;
        };
        let wait_until = handed_off
            .checked_add(self.o.health_check_wait)
            .unwrap_or(handed_off);
        if self.now < wait_until {
            self.s.domains[i].message = format!("health check wait until {wait_until}");
            return;
        }
        let (problems, counts) = self.health_problems(i);
        let stable = self.stable();
        let now = self.now;
        let d = &mut self.s.domains[i];
        let checking_since = *d.health.checking_since.get_or_insert(now);
        let dropped = counts
            .iter()
            .any(|(k, v)| d.health.current_healthy.get(k).is_some_and(|old| v < old));
        d.health.current_healthy = counts;
        if !problems.is_empty() || dropped {
            d.health.healthy_since = None;
        }
        if !problems.is_empty() {
            let since = d.health.last_healthy.unwrap_or(checking_since);
            let why = problems.join("; ");
            d.message = format!("waiting for health: {why}");
            if now.duration_since(since) >= self.o.health_check_retry_timeout {
                let reason = format!(
                    "upgrade domain {} stayed unhealthy for the health check retry timeout ({}): {why}",
                    d.name,
                    human(self.o.health_check_retry_timeout)
                );
                self.fail(reason);
            }
            return;
        }
        d.health.last_healthy = Some(now);
        let since = *d.health.healthy_since.get_or_insert(now);
        let held = now.duration_since(since);
        if held < stable {
            d.message = format!(
                "healthy for {} of the stable period {}",
                human(held),
                human(stable)
            );
            return;
        }
        let node = d.nodes.first().cloned().unwrap_or_default();
        let name = d.name.clone();
        if self.o.manual {
            d.step = Step::AwaitingResume;
            d.message = "healthy; manual mode: waiting for the operator to resume".into();
        } else {
            d.step = Step::Done;
            d.message = "done".into();
        }
        self.report(
            &node,
            EventType::Normal,
            "DomainHealthy",
            format!(
                "upgrade domain {name} stayed healthy for {}{}",
                human(stable),
                if self.o.manual {
                    "; manual mode: resume to go on"
                } else {
                    ""
                }
            ),
        );
    }

    /// What keeps the domain from being healthy, and each affected budget's `currentHealthy`.
    fn health_problems(&self, i: usize) -> (Vec<String>, BTreeMap<String, i32>) {
        let d = &self.s.domains[i];
        let mut problems = Vec::new();
        let mut counts = BTreeMap::new();
        let budgets: BTreeSet<&str> = d
            .evicted
            .iter()
            .filter_map(|e| e.pdb.as_deref())
            .chain(d.folded.budgets.iter().map(String::as_str))
            .collect();
        for key in budgets {
            let Some(pdb) = self
                .obs
                .pdbs
                .iter()
                .find(|b| crate::meta::key(&b.metadata) == key)
            else {
                continue; // a deleted budget protects nothing
            };
            let Some(status) = &pdb.status else {
                problems.push(format!("PodDisruptionBudget {key} has no status yet"));
                continue;
            };
            if status.observed_generation != pdb.metadata.generation {
                problems.push(format!("PodDisruptionBudget {key} is not current"));
                continue;
            }
            let (current, desired) = (
                status.current_healthy.unwrap_or(0),
                status.desired_healthy.unwrap_or(0),
            );
            counts.insert(key.to_string(), current);
            if current < desired {
                problems.push(format!(
                    "PodDisruptionBudget {key} needs {desired} healthy pods and has {current}"
                ));
            }
        }
        // groups only: a pod without a group value is covered by its budget (a ReplicaSet's
        // replacement has a new name, so there is nothing to wait for by name)
        if let (true, Some(key)) = (self.o.wait_for_evicted_groups, &self.o.plan.group_label) {
            let mut groups: BTreeSet<(&str, &str)> = d
                .evicted
                .iter()
                .filter(|e| e.refused.is_none())
                .filter_map(|e| {
                    let ns = e.pod.split_once('/').map_or("", |(ns, _)| ns);
                    Some((ns, e.group.as_deref()?))
                })
                .chain(d.folded.groups.iter().filter_map(|g| g.split_once('/')))
                .collect();
            // by workload: as many Ready groups as before, whatever their names now
            for (key, baseline) in &d.workloads {
                let ns = key.split_once('/').map_or("", |(ns, _)| ns);
                // a folded baseline's evictions are not listed one by one: its groups count
                let evicted: Vec<&str> = baseline
                    .groups
                    .iter()
                    .map(String::as_str)
                    .filter(|g| groups.remove(&(ns, *g)) || baseline.folded)
                    .collect();
                if evicted.is_empty() {
                    continue;
                }
                let Some(workload) = Workload::parse(key) else {
                    continue;
                };
                let (ready, _) = self.ready_groups(&workload, Some(baseline.group_size));
                if ready < baseline.ready_groups {
                    problems.push(format!(
                        "workload {key} has {ready} of its {} Ready groups back (evicted: {})",
                        baseline.ready_groups,
                        evicted.join(", ")
                    ));
                }
            }
            // by name: groups whose workload is not known
            for (ns, group) in groups {
                let mut members = self
                    .obs
                    .pods
                    .iter()
                    .filter(|p| namespace(&p.metadata) == ns)
                    .filter(|p| {
                        p.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(key))
                            .map(String::as_str)
                            == Some(group)
                    })
                    .peekable();
                let ready = members.peek().is_some() && members.all(pod_serving);
                if !ready {
                    problems.push(format!("group {group} is not Ready again"));
                }
            }
        }
        (problems, counts)
    }

    /// A failure: pause or abort, as configured.
    fn fail(&mut self, reason: String) {
        let node = self.s.nodes().next().unwrap_or_default().to_string();
        match self.o.failure_action {
            FailureAction::Pause => self.pause(reason),
            FailureAction::Abort => {
                self.report(
                    &node,
                    EventType::Warning,
                    "RolloutAborted",
                    format!("{reason}; aborted"),
                );
                self.abort();
                self.s.phase = Phase::Failed { reason };
            }
        }
    }

    /// Stops where it is until the operator resumes (whatever the failure action: what pauses
    /// here is no failure of the upgrade, and aborting would lift cordons on a plan it cannot
    /// make).
    fn pause(&mut self, reason: String) {
        let node = self.s.nodes().next().unwrap_or_default().to_string();
        self.report(
            &node,
            EventType::Warning,
            "RolloutPaused",
            format!("{reason}; paused until resumed"),
        );
        self.s.phase = Phase::Paused { reason };
    }

    /// Gives back the nodes of the domains not handed off yet, and takes the taint off the
    /// nodes of domains not started.
    fn abort(&mut self) {
        if let Some(taint) = self.o.plan.taint.clone() {
            for n in self.nodes_of_pending_domains() {
                // a domain not started was never cordoned by raygate: only the taint goes
                if let Some(node) = self.node(&n)
                    && has_taint(node, &taint)
                {
                    self.actions.push(Action::Uncordon {
                        node: n,
                        keep_cordon: true,
                        remove_taint: Some(taint.clone()),
                        remove_label: None,
                    });
                }
            }
        }
        for i in 0..self.s.domains.len() {
            if self.s.domains[i].step != Step::Draining
                && self.s.domains[i].step != Step::HandingOff
            {
                continue;
            }
            self.s.domains[i].step = Step::Aborted;
            for n in self.s.domains[i].nodes.clone() {
                let Some(node) = self.node(&n) else { continue };
                let taint = self.o.plan.taint.clone().filter(|t| has_taint(node, t));
                let mark = self.o.handoff.mark().and_then(|(key, _)| {
                    node.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key(key))
                        .then(|| key.to_string())
                });
                let uncordon = is_cordoned(node) && self.cordoned_by_me(i, &n);
                if uncordon || taint.is_some() || mark.is_some() {
                    self.actions.push(Action::Uncordon {
                        node: n,
                        keep_cordon: !uncordon,
                        remove_taint: taint,
                        remove_label: mark,
                    });
                }
            }
        }
    }

    fn report(&mut self, node: &str, type_: EventType, reason: &'static str, message: String) {
        self.actions.push(Action::Report {
            node: node.to_string(),
            type_,
            reason,
            message,
        });
    }

    fn waiting_line(&self) -> String {
        match &self.s.phase {
            Phase::Completed => return "completed".into(),
            Phase::Failed { reason } => return format!("failed: {reason}"),
            Phase::Paused { reason } => return format!("paused: {reason}"),
            Phase::Running => {}
        }
        let active: Vec<String> = self
            .s
            .domains
            .iter()
            .filter(|d| d.step.is_unavailable() || d.step == Step::AwaitingResume)
            .map(|d| format!("domain {}: {}", d.name, d.message))
            .collect();
        active.join(" | ")
    }
}

/// A group's workload: the namespace and the workload labels' values.
struct Workload {
    /// `namespace/k1=v1,k2=v2`.
    key: String,
    namespace: String,
    labels: Vec<(String, String)>,
}

impl Workload {
    /// The inverse of the key [`Stepper::workload_of`] writes (label keys and values hold no `,`
    /// or `=`; a namespace no `/`).
    fn parse(key: &str) -> Option<Workload> {
        let (ns, rest) = key.split_once('/')?;
        let labels = rest
            .split(',')
            .map(|kv| {
                let (k, v) = kv.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Workload {
            key: key.to_string(),
            namespace: ns.to_string(),
            labels,
        })
    }
}

/// The plan of `nodes` only, as they are now (no generation filter: the targets are fixed).
fn replan<'a>(
    obs: &Observation<'a>,
    nodes: &BTreeSet<&str>,
    options: &PlanOptions,
    now: Timestamp,
) -> Result<Plan<'a>, super::DrainError> {
    let options = PlanOptions {
        node_selector: String::new(),
        generation: None,
        order: DomainOrder::Name,
        ..options.clone()
    };
    let cluster = Cluster {
        daemon_sets: obs.daemon_sets,
        ..Cluster::new(obs.nodes, obs.pods, obs.pdbs)
    };
    super::plan::plan_nodes(&cluster, &options, now, nodes)
}

fn has_label(node: &Node, key: &str, value: &str) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .is_some_and(|v| v == value)
}

fn has_taint(node: &Node, taint: &Taint) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == taint.key && t.effect == taint.effect)
        })
}

/// `spec.unschedulable`.
pub fn is_cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The node's Ready condition is True.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Ready and not being deleted.
pub(super) fn pod_serving(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `1h2m3s`-style, whole seconds.
fn human(d: SignedDuration) -> String {
    let s = d.as_secs().max(0);
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}
