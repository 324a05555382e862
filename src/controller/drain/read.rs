//! What the drain reads (IO): once to plan, every Node, Pod, PodDisruptionBudget and DaemonSet
//! in pages ([`drain_objects`], also `raygate drain plan|check`'s read); while it runs, the same
//! kinds through reflector stores ([`Watches`]), so a running drain never lists the cluster again.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::watch;

use super::DrainRunError;
use crate::controller::stores::{Changed, Driver, Readiness, watch_store};
use crate::drain::Cluster;
use crate::drain::engine::ServiceView;
use crate::runtime::{SortedCopies, SortedState};
use crate::types::kueue::Workload;
use crate::types::ray::{RayCluster, RayService};

/// The gate's stores of RayServices, their clusters and their slices, read by the drain to move
/// a serving RayService off a domain before draining it.
#[derive(Clone)]
pub struct ServiceStores {
    pub services: Store<RayService>,
    pub clusters: Store<RayCluster>,
    pub workloads: Store<Workload>,
}

/// Where a running drain reads the RayServices it moves off a domain.
pub enum Services {
    /// The controller's stores (the gate's).
    Shared(ServiceStores),
    /// Watches of its own, where the server serves RayServices (`drain run --local`).
    Own,
    /// None: no RayService is moved.
    Off,
}

/// A read of the cluster that failed, naming what was read.
#[derive(Debug, thiserror::Error)]
#[error("reading {what}: {source}")]
pub struct ReadError {
    pub what: String,
    #[source]
    pub source: kube::Error,
}

/// What a drain plan or preflight reads: every Node, Pod, PodDisruptionBudget and DaemonSet.
#[derive(Clone, Debug, Default)]
pub struct DrainObjects {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub pdbs: Vec<PodDisruptionBudget>,
    /// `None` when the DaemonSets could not be listed (not served, or not permitted): every
    /// DaemonSet a pod names is then taken to exist.
    pub daemon_sets: Option<Vec<DaemonSet>>,
}

impl DrainObjects {
    /// The objects as the pure plan reads them (with the DaemonSets, a pod of a deleted one is
    /// found, as kubectl drain finds it).
    pub fn cluster(&self) -> Cluster<'_> {
        Cluster {
            daemon_sets: self.daemon_sets.as_deref(),
            ..Cluster::new(&self.nodes, &self.pods, &self.pdbs)
        }
    }
}

/// Every object of a kind, in pages of 500 (as kubectl lists), so a large cluster is never
/// asked for one 100,000-object response.
async fn list_all<K>(api: Api<K>, what: &str) -> Result<Vec<K>, ReadError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.map_err(|source| ReadError {
            what: what.to_string(),
            source,
        })?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// Reads what a drain plans on, cluster-wide.
pub async fn drain_objects(client: &Client) -> Result<DrainObjects, ReadError> {
    Ok(DrainObjects {
        nodes: list_all(Api::all(client.clone()), "Nodes").await?,
        pods: list_all(Api::all(client.clone()), "Pods").await?,
        pdbs: list_all(Api::all(client.clone()), "PodDisruptionBudgets").await?,
        daemon_sets: match list_all(Api::all(client.clone()), "DaemonSets").await {
            Ok(sets) => Some(sets),
            Err(ReadError {
                source: kube::Error::Api(status),
                ..
            }) if status.code == 403 || status.code == 404 => None,
            Err(e) => return Err(e),
        },
    })
}

/// The drain loop's stores: Nodes, Pods, PodDisruptionBudgets and, where they can be listed,
/// DaemonSets (`kubectl drain`'s `daemonSetFilter` GETs a pod's DaemonSet: a pod whose
/// DaemonSet is gone is evicted with --force and stops the drain without it). A clone reads the
/// same stores: every NodeRollout the leader runs reads one set.
#[derive(Clone)]
pub struct DrainStores {
    nodes: Store<Node>,
    pods: Store<Pod>,
    pdbs: Store<PodDisruptionBudget>,
    daemon_sets: Option<Store<DaemonSet>>,
    /// `None`: no RayService is moved (`drain run --local`, a server without KubeRay's CRDs).
    services: Option<ServiceStores>,
    pub(super) ready: Arc<Readiness>,
    /// Bumped at every event of every watch.
    pub(super) changes: watch::Receiver<u64>,
}

impl DrainStores {
    /// The stores' objects in (namespace, name) order, copied (the plan's one read; the loop's
    /// reads go through [`Copies`]).
    pub(super) fn snapshot(&self) -> DrainObjects {
        DrainObjects {
            nodes: snapshot(&self.nodes),
            pods: snapshot(&self.pods),
            pdbs: snapshot(&self.pdbs),
            daemon_sets: self.daemon_sets.as_ref().map(snapshot),
        }
    }
}

/// The watches behind [`DrainStores`]: dropped, every watch stops.
pub struct Watches {
    pub stores: DrainStores,
    drivers: tokio::task::JoinSet<()>,
    kinds: HashMap<tokio::task::Id, &'static str>,
}

