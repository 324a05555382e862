//! `raygate.io/v1alpha1` `NodeRollout`: an upgrade-domain aware drain of a set of nodes, run by
//! raygate's controller (or `raygate drain run`). Cluster-scoped, like the nodes it drains.
//!
//! The spec is what `raygate drain plan` takes as flags, plus Service Fabric's monitored-upgrade
//! knobs; the status is where the rollout is, domain by domain. Durations are strings in Go's
//! `time.ParseDuration` form (`30s`, `5m`, `1h30m`), as `metav1.Duration` fields are written.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of raygate's own kinds.
pub const GROUP: &str = "raygate.io";
/// The default node label naming a node's upgrade domain.
pub const DEFAULT_UPGRADE_DOMAIN_LABEL: &str = "raygate.io/upgrade-domain";
/// The default label raygate puts on drained nodes for an upgrade agent (`reboot`/`replace`).
pub const DEFAULT_UPGRADE_LABEL: &str = "raygate.io/upgrade";
/// Its default value.
pub const DEFAULT_UPGRADE_VALUE: &str = "requested";
/// The taint `taintOutdated` puts on the target nodes (effect `NoSchedule`).
pub const OUTDATED_TAINT_KEY: &str = "raygate.io/outdated";

/// Go's `time.ParseDuration` syntax, non-negative (what the duration fields accept).
pub const DURATION_PATTERN: &str = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";

/// The phases in which a rollout that started is active: its selection (`udLabel`,
/// `nodeSelector`, `generation`) is fixed then (see [`NodeRolloutStatus::selection`]).
pub const ACTIVE_PHASES: [&str; 2] = ["Running", "Paused"];

/// The API server's messages for a selection field changed while the rollout is active.
pub const SELECTION_FIXED_UD_LABEL: &str = "udLabel cannot change while the rollout is active \
     (status.phase Running or Paused after it started): its upgrade domains were planned with it; \
     create a new NodeRollout instead";
pub const SELECTION_FIXED_NODE_SELECTOR: &str = "nodeSelector cannot change while the rollout is \
     active (status.phase Running or Paused after it started): its nodes were planned with it; \
     create a new NodeRollout instead";
pub const SELECTION_FIXED_GENERATION: &str = "generation cannot change while the rollout is active \
     (status.phase Running or Paused after it started): its target generation was planned with \
     it; create a new NodeRollout instead";

/// A transition rule: `unchanged` must hold while the stored object is active (it started,
/// which the status's `selection` record says, and its phase is Running or Paused). The status
/// in `oldSelf` is the stored one: an update of the object keeps it, and an update of the status
/// leaves the spec as it is.
fn selection_fixed(unchanged: &str) -> String {
    format!(
        "!(has(oldSelf.status) && has(oldSelf.status.selection) && has(oldSelf.status.phase) && \
         oldSelf.status.phase in ['{}', '{}']) || ({unchanged})",
        ACTIVE_PHASES[0], ACTIVE_PHASES[1]
    )
}

fn default_domain_label() -> String {
    DEFAULT_UPGRADE_DOMAIN_LABEL.to_string()
}

fn default_max_unavailable_domains() -> i32 {
    1
}

fn default_upgrade_label() -> String {
    DEFAULT_UPGRADE_LABEL.to_string()
}

fn default_upgrade_value() -> String {
    DEFAULT_UPGRADE_VALUE.to_string()
}

