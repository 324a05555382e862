//! A node failing, through `kube::Client` on the paused clock: the node lifecycle controller's
//! NoExecute taints and `MarkPodsNotReady` (pkg/controller/nodelifecycle), taint eviction
//! (pkg/controller/tainteviction) with the DefaultTolerationSeconds admission plugin's 300 s
//! tolerations, and PodGC (pkg/controller/podgc).

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use raygate_sim::Sim;
use raygate_sim::world::World;
use raygate_sim::world::actors::node_lifecycle::{self, Readiness};
use raygate_sim::world::actors::{kubelet, podgc, taint_eviction};
use raygate_testing::core::{self, PodExt};
use serde_json::json;

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

/// Creates `p` in namespace `t`.
async fn create(client: &Client, p: Pod) -> Pod {
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
    let _world = World::on(&sim)
        .node_lifecycle(node_lifecycle::Config::default())
        .taint_eviction(taint_eviction::Config::default())
        .start();
    ready_node(&client, &sim, "n1").await;
    let tolerating = |name: &str, secs: Option<i64>| {
        core::pod(name, "n1").unowned().toleration(
            node_lifecycle::UNREACHABLE_TAINT,
            "NoExecute",
            secs,
        )
    };
    let default = create(&client, core::pod("default", "n1").unowned()).await;
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
    create(&client, tolerating("short", Some(30))).await;
    create(&client, tolerating("forever", None)).await;
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

/// The pod's `Ready` condition: (status, lastTransitionTime).
fn ready(p: &Pod) -> Option<(String, Option<Timestamp>)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| {
            (
                c.status.clone(),
                c.last_transition_time.as_ref().map(|t| t.0),
            )
        })
}

fn condition_status(p: &Pod, type_: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// `MarkPodsNotReady` (pkg/controller/util/node/controller_utils.go), called by
/// `monitorNodeHealth` when the node's Ready condition turns Unknown after the grace period: a
/// client sees the down node's pod `Ready=False` 50 s after its kubelet stopped, with
/// `lastTransitionTime` then and the Warning Event `NodeNotReady` "Node is not ready";
/// `ContainersReady` is not written. The pod of the healthy node is untouched. When the node
/// returns, its kubelet re-reports the pod (containers restarted, Ready again).
#[tokio::test(start_paused = true)]
async fn mark_pods_not_ready_a_down_node_s_pods_go_not_ready_after_the_grace_period() {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let _world = World::on(&sim)
        .node_lifecycle(node_lifecycle::Config::default())
        .kubelets(kubelet::Config::default())
        .start();
    ready_node(&client, &sim, "n1").await;
    ready_node(&client, &sim, "n2").await;
    create(&client, core::pod("down", "n1").unowned()).await;
    create(&client, core::pod("healthy", "n2").unowned()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let ready_pod = |name: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(name, || async {
                let p = pods.get(name).await.ok()?;
                (ready(&p)?.0 == "True").then_some(p)
            })
            .await
        }
    };
    ready_pod("down").await;
    let healthy = ready_pod("healthy").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // the kubelet of n1 stops: Ready=Unknown (the sim's kubelet is down while it is)
    let t0 = tokio::time::Instant::now();
    let n1 = node_lifecycle::write_ready(&client, sim.clock(), "n1", &Readiness::Unknown)
        .await
        .unwrap();
    let unknown_since = n1.status.unwrap().conditions.unwrap()[0]
        .last_transition_time
        .clone()
        .unwrap()
        .0;
    let (at, down) = eventually("down not ready", || async {
        let p = pods.get("down").await.ok()?;
        (ready(&p)?.0 == "False").then(|| (t0.elapsed(), p))
    })
    .await;
    // condition times are whole seconds: the grace period runs from the second Unknown began
    assert!(
        (Duration::from_secs(49)..Duration::from_secs(51)).contains(&at),
        "marked after the grace period, at {at:?}"
    );
    assert_eq!(
        ready(&down).unwrap().1,
        Some(unknown_since + SignedDuration::from_secs(50)),
        "lastTransitionTime moves to the marking"
    );
    assert_eq!(
        condition_status(&down, "ContainersReady").as_deref(),
        Some("True"),
        "only the Ready condition is written"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        ready(&pods.get("healthy").await.unwrap()),
        ready(&healthy),
        "the healthy node's pod is untouched"
    );
    let ev = Api::<Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let on: Vec<(String, String, String)> = ev
        .iter()
        .filter(|e| e.reason.as_deref() == Some("NodeNotReady"))
        .map(|e| {
            (
                e.involved_object.name.clone().unwrap_or_default(),
                e.type_.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        on,
        [(
            "down".to_string(),
            "Warning".to_string(),
            "Node is not ready".to_string()
        )]
    );
    // the node returns: its kubelet restarts the containers and reports the pod Ready again
    node_lifecycle::write_ready(&client, sim.clock(), "n1", &Readiness::Ready)
        .await
        .unwrap();
    let back = ready_pod("down").await;
    let restarts = back
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .restart_count;
    assert_eq!(restarts, 1);
}

/// The node comes back before the toleration runs out: the taint goes and the scheduled
/// deletion is cancelled, with the Event.
#[tokio::test(start_paused = true)]
async fn a_node_ready_again_in_time_cancels_the_scheduled_deletion() {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let _world = World::on(&sim)
        .node_lifecycle(node_lifecycle::Config::default())
        .taint_eviction(taint_eviction::Config::default())
        .start();
    ready_node(&client, &sim, "n1").await;
    create(&client, core::pod("p", "n1").unowned()).await;
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
    let _world = World::on(&sim)
        .podgc(podgc::Config {
            terminated_threshold: 1,
            ..Default::default()
        })
        .start();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    // terminated: two Succeeded pods, the older goes
    for name in ["done-old", "done-new"] {
        create(&client, core::pod(name, "n1").unowned()).await;
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
    create(&client, core::pod("orphan", "n2").unowned()).await;
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
    create(&client, core::pod("stuck", "n1").unowned()).await;
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
