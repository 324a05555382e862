//! Operations on the simulated cluster (`raygate-sim`, which serves Events and Leases; the real
//! CRD API server serves neither): raygate's Events carry cluster time and tell holds on the
//! RayClusters themselves and the built-in admission loop's decisions on the Workloads; a
//! standby replica takes over when the leader stops (Lease released) or crashes (Lease expires),
//! all on the paused clock.
//! The test plays KubeRay: it creates each RayService's child, born suspended and labelled.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use raygate::controller::{Config, run_with};
use raygate::runtime::Clock;
use raygate::types::kueue::Workload;
use raygate::types::ray::{RayCluster, RayService};
use raygate_sim::Sim;
use raygate_testing::{PodTemplateBuilder, ray_pod};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The Ray image of the pod templates.
const RAY_IMAGE: &str = "rayproject/ray:2.51.0";

fn sim(ns: &str, clock: raygate_sim::Clock) -> Sim {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let upstream = raygate_testing::upstream::dir().join("upstream-crds");
    let ray = |f: &str| std::fs::read_to_string(upstream.join(f)).unwrap();
    Sim::builder()
        .crds_dir(root.join("crds"))
        .unwrap()
        .crds_yaml(&ray("ray.io_rayservices.yaml"))
        .unwrap()
        .crds_yaml(&ray("ray.io_rayclusters.yaml"))
        .unwrap()
        .namespace(ns)
        .clock(clock)
        .build()
}

async fn eventually<T, F, Fut>(wait: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    raygate_sim::world::fixtures::eventually_within(wait, Duration::from_millis(50), what, check)
        .await
}

async fn apply(client: &Client, obj: Value) {
    let (group, version) = obj["apiVersion"].as_str().unwrap().split_once('/').unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let ar = kube::discovery::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: obj["apiVersion"].as_str().unwrap().into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()).replace("classs", "classes"),
    };
    let api: Api<kube::api::DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    api.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {obj}: {e}"));
}

/// ResourceFlavor `default`, ClusterQueue `cq` with `cpu` nominal quota (preempting lower
/// priorities within it), LocalQueue `lq`, WorkloadPriorityClasses `low` (10) and `high` (100).
async fn queues(client: &Client, ns: &str, cpu: &str) {
    apply(client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}})).await;
    apply(client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]}})).await;
    apply(client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": "cq"}})).await;
    for (name, value) in [("low", 10), ("high", 100)] {
        apply(client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})).await;
    }
}

fn cluster_config(suspend: bool, worker_cpu: &str) -> Value {
    json!({"rayVersion": "2.51.0", "suspend": suspend,
        "headGroupSpec": {"rayStartParams": {}, "template": ray_pod("1").image(RAY_IMAGE)},
        "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 10, "rayStartParams": {}, "template": ray_pod(worker_cpu).image(RAY_IMAGE)}]})
}

/// A RayService `name` at `priority` (head 1 CPU + one worker of `worker_cpu`), gated by raygate,
/// and the child KubeRay creates from the gated template (born suspended).
async fn service_with_child(
    client: &Client,
    ns: &str,
    name: &str,
    priority: &str,
    worker_cpu: &str,
) {
    gated_service(client, ns, name, priority, worker_cpu).await;
    child_of(client, ns, name, worker_cpu).await;
}

/// A RayService, once the leader gated its template.
async fn gated_service(client: &Client, ns: &str, name: &str, priority: &str, worker_cpu: &str) {
    let services: Api<RayService> = Api::namespaced(client.clone(), ns);
    let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": priority}},
        "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": cluster_config(false, worker_cpu)}});
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        &format!("{name}'s template is gated"),
        || async {
            let s = services.get(name).await.ok()?;
            (s.spec.ray_cluster_config.suspend == Some(true)).then_some(())
        },
    )
    .await;
}

