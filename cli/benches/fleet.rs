//! raygate at fleet scale, on the test CRD API server (`apiextensions-apiserver` + etcd, built by
//! `hack/install-test-apiserver.sh`). Prints one table row per size; asserts nothing.
//!
//! Per size N: N opted-in RayServices, each with one serving child RayCluster as KubeRay leaves
//! it (the status names it active, the KubeRay labels and owner reference on it), spread over
//! N/10 ClusterQueues (at most 1,000) in cohorts of 10 with one LocalQueue each. Then the
//! `raygate controller` binary (built-in admission, release build of this package) starts cold in
//! a process of its own, and the benchmark reads from outside it:
//! - **settle**: from the process start until every RayService is settled: its template gated
//!   (`spec.rayClusterConfig.suspend=true`), its running child recorded as released, and its slice
//!   admitted (read from the benchmark's own watches);
//! - **settle CPU**: the controller's user + system CPU until then (`/proc/PID/stat`);
//! - **quiet CPU**: its CPU over a quiet minute after settling, as a share of one core;
//! - **requests/min at rest**: the API server's `apiserver_request_total` over that minute (the
//!   benchmark makes no request meanwhile: its watches are open already);
//! - **release latency**: K upgrades made one after another while the fleet is cached (the
//!   benchmark plays KubeRay: it names a pending child in the status, then creates it suspended):
//!   from the child's creation to its unsuspend as the benchmark's watch sees it, p50 / p99;
//! - **peak RSS**: the controller's `VmHWM`.
//!
//! `cargo bench -p raygate-cli --bench fleet` runs 1,000 and 10,000; `FLEET_SIZES=1000,30000`
//! picks the sizes, `FLEET_UPGRADES` the number of upgrades (default 20). Each size runs in a
//! process of its own (a fresh API server).

