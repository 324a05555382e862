//! The gate's IO under faults, on a real API server: raygate's controller and the KubeRay v1.7
//! emulator in-process, with the controller's client slowed where a test needs it.
//!
//! Tests in this binary run one at a time (ClusterQueues are cluster-scoped and each controller
//! watches every namespace).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::Request;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use raygate::controller::{Config, run};
use raygate::types::kueue::Workload;
use raygate::types::ray::{RayCluster, RayService};
use raygate_sim::Clock;
use raygate_sim::kuberay::EmulatorConfig;
use raygate_testing::apiserver::{TestServer, eventually, namespace};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const WAIT: Duration = Duration::from_secs(30);

/// Holds back every LIST response of one resource (`path_suffix`, e.g. `/rayclusters`) until
/// `until`: the controller's first view of that kind arrives late (a big cluster, a slow
/// server), while every other watch syncs at once.
#[derive(Clone)]
struct SlowList {
    path_suffix: &'static str,
    until: Instant,
}

impl<S> tower::Layer<S> for SlowList {
    type Service = SlowListService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        SlowListService {
            inner,
            slow: self.clone(),
        }
    }
}

#[derive(Clone)]
struct SlowListService<S> {
    inner: S,
    slow: SlowList,
}

impl<S> tower::Service<Request<Body>> for SlowListService<S>
where
    S: tower::Service<Request<Body>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let list = req.uri().path().ends_with(self.slow.path_suffix)
            && !req.uri().query().unwrap_or_default().contains("watch=true");
        let until = self.slow.until;
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await;
            if list {
                tokio::time::sleep_until(until).await;
            }
            resp
        })
    }
}

/// A client for the test server whose RayCluster lists answer only after `delay`.
async fn slow_raycluster_client(delay: Duration) -> Client {
    let text = std::fs::read_to_string(&TestServer::get().kubeconfig).expect("kubeconfig");
    let kc = Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    ClientBuilder::try_from(config)
        .expect("client stack")
        .with_layer(&SlowList {
            path_suffix: "/rayclusters",
            until: Instant::now() + delay,
        })
        .build()
}

fn start_controller(client: Client) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = oneshot::channel::<()>();
    let config = Config {
        admission_resync: Duration::from_millis(500),
        ..Default::default()
    };
    let handle = tokio::spawn(async move {
        run(client, config, async move {
            let _ = rx.await;
        })
        .await
        .expect("controller runs");
    });
    (tx, handle)
}

fn pod(cpu: &str) -> Value {
    json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.51.0", "resources": {"requests": {"cpu": cpu}}}]}})
}

async fn apply(client: &Client, obj: Value) {
    raygate::dev::apply(client, &obj.to_string(), "test", None)
        .await
        .unwrap_or_else(|e| panic!("applying {obj}: {e}"));
}

/// A labelled RayService created before raygate runs: KubeRay starts its child unsuspended.
async fn serving_service(client: &Client, ns: &str, name: &str) {
    let svc = json!({
        "apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"rayClusterDeletionDelaySeconds": 1, "serveConfigV2": "applications: []",
            "rayClusterConfig": {"rayVersion": "2.51.0",
                "headGroupSpec": {"rayStartParams": {}, "template": pod("1")},
                "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 10, "rayStartParams": {}, "template": pod("1")}]}}
    });
    Api::<RayService>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).expect("RayService"),
        )
        .await
        .expect("RayService created");
}

/// The active child of a serving RayService: its name and generation.
async fn active_child(client: &Client, ns: &str, name: &str) -> (String, Option<i64>) {
    eventually(WAIT, "the child serves", || async {
        let svc = Api::<RayService>::namespaced(client.clone(), ns)
            .get(name)
            .await
            .ok()?;
        let active = svc.status?.active_service_status?.ray_cluster_name?;
        let child = Api::<RayCluster>::namespaced(client.clone(), ns)
            .get(&active)
            .await
            .ok()?;
        (child.spec.suspend != Some(true)).then_some((active, child.metadata.generation))
    })
    .await
}

/// The live slices of one RayService: name, generation, spec.podSets.
async fn slices(client: &Client, ns: &str, name: &str) -> Vec<(String, Option<i64>, Value)> {
    let mut out: Vec<(String, Option<i64>, Value)> =
        Api::<Workload>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels(&format!("raygate.io/rayservice={name}")))
            .await
            .expect("list slices")
            .items
            .into_iter()
            .filter(|w| !raygate::workload::is_finished(w.status.as_ref()))
            .map(|w| {
                (
                    w.metadata.name.clone().unwrap_or_default(),
                    w.metadata.generation,
                    serde_json::to_value(&w.spec.pod_sets).unwrap_or_default(),
                )
            })
            .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The serving child is untouched: same generation (no `spec.suspend` write), not suspended.
