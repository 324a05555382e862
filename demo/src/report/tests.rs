use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use raygate::quantity::{Quantity, Resources};

use super::*;
use crate::history::{ClusterQueueState, Key, Kind, NodeState, PdbState, PodState, State};

const UD: &str = "topology.raygate.io/upgrade-domain";

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + s).unwrap()
}

fn leader(group: &str, node: &str, ready: bool, deleting: bool) -> State {
    let mut requests = Resources::new();
    requests.set("nvidia.com/gpu", Quantity::from_units(1));
    State::Pod(PodState {
        labels: BTreeMap::from([
            ("role".into(), "leader".into()),
            (LWS_GROUP_KEY.into(), group.into()),
            ("kueue.x-k8s.io/queue-name".into(), "lq".into()),
        ]),
        node: Some(node.into()),
        phase: "Running".into(),
        ready,
        deleting,
        requests,
        ..PodState::default()
    })
}

fn node(domain: &str, unschedulable: bool) -> State {
    State::Node(NodeState {
        labels: BTreeMap::from([(UD.to_string(), domain.to_string())]),
        unschedulable,
        ready: true,
        taints: vec![],
    })
}

/// Two domains, a group in each, a budget of 1 over the leaders, a queue of 2 GPUs; the rollout
/// (10 s – 40 s) cordons ud-0 (10 s), evicts its group (12 s), upgrades it (14 s), uncordons it
/// (20 s) and its group is back at 25 s; then the same in ud-1, from 26 s, or from 20 s when
/// `overlap` (no group up from 20 s to 25 s: 1 group below the floor for 5 s).
fn run(name: &str, overlap: bool) -> Run {
    let mut h = History::new();
    let pod = |n: &str| Key::new(Kind::Pod, "ns", n);
    let nk = |n: &str| Key::new(Kind::Node, "", n);
    h.record(t(0), nk("n0"), Some(node("ud-0", false)));
    h.record(t(0), nk("n1"), Some(node("ud-1", false)));
    h.record(t(0), pod("g0"), Some(leader("g0", "n0", true, false)));
    h.record(t(0), pod("g1"), Some(leader("g1", "n1", true, false)));
    h.record(
        t(0),
        Key::new(Kind::PodDisruptionBudget, "ns", "leaders"),
        Some(State::Pdb(PdbState {
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("role".into(), "leader".into())])),
                ..LabelSelector::default()
            }),
            min_available: Some(IntOrString::Int(1)),
            ..PdbState::default()
        })),
    );
    let mut gpus = Resources::new();
    gpus.set("nvidia.com/gpu", Quantity::from_units(2));
    h.record(
        t(0),
        Key::new(Kind::ClusterQueue, "", "team"),
        Some(State::ClusterQueue(ClusterQueueState {
            nominal: gpus,
            ..ClusterQueueState::default()
        })),
    );
    h.record(
        t(0),
        Key::new(Kind::LocalQueue, "ns", "lq"),
        Some(State::LocalQueue(crate::history::LocalQueueState {
            cluster_queue: "team".into(),
        })),
    );
    h.record(t(10), nk("n0"), Some(node("ud-0", true)));
    h.record(t(12), pod("g0"), Some(leader("g0", "n0", true, true)));
    h.record(t(14), pod("g0"), None);
    h.record(t(20), nk("n0"), Some(node("ud-0", false)));
    if overlap {
        h.record(t(20), nk("n1"), Some(node("ud-1", true)));
        h.record(t(20), pod("g1"), Some(leader("g1", "n1", true, true)));
    }
    h.record(t(21), pod("g0"), Some(leader("g0", "n0", false, false)));
    h.record(t(25), pod("g0"), Some(leader("g0", "n0", true, false)));
    if !overlap {
        h.record(t(26), nk("n1"), Some(node("ud-1", true)));
        h.record(t(26), pod("g1"), Some(leader("g1", "n1", true, true)));
    }
    h.record(t(30), pod("g1"), Some(leader("g1", "n1", false, false)));
    h.record(t(35), nk("n1"), Some(node("ud-1", false)));
    h.record(t(40), pod("g1"), Some(leader("g1", "n1", true, false)));
    // one more GPU than the quota for 10 s
    h.record(t(45), pod("extra"), Some(leader("x", "n1", true, false)));
    h.record(t(55), pod("extra"), None);
    let mut r = Run::new(name, h);
    r.outcomes.push(Outcome {
        strategy: name.into(),
        started: t(10),
        finished: t(40),
        evictions: 2,
        refusals: 1,
    });
    r
}

