//! `raygate demo` and `raygate simulate` as a user runs them: the binary, no cluster, nothing
//! read from disk for the demo (the CRDs and the story are embedded).

use std::process::Command;

fn raygate(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_raygate"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("runs the binary")
}

/// `raygate simulate -f FILE -o json [extra]` on a shipped scenario (run from the repository
/// root): it exits 0; its JSON.
fn simulate_json(file: &str, extra: &[&str]) -> serde_json::Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut args = vec!["simulate", "-f", file, "-o", "json"];
    args.extend_from_slice(extra);
    let out = raygate(&args, &root);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

/// Run from an empty directory: the binary needs no file beside it. Exit 0, the acts on the
/// live lines, every invariant held in the summary (act 2 moves the RayService off the domain
/// holding its serving cluster before draining it), and the summary the README shows.
#[test]
fn demo_plays_both_acts_and_every_invariant_holds() {
    let dir = std::env::temp_dir().join(format!("raygate-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = raygate(&["demo"], &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    for want in [
        "Act 1: a RayService zero-downtime upgrade",
        "held by raygate until an admitted slice covers it",
        "released: its slice is admitted",
        "Act 2: a new node generation",
        "NodeRollout node-generation-1: Completed",
        // the NodeRollout names the RayService's serve pods before it drains their domain
        "Event Warning ServingAtRisk on NodeRollout node-generation-1: 1 workload(s)",
        "RayCluster serving/llm-",
        "TIMELINE",
        "SUMMARY  raygate demo",
        "raygate (NodeRollout)",
        // and moves it off that domain first: KubeRay's zero-downtime upgrade, through the gate
        "Event MovingRayService on RayService serving/llm",
        "Event RayServiceMoved on RayService serving/llm",
        "RESULT  every invariant held and every expectation was met",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    for invariant in [
        "ClusterQueue quota never exceeded by running pods",
        "no child RayCluster ever ran uncovered by a slice",
        "no group disrupted more than once per rollout",
        "available groups never below a PDB's floor",
        "member-counted groups never below a PDB's floor",
        "no serving RayService ever stopped serving",
        "no slice leaked after the story ends",
        "every node at the target generation at the end",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(invariant))
            .unwrap_or_else(|| panic!("no summary line for {invariant:?}:\n{stdout}"));
        assert!(line.ends_with(" held"), "{line}");
    }
    // raygate beside its baselines, each on a cluster of its own with the demo's shape and seed:
    // raygate breaks nothing, each baseline breaks what it is there to show
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.contains("RAYGATE AGAINST THE BASELINES"))
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let row = |run: &str| {
        table
            .iter()
            .find(|l| l.trim_start().starts_with(run))
            .unwrap_or_else(|| panic!("no row for {run:?} in:\n{}", table.join("\n")))
            .to_string()
    };
    assert!(
        row("raygate ").ends_with("none                               none"),
        "{}",
        row("raygate ")
    );
    let without_gate = row("KubeRay without the gate");
    assert!(
        without_gate.contains("QuotaExceeded") && without_gate.contains("serving/nvidia.com/gpu +"),
        "{without_gate}"
    );
    for drain in [
        "kubectl drain node by node",
        "random drains of 2 nodes",
        "UD by UD",
    ] {
        let r = row(drain);
        assert!(
            r.contains("GroupDisruptedTwice") || r.contains("BelowPdbFloor"),
            "{r}"
        );
    }
    // not a terminal: plain lines, no status line rewritten in place
    assert!(!stdout.contains('\r'), "no carriage returns when piped");
    let readme = include_str!("../../README.md");
    assert_eq!(
        summary_block(readme),
        summary_block(&stdout),
        "the README's demo summary is what `raygate demo` prints (but for its wall time)"
    );
}

/// The lines from `SUMMARY` to `RESULT`, the header's wall time left out (the one figure that
/// differs between runs).
fn summary_block(text: &str) -> Vec<String> {
    let block: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("SUMMARY  raygate demo"))
        .take_while(|l| !l.starts_with("```"))
        .map(|l| match (l.find(" in "), l.find(" s wall")) {
            (Some(a), Some(b)) if l.starts_with("SUMMARY") && a < b => {
                format!("{} in _{}", &l[..a], &l[b..])
            }
            _ => l.trim_end().to_string(),
        })
        .collect();
    let end = block
        .iter()
        .position(|l| l.starts_with("RESULT"))
        .map_or(0, |i| i + 1);
    assert!(end > 0, "no SUMMARY … RESULT block in:\n{text}");
    block[..end].to_vec()
}

