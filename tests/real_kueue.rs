//! raygate's kueue mode end to end against the real Kueue v0.19.2 manager: Kueue's own binary
//! (built from its vendored source by `hack/install-kueue.sh`, run as a process of its own) and
//! raygate's controller (`--admission kueue`, in-process) both talk over HTTPS to the simulated
//! cluster served on localhost (`raygate_sim::local`, with Kueue's own CRDs), where the KubeRay
//! v1.7 emulator, the scheduler and kubelets run real pods. Kueue admits; raygate only creates
//! the slices and reads their conditions. Every assertion reads the objects in the server.
//!
//! What Kueue runs without (written in `docs/operations.md`, "raygate with a real Kueue"): its
//! admission webhooks, which the simulated cluster does not call (Kueue's defaulting and
//! validation are then only the CRDs' own), the visibility server, and its internal certificate
//! management (its webhook and metrics servers get a self-signed certificate; the metrics one at
//! the fixed `/etc/kueue/metrics/certs`, which a private mount namespace provides: `unshare`, as
//! root or, for another user, in a user namespace of its own).
//!
//! Needs the Kueue binary: `hack/test.sh` installs it; without it these tests fail (they are
//! not skipped).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use raygate::admission::AdmissionMode;
use raygate::controller::{Config, run_with};
use raygate::runtime::SystemClock;
use raygate::types::kueue::{ClusterQueue, Workload};
use raygate::types::ray::{RayCluster, RayService};
use raygate_sim::local::{Config as LocalConfig, Local};
use raygate_testing::{PodTemplateBuilder, ray_pod};
use serde_json::{Value, json};
use tokio::sync::oneshot;

const NS: &str = "default";
/// One test at a time: each runs a cluster, a Kueue manager and raygate on the 2 cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const WAIT: Duration = Duration::from_secs(120);
const RAY_IMAGE: &str = "rayproject/ray:2.51.0";

fn cache_dir() -> PathBuf {
    raygate_testing::tools::cache_dir().join("kueue")
}

/// The Kueue manager process; killed when dropped.
struct KueueManager(Child);

impl Drop for KueueManager {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // keep Kueue's log and configuration of a failed test
            self.dir.disable_cleanup(true);
            eprintln!(
                "Kueue's log and configuration: {}",
                self.dir.path().display()
            );
        }
    }
}

