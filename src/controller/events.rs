//! Events: every gate decision is published as a Kubernetes Event (`events.k8s.io/v1`) and
//! logged. A server without the Events API (the test API server has none) makes Events log-only,
//! never an error.
//!
//! raygate records Events itself instead of with kube-runtime's `Recorder`: that recorder stamps
//! `eventTime`, `series.lastObservedTime` and the Event's name with the system clock
//! (`Timestamp::now()` in kube-runtime 5.0's `events.rs`, no way to pass a time in), so on the
//! simulated cluster's virtual clock its Events carry the wall time. Measured: stamped with the
//! system clock, `tests/ops.rs` fails with "eventTime 2026-11-23T01:54:37Z is not cluster time
//! (2026-01-01T00:00:00Z .. 2026-01-01T00:00:06Z)". Here time comes from the controller's
//! [`Clock`]; `tests/ops.rs` checks every Event's time is cluster time.
//!
//! Series and deduplication follow client-go's `tools/events` broadcaster (what kube-runtime
//! approximates): the first occurrence creates the Event, the second starts its `series`
//! (count 2), later ones only count in memory and reach the server with the next occurrence
//! [`HEARTBEAT`] after the last write; a series not observed for [`SERIES_TTL`] ends. Unlike
//! both, the note is part of the Event's identity: a hold whose shortfall changes is told anew.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use super::Clock;
use crate::events::{Event, EventType};

/// The `reportingController` of every raygate Event.
pub const REPORTING_CONTROLLER: &str = "raygate";
/// A series not observed for this long ends; the next occurrence creates a new Event
/// (client-go's and kube-runtime's 6 minutes).
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// How often an ongoing series' count is written (client-go's 30 minutes).
pub const HEARTBEAT: Duration = Duration::from_secs(30 * 60);

/// What identifies an Event for deduplication.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    reason: String,
    note: String,
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

/// An Event this process wrote, as the server has it.
#[derive(Clone, Debug)]
struct Recorded {
    namespace: String,
    name: String,
    /// Occurrences so far (1 before a series starts).
    count: i32,
    last_observed: Timestamp,
    last_written: Timestamp,
}

/// What one more occurrence of an Event needs from the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// A new Event.
    Create,
    /// The series' count and last observed time (merge patch).
    Series { count: i32 },
    /// Nothing now: counted, written with a later occurrence.
    Counted { count: i32 },
}

/// The write for an occurrence at `now` of an Event recorded `count` times, last observed at
/// `last_observed` and last written at `last_written` (`None`: not recorded or its series ended).
pub(crate) fn next_write(recorded: Option<(i32, Timestamp, Timestamp)>, now: Timestamp) -> Write {
    let since = |t: Timestamp| Duration::try_from(now.duration_since(t)).unwrap_or_default();
    match recorded {
        Some((_, last_observed, _)) if since(last_observed) >= SERIES_TTL => Write::Create,
        None => Write::Create,
        Some((1, _, _)) => Write::Series { count: 2 },
        Some((count, _, last_written)) if since(last_written) >= HEARTBEAT => Write::Series {
            count: count.saturating_add(1),
        },
        Some((count, _, _)) => Write::Counted {
            count: count.saturating_add(1),
        },
    }
}

/// Publishes Events on the controller's clock, falling back to logs only when the Events API
/// is missing.
pub struct EventSink {
    client: Client,
    clock: Arc<dyn Clock>,
    /// `reportingInstance`: this replica's identity.
    instance: String,
    recorded: Mutex<HashMap<Key, Recorded>>,
    /// The last name stamp handed out: names stay unique when the clock stands still.
    last_stamp: Mutex<i128>,
    disabled: AtomicBool,
}

impl EventSink {
    /// A sink writing as `instance` (the replica's identity), with times from `clock`.
    pub fn new(client: Client, clock: Arc<dyn Clock>, instance: impl Into<String>) -> Self {
        EventSink {
            client,
            clock,
            instance: instance.into(),
            recorded: Mutex::default(),
            last_stamp: Mutex::new(0),
            disabled: AtomicBool::new(false),
        }
    }

