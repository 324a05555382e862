//! kubectl, a client the project did not write, against the simulated cluster served over HTTPS
//! (`raygate_sim::local`, what `raygate dev cluster` runs), on the wall clock. Each expectation is
//! what kubectl prints against a real cluster (kubectl's documented output and its e2e tests'
//! expectations: `test/e2e/kubectl/kubectl.go`, `test/cmd/*.sh` in kubernetes/kubernetes); the
//! divergences that remain are listed in `sim/README.md` ("Served over HTTPS").
//!
//! kubectl comes from `$RAYGATE_KUBECTL` or `PATH`; without it these tests fail (they are not
//! skipped).

use std::path::{Path, PathBuf};
use std::process::Command;

use raygate_sim::local::{Config, Local};

struct Kubectl {
    _local: Local,
    dir: tempfile::TempDir,
}

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/upstream-samples/kuberay-v1.7.0")
}

/// What one kubectl command returned.
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    async fn start(tag: &str) -> Kubectl {
        let local = Local::start(&Config {
            domains: 2,
            nodes_per_domain: 2,
            ..Config::default()
        })
        .await
        .unwrap();
        let dir = tempfile::Builder::new()
            .prefix(&format!("raygate-kubectl-{tag}-"))
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("kubeconfig"), local.kubeconfig()).unwrap();
        Kubectl { _local: local, dir }
    }

    /// Runs `kubectl args…` (stdin `input`) off the runtime, the cluster serving meanwhile.
    async fn run_with(&self, args: &[&str], input: Option<&str>) -> Out {
        let mut cmd = Command::new(raygate_testing::tools::kubectl());
        cmd.args(args)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .env("HOME", self.dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let input = input.map(String::from);
        let out = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut child = cmd.spawn().expect("starting kubectl");
            let mut stdin = child.stdin.take().unwrap();
            if let Some(text) = input {
                stdin.write_all(text.as_bytes()).unwrap();
            }
            drop(stdin);
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap();
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Starts `kubectl args…` (a watch), runs `during` meanwhile, then stops it; its stdout.
    async fn watching(
        &self,
        args: &[&str],
        during: impl std::future::Future<Output = ()>,
    ) -> String {
        let mut child = Command::new(raygate_testing::tools::kubectl())
            .args(args)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .env("HOME", self.dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting kubectl");
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        during.await;
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let _ = child.kill();
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn run(&self, args: &[&str]) -> Out {
        self.run_with(args, None).await
    }

    /// Runs a command that must succeed; its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.ok,
            "kubectl {args:?} failed:\n{}{}",
            out.stdout, out.stderr
        );
        out.stdout
    }

    /// The ReplicaSet `web` applied, both its pods Ready.
    async fn web_ready(&self) {
        self.apply(REPLICASET).await;
        self.ok(&[
            "wait",
            "--for=jsonpath={.status.readyReplicas}=2",
            "rs/web",
            "--timeout=60s",
        ])
        .await;
    }

    async fn apply(&self, yaml: &str) -> String {
        let out = self.run_with(&["apply", "-f", "-"], Some(yaml)).await;
        assert!(
            out.ok,
            "kubectl apply failed:\n{}{}\n{yaml}",
            out.stdout, out.stderr
        );
        out.stdout
    }
}

/// Asserts that kubectl's `output` says `part`.
fn says(output: &str, part: &str) {
    assert!(output.contains(part), "expected {part:?} in:\n{output}");
}

fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_discovery_and_api_resources_as_on_a_real_server() {
    let k = Kubectl::start("discovery").await;
    let version: serde_json::Value =
        serde_json::from_str(&k.ok(&["version", "-o", "json"]).await).unwrap();
    assert_eq!(version["serverVersion"]["major"], "1");
    assert!(
        version["serverVersion"]["gitVersion"]
            .as_str()
            .unwrap()
            .starts_with("v1.36")
    );
    let names = k.ok(&["api-resources", "-o", "name"]).await;
    for r in [
        "pods",
        "nodes",
        "poddisruptionbudgets.policy",
        "rayservices.ray.io",
        "workloads.kueue.x-k8s.io",
        "leaderworkersets.leaderworkerset.x-k8s.io",
        "noderollouts.raygate.io",
    ] {
        assert!(names.lines().any(|l| l == r), "{r} missing from:\n{names}");
    }
    // short names resolve (kube-apiserver's `po`, Kueue's `cq`)
    k.ok(&["get", "po"]).await;
    assert!(k.ok(&["get", "cq"]).await.is_empty());
    let nodes = k.ok(&["get", "nodes"]).await;
    assert_eq!(
        rows(&nodes)[0],
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    );
    assert_eq!(nodes.lines().count(), 5, "{nodes}");
    assert_eq!(rows(&nodes)[1][1], "Ready");
    // the CRDs served are published as CustomResourceDefinitions, Established
    let established = k
        .ok(&[
            "get",
            "crd",
            "rayservices.ray.io",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ])
        .await;
    assert_eq!(established, "True");
    let missing = k.run(&["get", "widgets"]).await;
    assert!(!missing.ok);
    says(
        &missing.stderr,
        "the server doesn't have a resource type \"widgets\"",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_get_wait_describe_and_explain_a_rayservice() {
    let k = Kubectl::start("apply").await;
    let sample = std::fs::read_to_string(samples().join("ray-service.sample.yaml")).unwrap();
    assert_eq!(
        k.apply(&sample).await.trim(),
        "rayservice.ray.io/rayservice-sample created"
    );
    // the server defaulted fields inside `workerGroupSpecs` items (`numOfHosts`), and a JSON
    // merge patch replaces a list whole: kubectl sends it again, as against a real server, and
    // the spec, unchanged, keeps its generation (the KubeRay emulator writes the status meanwhile)
    assert_eq!(
        k.apply(&sample).await.trim(),
        "rayservice.ray.io/rayservice-sample configured"
    );
    let generation = [
        "get",
        "rayservice",
        "rayservice-sample",
        "-o",
        "jsonpath={.metadata.generation}",
    ];
    assert_eq!(k.ok(&generation).await, "1");
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.serviceStatus}=Running",
        "rayservice/rayservice-sample",
        "--timeout=60s",
    ])
    .await;
    let services = k.ok(&["get", "rayservices"]).await;
    assert_eq!(
        rows(&services)[0],
        ["NAME", "SERVICE", "STATUS", "NUM", "SERVE", "ENDPOINTS"]
    );
    assert_eq!(rows(&services)[1][..2], ["rayservice-sample", "Running"]);
    let heads = k
        .ok(&["get", "pods", "-l", "ray.io/node-type=head", "-o", "name"])
        .await;
    assert_eq!(heads.lines().count(), 1, "{heads}");
    let pods = k.ok(&["get", "pods"]).await;
    assert_eq!(
        rows(&pods)[0],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert!(rows(&pods)[1..].iter().all(|r| r[2] == "Running"), "{pods}");
    let name = k
        .ok(&[
            "get",
            "rayservice",
            "rayservice-sample",
            "-o",
            "jsonpath={.metadata.name}",
        ])
        .await;
    assert_eq!(name, "rayservice-sample");
    let described = k.ok(&["describe", "rayservice", "rayservice-sample"]).await;
    says(&described, "Name:         rayservice-sample");
    says(&described, "Kind:         RayService");
    // kubectl asks for `fieldValidation=Strict`: a misspelt field is refused, not dropped
    let typo = sample.replace("serveConfigV2:", "serveConfigV3:");
    let refused = k.run_with(&["apply", "-f", "-"], Some(&typo)).await;
    assert!(!refused.ok);
    // (an existing object: kubectl's merge patch, refused as the real server refuses it)
    says(
        &refused.stderr,
        "strict decoding error: unknown field \"spec.serveConfigV3\"",
    );
    says(&refused.stderr, "is invalid: patch: Invalid value");
    let explained = k.ok(&["explain", "rayservice.spec.rayClusterConfig"]).await;
    says(&explained, "headGroupSpec");
    let explained = k.ok(&["explain", "pod.spec.schedulingGates"]).await;
    says(&explained, "SchedulingGate");
    let all = k.ok(&["get", "all"]).await;
    says(&all, "raycluster.ray.io/rayservice-sample-");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_annotate_patch_and_server_side_apply_conflicts() {
    let k = Kubectl::start("patch").await;
    k.ok(&["label", "node", "ud0-n0", "team=a"]).await;
    assert_eq!(
        k.ok(&["get", "nodes", "-l", "team=a", "-o", "name"])
            .await
            .trim(),
        "node/ud0-n0"
    );
    let relabel = k.run(&["label", "node", "ud0-n0", "team=b"]).await;
    assert!(!relabel.ok);
    says(
        &relabel.stderr,
        "'team' already has a value (a), and --overwrite is false",
    );
    k.ok(&["annotate", "node", "ud0-n0", "note=x"]).await;
    k.ok(&[
        "patch",
        "node",
        "ud0-n0",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"m":"1"}}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "node",
        "ud0-n0",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/j","value":"2"}]"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "node",
        "ud0-n0",
        "-p",
        r#"{"metadata":{"labels":{"s":"3"}}}"#,
    ])
    .await;
    let labels = k
        .ok(&["get", "node", "ud0-n0", "-o", "jsonpath={.metadata.labels.m}{.metadata.labels.j}{.metadata.labels.s}{.metadata.annotations.note}"])
        .await;
    assert_eq!(labels, "123x");
    // a WorkloadPriorityClass `p` with `description`, server-side applied by `manager`
    let wpc = |description: &str| {
        format!(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {{name: p}}\nvalue: 10\ndescription: {description}\n"
        )
    };
    let ssa = |manager: &'static str, description: &'static str, force: bool| {
        let k = &k;
        let yaml = wpc(description);
        async move {
            let manager = format!("--field-manager={manager}");
            let mut args = vec!["apply", "--server-side", manager.as_str(), "-f", "-"];
            if force {
                args.push("--force-conflicts");
            }
            k.run_with(&args, Some(&yaml)).await
        }
    };
    let first = ssa("alice", "a", false).await;
    assert!(first.ok, "{}", first.stderr);
    assert_eq!(
        first.stdout.trim(),
        "workloadpriorityclass.kueue.x-k8s.io/p serverside-applied"
    );
    let conflict = ssa("bob", "b", false).await;
    assert!(!conflict.ok);
    for part in ["conflict with \"alice\"", ".description"] {
        says(&conflict.stderr, part);
    }
    let forced = ssa("bob", "b", true).await;
    assert!(forced.ok, "{}", forced.stderr);
    let description = ["get", "wpc", "p", "-o", "jsonpath={.description}"];
    assert_eq!(k.ok(&description).await, "b");
    // client-side apply twice: the second finds nothing to change
    for want in ["configured", "unchanged"] {
        let out = k.run_with(&["apply", "-f", "-"], Some(&wpc("c"))).await;
        assert!(out.ok, "{}", out.stderr);
        assert_eq!(
            out.stdout.trim(),
            format!("workloadpriorityclass.kueue.x-k8s.io/p {want}")
        );
    }
}

