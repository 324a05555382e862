//! `kueue.x-k8s.io/v1beta2` kinds (Kueue v0.19, `apis/kueue/v1beta2`): the fields admission needs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Label on a job (and the Workloads raygate makes for it) naming its LocalQueue.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Label naming a WorkloadPriorityClass for a job.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// Annotation marking an elastic job and its workload slices.
pub const ELASTIC_JOB_ANNOTATION: &str = "kueue.x-k8s.io/elastic-job";
/// Annotation holding the name of the root slice of a chain.
pub const WORKLOAD_SLICE_NAME_ANNOTATION: &str = "kueue.x-k8s.io/workload-slice-name";
/// Annotation on a replacement slice naming `<namespace>/<name>` of the slice it replaces.
pub const WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION: &str =
    "kueue.x-k8s.io/workload-slice-replacement-for";

/// Workload condition types.
pub mod condition {
    pub const QUOTA_RESERVED: &str = "QuotaReserved";
    pub const ADMITTED: &str = "Admitted";
    pub const EVICTED: &str = "Evicted";
    pub const PREEMPTED: &str = "Preempted";
    pub const FINISHED: &str = "Finished";
    pub const PODS_READY: &str = "PodsReady";
    pub const REQUEUED: &str = "Requeued";
}

/// Workload condition reasons raygate writes or reads.
pub mod reason {
    pub const QUOTA_RESERVED: &str = "QuotaReserved";
    pub const ADMITTED: &str = "Admitted";
    pub const PENDING: &str = "Pending";
    pub const INADMISSIBLE: &str = "Inadmissible";
    pub const PREEMPTED: &str = "Preempted";
    pub const CLUSTER_QUEUE_STOPPED: &str = "ClusterQueueStopped";
    pub const LOCAL_QUEUE_STOPPED: &str = "LocalQueueStopped";
    pub const DEACTIVATED: &str = "Deactivated";
    pub const WORKLOAD_SLICE_REPLACED: &str = "WorkloadSliceReplaced";
    pub const OUT_OF_SYNC: &str = "OutOfSync";
}

/// Schema of a pod template in raygate's generated CRDs: an object kept as is.
///
/// Kueue's own CRD carries the full PodTemplateSpec schema (≈1 MB); raygate's CRDs, used only when
/// Kueue is not installed, accept any object there and leave pod validation to the pod API.
fn pod_template_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

// ---------------------------------------------------------------------------------------------
// ResourceFlavor
// ---------------------------------------------------------------------------------------------

/// `ResourceFlavorSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    /// Labels of the nodes this flavor stands for; a PodSet's nodeSelector must not contradict them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_name: Option<String>,
    /// Taints of the nodes this flavor stands for (used by Kueue's flavor matching).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub node_taints: Option<Vec<k8s_openapi::api::core::v1::Taint>>,
    /// Tolerations added to the pods of a PodSet admitted on this flavor (as nodeLabels become
    /// their nodeSelector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub tolerations: Option<Vec<k8s_openapi::api::core::v1::Toleration>>,
}

// ---------------------------------------------------------------------------------------------
// ClusterQueue and Cohort
// ---------------------------------------------------------------------------------------------

/// `ClusterQueueSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub resource_groups: Vec<ResourceGroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queueing_strategy: Option<QueueingStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<ClusterQueuePreemption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_policy: Option<StopPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor_fungibility: Option<FlavorFungibility>,
}

/// `QueueingStrategy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum QueueingStrategy {
    /// Strict order: a head that does not fit blocks the queue.
    StrictFIFO,
    /// Order by priority and time, but a head that does not fit lets later ones through.
    #[default]
    BestEffortFIFO,
}

/// `StopPolicy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StopPolicy {
    #[default]
    None,
    /// Admit nothing new; admitted workloads keep running.
    Hold,
    /// Admit nothing new and evict what is admitted.
    HoldAndDrain,
}

/// `ResourceGroup`: resources whose flavors are assigned together.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub covered_resources: Vec<String>,
    /// Ordered: the first flavor that fits wins.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub flavors: Vec<FlavorQuotas>,
}

/// `FlavorQuotas`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuotas {
    pub name: String,
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub resources: Vec<ResourceQuota>,
}

/// `ResourceQuota`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_quota: Option<Quantity>,
    /// Unset: no limit on borrowing from the cohort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<Quantity>,
    /// Unset: all unused nominal quota can be lent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Quantity>,
}

/// `ClusterQueuePreemption`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueuePreemption {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_within_cohort: Option<ReclaimWithinCohort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_cluster_queue: Option<WithinClusterQueue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

/// `PreemptionPolicy` of `reclaimWithinCohort`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ReclaimWithinCohort {
    #[default]
    Never,
    LowerPriority,
    Any,
}

/// `PreemptionPolicy` of `withinClusterQueue`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WithinClusterQueue {
    #[default]
    Never,
    LowerPriority,
    LowerOrNewerEqualPriority,
}

/// `BorrowWithinCohort`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BorrowWithinCohort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_threshold: Option<i32>,
}

