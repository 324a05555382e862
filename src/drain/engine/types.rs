//! The engine's data: its knobs ([`Options`]), its state (plain data, serde: the only memory
//! between steps), what the caller observed and what it is to do ([`Action`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{Move, MoveOptions, ServiceView, Window};
use crate::drain::{Plan, PlanOptions, PodRef, Returns};
use crate::events::EventType;
use crate::types::rollout::HandOffMode;

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
    /// What the spec's hand-off mode means for the engine, the drained nodes marked `mark`
    /// (label, value) for the agent that reboots or replaces them.
    pub fn of(mode: HandOffMode, (label, value): (String, String)) -> Self {
        match mode {
            HandOffMode::None => Handoff::None,
            HandOffMode::Reboot => Handoff::Reboot { label, value },
            HandOffMode::Replace => Handoff::Replace { label, value },
        }
    }

    /// Whether a drained domain's nodes come back for the later domains' groups (the room check).
    pub fn returns(&self) -> Returns {
        match self {
            Handoff::None => Returns::Never,
            Handoff::Reboot { .. } | Handoff::Replace { .. } => Returns::AfterHandOff,
        }
    }

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

    pub(super) fn mark(&self) -> Option<(&str, &str)> {
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
    /// SF `UpgradeDomainTimeout`: from cordon to the end of the health check (`None`: no limit).
    pub domain_timeout: Option<SignedDuration>,
    /// The managed node pools' drain timeout: from cordon until the domain's last pod is gone
    /// (`None`: no limit). Bounds every wait of the drain (a refusal that never lifts, a hold,
    /// pods that never go) with the failure action.
    pub drain_timeout: Option<SignedDuration>,
    /// SF `UpgradeTimeout`: the whole rollout (`None`: no limit).
    pub rollout_timeout: Option<SignedDuration>,
    /// SF `FailureAction` (Rollback/Manual → Abort/Pause).
    pub failure_action: FailureAction,
    /// Domains between cordon and the end of their health check at once (at least 1).
    pub max_unavailable_domains: usize,
    /// SF's manual mode: pause after each domain's health check until resumed.
    pub manual: bool,
    /// Pods of a domain terminating (evicted, not gone yet) at once (at least 1).
    pub eviction_concurrency: usize,
    /// How long the disruption controller takes to reflect a pod's readiness in its budget.
    pub disruption_controller_lag: SignedDuration,
    /// Before a domain's first protected eviction (and after a refusal lifts, and after the
    /// caller restarts), each budget's groups, counted from their members, must not have
    /// dropped for this long. `None`: the stable period in force.
    pub eviction_window: Option<SignedDuration>,
    /// The health check waits until every evicted group is Ready again: as many Ready groups in
    /// its workload as before the eviction (see [`PlanOptions::workload_keys`]; KubeRay
    /// recreates a multi-host replica under a new name), or, without workload labels, the
    /// group's name Ready again. Off: budgets only.
    pub wait_for_evicted_groups: bool,
    /// After an eviction failed other than with a 429, wait this long before the domain's next.
    pub eviction_retry: SignedDuration,
    pub handoff: Handoff,
    /// Server-side dry-run evictions only: no cordon, no wait, no hand-off, no health check.
    pub dry_run: bool,
    /// The NodeRollout's name: it orders this rollout's domains against other rollouts' when
    /// they start at the same time ([`Observation::elsewhere`]).
    pub rollout: String,
    /// RayServices moved off a domain before it drains ([`Observation::services`]).
    pub moves: MoveOptions,
    /// From a domain's drain's end until its hand-off is done (the nodes back, or replaced);
    /// past it, the failure action (`None`: no limit). After [`NODE_RETURN_GRACE`] the domain
    /// holds with reason [`NODE_NOT_RETURNING`].
    pub handoff_timeout: Option<SignedDuration>,
}

