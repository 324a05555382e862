//! What an active NodeRollout holds on to, on the simulated cluster through `kube::Client` with
//! the controller (`raygate::controller::drain::rollout::run`) running: the selection it started with
//! (a spec selecting otherwise pauses it, on a server that does not run the CRD's CEL rules), and
//! its nodes (deleting it gives back the taint and the cordons raygate made, then the object
//! goes). LeaderWorkerSet groups, a budget over the leaders, the disruption controller, the
//! scheduler and kubelets; the paused clock.

mod support;
use support::controller;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use raygate::types::rollout::{NodeRollout, NodeRolloutStatus};
use raygate_sim::world::fixtures::*;
use raygate_sim::{Registry, Sim};
use serde_json::{Value, json};

/// The sim with raygate's NodeRollout CRD; `cel: false` leaves its CEL rules out, as a server
/// that does not run them would.
fn sim(cel: bool) -> Sim {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    if cel {
        return sim_with_rollouts();
    }
    let mut registry = Registry::with_builtins();
    registry
        .add_crds_yaml(raygate_sim::server::upstream::leaderworkerset())
        .expect("the embedded LWS CRD");
    for (_, crd) in raygate::crdgen::crds() {
        if crd.spec.group != "raygate.io" {
            continue;
        }
        let mut value = serde_json::to_value(&crd).expect("the CRD as JSON");
        for v in value["spec"]["versions"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            strip_rules(&mut v["schema"]["openAPIV3Schema"]);
        }
        registry.add_crd(&value).expect("raygate's CRD");
    }
    Sim::builder().registry(registry).namespace(NS).build()
}

/// Removes every `x-kubernetes-validations` from a schema.
fn strip_rules(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("x-kubernetes-validations");
            map.values_mut().for_each(strip_rules);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_rules),
        _ => {}
    }
}

/// Two LWS groups on `node-0` (domain ud-0), one on `node-1` (ud-1), both `pool=old`; a spare
/// node (`pool=new`) with room for every group; a budget over the leaders tolerating one down.
async fn layout(client: &Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, ud, total) in [("node-0", "ud-0", 2), ("node-1", "ud-1", 3)] {
        nodes
            .create(&PostParams::default(), &node(name, ud, 4, "old"))
            .await
            .unwrap();
        grow_groups(client, total).await;
    }
    nodes
        .create(&PostParams::default(), &node("spare", "ud-spare", 6, "new"))
        .await
        .unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "leaders", "namespace": NS},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"role": "leader"}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    eventually("the budget computed", || async {
        let b = Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
            .get("leaders")
            .await
            .unwrap();
        let s = b.status?;
        (s.current_healthy == Some(3) && s.disruptions_allowed == Some(1)).then_some(())
    })
    .await;
}

fn rollouts(client: &Client) -> Api<NodeRollout> {
    Api::all(client.clone())
}

async fn create(client: &Client, name: &str, spec: Value) {
    let o: NodeRollout = serde_json::from_value(json!({
        "apiVersion": "raygate.io/v1alpha1", "kind": "NodeRollout",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    rollouts(client)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

async fn status(client: &Client, name: &str) -> NodeRolloutStatus {
    let o = rollouts(client).get(name).await.unwrap();
    o.status.unwrap_or_default()
}

fn condition<'a>(s: &'a NodeRolloutStatus, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// Waits until ud-0 has evicted its first leader and the budget refuses the second: the domain
/// drains, node-0 cordoned by raygate.
async fn first_domain_blocked(client: &Client, name: &str) -> NodeRolloutStatus {
    eventually("ud-0 blocked by the budget", || async {
        let s = status(client, name).await;
        let d = s.domains.first()?;
        (d.phase == "Draining" && d.blocked_by.is_some() && d.protected_evicted == 1).then_some(s)
    })
    .await
}

struct NodeMarks {
    cordoned: Vec<String>,
    tainted: Vec<String>,
}

async fn node_marks(client: &Client) -> NodeMarks {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let spec = |n: &Node| n.spec.clone().unwrap_or_default();
    NodeMarks {
        cordoned: nodes
            .iter()
            .filter(|n| spec(n).unschedulable == Some(true))
            .map(|n| n.name_any())
            .collect(),
        tainted: nodes
            .iter()
            .filter(|n| {
                spec(n)
                    .taints
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.key == "raygate.io/outdated")
            })
            .map(|n| n.name_any())
            .collect(),
    }
}

type History = Arc<Mutex<Vec<String>>>;

/// Every pod the cluster saw evicted (the Eviction API's `DisruptionTarget` condition appearing
/// on it), by name, in order.
fn record_evictions(sim: &Sim) -> History {
    let history: History = Arc::default();
    let (client, out) = (sim.client(), history.clone());
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        let stream =
            watcher(Api::<Pod>::namespaced(client, NS), Default::default()).applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(p)) = stream.next().await {
            let evicted = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_ == "DisruptionTarget"
                            && c.reason.as_deref() == Some("EvictionByEvictionAPI")
                    })
                });
            if evicted && seen.insert(p.uid().unwrap_or_default()) {
                out.lock().unwrap().push(p.name_any());
            }
        }
    });
    history
}

