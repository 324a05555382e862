//! The NodeRollout controller on the simulated cluster, through `kube::Client` as in production:
//! a `NodeRollout` object in, the controller (`raygate::controller::drain::rollout::run`) plans it, runs
//! the engine through the executor and writes the status; LeaderWorkerSet groups with delegated
//! readiness, a budget over the leaders, the disruption controller with its lag, the scheduler and
//! kubelets; the paused clock. What was evicted is read from the cluster's own history (a watch on
//! the pods: the Eviction API's `DisruptionTarget` condition), never from the controller.

mod support;
use support::controller_on;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use raygate::controller::Metrics;
use raygate::types::rollout::{NodeRollout, NodeRolloutStatus};
use raygate_sim::Sim;
use raygate_sim::world::Running;
use raygate_sim::world::actors::lws;
use serde_json::{Value, json};
use tokio::sync::watch;

use raygate_sim::world::fixtures::*;

fn sim() -> Sim {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    sim_with_rollouts()
}

/// `groups[i]` LWS groups on node `node-i` (domain `ud-i`, `pool=old`), then a spare node
/// (`pool=new`, its own domain) with room for every group, and a budget over the leaders that
/// tolerates one group down. Returns the pods at the start.
async fn layout(client: &Client, groups: &[usize]) -> Start {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut total = 0;
    for (i, &g) in groups.iter().enumerate() {
        let n = node(
            &format!("node-{i}"),
            &format!("ud-{i}"),
            2 * g as u32,
            "old",
        );
        nodes.create(&PostParams::default(), &n).await.unwrap();
        total += g;
        grow_groups(client, total).await;
    }
    let spare = node("spare", "ud-spare", 2 * total as u32, "new");
    nodes.create(&PostParams::default(), &spare).await.unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "leaders", "namespace": NS},
        "spec": {"minAvailable": total - 1, "selector": {"matchLabels": {"role": "leader"}}},
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
        (s.current_healthy == Some(total as i32) && s.disruptions_allowed == Some(1)).then_some(())
    })
    .await;
    let ps = pods(client).await;
    let uid = |p: &Pod| p.uid().unwrap_or_default();
    Start {
        leaders: ps
            .iter()
            .filter(|p| p.labels().get("role").map(String::as_str) == Some("leader"))
            .map(uid)
            .collect(),
        all: ps.iter().map(uid).collect(),
    }
}

/// The pods (uids) on the old pool before the rollout.
struct Start {
    leaders: Vec<String>,
    all: Vec<String>,
}

/// What the cluster saw evicted is right for a drain of every old node: no pod twice, only pods
/// that were there at the start (never a recreated one), and every leader (a worker may be gone
/// before its turn: the LWS controller recreates the whole group when its leader goes). Returns
/// how many.
fn check_evictions(h: &History, start: &Start) -> usize {
    let evicted = evicted_uids(h);
    let distinct: std::collections::BTreeSet<&String> = evicted.iter().collect();
    assert_eq!(
        distinct.len(),
        evicted.len(),
        "a pod was evicted twice: {evicted:?}"
    );
    for uid in &evicted {
        assert!(start.all.contains(uid), "a recreated pod {uid} was evicted");
    }
    for uid in &start.leaders {
        assert!(evicted.contains(uid), "leader {uid} was not evicted");
    }
    evicted.len()
}

/// The set-up most tests share: a cluster, its client, the actors running (stopped when the
/// sender is dropped) and [`layout`]'s groups placed.
async fn world(groups: &[usize]) -> (Sim, Client, Running, Start) {
    let sim = sim();
    let client = sim.client();
    let actors = actors(&sim);
    let start = layout(&client, groups).await;
    (sim, client, actors, start)
}

type History = Arc<Mutex<Vec<(Timestamp, String, String)>>>;

/// Every eviction the cluster saw (`DisruptionTarget`/`EvictionByEvictionAPI` appearing on a
/// pod): time, pod name, uid.
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

fn evicted_uids(h: &History) -> Vec<String> {
    h.lock().unwrap().iter().map(|e| e.2.clone()).collect()
}

/// The controller on `sim`, leading, until the returned sender is dropped or the task aborted.
fn controller(
    sim: &Sim,
    metrics: Arc<Metrics>,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    controller_on(sim, sim.client_as("raygate"), metrics)
}

