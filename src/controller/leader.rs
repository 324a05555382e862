//! Leader election on a coordination.k8s.io Lease: every replica watches, only the holder writes.
//!
//! client-go's `tools/leaderelection` (`leaderelection.go`: `tryAcquireOrRenew`, `renew`,
//! `release`; `resourcelock/leaselock.go`: the record ↔ `LeaseSpec` mapping, `Update` as a PUT of
//! the Lease last read) on the controller's injected [`Clock`], so a simulated cluster's paused
//! clock drives it like every other decision. The decision is pure ([`Elector`]: given the Lease
//! read and the time → create / acquire / renew / wait, and whether leadership is lost); the IO
//! around it is a GET, a create and a PUT guarded by the `resourceVersion` read (a 409 when
//! another replica wrote first).
//!
//! Expiry is judged as client-go judges it: a Lease held by another replica is free once this
//! replica has seen its record unchanged for `leaseDurationSeconds` of its own (monotonic) time,
//! never by comparing the `renewTime` another replica's clock wrote; an empty `holderIdentity`
//! (a released Lease) is free at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use super::{Config, Error};
use crate::runtime::{Clock, Monotonic};

/// A Lease's election record (client-go's `LeaderElectionRecord`; `resourcelock` maps it to and
/// from `LeaseSpec` field by field, absent fields as zero values).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    /// Empty: nobody holds the Lease (released).
    pub holder: String,
    pub lease_duration_seconds: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub transitions: i32,
}

impl Record {
    fn from_spec(spec: Option<&LeaseSpec>) -> Record {
        let Some(s) = spec else {
            return Record::default();
        };
        Record {
            holder: s.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: s.lease_duration_seconds.unwrap_or(0),
            acquire_time: s.acquire_time.as_ref().map(|t| t.0),
            renew_time: s.renew_time.as_ref().map(|t| t.0),
            transitions: s.lease_transitions.unwrap_or(0),
        }
    }

    fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// client-go's three durations. Derived from the Lease duration in client-go's default ratio
/// (15 s / 10 s / 2 s): the renew deadline is 2/3 of it, the retry period 2/15.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    /// How long a holder keeps the Lease without renewing (written as `leaseDurationSeconds`).
    pub lease: Duration,
    /// How long a leader keeps trying to renew before it stops writing (`RenewDeadline`).
    pub renew_deadline: Duration,
    /// Between two tries to acquire or renew (`RetryPeriod`).
    pub retry: Duration,
}

impl Timing {
    pub fn for_lease_seconds(seconds: u64) -> Timing {
        let lease = Duration::from_secs(seconds.clamp(1, i32::MAX as u64));
        Timing {
            lease,
            renew_deadline: lease * 2 / 3,
            retry: lease * 2 / 15,
        }
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease.as_secs()).unwrap_or(i32::MAX)
    }
}

/// What to do after reading the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// No Lease: create it holding it.
    Create(Record),
    /// Take the Lease over (it was released, or expired as this replica observed it).
    Acquire(Record),
    /// This replica holds it: write the next renewal.
    Renew(Record),
    /// Another replica holds it and it has not expired as observed: wait.
    Wait { holder: String },
}

/// One replica's view of the election (client-go's `LeaderElector` bookkeeping): the record it
/// last observed, when that record last changed on this replica's clock, and when this replica
/// last wrote it successfully.
#[derive(Clone, Debug)]
pub(crate) struct Elector {
    identity: String,
    timing: Timing,
    observed: Record,
    observed_at: Monotonic,
    renewed_at: Option<Monotonic>,
}

impl Elector {
    pub fn new(identity: impl Into<String>, timing: Timing) -> Elector {
        Elector {
            identity: identity.into(),
            timing,
            observed: Record::default(),
            observed_at: Monotonic::default(),
            renewed_at: None,
        }
    }

    /// Whether the last record observed names this replica (client-go's `IsLeader`).
    pub fn is_holder(&self) -> bool {
        !self.identity.is_empty() && self.observed.holder == self.identity
    }

    /// Whether the observed record is still valid at `at`: its duration has not passed since it
    /// was observed to change (client-go's `isLeaseValid`).
    fn lease_valid(&self, at: Monotonic) -> bool {
        let d =
            Duration::from_secs(u64::try_from(self.observed.lease_duration_seconds).unwrap_or(0));
        at < self.observed_at + d
    }

    /// Whether this replica may write at `at`: it holds the Lease as last observed, and its last
    /// successful write is within the renew deadline (past it, client-go's `renew` gives up).
    pub fn leads(&self, at: Monotonic) -> bool {
        self.is_holder()
            && self
                .renewed_at
                .is_some_and(|r| at < r + self.timing.renew_deadline)
    }

