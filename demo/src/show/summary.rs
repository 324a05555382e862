//! The end of a run (pure): the timeline of milestones, the summary table, raygate beside its
//! baselines, and the same as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use raygate::quantity::Resources;
use raygate_sim::world::actors::lws;
use serde_json::{Value, json};

use super::live::{Line, clock, render};
use crate::history::{History, Kind, State};
use crate::invariants::{self, Invariant, Window};
use crate::scenario::{BaselineRun, Report};

/// The invariants in the order of [`Invariant`], with what each promises.
pub const INVARIANTS: [(Invariant, &str); 8] = [
    (
        Invariant::QuotaExceeded,
        "ClusterQueue quota never exceeded by running pods",
    ),
    (
        Invariant::RanUncovered,
        "no child RayCluster ever ran uncovered by a slice",
    ),
    (
        Invariant::GroupDisruptedTwice,
        "no group disrupted more than once per rollout",
    ),
    (
        Invariant::BelowPdbFloor,
        "available groups never below a PDB's floor",
    ),
    (
        Invariant::BelowGroupFloor,
        "member-counted groups never below a PDB's floor",
    ),
    (
        Invariant::StoppedServing,
        "no serving RayService ever stopped serving",
    ),
    (
        Invariant::SliceLeaked,
        "no slice leaked after the story ends",
    ),
    (
        Invariant::NodeNotAtTarget,
        "every node at the target generation at the end",
    ),
];

/// How long each RayCluster stayed suspended after it was created suspended (held), and when it
/// was released: (name, held for, released at).
pub fn holds(h: &History) -> Vec<(String, SignedDuration, Option<Timestamp>)> {
    let mut since: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut out = vec![];
    for c in &h.changes {
        if c.key.kind != Kind::RayCluster {
            continue;
        }
        let name = format!("{}/{}", c.key.namespace, c.key.name);
        match &c.state {
            Some(State::RayCluster(rc)) if rc.suspended => {
                since.entry(name).or_insert(c.at);
            }
            Some(State::RayCluster(_)) | None => {
                // a child released in the instant it was created was never held
                if let Some(from) = since.remove(&name)
                    && c.at > from
                {
                    out.push((name, c.at.duration_since(from), Some(c.at)));
                }
            }
            _ => {}
        }
    }
    if let Some((_, end)) = h.span() {
        for (name, from) in since {
            out.push((name, end.duration_since(from), None));
        }
    }
    out
}

/// Per ClusterQueue and resource: the peak of what running pods charged to it requested, and
/// the nominal quota at that moment.
pub fn quota_peaks(h: &History) -> BTreeMap<(String, String), (Resources, Resources)> {
    let mut out: BTreeMap<(String, String), (Resources, Resources)> = BTreeMap::new();
    let mut replay = h.replay();
    while let Some((_, states)) = replay.step() {
        let mut used: BTreeMap<String, Resources> = BTreeMap::new();
        for (k, s) in states {
            if let State::Pod(p) = s
                && p.holds_resources()
                && let Some(cq) = invariants::queue_of_pod(states, k, p)
            {
                used.entry(cq).or_default().add(&p.requests);
            }
        }
        for (k, s) in states {
            let State::ClusterQueue(q) = s else { continue };
            let u = used.remove(&k.name).unwrap_or_default();
            for (resource, nominal) in q.nominal.iter() {
                let have = u.get(resource);
                let e = out
                    .entry((k.name.clone(), resource.to_string()))
                    .or_default();
                if e.0.is_empty() || have.nanos() > e.0.get(resource).nanos() {
                    let mut a = Resources::new();
                    a.set(resource, have);
                    let mut b = Resources::new();
                    b.set(resource, *nominal);
                    *e = (a, b);
                }
            }
        }
    }
    out
}

/// A rollout's effect on the groups in its window: (disruptions, groups disrupted twice).
fn group_effect(h: &History, o: &crate::baselines::Outcome) -> (usize, usize) {
    let window = Window {
        from: o.started,
        to: o.finished,
    };
    let by_group = invariants::group_disruptions(h, lws::GROUP_KEY, window);
    (
        by_group.values().map(Vec::len).sum(),
        by_group.values().filter(|t| t.len() > 1).count(),
    )
}