fn rollout_object(name: &str, spec: Value) -> NodeRollout {
    serde_json::from_value(json!({
        "apiVersion": "raygate.io/v1alpha1", "kind": "NodeRollout",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

/// The old pool, upgrade domain by upgrade domain, LeaderWorkerSet groups, health stable 30 s.
fn old_pool() -> Value {
    json!({"nodeSelector": {"matchLabels": {POOL: "old"}}, "udLabel": UD,
        "groups": {"preset": "LeaderWorkerSet"}, "healthCheckStable": "30s"})
}

async fn create(client: &Client, o: &NodeRollout) {
    Api::<NodeRollout>::all(client.clone())
        .create(&PostParams::default(), o)
        .await
        .unwrap();
}

async fn status(client: &Client, name: &str) -> NodeRolloutStatus {
    Api::<NodeRollout>::all(client.clone())
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

fn condition<'a>(s: &'a NodeRolloutStatus, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

async fn wait_phase(client: &Client, name: &str, phase: &str) -> NodeRolloutStatus {
    eventually(&format!("NodeRollout {name} {phase}"), || async {
        let s = status(client, name).await;
        (s.phase.as_deref() == Some(phase)).then_some(s)
    })
    .await
}

async fn cordoned(client: &Client) -> Vec<String> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        .map(|n| n.name_any())
        .collect()
}

async fn event_reasons(client: &Client, name: &str) -> Vec<String> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| {
            let on = e.regarding.as_ref();
            on.and_then(|o| o.kind.as_deref()) == Some("NodeRollout")
                && on.and_then(|o| o.name.as_deref()) == Some(name)
        })
        .filter_map(|e| e.reason.clone())
        .collect()
}

/// Cordons (`true`) or uncordons the node `spare`, the only node outside the rollout.
async fn set_spare_unschedulable(client: &Client, unschedulable: bool) {
    let v = if unschedulable {
        json!(true)
    } else {
        Value::Null
    };
    Api::<Node>::all(client.clone())
        .patch(
            "spare",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": v}})),
        )
        .await
        .unwrap();
}

/// Waits until rollout `r` is held `Ready=False` `NoRoomToRecover`; its status and message.
async fn held_for_no_room(client: &Client) -> (NodeRolloutStatus, String) {
    let s = eventually("Ready=False/NoRoomToRecover", || async {
        let s = status(client, "r").await;
        (condition(&s, "Ready").map(|c| c.1) == Some("NoRoomToRecover")).then_some(s)
    })
    .await;
    let message = condition(&s, "Ready")
        .map(|c| c.2.to_string())
        .unwrap_or_default();
    (s, message)
}

/// Rollout `r` held before its start: Pending, no engine, a `NoRoomToRecover` Event, and two
/// minutes later no cordon but the test's own on `spare`.
async fn nothing_touched_while_held(client: &Client, s: &NodeRolloutStatus) {
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert!(s.engine.is_none(), "started: {s:?}");
    assert!(
        event_reasons(client, "r")
            .await
            .iter()
            .any(|r| r == "NoRoomToRecover"),
        "no NoRoomToRecover Event"
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        cordoned(client).await,
        vec!["spare"],
        "only the test's cordon"
    );
}

/// Uncordons `spare`; rollout `r` turns `Ready=True` within a minute of it (the next re-plan)
/// and completes both domains.
async fn starts_once_the_spare_takes_pods(sim: &Sim, client: &Client) {
    let room = sim.clock().now();
    set_spare_unschedulable(client, false).await;
    let running = wait_phase(client, "r", "Running").await;
    let ready = running
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert!(
        ready.last_transition_time.0.duration_since(room).as_secs() <= 61,
        "planned again within a minute of the room: {room}, Ready at {}",
        ready.last_transition_time.0
    );
    let done = wait_phase(client, "r", "Completed").await;
    assert_eq!(done.progress.as_deref(), Some("2/2"));
}

/// Two domains with one group each: the controller drains ud-0, waits for its group to be Ready
/// on the spare node (the health check), then ud-1, and writes every step to the status.
#[tokio::test(start_paused = true)]
async fn a_node_rollout_is_drained_domain_by_domain_to_complete_with_its_status_filled() {
    let (sim, client, _actors, start) = world(&[1, 1]).await;
    let history = record_evictions(&sim);
    let metrics = Arc::new(Metrics::default());
    let (_stop, _ctl) = controller(&sim, metrics.clone());
    create(&client, &rollout_object("kubelet-upgrade", old_pool())).await;
    let running = wait_phase(&client, "kubelet-upgrade", "Running").await;
    assert_eq!(running.domains.len(), 2);
    assert_eq!(running.domains[0].nodes, vec!["node-0".to_string()]);
    assert_eq!(
        (
            running.domains[0].protected_total,
            running.domains[0].other_total
        ),
        (1, 1),
        "the plan's counts: the leader is protected, the worker is not"
    );
    let done = wait_phase(&client, "kubelet-upgrade", "Completed").await;
    assert_eq!(done.progress.as_deref(), Some("2/2"));
    assert_eq!(done.current_domain, None);
    for d in &done.domains {
        assert_eq!(d.phase, "Done", "{d:?}");
        assert_eq!(d.protected_evicted, 1, "{d:?}");
        assert!(d.other_evicted <= 1, "{d:?}");
        let (started, finished) = (
            d.started_at.clone().unwrap(),
            d.finished_at.clone().unwrap(),
        );
        assert!(started.0 < finished.0, "{d:?}");
    }
    // the health check: ud-1 started only after ud-0's group held Ready for the stable 30 s
    let (a, b) = (
        done.domains[0].started_at.as_ref().unwrap().0,
        done.domains[1].started_at.as_ref().unwrap().0,
    );
    assert!(
        b.duration_since(a).as_secs() >= 30,
        "ud-0 at {a}, ud-1 at {b}"
    );
    assert_eq!(condition(&done, "Complete").map(|c| c.0), Some("True"));
    assert_eq!(
        condition(&done, "Progressing").map(|c| c.1),
        Some("Completed")
    );
    assert_eq!(condition(&done, "Ready").map(|c| c.0), Some("True"));
    assert!(done.engine.is_some());
    assert_eq!(done.observed_generation, Some(1));
    // read from the cluster: each leader once, nothing twice; the status counts the same
    let n = check_evictions(&history, &start);
    let counted: i32 = done
        .domains
        .iter()
        .map(|d| d.protected_evicted + d.other_evicted)
        .sum();
    assert_eq!(counted as usize, n);
    assert_eq!(cordoned(&client).await, vec!["node-0", "node-1"]);
    let reasons = event_reasons(&client, "kubelet-upgrade").await;
    for r in ["DomainStarted", "DomainCompleted", "RolloutCompleted"] {
        assert!(
            reasons.iter().any(|x| x == r),
            "no {r} Event in {reasons:?}"
        );
    }
    let text = metrics.encode();
    assert!(
        text.contains("raygate_noderollout_domains_completed_total 2"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "raygate_noderollout_evictions_total{{result=\"evicted\"}} {n}"
        )),
        "{text}"
    );
}

/// ud-0 holds two groups and the budget tolerates one down: the second leader is refused (429).
/// The controller is killed while the domain waits on the budget and a new one is started: it
/// goes on from the status (the same domain start, the refusal, the evictions so far), evicts
/// no pod twice, and the rollout completes.
#[tokio::test(start_paused = true)]
async fn a_controller_killed_mid_domain_is_replaced_by_one_that_goes_on_without_evicting_again() {
    let (sim, client, _actors, start) = world(&[2, 1]).await;
    let history = record_evictions(&sim);
    let metrics = Arc::new(Metrics::default());
    let (_stop, first) = controller(&sim, metrics.clone());
    create(&client, &rollout_object("r", old_pool())).await;
    let blocked = eventually("ud-0 blocked by the budget", || async {
        let s = status(&client, "r").await;
        s.domains
            .first()
            .filter(|d| d.blocked_by.is_some() && d.protected_evicted == 1)
            .cloned()
    })
    .await;
    assert!(
        blocked
            .blocked_by
            .as_deref()
            .unwrap()
            .contains("needs 2 healthy pods"),
        "{blocked:?}"
    );
    first.abort();
    let _ = first.await;
    let before_restart = evicted_uids(&history);
    assert_eq!(
        before_restart.len(),
        1,
        "one leader evicted before the kill"
    );
    // a while without a controller, then a new one
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_stop2, _second) = controller(&sim, Arc::new(Metrics::default()));
    let done = wait_phase(&client, "r", "Completed").await;
    let d0 = &done.domains[0];
    assert_eq!(
        d0.started_at, blocked.started_at,
        "the new controller went on with the domain the old one started"
    );
    assert_eq!(
        d0.protected_evicted, 2,
        "the eviction before the kill is remembered: {d0:?}"
    );
    check_evictions(&history, &start);
}

