//! raygate's real controller, unchanged, against the sim: the template gate, a slice created
//! and admitted by the built-in admission loop, and a held child released. The test plays
//! KubeRay by creating the child RayCluster itself, labelled as KubeRay labels it.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use raygate::controller::{Config, run};
use raygate::types::kueue::{ClusterQueue, Workload};
use raygate::types::ray::{RayCluster, RayService};
use raygate_sim::Sim;
use raygate_testing::core::{self, PodExt};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
const NS: &str = "serving";

fn sim() -> Sim {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let ray =
        |f: &str| std::fs::read_to_string(root.join("../shared/upstream-crds").join(f)).unwrap();
    Sim::builder()
        .crds_dir(root.join("crds"))
        .unwrap()
        .crds_yaml(&ray("ray.io_rayservices.yaml"))
        .unwrap()
        .crds_yaml(&ray("ray.io_rayclusters.yaml"))
        .unwrap()
        .namespace(NS)
        .build()
}

async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    raygate_sim::world::fixtures::eventually_within(WAIT, Duration::from_millis(50), what, check)
        .await
}

async fn apply(client: &Client, api: Api<kube::api::DynamicObject>, obj: Value) {
    let _ = client;
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    api.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {obj}: {e}"));
}

fn dynamic(
    client: &Client,
    ns: Option<&str>,
    kind: &str,
    plural: &str,
) -> Api<kube::api::DynamicObject> {
    let ar = kube::discovery::ApiResource {
        group: "kueue.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "kueue.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// A pod template (spec only) whose one container requests `cpu`.
fn template(cpu: &str) -> Value {
    json!({"spec": core::pod("ray", "").requests(&[("cpu", cpu)]).spec})
}

fn cluster_config(suspend: bool) -> Value {
    json!({"rayVersion": "2.51.0", "suspend": suspend,
        "headGroupSpec": {"rayStartParams": {}, "template": template("1")},
        "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 10, "rayStartParams": {}, "template": template("1")}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raygate_gates_admits_and_releases_on_the_sim_unchanged() {
    scenario(Duration::ZERO).await;
}

/// The same on the paused clock, then an hour of cluster time with the controller running
/// (admission resyncs, watch timeouts and re-watches, bookmarks): nothing moves that should not.
#[tokio::test(start_paused = true)]
async fn an_hour_of_cluster_time_on_the_virtual_clock_takes_seconds() {
    let wall = std::time::Instant::now();
    scenario(Duration::from_secs(3600)).await;
    let took = wall.elapsed();
    eprintln!("gate scenario + 1 h of cluster time: {took:?} wall");
    assert!(took < Duration::from_secs(60), "{took:?}");
}

async fn scenario(then_run_for: Duration) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let sim = sim();
    let client = sim.client();
    apply(&client, dynamic(&client, None, "ResourceFlavor", "resourceflavors"),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}})).await;
    apply(&client, dynamic(&client, None, "ClusterQueue", "clusterqueues"),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "3"}]}]}]}})).await;
    apply(&client, dynamic(&client, Some(NS), "LocalQueue", "localqueues"),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}})).await;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = Config {
        admission_resync: Duration::from_millis(500),
        ..Default::default()
    };
    let controller = tokio::spawn(run(client.clone(), config, async move {
        let _ = stopped.await;
    }));

    let services: Api<RayService> = Api::namespaced(client.clone(), NS);
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), NS);
    let workloads: Api<Workload> = Api::namespaced(client.clone(), NS);
    let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": "svc", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": cluster_config(false)}});
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();

    // 1. the template gate
    eventually("the RayService template is gated", || async {
        let s = services.get("svc").await.ok()?;
        (s.spec.ray_cluster_config.suspend == Some(true)).then_some(())
    })
    .await;

    // KubeRay names the pending child in the status, then creates it from the gated template:
    // born suspended, labelled
    services
        .patch_status(
            "svc",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"pendingServiceStatus": {"rayClusterName": "svc-a"}}})),
        )
        .await
        .unwrap();
    let child = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "svc-a", "namespace": NS, "labels": {
            "ray.io/originated-from-cr-name": "svc", "ray.io/originated-from-crd": "RayService"}},
        "spec": cluster_config(true)});
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(child).unwrap(),
        )
        .await
        .unwrap();

    // 2. a slice for head + worker, admitted by the built-in admission loop
    let slice = eventually("an admitted slice", || async {
        let list = workloads
            .list(&ListParams::default().labels("raygate.io/rayservice=svc"))
            .await
            .ok()?;
        let w = list.items.into_iter().next()?;
        let admitted = w
            .status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == "Admitted" && c.status == "True");
        admitted.then_some(w)
    })
    .await;
    let counts: Vec<_> = slice
        .spec
        .pod_sets
        .iter()
        .map(|p| (p.name.clone(), p.count))
        .collect();
    assert_eq!(counts, [("head".to_string(), 1), ("w".to_string(), 1)]);
    assert_eq!(slice.spec.queue_name.as_deref(), Some("lq"));
    let managers: Vec<_> = slice
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.contains(&raygate::controller::SLICES_MANAGER.to_string())
            && managers.contains(&raygate::controller::ADMISSION_MANAGER.to_string()),
        "{managers:?}"
    );

    // 3. the held child is released
    eventually("the child is released", || async {
        let c = clusters.get("svc-a").await.ok()?;
        (c.spec.suspend == Some(false)).then_some(())
    })
    .await;
    let cq: Api<ClusterQueue> = Api::all(client.clone());
    eventually("2 CPU reserved in the ClusterQueue's status", || async {
        let usage = cq.get("cq").await.ok()?.status?.flavors_reservation;
        let total = usage
            .first()?
            .resources
            .iter()
            .find(|r| r.name == "cpu")?
            .total
            .clone()?;
        (total.0 == "2").then_some(())
    })
    .await;

    // every decision left an Event (events.k8s.io/v1, as kube-runtime's recorder writes them)
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let reasons = eventually("TemplateGated and Released events", || async {
        let reasons: Vec<String> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        (reasons.iter().any(|r| r == "TemplateGated") && reasons.iter().any(|r| r == "Released"))
            .then_some(reasons)
    })
    .await;
    assert!(reasons.iter().any(|r| r == "SliceCreated"), "{reasons:?}");

    if !then_run_for.is_zero() {
        let start = sim.clock().now();
        let rv = sim.revision();
        tokio::time::sleep(then_run_for).await;
        let elapsed = sim.clock().now().duration_since(start);
        assert!(
            elapsed.as_secs() >= then_run_for.as_secs() as i64,
            "{elapsed:?}"
        );
        assert_eq!(
            clusters.get("svc-a").await.unwrap().spec.suspend,
            Some(false)
        );
        let slices = workloads
            .list(&ListParams::default().labels("raygate.io/rayservice=svc"))
            .await
            .unwrap();
        assert_eq!(slices.items.len(), 1, "still one slice");
        // the controller's watches survived their timeouts: a change is still seen at once
        services
            .patch(
                "svc",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"rayClusterConfig": {"suspend": false}}})),
            )
            .await
            .unwrap();
        eventually("the template is gated again", || async {
            let s = services.get("svc").await.ok()?;
            (s.spec.ray_cluster_config.suspend == Some(true)).then_some(())
        })
        .await;
        eprintln!(
            "{} writes in {} s of cluster time; {} open watches",
            sim.revision() - rv,
            then_run_for.as_secs(),
            sim.watch_count()
        );
    }
    let _ = stop.send(());
    tokio::time::timeout(WAIT, controller)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
