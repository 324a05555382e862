//! The gate end to end, on two servers: raygate's controller (built-in admission) and the
//! KubeRay v1.7 emulator run in-process against the real CRD API server and against the
//! simulated cluster (`raygate-sim`), and every assertion reads the objects in the server.
//! Each scenario is an `async fn(Backend)` listed once in [`on_both_servers!`], which makes
//! `real::<name>` and `sim::<name>` tests of it, and `sim_faults::<name>`: the scenario with the
//! controller's requests failing (10% 500s on writes, watch drops, 410s on re-watch).
//!
//! Real-server tests run one at a time on real time: ClusterQueues are cluster-scoped and each
//! test starts its own controller, which watches every namespace. Each sim test has a cluster of
//! its own and runs on tokio's paused clock (`start_paused`): the sim, the emulator and the
//! controller read the sim's `Clock`, `eventually`'s deadlines and the scenarios' sleeps are
//! tokio time, so a wait costs cluster time, not wall time. `WAIT` is then 90 s of cluster time.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use raygate::controller::{Config, run_with};
use raygate::gate::ERROR_ANNOTATION;
use raygate::runtime::{Clock, SystemClock};
use raygate::types::kueue::{ClusterQueue, Workload};
use raygate::types::ray::{RayCluster, RayService};
use raygate_sim::world::kuberay::EmulatorConfig;
use raygate_testing::apiserver::eventually;
use raygate_testing::backend::Backend;
use raygate_testing::{PodTemplateBuilder, ray_pod};
use serde_json::{Value, json};
use tokio::sync::oneshot;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// How long a scenario step may take. Generous: on a loaded 2-core machine the API server, etcd
/// and the emulator share the cores with the test (two steps timed out at 20 s under load 6).
const WAIT: Duration = Duration::from_secs(90);
/// The Ray image of the pod templates.
const RAY_IMAGE: &str = "rayproject/ray:2.51.0";

/// Runs every scenario on both servers, and on the sim once more under faults. A new scenario
/// is an `async fn name(backend: Backend)` starting with `Env::new(backend, "name")`, added to
/// this list.
macro_rules! on_both_servers {
    ($($name:ident),* $(,)?) => {
        /// On the real CRD API server.
        mod real {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let _serial = super::lock().await;
                    super::$name(super::Backend::Real).await;
                }
            )*
        }
        /// On a simulated cluster of its own, on tokio's paused clock: every wait is cluster
        /// time, which auto-advances whenever the sim, the emulator and the controller idle.
        mod sim {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(super::Backend::Sim).await;
                }
            )*
        }
        /// On a simulated cluster failing the controller's requests
        /// ([`raygate_testing::backend::faults_for_the_actor`]).
        /// Paused clock, as `sim`.
        mod sim_faults {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(super::Backend::SimFaults).await;
                }
            )*
        }
    };
}

on_both_servers!(
    an_upgrade_waits_for_quota_then_runs_and_the_slice_shrinks_back,
    a_tampered_child_is_suspended_again,
    bad_input_is_reported_and_leaves_other_services_alone,
    an_autoscaler_scale_up_within_quota_gets_a_new_slice_and_suspends_nothing,
    suspending_during_an_upgrade_removes_both_children_and_resume_runs_the_new_spec,
    a_restarted_controller_converges_without_duplicates_or_early_releases,
    a_higher_priority_service_preempts_a_lower_one,
    a_held_upgrade_follows_a_priority_raise_in_place_and_preempts,
    a_resource_changing_upgrade_with_an_added_group_is_charged_exactly,
    removing_the_queue_label_frees_the_quota_and_hands_the_service_back,
    raygate_s_own_label_holds_an_upgrade_and_its_removal_hands_the_service_back,
    a_queue_label_typo_is_fixed_by_relabelling,
    finished_slices_are_deleted_after_the_retention,
    a_child_with_invalid_podsets_is_still_held,
    a_scale_down_with_a_new_image_changes_only_the_reserved_slice_counts,
    a_replaced_pending_child_is_not_charged_and_the_newest_runs_when_it_fits,
    a_pending_child_replaced_at_once_is_not_charged_nor_released,
    a_first_child_held_past_the_initializing_timeout_is_warned_then_its_slice_finished,
    the_admitted_flavor_s_node_labels_and_tolerations_reach_the_released_child,
    a_group_moved_to_another_gpu_pool_is_charged_to_that_pool_s_flavor,
    a_failed_upgrade_s_evicted_slice_holds_the_upgrade_and_the_service_keeps_serving,
    a_preempted_upgrade_gives_up_only_its_delta_and_the_service_keeps_serving,
    a_deleted_covering_workload_stays_charged_until_the_running_child_s_new_slice_is_admitted,
);

/// A controller and an emulator running for one test.
struct Env {
    client: Client,
    /// The controller's client (the faulty one on `Backend::SimFaults`).
    controller_client: Client,
    clock: Arc<dyn Clock>,
    /// The simulated cluster on the sim backends.
    sim: Option<raygate_sim::Sim>,
    faulty: bool,
    ns: String,
    stops: Vec<oneshot::Sender<()>>,
    controller: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    /// When the scenario started, in wall time and in cluster time (the virtual-time speed-up).
    started: (std::time::Instant, Timestamp),
}

impl Env {
    async fn new(backend: Backend, test: &str) -> Env {
        Env::with_emulator(backend, test, |_| {}).await
    }

    /// As [`Env::new`], with the emulator's configuration changed by `configure`.
    async fn with_emulator(
        backend: Backend,
        test: &str,
        configure: impl FnOnce(&mut EmulatorConfig),
    ) -> Env {
        raygate_testing::apiserver::init_logs();
        let cluster = backend.cluster(test).await;
        let clock: Arc<dyn Clock> = match &cluster.sim {
            Some(sim) => Arc::new(sim.clock().clone()),
            None => Arc::new(SystemClock::default()),
        };
        let mut env = Env {
            client: cluster.client,
            controller_client: cluster.actor_client,
            clock: clock.clone(),
            sim: cluster.sim,
            faulty: backend == Backend::SimFaults,
            ns: cluster.ns,
            stops: vec![],
            controller: None,
            started: (std::time::Instant::now(), clock.now()),
        };
        let (tx, rx) = oneshot::channel::<()>();
        let mut cfg = EmulatorConfig {
            start_delay: Duration::from_millis(300),
            namespace: Some(env.ns.clone()),
            ..Default::default()
        };
        configure(&mut cfg);
        let emulator_clock = match &env.sim {
            Some(sim) => sim.clock().clone(),
            None => raygate_sim::Clock::wall(),
        };
        tokio::spawn(raygate_sim::world::kuberay::run(
            env.client.clone(),
            emulator_clock,
            cfg,
            async move {
                let _ = rx.await;
            },
        ));
        env.stops.push(tx);
        env.start_controller();
        env
    }

    fn start_controller(&mut self) {
        self.spawn_controller(Config {
            admission_resync: Duration::from_millis(500),
            ..Default::default()
        });
    }

    fn spawn_controller(&mut self, config: Config) {
        let (tx, rx) = oneshot::channel::<()>();
        let client = self.controller_client.clone();
        let clock = self.clock.clone();
        let handle = tokio::spawn(async move {
            run_with(client, config, clock, async move {
                let _ = rx.await;
            })
            .await
            .expect("controller runs");
        });
        self.controller = Some((tx, handle));
    }

