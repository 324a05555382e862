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
//! 5. the **health check**: after [`Options::health_check_wait`], every affected budget current
//!    and satisfied and every evicted group Ready again, held for the stable period; unhealthy
//!    for [`Options::health_check_retry_timeout`] is a failure.
//!
//! A domain over [`Options::domain_timeout`], or the rollout over [`Options::rollout_timeout`],
//! fails too; a failure pauses the rollout or aborts it ([`FailureAction`]). At most
//! [`Options::max_unavailable_domains`] domains are between cordon and the end of their health
//! check at once, and, with other NodeRollouts' domains in progress ([`Observation::elsewhere`]),
//! at most that many domains of any rollout disrupt one workload (`peers`). The state is plain
//! data (serde): every decision is re-derived from it and the live view, so a restarted caller
//! goes on where the last one stopped.

mod consent;
mod evict;
mod give_back;
mod groups;
mod handoff;
mod health;
mod moves;
mod outcome;
mod peers;
mod returning;
#[cfg(test)]
mod tests;
mod types;

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
pub use k8s_openapi::jiff::SignedDuration;
use k8s_openapi::jiff::Timestamp;

pub use give_back::give_back;
use groups::GroupView;
pub use groups::Window;
pub use moves::{
    DEFAULT_MOVE_TIMEOUT, KUBERAY_SPEC_HASH, MOVE_HELD, MOVE_MARK, MOVED_BY, MOVING_RAYSERVICE,
    Move, MoveOptions, RAYSERVICE_MOVED, SERVING_INTERRUPTED, ServiceView,
};
pub use outcome::{BUDGET_NOT_SYNCED, BUDGET_SYNC_WAIT};
pub use peers::OTHER_ROLLOUT;
pub use returning::POD_RETURNED;
pub use types::*;

/// The failure reason of a rollout the operator aborted ([`Observation::abort`]).
pub const ABORTED_ON_REQUEST: &str = "aborted on request";

use super::{Cluster, DomainOrder, DomainPlan, Plan, PlanOptions, PodRef, name, namespace};
use crate::events::EventType;

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
        groups: (!options.plan.groups.is_empty() && !options.dry_run)
            .then(|| GroupView::new(obs.pods, obs.pdbs, &options.plan.groups)),
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
        if self.obs.abort {
            self.aborted_on_request();
            return;
        }
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
            self.complete();
        }
        self.s.waiting = self.waiting_line();
    }

    /// Every domain is done: completed, naming the nodes that joined the selection meanwhile (an
    /// outdated node added mid-rollout is not drained by it, and says so).
    fn complete(&mut self) {
        self.s.phase = Phase::Completed;
        self.s.joined = self.joined_outdated();
        let node = self.s.nodes().next().unwrap_or_default().to_string();
        self.report(
            &node,
            EventType::Normal,
            "RolloutCompleted",
            format!("every upgrade domain ({}) is done", self.s.domains.len()),
        );
        if !self.s.joined.is_empty() {
            let message = format!(
                "node(s) {} joined the rollout's selection at an outdated generation after it was \
                 planned and were not drained: a new NodeRollout with the same selection drains \
                 them",
                self.s.joined.join(", ")
            );
            self.report(&node, EventType::Warning, "OutdatedNodesJoined", message);
        }
    }

    /// Nodes the rollout's selection picks now (its node selector and, with a generation option,
    /// not at the target generation) that it never planned.
    fn joined_outdated(&self) -> Vec<String> {
        let Ok(selector) = crate::labels::Selector::parse_query(&self.o.plan.node_selector) else {
            return Vec::new();
        };
        let planned: BTreeSet<&str> = self.s.nodes().collect();
        let outdated = |n: &Node| match (&self.o.plan.generation, &self.s.target_generation) {
            (Some(g), Some(target)) => {
                super::node_generation(n, &g.source).is_some_and(|v| v != target.as_str())
            }
            _ => true,
        };
        self.obs
            .nodes
            .iter()
            .filter(|n| selector.matches(n.metadata.labels.as_ref()))
            .filter(|n| !planned.contains(name(&n.metadata)) && outdated(n))
            .map(|n| name(&n.metadata).to_string())
            .collect()
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
        if self.taint_waits_for_moves() {
            return;
        }
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
                d.failed = None;
                for m in d.moves.values_mut() {
                    m.since = self.now;
                }
                if d.drained_at.is_some() {
                    d.drained_at = Some(self.now);
                }
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
            let Some(i) = self.next_domain() else {
                return;
            };
            if self.start_held(i) {
                return;
            }
            let d = &mut self.s.domains[i];
            d.step = Step::Draining;
            d.started = Some(self.now);
            d.since = Some(self.now);
            d.hold = None;
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
        if let (Some(limit), Some(started)) = (self.o.drain_timeout, self.s.domains[i].started)
            && self.s.domains[i].step == Step::Draining
            && !self.o.dry_run
            && self.now.duration_since(started) >= limit
        {
            let d = &self.s.domains[i];
            self.fail(format!(
                "upgrade domain {} was not drained within its timeout (drainTimeout {}): {}",
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
            Step::HealthCheck => self.health_check(i),
            _ => {}
        }
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

    /// The operator's abort (see [`ABORTED_ON_REQUEST`]): whatever the failure action, the drained nodes are given back (the
    /// cordons, taints and upgrade labels raygate set are lifted) and the rollout fails.
    fn aborted_on_request(&mut self) {
        let node = self.s.nodes().next().unwrap_or_default().to_string();
        let reason = ABORTED_ON_REQUEST.to_string();
        self.report(
            &node,
            EventType::Warning,
            "RolloutAborted",
            format!("{reason}; the drained nodes are given back"),
        );
        self.abort();
        self.s.phase = Phase::Failed { reason };
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
    /// nodes of domains not started ([`give_back()`]).
    fn abort(&mut self) {
        let mark = self.o.handoff.mark().map(|(key, _)| key);
        let taint = self.o.plan.taint.as_ref();
        let given = give_back(&self.s, self.obs.nodes, taint, mark);
        self.actions.extend(given);
        for d in &mut self.s.domains {
            if matches!(d.step, Step::Draining | Step::HandingOff) {
                d.step = Step::Aborted;
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
            .filter(|d| {
                d.step.is_unavailable()
                    || d.step == Step::AwaitingResume
                    || (d.step == Step::Pending && d.hold.is_some())
            })
            .map(|d| format!("domain {}: {}", d.name, d.message))
            .collect();
        active.join(" | ")
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
