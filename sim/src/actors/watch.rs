//! Reflector stores that wake their actor: each store is fed by a kube-runtime watcher in its own
//! task; every applied event pings [`Changes`]. The tasks end when the `Changes` is dropped.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Wakes an actor when any of its stores changed.
#[derive(Default)]
pub struct Changes {
    notify: Arc<Notify>,
    tasks: Vec<JoinHandle<()>>,
    stores_ready: Vec<Box<dyn Fn() -> bool + Send + Sync>>,
}

impl Changes {
    /// Waits for the next change (returns at once if one happened since the last call).
    pub async fn next(&self) {
        self.notify.notified().await;
    }

    /// Whether every store has delivered its first list.
    pub fn ready(&self) -> bool {
        self.stores_ready.iter().all(|r| r())
    }

    /// Waits until every store has delivered its first list.
    pub async fn wait_ready(&self) {
        while !self.ready() {
            self.next().await;
        }
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A store of `api`'s objects selected by `config`, kept by a watcher task.
pub fn reflect<K>(api: Api<K>, config: watcher::Config, changes: &mut Changes) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    reflect_with(api, Default::default(), config, changes)
}

/// [`reflect`], also announcing every change to any number of receivers (a shared cache).
pub fn reflect_broadcast<K>(
    api: Api<K>,
    config: watcher::Config,
    changes: &mut Changes,
) -> (Store<K>, tokio::sync::watch::Receiver<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (tx, rx) = tokio::sync::watch::channel(());
    let store = reflect_inner(api, Default::default(), config, changes, Some(tx));
    (store, rx)
}

/// [`reflect`] for kinds with a runtime type (`DynamicObject`).
pub fn reflect_with<K>(
    api: Api<K>,
    dyntype: K::DynamicType,
    config: watcher::Config,
    changes: &mut Changes,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    reflect_inner(api, dyntype, config, changes, None)
}

fn reflect_inner<K>(
    api: Api<K>,
    dyntype: K::DynamicType,
    config: watcher::Config,
    changes: &mut Changes,
    broadcast: Option<tokio::sync::watch::Sender<()>>,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let writer = reflector::store::Writer::new(dyntype);
    let reader = writer.as_reader();
    let notify = changes.notify.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff().reflect(writer);
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Err(e) = ev {
                tracing::debug!(error = %e, "watch error");
            }
            notify.notify_one();
            if let Some(b) = &broadcast {
                b.send_replace(());
            }
        }
    });
    changes.tasks.push(task);
    let r = reader.clone();
    changes.stores_ready.push(Box::new(move || {
        // a store is ready once its first list was applied (kube-runtime's readiness)
        futures::FutureExt::now_or_never(r.wait_until_ready()).is_some_and(|x| x.is_ok())
    }));
    reader
}
