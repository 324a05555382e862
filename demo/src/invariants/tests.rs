//! Each invariant on a hand-built history that breaks it and on one that keeps it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use raygate::quantity::{Quantity, Resources};

use super::*;
use crate::history::{
    ClusterQueueState, History, Key, Kind, LocalQueueState, NodeState, PdbState, PodState,
    RayClusterState, RayServiceState, State, WorkloadState,
};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + s).unwrap()
}

fn gpus(n: i64) -> Resources {
    let mut r = Resources::new();
    r.set("nvidia.com/gpu", Quantity::from_units(n));
    r
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ray_pod(cluster: &str, ready: bool) -> State {
    State::Pod(PodState {
        uid: "u".into(),
        labels: labels(&[(RAY_CLUSTER_LABEL, cluster)]),
        node: Some("n1".into()),
        phase: "Running".into(),
        ready,
        requests: gpus(4),
        ..Default::default()
    })
}

/// A RayService `svc` (queue `lq` → ClusterQueue `team`, 8 GPUs) with child `svc-a`.
fn serving(h: &mut History, nominal: i64) {
    h.record(
        t(0),
        Key::new(Kind::ClusterQueue, "", "team"),
        Some(State::ClusterQueue(ClusterQueueState {
            nominal: gpus(nominal),
            ..Default::default()
        })),
    );
    h.record(
        t(0),
        Key::new(Kind::LocalQueue, "ns", "lq"),
        Some(State::LocalQueue(LocalQueueState {
            cluster_queue: "team".into(),
        })),
    );
    h.record(
        t(0),
        Key::new(Kind::RayService, "ns", "svc"),
        Some(State::RayService(RayServiceState {
            queue: Some("lq".into()),
            active: None,
        })),
    );
    for child in ["svc-a", "svc-b"] {
        h.record(
            t(0),
            Key::new(Kind::RayCluster, "ns", child),
            Some(State::RayCluster(RayClusterState {
                labels: labels(&[(ORIGINATED_FROM_NAME, "svc")]),
                suspended: false,
            })),
        );
    }
}

fn slice(h: &mut History, at: i64, name: &str, pods: i64, admitted: bool, finished: bool) {
    h.record(
        t(at),
        Key::new(Kind::Workload, "ns", name),
        Some(State::Workload(WorkloadState {
            rayservice: Some("svc".into()),
            admitted,
            finished,
            cluster_queue: Some("team".into()),
            pods,
        })),
    );
}

fn put(h: &mut History, at: i64, kind: Kind, name: &str, state: Option<State>) {
    h.record(t(at), Key::new(kind, "ns", name), state);
}

#[test]
fn quota_exceeded_by_running_pods_is_flagged_with_its_interval() {
    let mut h = History::new();
    serving(&mut h, 8);
    put(&mut h, 1, Kind::Pod, "a-1", Some(ray_pod("svc-a", true)));
    put(&mut h, 2, Kind::Pod, "a-2", Some(ray_pod("svc-a", true)));
    assert!(
        quota_never_exceeded(&h).is_empty(),
        "8 of 8 GPUs is within quota"
    );
    // a third 4-GPU pod of the upgrade's child starts: 12 > 8
    put(&mut h, 10, Kind::Pod, "b-1", Some(ray_pod("svc-b", false)));
    // ... and a terminating pod still holds its GPUs until it is gone
    let State::Pod(mut going) = ray_pod("svc-a", true) else {
        unreachable!()
    };
    going.deleting = true;
    put(&mut h, 20, Kind::Pod, "a-1", Some(State::Pod(going)));
    put(&mut h, 30, Kind::Pod, "a-1", None);
    let v = quota_never_exceeded(&h);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].from, v[0].until), (t(10), Some(t(30))));
    assert_eq!(v[0].objects[0], "ClusterQueue/team");
    assert!(
        v[0].message.contains("request 12, quota 8"),
        "{}",
        v[0].message
    );
}

