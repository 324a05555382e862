use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use raygate::quantity::Resources;

use super::*;
use crate::history::{LocalQueueState, NodeState, PdbState, RayClusterState};

const UD: &str = "topology.raygate.io/upgrade-domain";

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + s).unwrap()
}

fn cpu(n: i64) -> Resources {
    let mut r = Resources::new();
    r.set("cpu", Quantity::from_units(n));
    r
}

fn pod(labels: &[(&str, &str)], node: Option<&str>, ready: bool) -> State {
    State::Pod(PodState {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        node: node.map(String::from),
        phase: if node.is_some() { "Running" } else { "Pending" }.into(),
        ready,
        requests: cpu(1),
        ..PodState::default()
    })
}

fn leader(node: &str, ready: bool) -> State {
    pod(&[("role", "leader")], Some(node), ready)
}

fn deleting(mut s: State) -> State {
    if let State::Pod(p) = &mut s {
        p.deleting = true;
    }
    s
}

fn node(domain: &str, unschedulable: bool, ready: bool) -> State {
    State::Node(NodeState {
        labels: BTreeMap::from([(UD.to_string(), domain.to_string())]),
        unschedulable,
        ready,
        taints: vec![],
    })
}

fn pk(name: &str) -> Key {
    Key::new(Kind::Pod, "ns", name)
}

fn nk(name: &str) -> Key {
    Key::new(Kind::Node, "", name)
}

fn leaders_budget(min_available: IntOrString) -> State {
    State::Pdb(PdbState {
        selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("role".into(), "leader".into())])),
            ..LabelSelector::default()
        }),
        min_available: Some(min_available),
        ..PdbState::default()
    })
}

#[test]
fn a_budget_series_counts_the_healthy_pods_it_selects_against_its_floor() {
    let mut h = History::new();
    for i in 0..4 {
        h.record(t(0), pk(&format!("l{i}")), Some(leader("n", true)));
    }
    // a worker is not selected: its readiness does not count
    h.record(
        t(0),
        pk("w0"),
        Some(pod(&[("role", "worker")], Some("n"), true)),
    );
    h.record(
        t(0),
        Key::new(Kind::PodDisruptionBudget, "ns", "leaders"),
        Some(leaders_budget(IntOrString::Int(2))),
    );
    h.record(t(10), pk("l0"), Some(leader("n", false)));
    h.record(
        t(12),
        pk("w0"),
        Some(pod(&[("role", "worker")], Some("n"), false)),
    );
    h.record(t(20), pk("l1"), Some(deleting(leader("n", true))));
    h.record(t(20), pk("l2"), Some(deleting(leader("n", true))));
    h.record(t(30), pk("l0"), Some(leader("n", true)));
    h.record(t(30), pk("l1"), Some(leader("n", true)));
    h.record(t(30), pk("l2"), Some(leader("n", true)));
    h.record(
        t(45),
        pk("w0"),
        Some(pod(&[("role", "worker")], Some("n"), true)),
    );

    let b = budgets(&h, t(10));
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].budget, "ns/leaders");
    // seconds since t0 = t(10); the worker's changes at 12 s and 45 s move nothing but the end
    assert_eq!(
        b[0].healthy,
        vec![
            (-10.0, 4.0),
            (0.0, 3.0),
            (10.0, 1.0),
            (20.0, 4.0),
            (35.0, 4.0)
        ]
    );
    assert_eq!(b[0].floor, vec![(-10.0, 2.0), (35.0, 2.0)]);
}

#[test]
fn a_budget_as_a_percentage_scales_its_floor_with_the_pods_it_selects() {
    let mut h = History::new();
    h.record(t(0), pk("l0"), Some(leader("n", true)));
    h.record(
        t(0),
        Key::new(Kind::PodDisruptionBudget, "ns", "leaders"),
        Some(leaders_budget(IntOrString::String("50%".into()))),
    );
    h.record(t(5), pk("l1"), Some(leader("n", true)));
    h.record(t(6), pk("l2"), Some(leader("n", true)));
    let b = budgets(&h, t(0));
    // ⌈50% × 1⌉ = 1, ⌈50% × 2⌉ = 1, ⌈50% × 3⌉ = 2
    assert_eq!(b[0].floor, vec![(0.0, 1.0), (6.0, 2.0)]);
    assert_eq!(b[0].healthy, vec![(0.0, 1.0), (5.0, 2.0), (6.0, 3.0)]);
}

