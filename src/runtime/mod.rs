//! The floor under the controller and the simulated cluster: the one injectable clock,
//! reflector stores read in a stable order and through secondary indexes, one keyed backoff and
//! one cache of assumed writes.
//! Both the controller's loops and the simulated cluster's actors stand on it; it imports
//! nothing of raygate's above [`crate::types`].
// The wall clock is read in one place: `SystemClock`.
#![deny(clippy::disallowed_methods)]

mod assumed;
mod backoff;
mod clock;
mod index;
mod sorted;

pub use assumed::Assumed;
pub use backoff::{Backoff, Retry, delay as backoff_delay};
pub use clock::{Clock, ManualClock, Monotonic, SystemClock};
pub use index::{Index, KeyFn};
pub(crate) use sorted::reuse_copies;
pub use sorted::{SortedCopies, SortedState};
