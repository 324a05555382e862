//! One watch per kind, feeding reflector stores (and, for the gate's kinds, the controller). Every
//! watch in raygate runs on the one driver here ([`watch_store`] for readers outside [`Stores`],
//! such as the drain loop): backoff on errors, readiness per kind, re-lists tracked.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use super::watch_config;
use crate::admission::AdmissionMode;
use crate::meta;
use crate::runtime::Index;

mod selection;
use crate::slices::MANAGED_BY;
use crate::types::kueue::{
    ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload, WorkloadPriorityClass,
};
use crate::types::ray::{
    ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE, RayCluster, RayService,
};
pub use selection::Selection;
use selection::keep_own_managed_fields;
use selection::slim_pod;

/// Read handles on everything raygate watches.
#[derive(Clone)]
pub struct Stores {
    pub services: Store<RayService>,
    pub clusters: Store<RayCluster>,
    pub workloads: Store<Workload>,
    pub cluster_queues: Store<ClusterQueue>,
    pub local_queues: Store<LocalQueue>,
    pub flavors: Store<ResourceFlavor>,
    pub cohorts: Store<Cohort>,
    pub priority_classes: Store<WorkloadPriorityClass>,
    /// `None` when the server serves no core/v1 Namespaces (then no namespace has labels).
    pub namespaces: Option<Store<Namespace>>,
    /// With builtin admission, when the server serves them: the LimitRanges and RuntimeClasses
    /// whose defaults and overhead a PodSet is charged ([`crate::podsets::PodDefaults`]).
    pub limit_ranges: Option<Store<LimitRange>>,
    pub runtime_classes: Option<Store<RuntimeClass>>,
    /// The Ray pods ([`RAY_PODS`]) when the pod gate is on (`None` otherwise: raygate then reads
    /// no pods).
    pub pods: Option<Store<Pod>>,
    /// The children by their RayService's name ([`meta::owning_rayservice`]).
    pub children: Index<RayCluster>,
    /// The Workloads by the uid of the RayService owning them.
    pub slices: Index<Workload>,
    /// The Ray pods by their `ray.io/cluster`.
    pub pods_by_cluster: Option<Index<Pod>>,
    pub ready: Arc<Readiness>,
}

/// [`Stores::children`]'s key: the RayService a child belongs to.
fn service_of(c: &RayCluster) -> Option<String> {
    meta::owning_rayservice(&c.metadata).map(str::to_string)
}

/// [`Stores::slices`]' key: the uid of the RayService owning a Workload.
fn owner_uid(w: &Workload) -> Option<String> {
    w.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "RayService")
        .map(|o| o.uid.clone())
}

/// [`Stores::pods_by_cluster`]'s key: a pod's `ray.io/cluster`.
fn cluster_of(p: &Pod) -> Option<String> {
    meta::label(&p.metadata, "ray.io/cluster").map(str::to_string)
}

/// The label selector of the Ray pods raygate watches with the pod gate on: KubeRay's heads,
/// workers, and the Redis cleanup Job's pod KubeRay v1.7 builds from the head (with its
/// `raygate.io/quota` gate and its `ray.io/group=headgroup`) once a GCS fault-tolerant cluster's
/// head is gone: it is ungated against the head's grant, which charges it.
pub const RAY_PODS: &str = "ray.io/node-type in (head,worker,redis-cleanup)";

impl Stores {
    /// Waits until every watch has delivered its first complete list.
    pub async fn wait_until_ready(&self) -> bool {
        self.ready.wait().await;
        true
    }

    /// The Workloads (slices) a RayService owns, from the cache: same namespace, an owner
    /// reference to the service's uid.
    pub fn slices_of(&self, namespace: &str, service_uid: &str) -> Vec<Workload> {
        self.slices
            .objects(&self.workloads, namespace, service_uid)
            .iter()
            .map(|w| w.as_ref().clone())
            .collect()
    }

