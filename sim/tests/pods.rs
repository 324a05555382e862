//! The pod actors on the sim, through `kube::Client` as in production: the scheduler binding
//! through `pods/binding`, kubelets starting, probing and terminating pods, the LeaderWorkerSet
//! controller on the real LWS CRD, delegated readiness. All on the paused (virtual) clock.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use raygate_sim::Sim;
use raygate_sim::world::actors::{kubelet, lws, scheduler};
use raygate_sim::world::{Running, World};
use raygate_testing::core::{self, NodeExt, PodExt};
use serde_json::{Value, json};
use tokio::sync::watch;

const NS: &str = "serving";
const UD: &str = "topology.raygate.io/upgrade-domain";
/// Virtual time allowed for a condition (the clock is paused: this costs no wall time).
const WAIT: Duration = Duration::from_secs(1800);

fn sim() -> Sim {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/upstream-crds");
    let lws = std::fs::read_to_string(root.join("leaderworkerset.x-k8s.io_leaderworkersets.yaml"))
        .expect("../shared/upstream-crds holds the LWS CRD");
    Sim::builder()
        .crds_yaml(&lws)
        .unwrap()
        .namespace(NS)
        .build()
}

async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_every(Duration::from_secs(1), what, check).await
}

async fn eventually_every<T, F, Fut>(poll: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    raygate_sim::world::fixtures::eventually_within(WAIT, poll, what, check).await
}

/// Creates `per_ud` Ready nodes `node-<ud>-<i>` in each of `uds` upgrade domains `ud-<ud>`, each
/// with 64 cpu, 512Gi, 110 pods and `gpus` GPUs allocatable.
async fn nodes(client: &Client, uds: usize, per_ud: usize, gpus: u32) {
    let api: Api<Node> = Api::all(client.clone());
    let gpus = gpus.to_string();
    let room = [
        ("cpu", "64"),
        ("memory", "512Gi"),
        ("pods", "110"),
        ("nvidia.com/gpu", gpus.as_str()),
    ];
    for ud in 0..uds {
        for i in 0..per_ud {
            let name = format!("node-{ud}-{i}");
            let node = core::node(&name, "")
                .label(UD, &format!("ud-{ud}"))
                .label("kubernetes.io/hostname", &name)
                .allocatable(&room)
                .ready();
            api.create(&PostParams::default(), &node).await.unwrap();
        }
    }
}

/// Starts the scheduler, a kubelet per node and the LWS controller.
fn actors(sim: &Sim, kubelet_config: kubelet::Config) -> Running {
    World::on(sim)
        .scheduler(Default::default())
        .kubelets(kubelet_config)
        .lws(Duration::from_secs(30))
        .start()
}

fn container(gpu: bool, probe_period: i32) -> Value {
    let mut requests = json!({"cpu": "2", "memory": "8Gi"});
    if gpu {
        requests["nvidia.com/gpu"] = json!("1");
    }
    json!({"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "resources": {"requests": requests},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": probe_period, "failureThreshold": 3}})
}

/// An LWS in issue #12's shape: workers packed into their leader's upgrade domain
/// (podAffinity with `matchLabelKeys: [group-key]`), leaders spread across domains
/// (topologySpreadConstraints on the UD label), the leader Ready only with its whole group.
fn lws_object(name: &str, replicas: i64, size: i64) -> Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {
            "size": size,
            "leaderTemplate": {
                "metadata": {"labels": {"app": name, "role": "leader"},
                    "annotations": {kubelet::READINESS_GROUP: lws::GROUP_KEY}},
                "spec": {
                    "containers": [container(true, 5)],
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": UD, "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"role": "leader"}}}],
                },
            },
            "workerTemplate": {
                "metadata": {"labels": {"app": name, "role": "worker"}},
                "spec": {
                    "containers": [container(true, 10)],
                    "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchExpressions": [{"key": lws::WORKER_INDEX, "operator": "In", "values": ["0"]}]},
                        "matchLabelKeys": [lws::GROUP_KEY], "topologyKey": UD}]}},
                },
            },
        }},
    })
}

fn lws_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "leaderworkerset.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    };
    Api::namespaced_with(client.clone(), NS, &ar)
}

async fn create_lws(client: &Client, obj: Value) {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    lws_api(client)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

async fn pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

async fn all_ready(client: &Client, want: usize) -> Option<Vec<Pod>> {
    let ps = pods(client).await;
    (ps.len() == want
        && ps
            .iter()
            .all(|p| ready(p) && p.metadata.deletion_timestamp.is_none()))
    .then_some(ps)
}

fn label<'a>(p: &'a Pod, k: &str) -> &'a str {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(k))
        .map(String::as_str)
        .unwrap_or_default()
}