    /// Kills the controller mid-flight (no graceful shutdown).
    async fn kill_controller(&mut self) {
        if let Some((_, handle)) = self.controller.take() {
            handle.abort();
            let _ = handle.await;
        }
    }

    fn cq(&self) -> String {
        format!("cq-{}", self.ns)
    }

    fn services(&self) -> Api<RayService> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn clusters(&self) -> Api<RayCluster> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn workloads(&self) -> Api<Workload> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// ResourceFlavor, a ClusterQueue with `cpu` nominal quota and extra spec, a LocalQueue `lq`.
    async fn queues(&self, cpu: &str, extra: Value) {
        let flavor = format!("f-{}", self.ns);
        apply(&self.client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}})).await;
        let mut spec = json!({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]});
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        apply(&self.client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": self.cq()}, "spec": spec})).await;
        apply(&self.client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": self.ns}, "spec": {"clusterQueue": self.cq()}})).await;
    }

    async fn set_quota(&self, cpu: &str) {
        let api: Api<ClusterQueue> = Api::all(self.client.clone());
        // read-modify-replace, again on a 409: the controller writes the queue's status meanwhile
        for _ in 0..20 {
            let mut cq = api.get(&self.cq()).await.expect("ClusterQueue");
            cq.spec.resource_groups[0].flavors[0].resources[0].nominal_quota = Some(
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
            );
            match api.replace(&self.cq(), &PostParams::default(), &cq).await {
                Ok(_) => return,
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => panic!("quota raised: {e}"),
            }
        }
        panic!("quota raised: 20 conflicts in a row");
    }

    async fn create_service(&self, name: &str, labels: Value, workers: Value) {
        let svc = json!({
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {"rayClusterDeletionDelaySeconds": 1, "serveConfigV2": "applications: []",
                "rayClusterConfig": {"rayVersion": "2.51.0", "suspend": true,
                    "headGroupSpec": {"rayStartParams": {}, "template": ray_pod("1").image(RAY_IMAGE)},
                    "workerGroupSpecs": workers}}
        });
        self.services()
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).expect("RayService"),
            )
            .await
            .expect("RayService created");
    }

    async fn patch_service(&self, name: &str, patch: Value) {
        self.services()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("RayService patched");
    }

    async fn children(&self, service: &str) -> Vec<RayCluster> {
        let mut items = self
            .clusters()
            .list(
                &ListParams::default().labels(&format!("ray.io/originated-from-cr-name={service}")),
            )
            .await
            .expect("list children")
            .items;
        items.sort_by_key(|c| c.metadata.creation_timestamp.clone().map(|t| t.0));
        items
    }

    async fn live_slices(&self, service: &str) -> Vec<Workload> {
        let all = self
            .workloads()
            .list(&ListParams::default().labels(&format!("raygate.io/rayservice={service}")))
            .await
            .expect("list")
            .items;
        all.into_iter()
            .filter(|w| !raygate::workload::is_finished(w.status.as_ref()))
            .collect()
    }

    /// Reserved quota of the test's ClusterQueue for cpu, as the status reports it.
    async fn cq_cpu(&self) -> Option<String> {
        let cq = Api::<ClusterQueue>::all(self.client.clone())
            .get(&self.cq())
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

    /// Waits for a steady single-child service: admitted, released, promoted.
    async fn wait_running(&self, service: &str) -> String {
        eventually(WAIT, "the first child runs and is active", || async {
            let svc = self.services().get(service).await.ok()?;
            let active = svc.status?.active_service_status?.ray_cluster_name?;
            let child = self.clusters().get(&active).await.ok()?;
            (child.spec.suspend != Some(true)).then_some(active)
        })
        .await
    }

    /// A running service `svc` (one worker group of 1 CPU) whose `rayVersion` bump left a
    /// pending child held suspended; returns the pending child's name.
    async fn held_upgrade(&self) -> String {
        self.held_upgrade_labelled(queue("lq")).await
    }

    /// [`Env::held_upgrade`] of a RayService opted in with `labels`.
    async fn held_upgrade_labelled(&self, labels: Value) -> String {
        self.create_service("svc", labels, json!([group("w", 1, "1")]))
            .await;
        self.wait_running("svc").await;
        self.patch_service(
            "svc",
            json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.0"}}}),
        )
        .await;
        eventually(WAIT, "a held pending child", || async {
            let child = self.pending_child("svc").await?;
            (child.spec.suspend == Some(true))
                .then(|| child.metadata.name.clone().unwrap_or_default())
        })
        .await
    }

    /// The child KubeRay names in `status.pendingServiceStatus`, once it exists. (Children's
    /// creation times have one-second resolution, so their order cannot tell.)
    async fn pending_child(&self, service: &str) -> Option<RayCluster> {
        let svc = self.services().get(service).await.ok()?;
        let name = svc.status?.pending_service_status?.ray_cluster_name?;
        self.clusters().get_opt(&name).await.ok()?
    }

    async fn stop(mut self) {
        self.kill_controller().await;
        let wall = self.started.0.elapsed().as_secs_f64();
        let cluster = self
            .clock
            .now()
            .duration_since(self.started.1)
            .as_secs_f64();
        eprintln!(
            "timing {}: {cluster:.1} s of cluster time in {wall:.2} s of wall time",
            self.ns
        );
        if let (true, Some(sim)) = (self.faulty, &self.sim) {
            // converged *despite* faults: the seed fails the first RayService patch at least
            let stats = sim.fault_stats();
            eprintln!("faults injected: {stats:?}");
            assert!(
                stats.errors.get(&500).is_some_and(|n| *n > 0),
                "no write failed: {stats:?}"
            );
        }
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
    }
}

fn group(name: &str, replicas: i32, cpu: &str) -> Value {
    json!({"groupName": name, "replicas": replicas, "minReplicas": 0, "maxReplicas": 10, "rayStartParams": {}, "template": ray_pod(cpu).image(RAY_IMAGE)})
}

fn queue(q: &str) -> Value {
    json!({"kueue.x-k8s.io/queue-name": q})
}

