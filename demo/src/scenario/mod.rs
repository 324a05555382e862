//! Scenarios: a cluster shape, objects, a timeline of actions and expectations, as one
//! YAML document (read with serde-saphyr as raygate reads manifests), and its runner on the
//! simulated cluster.
//!
//! ```yaml
//! name: an upgrade waits for quota
//! seed: 1
//! cluster: {upgradeDomains: 2, nodesPerDomain: 2, allocatable: {nvidia.com/gpu: "4"}}
//! objects: [ ... Kubernetes objects, applied in order at 0s ... ]
//! timeline:
//!   - at: 30s
//!     patch: {apiVersion: ray.io/v1, kind: RayService, namespace: serving, name: svc,
//!             patch: {spec: {rayClusterConfig: {rayVersion: "2.52.0"}}}}
//!   - at: 5m
//!     raiseQuota: {clusterQueue: team, resource: nvidia.com/gpu, to: "16"}
//!   - at: 10m
//!     startRollout: {strategy: raygate, target: "1"}
//! expect:
//!   within: 2h
//!   violations: []          # the invariants expected to break (none)
//!   objects:
//!     - {apiVersion: ray.io/v1, kind: RayService, namespace: serving, name: svc,
//!        path: /status/serviceStatus, equals: Running}
//! ```
//!
//! - [`format`]: the file format's types and [`Checked`], a scenario whose timeline was checked;
//! - [`parse`](mod@parse): reading a file, errors naming the line and the field;
//! - [`actions`]: what each timeline step does to the running story;
//! - [`controller`]: raygate's controller in the story, killed and restarted by the timeline;
//! - [`run`](mod@run): the runner, then the invariants and the expectations;
//! - [`variants`]: the same story run another way (KubeRay without the gate, naive drains).

mod actions;
mod controller;
mod format;
mod parse;
mod run;
mod variants;

pub use actions::{RunError, describe};
pub use format::*;
pub use parse::{ScenarioError, parse};
pub use run::{BaselineRun, Progress, Report, run, run_with};
pub use variants::{drain_variants, without_gate};

#[cfg(test)]
mod tests;