/// Issue #11's scale target: 16 nodes (4 UDs × 4), 200 pods in 25 LWS groups of 8, then an hour
/// of cluster time. Prints the wall time (never asserts on it).
#[tokio::test(start_paused = true)]
async fn sixteen_nodes_and_two_hundred_lws_pods_run_an_hour_of_cluster_time() {
    let wall = std::time::Instant::now();
    let sim = sim();
    let client = sim.client();
    nodes(&client, 4, 4, 16).await;
    let _stop = actors(&sim, kubelet::Config::default());
    for (i, replicas) in [7, 6, 6, 6].into_iter().enumerate() {
        create_lws(&client, lws_object(&format!("llm-{i}"), replicas, 8)).await;
    }
    // the test's own LIST of 200 pods is not cheap in a debug build: poll every 10 s
    let ps = eventually_every(Duration::from_secs(10), "200 pods Ready", || {
        all_ready(&client, 200)
    })
    .await;
    let up = wall.elapsed();
    let node_ud: std::collections::HashMap<String, String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap(), label_node(&n)))
        .collect();
    // every group packed into one UD; leaders spread with skew ≤ 1
    let mut group_uds: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    let mut leaders_per_ud: std::collections::BTreeMap<String, usize> = Default::default();
    for p in &ps {
        let ud = node_ud[p.spec.as_ref().unwrap().node_name.as_ref().unwrap()].clone();
        group_uds
            .entry(label(p, lws::GROUP_KEY).to_string())
            .or_default()
            .insert(ud.clone());
        if label(p, lws::WORKER_INDEX) == "0" {
            *leaders_per_ud.entry(ud).or_default() += 1;
        }
    }
    assert_eq!(group_uds.len(), 25);
    assert!(group_uds.values().all(|u| u.len() == 1), "{group_uds:?}");
    let (min, max) = (
        leaders_per_ud.values().min().unwrap(),
        leaders_per_ud.values().max().unwrap(),
    );
    assert!(max - min <= 1, "{leaders_per_ud:?}");
    let rv = sim.revision();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let after = pods(&client).await;
    assert_eq!(after.len(), 200);
    assert!(after.iter().all(ready));
    let uids = |v: &[Pod]| {
        v.iter()
            .map(|p| p.metadata.uid.clone().unwrap())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(
        uids(&ps),
        uids(&after),
        "no pod was recreated in a quiet hour"
    );
    eprintln!(
        "16 nodes, 200 pods: all Ready after {up:?} wall; + 1 h of cluster time: {:?} wall in all; {} writes during the hour",
        wall.elapsed(),
        sim.revision() - rv
    );
}

fn label_node(n: &Node) -> String {
    n.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(UD))
        .cloned()
        .unwrap_or_default()
}

/// Delegated readiness with the probe's lag: a worker's probe fails → the worker goes unready
/// after its period × failureThreshold (10 s × 3), its leader after its own (5 s × 3) on top;
/// the worker recovers → the leader follows.
#[tokio::test(start_paused = true)]
async fn a_leader_is_ready_only_while_its_whole_group_is() {
    let sim = sim();
    let client = sim.client();
    nodes(&client, 1, 2, 16).await;
    let _stop = actors(&sim, kubelet::Config::default());
    create_lws(&client, lws_object("llm", 1, 3)).await;
    eventually("3 pods Ready", || all_ready(&client, 3)).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let start = tokio::time::Instant::now();
    api.patch(
        "llm-0-2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {kubelet::FAIL_READINESS: "true"}}})),
    )
    .await
    .unwrap();
    let is_ready = |name: &'static str| {
        let api = api.clone();
        async move { ready(&api.get(name).await.unwrap()) }
    };
    eventually("worker unready", || async {
        (!is_ready("llm-0-2").await).then_some(())
    })
    .await;
    let worker_after = start.elapsed();
    assert!(
        is_ready("llm-0").await,
        "the leader still reports Ready: its probe has not failed 3 times yet"
    );
    eventually("leader unready", || async {
        (!is_ready("llm-0").await).then_some(())
    })
    .await;
    let leader_after = start.elapsed();
    eprintln!("worker unready after {worker_after:?}, leader after {leader_after:?}");
    // worker: 3 failed probes 10 s apart (≤ 30 s, ≥ 20 s); leader: 3 failed probes 5 s apart
    // after the worker's status shows (≥ 10 s more, ≤ 15 s + polling)
    assert!(
        worker_after >= Duration::from_secs(20) && worker_after <= Duration::from_secs(31),
        "{worker_after:?}"
    );
    let lag = leader_after - worker_after;
    assert!(
        lag >= Duration::from_secs(10) && lag <= Duration::from_secs(17),
        "{lag:?}"
    );
    api.patch(
        "llm-0-2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {kubelet::FAIL_READINESS: null}}})),
    )
    .await
    .unwrap();
    eventually("group Ready again", || all_ready(&client, 3)).await;
    let lws_status = lws_api(&client).get("llm").await.unwrap().data["status"].clone();
    assert_eq!(lws_status["readyReplicas"], 1, "{lws_status}");
}