#[test]
fn borrowing_within_the_cohort_limit_is_not_a_violation() {
    let mut h = History::new();
    serving(&mut h, 8);
    h.record(
        t(0),
        Key::new(Kind::ClusterQueue, "", "team"),
        Some(State::ClusterQueue(ClusterQueueState {
            cohort: Some("all".into()),
            nominal: gpus(8),
            borrowing_limit: gpus(4),
            ..Default::default()
        })),
    );
    for (i, p) in ["a-1", "a-2", "b-1"].iter().enumerate() {
        put(&mut h, i as i64, Kind::Pod, p, Some(ray_pod("svc-a", true)));
    }
    assert!(quota_never_exceeded(&h).is_empty());
    put(&mut h, 5, Kind::Pod, "b-2", Some(ray_pod("svc-b", true)));
    assert_eq!(quota_never_exceeded(&h).len(), 1, "16 > 8 + 4");
}

#[test]
fn a_child_running_without_an_admitted_slice_is_flagged() {
    let mut clean = History::new();
    serving(&mut clean, 8);
    slice(&mut clean, 1, "svc-1", 2, true, false);
    put(
        &mut clean,
        2,
        Kind::Pod,
        "a-1",
        Some(ray_pod("svc-a", true)),
    );
    put(
        &mut clean,
        2,
        Kind::Pod,
        "a-2",
        Some(ray_pod("svc-a", true)),
    );
    // an upgrade: the replacement slice admitted and the old one finished in one instant
    slice(&mut clean, 5, "svc-2", 4, true, false);
    slice(&mut clean, 5, "svc-1", 2, true, true);
    put(
        &mut clean,
        6,
        Kind::Pod,
        "b-1",
        Some(ray_pod("svc-b", true)),
    );
    put(
        &mut clean,
        6,
        Kind::Pod,
        "b-2",
        Some(ray_pod("svc-b", true)),
    );
    assert!(no_child_ran_uncovered(&clean).is_empty());

    let mut bad = History::new();
    serving(&mut bad, 8);
    put(&mut bad, 2, Kind::Pod, "a-1", Some(ray_pod("svc-a", true)));
    slice(&mut bad, 4, "svc-1", 2, true, false);
    put(&mut bad, 6, Kind::Pod, "b-1", Some(ray_pod("svc-b", true)));
    put(&mut bad, 6, Kind::Pod, "b-2", Some(ray_pod("svc-b", true)));
    let v = no_child_ran_uncovered(&bad);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!((v[0].from, v[0].until), (t(2), Some(t(4))));
    assert!(v[0].message.contains("1 pods ran with no admitted slice"));
    assert_eq!((v[1].from, v[1].until), (t(6), None));
    assert!(
        v[1].message
            .contains("3 pods ran, the admitted slice covers 2")
    );
    assert!(
        v[1].objects
            .contains(&"RayCluster ns/svc-b (2 pods)".to_string())
    );
}

fn member(group: &str, size: usize, ready: bool, deleting: bool, leader: bool) -> State {
    let mut l = labels(&[("group", group)]);
    if leader {
        l.insert("role".into(), "leader".into());
    }
    State::Pod(PodState {
        uid: "u".into(),
        labels: l,
        node: Some("n".into()),
        phase: "Running".into(),
        ready,
        deleting,
        group_size: Some(size),
        ..Default::default()
    })
}

/// Groups (a leader `g-0` and a worker `g-1`) come up at 0; each goes down (its worker
/// deleted) and up again (a new worker Ready 5 s later) at each of its `downs`.
fn group_history(h: &mut History, groups: &[(&str, &[i64])]) {
    for (g, _) in groups {
        put(
            h,
            0,
            Kind::Pod,
            &format!("{g}-0"),
            Some(member(g, 2, true, false, true)),
        );
        put(
            h,
            0,
            Kind::Pod,
            &format!("{g}-1"),
            Some(member(g, 2, true, false, false)),
        );
    }
    let mut events: Vec<(i64, &str, Option<State>)> = vec![];
    for (g, downs) in groups {
        for &d in *downs {
            events.push((d, g, Some(member(g, 2, false, true, false))));
            events.push((d + 1, g, None));
            events.push((d + 5, g, Some(member(g, 2, true, false, false))));
        }
    }
    events.sort_by_key(|e| e.0);
    for (at, g, state) in events {
        put(h, at, Kind::Pod, &format!("{g}-1"), state);
    }
}