    /// A RayService's children from the cache, in [`crate::podsets::children_of`]'s order.
    pub fn children_of(&self, service: &RayService) -> Vec<Arc<RayCluster>> {
        let ns = service.metadata.namespace.as_deref().unwrap_or_default();
        let name = service.metadata.name.as_deref().unwrap_or_default();
        let mine = self.children.objects(&self.clusters, ns, name);
        let order: Vec<&RayCluster> =
            crate::podsets::children_of(service, mine.iter().map(|c| c.as_ref()));
        order
            .into_iter()
            .filter_map(|c| mine.iter().find(|m| std::ptr::eq(m.as_ref(), c)).cloned())
            .collect()
    }

    /// Whether a RayCluster of this name exists in `namespace` (among the children watched).
    pub fn cluster_exists(&self, namespace: &str, name: &str) -> bool {
        self.clusters
            .get(&ObjectRef::new(name).within(namespace))
            .is_some()
    }
}

/// Which watches have delivered their first complete list.
///
/// Tracked from each driver's own `InitDone` rather than `Store::wait_until_ready`: with the
/// shared stores of kube-runtime 5 (`store_shared` + `reflect_shared`) that future never resolved
/// in our tests, though the stores filled; the cause was not pinned down.
#[derive(Default)]
pub struct Readiness {
    kinds: std::sync::Mutex<std::collections::BTreeMap<&'static str, bool>>,
    changed: Notify,
}

impl Readiness {
    fn expect(&self, kind: &'static str) {
        if let Ok(mut k) = self.kinds.lock() {
            k.entry(kind).or_insert(false);
        }
    }

    fn mark(&self, kind: &'static str) {
        if let Ok(mut k) = self.kinds.lock()
            && k.insert(kind, true) != Some(true)
        {
            tracing::debug!(kind, "cache synced");
            self.changed.notify_waiters();
        }
    }

    /// A watch restarted its list (`Init`): its store is about to be replaced, so decisions wait
    /// for the new list's `InitDone`.
    fn unmark(&self, kind: &'static str) {
        if let Ok(mut k) = self.kinds.lock()
            && k.insert(kind, false) == Some(true)
        {
            tracing::info!(kind, "watch re-listing; decisions wait for the new list");
            self.changed.notify_waiters();
        }
    }

    /// Waits until no watch is pending (every kind's latest list is complete).
    pub async fn wait(&self) {
        loop {
            let notified = self.changed.notified();
            let pending: Vec<&'static str> = self.pending();
            if pending.is_empty() {
                return;
            }
            tracing::debug!(?pending, "waiting for caches");
            notified.await;
        }
    }

    /// Kinds whose watch has not delivered a complete list (since its last (re)start).
    pub fn pending(&self) -> Vec<&'static str> {
        self.kinds
            .lock()
            .map(|k| k.iter().filter(|(_, r)| !**r).map(|(n, _)| *n).collect())
            .unwrap_or_default()
    }
}

/// Streams the controller consumes and the tasks that drive the watches.
pub struct Streams {
    pub services: BoxStream<'static, Arc<RayService>>,
    pub clusters: BoxStream<'static, Arc<RayCluster>>,
    pub workloads: BoxStream<'static, Arc<Workload>>,
    /// RayServices to reconcile because one of their children or Workloads was deleted.
    pub deleted: futures::channel::mpsc::UnboundedReceiver<ObjectRef<RayService>>,
    /// Notified on any change the admission loop cares about.
    pub admission_trigger: Arc<Notify>,
    /// Notified on every event of the Ray pods' watch (never without the pod gate).
    pub pods_changed: Arc<Notify>,
    /// The watches' tasks, named (`watch RayCluster`) for the supervisor.
    pub drivers: Vec<Driver>,
}

const BUFFER: usize = 1024;

/// Where a watch's objects go besides its store.
enum Feed {
    /// The store only (the admission loop and the gate read it).
    Store,
    /// The store and a stream of changed objects for the gate's `Controller` (a shared store).
    Controller,
}

/// One watch: its store, the controller's stream (for [`Feed::Controller`]) and the task that
/// drives it, named for the supervisor.
struct Watch<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    stream: BoxStream<'static, Arc<K>>,
    driver: Driver,
}

