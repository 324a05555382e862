//! An incremental upgrade (`NewClusterWithIncrementalUpgrade`, #13 item 2) end to end on the
//! simulated cluster: raygate with `pod_gate` on, the KubeRay emulator creating real pods with its
//! emulated Ray autoscaler (the pending child grows one worker per step as its `targetCapacity`
//! rises, the active one shrinks as its capacity falls), the scheduler, a kubelet per node and the
//! garbage collector, all on the paused clock.
//!
//! Quota covers the active child and part of the surge. The pending child's growth is charged as
//! it happens: a pod beyond the admitted slice waits at the scheduling gate with a replacement
//! slice pending, and is ungated once the active child's shrink frees the quota. On every look:
//! the pods running (ungated, bound, not terminating) never exceed what the admitted slice grants.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use raygate::types::kueue::Workload;
use raygate::types::ray::RayService;
use raygate_sim::world::kuberay::AutoscalerConfig;
use serde_json::json;

mod ray_env;
use ray_env::{Env, NS, Setup, is_gated};

/// Virtual time allowed for a condition (the clock is paused: it costs no wall time).
const WAIT: Duration = Duration::from_secs(900);

impl Env {
    /// An incremental RayService opted into `lq`: a 1-CPU head and 4 1-CPU workers (the full
    /// size), autoscaling on; `maxSurgePercent` 50, `stepSizePercent` 25 every 10 s; the old
    /// child is deleted 180 s after promotion, and its pods hold their quota until they are gone.
    async fn create_service(&self) {
        let pod = json!({"spec": {"terminationGracePeriodSeconds": 10, "containers": [{"name": "ray",
            "image": "rayproject/ray:2.52.0", "resources": {"requests": {"cpu": "1"}}}]}});
        let svc = json!({
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"rayClusterDeletionDelaySeconds": 180, "serveConfigV2": "applications: []",
                "upgradeStrategy": {"type": "NewClusterWithIncrementalUpgrade",
                    "clusterUpgradeOptions": {"gatewayClassName": "istio", "maxSurgePercent": 50,
                        "stepSizePercent": 25, "intervalSeconds": 10}},
                "rayClusterConfig": {"rayVersion": "2.52.0", "suspend": true, "enableInTreeAutoscaling": true,
                    "autoscalerOptions": {"resources": {"requests": {"cpu": "0"}, "limits": {"cpu": "0"}}},
                    "headGroupSpec": {"rayStartParams": {}, "template": pod.clone()},
                    "workerGroupSpecs": [{"groupName": "w", "replicas": 4, "minReplicas": 0,
                        "maxReplicas": 8, "rayStartParams": {}, "template": pod}]}}
        });
        Api::<RayService>::namespaced(self.client.clone(), NS)
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).unwrap(),
            )
            .await
            .unwrap();
    }

    async fn service(&self) -> RayService {
        Api::<RayService>::namespaced(self.client.clone(), NS)
            .get("svc")
            .await
            .unwrap()
    }

    async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default().labels("ray.io/node-type"))
            .await
            .unwrap()
            .items
    }

    /// Waits for `check`, asserting the invariant on every look.
    async fn until<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            self.assert_within_admitted().await;
            if let Some(v) = check().await {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for: {what}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Running pods (ungated, bound to a node; a terminating pod still holds its CPU until it
    /// is gone) never outnumber the pods the admitted slices grant (every pod here is 1 CPU).
    async fn assert_within_admitted(&self) {
        let pods = self.pods().await;
        let running = pods
            .iter()
            .filter(|p| !is_gated(p))
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
            .count();
        let granted: i32 = self
            .slices()
            .await
            .iter()
            .filter(|w| reserved(w))
            .map(granted_pods)
            .max()
            .unwrap_or(0);
        assert!(
            running <= usize::try_from(granted).unwrap(),
            "{running} pods running, the admitted slice grants {granted}: {:?}",
            pods.iter()
                .map(|p| (
                    p.name_any(),
                    is_gated(p),
                    p.spec.as_ref().and_then(|s| s.node_name.clone())
                ))
                .collect::<Vec<_>>()
        );
    }
}

fn cond_true(w: &Workload, type_: &str) -> bool {
    w.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// Holds quota: `QuotaReserved` and not `Finished`.
fn reserved(w: &Workload) -> bool {
    cond_true(w, "QuotaReserved") && !cond_true(w, "Finished")
}

/// Pods an admitted slice grants: Σ over its PodSets of the admitted count (capped by the spec's).
fn granted_pods(w: &Workload) -> i32 {
    let assignments = w
        .status
        .as_ref()
        .and_then(|s| s.admission.as_ref())
        .map(|a| a.pod_set_assignments.clone())
        .unwrap_or_default();
    w.spec
        .pod_sets
        .iter()
        .map(|ps| {
            assignments
                .iter()
                .find(|a| a.name == ps.name)
                .map(|a| a.count.unwrap_or(ps.count).min(ps.count))
                .unwrap_or(0)
        })
        .sum()
}

/// A slice waiting for quota (created, not reserved, not finished).
fn pending_slice(ws: &[Workload]) -> bool {
    ws.iter()
        .any(|w| !cond_true(w, "QuotaReserved") && !cond_true(w, "Finished"))
}

fn cluster_of(p: &Pod) -> &str {
    p.labels()
        .get("ray.io/cluster")
        .map(String::as_str)
        .unwrap_or("")
}

fn workers_of<'a>(pods: &'a [Pod], cluster: &str) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| cluster_of(p) == cluster)
        .filter(|p| p.labels().get("ray.io/node-type").map(String::as_str) == Some("worker"))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn names(rs: &RayService) -> (String, String) {
    let s = rs.status.clone().unwrap_or_default();
    let name = |slot: Option<raygate::types::ray::RayServiceClusterStatus>| {
        slot.and_then(|s| s.ray_cluster_name).unwrap_or_default()
    };
    (
        name(s.active_service_status),
        name(s.pending_service_status),
    )
}

