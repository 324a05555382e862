//! What each watch keeps of the objects it stores: its list options, an index kept beside the
//! store ([`crate::runtime::Index`]), and the fields cut before the store.

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;

use crate::runtime::Index;

/// What a watch selects and keeps: its list options, an index kept beside its store, and what is
/// cut from each object before it is stored.
pub struct Selection<K> {
    pub(super) config: watcher::Config,
    pub(super) index: Option<Index<K>>,
    /// Cuts fields nothing reads from an object before it is stored.
    pub(super) slim: fn(&mut K),
}

impl<K> Selection<K> {
    pub(super) fn of(config: watcher::Config) -> Self {
        Selection {
            config,
            index: None,
            slim: |_| {},
        }
    }

    pub(super) fn indexed(self, index: Index<K>) -> Self {
        Selection {
            index: Some(index),
            ..self
        }
    }
}

/// What raygate reads of a Ray pod, the rest cut before the store (100,000 pods are a fleet's
/// worth): metadata; from the spec, the node, the scheduling gates, the overhead and each
/// container's and init container's name, resources and restart policy (a pod's requests,
/// `pod_requests`); from the status, the phase. controller-runtime's cache transforms
/// (`cache.Options.DefaultTransform`) do the same for Kueue's pod integration.
pub(super) fn slim_pod(p: &mut Pod) {
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    let slim = |c: &Container| Container {
        name: c.name.clone(),
        resources: c.resources.clone(),
        restart_policy: c.restart_policy.clone(),
        ..Default::default()
    };
    if let Some(spec) = &p.spec {
        p.spec = Some(PodSpec {
            containers: spec.containers.iter().map(slim).collect(),
            init_containers: spec
                .init_containers
                .as_ref()
                .map(|c| c.iter().map(slim).collect()),
            node_name: spec.node_name.clone(),
            overhead: spec.overhead.clone(),
            scheduling_gates: spec.scheduling_gates.clone(),
            resources: spec.resources.clone(),
            ..Default::default()
        });
    }
    if let Some(status) = &p.status {
        p.status = Some(PodStatus {
            phase: status.phase.clone(),
            ..Default::default()
        });
    }
}

/// Drops the `managedFields` entries of every field manager but raygate's own (`raygate-…`).
pub(super) fn keep_own_managed_fields(meta: &mut kube::api::ObjectMeta) {
    if let Some(entries) = &mut meta.managed_fields {
        entries.retain(|m| {
            m.manager
                .as_deref()
                .is_some_and(|n| n.starts_with(crate::controller::FIELD_MANAGER_PREFIX))
        });
        if entries.is_empty() {
            meta.managed_fields = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podsets::pod_requests;
    use serde_json::json;

    #[test]
    fn a_slim_pod_keeps_what_raygate_reads_and_its_requests() {
        let full: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"ray.io/group": "w"},
                "annotations": {"a": "b"}, "resourceVersion": "7"},
            "spec": {"nodeName": "n1", "schedulingGates": [{"name": "raygate.io/quota"}],
                "overhead": {"cpu": "100m"},
                "volumes": [{"name": "v", "emptyDir": {}}],
                "initContainers": [
                    {"name": "wait-gcs-ready", "image": "ray", "command": ["sh"],
                        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}}},
                    {"name": "sidecar", "image": "x", "restartPolicy": "Always",
                        "resources": {"requests": {"cpu": "50m"}}}],
                "containers": [{"name": "ray-worker", "image": "ray", "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "ray-worker", "ready": true, "restartCount": 0,
                    "image": "ray", "imageID": ""}]}
        }))
        .unwrap();
        let mut slim = full.clone();
        slim_pod(&mut slim);
        assert_eq!(
            pod_requests(slim.spec.as_ref().unwrap(), "spec", "p").unwrap(),
            pod_requests(full.spec.as_ref().unwrap(), "spec", "p").unwrap()
        );
        assert_eq!(slim.metadata, full.metadata);
        let spec = slim.spec.as_ref().unwrap();
        assert_eq!(
            spec.scheduling_gates,
            full.spec.as_ref().unwrap().scheduling_gates
        );
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.volumes.is_none() && spec.containers[0].image.is_none());
        let status = slim.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.conditions.is_none());
        assert!(
            serde_json::to_string(&slim).unwrap().len()
                < serde_json::to_string(&full).unwrap().len()
        );
    }
}
