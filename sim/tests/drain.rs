//! raygate's drain engine on the simulated cluster, through `kube::Client` as in production:
//! LeaderWorkerSet groups with delegated readiness, one budget over the leaders, the disruption
//! controller with its reaction lag, the scheduler, kubelets and (for reboots) the node
//! lifecycle. On the paused clock: hours of cluster time in seconds.
//!
//! What the drain did is read from the cluster's own history: a watch on the pods records when
//! each pod got the Eviction API's `DisruptionTarget` condition, and when pods became Ready.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use raygate::controller::drain::{self as executor, Run};
use raygate::drain::engine::{FailureAction, Handoff, Options, Phase, State};
use raygate::drain::{Generation, GenerationSource, GenerationTarget};
use raygate::drain::{GroupLabels, PlanOptions};
use raygate_sim::world::actors::{kubelet, lws, node_lifecycle};
use raygate_sim::{FaultRule, Faults, Sim, Verb};
use serde_json::{Value, json};
use tokio::sync::watch;

use raygate_sim::world::fixtures::*;

fn sim() -> Sim {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    sim_with(&[])
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// `groups[i]` LWS groups on node `node-i` (upgrade domain `ud-i`, `pool=old`), placed one domain
/// at a time (the node is added, then the LWS scaled), then a spare node in its own domain with
/// `spare_gpus` (`pool=new`), and a budget over the leaders: `minAvailable = groups − tolerate`.
async fn layout(
    client: &Client,
    groups: &[usize],
    spare_gpus: u32,
    tolerate: usize,
) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut total = 0;
    for (i, &g) in groups.iter().enumerate() {
        nodes
            .create(
                &PostParams::default(),
                &node(
                    &format!("node-{i}"),
                    &format!("ud-{i}"),
                    2 * g as u32,
                    "old",
                ),
            )
            .await
            .unwrap();
        total += g;
        grow_groups(client, total).await;
    }
    nodes
        .create(
            &PostParams::default(),
            &node("spare", "ud-spare", spare_gpus, "new"),
        )
        .await
        .unwrap();
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
        (s.current_healthy == Some(total as i32) && s.disruptions_allowed == Some(tolerate as i32))
            .then_some(())
    })
    .await;
    // where each pod started: name → node
    pods(client)
        .await
        .iter()
        .map(|p| (p.name_any(), node_of(p)))
        .collect()
}

/// `n` unprotected pods on `node` (controlled by a ReplicaSet, so kubectl's rules let them go).
async fn batch(client: &Client, node: &str, n: usize) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..n {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("batch-{node}-{i}"), "labels": {"app": "batch"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "batch",
                    "uid": "batch-uid", "controller": true}]},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap();
        api.create(&PostParams::default(), &p).await.unwrap();
    }
}

/// What happened to pods, in the cluster's order.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    /// The Eviction API accepted its eviction (`DisruptionTarget` / `EvictionByEvictionAPI`).
    Evicted,
    Ready,
    Unready,
}

type History = Arc<Mutex<Vec<(Timestamp, String, String, Seen)>>>;

/// Records, from a watch on the pods, every eviction and every Ready transition with the
/// cluster time it was seen (name, uid).
fn record(sim: &Sim) -> History {
    let history: History = Arc::default();
    let (client, clock, out) = (sim.client(), sim.clock().clone(), history.clone());
    tokio::spawn(async move {
        let mut last: BTreeMap<String, (bool, bool)> = BTreeMap::new();
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
            let ready = is_ready(&p);
            let before = last.insert(uid.clone(), (evicted, ready));
            let (was_evicted, was_ready) = before.unwrap_or((false, false));
            let mut h = out.lock().unwrap();
            if evicted && !was_evicted {
                h.push((clock.now(), p.name_any(), uid.clone(), Seen::Evicted));
            }
            if ready != was_ready {
                let seen = if ready { Seen::Ready } else { Seen::Unready };
                h.push((clock.now(), p.name_any(), uid, seen));
            }
        }
    });
    history
}

fn evictions(h: &History) -> Vec<(Timestamp, String)> {
    h.lock()
        .unwrap()
        .iter()
        .filter(|e| e.3 == Seen::Evicted)
        .map(|e| (e.0, e.1.clone()))
        .collect()
}

fn options() -> Options {
    Options {
        plan: PlanOptions {
            domain_label: UD.into(),
            node_selector: format!("{POOL}=old"),
            groups: GroupLabels::of_labels(&[lws::GROUP_KEY]),
            ..PlanOptions::default()
        },
        disruption_controller_lag: SignedDuration::try_from(LAG).unwrap(),
        ..Options::default()
    }
}