/// KubeRay's part: the RayService's first child, named in its status as the pending cluster,
/// then created suspended and labelled.
async fn child_of(client: &Client, ns: &str, name: &str, worker_cpu: &str) {
    let pending =
        json!({"status": {"pendingServiceStatus": {"rayClusterName": format!("{name}-a")}}});
    Api::<RayService>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&pending))
        .await
        .unwrap();
    let child = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": format!("{name}-a"), "namespace": ns, "labels": {
            "ray.io/originated-from-cr-name": name, "ray.io/originated-from-crd": "RayService"}},
        "spec": cluster_config(true, worker_cpu)});
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), ns);
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(child).unwrap(),
        )
        .await
        .unwrap();
}

/// `Some` once `child` is released (unsuspended).
async fn released(client: &Client, ns: &str, child: &str) -> Option<()> {
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), ns);
    let c = clusters.get(child).await.ok()?;
    (c.spec.suspend == Some(false)).then_some(())
}

async fn slice_of(client: &Client, ns: &str, service: &str) -> Option<Workload> {
    let workloads: Api<Workload> = Api::namespaced(client.clone(), ns);
    workloads
        .list(&ListParams::default().labels(&format!("raygate.io/rayservice={service}")))
        .await
        .ok()?
        .items
        .into_iter()
        .next()
}

/// The Events regarding `kind`/`name` with `reason`.
async fn events_on(client: &Client, ns: &str, kind: &str, name: &str, reason: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
        })
        .collect()
}

fn spawn_controller(
    client: Client,
    clock: Arc<dyn Clock>,
    config: Config,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        run_with(client, config, clock, async move {
            let _ = rx.await;
        })
        .await
        .expect("controller runs");
    });
    (tx, handle)
}

