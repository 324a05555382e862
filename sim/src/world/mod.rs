//! What runs on the simulated API server: the actors (the scheduler, kubelets, the
//! kube-controller-manager's controllers, LWS), the KubeRay emulator, the shared in-process
//! informers they read through, and [`World`](crate::world::World), which starts a set of them on
//! one [`Sim`]. It talks to the server as a cluster's components do: through the [`Sim`]'s
//! `kube::Client`, on its [`Clock`](crate::Clock).

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Sim;
use actors::support::Shutdown;
use actors::{
    disruption, garbage_collector, job, kubelet, lws, node_lifecycle, podgc, replicaset, scheduler,
    taint_eviction,
};
use kuberay::EmulatorConfig;

/// Actors: the core controllers (disruption, GC, ReplicaSet, Job, node lifecycle), the scheduler,
/// kubelets and the LWS-like controller (IO loops over pure decisions).
pub mod actors;
/// A change signal waking several waiters in a fixed order (for reproducible runs).
pub mod fanout;
/// The gang world shared by the drain and NodeRollout tests, the demo's baselines and its story
/// (test fixtures: they panic on a broken cluster).
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod fixtures;
/// Shared in-process informers for the sim's own actors.
pub mod informers;
/// Actor: the KubeRay v1.7 emulator (RayService and RayCluster controllers, pods by time), on the
/// injected clock (the wall clock is denied in it).
#[deny(clippy::disallowed_methods)]
pub mod kuberay;

/// The actors to start on one [`Sim`], each with its own `Config`, started in the order they
/// were added ([`World::start`]). Each runs as a tokio task on the sim's clock, in the caller's
/// [`informers::in_process`] scope if there is one. The scheduler, the kubelets, the LWS
/// controller and the KubeRay emulator share one client; each kube-controller-manager controller
/// (disruption, node lifecycle, ReplicaSet, Job, garbage collector, PodGC, taint eviction) has a
/// client of its own.
///
/// `World::on(&sim).scheduler(..).kubelets(..).disruption(..).start()`: the actors run until
/// the returned [`Running`] is dropped ([`fixtures::gang_world`] is one such world).
#[must_use = "a World starts nothing until `start`"]
pub struct World {
    sim: Sim,
    actors: Vec<Actor>,
}

/// One actor of a [`World`] and its settings.
enum Actor {
    Scheduler(scheduler::Config),
    Kubelets(kubelet::Config),
    Lws(Duration),
    Disruption(disruption::Config),
    NodeLifecycle(node_lifecycle::Config),
    ReplicaSets(replicaset::Config),
    Jobs(job::Config),
    GarbageCollector(garbage_collector::Config),
    PodGc(podgc::Config),
    TaintEviction(taint_eviction::Config),
    KubeRay(EmulatorConfig),
}

impl World {
    /// No actors yet, on `sim`.
    pub fn on(sim: &Sim) -> World {
        World {
            sim: sim.clone(),
            actors: vec![],
        }
    }

    fn with(mut self, actor: Actor) -> World {
        self.actors.push(actor);
        self
    }

    /// The scheduler ([`scheduler::run`]).
    pub fn scheduler(self, config: scheduler::Config) -> World {
        self.with(Actor::Scheduler(config))
    }

    /// A kubelet for every Node ([`kubelet::run_all`]).
    pub fn kubelets(self, config: kubelet::Config) -> World {
        self.with(Actor::Kubelets(config))
    }

    /// The LWS controller with a periodic pass every `resync` ([`lws::run`]).
    pub fn lws(self, resync: Duration) -> World {
        self.with(Actor::Lws(resync))
    }

    /// The disruption controller ([`disruption::run`]).
    pub fn disruption(self, config: disruption::Config) -> World {
        self.with(Actor::Disruption(config))
    }

    /// The node lifecycle controller ([`node_lifecycle::run`]).
    pub fn node_lifecycle(self, config: node_lifecycle::Config) -> World {
        self.with(Actor::NodeLifecycle(config))
    }

    /// The ReplicaSet controller ([`replicaset::run`]).
    pub fn replicasets(self, config: replicaset::Config) -> World {
        self.with(Actor::ReplicaSets(config))
    }

