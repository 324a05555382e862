//! Core Kubernetes objects for tests: nodes, pods and budgets with the fields the drain reads.
//! The upgrade-domain label is [`UD`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, Node, NodeCondition, NodeSpec, NodeStatus,
    NodeSystemInfo, Pod, PodCondition, PodReadinessGate, PodSchedulingGate, PodSpec, PodStatus,
    Probe, ResourceRequirements, Taint, Toleration, Volume,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

pub const UD: &str = "topology.example.com/upgrade-domain";

/// `(name, quantity)` pairs as a resource list.
fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), crate::kq(v)))
        .collect()
}

fn meta(ns_name: &str) -> ObjectMeta {
    let (ns, name) = ns_name.split_once('/').unwrap_or(("", ns_name));
    ObjectMeta {
        namespace: (!ns.is_empty()).then(|| ns.to_string()),
        name: Some(name.to_string()),
        generation: Some(1),
        ..ObjectMeta::default()
    }
}

/// A node in upgrade domain `domain` (`""`: no domain label).
pub fn node(name: &str, domain: &str) -> Node {
    let mut n = Node {
        metadata: meta(name),
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus::default()),
    };
    if !domain.is_empty() {
        n = n.label(UD, domain);
    }
    n
}

pub trait NodeExt: Sized {
    fn label(self, key: &str, value: &str) -> Self;
    fn cordoned(self) -> Self;
    fn tainted(self, taint: Taint) -> Self;
    fn kubelet(self, version: &str) -> Self;
    /// Sets condition `type_` to `status` (replacing a condition of that type).
    fn condition(self, type_: &str, status: &str) -> Self;
    /// A `Ready=True` condition.
    fn ready(self) -> Self {
        self.condition("Ready", "True")
    }
    /// `status.allocatable`, from `(resource, quantity)` pairs.
    fn allocatable(self, resources: &[(&str, &str)]) -> Self;
    /// `status.capacity`, from `(resource, quantity)` pairs.
    fn capacity(self, resources: &[(&str, &str)]) -> Self;
    /// Adds an annotation.
    fn annotation(self, key: &str, value: &str) -> Self;
}

impl NodeExt for Node {
    fn label(mut self, key: &str, value: &str) -> Self {
        let labels = self.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(key.to_string(), value.to_string());
        self
    }

    fn cordoned(mut self) -> Self {
        self.spec.get_or_insert_default().unschedulable = Some(true);
        self
    }

    fn tainted(mut self, taint: Taint) -> Self {
        let spec = self.spec.get_or_insert_default();
        spec.taints.get_or_insert_default().push(taint);
        self
    }

    fn kubelet(mut self, version: &str) -> Self {
        let status = self.status.get_or_insert_default();
        let info = status.node_info.get_or_insert_with(NodeSystemInfo::default);
        info.kubelet_version = version.to_string();
        self
    }

    fn condition(mut self, type_: &str, status: &str) -> Self {
        let conditions = self
            .status
            .get_or_insert_default()
            .conditions
            .get_or_insert_default();
        conditions.retain(|c| c.type_ != type_);
        conditions.push(NodeCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            ..NodeCondition::default()
        });
        self
    }

    fn allocatable(mut self, resources: &[(&str, &str)]) -> Self {
        self.status.get_or_insert_default().allocatable = Some(quantities(resources));
        self
    }

    fn capacity(mut self, resources: &[(&str, &str)]) -> Self {
        self.status.get_or_insert_default().capacity = Some(quantities(resources));
        self
    }

    fn annotation(mut self, key: &str, value: &str) -> Self {
        let a = self.metadata.annotations.get_or_insert_with(BTreeMap::new);
        a.insert(key.to_string(), value.to_string());
        self
    }
}

pub fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.to_string(),
        effect: effect.to_string(),
        ..Taint::default()
    }
}

/// A taint `key=value:effect`.
pub fn taint_with_value(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        value: Some(value.to_string()),
        ..taint(key, effect)
    }
}