/// Who hears of a watch's events.
#[derive(Clone)]
pub enum Changed {
    /// One waiter: a waiter that comes after the event finds it still there.
    One(Arc<Notify>),
    /// Every receiver of a counter bumped at each event (several loops reading one store).
    Every(Arc<tokio::sync::watch::Sender<u64>>),
}

impl From<Arc<Notify>> for Changed {
    fn from(n: Arc<Notify>) -> Self {
        Changed::One(n)
    }
}

impl Changed {
    fn signal(&self) {
        match self {
            Changed::One(n) => n.notify_one(),
            Changed::Every(tx) => tx.send_modify(|c| *c = c.wrapping_add(1)),
        }
    }
}

/// A kind raygate watches (the bounds of kube's watcher and reflector store).
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A watch's driving task and the name the supervisor reports it by.
pub type Driver = (String, BoxFuture<'static, ()>);

/// The one watcher driver: lists and watches `api`, keeps its store, marks its kind ready on each
/// complete list (pending again on a re-list), notifies `notify` on every event and passes
/// deletions to `on_delete` (kube's shared dispatcher forwards applies only).
fn watch<K: Watched>(
    api: Api<K>,
    Selection {
        config,
        index,
        slim,
    }: Selection<K>,
    feed: Feed,
    notify: Option<Changed>,
    ready: Arc<Readiness>,
    on_delete: impl Fn(&K) + Send + 'static,
) -> Watch<K> {
    let label: &'static str = match K::kind(&()) {
        std::borrow::Cow::Borrowed(kind) => kind,
        // no typed kind has an owned name; should one, it is leaked once per watch started
        std::borrow::Cow::Owned(kind) => Box::leak(kind.into_boxed_str()),
    };
    ready.expect(label);
    // Field ownership is often the larger part of an object, and raygate reads only its own
    // (whether a field is one it wrote): every other manager's entries are dropped before the
    // store, as controller-runtime's `cache.TransformStripManagedFields` drops them all.
    let events = watcher(api, config)
        .default_backoff()
        .modify(move |o| {
            keep_own_managed_fields(o.meta_mut());
            slim(o);
        })
        // the index first, so a reader woken by the store's change finds it current
        .inspect(move |ev| {
            if let (Some(index), Ok(ev)) = (&index, ev) {
                index.apply(ev);
            }
        });
    let (store, stream, events) = match feed {
        Feed::Controller => {
            let (reader, writer) = reflector::store_shared(BUFFER);
            // infallible: a shared writer always has a subscriber handle
            let subscriber = writer
                .subscribe()
                .map(StreamExt::boxed)
                .unwrap_or_else(|| futures::stream::empty().boxed());
            (reader, subscriber, events.reflect_shared(writer).boxed())
        }
        Feed::Store => {
            let (reader, writer) = reflector::store();
            (
                reader,
                futures::stream::empty().boxed(),
                events.reflect(writer).boxed(),
            )
        }
    };
    let driver = events
        .for_each(move |ev| {
            if let Some(n) = &notify {
                n.signal();
            }
            match &ev {
                Ok(watcher::Event::Init) => ready.unmark(label),
                Ok(watcher::Event::InitDone) => ready.mark(label),
                Ok(watcher::Event::Delete(obj)) => on_delete(obj),
                _ => {}
            }
            if let Err(e) = ev {
                tracing::warn!(kind = label, error = %e, "watch error (retrying)");
            }
            futures::future::ready(())
        })
        .boxed();
    Watch {
        store,
        stream,
        driver: (format!("watch {label}"), driver),
    }
}

/// A store-only watch on the one driver, for a reader outside [`Stores`] (the drain loop): its
/// store and its driving task (named `watch <Kind>`), to be spawned by the caller. The kind is
/// tracked in `ready` (pending until its first complete list, and again while it re-lists);
/// `changed` hears of every event.
pub fn watch_store<K: Watched>(
    api: Api<K>,
    config: watcher::Config,
    ready: Arc<Readiness>,
    changed: impl Into<Changed>,
) -> (Store<K>, Driver) {
    watch_store_indexed(api, Selection::of(config), ready, changed)
}

