//! Test builders for raygate, in the style of Kueue's `pkg/util/testing` wrappers
//! (`MakeWorkload("a", "ns").Queue("lq").PodSets(...).ReserveQuota(...)`):
//!
//! ```
//! use raygate_testing::*;
//! let w = workload("a")
//!     .queue("lq")
//!     .podset(podset("worker").count(2).cpu("1"))
//!     .created(3)
//!     .admitted("cq", "default", ts(0));
//! let cq = cluster_queue("cq").cohort("c").flavor_quota("default", &[("cpu", "4")]);
//! # let _ = (w, cq);
//! ```
//!
//! Every builder returns the typed object itself (extension traits add the chained setters), so a
//! test passes it on without an `.obj()` step. Names default to namespace `default`; times are
//! seconds after a fixed epoch ([`ts`]). This crate only constructs objects: it never depends on
//! `raygate`, so unit tests, integration tests and benches share this one copy.

/// Nodes, pods and PodDisruptionBudgets with the fields the drain reads (`use
/// raygate_testing::core::*`).
pub mod core;
mod kueue;
mod ray;

/// The test API server (a real `apiextensions-apiserver` + etcd) for integration tests and benches.
#[cfg(feature = "integration")]
pub mod apiserver;
/// Where an integration scenario runs: the real test API server or the simulated cluster.
#[cfg(feature = "integration")]
pub mod backend;
/// Outside programs the integration tests and benches run (kubectl, the cache of built tools).
#[cfg(feature = "integration")]
pub mod tools;
/// The upstream CRDs and samples in `../shared` (KubeRay v1.7.0, Kueue v0.19.2).
#[cfg(feature = "integration")]
pub mod upstream;

pub use kueue::*;
pub use ray::*;

use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::jiff::Timestamp;

/// The namespace every namespaced builder uses.
pub const NAMESPACE: &str = "default";

/// `secs` seconds after the tests' fixed epoch (2023-11-14T22:13:20Z).
pub fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).expect("a test time within jiff's range")
}

/// A Kubernetes quantity, verbatim.
pub fn kq(s: &str) -> K8sQuantity {
    K8sQuantity(s.to_string())
}

/// The raygate workspace root (this crate sits in `testing/`).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

/// serde-saphyr's options for reading YAML as Kubernetes does (YAML 1.1 octals: `0755` = 493);
/// the same as `raygate::manifest::yaml_options`, which this crate cannot depend on.
#[cfg(feature = "integration")]
pub fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        legacy_octal_numbers: true,
        with_snippet: false,
    }
}
