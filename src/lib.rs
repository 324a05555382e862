//! raygate: a quota gate for KubeRay RayService upgrades on fixed capacity.
//!
//! The decisions live in pure modules (no IO, no clock: time comes in as a value); the
//! [`controller`] and [`cli`] call them and apply what they decide. The compiler checks the purity:
//! the pure modules deny the wall clock and `kube::Client`/`kube::Api` (`clippy.toml`), and no
//! non-test code may `unwrap`/`expect`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// Pure: ClusterQueue admission on a snapshot of Kueue objects, Kueue v0.19's model.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod admission;
/// Pure: the commands' text → text parts (`podsets`, `admit`).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod cli;
/// IO, the client wing: the commands' reads and writes against a live cluster (status, drain,
/// rollout verbs, dev apply); the controller never imports it.
pub mod client;
/// Pure: startup checks of the installed CRDs (versions, fields, subresources) per admission mode.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod compat;
/// Pure: status conditions as apimachinery's `meta` package finds and sets them.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod conditions;
/// IO: watches, the gate reconciler, the admission loop, events, metrics, health, leader election.
pub mod controller;
/// The `kueue.x-k8s.io/v1beta2` CRDs raygate installs when Kueue is absent.
pub mod crdgen;
/// Pure: upgrade-domain drains — the plan (domains, phases, skips, blocks) and the contract preflight.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod drain;
/// Pure: Go duration strings (`time.ParseDuration`), as KubeRay's annotations and raygate's specs
/// take them.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod duration;
/// Pure: the Events raygate records, as values.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod events;
/// Pure: what to do about one opted-in RayService, its children and its slices.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod gate;
/// Pure: the scrape-time gauges (held RayServices, hold duration and requests, pending slices).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod gauges;
/// Pure: label selectors (`LabelSelector` objects and `labelSelector` query strings).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod labels;
/// Pure: multi-document YAML into typed objects, errors naming document, object and field.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod manifest;
/// Pure: small object-metadata helpers (annotations, labels, `ns/name` keys, owning RayService).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod meta;
/// Pure: the PodSets (count × per-pod requests) a RayCluster or RayService needs now.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod podsets;
/// Pure: exact Kubernetes quantities and resource vectors.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod quantity;
/// IO floor: the injectable clock and reflector stores in a stable order, for the controller and
/// the simulated cluster.
pub mod runtime;
/// Pure: Workload slice chains — which Workloads a RayService's current PodSets need.
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod slices;
/// Pure: Workload state and Kueue's slice annotations (predicates, `replacement-for`, chain order).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod workload;

pub use raygate_types as types;
