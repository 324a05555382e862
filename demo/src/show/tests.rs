use k8s_openapi::jiff::{SignedDuration, Timestamp};
use raygate::types::rollout::{DomainStatus, NodeRolloutStatus};

use super::*;
use crate::history::{
    Change, History, Key, Kind, NodeState, PodState, RayClusterState, State, WorkloadState,
};
use crate::invariants::{self, Invariant};
use crate::scenario::Report;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + s).unwrap()
}

fn change(at: i64, kind: Kind, ns: &str, name: &str, state: Option<State>) -> Change {
    Change {
        at: t(at),
        key: Key::new(kind, ns, name),
        state,
    }
}

fn rc(suspended: bool) -> Option<State> {
    Some(State::RayCluster(RayClusterState {
        labels: Default::default(),
        suspended,
    }))
}

#[test]
fn clock_reads_like_a_stopwatch() {
    assert_eq!(clock(SignedDuration::from_secs(7)), "7s");
    assert_eq!(clock(SignedDuration::from_secs(723)), "12m03s");
    assert_eq!(clock(SignedDuration::from_secs(3723)), "1h02m03s");
}

#[test]
fn a_note_naming_an_act_opens_it_and_every_later_line_carries_it() {
    let mut n = Narrator::new(t(0));
    let setup = n.step(t(0), None, "apply x");
    assert_eq!(setup[0].act, 0);
    let lines = n.step(t(180), Some("Act 2: a rollout"), "start a rollout");
    assert_eq!(n.act(), 2);
    assert!(lines[0].milestone && lines[0].text.contains("Act 2: a rollout"));
    assert!(lines.iter().all(|l| l.act == 2));
    let again = n.step(t(200), Some("quota is freed"), "raise");
    assert_eq!(n.act(), 2, "a note without an act keeps the act");
    assert_eq!(
        render(t(0), &again[0]),
        "[   3m20s] act 2 | == quota is freed"
    );
}

#[test]
fn a_child_born_suspended_is_held_then_released_then_deleted() {
    let mut n = Narrator::new(t(0));
    let held = n.change(&change(10, Kind::RayCluster, "s", "c2", rc(true)));
    assert!(held[0].milestone && held[0].text.contains("held by raygate"));
    assert!(
        n.change(&change(20, Kind::RayCluster, "s", "c2", rc(true)))
            .is_empty(),
        "no news, no line"
    );
    let released = n.change(&change(300, Kind::RayCluster, "s", "c2", rc(false)));
    assert!(released[0].text.contains("c2 released"));
    let gone = n.change(&change(400, Kind::RayCluster, "s", "c2", None));
    assert!(gone[0].text.contains("s/c2 deleted"));
}

#[test]
fn an_admitted_slice_and_an_eviction_name_the_queue_and_the_domain() {
    let mut n = Narrator::new(t(0));
    let w = |admitted| {
        Some(State::Workload(WorkloadState {
            rayservice: Some("llm".into()),
            admitted,
            finished: false,
            cluster_queue: Some("team".into()),
            pods: 3,
        }))
    };
    let created = n.change(&change(1, Kind::Workload, "s", "llm-2", w(false)));
    assert!(created[0].text.contains("waiting for quota"), "{created:?}");
    let admitted = n.change(&change(2, Kind::Workload, "s", "llm-2", w(true)));
    assert!(admitted[0].text.contains("admitted by ClusterQueue team"));
    let node = NodeState {
        labels: [(
            "topology.raygate.io/upgrade-domain".to_string(),
            "ud-1".to_string(),
        )]
        .into(),
        ready: true,
        ..Default::default()
    };
    n.change(&change(
        3,
        Kind::Node,
        "",
        "ud1-n0",
        Some(State::Node(node)),
    ));
    let pod = |evicted| {
        Some(State::Pod(PodState {
            node: Some("ud1-n0".into()),
            evicted,
            ..Default::default()
        }))
    };
    n.change(&change(4, Kind::Pod, "inf", "chat-0", pod(false)));
    let evicted = n.change(&change(5, Kind::Pod, "inf", "chat-0", pod(true)));
    assert_eq!(
        evicted[0].text,
        "pod inf/chat-0 evicted from node ud1-n0 (domain ud-1)"
    );
}

#[test]
fn a_rollout_s_domains_say_when_they_start_finish_and_what_they_wait_for() {
    let mut n = Narrator::new(t(0));
    let domain = |phase: &str, blocked: Option<&str>| DomainStatus {
        name: "ud-0".into(),
        phase: phase.into(),
        nodes: vec!["ud0-n0".into()],
        blocked_by: blocked.map(String::from),
        protected_evicted: 2,
        other_evicted: 3,
        ..Default::default()
    };
    let status = |phase: &str, d: DomainStatus| NodeRolloutStatus {
        phase: Some(phase.into()),
        progress: Some("0/4".into()),
        domains: vec![d],
        ..Default::default()
    };
    let first = n.rollout(t(1), "gen", &status("Running", domain("Draining", None)));
    let texts: Vec<&str> = first.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        texts,
        vec![
            "NodeRollout gen: Running 0/4",
            "NodeRollout gen: domain ud-0 Draining (nodes ud0-n0)"
        ]
    );
    let waits = n.rollout(
        t(2),
        "gen",
        &status(
            "Running",
            domain("Draining", Some("PDB inf/leaders needs 6")),
        ),
    );
    assert_eq!(waits.len(), 1);
    assert!(waits[0].text.ends_with("waits: PDB inf/leaders needs 6"));
    assert!(!waits[0].milestone);
    let done = n.rollout(t(3), "gen", &status("Running", domain("Done", None)));
    assert_eq!(
        done[0].text,
        "NodeRollout gen: domain ud-0 Done: evicted 2 protected and 3 other pods"
    );
    assert!(done[0].milestone);
}

