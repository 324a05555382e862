//! raygate-demo: raygate's stories on the simulated cluster (`raygate-sim`), and the proof that
//! they went right, read from the cluster's own history rather than from raygate's logs.
//!
//! - [`history`]: the compact history of a cluster (pure) and [`recorder`], which fills it from
//!   the cluster's watch streams;
//! - [`invariants`]: pure checks over a history, each returning violations with time and objects;
//! - [`baselines`]: naive drains to compare raygate's with (test actors, never in the production
//!   library);
//! - [`scenario`]: the scenario file format and its runner;
//! - [`report`]: the self-contained HTML report of runs (charts drawn from their histories);
//! - [`story`] and [`show`]: `raygate demo` (the embedded story, `config/scenarios/demo.yaml`)
//!   and `raygate simulate`, with the live display, the timeline and the summary.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// The in-process raygate rollout's default `taintOutdated`, as the NodeRollout controller's.
pub mod auto_taint;
pub mod baselines;
/// A node rollout's lower bound and a rollout's ratio to it (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod bound;
/// The compact history of a cluster (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod history;
/// Invariants over a history (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod invariants;
/// The `nodeRollout` strategy: a NodeRollout object run by raygate's controller.
pub mod noderollout;
pub mod recorder;
/// The HTML report (pure but for `report::write`).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod report;
pub mod scenario;
/// The live display's lines, the timeline and the summary (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod show;
/// `raygate demo` / `raygate simulate`: a story on a fresh sim with the embedded CRDs, shown live.
pub mod story;
/// The reliability sweep: random stories on a seed, raygate and the baselines.
pub mod sweep;
