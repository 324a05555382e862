//! Actors: tokio tasks that talk to the sim only through a `kube::Client` (as a real controller
//! does) and read time from the sim's [`Clock`](crate::Clock). Each actor's decision is a pure
//! function beside its thin IO loop.

/// A kubelet per node: start delay, readiness probes (delegated readiness), graceful termination.
pub mod kubelet;
/// A LeaderWorkerSet-like controller on the real LWS CRD.
pub mod lws;
/// Exact quantities and per-pod requests (`resourcehelper.PodRequests`).
pub mod resources;
/// The scheduler: binds pending pods through `pods/binding` (filters after kube-scheduler's).
pub mod scheduler;
/// Watch-driven loops shared by the actors.
mod watch;
