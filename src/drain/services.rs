//! The RayServices a drain may move off a domain (pure): each service's clusters as KubeRay
//! names them, whether KubeRay would start a new cluster for it, whether the gate holds that
//! cluster for quota (see [`engine::ServiceView`](super::engine::ServiceView)).

use std::collections::HashMap;

use super::engine::{KUBERAY_SPEC_HASH, MOVE_MARK, ServiceView};
use super::{name, namespace};
use crate::conditions;
use crate::types::kueue::{Workload, condition};
use crate::types::ray::{RayCluster, RayService};

/// KubeRay's upgrade strategies that start a new cluster (`isZeroDowntimeUpgradeEnabled`).
const NEW_CLUSTER: [&str; 2] = ["NewCluster", "NewClusterWithIncrementalUpgrade"];

/// One view per RayService that serves from a cluster.
pub fn views(
    services: &[RayService],
    clusters: &[RayCluster],
    workloads: &[Workload],
) -> Vec<ServiceView> {
    let clusters: HashMap<(&str, &str), &RayCluster> = clusters
        .iter()
        .map(|c| ((namespace(&c.metadata), name(&c.metadata)), c))
        .collect();
    services
        .iter()
        .filter_map(|s| view(s, &clusters, workloads))
        .collect()
}

fn view(
    s: &RayService,
    clusters: &HashMap<(&str, &str), &RayCluster>,
    workloads: &[Workload],
) -> Option<ServiceView> {
    let status = s.status.as_ref()?;
    let name_of = |c: Option<&crate::types::ray::RayServiceClusterStatus>| {
        c.and_then(|c| c.ray_cluster_name.clone())
            .filter(|n| !n.is_empty())
    };
    let active = name_of(status.active_service_status.as_ref())?;
    let pending = name_of(status.pending_service_status.as_ref());
    let namespace = namespace(&s.metadata);
    let strategy = s
        .spec
        .upgrade_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref());
    let unmovable = strategy.filter(|t| !NEW_CLUSTER.contains(t)).map(|t| {
        format!("its spec.upgradeStrategy.type is {t}: KubeRay starts no new cluster for it")
    });
    let marked = clusters
        .get(&(namespace, active.as_str()))
        .and_then(|c| c.metadata.annotations.as_ref()?.get(KUBERAY_SPEC_HASH))
        .is_some_and(|h| h == MOVE_MARK);
    let held = pending
        .as_deref()
        .and_then(|p| clusters.get(&(namespace, p)))
        .filter(|c| c.spec.suspend == Some(true))
        .and_then(|_| held_message(s, workloads));
    Some(ServiceView {
        namespace: namespace.to_string(),
        name: name(&s.metadata).to_string(),
        active: Some(active),
        pending,
        unmovable,
        held,
        marked,
    })
}

/// The admission's refusal of one of the service's slices (`QuotaReserved=False` with a
/// message): the shortfall that holds its pending cluster.
fn held_message(s: &RayService, workloads: &[Workload]) -> Option<String> {
    let uid = s.metadata.uid.as_deref()?;
    let ns = namespace(&s.metadata);
    workloads
        .iter()
        .filter(|w| namespace(&w.metadata) == ns)
        .filter(|w| {
            let owners = w.metadata.owner_references.iter().flatten();
            owners
                .clone()
                .any(|o| o.uid == uid && o.kind == "RayService")
        })
        .find_map(|w| {
            let status = w.status.as_ref()?;
            let c = conditions::find(&status.conditions, condition::QUOTA_RESERVED)?;
            (c.status == "False" && !c.message.is_empty())
                .then(|| format!("slice {} is pending: {}", name(&w.metadata), c.message))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(strategy: Option<&str>, pending: Option<&str>) -> RayService {
        let mut spec = json!({"rayClusterConfig": {"headGroupSpec": {"template": {}}}});
        if let Some(t) = strategy {
            spec["upgradeStrategy"] = json!({"type": t});
        }
        serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "llm", "namespace": "ns", "uid": "u1"},
            "spec": spec,
            "status": {
                "activeServiceStatus": {"rayClusterName": "llm-a"},
                "pendingServiceStatus": {"rayClusterName": pending.unwrap_or("")},
            },
        }))
        .unwrap()
    }

    fn cluster(name: &str, suspended: bool, hash: &str) -> RayCluster {
        serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": "ns", "annotations": {KUBERAY_SPEC_HASH: hash}},
            "spec": {"headGroupSpec": {"template": {}}, "suspend": suspended},
        }))
        .unwrap()
    }

    fn slice(owner_uid: &str, reserved: &str, message: &str) -> Workload {
        serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "llm-2", "namespace": "ns",
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService",
                    "name": "llm", "uid": owner_uid}]},
            "spec": {"podSets": []},
            "status": {"conditions": [{"type": "QuotaReserved", "status": reserved,
                "reason": "Pending", "message": message,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    /// Names from the status, the move mark read from the active cluster, the upgrade strategy.
    #[test]
    fn a_service_is_seen_as_kuberay_names_its_clusters() {
        let v = views(
            &[service(None, None)],
            &[cluster("llm-a", false, MOVE_MARK)],
            &[],
        );
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].active.as_deref(), v[0].pending.as_deref()),
            (Some("llm-a"), None)
        );
        assert!(v[0].marked && v[0].unmovable.is_none() && v[0].held.is_none());
        let v = views(
            &[service(Some("None"), None)],
            &[cluster("llm-a", false, "h")],
            &[],
        );
        assert!(!v[0].marked);
        assert!(v[0].unmovable.as_deref().unwrap().contains("None"), "{v:?}");
        let v = views(
            &[service(Some("NewClusterWithIncrementalUpgrade"), None)],
            &[],
            &[],
        );
        assert!(v[0].unmovable.is_none());
    }

    /// Held: the pending cluster suspended and one of the service's slices refused by the
    /// admission, with its message; a slice of another service, or one not refused, is not.
    #[test]
    fn a_pending_cluster_is_held_only_when_suspended_and_its_slice_refused() {
        let s = [service(None, Some("llm-b"))];
        let held = [cluster("llm-a", false, "h"), cluster("llm-b", true, "h")];
        let short = slice("u1", "False", "insufficient quota for nvidia.com/gpu");
        let v = views(&s, &held, std::slice::from_ref(&short));
        assert_eq!(
            v[0].held.as_deref(),
            Some("slice llm-2 is pending: insufficient quota for nvidia.com/gpu")
        );
        assert_eq!(
            views(&s, &held, &[slice("other", "False", "x")])[0].held,
            None
        );
        assert_eq!(views(&s, &held, &[slice("u1", "True", "")])[0].held, None);
        let released = [cluster("llm-a", false, "h"), cluster("llm-b", false, "h")];
        assert_eq!(views(&s, &released, &[short])[0].held, None);
    }
}