fn evicted(h: &History) -> Vec<String> {
    h.lock().unwrap().clone()
}

async fn event(client: &Client, rollout: &str, reason: &str) -> Option<(String, String)> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            let on = e.regarding.as_ref();
            on.and_then(|o| o.kind.as_deref()) == Some("NodeRollout")
                && on.and_then(|o| o.name.as_deref()) == Some(rollout)
        })
        .find(|e| e.reason.as_deref() == Some(reason))
        .map(|e| (e.type_.unwrap_or_default(), e.note.unwrap_or_default()))
}

/// A rollout tainting every outdated node is deleted while its first domain drains: the
/// controller takes its taint off every node, lifts the cordon it made on node-0, leaves an
/// admin's cordon (a quarantined node of the pending domain, cordoned before the rollout) and
/// evicts nothing more; then its finalizer goes and the object with it.
#[tokio::test(start_paused = true)]
async fn deleting_a_running_rollout_gives_back_its_taint_and_cordons_and_keeps_an_admin_s() {
    let sim = sim(true);
    let client = sim.client();
    let _actors = actors(&sim);
    layout(&client).await;
    // quarantined by an admin before the rollout: in ud-1, cordoned, no pods
    let mut quarantined = node("node-q", "ud-1", 4, "old");
    quarantined.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &quarantined)
        .await
        .unwrap();
    let history = record_evictions(&sim);
    let _ctl = controller(&sim);
    create(
        &client,
        "r",
        json!({"nodeSelector": {"matchLabels": {POOL: "old"}}, "udLabel": UD,
            "taintOutdated": true, "groups": {"preset": "LeaderWorkerSet"}}),
    )
    .await;
    first_domain_blocked(&client, "r").await;
    let o = rollouts(&client).get("r").await.unwrap();
    assert_eq!(o.finalizers(), ["raygate.io/node-cleanup"]);
    let marks = node_marks(&client).await;
    assert_eq!(marks.cordoned, ["node-0", "node-q"]);
    assert_eq!(marks.tainted, ["node-0", "node-1", "node-q"]);
    rollouts(&client)
        .delete("r", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the rollout gone", || async {
        rollouts(&client)
            .get_opt("r")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let marks = node_marks(&client).await;
    assert!(
        marks.tainted.is_empty(),
        "still tainted: {:?}",
        marks.tainted
    );
    assert_eq!(marks.cordoned, ["node-q"], "only the admin's cordon stays");
    let (type_, note) = event(&client, "r", "GivingBackNodes")
        .await
        .expect("a GivingBackNodes Event");
    assert_eq!(type_, "Normal");
    for says in [
        "taking raygate's taint off node(s) node-0, node-1, node-q",
        "lifting raygate's cordon on node(s) node-0",
        "leaving the cordon raygate did not make on node(s) node-q",
    ] {
        assert!(note.contains(says), "no {says:?} in {note}");
    }
    // nothing more is evicted: the second leader of ud-0 stays
    let gone = evicted(&history);
    assert_eq!(
        gone.len(),
        1,
        "one leader evicted before the delete: {gone:?}"
    );
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(evicted(&history), gone, "evicted after the delete");
}

