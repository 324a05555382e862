//! One watch per kind, feeding reflector stores (and, for the gate's kinds, the controller).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use super::{AdmissionMode, watch_config};
use crate::slices::MANAGED_BY;
use crate::types::kueue::{
    ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload, WorkloadPriorityClass,
};
use crate::types::ray::{
    ORIGINATED_FROM_CR_NAME_LABEL, ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE,
    RayCluster, RayService,
};

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
    pub ready: Arc<Readiness>,
}

impl Stores {
    /// Waits until every watch has delivered its first complete list.
    pub async fn wait_until_ready(&self) -> bool {
        loop {
            let notified = self.ready.changed.notified();
            let pending: Vec<&'static str> = self.ready.pending();
            if pending.is_empty() {
                return true;
            }
            tracing::debug!(?pending, "waiting for caches");
            notified.await;
        }
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
    pub drivers: Vec<BoxFuture<'static, ()>>,
}

const BUFFER: usize = 1024;

fn shared<K>(
    api: Api<K>,
    config: watcher::Config,
    notify: Option<Arc<Notify>>,
    ready: Arc<Readiness>,
    on_delete: impl Fn(&K) + Send + 'static,
) -> (Store<K>, BoxStream<'static, Arc<K>>, BoxFuture<'static, ()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store_shared(BUFFER);
    // infallible: a shared writer always has a subscriber handle
    let subscriber = writer
        .subscribe()
        .map(StreamExt::boxed)
        .unwrap_or_else(|| futures::stream::empty().boxed());
    let kind = K::kind(&()).to_string();
    let label: &'static str = Box::leak(kind.clone().into_boxed_str());
    ready.expect(label);
    let driver = watcher(api, config)
        .default_backoff()
        .reflect_shared(writer)
        .for_each(move |ev| {
            if let Some(n) = &notify {
                n.notify_one();
            }
            match &ev {
                Ok(watcher::Event::Init) => ready.unmark(label),
                Ok(watcher::Event::InitDone) => ready.mark(label),
                _ => {}
            }
            // kube's shared dispatcher forwards applies only: deletions are passed on here
            if let Ok(watcher::Event::Delete(obj)) = &ev {
                on_delete(obj);
            }
            if let Err(e) = ev {
                tracing::warn!(kind = %kind, error = %e, "watch error (retrying)");
            }
            futures::future::ready(())
        })
        .boxed();
    (reader, subscriber, driver)
}

fn plain<K>(
    api: Api<K>,
    notify: Arc<Notify>,
    ready: Arc<Readiness>,
) -> (Store<K>, BoxFuture<'static, ()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&()).to_string();
    let label: &'static str = Box::leak(kind.clone().into_boxed_str());
    ready.expect(label);
    let driver = watcher(api, watch_config())
        .default_backoff()
        .reflect(writer)
        .for_each(move |ev| {
            notify.notify_one();
            match &ev {
                Ok(watcher::Event::Init) => ready.unmark(label),
                Ok(watcher::Event::InitDone) => ready.mark(label),
                _ => {}
            }
            if let Err(e) = ev {
                tracing::warn!(kind = %kind, error = %e, "watch error (retrying)");
            }
            futures::future::ready(())
        })
        .boxed();
    (reader, driver)
}

/// Whether the server serves core/v1 Namespaces (the test API server does not).
async fn serves_namespaces(client: &Client) -> bool {
    match Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::info!(error = %e, "namespaces are not readable; ClusterQueue namespaceSelectors see no labels");
            false
        }
    }
}

/// Starts every watch.
pub async fn start(client: Client, mode: AdmissionMode) -> (Stores, Streams) {
    let trigger = Arc::new(Notify::new());
    let ready = Arc::new(Readiness::default());
    let (deleted_tx, deleted) = futures::channel::mpsc::unbounded::<ObjectRef<RayService>>();
    let child_owner = {
        let tx = deleted_tx.clone();
        move |c: &RayCluster| {
            let owner = c
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ORIGINATED_FROM_CR_NAME_LABEL));
            if let (Some(owner), Some(ns)) = (owner, c.metadata.namespace.as_deref()) {
                let _ = tx.unbounded_send(ObjectRef::new(owner).within(ns));
            }
        }
    };
    let workload_owner = move |w: &Workload| {
        for o in w
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.kind == "RayService")
        {
            if let Some(ns) = w.metadata.namespace.as_deref() {
                let _ = deleted_tx.unbounded_send(ObjectRef::new(&o.name).within(ns));
            }
        }
    };
    let (services, services_stream, d1) = shared(
        Api::<RayService>::all(client.clone()),
        watch_config(),
        None,
        ready.clone(),
        |_: &RayService| {},
    );
    let children = watch_config().labels(&format!(
        "{ORIGINATED_FROM_CRD_LABEL}={ORIGINATED_FROM_RAYSERVICE}"
    ));
    let (clusters, clusters_stream, d2) = shared(
        Api::<RayCluster>::all(client.clone()),
        children,
        None,
        ready.clone(),
        child_owner,
    );
    // Built-in admission weighs every Workload in a ClusterQueue; with Kueue raygate reads its own.
    let workload_cfg = match mode {
        AdmissionMode::Builtin => watch_config(),
        AdmissionMode::Kueue => {
            watch_config().labels(&format!("app.kubernetes.io/managed-by={MANAGED_BY}"))
        }
    };
    let (workloads, workloads_stream, d3) = shared(
        Api::<Workload>::all(client.clone()),
        workload_cfg,
        Some(trigger.clone()),
        ready.clone(),
        workload_owner,
    );
    let (cluster_queues, d4) = plain(
        Api::<ClusterQueue>::all(client.clone()),
        trigger.clone(),
        ready.clone(),
    );
    let (local_queues, d5) = plain(
        Api::<LocalQueue>::all(client.clone()),
        trigger.clone(),
        ready.clone(),
    );
    let (flavors, d6) = plain(
        Api::<ResourceFlavor>::all(client.clone()),
        trigger.clone(),
        ready.clone(),
    );
    let (cohorts, d7) = plain(
        Api::<Cohort>::all(client.clone()),
        trigger.clone(),
        ready.clone(),
    );
    let (priority_classes, d8) = plain(
        Api::<WorkloadPriorityClass>::all(client.clone()),
        trigger.clone(),
        ready.clone(),
    );
    let mut drivers = vec![d1, d2, d3, d4, d5, d6, d7, d8];
    let namespaces = if serves_namespaces(&client).await {
        let (ns, d9) = plain(
            Api::<Namespace>::all(client.clone()),
            trigger.clone(),
            ready.clone(),
        );
        drivers.push(d9);
        Some(ns)
    } else {
        None
    };
    let stores = Stores {
        services,
        clusters,
        workloads,
        cluster_queues,
        local_queues,
        flavors,
        cohorts,
        priority_classes,
        namespaces,
        ready,
    };
    let streams = Streams {
        services: services_stream,
        clusters: clusters_stream,
        workloads: workloads_stream,
        deleted,
        admission_trigger: trigger,
        drivers: drivers.into_iter().map(|d| d.boxed()).collect(),
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
}
