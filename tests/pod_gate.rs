//! The pod-level gate (#13) on the simulated cluster: raygate with `pod_gate` on, the KubeRay
//! emulator creating real pods, the scheduler, a kubelet per node and the garbage collector, all
//! on the paused clock. Growth of a running child beyond its slice waits at the scheduling gate
//! until a replacement slice is admitted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use raygate::gate::pod_gate::{POD_GATE, any_template_gated};
use raygate::types::kueue::{ClusterQueue, Workload};
use raygate::types::ray::{RayCluster, RayService};
use raygate_sim::world::actors::kubelet;
use raygate_sim::world::actors::node_lifecycle::{self, Readiness};
use raygate_sim::{FaultRule, Faults, Verb};
use serde_json::json;

mod ray_env;
use ray_env::{Env, NS, is_gated};

/// Virtual time allowed for a condition (the clock is paused: it costs no wall time).
const WAIT: Duration = Duration::from_secs(600);

impl Env {
    async fn set_quota(&self, cpu: &str) {
        let api: Api<ClusterQueue> = Api::all(self.client.clone());
        // read-modify-replace, again on a 409: the controller writes the queue's status meanwhile
        for _ in 0..20 {
            let mut cq = api.get("cq").await.unwrap();
            cq.spec.resource_groups[0].flavors[0].resources[0].nominal_quota = Some(
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
            );
            match api.replace("cq", &PostParams::default(), &cq).await {
                Ok(_) => return,
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => panic!("quota raised: {e}"),
            }
        }
        panic!("quota raised: 20 conflicts in a row");
    }

    /// A RayService opted into `lq`: a 1-CPU head and `workers` 1-CPU workers.
    async fn create_service(&self, workers: i32) {
        self.create_service_graced(workers, 10).await;
    }

    /// [`Env::create_service`] whose pods take `grace` seconds to terminate.
    async fn create_service_graced(&self, workers: i32, grace: i64) {
        let pod = json!({"spec": {"terminationGracePeriodSeconds": grace, "containers": [{"name": "ray",
            "image": "rayproject/ray:2.52.0", "resources": {"requests": {"cpu": "1"}}}]}});
        let svc = json!({
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"rayClusterDeletionDelaySeconds": 1, "serveConfigV2": "applications: []",
                "rayClusterConfig": {"rayVersion": "2.52.0", "suspend": true,
                    "headGroupSpec": {"rayStartParams": {}, "template": pod.clone()},
                    "workerGroupSpecs": [{"groupName": "w", "replicas": workers, "minReplicas": 0,
                        "maxReplicas": 10, "rayStartParams": {}, "template": pod}]}}
        });
        Api::<RayService>::namespaced(self.client.clone(), NS)
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).unwrap(),
            )
            .await
            .unwrap();
    }

    async fn child(&self) -> Option<RayCluster> {
        Api::<RayCluster>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .next()
    }

    /// What the autoscaler does on a scale-up: the child's worker replicas.
    async fn scale_child(&self, replicas: i32) {
        let c = self.child().await.unwrap();
        let mut groups = serde_json::to_value(&c.spec.worker_group_specs).unwrap();
        groups[0]["replicas"] = json!(replicas);
        Api::<RayCluster>::namespaced(self.client.clone(), NS)
            .patch(
                &c.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"workerGroupSpecs": groups}})),
            )
            .await
            .unwrap();
    }

    async fn workers(&self) -> Vec<Pod> {
        let lp = ListParams::default().labels("ray.io/node-type=worker");
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&lp)
            .await
            .unwrap()
            .items
    }

    /// Quota 2, `svc` serving with one worker, then a `rayVersion` bump whose new child is held:
    /// the held child's name.
    async fn held_upgrade(&self) -> String {
        self.queues("2").await;
        self.create_service(1).await;
        self.until("the first child runs", 1, || async {
            (self.worker_counts().await == (0, 1)).then_some(())
        })
        .await;
        let clusters = Api::<RayCluster>::namespaced(self.client.clone(), NS);
        let first = self.child().await.unwrap().name_any();
        Api::<RayService>::namespaced(self.client.clone(), NS)
            .patch(
                "svc",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.1"}}})),
            )
            .await
            .unwrap();
        self.until("a pending child held", 1, || async {
            let all = clusters.list(&ListParams::default()).await.unwrap().items;
            all.into_iter()
                .find(|c| c.name_any() != first && c.spec.suspend == Some(true))
                .map(|c| c.name_any())
        })
        .await
    }

    /// (gated, ungated) worker pods.
    async fn worker_counts(&self) -> (usize, usize) {
        let ws = self.workers().await;
        let gated = ws.iter().filter(|p| is_gated(p)).count();
        (gated, ws.len() - gated)
    }

    /// Waits for `check`, asserting the invariant on every look: never more ungated workers
    /// than `max_ungated`.
    async fn until<T, F, Fut>(&self, what: &str, max_ungated: usize, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (_, ungated) = self.worker_counts().await;
            assert!(
                ungated <= max_ungated,
                "{ungated} workers ungated, more than the {max_ungated} granted"
            );
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
}