use std::collections::{BTreeMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use raygate::types::kueue::Workload;
use raygate::types::ray::{RayCluster, RayService};
use raygate_testing::apiserver::{TestServer, namespace};
use serde_json::{Value, json};

/// Requests the setup keeps in flight.
const PARALLEL: usize = 48;

fn main() {
    let sizes: Vec<usize> = std::env::var("FLEET_SIZES")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    if let Ok(n) = std::env::var("FLEET_N") {
        let n = n.parse().expect("FLEET_N is a number");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(run(n));
        return;
    }
    println!(
        "| RayServices | ClusterQueues | settle | controller CPU to settle | peak RSS | quiet CPU | requests/min at rest | release p50 / p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let exe = std::env::current_exe().expect("the benchmark's path");
    for n in sizes {
        let status = Command::new(&exe)
            .env("FLEET_N", n.to_string())
            .status()
            .expect("the benchmark runs");
        if !status.success() {
            eprintln!("size {n} failed: {status}");
        }
    }
}

/// What the benchmark's watches see.
#[derive(Default)]
struct Seen {
    /// RayServices settled, by name.
    settled_services: HashSet<String>,
    /// RayServices with an admitted slice, by name.
    admitted: HashSet<String>,
    /// Unsuspends of upgraded children: name → when seen.
    released: BTreeMap<String, Instant>,
}

async fn run(n: usize) {
    let server = TestServer::get();
    let client = server.client().await;
    let ns = namespace("fleet");
    let queues = (n / 10).clamp(1, 1000);
    let t = Instant::now();
    setup(&client, &ns, n, queues).await;
    eprintln!("{n}: set up in {:.1} s", t.elapsed().as_secs_f64());

    let seen = Arc::new(Mutex::new(Seen::default()));
    watch(&client, &ns, seen.clone());
    let port = free_port();
    let started = Instant::now();
    let mut controller = spawn_controller(&server.kubeconfig, port);
    let pid = controller.id();
    let settled = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let s = seen.lock().expect("seen");
        if s.settled_services.len() >= n && s.admitted.len() >= n {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(3600) {
            eprintln!(
                "{n}: not settled after an hour: {} settled, {} admitted",
                s.settled_services.len(),
                s.admitted.len()
            );
            break started.elapsed();
        }
    };
    let settle_cpu = cpu_seconds(pid);
    // a quiet minute
    let requests_before = request_total(&client).await;
    let cpu_before = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let quiet = (cpu_seconds(pid) - cpu_before) / 60.0;
    let requests = requests_between(requests_before, request_total(&client).await);
    let upgrades: usize = std::env::var("FLEET_UPGRADES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let latencies = upgrade(&client, &ns, n, upgrades, &seen).await;
    let rss = peak_rss_mib(pid);
    let _ = controller.kill();
    let _ = controller.wait();
    println!(
        "| {n} | {queues} | {:.1} s | {settle_cpu:.1} s | {rss} MiB | {:.1} % of a core | {} | {} |",
        settled.as_secs_f64(),
        quiet * 100.0,
        requests.map_or("n/a".into(), |r| format!("{r:.0}")),
        percentiles(latencies),
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn spawn_controller(kubeconfig: &std::path::Path, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_raygate"))
        .args([
            "controller",
            "--node-rollouts=false",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("raygate controller starts")
}

/// The process's user + system CPU seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command name (which may hold spaces) start after the last ')'
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the state field
    (ticks(11) + ticks(12)) / 100.0
}

fn peak_rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// The API server's `apiserver_request_total` by series (`None` if it does not say).
async fn request_total(client: &kube::Client) -> Option<BTreeMap<String, f64>> {
    let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(req).await.ok()?;
    Some(
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter_map(|l| {
                let (series, v) = l.rsplit_once(' ')?;
                Some((series.to_string(), v.parse::<f64>().ok()?))
            })
            .collect(),
    )
}

/// The requests made between two readings of [`request_total`]; the busiest series to stderr.
fn requests_between(
    before: Option<BTreeMap<String, f64>>,
    after: Option<BTreeMap<String, f64>>,
) -> Option<f64> {
    let (before, after) = (before?, after?);
    let mut deltas: Vec<(f64, &String)> = after
        .iter()
        .map(|(k, v)| (v - before.get(k).copied().unwrap_or(0.0), k))
        .filter(|(d, _)| *d > 0.0)
        .collect();
    deltas.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (d, k) in deltas.iter().take(6) {
        eprintln!("  {d:>6.0} {k}");
    }
    Some(deltas.iter().map(|(d, _)| d).sum())
}

fn percentiles(mut v: Vec<Duration>) -> String {
    if v.is_empty() {
        return "n/a".into();
    }
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0;
    format!("{:.0} / {:.0} ms", at(0.5), at(0.99))
}

fn pod(cpu: &str) -> Value {
    json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.52.0",
        "resources": {"requests": {"cpu": cpu}}}]}})
}

fn cluster_spec() -> Value {
    json!({"rayVersion": "2.52.0",
        "headGroupSpec": {"rayStartParams": {}, "template": pod("1")},
        "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
            "rayStartParams": {}, "template": pod("1")}]})
}

async fn apply(client: &kube::Client, v: Value) {
    raygate::client::dev::apply(client, &v.to_string(), "fleet-bench", None)
        .await
        .unwrap_or_else(|e| panic!("applying {v}: {e}"));
}

/// The flavor, the ClusterQueues in cohorts of 10, a LocalQueue each, and `n` RayServices each
/// with its serving child.
async fn setup(client: &kube::Client, ns: &str, n: usize, queues: usize) {
    apply(
        client,
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "fleet"}}),
    )
    .await;
    // room for every service (2 CPU) and an upgrade of each
    let per_queue = (n.div_ceil(queues) * 4).to_string();
    futures::stream::iter(0..queues)
        .for_each_concurrent(PARALLEL, |q| {
            let per_queue = per_queue.clone();
            async move {
                apply(client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                    "metadata": {"name": format!("fleet-{q}")},
                    "spec": {"cohortName": format!("cohort-{}", q / 10),
                        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "fleet",
                            "resources": [{"name": "cpu", "nominalQuota": per_queue}]}]}]}}))
                .await;
                apply(client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                    "metadata": {"name": format!("lq-{q}"), "namespace": ns},
                    "spec": {"clusterQueue": format!("fleet-{q}")}}))
                .await;
            }
        })
        .await;
    futures::stream::iter(0..n)
        .for_each_concurrent(PARALLEL, |i| service(client, ns, i, queues))
        .await;
}