/// `FlavorFungibility`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorFungibility {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_can_borrow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_can_preempt: Option<String>,
    /// `BorrowingOverPreemption` (Kueue's default) or `PreemptionOverBorrowing`: which flavor
    /// wins when every candidate needs borrowing, preemption or both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference: Option<String>,
}

/// `ClusterQueueStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub flavors_reservation: Vec<FlavorUsage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub flavors_usage: Vec<FlavorUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_workloads: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserving_workloads: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_workloads: Option<i32>,
}

/// `FlavorUsage`: usage of one flavor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorUsage {
    pub name: String,
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub resources: Vec<ResourceUsage>,
}

/// `ResourceUsage`: `total` in use, of which `borrowed` from the cohort.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowed: Option<Quantity>,
}

/// `CohortSpec` (a cohort tree through `parentName`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CohortSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_name: Option<String>,
    /// Quota the cohort itself holds and lends to its members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub resource_groups: Vec<ResourceGroup>,
}

// ---------------------------------------------------------------------------------------------
// LocalQueue
// ---------------------------------------------------------------------------------------------

/// `LocalQueueSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_policy: Option<StopPolicy>,
}

/// `LocalQueueStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub flavors_reservation: Vec<LocalQueueFlavorUsage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub flavors_usage: Vec<LocalQueueFlavorUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_workloads: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserving_workloads: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_workloads: Option<i32>,
}

/// `LocalQueueFlavorUsage`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueFlavorUsage {
    pub name: String,
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub resources: Vec<LocalQueueResourceUsage>,
}

/// `LocalQueueResourceUsage`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueResourceUsage {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Quantity>,
}

// ---------------------------------------------------------------------------------------------
// WorkloadPriorityClass
// ---------------------------------------------------------------------------------------------

/// `WorkloadPriorityClass` fields: `value` and `description` sit at the top level (no spec).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPriorityClassFields {
    /// The priority of Workloads that refer to this class.
    pub value: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------------------------

/// `WorkloadSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    /// At most 8, as in Kueue's CRD.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"], "maxItems" = 8))]
    pub pod_sets: Vec<PodSet>,
    /// The LocalQueue, in the Workload's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_ref: Option<PriorityClassRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// False deactivates (and evicts) the Workload. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
}

/// `PodSet`: `count` pods of one template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// At most 63 characters, as in Kueue's CRD.
    #[schemars(extend("maxLength" = 63))]
    pub name: String,
    #[schemars(schema_with = "pod_template_schema")]
    pub template: PodTemplateSpec,
    pub count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_count: Option<i32>,
}

/// `PriorityClassRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PriorityClassRef {
    /// `kueue.x-k8s.io` or `scheduling.k8s.io`.
    pub group: String,
    /// `WorkloadPriorityClass` or `PriorityClass`.
    pub kind: String,
    pub name: String,
}

/// `WorkloadStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// At most 16, as in Kueue's CRD.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"], "maxItems" = 16))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub reclaimable_pods: Vec<ReclaimablePod>,
    /// Kueue's requeuing backoff: set when `waitForPodsReady` evicts the Workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_state: Option<RequeueState>,
}

/// `RequeueState`: how often the Workload was requeued after a `waitForPodsReady` eviction, and
/// not before when it may be admitted again.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequeueState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// `Admission`: where the Workload's quota is reserved.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    pub cluster_queue: String,
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub pod_set_assignments: Vec<PodSetAssignment>,
}

/// `PodSetAssignment`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignment {
    pub name: String,
    /// Resource name → flavor name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flavors: BTreeMap<String, String>,
    /// Total over the PodSet's admitted pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_usage: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
}

/// `ReclaimablePod`: pods of a PodSet whose quota can be released early.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimablePod {
    pub name: String,
    pub count: i32,
}

// ---------------------------------------------------------------------------------------------
// Root objects
// ---------------------------------------------------------------------------------------------

crate::kueue_object!(
    /// `ResourceFlavor`: a kind of node quota is counted in.
    ResourceFlavor, ResourceFlavorSpec, no_status, "resourceflavors", Cluster
);
crate::kueue_object!(
    /// `ClusterQueue`: a pool of quota.
    ClusterQueue, ClusterQueueSpec, ClusterQueueStatus, "clusterqueues", Cluster
);
crate::kueue_object!(
    /// `Cohort`: ClusterQueues (and child cohorts) that borrow from each other.
    Cohort, CohortSpec, no_status, "cohorts", Cluster
);
crate::kueue_object!(
    /// `LocalQueue`: a namespace's entry into a ClusterQueue.
    LocalQueue, LocalQueueSpec, LocalQueueStatus, "localqueues", Namespaced
);
crate::kueue_object!(
    /// `Workload`: PodSets asking for quota.
    Workload, WorkloadSpec, WorkloadStatus, "workloads", Namespaced
);
crate::kueue_object!(
    /// `WorkloadPriorityClass`: a named priority value.
    WorkloadPriorityClass, WorkloadPriorityClassFields, flat, "workloadpriorityclasses", Cluster
);
