//! The simulated cluster's controllers and node agents. Each actor is a tokio task that talks to
//! the sim only through a `kube::Client` (as a real controller does) and reads time from the sim's
//! [`Clock`](crate::Clock); its decision is a pure function with unit tests beside it. Every actor
//! runs the one loop of [`support::drive`]: reflector caches of the kinds it reads, a pass on a
//! change or at the deadline the last pass asked for, until its [`support::Shutdown`].

/// The disruption controller: PodDisruptionBudget status (pkg/controller/disruption).
pub mod disruption;
/// The ownerReference garbage collector (pkg/controller/garbagecollector).
pub mod garbage_collector;
/// A minimal Job controller: one pod per Job, finished with it (pkg/controller/job).
pub mod job;
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
