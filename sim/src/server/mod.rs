//! The simulated API server: the store and its verbs, served to `kube::Client` as a tower
//! `Service` ([`Sim::client`]) and read from inside the process
//! ([`in_process`](crate::server::in_process)). Nothing here knows what runs on the cluster
//! ([`crate::world`]).

/// Mutating admission on Pods: DefaultTolerationSeconds (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod admission;
/// CEL validation rules (`x-kubernetes-validations`) of CRD schemas (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod cel;
/// Typed copies of stored objects without their `managedFields`, for in-process readers (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod decode;
/// API discovery: `/version`, `/api`, `/apis`, groups and group-versions (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod discovery;
/// Fault injection: error rates, latency, watch drops and 410s, seeded (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod faults;
/// Field ownership and server-side apply (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod fields;
/// Routing, the verbs over the store and the Pod and `scale` subresources (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod handler;
/// The cluster served over HTTPS on a local port, with a kubeconfig, for real clients (IO shell).
pub mod https;
/// Reads of the store from inside the process: watches of its own events, GETs and LISTs typed.
pub mod in_process;
/// Served resources: built-in kinds and CRDs (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod kinds;
/// OpenAPI v3 documents per group-version (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod openapi;
/// Merge, JSON and strategic merge patches (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod patch;
/// Protobuf request bodies of built-in kinds read into JSON (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod protobuf;
/// CRD structural schemas: pruning, defaults, validation (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod schema;
/// Label and field selectors (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod selector;
/// The tower Service shell, watch streams and the sim's `kube::Client`s (IO).
pub mod service;
/// The cluster and its builder (IO).
mod sim;
/// `metav1.Status` errors (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod status;
/// Objects, revisions, history and watches (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod store;
/// `Table` answers for `kubectl get` (server-side printing) (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod table;
/// The upstream CRDs (KubeRay, Kueue, LWS) embedded in the binary, and raygate's NodeRollout.
pub mod upstream;

pub use sim::{Sim, SimBuilder};
