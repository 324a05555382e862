//! KubeRay v1.7's Ray pods, pure: the pods a RayCluster's `reconcilePods` creates and deletes
//! (raycluster_controller.go ~L931–1455, with the `RayMultiHostIndexing` and
//! `RayClusterStatusConditions` gates on, their v1.7 defaults), the pod objects `buildHeadPod` /
//! `buildWorkerPod` make (common/pod.go: `labelPod`, `DefaultWorkerPodTemplate`, `BuildPod`), and
//! what `calculateStatus` reads back from them.
//!
//! Left out, as the simulated cluster has no use for them: containers' commands, env, probes and
//! volumes KubeRay injects, Services, the Recreate upgrade strategy and batch schedulers. The
//! pods keep their template's spec (containers, resources, probes, scheduling gates, grace
//! period, placement); the head gets the autoscaler sidecar (name and resources) when in-tree
//! autoscaling is on, every worker the `wait-gcs-ready` init container (name, image, resources).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use serde_json::Value;

use raygate::types::ray::{
    ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE, RayCluster, WorkerGroupSpec,
};

pub const IS_RAY_NODE_LABEL: &str = "ray.io/is-ray-node";
pub const CLUSTER_LABEL: &str = "ray.io/cluster";
pub const NODE_TYPE_LABEL: &str = "ray.io/node-type";
pub const GROUP_LABEL: &str = "ray.io/group";
pub const IDENTIFIER_LABEL: &str = "ray.io/identifier";
pub const SERVE_LABEL: &str = "ray.io/serve";
/// `RayWorkerReplicaNameKey`: the replica (group of `numOfHosts` pods) a multi-host worker is in.
pub const REPLICA_NAME_LABEL: &str = "ray.io/worker-group-replica-name";
/// `RayWorkerReplicaIndexKey`: the replica's index in its worker group (every worker).
pub const REPLICA_INDEX_LABEL: &str = "ray.io/worker-group-replica-index";
/// `RayHostIndexKey`: the host's index within its replica (multi-host workers).
pub const HOST_INDEX_LABEL: &str = "ray.io/replica-host-index";
/// The head's group label value (`RayNodeHeadGroupLabelValue`).
pub const HEAD_GROUP: &str = "headgroup";
/// `DisableProvisionedHeadRestartAnnotationKey`.
const DISABLE_HEAD_RESTART: &str = "ray.io/disable-provisioned-head-restart";

/// What one `reconcilePods` pass does.
#[derive(Debug, Default)]
pub(crate) struct PodPlan {
    /// Pods to create (with `generateName`).
    pub create: Vec<Pod>,
    /// Names of pods to delete.
    pub delete: Vec<String>,
    /// The pass stopped early with an error and requeues (as KubeRay returns an error).
    pub requeue: Option<String>,
}

/// Where the cluster is in its suspend state machine (`utils.FindRayClusterSuspendStatus`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SuspendStatus {
    None,
    Suspending,
    Suspended,
}

fn label<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn is_terminal(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Failed" | "Succeeded"))
}

