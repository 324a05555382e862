//! Where an integration scenario runs. A scenario written once as `async fn(Backend)` runs on
//! the real CRD API server (`apiextensions-apiserver` + etcd, shared by the test binary) and on
//! a simulated cluster of its own (`raygate-sim`, in-process), with the same CRDs, so the two
//! servers answer the same assertions.

use std::sync::OnceLock;
use std::time::Duration;

use kube::Client;
use raygate_sim::{FaultRule, Faults, Registry, Sim};

use crate::apiserver::{KueueCrds, TestServer, crd_files, namespace};

/// The User-Agent of the client a scenario gives the component under test (raygate's
/// controller): [`Backend::SimFaults`] injects its faults into this client's requests only, so
/// the test's own reads and writes and the other actors see a healthy server.
pub const ACTOR_USER_AGENT: &str = "raygate-under-test";

/// A server for one scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The test binary's real API server (cluster-scoped objects are shared: run one at a time).
    Real,
    /// A fresh simulated cluster.
    Sim,
    /// A fresh simulated cluster failing the component under test: [`faults_for_the_actor`].
    SimFaults,
}

/// The seed of [`Backend::SimFaults`]: with it the first draw of the stream
/// `patch/ray.io/rayservices` fails, so the controller's first RayService patch (the template
/// gate, in every scenario) is answered 500: every scenario meets at least one fault.
pub const FAULT_SEED: u64 = 25;

/// The faults of [`Backend::SimFaults`]: 10% of the actor's writes answer 500, its watches
/// drop every 7 s of cluster time and a fifth of its re-watches from a resourceVersion get 410
/// Gone.
pub fn faults_for_the_actor() -> Faults {
    Faults::none()
        .rule(
            FaultRule::writes()
                .user_agent(ACTOR_USER_AGENT)
                .error(500, 0.10),
        )
        .watch_drops(Duration::from_secs(7))
        .rewatch_gone(0.2)
        .watch_user_agent(ACTOR_USER_AGENT)
}

/// One scenario's view of its server.
pub struct Cluster {
    /// The test's own client (and the other actors').
    pub client: Client,
    /// The client for the component under test (faults land here on [`Backend::SimFaults`]).
    pub actor_client: Client,
    /// The scenario's namespace (it exists on both servers).
    pub ns: String,
    /// The simulated cluster, on the sim backends.
    pub sim: Option<Sim>,
}

impl Backend {
    /// A server for the scenario `test`, with a fresh namespace.
    pub async fn cluster(self, test: &str) -> Cluster {
        let ns = namespace(test);
        match self {
            Backend::Real => {
                let client = TestServer::get().client().await;
                Cluster {
                    actor_client: client.clone(),
                    client,
                    ns,
                    sim: None,
                }
            }
            Backend::Sim | Backend::SimFaults => {
                let sim = match self {
                    Backend::SimFaults => sim(&ns, faults_for_the_actor(), FAULT_SEED),
                    _ => sim(&ns, Faults::none(), 0),
                };
                Cluster {
                    client: sim.client(),
                    actor_client: sim.client_as(ACTOR_USER_AGENT),
                    ns,
                    sim: Some(sim),
                }
            }
        }
    }
}

/// A simulated cluster with the CRDs the real test server gets (KubeRay's and Kueue's upstream
/// ones) and namespace `ns`. Its clock starts at the fixed epoch ([`raygate_sim::Clock`]'s
/// default) and runs with tokio's clock: the emulator and the controller read it, so a scenario
/// on a paused runtime writes the same timestamps on every run.
pub fn sim(ns: &str, faults: Faults, seed: u64) -> Sim {
    Sim::builder()
        .registry(upstream_registry().clone())
        .seed(seed)
        .namespace(ns)
        .faults(faults)
        .clock(raygate_sim::Clock::default())
        .build()
}

/// The built-in kinds plus the upstream CRDs, read once per test process (the YAML is several
/// MB; the sims of one test binary share it and its compiled schemas).
fn upstream_registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut registry = Registry::with_builtins();
        for file in crd_files(KueueCrds::Upstream) {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            registry
                .add_crds_yaml(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
        registry
    })
}