/// Server-side applies one object with raygate's dev client (the kind table lives there).
async fn apply(client: &Client, obj: Value) {
    raygate::client::dev::apply(client, &obj.to_string(), "test", None)
        .await
        .unwrap_or_else(|e| panic!("applying {obj}: {e}"));
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

/// One test at a time (a panicking test releases it too: tokio's mutex does not poison).
async fn lock() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

async fn an_upgrade_waits_for_quota_then_runs_and_the_slice_shrinks_back(backend: Backend) {
    let env = Env::new(backend, "upgrade-gate").await;
    env.queues("3", json!({})).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    let first = env.wait_running("svc").await;
    assert_eq!(env.live_slices("svc").await.len(), 1);
    eventually(WAIT, "2 CPU reserved", || async {
        (env.cq_cpu().await.as_deref() == Some("2")).then_some(())
    })
    .await;

    // a rayVersion bump: KubeRay creates the pending child, born suspended
    env.patch_service(
        "svc",
        json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.0"}}}),
    )
    .await;
    let pending = eventually(WAIT, "a pending child", || async {
        env.pending_child("svc").await
    })
    .await;
    assert_eq!(
        pending.spec.suspend,
        Some(true),
        "born suspended through the template gate"
    );
    let message = eventually(
        WAIT,
        "a pending replacement slice naming the shortfall",
        || async {
            let live = env.live_slices("svc").await;
            let replacement = live.iter().find(|w| {
                w.metadata.annotations.as_ref().is_some_and(|a| {
                    a.contains_key("kueue.x-k8s.io/workload-slice-replacement-for")
                })
            })?;
            let c = condition(replacement, "QuotaReserved")?;
            (c.status == "False").then(|| c.message.clone())
        },
    )
    .await;
    assert!(
        message.contains("cpu") && message.contains(&env.cq()),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = env
        .clusters()
        .get(pending.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        held.spec.suspend,
        Some(true),
        "held while the slice is pending"
    );

    // quota arrives: the child runs, KubeRay promotes it and deletes the old one, the slice shrinks
    env.set_quota("4").await;
    let new_name = pending.metadata.name.clone().unwrap();
    eventually(
        WAIT,
        "the pending child is released and promoted",
        || async {
            let svc = env.services().get("svc").await.ok()?;
            (svc.status?.active_service_status?.ray_cluster_name? == new_name).then_some(())
        },
    )
    .await;
    eventually(WAIT, "the old child is deleted", || async {
        env.clusters()
            .get_opt(&first)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually(WAIT, "the chain settles on one slice of 2 CPU", || async {
        let live = env.live_slices("svc").await;
        let counts: Vec<i32> = live
            .first()?
            .spec
            .pod_sets
            .iter()
            .map(|p| p.count)
            .collect();
        (live.len() == 1
            && counts.iter().sum::<i32>() == 2
            && env.cq_cpu().await.as_deref() == Some("2"))
        .then_some(())
    })
    .await;
    env.stop().await;
}

async fn a_tampered_child_is_suspended_again(backend: Backend) {
    let env = Env::new(backend, "tamper").await;
    env.queues("2", json!({})).await;
    let pending = env.held_upgrade().await;
    // someone unsuspends it without quota
    env.clusters()
        .patch(
            &pending,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    eventually(WAIT, "raygate suspends it again", || async {
        let c = env.clusters().get(&pending).await.ok()?;
        (c.spec.suspend == Some(true)).then_some(())
    })
    .await;
    env.stop().await;
}

async fn bad_input_is_reported_and_leaves_other_services_alone(backend: Backend) {
    let env = Env::new(backend, "bad-input").await;
    env.queues("10", json!({})).await;
    // a queue label naming no LocalQueue
    env.create_service("lost", queue("nope"), json!([group("w", 1, "1")]))
        .await;
    // 18 worker groups: more PodSets than a Workload holds
    let groups: Vec<Value> = (0..18)
        .map(|i| group(&format!("g{i}"), 1, "100m"))
        .collect();
    env.create_service("wide", queue("lq"), json!(groups)).await;
    // a good one beside them
    env.create_service("good", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    env.wait_running("good").await;
    let message = eventually(WAIT, "the lost service's slice is inadmissible", || async {
        let live = env.live_slices("lost").await;
        let c = condition(live.first()?, "QuotaReserved")?;
        (c.status == "False" && c.reason == "Inadmissible").then(|| c.message.clone())
    })
    .await;
    assert!(message.contains("nope"), "{message}");
    let error = eventually(WAIT, "the wide service carries an error", || async {
        let svc = env.services().get("wide").await.ok()?;
        svc.metadata.annotations?.get(ERROR_ANNOTATION).cloned()
    })
    .await;
    assert!(error.contains("at most 17"), "{error}");
    assert!(env.live_slices("wide").await.is_empty());
    env.stop().await;
}

async fn an_autoscaler_scale_up_within_quota_gets_a_new_slice_and_suspends_nothing(
    backend: Backend,
) {
    let env = Env::new(backend, "autoscale").await;
    env.queues("4", json!({})).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    let active = env.wait_running("svc").await;
    // the autoscaler raises replicas on the active child (KubeRay does not upgrade for that)
    env.clusters()
        .patch(
            &active,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerGroupSpecs": [group("w", 2, "1")]}})),
        )
        .await
        .unwrap();
    eventually(WAIT, "3 CPU reserved by a replacement slice", || async {
        let live = env.live_slices("svc").await;
        (live.len() == 1 && env.cq_cpu().await.as_deref() == Some("3")).then_some(())
    })
    .await;
    let kids = env.children("svc").await;
    assert_eq!(kids.len(), 1, "no upgrade");
    assert_ne!(kids[0].spec.suspend, Some(true), "nothing suspended");
    env.stop().await;
}

async fn suspending_during_an_upgrade_removes_both_children_and_resume_runs_the_new_spec(
    backend: Backend,
) {
    let env = Env::new(backend, "suspend").await;
    env.queues("2", json!({})).await;
    env.held_upgrade().await;
    env.patch_service("svc", json!({"spec": {"suspend": true}}))
        .await;
    eventually(
        WAIT,
        "both children gone and the quota released",
        || async {
            (env.children("svc").await.is_empty() && env.live_slices("svc").await.is_empty())
                .then_some(())
        },
    )
    .await;
    env.patch_service("svc", json!({"spec": {"suspend": false}}))
        .await;
    let active = env.wait_running("svc").await;
    let child = env.clusters().get(&active).await.unwrap();
    assert_eq!(
        child.spec.ray_version.as_deref(),
        Some("2.52.0"),
        "the new spec runs"
    );
    env.stop().await;
}

async fn a_restarted_controller_converges_without_duplicates_or_early_releases(backend: Backend) {
    let mut env = Env::new(backend, "restart").await;
    env.queues("2", json!({})).await;
    env.held_upgrade().await;
    eventually(WAIT, "a pending replacement slice", || async {
        (env.live_slices("svc").await.len() == 2).then_some(())
    })
    .await;
    env.kill_controller().await;
    env.start_controller();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        env.live_slices("svc").await.len(),
        2,
        "no duplicate slice after the restart"
    );
    let held = env.pending_child("svc").await.expect("the pending child");
    assert_eq!(
        held.spec.suspend,
        Some(true),
        "the uncovered child is still held"
    );
    env.kill_controller().await;
    env.set_quota("4").await;
    env.start_controller();
    let new_name = held.metadata.name.clone().unwrap();
    eventually(WAIT, "promoted after quota arrives", || async {
        let svc = env.services().get("svc").await.ok()?;
        (svc.status?.active_service_status?.ray_cluster_name? == new_name).then_some(())
    })
    .await;
    env.stop().await;
}

async fn a_higher_priority_service_preempts_a_lower_one(backend: Backend) {
    let env = Env::new(backend, "preempt").await;
    env.queues(
        "2",
        json!({"preemption": {"withinClusterQueue": "LowerPriority"}}),
    )
    .await;
    for (name, value) in [("low", 10), ("high", 100)] {
        apply(&env.client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": format!("{name}-{}", env.ns)}, "value": value})).await;
    }
    let labels = |p: &str| json!({"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": format!("{p}-{}", env.ns)});
    env.create_service("low", labels("low"), json!([group("w", 1, "1")]))
        .await;
    env.wait_running("low").await;
    env.create_service("high", labels("high"), json!([group("w", 1, "1")]))
        .await;
    eventually(WAIT, "the low service is stopped by raygate", || async {
        let svc = env.services().get("low").await.ok()?;
        (svc.spec.suspend == Some(true)).then_some(())
    })
    .await;
    env.wait_running("high").await;
    assert!(
        env.children("low").await.is_empty()
            || env
                .children("low")
                .await
                .iter()
                .all(|c| c.spec.suspend == Some(true))
    );
    env.stop().await;
}

/// A held upgrade's pending replacement slice follows a priority raise in place (as Kueue
/// updates a Workload's priority when its job's class label changes): same slice, same creation
/// time, the new priority; now above the other service, it preempts it and the upgrade runs.
async fn a_held_upgrade_follows_a_priority_raise_in_place_and_preempts(backend: Backend) {
    let env = Env::new(backend, "raise").await;
    env.queues(
        "4",
        json!({"preemption": {"withinClusterQueue": "LowerPriority"}}),
    )
    .await;
    for (name, value) in [("low", 10), ("mid", 100), ("high", 1000)] {
        apply(&env.client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": format!("{name}-{}", env.ns)}, "value": value})).await;
    }
    let labels = |p: &str| json!({"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": format!("{p}-{}", env.ns)});
    env.create_service("svc", labels("low"), json!([group("w", 1, "1")]))
        .await;
    let first = env.wait_running("svc").await;
    env.create_service("other", labels("mid"), json!([group("w", 1, "1")]))
        .await;
    env.wait_running("other").await;
    env.patch_service(
        "svc",
        json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.0"}}}),
    )
    .await;
    let reserved = |w: &Workload| {
        w.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "QuotaReserved" && c.status == "True")
        })
    };
    let pending = eventually(WAIT, "a held upgrade, its replacement pending", || async {
        (env.pending_child("svc").await?.spec.suspend == Some(true)).then_some(())?;
        // (a class the controller has not seen yet is filled in once it has)
        env.live_slices("svc")
            .await
            .into_iter()
            .find(|w| !reserved(w) && w.spec.priority == Some(10))
    })
    .await;
    env.patch_service(
        "svc",
        json!({"metadata": {"labels": {"kueue.x-k8s.io/priority-class": format!("high-{}", env.ns)}}}),
    )
    .await;
    let name = pending.metadata.name.clone().unwrap();
    eventually(WAIT, "the same slice at the new priority", || async {
        let w = env
            .live_slices("svc")
            .await
            .into_iter()
            .find(|w| w.metadata.name.as_deref() == Some(name.as_str()))?;
        assert_eq!(
            w.metadata.creation_timestamp, pending.metadata.creation_timestamp,
            "updated in place"
        );
        (w.spec.priority == Some(1000)).then_some(())
    })
    .await;
    eventually(
        WAIT,
        "the other service stopped, the upgrade promoted",
        || async {
            let other = env.services().get("other").await.ok()?;
            let svc = env.services().get("svc").await.ok()?;
            let active = svc.status?.active_service_status?.ray_cluster_name?;
            (other.spec.suspend == Some(true) && active != first).then_some(())
        },
    )
    .await;
    env.stop().await;
}

async fn a_resource_changing_upgrade_with_an_added_group_is_charged_exactly(backend: Backend) {
    let env = Env::new(backend, "reshape").await;
    env.queues("5", json!({})).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    let first = env.wait_running("svc").await;
    // old child: head 1 + w 1 = 2 CPU. The upgrade doubles worker size (head 1 + w 2 = 3 more):
    // 5 > 4, held. While it is held a worker group is appended (KubeRay updates the pending child
    // in place): 1 + 2 + 1 = 4 more, 6 in all.
    env.set_quota("4").await;
    env.patch_service("svc", json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.0", "workerGroupSpecs": [group("w", 1, "2")]}}})).await;
    eventually(WAIT, "the pending child is held", || async {
        (env.pending_child("svc").await?.spec.suspend == Some(true)).then_some(())
    })
    .await;
    env.patch_service("svc", json!({"spec": {"rayClusterConfig": {"workerGroupSpecs": [group("w", 1, "2"), group("extra", 1, "1")]}}})).await;
    eventually(
        WAIT,
        "the pending slice follows the added group",
        || async {
            let live = env.live_slices("svc").await;
            let replacement = live
                .iter()
                .find(|w| w.spec.pod_sets.iter().any(|p| p.name == "extra"))?;
            (live.len() == 2).then(|| replacement.clone())
        },
    )
    .await;
    // old: head 1 + w 1 = 2; new: head 1 + w 2 + extra 1 = 4; together 6
    env.set_quota("6").await;
    eventually(
        WAIT,
        "both children counted exactly while both live",
        || async { (env.cq_cpu().await.as_deref() == Some("6")).then_some(()) },
    )
    .await;
    eventually(WAIT, "the old child is deleted", || async {
        env.clusters()
            .get_opt(&first)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually(
        WAIT,
        "the chain shrinks onto the new shape: 4 CPU",
        || async {
            let live = env.live_slices("svc").await;
            (live.len() == 1 && env.cq_cpu().await.as_deref() == Some("4")).then_some(())
        },
    )
    .await;
    env.stop().await;
}

impl Env {
    /// Restarts the controller with `config` (test tweaks such as the slice retention).
    async fn restart_controller_with(&mut self, config: Config) {
        self.kill_controller().await;
        self.spawn_controller(config);
    }

    async fn all_slices(&self, service: &str) -> Vec<Workload> {
        self.workloads()
            .list(&ListParams::default().labels(&format!("raygate.io/rayservice={service}")))
            .await
            .expect("list")
            .items
    }
}

async fn removing_the_queue_label_frees_the_quota_and_hands_the_service_back(backend: Backend) {
    let env = Env::new(backend, "opt-out").await;
    env.queues("2", json!({})).await;
    let pending = env.held_upgrade().await;
    env.patch_service(
        "svc",
        json!({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": null}}}),
    )
    .await;
    eventually(WAIT, "slices finished and the quota released", || async {
        let cpu = env.cq_cpu().await;
        (env.live_slices("svc").await.is_empty() && matches!(cpu.as_deref(), None | Some("0")))
            .then_some(())
    })
    .await;
    eventually(WAIT, "the held child runs", || async {
        let c = env.clusters().get(&pending).await.ok()?;
        (c.spec.suspend != Some(true)).then_some(())
    })
    .await;
    // only the opted-out marker stays (a child KubeRay creates later from a stale template is
    // released too)
    eventually(WAIT, "raygate's gate and annotations are gone", || async {
        let svc = env.services().get("svc").await.ok()?;
        let annotations = svc.metadata.annotations.unwrap_or_default();
        (svc.spec.ray_cluster_config.suspend.is_none()
            && !annotations
                .keys()
                .any(|k| k.starts_with("raygate.io/") && k != "raygate.io/opted-out")
            && annotations.contains_key("raygate.io/opted-out"))
        .then_some(())
    })
    .await;
    for child in env.children("svc").await {
        let labels = child.metadata.labels.unwrap_or_default();
        assert!(
            !labels.contains_key("kueue.x-k8s.io/queue-name"),
            "{:?} keeps the queue label: the admission policy would still apply",
            child.metadata.name
        );
    }
    env.stop().await;
}

/// raygate's own opt-in label (`raygate.io/queue-name`, which no Kueue integration acts on) holds
/// an upgrade for quota like Kueue's label: the children carry it (KubeRay copies the service's
/// labels) and not Kueue's, the slice is queued in the LocalQueue it names; removing it hands the
/// service back.
async fn raygate_s_own_label_holds_an_upgrade_and_its_removal_hands_the_service_back(
    backend: Backend,
) {
    let env = Env::new(backend, "own-label").await;
    env.queues("2", json!({})).await;
    let pending = env
        .held_upgrade_labelled(json!({"raygate.io/queue-name": "lq"}))
        .await;
    for child in env.children("svc").await {
        let labels = child.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("raygate.io/queue-name").map(String::as_str),
            Some("lq")
        );
        assert!(
            !labels.contains_key("kueue.x-k8s.io/queue-name"),
            "{labels:?}"
        );
    }
    let slices = env.live_slices("svc").await;
    assert!(
        slices
            .iter()
            .all(|w| w.spec.queue_name.as_deref() == Some("lq")),
        "{slices:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = env.clusters().get(&pending).await.unwrap();
    assert_eq!(
        held.spec.suspend,
        Some(true),
        "held while its slice is pending"
    );
    env.patch_service(
        "svc",
        json!({"metadata": {"labels": {"raygate.io/queue-name": null}}}),
    )
    .await;
    eventually(WAIT, "slices finished and the held child runs", || async {
        let c = env.clusters().get(&pending).await.ok()?;
        (env.live_slices("svc").await.is_empty() && c.spec.suspend != Some(true)).then_some(())
    })
    .await;
    eventually(WAIT, "no child keeps raygate's label", || async {
        env.children("svc")
            .await
            .iter()
            .all(|c| {
                !c.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("raygate.io/queue-name"))
            })
            .then_some(())
    })
    .await;
    env.stop().await;
}

async fn a_queue_label_typo_is_fixed_by_relabelling(backend: Backend) {
    let env = Env::new(backend, "typo").await;
    env.queues("10", json!({})).await;
    env.create_service("svc", queue("lq-typo"), json!([group("w", 1, "1")]))
        .await;
    eventually(WAIT, "the slice is inadmissible", || async {
        let live = env.live_slices("svc").await;
        let c = condition(live.first()?, "QuotaReserved")?;
        (c.status == "False").then_some(())
    })
    .await;
    env.patch_service(
        "svc",
        json!({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "lq"}}}),
    )
    .await;
    env.wait_running("svc").await;
    let live = env.live_slices("svc").await;
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].spec.queue_name.as_deref(), Some("lq"));
    env.stop().await;
}

async fn finished_slices_are_deleted_after_the_retention(backend: Backend) {
    let mut env = Env::new(backend, "retention").await;
    env.restart_controller_with(Config {
        admission_resync: Duration::from_millis(500),
        finished_slice_retention: Some(raygate::slices::Retention {
            after_finished: Duration::ZERO,
            keep_newest: 0,
        }),
        ..Default::default()
    })
    .await;
    env.queues("4", json!({})).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    let active = env.wait_running("svc").await;
    // a scale-up: a replacement slice, and the replaced one finishes
    env.clusters()
        .patch(
            &active,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerGroupSpecs": [group("w", 2, "1")]}})),
        )
        .await
        .unwrap();
    eventually(WAIT, "only the live slice is left", || async {
        let all = env.all_slices("svc").await;
        (all.len() == 1
            && !raygate::workload::is_finished(all[0].status.as_ref())
            && env.cq_cpu().await.as_deref() == Some("3"))
        .then_some(())
    })
    .await;
    env.stop().await;
}

async fn a_child_with_invalid_podsets_is_still_held(backend: Backend) {
    let env = Env::new(backend, "invalid-held").await;
    env.queues("2", json!({})).await;
    let pending = env.held_upgrade().await;
    // someone unsuspends the held child and gives it 18 worker groups (more than a Workload holds)
    let groups: Vec<Value> = (0..18)
        .map(|i| group(&format!("g{i}"), 1, "100m"))
        .collect();
    env.clusters()
        .patch(
            &pending,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false, "workerGroupSpecs": groups}})),
        )
        .await
        .unwrap();
    eventually(WAIT, "the error is reported", || async {
        let svc = env.services().get("svc").await.ok()?;
        svc.metadata.annotations?.get(ERROR_ANNOTATION).cloned()
    })
    .await;
    eventually(WAIT, "raygate suspends it again", || async {
        let c = env.clusters().get(&pending).await.ok()?;
        (c.spec.suspend == Some(true)).then_some(())
    })
    .await;
    let active = env.wait_running("svc").await;
    assert_ne!(active, pending, "the running child is left alone");
    env.stop().await;
}

