//! The scenario format: a cluster shape, objects, a timeline of actions and expectations, as one
//! YAML document (read with serde-saphyr as raygate reads manifests), and its runner on the
//! simulated cluster.
//!
//! ```yaml
//! name: an upgrade waits for quota
//! seed: 1
//! cluster: {upgradeDomains: 2, nodesPerDomain: 2, allocatable: {nvidia.com/gpu: "4"}}
//! objects: [ ... Kubernetes objects, applied in order at 0s ... ]
//! timeline:
//!   - at: 30s
//!     patch: {apiVersion: ray.io/v1, kind: RayService, namespace: serving, name: svc,
//!             patch: {spec: {rayClusterConfig: {rayVersion: "2.52.0"}}}}
//!   - at: 5m
//!     raiseQuota: {clusterQueue: team, resource: nvidia.com/gpu, to: "16"}
//!   - at: 10m
//!     startRollout: {strategy: raygate, target: "1"}
//! expect:
//!   within: 2h
//!   violations: []          # the invariants expected to break (none)
//!   objects:
//!     - {apiVersion: ray.io/v1, kind: RayService, namespace: serving, name: svc,
//!        path: /status/serviceStatus, equals: Running}
//! ```
//!
//! Errors name the line and the field: serde-saphyr's own (unknown field, wrong type, with line
//! and column) and the checks after it (a step with no action or two, a bad duration) point at
//! the step's line.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiResource, Scope, pinned_kind};
use kube::{Client, core::GroupVersionKind};
use raygate_sim::actors::{disruption, garbage_collector, kubelet, lws, node_lifecycle, scheduler};
use raygate_sim::{FaultRule, Faults, Sim, Verb, informers};
use serde::Deserialize;
use serde_json::{Value, json};
use serde_saphyr::Spanned;
use tokio::sync::{oneshot, watch};

use crate::baselines::{self, Outcome, SimClock, Strategy, Upgrade};
use crate::history::{History, Kind};
use crate::invariants::{self, Expect, Invariant, Violation, Window};
use crate::recorder::Recorder;

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seed of generated names and of random picks.
    #[serde(default)]
    pub seed: u64,
    pub cluster: ClusterShape,
    #[serde(default)]
    pub controller: ControllerSpec,
    /// Objects applied in order at the start (server-side apply).
    #[serde(default)]
    pub objects: Vec<Value>,
    #[serde(default)]
    pub timeline: Vec<Spanned<Step>>,
    #[serde(default)]
    pub expect: Expectations,
}

fn default_domain_label() -> String {
    "topology.raygate.io/upgrade-domain".into()
}

/// The nodes: `upgradeDomains` × `nodesPerDomain`, named `ud<d>-n<i>`, labelled with their
/// domain and generation 0.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterShape {
    pub upgrade_domains: usize,
    pub nodes_per_domain: usize,
    /// Each node's allocatable resources (cpu, memory and pods default to 64, 512Gi, 110).
    #[serde(default)]
    pub allocatable: BTreeMap<String, String>,
    #[serde(default = "default_domain_label")]
    pub domain_label: String,
    /// Extra labels on every node.
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    /// Namespaces to create.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Nodes outside the rollout: room for the groups a drained domain evicts.
    #[serde(default)]
    pub spare: Option<SpareNodes>,
}

/// `spare`: `nodes` more nodes, named `spare-n<i>`, in upgrade domain `domain` (default `spare`),
/// already at `generation` (default `"1"`), so a rollout to that generation leaves them alone.
/// `joinAt` (a Go duration): they join the cluster then instead of at the start, as capacity
/// added for an upgrade does, so the workload is placed on the other nodes first.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpareNodes {
    pub nodes: usize,
    #[serde(default = "default_spare_domain")]
    pub domain: String,
    #[serde(default = "default_spare_generation")]
    pub generation: String,
    #[serde(default, deserialize_with = "optional_duration")]
    pub join_at: Option<Duration>,
}

fn optional_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    duration(&text).map(Some).map_err(serde::de::Error::custom)
}

fn default_spare_domain() -> String {
    "spare".into()
}

fn default_spare_generation() -> String {
    "1".into()
}

fn yes() -> bool {
    true
}

/// raygate's controller in the story.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControllerSpec {
    /// Run it from the start (a timeline may kill and restart it).
    #[serde(default = "yes")]
    pub run: bool,
    #[serde(default)]
    pub pod_gate: bool,
}

impl Default for ControllerSpec {
    fn default() -> Self {
        ControllerSpec {
            run: true,
            pod_gate: false,
        }
    }
}

/// One step: when (cluster time since the start, Go duration syntax), and exactly one action.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    pub at: String,
    /// Printed when the step runs (the demo's act titles); no effect on the story.
    #[serde(default)]
    pub note: Option<String>,
    pub apply: Option<Vec<Value>>,
    pub patch: Option<PatchStep>,
    pub raise_quota: Option<RaiseQuota>,
    pub start_rollout: Option<StartRollout>,
    pub kill_controller: Option<KillController>,
    pub restart_controller: Option<Empty>,
    pub inject_fault: Option<InjectFault>,
    pub clear_faults: Option<Empty>,
    pub fail_node: Option<NodeRef>,
    pub restore_node: Option<NodeRef>,
}

