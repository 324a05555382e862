//! The gang world the drain and NodeRollout tests, the demo's baselines and its story share: nodes
//! in upgrade domains, LeaderWorkerSet groups (a leader and one worker packed into the leader's
//! domain, the leader Ready only while its whole group is), the scheduler, kubelets, the LWS
//! controller and the disruption controller, on the sim's paused clock. Test fixtures (they panic
//! on a broken cluster, as a test should); the CRDs are the embedded ones
//! ([`crate::server::upstream`]).

use std::future::Future;
use std::time::Duration;

use crate::Sim;
use crate::world::actors::{disruption, kubelet, lws, node_lifecycle, scheduler};
use crate::world::{Running, World};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

pub const NS: &str = "serving";
pub const UD: &str = "topology.raygate.io/upgrade-domain";
/// Target nodes are `pool=old`; the spare capacity the groups move to is `pool=new`.
pub const POOL: &str = "pool";
/// The disruption controller's reaction lag in these clusters.
pub const LAG: Duration = Duration::from_secs(5);
pub const WAIT: Duration = Duration::from_secs(3 * 3600);

/// A sim builder with the LWS CRD installed and namespace [`NS`] (set a seed, faults, ...).
pub fn builder() -> crate::SimBuilder {
    Sim::builder()
        .crds_yaml(crate::server::upstream::leaderworkerset())
        .expect("the embedded LWS CRD")
        .namespace(NS)
}

/// The sim with the LWS CRD and `extra_crds` (YAML texts) installed, and namespace [`NS`].
pub fn sim_with(extra_crds: &[&str]) -> Sim {
    let mut builder = builder();
    for yaml in extra_crds {
        // a YAML text, not a path: one without a CRD in it is a mistake in the test
        let mut probe = crate::Registry::with_builtins();
        let n = probe.add_crds_yaml(yaml).expect("a CRD");
        assert!(n > 0, "no CustomResourceDefinition in {:.80}", yaml);
        builder = builder.crds_yaml(yaml).expect("a CRD");
    }
    builder.build()
}

/// The sim with the LWS CRD and raygate's NodeRollout installed, and namespace [`NS`].
pub fn sim_with_rollouts() -> Sim {
    let mut registry = crate::Registry::with_builtins();
    registry
        .add_crds_yaml(crate::server::upstream::leaderworkerset())
        .expect("the embedded LWS CRD");
    crate::server::upstream::add_raygate(&mut registry).expect("raygate's CRDs");
    Sim::builder().registry(registry).namespace(NS).build()
}

/// Polls `check` every second of cluster time for up to [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(WAIT, Duration::from_secs(1), what, check).await
}

/// Polls `check` every `poll` of cluster time until it yields a value; panics
/// naming `what` once `wait` has passed.
pub async fn eventually_within<T, F, Fut>(
    wait: Duration,
    poll: Duration,
    what: &str,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(poll).await;
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

/// The gang world's actors: the scheduler, kubelets, the LWS controller and the disruption
/// controller (lag [`LAG`]); add more before starting it.
pub fn gang_world(sim: &Sim) -> World {
    World::on(sim)
        .scheduler(scheduler::Config::default())
        .kubelets(kubelet::Config::default())
        .lws(Duration::from_secs(30))
        .disruption(disruption::Config { lag: LAG })
}

/// [`gang_world`] started (its actors stop when the handle is dropped).
pub fn actors(sim: &Sim) -> Running {
    gang_world(sim).start()
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

/// The LWS `llm` at `total` groups (created at the first call, scaled after), then waits until
/// every group's pods are Ready: the tests place groups one upgrade domain at a time this way.
pub async fn grow_groups(client: &Client, total: usize) {
    let api = lws_api(client);
    if api.get_opt("llm").await.expect("read the LWS").is_none() {
        let o: DynamicObject = serde_json::from_value(lws_object(total)).expect("the LWS object");
        api.create(&PostParams::default(), &o)
            .await
            .expect("create the LWS");
    } else {
        api.patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": total}})),
        )
        .await
        .expect("scale the LWS");
    }
    eventually("every group Ready", || async {
        let ps = pods(client).await;
        (ps.len() == 2 * total && ps.iter().all(is_ready)).then_some(())
    })
    .await;
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
