//! The world `tests/pod_gate.rs` and `tests/incremental.rs` share: raygate (`run_with`, `pod_gate`
//! on) on the simulated cluster with two 32-CPU nodes, the KubeRay emulator creating real pods,
//! the scheduler, a kubelet per node and the garbage collector, all on the paused clock; and the
//! Kueue queues and reads both suites use. Each suite adds its own `impl Env` blocks.
//!
//! Not every suite uses every helper.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};

use kube::Client;
use kube::api::{Api, ApiResource, ListParams, PostParams};
use raygate::controller::{Config, run_with};
use raygate::gate::pod_gate::POD_GATE;
use raygate::runtime::Clock;
use raygate::types::kueue::Workload;
use raygate::types::ray::{RayCluster, RayService};
use raygate_sim::world::actors::{garbage_collector, job, kubelet, podgc};
use raygate_sim::world::kuberay::{AutoscalerConfig, EmulatorConfig};
use raygate_sim::world::{Running, World};
use raygate_sim::{Faults, Sim};
use raygate_testing::core::{self, NodeExt};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The RayServices' namespace.
pub const NS: &str = "serving";

/// How the world is built ([`Setup::default`]: no faults, the kubelet's defaults, no emulated
/// Ray autoscaler).
#[derive(Default)]
pub struct Setup {
    /// Faults on the sim, seeded by `seed`.
    pub faults: Option<(Faults, u64)>,
    pub kubelet: kubelet::Config,
    /// The KubeRay emulator's Ray autoscaler.
    pub autoscaler: Option<AutoscalerConfig>,
}

pub struct Env {
    pub sim: Sim,
    pub client: Client,
    pub controller: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    /// Dropped, the actors stop.
    _world: Running,
}

impl Env {
    pub async fn new() -> Env {
        Env::build(Setup::default()).await
    }

    /// With `faults` on the sim (seeded by `seed`).
    pub async fn with_faults(faults: Faults, seed: u64) -> Env {
        Env::build(Setup {
            faults: Some((faults, seed)),
            ..Setup::default()
        })
        .await
    }

    /// [`Env::new`] with these kubelet settings (e.g. containers that take their whole grace
    /// period to stop, as a serving Ray node draining its requests does).
    pub async fn with_kubelet(kubelet: kubelet::Config) -> Env {
        Env::build(Setup {
            kubelet,
            ..Setup::default()
        })
        .await
    }

    pub async fn build(setup: Setup) -> Env {
        raygate_testing::apiserver::init_logs();
        let (faults, seed) = setup.faults.unwrap_or((Faults::none(), 0));
        let sim = raygate_testing::backend::sim(NS, faults, seed);
        let client = sim.client();
        let nodes: Api<Node> = Api::all(client.clone());
        for i in 0..2 {
            let node = core::node(&format!("node-{i}"), "")
                .allocatable(&[("cpu", "32"), ("memory", "128Gi"), ("pods", "110")])
                .ready();
            nodes.create(&PostParams::default(), &node).await.unwrap();
        }
        let world = World::on(&sim)
            .scheduler(Default::default())
            .kubelets(setup.kubelet)
            .podgc(podgc::Config::default())
            .jobs(job::Config::default())
            .garbage_collector(
                garbage_collector::Config::default()
                    .cover(ApiResource::erase::<RayCluster>(&()))
                    .cover(ApiResource::erase::<RayService>(&())),
            )
            .kuberay(EmulatorConfig {
                namespace: Some(NS.into()),
                pods: true,
                autoscaler: setup.autoscaler,
                ..Default::default()
            })
            .start();
        let mut env = Env {
            sim,
            client,
            controller: None,
            _world: world,
        };
        env.start_controller();
        env
    }

    /// raygate's controller with the pod gate, on the sim's clock.
    pub fn start_controller(&mut self) {
        self.start_controller_with(true);
    }

    /// raygate's controller, with the pod gate on or off (`--pod-gate`).
    pub fn start_controller_with(&mut self, pod_gate: bool) {
        let (tx, rx) = oneshot::channel::<()>();
        let client = self.sim.client_as("raygate");
        let clock: Arc<dyn Clock> = Arc::new(self.sim.clock().clone());
        let config = Config {
            admission_resync: Duration::from_millis(500),
            pod_gate,
            ..Default::default()
        };
        let handle = tokio::spawn(async move {
            run_with(client, config, clock, async move {
                let _ = rx.await;
            })
            .await
            .expect("controller runs");
        });
        self.controller = Some((tx, handle));
    }

    pub async fn kill_controller(&mut self) {
        if let Some((_, handle)) = self.controller.take() {
            handle.abort();
            let _ = handle.await;
        }
    }

    /// ResourceFlavor `f`, ClusterQueue `cq` with `cpu` nominal quota, LocalQueue `lq` in [`NS`].
    pub async fn queues(&self, cpu: &str) {
        let apply = |obj: Value| {
            let client = self.client.clone();
            async move {
                raygate::client::dev::apply(&client, &obj.to_string(), "test", None)
                    .await
                    .unwrap_or_else(|e| panic!("applying {obj}: {e}"));
            }
        };
        apply(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}})).await;
        apply(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]}})).await;
        apply(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": NS},
            "spec": {"clusterQueue": "cq"}})).await;
    }

    pub async fn slices(&self) -> Vec<Workload> {
        Api::<Workload>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }
}

/// Held at raygate's scheduling gate.
pub fn is_gated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == POD_GATE))
}