#[tokio::test(start_paused = true)]
async fn an_incremental_upgrade_is_charged_as_the_pending_child_grows_and_never_runs_past_quota() {
    let env = Env::build(Setup {
        // the emulated Ray autoscaler: one worker per step as the capacities move
        autoscaler: Some(AutoscalerConfig {
            step: 1,
            period: Duration::from_secs(5),
        }),
        ..Setup::default()
    })
    .await;
    // the active child (head + 4 workers = 5 CPUs) and 2 of the surge: the pending head and one
    // of the 2 workers its first 50 % step asks for
    env.queues("7").await;
    env.create_service().await;
    let old = env
        .until("the first child serves with 4 workers", || async {
            let (active, _) = names(&env.service().await);
            let pods = env.pods().await;
            let ws = workers_of(&pods, &active);
            (!active.is_empty() && ws.len() == 4 && ws.iter().all(|p| !is_gated(p)))
                .then_some(active)
        })
        .await;

    // an image change (a JSON patch of the images only: raygate owns the template's gate and
    // suspend): KubeRay starts an incremental upgrade
    let image = "rayproject/ray:2.53.0";
    let patch = json!([
        {"op": "replace", "path": "/spec/rayClusterConfig/headGroupSpec/template/spec/containers/0/image", "value": image},
        {"op": "replace", "path": "/spec/rayClusterConfig/workerGroupSpecs/0/template/spec/containers/0/image", "value": image},
    ]);
    Api::<RayService>::namespaced(env.client.clone(), NS)
        .patch(
            "svc",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(patch).unwrap()),
        )
        .await
        .unwrap();
    let new = env
        .until("the pending child named", || async {
            let (_, pending) = names(&env.service().await);
            (!pending.is_empty()).then_some(pending)
        })
        .await;

    // its first step asks for 2 workers: one fits, the other waits at the gate with a
    // replacement slice pending
    env.until(
        "one pending worker running, one gated, a replacement slice pending",
        || async {
            let pods = env.pods().await;
            let ws = workers_of(&pods, &new);
            let gated = ws.iter().filter(|p| is_gated(p)).count();
            (ws.len() == 2 && gated == 1 && pending_slice(&env.slices().await)).then_some(())
        },
    )
    .await;
    let gated_pod = workers_of(&env.pods().await, &new)
        .into_iter()
        .find(|p| is_gated(p))
        .map(ResourceExt::name_any)
        .unwrap();

    // the traffic moves, the active child's capacity falls to 50 %: it shrinks, quota frees and
    // the gated worker is ungated
    env.until(
        "the active child shrunk, the gated worker ungated",
        || async {
            let pods = env.pods().await;
            let shrunk = workers_of(&pods, &old).len() <= 3;
            let ungated = pods.iter().any(|p| {
                p.name_any() == gated_pod
                    && !is_gated(p)
                    && p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
            });
            (shrunk && ungated).then_some(())
        },
    )
    .await;

    // the pending child's capacity rises to 100 %: it grows to 4 workers, the traffic follows,
    // the active capacity reaches 0 and the pending child is promoted. The old child keeps its
    // head and 2 workers until KubeRay deletes it, so the 4th new worker waits at the gate with
    // a replacement slice pending
    env.until("promoted, the 4th new worker gated", || async {
        let (active, pending) = names(&env.service().await);
        let pods = env.pods().await;
        let ws = workers_of(&pods, &new);
        let gated = ws.iter().filter(|p| is_gated(p)).count();
        (active == new
            && pending.is_empty()
            && ws.len() == 4
            && gated == 1
            && workers_of(&pods, &old).len() == 2
            && pending_slice(&env.slices().await))
        .then_some(())
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while tokio::time::Instant::now() < deadline {
        env.assert_within_admitted().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let pods = env.pods().await;
    let gated = workers_of(&pods, &new)
        .iter()
        .filter(|p| is_gated(p))
        .count();
    assert_eq!(
        gated, 1,
        "the growth past quota stays gated while the old child lives"
    );
    // one admitted slice: both heads, the old child's 2 workers and 3 new ones = 7 pods
    let held: Vec<i32> = env
        .slices()
        .await
        .iter()
        .filter(|w| reserved(w))
        .map(granted_pods)
        .collect();
    assert_eq!(held, vec![7]);

    // KubeRay deletes the old child (background propagation): its pods terminate for their
    // grace period still holding their CPUs, so the 4th new worker is ungated only once they
    // are gone, and the slice then shrinks to the new child's 5 pods
    env.until(
        "the old child's pods gone, every new worker running",
        || async {
            let pods = env.pods().await;
            let old_left = pods.iter().any(|p| cluster_of(p) == old);
            let ws = workers_of(&pods, &new);
            let running = ws
                .iter()
                .filter(|p| !is_gated(p) && p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .count();
            (!old_left && running == 4).then_some(())
        },
    )
    .await;
    env.until("the slice shrunk to the new child's 5 pods", || async {
        let held: Vec<i32> = env
            .slices()
            .await
            .iter()
            .filter(|w| reserved(w))
            .map(granted_pods)
            .collect();
        (held == vec![5]).then_some(())
    })
    .await;
}