/// `spec.paused: true` while ud-0 drains: nothing new is evicted and ud-1 is not started, for as
/// long as it stays paused; `false` goes on to Complete.
#[tokio::test(start_paused = true)]
async fn paused_stops_new_evictions_and_resuming_goes_on_to_complete() {
    let (sim, client, _actors, start) = world(&[2, 1]).await;
    let history = record_evictions(&sim);
    let (_stop, _ctl) = controller(&sim, Arc::new(Metrics::default()));
    create(&client, &rollout_object("r", old_pool())).await;
    eventually("the first eviction", || async {
        (!evicted_uids(&history).is_empty()).then_some(())
    })
    .await;
    let api = Api::<NodeRollout>::all(client.clone());
    let pause = |paused: bool| {
        let api = api.clone();
        async move {
            api.patch(
                "r",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": paused}})),
            )
            .await
            .unwrap();
        }
    };
    pause(true).await;
    let paused = wait_phase(&client, "r", "Paused").await;
    assert_eq!(
        condition(&paused, "Progressing").map(|c| c.1),
        Some("PausedBySpec")
    );
    assert_eq!(paused.observed_generation, Some(2));
    // in-flight evictions finish; then nothing for ten minutes
    tokio::time::sleep(Duration::from_secs(5)).await;
    let at_pause = evicted_uids(&history).len();
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        evicted_uids(&history).len(),
        at_pause,
        "evicted while paused"
    );
    assert_eq!(
        cordoned(&client).await,
        vec!["node-0"],
        "ud-1 started while paused"
    );
    assert!(
        event_reasons(&client, "r")
            .await
            .iter()
            .any(|r| r == "Paused"),
        "no Paused Event"
    );
    pause(false).await;
    let done = wait_phase(&client, "r", "Completed").await;
    assert_eq!(done.progress.as_deref(), Some("2/2"));
    assert_eq!(done.observed_generation, Some(3));
    check_evictions(&history, &start);
}