fn pending_slice(ws: &[Workload]) -> bool {
    ws.iter().any(|w| {
        w.status.as_ref().is_none_or(|s| {
            !s.conditions
                .iter()
                .any(|c| c.type_ == "QuotaReserved" && c.status == "True")
        })
    })
}

#[tokio::test(start_paused = true)]
async fn autoscaler_growth_beyond_quota_waits_at_the_gate_until_a_replacement_slice_is_admitted() {
    growth_beyond_quota_waits_at_the_gate(&Env::new().await).await;
}

/// The Ray pods' watch runs on the controller's one watch driver: every watch of the controller
/// drops every 5 s, half its re-watches answer 410 Gone (a re-list), and half its pod LISTs fail
/// with 500. Decisions wait for each complete new list; the ungater still ungates exactly what
/// the slices grant, and no more, through every restart.
#[tokio::test(start_paused = true)]
async fn the_ungater_survives_a_dropping_relisting_and_failing_pods_watch() {
    let faults = Faults::none()
        .rule(
            FaultRule::any()
                .verbs(&[Verb::List])
                .resource("pods")
                .user_agent("raygate")
                .error(500, 0.5),
        )
        .watch_drops(Duration::from_secs(5))
        .rewatch_gone(0.5)
        .watch_user_agent("raygate");
    let env = Env::with_faults(faults, 7).await;
    growth_beyond_quota_waits_at_the_gate(&env).await;
    let stats = env.sim.fault_stats();
    assert!(
        stats.watches_dropped > 0 && stats.watches_gone > 0,
        "the watches were dropped and re-listed: {stats:?}"
    );
    assert!(
        stats.errors.get(&500).copied().unwrap_or(0) > 0,
        "pod LISTs failed: {stats:?}"
    );
}

/// Head + 2 workers admitted in 4 CPUs; the autoscaler grows the child to 4 workers: the 2 new
/// ones wait at the gate (never scheduled) until quota is raised to 6.
async fn growth_beyond_quota_waits_at_the_gate(env: &Env) {
    env.queues("4").await;
    env.create_service(2).await;
    // head + 2 workers fit in 4 CPUs: released, every pod born gated and ungated by raygate
    env.until("2 workers running", 2, || async {
        let (gated, ungated) = env.worker_counts().await;
        (gated == 0 && ungated == 2).then_some(())
    })
    .await;
    let svc = Api::<RayService>::namespaced(env.client.clone(), NS)
        .get("svc")
        .await
        .unwrap();
    let head = svc
        .spec
        .ray_cluster_config
        .head_group_spec
        .template
        .spec
        .unwrap();
    assert!(
        head.scheduling_gates
            .unwrap()
            .iter()
            .any(|g| g.name == POD_GATE),
        "the RayService's head template carries the gate"
    );

    // the autoscaler grows the running child to 4 workers: 6 CPUs, quota 4
    env.scale_child(4).await;
    env.until(
        "2 new workers created gated, a replacement slice pending",
        2,
        || async {
            let (gated, _) = env.worker_counts().await;
            (gated == 2 && pending_slice(&env.slices().await)).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    let (gated, ungated) = env.worker_counts().await;
    assert_eq!(
        (gated, ungated),
        (2, 2),
        "growth past the slice stays gated"
    );
    let unscheduled = env
        .workers()
        .await
        .iter()
        .filter(|p| p.spec.as_ref().unwrap().node_name.is_none())
        .count();
    assert_eq!(unscheduled, 2, "gated pods are never scheduled");

    // quota frees: the replacement slice is admitted and the new workers go
    env.set_quota("6").await;
    env.until("4 workers running", 4, || async {
        let (gated, ungated) = env.worker_counts().await;
        (gated == 0 && ungated == 4).then_some(())
    })
    .await;
    // each ungated pod names the slice whose grant lifted its gate (the pod gate's policy keeps
    // that and the labels raygate counts it by)
    let slices: Vec<String> = env
        .slices()
        .await
        .iter()
        .filter_map(|w| w.metadata.name.clone())
        .collect();
    for p in env.workers().await {
        let grant = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("raygate.io/granted-by"));
        assert!(
            grant.is_some_and(|g| slices.contains(g)),
            "{:?} names a slice of {slices:?}: {grant:?}",
            p.metadata.name
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_controller_restarted_mid_ungating_ungates_no_more_than_admitted() {
    let mut env = Env::new().await;
    env.two_workers_running("4", 10).await;
    env.kill_controller().await;
    env.scale_child(5).await;
    env.until("3 new workers gated", 2, || async {
        (env.worker_counts().await.0 == 3).then_some(())
    })
    .await;
    // the killed process' last write landed: one more worker ungated than the slice grants
    let oldest_gated = env
        .workers()
        .await
        .into_iter()
        .filter(is_gated)
        .min_by_key(|p| (p.creation_timestamp(), p.name_any()))
        .unwrap();
    Api::<Pod>::namespaced(env.client.clone(), NS)
        .patch(
            &oldest_gated.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"schedulingGates": null}})),
        )
        .await
        .unwrap();
    env.start_controller();
    // the restarted controller sees 3 ungated for a grant of 2: it ungates nothing more
    env.until("a replacement slice pending", 3, || async {
        pending_slice(&env.slices().await).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(env.worker_counts().await, (2, 3));
    env.set_quota("6").await;
    env.until("5 workers running", 5, || async {
        (env.worker_counts().await == (0, 5)).then_some(())
    })
    .await;
}

impl Env {
    /// The live pods (any state) of RayCluster `cluster`.
    async fn pods_of(&self, cluster: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("ray.io/cluster={cluster}"));
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&lp)
            .await
            .unwrap()
            .items
    }

    /// An upgrade of `svc` (a `rayVersion` bump), until a cluster other than `old` is promoted
    /// (at most `max_ungated` workers ungated meanwhile).
    async fn upgrade_and_promote(&self, old: &str, max_ungated: usize) {
        Api::<RayService>::namespaced(self.client.clone(), NS)
            .patch(
                "svc",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"rayClusterConfig": {"rayVersion": "2.53.0"}}})),
            )
            .await
            .unwrap();
        self.until("the new cluster promoted", max_ungated, || async {
            self.active().await.filter(|a| a != old)
        })
        .await;
    }

    /// The active cluster's name in the RayService's status.
    async fn active(&self) -> Option<String> {
        Api::<RayService>::namespaced(self.client.clone(), NS)
            .get("svc")
            .await
            .ok()?
            .status?
            .active_service_status?
            .ray_cluster_name
            .filter(|n| !n.is_empty())
    }

    /// A Workload of someone else's in `lq`: `count` pods of 1 CPU.
    async fn other_workload(&self, name: &str, count: i32) {
        self.other_workload_cpu(name, count, "1").await;
    }

    /// A Workload in `lq` of `count` pods of `cpu` each.
    async fn other_workload_cpu(&self, name: &str, count: i32, cpu: &str) {
        let w = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": count,
                "template": {"spec": {"containers": [{"name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": cpu}}}]}}}]}});
        raygate::client::dev::apply(&self.client, &w.to_string(), "test", None)
            .await
            .unwrap_or_else(|e| panic!("applying {w}: {e}"));
    }

    async fn admitted(&self, name: &str) -> bool {
        Api::<Workload>::namespaced(self.client.clone(), NS)
            .get(name)
            .await
            .ok()
            .and_then(|w| w.status)
            .is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "QuotaReserved" && c.status == "True")
            })
    }
}

