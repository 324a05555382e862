//! The history recorder (IO): one in-process watch per kind on the sim's store
//! ([`Sim::observe`]), each change reduced to its compact state ([`crate::history::compact`])
//! and stamped with the cluster's clock.
//!
//! The recorder is the observer of the cluster's own history, not a client under test: it reads
//! the store's events as they are committed (no HTTP, no JSON, no injected faults), so its watch
//! never drops and never relists.

use std::sync::{Arc, Mutex, MutexGuard};

use raygate_sim::server::status::ApiError;
use raygate_sim::server::store::WatchEvent;
use raygate_sim::{Clock, Sim};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::history::{Change, History, Key, Kind, identity};

/// A running recorder; its watches stop when it is dropped.
pub struct Recorder {
    history: Arc<Mutex<History>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The collection's path on the API server, e.g. `/apis/ray.io/v1/rayclusters`.
fn collection_path(kind: Kind) -> String {
    let (group, version, _, plural, _) = kind.resource();
    if group.is_empty() {
        format!("/api/{version}/{plural}")
    } else {
        format!("/apis/{group}/{version}/{plural}")
    }
}

impl Recorder {
    /// Starts recording `kinds` on `sim`, each kind's objects recorded before this returns (its
    /// first list); an error when a kind is not served (a CRD missing).
    pub fn start(sim: &Sim, kinds: &[Kind]) -> Result<Recorder, ApiError> {
        let clock = sim.clock().clone();
        let history = Arc::new(Mutex::new(History::new()));
        let feeds = kinds
            .iter()
            .map(|&kind| Ok((kind, sim.observe(&collection_path(kind))?)))
            .collect::<Result<Vec<_>, ApiError>>()?;
        let tasks = feeds
            .into_iter()
            .map(|(kind, mut feed)| {
                // the store queued every object before `observe` returned: its first list
                while let Ok(event) = feed.try_recv() {
                    record(&history, &clock, kind, &event);
                }
                tokio::spawn(follow(feed, kind, clock.clone(), history.clone()))
            })
            .collect();
        Ok(Recorder { history, tasks })
    }

    fn lock(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The history so far.
    pub fn history(&self) -> History {
        self.lock().clone()
    }

    /// A cursor over the changes as they are recorded (a live display reads only what is new).
    pub fn follower(&self) -> Follower {
        Follower {
            history: self.history.clone(),
            next: 0,
        }
    }
}

/// Reads a growing history's changes once each, in order.
pub struct Follower {
    history: Arc<Mutex<History>>,
    next: usize,
}

impl Follower {
    /// The changes recorded since the last call.
    pub fn next_changes(&mut self) -> Vec<Change> {
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let new = h.changes.get(self.next..).unwrap_or_default().to_vec();
        self.next = h.changes.len();
        new
    }
}

async fn follow(
    mut feed: UnboundedReceiver<WatchEvent>,
    kind: Kind,
    clock: Clock,
    history: Arc<Mutex<History>>,
) {
    while let Some(event) = feed.recv().await {
        record(&history, &clock, kind, &event);
    }
}

/// Records one store event at the cluster's current time.
fn record(history: &Mutex<History>, clock: &Clock, kind: Kind, event: &WatchEvent) {
    let now = clock.now();
    let mut h = history.lock().unwrap_or_else(|p| p.into_inner());
    match event.typ {
        "ADDED" | "MODIFIED" => {
            h.record_object(now, kind, &event.object);
        }
        "DELETED" => {
            let (namespace, name) = identity(&event.object);
            h.record(now, Key::new(kind, &namespace, &name), None);
        }
        // the store sends no BOOKMARK or ERROR to an in-process watch
        _ => {}
    }
}