/// A NodeRollout: which nodes to drain, upgrade domain by upgrade domain, and how.
// clippy reads the printer columns' repeated `type_ = "string"` as a duplicated attribute
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "raygate.io",
    version = "v1alpha1",
    kind = "NodeRollout",
    plural = "noderollouts",
    shortname = "nro",
    status = "NodeRolloutStatus",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Where the rollout is: Pending, Running, Paused, Completed or Failed"
    ),
    printcolumn(
        name = "Domain",
        type_ = "string",
        json_path = ".status.currentDomain",
        description = "The upgrade domain(s) being drained now"
    ),
    printcolumn(
        name = "Progress",
        type_ = "string",
        json_path = ".status.progress",
        description = "Domains done of all domains"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time this rollout was created"
    ),
    validation = Rule::new(selection_fixed("self.spec.udLabel == oldSelf.spec.udLabel")).message(SELECTION_FIXED_UD_LABEL).field_path(".spec.udLabel"),
    validation = Rule::new(selection_fixed("has(self.spec.generation) == has(oldSelf.spec.generation) && (!has(self.spec.generation) || self.spec.generation == oldSelf.spec.generation)")).message(SELECTION_FIXED_GENERATION).field_path(".spec.generation"),
    validation = Rule::new(selection_fixed("has(self.spec.nodeSelector) == has(oldSelf.spec.nodeSelector) && (!has(self.spec.nodeSelector) || self.spec.nodeSelector == oldSelf.spec.nodeSelector)")).message(SELECTION_FIXED_NODE_SELECTOR).field_path(".spec.nodeSelector"),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.domainOrder != 'Explicit' || (has(self.explicitOrder) && size(self.explicitOrder) > 0)").message("domainOrder Explicit needs explicitOrder: the upgrade domains in the order to drain them"),
    validation = Rule::new("self.domainOrder == 'Explicit' || !has(self.explicitOrder) || size(self.explicitOrder) == 0").message("explicitOrder is only read with domainOrder: Explicit"),
    validation = Rule::new("self.domainOrder != 'OldestGeneration' || has(self.generation)").message("domainOrder OldestGeneration needs generation (where a node's generation is read)"),
    validation = Rule::new("self.handOff.mode == 'None' || has(self.generation)").message("handOff Reboot and Replace wait for nodes at the target generation: set generation"),
    validation = Rule::new("has(self.nodeSelector) || has(self.generation)").message("say which nodes to roll: nodeSelector, generation, or both"),
)]
pub struct NodeRolloutSpec {
    /// The nodes to consider (an empty selector: every node). With `generation`, only the
    /// outdated ones among them are drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Drain only outdated nodes: those whose generation is not the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<GenerationSpec>,
    /// The node label whose value names a node's upgrade domain.
    #[serde(default = "default_domain_label")]
    #[x_kube(validation = Rule::new("self != ''").message("udLabel must name a node label"))]
    pub ud_label: String,
    /// The order in which domains are drained.
    #[serde(default)]
    pub domain_order: DomainOrderSpec,
    /// With `domainOrder: Explicit`: every domain holding a target node, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub explicit_order: Vec<String>,
    /// Taint every target node `raygate.io/outdated:NoSchedule` from the rollout's first step,
    /// so evicted groups and new work avoid the old generation (a group evicted from one domain
    /// does not land on a later one, to be disrupted again). Absent: tainted when the cluster
    /// has room for the evicted groups outside the target nodes (the room check), otherwise not,
    /// with a Warning Event `TaintSkipped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint_outdated: Option<bool>,
    /// What happens to a drained domain's nodes.
    #[serde(default)]
    pub hand_off: HandOffSpec,
    /// `kubectl drain`'s pod flags, same names.
    #[serde(default)]
    pub drain: DrainFlags,
    /// How groups and their representatives are recognised (the contract preflight). Absent: no
    /// preflight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupsSpec>,
    /// After a domain's hand-off, wait this long before its first health check (Service
    /// Fabric `HealthCheckWaitDuration`; default 0s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub health_check_wait: Option<String>,
    /// How long a domain must stay healthy before the next starts (`HealthCheckStableDuration`).
    /// Default: the representatives' readiness probes (period × failureThreshold, the slowest)
    /// plus the disruption controller's lag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub health_check_stable: Option<String>,
    /// Unhealthy this long is a failure (`HealthCheckRetryTimeout`; default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub health_check_retry_timeout: Option<String>,
    /// One domain, from cordon until its last pod is gone: the managed node pools' drain timeout
    /// (AKS's is 30 minutes). Past it, `failureAction` decides. Default `30m`; `0`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub drain_timeout: Option<String>,
    /// One domain, from cordon to the end of its health check (`UpgradeDomainTimeout`; default: no
    /// limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub domain_timeout: Option<String>,
    /// The whole rollout (`UpgradeTimeout`; default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub rollout_timeout: Option<String>,
    /// What a failure (a timeout, a health check that never passes) does.
    #[serde(default)]
    pub failure_action: FailureActionSpec,
    /// Domains drained (between cordon and the end of their health check) at once.
    #[serde(default = "default_max_unavailable_domains")]
    #[x_kube(validation = Rule::new("self >= 1").message("maxUnavailableDomains must be at least 1"))]
    pub max_unavailable_domains: i32,
    /// Pause after each domain's health check until resumed (Service Fabric's manual mode).
    #[serde(default)]
    pub manual: bool,
    /// Stop starting new work; set back to false to resume.
    #[serde(default)]
    pub paused: bool,
    /// RayServices whose serving cluster a domain holds: moved off it before it drains.
    #[serde(default)]
    pub ray_services: RayServicesSpec,
}