async fn a_scale_down_with_a_new_image_changes_only_the_reserved_slice_counts(backend: Backend) {
    let env = Env::new(backend, "count-only").await;
    env.queues("4", json!({})).await;
    env.create_service("svc", queue("lq"), json!([group("w", 2, "1")]))
        .await;
    let active = env.wait_running("svc").await;
    eventually(WAIT, "3 CPU reserved", || async {
        (env.cq_cpu().await.as_deref() == Some("3")).then_some(())
    })
    .await;
    let before = env.live_slices("svc").await;
    assert_eq!(before.len(), 1);
    // one fewer worker on a new image (same per-pod requests): Kueue allows only the count to drop
    let mut shrunk = group("w", 1, "1");
    shrunk["template"]["spec"]["containers"][0]["image"] = json!("rayproject/ray:2.52.0");
    env.clusters()
        .patch(
            &active,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerGroupSpecs": [shrunk]}})),
        )
        .await
        .unwrap();
    let after = eventually(WAIT, "the slice shrinks in place", || async {
        let live = env.live_slices("svc").await;
        let w = live.first()?.spec.pod_sets.iter().find(|p| p.name == "w")?;
        (live.len() == 1 && w.count == 1).then(|| live[0].clone())
    })
    .await;
    assert_eq!(after.metadata.name, before[0].metadata.name, "in place");
    for (new, old) in after.spec.pod_sets.iter().zip(&before[0].spec.pod_sets) {
        assert_eq!(
            new.template, old.template,
            "{}: only the count may change",
            new.name
        );
    }
    env.stop().await;
}

