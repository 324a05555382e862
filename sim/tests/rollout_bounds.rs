//! The NodeRollout controller's bounds on the simulated cluster, as a user meets them: two
//! rollouts over disjoint pools sharing one workload, a pod that tolerates every taint, a budget
//! whose status never syncs. LeaderWorkerSet groups with delegated readiness, the disruption
//! controller with its lag, the scheduler and kubelets; the paused clock. What was evicted is
//! read from the cluster's own history (the Eviction API's `DisruptionTarget` condition).

mod support;
use support::controller;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use raygate::types::rollout::{NodeRollout, NodeRolloutStatus};
use raygate_sim::Sim;
use raygate_sim::world::actors::replicaset;
use serde_json::{Value, json};

use raygate_sim::world::fixtures::*;

fn sim() -> Sim {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    sim_with_rollouts()
}

/// One LWS group on each node `(name, upgrade domain, pool)`, placed one node at a time, then a
/// spare node (`pool=new`) with room for every group, and a budget over the leaders tolerating
/// `tolerate` groups down. Returns each pod's node at the start, by uid.
async fn layout(
    client: &Client,
    nodes: &[(&str, &str, &str)],
    tolerate: usize,
) -> BTreeMap<String, String> {
    let api: Api<Node> = Api::all(client.clone());
    for (i, (name, ud, pool)) in nodes.iter().enumerate() {
        api.create(&PostParams::default(), &node(name, ud, 2, pool))
            .await
            .unwrap();
        grow_groups(client, i + 1).await;
    }
    let total = nodes.len();
    let spare = node("spare", "ud-spare", 2 * total as u32, "new");
    api.create(&PostParams::default(), &spare).await.unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "leaders", "namespace": NS},
        "spec": {"minAvailable": total - tolerate, "selector": {"matchLabels": {"role": "leader"}}},
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
        let allowed = Some(tolerate as i32);
        (s.current_healthy == Some(total as i32) && s.disruptions_allowed == allowed).then_some(())
    })
    .await;
    pods(client)
        .await
        .iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            (p.uid().unwrap_or_default(), node.unwrap_or_default())
        })
        .collect()
}

type History = Arc<Mutex<Vec<(Timestamp, String, String)>>>;

/// Every eviction the cluster saw: time, pod name, uid.
fn record_evictions(sim: &Sim) -> History {
    let history: History = Arc::default();
    let (client, clock, out) = (sim.client(), sim.clock().clone(), history.clone());
    tokio::spawn(async move {
        let mut seen: BTreeMap<String, bool> = BTreeMap::new();
        let stream = watcher(
            Api::<Pod>::namespaced(client, NS),
            watcher::Config::default(),
        )
        .applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(p)) = stream.next().await {
            let uid = p.uid().unwrap_or_default();
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
            let was = seen.insert(uid.clone(), evicted).unwrap_or(false);
            if evicted && !was {
                out.lock().unwrap().push((clock.now(), p.name_any(), uid));
            }
        }
    });
    history
}

/// A rollout of the nodes with `pool=POOL`, LeaderWorkerSet groups, health stable 30 s and
/// `drain_timeout` (a domain that never drains pauses the rollout instead of the test waiting
/// for hours).
async fn create(client: &Client, name: &str, pool: &str, drain_timeout: &str) {
    let o: NodeRollout = serde_json::from_value(json!({
        "apiVersion": "raygate.io/v1alpha1", "kind": "NodeRollout", "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL: pool}}, "udLabel": UD,
            "groups": {"preset": "LeaderWorkerSet"}, "healthCheckStable": "30s",
            "drainTimeout": drain_timeout},
    }))
    .unwrap();
    Api::<NodeRollout>::all(client.clone())
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

async fn status(client: &Client, name: &str) -> NodeRolloutStatus {
    let o = Api::<NodeRollout>::all(client.clone()).get(name).await;
    o.unwrap().status.unwrap_or_default()
}

/// Waits until rollout `name` is in one of `phases`; its status.
async fn settled(client: &Client, name: &str, phases: &[&str]) -> NodeRolloutStatus {
    eventually(&format!("NodeRollout {name} in {phases:?}"), || async {
        let s = status(client, name).await;
        phases
            .contains(&s.phase.as_deref().unwrap_or_default())
            .then_some(s)
    })
    .await
}

fn blocked(s: &NodeRolloutStatus) -> Option<(String, String)> {
    let c = s.conditions.iter().find(|c| c.type_ == "Blocked")?;
    (c.status == "True").then(|| (c.reason.clone(), c.message.clone()))
}

