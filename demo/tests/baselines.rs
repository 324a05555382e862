//! The drain baselines against raygate's executor on one cluster shape and seed, judged from the
//! cluster's own history: 2 upgrade domains × 2 nodes (4 GPUs each), four LeaderWorkerSet groups
//! (a leader and a worker, one GPU each, the leader Ready only while its group is, the worker
//! packed into its leader's domain), two per domain, and a budget over the leaders that tolerates
//! two groups down (`minAvailable: 2`). Every strategy upgrades every node to generation 1
//! (drain, reboot through the sim's node lifecycle, uncordon). On the paused clock.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use raygate_demo::baselines::{self, Outcome, Strategy, Upgrade};
use raygate_demo::history::{History, Kind};
use raygate_demo::invariants::{self, Window};
use raygate_demo::recorder::Recorder;
use raygate_sim::Sim;
use raygate_sim::world::Running;
use raygate_sim::world::actors::{lws, node_lifecycle};
use raygate_sim::world::fixtures::{self, LAG, NS, UD, eventually, is_ready, lws_api, lws_object};
use raygate_testing::core::{self, PdbExt, int};
use serde_json::json;

const OUTDATED: &str = "raygate.io/outdated";

fn sim() -> Sim {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    fixtures::builder().seed(7).build()
}

/// The gang world's actors, and the node lifecycle (reboots) every strategy's hand-off uses.
fn actors(sim: &Sim) -> Running {
    fixtures::gang_world(sim)
        .node_lifecycle(node_lifecycle::Config::default())
        .start()
}

/// A node of 4 GPUs in domain `ud`.
fn node(name: &str, ud: &str) -> Node {
    fixtures::node(name, ud, 4, "old")
}

async fn all_ready(client: &Client, pods: usize) {
    eventually("every group Ready", || async {
        let ps = Api::<Pod>::namespaced(client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        (ps.len() == pods && ps.iter().all(is_ready)).then_some(())
    })
    .await;
}

async fn cordon(client: &Client, name: &str, on: bool) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": on}})),
        )
        .await
        .unwrap();
}

/// Two groups in each domain, then the budget over the leaders.
async fn layout(client: &Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    for n in ["n-0-0", "n-0-1"] {
        nodes
            .create(&PostParams::default(), &node(n, "ud-0"))
            .await
            .unwrap();
    }
    let o: DynamicObject = serde_json::from_value(lws_object(2)).unwrap();
    lws_api(client)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
    all_ready(client, 4).await;
    // the next two groups in ud-1: ud-0 cordoned meanwhile
    for n in ["n-0-0", "n-0-1"] {
        cordon(client, n, true).await;
    }
    for n in ["n-1-0", "n-1-1"] {
        nodes
            .create(&PostParams::default(), &node(n, "ud-1"))
            .await
            .unwrap();
    }
    lws_api(client)
        .patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    all_ready(client, 8).await;
    for n in ["n-0-0", "n-0-1"] {
        cordon(client, n, false).await;
    }
    let pdb = core::pdb(&format!("{NS}/leaders"), &[("role", "leader")]).min_available(int(2));
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), NS);
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    eventually("the budget computed", || async {
        let s = pdbs.get("leaders").await.unwrap().status?;
        (s.current_healthy == Some(4) && s.disruptions_allowed == Some(2)).then_some(())
    })
    .await;
}

/// What a strategy did to the cluster, from its history.
struct Measured {
    outcome: Outcome,
    history: History,
    window: Window,
    disruptions: usize,
    disrupted_twice: usize,
    group_seconds_below_floor: f64,
    below_floor: Vec<invariants::Violation>,
    not_at_target: Vec<invariants::Violation>,
}