/// Issue #9 item 5: a pending child replaced by a second spec change is dangling (KubeRay
/// deletes it after `rayClusterDeletionDelaySeconds`): it is not charged, and the newest pending
/// child runs as soon as the active one plus it fit.
async fn a_replaced_pending_child_is_not_charged_and_the_newest_runs_when_it_fits(
    backend: Backend,
) {
    // (KubeRay's status is written more than a clock margin after that child's creation)
    replaced_pending_child(backend, "replaced-pending", Duration::from_millis(2500)).await;
}

/// The same with the second spec change right after the first (both children born within a
/// clock margin of each other and of the status naming the second): still not charged, never
/// released.
async fn a_pending_child_replaced_at_once_is_not_charged_nor_released(backend: Backend) {
    replaced_pending_child(backend, "replaced-at-once", Duration::ZERO).await;
}

async fn replaced_pending_child(backend: Backend, name: &str, pause: Duration) {
    let env = Env::new(backend, name).await;
    env.queues("3", json!({})).await;
    let first_pending = env.held_upgrade().await;
    // KubeRay's default delay: the replaced child lingers far longer than this test
    env.patch_service(
        "svc",
        json!({"spec": {"rayClusterDeletionDelaySeconds": 60}}),
    )
    .await;
    tokio::time::sleep(pause).await;
    env.patch_service(
        "svc",
        json!({"spec": {"rayClusterConfig": {"rayVersion": "2.53.0"}}}),
    )
    .await;
    let newest = eventually(WAIT, "a second held pending child", || async {
        let child = env.pending_child("svc").await?;
        let name = child.metadata.name.clone().unwrap_or_default();
        (name != first_pending && child.spec.suspend == Some(true)).then_some(name)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let totals: Vec<i32> = env
        .live_slices("svc")
        .await
        .iter()
        .map(|w| w.spec.pod_sets.iter().map(|p| p.count).sum())
        .collect();
    assert!(
        totals.iter().all(|t| *t <= 4),
        "the replaced child is not charged: slices {totals:?}"
    );
    // quota for the active child plus the newest pending one: it runs and is promoted
    env.set_quota("4").await;
    eventually(
        WAIT,
        "the newest pending child runs and is promoted",
        || async {
            let svc = env.services().get("svc").await.ok()?;
            (svc.status?.active_service_status?.ray_cluster_name? == newest).then_some(())
        },
    )
    .await;
    let replaced = env.clusters().get_opt(&first_pending).await.unwrap();
    assert!(
        replaced.is_none_or(|c| c.spec.suspend == Some(true)),
        "the replaced child is never released"
    );
    env.stop().await;
}

/// Issue #9 item 5: a first child held past `ray.io/initializing-timeout` is warned about
/// before KubeRay fails the RayService, and once KubeRay gave up raygate finishes its slices, so
/// quota that arrives later is not spent on a dead RayService.
async fn a_first_child_held_past_the_initializing_timeout_is_warned_then_its_slice_finished(
    backend: Backend,
) {
    let env = Env::new(backend, "init-timeout").await;
    env.queues("1", json!({})).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    env.patch_service(
        "svc",
        json!({"metadata": {"annotations": {"ray.io/initializing-timeout": "5s"}}}),
    )
    .await;
    let warning = eventually(WAIT, "a deadline warning on the RayService", || async {
        let svc = env.services().get("svc").await.ok()?;
        svc.metadata
            .annotations?
            .get(raygate::gate::children::INITIALIZING_DEADLINE_ANNOTATION)
            .cloned()
    })
    .await;
    assert!(warning.contains("fails this RayService"), "{warning}");
    eventually(
        WAIT,
        "KubeRay gives up and raygate finishes the slice",
        || async {
            let svc = env.services().get("svc").await.ok()?;
            let ready = svc
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.reason == "InitializingTimeout" && env.live_slices("svc").await.is_empty())
                .then_some(())
        },
    )
    .await;
    eventually(WAIT, "the annotation says KubeRay gave up", || async {
        let svc = env.services().get("svc").await.ok()?;
        svc.metadata
            .annotations?
            .get(raygate::gate::children::INITIALIZING_DEADLINE_ANNOTATION)
            .filter(|n| n.contains("gave up"))
            .map(|_| ())
    })
    .await;
    // quota arrives too late: nothing is admitted or released for the dead RayService
    env.set_quota("4").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(env.live_slices("svc").await.is_empty());
    assert!(env.cq_cpu().await.is_none_or(|c| c == "0"));
    assert!(
        env.children("svc")
            .await
            .iter()
            .all(|c| c.spec.suspend == Some(true))
    );
    env.stop().await;
}

/// Issue #9 item 6: a child released against a slice admitted on a flavor with `nodeLabels` and
/// `tolerations` gets them on its pod templates (as Kueue's `RunWithPodSetsInfo` does) before it
/// is unsuspended.
async fn the_admitted_flavor_s_node_labels_and_tolerations_reach_the_released_child(
    backend: Backend,
) {
    let env = Env::new(backend, "flavor-pods").await;
    env.queues("4", json!({})).await;
    let flavor = format!("f-{}", env.ns);
    let toleration = json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"});
    apply(
        &env.client,
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": flavor},
        "spec": {"nodeLabels": {"pool": "h100"},
            "nodeTaints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
            "tolerations": [toleration.clone()]}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    let child = env.wait_running("svc").await;
    let c = env.clusters().get(&child).await.unwrap();
    let c = serde_json::to_value(&c).unwrap();
    for template in [
        &c["spec"]["headGroupSpec"]["template"],
        &c["spec"]["workerGroupSpecs"][0]["template"],
    ] {
        assert_eq!(template["spec"]["nodeSelector"], json!({"pool": "h100"}));
        assert_eq!(template["spec"]["tolerations"], json!([toleration]));
    }
    assert_eq!(c["spec"]["suspend"], json!(false));
    env.stop().await;
}

/// Issue #9 (a): placement is part of a PodSet's shape. A released child carries the flavor's
/// node labels raygate injected, yet its slice is not replaced for it; an upgrade that only moves
/// the worker group to another GPU pool (`nodeSelector`) gets a PodSet of its own in the
/// replacement slice, admitted on that pool's flavor, and the new child runs there.
async fn a_group_moved_to_another_gpu_pool_is_charged_to_that_pool_s_flavor(backend: Backend) {
    let env = Env::new(backend, "pool-move").await;
    let (pool_a, pool_b) = (format!("a-{}", env.ns), format!("b-{}", env.ns));
    for (flavor, pool) in [(&pool_a, "a"), (&pool_b, "b")] {
        apply(
            &env.client,
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                "metadata": {"name": flavor}, "spec": {"nodeLabels": {"gpu-pool": pool}}}),
        )
        .await;
    }
    apply(
        &env.client,
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": env.cq()},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": pool_a, "resources": [{"name": "cpu", "nominalQuota": "4"}]},
            {"name": pool_b, "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}}),
    )
    .await;
    apply(
        &env.client,
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": env.ns}, "spec": {"clusterQueue": env.cq()}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    let first = env.wait_running("svc").await;
    let c = env.clusters().get(&first).await.expect("child");
    let worker = &c.spec.worker_group_specs.as_ref().expect("groups")[0];
    let selector = |t: &k8s_openapi::api::core::v1::PodTemplateSpec| {
        t.spec.as_ref().and_then(|s| s.node_selector.clone())
    };
    assert_eq!(
        selector(&worker.template),
        Some([("gpu-pool".to_string(), "a".to_string())].into()),
        "pool a's label was injected"
    );
    assert!(
        raygate::meta::annotation(&c.metadata, raygate::podsets::INJECTED_PLACEMENT_ANNOTATION)
            .is_some()
    );
    // the injection is not a move: the released child's slice stays the only one
    tokio::time::sleep(Duration::from_secs(3)).await;
    let slices = env.all_slices("svc").await;
    assert_eq!(
        slices.len(),
        1,
        "no replacement for raygate's own injection"
    );
    // the upgrade moves the workers to pool b
    let mut moved = group("w", 1, "1");
    moved["template"]["spec"]["nodeSelector"] = json!({"gpu-pool": "b"});
    env.patch_service(
        "svc",
        json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.0", "workerGroupSpecs": [moved]}}}),
    )
    .await;
    let replacement = eventually(
        WAIT,
        "the replacement is admitted with the moved group on pool b",
        || async {
            let live = env.live_slices("svc").await;
            live.into_iter().find(|w| {
                let on_b = w.spec.pod_sets.iter().find(|p| {
                    selector(&p.template).and_then(|s| s.get("gpu-pool").cloned())
                        == Some("b".to_string())
                });
                let assigned = |name: &str| {
                    w.status
                        .as_ref()?
                        .admission
                        .as_ref()?
                        .pod_set_assignments
                        .iter()
                        .find(|a| a.name == name)
                        .and_then(|a| a.flavors.get("cpu").cloned())
                };
                on_b.is_some_and(|p| assigned(&p.name).as_deref() == Some(pool_b.as_str()))
            })
        },
    )
    .await;
    // the old child's workers stay charged to pool a in the same slice
    let old_workers = replacement
        .spec
        .pod_sets
        .iter()
        .find(|p| p.name == "w")
        .expect("the old workers' PodSet");
    assert_eq!(old_workers.count, 1);
    assert_eq!(
        selector(&old_workers.template),
        None,
        "the user's placement"
    );
    eventually(WAIT, "the moved child runs on pool b", || async {
        let child = env.pending_child("svc").await.or(
            // promoted already
            async {
                let svc = env.services().get("svc").await.ok()?;
                let name = svc.status?.active_service_status?.ray_cluster_name?;
                (name != first).then_some(())?;
                env.clusters().get_opt(&name).await.ok()?
            }
            .await,
        )?;
        let w = &child.spec.worker_group_specs.as_ref()?[0];
        (child.spec.suspend != Some(true)
            && selector(&w.template)?.get("gpu-pool").map(String::as_str) == Some("b"))
        .then_some(())
    })
    .await;
    env.stop().await;
}

/// Builtin admission charges a PodSet what the API server adds to its pods, as Kueue's
/// `workload.AdjustResources` does: the namespace's LimitRange default request for a container
/// that sets none, and the overhead of the RuntimeClass the template names. On the sim (the CRD
/// API server serves neither kind).
#[tokio::test(start_paused = true)]
async fn builtin_admission_charges_limit_range_defaults_and_runtime_class_overhead() {
    use k8s_openapi::api::core::v1::LimitRange;
    use k8s_openapi::api::node::v1::RuntimeClass;
    let env = Env::new(Backend::Sim, "pod-defaults").await;
    let lr = json!({"metadata": {"name": "defaults", "namespace": env.ns},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "2"}}]}});
    Api::<LimitRange>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &serde_json::from_value(lr).unwrap())
        .await
        .unwrap();
    let rc = json!({"metadata": {"name": format!("kata-{}", env.ns)}, "handler": "kata",
        "overhead": {"podFixed": {"cpu": "250m"}}});
    Api::<RuntimeClass>::all(env.client.clone())
        .create(&PostParams::default(), &serde_json::from_value(rc).unwrap())
        .await
        .unwrap();
    env.queues("10", json!({})).await;
    // the head asks 1 CPU itself; the worker asks nothing and runs under the RuntimeClass
    let worker = json!({"groupName": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 10,
        "rayStartParams": {}, "template": {"spec": {
            "runtimeClassName": format!("kata-{}", env.ns),
            "containers": [{"name": "ray", "image": "rayproject/ray:2.51.0"}]}}});
    env.create_service("svc", queue("lq"), json!([worker]))
        .await;
    env.wait_running("svc").await;
    // head 1; worker: the LimitRange's 2 plus the RuntimeClass's 250m
    eventually(WAIT, "3250m CPU reserved", || async {
        (env.cq_cpu().await.as_deref() == Some("3250m")).then_some(())
    })
    .await;
    env.stop().await;
}

