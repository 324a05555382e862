//! The NodeRollout CLI tests' cluster on the sim.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, PostParams};
use raygate::controller::drain::rollout::{Rollouts, run};
use raygate::controller::{Fence, Metrics};
use raygate::types::k8s_openapi::api::core::v1::{Node, Pod};
use raygate_sim::Sim;
use raygate_sim::world::actors::kubelet;
use raygate_sim::world::{Running, World};
use raygate_testing::core::{self, NodeExt, PodExt};
use tokio::sync::watch;

pub const UD: &str = "raygate.io/upgrade-domain";

/// Dropped, the kubelets and the NodeRollout controller stop.
pub struct Stop {
    _kubelets: Running,
    _rollouts: watch::Sender<bool>,
}

/// Two upgrade domains (n1 in ud-a, n2 in ud-b), `pods` ReplicaSet pods on each (`web-<node>-<i>`),
/// kubelets running them, and the NodeRollout controller.
pub async fn cluster(pods: usize) -> (Sim, Stop) {
    let crd =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds/noderollouts.raygate.io.yaml");
    let sim = Sim::builder()
        .crds_yaml(&std::fs::read_to_string(crd).unwrap())
        .unwrap()
        .namespace("t")
        .build();
    let client = sim.client();
    let kubelets = World::on(&sim).kubelets(kubelet::Config::default()).start();
    for (n, ud) in [("n1", "ud-a"), ("n2", "ud-b")] {
        let node = core::node(n, "")
            .label(UD, ud)
            .label("pool", "old")
            .allocatable(&[("cpu", "8"), ("memory", "32Gi"), ("pods", "110")])
            .ready();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
        for i in 0..pods {
            let p = core::pod(&format!("t/web-{n}-{i}"), n)
                .owned_by("apps/v1", "ReplicaSet", "web")
                .grace_period(5);
            Api::<Pod>::namespaced(client.clone(), "t")
                .create(&PostParams::default(), &p)
                .await
                .unwrap();
        }
    }
    // always leading, never fenced, deciding every second on the sim's clock
    let r = Rollouts {
        client: sim.client_as("raygate"),
        clock: Arc::new(sim.clock().clone()),
        metrics: Arc::new(Metrics::default()),
        leader: watch::channel(true).1,
        fence: Fence::open(),
        identity: "raygate-0".into(),
        tick: Duration::from_secs(1),
        services: None,
    };
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(run(r, shutdown));
    let stop = Stop {
        _kubelets: kubelets,
        _rollouts: stop,
    };
    (sim, stop)
}