#[test]
fn metrics_read_the_history_and_the_rollouts_account() {
    let m = metrics(&run("raygate", false), Some(LWS_GROUP_KEY));
    assert_eq!(m.rollout_seconds, Some(30.0));
    assert_eq!((m.evictions, m.refusals), (2, 1));
    assert_eq!((m.disruptions, m.disrupted_twice), (Some(2), Some(0)));
    assert_eq!(m.group_seconds_below_floor, Some(0.0));
    // 3 GPUs on a quota of 2
    assert_eq!(m.peak_quota_overrun, Some(0.5));
    // no bound known: no ratio
    assert_eq!(
        (m.lower_bound_seconds, m.ratio_to_lower_bound()),
        (None, None)
    );

    // both groups down from 20 s (g1 evicted) to 25 s (g0 back): 1 group-second × 5
    let m = metrics(&run("UD by UD", true), Some(LWS_GROUP_KEY));
    assert_eq!(m.group_seconds_below_floor, Some(5.0));
    assert_eq!(m.disruptions, Some(2));
    // no group label, or no pod with it: disruptions not counted
    assert_eq!(metrics(&run("x", true), None).disruptions, None);
    assert_eq!(
        metrics(&run("x", true), Some("no-such-label")).disruptions,
        None
    );
}

#[test]
fn what_a_history_does_not_hold_is_not_measured() {
    let mut h = History::new();
    h.record(
        t(0),
        Key::new(Kind::Pod, "ns", "p"),
        Some(leader("g", "n0", true, false)),
    );
    let m = metrics(&Run::new("no budget, no queue", h), Some(LWS_GROUP_KEY));
    assert_eq!(m.group_seconds_below_floor, None);
    assert_eq!(m.peak_quota_overrun, None);
    assert_eq!(m.rollout_seconds, None);
    assert_eq!(m.disruptions, Some(0));
}