/// Every Event's `(regarding kind, regarding name, reason, note)`.
async fn events(client: &Client) -> Vec<(String, String, String, String)> {
    let list = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|e| {
            let on = e.regarding.unwrap_or_default();
            let (kind, name) = (on.kind.unwrap_or_default(), on.name.unwrap_or_default());
            (
                kind,
                name,
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// One workload (LWS `llm`, one budget tolerating two groups down) spread over two pools, one
/// NodeRollout per pool (`maxUnavailableDomains` 1), created together: at no moment are two
/// upgrade domains disrupting the workload, though the budget would allow two groups down. A domain disrupts it from its first eviction of the workload's pods until the end
/// of its health check; those spans, across the two rollouts, never overlap. The rollout that
/// comes second waits, showing `Blocked=True`/`OtherRolloutDisrupting` naming the other.
#[tokio::test(start_paused = true)]
async fn two_rollouts_over_disjoint_pools_never_disrupt_one_workload_in_two_domains_at_once() {
    let sim = sim();
    let client = sim.client();
    let _actors = actors(&sim);
    let nodes = [
        ("node-0", "ud-0", "a"),
        ("node-1", "ud-1", "a"),
        ("node-2", "ud-2", "b"),
        ("node-3", "ud-3", "b"),
    ];
    // the budget tolerates two groups down: it would let both rollouts evict at once
    let node_of = layout(&client, &nodes, 2).await;
    let history = record_evictions(&sim);
    let _ctl = controller(&sim);
    create(&client, "pool-a", "a", "10m").await;
    create(&client, "pool-b", "b", "10m").await;
    let seen_blocked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let watch_blocked = {
        let (client, seen) = (client.clone(), seen_blocked.clone());
        tokio::spawn(async move {
            loop {
                for name in ["pool-a", "pool-b"] {
                    if let Some(b) = blocked(&status(&client, name).await) {
                        seen.lock().unwrap().push(b);
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let end = ["Completed", "Paused", "Failed"];
    let (a, b) = (
        settled(&client, "pool-a", &end).await,
        settled(&client, "pool-b", &end).await,
    );
    watch_blocked.abort();
    assert_eq!(a.phase.as_deref(), Some("Completed"), "{a:?}");
    assert_eq!(b.phase.as_deref(), Some("Completed"), "{b:?}");
    // each domain's span: its first eviction of the workload's pods to the end of its gate
    let evicted = history.lock().unwrap().clone();
    let mut spans: Vec<(String, Timestamp, Timestamp)> = Vec::new();
    for (rollout, s) in [("pool-a", &a), ("pool-b", &b)] {
        for d in &s.domains {
            let first = evicted
                .iter()
                .filter(|(_, _, uid)| node_of.get(uid).is_some_and(|n| d.nodes.contains(n)))
                .map(|(at, _, _)| *at)
                .min()
                .expect("the domain evicted its group");
            let end = d.finished_at.as_ref().expect("finished").0;
            spans.push((format!("{rollout}/{}", d.name), first, end));
        }
    }
    for (i, x) in spans.iter().enumerate() {
        for y in &spans[i + 1..] {
            let apart = x.2 <= y.1 || y.2 <= x.1;
            assert!(
                apart,
                "two domains disrupted the workload at once: {x:?} {y:?}"
            );
        }
    }
    let seen = seen_blocked.lock().unwrap().clone();
    let other = "PodDisruptionBudget serving/leaders is disrupted by NodeRollout pool-";
    assert!(
        seen.iter()
            .any(|(reason, message)| reason == "OtherRolloutDisrupting" && message.contains(other)),
        "Blocked reasons seen: {:?}",
        seen.iter()
            .map(|(r, _)| r.as_str())
            .collect::<std::collections::BTreeSet<_>>()
    );
    let on_nodes = events(&client).await;
    assert!(
        on_nodes
            .iter()
            .any(|(kind, _, reason, _)| kind == "Node" && reason == "OtherRolloutDisrupting"),
        "no OtherRolloutDisrupting Event"
    );
}

/// A node agent run by a ReplicaSet, pinned to node-0 and tolerating every taint
/// (`operator: Exists`): the rollout's status names it at planning (with a Warning Event), the
/// drain evicts it once, its replacement is scheduled back onto the cordoned node-0 and left
/// there (a `PodReturned` Event), and the rollout completes instead of evicting it over and over
/// until the drain timeout.
#[tokio::test(start_paused = true)]
async fn a_pod_that_tolerates_every_taint_is_evicted_once_and_its_replacement_left_alone() {
    let sim = sim();
    let client = sim.client();
    let _actors = gang_world(&sim)
        .replicasets(replicaset::Config::default())
        .start();
    layout(
        &client,
        &[("node-0", "ud-0", "old"), ("node-1", "ud-1", "old")],
        1,
    )
    .await;
    let agent: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "agent", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "node-0"},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "agent",
                    "resources": {"requests": {"cpu": "100m"}}}]}}}
    }))
    .unwrap();
    Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &agent)
        .await
        .unwrap();
    let first = eventually("the agent Ready on node-0", || async {
        let ps = pods(&client).await;
        ps.into_iter()
            .find(|p| p.labels().get("app").map(String::as_str) == Some("agent") && is_ready(p))
    })
    .await;
    let history = record_evictions(&sim);
    let _ctl = controller(&sim);
    // a domain drains in well under a minute: evicting the agent over and over would
    // run into this
    create(&client, "r", "old", "2m").await;
    let running = settled(&client, "r", &["Running", "Completed", "Paused"]).await;
    assert_eq!(
        running.domains[0].tolerating_pods,
        vec![format!("{NS}/{}", first.name_any())]
    );
    let done = settled(&client, "r", &["Completed", "Paused", "Failed"]).await;
    assert_eq!(done.phase.as_deref(), Some("Completed"), "{done:?}");
    let agents: Vec<String> = history
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, name, _)| name.starts_with("agent"))
        .map(|(_, name, _)| name.clone())
        .collect();
    assert_eq!(agents, vec![first.name_any()], "evicted once");
    let back = pods(&client).await;
    assert!(
        back.iter().any(|p| p.name_any().starts_with("agent")
            && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("node-0")),
        "the replacement runs on node-0 again"
    );
    let events = events(&client).await;
    let has = |kind: &str, reason: &str| events.iter().any(|e| e.0 == kind && e.2 == reason);
    assert!(has("NodeRollout", "PodsTolerateCordon"), "{events:?}");
    assert!(has("Node", "PodReturned"), "{events:?}");
}