/// Bad input, each a condition a user can act on, nothing cordoned or evicted, and a good rollout
/// next to them completes: an upgrade-domain label no node has, a selector matching no node, a
/// spec the API server's schema lets through but the controller cannot use.
#[tokio::test(start_paused = true)]
async fn bad_rollouts_get_a_condition_touch_nothing_and_leave_a_good_one_alone() {
    let (sim, client, _actors, start) = world(&[1, 1]).await;
    let history = record_evictions(&sim);
    let (_stop, _ctl) = controller(&sim, Arc::new(Metrics::default()));
    let mut unknown_label = old_pool();
    unknown_label["udLabel"] = json!("example.com/rack");
    create(&client, &rollout_object("unknown-label", unknown_label)).await;
    let mut no_nodes = old_pool();
    no_nodes["nodeSelector"] = json!({"matchLabels": {POOL: "gone"}});
    create(&client, &rollout_object("no-nodes", no_nodes)).await;
    let mut bad_query = old_pool();
    bad_query["drain"] = json!({"podSelector": "app in (a"});
    create(&client, &rollout_object("bad-query", bad_query)).await;
    for (name, reason, says) in [
        (
            "unknown-label",
            "UnknownDomainLabel",
            "no node carries the upgrade-domain label \"example.com/rack\"",
        ),
        ("no-nodes", "NoNodesMatched", "no node matched"),
        ("bad-query", "InvalidSpec", "spec.drain.podSelector"),
    ] {
        let s = eventually(&format!("{name}: Ready=False/{reason}"), || async {
            let s = status(&client, name).await;
            (condition(&s, "Ready").map(|c| c.1) == Some(reason)).then_some(s)
        })
        .await;
        let (st, _, message) = condition(&s, "Ready").unwrap();
        assert_eq!(st, "False");
        assert!(message.contains(says), "{name}: {message}");
        assert_eq!(s.phase.as_deref(), Some("Pending"), "{name}");
        assert!(s.engine.is_none(), "{name} started");
        assert!(
            event_reasons(&client, name)
                .await
                .iter()
                .any(|r| r == reason),
            "{name}: no {reason} Event"
        );
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(cordoned(&client).await.is_empty());
    assert!(evicted_uids(&history).is_empty());
    create(&client, &rollout_object("good", old_pool())).await;
    wait_phase(&client, "good", "Completed").await;
    check_evictions(&history, &start);
}

/// Two rollouts over the same nodes: the later one waits with a condition naming the first, and
/// plans only once the first completed (by then nothing is left to evict).
#[tokio::test(start_paused = true)]
async fn a_node_in_two_active_rollouts_makes_the_later_one_wait_naming_the_other() {
    let (sim, client, _actors, start) = world(&[1, 1]).await;
    let history = record_evictions(&sim);
    let (_stop, _ctl) = controller(&sim, Arc::new(Metrics::default()));
    create(&client, &rollout_object("first", old_pool())).await;
    wait_phase(&client, "first", "Running").await;
    let mut overlapping = old_pool();
    overlapping["nodeSelector"] = json!({"matchLabels": {UD: "ud-1"}});
    create(&client, &rollout_object("second", overlapping)).await;
    let waiting = eventually("second waits", || async {
        let s = status(&client, "second").await;
        (condition(&s, "Ready").map(|c| c.1) == Some("NodeConflict")).then_some(s)
    })
    .await;
    let message = condition(&waiting, "Ready").unwrap().2;
    assert!(
        message.contains("node(s) node-1 are drained by NodeRollout first"),
        "{message}"
    );
    assert_eq!(waiting.phase.as_deref(), Some("Pending"));
    wait_phase(&client, "first", "Completed").await;
    wait_phase(&client, "second", "Completed").await;
    // second found nothing left to evict: each leader once, nothing twice
    check_evictions(&history, &start);
}

/// A group split across upgrade domains (its leader on node-0, its worker on node-1, both
/// unmanaged): the rollout's `ContractSatisfied` condition is False with the finding's check as
/// the reason and the workload, object and fix in the message, and a Warning Event; the rollout
/// is not stopped by it. Once the split group is gone, the next check (within a minute) makes
/// the condition True again and the rollout completes.
#[tokio::test(start_paused = true)]
async fn a_group_split_across_domains_makes_the_contract_condition_false_without_stopping_the_rollout()
 {
    let (sim, client, _actors, start) = world(&[1, 1]).await;
    let pods_api = Api::<Pod>::namespaced(client.clone(), NS);
    for (name, node, index) in [("split-0", "node-0", "0"), ("split-0-1", "node-1", "1")] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS, "labels": {
                lws::NAME: "other", lws::GROUP_KEY: "split", lws::WORKER_INDEX: index}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                "readinessProbe": {"exec": {"command": ["true"]}}}]},
        }))
        .unwrap();
        pods_api.create(&PostParams::default(), &p).await.unwrap();
    }
    let history = record_evictions(&sim);
    let (_stop, _ctl) = controller(&sim, Arc::new(Metrics::default()));
    create(&client, &rollout_object("r", old_pool())).await;
    let s = eventually("ContractSatisfied=False", || async {
        let s = status(&client, "r").await;
        (condition(&s, "ContractSatisfied").map(|c| c.0) == Some("False")).then_some(s)
    })
    .await;
    let (_, reason, message) = condition(&s, "ContractSatisfied").unwrap();
    assert_eq!(reason, "GroupSplitAcrossDomains", "{message}");
    assert!(message.starts_with("2 finding(s)"), "{message}");
    for says in [
        "GroupSplitAcrossDomains: LeaderWorkerSet serving/other: group serving/split",
        "1 in ud-0, 1 in ud-1",
        "Fix: pack each group into one domain",
        "NoPdbOnRepresentatives",
    ] {
        assert!(message.contains(says), "no {says:?} in {message}");
    }
    assert_eq!(
        s.phase.as_deref(),
        Some("Running"),
        "the contract warns, it does not stop the rollout"
    );
    assert!(
        event_reasons(&client, "r")
            .await
            .iter()
            .any(|r| r == "ContractBroken"),
        "no ContractBroken Event"
    );
    let gone = sim.clock().now();
    for name in ["split-0", "split-0-1"] {
        let dp = kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        pods_api.delete(name, &dp).await.unwrap();
    }
    let holds = eventually("ContractSatisfied=True", || async {
        let s = status(&client, "r").await;
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == "ContractSatisfied")?;
        (c.status == "True").then(|| (c.reason.clone(), c.last_transition_time.0))
    })
    .await;
    assert_eq!(holds.0, "ContractHolds");
    assert!(
        holds.1.duration_since(gone).as_secs() <= 61,
        "checked again within a minute: split gone at {gone}, holds at {}",
        holds.1
    );
    assert!(
        event_reasons(&client, "r")
            .await
            .iter()
            .any(|r| r == "ContractSatisfied")
    );
    wait_phase(&client, "r", "Completed").await;
    check_evictions(&history, &start);
}