/// KubeRay v1.7 cleans a GCS fault-tolerant cluster's Redis when the cluster is deleted: once its
/// head is gone, a Job (one pod, 200m CPU / 256Mi) runs while a finalizer keeps the RayCluster.
/// raygate charges the head PodSet that Job (Kueue's `accountForRedisCleanupInHeadPodSet`) and a
/// deleted child until it is gone, so after a promotion the old cluster's quota, Job included,
/// stays charged until the cleanup has run: a Workload waiting for it is admitted only then.
#[tokio::test(start_paused = true)]
async fn a_fault_tolerant_cluster_s_redis_cleanup_runs_within_its_charge() {
    let env = Env::with_kubelet(kubelet::Config {
        job_pod_runtime: Duration::from_secs(60),
        ..Default::default()
    })
    .await;
    // head 100m (charged 200m for the cleanup Job) + 1 worker of 1 CPU = 1.2 CPU per cluster;
    // the Job's 256Mi are charged too, so the queue covers memory
    env.queues("2400m").await;
    let cq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": "f",
            "resources": [{"name": "cpu", "nominalQuota": "2400m"}, {"name": "memory", "nominalQuota": "64Gi"}]}]}]}});
    raygate::client::dev::apply(&env.client, &cq.to_string(), "test", None)
        .await
        .unwrap();
    let pod = |cpu: &str| {
        json!({"spec": {"terminationGracePeriodSeconds": 5, "containers": [{"name": "ray",
        "image": "rayproject/ray:2.52.0", "resources": {"requests": {"cpu": cpu}}}]}})
    };
    let svc = json!({
        "apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": "svc", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": {"ray.io/ft-enabled": "true"}},
        "spec": {"rayClusterDeletionDelaySeconds": 1, "serveConfigV2": "applications: []",
            "rayClusterConfig": {"rayVersion": "2.52.0", "suspend": true,
                "headGroupSpec": {"rayStartParams": {}, "template": pod("100m")},
                "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0,
                    "maxReplicas": 10, "rayStartParams": {}, "template": pod("1")}]}}
    });
    Api::<RayService>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();
    let old = env
        .until("an active cluster", 1, || async { env.active().await })
        .await;
    env.upgrade_and_promote(&old, 2).await;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(env.client.clone(), NS);
    let cleanup = format!("{old}-redis-cleanup");
    env.until("the old cluster's Redis cleanup runs", 2, || async {
        jobs.get_opt(&cleanup).await.unwrap()
    })
    .await;
    // someone else's Workload needs the 1.2 CPU the old cluster holds
    env.other_workload_cpu("other", 1, "1200m").await;
    env.until("the other Workload admitted", 2, || async {
        if !env.admitted("other").await {
            return None;
        }
        let left = Api::<RayCluster>::namespaced(env.client.clone(), NS)
            .get_opt(&old)
            .await
            .unwrap();
        assert!(
            left.is_none(),
            "admitted while the old cluster's cleanup still runs"
        );
        let job = jobs.get_opt(&cleanup).await.unwrap();
        let done = job.clone().and_then(|j| j.status?.completion_time);
        assert!(done.is_some(), "the cleanup Job completed first: {job:?}");
        Some(())
    })
    .await;
}