/// A Running pod `ns/name` bound to `node`, controlled by ReplicaSet `rs`.
pub fn pod(ns_name: &str, node: &str) -> Pod {
    Pod {
        metadata: meta(ns_name),
        spec: Some(PodSpec {
            node_name: (!node.is_empty()).then(|| node.to_string()),
            containers: vec![Container {
                name: "main".to_string(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".to_string()),
            ..PodStatus::default()
        }),
    }
    .owned_by("apps/v1", "ReplicaSet", "rs")
}

pub trait PodExt: Sized {
    fn label(self, key: &str, value: &str) -> Self;
    fn owned_by(self, api_version: &str, kind: &str, name: &str) -> Self;
    fn unowned(self) -> Self;
    fn phase(self, phase: &str) -> Self;
    fn empty_dir(self) -> Self;
    fn mirror(self) -> Self;
    fn deleting_since(self, at: Timestamp) -> Self;
    fn readiness_probe(self) -> Self;
    fn readiness_gate(self) -> Self;
    /// `metadata.uid`.
    fn uid(self, uid: &str) -> Self;
    /// Adds an annotation.
    fn annotation(self, key: &str, value: &str) -> Self;
    /// `metadata.creationTimestamp`.
    fn created_at(self, at: Timestamp) -> Self;
    /// Sets condition `type_` to `status` (replacing a condition of that type).
    fn condition(self, type_: &str, status: &str) -> Self;
    /// A `Ready=True` condition.
    fn ready(self) -> Self {
        self.condition("Ready", "True")
    }
    /// Sets condition `type_` to `status` with `reason` (`""`: none), last changed at `since`.
    fn condition_at(self, type_: &str, status: &str, reason: &str, since: Timestamp) -> Self;
    /// The first container's requests, from `(resource, quantity)` pairs.
    fn requests(self, resources: &[(&str, &str)]) -> Self;
    /// Appends scheduling gate `name`.
    fn scheduling_gate(self, name: &str) -> Self;
    /// `spec.terminationGracePeriodSeconds`.
    fn grace_period(self, seconds: i64) -> Self;
    /// Appends an `Exists` toleration of `key`/`effect` (`""`: any) for `seconds` (`None`: always).
    fn toleration(self, key: &str, effect: &str, seconds: Option<i64>) -> Self;
    /// Adds `key: value` to `spec.nodeSelector`.
    fn node_selector(self, key: &str, value: &str) -> Self;
    /// `spec.affinity`.
    fn affinity(self, affinity: Affinity) -> Self;
}

impl PodExt for Pod {
    fn label(mut self, key: &str, value: &str) -> Self {
        let labels = self.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(key.to_string(), value.to_string());
        self
    }

    fn owned_by(mut self, api_version: &str, kind: &str, name: &str) -> Self {
        self.metadata.owner_references = Some(vec![OwnerReference {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            name: name.to_string(),
            uid: format!("uid-{name}"),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        self
    }

    fn unowned(mut self) -> Self {
        self.metadata.owner_references = None;
        self
    }

    fn phase(mut self, phase: &str) -> Self {
        self.status.get_or_insert_default().phase = Some(phase.to_string());
        self
    }

    fn empty_dir(mut self) -> Self {
        let spec = self.spec.get_or_insert_default();
        spec.volumes.get_or_insert_default().push(Volume {
            name: "scratch".to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        self
    }

    fn mirror(mut self) -> Self {
        let a = self.metadata.annotations.get_or_insert_with(BTreeMap::new);
        // Kubernetes' `ConfigMirrorAnnotationKey` (the drain's `MIRROR_POD_ANNOTATION`)
        a.insert(
            "kubernetes.io/config.mirror".to_string(),
            "hash".to_string(),
        );
        self.owned_by("v1", "Node", "node")
    }

    fn deleting_since(mut self, at: Timestamp) -> Self {
        self.metadata.deletion_timestamp = Some(Time(at));
        self
    }

    fn readiness_probe(mut self) -> Self {
        let spec = self.spec.get_or_insert_default();
        if let Some(c) = spec.containers.first_mut() {
            c.readiness_probe = Some(Probe::default());
        }
        self
    }

    fn readiness_gate(mut self) -> Self {
        let spec = self.spec.get_or_insert_default();
        spec.readiness_gates = Some(vec![PodReadinessGate {
            condition_type: "example.com/group-ready".to_string(),
        }]);
        self
    }

    fn uid(mut self, uid: &str) -> Self {
        self.metadata.uid = Some(uid.to_string());
        self
    }

    fn annotation(mut self, key: &str, value: &str) -> Self {
        let a = self.metadata.annotations.get_or_insert_with(BTreeMap::new);
        a.insert(key.to_string(), value.to_string());
        self
    }

    fn created_at(mut self, at: Timestamp) -> Self {
        self.metadata.creation_timestamp = Some(Time(at));
        self
    }

    fn condition(self, type_: &str, status: &str) -> Self {
        with_condition(
            self,
            PodCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                ..PodCondition::default()
            },
        )
    }

    fn condition_at(self, type_: &str, status: &str, reason: &str, since: Timestamp) -> Self {
        with_condition(
            self,
            PodCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: (!reason.is_empty()).then(|| reason.to_string()),
                last_transition_time: Some(Time(since)),
                ..PodCondition::default()
            },
        )
    }

    fn requests(mut self, resources: &[(&str, &str)]) -> Self {
        let spec = self.spec.get_or_insert_default();
        if let Some(c) = spec.containers.first_mut() {
            c.resources = Some(ResourceRequirements {
                requests: Some(quantities(resources)),
                ..ResourceRequirements::default()
            });
        }
        self
    }

    fn scheduling_gate(mut self, name: &str) -> Self {
        let spec = self.spec.get_or_insert_default();
        spec.scheduling_gates
            .get_or_insert_default()
            .push(PodSchedulingGate {
                name: name.to_string(),
            });
        self
    }

    fn grace_period(mut self, seconds: i64) -> Self {
        self.spec
            .get_or_insert_default()
            .termination_grace_period_seconds = Some(seconds);
        self
    }

    fn toleration(mut self, key: &str, effect: &str, seconds: Option<i64>) -> Self {
        let spec = self.spec.get_or_insert_default();
        spec.tolerations.get_or_insert_default().push(Toleration {
            key: (!key.is_empty()).then(|| key.to_string()),
            operator: Some("Exists".to_string()),
            effect: (!effect.is_empty()).then(|| effect.to_string()),
            toleration_seconds: seconds,
            value: None,
        });
        self
    }

    fn node_selector(mut self, key: &str, value: &str) -> Self {
        let spec = self.spec.get_or_insert_default();
        let selector = spec.node_selector.get_or_insert_with(BTreeMap::new);
        selector.insert(key.to_string(), value.to_string());
        self
    }

    fn affinity(mut self, affinity: Affinity) -> Self {
        self.spec.get_or_insert_default().affinity = Some(affinity);
        self
    }
}

/// `pod` with `condition` (replacing a condition of its type).
fn with_condition(mut pod: Pod, condition: PodCondition) -> Pod {
    let conditions = pod
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    conditions.retain(|c| c.type_ != condition.type_);
    conditions.push(condition);
    pod
}

/// A budget `ns/name` with `matchLabels` and `minAvailable: 1`.
pub fn pdb(ns_name: &str, match_labels: &[(&str, &str)]) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(ns_name),
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(
                    match_labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                match_expressions: None,
            }),
            min_available: Some(IntOrString::Int(1)),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

pub trait PdbExt: Sized {
    fn min_available(self, v: IntOrString) -> Self;
    fn max_unavailable(self, v: IntOrString) -> Self;
    fn selector(self, selector: Option<LabelSelector>) -> Self;
    fn observed(self, expected: i32, desired: i32) -> Self;
    fn sync_failed(self, message: &str) -> Self;
    /// `spec.unhealthyPodEvictionPolicy` (`IfHealthyBudget` or `AlwaysAllow`).
    fn unhealthy_pod_eviction_policy(self, policy: &str) -> Self;
}

impl PdbExt for PodDisruptionBudget {
    fn min_available(mut self, v: IntOrString) -> Self {
        let spec = self.spec.get_or_insert_default();
        (spec.min_available, spec.max_unavailable) = (Some(v), None);
        self
    }

    fn max_unavailable(mut self, v: IntOrString) -> Self {
        let spec = self.spec.get_or_insert_default();
        (spec.min_available, spec.max_unavailable) = (None, Some(v));
        self
    }

    fn selector(mut self, selector: Option<LabelSelector>) -> Self {
        self.spec.get_or_insert_default().selector = selector;
        self
    }

    fn observed(mut self, expected: i32, desired: i32) -> Self {
        self.status = Some(PodDisruptionBudgetStatus {
            observed_generation: self.metadata.generation,
            expected_pods: Some(expected),
            desired_healthy: Some(desired),
            current_healthy: Some(expected),
            disruptions_allowed: Some((expected - desired).max(0)),
            ..PodDisruptionBudgetStatus::default()
        });
        self
    }

    fn sync_failed(mut self, message: &str) -> Self {
        let status = self.status.get_or_insert_default();
        status.conditions = Some(vec![Condition {
            type_: "DisruptionAllowed".to_string(),
            status: "False".to_string(),
            reason: "SyncFailed".to_string(),
            message: message.to_string(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }]);
        self
    }

    fn unhealthy_pod_eviction_policy(mut self, policy: &str) -> Self {
        self.spec
            .get_or_insert_default()
            .unhealthy_pod_eviction_policy = Some(policy.to_string());
        self
    }
}

pub fn int(n: i32) -> IntOrString {
    IntOrString::Int(n)
}

pub fn pct(s: &str) -> IntOrString {
    IntOrString::String(s.to_string())
}