/// `RecreateGroupOnPodRestart`: deleting one worker recreates the whole group (new uids, same
/// names and group key), gracefully (the deleted pods terminate through their kubelets).
#[tokio::test(start_paused = true)]
async fn deleting_a_worker_recreates_its_whole_group() {
    let sim = sim();
    let client = sim.client();
    nodes(&client, 2, 2, 16).await;
    let _stop = actors(&sim, kubelet::Config::default());
    create_lws(&client, lws_object("llm", 2, 3)).await;
    let before = eventually("6 pods Ready", || all_ready(&client, 6)).await;
    let uid = |ps: &[Pod], name: &str| {
        ps.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.metadata.uid.clone())
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deleted = api
        .delete("llm-1-2", &DeleteParams::default())
        .await
        .unwrap();
    // graceful: the pod stays, Terminating, until its kubelet finishes it
    assert!(
        deleted
            .left()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    );
    let after = eventually("group 1 recreated and Ready", || async {
        let ps = all_ready(&client, 6).await?;
        ["llm-1", "llm-1-1", "llm-1-2"]
            .iter()
            .all(|n| uid(&ps, n) != uid(&before, n))
            .then_some(ps)
    })
    .await;
    for n in ["llm-0", "llm-0-1", "llm-0-2"] {
        assert_eq!(
            uid(&after, n),
            uid(&before, n),
            "{n}: the other group is untouched"
        );
    }
    let key = |ps: &[Pod], n: &str| {
        ps.iter()
            .find(|p| p.metadata.name.as_deref() == Some(n))
            .map(|p| label(p, lws::GROUP_KEY).to_string())
    };
    assert_eq!(key(&after, "llm-1-2"), Some(lws::group_key(NS, "llm-1")));
}

/// The scheduler through the binding subresource: a gated pod is never bound and carries
/// `SchedulingGated`; a pod that fits nowhere gets `Unschedulable` with FitError's message; a
/// second binding is a 409.
#[tokio::test(start_paused = true)]
async fn gated_and_unschedulable_pods_are_reported_and_a_bound_pod_cannot_be_bound_again() {
    let sim = sim();
    let client = sim.client();
    nodes(&client, 1, 2, 8).await;
    let (_stop, shutdown) = watch::channel(false);
    tokio::spawn(scheduler::run(
        client.clone(),
        sim.clock().clone(),
        Default::default(),
        shutdown,
    ));
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    // unbound, no owner, asking for `gpus` GPUs
    let asking = |name: &str, gpus: &str| {
        core::pod(name, "")
            .unowned()
            .requests(&[("nvidia.com/gpu", gpus)])
    };
    let gated = asking("gated", "1").scheduling_gate("raygate.io/quota");
    api.create(&PostParams::default(), &gated).await.unwrap();
    api.create(&PostParams::default(), &asking("huge", "9"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &asking("fits", "8"))
        .await
        .unwrap();
    let cond = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .cloned()
    };
    let huge = eventually("huge unschedulable", || async {
        let p = api.get("huge").await.unwrap();
        cond(&p).filter(|c| c.reason.as_deref() == Some("Unschedulable"))
    })
    .await;
    assert_eq!(huge.status, "False");
    // kube-scheduler's FitError message (without the preemption suffix: no preemption here)
    assert_eq!(
        huge.message.as_deref(),
        Some("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    );
    let fits = eventually("fits bound", || async {
        let p = api.get("fits").await.unwrap();
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .map(|n| (n, p))
    })
    .await;
    assert_eq!(cond(&fits.1).map(|c| c.status), Some("True".into()));
    tokio::time::sleep(Duration::from_secs(600)).await;
    let gated = api.get("gated").await.unwrap();
    assert!(gated.spec.as_ref().unwrap().node_name.is_none());
    let gc = cond(&gated).unwrap();
    assert_eq!(
        (gc.status.as_str(), gc.reason.as_deref()),
        ("False", Some("SchedulingGated"))
    );
    // binding again: 409 Conflict on pods/binding, as storage.go's assignPod answers
    let err = api
        .create_subresource::<_, Value>("binding", "fits", &PostParams::default(),
            &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "fits"}, "target": {"kind": "Node", "name": "node-0-1"}}))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(
                s.message,
                format!(
                    "Operation cannot be fulfilled on pods/binding \"fits\": pod fits is already assigned to node \"{}\"",
                    fits.0
                )
            );
        }
        e => panic!("{e}"),
    }
    // a gated pod cannot be bound either
    let err = api
        .create_subresource::<_, Value>("binding", "gated", &PostParams::default(),
            &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "gated"}, "target": {"kind": "Node", "name": "node-0-1"}}))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 409));
}
