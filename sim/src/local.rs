//! A local cluster without containers: the simulated cluster on the wall clock with the embedded
//! CRDs (KubeRay, Kueue, LeaderWorkerSet, raygate's), the cluster's actors (scheduler, kubelets,
//! the core controllers, the KubeRay v1.7 emulator with pods) and a fleet of GPU nodes in upgrade
//! domains, served over HTTPS with a kubeconfig. `raygate dev cluster` runs one; the kubectl suite
//! checks it as a real client would.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::server::https::{Https, ServeError};
use crate::world::actors::{
    disruption, garbage_collector, job, kubelet, node_lifecycle, podgc, scheduler,
};
use crate::world::fixtures::{POOL, UD};
use crate::world::kuberay::EmulatorConfig;
use crate::world::{Running, World};
use crate::{Clock, CrdError, Sim};

/// The shape of a local cluster.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to serve (port 0: any free port).
    pub addr: SocketAddr,
    /// Upgrade domains (`topology.raygate.io/upgrade-domain=ud-<i>`).
    pub domains: usize,
    /// GPU nodes per upgrade domain (`ud<d>-n<i>`).
    pub nodes_per_domain: usize,
    /// `nvidia.com/gpu` allocatable per node.
    pub gpus_per_node: u32,
    /// More CRDs (YAML), served beside the embedded ones (a CRD of the same group and plural
    /// replaces the embedded one): Kueue's full set for the real Kueue controller, say.
    pub extra_crds: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            domains: 4,
            nodes_per_domain: 4,
            gpus_per_node: 8,
            extra_crds: vec![],
        }
    }
}

/// Why a local cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("loading the embedded CRDs: {0}")]
    Crds(#[from] CrdError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("creating node {name}: {source}")]
    Node { name: String, source: kube::Error },
}

/// A running local cluster; dropped, it stops serving and its actors stop.
pub struct Local {
    pub sim: Sim,
    https: Https,
    _world: Running,
}

impl Local {
    /// Starts a local cluster of `config`'s shape. Call it inside a multi-threaded tokio runtime
    /// whose clock runs (not paused): real clients wait in real time.
    pub async fn start(config: &Config) -> Result<Local, Error> {
        let mut registry = crate::server::upstream::registry()?;
        for yaml in &config.extra_crds {
            registry.add_crds_yaml(yaml)?;
        }
        let sim = Sim::builder()
            .registry(registry)
            .clock(Clock::wall())
            .build();
        sim.publish_crds();
        create_nodes(&sim, config).await?;
        let world = actors(&sim).start();
        let https = sim.serve_https(config.addr).await?;
        Ok(Local {
            sim,
            https,
            _world: world,
        })
    }

    /// The HTTPS endpoint.
    pub fn https(&self) -> &Https {
        &self.https
    }

    /// A kubeconfig for this cluster (context `raygate-sim`).
    pub fn kubeconfig(&self) -> String {
        self.https.kubeconfig("raygate-sim")
    }
}

/// The actors of a local cluster, as the demo's scenarios run them.
fn actors(sim: &Sim) -> World {
    let ray = |kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", kind), plural)
    };
    World::on(sim)
        .scheduler(scheduler::Config::default())
        .kubelets(kubelet::Config::default())
        .lws(Duration::from_secs(30))
        .disruption(disruption::Config {
            lag: Duration::from_secs(1),
        })
        .node_lifecycle(node_lifecycle::Config::default())
        .replicasets(Default::default())
        .jobs(job::Config {
            lag: Duration::from_millis(200),
        })
        .garbage_collector(
            garbage_collector::Config::default()
                .cover(ray("RayCluster", "rayclusters"))
                .cover(ray("RayService", "rayservices")),
        )
        .podgc(podgc::Config::default())
        .kuberay(EmulatorConfig {
            pods: true,
            ..Default::default()
        })
}

async fn create_nodes(sim: &Sim, config: &Config) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(sim.client());
    for d in 0..config.domains {
        for i in 0..config.nodes_per_domain {
            let name = format!("ud{d}-n{i}");
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {UD: format!("ud-{d}"), POOL: "gpu",
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    node_lifecycle::GENERATION: "0"}},
                "status": {
                    "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                        "nvidia.com/gpu": config.gpus_per_node.to_string()},
                    "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110",
                        "nvidia.com/gpu": config.gpus_per_node.to_string()},
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "nodeInfo": {"kubeletVersion": "v1.36.0-raygate-sim", "architecture": "amd64",
                        "operatingSystem": "linux"},
                }
            }))
            .map_err(|e| Error::Node {
                name: name.clone(),
                source: kube::Error::SerdeError(e),
            })?;
            nodes
                .create(&PostParams::default(), &node)
                .await
                .map_err(|source| Error::Node { name, source })?;
        }
    }
    Ok(())
}