#[test]
fn a_run_without_a_rollout_is_charted_from_its_first_change() {
    let mut r = run("story", false);
    r.outcomes.clear();
    assert_eq!(r.rollout(), None);
    assert_eq!(r.t0(), Some(t(0)));
    assert_eq!(metrics(&r, Some(LWS_GROUP_KEY)).rollout_seconds, None);
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// The text of `<section id="{id}" …>…</section>`.
fn section_of<'a>(page: &'a str, id: &str) -> &'a str {
    let from = page.find(&format!(r#"<section id="{id}""#)).unwrap();
    let to = from + page[from..].find("</section>").unwrap();
    &page[from..to]
}

#[test]
fn the_page_is_self_contained_with_every_chart() {
    let input = Input::new(
        "raygate <demo> & co",
        vec![
            run("raygate", false),
            run("UD by UD, no protected-first", true),
        ],
    );
    let page = html(&input);
    assert!(page.starts_with("<!DOCTYPE html>"));
    for forbidden in [
        "<script", "src=", "href=", "url(", "@import", "<link", "<img",
    ] {
        assert!(
            !page.contains(forbidden),
            "the page fetches nothing: {forbidden}"
        );
    }
    assert!(page.contains("<title>raygate &lt;demo&gt; &amp; co</title>"));
    for id in ["summary", "availability", "quota", "gantt", "comparison"] {
        assert_eq!(count(&page, &format!(r#"<section id="{id}""#)), 1, "{id}");
    }
    // one budget chart, one queue chart, a Gantt per run, four bar charts
    assert_eq!(count(&page, "<svg"), 1 + 1 + 2 + 4);
    assert!(!page.contains("chart not drawn"));
    let lower = page.to_lowercase();
    for colour in [
        charts::run_colour(0),
        charts::run_colour(1),
        charts::FLOOR,
        charts::QUOTA,
    ] {
        assert!(
            lower.contains(&charts::hex(colour)),
            "{}",
            charts::hex(colour)
        );
    }
    let gantt = section_of(&lower, "gantt");
    for p in Phase::ALL {
        let c = charts::hex(charts::phase_colour(p));
        assert!(
            gantt.contains(&format!(r#"fill="{c}""#)),
            "a {p:?} bar: {c}"
        );
    }
    // the summary flags the baseline's time below the floor and the overrun of both
    assert!(page.contains(r#"<span class="bad">5</span>"#));
    assert_eq!(count(&page, r#"<span class="bad">50%</span>"#), 2);
    // both runs' floor and quota are the same constant: one line each, not one per run
    assert!(
        !page.contains("floor (raygate)") && !page.contains("quota (raygate)"),
        "one floor, one quota"
    );
}

#[test]
fn an_empty_report_says_what_is_missing() {
    let page = html(&Input::new(
        "nothing",
        vec![Run::new("raygate", History::new())],
    ));
    assert!(page.contains("No PodDisruptionBudget in these histories."));
    assert!(page.contains("No ClusterQueue in these histories."));
    assert!(page.contains("No rollout in these runs."));
    assert!(!page.contains("chart not drawn"));
}

#[test]
fn the_violations_are_listed_escaped() {
    let mut r = run("raygate", false);
    r.violations.push(Violation {
        invariant: invariants::Invariant::BelowPdbFloor,
        from: t(20),
        until: Some(t(25)),
        objects: vec!["PodDisruptionBudget ns/leaders".into()],
        message: "0 healthy, floor 1 <bad>".into(),
    });
    let page = html(&Input::new("x", vec![r]));
    assert!(page.contains("raygate: 1 invariant violations"));
    assert!(page.contains("floor 1 &lt;bad&gt;"));
}

#[test]
fn write_puts_the_page_in_the_file_and_names_the_file_when_it_cannot() {
    let input = Input::new("x", vec![run("raygate", false)]);
    let dir = std::env::temp_dir().join(format!("raygate-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.html");
    write(&path, &input).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), html(&input));
    std::fs::remove_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-dir/report.html");
    let e = write(&missing, &input).unwrap_err();
    assert!(e.to_string().contains("no-such-dir/report.html"), "{e}");
}

/// A rollout of 30 s against a lower bound of 20 s: 1.50, in the metrics and the summary table.
#[test]
fn the_summary_shows_the_lower_bound_and_the_rollout_s_ratio_to_it() {
    let mut r = run("raygate", false);
    r.lower_bound = Some(std::time::Duration::from_secs(20));
    let m = metrics(&r, Some(LWS_GROUP_KEY));
    assert_eq!(m.lower_bound_seconds, Some(20.0));
    assert_eq!(m.ratio_to_lower_bound(), Some(1.5));
    let page = html(&Input::new("bound", vec![r]));
    assert!(
        page.contains("<th>lower bound</th><th>ratio</th>"),
        "{page}"
    );
    assert!(
        page.contains("<td>30 s</td><td>20 s</td><td>1.50</td>"),
        "{page}"
    );
    // a bound but no rollout: neither shown
    let mut r = run("story", false);
    r.outcomes.clear();
    r.lower_bound = Some(std::time::Duration::from_secs(20));
    let m = metrics(&r, Some(LWS_GROUP_KEY));
    assert_eq!(
        (m.lower_bound_seconds, m.ratio_to_lower_bound()),
        (None, None)
    );
}
