//! The sim's one clock: tokio's (pausable) monotonic clock mapped onto a fixed wall-clock epoch.
//!
//! Under `#[tokio::test(start_paused = true)]` tokio's clock only moves when every task is idle
//! (auto-advance) or when a test calls `tokio::time::advance`, so hours of cluster time pass in
//! milliseconds of wall time, and every timestamp the sim writes is deterministic.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// Cluster time: `epoch` plus the tokio time elapsed since the clock was made.
#[derive(Clone, Debug)]
pub struct Clock {
    epoch: Timestamp,
    start: Instant,
}

/// 2026-01-01T00:00:00Z: the default epoch, so test output is stable.
pub const DEFAULT_EPOCH_SECONDS: i64 = 1_767_225_600;

impl Default for Clock {
    fn default() -> Self {
        Clock::starting_at(
            Timestamp::from_second(DEFAULT_EPOCH_SECONDS).unwrap_or(Timestamp::UNIX_EPOCH),
        )
    }
}

impl Clock {
    /// A clock reading `epoch` now (in tokio time).
    pub fn starting_at(epoch: Timestamp) -> Self {
        Clock {
            epoch,
            start: Instant::now(),
        }
    }

    /// Current cluster time.
    pub fn now(&self) -> Timestamp {
        let elapsed = Instant::now().saturating_duration_since(self.start);
        let d = SignedDuration::try_from(elapsed).unwrap_or(SignedDuration::MAX);
        self.epoch.checked_add(d).unwrap_or(Timestamp::MAX)
    }

    /// Time on the clock since it was made (tokio time): a monotonic reading.
    pub fn elapsed(&self) -> std::time::Duration {
        Instant::now().saturating_duration_since(self.start)
    }

    /// Current cluster time at the API's precision (RFC 3339, whole seconds), as the server
    /// writes `creationTimestamp` and `deletionTimestamp`.
    pub fn now_rfc3339(&self) -> String {
        seconds(self.now())
    }
}

/// A timestamp truncated to whole seconds, formatted as the API server does.
pub fn seconds(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_hour_of_paused_time_reads_as_an_hour_of_cluster_time() {
        let clock = Clock::default();
        assert_eq!(clock.now_rfc3339(), "2026-01-01T00:00:00Z");
        tokio::time::advance(std::time::Duration::from_secs(3600 + 1)).await;
        assert_eq!(clock.now_rfc3339(), "2026-01-01T01:00:01Z");
    }
}