async fn measure(strategy: Strategy) -> Measured {
    let wall = std::time::Instant::now();
    let sim = sim();
    let client = sim.client();
    let _actors = actors(&sim);
    layout(&client).await;
    let mut upgrade = Upgrade {
        domain_label: UD.into(),
        seed: 7,
        group_label: Some(lws::GROUP_KEY.into()),
        disruption_controller_lag: LAG,
        ..Upgrade::default()
    };
    if strategy == Strategy::Raygate {
        // the operator marks the old generation NoSchedule when the new one is announced, so
        // evicted groups wait for upgraded nodes instead of landing on nodes drained next;
        // raygate removes the taint when it uncordons an upgraded node
        let taint: k8s_openapi::api::core::v1::Taint =
            serde_json::from_value(json!({"key": OUTDATED, "effect": "NoSchedule"})).unwrap();
        for n in ["n-0-0", "n-0-1", "n-1-0", "n-1-1"] {
            Api::<Node>::all(client.clone())
                .patch(
                    n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"taints": [taint]}})),
                )
                .await
                .unwrap();
        }
        upgrade.taint = Some(taint);
    }
    let recorder = Recorder::start(&sim, &Kind::CORE).unwrap();
    // the cluster as it was before the rollout gets an instant of its own in the history
    tokio::time::sleep(Duration::from_secs(10)).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(6 * 3600),
        baselines::run(&client, sim.clock(), &strategy, &upgrade),
    )
    .await
    .expect("the rollout ends")
    .unwrap_or_else(|e| panic!("{}: {e}", strategy.name()));
    // the groups settle after the last node is back
    tokio::time::sleep(Duration::from_secs(120)).await;
    let history = recorder.history();
    let window = Window {
        from: outcome.started,
        to: outcome.finished,
    };
    let by_group = invariants::group_disruptions(&history, lws::GROUP_KEY, window);
    let by_group_log = by_group.clone();
    let measured = Measured {
        disruptions: by_group.values().map(Vec::len).sum(),
        disrupted_twice: by_group.values().filter(|t| t.len() > 1).count(),
        group_seconds_below_floor: invariants::seconds_below_pdb_floor(&history),
        below_floor: invariants::never_below_pdb_floor(&history, Some(lws::GROUP_KEY)),
        not_at_target: invariants::every_node_at_target(&history, node_lifecycle::GENERATION, "1"),
        outcome,
        history,
        window,
    };
    eprintln!(
        "{:<32} rollout {:>6.0} s  evictions {:>2}  429s {:>2}  disruptions {:>2}  disrupted twice {}  group-seconds below floor {:>6.0}  changes {}  wall {:.1} s",
        measured.outcome.strategy,
        measured.outcome.took().as_secs_f64(),
        measured.outcome.evictions,
        measured.outcome.refusals,
        measured.disruptions,
        measured.disrupted_twice,
        measured.group_seconds_below_floor,
        measured.history.changes.len(),
        wall.elapsed().as_secs_f64(),
    );
    for v in &measured.below_floor {
        eprintln!("  {v}");
    }
    eprintln!("  window {} – {}", window.from, window.to);
    if std::env::var("DUMP").is_ok() {
        for c in &measured.history.changes {
            match &c.state {
                Some(raygate_demo::history::State::Pod(p)) => eprintln!(
                    "    {} {} node={:?} ready={} deleting={} phase={}",
                    c.at, c.key.name, p.node, p.ready, p.deleting, p.phase
                ),
                None => eprintln!("    {} {} gone", c.at, c.key),
                _ => {}
            }
        }
    }
    for (g, times) in &by_group_log {
        eprintln!("  group {g}: disrupted at {times:?}");
    }
    measured
}

/// raygate: protected pods first, the health check between domains, old nodes tainted: no group
/// below the floor, no group disrupted twice, every node at generation 1.
#[tokio::test(start_paused = true)]
async fn raygate_keeps_every_group_above_the_floor_and_disrupts_each_once() {
    let m = measure(Strategy::Raygate).await;
    assert!(m.not_at_target.is_empty(), "{:?}", m.not_at_target);
    assert!(m.below_floor.is_empty(), "{:?}", m.below_floor);
    assert_eq!(m.group_seconds_below_floor, 0.0);
    assert_eq!(m.disrupted_twice, 0);
    assert_eq!(m.disruptions, 4, "each group moved once");
    assert!(m.window.from < m.window.to);
}

/// UD by UD without protected-first and without a health check: the second domain is evicted
/// while groups are still coming back, and workers (which no budget protects) take their groups
/// down with them: available groups fall below the floor, and the checker says so.
#[tokio::test(start_paused = true)]
async fn a_naive_domain_by_domain_drain_takes_groups_below_the_floor() {
    let m = measure(Strategy::DomainByDomain).await;
    assert!(m.not_at_target.is_empty(), "{:?}", m.not_at_target);
    assert!(
        !m.below_floor.is_empty(),
        "the checker flags the naive drain"
    );
    assert!(m.group_seconds_below_floor > 0.0);
    assert!(
        m.below_floor
            .iter()
            .all(|v| v.objects == vec![format!("PodDisruptionBudget {NS}/leaders")])
    );
}

/// `kubectl drain` node by node: PDB-respecting for the leaders, but a worker's eviction takes
/// its group down unseen, and a group moved to a node drained later is disrupted again.
#[tokio::test(start_paused = true)]
async fn kubectl_drain_node_by_node_disrupts_groups_again_and_again() {
    let m = measure(Strategy::NodeByNode).await;
    assert!(m.not_at_target.is_empty(), "{:?}", m.not_at_target);
    assert!(
        m.disrupted_twice > 0 || !m.below_floor.is_empty(),
        "the checker flags node-by-node drains"
    );
}

/// Random concurrent drains of two nodes.
#[tokio::test(start_paused = true)]
async fn random_concurrent_drains_break_the_floor() {
    let m = measure(Strategy::RandomConcurrent { k: 2 }).await;
    assert!(m.not_at_target.is_empty(), "{:?}", m.not_at_target);
    assert!(
        m.disrupted_twice > 0 || !m.below_floor.is_empty(),
        "the checker flags random drains"
    );
}
