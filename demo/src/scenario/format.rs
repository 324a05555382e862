//! The scenario file format: a cluster shape, objects, a timeline of steps and expectations, as
//! serde reads them from YAML; and [`Checked`], a scenario whose timeline [`super::parse`] checked.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::invariants::Invariant;

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
    /// nodeRollout: `spec.rayServices` (default: move serving RayServices, wait while a move
    /// is held, for at most 20m).
    #[serde(default)]
    pub ray_services: Option<raygate::types::rollout::RayServicesSpec>,
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
    StoppedServing,
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
            InvariantName::StoppedServing => Invariant::StoppedServing,
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

/// A Go duration (`1h2m3s`) as a `Duration`.
pub(super) fn duration(text: &str) -> Result<Duration, String> {
    let d = raygate::drain::parse_duration(text)?;
    Duration::try_from(d).map_err(|e| e.to_string())
}
