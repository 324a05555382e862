//! Shared in-process informers: the sim's own actors (the test doubles of the scheduler, the
//! kubelets, the kube-controller-manager's controllers, LWS) reading the store without HTTP or
//! JSON, one typed cache per (kind, selector) shared by every actor that asks for it.
//!
//! Why: the reliability sweep spent about a quarter of its CPU on the actors' own watches, each
//! decoding every Pod event from JSON into its own store (five unfiltered Pod watches per run).
//! Here an event is decoded from the stored object once per (kind, selector) and applied to one
//! kube-runtime [`Store`], as client-go's `SharedInformerFactory` shares one informer per kind
//! among a process's controllers.
//!
//! What stays as it was: raygate (the system under test) and every client outside an
//! [`in_process`](crate::world::informers::in_process) scope watch through `kube::Client`, over
//! JSON, with injected faults.
//! What an in-process actor gives up: its caches see no injected list or watch faults (rules
//! scoped to its requests still fail its writes), as the demo's history recorder sees none
//! ([`Sim::observe`]); a change reaches every actor sharing the cache at the same instant; its
//! typed objects come without `managedFields` ([`crate::server::decode`]).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;

use futures::future::Either;
use kube::Resource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;

use crate::Sim;
use crate::server::decode::without_managed_fields;
use crate::server::in_process::selector_query;
use crate::server::status::ApiError;
use crate::server::store::WatchEvent;
use crate::world::fanout::Fanout;

tokio::task_local! {
    /// The sim whose store the actors' caches in this task read in-process.
    static IN_PROCESS: Sim;
}

/// The sim of the current [`in_process`] scope.
pub fn current() -> Option<Sim> {
    IN_PROCESS.try_with(Clone::clone).ok()
}

/// `fut` in the current [`in_process`] scope, if any: for a task an actor spawns (a
/// kubelet per node) to read the same way.
pub fn carry<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    match current() {
        Some(sim) => Either::Left(IN_PROCESS.scope(sim, fut)),
        None => Either::Right(fut),
    }
}

/// One shared cache: its store and the signal fired after every applied change (its
/// subscribers woken in the order they subscribed, so the actors sharing a cache react to a
/// change in the same order in every run: [`crate::world::fanout`]).
#[derive(Clone)]
pub struct Informer<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    pub changed: Fanout,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    typ: TypeId,
    path: String,
    labels: String,
    fields: String,
}

/// A sim's shared informers, by kind, path and selectors (kept as the sim's
/// [`Sim::extension`]).
#[derive(Default)]
struct Registry(Mutex<HashMap<Key, Box<dyn Any + Send + Sync>>>);

/// Runs `fut` with its actors' caches ([`crate::world::actors::support::Caches`]) reading `sim`'s
/// store in-process through shared informers (this module's doc says what that changes). Tasks
/// the future spawns keep the scope only through [`carry`].
pub fn in_process<F: Future>(sim: &Sim, fut: F) -> impl Future<Output = F::Output> {
    IN_PROCESS.scope(sim.clone(), fut)
}

/// `sim`'s shared informer of `K` at `path` (a collection URL, `/api/v1/pods`) with `config`'s
/// label and field selectors: created on first use, already listed when returned.
pub fn informer<K>(
    sim: &Sim,
    path: &str,
    config: &watcher::Config,
    dyntype: K::DynamicType,
) -> Result<Informer<K>, ApiError>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let key = Key {
        typ: TypeId::of::<K>(),
        path: path.to_string(),
        labels: config.label_selector.clone().unwrap_or_default(),
        fields: config.field_selector.clone().unwrap_or_default(),
    };
    let registry = sim.extension::<Registry>();
    let mut informers = registry.0.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = informers
        .get(&key)
        .and_then(|i| i.downcast_ref::<Informer<K>>())
    {
        return Ok(i.clone());
    }
    let query = selector_query(
        config.label_selector.as_deref(),
        config.field_selector.as_deref(),
    );
    let (mut rx, listed) = sim.observe_query(path, &query)?;
    let mut writer = reflector::store::Writer::new(dyntype);
    writer.apply_watcher_event(&watcher::Event::Init);
    for _ in 0..listed {
        if let Ok(ev) = rx.try_recv()
            && let Some(Change::Apply(obj)) = change::<K>(&ev)
        {
            writer.apply_watcher_event(&watcher::Event::InitApply(obj));
        }
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let changed = Fanout::default();
    let informer = Informer {
        store: writer.as_reader(),
        changed: changed.clone(),
    };
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            let Some(c) = change::<K>(&ev) else { continue };
            writer.apply_watcher_event(&match c {
                Change::Apply(obj) => watcher::Event::Apply(obj),
                Change::Delete(obj) => watcher::Event::Delete(obj),
            });
            changed.notify();
        }
    });
    informers.insert(key, Box::new(informer.clone()));
    Ok(informer)
}

enum Change<K> {
    Apply(K),
    Delete(K),
}

/// The store event as a reflector change, its object without `managedFields`
/// ([`crate::server::decode`]): `None` for a bookmark, an error, or an object that does not
/// decode as `K`, which a JSON watch would also drop.
fn change<K: DeserializeOwned>(ev: &WatchEvent) -> Option<Change<K>> {
    let decode = || match without_managed_fields::<K>(&ev.object) {
        Ok(obj) => Some(obj),
        Err(e) => {
            tracing::warn!(error = %e, "sim informer: an object does not decode");
            None
        }
    };
    match ev.typ {
        "ADDED" | "MODIFIED" => decode().map(Change::Apply),
        "DELETED" => decode().map(Change::Delete),
        _ => None,
    }
}