/// Pods stuck terminating on nodes that stopped answering keep their quota (the nodes may still
/// run them) and raise `PodsStuckTerminating` a minute after their grace period; once the nodes
/// are declared out of service, PodGC deletes them and the quota goes to a waiting Workload.
#[tokio::test(start_paused = true)]
async fn pods_stuck_terminating_keep_their_quota_until_their_node_is_out_of_service() {
    let env = Env::new().await;
    env.two_workers_running("3", 10).await;
    // every node stops answering, then the workers are scaled away: their pods cannot go
    for n in ["node-0", "node-1"] {
        node_lifecycle::write_ready(&env.client, env.sim.clock(), n, &Readiness::Unknown)
            .await
            .unwrap();
    }
    env.scale_child(0).await;
    env.until("2 workers terminating", 2, || async {
        let w = env.workers().await;
        (w.len() == 2 && w.iter().all(|p| p.metadata.deletion_timestamp.is_some())).then_some(())
    })
    .await;
    env.other_workload("other", 2).await;
    tokio::time::sleep(Duration::from_secs(180)).await;
    assert!(
        !env.admitted("other").await,
        "the stuck workers keep their 2 CPU"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), NS);
    let warned = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PodsStuckTerminating"))
        .filter_map(|e| e.note)
        .collect::<Vec<_>>();
    assert!(
        warned
            .iter()
            .any(|n| n.contains("node.kubernetes.io/out-of-service")),
        "{warned:?}"
    );
    // the nodes are declared out of service: PodGC deletes the stuck pods, the quota frees
    let taint = json!({"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service",
        "value": "nodeshutdown", "effect": "NoExecute"}]}});
    for n in ["node-0", "node-1"] {
        Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
            .patch(n, &PatchParams::default(), &Patch::Merge(&taint))
            .await
            .unwrap();
    }
    env.until("the other Workload admitted", 2, || async {
        if !env.admitted("other").await {
            return None;
        }
        assert!(
            env.workers().await.is_empty(),
            "admitted while the workers hold"
        );
        Some(())
    })
    .await;
}