/// A rollout's lower bound and its time's ratio to it, as the table shows them ("—": no bound).
fn bound_and_ratio(report: &Report, o: &crate::baselines::Outcome) -> (String, String) {
    let Some(b) = &report.lower_bound else {
        return ("—".into(), "—".into());
    };
    let ratio = took(o)
        .and_then(|t| b.ratio(t))
        .map_or_else(|| "—".into(), |r| format!("{r:.2}"));
    let total = i64::try_from(b.total().as_secs()).unwrap_or(i64::MAX);
    (clock(SignedDuration::from_secs(total)), ratio)
}

fn took(o: &crate::baselines::Outcome) -> Option<std::time::Duration> {
    std::time::Duration::try_from(o.took()).ok()
}

/// The timeline (milestones) and the summary table.
pub fn summary(
    report: &Report,
    lines: &[Line],
    wall: std::time::Duration,
    baselines: &[BaselineRun],
) -> String {
    let start = report.started;
    let mut s = String::new();
    let _ = writeln!(s, "\nTIMELINE");
    for l in lines.iter().filter(|l| l.milestone) {
        let _ = writeln!(s, "  {}", render(start, l));
    }
    let _ = writeln!(
        s,
        "\nSUMMARY  {}  ({} of cluster time in {:.1} s wall; {} changes recorded)",
        report.name,
        clock(report.ended.duration_since(start)),
        wall.as_secs_f64(),
        report.history.changes.len()
    );
    write_invariants(&mut s, report);
    write_holds(&mut s, report);
    if !report.rollouts.is_empty() {
        write_rollouts(&mut s, report);
    }
    write_quota_peaks(&mut s, report);
    write_serving(&mut s, report);
    if !baselines.is_empty() {
        s.push_str(&against_baselines(report, baselines));
    }
    let _ = writeln!(s);
    if report.passed() && report.violations.is_empty() {
        let _ = writeln!(
            s,
            "RESULT  every invariant held and every expectation was met"
        );
    } else if report.passed() {
        let expected: Vec<String> = report.expected.iter().map(|i| format!("{i:?}")).collect();
        let _ = writeln!(
            s,
            "RESULT  every expectation was met; every invariant held but what the story expects to break ({})",
            expected.join(", ")
        );
    } else {
        let _ = writeln!(s, "RESULT  FAILED:");
        for f in &report.failures {
            let _ = writeln!(s, "  - {f}");
        }
    }
    s
}

/// Each invariant and whether it held.
fn write_invariants(s: &mut String, report: &Report) {
    let rollout_checked = !report.rollouts.is_empty();
    let _ = writeln!(
        s,
        "\n  {:<52} RESULT",
        "INVARIANT (from the cluster's history)"
    );
    for (inv, what) in INVARIANTS {
        let broken: Vec<_> = report
            .violations
            .iter()
            .filter(|v| v.invariant == inv)
            .collect();
        let result = if !broken.is_empty() && report.expected.contains(&inv) {
            format!("broken, as the story expects ({} violations)", broken.len())
        } else if !broken.is_empty() {
            format!("BROKEN ({} violations)", broken.len())
        } else if !rollout_checked
            && matches!(
                inv,
                Invariant::GroupDisruptedTwice | Invariant::NodeNotAtTarget
            )
        {
            "not checked (no rollout)".to_string()
        } else {
            "held".to_string()
        };
        let _ = writeln!(s, "  {what:<52} {result}");
    }
}

/// The children held suspended, for how long, and when they were released.
fn write_holds(s: &mut String, report: &Report) {
    let start = report.started;
    let held = holds(&report.history);
    if held.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  {:<44} {:>10}  RELEASED AT",
        "HELD CHILD", "HELD FOR"
    );
    for (name, for_, at) in &held {
        let _ = writeln!(
            s,
            "  {name:<44} {:>10}  {}",
            clock(*for_),
            at.map_or_else(|| "never".into(), |t| clock(t.duration_since(start)))
        );
    }
}

