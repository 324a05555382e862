//! One keyed backoff for every loop that retries: consecutive failures per key (an object, a
//! rollout, a loop's own step) and the instant each key may be tried again.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Duration;

use super::Monotonic;

/// The first retry's delay; each further consecutive failure doubles it.
const FIRST: Duration = Duration::from_secs(2);
/// The longest delay.
const CAP: Duration = Duration::from_secs(300);

/// Delay before retrying after `failures` consecutive failures (1 = the first; 0 counts as 1):
/// 2 s doubling, capped at 5 minutes.
pub fn delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << exp).min(CAP)
}

/// A key's consecutive failures, and when it may be tried again.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Retry {
    pub failures: u32,
    pub at: Monotonic,
}

impl Retry {
    /// The wait from `now` until the retry.
    pub fn wait(&self, now: Monotonic) -> Duration {
        self.at.saturating_since(now)
    }
}

/// Per-key backoff: after `n` consecutive failures a key waits [`delay`]`(n)`; a success forgets
/// it. A key that never failed is always ready.
#[derive(Debug)]
pub struct Backoff<K = String> {
    entries: BTreeMap<K, Retry>,
}

impl<K> Default for Backoff<K> {
    fn default() -> Self {
        Backoff {
            entries: BTreeMap::new(),
        }
    }
}

impl<K: Ord> Backoff<K> {
    /// Whether `key` may be tried at `now`.
    pub fn ready<Q>(&self, key: &Q, now: Monotonic) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.get(key).is_none_or(|r| now >= r.at)
    }

    /// Records a failure of `key` at `now`; returns its failures so far and its next try.
    pub fn failed(&mut self, key: K, now: Monotonic) -> Retry {
        let failures = self
            .entries
            .get(&key)
            .map_or(1, |r| r.failures.saturating_add(1));
        let retry = Retry {
            failures,
            at: now + delay(failures),
        };
        self.entries.insert(key, retry);
        retry
    }

    /// Forgets `key`'s failures.
    pub fn succeeded<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.remove(key);
    }

    /// The earliest retry strictly after `after` (a loop's next wake-up). A retry already due at
    /// `after` had its chance in the pass of that wake-up; waking at once for it again would
    /// spin the loop.
    pub fn next_retry(&self, after: Monotonic) -> Option<Monotonic> {
        self.entries
            .values()
            .map(|r| r.at)
            .filter(|at| *at > after)
            .min()
    }

    /// Keeps the keys `keep` accepts (a loop forgets the objects that are gone).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Backoff, Monotonic, delay};

    #[test]
    fn persistent_failures_back_off_exponentially_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=10).map(|n| delay(n).as_secs()).collect();
        assert_eq!(delays, vec![2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(delay(0), Duration::from_secs(2));
        assert_eq!(delay(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn a_failing_key_backs_off_exponentially_capped_and_a_success_resets_it() {
        let t0 = Monotonic::from_origin(Duration::from_secs(1000));
        let mut b: Backoff = Backoff::default();
        assert!(b.ready("workload/ns/a", t0));
        assert_eq!(b.next_retry(t0), None);
        let mut now = t0;
        let mut waits = vec![];
        for _ in 0..10 {
            let r = b.failed("workload/ns/a".into(), now);
            let wait = r.wait(now);
            waits.push(wait.as_secs());
            // held back until the wait is over, not a moment before
            assert!(!b.ready("workload/ns/a", now + (wait - Duration::from_millis(1))));
            assert!(b.ready("workload/ns/a", now + wait));
            assert_eq!(b.next_retry(now), Some(r.at));
            now = now + wait;
        }
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        // another key is not held back
        assert!(b.ready("clusterqueue/cq", t0));
        b.succeeded("workload/ns/a");
        assert!(b.ready("workload/ns/a", t0));
        let again = b.failed("workload/ns/a".into(), t0);
        assert_eq!(again.failures, 1, "reset by the success");
        // a deleted object's backoff goes with it
        b.failed("localqueue/ns/lq".into(), t0);
        b.retain(|k| k != "workload/ns/a");
        assert!(b.ready("workload/ns/a", t0));
        assert!(!b.ready("localqueue/ns/lq", t0));
    }

    /// A retry that was due when the loop woke, and that the pass did not use, does not wake the
    /// loop again at once: the next wake-up is a later retry or none.
    #[test]
    fn a_due_retry_no_pass_used_does_not_wake_the_loop_again() {
        let t0 = Monotonic::from_origin(Duration::from_secs(1000));
        let mut b: Backoff = Backoff::default();
        let old = b.failed("workload/ns/old".into(), t0);
        assert_eq!(b.next_retry(t0), Some(old.at));
        assert_eq!(b.next_retry(old.at), None);
        assert_eq!(b.next_retry(old.at + Duration::from_secs(60)), None);
        let later = t0 + Duration::from_secs(10);
        let lq = b.failed("localqueue/ns/lq".into(), later);
        assert_eq!(b.next_retry(old.at), Some(lq.at));
        // and a pass deciding the old key again may try it at once
        assert!(b.ready("workload/ns/old", old.at));
    }

    #[test]
    fn a_loop_of_its_own_backs_off_under_the_unit_key() {
        let t0 = Monotonic::from_origin(Duration::ZERO);
        let mut b: Backoff<()> = Backoff::default();
        assert_eq!(b.failed((), t0).wait(t0), Duration::from_secs(2));
        assert_eq!(b.failed((), t0).wait(t0), Duration::from_secs(4));
        b.succeeded(&());
        assert!(b.is_empty());
    }
}
