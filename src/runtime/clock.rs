//! The controller's one source of time. Every decision gets its time as a value from here; the
//! real clock reads the system, the simulated cluster drives its own (virtual) clock.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A point on the clock's monotonic timeline (time since the clock's origin): for latencies,
/// expiries and backoff, never for timestamps written to objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Monotonic(Duration);

impl Monotonic {
    /// The point `since_origin` after the clock's origin.
    pub fn from_origin(since_origin: Duration) -> Self {
        Monotonic(since_origin)
    }

    /// Time from `earlier` to this point (zero when `earlier` is later).
    pub fn saturating_since(self, earlier: Monotonic) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl std::ops::Add<Duration> for Monotonic {
    type Output = Monotonic;
    fn add(self, d: Duration) -> Monotonic {
        Monotonic(self.0.saturating_add(d))
    }
}

/// Wall time for what is written (condition times, retention), monotonic time for what is
/// measured.
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> Timestamp;
    /// The current point on the monotonic timeline.
    fn monotonic(&self) -> Monotonic;
}

/// The system's clocks: the only place the controller reads them.
pub struct SystemClock {
    origin: tokio::time::Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            // tokio's Instant: under a paused tokio runtime it follows tokio's time
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the real clock
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn monotonic(&self) -> Monotonic {
        Monotonic(self.origin.elapsed())
    }
}

/// A clock that moves only when told: tests and simulations.
pub struct ManualClock {
    at: Mutex<(Timestamp, Duration)>,
}

impl ManualClock {
    /// A clock reading `now`, at the origin of its monotonic timeline.
    pub fn starting_at(now: Timestamp) -> Self {
        ManualClock {
            at: Mutex::new((now, Duration::ZERO)),
        }
    }

    /// Moves both timelines forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut at = self.at.lock().unwrap_or_else(|p| p.into_inner());
        let step = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
        at.0 = at.0.checked_add(step).unwrap_or(Timestamp::MAX);
        at.1 = at.1.saturating_add(d);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.at.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    fn monotonic(&self) -> Monotonic {
        Monotonic(self.at.lock().unwrap_or_else(|p| p.into_inner()).1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::jiff::Timestamp;

    use super::{Clock, ManualClock, Monotonic};

    #[test]
    fn a_manual_clock_moves_both_timelines_only_when_advanced() {
        let t0 = Timestamp::from_second(1_767_225_600).unwrap();
        let c = ManualClock::starting_at(t0);
        let m0 = c.monotonic();
        assert_eq!((c.now(), m0), (t0, Monotonic::default()));
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now().duration_since(t0).as_millis(), 1500);
        assert_eq!(
            c.monotonic().saturating_since(m0),
            Duration::from_millis(1500)
        );
        assert_eq!(m0.saturating_since(c.monotonic()), Duration::ZERO);
    }
}