/// `killController: {}` kills raygate at once; `{afterWrites: N}` lets its next N writes
/// through and kills it right after the N-th is committed, before raygate sees the answer (a
/// crash at a write boundary).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KillController {
    #[serde(default)]
    pub after_writes: Option<u64>,
}

/// `{}`: an action without parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PatchStep {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub name: String,
    /// A JSON merge patch.
    pub patch: Value,
    /// Skip the step when the object does not exist (a pod being recreated); else that fails
    /// the story.
    #[serde(default)]
    pub if_exists: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RaiseQuota {
    pub cluster_queue: String,
    pub resource: String,
    /// The new nominal quota (a Kubernetes quantity).
    pub to: String,
    /// The flavor (default: the first one covering the resource).
    #[serde(default)]
    pub flavor: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StrategyName {
    /// raygate's drain engine run in process (`raygate drain run --local`).
    Raygate,
    /// A `NodeRollout` object, run by raygate's controller (`--node-rollouts`).
    NodeRollout,
    NodeByNode,
    RandomConcurrent,
    DomainByDomain,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StartRollout {
    pub strategy: StrategyName,
    /// The generation every node ends at.
    #[serde(default = "default_target")]
    pub target: String,
    /// `randomConcurrent`: nodes drained at once.
    #[serde(default)]
    pub k: Option<usize>,
    /// The pod label naming a group (default: LeaderWorkerSet's group key).
    #[serde(default)]
    pub group_label: Option<String>,
    /// raygate: taint outdated nodes `raygate.io/outdated:NoSchedule` from the start. Absent:
    /// a NodeRollout's default (the controller decides by the room check); no taint for the
    /// in-process strategies.
    #[serde(default)]
    pub taint_outdated: Option<bool>,
    /// nodeRollout: the NodeRollout's name (default `node-generation-<target>`).
    #[serde(default)]
    pub name: Option<String>,
    /// nodeRollout: `spec.healthCheckStable` (default: from the representatives' probes).
    #[serde(default)]
    pub health_check_stable: Option<String>,
}

fn default_target() -> String {
    "1".into()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InjectFault {
    /// get, list, watch, create, update, patch, delete (default: every write).
    #[serde(default)]
    pub verbs: Vec<String>,
    /// A plural (`workloads`) or `plural.group`.
    #[serde(default)]
    pub resource: Option<String>,
    /// Only requests of this client (User-Agent prefix, e.g. `raygate`).
    #[serde(default)]
    pub user_agent: Option<String>,
    /// 409, 429, 500 or 503.
    pub code: u16,
    /// Share of matching requests failed (0..=1).
    pub rate: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRef {
    pub node: String,
}

/// What must hold when the story ends.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expectations {
    /// The story's limit (cluster time); it ends earlier once the timeline and every rollout are
    /// done and `settle` has passed.
    #[serde(default)]
    pub within: Option<String>,
    #[serde(default)]
    pub settle: Option<String>,
    /// The invariants expected to break (a baseline's scenario); every other one must hold.
    #[serde(default)]
    pub violations: Vec<InvariantName>,
    #[serde(default)]
    pub objects: Vec<ObjectExpectation>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum InvariantName {
    QuotaExceeded,
    RanUncovered,
    GroupDisruptedTwice,
    BelowPdbFloor,
    BelowGroupFloor,
    SliceLeaked,
    NodeNotAtTarget,
}

impl InvariantName {
    pub fn invariant(self) -> Invariant {
        match self {
            InvariantName::QuotaExceeded => Invariant::QuotaExceeded,
            InvariantName::RanUncovered => Invariant::RanUncovered,
            InvariantName::GroupDisruptedTwice => Invariant::GroupDisruptedTwice,
            InvariantName::BelowPdbFloor => Invariant::BelowPdbFloor,
            InvariantName::BelowGroupFloor => Invariant::BelowGroupFloor,
            InvariantName::SliceLeaked => Invariant::SliceLeaked,
            InvariantName::NodeNotAtTarget => Invariant::NodeNotAtTarget,
        }
    }
}

/// A field of an object at the end: `path` is a JSON pointer (`/status/serviceStatus`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObjectExpectation {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub name: String,
    pub path: String,
    pub equals: Value,
}

/// An action, once a step is checked.
#[derive(Clone, Debug)]
pub enum Action {
    Apply(Vec<Value>),
    Patch(PatchStep),
    RaiseQuota(RaiseQuota),
    StartRollout(StartRollout),
    KillController,
    /// Kill raygate right after its next `n` writes are committed.
    KillControllerAfterWrites(u64),
    RestartController,
    InjectFault(InjectFault),
    ClearFaults,
    FailNode(String),
    RestoreNode(String),
}

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

/// A scenario with its timeline checked: (at, action, line) in time order.
#[derive(Clone, Debug)]
pub struct Checked {
    pub scenario: Scenario,
    pub steps: Vec<(Duration, Action, u64)>,
    /// The steps' notes, by line.
    pub notes: BTreeMap<u64, String>,
    pub within: Duration,
    pub settle: Duration,
}

fn duration(text: &str) -> Result<Duration, String> {
    let d = raygate::drain::parse_duration(text)?;
    Duration::try_from(d).map_err(|e| e.to_string())
}

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
        let step = s.value.clone();
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
            if v.strategy == StrategyName::RandomConcurrent && v.k.unwrap_or(0) == 0 {
                return Err(field(
                    line,
                    format!("timeline[{i}].startRollout.k"),
                    "randomConcurrent needs k ≥ 1 (nodes drained at once)".into(),
                ));
            }
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
            if !(0.0..=1.0).contains(&v.rate) {
                return Err(field(
                    line,
                    format!("timeline[{i}].injectFault.rate"),
                    format!("{} is not a share between 0 and 1", v.rate),
                ));
            }
            for verb in &v.verbs {
                if verb_of(verb).is_none() {
                    return Err(field(
                        line,
                        format!("timeline[{i}].injectFault.verbs"),
                        format!(
                            "unknown verb {verb:?} (get, list, watch, create, update, patch, delete)"
                        ),
                    ));
                }
            }
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
        match actions.len() {
            1 => {
                if let Some((_, a)) = actions.pop() {
                    steps.push((at, a, line));
                }
            }
            0 => {
                return Err(field(
                    line,
                    format!("timeline[{i}]"),
                    "no action: give one of apply, patch, raiseQuota, startRollout, killController, restartController, injectFault, clearFaults, failNode, restoreNode".into(),
                ));
            }
            _ => {
                let names: Vec<&str> = actions.iter().map(|(n, _)| *n).collect();
                return Err(field(
                    line,
                    format!("timeline[{i}]"),
                    format!("one action per step, found {}", names.join(" and ")),
                ));
            }
        }
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

fn verb_of(name: &str) -> Option<Verb> {
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

/// Why a scenario could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("creating node {node}: {source}")]
    CreateNode {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("line {line}: resolving {kind} ({api_version}): {source}")]
    Resolve {
        line: u64,
        kind: String,
        api_version: String,
        #[source]
        source: kube::Error,
    },
    #[error("line {line}: {what}: {source}")]
    Write {
        line: u64,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("line {line}: {what}: {reason}")]
    Step {
        line: u64,
        what: String,
        reason: String,
    },
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub name: String,
    pub started: Timestamp,
    pub ended: Timestamp,
    pub history: History,
    pub violations: Vec<Violation>,
    pub rollouts: Vec<Result<Outcome, String>>,
    /// The node rollout's lower bound from the runner's own durations (`None`: the timeline
    /// starts no rollout), see [`crate::bound`].
    pub lower_bound: Option<crate::bound::LowerBound>,
    /// Expectations not met, one line each (violations not expected, expected ones that did not
    /// happen, objects whose field differs, a rollout that failed).
    pub failures: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The running story: the sim, its actors, raygate's controller.
struct Story {
    sim: Sim,
    client: Client,
    controller: Option<(watch::Sender<()>, tokio::task::JoinHandle<()>)>,
    /// The running controller's client's write budget ([`DiesAfterWrites`]).
    writes_left: Arc<std::sync::atomic::AtomicU64>,
    /// Set by a `restartController` that finds raygate still running with a kill armed that has
    /// not landed: the controller's task starts it again right after the kill.
    restart_after_kill: Arc<std::sync::atomic::AtomicBool>,
    pod_gate: bool,
    /// Run the NodeRollout controller (the NodeRollout CRD is served).
    node_rollouts: bool,
    faults: Faults,
    rollouts: Vec<tokio::task::JoinHandle<Result<Outcome, String>>>,
    expect: Expect,
    _stop: watch::Sender<bool>,
    _emulator: oneshot::Sender<()>,
}

impl Story {
    /// Starts raygate's controller. When it still runs this does nothing, unless a kill armed by
    /// `killController: {afterWrites: N}` has not landed yet (raygate wrote less than N times
    /// since): then raygate is started again right after that kill, as its Deployment would
    /// restart a crashed pod. Without that, a kill landing after the timeline's restart left
    /// raygate dead for the rest of the story (seed 207: an old slice never finished).
    fn start_controller(&mut self) {
        use std::sync::atomic::Ordering::SeqCst;
        if self
            .controller
            .as_ref()
            .is_some_and(|(_, handle)| !handle.is_finished())
        {
            let armed = (1..u64::MAX).contains(&self.writes_left.load(SeqCst));
            if armed {
                tracing::info!(
                    "raygate's controller still runs with a kill armed: it restarts right after the kill"
                );
                self.restart_after_kill.store(true, SeqCst);
            }
            return;
        }
        self.restart_after_kill.store(false, SeqCst);
        let left = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
        self.writes_left = left.clone();
        let (tx, rx) = watch::channel(());
        let sim = self.sim.clone();
        let restart = self.restart_after_kill.clone();
        let clock: Arc<dyn raygate::controller::Clock> =
            Arc::new(SimClock(self.sim.clock().clone()));
        let config = raygate::controller::Config {
            admission_resync: Duration::from_millis(500),
            pod_gate: self.pod_gate,
            node_rollouts: self.node_rollouts,
            ..Default::default()
        };
        let handle = tokio::spawn(async move {
            loop {
                let dies = DiesAfterWrites::new(
                    raygate_sim::service::SimService::new(sim.clone()).with_user_agent("raygate"),
                    left.clone(),
                );
                let dead = dies.dead.clone();
                let client = Client::new(dies, "default");
                let mut rx = rx.clone();
                let run = raygate::controller::run_with(
                    client,
                    config.clone(),
                    clock.clone(),
                    async move {
                        let _ = rx.changed().await;
                    },
                );
                tokio::select! {
                    biased;
                    r = run => {
                        if let Err(e) = r {
                            tracing::error!(error = %e, "raygate's controller stopped");
                        }
                        return;
                    },
                    () = dead.notified() => {
                        tracing::info!("raygate's controller killed right after a write");
                    }
                }
                if !restart.swap(false, SeqCst) {
                    return;
                }
                tracing::info!("raygate's controller restarted after its kill");
            }
        });
        self.controller = Some((tx, handle));
    }

    /// No graceful shutdown: the process is gone.
    async fn kill_controller(&mut self) {
        if let Some((_, handle)) = self.controller.take() {
            handle.abort();
            let _ = handle.await;
        }
    }
}

/// raygate's client that dies at a write boundary: with `left` = n (not `u64::MAX`), the n-th
/// write from now is committed and then nothing more is answered (that answer included, as when
/// the process dies before reading it); `dead` is notified so the runner ends the controller's
/// task. The sim's own copy of `DiesAfterEviction` (sim/tests/rollout.rs), for any write.
#[derive(Clone)]
struct DiesAfterWrites {
    inner: raygate_sim::service::SimService,
    left: Arc<std::sync::atomic::AtomicU64>,
    dead: Arc<tokio::sync::Notify>,
    gone: Arc<std::sync::atomic::AtomicBool>,
}

impl DiesAfterWrites {
    /// `left`: the write budget, shared with the runner (which arms the kill through it).
    fn new(
        inner: raygate_sim::service::SimService,
        left: Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        DiesAfterWrites {
            inner,
            left,
            dead: Arc::new(tokio::sync::Notify::new()),
            gone: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }
}

type SimResponse = raygate_sim::http::Response<raygate_sim::service::ResponseBody>;

impl tower_service::Service<raygate_sim::http::Request<kube::client::Body>> for DiesAfterWrites {
    type Response = SimResponse;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<SimResponse, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: raygate_sim::http::Request<kube::client::Body>) -> Self::Future {
        use std::sync::atomic::Ordering::SeqCst;
        if self.gone.load(SeqCst) {
            return Box::pin(futures::future::pending());
        }
        let write = req.method() != raygate_sim::http::Method::GET;
        let counted = write
            && self
                .left
                .fetch_update(SeqCst, SeqCst, |n| (n != u64::MAX && n > 0).then(|| n - 1))
                .is_ok_and(|n| n == 1);
        if counted {
            // the last write allowed: nothing after it is answered
            self.gone.store(true, SeqCst);
        }
        let served = self.inner.call(req);
        let (gone, dead) = (self.gone.clone(), self.dead.clone());
        Box::pin(async move {
            let resp = served.await?;
            if gone.load(SeqCst) {
                if counted {
                    dead.notify_one();
                }
                return futures::future::pending().await;
            }
            Ok(resp)
        })
    }
}

async fn resolve(
    client: &Client,
    api_version: &str,
    kind: &str,
    line: u64,
) -> Result<(ApiResource, bool), RunError> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = pinned_kind(client, &gvk)
        .await
        .map_err(|source| RunError::Resolve {
            line,
            kind: kind.into(),
            api_version: api_version.into(),
            source,
        })?;
    Ok((ar, caps.scope == Scope::Namespaced))
}

fn api_for(
    client: &Client,
    ar: &ApiResource,
    namespaced: bool,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    if namespaced {
        Api::namespaced_with(client.clone(), ns.unwrap_or("default"), ar)
    } else {
        Api::all_with(client.clone(), ar)
    }
}

/// Server-side applies `objects` in order (field manager `raygate-scenario`, forced).
async fn apply(client: &Client, objects: &[Value], line: u64) -> Result<(), RunError> {
    for o in objects {
        let api_version = o["apiVersion"].as_str().unwrap_or_default();
        let kind = o["kind"].as_str().unwrap_or_default();
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let (ar, namespaced) = resolve(client, api_version, kind, line).await?;
        let api = api_for(client, &ar, namespaced, o["metadata"]["namespace"].as_str());
        api.patch(
            name,
            &PatchParams::apply("raygate-scenario").force(),
            &Patch::Apply(o),
        )
        .await
        .map_err(|source| RunError::Write {
            line,
            what: format!("applying {kind} {name}"),
            source,
        })?;
    }
    Ok(())
}

fn node_object(shape: &ClusterShape, name: &str, domain: &str, generation: &str) -> Value {
    let mut allocatable: BTreeMap<String, String> =
        [("cpu", "64"), ("memory", "512Gi"), ("pods", "110")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    allocatable.extend(shape.allocatable.clone());
    let mut labels = shape.node_labels.clone();
    labels.insert(shape.domain_label.clone(), domain.into());
    labels.insert("kubernetes.io/hostname".into(), name.into());
    labels.insert(node_lifecycle::GENERATION.into(), generation.into());
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": allocatable, "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// Creates the nodes (name, domain, generation) of `shape`.
async fn create_nodes(
    client: &Client,
    shape: &ClusterShape,
    names: Vec<(String, String, String)>,
) -> Result<(), RunError> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for (name, domain, generation) in names {
        let object = node_object(shape, &name, &domain, &generation);
        let node = serde_json::from_value(object).map_err(|e| RunError::Step {
            line: 1,
            what: format!("node {name}"),
            reason: e.to_string(),
        })?;
        nodes
            .create(&Default::default(), &node)
            .await
            .map_err(|source| RunError::CreateNode { node: name, source })?;
    }
    Ok(())
}

/// The kinds this sim serves (a CRD not installed is left out of the history).
async fn served(client: &Client) -> Vec<Kind> {
    let mut out = vec![];
    for kind in Kind::ALL {
        let (group, version, kind_name, _, _) = kind.resource();
        let gvk = GroupVersionKind::gvk(group, version, kind_name);
        if pinned_kind(client, &gvk).await.is_ok() {
            out.push(kind);
        }
    }
    out
}

async fn raise_quota(client: &Client, q: &RaiseQuota, line: u64) -> Result<(), RunError> {
    let (ar, _) = resolve(client, "kueue.x-k8s.io/v1beta2", "ClusterQueue", line).await?;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let what = format!("raising ClusterQueue {}'s {}", q.cluster_queue, q.resource);
    // read-modify-replace, again on a 409 (the controller writes the queue's status meanwhile)
    for _ in 0..20 {
        let cq = api
            .get(&q.cluster_queue)
            .await
            .map_err(|source| RunError::Write {
                line,
                what: what.clone(),
                source,
            })?;
        let mut v = serde_json::to_value(&cq).unwrap_or_default();
        let mut done = false;
        for g in v["spec"]["resourceGroups"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            for f in g["flavors"].as_array_mut().into_iter().flatten() {
                if done || q.flavor.as_deref().is_some_and(|n| f["name"] != n) {
                    continue;
                }
                for r in f["resources"].as_array_mut().into_iter().flatten() {
                    if r["name"] == q.resource.as_str() {
                        r["nominalQuota"] = json!(q.to);
                        done = true;
                    }
                }
            }
        }
        if !done {
            return Err(RunError::Step {
                line,
                what,
                reason: "no flavor of the queue covers the resource".into(),
            });
        }
        let object: DynamicObject = serde_json::from_value(v).map_err(|e| RunError::Step {
            line,
            what: what.clone(),
            reason: e.to_string(),
        })?;
        match api
            .replace(&q.cluster_queue, &Default::default(), &object)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(source) => return Err(RunError::Write { line, what, source }),
        }
    }
    Err(RunError::Step {
        line,
        what,
        reason: "20 conflicts in a row".into(),
    })
}

impl Story {
    async fn act(
        &mut self,
        action: &Action,
        line: u64,
        domain_label: &str,
        seed: u64,
    ) -> Result<(), RunError> {
        let client = self.client.clone();
        match action {
            Action::Apply(objects) => apply(&client, objects, line).await,
            Action::Patch(p) => {
                let (ar, namespaced) = resolve(&client, &p.api_version, &p.kind, line).await?;
                let patched = api_for(&client, &ar, namespaced, p.namespace.as_deref())
                    .patch(&p.name, &PatchParams::default(), &Patch::Merge(&p.patch))
                    .await;
                match patched {
                    Err(kube::Error::Api(s)) if s.code == 404 && p.if_exists => Ok(()),
                    r => r.map(|_| ()).map_err(|source| RunError::Write {
                        line,
                        what: format!("patching {} {}", p.kind, p.name),
                        source,
                    }),
                }
            }
            Action::RaiseQuota(q) => raise_quota(&client, q, line).await,
            Action::StartRollout(r) if r.strategy == StrategyName::NodeRollout => {
                let request = crate::noderollout::Request {
                    name: r
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("node-generation-{}", r.target)),
                    domain_label: domain_label.into(),
                    target: r.target.clone(),
                    taint_outdated: r.taint_outdated,
                    group_label: r
                        .group_label
                        .clone()
                        .unwrap_or_else(|| lws::GROUP_KEY.to_string()),
                    health_check_stable: r.health_check_stable.clone(),
                };
                self.expect.group_label = Some(request.group_label.clone());
                self.expect.generation =
                    Some((node_lifecycle::GENERATION.to_string(), r.target.clone()));
                let clock = self.sim.clock().clone();
                self.rollouts.push(tokio::spawn(async move {
                    crate::noderollout::run(&client, &clock, &request).await
                }));
                Ok(())
            }
            Action::StartRollout(r) => {
                let strategy = match r.strategy {
                    StrategyName::Raygate | StrategyName::NodeRollout => Strategy::Raygate,
                    StrategyName::NodeByNode => Strategy::NodeByNode,
                    StrategyName::DomainByDomain => Strategy::DomainByDomain,
                    StrategyName::RandomConcurrent => Strategy::RandomConcurrent {
                        k: r.k.unwrap_or(1),
                    },
                };
                let group_label = r
                    .group_label
                    .clone()
                    .unwrap_or_else(|| lws::GROUP_KEY.to_string());
                let mut upgrade = Upgrade {
                    domain_label: domain_label.into(),
                    target: r.target.clone(),
                    seed,
                    group_label: Some(group_label.clone()),
                    ..Upgrade::default()
                };
                let taint = match (r.taint_outdated, &strategy) {
                    (Some(taint), _) => taint,
                    (None, Strategy::Raygate) => {
                        let now = self.sim.clock().now();
                        crate::auto_taint::decide(&client, now, &upgrade)
                            .await
                            .map_err(|reason| RunError::Step {
                                line,
                                what: "starting the rollout".into(),
                                reason,
                            })?
                    }
                    (None, _) => false,
                };
                upgrade.taint = taint.then(raygate::drain::outdated_taint);
                if let Some(t) = &upgrade.taint {
                    taint_outdated(&client, t, &r.target, line).await?;
                }
                self.expect.group_label = Some(group_label);
                self.expect.generation =
                    Some((node_lifecycle::GENERATION.to_string(), r.target.clone()));
                let clock = self.sim.clock().clone();
                // the drain's requests carry its client's name, as kubectl's and raygate's do
                let client = self.sim.client_as(match strategy {
                    Strategy::Raygate => "raygate",
                    _ => "kubectl",
                });
                self.rollouts.push(tokio::spawn(async move {
                    baselines::run(&client, &clock, &strategy, &upgrade)
                        .await
                        .map_err(|e| e.to_string())
                }));
                Ok(())
            }
            Action::KillController => {
                self.kill_controller().await;
                Ok(())
            }
            Action::KillControllerAfterWrites(n) => {
                self.writes_left
                    .store(*n, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            Action::RestartController => {
                self.start_controller();
                Ok(())
            }
            Action::InjectFault(f) => {
                let mut rule = if f.verbs.is_empty() {
                    FaultRule::writes()
                } else {
                    let verbs: Vec<Verb> = f.verbs.iter().filter_map(|v| verb_of(v)).collect();
                    FaultRule::any().verbs(&verbs)
                };
                if let Some(r) = &f.resource {
                    rule = rule.resource(r.clone());
                }
                if let Some(ua) = &f.user_agent {
                    rule = rule.user_agent(ua.clone());
                }
                self.faults = self.faults.clone().rule(rule.error(f.code, f.rate));
                self.sim.set_faults(self.faults.clone());
                Ok(())
            }
            Action::ClearFaults => {
                self.faults = Faults::none();
                self.sim.set_faults(Faults::none());
                Ok(())
            }
            Action::FailNode(n) | Action::RestoreNode(n) => {
                let readiness = if matches!(action, Action::FailNode(_)) {
                    node_lifecycle::Readiness::Unknown
                } else {
                    node_lifecycle::Readiness::Ready
                };
                node_lifecycle::write_ready(&client, self.sim.clock(), n, &readiness)
                    .await
                    .map(|_| ())
                    .map_err(|source| RunError::Write {
                        line,
                        what: format!("node {n}"),
                        source,
                    })
            }
        }
    }
}

async fn taint_outdated(
    client: &Client,
    taint: &k8s_openapi::api::core::v1::Taint,
    target: &str,
    line: u64,
) -> Result<(), RunError> {
    use k8s_openapi::api::core::v1::Node;
    use kube::ResourceExt;
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&Default::default())
        .await
        .map_err(|source| RunError::Write {
            line,
            what: "listing nodes".into(),
            source,
        })?;
    for n in list.items {
        if n.labels()
            .get(node_lifecycle::GENERATION)
            .map(String::as_str)
            == Some(target)
        {
            continue;
        }
        let mut taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if taints.iter().any(|t| t.key == taint.key) {
            continue;
        }
        taints.push(taint.clone());
        nodes
            .patch(
                &n.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": taints}})),
            )
            .await
            .map_err(|source| RunError::Write {
                line,
                what: format!("tainting node {}", n.name_any()),
                source,
            })?;
    }
    Ok(())
}

/// What a run reports as it goes (for a live display, [`run_with`]).
#[derive(Clone, Debug)]
pub enum Progress {
    /// A timeline step runs now (its note, if any, and what it does).
    Step {
        at: Timestamp,
        line: u64,
        note: Option<String>,
        action: String,
    },
    /// Changes the recorder saw since the last report (every second of cluster time).
    Changes(Vec<crate::history::Change>),
    /// The timeline is done; the rollouts and the settle time remain.
    TimelineDone { at: Timestamp },
}

/// One line saying what a step does.
pub fn describe(action: &Action) -> String {
    let object = |api_version: &str, kind: &str, ns: Option<&str>, name: &str| match ns {
        Some(ns) => format!("{kind} {ns}/{name} ({api_version})"),
        None => format!("{kind} {name} ({api_version})"),
    };
    match action {
        Action::Apply(objects) => {
            let names: Vec<String> = objects
                .iter()
                .map(|o| {
                    object(
                        o["apiVersion"].as_str().unwrap_or_default(),
                        o["kind"].as_str().unwrap_or_default(),
                        o["metadata"]["namespace"].as_str(),
                        o["metadata"]["name"].as_str().unwrap_or_default(),
                    )
                })
                .collect();
            format!("apply {}", names.join(", "))
        }
        Action::Patch(p) => format!(
            "patch {}: {}",
            object(&p.api_version, &p.kind, p.namespace.as_deref(), &p.name),
            p.patch
        ),
        Action::RaiseQuota(q) => format!(
            "set ClusterQueue {}'s {} quota to {}",
            q.cluster_queue, q.resource, q.to
        ),
        Action::StartRollout(r) => format!(
            "start a rollout to node generation {} ({:?})",
            r.target, r.strategy
        ),
        Action::KillController => "kill raygate's controller".into(),
        Action::KillControllerAfterWrites(n) => {
            format!("kill raygate's controller right after its next {n} writes")
        }
        Action::RestartController => "restart raygate's controller".into(),
        Action::InjectFault(f) => format!(
            "inject HTTP {} on {:.0}% of {}",
            f.code,
            f.rate * 100.0,
            if f.verbs.is_empty() {
                "writes".to_string()
            } else {
                f.verbs.join("/")
            }
        ),
        Action::ClearFaults => "clear injected faults".into(),
        Action::FailNode(n) => format!("node {n} stops reporting (NotReady)"),
        Action::RestoreNode(n) => format!("node {n} reports Ready again"),
    }
}

/// Runs a checked scenario on `sim` (built with the CRDs its objects need): the nodes, the core
/// actors (scheduler, kubelets, LWS, disruption controller with a 5 s lag, node lifecycle), the
/// KubeRay emulator with pods, raygate's controller, the objects, the timeline; then the
/// invariants over the recorded history and the expectations.
pub async fn run(sim: Sim, checked: &Checked) -> Result<Report, RunError> {
    run_with(sim, checked, None).await
}

/// [`run`], reporting its steps and the cluster's changes to `progress` as it goes. The sim's
/// actors read their caches in-process (`Sim::in_process`: shared typed informers, no JSON
/// watches); raygate and the baselines go through `kube::Client`.
pub async fn run_with(
    sim: Sim,
    checked: &Checked,
    progress: Option<tokio::sync::mpsc::UnboundedSender<Progress>>,
) -> Result<Report, RunError> {
    sim.clone()
        .in_process(run_in_process(sim, checked, progress))
        .await
}

async fn run_in_process(
    sim: Sim,
    checked: &Checked,
    progress: Option<tokio::sync::mpsc::UnboundedSender<Progress>>,
) -> Result<Report, RunError> {
    let s = &checked.scenario;
    let client = sim.client();
    let clock = sim.clock().clone();
    let started = clock.now();
    let origin = tokio::time::Instant::now();
    for ns in &s.cluster.namespaces {
        sim.ensure_namespace(ns);
    }
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(informers::carry(scheduler::run(
        client.clone(),
        clock.clone(),
        Default::default(),
        shutdown.clone(),
    )));
    let kubelet_config = kubelet::Config::default();
    let lifecycle_config = node_lifecycle::Config::default();
    tokio::spawn(informers::carry(kubelet::run_all(
        client.clone(),
        clock.clone(),
        kubelet_config.clone(),
        shutdown.clone(),
    )));
    if pinned_kind(
        &client,
        &GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
    )
    .await
    .is_ok()
    {
        tokio::spawn(informers::carry(lws::run(
            client.clone(),
            clock.clone(),
            Duration::from_secs(30),
            shutdown.clone(),
        )));
    }
    sim.spawn_disruption_controller(disruption::Config {
        lag: Duration::from_secs(5),
    });
    sim.spawn_node_lifecycle(lifecycle_config.clone());
    sim.spawn_replicaset_controller(Default::default());
    let (emulator_tx, emulator_rx) = oneshot::channel::<()>();
    if pinned_kind(
        &client,
        &GroupVersionKind::gvk("ray.io", "v1", "RayService"),
    )
    .await
    .is_ok()
    {
        // the garbage collector deletes a deleted child's pods (KubeRay deletes the RayCluster
        // in the background and leaves its pods to it), as in a real cluster
        let ray = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", kind), plural)
        };
        sim.spawn_garbage_collector(
            garbage_collector::Config::default()
                .cover(ray("RayCluster", "rayclusters"))
                .cover(ray("RayService", "rayservices")),
        );
        tokio::spawn(informers::carry(raygate_sim::kuberay::run(
            client.clone(),
            clock.clone(),
            raygate_sim::kuberay::EmulatorConfig {
                pods: true,
                ..Default::default()
            },
            async move {
                let _ = emulator_rx.await;
            },
        )));
    }
    let served_kinds = served(&client).await;
    let recorder = Recorder::start(&sim, &served_kinds).map_err(|e| RunError::Step {
        line: 0,
        what: "recording the cluster's history".into(),
        reason: e.message,
    })?;
    let feeder = progress.clone().map(|tx| {
        let mut follower = recorder.follower();
        tokio::spawn(async move {
            loop {
                let changes = follower.next_changes();
                if !changes.is_empty() && tx.send(Progress::Changes(changes)).is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    });
    let names: Vec<(String, String, String)> = (0..s.cluster.upgrade_domains)
        .flat_map(|d| {
            (0..s.cluster.nodes_per_domain)
                .map(move |i| (format!("ud{d}-n{i}"), format!("ud-{d}"), "0".to_string()))
        })
        .collect();
    create_nodes(&client, &s.cluster, names).await?;
    // spare nodes: now, or at their `joinAt` (between the timeline's steps)
    let mut joining = None;
    if let Some(spare) = &s.cluster.spare {
        let names = (0..spare.nodes)
            .map(|i| {
                (
                    format!("spare-n{i}"),
                    spare.domain.clone(),
                    spare.generation.clone(),
                )
            })
            .collect();
        match spare.join_at {
            None => create_nodes(&client, &s.cluster, names).await?,
            Some(at) => joining = Some((at, names)),
        }
    }
    let mut story = Story {
        sim: sim.clone(),
        client: client.clone(),
        controller: None,
        writes_left: Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX)),
        restart_after_kill: Arc::default(),
        pod_gate: s.controller.pod_gate,
        node_rollouts: served_kinds.contains(&Kind::NodeRollout),
        faults: Faults::none(),
        rollouts: vec![],
        expect: Expect::default(),
        _stop: stop,
        _emulator: emulator_tx,
    };
    if s.controller.run {
        story.start_controller();
    }
    apply(&client, &s.objects, 1).await?;
    for (at, action, line) in &checked.steps {
        if let Some((join_at, _)) = &joining
            && join_at <= at
            && let Some((join_at, names)) = joining.take()
        {
            tokio::time::sleep_until(origin + join_at).await;
            create_nodes(&client, &s.cluster, names).await?;
        }
        tokio::time::sleep_until(origin + *at).await;
        if let Some(tx) = &progress {
            let _ = tx.send(Progress::Step {
                at: clock.now(),
                line: *line,
                note: checked.notes.get(line).cloned(),
                action: describe(action),
            });
        }
        story
            .act(action, *line, &s.cluster.domain_label, s.seed)
            .await?;
    }
    if let Some((join_at, names)) = joining.take() {
        tokio::time::sleep_until(origin + join_at).await;
        create_nodes(&client, &s.cluster, names).await?;
    }
    if let Some(tx) = &progress {
        let _ = tx.send(Progress::TimelineDone { at: clock.now() });
    }
    let deadline = origin + checked.within;
    let mut rollouts = vec![];
    for handle in std::mem::take(&mut story.rollouts) {
        match tokio::time::timeout_at(deadline, handle).await {
            Ok(Ok(r)) => rollouts.push(r),
            Ok(Err(e)) => rollouts.push(Err(e.to_string())),
            Err(_) => rollouts.push(Err(format!("not done within {:?}", checked.within))),
        }
    }
    tokio::time::sleep_until((tokio::time::Instant::now() + checked.settle).min(deadline)).await;
    let history = recorder.history();
    if let Some(f) = feeder {
        f.abort();
    }
    story.kill_controller().await;
    let ended = clock.now();
    let mut expect = story.expect.clone();
    expect.rollout = rollouts
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|o| Window {
            from: o.started,
            to: o.finished,
        })
        .reduce(|a, b| Window {
            from: a.from.min(b.from),
            to: a.to.max(b.to),
        });
    let violations = invariants::check_all(&history, &expect);
    let mut failures = vec![];
    let expected: Vec<Invariant> = s.expect.violations.iter().map(|v| v.invariant()).collect();
    for v in &violations {
        if !expected.contains(&v.invariant) {
            failures.push(format!("invariant broken: {v}"));
        }
    }
    for e in &expected {
        if !violations.iter().any(|v| v.invariant == *e) {
            failures.push(format!("expected {e:?} to break; it held"));
        }
    }
    for r in &rollouts {
        if let Err(e) = r {
            failures.push(format!("rollout failed: {e}"));
        }
    }
    for o in &s.expect.objects {
        let found = match resolve(&client, &o.api_version, &o.kind, 1).await {
            Ok((ar, namespaced)) => api_for(&client, &ar, namespaced, o.namespace.as_deref())
                .get_opt(&o.name)
                .await
                .ok()
                .flatten()
                .and_then(|obj| serde_json::to_value(obj).ok())
                .and_then(|v| v.pointer(&o.path).cloned()),
            Err(_) => None,
        };
        if found.as_ref() != Some(&o.equals) {
            failures.push(format!(
                "{} {}: {} is {}, expected {}",
                o.kind,
                o.name,
                o.path,
                found.map_or_else(|| "absent".to_string(), |v| v.to_string()),
                o.equals
            ));
        }
    }
    let lower_bound = checked
        .steps
        .iter()
        .any(|(_, a, _)| matches!(a, Action::StartRollout(_)))
        .then(|| {
            let mut objects = s.objects.clone();
            for (_, a, _) in &checked.steps {
                if let Action::Apply(more) = a {
                    objects.extend(more.iter().cloned());
                }
            }
            crate::bound::lower_bound(
                s.cluster.upgrade_domains,
                kubelet_config.stop_after.unwrap_or(Duration::from_secs(30)),
                lifecycle_config.reboot + lifecycle_config.lag,
                kubelet_config.start_delay,
                &objects,
                s.cluster.spare.is_some(),
            )
        });
    Ok(Report {
        name: s.name.clone(),
        started,
        ended,
        history,
        violations,
        rollouts,
        lower_bound,
        failures,
    })
}

#[cfg(test)]
mod tests;