async fn assert_untouched(client: &Client, ns: &str, child: &str, generation: Option<i64>) {
    let c = Api::<RayCluster>::namespaced(client.clone(), ns)
        .get(child)
        .await
        .expect("child");
    assert_ne!(c.spec.suspend, Some(true), "{child} was suspended");
    assert_eq!(
        c.metadata.generation, generation,
        "{child}'s spec was written (suspended and released again?)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_raygate_with_a_slow_raycluster_list_never_stops_a_serving_child() {
    let _serial = SERIAL.lock().await;
    raygate_testing::apiserver::init_logs();
    let client = TestServer::get().client().await;
    let ns = namespace("slow-cluster-list");
    let (emulator_stop, emulator_stopped) = oneshot::channel::<()>();
    tokio::spawn(raygate_sim::kuberay::run(
        client.clone(),
        Clock::wall(),
        EmulatorConfig {
            start_delay: Duration::from_millis(300),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        async move {
            let _ = emulator_stopped.await;
        },
    ));
    let flavor = format!("f-{ns}");
    let cq = format!("cq-{ns}");
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}})).await;
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "10"}]}]}]}})).await;
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}})).await;

    // labelled RayServices already serving before raygate is installed
    let names = ["svc-a", "svc-b"];
    let mut serving = vec![];
    for name in names {
        serving_service(&client, &ns, name).await;
    }
    for name in names {
        serving.push(active_child(&client, &ns, name).await);
    }

    // raygate starts; its RayCluster list takes 3 s, every other kind syncs at once
    let delay = Duration::from_secs(3);
    let (stop, handle) = start_controller(slow_raycluster_client(delay).await);
    let services = Api::<RayService>::namespaced(client.clone(), &ns);
    for (name, (child, _)) in names.iter().zip(&serving) {
        eventually(
            WAIT,
            "opted in: template gated, the serving child recorded, one admitted slice",
            || async {
                let svc = services.get(name).await.ok()?;
                let recorded = svc
                    .metadata
                    .annotations
                    .as_ref()?
                    .get("raygate.io/released-children")?
                    .clone();
                let gated = svc.spec.ray_cluster_config.suspend == Some(true);
                let live = Api::<Workload>::namespaced(client.clone(), &ns)
                    .list(&ListParams::default().labels(&format!("raygate.io/rayservice={name}")))
                    .await
                    .ok()?
                    .items;
                let admitted = live
                    .iter()
                    .filter(|w| {
                        !raygate::workload::is_finished(w.status.as_ref())
                            && raygate::workload::is_admitted(w.status.as_ref())
                    })
                    .count();
                (gated && recorded.split(',').any(|n| n == child) && admitted == 1).then_some(())
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut before = vec![];
    for (name, (child, generation)) in names.iter().zip(&serving) {
        assert_untouched(&client, &ns, child, *generation).await;
        let s = slices(&client, &ns, name).await;
        assert_eq!(s.len(), 1, "one root slice for {name}: {s:?}");
        before.push(s);
    }

    // a restart: the new process's RayCluster list is slow again
    handle.abort();
    let _ = handle.await;
    drop(stop);
    let (stop, handle) = start_controller(slow_raycluster_client(delay).await);
    tokio::time::sleep(delay + Duration::from_secs(3)).await;
    for ((name, (child, generation)), s) in names.iter().zip(&serving).zip(&before) {
        assert_untouched(&client, &ns, child, *generation).await;
        assert_eq!(
            &slices(&client, &ns, name).await,
            s,
            "{name}'s admitted slice was not shrunk, replaced or duplicated"
        );
    }
    let _ = stop.send(());
    let _ = handle.await;
    let _ = emulator_stop.send(());
}

/// Runs `change` (to completion) just before the first PATCH whose path ends with
/// `path_suffix` is sent: the object changes between the controller's decision and its write.
#[derive(Clone)]
struct ChangeBeforeFirstWrite {
    path_suffix: String,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
    change: std::sync::Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>,
}

impl<S> tower::Layer<S> for ChangeBeforeFirstWrite {
    type Service = ChangeBeforeFirstWriteService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ChangeBeforeFirstWriteService {
            inner,
            hook: self.clone(),
        }
    }
}

struct ChangeBeforeFirstWriteService<S> {
    inner: S,
    hook: ChangeBeforeFirstWrite,
}

impl<S> tower::Service<Request<Body>> for ChangeBeforeFirstWriteService<S>
where
    S: tower::Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if req.method() == axum::http::Method::PATCH
            && req.uri().path().ends_with(&self.hook.path_suffix)
            && !self
                .hook
                .fired
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            // the change lands before this request is even built into the send path
            let change = (self.hook.change)();
            tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(change));
        }
        self.inner.call(req)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_decided_on_an_older_workload_is_not_written_over_its_new_spec() {
    let _serial = SERIAL.lock().await;
    raygate_testing::apiserver::init_logs();
    let client = TestServer::get().client().await;
    let ns = namespace("admission-409");
    let flavor = format!("f-{ns}");
    let cq = format!("cq-{ns}");
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}})).await;
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "10"}]}]}]}})).await;
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}})).await;

    // between the admission cycle's decision (1 pod) and its status write, the pending
    // Workload grows to 3 pods
    let workloads = Api::<Workload>::namespaced(client.clone(), &ns);
    let hook = ChangeBeforeFirstWrite {
        path_suffix: format!("/namespaces/{ns}/workloads/wl/status"),
        fired: Default::default(),
        change: std::sync::Arc::new({
            let workloads = workloads.clone();
            move || {
                let workloads = workloads.clone();
                Box::pin(async move {
                    workloads
                        .patch(
                            "wl",
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(json!({"spec": {"podSets": [{"name": "main", "count": 3, "template": pod("1")}]}})),
                        )
                        .await
                        .expect("the Workload grows");
                })
            }
        }),
    };
    let text = std::fs::read_to_string(&TestServer::get().kubeconfig).expect("kubeconfig");
    let kc = Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    let hooked = ClientBuilder::try_from(config)
        .expect("client stack")
        .with_layer(&hook)
        .build();
    let (stop, handle) = start_controller(hooked);

    let wl: Workload = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "wl", "namespace": ns},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": pod("1")}]}
    }))
    .expect("Workload");
    workloads
        .create(&PostParams::default(), &wl)
        .await
        .expect("Workload created");

    // the stale write is refused (409) and the next cycle admits what the Workload now asks
    let (count, cpu) = eventually(WAIT, "wl admitted", || async {
        let w = workloads.get("wl").await.ok()?;
        let a = w.status?.admission?;
        let p = a.pod_set_assignments.first()?.clone();
        Some((p.count, p.resource_usage.get("cpu").map(|q| q.0.clone())))
    })
    .await;
    assert!(
        hook.fired.load(std::sync::atomic::Ordering::SeqCst),
        "the change was injected"
    );
    // give a wrong admission time to show
    tokio::time::sleep(Duration::from_secs(1)).await;
    let w = workloads.get("wl").await.expect("wl");
    let a = w.status.and_then(|s| s.admission).expect("admission");
    assert_eq!(
        (count, cpu.as_deref()),
        (Some(3), Some("3")),
        "admitted for the pods it asks now"
    );
    assert_eq!(a.pod_set_assignments[0].count, Some(3));
    let _ = stop.send(());
    let _ = handle.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_covering_slice_of_a_ready_service_carries_pods_ready_for_kueue() {
    let _serial = SERIAL.lock().await;
    raygate_testing::apiserver::init_logs();
    let client = TestServer::get().client().await;
    let ns = namespace("pods-ready");
    let (emulator_stop, emulator_stopped) = oneshot::channel::<()>();
    tokio::spawn(raygate_sim::kuberay::run(
        client.clone(),
        Clock::wall(),
        EmulatorConfig {
            start_delay: Duration::from_millis(300),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        async move {
            let _ = emulator_stopped.await;
        },
    ));
    let flavor = format!("f-{ns}");
    let cq = format!("cq-{ns}");
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}})).await;
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "10"}]}]}]}})).await;
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}})).await;
    serving_service(&client, &ns, "svc").await;
    active_child(&client, &ns, "svc").await;
    let (stop, handle) = start_controller(client.clone());

    // Kueue's waitForPodsReady evicts an admitted Workload whose PodsReady never turns True
    let workloads = Api::<Workload>::namespaced(client.clone(), &ns);
    let (reason, manager) = eventually(WAIT, "PodsReady=True on the admitted slice", || async {
        let live: Vec<Workload> = workloads
            .list(&ListParams::default().labels("raygate.io/rayservice=svc"))
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|w| {
                raygate::workload::is_admitted(w.status.as_ref())
                    && !raygate::workload::is_finished(w.status.as_ref())
            })
            .collect();
        let w = live.first()?;
        let c = w
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "PodsReady" && c.status == "True")?;
        let manager = w
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.subresource.as_deref() == Some("status"))
            .filter_map(|m| m.manager.clone())
            .find(|m| m == "raygate-pods-ready");
        Some((c.reason.clone(), manager))
    })
    .await;
    assert_eq!(reason, "Started");
    assert_eq!(manager.as_deref(), Some("raygate-pods-ready"));
    let _ = stop.send(());
    let _ = handle.await;
    let _ = emulator_stop.send(());
}
