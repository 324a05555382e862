//! Plumbing shared by the actors, and the one loop every actor runs.
//!
//! - [`Caches`]: kube-runtime reflector stores, each fed by a watcher in its own task; every
//!   applied event wakes the actor. The tasks end when the `Caches` is dropped.
//! - [`Actor`] and [`drive`]: wait for the caches' first lists, then pass (observe the caches,
//!   decide purely, apply) on every change — after the actor's reaction lag, the changes that came
//!   in meanwhile swallowed — or at the deadline the last pass asked for, until [`Shutdown`].
//! - [`Expect`]: controller-runtime's expectations, generalised: the writes a pass made that the
//!   caches do not show yet; the next pass waits for them, so it never decides on a cache that
//!   trails the actor's own writes (a ReplicaSet creating its pods twice).
//! - Events on the sim clock ([`Recorder`]) and a RESTMapper over the sim's discovery.

use std::collections::BTreeSet;
use std::fmt::{Debug, Display};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResourceList, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::Clock;
use crate::world::fanout::Fanout;
use crate::world::informers;

/// How long a pass waits for the caches to show its writes before it trusts them again
/// (controller-runtime's `ExpectationsTimeout` is 5 min; the sim's watches deliver at once, so a
/// miss means a dropped watch that is re-listing).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(30);

/// How soon a failed pass is retried.
pub const RETRY: Duration = Duration::from_secs(1);

/// When an actor stops: a future every actor task holds a clone of. Built from any future
/// ([`Shutdown::on`]), a `watch::Receiver<bool>` (ends when it turns true or its sender is
/// dropped), or [`Shutdown::never`].
#[derive(Clone)]
pub struct Shutdown(Shared<BoxFuture<'static, ()>>);

impl Shutdown {
    /// Ends when `signal` completes.
    pub fn on(signal: impl Future<Output = ()> + Send + 'static) -> Self {
        Shutdown(signal.boxed().shared())
    }

    /// Never ends (the actor runs until its task is aborted or the runtime ends).
    pub fn never() -> Self {
        Shutdown::on(std::future::pending())
    }

    /// Whether it has ended.
    pub fn is_done(&self) -> bool {
        self.0.clone().now_or_never().is_some()
    }

    /// Waits until it ends.
    pub async fn wait(&self) {
        self.0.clone().await
    }
}

impl From<tokio::sync::watch::Receiver<bool>> for Shutdown {
    fn from(mut rx: tokio::sync::watch::Receiver<bool>) -> Self {
        Shutdown::on(async move {
            let _ = rx.wait_for(|stop| *stop).await;
        })
    }
}

impl From<std::future::Pending<()>> for Shutdown {
    fn from(_: std::future::Pending<()>) -> Self {
        Shutdown::never()
    }
}

/// Reflector stores that wake their actor when any of them changed.
#[derive(Default)]
pub struct Caches {
    notify: Arc<Notify>,
    tasks: Vec<JoinHandle<()>>,
    stores_ready: Vec<Box<dyn Fn() -> bool + Send + Sync>>,
}

impl Caches {
    /// Waits for the next change (returns at once if one happened since the last call).
    pub async fn next(&self) {
        self.notify.notified().await;
    }

    /// Forgets a change that came in since the last call.
    pub fn swallow(&self) {
        let _ = self.notify.notified().now_or_never();
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

    /// A store of every `K` in the cluster.
    pub fn all<K>(&mut self, client: &Client) -> Store<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.reflect(Api::all(client.clone()), watcher::Config::default())
    }

    /// A store of `api`'s objects selected by `config`, kept by a watcher task.
    pub fn reflect<K>(&mut self, api: Api<K>, config: watcher::Config) -> Store<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.reflect_inner(api, Default::default(), config, None)
    }

    /// [`Caches::reflect`], also announcing every change to any number of subscribers (a cache
    /// shared by several actors), woken in the order they subscribed ([`Fanout`]).
    pub fn reflect_broadcast<K>(
        &mut self,
        api: Api<K>,
        config: watcher::Config,
    ) -> (Store<K>, Fanout)
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let broadcast = Fanout::default();
        let store = self.reflect_inner(api, Default::default(), config, Some(broadcast.clone()));
        (store, broadcast)
    }

    /// [`Caches::reflect`] for kinds with a runtime type (`DynamicObject`).
    pub fn reflect_with<K>(
        &mut self,
        api: Api<K>,
        dyntype: K::DynamicType,
        config: watcher::Config,
    ) -> Store<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        self.reflect_inner(api, dyntype, config, None)
    }

    fn reflect_inner<K>(
        &mut self,
        api: Api<K>,
        dyntype: K::DynamicType,
        config: watcher::Config,
        broadcast: Option<Fanout>,
    ) -> Store<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        if let Some(store) = self.shared(&api, &dyntype, &config, &broadcast) {
            return store;
        }
        let writer = reflector::store::Writer::new(dyntype);
        let reader = writer.as_reader();
        let notify = self.notify.clone();
        let task = tokio::spawn(async move {
            let stream = watcher(api, config).default_backoff().reflect(writer);
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Err(e) = ev {
                    tracing::debug!(error = %e, "watch error");
                }
                notify.notify_one();
                if let Some(b) = &broadcast {
                    b.notify();
                }
            }
        });
        self.tasks.push(task);
        let r = reader.clone();
        self.stores_ready.push(Box::new(move || {
            // a store is ready once its first list was applied (kube-runtime's readiness)
            r.wait_until_ready()
                .now_or_never()
                .is_some_and(|x| x.is_ok())
        }));
        reader
    }
}

