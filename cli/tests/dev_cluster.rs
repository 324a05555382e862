//! The README's "local cluster for kubectl" steps as a user runs them: the built `raygate dev
//! cluster` serving over HTTPS, the built `raygate controller` against its kubeconfig, kubectl
//! applying `config/samples` (a queue and an opted-in RayService), and the service running on a
//! slice raygate admitted. kubectl comes from `$RAYGATE_KUBECTL` or `PATH` (the test fails
//! without it).

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_kubectl(dir: &Path, args: &[&str]) -> Output {
    Command::new(raygate_testing::tools::kubectl())
        .args(args)
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env("KUBECACHEDIR", dir.join("cache"))
        .env("HOME", dir)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("running kubectl")
}

fn eventually(what: &str, mut f: impl FnMut() -> Option<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn the_readme_s_local_cluster_runs_the_samples_under_raygate_s_controller() {
    let dir = std::env::temp_dir().join(format!("raygate-dev-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let _cluster = Killed(
        Command::new(env!("CARGO_BIN_EXE_raygate"))
            .args([
                "dev",
                "cluster",
                "--listen",
                "127.0.0.1:0",
                "--kubeconfig-out",
            ])
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("raygate dev cluster"),
    );
    eventually("the kubeconfig", || {
        std::fs::read_to_string(&kubeconfig)
            .ok()
            .filter(|k| k.contains("current-context"))
    });
    let _controller = Killed(
        Command::new(env!("CARGO_BIN_EXE_raygate"))
            .args(["controller", "--metrics-addr", ""])
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("raygate controller"),
    );
    let nodes = run_kubectl(&dir, &["get", "nodes", "-o", "name"]);
    assert!(nodes.status.success(), "{nodes:?}");
    assert_eq!(String::from_utf8_lossy(&nodes.stdout).lines().count(), 16);
    let applied = run_kubectl(&dir, &["apply", "-k", "config/samples"]);
    assert!(applied.status.success(), "{applied:?}");
    // raygate's slice, admitted by its built-in loop, and the service serving from its child
    let state = |jsonpath: &str, kind: &str| {
        let out = run_kubectl(&dir, &["get", kind, "-n", "serving", "-o", jsonpath]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    eventually("raygate's slice admitted", || {
        let admitted = state(
            "jsonpath={.items[*].status.conditions[?(@.type=='Admitted')].status}",
            "workloads",
        );
        (admitted == "True").then_some(admitted)
    });
    eventually("the RayService serving", || {
        let status = state("jsonpath={.items[0].status.serviceStatus}", "rayservices");
        (status == "Running").then_some(status)
    });
    let pods = state("jsonpath={.items[*].status.phase}", "pods");
    assert!(
        !pods.is_empty() && pods.split(' ').all(|p| p == "Running"),
        "{pods}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
