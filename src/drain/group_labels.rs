//! How the drain recognises gang groups among pods: the pod labels whose value names a group
//! (LeaderWorkerSet's group key, KubeRay's multi-host replica name, a custom label), each with
//! the labels naming the group's workload. A rollout may recognise several kinds at once (its
//! LeaderWorkerSets and its RayClusters' multi-host replicas): a pod belongs to the group named
//! by the first of the labels it carries.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

/// LeaderWorkerSet's group label (`GroupUniqueHashLabelKey`, set by its pod webhook on the
/// leader and copied to the workers).
pub const LWS_GROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/group-key";
/// LeaderWorkerSet's worker index: `0` on the leader.
pub const LWS_WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// LeaderWorkerSet's name label.
pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// KubeRay v1.7's multi-host replica label (`RayWorkerReplicaNameKey`, `numOfHosts > 1`):
/// `<group>-<5 random chars>`, new on every recreation.
pub const KUBERAY_REPLICA_NAME: &str = "ray.io/worker-group-replica-name";
/// KubeRay v1.7's host index within a multi-host replica (`RayHostIndexKey`).
pub const KUBERAY_HOST_INDEX: &str = "ray.io/replica-host-index";
/// KubeRay's cluster and worker-group labels.
pub const KUBERAY_CLUSTER: &str = "ray.io/cluster";
pub const KUBERAY_GROUP: &str = "ray.io/group";

/// One kind of group: the label naming a group, and the labels naming its workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupLabel {
    /// The pod label whose value names a group.
    pub label: String,
    /// Pod labels whose values (with the namespace) name a group's workload, e.g. KubeRay's
    /// `ray.io/cluster` and `ray.io/group`. The health check judges an evicted group recovered by
    /// its workload's count of Ready groups, since a recreated group may get a new name. Empty:
    /// groups are recognised by name only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workload_labels: Vec<String>,
}

impl GroupLabel {
    /// `label` with the workload labels of its preset: KubeRay's replica name → cluster and
    /// worker group; LeaderWorkerSet's group key → its name; any other label → none.
    pub fn new(label: &str) -> Self {
        let workload: &[&str] = match label {
            KUBERAY_REPLICA_NAME => &[KUBERAY_CLUSTER, KUBERAY_GROUP],
            LWS_GROUP_KEY => &[LWS_NAME],
            _ => &[],
        };
        GroupLabel::with_workload(label, workload.iter().map(|s| s.to_string()).collect())
    }

    pub fn with_workload(label: &str, workload_labels: Vec<String>) -> Self {
        GroupLabel {
            label: label.to_string(),
            workload_labels,
        }
    }

    /// Whether groups of this kind are recognised by their workload (see
    /// [`GroupLabel::workload_labels`]).
    pub fn by_workload(&self) -> bool {
        !self.workload_labels.is_empty()
    }
}

/// The kinds of groups a drain recognises, in order of precedence. Empty: no groups (each
/// protected pod counts alone).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct GroupLabels(Vec<GroupLabel>);

impl GroupLabels {
    /// The kinds, a label named twice kept once (its first place).
    pub fn new(kinds: impl IntoIterator<Item = GroupLabel>) -> Self {
        let mut out: Vec<GroupLabel> = Vec::new();
        for k in kinds {
            if !out.iter().any(|o| o.label == k.label) {
                out.push(k);
            }
        }
        GroupLabels(out)
    }

    /// Labels by name, each with its preset's workload labels ([`GroupLabel::new`]).
    pub fn of_labels<S: AsRef<str>>(labels: &[S]) -> Self {
        GroupLabels::new(labels.iter().map(|l| GroupLabel::new(l.as_ref())))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &GroupLabel> {
        self.0.iter()
    }

    /// The group a pod with `labels` belongs to: the first kind whose label it carries, and
    /// that label's value.
    pub fn kind_of<'p>(
        &self,
        labels: Option<&'p BTreeMap<String, String>>,
    ) -> Option<(&GroupLabel, &'p str)> {
        let labels = labels?;
        self.0
            .iter()
            .find_map(|k| Some((k, labels.get(&k.label)?.as_str())))
    }

    /// The name of `pod`'s group (see [`GroupLabels::kind_of`]).
    pub fn group<'p>(&self, pod: &'p Pod) -> Option<&'p str> {
        self.kind_of(pod.metadata.labels.as_ref()).map(|(_, g)| g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raygate_testing::core::{self, PodExt};

    #[test]
    fn a_pod_belongs_to_the_group_of_the_first_label_it_carries() {
        let kinds = GroupLabels::of_labels(&[LWS_GROUP_KEY, KUBERAY_REPLICA_NAME, LWS_GROUP_KEY]);
        assert_eq!(kinds.iter().count(), 2, "a label named twice counts once");
        let lws = core::pod("ns/a", "n").label(LWS_GROUP_KEY, "g1");
        let ray = core::pod("ns/b", "n").label(KUBERAY_REPLICA_NAME, "workers-x1y2z");
        let both = ray.clone().label(LWS_GROUP_KEY, "g2");
        let neither = core::pod("ns/c", "n").label("app", "web");
        assert_eq!(kinds.group(&lws), Some("g1"));
        assert_eq!(kinds.group(&ray), Some("workers-x1y2z"));
        assert_eq!(kinds.group(&both), Some("g2"), "the first kind wins");
        assert_eq!(kinds.group(&neither), None);
        let (kind, _) = kinds.kind_of(ray.metadata.labels.as_ref()).unwrap();
        assert_eq!(kind.workload_labels, [KUBERAY_CLUSTER, KUBERAY_GROUP]);
        assert!(GroupLabels::default().group(&lws).is_none());
    }

    #[test]
    fn known_labels_bring_their_workload_labels_and_others_none() {
        assert_eq!(
            GroupLabel::new(KUBERAY_REPLICA_NAME).workload_labels,
            [KUBERAY_CLUSTER, KUBERAY_GROUP]
        );
        assert_eq!(GroupLabel::new(LWS_GROUP_KEY).workload_labels, [LWS_NAME]);
        assert!(!GroupLabel::new("group").by_workload());
    }
}
