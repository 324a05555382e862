//! What a run looks like to a person (pure): the live display's lines ([`live`]), then the
//! timeline and the summary table at the end ([`summary`](mod@summary)).

mod live;
mod summary;

pub use live::{Line, Narrator, clock, render};
pub use summary::{INVARIANTS, against_baselines, holds, quota_peaks, report_json, summary};

#[cfg(test)]
mod tests;