#[test]
fn a_group_disrupted_twice_in_the_rollout_is_flagged_once_is_not() {
    let mut h = History::new();
    group_history(&mut h, &[("a", &[100]), ("b", &[100, 200])]);
    let window = Window {
        from: t(50),
        to: t(500),
    };
    let d = group_disruptions(&h, "group", window);
    assert_eq!(d["ns/a"], vec![t(100)]);
    assert_eq!(d["ns/b"], vec![t(100), t(200)]);
    let v = no_group_disrupted_more_than_once(&h, "group", window);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].objects, vec!["group ns/b"]);
    assert_eq!(v[0].from, t(200));
    // outside the window the first disruption does not count
    let late = Window {
        from: t(150),
        to: t(500),
    };
    assert!(no_group_disrupted_more_than_once(&h, "group", late).is_empty());
}

fn leaders_pdb(min: Option<IntOrString>, max: Option<IntOrString>) -> State {
    State::Pdb(PdbState {
        selector: Some(LabelSelector {
            match_labels: Some(labels(&[("role", "leader")])),
            ..Default::default()
        }),
        min_available: min,
        max_unavailable: max,
        expected_pods: None,
        disruptions_allowed: None,
    })
}

#[test]
fn the_floor_is_computed_as_the_disruption_controller_does() {
    let pdb = |min, max, expected| PdbState {
        min_available: min,
        max_unavailable: max,
        expected_pods: expected,
        ..Default::default()
    };
    let int = IntOrString::Int;
    let pct = |s: &str| IntOrString::String(s.into());
    assert_eq!(pdb_floor(&pdb(Some(int(3)), None, Some(10)), 4), Some(3));
    // 50% of 5 rounds up to 3
    assert_eq!(pdb_floor(&pdb(Some(pct("50%")), None, Some(5)), 4), Some(3));
    // maxUnavailable 1 of 4 expected
    assert_eq!(pdb_floor(&pdb(None, Some(int(1)), Some(4)), 2), Some(3));
    // maxUnavailable 30% of 4: 2 (rounded up) may be unavailable
    assert_eq!(pdb_floor(&pdb(None, Some(pct("30%")), None), 4), Some(2));
    assert_eq!(pdb_floor(&pdb(None, None, None), 4), None);
}

#[test]
fn groups_below_the_budget_s_floor_are_flagged_and_counted_in_group_seconds() {
    let mut h = History::new();
    put(
        &mut h,
        0,
        Kind::PodDisruptionBudget,
        "leaders",
        Some(leaders_pdb(Some(IntOrString::Int(2)), None)),
    );
    // starting up below the floor is not a violation: the budget was never met yet
    put(
        &mut h,
        0,
        Kind::Pod,
        "a-0",
        Some(member("a", 1, false, false, true)),
    );
    put(
        &mut h,
        0,
        Kind::Pod,
        "b-0",
        Some(member("b", 1, false, false, true)),
    );
    put(
        &mut h,
        0,
        Kind::Pod,
        "c-0",
        Some(member("c", 1, false, false, true)),
    );
    for (i, g) in ["a", "b", "c"].iter().enumerate() {
        put(
            &mut h,
            10 + i as i64,
            Kind::Pod,
            &format!("{g}-0"),
            Some(member(g, 1, true, false, true)),
        );
    }
    // one group down: at the floor, fine
    put(
        &mut h,
        100,
        Kind::Pod,
        "a-0",
        Some(member("a", 1, false, true, true)),
    );
    assert!(never_below_pdb_floor(&h, None).is_empty());
    assert_eq!(seconds_below_pdb_floor(&h), 0.0);
    // two down for 30 s: one group below the floor
    put(
        &mut h,
        110,
        Kind::Pod,
        "b-0",
        Some(member("b", 1, false, false, true)),
    );
    put(
        &mut h,
        140,
        Kind::Pod,
        "b-0",
        Some(member("b", 1, true, false, true)),
    );
    put(
        &mut h,
        150,
        Kind::Pod,
        "a-0",
        Some(member("a", 1, true, false, true)),
    );
    let v = never_below_pdb_floor(&h, None);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].from, v[0].until), (t(110), Some(t(140))));
    assert_eq!(v[0].message, "1 healthy, floor 2");
    assert_eq!(v[0].objects, vec!["PodDisruptionBudget ns/leaders"]);
    assert_eq!(seconds_below_pdb_floor(&h), 30.0);
}