/// The paused clock really runs: a held upgrade on the sim waits ten minutes of cluster time
/// (the controller resyncing every 500 ms all along) in a few seconds of wall time, and what the
/// controller then writes is stamped in cluster time, after those ten minutes.
#[tokio::test(start_paused = true)]
async fn on_the_paused_clock_a_held_upgrade_waits_its_cluster_minutes_in_seconds_of_wall_time() {
    let env = Env::new(Backend::Sim, "paused-minutes").await;
    env.queues("2", json!({})).await;
    let pending = env.held_upgrade().await;
    let (wall0, cluster0) = (std::time::Instant::now(), env.clock.now());
    tokio::time::sleep(Duration::from_secs(600)).await;
    let waited = env.clock.now().duration_since(cluster0);
    let wall = wall0.elapsed();
    assert!(waited.as_secs() >= 600, "cluster time moved {waited:?}");
    assert!(
        wall < Duration::from_secs(60),
        "ten cluster minutes took {wall:?} of wall time"
    );
    let held = env
        .clusters()
        .get(&pending)
        .await
        .expect("the pending child");
    assert_eq!(held.spec.suspend, Some(true), "still held without quota");
    env.set_quota("4").await;
    let reserved_at = eventually(WAIT, "the replacement slice is admitted", || async {
        let live = env.live_slices("svc").await;
        live.iter()
            .filter_map(|w| condition(w, "QuotaReserved"))
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.0)
            .max()
    })
    .await;
    let sim_now = env.sim.as_ref().expect("a sim").clock().now();
    assert!(
        // conditions are stamped in whole seconds
        reserved_at.as_second() >= cluster0.as_second() + 600 && reserved_at <= sim_now,
        "admitted at {reserved_at}, the wait began at {cluster0}, the sim reads {sim_now}: \
         the controller's clock is the sim's"
    );
    eventually(WAIT, "the held child is released", || async {
        let c = env.clusters().get(&pending).await.ok()?;
        (c.spec.suspend != Some(true)).then_some(())
    })
    .await;
    eprintln!("ten cluster minutes held in {wall:?} of wall time");
    env.stop().await;
}