/// Kueue's configuration: no leader election, no internal certificate management, its webhook
/// and health servers on ports of their own, its job integrations for Jobs and Ray (raygate's
/// opt-in label is one no integration acts on, so they stay on as in a production install).
fn kueue_config(dir: &std::path::Path, port: u16, extra: &str) -> String {
    format!(
        "apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:{health}
metrics:
  bindAddress: \"0\"
webhook:
  host: 127.0.0.1
  port: {port}
  certDir: {certs}
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks: [batch/job, ray.io/raycluster, ray.io/rayservice]
{extra}",
        health = port + 1,
        certs = dir.join("certs").display()
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts the Kueue manager against `kubeconfig`, in a private mount namespace whose `/etc` is a
/// tmpfs holding only the metrics certificate Kueue reads from a fixed path.
fn start_kueue(dir: &std::path::Path, kubeconfig: &str, extra_config: &str) -> KueueManager {
    let bin = cache_dir().join("bin/kueue-manager");
    assert!(
        bin.is_file(),
        "no {}: run hack/install-kueue.sh (hack/test.sh does)",
        bin.display()
    );
    let (cert, key) = raygate_sim::server::https::self_signed_pem().expect("a certificate");
    std::fs::create_dir_all(dir.join("certs")).unwrap();
    std::fs::write(dir.join("certs/tls.crt"), cert).unwrap();
    std::fs::write(dir.join("certs/tls.key"), key).unwrap();
    std::fs::write(dir.join("kubeconfig"), kubeconfig).unwrap();
    std::fs::write(
        dir.join("config.yaml"),
        kueue_config(dir, free_port(), extra_config),
    )
    .unwrap();
    let script = "mount -t tmpfs tmpfs /etc && mkdir -p /etc/kueue/metrics/certs \
        && cp \"$1\"/certs/tls.crt \"$1\"/certs/tls.key /etc/kueue/metrics/certs/ \
        && exec \"$2\" --config \"$1\"/config.yaml --feature-gates=VisibilityOnDemand=false";
    let log = std::fs::File::create(dir.join("kueue.log")).unwrap();
    let mut unshare = Command::new("unshare");
    // as another user than root: a user namespace of its own maps it to root, which may mount
    if !running_as_root() {
        unshare.arg("--map-root-user");
    }
    let child = unshare
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(dir)
        .arg(&bin)
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("starting the Kueue manager under unshare");
    KueueManager(child)
}

/// Whether this process's effective user is root (`/proc/self/status`, `Uid:`).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let uids = s.lines().find(|l| l.starts_with("Uid:"))?.to_string();
            uids.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

struct Env {
    local: Local,
    client: kube::Client,
    dir: tempfile::TempDir,
    _kueue: KueueManager,
    controller: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl Env {
    /// The cluster, Kueue (its configuration plus `extra_config`, YAML) and raygate.
    async fn new(tag: &str, extra_config: &str) -> Env {
        let crds = std::fs::read_dir(cache_dir().join("crds"))
            .expect("Kueue's CRDs: run hack/install-kueue.sh")
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect();
        let local = Local::start(&LocalConfig {
            domains: 1,
            nodes_per_domain: 2,
            extra_crds: crds,
            ..LocalConfig::default()
        })
        .await
        .expect("the local cluster");
        let kubeconfig = local.kubeconfig();
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&kubeconfig).unwrap(),
            &KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let dir = tempfile::Builder::new()
            .prefix(&format!("raygate-real-kueue-{tag}-"))
            .tempdir()
            .unwrap();
        local.sim.ensure_namespace("kueue-system");
        let kueue = start_kueue(dir.path(), &kubeconfig, extra_config);
        let mut env = Env {
            local,
            client,
            dir,
            _kueue: kueue,
            controller: None,
        };
        env.start_controller();
        env
    }

    /// raygate's controller in kueue mode over HTTPS, as against any cluster.
    fn start_controller(&mut self) {
        let (tx, rx) = oneshot::channel::<()>();
        let client = self.client.clone();
        let config = Config {
            admission: AdmissionMode::Kueue,
            admission_resync: Duration::from_millis(500),
            ..Default::default()
        };
        let handle = tokio::spawn(async move {
            run_with(
                client,
                config,
                Arc::new(SystemClock::default()),
                async move {
                    let _ = rx.await;
                },
            )
            .await
            .expect("controller runs");
        });
        self.controller = Some((tx, handle));
    }

    fn kueue_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kueue.log")).unwrap_or_default()
    }

    async fn apply(&self, obj: Value) {
        raygate::client::dev::apply(&self.client, &obj.to_string(), "test", None)
            .await
            .unwrap_or_else(|e| panic!("applying {obj}: {e}"));
    }

    /// ResourceFlavor `f`, ClusterQueue `cq` with `cpu` nominal quota and `extra` spec, LocalQueue
    /// `lq`.
    async fn queues(&self, cpu: &str, extra: Value) {
        self.apply(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}})).await;
        let mut spec = json!({"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"],
            "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]});
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        self.apply(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec})).await;
        self.apply(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}})).await;
    }

    async fn set_quota(&self, cpu: &str) {
        Api::<ClusterQueue>::all(self.client.clone())
            .patch(
                "cq",
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(json!([{"op": "replace",
                    "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota", "value": cpu}])).unwrap()),
            )
            .await
            .expect("quota changed");
    }

    fn services(&self) -> Api<RayService> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn clusters(&self) -> Api<RayCluster> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// RayService `name` opted in to `lq` with raygate's own label (and `labels`): a 1-CPU head
    /// and one 1-CPU worker.
    async fn create_service(&self, name: &str, labels: Value) {
        let mut all = json!({"raygate.io/queue-name": "lq"});
        for (k, v) in labels.as_object().into_iter().flatten() {
            all[k] = v.clone();
        }
        let svc = json!({
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "namespace": NS, "labels": all},
            "spec": {"rayClusterDeletionDelaySeconds": 1, "serveConfigV2": "applications: []",
                "rayClusterConfig": {"rayVersion": "2.51.0",
                    "headGroupSpec": {"rayStartParams": {}, "template": template(false)},
                    "workerGroupSpecs": [worker_group(false)]}}
        });
        self.services()
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).unwrap(),
            )
            .await
            .expect("RayService created");
    }

    async fn active_child(&self, service: &str) -> Option<String> {
        let svc = self.services().get(service).await.ok()?;
        svc.status?.active_service_status?.ray_cluster_name
    }

    async fn pending_child(&self, service: &str) -> Option<RayCluster> {
        let svc = self.services().get(service).await.ok()?;
        let name = svc.status?.pending_service_status?.ray_cluster_name?;
        self.clusters().get_opt(&name).await.ok()?
    }

    async fn slices(&self, service: &str) -> Vec<Workload> {
        Api::<Workload>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default().labels(&format!("raygate.io/rayservice={service}")))
            .await
            .expect("list slices")
            .items
    }

    async fn live_slices(&self, service: &str) -> Vec<Workload> {
        self.slices(service)
            .await
            .into_iter()
            .filter(|w| !raygate::workload::is_finished(w.status.as_ref()))
            .collect()
    }

    /// Kueue's reservation of `cq` for cpu, as Kueue writes it in the queue's status.
    async fn cq_cpu(&self) -> Option<String> {
        let cq = Api::<ClusterQueue>::all(self.client.clone())
            .get("cq")
            .await
            .ok()?;
        let usage = cq.status?.flavors_reservation;
        usage
            .first()?
            .resources
            .iter()
            .find(|r| r.name == "cpu")?
            .total
            .as_ref()
            .map(|q| q.0.clone())
    }

    async fn wait_running(&self, service: &str) -> String {
        self.until("the first child runs and is active", || async {
            let active = self.active_child(service).await?;
            let child = self.clusters().get(&active).await.ok()?;
            (child.spec.suspend != Some(true)).then_some(active)
        })
        .await
    }

    /// Polls `f` until it gives a value; past [`WAIT`], fails with what the cluster holds.
    async fn until<T, F, Fut>(&self, what: &str, mut f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(v) = f().await {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for: {what}\n{}", self.dump().await);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The RayServices', RayClusters' and Workloads' states, for a failure's message.
    async fn dump(&self) -> String {
        let mut out = String::new();
        for s in self
            .services()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            out += &format!(
                "RayService {:?} labels {:?} status {:?}\n",
                s.metadata.name, s.metadata.labels, s.status
            );
        }
        for c in self
            .clusters()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            out += &format!(
                "RayCluster {:?} suspend {:?} status {:?}\n",
                c.metadata.name,
                c.spec.suspend,
                c.status.map(|s| s.state)
            );
        }
        let workloads = Api::<Workload>::namespaced(self.client.clone(), NS);
        for w in workloads
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            out += &format!(
                "Workload {:?} active {:?} status {:?}\n",
                w.metadata.name, w.spec.active, w.status
            );
        }
        out
    }

    async fn stop(mut self) {
        if let Some((tx, handle)) = self.controller.take() {
            let _ = tx.send(());
            let _ = handle.await;
        }
        let _ = &self.local;
    }
}