/// Runs the executor on `sim` until it ends or `limit` of cluster time passes; every state it
/// reported is kept.
struct Drain {
    states: Arc<Mutex<Vec<State>>>,
    handle: tokio::task::JoinHandle<Result<State, executor::DrainRunError>>,
    resume: watch::Sender<u64>,
    stop: watch::Sender<bool>,
}

fn start(sim: &Sim, options: Options) -> Drain {
    let states: Arc<Mutex<Vec<State>>> = Arc::default();
    let (resume, resumes) = watch::channel(0);
    let (stop, mut stopped) = watch::channel(false);
    let run = Run {
        resumes,
        ..Run::new(options)
    };
    let out = states.clone();
    let handle = tokio::spawn(executor::run(
        sim.client_as("raygate-drain"),
        Arc::new(sim.clock().clone()),
        run,
        move |s: &State| out.lock().unwrap().push(s.clone()),
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        },
    ));
    Drain {
        states,
        handle,
        resume,
        stop,
    }
}

impl Drain {
    async fn finish(self) -> State {
        tokio::time::timeout(WAIT, self.handle)
            .await
            .expect("the drain ends within its time")
            .unwrap()
            .unwrap()
    }

    fn seen(&self, f: impl Fn(&State) -> bool) -> Option<State> {
        self.states.lock().unwrap().iter().find(|s| f(s)).cloned()
    }
}

async fn node_obj(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone()).get(name).await.unwrap()
}

fn cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Two domains: `ud-0` with two groups, `ud-1` with one, two unprotected pods on each node, a
/// budget that tolerates one group down. Every leader of a domain is evicted before any other pod
/// of it; the second leader of `ud-0` is refused (429) and evicted only once the first group is
/// Ready again elsewhere and the budget allows it; the `none` hand-off leaves the nodes cordoned.
#[tokio::test(start_paused = true)]
async fn protected_pods_go_first_and_a_429_pauses_the_domain_until_the_group_recovers_elsewhere() {
    let sim = sim();
    let client = sim.client();
    let _actors = actors(&sim);
    let placed = layout(&client, &[2, 1], 6, 1).await;
    batch(&client, "node-0", 2).await;
    batch(&client, "node-1", 2).await;
    let history = record(&sim);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let drain = start(&sim, options());
    let states = drain.states.clone();
    let end = drain.finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);

    let evicted = evictions(&history);
    let names: Vec<&str> = evicted.iter().map(|e| e.1.as_str()).collect();
    eprintln!("evictions in the cluster's order: {names:?}");
    for (i, ud_node) in ["node-0", "node-1"].iter().enumerate() {
        let leaders: Vec<&String> = placed
            .iter()
            .filter(|(p, n)| *n == ud_node && !p.trim_start_matches("llm-").contains('-'))
            .map(|(p, _)| p)
            .collect();
        assert_eq!(leaders.len(), [2, 1][i]);
        let position = |name: &str| names.iter().position(|n| *n == name);
        let last_leader = leaders
            .iter()
            .map(|l| position(l).unwrap_or_else(|| panic!("{l} was evicted")))
            .max()
            .unwrap();
        let first_batch = position(&format!("batch-{ud_node}-0"))
            .min(position(&format!("batch-{ud_node}-1")))
            .expect("the batch pods were evicted");
        assert!(
            last_leader < first_batch,
            "{ud_node}: every protected pod before any other: {names:?}"
        );
    }
    // ud-1's pods only after ud-0 is through
    let position = |name: &str| names.iter().position(|n| *n == name).unwrap();
    assert!(position("batch-node-0-1").max(position("batch-node-0-0")) < position("llm-2"));

    // the 429: ud-0's second leader was refused, with the budget's own words
    let refused = states
        .lock()
        .unwrap()
        .iter()
        .find_map(|s| s.domains[0].refusal.clone())
        .expect("a 429 paused ud-0");
    assert_eq!(refused.pdb, "serving/leaders");
    assert!(
        refused.message.contains("needs 2 healthy pods"),
        "{}",
        refused.message
    );
    // ... and evicted only after the first group was Ready again on the spare node
    let (first, second) = (&evicted[0], &evicted[1]);
    let h = history.lock().unwrap().clone();
    let first_back = h
        .iter()
        .find(|e| e.1 == first.1 && e.3 == Seen::Ready && e.0 > first.0)
        .expect("the first evicted group is Ready again");
    assert!(
        second.0 >= first_back.0,
        "the second leader ({}) was evicted at {}, before the first group ({}) was Ready again at {}",
        second.1,
        second.0,
        first.1,
        first_back.0
    );
    let back_on = pods(&client).await;
    assert!(
        back_on
            .iter()
            .filter(|p| p.labels().contains_key(lws::GROUP_KEY))
            .all(|p| node_of(p) == "spare" && is_ready(p)),
        "every group runs on the spare node"
    );
    // none: the drained nodes stay cordoned
    for n in ["node-0", "node-1"] {
        assert!(cordoned(&node_obj(&client, n).await), "{n} stays cordoned");
    }
    assert!(!cordoned(&node_obj(&client, "spare").await));
}