fn queue(nominal: i64, cohort: Option<&str>, unlimited: bool) -> State {
    State::ClusterQueue(ClusterQueueState {
        cohort: cohort.map(String::from),
        nominal: cpu(nominal),
        borrowing_limit: if unlimited { Resources::new() } else { cpu(1) },
        unlimited_borrowing: if unlimited {
            vec!["cpu".into()]
        } else {
            vec![]
        },
        usage: Resources::new(),
    })
}

fn queued(node: Option<&str>) -> State {
    pod(&[("kueue.x-k8s.io/queue-name", "lq")], node, true)
}

fn queue_history(cq: State, raised: Option<State>) -> History {
    let mut h = History::new();
    h.record(t(0), Key::new(Kind::ClusterQueue, "", "team"), Some(cq));
    h.record(
        t(0),
        Key::new(Kind::LocalQueue, "ns", "lq"),
        Some(State::LocalQueue(LocalQueueState {
            cluster_queue: "team".into(),
        })),
    );
    h.record(t(0), pk("a"), Some(queued(Some("n"))));
    h.record(t(0), pk("b"), Some(queued(Some("n"))));
    // pending: holds nothing yet
    h.record(t(5), pk("c"), Some(queued(None)));
    h.record(t(10), pk("c"), Some(queued(Some("n"))));
    h.record(t(20), pk("d"), Some(queued(Some("n"))));
    if let Some(cq) = raised {
        h.record(t(25), Key::new(Kind::ClusterQueue, "", "team"), Some(cq));
    }
    h.record(t(30), pk("a"), None);
    h
}

#[test]
fn queue_usage_is_the_running_pods_requests_against_the_quota() {
    let h = queue_history(queue(3, None, false), None);
    let q = queues(&h, t(0));
    assert_eq!(q.len(), 1);
    assert_eq!(
        (q[0].queue.as_str(), q[0].resource.as_str()),
        ("team", "cpu")
    );
    assert_eq!(
        q[0].used,
        vec![(0.0, 2.0), (10.0, 3.0), (20.0, 4.0), (30.0, 3.0)]
    );
    assert_eq!(q[0].limit, vec![(0.0, Some(3.0)), (30.0, Some(3.0))]);
    // 4 CPUs on a quota of 3
    assert!(
        (q[0].peak_overrun - 1.0 / 3.0).abs() < 1e-9,
        "{}",
        q[0].peak_overrun
    );
}

#[test]
fn a_queue_in_a_cohort_may_use_its_borrowing_limit() {
    // nominal 3 + borrowing limit 1: 4 CPUs are within
    let q = queues(&queue_history(queue(3, Some("all"), false), None), t(0));
    assert_eq!(q[0].limit[0], (0.0, Some(4.0)));
    assert_eq!(q[0].peak_overrun, 0.0);
    // no borrowing limit: nothing to overrun
    let q = queues(&queue_history(queue(3, Some("all"), true), None), t(0));
    assert_eq!(q[0].limit[0], (0.0, None));
    assert_eq!(q[0].peak_overrun, 0.0);
}

#[test]
fn a_raised_quota_is_a_step_of_the_limit() {
    let h = queue_history(queue(3, None, false), Some(queue(4, None, false)));
    let q = queues(&h, t(0));
    assert_eq!(
        q[0].limit,
        vec![(0.0, Some(3.0)), (25.0, Some(4.0)), (30.0, Some(4.0))]
    );
}

/// ud-0 with node n0 and pod a, ud-1 with node n1 and pod b.
fn two_domains() -> History {
    let mut h = History::new();
    h.record(t(0), nk("n0"), Some(node("ud-0", false, true)));
    h.record(t(0), nk("n1"), Some(node("ud-1", false, true)));
    h.record(t(0), pk("a"), Some(leader("n0", true)));
    h.record(t(0), pk("b"), Some(leader("n1", true)));
    h
}

fn span(phase: Phase, from: f64, to: f64) -> Span {
    Span { phase, from, to }
}