/// A `kube::Client` for the controller that dies with its process right after its first
/// eviction is served: that eviction's answer and every later request never come back (as from
/// a controller killed right after the call), so nothing it would write after the eviction
/// reaches the server.
#[derive(Clone)]
struct DiesAfterEviction {
    inner: raygate_sim::server::service::SimService,
    dead: Arc<std::sync::atomic::AtomicBool>,
}

impl tower_service::Service<raygate_sim::http::Request<kube::client::Body>> for DiesAfterEviction {
    type Response = raygate_sim::http::Response<raygate_sim::server::service::ResponseBody>;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: raygate_sim::http::Request<kube::client::Body>) -> Self::Future {
        use std::sync::atomic::Ordering::SeqCst;
        let dead = self.dead.clone();
        if dead.load(SeqCst) {
            return Box::pin(futures::future::pending());
        }
        let eviction = req.method() == raygate_sim::http::Method::POST
            && req.uri().path().ends_with("/eviction");
        let served = self.inner.call(req);
        Box::pin(async move {
            let resp = served.await?;
            if eviction && resp.status().is_success() {
                dead.store(true, SeqCst);
            }
            if dead.load(SeqCst) {
                return futures::future::pending().await;
            }
            Ok(resp)
        })
    }
}

/// The controller dies right after it sent ud-0's first eviction (the leader), before any later
/// status write; the evicted group cannot come back (no room: the spare node is cordoned, so the
/// rollout is started with `raygate.io/skip-room-check=true`, the health check's dead end). The
/// next controller goes on from the status, which was written before the eviction was sent (the
/// workload's baseline and the eviction decided): it counts the eviction and its health check
/// waits for the group, so ud-1 is not started while the group is down; once there is room
/// again, the rollout completes.
#[tokio::test(start_paused = true)]
async fn a_controller_killed_right_after_an_eviction_is_replaced_by_one_that_waits_for_the_group() {
    use std::sync::atomic::Ordering::SeqCst;
    let (sim, client, _actors, start) = world(&[1, 1]).await;
    set_spare_unschedulable(&client, true).await;
    let history = record_evictions(&sim);
    let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dying = kube::Client::new(
        DiesAfterEviction {
            inner: raygate_sim::server::service::SimService::new(sim.clone())
                .with_user_agent("raygate"),
            dead: dead.clone(),
        },
        "default",
    );
    let (_stop, first) = controller_on(&sim, dying, Arc::new(Metrics::default()));
    let mut r = rollout_object("r", old_pool());
    r.metadata.annotations =
        Some([("raygate.io/skip-room-check".to_string(), "true".to_string())].into());
    create(&client, &r).await;
    eventually("the first eviction sent", || async {
        dead.load(SeqCst).then_some(())
    })
    .await;
    first.abort();
    let _ = first.await;
    eventually("the leader evicted", || async {
        (evicted_uids(&history).len() == 1).then_some(())
    })
    .await;
    let (_stop2, _second) = controller(&sim, Arc::new(Metrics::default()));
    // far beyond the stable period (30 s), within the retry timeout (10 min)
    tokio::time::sleep(Duration::from_secs(300)).await;
    let s = status(&client, "r").await;
    assert!(
        !cordoned(&client).await.contains(&"node-1".to_string()),
        "ud-1 started while ud-0's evicted group is down: {s:?}"
    );
    let (blocked, reason, message) = condition(&s, "Blocked").unwrap();
    assert_eq!((blocked, reason), ("True", "HealthCheck"), "{message}");
    assert!(message.contains("Ready groups back"), "{message}");
    assert_eq!(
        s.domains[0].protected_evicted, 1,
        "the eviction sent before the kill is counted: {:?}",
        s.domains[0]
    );
    set_spare_unschedulable(&client, false).await;
    let done = wait_phase(&client, "r", "Completed").await;
    assert_eq!(done.progress.as_deref(), Some("2/2"));
    check_evictions(&history, &start);
}

