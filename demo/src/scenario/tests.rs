//! Reading scenario files: good ones, and bad ones with errors naming the line and the field.

use std::time::Duration;

use super::*;

const GOOD: &str = r#"name: quota then rollout
seed: 3
cluster:
  upgradeDomains: 2
  nodesPerDomain: 2
  allocatable: {nvidia.com/gpu: "4"}
objects:
  - apiVersion: v1
    kind: Namespace
    metadata: {name: serving}
timeline:
  - at: 10m
    startRollout: {strategy: randomConcurrent, k: 2}
  - at: 30s
    raiseQuota: {clusterQueue: team, resource: nvidia.com/gpu, to: "16"}
  - at: 1m
    killController: {}
  - at: 1m30s
    restartController: {}
  - at: 2m
    injectFault: {verbs: [patch, create], resource: workloads.kueue.x-k8s.io, code: 500, rate: 0.2}
expect:
  within: 3h
  violations: [BelowPdbFloor]
  objects:
    - {apiVersion: v1, kind: Node, name: ud0-n0, path: /metadata/labels/sim.raygate.io~1generation, equals: "1"}
"#;

#[test]
fn a_good_file_reads_into_a_timeline_in_time_order() {
    let c = parse(GOOD, "good.yaml").unwrap();
    assert_eq!(c.scenario.name, "quota then rollout");
    assert_eq!(c.scenario.seed, 3);
    assert_eq!(
        c.scenario.cluster.domain_label,
        "topology.raygate.io/upgrade-domain"
    );
    let order: Vec<(u64, u64)> = c
        .steps
        .iter()
        .map(|(at, _, line)| (at.as_secs(), *line))
        .collect();
    assert_eq!(
        order,
        vec![(30, 14), (60, 16), (90, 18), (120, 20), (600, 12)]
    );
    assert!(matches!(&c.steps[0].1, Action::RaiseQuota(q) if q.to == "16"));
    assert!(matches!(&c.steps[4].1, Action::StartRollout(r) if r.k == Some(2) && r.target == "1"));
    assert_eq!(c.within, Duration::from_secs(3 * 3600));
    assert_eq!(c.settle, Duration::from_secs(120));
    assert_eq!(
        c.scenario.expect.violations,
        vec![InvariantName::BelowPdbFloor]
    );
}

fn error(text: &str) -> String {
    parse(text, "bad.yaml").unwrap_err().to_string()
}

#[test]
fn an_unknown_field_names_its_line_and_the_field() {
    let text = GOOD.replace("raiseQuota: {clusterQueue", "raiseQuota: {clusterQeue");
    let e = error(&text);
    assert!(e.starts_with("bad.yaml: "), "{e}");
    assert!(e.contains("clusterQeue") && e.contains("line 15"), "{e}");
}

#[test]
fn a_wrong_type_names_its_line() {
    let text = GOOD.replace("upgradeDomains: 2", "upgradeDomains: two");
    let e = error(&text);
    assert!(e.contains("line 4"), "{e}");
}

#[test]
fn a_step_without_an_action_or_with_two_names_the_step() {
    let text = GOOD.replace("    killController: {}\n", "");
    assert_eq!(
        error(&text),
        "bad.yaml: line 16: timeline[2]: no action: give one of apply, patch, raiseQuota, startRollout, killController, restartController, injectFault, clearFaults, failNode, restoreNode"
    );
    let text = GOOD.replace(
        "    killController: {}\n",
        "    killController: {}\n    failNode: {node: ud0-n0}\n",
    );
    assert_eq!(
        error(&text),
        "bad.yaml: line 16: timeline[2]: one action per step, found killController and failNode"
    );
}

#[test]
fn a_bad_duration_and_a_bad_fault_name_the_field() {
    let e = error(&GOOD.replace("at: 1m30s", "at: soon"));
    assert!(e.starts_with("bad.yaml: line 18: timeline[3].at: "), "{e}");
    let e = error(&GOOD.replace("rate: 0.2", "rate: 2"));
    assert_eq!(
        e,
        "bad.yaml: line 20: timeline[4].injectFault.rate: 2 is not a share between 0 and 1"
    );
    let e = error(&GOOD.replace("[patch, create]", "[patch, crate]"));
    assert!(
        e.contains("line 20: timeline[4].injectFault.verbs: unknown verb \"crate\""),
        "{e}"
    );
    let e = error(&GOOD.replace("k: 2", "k: 0"));
    assert!(e.contains("line 12: timeline[0].startRollout.k"), "{e}");
}

#[test]
fn an_unknown_strategy_or_invariant_is_refused_with_its_line() {
    let e = error(&GOOD.replace("strategy: randomConcurrent", "strategy: yolo"));
    assert!(e.contains("yolo") && e.contains("line 13"), "{e}");
    let e = error(&GOOD.replace("[BelowPdbFloor]", "[BelowFloor]"));
    assert!(e.contains("BelowFloor") && e.contains("line 24"), "{e}");
}

#[test]
fn every_shipped_scenario_reads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        parse(&text, &path.display().to_string()).unwrap_or_else(|e| panic!("{e}"));
        n += 1;
    }
    assert!(n >= 1, "scenarios in {}", dir.display());
}

#[test]
fn spare_nodes_read_with_their_join_time_and_a_bad_one_names_its_line() {
    let text = GOOD.replace(
        "  allocatable: {nvidia.com/gpu: \"4\"}\n",
        "  allocatable: {nvidia.com/gpu: \"4\"}\n  spare: {nodes: 2, joinAt: 1m30s}\n",
    );
    let c = parse(&text, "good.yaml").unwrap();
    let spare = c.scenario.cluster.spare.unwrap();
    assert_eq!(
        (
            spare.nodes,
            spare.domain.as_str(),
            spare.generation.as_str()
        ),
        (2, "spare", "1")
    );
    assert_eq!(spare.join_at, Some(Duration::from_secs(90)));
    let c = parse(
        &GOOD.replace("  allocatable:", "  spare: {nodes: 1}\n  allocatable:"),
        "good.yaml",
    )
    .unwrap();
    assert_eq!(
        c.scenario.cluster.spare.unwrap().join_at,
        None,
        "at the start"
    );
    let e = error(&text.replace("joinAt: 1m30s", "joinAt: soon"));
    assert!(e.starts_with("bad.yaml: "), "{e}");
    assert!(
        e.contains("\"soon\" is not a duration") && e.contains("line 7"),
        "{e}"
    );
}