/// How a domain's drain treats a RayService serving from it: before anything of the domain is
/// evicted, KubeRay's zero-downtime upgrade moves the service to a new cluster off the domain
/// (its surge charged to quota by raygate's gate like any upgrade), switches traffic to it and
/// deletes the old cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RayServicesSpec {
    /// Move a RayService whose active cluster's head, or every serving pod, is in a domain
    /// before the domain drains (default true). `false`: its pods are evicted like any other.
    #[serde(default = "default_true")]
    pub r#move: bool,
    /// What a domain does while a move cannot finish (the new cluster held for quota, or no new
    /// cluster started): `Wait` (default) holds the domain until `moveTimeout`, then
    /// `failureAction` decides; `Interrupt` drains the domain anyway, with a Warning Event
    /// `ServingInterrupted` naming the service (the move finishes when its new cluster can run).
    #[serde(default)]
    pub when_move_held: WhenMoveHeld,
    /// How long a move may take, from its start until the old cluster's pods are gone (default
    /// `20m`; `0`: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub move_timeout: Option<String>,
}

impl Default for RayServicesSpec {
    fn default() -> Self {
        RayServicesSpec {
            r#move: true,
            when_move_held: WhenMoveHeld::Wait,
            move_timeout: None,
        }
    }
}

fn default_true() -> bool {
    true
}

/// What a domain does while a RayService's move cannot finish.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenMoveHeld {
    /// Hold the domain (`Blocked`, reason `RayServiceMoveHeld`) until the move finishes or
    /// `moveTimeout` passes.
    #[default]
    Wait,
    /// Drain the domain anyway: the service stops serving until its pods are Ready elsewhere.
    Interrupt,
}

/// Where a node's generation is read, and which generation is current.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.label) != has(self.nodeInfo)").message("set exactly one of label or nodeInfo"),
)]
pub struct GenerationSpec {
    /// A node label whose value is the node's generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// A `status.nodeInfo` field whose value is the node's generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfoFieldSpec>,
    /// The current generation; nodes at any other are outdated. Absent: the newest among the
    /// selected nodes (values compare as versions: `v1.9` < `v1.10`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_value: Option<String>,
}

/// A `status.nodeInfo` field.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum NodeInfoFieldSpec {
    KubeletVersion,
    OsImage,
    KernelVersion,
    ContainerRuntimeVersion,
}

/// The order in which domains are drained.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DomainOrderSpec {
    /// By domain name.
    #[default]
    Name,
    /// Domains whose drain disrupts the fewest protected groups first.
    FewestProtectedGroups,
    /// Domains holding the oldest generation first (needs `generation`).
    OldestGeneration,
    /// `explicitOrder`.
    Explicit,
}

/// Who upgrades a drained domain's nodes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HandOffSpec {
    #[serde(default)]
    pub mode: HandOffMode,
    /// The label put on drained nodes for the upgrade agent (`Reboot`, `Replace`).
    #[serde(default = "default_upgrade_label")]
    pub label: String,
    /// Its value.
    #[serde(default = "default_upgrade_value")]
    pub value: String,
    /// How long the drained nodes may take to come back (`Reboot`) or be replaced (`Replace`)
    /// before `failureAction` decides (default `1h`; `0`: no limit). Past 10 minutes (Cluster
    /// API's default `nodeStartupTimeout`) the rollout is `Blocked`, reason `NodeNotReturning`,
    /// naming the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub timeout: Option<String>,
}

impl Default for HandOffSpec {
    fn default() -> Self {
        HandOffSpec {
            mode: HandOffMode::None,
            label: default_upgrade_label(),
            value: default_upgrade_value(),
            timeout: None,
        }
    }
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HandOffMode {
    /// Drain only: the nodes stay cordoned (and tainted) for the infrastructure to remove.
    #[default]
    None,
    /// Label the drained nodes; wait until each is Ready at the target generation; uncordon.
    Reboot,
    /// Label the drained nodes; the infrastructure replaces them; wait for the domain's
    /// capacity to return at the target generation.
    Replace,
}

/// `kubectl drain`'s flags that decide which pods are drained (same names, same defaults).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrainFlags {
    /// `--ignore-daemonsets`.
    #[serde(default)]
    pub ignore_daemonsets: bool,
    /// `--delete-emptydir-data`.
    #[serde(default)]
    pub delete_emptydir_data: bool,
    /// `--force`.
    #[serde(default)]
    pub force: bool,
    /// `--pod-selector`: a label query ("" = every pod).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_selector: String,
    /// `--skip-wait-for-delete-timeout`, in seconds (0 = never skip).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self >= 0").message("skipWaitForDeleteTimeoutSeconds must not be negative"))]
    pub skip_wait_for_delete_timeout_seconds: i64,
    /// `--grace-period`: the seconds each evicted pod gets to terminate (the Eviction's
    /// `deleteOptions.gracePeriodSeconds`). Unset or negative: the pod's own
    /// `terminationGracePeriodSeconds` (kubectl's default `-1`); `0`: deleted at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
}