/// An image whose clusters never get ready in the emulator (a bad new version).
const BAD_IMAGE: &str = "rayproject/ray:2.52.0-broken";

fn bad_group(name: &str, replicas: i32, cpu: &str) -> Value {
    let mut g = group(name, replicas, cpu);
    g["template"]["spec"]["containers"][0]["image"] = json!(BAD_IMAGE);
    g
}

impl Env {
    /// Upgrades `service`'s worker group `w` (1 × 1 CPU) to [`BAD_IMAGE`] and waits for the new
    /// child to be released: its name.
    async fn release_bad_upgrade(&self, service: &str) -> String {
        let bad =
            json!({"spec": {"rayClusterConfig": {"workerGroupSpecs": [bad_group("w", 1, "1")]}}});
        self.patch_service(service, bad).await;
        eventually(WAIT, "the upgrade is admitted and released", || async {
            let c = self.pending_child(service).await?;
            (c.spec.suspend != Some(true)).then(|| c.metadata.name.clone().unwrap_or_default())
        })
        .await
    }

    /// The live slice that replaces another, admitted.
    async fn admitted_replacement(&self, service: &str) -> Option<Workload> {
        self.live_slices(service).await.into_iter().find(|w| {
            raygate::workload::is_admitted(w.status.as_ref())
                && w.metadata.annotations.as_ref().is_some_and(|a| {
                    a.contains_key("kueue.x-k8s.io/workload-slice-replacement-for")
                })
        })
    }

    /// Evicts `slice` as Kueue's `waitForPodsReady` does (`reconcileNotReadyTimeout` →
    /// `workloadevict.Evict`): `Evicted=True`, reason `PodsReadyTimeout`, the reservation kept.
    async fn evict_for_pods_ready_timeout(&self, slice: &str) {
        let now = self.clock.now().to_string();
        for _ in 0..20 {
            let mut w = self.workloads().get(slice).await.expect("slice");
            let status = w.status.get_or_insert_with(Default::default);
            status.conditions.retain(|c| c.type_ != "Evicted");
            status.conditions.push(
                serde_json::from_value(json!({"type": "Evicted", "status": "True",
                    "reason": "PodsReadyTimeout", "lastTransitionTime": now,
                    "message": format!("Exceeded the PodsReady timeout {}/{slice}", self.ns)}))
                .expect("condition"),
            );
            match self
                .workloads()
                .replace_status(slice, &PostParams::default(), &w)
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => panic!("evicting {slice}: {e}"),
            }
        }
        panic!("evicting {slice}: 20 conflicts in a row");
    }

    /// The Events on the RayService `service` with `reason` (the sim serves Events; `None` on
    /// the real CRD API server, which does not).
    async fn service_events(&self, service: &str, reason: &str) -> Option<Vec<String>> {
        self.sim.as_ref()?;
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.ns);
        let list = events.list(&ListParams::default()).await.ok()?.items;
        Some(
            list.into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().is_some_and(|r| {
                            r.kind.as_deref() == Some("RayService")
                                && r.name.as_deref() == Some(service)
                        })
                })
                .filter_map(|e| e.note)
                .collect(),
        )
    }

    /// The serving child `active` still runs, is still active, and the RayService is not stopped.
    async fn still_serving(&self, service: &str, active: &str) -> bool {
        let Ok(svc) = self.services().get(service).await else {
            return false;
        };
        let named = svc
            .status
            .and_then(|s| s.active_service_status)
            .and_then(|a| a.ray_cluster_name);
        let child = self.clusters().get_opt(active).await.ok().flatten();
        svc.spec.suspend != Some(true)
            && named.as_deref() == Some(active)
            && child.is_some_and(|c| {
                c.spec.suspend != Some(true) && c.metadata.deletion_timestamp.is_none()
            })
    }
}