/// Item 3 of #13: after a promotion KubeRay deletes the old cluster in the background and its
/// pods terminate for their grace period (120 s here), still holding their CPUs. The old
/// cluster's share of the slice stays charged until they are gone, so a Workload waiting for that
/// quota is not admitted before.
#[tokio::test(start_paused = true)]
async fn a_promoted_service_s_old_pods_keep_their_quota_until_their_grace_period_ends() {
    // Ray nodes that take their whole grace period to stop
    let env = Env::with_kubelet(kubelet::Config {
        stop_after: None,
        ..Default::default()
    })
    .await;
    env.two_workers_running("6", 120).await;
    let old = env
        .until("an active cluster", 2, || async { env.active().await })
        .await;

    // an upgrade: the pending child (3 CPU) fits the 6 CPU next to the old one, runs, is promoted
    env.upgrade_and_promote(&old, 4).await;
    env.until("the old cluster deleted", 4, || async {
        Api::<RayCluster>::namespaced(env.client.clone(), NS)
            .get_opt(&old)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let gone_at = tokio::time::Instant::now();
    let lingering = env.pods_of(&old).await;
    assert_eq!(lingering.len(), 3, "the old head and 2 workers terminate");
    assert!(
        lingering
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
    );

    // someone else's Workload needs the 3 CPU the old pods still hold
    env.other_workload("other", 3).await;
    env.until("the other Workload admitted", 4, || async {
        if !env.admitted("other").await {
            return None;
        }
        let left = env.pods_of(&old).await.len();
        assert_eq!(
            left, 0,
            "admitted while {left} pods of the old cluster still hold their CPUs"
        );
        Some(())
    })
    .await;
    let waited = tokio::time::Instant::now() - gone_at;
    assert!(
        waited >= Duration::from_secs(100),
        "admitted {waited:?} after the old cluster was deleted: its pods' grace period is 120 s"
    );
    // the chain settled on the new cluster's 3 CPU
    env.until("one slice of 3 pods", 4, || async {
        let live: Vec<Workload> = env
            .slices()
            .await
            .into_iter()
            .filter(|w| w.metadata.owner_references.is_some())
            .filter(|w| {
                w.status.as_ref().is_none_or(|s| {
                    !s.conditions
                        .iter()
                        .any(|c| c.type_ == "Finished" && c.status == "True")
                })
            })
            .collect();
        (live.len() == 1 && live[0].spec.pod_sets.iter().map(|p| p.count).sum::<i32>() == 3)
            .then_some(())
    })
    .await;
}

/// Item 5 of #13: a worker group appended to a running RayService is an in-place update in
/// KubeRay v1.7 (`shouldUpdateCluster`: the hash of the first `ray.io/num-worker-groups` groups
/// still matches), so the running child gets the group and creates its pods at once, no new
/// cluster, no suspended child. They wait at the gate until a replacement slice naming the new
/// PodSet is admitted.
#[tokio::test(start_paused = true)]
async fn a_worker_group_appended_in_place_stays_gated_until_a_replacement_slice_covers_it() {
    let env = Env::new().await;
    env.two_workers_running("3", 10).await;
    let child = env.child().await.unwrap().name_any();

    // the user appends group g2 (1 pod of 1 CPU). On a real API server the policy
    // raygate-pod-gate-templates (config/pod-gate) refuses KubeRay's in-place update while the
    // group's template lacks the gate, until raygate has put it on spec.rayClusterConfig; so the
    // child gets the group gated (KubeRay copies the template). The simulated server runs no
    // ValidatingAdmissionPolicy: the group is written as the child receives it, gated.
    let svc = Api::<RayService>::namespaced(env.client.clone(), NS);
    let s = svc.get("svc").await.unwrap();
    let mut groups = serde_json::to_value(&s.spec.ray_cluster_config.worker_group_specs).unwrap();
    let g2 = json!({"groupName": "g2", "replicas": 1, "minReplicas": 0, "maxReplicas": 2,
        "rayStartParams": {}, "template": {"spec": {"schedulingGates": [{"name": POD_GATE}],
            "containers": [{"name": "ray", "image": "rayproject/ray:2.52.0",
                "resources": {"requests": {"cpu": "1"}}}]}}});
    groups.as_array_mut().unwrap().push(g2);
    svc.patch(
        "svc",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"rayClusterConfig": {"workerGroupSpecs": groups}}})),
    )
    .await
    .unwrap();
    let g2 = || async {
        env.workers()
            .await
            .into_iter()
            .filter(|p| p.labels().get("ray.io/group").map(String::as_str) == Some("g2"))
            .collect::<Vec<Pod>>()
    };
    env.until(
        "the g2 pod created gated, a replacement slice naming g2 pending",
        2,
        || async {
            let pods = g2().await;
            let slices = env.slices().await;
            let names_g2 = slices.iter().any(|w| {
                w.spec.pod_sets.iter().any(|p| {
                    p.template
                        .metadata
                        .as_ref()
                        .and_then(|m| m.annotations.as_ref())
                        .and_then(|a| a.get("raygate.io/worker-group"))
                        .map(String::as_str)
                        == Some("g2")
                })
            });
            (pods.len() == 1 && is_gated(&pods[0]) && names_g2 && pending_slice(&slices))
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    let pods = g2().await;
    assert!(is_gated(&pods[0]), "no slice covers g2 yet");
    assert!(pods[0].spec.as_ref().unwrap().node_name.is_none());
    let clusters = Api::<RayCluster>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        clusters.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        [child],
        "updated in place: no new cluster"
    );
    assert_eq!(
        clusters[0].spec.worker_group_specs.as_ref().unwrap().len(),
        2
    );
    // the replacement slice is charged only its delta: admitted once 1 more CPU is there
    env.set_quota("4").await;
    env.until("the g2 pod ungated and scheduled", 3, || async {
        let pods = g2().await;
        (pods.len() == 1
            && !is_gated(&pods[0])
            && pods[0].spec.as_ref().unwrap().node_name.is_some())
        .then_some(())
    })
    .await;
    assert_eq!(env.worker_counts().await, (0, 3));
}

// ---------------------------------------------------------------------------------------------
// The sweep invariant (#13 item 5): random scale-ups, scale-downs, upgrades and quota changes
// with the pod gate on; on every look, the pods that run (ungated, scheduled, not finished) never
// exceed what an admitted slice grants, per KubeRay group and per-pod requests.
// ---------------------------------------------------------------------------------------------

/// xorshift64*: seeded, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

type ShapeKey = (String, raygate::quantity::Resources);

/// Per (group, per-pod requests): the most any admitted, not finished slice grants.
fn granted(slices: &[Workload]) -> Vec<(ShapeKey, i32)> {
    let mut out: Vec<(ShapeKey, i32)> = Vec::new();
    for w in slices {
        let conds = w
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let is = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
        if !is("Admitted") || is("Finished") {
            continue;
        }
        let mut per_slice: Vec<(ShapeKey, i32)> = Vec::new();
        for g in raygate::slices::grants(w) {
            let key = (g.group, g.requests);
            match per_slice.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += g.count,
                None => per_slice.push((key, g.count)),
            }
        }
        for (key, n) in per_slice {
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some((_, m)) => *m = (*m).max(n),
                None => out.push((key, n)),
            }
        }
    }
    out
}

/// Per (group, per-pod requests as the pod's template asks them: KubeRay's `wait-gcs-ready` init
/// container, which it adds to every worker, left out): the pods that run (ungated, bound to a
/// node, not finished).
fn running(pods: &[Pod]) -> Vec<(ShapeKey, i32)> {
    let mut out: Vec<(ShapeKey, i32)> = Vec::new();
    for p in pods {
        let spec = p.spec.as_ref().unwrap();
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if is_gated(p) || spec.node_name.is_none() || matches!(phase, Some("Succeeded" | "Failed"))
        {
            continue;
        }
        let mut as_templated = spec.clone();
        if let Some(init) = as_templated.init_containers.as_mut() {
            init.retain(|c| c.name != "wait-gcs-ready");
        }
        let key = (
            p.labels().get("ray.io/group").cloned().unwrap_or_default(),
            raygate::podsets::pod_requests(&as_templated, "spec", &p.name_any()).unwrap(),
        );
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => out.push((key, 1)),
        }
    }
    out
}