/// A `kube::Client` for the controller that counts its LISTs of pods (a GET of a pod collection
/// that is not a watch), with the cluster time of each.
#[derive(Clone)]
struct CountsPodLists {
    inner: raygate_sim::server::service::SimService,
    clock: raygate_sim::Clock,
    lists: Arc<Mutex<Vec<Timestamp>>>,
}

impl tower_service::Service<raygate_sim::http::Request<kube::client::Body>> for CountsPodLists {
    type Response = raygate_sim::http::Response<raygate_sim::server::service::ResponseBody>;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: raygate_sim::http::Request<kube::client::Body>) -> Self::Future {
        let uri = req.uri();
        let watch = uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv.starts_with("watch=")));
        if req.method() == raygate_sim::http::Method::GET && uri.path().ends_with("/pods") && !watch
        {
            self.lists.lock().unwrap().push(self.clock.now());
        }
        Box::pin(self.inner.call(req))
    }
}

/// The group contract is checked over the executor's watched stores while a rollout runs, not
/// by listing the cluster: after the start (the plan's read, the executor's watches), the
/// controller lists no pods again through two domains and two long health checks; yet a group
/// split across domains mid-rollout still turns `ContractSatisfied` False within a minute,
/// and the rollout goes on to complete.
#[tokio::test(start_paused = true)]
async fn a_running_rollout_checks_the_contract_over_its_watches_without_listing_pods() {
    let (sim, client, _actors, start) = world(&[1, 1]).await;
    // capacity outside every domain of the rollout for the split group below
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node("extra", "ud-extra", 2, "new"))
        .await
        .unwrap();
    let history = record_evictions(&sim);
    let lists: Arc<Mutex<Vec<Timestamp>>> = Arc::default();
    let counting = kube::Client::new(
        CountsPodLists {
            inner: raygate_sim::server::service::SimService::new(sim.clone())
                .with_user_agent("raygate"),
            clock: sim.clock().clone(),
            lists: lists.clone(),
        },
        "default",
    );
    let (_stop, _ctl) = controller_on(&sim, counting, Arc::new(Metrics::default()));
    let mut spec = old_pool();
    spec["healthCheckStable"] = json!("120s");
    create(&client, &rollout_object("r", spec)).await;
    wait_phase(&client, "r", "Running").await;
    // the executor's watches have listed once by now
    tokio::time::sleep(Duration::from_secs(5)).await;
    let started = sim.clock().now();
    let at_start = lists.lock().unwrap().len();
    assert!(
        (1..=2).contains(&at_start),
        "the plan's read and the executor's watch: {at_start} pod LISTs"
    );
    let s = status(&client, "r").await;
    assert_eq!(
        condition(&s, "ContractSatisfied").map(|c| c.0),
        Some("True"),
        "{s:?}"
    );
    let pods_api = Api::<Pod>::namespaced(client.clone(), NS);
    for (name, node, index) in [("split-0", "spare", "0"), ("split-0-1", "extra", "1")] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS, "labels": {
                lws::NAME: "other", lws::GROUP_KEY: "split", lws::WORKER_INDEX: index}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                "readinessProbe": {"exec": {"command": ["true"]}}}]},
        }))
        .unwrap();
        pods_api.create(&PostParams::default(), &p).await.unwrap();
    }
    let split = sim.clock().now();
    let broken = eventually("ContractSatisfied=False mid-rollout", || async {
        let s = status(&client, "r").await;
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == "ContractSatisfied")?;
        (c.status == "False").then(|| (c.reason.clone(), c.last_transition_time.0, s.clone()))
    })
    .await;
    assert_eq!(broken.0, "GroupSplitAcrossDomains");
    assert!(
        broken.1.duration_since(split).as_secs() <= 61,
        "checked within a minute: split at {split}, False at {}",
        broken.1
    );
    assert_eq!(broken.2.phase.as_deref(), Some("Running"));
    assert!(
        event_reasons(&client, "r")
            .await
            .iter()
            .any(|r| r == "ContractBroken"),
        "no ContractBroken Event"
    );
    let done = wait_phase(&client, "r", "Completed").await;
    assert_eq!(done.progress.as_deref(), Some("2/2"));
    let after: Vec<Timestamp> = lists
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t > started)
        .copied()
        .collect();
    let ran = sim.clock().now().duration_since(started).as_secs();
    assert!(
        after.is_empty(),
        "the running rollout listed pods {} time(s) in {ran} s: {after:?}",
        after.len()
    );
    assert!(
        ran >= 240,
        "two domains with a 120 s health check ran {ran} s"
    );
    check_evictions(&history, &start);
}

