//! `ray.io/v1` RayService and RayCluster (KubeRay v1.7.0, `ray-operator/apis/ray/v1`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Fields of an upstream object that raygate does not interpret, kept verbatim.
pub type Other = BTreeMap<String, Value>;

/// Label on a child RayCluster naming the custom resource that created it.
pub const ORIGINATED_FROM_CR_NAME_LABEL: &str = "ray.io/originated-from-cr-name";
/// Label on a child RayCluster naming the kind of custom resource that created it.
pub const ORIGINATED_FROM_CRD_LABEL: &str = "ray.io/originated-from-crd";
/// Value of [`ORIGINATED_FROM_CRD_LABEL`] on RayService children.
pub const ORIGINATED_FROM_RAYSERVICE: &str = "RayService";
/// Annotation holding KubeRay's hash of `rayClusterConfig` without replicas.
pub const HASH_WITHOUT_REPLICAS_ANNOTATION: &str =
    "ray.io/hash-without-replicas-and-workers-to-delete";
/// Annotation holding the number of worker groups a child was created with.
pub const NUM_WORKER_GROUPS_ANNOTATION: &str = "ray.io/num-worker-groups";
/// Annotation holding the KubeRay version that created a child.
pub const KUBERAY_VERSION_ANNOTATION: &str = "ray.io/kuberay-version";
/// RayService annotation: how long KubeRay waits for a first cluster before it fails the service
/// (a Go duration or whole seconds).
pub const INITIALIZING_TIMEOUT_ANNOTATION: &str = "ray.io/initializing-timeout";
/// The init container KubeRay v1.7.0 adds to every worker pod (`DefaultWorkerPodTemplate`, with
/// `ENABLE_INIT_CONTAINER_INJECTION` on, the default).
pub const WAIT_GCS_READY_CONTAINER: &str = "wait-gcs-ready";

/// RayService spec (`RayServiceSpec`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ray.io",
    version = "v1",
    kind = "RayService",
    derive = "PartialEq",
    namespaced,
    status = "RayServiceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceSpec {
    /// The cluster template; its `suspend` is copied onto a child only when KubeRay creates it.
    pub ray_cluster_config: RayClusterSpec,
    /// Top-level suspend (KubeRay v1.7+): true deletes every child and owned Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<RayServiceUpgradeStrategy>,
    /// Seconds KubeRay waits before deleting an old child (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_deletion_delay_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_config_v2: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// `RayServiceUpgradeStrategy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceUpgradeStrategy {
    /// `NewCluster`, `NewClusterWithIncrementalUpgrade` or `None`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_upgrade_options: Option<ClusterUpgradeOptions>,
    #[serde(flatten)]
    pub other: Other,
}

/// `ClusterUpgradeOptions` (incremental upgrades only).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUpgradeOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge_percent: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_size_percent: Option<i32>,
    #[serde(flatten)]
    pub other: Other,
}

/// `RayServiceStatuses`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_service_status: Option<RayServiceClusterStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_service_status: Option<RayServiceClusterStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_serve_endpoints: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(flatten)]
    pub other: Other,
}

/// `RayServiceStatus`: the status of the active or the pending child.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_status: Option<RayClusterStatus>,
    #[serde(flatten)]
    pub other: Other,
}

/// RayCluster spec (`RayClusterSpec`), also the RayService's `rayClusterConfig`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ray.io",
    version = "v1",
    kind = "RayCluster",
    derive = "PartialEq",
    namespaced,
    status = "RayClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterSpec {
    pub head_group_spec: HeadGroupSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_group_specs: Option<Vec<WorkerGroupSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_in_tree_autoscaling: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler_options: Option<AutoscalerOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// `HeadGroupSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeadGroupSpec {
    pub template: PodTemplateSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_start_params: Option<BTreeMap<String, String>>,
    #[serde(flatten)]
    pub other: Other,
}

/// `WorkerGroupSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroupSpec {
    pub group_name: String,
    /// Desired replicas; KubeRay defaults it to 0 (the admission layer treats missing as `minReplicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    /// Pods per replica (multi-host groups); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_of_hosts: Option<i32>,
    /// Per-group suspend (RayJob deletion policy); a suspended group runs no pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    pub template: PodTemplateSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_strategy: Option<ScaleStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_start_params: Option<BTreeMap<String, String>>,
    #[serde(flatten)]
    pub other: Other,
}

/// `ScaleStrategy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_to_delete: Option<Vec<String>>,
    #[serde(flatten)]
    pub other: Other,
}

/// `AutoscalerOptions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalerOptions {
    /// Resources of the autoscaler sidecar KubeRay adds to the head pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// `RayClusterStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterStatus {
    /// `ready` | `suspended` (deprecated `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_worker_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_worker_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_worker_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_worker_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_worker_replicas: Option<i32>,
    #[serde(
        default,
        rename = "desiredCPU",
        skip_serializing_if = "Option::is_none"
    )]
    pub desired_cpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_memory: Option<Quantity>,
    #[serde(
        default,
        rename = "desiredGPU",
        skip_serializing_if = "Option::is_none"
    )]
    pub desired_gpu: Option<Quantity>,
    #[serde(
        default,
        rename = "desiredTPU",
        skip_serializing_if = "Option::is_none"
    )]
    pub desired_tpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(flatten)]
    pub other: Other,
}