/// The propagation race: while ud-0's group is coming back, a worker of the group in ud-2 dies;
/// its leader still reports Ready for up to its probe's period × failureThreshold, and the
/// budget (which tolerates two groups down) trails that by the disruption controller's lag. The
/// health check's stable period (computed: 5 s × 3 + 5 s) outlasts that, so ud-1's leader is not
/// evicted while ud-2's group is down: its eviction is accepted only after that group is Ready
/// again. (With the stable period at 0 it is evicted as soon as ud-0's group is Ready.)
#[tokio::test(start_paused = true)]
async fn the_next_domain_s_leader_is_not_evicted_while_a_dying_group_has_not_shown_yet() {
    let sim = sim();
    let client = sim.client();
    let _actors = actors(&sim);
    let placed = layout(&client, &[1, 1, 1], 6, 2).await;
    let leader_of = |node: &str| {
        placed
            .iter()
            .find(|(p, n)| *n == node && !p.trim_start_matches("llm-").contains('-'))
            .map(|(p, _)| p.clone())
            .unwrap()
    };
    let (a, b, c) = (
        leader_of("node-0"),
        leader_of("node-1"),
        leader_of("node-2"),
    );
    let c_worker = format!("{c}-1");
    let history = record(&sim);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let drain = start(&sim, options());
    // ud-0's leader is evicted; its group is recreated on the spare node
    let old_uid = pods_api.get(&a).await.unwrap().uid();
    eventually("ud-0's group recreated", || async {
        let p = pods_api.get_opt(&a).await.unwrap()?;
        (p.uid() != old_uid && node_of(&p) == "spare").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // C's worker dies now: it reports unready at once, its leader only after its probe
    let killed_at = sim.clock().now();
    pods_api
        .patch(
            &c_worker,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {kubelet::FAIL_READINESS: "true"}}})),
        )
        .await
        .unwrap();
    pods_api
        .patch_status(
            &c_worker,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            ),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(90)).await;
    pods_api
        .patch(
            &c_worker,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {kubelet::FAIL_READINESS: null}}})),
        )
        .await
        .unwrap();
    let end = drain.finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let h = history.lock().unwrap().clone();
    let c_back = h
        .iter()
        .find(|e| e.1 == c && e.3 == Seen::Ready && e.0 > killed_at)
        .expect("C's leader Ready again")
        .0;
    let c_down = h
        .iter()
        .find(|e| e.1 == c && e.3 == Seen::Unready && e.0 > killed_at)
        .expect("C's leader noticed")
        .0;
    let b_evicted = h
        .iter()
        .find(|e| e.1 == b && e.3 == Seen::Evicted)
        .expect("B's leader evicted")
        .0;
    eprintln!(
        "C's worker died at {killed_at}, its leader unready at {c_down}, Ready again at {c_back}; \
         B's leader evicted at {b_evicted}"
    );
    assert!(
        b_evicted > c_back,
        "B's leader was evicted at {b_evicted} while C's group was down ({killed_at} – {c_back})"
    );
}

/// Sets (or clears) a pod's readiness fault; a failing pod reports unready at once.
async fn fail_readiness(client: &Client, pod: &str, fail: bool) {
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let value = if fail { json!("true") } else { Value::Null };
    pods_api
        .patch(
            pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {kubelet::FAIL_READINESS: value}}})),
        )
        .await
        .unwrap();
    if fail {
        pods_api
            .patch_status(
                pod,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                ),
            )
            .await
            .unwrap();
    }
}

