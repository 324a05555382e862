//! `raygate admit` as users run it: the built binary on the upgrade sample and on bad input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../config/samples/admit-upgrade.yaml"
);

fn raygate_admit_stdin(input: &str, format: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_raygate"))
        .args(["admit", "-f", "-", "-o", format])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run raygate");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait for raygate")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

fn workload<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["workloads"]
        .as_array()
        .and_then(|a| a.iter().find(|w| w["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {report}"))
}

#[test]
fn the_upgrade_sample_shows_the_replacement_waiting_for_its_delta() {
    let out = Command::new(env!("CARGO_BIN_EXE_raygate"))
        .args(["admit", "-f", SAMPLE])
        .output()
        .expect("run raygate");
    let report = json(&out);
    let old = workload(&report, "serving/svc-llm-1");
    assert_eq!(old["admitted"], true);
    assert_eq!(old["flavors"]["workers"]["cpu"], "default");
    assert_eq!(old["finished"], Value::Null);
    let new = workload(&report, "serving/svc-llm-2");
    assert_eq!(new["admitted"], false);
    assert_eq!(new["clusterQueue"], "team-a");
    assert_eq!(new["reason"], "Pending");
    assert_eq!(
        new["message"],
        "couldn't assign flavors to pod set workers: insufficient unused quota for cpu in flavor default of ClusterQueue team-a: requested 2 (4 for this slice minus 2 held by serving/svc-llm-1), 1 available of nominal 3 (1 more needed)"
    );
    assert_eq!(new["preempted"], false);
    let cq = &report["clusterQueues"][0];
    assert_eq!(cq["name"], "team-a");
    assert_eq!(cq["usage"]["default"]["cpu"], "2");
    assert_eq!(cq["usage"]["default"]["memory"], "8Gi");
    assert_eq!(cq["pending"], 1);
    assert_eq!(cq["admitted"], 1);
}

#[test]
fn with_room_for_the_delta_the_old_slice_is_replaced() {
    let text = std::fs::read_to_string(SAMPLE).expect("sample");
    let text = text.replace("nominalQuota: \"3\"", "nominalQuota: \"4\"");
    let report = json(&raygate_admit_stdin(&text, "json"));
    assert_eq!(workload(&report, "serving/svc-llm-2")["admitted"], true);
    assert_eq!(
        workload(&report, "serving/svc-llm-1")["finished"],
        "WorkloadSliceReplaced"
    );
    assert_eq!(report["clusterQueues"][0]["usage"]["default"]["cpu"], "4");
    assert_eq!(
        report["clusterQueues"][0]["usage"]["default"]["memory"],
        "16Gi"
    );
    let table = raygate_admit_stdin(&text, "table");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("Finished (WorkloadSliceReplaced)"),
        "{table}"
    );
}

#[test]
fn unreadable_input_exits_2_with_one_line() {
    let bad = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: team-a}\nspec:\n  resourceGroups: [{coveredResources: cpu}]\n";
    let out = raygate_admit_stdin(bad, "json");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(
            "document 1 (line 1, ClusterQueue team-a): spec.resourceGroups[0].coveredResources"
        ),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let out = raygate_admit_stdin("kind: [", "json");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid YAML"));
}

#[test]
fn a_bad_object_is_a_reason_not_an_error() {
    let text = std::fs::read_to_string(SAMPLE).expect("sample");
    let text = text.replace(
        "- name: default\n      resources:",
        "- name: gpu-a100\n      resources:",
    );
    let report = json(&raygate_admit_stdin(&text, "json"));
    assert_eq!(
        workload(&report, "serving/svc-llm-2")["message"],
        "ClusterQueue team-a is inactive: flavor \"gpu-a100\" not found"
    );
    assert_eq!(
        workload(&report, "serving/svc-llm-2")["reason"],
        "Inadmissible"
    );
}