/// On a server that does not run the CRD's CEL rules, the rollout's `nodeSelector` is changed
/// while its first domain drains: the controller pauses it (`Ready=False` `SelectionChanged`
/// naming the field, a Warning Event), drains nothing with the new selection (the spare node it
/// now selects is neither cordoned nor tainted) and evicts nothing more; set back, the rollout
/// goes on (a `SelectionRestored` Event) and completes with each leader evicted once.
#[tokio::test(start_paused = true)]
async fn a_selection_changed_without_cel_pauses_the_rollout_until_it_is_set_back() {
    let sim = sim(false);
    let client = sim.client();
    let _actors = actors(&sim);
    layout(&client).await;
    let before = pods(&client).await;
    let history = record_evictions(&sim);
    let _ctl = controller(&sim);
    create(
        &client,
        "r",
        json!({"nodeSelector": {"matchLabels": {POOL: "old"}}, "udLabel": UD,
            "taintOutdated": true, "groups": {"preset": "LeaderWorkerSet"}}),
    )
    .await;
    let started = first_domain_blocked(&client, "r").await;
    let recorded = started.selection.clone().expect("the selection recorded");
    assert_eq!(
        serde_json::to_value(&recorded.node_selector).unwrap(),
        json!({"matchLabels": {POOL: "old"}})
    );
    let select = |pool: &'static str| {
        let api = rollouts(&client);
        async move {
            api.patch(
                "r",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"nodeSelector": {"matchLabels": {POOL: pool}}}})),
            )
            .await
            .expect("no CEL here: the server takes the change")
        }
    };
    select("new").await;
    let paused = eventually("Ready=False/SelectionChanged", || async {
        let s = status(&client, "r").await;
        (condition(&s, "Ready").map(|c| c.1) == Some("SelectionChanged")).then_some(s)
    })
    .await;
    assert_eq!(paused.phase.as_deref(), Some("Paused"));
    let message = condition(&paused, "Ready").unwrap().2;
    assert!(
        message.starts_with(
            "spec.nodeSelector changed from {\"matchLabels\":{\"pool\":\"old\"}} to \
             {\"matchLabels\":{\"pool\":\"new\"}} while the rollout is active"
        ),
        "{message}"
    );
    assert_eq!(paused.selection, Some(recorded), "the record stays");
    let (type_, _) = event(&client, "r", "SelectionChanged")
        .await
        .expect("a SelectionChanged Event");
    assert_eq!(type_, "Warning");
    // the domain's refusal lifts meanwhile; nothing is evicted, nothing drained on the new pool
    let at_pause = evicted(&history);
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(evicted(&history), at_pause, "evicted while paused");
    let marks = node_marks(&client).await;
    assert_eq!(marks.cordoned, ["node-0"], "drained on the new selection");
    assert_eq!(marks.tainted, ["node-0", "node-1"]);
    select("old").await;
    let done = eventually("Completed", || async {
        let s = status(&client, "r").await;
        (s.phase.as_deref() == Some("Completed")).then_some(s)
    })
    .await;
    assert_eq!(done.progress.as_deref(), Some("2/2"));
    assert!(event(&client, "r", "SelectionRestored").await.is_some());
    let leaders: Vec<String> = before
        .iter()
        .filter(|p| p.labels().get("role").map(String::as_str) == Some("leader"))
        .map(|p| p.name_any())
        .collect();
    let gone = evicted(&history);
    let distinct: BTreeSet<&String> = gone.iter().collect();
    assert_eq!(distinct.len(), gone.len(), "a pod evicted twice: {gone:?}");
    for l in &leaders {
        assert!(gone.contains(l), "leader {l} not evicted: {gone:?}");
    }
    eventually("a finished rollout holds no finalizer", || async {
        let o = rollouts(&client).get("r").await.unwrap();
        o.finalizers().is_empty().then_some(())
    })
    .await;
}
