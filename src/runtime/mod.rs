//! The floor under the controller and the simulated cluster: the one injectable clock, and
//! reflector stores read in a stable order. Both the controller's loops and the simulated
//! cluster's actors stand on it; it imports nothing of raygate's above [`crate::types`].
// The wall clock is read in one place: `SystemClock`.
#![deny(clippy::disallowed_methods)]

mod clock;
mod sorted;

pub use clock::{Clock, ManualClock, Monotonic, SystemClock};
pub(crate) use sorted::reuse_copies;
pub use sorted::{SortedCopies, SortedState};