#[test]
fn the_same_event_is_shown_once() {
    let mut n = Narrator::new(t(0));
    assert_eq!(
        n.event(t(1), "RayCluster s/c2", "Warning", "Held", "no quota")
            .len(),
        1
    );
    assert!(
        n.event(t(2), "RayCluster s/c2", "Warning", "Held", "no quota")
            .is_empty()
    );
    let other = n.event(t(3), "RayCluster s/c2", "Normal", "Released", "covered");
    assert_eq!(other[0].text, "Event Released on RayCluster s/c2: covered");
}

#[test]
fn holds_measure_each_suspended_child_until_its_release() {
    let mut h = History::new();
    h.record(t(0), Key::new(Kind::RayCluster, "s", "c1"), rc(true));
    h.record(t(0), Key::new(Kind::RayCluster, "s", "c1"), rc(false));
    h.record(t(60), Key::new(Kind::RayCluster, "s", "c2"), rc(true));
    h.record(t(360), Key::new(Kind::RayCluster, "s", "c2"), rc(false));
    let got = holds(&h);
    assert_eq!(
        got,
        vec![(
            "s/c2".to_string(),
            SignedDuration::from_secs(300),
            Some(t(360))
        )]
    );
}

/// A run with one rollout and a bound of 2 domains × (evict 1 s + hand-off 120 s + recovery 6 s).
fn rollout_report(o: crate::baselines::Outcome, violations: Vec<invariants::Violation>) -> Report {
    Report {
        name: "known".into(),
        started: t(0),
        ended: t(900),
        history: History::new(),
        violations,
        expected: vec![],
        rollouts: vec![Ok(o)],
        lower_bound: Some(crate::bound::LowerBound {
            domains: 2,
            evict: std::time::Duration::from_secs(1),
            handoff: std::time::Duration::from_secs(120),
            recovery: std::time::Duration::from_secs(6),
            recovers_elsewhere: false,
        }),
        failures: vec![],
    }
}

/// A rollout of 381 s over 2 domains of (evict 1 s + hand-off 120 s + recovery 6 s): the bound
/// is 254 s and the ratio 1.50, in the summary table and in the JSON.
#[test]
fn the_summary_shows_the_rollout_s_lower_bound_and_its_ratio_to_it() {
    let report = rollout_report(
        crate::baselines::Outcome {
            strategy: "raygate".into(),
            started: t(100),
            finished: t(481),
            evictions: 4,
            refusals: 0,
        },
        vec![],
    );
    let text = summary(&report, &[], std::time::Duration::from_secs(1), &[]);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("raygate"))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..4], ["raygate", "6m21s", "4m14s", "1.50"], "{text}");
    assert!(
        text.contains(
            "lower bound: 2 domains × (evict 1 s + hand-off 120 s + recovery 6 s) = 254 s"
        ),
        "{text}"
    );
    let json = report_json(&report, std::time::Duration::from_secs(1));
    assert_eq!(json["lowerBound"]["seconds"], 254);
    assert_eq!(json["lowerBound"]["recoverySeconds"], 6);
    assert_eq!(json["rollouts"][0]["ratioToLowerBound"], 1.5);
    // no rollout, no bound
    let upgrade = Report {
        rollouts: vec![],
        lower_bound: None,
        ..report
    };
    assert!(report_json(&upgrade, Default::default())["lowerBound"].is_null());
}

/// raygate's row first, then each baseline's: its rollout time and ratio, the invariants it
/// broke (each named once, however many violations), and a baseline that could not run says so.
#[test]
fn the_comparison_puts_each_baseline_beside_raygate_with_what_it_broke() {
    let outcome = |strategy: &str, took: i64| crate::baselines::Outcome {
        strategy: strategy.into(),
        started: t(100),
        finished: t(100 + took),
        evictions: 4,
        refusals: 0,
    };
    let raygate = rollout_report(outcome("raygate", 381), vec![]);
    let twice = |group: &str| crate::invariants::Violation {
        invariant: Invariant::GroupDisruptedTwice,
        from: t(200),
        until: None,
        objects: vec![group.into()],
        message: "disrupted twice".into(),
    };
    let node_by_node = rollout_report(outcome("node by node", 762), vec![twice("g0"), twice("g1")]);
    let baselines = vec![
        ("kubectl drain node by node".to_string(), Ok(node_by_node)),
        ("UD by UD".to_string(), Err("no runtime".to_string())),
    ];
    let text = against_baselines(&raygate, &baselines);
    let rows: Vec<&str> = text.lines().skip(3).collect();
    let cells = |i: usize| rows[i].split_whitespace().collect::<Vec<_>>();
    assert_eq!(cells(0)[..3], ["raygate", "6m21s", "1.50"], "{text}");
    assert_eq!(cells(0).last(), Some(&"none"), "{text}");
    assert!(
        rows[1].starts_with("  kubectl drain node by node"),
        "{text}"
    );
    assert!(
        rows[1].contains("12m42s") && rows[1].contains(" 3.00 "),
        "{text}"
    );
    assert!(rows[1].ends_with(" GroupDisruptedTwice"), "{text}");
    assert!(rows[2].contains("UD by UD") && rows[2].ends_with("could not run: no runtime"));
    // the summary carries the table only when baselines ran
    let with = summary(&raygate, &[], std::time::Duration::from_secs(1), &baselines);
    assert!(with.contains("RAYGATE AGAINST THE BASELINES"));
    let without = summary(&raygate, &[], std::time::Duration::from_secs(1), &[]);
    assert!(!without.contains("RAYGATE AGAINST THE BASELINES"));
}