    /// Logs the event and publishes it on `object`.
    pub async fn publish(&self, object: &ObjectReference, ev: &Event) {
        let name = object.name.as_deref().unwrap_or_default();
        let ns = object.namespace.as_deref().unwrap_or_default();
        match ev.type_ {
            EventType::Normal => {
                tracing::info!(object = %format!("{ns}/{name}"), reason = ev.reason, "{}", ev.message)
            }
            EventType::Warning => {
                tracing::warn!(object = %format!("{ns}/{name}"), reason = ev.reason, "{}", ev.message)
            }
        }
        if self.disabled.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = self.record(object, ev).await {
            if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                tracing::info!("the Events API is not served here: events go to the log only");
                self.disabled.store(true, Ordering::Relaxed);
            } else {
                tracing::debug!(error = %e, "publishing an event failed");
            }
        }
    }

    async fn record(&self, object: &ObjectReference, ev: &Event) -> Result<(), kube::Error> {
        let now = self.clock.now();
        let note = truncate(&ev.message, 1024);
        let key = Key {
            warning: ev.type_ == EventType::Warning,
            reason: ev.reason.to_string(),
            note: note.clone(),
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            uid: object.uid.clone(),
        };
        let previous = {
            let mut recorded = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
            recorded.retain(|_, r| {
                Duration::try_from(now.duration_since(r.last_observed)).unwrap_or_default()
                    < SERIES_TTL
            });
            recorded.get(&key).cloned()
        };
        let write = next_write(
            previous
                .as_ref()
                .map(|r| (r.count, r.last_observed, r.last_written)),
            now,
        );
        let recorded = match (write, previous) {
            (Write::Counted { count }, Some(r)) => Recorded {
                count,
                last_observed: now,
                ..r
            },
            (Write::Series { count }, Some(r)) => {
                let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &r.namespace);
                let patch = serde_json::json!({"series": EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                }});
                api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Recorded {
                    count,
                    last_observed: now,
                    last_written: now,
                    ..r
                }
            }
            _ => self.create(object, ev, note, now).await?,
        };
        self.recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, recorded);
        Ok(())
    }

    /// Creates a new Event (the first of its series, or after the series expired).
    async fn create(
        &self,
        object: &ObjectReference,
        ev: &Event,
        note: String,
        now: Timestamp,
    ) -> Result<Recorded, kube::Error> {
        let namespace = object
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let name = format!(
            "{}.{:x}",
            object.name.as_deref().unwrap_or(REPORTING_CONTROLLER),
            self.stamp(now)
        );
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(ev.reason.to_string()),
            reason: Some(ev.reason.to_string()),
            note: Some(note),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            regarding: Some(object.clone()),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event).await?;
        Ok(Recorded {
            namespace,
            name,
            count: 1,
            last_observed: now,
            last_written: now,
        })
    }

    /// Nanoseconds of `now`, or one more than the last stamp when the clock has not moved.
    fn stamp(&self, now: Timestamp) -> i128 {
        let mut last = self.last_stamp.lock().unwrap_or_else(|p| p.into_inner());
        *last = now.as_nanosecond().max(last.saturating_add(1));
        *last
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    use super::{HEARTBEAT, SERIES_TTL, Write, next_write};

    fn after(t: Timestamp, d: Duration) -> Timestamp {
        t.checked_add(SignedDuration::try_from(d).unwrap()).unwrap()
    }

    #[test]
    fn a_repeated_event_starts_a_series_then_is_written_once_per_heartbeat() {
        let t0 = Timestamp::from_second(1_767_225_600).unwrap();
        let s = Duration::from_secs;
        assert_eq!(next_write(None, t0), Write::Create);
        // the second occurrence starts the series at once
        assert_eq!(
            next_write(Some((1, t0, t0)), after(t0, s(10))),
            Write::Series { count: 2 }
        );
        // later ones are counted, and written with the first occurrence a heartbeat after the
        // last write
        let t1 = after(t0, s(10));
        assert_eq!(
            next_write(Some((2, t1, t1)), after(t1, s(60))),
            Write::Counted { count: 3 }
        );
        let observed = after(t1, HEARTBEAT - s(60));
        assert_eq!(
            next_write(Some((40, observed, t1)), after(t1, HEARTBEAT)),
            Write::Series { count: 41 }
        );
        // a series not observed for its TTL ends: a new Event
        assert_eq!(
            next_write(Some((7, t1, t1)), after(t1, SERIES_TTL)),
            Write::Create
        );
        assert_eq!(
            next_write(Some((7, t1, t1)), after(t1, SERIES_TTL - s(1))),
            Write::Counted { count: 8 }
        );
    }
}
