//! raygate-sim: an embedded simulated Kubernetes cluster, in two wings. [`server`] is the API
//! server: an in-memory object store with the API server's semantics, served to `kube::Client`
//! as a tower `Service` (no sockets). [`world`] is what runs on it: the scheduler, kubelets, the
//! core controllers, LWS and the KubeRay v1.7 emulator, started together by a
//! [`world::World`]. Both read time from one virtual [`clock`].
//!
//! ```no_run
//! # async fn demo() {
//! let sim = raygate_sim::Sim::builder().build();
//! let client = sim.client();
//! # }
//! ```

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// The virtual clock.
pub mod clock;
/// A local cluster: the sim on the wall clock with its actors and nodes, served over HTTPS.
pub mod local;
/// The simulated API server.
pub mod server;
/// What runs on the simulated API server: actors, the KubeRay emulator, shared informers.
pub mod world;

pub use clock::Clock;
/// The `http` crate the Service speaks (for raw requests in tests).
pub use http;
pub use server::faults::{FaultRule, Faults, Verb};
pub use server::kinds::{CrdError, Registry};
pub use server::{Sim, SimBuilder};