impl Env {
    async fn ray_pods(&self) -> Vec<Pod> {
        let lp = ListParams::default().labels("ray.io/node-type in (head,worker)");
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&lp)
            .await
            .unwrap()
            .items
    }

    /// The invariant on one look. Slices are read before and after the pods (three reads, not
    /// one snapshot): a pod that runs must be granted by one of the two slice readings.
    async fn check_grants(&self, what: &str) {
        let before = granted(&self.slices().await);
        let pods = running(&self.ray_pods().await);
        let after = granted(&self.slices().await);
        for (key, n) in pods {
            let grant = |g: &[(ShapeKey, i32)]| {
                g.iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, c)| *c)
                    .unwrap_or(0)
            };
            let allowed = grant(&before).max(grant(&after));
            assert!(
                n <= allowed,
                "{what}: {n} pods of group {} ({:?} each) run, the admitted slices grant {allowed}",
                key.0,
                key.1
            );
        }
    }

    /// `secs` of cluster time, checking the invariant every half second.
    async fn run_checked(&self, secs: u64, what: &str) {
        for _ in 0..secs * 2 {
            self.check_grants(what).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn sweep(seed: u64) {
    // Ray nodes take their whole grace period (10 s) to stop: terminating pods hold resources
    let env = Env::with_kubelet(kubelet::Config {
        stop_after: None,
        ..Default::default()
    })
    .await;
    let mut rng = Rng::new(seed);
    env.queues(&(3 + rng.below(5)).to_string()).await;
    env.create_service(1 + rng.below(3) as i32).await;
    let mut log = format!("seed {seed}");
    env.run_checked(30, &log).await;
    let mut version = 0;
    for _ in 0..8 {
        let op = match rng.below(4) {
            0 => {
                let Some(active) = env.active().await else {
                    continue;
                };
                let n = rng.below(6) as i32;
                let api = Api::<RayCluster>::namespaced(env.client.clone(), NS);
                let Ok(c) = api.get(&active).await else {
                    continue;
                };
                let mut groups = serde_json::to_value(&c.spec.worker_group_specs).unwrap();
                groups[0]["replicas"] = json!(n);
                let _ = api
                    .patch(
                        &active,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"spec": {"workerGroupSpecs": groups}})),
                    )
                    .await;
                format!("scale {active} to {n}")
            }
            1 => {
                version += 1;
                let cpu = 1 + rng.below(2);
                let svc = Api::<RayService>::namespaced(env.client.clone(), NS);
                let s = svc.get("svc").await.unwrap();
                let mut groups =
                    serde_json::to_value(&s.spec.ray_cluster_config.worker_group_specs).unwrap();
                groups[0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
                    json!(cpu.to_string());
                let _ = svc
                    .patch(
                        "svc",
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"spec": {"rayClusterConfig": {
                            "rayVersion": format!("2.53.{version}"),
                            "workerGroupSpecs": groups}}})),
                    )
                    .await;
                format!("upgrade to 2.53.{version}, workers of {cpu} CPU")
            }
            2 => {
                let q = 2 + rng.below(9);
                env.set_quota(&q.to_string()).await;
                format!("quota {q}")
            }
            _ => "wait".to_string(),
        };
        let secs = 5 + rng.below(90);
        log.push_str(&format!(" → {op}, {secs} s"));
        env.run_checked(secs, &log).await;
    }
}

/// A few seeds in CI; `RAYGATE_POD_SWEEP_SEEDS=n` runs seeds 0..n.
#[tokio::test(start_paused = true)]
async fn the_sweep_never_runs_more_pods_than_the_admitted_slices_grant() {
    let seeds: u64 = std::env::var("RAYGATE_POD_SWEEP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    for seed in 0..seeds {
        sweep(seed).await;
    }
}

