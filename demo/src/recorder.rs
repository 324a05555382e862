//! The history recorder (IO): one watch per kind on the cluster itself, each change reduced to
//! its compact state ([`crate::history::compact`]) and stamped with the cluster's clock.
//!
//! A watch that fails relists (kube-runtime's watcher); objects missing from the relist are
//! recorded as deleted at the relist, so a dropped watch never leaves a ghost in the history.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use raygate_sim::Clock;
use tokio::sync::watch;

use crate::history::{Change, History, Key, Kind};

/// A running recorder; its watches stop when it is dropped.
pub struct Recorder {
    history: Arc<Mutex<History>>,
    synced: watch::Receiver<usize>,
    kinds: usize,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn api_resource(kind: Kind) -> (ApiResource, bool) {
    let (group, version, kind_name, plural, namespaced) = kind.resource();
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    (
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version,
            kind: kind_name.into(),
            plural: plural.into(),
        },
        namespaced,
    )
}

impl Recorder {
    /// Starts recording `kinds` (every one must be served: a CRD missing makes its watch retry
    /// forever and [`Recorder::synced`] never return).
    pub fn start(client: &Client, clock: &Clock, kinds: &[Kind]) -> Recorder {
        let history = Arc::new(Mutex::new(History::new()));
        let (synced_tx, synced) = watch::channel(0usize);
        let synced_tx = Arc::new(synced_tx);
        let tasks = kinds
            .iter()
            .map(|&kind| {
                let (ar, _) = api_resource(kind);
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                tokio::spawn(follow(
                    api,
                    kind,
                    clock.clone(),
                    history.clone(),
                    synced_tx.clone(),
                ))
            })
            .collect();
        Recorder {
            history,
            synced,
            kinds: kinds.len(),
            tasks,
        }
    }

    /// Waits until every watch delivered its first list.
    pub async fn synced(&self) {
        let mut rx = self.synced.clone();
        let _ = rx.wait_for(|n| *n >= self.kinds).await;
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
    api: Api<DynamicObject>,
    kind: Kind,
    clock: Clock,
    history: Arc<Mutex<History>>,
    synced: Arc<watch::Sender<usize>>,
) {
    let stream = watcher::watcher(api, watcher::Config::default());
    let mut stream = std::pin::pin!(stream);
    let mut first_list = true;
    let mut listed: BTreeSet<Key> = BTreeSet::new();
    let key = |o: &DynamicObject| {
        Key::new(
            kind,
            o.namespace().as_deref().unwrap_or_default(),
            &o.name_any(),
        )
    };
    while let Some(event) = stream.next().await {
        let Ok(event) = event else {
            // the watcher relists on its own; keep reading
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        };
        let now = clock.now();
        let mut h = history.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Apply(o) | Event::InitApply(o) => {
                if let Ok(v) = serde_json::to_value(&o) {
                    listed.insert(key(&o));
                    h.record_object(now, kind, &v);
                }
            }
            Event::Delete(o) => {
                h.record(now, key(&o), None);
            }
            Event::Init => listed.clear(),
            Event::InitDone => {
                let gone: Vec<Key> = h
                    .current()
                    .keys()
                    .filter(|k| k.kind == kind && !listed.contains(k))
                    .cloned()
                    .collect();
                for k in gone {
                    h.record(now, k, None);
                }
                if first_list {
                    first_list = false;
                    synced.send_modify(|n| *n += 1);
                }
            }
        }
    }
}
