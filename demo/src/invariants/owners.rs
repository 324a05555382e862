//! Whose a pod is: the RayService whose child it belongs to, the ClusterQueue it is charged to.

use std::collections::BTreeMap;

use crate::history::{Key, Kind, PodState, State};

/// KubeRay's pod label naming the pod's RayCluster.
pub const RAY_CLUSTER_LABEL: &str = "ray.io/cluster";
/// KubeRay's RayCluster label naming the RayService that made it.
pub const ORIGINATED_FROM_NAME: &str = "ray.io/originated-from-cr-name";

pub(super) fn pods(states: &BTreeMap<Key, State>) -> impl Iterator<Item = (&Key, &PodState)> {
    states.iter().filter_map(|(k, s)| match s {
        State::Pod(p) => Some((k, p)),
        _ => None,
    })
}

/// Whether `pod` is bound to a node whose Ready condition is not True.
pub(super) fn on_down_node(states: &BTreeMap<Key, State>, pod: &PodState) -> bool {
    pod.node.as_ref().is_some_and(|n| {
        matches!(states.get(&Key::new(Kind::Node, "", n)), Some(State::Node(node)) if !node.ready)
    })
}

/// The RayService (namespace, name) whose child a pod belongs to.
pub(super) fn service_of_pod(
    states: &BTreeMap<Key, State>,
    key: &Key,
    pod: &PodState,
) -> Option<String> {
    let cluster = pod.labels.get(RAY_CLUSTER_LABEL)?;
    match states.get(&Key::new(Kind::RayCluster, &key.namespace, cluster))? {
        State::RayCluster(rc) => rc.labels.get(ORIGINATED_FROM_NAME).cloned(),
        _ => None,
    }
}

/// The ClusterQueue a pod is charged to: through its RayService's queue label, or its own.
pub fn queue_of_pod(states: &BTreeMap<Key, State>, key: &Key, pod: &PodState) -> Option<String> {
    let local = match service_of_pod(states, key, pod) {
        Some(svc) => match states.get(&Key::new(Kind::RayService, &key.namespace, &svc))? {
            State::RayService(s) => s.queue.clone()?,
            _ => return None,
        },
        None => pod
            .labels
            .get(raygate::types::kueue::QUEUE_NAME_LABEL)?
            .clone(),
    };
    match states.get(&Key::new(Kind::LocalQueue, &key.namespace, &local))? {
        State::LocalQueue(lq) => Some(lq.cluster_queue.clone()),
        _ => None,
    }
}
