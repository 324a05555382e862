//! The client wing: what the `raygate` commands do against a live cluster, beside the pure
//! text → text parts in [`crate::cli`]. The controller never imports it.
//!
//! - [`live`]: reads for `raygate status` and the drain's `plan`/`check`.
//! - [`rollout`]: `raygate drain run` and the `rollout` verbs create, follow and patch a
//!   NodeRollout.
//! - [`dev`]: `apply`/`get` without API discovery, for the dev cluster and the integration tests.

pub mod dev;
pub mod live;
pub mod rollout;
