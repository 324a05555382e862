//! `raygate status` on the real CRD API server, through the built binary (kubeconfig,
//! `--context`, `-n`, `-o`), and as the kubectl plugin `kubectl-raygate`.

use std::process::Command;

use kube::api::{Api, Patch, PatchParams, PostParams};
use raygate::types::kueue::{ClusterQueue, LocalQueue, Workload};
use raygate::types::ray::{RayCluster, RayService};
use raygate_testing::apiserver::{TestServer, namespace};
use raygate_testing::{PodTemplateBuilder, ray_pod};
use serde_json::{Value, json};

fn cluster_spec(suspend: bool) -> Value {
    json!({"suspend": suspend, "headGroupSpec": {"rayStartParams": {}, "template": ray_pod("1").image(RAY_IMAGE)},
        "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "minReplicas": 0, "maxReplicas": 8,
            "rayStartParams": {}, "template": ray_pod("1").image(RAY_IMAGE)}]})
}

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// The Ray image of the pod templates.
const RAY_IMAGE: &str = "rayproject/ray";

const PENDING: &str = "couldn't assign flavors to pod set w: insufficient unused quota for cpu in flavor default, 3 more needed";

/// An upgrade held for quota: the active child runs on an admitted slice, the pending child is
/// suspended behind a replacement slice that waits for 3 more CPUs.
async fn held_upgrade(client: &kube::Client, ns: &str) {
    let cq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": format!("team-{ns}")},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}});
    let cqs: Api<ClusterQueue> = Api::all(client.clone());
    cqs.create(&PostParams::default(), &serde_json::from_value(cq).unwrap())
        .await
        .unwrap();
    cqs.patch_status(
        &format!("team-{ns}"),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"admittedWorkloads": 1, "reservingWorkloads": 1, "pendingWorkloads": 1,
            "flavorsReservation": [{"name": "default", "resources": [{"name": "cpu", "total": "3", "borrowed": "0"}]}],
            "conditions": [cond("Active", "True", "Ready", "Can admit new workloads")]}})),
    )
    .await
    .unwrap();
    let lq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
        "spec": {"clusterQueue": format!("team-{ns}")}});
    Api::<LocalQueue>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &serde_json::from_value(lq).unwrap())
        .await
        .unwrap();

    let services: Api<RayService> = Api::namespaced(client.clone(), ns);
    let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": "svc", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": {"raygate.io/released-children": "svc-a"}},
        "spec": {"rayClusterConfig": cluster_spec(true)}});
    let svc = services
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();
    services
        .patch_status(
            "svc",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"activeServiceStatus": {"rayClusterName": "svc-a"},
                "pendingServiceStatus": {"rayClusterName": "svc-b"}}}),
            ),
        )
        .await
        .unwrap();
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), ns);
    for (name, suspend) in [("svc-a", false), ("svc-b", true)] {
        let c = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns,
                "labels": {"ray.io/originated-from-cr-name": "svc", "ray.io/originated-from-crd": "RayService"}},
            "spec": cluster_spec(suspend)});
        clusters
            .create(&PostParams::default(), &serde_json::from_value(c).unwrap())
            .await
            .unwrap();
        // creation times have one-second resolution: the pending child is the younger
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    let workloads: Api<Workload> = Api::namespaced(client.clone(), ns);
    let uid = svc.metadata.uid.clone().unwrap_or_default();
    for (name, head, w, replaces, status) in [
        (
            "svc-1",
            1,
            2,
            None,
            json!({"admission": {"clusterQueue": format!("team-{ns}"), "podSetAssignments": [
                {"name": "head", "count": 1, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}},
                {"name": "w", "count": 2, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "2"}}]},
            "conditions": [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue"),
                cond("Admitted", "True", "Admitted", "The workload is admitted")]}),
        ),
        (
            "svc-2",
            2,
            4,
            Some("svc-1"),
            json!({"conditions": [cond("QuotaReserved", "False", "Pending", PENDING)]}),
        ),
    ] {
        let mut annotations = json!({});
        if let Some(old) = replaces {
            annotations =
                json!({"kueue.x-k8s.io/workload-slice-replacement-for": format!("{ns}/{old}")});
        }
        let wl = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, "labels": {"raygate.io/rayservice": "svc"}, "annotations": annotations,
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": "svc", "uid": uid}]},
            "spec": {"queueName": "lq", "podSets": [
                {"name": "head", "count": head, "template": ray_pod("1").image(RAY_IMAGE)},
                {"name": "w", "count": w, "template": ray_pod("1").image(RAY_IMAGE)}]}});
        workloads
            .create(&PostParams::default(), &serde_json::from_value(wl).unwrap())
            .await
            .unwrap();
        workloads
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap();
    }
}

fn raygate(args: &[&str]) -> (bool, String, String) {
    run(Command::new(env!("CARGO_BIN_EXE_raygate")).args(args))
}