/// Each rollout: its time, its lower bound and ratio, evictions, group disruptions.
fn write_rollouts(s: &mut String, report: &Report) {
    let below = invariants::seconds_below_pdb_floor(&report.history);
    let _ = writeln!(
        s,
        "\n  {:<26} {:>9} {:>12} {:>6} {:>10} {:>12} {:>16} {:>20}",
        "ROLLOUT",
        "TOOK",
        "LOWER BOUND",
        "RATIO",
        "EVICTIONS",
        "DISRUPTIONS",
        "DISRUPTED TWICE",
        "GROUP-S BELOW FLOOR"
    );
    for r in &report.rollouts {
        match r {
            Ok(o) => {
                let (disruptions, twice) = group_effect(&report.history, o);
                let (bound, ratio) = bound_and_ratio(report, o);
                let _ = writeln!(
                    s,
                    "  {:<26} {:>9} {:>12} {:>6} {:>10} {:>12} {:>16} {:>20.0}",
                    o.strategy,
                    clock(o.took()),
                    bound,
                    ratio,
                    o.evictions,
                    disruptions,
                    twice,
                    below
                );
            }
            Err(e) => {
                let _ = writeln!(s, "  failed: {e}");
            }
        }
    }
    if let Some(b) = &report.lower_bound {
        let _ = writeln!(
            s,
            "  lower bound: {} (the cluster's configured durations)",
            b.explain()
        );
    }
}

/// Per ClusterQueue and resource: the peak running and the quota then.
fn write_quota_peaks(s: &mut String, report: &Report) {
    let peaks = quota_peaks(&report.history);
    if peaks.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  {:<32} {:>14} {:>14}",
        "QUOTA (ClusterQueue/resource)", "PEAK RUNNING", "QUOTA THEN"
    );
    for ((cq, resource), (used, nominal)) in &peaks {
        let _ = writeln!(
            s,
            "  {:<32} {:>14} {:>14}",
            format!("{cq}/{resource}"),
            used.get(resource).to_string(),
            nominal.get(resource).to_string()
        );
    }
}

/// Per RayService that served: the seconds it had no serving pod.
fn write_serving(s: &mut String, report: &Report) {
    let lost = invariants::serving_seconds_lost(&report.history);
    if lost.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  {:<32} {:>19}",
        "SERVING (RayService)", "SERVING-S LOST"
    );
    for (svc, seconds) in &lost {
        let _ = writeln!(s, "  {svc:<32} {seconds:>19.0}");
    }
}

/// Σ over the RayServices that served of the seconds each had no serving pod; "—" when none
/// served.
fn serving_lost_cell(report: &Report) -> String {
    let lost = invariants::serving_seconds_lost(&report.history);
    if lost.is_empty() {
        return "—".into();
    }
    format!("{:.0}", lost.values().sum::<f64>())
}

