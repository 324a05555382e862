//! Rust types for the upstream APIs raygate reads and writes.
//!
//! * [`ray`]: `ray.io/v1` `RayService` and `RayCluster` as of KubeRay v1.7.0. Fields raygate does
//!   not interpret are kept verbatim in `other` maps, so a parse → serialize round trip of any real
//!   manifest loses nothing. KubeRay owns these CRDs; raygate never generates them.
//! * [`kueue`]: `kueue.x-k8s.io/v1beta2` `ResourceFlavor`, `ClusterQueue`, `Cohort`, `LocalQueue`,
//!   `Workload` and `WorkloadPriorityClass` as of Kueue v0.19: the fields admission needs. Their
//!   generated CRDs (`raygate crdgen`) are structural subsets of Kueue's own, so a cluster can move
//!   from raygate's built-in admission to a real Kueue without converting objects.
//! * [`rollout`]: raygate's own `raygate.io/v1alpha1` `NodeRollout` (an upgrade-domain aware
//!   drain), generated into a CRD by `raygate crdgen`.
//!
//! This crate holds types only: no logic.

pub mod kueue;
#[doc(hidden)]
pub mod object;
pub mod ray;
pub mod rollout;

pub use k8s_openapi;