#[path = "support/binary.rs"]
mod binary;
use binary::raygate as raygate_code;

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().expect("the raygate binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_held_upgrade_and_of_its_cluster_queue() {
    let server = TestServer::get();
    let client = server.client().await;
    let ns = namespace("status");
    held_upgrade(&client, &ns).await;
    let kubeconfig = server.kubeconfig.to_string_lossy().into_owned();

    // JSON: the summary as data
    let (ok, out, err) = raygate(&[
        "status",
        "rayservice/svc",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "json",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["queue"], "lq");
    assert_eq!(v["children"][0]["name"], "svc-a");
    assert_eq!(v["children"][0]["role"], "active");
    assert_eq!(v["children"][1]["name"], "svc-b");
    assert_eq!(v["children"][1]["held"], true);
    assert_eq!(v["slices"][0]["state"], "Admitted");
    assert_eq!(v["slices"][1]["state"], "Pending");
    assert_eq!(
        v["held"]["svc-b"],
        format!("slice svc-2 pending: {PENDING}")
    );
    assert_eq!(v["needed"], json!({"cpu": "6"}));
    assert_eq!(v["granted"], json!({"cpu": "3"}));
    assert_eq!(v["shortfall"], json!({"cpu": "3"}));

    // a table by default, with an explicit context; YAML parses to the same data
    let (ok, table, err) = raygate(&[
        "status",
        "rayservice/svc",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--context",
        "test",
    ]);
    assert!(ok, "{err}");
    assert!(
        table.starts_with(&format!("RayService {ns}/svc  queue: lq\n")),
        "{table}"
    );
    assert!(table.contains("SHORTFALL  cpu=3"), "{table}");
    let (ok, yaml, err) = raygate(&[
        "status",
        "rayservice/svc",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "yaml",
    ]);
    assert!(ok, "{err}");
    let from_yaml: Value = raygate::manifest::from_yaml(&yaml).unwrap();
    assert_eq!(from_yaml, v);

    // the ClusterQueue: usage against quota, and the pending slice
    let cq = format!("clusterqueue/team-{ns}");
    let (ok, out, err) = raygate(&["status", &cq, "--kubeconfig", &kubeconfig, "-o", "json"]);
    assert!(ok, "{err}");
    let q: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(q["active"], "True");
    assert_eq!(q["admitted"], 1);
    assert_eq!(q["quota"][0]["usage"], "3");
    assert_eq!(q["quota"][0]["free"], "1");
    assert_eq!(
        q["pending"],
        json!([{"workload": format!("{ns}/svc-2"), "localQueue": "lq", "message": PENDING}])
    );

    // every opted-in RayService of the namespace, and of every namespace with -A: one line each,
    // opted in by raygate's label, Kueue's or both
    let services: Api<RayService> = Api::namespaced(client.clone(), &ns);
    for (name, labels) in [
        (
            "both",
            json!({"raygate.io/queue-name": "lq", "kueue.x-k8s.io/queue-name": "lq"}),
        ),
        ("own", json!({"raygate.io/queue-name": "lq"})),
    ] {
        let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"rayClusterConfig": cluster_spec(false)}});
        services
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).unwrap(),
            )
            .await
            .unwrap();
    }
    let (ok, list, err) = raygate(&[
        "status",
        "rayservices",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 4, "{list}");
    assert!(
        lines[0].starts_with("NAMESPACE") && lines[0].ends_with("HELD"),
        "{list}"
    );
    let names: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default())
        .collect();
    assert_eq!(names, ["both", "own", "svc"], "{list}");
    let (ok, named, err) = raygate(&[
        "status",
        "rayservices",
        "-n",
        &ns,
        "-o",
        "name",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        named,
        "rayservice.ray.io/both\nrayservice.ray.io/own\nrayservice.ray.io/svc\n"
    );
    let row: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(row[..5], [ns.as_str(), "svc", "lq", "2", "cpu=3"], "{list}");
    assert!(
        lines[3].contains("svc-b: "),
        "the held child and why: {list}"
    );
    let (ok, all, err) = raygate(&[
        "status",
        "rayservices",
        "-A",
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(ok, "{err}");
    let all: Value = serde_json::from_str(&all).unwrap();
    let mine: Vec<&Value> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["namespace"] == ns.as_str())
        .collect();
    assert_eq!(mine.len(), 3, "{all}");
    assert_eq!(mine[2]["name"], "svc");
    let (code, _, err) = raygate_code(&[
        "status",
        "rayservice/svc",
        "-A",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("-A/--all-namespaces"), "{err}");

    // errors name the object or the context, with the exit codes of `drain` and `rollout`: 2
    // for input that names nothing, 3 for a cluster that cannot be read
    let (code, _, err) = raygate_code(&[
        "status",
        "rayservice/nope",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("RayService {ns}/nope not found")),
        "{err}"
    );
    let (code, _, err) = raygate_code(&[
        "status",
        "rayservice/svc",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--context",
        "prod",
    ]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("prod"), "{err}");
    let (code, _, err) = raygate_code(&[
        "status",
        "clusterqueue/team-a",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert_eq!(code, Some(3), "{err}");

    // as a kubectl plugin: the same binary named kubectl-raygate
    let dir = tempdir();
    let plugin = dir.join("kubectl-raygate");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_raygate"), &plugin).unwrap();
    let (ok, plugin_table, err) = run(Command::new(&plugin).args([
        "status",
        "rayservice/svc",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--context",
        "test",
    ]));
    assert!(ok, "{err}");
    assert_eq!(plugin_table, table);
    let (_, _, usage) = run(Command::new(&plugin).args(["status"]));
    assert!(usage.contains("kubectl raygate status"), "{usage}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn completions_are_generated_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_raygate()"),
        ("zsh", "#compdef raygate"),
        ("fish", "complete -c raygate"),
    ] {
        let (ok, out, err) = raygate(&["completions", shell]);
        assert!(ok, "{err}");
        assert!(out.contains(marker), "{shell}: {out}");
        assert!(
            out.contains("status"),
            "{shell} completes the status command"
        );
    }
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("raygate-status-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