impl Caches {
    /// In an [`informers::in_process`] scope: the sim's shared informer for `api` and
    /// `config`, its changes waking this actor (and `broadcast`). `None` outside one, or when
    /// the sim does not serve the kind yet (a JSON watch retries until it does).
    fn shared<K>(
        &mut self,
        api: &Api<K>,
        dyntype: &K::DynamicType,
        config: &watcher::Config,
        broadcast: &Option<Fanout>,
    ) -> Option<Store<K>>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        let sim = informers::current()?;
        let informer = informers::informer::<K>(&sim, api.resource_url(), config, dyntype.clone())
            .inspect_err(|e| tracing::debug!(path = api.resource_url(), error = %e.message, "no shared informer; watching"))
            .ok()?;
        // the informer wakes this actor itself, in the order the actors subscribed
        informer.changed.subscribe(&self.notify);
        if let Some(b) = broadcast.clone() {
            let changed = informer.changed.subscriber();
            self.tasks.push(tokio::spawn(async move {
                loop {
                    changed.notified().await;
                    b.notify();
                }
            }));
        }
        // listed before it was returned
        self.notify.notify_one();
        Some(informer.store)
    }
}

impl Drop for Caches {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn revision(rv: Option<&str>) -> Option<u64> {
    rv.and_then(|v| v.parse().ok())
}

/// Writes a pass made that the caches may not show yet (controller-runtime's expectations).
#[derive(Default)]
pub struct Expect {
    pending: Vec<Box<dyn Fn() -> bool + Send + Sync>>,
    since: Option<tokio::time::Instant>,
}

impl Expect {
    /// `written` (as the server answered the write) is in `store` at its resourceVersion or
    /// later, or gone (deleted since, or replaced by an object with another uid).
    pub fn written<K>(&mut self, store: &Store<K>, written: &K)
    where
        K: Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.written_with(store, written, Default::default());
    }

    /// [`Expect::written`] for kinds with a runtime type (`DynamicObject`).
    pub fn written_with<K>(&mut self, store: &Store<K>, written: &K, dyntype: K::DynamicType)
    where
        K: Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        let key = ObjectRef::from_obj_with(written, dyntype);
        let uid = written.meta().uid.clone();
        let rv = revision(written.meta().resource_version.as_deref());
        let store = store.clone();
        self.push(move || match store.get(&key) {
            None => true,
            Some(o) => {
                o.meta().uid != uid
                    || rv.is_none_or(|rv| {
                        revision(o.meta().resource_version.as_deref()).is_some_and(|r| r >= rv)
                    })
            }
        });
    }

    /// The object `key` with `uid` is gone from `store` or deleting.
    pub fn deleted<K>(&mut self, store: &Store<K>, key: ObjectRef<K>, uid: Option<String>)
    where
        K: Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        let store = store.clone();
        self.push(move || match store.get(&key) {
            None => true,
            Some(o) => {
                (uid.is_some() && o.meta().uid != uid) || o.meta().deletion_timestamp.is_some()
            }
        });
    }

    /// Waits until `met` holds of the caches (a write whose answer carries no resourceVersion of
    /// the object it changed, e.g. a pod's `binding`).
    pub fn until(&mut self, met: impl Fn() -> bool + Send + Sync + 'static) {
        self.push(met);
    }

    fn push(&mut self, met: impl Fn() -> bool + Send + Sync + 'static) {
        if self.pending.is_empty() {
            self.since = Some(tokio::time::Instant::now());
        }
        self.pending.push(Box::new(met));
    }

    /// Forgets what the caches now show; whether nothing is left to wait for.
    pub fn met(&mut self) -> bool {
        self.pending.retain(|met| !met());
        if self.pending.is_empty() {
            self.since = None;
        }
        self.pending.is_empty()
    }

    /// Forgets everything (the caches are trusted again).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.since = None;
    }

    fn timeout(&self) -> Option<tokio::time::Instant> {
        self.since.map(|s| s + EXPECTATIONS_TIMEOUT)
    }
}

/// What a pass returns: the cluster time to pass again at without a change.
pub type Pass<E> = Result<Option<Timestamp>, E>;

/// An actor: a pass over its caches that decides purely and applies the decision.
pub trait Actor: Send {
    type Error: Display + Send;

    /// Observes the caches, decides, applies; registers in `expect` what the caches must show
    /// before the next pass.
    fn pass(
        &mut self,
        now: Timestamp,
        expect: &mut Expect,
    ) -> impl Future<Output = Pass<Self::Error>> + Send;

