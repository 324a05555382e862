//! The simulated cluster's controllers and node agents. Each actor is a tokio task that talks to
//! the sim only through a `kube::Client` (as a real controller does) and reads time from the sim's
//! [`Clock`](crate::Clock); its decision is a pure function with unit tests beside it. Every actor
//! runs the one loop of [`support::drive`]: reflector caches of the kinds it reads, a pass on a
//! change or at the deadline the last pass asked for, until its [`support::Shutdown`].

use std::future::Future;

use kube::Client;

use crate::Clock;
use support::Shutdown;

/// `Sim::$name(config)`: starts the module's `run` on the sim's client and clock (until the
/// handle is aborted or the runtime ends).
macro_rules! spawn_on_sim {
    ($(#[$doc:meta])* $name:ident) => {
        impl crate::Sim {
            $(#[$doc])*
            pub fn $name(&self, config: Config) -> tokio::task::JoinHandle<Result<(), Error>> {
                self.spawn_actor(run, config)
            }
        }
    };
}
pub(crate) use spawn_on_sim;

impl crate::Sim {
    /// Starts `run` on this cluster's client and clock with `config`, never shut down (until the
    /// handle is aborted or the runtime ends): the body of every `spawn_*`.
    pub(crate) fn spawn_actor<C, E, F>(
        &self,
        run: impl FnOnce(Client, Clock, C, Shutdown) -> F,
        config: C,
    ) -> tokio::task::JoinHandle<Result<(), E>>
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Send + 'static,
    {
        // in the caller's `Sim::in_process` scope, if any
        tokio::spawn(crate::informers::carry(run(
            self.client(),
            self.clock().clone(),
            config,
            Shutdown::never(),
        )))
    }
}

/// The disruption controller: PodDisruptionBudget status (pkg/controller/disruption).
pub mod disruption;
/// The ownerReference garbage collector (pkg/controller/garbagecollector).
pub mod garbage_collector;
/// A kubelet per node: start delay, readiness probes (delegated readiness), graceful termination.
pub mod kubelet;
/// A LeaderWorkerSet-like controller on the real LWS CRD.
pub mod lws;
/// Node lifecycle: reboot or replacement of a drained node; Node Ready writes; the NoExecute
/// `not-ready`/`unreachable` taints of NotReady nodes and `Ready=False` on the pods of a node
/// whose kubelet stopped (pkg/controller/nodelifecycle).
pub mod node_lifecycle;
/// PodGC: orphaned, terminated beyond the threshold, terminating on out-of-service nodes
/// (pkg/controller/podgc).
pub mod podgc;
/// The ReplicaSet controller (pkg/controller/replicaset).
pub mod replicaset;
/// Exact quantities and per-pod requests (`resourcehelper.PodRequests`).
pub mod resources;
/// The scheduler: binds pending pods through `pods/binding` (filters after kube-scheduler's).
pub mod scheduler;
/// Shared plumbing: reflector caches, the actors' one loop, shutdown, expectations, Events on
/// the sim clock, a RESTMapper from discovery.
pub mod support;
/// NoExecute taint eviction (pkg/controller/tainteviction).
pub mod taint_eviction;