/// [`watch_store`] with an index kept from the same events.
fn watch_store_indexed<K: Watched>(
    api: Api<K>,
    config: Selection<K>,
    ready: Arc<Readiness>,
    changed: impl Into<Changed>,
) -> (Store<K>, Driver) {
    let w = watch(
        api,
        config,
        Feed::Store,
        Some(changed.into()),
        ready,
        |_: &K| {},
    );
    (w.store, w.driver)
}

/// Whether the server serves `K` to this client (the test API server serves no core/v1 kind;
/// `without` says what admission does without it, for the log line).
async fn serves<K: Watched>(client: &Client, without: &str) -> bool {
    match Api::<K>::all(client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            let kind = K::kind(&());
            tracing::info!(error = %e, "{kind} objects are not readable; {without}");
            false
        }
    }
}

/// [`queue_input`] of a kind the server may not serve (`None` then), its driver added to
/// `drivers`.
async fn optional_input<K: Watched>(
    client: &Client,
    (trigger, ready): (&Arc<Notify>, &Arc<Readiness>),
    drivers: &mut Vec<Driver>,
    without: &str,
) -> Option<Store<K>> {
    if !serves::<K>(client, without).await {
        return None;
    }
    let (store, driver) = queue_input::<K>(client, trigger, ready);
    drivers.push(driver);
    Some(store)
}

/// The RayService a child RayCluster seen on the children watch belongs to
/// ([`meta::owning_rayservice`]). A child that leaves the watch's selection arrives as DELETED with
/// its previous content (the API server's watch cache and etcd watcher both send the old object),
/// so its labels are still the ones that matched.
pub(crate) fn rayservice_of(c: &RayCluster) -> Option<ObjectRef<RayService>> {
    let ns = c.metadata.namespace.as_deref()?;
    meta::owning_rayservice(&c.metadata).map(|name| ObjectRef::new(name).within(ns))
}

/// A store-only watch of `K` whose every change triggers an admission cycle.
fn queue_input<K: Watched>(
    client: &Client,
    trigger: &Arc<Notify>,
    ready: &Arc<Readiness>,
) -> (Store<K>, Driver) {
    watch_store(
        Api::<K>::all(client.clone()),
        watch_config(),
        ready.clone(),
        trigger.clone(),
    )
}

type Deleted = futures::channel::mpsc::UnboundedSender<ObjectRef<RayService>>;

/// On a child RayCluster's deletion: its RayService, to `tx`.
fn child_owner(tx: Deleted) -> impl Fn(&RayCluster) + Send + 'static {
    move |c: &RayCluster| {
        if let Some(owner) = rayservice_of(c) {
            let _ = tx.unbounded_send(owner);
        }
    }
}

/// On a Workload's deletion: the RayServices owning it, to `tx`.
fn workload_owner(tx: Deleted) -> impl Fn(&Workload) + Send + 'static {
    move |w: &Workload| {
        for o in w
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.kind == "RayService")
        {
            if let Some(ns) = w.metadata.namespace.as_deref() {
                let _ = tx.unbounded_send(ObjectRef::new(&o.name).within(ns));
            }
        }
    }
}

/// The RayClusters RayServices made (the gate's children); a deleted one reports its service.
fn children_watch(
    client: &Client,
    ready: &Arc<Readiness>,
    deleted: Deleted,
    index: Index<RayCluster>,
) -> Watch<RayCluster> {
    let children = watch_config().labels(&format!(
        "{ORIGINATED_FROM_CRD_LABEL}={ORIGINATED_FROM_RAYSERVICE}"
    ));
    watch(
        Api::<RayCluster>::all(client.clone()),
        Selection::of(children).indexed(index),
        Feed::Controller,
        None,
        ready.clone(),
        child_owner(deleted),
    )
}

