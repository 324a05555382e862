//! The simulated cluster's controllers. Each actor is a tokio task that talks to the sim only
//! through a `kube::Client` and reads time from the sim's [`crate::Clock`]; its decision is a pure
//! function with unit tests beside it, the IO loop around it thin.

/// The disruption controller: PodDisruptionBudget status (pkg/controller/disruption).
pub mod disruption;
/// The ownerReference garbage collector (pkg/controller/garbagecollector).
pub mod garbage_collector;
/// Node lifecycle for upgrades: reboot or replacement of a drained node; Node Ready writes.
pub mod node_lifecycle;
/// The ReplicaSet controller (pkg/controller/replicaset).
pub mod replicaset;
/// Shared plumbing of the actors above: wake-ups from watches, Events on the sim clock.
pub mod support;
