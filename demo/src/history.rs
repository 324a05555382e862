//! The cluster's history, compact (pure): every change of the kinds a story touches, as the
//! cluster's own watch streams showed it, stamped with cluster time, reduced to what the
//! invariants and the charts read (per pod: node, phase, readiness, gates, deletion, requests;
//! per ClusterQueue: quota and usage; …). A change that leaves the compact state as it was is not
//! kept, so a status heartbeat costs nothing.
//!
//! [`History::replay`] walks the states in time order: the invariants are folds over it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSpec, PodSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use raygate::quantity::{Quantity, Resources};
use serde_json::Value;

mod lines;

/// The kinds a history records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    Node,
    PodDisruptionBudget,
    RayCluster,
    RayService,
    Workload,
    ClusterQueue,
    LocalQueue,
    NodeRollout,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Pod,
        Kind::Node,
        Kind::PodDisruptionBudget,
        Kind::RayCluster,
        Kind::RayService,
        Kind::Workload,
        Kind::ClusterQueue,
        Kind::LocalQueue,
        Kind::NodeRollout,
    ];

    /// The core kinds every cluster serves (no CRD needed).
    pub const CORE: [Kind; 3] = [Kind::Pod, Kind::Node, Kind::PodDisruptionBudget];

    /// (group, version, kind, plural, namespaced)
    pub fn resource(self) -> (&'static str, &'static str, &'static str, &'static str, bool) {
        match self {
            Kind::Pod => ("", "v1", "Pod", "pods", true),
            Kind::Node => ("", "v1", "Node", "nodes", false),
            Kind::PodDisruptionBudget => (
                "policy",
                "v1",
                "PodDisruptionBudget",
                "poddisruptionbudgets",
                true,
            ),
            Kind::RayCluster => ("ray.io", "v1", "RayCluster", "rayclusters", true),
            Kind::RayService => ("ray.io", "v1", "RayService", "rayservices", true),
            Kind::Workload => ("kueue.x-k8s.io", "v1beta2", "Workload", "workloads", true),
            Kind::ClusterQueue => (
                "kueue.x-k8s.io",
                "v1beta2",
                "ClusterQueue",
                "clusterqueues",
                false,
            ),
            Kind::LocalQueue => (
                "kueue.x-k8s.io",
                "v1beta2",
                "LocalQueue",
                "localqueues",
                true,
            ),
            Kind::NodeRollout => (
                "raygate.io",
                "v1alpha1",
                "NodeRollout",
                "noderollouts",
                false,
            ),
        }
    }
}