impl Watches {
    /// Starts the watches through the controller's one watch driver (backoff, readiness per
    /// kind, re-lists tracked); shared `services` are read as they are (the gate's).
    pub async fn start(client: &Client, services: Services) -> Self {
        let (tx, changes) = watch::channel(0u64);
        let c = Changed::Every(Arc::new(tx));
        let ready = Arc::new(Readiness::default());
        let r = ready.clone();
        let config = watcher::Config::default;
        let (nodes, node_driver) =
            watch_store(Api::all(client.clone()), config(), r.clone(), c.clone());
        let (pods, pod_driver) =
            watch_store(Api::all(client.clone()), config(), r.clone(), c.clone());
        let (pdbs, pdb_driver) =
            watch_store(Api::all(client.clone()), config(), r.clone(), c.clone());
        let (daemon_sets, ds_driver) = match daemon_sets_readable(client).await {
            true => {
                let (store, driver) =
                    watch_store(Api::all(client.clone()), config(), r.clone(), c.clone());
                (Some(store), Some(("DaemonSet", driver)))
            }
            false => (None, None),
        };
        let (services, service_drivers) = match services {
            Services::Shared(s) => (Some(s), Vec::new()),
            Services::Own => match own_service_stores(client, &r, &c).await {
                Some((s, drivers)) => (Some(s), drivers),
                None => (None, Vec::new()),
            },
            Services::Off => (None, Vec::new()),
        };
        let mut drivers = tokio::task::JoinSet::new();
        let mut kinds = HashMap::new();
        for (kind, (_, driver)) in [
            ("Node", node_driver),
            ("Pod", pod_driver),
            ("PodDisruptionBudget", pdb_driver),
        ]
        .into_iter()
        .chain(ds_driver)
        .chain(service_drivers)
        {
            kinds.insert(drivers.spawn(driver).id(), kind);
        }
        let stores = DrainStores {
            nodes,
            pods,
            pdbs,
            daemon_sets,
            services,
            ready,
            changes,
        };
        Watches {
            stores,
            drivers,
            kinds,
        }
    }

    /// Waits until every watch has listed its kind; a watch that ends first is an error.
    pub async fn synced(&mut self) -> Result<(), DrainRunError> {
        tokio::select! {
            biased;
            () = self.stores.ready.wait() => Ok(()),
            Some(ended) = self.drivers.join_next_with_id() => {
                let id = match ended {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                let kind = self.kinds.get(&id).copied().unwrap_or("watched kind");
                Err(DrainRunError::NotSynced { kind })
            }
        }
    }
}

fn snapshot<K>(store: &Store<K>) -> Vec<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .sorted_state()
        .iter()
        .map(|o| o.as_ref().clone())
        .collect()
}

/// The loop's copies of the stores: each step copies only the objects that changed.
#[derive(Default)]
pub(super) struct Copies {
    nodes: SortedCopies<Node>,
    pods: SortedCopies<Pod>,
    pdbs: SortedCopies<PodDisruptionBudget>,
    daemon_sets: SortedCopies<DaemonSet>,
    services: SortedCopies<RayService>,
    clusters: SortedCopies<RayCluster>,
    workloads: SortedCopies<Workload>,
}

impl Copies {
    /// The RayServices as a domain's drain weighs them (none without the service stores).
    pub(super) fn services(&mut self, w: &DrainStores) -> Vec<ServiceView> {
        let Some(s) = &w.services else {
            return Vec::new();
        };
        crate::drain::services::views(
            self.services.refresh(&s.services),
            self.clusters.refresh(&s.clusters),
            self.workloads.refresh(&s.workloads),
        )
    }

    /// The watched objects now.
    pub(super) fn refresh<'a>(&'a mut self, w: &DrainStores) -> Cluster<'a> {
        let ds = match &w.daemon_sets {
            Some(store) => Some(self.daemon_sets.refresh(store)),
            None => None,
        };
        Cluster {
            daemon_sets: ds,
            ..Cluster::new(
                self.nodes.refresh(&w.nodes),
                self.pods.refresh(&w.pods),
                self.pdbs.refresh(&w.pdbs),
            )
        }
    }
}

/// Whether the DaemonSets can be listed (and so watched). Not served or not permitted: every
/// DaemonSet a pod names is taken to exist (as the plan's read does, [`drain_objects`]), so
/// its pods are never evicted as orphans.
/// Watches of RayServices, RayClusters and (where Kueue's API is served) Workloads, for a drain
/// that runs without the controller; `None` where the server serves no RayService.
async fn own_service_stores(
    client: &Client,
    ready: &Arc<Readiness>,
    changed: &Changed,
) -> Option<(ServiceStores, Vec<(&'static str, Driver)>)> {
    if let Err(e) = Api::<RayService>::all(client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        tracing::info!(error = %e, "drain: RayServices are not readable; none is moved off a domain");
        return None;
    }
    let config = watcher::Config::default;
    let (r, c) = (ready.clone(), changed.clone());
    let (services, s) = watch_store(Api::all(client.clone()), config(), r.clone(), c.clone());
    let (clusters, k) = watch_store(Api::all(client.clone()), config(), r.clone(), c.clone());
    let mut drivers = vec![("RayService", s), ("RayCluster", k)];
    let served = Api::<Workload>::all(client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await
        .is_ok();
    // without Kueue's API no slice holds a move for quota
    let workloads = match served {
        true => {
            let (store, driver) = watch_store(Api::all(client.clone()), config(), r, c);
            drivers.push(("Workload", driver));
            store
        }
        false => kube::runtime::reflector::store::Writer::default().as_reader(),
    };
    let stores = ServiceStores {
        services,
        clusters,
        workloads,
    };
    Some((stores, drivers))
}

async fn daemon_sets_readable(client: &Client) -> bool {
    match Api::<DaemonSet>::all(client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, "drain: DaemonSets are not readable; every DaemonSet a pod names is taken to exist");
            false
        }
    }
}