/// The Workloads: each change triggers an admission cycle, a deleted one reports its services.
fn workloads_watch(
    client: &Client,
    mode: AdmissionMode,
    trigger: &Arc<Notify>,
    ready: &Arc<Readiness>,
    deleted: Deleted,
    index: Index<Workload>,
) -> Watch<Workload> {
    // Built-in admission weighs every Workload in a ClusterQueue; with Kueue raygate reads its own.
    let workload_cfg = match mode {
        AdmissionMode::Builtin => watch_config(),
        AdmissionMode::Kueue => {
            watch_config().labels(&format!("app.kubernetes.io/managed-by={MANAGED_BY}"))
        }
    };
    watch(
        Api::<Workload>::all(client.clone()),
        Selection::of(workload_cfg).indexed(index),
        Feed::Controller,
        Some(trigger.clone().into()),
        ready.clone(),
        workload_owner(deleted),
    )
}

/// The Ray pods ([`RAY_PODS`]), indexed by cluster and cached slim ([`slim_pod`]); the watch's
/// driver joins `drivers`.
fn pods_watch(
    client: &Client,
    ready: &Arc<Readiness>,
    changed: &Arc<Notify>,
    drivers: &mut Vec<Driver>,
) -> (Store<Pod>, Index<Pod>) {
    let index = Index::new(cluster_of);
    let selection = Selection {
        slim: slim_pod,
        ..Selection::of(watch_config().labels(RAY_PODS)).indexed(index.clone())
    };
    let (store, driver) = watch_store_indexed(
        Api::<Pod>::all(client.clone()),
        selection,
        ready.clone(),
        changed.clone(),
    );
    drivers.push(driver);
    (store, index)
}

/// Starts every watch (the Ray pods' too with `pod_gate`).
pub async fn start(client: Client, mode: AdmissionMode, pod_gate: bool) -> (Stores, Streams) {
    let trigger = Arc::new(Notify::new());
    let pods_changed = Arc::new(Notify::new());
    let ready = Arc::new(Readiness::default());
    let (deleted_tx, deleted) = futures::channel::mpsc::unbounded::<ObjectRef<RayService>>();
    let services = watch(
        Api::<RayService>::all(client.clone()),
        Selection::of(watch_config()),
        Feed::Controller,
        None,
        ready.clone(),
        |_: &RayService| {},
    );
    let children = Index::new(service_of);
    let slices = Index::new(owner_uid);
    let clusters = children_watch(&client, &ready, deleted_tx.clone(), children.clone());
    let workloads = workloads_watch(&client, mode, &trigger, &ready, deleted_tx, slices.clone());
    // the admission loop's inputs: stores only, each change triggers a cycle
    let (cluster_queues, cq_driver) = queue_input::<ClusterQueue>(&client, &trigger, &ready);
    let (local_queues, lq_driver) = queue_input::<LocalQueue>(&client, &trigger, &ready);
    let (flavors, flavors_driver) = queue_input::<ResourceFlavor>(&client, &trigger, &ready);
    let (cohorts, cohorts_driver) = queue_input::<Cohort>(&client, &trigger, &ready);
    let (priority_classes, pc_driver) =
        queue_input::<WorkloadPriorityClass>(&client, &trigger, &ready);
    let mut drivers = vec![
        services.driver,
        clusters.driver,
        workloads.driver,
        cq_driver,
        lq_driver,
        flavors_driver,
        cohorts_driver,
        pc_driver,
    ];
    let inputs = (&trigger, &ready);
    let without = "ClusterQueue namespaceSelectors see no labels";
    let namespaces = optional_input::<Namespace>(&client, inputs, &mut drivers, without).await;
    let (limit_ranges, runtime_classes) = if mode == AdmissionMode::Builtin {
        let without = "PodSets are charged without LimitRange defaults";
        let lr = optional_input::<LimitRange>(&client, inputs, &mut drivers, without).await;
        let without = "PodSets are charged without RuntimeClass overhead";
        let rc = optional_input::<RuntimeClass>(&client, inputs, &mut drivers, without).await;
        (lr, rc)
    } else {
        (None, None)
    };
    let (pods, pods_by_cluster) = pod_gate
        .then(|| pods_watch(&client, &ready, &pods_changed, &mut drivers))
        .unzip();
    let stores = Stores {
        services: services.store,
        clusters: clusters.store,
        workloads: workloads.store,
        cluster_queues,
        local_queues,
        flavors,
        cohorts,
        priority_classes,
        namespaces,
        limit_ranges,
        runtime_classes,
        pods,
        children,
        slices,
        pods_by_cluster,
        ready,
    };
    let streams = Streams {
        services: services.stream,
        clusters: clusters.stream,
        workloads: workloads.stream,
        deleted,
        admission_trigger: trigger,
        pods_changed,
        drivers,
    };
    (stores, streams)
}