#[test]
fn a_domain_goes_cordoned_evicting_upgrading_recovering() {
    let mut h = two_domains();
    // before the rollout: a layout cordon the Gantt does not show
    h.record(t(1), nk("n1"), Some(node("ud-1", true, true)));
    h.record(t(2), nk("n1"), Some(node("ud-1", false, true)));
    h.record(t(5), nk("n0"), Some(node("ud-0", true, true)));
    h.record(t(10), pk("a"), Some(deleting(leader("n0", true))));
    h.record(t(15), pk("a"), None);
    // the replacement waits: it is Pending while n0 reboots
    h.record(
        t(16),
        pk("a"),
        Some(pod(&[("role", "leader")], None, false)),
    );
    h.record(t(20), nk("n0"), Some(node("ud-0", true, false)));
    h.record(t(35), nk("n0"), Some(node("ud-0", true, true)));
    h.record(t(40), nk("n0"), Some(node("ud-0", false, true)));
    h.record(t(42), pk("a"), Some(leader("n0", false)));
    h.record(t(50), pk("a"), Some(leader("n0", true)));
    h.record(t(60), pk("b"), Some(leader("n1", true)));

    let rows = domain_phases(&h, UD, t(0), t(3));
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].domain, "ud-0");
    assert_eq!(
        rows[0].spans,
        vec![
            span(Phase::Cordoned, 5.0, 10.0),
            span(Phase::Evicting, 10.0, 15.0),
            span(Phase::Upgrading, 15.0, 40.0),
            span(Phase::Recovering, 40.0, 50.0),
        ]
    );
    assert_eq!(rows[1].domain, "ud-1");
    assert!(rows[1].spans.is_empty(), "{:?}", rows[1].spans);
}

#[test]
fn a_replacement_under_a_new_name_ends_the_recovery() {
    let mut h = two_domains();
    h.record(t(5), nk("n0"), Some(node("ud-0", true, true)));
    h.record(t(5), pk("a"), Some(deleting(leader("n0", true))));
    h.record(t(6), pk("a"), None);
    h.record(t(8), nk("n0"), Some(node("ud-0", false, true)));
    h.record(t(9), pk("a-2"), Some(leader("n0", false)));
    h.record(t(12), pk("a-2"), Some(leader("n0", true)));
    let rows = domain_phases(&h, UD, t(0), t(0));
    assert_eq!(
        rows[0].spans,
        vec![
            span(Phase::Evicting, 5.0, 6.0),
            span(Phase::Upgrading, 6.0, 8.0),
            span(Phase::Recovering, 8.0, 12.0),
        ]
    );
}

#[test]
fn a_domain_still_recovering_at_the_end_keeps_its_bar_to_the_end() {
    let mut h = two_domains();
    h.record(t(5), nk("n1"), Some(node("ud-1", true, true)));
    h.record(t(6), pk("b"), Some(deleting(leader("n1", true))));
    h.record(t(7), pk("b"), None);
    h.record(t(9), nk("n1"), Some(node("ud-1", false, true)));
    h.record(t(30), pk("b"), Some(leader("n1", false)));
    let rows = domain_phases(&h, UD, t(5), t(0));
    assert_eq!(
        rows[1].spans,
        vec![
            span(Phase::Cordoned, 0.0, 1.0),
            span(Phase::Evicting, 1.0, 2.0),
            span(Phase::Upgrading, 2.0, 4.0),
            span(Phase::Recovering, 4.0, 25.0),
        ]
    );
    assert!(rows[0].spans.is_empty());
}

fn cluster(suspended: bool) -> Option<State> {
    Some(State::RayCluster(RayClusterState {
        labels: BTreeMap::new(),
        suspended,
    }))
}

#[test]
fn a_held_cluster_is_an_interval_from_suspended_to_released_or_gone_or_the_end() {
    let mut h = History::new();
    let rc = |n: &str| Key::new(Kind::RayCluster, "ns", n);
    h.record(t(0), rc("old"), cluster(true));
    h.record(t(5), rc("old"), cluster(false));
    h.record(t(120), rc("new"), cluster(true));
    h.record(t(130), rc("gone"), cluster(true));
    h.record(t(140), rc("gone"), None);
    h.record(t(480), rc("new"), cluster(false));
    h.record(t(490), rc("last"), cluster(true));
    h.record(t(500), rc("old"), None);
    let spans: Vec<(String, f64, f64)> = held(&h, t(0))
        .into_iter()
        .map(|s| (s.cluster, s.from, s.to))
        .collect();
    assert_eq!(
        spans,
        vec![
            ("ns/old".into(), 0.0, 5.0),
            ("ns/new".into(), 120.0, 480.0),
            ("ns/gone".into(), 130.0, 140.0),
            ("ns/last".into(), 490.0, 500.0),
        ]
    );
}