    /// The Job controller ([`job::run`]).
    pub fn jobs(self, config: job::Config) -> World {
        self.with(Actor::Jobs(config))
    }

    /// The garbage collector ([`garbage_collector::run`]).
    pub fn garbage_collector(self, config: garbage_collector::Config) -> World {
        self.with(Actor::GarbageCollector(config))
    }

    /// PodGC ([`podgc::run`]).
    pub fn podgc(self, config: podgc::Config) -> World {
        self.with(Actor::PodGc(config))
    }

    /// The taint eviction controller ([`taint_eviction::run`]).
    pub fn taint_eviction(self, config: taint_eviction::Config) -> World {
        self.with(Actor::TaintEviction(config))
    }

    /// The KubeRay v1.7 emulator ([`kuberay::run`]).
    pub fn kuberay(self, config: EmulatorConfig) -> World {
        self.with(Actor::KubeRay(config))
    }

    /// Starts the actors, in the order they were added.
    pub fn start(self) -> Running {
        let (stop, stopped) = watch::channel(false);
        let mut start = Start {
            sim: self.sim,
            shared: None,
            shutdown: Shutdown::from(stopped),
        };
        let tasks = self
            .actors
            .into_iter()
            .map(|actor| start.spawn(actor))
            .collect();
        Running { stop, tasks }
    }
}

/// What the actors of one [`World::start`] share.
struct Start {
    sim: Sim,
    /// The client of the scheduler, the kubelets, LWS and KubeRay (made for the first of them).
    shared: Option<Client>,
    shutdown: Shutdown,
}

impl Start {
    fn shared(&mut self) -> Client {
        self.shared.get_or_insert_with(|| self.sim.client()).clone()
    }

    fn spawn(&mut self, actor: Actor) -> JoinHandle<()> {
        let clock = self.sim.clock().clone();
        let shutdown = self.shutdown.clone();
        match actor {
            Actor::Scheduler(c) => task(scheduler::run(self.shared(), clock, c, shutdown)),
            Actor::Kubelets(c) => task(kubelet::run_all(self.shared(), clock, c, shutdown)),
            Actor::Lws(resync) => task(lws::run(self.shared(), clock, resync, shutdown)),
            Actor::KubeRay(c) => task(ended(
                "kuberay",
                kuberay::run(
                    self.shared(),
                    clock,
                    c,
                    async move { shutdown.wait().await },
                ),
            )),
            Actor::Disruption(c) => task(ended(
                "disruption",
                disruption::run(self.sim.client(), clock, c, shutdown),
            )),
            Actor::NodeLifecycle(c) => task(ended(
                "node_lifecycle",
                node_lifecycle::run(self.sim.client(), clock, c, shutdown),
            )),
            Actor::ReplicaSets(c) => task(ended(
                "replicaset",
                replicaset::run(self.sim.client(), clock, c, shutdown),
            )),
            Actor::Jobs(c) => task(ended(
                "job",
                job::run(self.sim.client(), clock, c, shutdown),
            )),
            Actor::GarbageCollector(c) => task(ended(
                "garbage_collector",
                garbage_collector::run(self.sim.client(), clock, c, shutdown),
            )),
            Actor::PodGc(c) => task(ended(
                "podgc",
                podgc::run(self.sim.client(), clock, c, shutdown),
            )),
            Actor::TaintEviction(c) => task(ended(
                "taint_eviction",
                taint_eviction::run(self.sim.client(), clock, c, shutdown),
            )),
        }
    }
}

/// `actor` as a task, in the caller's in-process scope if any ([`informers::carry`]).
fn task(actor: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
    tokio::spawn(informers::carry(actor))
}

/// `actor`, its error (if it ends with one) logged.
async fn ended<E: Display>(name: &'static str, actor: impl Future<Output = Result<(), E>>) {
    if let Err(e) = actor.await {
        tracing::warn!(actor = name, error = %e, "sim actor ended with an error");
    }
}

/// The actors a [`World`] started. Dropped, or [`Running::stop`], they stop.
#[must_use = "dropped, the actors stop"]
pub struct Running {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Tells every actor to stop and waits until they all have.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}
