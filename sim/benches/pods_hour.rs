//! Issue #11's scale target, in a release build: 16 nodes (4 upgrade domains × 4), 200 pods in 25
//! LeaderWorkerSet groups of 8 (scheduler, a kubelet per node, the LWS controller, delegated
//! readiness), brought up and then run for an hour of cluster time on the paused clock.
//! Prints wall times; never asserts on them. `cargo bench -p raygate-sim --bench pods_hour`
//! (the same scenario, with its checks, is `sim/tests/pods.rs`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use raygate_sim::Sim;
use raygate_sim::world::World;
use raygate_sim::world::actors::{kubelet, lws};
use serde_json::{Value, json};

const NS: &str = "serving";
const UD: &str = "topology.raygate.io/upgrade-domain";

fn container(probe_period: i32) -> Value {
    json!({"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
        "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": probe_period}})
}

fn lws_object(name: &str, replicas: i64) -> Value {
    json!({
    "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
    "metadata": {"name": name, "namespace": NS},
    "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 8,
        "leaderTemplate": {
            "metadata": {"labels": {"role": "leader"}, "annotations": {kubelet::READINESS_GROUP: lws::GROUP_KEY}},
            "spec": {"containers": [container(5)],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": UD, "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"role": "leader"}}}]}},
        "workerTemplate": {
            "metadata": {"labels": {"role": "worker"}},
            "spec": {"containers": [container(10)],
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchExpressions": [{"key": lws::WORKER_INDEX, "operator": "In", "values": ["0"]}]},
                    "matchLabelKeys": [lws::GROUP_KEY], "topologyKey": UD}]}}}},
    }}})
}

async fn scenario() {
    let crd = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/upstream-crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml");
    let sim = Sim::builder()
        .crds_yaml(&std::fs::read_to_string(crd).expect("../shared holds the LWS CRD"))
        .expect("LWS CRD")
        .namespace(NS)
        .build();
    let client = sim.client();
    let wall = Instant::now();
    let nodes: Api<Node> = Api::all(client.clone());
    for ud in 0..4 {
        for i in 0..4 {
            let name = format!("node-{ud}-{i}");
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {UD: format!("ud-{ud}")}},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "16"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("node");
            nodes
                .create(&PostParams::default(), &node)
                .await
                .expect("create node");
        }
    }
    let _world = World::on(&sim)
        .scheduler(Default::default())
        .kubelets(Default::default())
        .lws(Duration::from_secs(30))
        .start();
    let ar = ApiResource {
        group: "leaderworkerset.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    };
    let sets: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
    for (i, replicas) in [7, 6, 6, 6].into_iter().enumerate() {
        let o: DynamicObject =
            serde_json::from_value(lws_object(&format!("llm-{i}"), replicas)).expect("lws");
        sets.create(&PostParams::default(), &o)
            .await
            .expect("create lws");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let started = tokio::time::Instant::now();
    loop {
        let ps = pods.list(&ListParams::default()).await.expect("list").items;
        let ready = ps
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let up_virtual = started.elapsed();
    let up = wall.elapsed();
    let rv = sim.revision();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    println!(
        "16 nodes, 200 LWS pods: all Ready after {up_virtual:?} of cluster time in {up:?} wall ({rv} writes); \
         then 1 h of cluster time ({} writes): {:?} wall in all",
        sim.revision() - rv,
        wall.elapsed()
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(scenario());
}