#[test]
fn selectors_match_as_the_api_does() {
    let l = labels(&[("role", "leader"), ("tier", "gpu")]);
    let sel = |expr: serde_json::Value| -> LabelSelector { serde_json::from_value(expr).unwrap() };
    assert!(selector_matches(&sel(serde_json::json!({})), &l));
    assert!(selector_matches(
        &sel(
            serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]})
        ),
        &l
    ));
    assert!(!selector_matches(
        &sel(
            serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]})
        ),
        &l
    ));
    assert!(selector_matches(
        &sel(serde_json::json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]})),
        &l
    ));
    assert!(!selector_matches(
        &sel(serde_json::json!({"matchLabels": {"role": "worker"}})),
        &l
    ));
}

#[test]
fn a_slice_left_admitted_after_its_service_is_gone_is_leaked() {
    let mut clean = History::new();
    serving(&mut clean, 8);
    slice(&mut clean, 1, "svc-1", 2, true, false);
    slice(&mut clean, 5, "svc-2", 4, true, false);
    slice(&mut clean, 5, "svc-1", 2, true, true);
    assert!(no_slice_leaked(&clean).is_empty());

    // two admitted slices at the end
    let mut two = History::new();
    serving(&mut two, 8);
    slice(&mut two, 1, "svc-1", 2, true, false);
    slice(&mut two, 5, "svc-2", 4, true, false);
    let v = no_slice_leaked(&two);
    assert_eq!(v.len(), 1);
    assert!(
        v[0].message.contains("holds 2 admitted slices"),
        "{}",
        v[0].message
    );

    // the service deleted, its slice still admitted
    let mut gone = clean.clone();
    put(&mut gone, 9, Kind::RayService, "svc", None);
    let v = no_slice_leaked(&gone);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].objects, vec!["Workload ns/svc-2"]);
    assert_eq!(v[0].from, t(9));
}

#[test]
fn a_node_left_at_the_old_generation_is_flagged() {
    let node = |generation: &str| {
        Some(State::Node(NodeState {
            labels: labels(&[("gen", generation)]),
            ready: true,
            ..Default::default()
        }))
    };
    let mut h = History::new();
    h.record(t(0), Key::new(Kind::Node, "", "n1"), node("0"));
    h.record(t(0), Key::new(Kind::Node, "", "n2"), node("0"));
    h.record(t(100), Key::new(Kind::Node, "", "n1"), node("1"));
    let v = every_node_at_target(&h, "gen", "1");
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].objects, vec!["Node/n2"]);
    assert_eq!(v[0].message, "gen=0 at the end, target 1");
    h.record(t(200), Key::new(Kind::Node, "", "n2"), node("1"));
    assert!(every_node_at_target(&h, "gen", "1").is_empty());
}

#[test]
fn check_all_runs_every_invariant() {
    let mut h = History::new();
    serving(&mut h, 8);
    put(&mut h, 2, Kind::Pod, "a-1", Some(ray_pod("svc-a", true)));
    h.record(
        t(3),
        Key::new(Kind::Node, "", "n1"),
        Some(State::Node(NodeState::default())),
    );
    let v = check_all(
        &h,
        &Expect {
            group_label: Some("group".into()),
            rollout: None,
            generation: Some(("gen".into(), "1".into())),
        },
    );
    let kinds: Vec<Invariant> = v.iter().map(|v| v.invariant).collect();
    assert_eq!(
        kinds,
        vec![Invariant::RanUncovered, Invariant::NodeNotAtTarget]
    );
}

/// Issue #14 item 3: the overrun measured from the history, as the quota invariant sees it:
/// the peak excess (and the requests and quota at it) and the cluster seconds over quota.
#[test]
fn the_quota_overrun_is_measured_peak_and_duration() {
    let mut h = History::new();
    serving(&mut h, 8);
    put(&mut h, 1, Kind::Pod, "a-1", Some(ray_pod("svc-a", true)));
    put(&mut h, 2, Kind::Pod, "a-2", Some(ray_pod("svc-a", true)));
    assert!(quota_overrun(&h).is_empty(), "8 of 8 GPUs: no overrun");
    put(&mut h, 10, Kind::Pod, "b-1", Some(ray_pod("svc-b", false)));
    put(&mut h, 15, Kind::Pod, "b-2", Some(ray_pod("svc-b", false)));
    put(&mut h, 25, Kind::Pod, "a-1", None);
    put(&mut h, 40, Kind::Pod, "a-2", None);
    let o = quota_overrun(&h);
    let team = &o["team/nvidia.com/gpu"];
    // 12 from 10 s, 16 from 15 s, 12 from 25 s, 8 (within) from 40 s
    assert_eq!(team.peak, gpus(8).get("nvidia.com/gpu"));
    assert_eq!(team.requested, gpus(16).get("nvidia.com/gpu"));
    assert_eq!(team.quota, gpus(8).get("nvidia.com/gpu"));
    assert_eq!(team.seconds, 30.0);
    assert_eq!(o.len(), 1);
}

