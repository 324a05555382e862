//! What the `/metrics` gauges say about held RayServices and pending slices (pure): computed at
//! scrape time from the controller's caches, so they are right in both admission modes and
//! never drift from the objects.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use crate::gate::RELEASED_ANNOTATION;
use crate::meta;
use crate::podsets;
use crate::quantity::Resources;
use crate::slices::MANAGED_BY;
use crate::types::kueue::{LocalQueue, Workload};
use crate::types::ray::{RayCluster, RayService};
use crate::workload;

/// One opted-in RayService with at least one child raygate holds.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldService {
    pub namespace: String,
    pub name: String,
    pub local_queue: String,
    /// The LocalQueue's ClusterQueue (empty when the LocalQueue is unknown).
    pub cluster_queue: String,
    pub held_children: usize,
    /// Seconds since the oldest held child was created.
    pub hold_seconds: f64,
    /// Requests of the held children's pods (what quota must still cover for them).
    pub held: Resources,
}

/// The scrape-time gauges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    /// raygate's slices that are neither finished nor holding quota.
    pub pending_slices: usize,
    pub held: Vec<HeldService>,
    /// Per ClusterQueue: held RayServices and their held requests.
    pub cluster_queues: BTreeMap<String, (usize, Resources)>,
}

fn is_raygates(w: &Workload) -> bool {
    meta::label(&w.metadata, "app.kubernetes.io/managed-by") == Some(MANAGED_BY)
}

/// Computes the gauges at `now`.
pub fn gauges<'a>(
    services: impl IntoIterator<Item = &'a RayService>,
    clusters: &[&RayCluster],
    workloads: impl IntoIterator<Item = &'a Workload>,
    local_queues: impl IntoIterator<Item = &'a LocalQueue>,
    now: Timestamp,
) -> Gauges {
    let pending_slices = workloads
        .into_iter()
        .filter(|w| is_raygates(w))
        .filter(|w| {
            let st = w.status.as_ref();
            !workload::is_finished(st) && !workload::holds_quota(st)
        })
        .count();
    let lq_to_cq: BTreeMap<String, String> = local_queues
        .into_iter()
        .filter_map(|lq| Some((meta::key(&lq.metadata), lq.spec.cluster_queue.clone()?)))
        .collect();
    let by_owner = children_by_owner(clusters);
    let mut held = Vec::new();
    let mut cluster_queues: BTreeMap<String, (usize, Resources)> = BTreeMap::new();
    for svc in services {
        let Some(queue) = crate::gate::queue_name(svc) else {
            continue;
        };
        let ns = svc
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = svc.metadata.name.clone().unwrap_or_default();
        let Some(children) = by_owner.get(&(ns.clone(), name.clone())) else {
            continue;
        };
        let (n, requests, oldest) = held_children(svc, children);
        if n == 0 {
            continue;
        }
        let cluster_queue = lq_to_cq
            .get(&meta::key_of(&ns, queue))
            .cloned()
            .unwrap_or_default();
        let hold_seconds = oldest
            .map(|t| (now.as_millisecond() - t.as_millisecond()).max(0) as f64 / 1000.0)
            .unwrap_or_default();
        let entry = cluster_queues.entry(cluster_queue.clone()).or_default();
        entry.0 += 1;
        entry.1.add(&requests);
        held.push(HeldService {
            namespace: ns,
            name,
            local_queue: queue.to_string(),
            cluster_queue,
            held_children: n,
            hold_seconds,
            held: requests,
        });
    }
    Gauges {
        pending_slices,
        held,
        cluster_queues,
    }
}

/// Children by (namespace, owner), so a scrape is linear in the objects.
fn children_by_owner<'a>(
    clusters: &[&'a RayCluster],
) -> BTreeMap<(String, String), Vec<&'a RayCluster>> {
    let mut by_owner: BTreeMap<(String, String), Vec<&RayCluster>> = BTreeMap::new();
    for c in clusters {
        if let (Some(ns), Some(owner)) = (
            c.metadata.namespace.clone(),
            meta::owning_rayservice(&c.metadata),
        ) {
            by_owner.entry((ns, owner.to_string())).or_default().push(c);
        }
    }
    by_owner
}