/// KubeRay v1.7 adds the autoscaler sidecar (500m CPU, 512Mi) to the head pod with
/// `enableInTreeAutoscaling`; raygate's head PodSet counts it (as Kueue v0.19.2's RayCluster
/// integration does), so the head pod's requests match its grant and the ungater lets it run.
#[tokio::test(start_paused = true)]
async fn an_autoscaling_head_is_charged_its_sidecar_and_ungated() {
    let env = Env::new().await;
    // the sidecar requests memory too: the queue covers it
    for obj in [
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}}),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": "f",
                "resources": [{"name": "cpu", "nominalQuota": "4"}, {"name": "memory", "nominalQuota": "1Gi"}]}]}]}}),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": NS},
            "spec": {"clusterQueue": "cq"}}),
    ] {
        raygate::client::dev::apply(&env.client, &obj.to_string(), "test", None)
            .await
            .unwrap_or_else(|e| panic!("applying {obj}: {e}"));
    }
    let pod = json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.52.0",
        "resources": {"requests": {"cpu": "1"}}}]}});
    let svc = json!({
        "apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": "svc", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"serveConfigV2": "applications: []",
            "rayClusterConfig": {"rayVersion": "2.52.0", "enableInTreeAutoscaling": true,
                "headGroupSpec": {"rayStartParams": {}, "template": pod.clone()},
                "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "minReplicas": 0,
                    "maxReplicas": 10, "rayStartParams": {}, "template": pod}]}}
    });
    Api::<RayService>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();
    let head = env
        .until("the head ungated and scheduled", 2, || async {
            let lp = ListParams::default().labels("ray.io/node-type=head");
            let heads = Api::<Pod>::namespaced(env.client.clone(), NS)
                .list(&lp)
                .await
                .unwrap()
                .items;
            heads
                .into_iter()
                .find(|p| !is_gated(p) && p.spec.as_ref().unwrap().node_name.is_some())
        })
        .await;
    let containers: Vec<&str> = head
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(containers, ["ray", "autoscaler"]);
    let slices = env.slices().await;
    let head_set = slices[0]
        .spec
        .pod_sets
        .iter()
        .find(|p| p.name == "head")
        .unwrap();
    let requests =
        raygate::podsets::pod_requests(head_set.template.spec.as_ref().unwrap(), "spec", "head")
            .unwrap();
    assert_eq!(
        requests,
        raygate::podsets::pod_requests(head.spec.as_ref().unwrap(), "spec", "head").unwrap(),
        "the head PodSet's per-pod requests are the head pod's, sidecar included"
    );
    assert_eq!(
        requests.get("cpu"),
        raygate::quantity::Quantity::parse("1500m").unwrap(),
        "1 CPU for ray, 500m for the sidecar"
    );
}

impl Env {
    /// Whether the RayService's or any child's pod templates still carry the gate, and how many
    /// Ray pods do.
    async fn gates_left(&self) -> (bool, usize) {
        let svc = Api::<RayService>::namespaced(self.client.clone(), NS)
            .get("svc")
            .await
            .unwrap();
        let children = Api::<RayCluster>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let templates = any_template_gated(&svc.spec.ray_cluster_config)
            || children.iter().any(|c| any_template_gated(&c.spec));
        let lp = ListParams::default().labels("ray.io/node-type in (head,worker)");
        let pods = Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&lp)
            .await
            .unwrap()
            .items;
        (templates, pods.iter().filter(|p| is_gated(p)).count())
    }

    /// Quota `cpu`, then the RayService with 2 workers whose pods take `grace` seconds to
    /// terminate, until head and workers run (ungated by raygate).
    async fn two_workers_running(&self, cpu: &str, grace: i64) {
        self.queues(cpu).await;
        self.create_service_graced(2, grace).await;
        self.until("2 workers running", 2, || async {
            (self.worker_counts().await == (0, 2)).then_some(())
        })
        .await;
    }

    /// Head + 2 workers running in 4 CPUs, then grown to 4 workers: 2 wait at the gate.
    async fn grown_past_its_slice(&self) {
        self.two_workers_running("4", 10).await;
        self.scale_child(4).await;
        self.until("2 new workers gated", 2, || async {
            (self.worker_counts().await == (2, 2)).then_some(())
        })
        .await;
    }
}

/// Issue #31: removing the queue label hands the pods back too. The gate goes from
/// `spec.rayClusterConfig`, from the child's templates and from the pods it holds (which only
/// raygate may lift: the `raygate-pod-gate` policy), so they run, and so does a pod created
/// afterwards.
#[tokio::test(start_paused = true)]
async fn opting_out_removes_the_pod_gate_from_the_templates_and_the_gated_pods() {
    let env = Env::new().await;
    env.grown_past_its_slice().await;
    assert_eq!(env.gates_left().await, (true, 2));
    Api::<RayService>::namespaced(env.client.clone(), NS)
        .patch(
            "svc",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": null}}})),
        )
        .await
        .unwrap();
    env.until("no gate left, 4 workers running", 4, || async {
        (env.gates_left().await == (false, 0) && env.worker_counts().await == (0, 4)).then_some(())
    })
    .await;
    env.scale_child(5).await;
    env.until("the new worker runs ungated", 5, || async {
        (env.worker_counts().await == (0, 5)).then_some(())
    })
    .await;
    assert_eq!(env.gates_left().await, (false, 0));
}

/// Issue #31: raygate restarted without `--pod-gate` removes every gate it left (templates
/// first, then pods), since nothing would lift one any more; the service stays opted in, its
/// growth charged as a pending replacement slice but not held.
#[tokio::test(start_paused = true)]
async fn with_the_pod_gate_turned_off_raygate_removes_the_gates_it_left() {
    let mut env = Env::new().await;
    env.grown_past_its_slice().await;
    env.kill_controller().await;
    env.start_controller_with(false);
    env.until("no gate left, 4 workers running", 4, || async {
        (env.gates_left().await == (false, 0) && env.worker_counts().await == (0, 4)).then_some(())
    })
    .await;
    assert!(
        pending_slice(&env.slices().await),
        "the growth stays charged"
    );
    env.scale_child(5).await;
    env.until("the new worker runs ungated", 5, || async {
        (env.worker_counts().await == (0, 5)).then_some(())
    })
    .await;
}

