//! A node failing, through `kube::Client` on the paused clock: the node lifecycle controller's
//! NoExecute taints (pkg/controller/nodelifecycle), taint eviction
//! (pkg/controller/tainteviction) with the DefaultTolerationSeconds admission plugin's 300 s
//! tolerations, and PodGC (pkg/controller/podgc).

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use raygate_sim::Sim;
use raygate_sim::actors::node_lifecycle::{self, Readiness};
use raygate_sim::actors::{podgc, taint_eviction};
use serde_json::{Value, json};

const NS: &str = "t";

/// Polls `check` every 100 ms of cluster time for up to 20 min of cluster time.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    for _ in 0..12_000 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn ready_node(client: &Client, sim: &Sim, name: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    node_lifecycle::write_ready(client, sim.clock(), name, &Readiness::Ready)
        .await
        .unwrap();
}

async fn pod(client: &Client, name: &str, node: &str, tolerations: Value) -> Pod {
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}], "tolerations": tolerations}}))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
}

fn deleting(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn disruption_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")?
        .reason
        .clone()
}

fn events(list: &[Event], reason: &str) -> Vec<String> {
    list.iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message.clone())
        .collect()
}

/// The node lifecycle taints a node whose kubelet stopped (Ready=Unknown) with
/// `unreachable:NoExecute` after the 50 s grace period; taint eviction then deletes a pod with
/// the admission plugin's default tolerations 300 s later, one tolerating 30 s after 30 s, and
/// never one tolerating forever. Each deletion carries `DisruptionTarget=DeletionByTaintManager`
/// and an Event.
#[tokio::test(start_paused = true)]
async fn an_unreachable_node_s_pods_leave_after_their_toleration_seconds_default_300() {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let _nl = sim.spawn_node_lifecycle(node_lifecycle::Config::default());
    let _te = sim.spawn_taint_eviction(taint_eviction::Config::default());
    ready_node(&client, &sim, "n1").await;
    let unreachable = |secs: Option<i64>| {
        let mut t = json!({"key": node_lifecycle::UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute"});
        if let Some(s) = secs {
            t["tolerationSeconds"] = json!(s);
        }
        t
    };
    let default = pod(&client, "default", "n1", json!([])).await;
    // DefaultTolerationSeconds: both NoExecute tolerations for 300 s
    let tols: Vec<(String, Option<i64>)> = default
        .spec
        .as_ref()
        .unwrap()
        .tolerations
        .clone()
        .unwrap()
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.toleration_seconds))
        .collect();
    assert_eq!(
        tols,
        [
            ("node.kubernetes.io/not-ready".to_string(), Some(300)),
            ("node.kubernetes.io/unreachable".to_string(), Some(300))
        ]
    );
    pod(&client, "short", "n1", json!([unreachable(Some(30))])).await;
    pod(&client, "forever", "n1", json!([unreachable(None)])).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t0 = tokio::time::Instant::now();
    node_lifecycle::write_ready(&client, sim.clock(), "n1", &Readiness::Unknown)
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let tainted = eventually("unreachable:NoExecute", || async {
        let n = nodes.get("n1").await.ok()?;
        let t = n.spec?.taints?;
        t.iter()
            .any(|t| t.key == node_lifecycle::UNREACHABLE_TAINT && t.effect == "NoExecute")
            .then(|| t0.elapsed())
    })
    .await;
    assert!(
        (Duration::from_secs(50)..Duration::from_secs(51)).contains(&tainted),
        "tainted after the grace period, at {tainted:?}"
    );
    let gone_at = |name: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(name, || async {
                let p = pods.get(name).await.ok()?;
                deleting(&p).then(|| (t0.elapsed(), p))
            })
            .await
        }
    };
    let (short_at, short) = gone_at("short").await;
    assert!(
        (Duration::from_secs(80)..Duration::from_secs(81)).contains(&short_at),
        "tolerationSeconds 30 after the taint: {short_at:?}"
    );
    assert_eq!(
        disruption_reason(&short).as_deref(),
        Some("DeletionByTaintManager")
    );
    let (default_at, _) = gone_at("default").await;
    assert!(
        (Duration::from_secs(350)..Duration::from_secs(351)).contains(&default_at),
        "the default 300 s after the taint: {default_at:?}"
    );
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(!deleting(&pods.get("forever").await.unwrap()));
    let ev = Api::<Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let mut marked = events(&ev, "TaintManagerEviction");
    marked.sort();
    assert_eq!(
        marked,
        [
            "Marking for deletion Pod t/default",
            "Marking for deletion Pod t/short"
        ]
    );
}