#[cfg(test)]
mod tests {
    use super::Readiness;

    #[test]
    fn a_relist_makes_the_kind_pending_until_its_new_list_is_complete() {
        let r = Readiness::default();
        r.expect("RayCluster");
        r.expect("Workload");
        assert_eq!(r.pending(), vec!["RayCluster", "Workload"]);
        r.mark("RayCluster");
        r.mark("Workload");
        assert!(r.pending().is_empty());
        // the watch restarted (410 Gone, a lost connection): its store is being rebuilt
        r.unmark("RayCluster");
        assert_eq!(r.pending(), vec!["RayCluster"]);
        r.mark("RayCluster");
        assert!(r.pending().is_empty());
    }

    #[test]
    fn a_child_maps_to_the_rayservice_named_by_both_kuberay_labels_in_its_namespace() {
        use super::{ObjectRef, rayservice_of};
        use crate::types::ray::ORIGINATED_FROM_CR_NAME_LABEL;
        use raygate_testing::{MetaBuilder, RayClusterBuilder, ray_cluster};
        let child = ray_cluster("svc-x7k2p")
            .in_namespace("serving")
            .child_of("svc");
        assert_eq!(
            rayservice_of(&child),
            Some(ObjectRef::new("svc").within("serving"))
        );
        // a RayCluster not created for a RayService (only the name label) has no owner here
        let other = ray_cluster("c").label(ORIGINATED_FROM_CR_NAME_LABEL, "svc");
        assert_eq!(rayservice_of(&other), None);
    }

    /// The server keeps field ownership on every object (the sim does, as the API server does);
    /// the stores keep raygate's own managers' entries only.
    #[tokio::test(start_paused = true)]
    async fn the_stores_keep_only_raygate_s_own_managed_fields() {
        use super::{Api, Arc, Notify, ObjectRef, watch_config};
        use crate::types::kueue::ResourceFlavor;
        use kube::api::{Patch, PatchParams};
        let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
        let sim = raygate_sim::Sim::builder().crds_dir(crds).unwrap().build();
        let api = Api::<ResourceFlavor>::all(sim.client());
        let apply = |name: &str, manager: &str, labels: serde_json::Value| {
            let api = api.clone();
            let body = serde_json::json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                "metadata": {"name": name, "labels": labels}
            });
            let (name, manager) = (name.to_string(), manager.to_string());
            async move {
                api.patch(&name, &PatchParams::apply(&manager), &Patch::Apply(&body))
                    .await
                    .unwrap()
            }
        };
        let managers = |f: &ResourceFlavor| -> Vec<String> {
            f.metadata
                .managed_fields
                .iter()
                .flatten()
                .filter_map(|m| m.manager.clone())
                .collect()
        };
        apply("f", "t", serde_json::json!({"a": "1"})).await;
        let on_server = apply("f", "raygate-x", serde_json::json!({"b": "2"})).await;
        let mut both = managers(&on_server);
        both.sort();
        assert_eq!(both, ["raygate-x", "t"]);
        apply("g", "t", serde_json::json!({"a": "1"})).await;
        let ready = Arc::new(Readiness::default());
        let (store, (_, driver)) =
            super::watch_store(api, watch_config(), ready.clone(), Arc::new(Notify::new()));
        tokio::spawn(driver);
        store.wait_until_ready().await.unwrap();
        let cached = store.get(&ObjectRef::new("f")).unwrap();
        assert_eq!(managers(&cached), ["raygate-x"]);
        // with no entry of raygate's, none at all
        let g = store.get(&ObjectRef::new("g")).unwrap();
        assert_eq!(g.metadata.managed_fields, None);
    }
}