/// A Ray pod template of 1 CPU; `never_ready`: its readiness probe never passes (the sim
/// kubelet's `fail-readiness` annotation), as a bad new image's would not.
fn template(never_ready: bool) -> Value {
    let mut template = serde_json::to_value(ray_pod("1").image(RAY_IMAGE)).unwrap();
    if never_ready {
        template["metadata"]["annotations"] = json!({"sim.raygate.io/fail-readiness": "true"});
        template["spec"]["containers"][0]["readinessProbe"] =
            json!({"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 1});
    }
    template
}

/// The service's one worker group (1 replica of 1 CPU).
fn worker_group(never_ready: bool) -> Value {
    json!({"groupName": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 10,
        "rayStartParams": {}, "template": template(never_ready)})
}

impl Env {
    /// Upgrades `service` to pods that never get ready (head and workers: KubeRay promotes a
    /// cluster whose head is ready); waits until Kueue admitted the upgrade's slice and raygate
    /// released the pending child; its name.
    async fn release_bad_upgrade(&self, service: &str) -> String {
        let bad = json!({"spec": {"rayClusterConfig": {
            "headGroupSpec": {"rayStartParams": {}, "template": template(true)},
            "workerGroupSpecs": [worker_group(true)]}}});
        self.services()
            .patch(service, &PatchParams::default(), &Patch::Merge(bad))
            .await
            .expect("RayService patched");
        self.until("the upgrade is admitted and released", || async {
            let c = self.pending_child(service).await?;
            (c.spec.suspend != Some(true)).then(|| c.metadata.name.clone().unwrap_or_default())
        })
        .await
    }

    /// Whether `service` still serves from `active`: unsuspended, not being deleted, and, counted
    /// from its members rather than KubeRay's status, its head and worker pods all Running and
    /// Ready.
    async fn still_serving(&self, service: &str, active: &str) -> bool {
        let Ok(svc) = self.services().get(service).await else {
            return false;
        };
        let pods = Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default().labels(&format!("ray.io/cluster={active}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let ready = |p: &Pod| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().is_some_and(|s| {
                    s.phase.as_deref() == Some("Running")
                        && s.conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                })
        };
        if pods.len() < 2 || !pods.iter().all(ready) {
            return false;
        }
        let child = self.clusters().get_opt(active).await.ok().flatten();
        svc.spec.suspend != Some(true)
            && svc
                .status
                .and_then(|s| s.active_service_status)
                .and_then(|a| a.ray_cluster_name)
                .as_deref()
                == Some(active)
            && child.is_some_and(|c| {
                c.spec.suspend != Some(true) && c.metadata.deletion_timestamp.is_none()
            })
    }

    /// Kueue's reserved CPU of `cq`, as a number (0 when none).
    async fn cq_cpu_f64(&self) -> f64 {
        self.cq_cpu()
            .await
            .unwrap_or_default()
            .parse()
            .unwrap_or(0.0)
    }
}

fn condition<'a>(
    w: &'a Workload,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

fn admitted_by_kueue(w: &Workload) -> bool {
    condition(w, "Admitted").is_some_and(|c| c.status == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_upgrade_is_released_when_kueue_admits_it_then_promoted_and_the_old_slice_finishes()
{
    let _serial = SERIAL.lock().await;
    let env = Env::new("held", "").await;
    env.queues("3", json!({})).await;
    env.create_service("svc", json!({})).await;
    let first = env.wait_running("svc").await;
    let admitted = env
        .until(
            "Kueue admits the first slice and reserves 2 CPU",
            || async {
                let live = env.live_slices("svc").await;
                (live.len() == 1
                    && admitted_by_kueue(&live[0])
                    && env.cq_cpu().await.as_deref() == Some("2"))
                .then(|| live[0].metadata.name.clone().unwrap_or_default())
            },
        )
        .await;

    // an upgrade that does not fit 3 CPU: KubeRay's pending child is held, Kueue leaves the
    // replacement slice pending with its own message
    env.services()
        .patch(
            "svc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.0"}}})),
        )
        .await
        .unwrap();
    let pending = env
        .until("a held pending child", || async {
            let child = env.pending_child("svc").await?;
            (child.spec.suspend == Some(true)).then_some(child)
        })
        .await;
    let message = env
        .until("Kueue leaves the replacement slice pending", || async {
            let live = env.live_slices("svc").await;
            let replacement = live
                .iter()
                .find(|w| w.metadata.name.as_deref() != Some(admitted.as_str()))?;
            let c = condition(replacement, "QuotaReserved")?;
            (c.status == "False").then(|| c.message.clone())
        })
        .await;
    assert!(
        message.contains("insufficient unused quota for cpu"),
        "Kueue's message: {message}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let name = pending.metadata.name.clone().unwrap();
    assert_eq!(
        env.clusters().get(&name).await.unwrap().spec.suspend,
        Some(true),
        "held while Kueue has not admitted"
    );

    // a ClusterQueue edit frees quota: Kueue admits, raygate releases, KubeRay promotes
    env.set_quota("4").await;
    env.until("the pending child is released and promoted", || async {
        (env.active_child("svc").await? == name).then_some(())
    })
    .await;
    env.until("the old child is deleted", || async {
        env.clusters()
            .get_opt(&first)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    env.until(
        "one live slice, admitted by Kueue, and 2 CPU reserved again",
        || async {
            let live = env.live_slices("svc").await;
            (live.len() == 1
                && admitted_by_kueue(&live[0])
                && env.cq_cpu().await.as_deref() == Some("2"))
            .then_some(())
        },
    )
    .await;
    let finished = env
        .slices("svc")
        .await
        .into_iter()
        .filter(|w| raygate::workload::is_finished(w.status.as_ref()))
        .count();
    assert!(finished >= 1, "the superseded slices are finished");
    let log = env.kueue_log();
    assert!(log.contains("Starting workers"), "Kueue ran:\n{log}");
    env.stop().await;
}

/// Kueue's `waitForPodsReady` (15 s here: the simulated pods start in about 7) evicts an admitted Workload whose `PodsReady` stays
/// `False`. raygate writes `PodsReady` on its slices; during an upgrade it follows the serving
/// child alone, so an upgrade that never gets Ready never makes Kueue evict the slice the serving
/// child depends on (`src/gate/pods_ready.rs`): checked here against Kueue's own timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_s_wait_for_pods_ready_never_evicts_the_serving_child_for_an_upgrade_that_never_gets_ready()
 {
    let _serial = SERIAL.lock().await;
    let env = Env::new("podsready", "waitForPodsReady:\n  timeout: 15s\n").await;
    env.queues("4", json!({})).await;
    env.create_service("svc", json!({})).await;
    let active = env.wait_running("svc").await;
    env.until("Kueue sees the first slice's pods ready", || async {
        let live = env.live_slices("svc").await;
        (live.len() == 1 && condition(&live[0], "PodsReady").is_some_and(|c| c.status == "True"))
            .then_some(())
    })
    .await;
    let pending = env.release_bad_upgrade("svc").await;
    // well past Kueue's timeout: no slice evicted, the service serving from its first child
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if !env.still_serving("svc", &active).await {
            panic!("the service stopped serving:\n{}", env.dump().await);
        }
        for w in env.slices("svc").await {
            assert!(
                condition(&w, "Evicted").is_none_or(|c| c.status != "True"),
                "Kueue evicted {:?}: {:?}",
                w.metadata.name,
                condition(&w, "Evicted")
            );
        }
    }
    let child = env.clusters().get(&pending).await.unwrap();
    assert_ne!(
        child.spec.suspend,
        Some(true),
        "the upgrade keeps its admission and runs"
    );
    assert!(env.cq_cpu_f64().await <= 4.0);
    env.stop().await;
}

/// A higher-priority RayService preempts, through Kueue's own preemption
/// (`withinClusterQueue: LowerPriority`), the upgrade of a lower-priority one: the upgrade is
/// held again and the lower-priority service keeps serving from its running child; the queue's
/// reservation never exceeds its quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_s_preemption_of_an_upgrade_holds_the_upgrade_and_the_service_keeps_serving() {
    let _serial = SERIAL.lock().await;
    let env = Env::new("preempt", "").await;
    env.queues(
        "4",
        json!({"preemption": {"withinClusterQueue": "LowerPriority"}}),
    )
    .await;
    for (name, value) in [("low", 10), ("high", 100)] {
        env.apply(
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value}),
        )
        .await;
    }
    let priority = |p: &str| json!({"kueue.x-k8s.io/priority-class": p});
    env.create_service("low", priority("low")).await;
    let active = env.wait_running("low").await;
    let pending = env.release_bad_upgrade("low").await;

    // a higher-priority service needs 2 of the 4 CPU the upgrade's slice holds
    env.create_service("high", priority("high")).await;
    env.until("the upgrade is held again", || async {
        let p = env.clusters().get(&pending).await.ok()?;
        (p.spec.suspend == Some(true)).then_some(())
    })
    .await;
    env.wait_running("high").await;
    for _ in 0..10 {
        assert!(
            env.still_serving("low", &active).await,
            "the low-priority service stopped serving"
        );
        let cpu = env.cq_cpu_f64().await;
        assert!(cpu <= 4.0, "{cpu} CPU reserved on a 4-CPU queue");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    env.stop().await;
}