/// The budget over the leaders is edited so that the disruption controller cannot compute it
/// (`maxUnavailable` over a pod whose controller has no scale subresource: `SyncFailed`, its
/// `observedGeneration` left behind): every eviction it guards is refused as "still being processed". Within a
/// minute and a bit of the refusal the rollout says `Blocked=True`/`BudgetNotSynced` naming the
/// budget and the controller's message, with a Warning Event; once the budget is fixed the
/// rollout completes.
#[tokio::test(start_paused = true)]
async fn a_budget_that_never_syncs_blocks_the_rollout_visibly_until_it_is_fixed() {
    let sim = sim();
    let client = sim.client();
    let _actors = actors(&sim);
    layout(
        &client,
        &[("node-0", "ud-0", "old"), ("node-1", "ud-1", "old")],
        1,
    )
    .await;
    // a pod the budget selects whose controller has no scale subresource, on the spare node
    // (outside the rollout)
    let bare: Pod = serde_json::from_value(json!({
        "metadata": {"name": "widget-0", "namespace": NS, "labels": {"role": "leader"},
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget",
                "name": "widget", "uid": "widget-uid", "controller": true}]},
        "spec": {"nodeName": "spare", "containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &bare)
        .await
        .unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let spec = |v: Value| Patch::Merge(json!({"spec": v}));
    budgets
        .patch(
            "leaders",
            &PatchParams::default(),
            &spec(json!({"minAvailable": null, "maxUnavailable": 1})),
        )
        .await
        .unwrap();
    let _ctl = controller(&sim);
    create(&client, "r", "old", "10m").await;
    let (s, since) = eventually("Blocked=True/BudgetNotSynced", || async {
        let s = status(&client, "r").await;
        let (reason, _) = blocked(&s)?;
        (reason == "BudgetNotSynced").then(|| (s, sim.clock().now()))
    })
    .await;
    let (_, message) = blocked(&s).unwrap();
    for says in [
        "PodDisruptionBudget serving/leaders has not synced",
        "SyncFailed",
        "drain timeout",
    ] {
        assert!(message.contains(says), "{message}");
    }
    let started = s.domains[0].started_at.as_ref().unwrap().0;
    assert!(
        since.duration_since(started).as_secs() <= 120,
        "named within two minutes of the domain's start: {started} → {since}"
    );
    assert!(
        events(&client)
            .await
            .iter()
            .any(|e| e.0 == "Node" && e.2 == "BudgetNotSynced"),
        "no BudgetNotSynced Event"
    );
    budgets
        .patch(
            "leaders",
            &PatchParams::default(),
            &spec(json!({"maxUnavailable": null, "minAvailable": 2})),
        )
        .await
        .unwrap();
    let done = settled(&client, "r", &["Completed", "Paused", "Failed"]).await;
    assert_eq!(done.phase.as_deref(), Some("Completed"), "{done:?}");
}