/// The propagation window: the workers of the last domain's two groups fail their readiness
/// just before the rollout starts. Their leaders stay Ready for their own probe's lag and the
/// budget (floor 4 of 6) still counts every group healthy, so the Eviction API would let the
/// first domain's two leaders go (2 groups left). raygate counts groups from their members: the
/// first domain's leaders wait until those workers are Ready again. Measured from the workers'
/// own readiness, not the leaders'.
#[tokio::test(start_paused = true)]
async fn leaders_wait_while_later_groups_have_failed_members_their_budget_does_not_see_yet() {
    let sim = sim();
    let client = sim.client();
    let _actors = actors(&sim);
    // the spare node holds every group (the drained nodes stay cordoned)
    let placed = layout(&client, &[2, 2, 2], 12, 2).await;
    let is_leader = |p: &str| !p.trim_start_matches("llm-").contains('-');
    let on = |node: &str, leader: bool| -> Vec<String> {
        placed
            .iter()
            .filter(|(p, n)| *n == node && is_leader(p) == leader)
            .map(|(p, _)| p.clone())
            .collect()
    };
    let (first_leaders, late_workers) = (on("node-0", true), on("node-2", false));
    assert_eq!((first_leaders.len(), late_workers.len()), (2, 2));
    let history = record(&sim);
    for w in &late_workers {
        fail_readiness(&client, w, true).await;
    }
    let failed_at = sim.clock().now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let drain = start(&sim, options());
    tokio::time::sleep(Duration::from_secs(60)).await;
    let held = drain.seen(|s| {
        s.domains[0]
            .hold
            .as_ref()
            .is_some_and(|h| h.reason == "GroupsUnavailable")
    });
    assert!(held.is_some(), "the hold was never reported");
    for w in &late_workers {
        fail_readiness(&client, w, false).await;
    }
    let end = drain.finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let h = history.lock().unwrap().clone();
    let back = late_workers
        .iter()
        .map(|w| {
            h.iter()
                .find(|e| &e.1 == w && e.3 == Seen::Ready && e.0 > failed_at)
                .expect("the worker Ready again")
                .0
        })
        .max()
        .unwrap();
    let first_eviction = h
        .iter()
        .filter(|e| first_leaders.contains(&e.1) && e.3 == Seen::Evicted)
        .map(|e| e.0)
        .min()
        .expect("the first domain's leaders evicted");
    eprintln!(
        "workers failed at {failed_at}, Ready again at {back}; first leader evicted at \
         {first_eviction}"
    );
    assert!(
        first_eviction > back,
        "a leader of the first domain was evicted at {first_eviction} while two later groups \
         were missing a worker (until {back})"
    );
}

/// Half the drain's evictions meet the API server's own throttling (a plain-text 429 with
/// `Retry-After: 1`, as the priority-and-fairness filter answers). The drain waits the header's
/// second and tries again; no budget is blamed (no refusal, no `EvictionRefused`).
#[tokio::test(start_paused = true)]
async fn throttled_evictions_wait_their_retry_after_and_are_never_blamed_on_a_budget() {
    let sim = sim();
    let client = sim.client();
    let _actors = actors(&sim);
    layout(&client, &[2, 1], 6, 1).await;
    sim.set_faults(
        Faults::none().rule(
            FaultRule::any()
                .verbs(&[Verb::Create])
                .resource("pods")
                .user_agent("raygate-drain")
                .error(429, 0.5),
        ),
    );
    let drain = start(&sim, options());
    let states = drain.states.clone();
    let end = drain.finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let states = states.lock().unwrap();
    let throttled = states
        .iter()
        .filter(|s| s.domains.iter().any(|d| d.throttled_until.is_some()))
        .count();
    assert!(
        throttled > 0,
        "no eviction was throttled: the fault did not bite"
    );
    let blamed: Vec<String> = states
        .iter()
        .flat_map(|s| &s.domains)
        .filter_map(|d| d.refusal.as_ref())
        .filter(|r| !r.message.contains("disruption budget"))
        .map(|r| r.message.clone())
        .collect();
    assert!(
        blamed.is_empty(),
        "throttling blamed on a budget: {blamed:?}"
    );
}

/// The upgrade agent (a bridge to the sim's node lifecycle, as a system-upgrade-controller Plan
/// selecting the label would): asks for `action` (`reboot`, `replace`) on every generation-0 node
/// labelled for an upgrade that is not already in a lifecycle.
fn spawn_upgrade_agent(client: &Client, action: &'static str) {
    let agent = client.clone();
    tokio::spawn(async move {
        let stream = watcher(
            Api::<Node>::all(agent.clone()),
            watcher::Config::default().labels("raygate.io/upgrade=requested"),
        )
        .applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(n)) = stream.next().await {
            if !n.annotations().contains_key(node_lifecycle::LIFECYCLE)
                && !n.annotations().contains_key(node_lifecycle::PHASE)
                && n.labels()
                    .get(node_lifecycle::GENERATION)
                    .map(String::as_str)
                    == Some("0")
            {
                node_lifecycle::request(&agent, &n.name_any(), action)
                    .await
                    .unwrap();
            }
        }
    });
}