    /// Until when this replica may write without another successful renewal (`None` when it
    /// does not hold the Lease).
    pub fn lead_until(&self) -> Option<Monotonic> {
        match self.renewed_at {
            Some(r) if self.is_holder() => Some(r + self.timing.renew_deadline),
            _ => None,
        }
    }

    /// How long this replica may still write without a successful renewal (zero when it does not
    /// lead).
    pub fn lead_left(&self, at: Monotonic) -> Duration {
        match self.renewed_at {
            Some(r) if self.is_holder() => (r + self.timing.renew_deadline).saturating_since(at),
            _ => Duration::ZERO,
        }
    }

    /// The record this replica would hold with at `now`, keeping the acquire time and transition
    /// count when it already holds `current`.
    fn mine(&self, current: &Record, now: Timestamp) -> Record {
        let keep = current.holder == self.identity;
        Record {
            holder: self.identity.clone(),
            lease_duration_seconds: self.timing.lease_seconds(),
            acquire_time: if keep {
                current.acquire_time
            } else {
                Some(now)
            },
            renew_time: Some(now),
            transitions: if keep {
                current.transitions
            } else {
                current.transitions.saturating_add(1)
            },
        }
    }

    /// client-go's fast path: a holder whose Lease is valid as observed renews over the record it
    /// last wrote, without reading first (a 409 sends it to [`Elector::decide`]).
    pub fn renewal(&self, now: Timestamp, at: Monotonic) -> Option<Record> {
        (self.is_holder() && self.lease_valid(at)).then(|| self.mine(&self.observed, now))
    }

    /// After reading the Lease (`None`: there is none) at `now` / `at`: `tryAcquireOrRenew`'s
    /// slow path. A record that differs from the one last observed restarts its expiry clock.
    pub fn decide(&mut self, read: Option<&Record>, now: Timestamp, at: Monotonic) -> Decision {
        let Some(read) = read else {
            return Decision::Create(Record {
                transitions: 0,
                ..self.mine(&Record::default(), now)
            });
        };
        if *read != self.observed {
            self.observed = read.clone();
            self.observed_at = at;
        }
        if !read.holder.is_empty() && self.lease_valid(at) && !self.is_holder() {
            return Decision::Wait {
                holder: read.holder.clone(),
            };
        }
        let next = self.mine(read, now);
        if self.is_holder() {
            Decision::Renew(next)
        } else {
            Decision::Acquire(next)
        }
    }

    /// `record` was written at `at` (client-go's `setObservedRecord` after a write).
    pub fn wrote(&mut self, record: Record, at: Monotonic) {
        self.renewed_at = (record.holder == self.identity).then_some(at);
        self.observed = record;
        self.observed_at = at;
    }

    /// The record that gives the Lease up at `now`, when this replica holds it (client-go's
    /// `release`: no holder, a 1 s duration, the transition count kept).
    pub fn release(&self, now: Timestamp) -> Option<Record> {
        self.is_holder().then(|| Record {
            holder: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            transitions: self.observed.transitions,
        })
    }
}

/// The Lease's IO: the object last read or written, whose `resourceVersion` guards the next PUT
/// (client-go's `LeaseLock`).
struct LeaseLock {
    api: Api<Lease>,
    name: String,
    last: Option<Lease>,
}

impl LeaseLock {
    fn params() -> PostParams {
        PostParams {
            field_manager: Some(super::LEASE_MANAGER.into()),
            ..PostParams::default()
        }
    }

    async fn get(&mut self) -> Result<Option<Record>, kube::Error> {
        match self.api.get_opt(&self.name).await? {
            Some(lease) => {
                let record = Record::from_spec(lease.spec.as_ref());
                self.last = Some(lease);
                Ok(Some(record))
            }
            None => Ok(None),
        }
    }

    async fn create(&mut self, record: &Record) -> Result<(), kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(record.to_spec()),
        };
        self.last = Some(self.api.create(&Self::params(), &lease).await?);
        Ok(())
    }

    /// A PUT of `record` over the Lease last seen: 409 when it changed since.
    async fn update(&mut self, record: &Record) -> Result<(), kube::Error> {
        let Some(mut lease) = self.last.clone() else {
            // callers read or write first; a PUT without a resourceVersion would be unconditional
            let status = kube::core::Status::failure("the Lease was not read", "NotRead");
            return Err(kube::Error::Api(status.boxed()));
        };
        lease.spec = Some(record.to_spec());
        self.last = Some(
            self.api
                .replace(&self.name, &Self::params(), &lease)
                .await?,
        );
        Ok(())
    }
}