/// A scenario file with a bad field: exit 2, the line and the field named, nothing run.
#[test]
fn simulate_names_the_line_and_field_of_a_bad_file() {
    let dir = std::env::temp_dir().join(format!("raygate-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "name: bad\ncluster: {upgradeDomains: 1, nodesPerDomain: 1}\ntimeline:\n  - at: soon\n    clearFaults: {}\n",
    )
    .unwrap();
    let out = raygate(&["simulate", "-f", file.to_str().unwrap()], &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("line 4: timeline[0].at"),
        "line and field: {stderr}"
    );
}

/// A shipped scenario as JSON (piped): the report says it passed, with the held child.
#[test]
fn simulate_prints_a_scenario_s_report_as_json() {
    let v = simulate_json("config/scenarios/quota-held-upgrade.yaml", &[]);
    assert_eq!(v["passed"], true);
    assert_eq!(v["violations"], serde_json::json!([]));
    assert!(v["held"][0]["heldSeconds"].as_i64().unwrap() >= 300, "{v}");
    assert_eq!(v["invariants"].as_array().unwrap().len(), 8);
    // the RayService served through its held upgrade
    assert_eq!(v["servingSecondsLost"]["serving/svc"], 0.0, "{v}");
    assert!(v.get("baselines").is_none(), "baselines only when asked");
}

/// `--baselines`: the story's baselines on clusters of their own, in the JSON beside raygate's
/// report (a gated upgrade: KubeRay without the gate, which runs both children over the quota).
#[test]
fn simulate_with_baselines_reports_kuberay_without_the_gate_beside_raygate() {
    let v = simulate_json("config/scenarios/quota-held-upgrade.yaml", &["--baselines"]);
    assert_eq!(v["passed"], true);
    let baselines = v["baselines"].as_array().unwrap();
    assert_eq!(baselines.len(), 1, "{v}");
    assert_eq!(baselines[0]["name"], "KubeRay without the gate");
    let broken: Vec<&str> = baselines[0]["report"]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["invariant"].as_str())
        .collect();
    assert!(broken.contains(&"QuotaExceeded"), "{broken:?}");
    assert!(broken.contains(&"RanUncovered"), "{broken:?}");
}

/// `--html FILE` writes the run as one self-contained page with the charts.
#[test]
fn simulate_writes_the_html_report() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::temp_dir().join(format!("raygate-simulate-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    let out = raygate(
        &[
            "simulate",
            "-f",
            "config/scenarios/quota-held-upgrade.yaml",
            "-o",
            "json",
            "--html",
            page.to_str().unwrap(),
        ],
        &root,
    );
    let html = std::fs::read_to_string(&page).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(html.starts_with("<!DOCTYPE html>"), "{html:.200}");
    assert!(html.contains("<svg"), "charts inline");
    assert!(html.contains("a RayService upgrade that does not fit waits for quota"));
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http") && !html.contains("<script"),
        "nothing fetched"
    );
}

/// An expectation that fails is exit 1 with the failure in the summary.
#[test]
fn simulate_exits_1_when_an_expectation_fails() {
    let dir = std::env::temp_dir().join(format!("raygate-simulate-fail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("fails.yaml");
    std::fs::write(
        &file,
        "name: expects a node that is not there\ncluster: {upgradeDomains: 1, nodesPerDomain: 1}\n\
         expect:\n  within: 1m\n  settle: 10s\n  objects:\n    - {apiVersion: v1, kind: Node, name: nowhere, path: /metadata/name, equals: nowhere}\n",
    )
    .unwrap();
    let out = raygate(
        &["simulate", "-f", file.to_str().unwrap(), "-o", "table"],
        &dir,
    );
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("RESULT  FAILED"), "{stdout}");
    assert!(
        stdout.contains("Node nowhere: /metadata/name is absent"),
        "{stdout}"
    );
}

/// `raygate simulate --seeds 2`: the sweep over two generated stories, the table per variant
/// (raygate and the baselines that ran on the same seeds), exit 0 as raygate broke nothing.
#[test]
fn simulate_seeds_prints_the_sweep_table_for_raygate_and_the_baselines() {
    let dir = std::env::temp_dir().join(format!("raygate-simulate-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = raygate(&["simulate", "--seeds", "2", "--first", "0"], &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("seeds: 2 "), "{stdout}");
    assert!(stdout.contains("violations per invariant"), "{stdout}");
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name:?} in:\n{stdout}"))
            .to_string()
    };
    // raygate ran both seeds and broke nothing
    let raygate = row("raygate ");
    let cols: Vec<&str> = raygate.split_whitespace().collect();
    assert_eq!(cols[1..4], ["2", "0", "0"], "{raygate}");
    assert!(raygate.ends_with("{}"), "{raygate}");
    // seeds 0 and 1 draw rollouts: the drain baselines ran on them too
    row("kubectl drain node by node");
    row("UD by UD");
    assert!(stdout.contains("wall time:"), "{stdout}");
}

/// A file or --seeds, not both.
#[test]
fn simulate_takes_a_file_or_seeds_not_both() {
    let dir = std::env::temp_dir();
    let out = raygate(&["simulate", "-f", "x.yaml", "--seeds", "2"], &dir);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = raygate(&["simulate"], &dir);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