/// Issue #31: `raygate remove-pod-gate`, for an uninstall with raygate already gone, removes
/// every gate it left with the same passes (templates, then pods).
#[tokio::test(start_paused = true)]
async fn remove_pod_gate_clears_every_gate_with_raygate_gone() {
    let mut env = Env::new().await;
    env.grown_past_its_slice().await;
    env.kill_controller().await;
    let removed = raygate::controller::remove_pod_gates(&env.client)
        .await
        .unwrap();
    assert_eq!(
        (removed.services, removed.clusters, removed.pods),
        (1, 1, 2)
    );
    assert!(!removed.pods_forbidden);
    env.until("4 workers running", 4, || async {
        (env.gates_left().await == (false, 0) && env.worker_counts().await == (0, 4)).then_some(())
    })
    .await;
}

/// Issue #31: the controller killed between a Release's two writes (the child unsuspended, the
/// released-children record never written: every RayService patch of raygate's fails), then the
/// released child grows past every slice. The restarted controller, which has no memory of the
/// release, sees an unsuspended, uncovered, unrecorded child: raygate's field manager owning its
/// `spec.suspend=false` says raygate released it, so it is recorded, never held as tampered.
#[tokio::test(start_paused = true)]
async fn a_release_interrupted_before_its_record_is_recognised_after_a_restart() {
    let mut env = Env::new().await;
    let pending = env.held_upgrade().await;
    let clusters = Api::<RayCluster>::namespaced(env.client.clone(), NS);
    let services = Api::<RayService>::namespaced(env.client.clone(), NS);
    // from now on every write of raygate's to the RayService fails: the record is never written
    env.sim.set_faults(
        Faults::none().rule(
            FaultRule::any()
                .verbs(&[Verb::Patch, Verb::Update])
                .resource("rayservices")
                .user_agent("raygate")
                .error(500, 1.0),
        ),
    );
    env.set_quota("4").await;
    env.until("the pending child released", 4, || async {
        let c = clusters.get(&pending).await.ok()?;
        (c.spec.suspend == Some(false)).then_some(())
    })
    .await;
    env.kill_controller().await;
    let recorded = services
        .get("svc")
        .await
        .unwrap()
        .annotations()
        .get("raygate.io/released-children")
        .cloned()
        .unwrap_or_default();
    assert!(
        !recorded.split(',').any(|n| n == pending),
        "the record was never written: {recorded}"
    );
    // the released child grows past every slice (1 + 5 CPU on top of the old child's 2)
    let grown = clusters.get(&pending).await.unwrap();
    let mut groups = serde_json::to_value(&grown.spec.worker_group_specs).unwrap();
    groups[0]["replicas"] = json!(5);
    clusters
        .patch(
            &pending,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"workerGroupSpecs": groups}})),
        )
        .await
        .unwrap();
    env.start_controller();
    for _ in 0..120 {
        if let Some(c) = clusters.get_opt(&pending).await.unwrap() {
            assert_ne!(
                c.spec.suspend,
                Some(true),
                "{pending}, released before the crash, was held again as tampered"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // the writes go through again: the release is recorded
    env.sim.set_faults(Faults::none());
    env.until("the release recorded", 6, || async {
        let s = services.get("svc").await.ok()?;
        s.annotations()
            .get("raygate.io/released-children")?
            .split(',')
            .any(|n| n == pending)
            .then_some(())
    })
    .await;
}

/// Issue #31: `kubectl replace` from the user's own manifest (no queue label, none of raygate's
/// annotations, no template gates) while an upgrade is held: the slices are still finished (no
/// leaked quota), the held child (which carries the queue label, so the admission policy would
/// keep its owner from releasing it) is released and unlabelled, and its pods run.
#[tokio::test(start_paused = true)]
async fn a_service_replaced_without_raygate_s_metadata_leaks_no_quota_and_holds_no_child() {
    let env = Env::new().await;
    let pending = env.held_upgrade().await;
    let clusters = Api::<RayCluster>::namespaced(env.client.clone(), NS);
    let services = Api::<RayService>::namespaced(env.client.clone(), NS);
    // the user's manifest, as `kubectl replace` sends it
    let mut svc = services.get("svc").await.unwrap();
    svc.metadata.labels = None;
    svc.metadata.annotations = None;
    svc.metadata.managed_fields = None;
    let mut config = serde_json::to_value(&svc.spec.ray_cluster_config).unwrap();
    config.as_object_mut().unwrap().remove("suspend");
    config["headGroupSpec"]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulingGates");
    config["workerGroupSpecs"][0]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulingGates");
    svc.spec.ray_cluster_config = serde_json::from_value(config).unwrap();
    svc.status = None;
    services
        .replace("svc", &PostParams::default(), &svc)
        .await
        .unwrap();
    env.until(
        "slices finished, the held child released and unlabelled",
        3,
        || async {
            let live = env.slices().await.into_iter().any(|w| {
                !w.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Finished" && c.status == "True")
                })
            });
            let c = clusters.get_opt(&pending).await.unwrap()?;
            let labelled = c.labels().contains_key("kueue.x-k8s.io/queue-name");
            (!live && c.spec.suspend != Some(true) && !labelled).then_some(())
        },
    )
    .await;
    env.until("no gated pod left", 3, || async {
        (env.gates_left().await.1 == 0).then_some(())
    })
    .await;
}