/// One `tryAcquireOrRenew`: the fast path for a valid holder, else read → decide → write.
/// Returns whether this replica holds the Lease after it.
async fn try_acquire_or_renew(
    elector: &mut Elector,
    lock: &mut LeaseLock,
    clock: &dyn Clock,
    lease: &str,
) -> bool {
    if let Some(record) = elector.renewal(clock.now(), clock.monotonic())
        && lock.last.is_some()
    {
        match lock.update(&record).await {
            Ok(()) => {
                elector.wrote(record, clock.monotonic());
                return true;
            }
            Err(e) => {
                tracing::debug!(lease, error = %e, "renewing without a read failed; reading the Lease")
            }
        }
    }
    let read = match lock.get().await {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(lease, error = %e, "reading the leader Lease failed");
            return false;
        }
    };
    let (now, at) = (clock.now(), clock.monotonic());
    let (record, written) = match elector.decide(read.as_ref(), now, at) {
        Decision::Wait { holder } => {
            tracing::trace!(lease, holder, "the Lease is held");
            return false;
        }
        Decision::Create(record) => {
            let written = lock.create(&record).await;
            (record, written)
        }
        Decision::Acquire(record) | Decision::Renew(record) => {
            let written = lock.update(&record).await;
            (record, written)
        }
    };
    match written {
        Ok(()) => {
            elector.wrote(record, clock.monotonic());
            true
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(lease, "another replica wrote the Lease first (409)");
            false
        }
        Err(e) => {
            tracing::warn!(lease, error = %e, "writing the leader Lease failed");
            false
        }
    }
}

/// This replica's write deadline on the controller's monotonic clock, shared with every writer:
/// its last successful renewal plus the renew deadline. A writer checks it against the clock
/// right before it writes, so a replica whose renewals stall stops writing at that instant, not
/// when its election loop next turns (a standby may take the Lease a lease duration after it
/// last saw it change, later than the renew deadline).
#[derive(Clone, Debug)]
pub struct Fence(Arc<AtomicU64>);

impl Fence {
    const CLOSED: u64 = 0;
    const OPEN: u64 = u64::MAX;

    /// Always open: a controller without leader election.
    pub fn open() -> Fence {
        Fence(Arc::new(AtomicU64::new(Self::OPEN)))
    }

    fn closed() -> Fence {
        Fence(Arc::new(AtomicU64::new(Self::CLOSED)))
    }

    fn nanos(at: Monotonic) -> u64 {
        let since = at.saturating_since(Monotonic::default());
        u64::try_from(since.as_nanos()).unwrap_or(Self::OPEN - 1)
    }

    fn set(&self, until: Option<Monotonic>) {
        let v = until.map_or(Self::CLOSED, |u| Self::nanos(u).max(1));
        self.0.store(v, Ordering::SeqCst);
    }

    /// Whether a write may be made at `at`.
    pub fn open_at(&self, at: Monotonic) -> bool {
        match self.0.load(Ordering::SeqCst) {
            Self::OPEN => true,
            Self::CLOSED => false,
            until => Self::nanos(at) < until,
        }
    }
}