fn is_deleting(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

/// `shouldDeletePod`, as far as the sim's pods go: a pod in a terminal phase.
fn should_delete(p: &Pod) -> bool {
    is_terminal(p)
}

/// `utils.PodName(prefix, type, true)`: the `generateName` of a Ray pod.
pub(crate) fn generate_name(prefix: &str, node_type: &str) -> String {
    let prefix: String = prefix.chars().take(50).collect();
    format!("{prefix}-{node_type}-").to_lowercase()
}

/// `utils.CheckLabel` (also `TrimJobName`): the last 63 characters, a leading punctuation
/// character (Go's `unicode.IsPunct`) replaced by `r`.
pub(crate) fn check_label(s: &str) -> String {
    let skip = s.chars().count().saturating_sub(63);
    let mut chars = s.chars().skip(skip).peekable();
    let symbol = |c: char| matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '`' | '|' | '~');
    let mut out = String::with_capacity(63);
    if chars
        .next_if(|c| c.is_ascii_punctuation() && !symbol(*c))
        .is_some()
    {
        out.push('r');
    }
    out.extend(chars);
    out
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `labelPod`: KubeRay's labels, then the template's (merged with the group's top-level
/// `labels`), which cannot override node type, group or cluster.
fn label_pod(
    node_type: &str,
    cluster: &str,
    group: &str,
    overrides: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = [
        (IS_RAY_NODE_LABEL, "yes".to_string()),
        (CLUSTER_LABEL, cluster.to_string()),
        (NODE_TYPE_LABEL, node_type.to_string()),
        (GROUP_LABEL, group.to_string()),
        (
            IDENTIFIER_LABEL,
            check_label(&format!("{cluster}-{node_type}")),
        ),
        ("app.kubernetes.io/name", "kuberay".to_string()),
        (
            "app.kubernetes.io/created-by",
            "kuberay-operator".to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in overrides {
        if k != NODE_TYPE_LABEL && k != GROUP_LABEL && k != CLUSTER_LABEL {
            labels.insert(k, v);
        }
    }
    labels
}

/// `SetControllerReference` to the cluster.
pub(crate) fn owner(rc: &RayCluster) -> OwnerReference {
    OwnerReference {
        api_version: "ray.io/v1".into(),
        kind: "RayCluster".into(),
        name: rc.name_any(),
        uid: rc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `BuildPod` over a template that `labelPod` labelled.
fn build_pod(
    rc: &RayCluster,
    template: &PodTemplateSpec,
    node_type: &str,
    generate_name: String,
    mut labels: BTreeMap<String, String>,
) -> Pod {
    let from_service = rc
        .labels()
        .get(ORIGINATED_FROM_CRD_LABEL)
        .map(String::as_str)
        == Some(ORIGINATED_FROM_RAYSERVICE);
    if from_service {
        // head traffic is switched by the RayService controller; workers always serve
        let serve = if node_type == "head" { "false" } else { "true" };
        labels.insert(SERVE_LABEL.into(), serve.into());
    }
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: rc.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![owner(rc)]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// `buildHeadPod`.
pub(crate) fn head_pod(rc: &RayCluster) -> Pod {
    let head = &rc.spec.head_group_spec;
    let mut overrides = head
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    overrides.extend(string_map(head.other.get("labels")));
    let cluster = rc.name_any();
    let labels = label_pod("head", &cluster, HEAD_GROUP, overrides);
    // with `enableInTreeAutoscaling`, KubeRay appends the autoscaler sidecar to the head pod
    // (`BuildAutoscalerContainer`); raygate's PodSet math builds the same template
    let template = raygate::podsets::head_template(&rc.spec);
    build_pod(
        rc,
        &template,
        "head",
        generate_name(&cluster, "head"),
        labels,
    )
}

/// `buildWorkerPod` with the `RayMultiHostIndexing` labels: the replica index on every worker,
/// the replica name and host index on multi-host ones.
pub(crate) fn worker_pod(
    rc: &RayCluster,
    group: usize,
    replica_name: &str,
    replica_index: usize,
    host_index: usize,
) -> Option<Pod> {
    let g = rc.spec.worker_group_specs.as_ref()?.get(group)?;
    let mut overrides = g
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    overrides.extend(string_map(g.other.get("labels")));
    let cluster = rc.name_any();
    let mut labels = label_pod("worker", &cluster, &g.group_name, overrides);
    labels.insert(REPLICA_INDEX_LABEL.into(), replica_index.to_string());
    if g.num_of_hosts.unwrap_or(1) > 1 {
        labels.insert(REPLICA_NAME_LABEL.into(), replica_name.to_string());
        labels.insert(HOST_INDEX_LABEL.into(), host_index.to_string());
    }
    let name = generate_name(&format!("{cluster}-{}", g.group_name), "worker");
    let mut pod = build_pod(rc, &g.template, "worker", name, labels);
    add_wait_gcs_ready(&mut pod);
    Some(pod)
}

/// `DefaultWorkerPodTemplate` with `ENABLE_INIT_CONTAINER_INJECTION` (on by default): the
/// `wait-gcs-ready` init container, appended after the user's, with KubeRay's hard-coded
/// requests and limits (200m CPU, 256Mi), so a worker asking less than that is scheduled (and
/// counted) with more than its template.
fn add_wait_gcs_ready(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let ray = spec.containers.first();
    let fixed: BTreeMap<String, Quantity> = [("cpu", "200m"), ("memory", "256Mi")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
    let init = Container {
        name: raygate::types::ray::WAIT_GCS_READY_CONTAINER.into(),
        image: ray.and_then(|c| c.image.clone()),
        resources: Some(ResourceRequirements {
            requests: Some(fixed.clone()),
            limits: Some(fixed),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    spec.init_containers.get_or_insert_default().push(init);
}

/// `GetWorkerGroupDesiredReplicas` × `numOfHosts`: the worker pods a group should have.
fn desired_pods(g: &raygate::types::ray::WorkerGroupSpec) -> i64 {
    if g.suspend == Some(true) {
        return 0;
    }
    let lo = g.min_replicas.unwrap_or(0);
    let hi = g.max_replicas.unwrap_or(i32::MAX);
    let replicas = match g.replicas {
        None => lo,
        Some(r) if r < lo => lo,
        Some(r) if r > hi => hi,
        Some(r) => r,
    };
    i64::from(replicas) * i64::from(g.num_of_hosts.unwrap_or(1).max(1))
}

/// `IsAutoscalingEnabled`: with the autoscaler on, only it decides which pods go on scale-down.
fn autoscaling(rc: &RayCluster) -> bool {
    rc.spec.enable_in_tree_autoscaling == Some(true)
}

fn replica_index(p: &Pod) -> Option<usize> {
    label(p, REPLICA_INDEX_LABEL).and_then(|s| s.parse().ok())
}

/// The lowest indexes not in `taken`, `n` of them (`validReplicaIndices`).
fn free_indexes(taken: &BTreeSet<usize>, n: usize) -> Vec<usize> {
    (0..).filter(|i| !taken.contains(i)).take(n).collect()
}

/// `reconcilePods` over the cluster's pods (every pod labelled `ray.io/cluster=<name>`,
/// terminating ones included, as KubeRay's cache lists them). `replica_name(group)` names a new
/// multi-host replica (`GenerateRayWorkerReplicaGroupName`: `<group>-<5 random>`).
pub(crate) fn plan(
    rc: &RayCluster,
    phase: SuspendStatus,
    pods: &[Pod],
    replica_name: &mut dyn FnMut(&str) -> String,
) -> PodPlan {
    let mut out = PodPlan::default();
    match phase {
        SuspendStatus::Suspending => {
            out.delete = pods
                .iter()
                .filter(|p| !is_deleting(p))
                .map(ResourceExt::name_any)
                .collect();
            return out;
        }
        // suspended, or going to suspend: no pods are created
        SuspendStatus::Suspended => return out,
        SuspendStatus::None if rc.spec.suspend == Some(true) => return out,
        SuspendStatus::None => {}
    }
    if let Err(why) = plan_head(rc, pods, &mut out) {
        out.requeue = Some(why);
        return out;
    }
    for (i, g) in rc.spec.worker_group_specs.iter().flatten().enumerate() {
        let group: Vec<&Pod> = pods
            .iter()
            .filter(|p| label(p, NODE_TYPE_LABEL) == Some("worker"))
            .filter(|p| label(p, GROUP_LABEL) == Some(g.group_name.as_str()))
            .collect();
        let result = if g.suspend == Some(true) {
            out.delete.extend(
                group
                    .iter()
                    .filter(|p| !is_deleting(p))
                    .map(|p| p.name_any()),
            );
            Ok(())
        } else if g.num_of_hosts.unwrap_or(1) > 1 {
            plan_multi_host(rc, i, &group, replica_name, &mut out)
        } else {
            plan_single_host(rc, i, &group, &mut out)
        };
        if let Err(why) = result {
            out.requeue = Some(why);
            break;
        }
    }
    out
}

fn plan_head(rc: &RayCluster, pods: &[Pod], out: &mut PodPlan) -> Result<(), String> {
    let heads: Vec<&Pod> = pods
        .iter()
        .filter(|p| label(p, NODE_TYPE_LABEL) == Some("head"))
        .collect();
    match heads.as_slice() {
        [] => {
            let provisioned = rc.status.as_ref().is_some_and(|s| {
                raygate::conditions::is_true(&s.conditions, "RayClusterProvisioned")
            });
            let no_restart = rc
                .annotations()
                .get(DISABLE_HEAD_RESTART)
                .map(String::as_str)
                == Some("true");
            if !(provisioned && no_restart) {
                out.create.push(head_pod(rc));
            }
            Ok(())
        }
        [head] if should_delete(head) => {
            out.delete.push(head.name_any());
            Err(format!(
                "head Pod {} is in a terminal phase",
                head.name_any()
            ))
        }
        [_] => Ok(()),
        many => Err(format!(
            "{} head pods found; delete the extra ones",
            many.len()
        )),
    }
}

/// Worker group `group` of `rc`'s spec.
fn worker_group(rc: &RayCluster, group: usize) -> Option<&WorkerGroupSpec> {
    rc.spec
        .worker_group_specs
        .as_ref()
        .and_then(|gs| gs.get(group))
}

/// The pods the autoscaler named in the group's `scaleStrategy.workersToDelete`.
fn workers_to_delete(g: &WorkerGroupSpec) -> BTreeSet<&str> {
    g.scale_strategy
        .as_ref()
        .and_then(|s| s.workers_to_delete.as_ref())
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

fn plan_single_host(
    rc: &RayCluster,
    group: usize,
    pods: &[&Pod],
    out: &mut PodPlan,
) -> Result<(), String> {
    let Some(g) = worker_group(rc, group) else {
        return Ok(());
    };
    let unhealthy: Vec<String> = pods
        .iter()
        .filter(|p| should_delete(p))
        .map(|p| p.name_any())
        .collect();
    if !unhealthy.is_empty() {
        let n = unhealthy.len();
        out.delete.extend(unhealthy);
        return Err(format!("delete {n} unhealthy worker Pods"));
    }
    let to_delete = workers_to_delete(g);
    // a named pod that does not exist is a 404, ignored
    let named: Vec<&&Pod> = pods
        .iter()
        .filter(|p| to_delete.contains(p.name_any().as_str()))
        .collect();
    out.delete.extend(named.iter().map(|p| p.name_any()));
    let running: Vec<&Pod> = pods
        .iter()
        .filter(|p| !to_delete.contains(p.name_any().as_str()))
        .copied()
        .collect();
    let diff = desired_pods(g) - running.len() as i64;
    if diff > 0 {
        let taken: BTreeSet<usize> = running.iter().filter_map(|p| replica_index(p)).collect();
        for index in free_indexes(&taken, diff as usize) {
            out.create.extend(worker_pod(rc, group, "", index, 0));
        }
    } else if diff < 0 && !autoscaling(rc) {
        // without the autoscaler, KubeRay removes the first pods it listed
        out.delete
            .extend(running.iter().take((-diff) as usize).map(|p| p.name_any()));
    }
    Ok(())
}

/// A multi-host worker group's pods by replica (`ray.io/worker-group-replica-name`).
type Replicas<'a> = BTreeMap<&'a str, Vec<&'a Pod>>;

fn plan_multi_host(
    rc: &RayCluster,
    group: usize,
    pods: &[&Pod],
    replica_name: &mut dyn FnMut(&str) -> String,
    out: &mut PodPlan,
) -> Result<(), String> {
    let Some(g) = worker_group(rc, group) else {
        return Ok(());
    };
    let hosts = g.num_of_hosts.unwrap_or(1).max(1) as usize;
    let mut replicas: Replicas = BTreeMap::new();
    for p in pods {
        if let Some(r) = label(p, REPLICA_NAME_LABEL) {
            replicas.entry(r).or_default().push(p);
        }
    }
    // an incomplete replica (a pod deleted from outside) goes whole
    if let Some((name, members)) = replicas.iter().find(|(_, m)| m.len() < hosts) {
        out.delete.extend(members.iter().map(|p| p.name_any()));
        return Err(format!(
            "cleaned up incomplete replica group {name}, requeueing"
        ));
    }
    // a replica with an unhealthy pod goes whole
    let mut gone: BTreeSet<&str> = BTreeSet::new();
    for (name, members) in &replicas {
        if members.iter().any(|p| should_delete(p)) {
            out.delete.extend(members.iter().map(|p| p.name_any()));
            gone.insert(name);
        }
    }
    delete_named_replicas(g, pods, &replicas, &gone, out)?;
    let valid: Vec<&str> = replicas
        .keys()
        .copied()
        .filter(|r| !gone.contains(r))
        .collect();
    let scale = ReplicaScale {
        rc,
        group,
        g,
        hosts,
    };
    scale.plan(&replicas, &valid, replica_name, out)
}

/// The autoscaler's `workersToDelete`: each named pod takes its whole replica with it (but
/// those in `gone`, already deleted). Naming any stops the pass (requeue).
fn delete_named_replicas(
    g: &WorkerGroupSpec,
    pods: &[&Pod],
    replicas: &Replicas,
    gone: &BTreeSet<&str>,
    out: &mut PodPlan,
) -> Result<(), String> {
    let to_delete = workers_to_delete(g);
    let victims: BTreeSet<&str> = pods
        .iter()
        .filter(|p| to_delete.contains(p.name_any().as_str()))
        .filter_map(|p| label(p, REPLICA_NAME_LABEL))
        .filter(|r| !gone.contains(r))
        .collect();
    if victims.is_empty() {
        return Ok(());
    }
    for r in &victims {
        out.delete
            .extend(replicas.get(r).into_iter().flatten().map(|p| p.name_any()));
    }
    Err(format!(
        "deleted {} worker replicas based on ScaleStrategy, requeueing",
        victims.len()
    ))
}

/// A multi-host worker group, scaled a whole replica (`hosts` pods) at a time.
struct ReplicaScale<'a> {
    rc: &'a RayCluster,
    group: usize,
    g: &'a WorkerGroupSpec,
    hosts: usize,
}

impl ReplicaScale<'_> {
    /// Creates the missing replicas (at the lowest free indexes) or, without the autoscaler,
    /// deletes the first surplus ones of `valid` (the replicas left standing). An error when
    /// the desired pods are not a multiple of `numOfHosts`.
    fn plan(
        &self,
        replicas: &Replicas,
        valid: &[&str],
        replica_name: &mut dyn FnMut(&str) -> String,
        out: &mut PodPlan,
    ) -> Result<(), String> {
        let (g, hosts) = (self.g, self.hosts);
        let desired = desired_pods(g);
        if desired % hosts as i64 != 0 {
            return Err(format!(
                "desired worker pods ({desired}) is not a multiple of NumOfHosts ({hosts}) for group {}",
                g.group_name
            ));
        }
        let diff = desired / hosts as i64 - valid.len() as i64;
        if diff > 0 {
            let taken: BTreeSet<usize> = valid
                .iter()
                .filter_map(|r| replicas.get(r).and_then(|m| m.first()))
                .filter_map(|p| replica_index(p))
                .collect();
            for index in free_indexes(&taken, diff as usize) {
                let name = replica_name(&g.group_name);
                for host in 0..hosts {
                    out.create
                        .extend(worker_pod(self.rc, self.group, &name, index, host));
                }
            }
        } else if diff < 0 && !autoscaling(self.rc) {
            for r in valid.iter().take((-diff) as usize) {
                out.delete
                    .extend(replicas.get(r).into_iter().flatten().map(|p| p.name_any()));
            }
        }
        Ok(())
    }
}

/// What `calculateStatus` reads from the pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodsView {
    /// Every pod of the cluster, terminating ones included.
    pub total: usize,
    /// Workers running and Ready (`CalculateReadyReplicas`).
    pub ready_workers: i32,
    /// Workers running (`CalculateAvailableReplicas`).
    pub available_workers: i32,
    /// `CheckAllPodsRunning`: at least one pod, all Running, none with Ready≠True.
    pub all_running: bool,
    /// The head pod's `HeadPodReady` condition (status, reason, message); `None`: no head pod.
    pub head: Option<(String, String, String)>,
}

fn pod_ready(p: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

fn is_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// `utils.FindHeadPodReadyCondition`.
fn head_condition(p: &Pod) -> (String, String, String) {
    match pod_ready(p) {
        None => ("False".into(), "Unknown".into(), String::new()),
        Some(c) => {
            let reason = match c.reason.as_deref() {
                Some(r) if !r.is_empty() => r.to_string(),
                _ if c.status == "True" => "HeadPodRunningAndReady".into(),
                _ => "Unknown".into(),
            };
            (
                c.status.clone(),
                reason,
                c.message.clone().unwrap_or_default(),
            )
        }
    }
}

pub(crate) fn view(pods: &[Pod]) -> PodsView {
    let workers = || {
        pods.iter()
            .filter(|p| label(p, NODE_TYPE_LABEL) == Some("worker"))
    };
    let ready = |p: &Pod| is_running(p) && pod_ready(p).is_some_and(|c| c.status == "True");
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let heads: Vec<&Pod> = pods
        .iter()
        .filter(|p| label(p, NODE_TYPE_LABEL) == Some("head"))
        .collect();
    PodsView {
        total: pods.len(),
        ready_workers: count(workers().filter(|p| ready(p)).count()),
        available_workers: count(workers().filter(|p| is_running(p)).count()),
        all_running: !pods.is_empty()
            && pods
                .iter()
                .all(|p| is_running(p) && pod_ready(p).is_none_or(|c| c.status == "True")),
        head: match heads.as_slice() {
            [h] => Some(head_condition(h)),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(workers: Value) -> RayCluster {
        serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "svc-abcde", "namespace": "ns", "uid": "u-1",
                "labels": {"ray.io/originated-from-crd": "RayService", "team": "a"}},
            "spec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {
                    "metadata": {"labels": {"ray.io/cluster": "evil", "app": "llm"}},
                    "spec": {"containers": [{"name": "ray-head", "image": "ray"}],
                        "schedulingGates": [{"name": "raygate.io/quota"}]}}},
                "workerGroupSpecs": workers,
            }
        }))
        .unwrap()
    }

    fn group(name: &str, replicas: i32, hosts: i32) -> Value {
        json!({"groupName": name, "replicas": replicas, "numOfHosts": hosts, "rayStartParams": {},
            "template": {"spec": {"containers": [{"name": "ray-worker", "image": "ray"}],
                "terminationGracePeriodSeconds": 30}}})
    }

    /// The pods of a plan as if the server named them: `<generateName><n>`.
    fn created(plan: &PodPlan, from: usize) -> Vec<Pod> {
        plan.create
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut p = p.clone();
                p.metadata.name = Some(format!(
                    "{}{:05}",
                    p.metadata.generate_name.clone().unwrap_or_default(),
                    from + i
                ));
                p
            })
            .collect()
    }

    fn names() -> impl FnMut(&str) -> String {
        let mut n = 0;
        move |g: &str| {
            n += 1;
            format!("{g}-r{n}")
        }
    }

    fn lbl<'a>(p: &'a Pod, k: &str) -> &'a str {
        label(p, k).unwrap_or("")
    }

    #[test]
    fn a_cluster_gets_a_head_and_replicas_times_hosts_workers_labelled_as_kuberay_does() {
        let rc = cluster(json!([group("tpu", 2, 4), group("cpu", 3, 1)]));
        let plan = plan(&rc, SuspendStatus::None, &[], &mut names());
        assert_eq!(plan.create.len(), 1 + 2 * 4 + 3);
        let head = &plan.create[0];
        assert_eq!(
            head.metadata.generate_name.as_deref(),
            Some("svc-abcde-head-")
        );
        assert_eq!(lbl(head, CLUSTER_LABEL), "svc-abcde", "not overridable");
        assert_eq!(lbl(head, NODE_TYPE_LABEL), "head");
        assert_eq!(lbl(head, GROUP_LABEL), "headgroup");
        assert_eq!(lbl(head, "app"), "llm");
        assert_eq!(lbl(head, SERVE_LABEL), "false");
        assert_eq!(label(head, "team"), None, "cluster labels are not copied");
        let gates = head
            .spec
            .as_ref()
            .unwrap()
            .scheduling_gates
            .as_ref()
            .unwrap();
        assert_eq!(gates[0].name, "raygate.io/quota");
        let o = &head.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str(), o.controller),
            ("RayCluster", "u-1", Some(true))
        );

        let tpu: Vec<&Pod> = plan
            .create
            .iter()
            .filter(|p| lbl(p, GROUP_LABEL) == "tpu")
            .collect();
        assert_eq!(
            tpu[0].metadata.generate_name.as_deref(),
            Some("svc-abcde-tpu-worker-")
        );
        let replicas: BTreeSet<(&str, &str)> = tpu
            .iter()
            .map(|p| (lbl(p, REPLICA_NAME_LABEL), lbl(p, REPLICA_INDEX_LABEL)))
            .collect();
        assert_eq!(replicas, BTreeSet::from([("tpu-r1", "0"), ("tpu-r2", "1")]));
        let hosts: Vec<&str> = tpu
            .iter()
            .take(4)
            .map(|p| lbl(p, HOST_INDEX_LABEL))
            .collect();
        assert_eq!(hosts, ["0", "1", "2", "3"]);
        assert_eq!(lbl(tpu[0], SERVE_LABEL), "true");
        let cpu: Vec<&Pod> = plan
            .create
            .iter()
            .filter(|p| lbl(p, GROUP_LABEL) == "cpu")
            .collect();
        assert_eq!(
            label(cpu[0], REPLICA_NAME_LABEL),
            None,
            "single-host: index only"
        );
        let idx: Vec<&str> = cpu.iter().map(|p| lbl(p, REPLICA_INDEX_LABEL)).collect();
        assert_eq!(idx, ["0", "1", "2"]);
    }

    #[test]
    fn a_converged_cluster_plans_nothing_and_a_scale_up_fills_the_lowest_free_indexes() {
        let mut rc = cluster(json!([group("cpu", 3, 1)]));
        let first = plan(&rc, SuspendStatus::None, &[], &mut names());
        let mut pods = created(&first, 0);
        assert!(
            plan(&rc, SuspendStatus::None, &pods, &mut names())
                .create
                .is_empty()
        );
        // index 1 deleted from outside, and a scale-up to 4
        pods.retain(|p| lbl(p, REPLICA_INDEX_LABEL) != "1");
        rc.spec.worker_group_specs.as_mut().unwrap()[0].replicas = Some(4);
        let next = plan(&rc, SuspendStatus::None, &pods, &mut names());
        let idx: Vec<&str> = next
            .create
            .iter()
            .map(|p| lbl(p, REPLICA_INDEX_LABEL))
            .collect();
        assert_eq!(idx, ["1", "3"]);
    }

    #[test]
    fn workers_to_delete_takes_the_named_pod_or_its_whole_multi_host_replica() {
        let mut rc = cluster(json!([group("tpu", 2, 2), group("cpu", 2, 1)]));
        let pods = created(&plan(&rc, SuspendStatus::None, &[], &mut names()), 0);
        let tpu_victim = pods
            .iter()
            .find(|p| lbl(p, REPLICA_NAME_LABEL) == "tpu-r2")
            .unwrap();
        let cpu_victim = pods.iter().find(|p| lbl(p, GROUP_LABEL) == "cpu").unwrap();
        let gs = rc.spec.worker_group_specs.as_mut().unwrap();
        gs[0].replicas = Some(1);
        gs[0].scale_strategy =
            serde_json::from_value(json!({"workersToDelete": [tpu_victim.name_any()]})).unwrap();
        gs[1].replicas = Some(1);
        gs[1].scale_strategy =
            serde_json::from_value(json!({"workersToDelete": [cpu_victim.name_any()]})).unwrap();
        rc.spec.enable_in_tree_autoscaling = Some(true);
        let p = plan(&rc, SuspendStatus::None, &pods, &mut names());
        let mut gone: Vec<String> = p.delete.clone();
        gone.sort();
        let mut want: Vec<String> = pods
            .iter()
            .filter(|p| lbl(p, REPLICA_NAME_LABEL) == "tpu-r2")
            .map(|p| p.name_any())
            .collect();
        want.sort();
        // the multi-host group stops the pass (KubeRay requeues), so cpu waits for the next
        assert_eq!(gone, want);
        assert!(p.requeue.is_some());
        assert!(p.create.is_empty());
        let rest: Vec<Pod> = pods
            .iter()
            .filter(|p| !want.contains(&p.name_any()))
            .cloned()
            .collect();
        let p2 = plan(&rc, SuspendStatus::None, &rest, &mut names());
        assert_eq!(p2.delete, vec![cpu_victim.name_any()]);
        assert!(p2.create.is_empty(), "{:?}", p2.create);
    }

    #[test]
    fn every_worker_gets_kuberay_s_wait_gcs_ready_init_container_with_its_fixed_resources() {
        let rc = cluster(json!([group("gpu", 1, 1)]));
        let pod = worker_pod(&rc, 0, "gpu-abc", 0, 0).unwrap();
        let init = pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap();
        assert_eq!(init.len(), 1);
        assert_eq!(init[0].name, "wait-gcs-ready");
        let r = init[0].resources.as_ref().unwrap();
        let requests = r.requests.as_ref().unwrap();
        assert_eq!(
            (requests["cpu"].0.as_str(), requests["memory"].0.as_str()),
            ("200m", "256Mi")
        );
        assert_eq!(r.limits, r.requests);
        assert!(
            head_pod(&rc).spec.unwrap().init_containers.is_none(),
            "workers only"
        );
    }

    #[test]
    fn with_in_tree_autoscaling_the_head_pod_gets_kuberay_s_sidecar_and_its_requests() {
        let mut rc = cluster(json!([group("cpu", 1, 1)]));
        let head = |rc: &RayCluster| {
            created(&plan(rc, SuspendStatus::None, &[], &mut names()), 0)
                .into_iter()
                .find(|p| lbl(p, NODE_TYPE_LABEL) == "head")
                .unwrap()
        };
        let containers = |p: &Pod| -> Vec<String> {
            p.spec
                .as_ref()
                .unwrap()
                .containers
                .iter()
                .map(|c| c.name.clone())
                .collect()
        };
        assert_eq!(containers(&head(&rc)), ["ray-head"]);
        rc.spec.enable_in_tree_autoscaling = Some(true);
        let pod = head(&rc);
        assert_eq!(containers(&pod), ["ray-head", "autoscaler"]);
        let sidecar = &pod.spec.as_ref().unwrap().containers[1];
        let requests = sidecar
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap();
        assert_eq!(requests["cpu"].0, "500m");
        assert_eq!(requests["memory"].0, "512Mi");
        // the pod's requests are what raygate charges for the head PodSet
        let podsets = raygate::podsets::of_cluster(&rc.spec, None, "rc", "spec").unwrap();
        let pod_requests =
            raygate::podsets::pod_requests(pod.spec.as_ref().unwrap(), "spec", "head").unwrap();
        assert_eq!(podsets[0].requests, pod_requests);
        // autoscalerOptions.resources replace the default
        rc.spec.autoscaler_options = serde_json::from_value(
            json!({"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}),
        )
        .unwrap();
        let pod = head(&rc);
        let sidecar = &pod.spec.as_ref().unwrap().containers[1];
        assert_eq!(
            sidecar
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "1"
        );
    }

    #[test]
    fn scale_down_without_the_autoscaler_deletes_and_with_it_waits_for_workers_to_delete() {
        let mut rc = cluster(json!([group("cpu", 3, 1)]));
        let pods = created(&plan(&rc, SuspendStatus::None, &[], &mut names()), 0);
        rc.spec.worker_group_specs.as_mut().unwrap()[0].replicas = Some(1);
        assert_eq!(
            plan(&rc, SuspendStatus::None, &pods, &mut names())
                .delete
                .len(),
            2
        );
        rc.spec.enable_in_tree_autoscaling = Some(true);
        assert!(
            plan(&rc, SuspendStatus::None, &pods, &mut names())
                .delete
                .is_empty()
        );
    }

    #[test]
    fn suspending_deletes_every_pod_once_and_suspended_or_suspend_creates_none() {
        let mut rc = cluster(json!([group("cpu", 2, 1)]));
        let mut pods = created(&plan(&rc, SuspendStatus::None, &[], &mut names()), 0);
        pods[0].metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let p = plan(&rc, SuspendStatus::Suspending, &pods, &mut names());
        assert_eq!(
            p.delete.len(),
            2,
            "the terminating one is not deleted again"
        );
        assert!(
            plan(&rc, SuspendStatus::Suspended, &[], &mut names())
                .create
                .is_empty()
        );
        rc.spec.suspend = Some(true);
        assert!(
            plan(&rc, SuspendStatus::None, &[], &mut names())
                .create
                .is_empty()
        );
    }

    #[test]
    fn an_incomplete_multi_host_replica_is_deleted_whole_before_anything_is_created() {
        let rc = cluster(json!([group("tpu", 2, 2)]));
        let mut pods = created(&plan(&rc, SuspendStatus::None, &[], &mut names()), 0);
        let lost = pods
            .iter()
            .position(|p| lbl(p, REPLICA_NAME_LABEL) == "tpu-r1")
            .unwrap();
        pods.remove(lost);
        let p = plan(&rc, SuspendStatus::None, &pods, &mut names());
        assert_eq!(p.delete.len(), 1);
        assert!(p.create.is_empty());
        assert!(p.requeue.is_some());
    }

    #[test]
    fn the_view_counts_ready_and_running_workers_and_reads_the_head_s_ready_condition() {
        let rc = cluster(json!([group("cpu", 2, 1)]));
        let mut pods = created(&plan(&rc, SuspendStatus::None, &[], &mut names()), 0);
        assert_eq!(
            view(&pods).head,
            Some(("False".into(), "Unknown".into(), String::new()))
        );
        assert!(!view(&pods).all_running);
        for (i, p) in pods.iter_mut().enumerate() {
            let ready = if i == 2 { "False" } else { "True" };
            p.status = serde_json::from_value(json!({"phase": "Running",
                "conditions": [{"type": "Ready", "status": ready}]}))
            .unwrap();
        }
        let v = view(&pods);
        assert_eq!(
            (v.total, v.ready_workers, v.available_workers, v.all_running),
            (3, 1, 2, false)
        );
        assert_eq!(
            v.head.as_ref().map(|h| h.1.as_str()),
            Some("HeadPodRunningAndReady")
        );
    }
}