/// `reboot`: the drained node is labelled for the upgrade agent (here a bridge to the sim's node
/// lifecycle, as a system-upgrade-controller Plan selecting the label would), goes down, comes
/// back Ready at the next generation, and raygate uncordons it and removes the label.
#[tokio::test(start_paused = true)]
async fn reboot_hands_the_drained_node_to_the_agent_and_uncordons_it_at_the_target_generation() {
    let sim = sim();
    let client = sim.client();
    let _actors = gang_world(&sim)
        .node_lifecycle(node_lifecycle::Config::default())
        .start();
    layout(&client, &[1], 2, 1).await;
    spawn_upgrade_agent(&client, "reboot");
    let mut o = options();
    o.plan.generation = Some(Generation {
        source: GenerationSource::Label(node_lifecycle::GENERATION.into()),
        target: GenerationTarget::Value("1".into()),
    });
    o.handoff = Handoff::reboot();
    let started = sim.clock().now();
    let drain = start(&sim, o);
    let states = drain.states.clone();
    let end = drain.finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let n = node_obj(&client, "node-0").await;
    assert!(!cordoned(&n), "uncordoned after the reboot");
    assert_eq!(n.labels()[node_lifecycle::GENERATION], "1");
    assert!(!n.labels().contains_key("raygate.io/upgrade"));
    assert!(
        states
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.waiting.contains("node-0 (upgrading)")),
        "it waited for the upgrade"
    );
    let took = sim.clock().now().duration_since(started);
    assert!(
        took >= SignedDuration::from_secs(120),
        "the reboot takes 120 s: {took:?}"
    );
}

/// A domain that can never drain (a budget that tolerates no disruption) hits its timeout.
/// Returns the drain, the history and the state it failed with.
async fn stuck_domain(sim: &Sim, action: FailureAction) -> (Drain, History, State) {
    let client = sim.client();
    layout(&client, &[1, 1], 4, 1).await;
    // no disruption allowed at all
    Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
        .patch(
            "leaders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 2}})),
        )
        .await
        .unwrap();
    let history = record(sim);
    let mut o = options();
    o.domain_timeout = Some(SignedDuration::from_secs(300));
    o.failure_action = action;
    let started = sim.clock().now();
    let drain = start(sim, o);
    let failed = eventually("the domain timeout", || async {
        drain.seen(|s| !matches!(s.phase, Phase::Running))
    })
    .await;
    let took = sim.clock().now().duration_since(started);
    assert!(
        took >= SignedDuration::from_secs(300) && took < SignedDuration::from_secs(310),
        "{took:?}"
    );
    assert!(
        evictions(&history).is_empty(),
        "{action:?}: nothing evicted"
    );
    (drain, history, failed)
}

/// `failureAction: Pause`: the rollout pauses with the node cordoned, nothing more happens, and
/// the operator's resume starts the domain again.
#[tokio::test(start_paused = true)]
async fn a_domain_timeout_with_pause_keeps_the_node_cordoned_until_resumed() {
    let sim = sim();
    let _actors = actors(&sim);
    let client = sim.client();
    let (drain, history, failed) = stuck_domain(&sim, FailureAction::Pause).await;
    assert!(
        matches!(&failed.phase, Phase::Paused { reason } if reason.contains("did not finish within its timeout (5m0s)")),
        "{:?}",
        failed.phase
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(cordoned(&node_obj(&client, "node-0").await));
    assert!(evictions(&history).is_empty());
    assert!(matches!(
        drain.states.lock().unwrap().last().unwrap().phase,
        Phase::Paused { .. }
    ));
    drain.resume.send(1).unwrap();
    eventually("resumed", || async {
        drain
            .states
            .lock()
            .unwrap()
            .last()
            .is_some_and(|s| s.phase == Phase::Running)
            .then_some(())
    })
    .await;
    drain.stop.send(true).unwrap();
    let end = drain.finish().await;
    assert_eq!(end.resumes, 1);
}

/// `failureAction: Abort`: the rollout ends and the domain's node is uncordoned.
#[tokio::test(start_paused = true)]
async fn a_domain_timeout_with_abort_ends_the_rollout_and_uncordons_the_domain() {
    let sim = sim();
    let _actors = actors(&sim);
    let client = sim.client();
    let (drain, _, failed) = stuck_domain(&sim, FailureAction::Abort).await;
    assert!(
        matches!(failed.phase, Phase::Failed { .. }),
        "{:?}",
        failed.phase
    );
    let end = drain.finish().await;
    assert!(matches!(end.phase, Phase::Failed { .. }), "{:?}", end.phase);
    assert!(
        !cordoned(&node_obj(&client, "node-0").await),
        "abort gives the node back"
    );
    assert!(!cordoned(&node_obj(&client, "node-1").await));
}

/// `replace`: the drained node is labelled for the infrastructure (here the sim's node lifecycle
/// through the same bridge), which adds a new node of the next generation to the domain and
/// deletes the drained one; raygate waits until the domain's capacity is back.
#[tokio::test(start_paused = true)]
async fn replace_waits_until_the_domain_has_a_new_node_at_the_target_generation() {
    let sim = sim();
    let client = sim.client();
    let _actors = gang_world(&sim)
        .node_lifecycle(node_lifecycle::Config::default())
        .start();
    layout(&client, &[1], 2, 1).await;
    spawn_upgrade_agent(&client, "replace");
    let mut o = options();
    o.plan.generation = Some(Generation {
        source: GenerationSource::Label(node_lifecycle::GENERATION.into()),
        target: GenerationTarget::Value("1".into()),
    });
    o.handoff = Handoff::replace();
    let started = sim.clock().now();
    let drain = start(&sim, o);
    let states = drain.states.clone();
    let end = drain.finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let new = node_obj(&client, "node-0-g1").await;
    assert_eq!(new.labels()[node_lifecycle::GENERATION], "1");
    assert_eq!(new.labels()[UD], "ud-0");
    assert!(node_lifecycle::is_ready(&new) && !cordoned(&new));
    assert!(
        states
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.waiting.contains("replace: 0 of 1 new node(s)")),
        "it waited for the new node"
    );
    let took = sim.clock().now().duration_since(started);
    assert!(
        took >= SignedDuration::from_secs(60),
        "the new node joins NotReady for 60 s: {took:?}"
    );
}