/// How the preflight recognises groups.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.preset != 'Custom' || (has(self.groupLabel) && has(self.representative))").message("preset Custom needs groupLabel and representative"),
)]
pub struct GroupsSpec {
    #[serde(default)]
    pub preset: GroupPreset,
    /// `Custom`: the pod label whose value names a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_label: Option<String>,
    /// `Custom`: a label query selecting a group's representative (e.g. `role=leader`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub representative: Option<String>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupPreset {
    /// Every preset below but `Custom`: LeaderWorkerSet groups and KubeRay multi-host replicas,
    /// each pod by the group label it carries.
    #[default]
    All,
    /// LeaderWorkerSet: `leaderworkerset.sigs.k8s.io/group-key`, the leader represents.
    LeaderWorkerSet,
    /// KubeRay multi-host replicas: `ray.io/worker-group-replica-name`, host 0 represents.
    KubeRay,
    /// `groupLabel` and `representative`.
    Custom,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureActionSpec {
    /// Stop where it is (nodes stay cordoned) until resumed.
    #[default]
    Pause,
    /// End the rollout: uncordon the nodes of domains not yet handed off.
    Abort,
}

/// Where the rollout is.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeRolloutStatus {
    /// `Pending`, `Running`, `Paused`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The domain(s) being drained now, comma-separated (the printer column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_domain: Option<String>,
    /// Domains done of all domains, e.g. `2/4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// The generation nodes are brought to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_generation: Option<String>,
    /// Every domain of the plan, in drain order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub domains: Vec<DomainStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What the rollout selected when it started (`udLabel`, `nodeSelector`, `generation`), as
    /// its plan used it. While the rollout is active (`Running` or `Paused`) these spec fields
    /// are fixed: the API server refuses a change (a CEL transition rule), and the controller
    /// pauses a rollout whose spec differs from this record (condition `Ready=False`, reason
    /// `SelectionChanged`) until the spec says the same again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<RolloutSelection>,
    /// The drain engine's state (compact JSON), written by the controller with every status so
    /// a new leader goes on where the last one stopped. Not an interface: read the fields above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// The spec fields that say which nodes a rollout drains and how they fall into upgrade domains.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSelection {
    pub ud_label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<GenerationSpec>,
}

impl RolloutSelection {
    /// The selection `spec` makes.
    pub fn of(spec: &NodeRolloutSpec) -> Self {
        RolloutSelection {
            ud_label: spec.ud_label.clone(),
            node_selector: spec.node_selector.clone(),
            generation: spec.generation.clone(),
        }
    }
}

/// One upgrade domain's progress.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DomainStatus {
    pub name: String,
    /// `Pending`, `Draining`, `HandingOff`, `HealthCheck`, `AwaitingResume`, `Done` or
    /// `Aborted`.
    pub phase: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub nodes: Vec<String>,
    /// Protected (phase 1) pods evicted / planned.
    #[serde(default)]
    pub protected_evicted: i32,
    #[serde(default)]
    pub protected_total: i32,
    /// Other (phase 2) pods evicted / planned.
    #[serde(default)]
    pub other_evicted: i32,
    #[serde(default)]
    pub other_total: i32,
    /// Pods the plan found that tolerate the cordon (and the taint), e.g. with a toleration
    /// `operator: Exists` and no key (`namespace/name`, the first 10): each is evicted once; a
    /// replacement scheduled back onto the domain's cordoned nodes is left there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub tolerating_pods: Vec<String>,
    /// Workloads whose every serving pod is in this domain with no budget keeping one running
    /// (a RayCluster's serve pods, a one-replica Deployment): draining the domain interrupts
    /// each, for at least its replacement's readiness probe (`<workload>: N pod(s), at least S
    /// s`, the delay left out without a probe; the first 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub serving_at_risk: Vec<String>,
    /// The PodDisruptionBudget refusing evictions and its message ("needs 3 healthy pods and
    /// has 3").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// What it does or waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
