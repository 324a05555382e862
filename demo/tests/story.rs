//! `raygate demo`'s story (`config/scenarios/demo.yaml`, embedded in the binary) on a sim built
//! from the embedded CRDs, on the paused clock: every invariant holds, act 1 holds the upgrade's
//! child until quota is freed, act 2's NodeRollout, run by raygate's controller, completes with
//! every group disrupted exactly once, and the live display said so as it happened.

use raygate_demo::history::{Kind, State};
use raygate_demo::show;
use raygate_demo::story::{self, Out};
use raygate_sim::world::actors::lws;

#[test]
fn the_embedded_story_is_the_shipped_file() {
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/scenarios/demo.yaml");
    assert_eq!(story::DEMO, std::fs::read_to_string(file).unwrap());
    let checked = story::demo().unwrap();
    assert_eq!(checked.scenario.cluster.upgrade_domains, 4);
    assert_eq!(checked.scenario.cluster.nodes_per_domain, 4);
}

#[tokio::test(start_paused = true)]
async fn the_demo_story_runs_with_every_invariant_holding() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let checked = story::demo().unwrap();
    let wall = std::time::Instant::now();
    let sim = story::sim_for(&checked).unwrap();
    eprintln!(
        "the sim with the embedded CRDs: {:.1} s wall",
        wall.elapsed().as_secs_f64()
    );
    let mut shown: Vec<String> = vec![];
    let played = story::play(sim, &checked, &mut |o| {
        if let Out::Line(l) = o {
            shown.push(l);
        }
    })
    .await
    .unwrap();
    let report = &played.report;
    let summary = show::summary(report, &played.lines, played.wall, &[]);
    eprintln!("{}\n{summary}", shown.join("\n"));
    assert!(report.passed(), "{:#?}", report.failures);
    // every invariant holds: act 2 moves the RayService off the domain holding its only serving
    // cluster before draining it (KubeRay's zero-downtime upgrade, its surge admitted by the
    // gate), so it never stops serving
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let lost = raygate_demo::invariants::serving_seconds_lost(&report.history);
    assert_eq!(
        lost.get("serving/llm").copied().unwrap_or(0.0),
        0.0,
        "{lost:?}"
    );
    let moved = shown.iter().any(|l| l.contains("Event RayServiceMoved on"));
    assert!(moved, "the move is shown");

    // act 1: a child born suspended, held for minutes (until the quota is raised at 8m), then
    // released; the old child is gone at the end
    let holds = show::holds(&report.history);
    assert_eq!(holds.len(), 1, "one held child: {holds:?}");
    assert!(holds[0].1.as_secs() >= 180, "held for minutes: {holds:?}");
    assert!(holds[0].2.is_some(), "released");
    let children: Vec<_> = report
        .history
        .current()
        .keys()
        .filter(|k| k.kind == Kind::RayCluster)
        .collect();
    assert_eq!(children.len(), 1, "the old child is gone: {children:?}");

    // act 2: the NodeRollout completed; every group disrupted exactly once in its window
    let outcome = report.rollouts[0].as_ref().unwrap();
    assert_eq!(outcome.strategy, raygate_demo::noderollout::NAME);
    let by_group = raygate_demo::invariants::group_disruptions(
        &report.history,
        lws::GROUP_KEY,
        raygate_demo::invariants::Window {
            from: outcome.started,
            to: outcome.finished,
        },
    );
    assert_eq!(by_group.len(), 8, "all eight groups moved: {by_group:?}");
    assert!(by_group.values().all(|t| t.len() == 1), "{by_group:?}");
    let nodes_at_1 = report
        .history
        .current()
        .values()
        .filter(|s| matches!(s, State::Node(n) if n.labels.get("sim.raygate.io/generation").map(String::as_str) == Some("1")))
        .count();
    assert_eq!(nodes_at_1, 16);

    // the display: both acts, the hold, the release, each domain drained in turn
    let text = shown.join("\n");
    for want in [
        "act 1 | == Act 1",
        "held by raygate",
        "released: its slice is admitted",
        "act 2 | == Act 2",
        "domain ud-0 Draining",
        "domain ud-3 Done",
        "evicted from node",
        "NodeRollout node-generation-1: Completed",
    ] {
        assert!(text.contains(want), "the display shows {want:?}");
    }
    assert!(summary.contains("RESULT  every invariant held and every expectation was met"));
}