/// On the paused clock (the sim's epoch, 2026-01-01, is far from the wall clock): every Event
/// raygate writes is stamped with cluster time; a held RayCluster is told why on itself (the
/// RayService, the slice, the shortfall), once however often it is decided again, and so is its
/// release; the built-in admission loop's QuotaReserved, Admitted, Preempted and Evicted land
/// on the Workloads.
#[tokio::test(start_paused = true)]
async fn events_carry_cluster_time_and_tell_holds_on_rayclusters_and_admission_on_workloads() {
    raygate_testing::apiserver::init_logs();
    let ns = "ops";
    let sim = sim(ns, raygate_sim::Clock::default());
    let epoch = sim.clock().now();
    let client = sim.client();
    queues(&client, ns, "4").await;
    let clock: Arc<dyn Clock> = Arc::new(sim.clock().clone());
    let (stop, controller) = spawn_controller(
        sim.client_as("raygate"),
        clock,
        Config {
            admission_resync: Duration::from_millis(500),
            identity: "replica-a".into(),
            ..Default::default()
        },
    );
    let wait = Duration::from_secs(120);

    // low (1 + 1 CPU) fits in 4: admitted, its child released
    service_with_child(&client, ns, "low", "low", "1").await;
    eventually(wait, "low-a is released", || released(&client, ns, "low-a")).await;
    let low_slice = slice_of(&client, ns, "low").await.unwrap();
    let low_slice = low_slice.metadata.name.unwrap();
    for reason in ["QuotaReserved", "Admitted"] {
        eventually(wait, &format!("{reason} on {low_slice}"), || async {
            (!events_on(&client, ns, "Workload", &low_slice, reason)
                .await
                .is_empty())
            .then_some(())
        })
        .await;
    }
    let on_low = eventually(wait, "QuotaReleased on low-a", || async {
        events_on(&client, ns, "RayCluster", "low-a", "QuotaReleased")
            .await
            .pop()
    })
    .await;
    assert_eq!(
        on_low.note.as_deref(),
        Some(format!("released by RayService {ns}/low: slice {low_slice} is admitted and covers every child").as_str())
    );
    let low_uid = Api::<RayCluster>::namespaced(client.clone(), ns)
        .get("low-a")
        .await
        .unwrap()
        .metadata
        .uid;
    assert_eq!(
        on_low.regarding.and_then(|r| r.uid),
        low_uid,
        "kubectl describe finds it by uid"
    );

    // big (1 + 2 CPU) does not fit in the 2 left: held, told on big-a with the service, the
    // slice and the shortfall
    service_with_child(&client, ns, "big", "low", "2").await;
    let big_slice = eventually(wait, "big's slice", || slice_of(&client, ns, "big")).await;
    let big_slice = big_slice.metadata.name.unwrap();
    let held = eventually(wait, "QuotaHeld on big-a", || async {
        events_on(&client, ns, "RayCluster", "big-a", "QuotaHeld")
            .await
            .pop()
    })
    .await;
    let note = held.note.clone().unwrap_or_default();
    assert!(
        note.starts_with(&format!("held suspended by RayService {ns}/big until an admitted slice covers it: slice {big_slice} is pending: ")),
        "{note}"
    );
    assert!(note.ends_with("(1 more needed)"), "the shortfall: {note}");
    // decided again and again (each change to the RayService reconciles it): still one Event,
    // its repeats counted in a series
    let services: Api<RayService> = Api::namespaced(client.clone(), ns);
    for i in 0..3 {
        services
            .patch(
                "big",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touched": i.to_string()}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let held = events_on(&client, ns, "RayCluster", "big-a", "QuotaHeld").await;
    assert_eq!(held.len(), 1, "deduplicated: {held:?}");
    let count = held[0].series.as_ref().map(|s| s.count);
    assert!(
        count.is_some_and(|c| c >= 2),
        "a series counts the repeats: {count:?}"
    );
    assert!(released(&client, ns, "big-a").await.is_none());

    // high (1 + 3 CPU, priority 100) preempts low
    service_with_child(&client, ns, "high", "high", "3").await;
    eventually(wait, "Preempted on low's slice", || async {
        (!events_on(&client, ns, "Workload", &low_slice, "Preempted")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    // raygate stops low; KubeRay (played here) deletes its child, which frees the quota
    eventually(wait, "low is stopped", || async {
        (services.get("low").await.ok()?.spec.suspend == Some(true)).then_some(())
    })
    .await;
    Api::<RayCluster>::namespaced(client.clone(), ns)
        .delete("low-a", &Default::default())
        .await
        .unwrap();
    eventually(wait, "high-a is released", || {
        released(&client, ns, "high-a")
    })
    .await;
    // deactivating high's slice evicts it
    let high_slice = slice_of(&client, ns, "high")
        .await
        .unwrap()
        .metadata
        .name
        .unwrap();
    Api::<Workload>::namespaced(client.clone(), ns)
        .patch(
            &high_slice,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"active": false}})),
        )
        .await
        .unwrap();
    eventually(wait, "Evicted on high's slice", || async {
        (!events_on(&client, ns, "Workload", &high_slice, "Evicted")
            .await
            .is_empty())
        .then_some(())
    })
    .await;

    // every Event: cluster time (not the wall clock's), reported by this replica
    let now = sim.clock().now();
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(events.len() >= 8, "{}", events.len());
    for e in &events {
        let t = e.event_time.as_ref().expect("eventTime").0;
        assert!(
            t >= epoch && t <= now,
            "{:?} {:?}: eventTime {t} is not cluster time ({epoch} .. {now})",
            e.reason,
            e.regarding.as_ref().and_then(|r| r.name.clone())
        );
        if let Some(s) = &e.series {
            assert!(s.last_observed_time.0 >= t && s.last_observed_time.0 <= now);
        }
        assert_eq!(e.reporting_controller.as_deref(), Some("raygate"));
        assert_eq!(e.reporting_instance.as_deref(), Some("replica-a"));
    }
    let _ = stop.send(());
    controller.await.unwrap();
}

/// One replica of a leader-elected controller: its Lease in `ns`, `lease_seconds` long.
fn replica(ns: &str, identity: &str, lease_seconds: u64) -> Config {
    Config {
        leader_elect: true,
        lease_namespace: ns.into(),
        identity: identity.into(),
        lease_duration_seconds: lease_seconds,
        admission_resync: Duration::from_millis(500),
        ..Default::default()
    }
}

/// Two replicas on one sim, distinct identities: the leader gates; stopped (SIGTERM: the Lease
/// is released, awaited), the standby takes over before the lease duration and gates on; the
/// new leader crashed (its task dropped where it stands, nothing released), a third replica takes
/// over once the Lease expires. On the paused clock: raygate's elector reads the controller's
/// injected clock, so the Lease's times and expiry are cluster time like everything else.
#[tokio::test(start_paused = true)]
async fn a_standby_takes_over_when_the_leader_stops_and_when_it_crashes() {
    raygate_testing::apiserver::init_logs();
    let ns = "ha";
    let sim = sim(ns, raygate_sim::Clock::default());
    let client = sim.client();
    queues(&client, ns, "20").await;
    const LEASE_SECONDS: u64 = 3;
    let lease_duration = Duration::from_secs(LEASE_SECONDS);
    let config = |identity: &str| replica(ns, identity, LEASE_SECONDS);
    let clock = || -> Arc<dyn Clock> { Arc::new(sim.clock().clone()) };
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let spec = || async { leases.get("raygate").await.ok()?.spec };
    let holder = || async { spec().await?.holder_identity };
    let wait = Duration::from_secs(60);

    let (stop_a, a) = spawn_controller(sim.client_as("replica-a"), clock(), config("replica-a"));
    eventually(wait, "replica-a leads", || async {
        (holder().await? == "replica-a").then_some(())
    })
    .await;
    let (_stop_b, b) = spawn_controller(sim.client_as("replica-b"), clock(), config("replica-b"));
    service_with_child(&client, ns, "one", "low", "1").await;
    eventually(wait, "the leader releases one-a", || {
        released(&client, ns, "one-a")
    })
    .await;
    // the leader renews on cluster time: many lease durations later it still holds the Lease
    tokio::time::sleep(lease_duration * 5).await;
    let first = spec().await.expect("the Lease");
    assert_eq!(
        (first.holder_identity.as_deref(), first.lease_transitions),
        (Some("replica-a"), Some(0))
    );
    let renewed = first.renew_time.expect("renewTime").0;
    let since = sim.clock().now().duration_since(renewed);
    assert!(
        since < k8s_openapi::jiff::SignedDuration::from_secs(1),
        "renewTime is cluster time, renewed {since:#} ago"
    );

    // 1. the leader stops: the Lease is released before it exits, the standby takes it at once
    let t0 = sim.clock().now();
    let _ = stop_a.send(());
    a.await.unwrap();
    let released_lease = spec().await.expect("the Lease");
    assert_ne!(
        released_lease.holder_identity.as_deref(),
        Some("replica-a"),
        "the Lease is released when run returns"
    );
    eventually(wait, "replica-b takes over", || async {
        (holder().await? == "replica-b").then_some(())
    })
    .await;
    let graceful = sim.clock().now().duration_since(t0);
    eprintln!("takeover after the leader stopped (Lease released): {graceful:#}");
    assert!(
        graceful < k8s_openapi::jiff::SignedDuration::from_secs(1),
        "a released Lease is taken at the standby's next retry: {graceful:#}"
    );
    service_with_child(&client, ns, "two", "low", "1").await;
    eventually(wait, "the new leader releases two-a", || {
        released(&client, ns, "two-a")
    })
    .await;

    // 2. the new leader crashes: a third replica takes over once the Lease expires
    let (stop_c, c) = spawn_controller(sim.client_as("replica-c"), clock(), config("replica-c"));
    tokio::time::sleep(lease_duration * 3).await;
    assert_eq!(
        holder().await.as_deref(),
        Some("replica-b"),
        "a standby waits while the leader renews"
    );
    let t0 = sim.clock().now();
    // a crash: the controller's future dropped where it stands, nothing released
    b.abort();
    let _ = b.await;
    eventually(wait, "replica-c takes over", || async {
        (holder().await? == "replica-c").then_some(())
    })
    .await;
    let crashed = sim.clock().now().duration_since(t0);
    eprintln!("takeover after the leader crashed (Lease expired): {crashed:#}");
    let lease = k8s_openapi::jiff::SignedDuration::from_secs(LEASE_SECONDS as i64);
    assert!(
        crashed > lease - k8s_openapi::jiff::SignedDuration::from_secs(1)
            && crashed <= lease + k8s_openapi::jiff::SignedDuration::from_secs(1),
        "taken over once the Lease expired (its duration after the standby last saw it renewed): {crashed:#}"
    );
    let third = spec().await.expect("the Lease");
    assert_eq!(third.lease_transitions, Some(2), "a → b → c");
    service_with_child(&client, ns, "three", "low", "1").await;
    eventually(wait, "the third leader releases three-a", || {
        released(&client, ns, "three-a")
    })
    .await;
    let _ = stop_c.send(());
    c.await.unwrap();
}

/// A leader whose Lease renewals fail stops writing at its renew deadline, on cluster time,
/// although its election loop is still trying then and has not told anyone yet: from the
/// deadline on every write it would make is counted (and refused) by a fault rule, and there are
/// none, although a new RayCluster waits for it; a standby takes the Lease once it expires and
/// writes instead.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_fail_writes_nothing_after_its_renew_deadline() {
    use raygate_sim::server::faults::{FaultRule, Faults, Verb};
    raygate_testing::apiserver::init_logs();
    let ns = "stall";
    let sim = sim(ns, raygate_sim::Clock::default());
    let client = sim.client();
    queues(&client, ns, "20").await;
    // renew deadline 2/3 of it, retry 2/15: the election loop's turns do not fall on the
    // deadline (5 retries are a nanosecond short of it)
    const LEASE_SECONDS: u64 = 4;
    let renew_deadline = Duration::from_secs(LEASE_SECONDS) * 2 / 3;
    let config = |identity: &str| replica(ns, identity, LEASE_SECONDS);
    let clock = || -> Arc<dyn Clock> { Arc::new(sim.clock().clone()) };
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let holder = || async { leases.get("raygate").await.ok()?.spec?.holder_identity };
    let wait = Duration::from_secs(60);
    let (_stop_a, _a) = spawn_controller(sim.client_as("replica-a"), clock(), config("replica-a"));
    eventually(wait, "replica-a leads", || async {
        (holder().await? == "replica-a").then_some(())
    })
    .await;
    service_with_child(&client, ns, "one", "low", "1").await;
    eventually(wait, "the leader releases one-a", || {
        released(&client, ns, "one-a")
    })
    .await;

    gated_service(&client, ns, "two", "low", "1").await;

    // replica-a's Lease requests fail: its election loop keeps trying past the renew deadline,
    // which its last successful renewal, at most a retry period ago, set at most
    // `renew_deadline` from now
    let stall = FaultRule::any()
        .resource("leases")
        .user_agent("replica-a")
        .error(500, 1.0);
    sim.set_faults(Faults::none().rule(stall.clone()));
    tokio::time::sleep(renew_deadline).await;
    // from its renew deadline on, every write replica-a makes to anything but its Lease is
    // counted
    let fenced = [
        "rayservices",
        "rayclusters",
        "workloads",
        "events",
        "pods",
        "nodes",
        "clusterqueues",
        "localqueues",
    ]
    .into_iter()
    .fold(FaultRule::any(), FaultRule::resource)
    .verbs(&Verb::WRITES)
    .user_agent("replica-a")
    .error(503, 1.0);
    sim.set_faults(Faults::none().rule(stall).rule(fenced));
    child_of(&client, ns, "two", "1").await;
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS) / 2).await;
    assert_eq!(
        sim.fault_stats().errors.get(&503),
        None,
        "replica-a wrote after its renew deadline"
    );
    assert!(released(&client, ns, "two-a").await.is_none());

    // a standby takes the expired Lease and releases two-a
    let (_stop_b, _b) = spawn_controller(sim.client_as("replica-b"), clock(), config("replica-b"));
    eventually(wait, "replica-b takes over", || async {
        (holder().await? == "replica-b").then_some(())
    })
    .await;
    eventually(wait, "the new leader releases two-a", || {
        released(&client, ns, "two-a")
    })
    .await;
    assert_eq!(
        sim.fault_stats().errors.get(&503),
        None,
        "replica-a wrote while replica-b led"
    );
}