    /// A wake-up besides the caches' changes (e.g. a shared cache's broadcast); never by default.
    fn woken(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// The tokio instant at which `clock` reads `at`.
pub fn instant_at(clock: &Clock, at: Timestamp) -> tokio::time::Instant {
    let wait = Duration::try_from(clock.now().duration_until(at)).unwrap_or_default();
    tokio::time::Instant::now() + wait
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs `actor` over `caches` until `shutdown`: once every cache has its first list, a pass;
/// then a pass on every change (after `lag`, the changes meanwhile swallowed), at the deadline
/// the last pass returned, or on the actor's own wake-up — each pass only once the caches show
/// the writes of the one before ([`Expect`]). A failed pass is logged and retried after
/// [`RETRY`].
pub async fn drive<A: Actor>(
    mut actor: A,
    caches: Caches,
    clock: Clock,
    lag: Duration,
    shutdown: Shutdown,
) {
    tokio::select! {
        biased;
        _ = shutdown.wait() => return,
        _ = caches.wait_ready() => {}
    }
    let mut expect = Expect::default();
    loop {
        if shutdown.is_done() {
            return;
        }
        if !expect.met() {
            tokio::select! {
                biased;
                _ = shutdown.wait() => return,
                _ = caches.next() => {}
                _ = sleep_until(expect.timeout()) => {
                    tracing::warn!(actor = std::any::type_name::<A>(), "the caches did not show the actor's writes in time; trusting them again");
                    expect.clear();
                }
            }
            continue;
        }
        let next = match actor.pass(clock.now(), &mut expect).await {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(actor = std::any::type_name::<A>(), error = %e, "pass failed; retrying");
                Some(clock.now() + RETRY)
            }
        };
        let deadline = next.map(|t| instant_at(&clock, t));
        tokio::select! {
            biased;
            _ = shutdown.wait() => return,
            _ = caches.next() => {
                if !lag.is_zero() {
                    tokio::time::sleep(lag).await;
                }
                caches.swallow();
            }
            _ = sleep_until(deadline) => {}
            _ = actor.woken() => {}
        }
    }
}

/// [`drive`] for actors whose `run` answers a `Result` (it ends only on `shutdown`).
pub async fn run<A: Actor>(
    actor: A,
    caches: Caches,
    clock: Clock,
    lag: Duration,
    shutdown: impl Into<Shutdown>,
) -> Result<(), A::Error> {
    drive(actor, caches, clock, lag, shutdown.into()).await;
    Ok(())
}

/// The object reference of `obj` (for Events).
pub fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    let meta = obj.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}

/// Writes core/v1 Events on the sim's clock, each (object, reason, message) once.
pub struct Recorder {
    client: Client,
    clock: Clock,
    component: String,
    sent: BTreeSet<(String, String, String, String)>,
}

impl Recorder {
    pub fn new(client: Client, clock: Clock, component: &str) -> Self {
        Recorder {
            client,
            clock,
            component: component.into(),
            sent: BTreeSet::new(),
        }
    }

    /// Forgets that an Event for (object uid or name, reason, message) was sent, so it can be
    /// sent again (an Event that can recur, e.g. a taint eviction cancelled then marked again).
    pub fn forget(&mut self, on: &ObjectReference, reason: &str, message: &str) {
        self.sent.remove(&(
            on.uid.clone().unwrap_or_default(),
            on.name.clone().unwrap_or_default(),
            reason.to_string(),
            message.to_string(),
        ));
    }

    pub async fn publish(&mut self, on: ObjectReference, type_: &str, reason: &str, message: &str) {
        let key = (
            on.uid.clone().unwrap_or_default(),
            on.name.clone().unwrap_or_default(),
            reason.to_string(),
            message.to_string(),
        );
        if !self.sent.insert(key) {
            return;
        }
        let ns = on.namespace.clone().unwrap_or_else(|| "default".into());
        let now = Time(self.clock.now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", on.name.clone().unwrap_or_default())),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: on,
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                ..Default::default()
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(%reason, error = %e, "sim actor: event not written");
        }
    }
}

/// The group-version's resources from discovery (`/api/v1`, `/apis/{group}/{version}`).
pub async fn resources(client: &Client, api_version: &str) -> Result<APIResourceList, kube::Error> {
    if api_version.contains('/') {
        client.list_api_group_resources(api_version).await
    } else {
        client.list_core_api_resources(api_version).await
    }
}

/// `RESTMapping`: the plural and scope of `kind` in `api_version`, or the mapper's
/// `no matches for kind "K" in version "G/V"`.
pub async fn rest_mapping(
    client: &Client,
    api_version: &str,
    kind: &str,
) -> Result<(String, bool), String> {
    let no_match = || format!("no matches for kind \"{kind}\" in version \"{api_version}\"");
    let list = resources(client, api_version)
        .await
        .map_err(|_| no_match())?;
    list.resources
        .iter()
        .find(|r| r.kind == kind && !r.name.contains('/'))
        .map(|r| (r.name.clone(), r.namespaced))
        .ok_or_else(no_match)
}