/// A node of `kubelet` version in upgrade domain `ud`, labelled with its generation too.
fn versioned_node(name: &str, ud: &str, kubelet: &str, cpu: u32) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {UD: ud, "kubernetes.io/hostname": name,
            "node.example.com/generation": kubelet.replace('.', "-")}},
        "status": {
            "allocatable": {"cpu": cpu.to_string(), "memory": "256Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": kubelet, "osImage": "", "kernelVersion": "",
                "containerRuntimeVersion": "", "architecture": "amd64", "bootID": "",
                "machineID": "", "operatingSystem": "linux", "systemUUID": "",
                "kubeProxyVersion": ""},
        }
    }))
    .unwrap()
}

/// Node generations with `taintOutdated`, from a NodeRollout spec: two nodes at kubelet
/// v1.30.9 (`old-a` in ud-a, `old-b` in ud-b, roomy) and two at v1.30.10 (`new-c`, `new-d`,
/// small). "Newest" is v1.30.10 (versions compare by number: a string order would pick v1.30.9);
/// exactly the two old nodes are tainted `raygate.io/outdated:NoSchedule`, both from the first
/// step; a pod created while ud-a is in its health check (ud-b not cordoned yet) is scheduled on
/// the new generation although the scheduler's least-allocated score prefers `old-b`; only the
/// old nodes are drained, the new ones are left as they were.
#[tokio::test(start_paused = true)]
async fn outdated_kubelets_are_tainted_up_front_new_work_lands_on_the_newest_and_only_they_drain() {
    let sim = sim();
    let client = sim.client();
    let _actors = actors(&sim);
    let nodes: Api<Node> = Api::all(client.clone());
    for n in [
        versioned_node("old-a", "ud-a", "v1.30.9", 64),
        versioned_node("old-b", "ud-b", "v1.30.9", 64),
        versioned_node("new-c", "ud-c", "v1.30.10", 8),
        versioned_node("new-d", "ud-d", "v1.30.10", 8),
    ] {
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    for n in ["old-a", "old-b", "new-c"] {
        batch(&client, n, 2).await;
    }
    let spec: raygate::types::rollout::NodeRolloutSpec = serde_json::from_value(json!({
        "udLabel": UD, "generation": {"nodeInfo": "kubeletVersion"}, "taintOutdated": true,
    }))
    .unwrap();
    let rollout = raygate::drain::rollout_options(&spec).unwrap();
    // the label source sees the same two generations
    let by_label = PlanOptions {
        generation: Some(Generation {
            source: GenerationSource::Label("node.example.com/generation".into()),
            target: GenerationTarget::Newest,
        }),
        ..rollout.plan.clone()
    };
    let listed = nodes.list(&ListParams::default()).await.unwrap().items;
    let label_plan = raygate::drain::plan(
        &raygate::drain::Cluster::new(&listed, &[], &[]),
        &by_label,
        sim.clock().now(),
    )
    .unwrap();
    assert_eq!(label_plan.target_generation.as_deref(), Some("v1-30-10"));
    let o = Options {
        plan: rollout.plan,
        health_check_wait: SignedDuration::from_secs(60),
        health_check_stable: Some(SignedDuration::ZERO),
        ..options()
    };
    let history = record(&sim);
    let drain = start(&sim, o);
    eventually("ud-a in its health check", || async {
        drain
            .seen(|s| s.domains[0].step == raygate::drain::engine::Step::HealthCheck)
            .map(|_| ())
    })
    .await;
    let tainted = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| {
                ts.iter()
                    .any(|t| t.key == "raygate.io/outdated" && t.effect == "NoSchedule")
            })
    };
    let old_b = node_obj(&client, "old-b").await;
    assert!(
        tainted(&old_b) && !cordoned(&old_b),
        "old-b: tainted, not yet cordoned"
    );
    let fresh: Pod = serde_json::from_value(json!({
        "metadata": {"name": "fresh", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "1"}}}]},
    }))
    .unwrap();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods_api
        .create(&PostParams::default(), &fresh)
        .await
        .unwrap();
    let placed = eventually("fresh scheduled", || async {
        let p = pods_api.get("fresh").await.unwrap();
        Some(node_of(&p)).filter(|n| !n.is_empty())
    })
    .await;
    assert!(
        placed == "new-c" || placed == "new-d",
        "a new pod lands on the new generation, not {placed}"
    );
    let end = drain.finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    assert_eq!(end.target_generation.as_deref(), Some("v1.30.10"));
    let drained: Vec<Vec<String>> = end.domains.iter().map(|d| d.nodes.clone()).collect();
    assert_eq!(
        drained,
        [vec!["old-a".to_string()], vec!["old-b".to_string()]]
    );
    for n in ["old-a", "old-b"] {
        let node = node_obj(&client, n).await;
        assert!(
            cordoned(&node) && tainted(&node),
            "{n} cordoned and tainted"
        );
    }
    for n in ["new-c", "new-d"] {
        let node = node_obj(&client, n).await;
        assert!(!cordoned(&node) && !tainted(&node), "{n} untouched");
    }
    let mut evicted: Vec<String> = evictions(&history).into_iter().map(|e| e.1).collect();
    evicted.sort();
    assert_eq!(
        evicted,
        [
            "batch-old-a-0",
            "batch-old-a-1",
            "batch-old-b-0",
            "batch-old-b-1"
        ]
    );
    let left: Vec<String> = pods(&client).await.iter().map(|p| p.name_any()).collect();
    assert!(left.contains(&"batch-new-c-0".to_string()), "{left:?}");
}

