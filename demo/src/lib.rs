//! raygate-demo: raygate's stories on the simulated cluster (`raygate-sim`), and the proof that
//! they went right, read from the cluster's own history rather than from raygate's logs.
//!
//! - [`history`]: the compact history of a cluster (pure) and [`recorder`], which fills it from
//!   the cluster's watch streams;
//! - [`invariants`]: pure checks over a history, each returning violations with time and objects;
//! - [`baselines`]: naive drains to compare raygate's with (test actors, never in the production
//!   library);
//! - [`scenario`]: the scenario file format and its runner.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod baselines;
/// The compact history of a cluster (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod history;
/// Invariants over a history (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod invariants;
pub mod recorder;
pub mod scenario;
pub mod sweep;