/// An object's identity in the history (a pod recreated under its name keeps its key; its uid is
/// in the state).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: Kind,
    /// "" for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        Key {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (_, _, kind, _, _) = self.kind.resource();
        if self.namespace.is_empty() {
            write!(f, "{kind}/{}", self.name)
        } else {
            write!(f, "{kind} {}/{}", self.namespace, self.name)
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodState {
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// `spec.nodeName`: bound.
    pub node: Option<String>,
    pub phase: String,
    pub ready: bool,
    /// Any scheduling gate left.
    pub gated: bool,
    /// `deletionTimestamp` set.
    pub deleting: bool,
    /// The Eviction API's `DisruptionTarget` condition.
    pub evicted: bool,
    /// LeaderWorkerSet's group size annotation (`leaderworkerset.sigs.k8s.io/size`).
    pub group_size: Option<usize>,
    /// Effective requests (the scheduler's sum).
    pub requests: Resources,
}

impl PodState {
    /// Holds its requests on a node: bound and not terminal (a terminating pod still holds them).
    pub fn holds_resources(&self) -> bool {
        self.node.is_some() && !matches!(self.phase.as_str(), "Succeeded" | "Failed")
    }

    /// Runs: holds resources and is not being deleted.
    pub fn running(&self) -> bool {
        self.holds_resources() && !self.deleting
    }

    /// Healthy as the disruption controller counts it: Ready and not being deleted.
    pub fn healthy(&self) -> bool {
        self.ready && !self.deleting
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    pub labels: BTreeMap<String, String>,
    pub unschedulable: bool,
    pub ready: bool,
    /// Taint keys.
    pub taints: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PdbState {
    pub selector: Option<LabelSelector>,
    pub min_available: Option<IntOrString>,
    pub max_unavailable: Option<IntOrString>,
    /// `status.expectedPods`, as the disruption controller computed it.
    pub expected_pods: Option<i32>,
    pub disruptions_allowed: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterState {
    pub labels: BTreeMap<String, String>,
    pub suspended: bool,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceState {
    /// The `kueue.x-k8s.io/queue-name` label: opted in.
    pub queue: Option<String>,
    /// `status.activeServiceStatus.rayClusterName`: the child its serve Service selects.
    pub active: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadState {
    /// raygate's `raygate.io/rayservice` label: the RayService this slice charges.
    pub rayservice: Option<String>,
    /// QuotaReserved (or Admitted) True.
    pub admitted: bool,
    /// Finished True.
    pub finished: bool,
    pub cluster_queue: Option<String>,
    /// Σ of the PodSets' counts.
    pub pods: i64,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueState {
    pub cohort: Option<String>,
    /// Σ over flavors of `nominalQuota`, per resource.
    pub nominal: Resources,
    /// Σ over flavors of `borrowingLimit`, per resource; a resource whose flavors set none may
    /// borrow without limit (in a cohort).
    pub borrowing_limit: Resources,
    /// Resources with at least one flavor without a `borrowingLimit`.
    pub unlimited_borrowing: Vec<String>,
    /// Σ over flavors of `status.flavorsUsage` (what the queue says it charged).
    pub usage: Resources,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueState {
    pub cluster_queue: String,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRolloutState {
    pub phase: Option<String>,
    pub domain: Option<String>,
}

/// The compact state of one object.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum State {
    Pod(PodState),
    Node(NodeState),
    Pdb(PdbState),
    RayCluster(RayClusterState),
    RayService(RayServiceState),
    Workload(WorkloadState),
    ClusterQueue(ClusterQueueState),
    LocalQueue(LocalQueueState),
    NodeRollout(NodeRolloutState),
}

/// One change: the object's compact state from `at` on (`None`: deleted).
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub at: Timestamp,
    pub key: Key,
    pub state: Option<State>,
}

/// Changes in the order the watches delivered them (cluster time never goes back).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub changes: Vec<Change>,
    /// The object's current compact state (the last change of each key).
    last: BTreeMap<Key, State>,
}

impl History {
    pub fn new() -> Self {
        History::default()
    }

    /// Records `state` for `key` at `at` if it differs from the last one recorded; returns
    /// whether it was kept.
    pub fn record(&mut self, at: Timestamp, key: Key, state: Option<State>) -> bool {
        let same = match &state {
            Some(s) => self.last.get(&key) == Some(s),
            None => !self.last.contains_key(&key),
        };
        if same {
            return false;
        }
        match &state {
            Some(s) => self.last.insert(key.clone(), s.clone()),
            None => self.last.remove(&key),
        };
        // cluster time is monotonic, but two watches may deliver one instant out of order
        let at = self.changes.last().map_or(at, |c| at.max(c.at));
        self.changes.push(Change { at, key, state });
        true
    }

    /// Records an object as a watch delivered it (see [`compact`]).
    pub fn record_object(&mut self, at: Timestamp, kind: Kind, object: &Value) -> bool {
        let (namespace, name) = identity(object);
        self.record(
            at,
            Key::new(kind, &namespace, &name),
            Some(compact(kind, object)),
        )
    }

    /// The states now (after the last change).
    pub fn current(&self) -> &BTreeMap<Key, State> {
        &self.last
    }

    /// When the first and the last change happened.
    pub fn span(&self) -> Option<(Timestamp, Timestamp)> {
        Some((self.changes.first()?.at, self.changes.last()?.at))
    }

    /// The cluster after every instant at which something changed, in time order: `(at, states)`
    /// once all changes stamped `at` are applied.
    pub fn replay(&self) -> Replay<'_> {
        Replay {
            changes: &self.changes,
            next: 0,
            states: BTreeMap::new(),
        }
    }
}

/// See [`History::replay`].
pub struct Replay<'a> {
    changes: &'a [Change],
    next: usize,
    states: BTreeMap<Key, State>,
}

impl Replay<'_> {
    /// Applies the next instant's changes; `None` at the end.
    pub fn step(&mut self) -> Option<(Timestamp, &BTreeMap<Key, State>)> {
        let at = self.changes.get(self.next)?.at;
        while let Some(c) = self.changes.get(self.next).filter(|c| c.at == at) {
            match &c.state {
                Some(s) => self.states.insert(c.key.clone(), s.clone()),
                None => self.states.remove(&c.key),
            };
            self.next += 1;
        }
        Some((at, &self.states))
    }
}

/// `(namespace, name)` of a JSON object ("" namespace when cluster-scoped).
pub fn identity(object: &Value) -> (String, String) {
    let m = &object["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_string(),
        m["name"].as_str().unwrap_or_default().to_string(),
    )
}

fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

fn condition_true(object: &Value, types: &[&str]) -> bool {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| types.contains(&c["type"].as_str().unwrap_or_default()) && c["status"] == "True")
}

/// Σ over `flavors[].resources[]` of `field` (a quantity string or a number), per resource name.
fn flavor_sum(flavors: &[Value], field: &str) -> Resources {
    let mut out = Resources::new();
    for r in flavors
        .iter()
        .flat_map(|f| f["resources"].as_array().into_iter().flatten())
    {
        let text = match &r[field] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => continue,
        };
        if let (Some(name), Ok(q)) = (r["name"].as_str(), Quantity::parse(&text)) {
            let mut one = Resources::new();
            one.set(name, q);
            out.add(&one);
        }
    }
    out
}

fn pod_state(object: &Value) -> PodState {
    // the spec alone: an odd status (a probe time the types reject) must not lose the requests
    let spec: Option<PodSpec> = serde_json::from_value(object["spec"].clone()).ok();
    let requests = spec
        .as_ref()
        .and_then(|s| raygate::podsets::pod_requests(s, "spec", "pod").ok())
        .unwrap_or_default();
    let status = &object["status"];
    PodState {
        uid: object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .into(),
        labels: labels(object),
        node: object["spec"]["nodeName"].as_str().map(String::from),
        phase: status["phase"].as_str().unwrap_or("Pending").into(),
        ready: condition_true(object, &["Ready"]),
        gated: object["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty()),
        deleting: !object["metadata"]["deletionTimestamp"].is_null(),
        evicted: status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "DisruptionTarget" && c["status"] == "True"),
        group_size: object["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"]
            .as_str()
            .and_then(|s| s.parse().ok()),
        requests,
    }
}

fn node_state(object: &Value) -> NodeState {
    let spec: Option<NodeSpec> = serde_json::from_value(object["spec"].clone()).ok();
    let spec = spec.as_ref();
    NodeState {
        labels: labels(object),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready: condition_true(object, &["Ready"]),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect(),
    }
}

fn pdb_state(object: &Value) -> PdbState {
    let spec: PodDisruptionBudgetSpec =
        serde_json::from_value(object["spec"].clone()).unwrap_or_default();
    let status: Option<PodDisruptionBudgetStatus> =
        serde_json::from_value(object["status"].clone()).ok();
    PdbState {
        selector: spec.selector,
        min_available: spec.min_available,
        max_unavailable: spec.max_unavailable,
        expected_pods: status.as_ref().and_then(|s| s.expected_pods),
        disruptions_allowed: status.as_ref().and_then(|s| s.disruptions_allowed),
    }
}

fn cluster_queue_state(object: &Value) -> ClusterQueueState {
    let flavors: Vec<Value> = object["spec"]["resourceGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["flavors"].as_array().cloned().unwrap_or_default())
        .collect();
    let mut unlimited: Vec<String> = flavors
        .iter()
        .flat_map(|f| f["resources"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["borrowingLimit"].is_null())
        .filter_map(|r| r["name"].as_str().map(String::from))
        .collect();
    unlimited.sort();
    unlimited.dedup();
    let usage: Vec<Value> = object["status"]["flavorsUsage"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ClusterQueueState {
        cohort: object["spec"]["cohortName"]
            .as_str()
            .or_else(|| object["spec"]["cohort"].as_str())
            .map(String::from),
        nominal: flavor_sum(&flavors, "nominalQuota"),
        borrowing_limit: flavor_sum(&flavors, "borrowingLimit"),
        unlimited_borrowing: unlimited,
        usage: flavor_sum(&usage, "total"),
    }
}

/// An object's compact state. Fields a state keeps are read leniently: a watch never fails on
/// an odd object, it records what it can read.
pub fn compact(kind: Kind, object: &Value) -> State {
    match kind {
        Kind::Pod => State::Pod(pod_state(object)),
        Kind::Node => State::Node(node_state(object)),
        Kind::PodDisruptionBudget => State::Pdb(pdb_state(object)),
        Kind::RayCluster => State::RayCluster(RayClusterState {
            labels: labels(object),
            suspended: object["spec"]["suspend"].as_bool().unwrap_or(false),
        }),
        Kind::RayService => State::RayService(RayServiceState {
            queue: labels(object).remove(raygate::types::kueue::QUEUE_NAME_LABEL),
            active: object["status"]["activeServiceStatus"]["rayClusterName"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(String::from),
        }),
        Kind::Workload => State::Workload(WorkloadState {
            rayservice: labels(object).remove(raygate::slices::RAYSERVICE_LABEL),
            admitted: condition_true(object, &["QuotaReserved", "Admitted"]),
            finished: condition_true(object, &["Finished"]),
            cluster_queue: object["status"]["admission"]["clusterQueue"]
                .as_str()
                .map(String::from),
            pods: object["spec"]["podSets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["count"].as_i64().unwrap_or(1))
                .sum(),
        }),
        Kind::ClusterQueue => State::ClusterQueue(cluster_queue_state(object)),
        Kind::LocalQueue => State::LocalQueue(LocalQueueState {
            cluster_queue: object["spec"]["clusterQueue"]
                .as_str()
                .unwrap_or_default()
                .into(),
        }),
        Kind::NodeRollout => State::NodeRollout(NodeRolloutState {
            phase: object["status"]["phase"].as_str().map(String::from),
            domain: object["status"]["domain"]
                .as_str()
                .or_else(|| object["status"]["currentDomain"].as_str())
                .map(String::from),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raygate_testing::core::{self, PodExt};
    use serde_json::json;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    /// A pod of group size 2 requesting 2 CPUs and a GPU, with a probe time the types reject.
    fn pod(ready: bool, node: Option<&str>) -> Value {
        let p = core::pod("ns/p", node.unwrap_or(""))
            .uid("u1")
            .label("app", "a")
            .annotation("leaderworkerset.sigs.k8s.io/size", "2")
            .requests(&[("cpu", "2"), ("nvidia.com/gpu", "1")])
            .condition("Ready", if ready { "True" } else { "False" })
            .condition("PodScheduled", "True");
        let mut v = serde_json::to_value(p).unwrap();
        v["status"]["conditions"][1]["lastProbeTime"] = json!("x");
        v
    }

    #[test]
    fn a_pod_keeps_what_the_invariants_read() {
        let State::Pod(p) = compact(Kind::Pod, &pod(true, Some("n1"))) else {
            panic!("a pod state")
        };
        assert_eq!(p.node.as_deref(), Some("n1"));
        assert!(p.ready && p.running() && p.healthy() && !p.gated && !p.evicted);
        assert_eq!(p.group_size, Some(2));
        assert_eq!(p.requests.get("nvidia.com/gpu"), Quantity::from_units(1));
        assert_eq!(p.requests.get("cpu"), Quantity::from_units(2));
        assert_eq!(p.labels["app"], "a");
    }

    #[test]
    fn an_unchanged_compact_state_is_not_recorded_twice() {
        let mut h = History::new();
        assert!(h.record_object(t(0), Kind::Pod, &pod(false, None)));
        // a status write that changes nothing the history keeps (a probe time)
        let mut same = pod(false, None);
        same["status"]["conditions"][1]["lastProbeTime"] = json!("y");
        assert!(!h.record_object(t(1), Kind::Pod, &same));
        assert!(h.record_object(t(2), Kind::Pod, &pod(false, Some("n1"))));
        assert!(h.record_object(t(3), Kind::Pod, &pod(true, Some("n1"))));
        let key = Key::new(Kind::Pod, "ns", "p");
        assert!(h.record(t(4), key.clone(), None));
        assert!(!h.record(t(5), key, None), "a deletion is recorded once");
        assert_eq!(h.changes.len(), 4);
        assert_eq!(h.span(), Some((t(0), t(4))));
        assert!(h.current().is_empty());
    }

    #[test]
    fn replay_applies_every_change_of_an_instant_together() {
        let mut h = History::new();
        h.record_object(t(0), Kind::Pod, &pod(false, None));
        h.record(
            t(0),
            Key::new(Kind::Node, "", "n1"),
            Some(State::Node(NodeState::default())),
        );
        h.record_object(t(7), Kind::Pod, &pod(true, Some("n1")));
        let mut r = h.replay();
        let (at, s) = r.step().unwrap();
        assert_eq!((at, s.len()), (t(0), 2));
        let (at, s) = r.step().unwrap();
        assert_eq!(at, t(7));
        assert!(matches!(&s[&Key::new(Kind::Pod, "ns", "p")], State::Pod(p) if p.ready));
        assert!(r.step().is_none());
    }

    #[test]
    fn a_late_delivery_never_moves_time_back() {
        let mut h = History::new();
        h.record_object(t(5), Kind::Pod, &pod(false, None));
        h.record(t(3), Key::new(Kind::Node, "", "n1"), None);
        h.record(
            t(3),
            Key::new(Kind::Node, "", "n1"),
            Some(State::Node(NodeState::default())),
        );
        assert_eq!(h.changes[1].at, t(5));
    }

    #[test]
    fn a_cluster_queue_sums_its_flavors_quota_and_usage() {
        let cq = json!({"metadata": {"name": "team"},
            "spec": {"cohortName": "all", "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "2"}]},
                {"name": "b", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 1}]}]}]},
            "status": {"flavorsUsage": [{"name": "a", "resources": [{"name": "nvidia.com/gpu", "total": "6"}]}]}});
        let State::ClusterQueue(q) = compact(Kind::ClusterQueue, &cq) else {
            panic!()
        };
        assert_eq!(q.nominal.get("nvidia.com/gpu"), Quantity::from_units(12));
        assert_eq!(
            q.borrowing_limit.get("nvidia.com/gpu"),
            Quantity::from_units(3)
        );
        assert!(q.unlimited_borrowing.is_empty());
        assert_eq!(q.usage.get("nvidia.com/gpu"), Quantity::from_units(6));
        assert_eq!(q.cohort.as_deref(), Some("all"));
    }

    #[test]
    fn a_workload_knows_its_service_admission_and_size() {
        let w = json!({"metadata": {"name": "svc-1", "namespace": "ns", "labels": {"raygate.io/rayservice": "svc"}},
            "spec": {"podSets": [{"name": "head", "count": 1}, {"name": "w", "count": 4}]},
            "status": {"admission": {"clusterQueue": "team"},
                "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Finished", "status": "False"}]}});
        assert_eq!(
            compact(Kind::Workload, &w),
            State::Workload(WorkloadState {
                rayservice: Some("svc".into()),
                admitted: true,
                finished: false,
                cluster_queue: Some("team".into()),
                pods: 5,
            })
        );
    }
}