#[test]
fn a_member_failing_its_probe_is_an_outage_not_a_disruption_until_a_member_is_removed() {
    let mut h = History::new();
    group_history(&mut h, &[("a", &[])]);
    // the worker fails its readiness probe for 50 s: down, nothing removed
    put(
        &mut h,
        100,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, false, false, false)),
    );
    put(
        &mut h,
        150,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, true, false, false)),
    );
    // down again, then its leader evicted in that same spell: one disruption, when removed
    put(
        &mut h,
        200,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, false, false, false)),
    );
    put(
        &mut h,
        210,
        Kind::Pod,
        "a-0",
        Some(member("a", 2, true, true, true)),
    );
    put(
        &mut h,
        211,
        Kind::Pod,
        "a-0",
        Some(member("a", 2, true, false, true)),
    );
    put(
        &mut h,
        212,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, true, false, false)),
    );
    // its worker deleted later: a second disruption
    put(
        &mut h,
        300,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, true, true, false)),
    );
    put(&mut h, 301, Kind::Pod, "a-1", None);
    put(
        &mut h,
        305,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, true, false, false)),
    );
    let window = Window {
        from: t(50),
        to: t(500),
    };
    assert_eq!(
        group_disruptions(&h, "group", window)["ns/a"],
        vec![t(210), t(300)]
    );
}

#[test]
fn a_failed_node_s_pods_deleted_are_not_a_disruption() {
    let mut h = History::new();
    group_history(&mut h, &[("a", &[])]);
    let node = |ready: bool| {
        Some(State::Node(NodeState {
            ready,
            ..Default::default()
        }))
    };
    h.record(t(0), Key::new(Kind::Node, "", "n"), node(true));
    h.record(t(100), Key::new(Kind::Node, "", "n"), node(false));
    put(
        &mut h,
        140,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, false, false, false)),
    );
    // the taint manager deletes the pods on the down node
    put(
        &mut h,
        400,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, false, true, false)),
    );
    put(&mut h, 401, Kind::Pod, "a-1", None);
    h.record(t(500), Key::new(Kind::Node, "", "n"), node(true));
    put(
        &mut h,
        510,
        Kind::Pod,
        "a-1",
        Some(member("a", 2, true, false, false)),
    );
    let window = Window {
        from: t(50),
        to: t(900),
    };
    assert!(group_disruptions(&h, "group", window).is_empty());
}

/// Changes to record: (at, pod name, state).
type Changes = Vec<(i64, String, Option<State>)>;

/// Records `changes` in time order (a history's cluster time only moves forward).
fn play(h: &mut History, mut changes: Changes) {
    changes.sort_by_key(|c| c.0);
    for (at, name, state) in changes {
        put(h, at, Kind::Pod, &name, state);
    }
}

/// The worker of a group fails its probe while its leader (the representative) stays Ready,
/// its probe lagging.
fn worker_fails(g: &str, at: i64, back: i64) -> Changes {
    let worker = format!("{g}-1");
    vec![
        (at, worker.clone(), Some(member(g, 2, false, false, false))),
        (back, worker, Some(member(g, 2, true, false, false))),
    ]
}

/// A group's leader evicted at `at`, back Ready at `back`.
fn leader_evicted(g: &str, at: i64, back: i64) -> Changes {
    let leader = format!("{g}-0");
    vec![
        (at, leader.clone(), Some(member(g, 2, false, true, true))),
        (at + 1, leader.clone(), None),
        (back, leader, Some(member(g, 2, true, false, true))),
    ]
}