/// A KubeRay multi-host worker group `gpu` (2 hosts per replica, one GPU each, readiness after
/// 20 s) with `replicas`.
fn gpu_group(replicas: i32) -> Value {
    json!([{"groupName": "gpu", "replicas": replicas, "minReplicas": 0, "maxReplicas": 8,
        "numOfHosts": 2, "rayStartParams": {},
        "template": {"spec": {"terminationGracePeriodSeconds": 5,
            "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0",
                "resources": {"requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"}},
                "readinessProbe": {"httpGet": {"path": "/api/local_raylet_healthz", "port": 52365},
                    "initialDelaySeconds": 20, "periodSeconds": 5, "failureThreshold": 10}}]}}}])
}

/// KubeRay (raycluster_controller.go `reconcileMultiHostWorkerGroup`, v1.7.0) deletes a
/// multi-host replica that lost a pod whole, and creates a new one named
/// `<group>-<5 random chars>` (`GenerateRayWorkerReplicaGroupName`) at the lowest free index.
/// Two replicas of one RayCluster's worker group, each packed on one node of its own domain, a
/// budget over the hosts 0 that tolerates both down (so only the health check holds the next
/// domain), a spare node. Draining ud-0 evicts replica A; the health check recognises A's
/// recreation on the spare node under a new name by its workload's Ready replicas back at two,
/// and only then does ud-1 start: replica B is evicted after the new replica's both pods are
/// Ready. (By replica name the gate would wait for A's name forever.)
#[tokio::test(start_paused = true)]
async fn a_kuberay_replica_recreated_under_a_new_name_counts_as_ready_again_for_the_next_domain() {
    use raygate::types::ray::RayCluster;
    use raygate_sim::world::kuberay::pods::{
        HOST_INDEX_LABEL as KUBERAY_HOST_INDEX, REPLICA_NAME_LABEL as KUBERAY_REPLICA_NAME,
    };
    let crds = raygate_testing::upstream::dir().join("upstream-crds");
    let sim = Sim::builder()
        .crds_yaml(&std::fs::read_to_string(crds.join("ray.io_rayclusters.yaml")).unwrap())
        .unwrap()
        .namespace(NS)
        .build();
    let client = sim.client();
    let _actors = gang_world(&sim)
        .kuberay(raygate_sim::world::kuberay::EmulatorConfig {
            namespace: Some(NS.into()),
            pods: true,
            ..Default::default()
        })
        .start();
    let nodes: Api<Node> = Api::all(client.clone());
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), NS);
    nodes
        .create(&PostParams::default(), &node("head", "ud-head", 0, "infra"))
        .await
        .unwrap();
    let rc: RayCluster = serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": NS},
        "spec": {"rayVersion": "2.52.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0",
                    "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}}]}}},
            "workerGroupSpecs": gpu_group(0)}
    }))
    .unwrap();
    clusters.create(&PostParams::default(), &rc).await.unwrap();
    let workers = |ps: Vec<Pod>| -> Vec<Pod> {
        ps.into_iter()
            .filter(|p| p.labels().contains_key(KUBERAY_REPLICA_NAME))
            .collect()
    };
    // one replica per domain: a node, then one more replica onto it
    for (i, replicas) in [(0, 1), (1, 2)] {
        nodes
            .create(
                &PostParams::default(),
                &node(&format!("node-{i}"), &format!("ud-{i}"), 2, "old"),
            )
            .await
            .unwrap();
        clusters
            .patch(
                "rc",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"workerGroupSpecs": gpu_group(replicas)}})),
            )
            .await
            .unwrap();
        eventually("the replicas Ready", || async {
            let ws = workers(pods(&client).await);
            (ws.len() == 2 * replicas as usize && ws.iter().all(is_ready)).then_some(())
        })
        .await;
    }
    nodes
        .create(&PostParams::default(), &node("spare", "ud-spare", 4, "new"))
        .await
        .unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "gpu-hosts-0", "namespace": NS},
        "spec": {"minAvailable": 0, "selector": {"matchLabels": {KUBERAY_HOST_INDEX: "0"}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    let placed = workers(pods(&client).await);
    let replica_on = |node: &str| {
        placed
            .iter()
            .find(|p| node_of(p) == node)
            .map(|p| p.labels()[KUBERAY_REPLICA_NAME].clone())
            .unwrap()
    };
    let (a, b) = (replica_on("node-0"), replica_on("node-1"));
    let b_host0 = placed
        .iter()
        .find(|p| p.labels()[KUBERAY_REPLICA_NAME] == b && p.labels()[KUBERAY_HOST_INDEX] == "0")
        .map(|p| p.name_any())
        .unwrap();
    let original: Vec<String> = pods(&client).await.iter().map(|p| p.name_any()).collect();
    let history = record(&sim);
    let o = Options {
        plan: PlanOptions {
            domain_label: UD.into(),
            node_selector: format!("{POOL}=old"),
            // both presets' labels, as a NodeRollout's default `groups: {}` reads them
            groups: GroupLabels::of_labels(&[lws::GROUP_KEY, KUBERAY_REPLICA_NAME]),
            ..PlanOptions::default()
        },
        health_check_stable: Some(SignedDuration::from_secs(5)),
        health_check_retry_timeout: SignedDuration::from_secs(600),
        disruption_controller_lag: SignedDuration::try_from(LAG).unwrap(),
        ..Options::default()
    };
    let end = start(&sim, o).finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    assert_eq!(
        end.domains[0].workloads["serving/ray.io/cluster=rc,ray.io/group=gpu"].ready_groups,
        2
    );
    let now = workers(pods(&client).await);
    let names: std::collections::BTreeSet<String> = now
        .iter()
        .map(|p| p.labels()[KUBERAY_REPLICA_NAME].clone())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        !names.contains(&a) && !names.contains(&b),
        "new names: {names:?}"
    );
    assert!(now.iter().all(|p| node_of(p) == "spare" && is_ready(p)));
    // ud-1 started only once A's recreation was whole and Ready
    let h = history.lock().unwrap().clone();
    let b_evicted = h
        .iter()
        .find(|e| e.1 == b_host0 && e.3 == Seen::Evicted)
        .expect("B's host 0 evicted")
        .0;
    let ready_before: std::collections::BTreeSet<&str> = h
        .iter()
        .filter(|e| e.3 == Seen::Ready && e.0 < b_evicted && !original.contains(&e.1))
        .map(|e| e.1.as_str())
        .collect();
    eprintln!(
        "replica {a} evicted; new pods Ready before {b_host0}'s eviction at {b_evicted}: {ready_before:?}"
    );
    assert_eq!(
        ready_before.len(),
        2,
        "both pods of A's recreation Ready before B is evicted"
    );
}