/// The node comes back before the toleration runs out: the taint goes and the scheduled
/// deletion is cancelled, with the Event.
#[tokio::test(start_paused = true)]
async fn a_node_ready_again_in_time_cancels_the_scheduled_deletion() {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let _nl = sim.spawn_node_lifecycle(node_lifecycle::Config::default());
    let _te = sim.spawn_taint_eviction(taint_eviction::Config::default());
    ready_node(&client, &sim, "n1").await;
    pod(&client, "p", "n1", json!([])).await;
    node_lifecycle::write_ready(
        &client,
        sim.clock(),
        "n1",
        &Readiness::NotReady("PLEG is not healthy".into()),
    )
    .await
    .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("not-ready:NoExecute", || async {
        let t = nodes.get("n1").await.ok()?.spec?.taints?;
        t.iter()
            .any(|t| t.key == node_lifecycle::NOT_READY_TAINT && t.effect == "NoExecute")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(100)).await;
    node_lifecycle::write_ready(&client, sim.clock(), "n1", &Readiness::Ready)
        .await
        .unwrap();
    eventually("untainted", || async {
        let n = nodes.get("n1").await.ok()?;
        n.spec
            .and_then(|s| s.taints)
            .is_none_or(|t| t.is_empty())
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(400)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    assert!(!deleting(&pods.get("p").await.unwrap()));
    let ev = Api::<Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        events(&ev, "TaintManagerEviction"),
        ["Cancelling deletion of Pod t/p"]
    );
}

/// PodGC: a pod bound to a deleted node is force-deleted after the 40 s quarantine (checked on
/// the 20 s period); a terminating pod of a NotReady node goes once the node carries the
/// `out-of-service` taint; terminated pods beyond the threshold go oldest first.
#[tokio::test(start_paused = true)]
async fn podgc_collects_orphans_after_quarantine_out_of_service_terminating_pods_and_old_terminated_ones()
 {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    ready_node(&client, &sim, "n1").await;
    ready_node(&client, &sim, "n2").await;
    let _gc = sim.spawn_podgc(podgc::Config {
        terminated_threshold: 1,
        ..Default::default()
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    // terminated: two Succeeded pods, the older goes
    for name in ["done-old", "done-new"] {
        pod(&client, name, "n1", json!([])).await;
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eventually("done-old collected", || async {
        pods.get_opt("done-old").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(pods.get_opt("done-new").await.unwrap().is_some());
    // orphaned
    pod(&client, "orphan", "n2", json!([])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t0 = tokio::time::Instant::now();
    nodes.delete("n2", &DeleteParams::default()).await.unwrap();
    let gone = eventually("orphan collected", || async {
        pods.get_opt("orphan")
            .await
            .ok()?
            .is_none()
            .then(|| t0.elapsed())
    })
    .await;
    assert!(
        gone >= Duration::from_secs(40) && gone <= Duration::from_secs(61),
        "quarantine 40 s, checked every 20 s: {gone:?}"
    );
    // terminating on a NotReady node: stays until the out-of-service taint
    pod(&client, "stuck", "n1", json!([])).await;
    node_lifecycle::write_ready(&client, sim.clock(), "n1", &Readiness::Unknown)
        .await
        .unwrap();
    pods.delete("stuck", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(45)).await;
    let stuck = pods.get("stuck").await.unwrap();
    assert!(deleting(&stuck), "terminating, no kubelet to finish it");
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [{"key": podgc::OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}]}})),
        )
        .await
        .unwrap();
    let t1 = tokio::time::Instant::now();
    eventually("stuck collected", || async {
        pods.get_opt("stuck").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(t1.elapsed() <= Duration::from_secs(21));
    assert!(
        pods.get_opt("done-new").await.unwrap().is_some(),
        "at the threshold"
    );
}
