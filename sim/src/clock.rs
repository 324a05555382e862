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

    /// A clock reading the system's wall time now. It then follows tokio's clock: wall time
    /// while tokio's clock runs (actors against a real API server), virtual time when a test
    /// pauses it.
    #[allow(clippy::disallowed_methods)] // the one place an actor's clock meets the system's
    pub fn wall() -> Self {
        Clock::starting_at(Timestamp::now())
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

/// The sim's clock is the controller's clock when raygate runs on the simulated cluster: wall time
/// is cluster time, the monotonic reading is the time since the clock was made.
impl raygate::runtime::Clock for Clock {
    fn now(&self) -> Timestamp {
        Clock::now(self)
    }

    fn monotonic(&self) -> raygate::runtime::Monotonic {
        raygate::runtime::Monotonic::from_origin(self.elapsed())
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

    #[tokio::test]
    async fn a_wall_clock_reads_wall_time_while_tokio_runs() {
        let clock = Clock::wall();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        #[allow(clippy::disallowed_methods)]
        let skew = Timestamp::now().duration_since(clock.now()).abs();
        assert!(skew < SignedDuration::from_millis(15), "skew {skew:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_hour_of_paused_time_reads_as_an_hour_of_cluster_time() {
        let clock = Clock::default();
        assert_eq!(clock.now_rfc3339(), "2026-01-01T00:00:00Z");
        tokio::time::advance(std::time::Duration::from_secs(3600 + 1)).await;
        assert_eq!(clock.now_rfc3339(), "2026-01-01T01:00:01Z");
    }
}