/// A running election: whether this replica leads, and the task that contends. Dropped without
/// [`Election::release`] (the controller's future dropped: a crash), the task stops where it
/// stands and releases nothing.
pub struct Election {
    pub leads: watch::Receiver<bool>,
    /// The write deadline the election keeps current.
    pub fence: Fence,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Election {
    /// Stops contending and waits (at most `timeout`) until the Lease is released, so a standby
    /// takes over at once instead of after the lease duration. Returns whether it was.
    pub async fn release(mut self, timeout: Duration) -> bool {
        let _ = self.stop.send(true);
        match self.task.take() {
            Some(task) => matches!(tokio::time::timeout(timeout, task).await, Ok(Ok(()))),
            None => true,
        }
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Starts contending for the Lease on `clock`; the receiver says whether this replica may write.
/// It turns `false` as soon as a read shows another holder, and when renewals have failed for the
/// renew deadline (the Lease API gone, RBAC missing, the server unreachable): a replica that
/// cannot prove it leads never writes. The election keeps contending meanwhile.
pub fn elect(client: Client, config: &Config, clock: Arc<dyn Clock>) -> Result<Election, Error> {
    let lease = format!("{}/{}", config.lease_namespace, config.lease_name);
    if config.identity.is_empty() {
        return Err(Error::Lease {
            name: lease,
            reason: "the identity is empty".into(),
        });
    }
    let timing = Timing::for_lease_seconds(config.lease_duration_seconds);
    let mut elector = Elector::new(config.identity.clone(), timing);
    let mut lock = LeaseLock {
        api: Api::namespaced(client, &config.lease_namespace),
        name: config.lease_name.clone(),
        last: None,
    };
    let (tx, leads) = watch::channel(false);
    let (stop, mut stopped) = watch::channel(false);
    let fence = Fence::closed();
    let writes = fence.clone();
    let task = tokio::spawn(async move {
        loop {
            // a try may not outlast what is left of this replica's lead
            let at = clock.monotonic();
            let budget = match elector.lead_left(at) {
                Duration::ZERO => timing.renew_deadline,
                left => left,
            };
            let attempt = try_acquire_or_renew(&mut elector, &mut lock, clock.as_ref(), &lease);
            let _ = tokio::time::timeout(budget, attempt).await;
            writes.set(elector.lead_until());
            let now_leads = elector.leads(clock.monotonic());
            if now_leads != *tx.borrow() {
                if now_leads {
                    tracing::info!(lease = %lease, "leadership acquired; this replica writes");
                } else {
                    tracing::warn!(lease = %lease, holder = %elector.observed.holder, "leadership lost; this replica no longer writes");
                }
                let _ = tx.send(now_leads);
            }
            tokio::select! {
                biased;
                () = tokio::time::sleep(timing.retry) => {}
                // the Election dropped without a release (a crash): nothing more is written
                stop = stopped.changed() => match stop {
                    Ok(()) => break,
                    Err(_) => return,
                },
            }
        }
        // stopping: no more writes from here on, then give the Lease up if held
        writes.set(None);
        let _ = tx.send(false);
        if let Some(record) = elector.release(clock.now()) {
            match lock.update(&record).await {
                Ok(()) => {
                    tracing::info!(lease = %lease, "leader election stopped; the Lease is released")
                }
                Err(e) => {
                    tracing::warn!(lease = %lease, error = %e, "releasing the Lease failed; a standby takes over when it expires")
                }
            }
        }
    });
    Ok(Election {
        leads,
        fence,
        stop,
        task: Some(task),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "replica-a";
    const OTHER: &str = "replica-b";

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    fn m(ms: u64) -> Monotonic {
        Monotonic::from_origin(Duration::from_millis(ms))
    }

    fn timing() -> Timing {
        Timing::for_lease_seconds(15)
    }

    fn held_by(holder: &str, transitions: i32) -> Record {
        Record {
            holder: holder.into(),
            lease_duration_seconds: 15,
            acquire_time: Some(t(0)),
            renew_time: Some(t(0)),
            transitions,
        }
    }

    #[test]
    fn the_timing_keeps_client_go_s_default_ratio() {
        let d = timing();
        assert_eq!(
            (d.lease, d.renew_deadline, d.retry),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        // client-go's checks: lease > renew deadline > 1.2 × retry period
        for s in [1, 3, 15, 60] {
            let d = Timing::for_lease_seconds(s);
            assert!(d.lease > d.renew_deadline, "{d:?}");
            assert!(
                d.renew_deadline.as_secs_f64() > 1.2 * d.retry.as_secs_f64(),
                "{d:?}"
            );
        }
    }

    #[test]
    fn no_lease_is_created_held_with_no_transition() {
        let mut e = Elector::new(ME, timing());
        assert_eq!(
            e.decide(None, t(5), m(0)),
            Decision::Create(Record {
                holder: ME.into(),
                lease_duration_seconds: 15,
                acquire_time: Some(t(5)),
                renew_time: Some(t(5)),
                transitions: 0,
            })
        );
    }

    #[test]
    fn a_lease_held_by_another_is_free_only_a_full_duration_after_it_was_last_seen_to_change() {
        let mut e = Elector::new(ME, timing());
        // first seen at 1 s; its renewTime (another clock's) plays no part
        let other = held_by(OTHER, 4);
        assert_eq!(
            e.decide(Some(&other), t(100), m(1_000)),
            Decision::Wait {
                holder: OTHER.into()
            }
        );
        // unchanged at 15.999 s: still valid (seen 14.999 s ago)
        assert!(matches!(
            e.decide(Some(&other), t(115), m(15_999)),
            Decision::Wait { .. }
        ));
        // renewed at 10 s: the expiry clock restarts
        let renewed = Record {
            renew_time: Some(t(10)),
            ..other.clone()
        };
        assert!(matches!(
            e.decide(Some(&renewed), t(110), m(10_000)),
            Decision::Wait { .. }
        ));
        assert!(matches!(
            e.decide(Some(&renewed), t(124), m(24_999)),
            Decision::Wait { .. }
        ));
        // 15 s unchanged: taken over, one more transition, acquired now
        assert_eq!(
            e.decide(Some(&renewed), t(125), m(25_000)),
            Decision::Acquire(Record {
                holder: ME.into(),
                lease_duration_seconds: 15,
                acquire_time: Some(t(125)),
                renew_time: Some(t(125)),
                transitions: 5,
            })
        );
        assert!(!e.leads(m(25_000)), "nothing is led before the write lands");
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let mut e = Elector::new(ME, timing());
        let released = Record {
            holder: String::new(),
            lease_duration_seconds: 1,
            ..held_by("", 2)
        };
        let Decision::Acquire(r) = e.decide(Some(&released), t(3), m(0)) else {
            panic!("a released Lease is free");
        };
        assert_eq!((r.holder.as_str(), r.transitions), (ME, 3));
    }

    #[test]
    fn the_holder_renews_keeping_its_acquire_time_and_leads_until_the_renew_deadline() {
        let mut e = Elector::new(ME, timing());
        let Decision::Create(created) = e.decide(None, t(0), m(0)) else {
            panic!("create");
        };
        e.wrote(created.clone(), m(100));
        assert!(e.leads(m(100)));
        // the fast path: no read needed while the Lease is valid as observed
        let next = e.renewal(t(2), m(2_100)).expect("a valid holder renews");
        assert_eq!(next.acquire_time, Some(t(0)));
        assert_eq!(next.renew_time, Some(t(2)));
        assert_eq!(next.transitions, 0);
        // renewals keep failing: it leads until 10 s after the last write, then stops writing
        assert!(e.leads(m(10_099)));
        assert_eq!(e.lead_left(m(10_000)), Duration::from_millis(100));
        assert!(!e.leads(m(10_100)));
        // a slow-path read of its own record renews too
        assert!(matches!(
            e.decide(Some(&created), t(11), m(11_000)),
            Decision::Renew(Record { transitions: 0, .. })
        ));
        e.wrote(
            Record {
                renew_time: Some(t(11)),
                ..created
            },
            m(11_050),
        );
        assert!(e.leads(m(11_050)));
    }

    #[test]
    fn a_holder_that_reads_another_holder_stops_leading_at_once() {
        let mut e = Elector::new(ME, timing());
        e.wrote(held_by(ME, 0), m(0));
        assert!(e.leads(m(1_000)));
        // deposed: someone else wrote the Lease (the fast path's PUT got a 409, then this read)
        let taken = held_by(OTHER, 1);
        assert!(matches!(
            e.decide(Some(&taken), t(2), m(2_000)),
            Decision::Wait { .. }
        ));
        assert!(!e.leads(m(2_000)));
        assert_eq!(e.renewal(t(2), m(2_000)), None);
        assert_eq!(
            e.release(t(2)),
            None,
            "a replica that does not hold releases nothing"
        );
    }

    #[test]
    fn the_fence_is_open_until_the_renew_deadline_of_the_last_renewal_only() {
        let mut e = Elector::new(ME, timing());
        let fence = Fence::closed();
        assert!(!fence.open_at(m(0)));
        let Decision::Create(r) = e.decide(None, t(0), m(0)) else {
            panic!("creates");
        };
        e.wrote(r, m(1_000));
        fence.set(e.lead_until());
        // renew deadline 10 s after the renewal at 1 s
        assert!(fence.open_at(m(10_999)));
        assert!(!fence.open_at(m(11_000)), "closed at the deadline itself");
        // another holder read: closed at once
        let _ = e.decide(Some(&held_by(OTHER, 1)), t(2), m(2_000));
        fence.set(e.lead_until());
        assert!(!fence.open_at(m(2_000)));
        assert!(Fence::open().open_at(m(u64::MAX / 2)));
    }

    #[test]
    fn release_clears_the_holder_and_keeps_the_transition_count() {
        let mut e = Elector::new(ME, timing());
        e.wrote(held_by(ME, 7), m(0));
        assert_eq!(
            e.release(t(30)),
            Some(Record {
                holder: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(t(30)),
                renew_time: Some(t(30)),
                transitions: 7,
            })
        );
    }

    #[test]
    fn the_record_maps_to_and_from_the_lease_spec() {
        let r = held_by(ME, 3);
        assert_eq!(Record::from_spec(Some(&r.to_spec())), r);
        assert_eq!(Record::from_spec(None), Record::default());
    }
}