/// The fixed-capacity dead end, found before the start: `taintOutdated` (every outdated node
/// refuses new pods from the first step), ud-0 holds two groups, the budget tolerates one down,
/// and the only node outside the rollout is cordoned. The rollout is not started: `Ready=False`
/// `NoRoomToRecover` names the domain, the budget, the groups and the fixes, a Warning Event
/// says the same, and nothing is cordoned, tainted or evicted. Once the spare node takes pods
/// again, the next check (within a minute) starts the rollout and it completes.
#[tokio::test(start_paused = true)]
async fn a_domain_whose_groups_have_nowhere_to_go_is_reported_before_anything_is_evicted() {
    let (sim, client, _actors, start) = world(&[2, 1]).await;
    set_spare_unschedulable(&client, true).await;
    let history = record_evictions(&sim);
    let (_stop, _ctl) = controller(&sim, Arc::new(Metrics::default()));
    let mut spec = old_pool();
    spec["taintOutdated"] = json!(true);
    create(&client, &rollout_object("r", spec)).await;
    let (s, message) = held_for_no_room(&client).await;
    for says in [
        "1 upgrade domain(s) cannot be drained",
        "upgrade domain ud-0 holds 2 group(s) under PodDisruptionBudget serving/leaders",
        "tolerates 1 down: 1 of them must be Ready elsewhere",
        "room for 0 such group(s)",
        "Fix: add capacity outside the rollout (a node of the new generation) for 1 more group(s)",
        "set spec.taintOutdated to false",
        "let the budget tolerate 2 down",
        "Nothing was cordoned or evicted",
        "raygate.io/skip-room-check=true",
    ] {
        assert!(message.contains(says), "no {says:?} in {message}");
    }
    nothing_touched_while_held(&client, &s).await;
    let tainted = outdated_tainted(&client).await;
    assert!(tainted.is_empty(), "tainted while held: {tainted:?}");
    assert!(evicted_uids(&history).is_empty(), "evicted while held");
    starts_once_the_spare_takes_pods(&sim, &client).await;
    check_evictions(&history, &start);
}

/// The nodes carrying raygate's `raygate.io/outdated` taint, by name.
async fn outdated_tainted(client: &Client) -> Vec<String> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == "raygate.io/outdated"))
        })
        .map(|n| n.name_any())
        .collect()
}

/// `taintOutdated` unset, with room for the evicted groups outside the rollout (the spare
/// node): the controller taints every outdated node, so a group evicted from ud-0 never lands on
/// ud-1 to be evicted again, and records the decision in its state.
#[tokio::test(start_paused = true)]
async fn an_unset_taint_outdated_taints_the_outdated_nodes_when_there_is_room_outside() {
    let (sim, client, _actors, start) = world(&[1, 1]).await;
    let history = record_evictions(&sim);
    let (_stop, _ctl) = controller(&sim, Arc::new(Metrics::default()));
    create(&client, &rollout_object("r", old_pool())).await;
    eventually("both outdated nodes tainted", || async {
        (outdated_tainted(&client).await == ["node-0", "node-1"]).then_some(())
    })
    .await;
    let done = wait_phase(&client, "r", "Completed").await;
    let engine: serde_json::Value =
        serde_json::from_str(done.engine.as_deref().unwrap_or("{}")).unwrap();
    assert_eq!(engine["taintOutdated"], json!(true), "{engine}");
    assert!(
        !event_reasons(&client, "r")
            .await
            .iter()
            .any(|r| r == "TaintSkipped")
    );
    // no recreated pod evicted: no group landed on a later domain to be disrupted again
    check_evictions(&history, &start);
}