async fn a_failed_upgrade_s_evicted_slice_holds_the_upgrade_and_the_service_keeps_serving(
    backend: Backend,
) {
    let env = Env::with_emulator(backend, "upgrade-evicted", |c| {
        c.never_ready_image = Some(BAD_IMAGE.into());
    })
    .await;
    env.queues("4", json!({})).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    let active = env.wait_running("svc").await;

    // a new image that never gets ready; the quota fits both children
    let pending = env.release_bad_upgrade("svc").await;
    // Kueue's waitForPodsReady reads PodsReady: it follows the serving child, not the upgrade
    let slice = eventually(
        WAIT,
        "PodsReady=True on the replacement slice while the new child is not ready",
        || async {
            let w = env.admitted_replacement("svc").await?;
            let c = condition(&w, "PodsReady")?;
            let p = env.clusters().get(&pending).await.ok()?;
            let not_ready = p.status.and_then(|s| s.state).as_deref() != Some("ready");
            (c.status == "True" && not_ready && p.spec.suspend != Some(true))
                .then(|| w.metadata.name.clone().unwrap_or_default())
        },
    )
    .await;

    // Kueue evicts it anyway (a PodsReady timeout): only the upgrade stops
    env.evict_for_pods_ready_timeout(&slice).await;
    eventually(WAIT, "the pending child is held again", || async {
        let p = env.clusters().get(&pending).await.ok()?;
        (p.spec.suspend == Some(true)).then_some(())
    })
    .await;
    assert!(env.still_serving("svc", &active).await);
    if let Some(notes) = env.service_events("svc", "UpgradeEvicted").await {
        assert!(
            notes
                .iter()
                .any(|n| n.contains(&slice) && n.contains(&pending) && n.contains(&active)),
            "{notes:?}"
        );
        assert!(
            env.service_events("svc", "Stopped")
                .await
                .unwrap_or_default()
                .is_empty()
        );
    }
    // the upgrade is queued again as a replacement of the evicted slice; the serving child is
    // never left without a reservation, and the queue never holds more than its quota
    eventually(WAIT, "the upgrade queued again", || async {
        let live = env.live_slices("svc").await;
        live.iter()
            .any(|w| raygate::workload::predecessor(w).is_some_and(|p| p.ends_with(&slice)))
            .then_some(())
    })
    .await;
    for _ in 0..10 {
        assert!(env.still_serving("svc", &active).await);
        let cpu: f64 = env
            .cq_cpu()
            .await
            .unwrap_or_default()
            .parse()
            .unwrap_or(0.0);
        assert!(cpu <= 4.0, "{cpu} CPU reserved on a 4-CPU queue");
        assert!(
            env.live_slices("svc")
                .await
                .iter()
                .any(|w| raygate::workload::holds_quota(w.status.as_ref())),
            "the serving child has no reservation"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    env.stop().await;
}

async fn a_preempted_upgrade_gives_up_only_its_delta_and_the_service_keeps_serving(
    backend: Backend,
) {
    let env = Env::with_emulator(backend, "upgrade-preempted", |c| {
        c.never_ready_image = Some(BAD_IMAGE.into());
    })
    .await;
    env.queues(
        "4",
        json!({"preemption": {"withinClusterQueue": "LowerPriority"}}),
    )
    .await;
    for (name, value) in [("low", 10), ("high", 100)] {
        apply(&env.client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": format!("{name}-{}", env.ns)}, "value": value})).await;
    }
    let labels = |p: &str| json!({"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": format!("{p}-{}", env.ns)});
    env.create_service("low", labels("low"), json!([group("w", 1, "1")]))
        .await;
    let active = env.wait_running("low").await;
    let pending = env.release_bad_upgrade("low").await;

    // a higher-priority service needs 2 of the 4 CPU the upgrade's slice holds
    env.create_service("high", labels("high"), json!([group("w", 1, "1")]))
        .await;
    eventually(WAIT, "the upgrade is held again", || async {
        let p = env.clusters().get(&pending).await.ok()?;
        (p.spec.suspend == Some(true)).then_some(())
    })
    .await;
    env.wait_running("high").await;
    for _ in 0..10 {
        assert!(env.still_serving("low", &active).await);
        let cpu: f64 = env
            .cq_cpu()
            .await
            .unwrap_or_default()
            .parse()
            .unwrap_or(0.0);
        assert!(cpu <= 4.0, "{cpu} CPU reserved on a 4-CPU queue");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    env.stop().await;
}

async fn a_deleted_covering_workload_stays_charged_until_the_running_child_s_new_slice_is_admitted(
    backend: Backend,
) {
    let env = Env::new(backend, "coverage-lapse").await;
    env.queues("3", json!({})).await;
    env.create_service("svc", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    let active = env.wait_running("svc").await;
    eventually(WAIT, "2 CPU reserved", || async {
        (env.cq_cpu().await.as_deref() == Some("2")).then_some(())
    })
    .await;
    // another team's service waits: 2 CPU do not fit in the 1 left
    env.create_service("other", queue("lq"), json!([group("w", 1, "1")]))
        .await;
    eventually(WAIT, "the other service's slice is pending", || async {
        let live = env.live_slices("other").await;
        (live.len() == 1 && !raygate::workload::holds_quota(live[0].status.as_ref())).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // someone deletes the Workload covering the running child
    let covering = env.live_slices("svc").await;
    let [covering] = covering.as_slice() else {
        panic!("one slice: {covering:?}")
    };
    let deleted = covering.metadata.name.clone().unwrap_or_default();
    env.workloads()
        .delete(&deleted, &Default::default())
        .await
        .expect("Workload deleted");
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let other = env.live_slices("other").await;
        assert!(
            other
                .iter()
                .all(|w| !raygate::workload::holds_quota(w.status.as_ref())),
            "the other service was admitted into the quota {active} still uses"
        );
        let cpu: f64 = env
            .cq_cpu()
            .await
            .unwrap_or_default()
            .parse()
            .unwrap_or(0.0);
        assert!(cpu <= 3.0, "{cpu} CPU reserved on a 3-CPU queue");
        let c = env.clusters().get(&active).await.expect("the child");
        assert_ne!(
            c.spec.suspend,
            Some(true),
            "the running child is not stopped"
        );
    }
    eventually(
        WAIT,
        "the running child's new slice is admitted",
        || async {
            let live = env.live_slices("svc").await;
            live.iter()
                .any(|w| raygate::workload::is_admitted(w.status.as_ref()))
                .then_some(())
        },
    )
    .await;
    if let Some(notes) = env.service_events("svc", "CoverageLapsed").await {
        assert!(
            notes
                .iter()
                .any(|n| n.contains(&deleted) && n.contains(&active)),
            "{notes:?}"
        );
    }
    env.stop().await;
}