/// `spec.handOff.timeout`'s default.
pub const DEFAULT_HANDOFF_TIMEOUT: SignedDuration = SignedDuration::from_hours(1);
/// How long a hand-off waits before it says which nodes have not returned: Cluster API's
/// default `nodeStartupTimeout` (a MachineHealthCheck's wait for a machine's node).
pub const NODE_RETURN_GRACE: SignedDuration = SignedDuration::from_mins(10);
/// The hold of a hand-off whose nodes have not returned within [`NODE_RETURN_GRACE`].
pub const NODE_NOT_RETURNING: &str = "NodeNotReturning";

impl Default for Options {
    fn default() -> Self {
        Options {
            plan: PlanOptions::default(),
            health_check_wait: SignedDuration::ZERO,
            health_check_stable: None,
            health_check_retry_timeout: SignedDuration::from_mins(10),
            domain_timeout: None,
            drain_timeout: Some(SignedDuration::from_mins(30)),
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
            rollout: String::new(),
            moves: MoveOptions::default(),
            handoff_timeout: Some(DEFAULT_HANDOFF_TIMEOUT),
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
    /// Manual mode: through the health check, waiting for the operator.
    AwaitingResume,
    Done,
    /// The rollout was aborted while this domain was in progress.
    Aborted,
}

impl Step {
    /// Past cordon and not yet through the health check.
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
    /// members, below its budget's floor), `SplitGroup` (a pod whose group's representative a
    /// budget protects elsewhere), `UnreachableNode`, `OtherRolloutDisrupting` (another
    /// NodeRollout's domain disrupts the same workload; on a domain not started yet too) or
    /// `BudgetNotSynced` (a refusing budget's status does not catch up with its spec).
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
    /// Domains whose health check this caller has watched: a restarted caller restarts the
    /// stable period of a domain it has not.
    pub health_watched: BTreeSet<String>,
}

impl PartialEq for Memory {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Memory {}

/// The health check's clock.
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
    /// When it was first started, never moved by a resume or a pause: its place among the
    /// domains of every NodeRollout that disrupt one workload ([`Disruption::since`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// The pods on its nodes when it started that tolerate the cordon (and the taint), by uid:
    /// each is evicted once; such a pod found there later is a replacement scheduled back onto
    /// the cordoned node and is left alone (see [`DomainState::returned`]). `None`: not taken
    /// yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerating: Option<BTreeSet<String>>,
    /// Replacements scheduled back onto its cordoned nodes that it leaves alone
    /// (`namespace/name`), as `kubectl drain` leaves DaemonSet pods.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub returned: BTreeSet<String>,
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
    /// The last eviction that failed other than with a 429, until one of the domain's
    /// evictions succeeds (reason `EvictionFailed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<Hold>,
    /// After a failed eviction: no eviction before this time.
    pub retry_at: Option<Timestamp>,
    /// The API server throttled an eviction (a 429 without a budget's cause): no eviction
    /// before this time (its `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_until: Option<Timestamp>,
    pub handed_off: Option<Timestamp>,
    /// When its drain ended (its hand-off began): the hand-off timeout runs from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_at: Option<Timestamp>,
    /// The nodes raygate cordoned (a node cordoned before stays cordoned when raygate gives the
    /// domain back). `None`: a state stored before raygate recorded them; every cordon counts
    /// as raygate's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordoned: Option<BTreeSet<String>>,
    pub health: Health,
    /// Per workload (`namespace/label=value,...`) with a group about to be evicted: its Ready
    /// groups just before, which the health check waits to see again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workloads: BTreeMap<String, Baseline>,
    /// RayServices moved off it before its evictions, by `namespace/name`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub moves: BTreeMap<String, Move>,
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
/// ([`State::compacted`]): their counts, and what the health check reads of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Folded {
    /// Accepted evictions of pods a budget protected.
    #[serde(default)]
    pub protected: u64,
    /// Accepted evictions of the other pods.
    #[serde(default)]
    pub other: u64,
    /// The budgets that protected them (`namespace/name`): the health check checks them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub budgets: BTreeSet<String>,
    /// Their groups (`namespace/group`) no workload baseline names: the health check waits for
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
    /// This domain as other rollouts weigh it ([`State::disruptions`]).
    pub fn disruption(&self, rollout: &str) -> Disruption {
        let evicted = self.evicted.iter().filter(|e| e.refused.is_none());
        Disruption {
            rollout: rollout.to_string(),
            domain: self.name.clone(),
            since: self.since.or(self.started),
            nodes: match self.step {
                Step::Draining => self.nodes.clone(),
                _ => Vec::new(),
            },
            budgets: evicted
                .chain(&self.sending)
                .filter_map(|e| e.pdb.clone())
                .chain(self.folded.budgets.iter().cloned())
                .collect(),
        }
    }

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
            self.tolerating = None;
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
    /// What the NodeRollout controller decided at planning for a spec that leaves
    /// `taintOutdated` to it (`None`: the spec decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint_outdated: Option<bool>,
    pub domains: Vec<DomainState>,
    /// Why it waits (or what it does), one line.
    pub waiting: String,
    /// Once completed: the nodes that joined the selection at an outdated generation after the
    /// plan, not drained by this rollout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joined: Vec<String>,
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

    /// The domains of this rollout (`rollout`, its name) between cordon and the end of their
    /// health check, as other rollouts weigh them (nothing once it is finished).
    pub fn disruptions(&self, rollout: &str) -> Vec<Disruption> {
        if self.is_finished() {
            return Vec::new();
        }
        self.domains
            .iter()
            .filter(|d| d.step.is_unavailable())
            .map(|d| d.disruption(rollout))
            .collect()
    }

    /// The state with its size bounded for storing (the NodeRollout's `status.engine`, under
    /// etcd's object limit): in each domain every accepted eviction but the newest `keep` is
    /// folded into [`DomainState::folded`] (its count, its budget, its group, or a mark on the
    /// workload baseline naming the group), and a finished domain keeps only its counts.
    /// [`decide`] reads the folded state as it reads the full one: the same health check (every
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
    /// The operator asked to abort the rollout (`raygate rollout abort`, the rollout's
    /// `raygate.io/abort` annotation): the drained nodes are given back and the rollout fails.
    pub abort: bool,
    /// The domains other NodeRollouts have between cordon and the end of their health check
    /// ([`State::disruptions`] of each).
    pub elsewhere: &'a [Disruption],
    /// The RayServices (empty: none, or not observed: nothing is moved).
    pub services: &'a [ServiceView],
}

/// A NodeRollout's upgrade domain between its cordon and the end of its health check, as the
/// other rollouts weigh it: the workloads (budgets) it disrupts count against their
/// `maxUnavailableDomains` too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disruption {
    /// The NodeRollout's name.
    pub rollout: String,
    pub domain: String,
    /// When it was first started ([`DomainState::since`]): domains that disrupt one workload go
    /// in this order (then by rollout and domain name).
    pub since: Option<Timestamp>,
    /// Its nodes while it drains (the pods there are about to be disrupted); empty after.
    pub nodes: Vec<String>,
    /// The budgets (`namespace/name`) that protected the pods it evicted.
    pub budgets: BTreeSet<String>,
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
    /// Move a RayService off the domain: mark its active cluster so that KubeRay's zero-downtime
    /// upgrade starts a new cluster with the same spec (see [`MOVE_MARK`]).
    MoveRayService {
        namespace: String,
        service: String,
        cluster: String,
        /// `<NodeRollout>/<domain>` ([`MOVED_BY`](super::MOVED_BY)).
        by: String,
    },
    /// Tell a RayService's team: an Event on the RayService (and a log line).
    ReportService {
        namespace: String,
        service: String,
        type_: EventType,
        reason: &'static str,
        message: String,
    },
    /// Tell people: an Event on `node` (and a log line).
    Report {
        node: String,
        type_: EventType,
        reason: &'static str,
        message: String,
    },
}
