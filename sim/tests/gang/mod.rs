//! The gang world the drain and NodeRollout tests share: nodes in upgrade domains, LeaderWorkerSet
//! groups (a leader and one worker packed into the leader's domain, the leader Ready only while its
//! whole group is), the scheduler, kubelets, the LWS controller and the disruption controller, on
//! the sim's paused clock. Each test file uses what it needs.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use raygate::controller::{Clock, Monotonic};
use raygate_sim::Sim;
use raygate_sim::actors::{disruption, kubelet, lws, node_lifecycle, scheduler};
use serde_json::{Value, json};
use tokio::sync::watch;

pub const NS: &str = "serving";
pub const UD: &str = "topology.raygate.io/upgrade-domain";
/// Target nodes are `pool=old`; the spare capacity the groups move to is `pool=new`.
pub const POOL: &str = "pool";
/// The disruption controller's reaction lag in these clusters.
pub const LAG: Duration = Duration::from_secs(5);
pub const WAIT: Duration = Duration::from_secs(3 * 3600);

pub struct SimClock(pub raygate_sim::Clock);

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        self.0.now()
    }

    fn monotonic(&self) -> Monotonic {
        Monotonic::from_origin(self.0.elapsed())
    }
}

/// The sim with the LWS CRD and `extra_crds` (paths relative to the repository root) installed.
pub fn sim_with(extra_crds: &[&str]) -> Sim {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let lws = std::fs::read_to_string(
        repo.join("../shared/upstream-crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml"),
    )
    .expect("../shared/upstream-crds holds the LWS CRD");
    let mut builder = Sim::builder().crds_yaml(&lws).unwrap();
    for path in extra_crds {
        let yaml = std::fs::read_to_string(repo.join(path))
            .unwrap_or_else(|e| panic!("reading {path}: {e}"));
        builder = builder.crds_yaml(&yaml).unwrap();
    }
    builder.namespace(NS).build()
}

pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub fn node(name: &str, ud: &str, gpus: u32, pool: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {UD: ud, POOL: pool, "kubernetes.io/hostname": name,
            node_lifecycle::GENERATION: "0"}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    }))
    .unwrap()
}

/// Scheduler, kubelets, the LWS controller and the disruption controller (lag [`LAG`]).
pub fn actors(sim: &Sim) -> watch::Sender<bool> {
    let client = sim.client();
    let (stop, shutdown) = watch::channel(false);
    let clock = sim.clock().clone();
    tokio::spawn(scheduler::run(
        client.clone(),
        clock.clone(),
        Default::default(),
        shutdown.clone(),
    ));
    tokio::spawn(kubelet::run_all(
        client.clone(),
        clock.clone(),
        kubelet::Config::default(),
        shutdown.clone(),
    ));
    tokio::spawn(lws::run(client, clock, Duration::from_secs(30), shutdown));
    sim.spawn_disruption_controller(disruption::Config { lag: LAG });
    stop
}

pub fn container(probe_period: i32, failure_threshold: i32) -> Value {
    json!({"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
        "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000},
            "periodSeconds": probe_period, "failureThreshold": failure_threshold}})
}

/// Issue #12's shape: groups of a leader and one worker packed into the leader's upgrade domain,
/// the leader Ready only while its whole group is (probe 5 s × 3), the worker's own probe 1 s × 1.
pub fn lws_object(replicas: usize) -> Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {
            "size": 2,
            "leaderTemplate": {
                "metadata": {"labels": {"role": "leader"},
                    "annotations": {kubelet::READINESS_GROUP: lws::GROUP_KEY}},
                "spec": {"containers": [container(5, 3)]},
            },
            "workerTemplate": {
                "metadata": {"labels": {"role": "worker"}},
                "spec": {
                    "containers": [container(1, 1)],
                    "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchExpressions": [{"key": lws::WORKER_INDEX, "operator": "In", "values": ["0"]}]},
                        "matchLabelKeys": [lws::GROUP_KEY], "topologyKey": UD}]}},
                },
            },
        }},
    })
}

pub fn lws_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "leaderworkerset.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    };
    Api::namespaced_with(client.clone(), NS, &ar)
}

pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

pub async fn pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}