const REPLICASET: &str = "apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {kubernetes.io/hostname: ud1-n0}
      containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}}]
";

const PDB: &str = "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec: {minAvailable: 2, selector: {matchLabels: {app: web}}}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_and_drain_go_through_evictions_and_a_budget_blocks_them() {
    let k = Kubectl::start("drain").await;
    k.web_ready().await;
    k.apply(PDB).await;
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.currentHealthy}=2",
        "pdb/web",
        "--timeout=60s",
    ])
    .await;
    // the budget allows no disruption: kubectl drain retries the 429 until its timeout
    let drain = k
        .run(&["drain", "ud1-n0", "--ignore-daemonsets", "--timeout=3s"])
        .await;
    assert!(!drain.ok);
    says(&drain.stdout, "node/ud1-n0 cordoned");
    says(
        &drain.stderr,
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    says(&drain.stderr, "global timeout reached: 3s");
    let node = k.ok(&["get", "node", "ud1-n0"]).await;
    assert_eq!(rows(&node)[1][1], "Ready,SchedulingDisabled");
    k.ok(&["delete", "pdb", "web"]).await;
    let drained = k
        .ok(&["drain", "ud1-n0", "--ignore-daemonsets", "--timeout=60s"])
        .await;
    says(&drained, "evicted");
    says(&drained, "node/ud1-n0 drained");
    // `kubectl get -w`: the watch's events come as Table rows, the header once
    let watched = k
        .watching(
            &["get", "nodes", "ud1-n0", "-w", "--output-watch-events"],
            async {
                k.ok(&["uncordon", "ud1-n0"]).await;
            },
        )
        .await;
    let watched = rows(&watched);
    assert_eq!(
        watched[0],
        ["EVENT", "NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    );
    assert_eq!(
        watched[1][..3],
        ["ADDED", "ud1-n0", "Ready,SchedulingDisabled"]
    );
    assert_eq!(
        watched[2][..3],
        ["MODIFIED", "ud1-n0", "Ready"],
        "{watched:?}"
    );
    assert_eq!(watched.len(), 3, "{watched:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_cascades_as_asked() {
    let k = Kubectl::start("delete").await;
    k.web_ready().await;
    // orphan: the pods stay, their ownerReference gone
    k.ok(&["delete", "rs", "web", "--cascade=orphan"]).await;
    let owners = k
        .ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].metadata.ownerReferences}",
        ])
        .await;
    assert_eq!(owners, "", "orphaned pods still owned");
    assert_eq!(
        k.ok(&["get", "pods", "-l", "app=web", "-o", "name"])
            .await
            .lines()
            .count(),
        2
    );
    k.ok(&["delete", "pods", "-l", "app=web", "--wait", "--timeout=90s"])
        .await;
    // foreground: `--wait` returns once the ReplicaSet is gone, which is after its pods
    k.web_ready().await;
    k.ok(&[
        "delete",
        "rs",
        "web",
        "--cascade=foreground",
        "--wait",
        "--timeout=90s",
    ])
    .await;
    assert!(k.ok(&["get", "rs", "-o", "name"]).await.is_empty());
    assert!(
        k.ok(&["get", "pods", "-l", "app=web", "-o", "name"])
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_bodies_of_typed_clients_are_read_or_refused_by_name() {
    let k = Kubectl::start("protobuf").await;
    // `kubectl create namespace` sends a protobuf Namespace
    assert_eq!(
        k.ok(&["create", "namespace", "demo"]).await.trim(),
        "namespace/demo created"
    );
    let ns = k.ok(&["get", "ns", "demo"]).await;
    assert_eq!(rows(&ns)[1][..2], ["demo", "Active"]);
    // a kind the sim does not read from protobuf is a 415 naming it (sim/README.md lists it)
    let refused = k.run(&["create", "deployment", "d", "--image=nginx"]).await;
    assert!(!refused.ok);
    says(&refused.stderr, "reads no protobuf Deployment (apps/v1)");
}