/// Three groups of two (a, b, c) under a budget of 2 on their leaders, then `changes`.
fn three_groups(changes: &[Changes]) -> History {
    let mut h = History::new();
    put(
        &mut h,
        0,
        Kind::PodDisruptionBudget,
        "leaders",
        Some(leaders_pdb(Some(IntOrString::Int(2)), None)),
    );
    group_history(&mut h, &["a", "b", "c"].map(|g| (g, &[][..])));
    play(&mut h, changes.concat());
    h
}

/// Issue #29 item 9: the leaders (representatives) stay Ready while their workers are not
/// (their probe lags): the budget's own count keeps the floor, the members' count does not.
#[test]
fn groups_counted_from_their_members_fall_below_the_floor_where_the_budget_s_count_does_not() {
    // a's worker fails; its leader stays Ready, so the budget still counts 3 and allows one
    // eviction: c's leader goes at 110 with a visibly down
    let mut changes = vec![worker_fails("a", 100, 130), leader_evicted("c", 110, 170)];
    let h = three_groups(&changes);
    assert!(never_below_pdb_floor(&h, Some("group")).is_empty());
    let v = never_below_group_floor(&h, "group");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].from, v[0].until), (t(110), Some(t(130))));
    assert_eq!(v[0].invariant, Invariant::BelowGroupFloor);
    assert_eq!(v[0].objects, vec!["PodDisruptionBudget ns/leaders"]);
    assert_eq!(
        v[0].message,
        "1 group(s) available counted from their members, floor 2"
    );
    assert_eq!(seconds_below_group_floor(&h, "group"), 20.0);
    // a group whose pods are all gone still counts as down; b failing in the same instant is
    // not a failure after it
    changes.push(vec![(200, "a-0".into(), None), (200, "a-1".into(), None)]);
    changes.push(worker_fails("b", 200, 220));
    let h = three_groups(&changes);
    assert_eq!(seconds_below_group_floor(&h, "group"), 40.0);
}

/// A budget cannot stop a failure that comes after the evictions it allowed: a group failing
/// after the latest ongoing disruption is not the drain's, whichever count is read.
#[test]
fn a_failure_after_the_budget_s_evictions_is_not_counted_against_the_drain() {
    let leader_lags = vec![
        (140, "a-0".into(), Some(member("a", 2, false, false, true))),
        (150, "a-0".into(), Some(member("a", 2, true, false, true))),
    ];
    let mut changes = vec![
        leader_evicted("c", 100, 170),
        worker_fails("a", 110, 150),
        leader_lags,
    ];
    let h = three_groups(&changes);
    assert!(never_below_group_floor(&h, "group").is_empty());
    assert_eq!(seconds_below_group_floor(&h, "group"), 0.0);
    assert!(never_below_pdb_floor(&h, Some("group")).is_empty());
    // without group labels the budget's count cannot tell whose the drop is
    let v = never_below_pdb_floor(&h, None);
    assert_eq!((v[0].from, v[0].until), (t(140), Some(t(150))), "{v:?}");
    // an eviction made while that failure is in view is the drain's again
    changes.push(leader_evicted("b", 120, 200));
    let h = three_groups(&changes);
    let v = never_below_group_floor(&h, "group");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].from, v[0].until), (t(120), Some(t(170))));
    assert_eq!(
        v[0].message,
        "0 group(s) available counted from their members, floor 2"
    );
    let v = never_below_pdb_floor(&h, Some("group"));
    assert_eq!((v[0].from, v[0].until), (t(120), Some(t(170))), "{v:?}");
}

/// Failures alone, with nothing disrupted, are outages no drain caused.
#[test]
fn failures_with_nothing_disrupted_are_not_below_the_drain_s_floor() {
    let mut changes = vec![worker_fails("a", 100, 130), worker_fails("b", 105, 140)];
    let h = three_groups(&changes);
    assert!(never_below_group_floor(&h, "group").is_empty());
    assert_eq!(seconds_below_group_floor(&h, "group"), 0.0);
    // a disruption while they are down is the drain's
    changes.push(leader_evicted("c", 120, 200));
    let h = three_groups(&changes);
    let v = never_below_group_floor(&h, "group");
    assert_eq!((v[0].from, v[0].until), (t(120), Some(t(140))), "{v:?}");
}