/// One run's row in [`against_baselines`]: rollout time, ratio to the lower bound, group
/// disruptions, groups disrupted twice, group-seconds below the floor, quota overrun, the
/// invariants it broke.
fn comparison_row(name: &str, report: &Report) -> String {
    let rollout = report.rollouts.iter().flatten().next();
    let (took_, ratio, disruptions, twice) = match rollout {
        Some(o) => {
            let (d, t) = group_effect(&report.history, o);
            let (_, ratio) = bound_and_ratio(report, o);
            (clock(o.took()), ratio, d.to_string(), t.to_string())
        }
        None if report.rollouts.is_empty() => ("—".into(), "—".into(), "—".into(), "—".into()),
        None => ("failed".into(), "—".into(), "—".into(), "—".into()),
    };
    let below = if report.rollouts.is_empty() {
        "—".to_string()
    } else {
        format!(
            "{:.0}",
            invariants::seconds_below_pdb_floor(&report.history)
        )
    };
    let overrun = invariants::quota_overrun(&report.history);
    let overrun = if overrun.is_empty() {
        "none".to_string()
    } else {
        overrun
            .iter()
            .map(|(id, o)| format!("{id} +{} for {:.0}s", o.peak, o.seconds))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut broken: Vec<String> = report
        .violations
        .iter()
        .map(|v| format!("{:?}", v.invariant))
        .collect();
    broken.sort();
    broken.dedup();
    let broken = if broken.is_empty() {
        "none".to_string()
    } else {
        broken.join(", ")
    };
    let serving = serving_lost_cell(report);
    format!(
        "  {name:<28} {took_:>9} {ratio:>6} {disruptions:>12} {twice:>16} {below:>20} {serving:>15}  {overrun:<34} {broken}"
    )
}

/// raygate's run beside its baselines' (each on a fresh cluster of the same shape and seed).
pub fn against_baselines(report: &Report, baselines: &[BaselineRun]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n  RAYGATE AGAINST THE BASELINES (the same story, cluster and seed; each run on its own cluster)"
    );
    let _ = writeln!(
        s,
        "  {:<28} {:>9} {:>6} {:>12} {:>16} {:>20} {:>15}  {:<34} INVARIANTS BROKEN",
        "RUN",
        "ROLLOUT",
        "RATIO",
        "DISRUPTIONS",
        "DISRUPTED TWICE",
        "GROUP-S BELOW FLOOR",
        "SERVING-S LOST",
        "QUOTA OVERRUN"
    );
    let _ = writeln!(s, "{}", comparison_row("raygate", report));
    for (name, run) in baselines {
        match run {
            Ok(r) => {
                let _ = writeln!(s, "{}", comparison_row(name, r));
            }
            Err(e) => {
                let _ = writeln!(s, "  {name:<28} could not run: {e}");
            }
        }
    }
    s
}

/// The report as JSON (`raygate simulate -o json`).
pub fn report_json(report: &Report, wall: std::time::Duration) -> Value {
    let start = report.started;
    let secs = |t: Timestamp| t.duration_since(start).as_secs();
    json!({
        "name": report.name,
        "passed": report.passed(),
        "clusterSeconds": secs(report.ended),
        "wallSeconds": (wall.as_secs_f64() * 10.0).round() / 10.0,
        "changesRecorded": report.history.changes.len(),
        "invariants": INVARIANTS.iter().map(|(inv, what)| {
            let n = report.violations.iter().filter(|v| v.invariant == *inv).count();
            json!({"name": format!("{inv:?}"), "description": what, "violations": n})
        }).collect::<Vec<_>>(),
        "violations": report.violations.iter().map(|v| json!({
            "invariant": format!("{:?}", v.invariant),
            "fromSeconds": secs(v.from),
            "untilSeconds": v.until.map(secs),
            "objects": v.objects,
            "message": v.message,
        })).collect::<Vec<_>>(),
        "rollouts": report.rollouts.iter().map(|r| match r {
            Ok(o) => {
                let (disruptions, twice) = group_effect(&report.history, o);
                let ratio = report.lower_bound.as_ref().and_then(|b| took(o).and_then(|t| b.ratio(t)));
                json!({"strategy": o.strategy, "startedSeconds": secs(o.started),
                    "seconds": o.took().as_secs(), "evictions": o.evictions, "refusals": o.refusals,
                    "groupDisruptions": disruptions, "groupsDisruptedTwice": twice,
                    "ratioToLowerBound": ratio.map(|r| (r * 100.0).round() / 100.0)})
            }
            Err(e) => json!({"error": e}),
        }).collect::<Vec<_>>(),
        "lowerBound": report.lower_bound.as_ref().map(|b| json!({
            "domains": b.domains, "evictSeconds": b.evict.as_secs(),
            "handoffSeconds": b.handoff.as_secs(), "recoverySeconds": b.recovery.as_secs(),
            "recoversElsewhere": b.recovers_elsewhere, "seconds": b.total().as_secs(),
        })),
        "groupSecondsBelowPdbFloor": invariants::seconds_below_pdb_floor(&report.history),
        "servingSecondsLost": invariants::serving_seconds_lost(&report.history),
        "held": holds(&report.history).iter().map(|(name, d, at)| json!({
            "rayCluster": name, "heldSeconds": d.as_secs(), "releasedAtSeconds": at.map(secs),
        })).collect::<Vec<_>>(),
        "failures": report.failures,
    })
}