/// The children of `svc` it holds (suspended, never released): how many, their pods' requests,
/// and when the oldest was created.
fn held_children(
    svc: &RayService,
    children: &[&RayCluster],
) -> (usize, Resources, Option<Timestamp>) {
    let released: Vec<&str> = meta::annotation(&svc.metadata, RELEASED_ANNOTATION)
        .map(|a| a.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let children = podsets::children_of(svc, children.iter().copied());
    let mut n = 0;
    let mut requests = Resources::new();
    let mut oldest: Option<Timestamp> = None;
    for c in children {
        let cname = c.metadata.name.as_deref().unwrap_or_default();
        if c.spec.suspend != Some(true) || released.contains(&cname) {
            continue;
        }
        n += 1;
        if let Ok(ps) = podsets::of_cluster(&c.spec, c.metadata.annotations.as_ref(), cname, "spec")
        {
            requests.add(&podsets::total(&ps));
        }
        if let Some(t) = c.metadata.creation_timestamp.as_ref().map(|t| t.0) {
            oldest = Some(oldest.map_or(t, |o| o.min(t)));
        }
    }
    (n, requests, oldest)
}

#[cfg(test)]
mod tests {
    use raygate_testing::{PodTemplateBuilder, ray_pod};
    use serde_json::json;

    use super::*;

    fn child(ns: &str, owner: &str, name: &str, created: &str, suspend: bool) -> RayCluster {
        serde_json::from_value(json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": created,
                "labels": {"ray.io/originated-from-cr-name": owner, "ray.io/originated-from-crd": "RayService"}},
            "spec": {"suspend": suspend, "headGroupSpec": {"rayStartParams": {}, "template": ray_pod("1").request("nvidia.com/gpu", "0")},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 0, "maxReplicas": 4,
                    "rayStartParams": {}, "template": ray_pod("8").request("nvidia.com/gpu", "4")}]}}))
        .unwrap()
    }

    fn service(ns: &str, name: &str, queue: Option<&str>, released: &str) -> RayService {
        let mut labels = json!({});
        if let Some(q) = queue {
            labels = json!({"kueue.x-k8s.io/queue-name": q});
        }
        serde_json::from_value(json!({"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "namespace": ns, "labels": labels,
                "annotations": {"raygate.io/released-children": released}},
            "spec": {"rayClusterConfig": {"headGroupSpec": {"rayStartParams": {}, "template": ray_pod("1").request("nvidia.com/gpu", "0")}}}}))
        .unwrap()
    }

    fn slice(name: &str, managed: bool, status: serde_json::Value) -> Workload {
        let labels = if managed {
            json!({"app.kubernetes.io/managed-by": "raygate"})
        } else {
            json!({})
        };
        serde_json::from_value(
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "serving", "labels": labels},
            "spec": {"podSets": []}, "status": status}),
        )
        .unwrap()
    }

    fn cond(type_: &str) -> serde_json::Value {
        json!({"type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn held_children_their_age_and_requests_are_summed_per_service_and_cluster_queue() {
        let services = [
            service("serving", "llm", Some("lq"), "llm-a"),
            service("serving", "idle", Some("lq"), "idle-a"),
            service("serving", "not-opted-in", None, ""),
        ];
        let clusters = [
            child("serving", "llm", "llm-a", "2026-01-01T00:00:00Z", false),
            child("serving", "llm", "llm-b", "2026-01-01T00:10:00Z", true),
            child("serving", "idle", "idle-a", "2026-01-01T00:00:00Z", false),
            child("serving", "not-opted-in", "x", "2026-01-01T00:00:00Z", true),
            // a released child raygate suspended again is not "held" by quota: it was released
            child("serving", "idle", "idle-a2", "2026-01-01T00:00:00Z", true),
        ];
        let mut services = services.to_vec();
        services[1]
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(RELEASED_ANNOTATION.into(), "idle-a,idle-a2".into());
        let lq: LocalQueue = serde_json::from_value(
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "serving"}, "spec": {"clusterQueue": "team"}}),
        )
        .unwrap();
        let refs: Vec<&RayCluster> = clusters.iter().collect();
        let now: Timestamp = "2026-01-01T00:25:00Z".parse().unwrap();
        let g = gauges(&services, &refs, &[], [&lq], now);
        assert_eq!(g.held.len(), 1);
        let h = &g.held[0];
        assert_eq!(
            (
                h.name.as_str(),
                h.local_queue.as_str(),
                h.cluster_queue.as_str()
            ),
            ("llm", "lq", "team")
        );
        assert_eq!(h.held_children, 1);
        assert_eq!(h.hold_seconds, 900.0);
        // head 1 cpu + 2 workers × (8 cpu, 4 gpu)
        assert_eq!(h.held.get("cpu").to_string(), "17");
        assert_eq!(h.held.get("nvidia.com/gpu").to_string(), "8");
        assert_eq!(g.cluster_queues["team"].0, 1);
        assert_eq!(
            g.cluster_queues["team"].1.get("nvidia.com/gpu").to_string(),
            "8"
        );
    }

    #[test]
    fn pending_slices_count_only_raygates_slices_without_quota_in_either_mode() {
        let reserved = json!({"conditions": [cond("QuotaReserved")],
            "admission": {"clusterQueue": "team", "podSetAssignments": []}});
        let finished = json!({"conditions": [cond("Finished")]});
        let ws = [
            slice("pending", true, json!({})),
            slice("reserved", true, reserved),
            slice("finished", true, finished),
            slice("someone-elses", false, json!({})),
        ];
        let g = gauges([], &[], &ws, [], Timestamp::UNIX_EPOCH);
        assert_eq!(g.pending_slices, 1);
    }
}