/// The whole controller as `raygate controller --node-rollouts --leader-elect` runs it
/// (`controller::run_with`: the gate's watches, the admission loop, leader election on the
/// cluster's clock, the supervised NodeRollout task) runs a rollout to completion; the Lease
/// names it while it leads, and a shutdown stops it cleanly (no task ended early) and releases
/// the Lease.
#[tokio::test(start_paused = true)]
async fn the_full_controller_with_node_rollouts_and_leader_election_completes_a_rollout() {
    // raygate's own CRDs (NodeRollout, the Kueue kinds it installs) and KubeRay's, as files
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let texts: Vec<String> = [
        "crds/noderollouts.raygate.io.yaml",
        "crds/clusterqueues.kueue.x-k8s.io.yaml",
        "crds/cohorts.kueue.x-k8s.io.yaml",
        "crds/localqueues.kueue.x-k8s.io.yaml",
        "crds/resourceflavors.kueue.x-k8s.io.yaml",
        "crds/workloadpriorityclasses.kueue.x-k8s.io.yaml",
        "crds/workloads.kueue.x-k8s.io.yaml",
        "sim/crds/upstream/ray.io_rayservices.yaml",
        "sim/crds/upstream/ray.io_rayclusters.yaml",
    ]
    .iter()
    .map(|p| std::fs::read_to_string(root.join(p)).expect(p))
    .collect();
    let sim = sim_with(&texts.iter().map(String::as_str).collect::<Vec<_>>());
    sim.ensure_namespace("raygate-system");
    let client = sim.client();
    let _actors = actors(&sim);
    let start = layout(&client, &[1, 1]).await;
    let history = record_evictions(&sim);
    let config = raygate::controller::Config {
        leader_elect: true,
        identity: "raygate-0".into(),
        node_rollouts: true,
        ..Default::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(raygate::controller::run_with(
        sim.client_as("raygate"),
        config,
        Arc::new(sim.clock().clone()),
        async move {
            let _ = stopped.await;
        },
    ));
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        "raygate-system",
    );
    let holder = |l: &k8s_openapi::api::coordination::v1::Lease| {
        l.spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    eventually("raygate-0 leads", || async {
        let l = leases.get_opt("raygate").await.unwrap()?;
        (holder(&l) == "raygate-0").then_some(())
    })
    .await;
    create(&client, &rollout_object("r", old_pool())).await;
    let done = wait_phase(&client, "r", "Completed").await;
    assert_eq!(done.progress.as_deref(), Some("2/2"));
    assert_eq!(
        condition(&done, "ContractSatisfied").map(|c| c.0),
        Some("True")
    );
    check_evictions(&history, &start);
    assert!(
        !controller.is_finished(),
        "the controller stopped by itself: {:?}",
        controller.await
    );
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), controller)
        .await
        .expect("the controller stops on shutdown")
        .expect("the controller task did not panic");
    assert!(ended.is_ok(), "{ended:?}");
    let l = leases.get("raygate").await.unwrap();
    assert_eq!(holder(&l), "", "the Lease is released on shutdown");
}

/// The health check's own dead end, found before the start: hand-off `None` (the default: drained
/// nodes stay cordoned), no taint, one group in each of ud-0 and ud-1, the budget tolerating one
/// down (so no budget's dead end), and the spare node cordoned. ud-0's group could run again on
/// node-1, which is full; neither domain's health check could ever see its group Ready again. The
/// rollout is held `Ready=False` `NoRoomToRecover` naming the domains, the groups and the fixes,
/// with a Warning Event, and nothing is cordoned or evicted; once the spare node takes pods, the
/// next check (within a minute) starts it and it completes.
#[tokio::test(start_paused = true)]
async fn a_domain_whose_health_check_could_never_pass_with_hand_off_none_holds_the_rollout() {
    let (sim, client, _actors, start) = world(&[1, 1]).await;
    set_spare_unschedulable(&client, true).await;
    let history = record_evictions(&sim);
    let (_stop, _ctl) = controller(&sim, Arc::new(Metrics::default()));
    // untainted: the health check's dead end alone (unset, the default would taint, there being
    // no room either way)
    let mut spec = old_pool();
    spec["taintOutdated"] = json!(false);
    create(&client, &rollout_object("r", spec)).await;
    let (s, message) = held_for_no_room(&client).await;
    for says in [
        "2 upgrade domain(s) would fail their health check, their groups would have nowhere to \
         run again: upgrade domain ud-0: with hand-off None its nodes stay cordoned, so its \
         health check waits until its 1 group(s)",
        "on nodes outside the domains drained so far",
        "upgrade domain ud-1: with hand-off None",
        "as must the 1 group(s) moved out of earlier domains",
        "the health check would fail after healthCheckRetryTimeout",
        "Fix: add capacity outside the domains drained so far (a node of the new generation)",
        "or hand the nodes back (spec.handOff.mode Reboot or Replace",
        "Nothing was cordoned or evicted",
        "raygate.io/skip-room-check=true",
    ] {
        assert!(message.contains(says), "no {says:?} in {message}");
    }
    assert!(
        !message.contains("cannot be drained"),
        "no budget's dead end here: {message}"
    );
    nothing_touched_while_held(&client, &s).await;
    assert!(evicted_uids(&history).is_empty(), "evicted while held");
    starts_once_the_spare_takes_pods(&sim, &client).await;
    check_evictions(&history, &start);
}