/// Kueue's `waitForPodsReady` shorter than the pods take to start (5 s; they need about 7): Kueue
/// evicts each slice, raygate queues the next only after Kueue's requeuing backoff
/// (`status.requeueState.requeueAt`) and carries its requeue count, so Kueue's
/// `backoffLimitCount` (2 here) deactivates the third, as it would a job's Workload, instead of
/// raygate replacing evicted slices without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_s_requeuing_backoff_and_limit_hold_across_raygate_s_slices() {
    let _serial = SERIAL.lock().await;
    let config = "waitForPodsReady:\n  timeout: 5s\n  requeuingStrategy:\n    timestamp: Eviction\n    backoffBaseSeconds: 1\n    backoffLimitCount: 2\n";
    let env = Env::new("backoff", config).await;
    env.queues("4", json!({})).await;
    env.create_service("svc", json!({})).await;
    let deactivated = env
        .until(
            "Kueue deactivates a slice past its requeue limit",
            || async {
                let slices = env.slices("svc").await;
                slices.into_iter().find(|w| w.spec.active == Some(false))
            },
        )
        .await;
    let evicted = condition(&deactivated, "Evicted").map(|c| c.reason.clone());
    assert_eq!(
        evicted.as_deref(),
        Some("DeactivatedDueToRequeuingLimitExceeded"),
        "{}",
        env.dump().await
    );
    // the slices before it: evicted by Kueue, requeued after their backoff with their count
    let mut counts: Vec<i32> = env
        .slices("svc")
        .await
        .iter()
        .filter(|w| raygate::workload::is_finished(w.status.as_ref()))
        .filter_map(|w| w.status.as_ref()?.requeue_state.as_ref()?.count)
        .collect();
    counts.sort();
    assert_eq!(counts, [1, 2], "{}", env.dump().await);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let slices = env.slices("svc").await;
    assert_eq!(
        slices.len(),
        3,
        "three slices in all, no more after the deactivation:\n{}",
        env.dump().await
    );
    let svc = env.services().get("svc").await.unwrap();
    assert_eq!(
        svc.spec.suspend,
        Some(true),
        "the service stays stopped, as a deactivated job does"
    );
    env.stop().await;
}