/// RayService `svc-i` in `lq-(i % queues)` with its serving child, as KubeRay leaves them.
async fn service(client: &kube::Client, ns: &str, i: usize, queues: usize) {
    let name = format!("svc-{i}");
    let services: Api<RayService> = Api::namespaced(client.clone(), ns);
    let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"raygate.io/queue-name": format!("lq-{}", i % queues)}},
        "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": cluster_spec()}});
    let created = services
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).expect("a RayService"),
        )
        .await
        .expect("RayService created");
    let child = format!("{name}-a{:04}", i % 10_000);
    create_child(
        client,
        ns,
        &name,
        created.metadata.uid.as_deref(),
        &child,
        false,
    )
    .await;
    let status = json!({"status": {"activeServiceStatus": {"rayClusterName": child},
        "serviceStatus": "Running"}});
    services
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("RayService status");
}

async fn create_child(
    client: &kube::Client,
    ns: &str,
    service: &str,
    uid: Option<&str>,
    name: &str,
    suspend: bool,
) {
    let mut spec = cluster_spec();
    spec["suspend"] = json!(suspend);
    let child = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"ray.io/originated-from-cr-name": service,
                "ray.io/originated-from-crd": "RayService", "fleet-bench/upgrade": suspend.to_string()},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": service,
                "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec});
    Api::<RayCluster>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(child).expect("a RayCluster"),
        )
        .await
        .expect("RayCluster created");
}

/// The benchmark's own watches: RayServices (settled), Workloads (admitted), upgraded children
/// (released).
fn watch(client: &kube::Client, ns: &str, seen: Arc<Mutex<Seen>>) {
    let s = seen.clone();
    let services: Api<RayService> = Api::namespaced(client.clone(), ns);
    tokio::spawn(
        watcher(services, watcher::Config::default())
            .applied_objects()
            .try_for_each(move |svc| {
                let gated = svc.spec.ray_cluster_config.suspend == Some(true);
                let released = svc
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(raygate::gate::RELEASED_ANNOTATION));
                if gated && released {
                    let name = svc.metadata.name.clone().unwrap_or_default();
                    s.lock().expect("seen").settled_services.insert(name);
                }
                futures::future::ready(Ok(()))
            }),
    );
    let s = seen.clone();
    let workloads: Api<Workload> = Api::namespaced(client.clone(), ns);
    tokio::spawn(
        watcher(workloads, watcher::Config::default())
            .applied_objects()
            .try_for_each(move |w| {
                if raygate::workload::is_admitted(w.status.as_ref()) {
                    let owner = w
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("raygate.io/rayservice"))
                        .cloned()
                        .unwrap_or_default();
                    s.lock().expect("seen").admitted.insert(owner);
                }
                futures::future::ready(Ok(()))
            }),
    );
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), ns);
    tokio::spawn(
        watcher(
            clusters,
            watcher::Config::default().labels("fleet-bench/upgrade=true"),
        )
        .applied_objects()
        .try_for_each(move |c| {
            if c.spec.suspend == Some(false) {
                let name = c.metadata.name.clone().unwrap_or_default();
                seen.lock()
                    .expect("seen")
                    .released
                    .entry(name)
                    .or_insert_with(Instant::now);
            }
            futures::future::ready(Ok(()))
        }),
    );
}

/// `k` upgrades, one after another: KubeRay names a pending child, then creates it suspended;
/// the time from its creation to its unsuspend.
async fn upgrade(
    client: &kube::Client,
    ns: &str,
    n: usize,
    k: usize,
    seen: &Arc<Mutex<Seen>>,
) -> Vec<Duration> {
    let services: Api<RayService> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for j in 0..k.min(n) {
        let i = j * (n / k.min(n).max(1));
        let name = format!("svc-{i}");
        let pending = format!("{name}-p{:04}", i % 10_000);
        let status = json!({"status": {"pendingServiceStatus": {"rayClusterName": pending}}});
        let svc = services
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("pending named");
        let t0 = Instant::now();
        create_child(
            client,
            ns,
            &name,
            svc.metadata.uid.as_deref(),
            &pending,
            true,
        )
        .await;
        loop {
            if let Some(at) = seen.lock().expect("seen").released.get(&pending) {
                out.push(at.saturating_duration_since(t0));
                break;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                eprintln!("{pending} not released after 120 s");
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    out
}
