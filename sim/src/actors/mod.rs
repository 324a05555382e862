//! The simulated cluster's controllers and node agents. Each actor is a tokio task that talks to
//! the sim only through a `kube::Client` (as a real controller does) and reads time from the sim's
//! [`Clock`](crate::Clock); its decision is a pure function with unit tests beside it, the IO loop
//! around it thin.

/// The disruption controller: PodDisruptionBudget status (pkg/controller/disruption).
pub mod disruption;
/// The ownerReference garbage collector (pkg/controller/garbagecollector).
pub mod garbage_collector;
/// A kubelet per node: start delay, readiness probes (delegated readiness), graceful termination.
pub mod kubelet;
/// A LeaderWorkerSet-like controller on the real LWS CRD.
pub mod lws;
/// Node lifecycle for upgrades: reboot or replacement of a drained node; Node Ready writes.
pub mod node_lifecycle;
/// The ReplicaSet controller (pkg/controller/replicaset).
pub mod replicaset;
/// Exact quantities and per-pod requests (`resourcehelper.PodRequests`).
pub mod resources;
/// The scheduler: binds pending pods through `pods/binding` (filters after kube-scheduler's).
pub mod scheduler;
/// Shared plumbing: wake-ups from watches, Events on the sim clock, a RESTMapper from discovery.
pub mod support;
/// Watch-driven loops of the pod actors.
mod watch;
