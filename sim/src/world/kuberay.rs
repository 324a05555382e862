//! A KubeRay v1.7 emulator: the RayService and RayCluster controllers of KubeRay v1.7.0 as far as
//! the API objects go, with no pods, Services or Ray dashboard.
//!
//! It is one of the simulated cluster's actors, and runs as well against the real test API server:
//! raygate's integration tests and the dev cluster (`raygate dev kuberay-emulator`)
//! run against objects that change as KubeRay changes them: child RayClusters named
//! `<rayservice>-<5 chars>`, the originated-from labels, the hash annotation, pending/active names
//! in status, promotion, delayed deletion of dangling children (old active or replaced pending),
//! the `ray.io/initializing-timeout` terminal failure (`Ready=False/InitializingTimeout`, names
//! cleared), the top-level suspend state machine and the RayCluster status (`state`, conditions,
//! desired replicas and resources). `NewClusterWithIncrementalUpgrade` steps target capacities and
//! traffic as v1.7 does ([`incremental`]); an emulated Ray autoscaler
//! ([`EmulatorConfig::autoscaler`], off by default) sizes those children to their capacity.
//!
//! Pods, two ways ([`EmulatorConfig::pods`]):
//! - where core/v1 is served (the simulated cluster), the RayCluster controller creates and
//!   deletes real Pods as KubeRay v1.7 does ([`pods`]: head + `replicas × numOfHosts` workers with
//!   KubeRay's names, labels and controller ownerReference, multi-host replicas, `workersToDelete`,
//!   none while suspended), the sim's scheduler and kubelets run them, and the status (ready
//!   workers, `HeadPodReady`, state) is read back from their readiness. A cluster deleted in the
//!   background leaves its pods to the garbage collector and their kubelets' grace period;
//! - against a server without Pods (the real CRD test server), pods are emulated by time: a
//!   RayCluster whose `spec.suspend` is not true "has pods" from the first reconcile that sees it
//!   so, and they are "ready" once [`EmulatorConfig::start_delay`] has passed.
//!
//! A RayCluster with GCS fault tolerance gets KubeRay's Redis cleanup finalizer and, deleted,
//! keeps it until its pods are gone and KubeRay's Redis cleanup Job has finished (or the GCS FT
//! deletion timeout passed): [`redis_cleanup`]. The Job runs where batch/v1 is served and a Job
//! controller acts (the simulated world's [`job`](crate::world::actors::job) actor).
//!
//! A ready cluster is what KubeRay calls a cluster whose head Pod is ready and whose Serve
//! applications run, so it is promoted and serves.
//!
//! Time comes from the injected [`Clock`](crate::Clock) (the sim's virtual clock, or
//! [`Clock::wall`](crate::Clock::wall) against a real API server): timestamps written, timers
//! and emulated pod start all read it.
//!
//! Two `kube::runtime::Controller`s run side by side: one for RayServices (owning RayClusters) in
//! [`service`], one for every RayCluster's status in [`cluster`]. They share in-memory timers, as
//! KubeRay keeps its deletion timestamps in memory.

mod autoscaler;
mod cluster;
mod desired;
mod hash;
mod incremental;
mod names;
pub mod pods;
pub mod redis_cleanup;
mod service;
mod status;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

pub use hash::cluster_spec_hash;

use crate::Clock;
use raygate::meta::key_of;
use raygate::types::ray::{
    ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE, RayCluster, RayService,
};

/// KubeRay's finalizer on RayServices (children are deleted before the RayService goes).
pub const RAYSERVICE_FINALIZER: &str = "ray.io/rayservice-finalizer";
/// The value of `spec.managedBy` meaning KubeRay itself.
pub const KUBERAY_CONTROLLER: &str = "ray.io/kuberay-operator";
/// KubeRay's periodic requeue of a RayService (`ServiceDefaultRequeueDuration`).
pub const SERVICE_REQUEUE: Duration = Duration::from_secs(2);
/// Default `spec.rayClusterDeletionDelaySeconds`.
pub const DEFAULT_DELETION_DELAY: Duration = Duration::from_secs(60);

/// Emulator settings.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// How long a child must be unsuspended before it counts as ready (emulates pods starting).
    /// Default 2 s.
    pub start_delay: Duration,
    /// KubeRay version written to the `ray.io/kuberay-version` annotation. Default "v1.7.0".
    pub version: String,
    /// Watch and reconcile only this namespace (KubeRay's `-watch-namespace`); `None`: all.
    pub namespace: Option<String>,
    /// Create real Pods (the server must serve core/v1: on for the simulated cluster, off for
    /// the CRD-only test server, where pods are emulated by time). Default off.
    pub pods: bool,
    /// Emulate the Ray autoscaler on the children of `NewClusterWithIncrementalUpgrade`
    /// RayServices (it sizes them to their Serve `target_capacity`). Default off: no worker
    /// `replicas` change unless a test writes them.
    pub autoscaler: Option<AutoscalerConfig>,
    /// A container image whose clusters never get ready (a bad new version: its pods start and
    /// never pass readiness). Pods emulated by time only. Default none.
    pub never_ready_image: Option<String>,
}

/// The emulated Ray autoscaler of incremental upgrades: at most `step` replicas per worker group
/// per look, looks at least `period` apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoscalerConfig {
    pub step: i32,
    pub period: Duration,
}

impl Default for AutoscalerConfig {
    fn default() -> Self {
        AutoscalerConfig {
            step: 1,
            period: Duration::from_secs(5),
        }
    }
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            start_delay: Duration::from_secs(2),
            version: "v1.7.0".to_string(),
            namespace: None,
            pods: false,
            autoscaler: None,
            never_ready_image: None,
        }
    }
}

/// A failing step of the emulator, naming the object.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("reading RayService {name}: {source}")]
    GetService { name: String, source: kube::Error },
    #[error("listing the RayClusters of RayService {name}: {source}")]
    ListChildren { name: String, source: kube::Error },
    #[error("reading RayCluster {name}: {source}")]
    GetCluster { name: String, source: kube::Error },
    #[error("creating RayCluster {name}: {source}")]
    CreateCluster { name: String, source: kube::Error },
    #[error("updating RayCluster {name} in place: {source}")]
    UpdateCluster { name: String, source: kube::Error },
    #[error("deleting RayCluster {name}: {source}")]
    DeleteCluster { name: String, source: kube::Error },
    #[error("writing the finalizers of RayService {name}: {source}")]
    Finalizer { name: String, source: kube::Error },
    #[error("writing the status of RayService {name}: {source}")]
    ServiceStatus { name: String, source: kube::Error },
    #[error("writing the status of RayCluster {name}: {source}")]
    ClusterStatus { name: String, source: kube::Error },
    #[error("listing the Pods of RayCluster {name}: {source}")]
    ListPods { name: String, source: kube::Error },
    #[error("creating a Pod of RayCluster {name}: {source}")]
    CreatePod { name: String, source: kube::Error },
    #[error("deleting Pod {name}: {source}")]
    DeletePod { name: String, source: kube::Error },
    #[error("writing the finalizers of RayCluster {name}: {source}")]
    ClusterFinalizer { name: String, source: kube::Error },
    #[error("listing the Redis cleanup Jobs of RayCluster {name}: {source}")]
    ListJobs { name: String, source: kube::Error },
    #[error("creating the Redis cleanup Job of RayCluster {name}: {source}")]
    CreateJob { name: String, source: kube::Error },
    #[error("hashing rayClusterConfig of RayService {name}: {source}")]
    Hash {
        name: String,
        source: serde_json::Error,
    },
    #[error("scaling RayCluster {name} as the emulated autoscaler: {source}")]
    Autoscale { name: String, source: kube::Error },
    #[error("building RayCluster {name}: {reason}")]
    Construct { name: String, reason: String },
}

impl EmulatorError {
    /// True for an HTTP 409 (a stale resourceVersion or a name already taken): retry soon.
    pub fn is_conflict(&self) -> bool {
        let source = match self {
            EmulatorError::GetService { source, .. }
            | EmulatorError::ListChildren { source, .. }
            | EmulatorError::GetCluster { source, .. }
            | EmulatorError::CreateCluster { source, .. }
            | EmulatorError::UpdateCluster { source, .. }
            | EmulatorError::DeleteCluster { source, .. }
            | EmulatorError::Finalizer { source, .. }
            | EmulatorError::ServiceStatus { source, .. }
            | EmulatorError::ClusterStatus { source, .. }
            | EmulatorError::ListPods { source, .. }
            | EmulatorError::CreatePod { source, .. }
            | EmulatorError::DeletePod { source, .. }
            | EmulatorError::ClusterFinalizer { source, .. }
            | EmulatorError::ListJobs { source, .. }
            | EmulatorError::CreateJob { source, .. }
            | EmulatorError::Autoscale { source, .. } => source,
            EmulatorError::Hash { .. } | EmulatorError::Construct { .. } => return false,
        };
        matches!(source, kube::Error::Api(s) if s.code == 409)
    }
}

/// State shared by both reconcilers.
/// An in-process read's error as the client would return it.
fn kube_error(e: crate::server::status::ApiError) -> kube::Error {
    match serde_json::from_value(e.to_status()) {
        Ok(status) => kube::Error::Api(Box::new(status)),
        Err(decode) => kube::Error::SerdeError(decode),
    }
}

pub(crate) struct Shared {
    pub client: Client,
    /// The sim to read fresh from in-process, when the emulator runs in an `informers::in_process`
    /// scope (the demo and the sweep); else reads are GETs and LISTs through `client`.
    sim: Option<crate::Sim>,
    pub config: EmulatorConfig,
    clock: Clock,
    /// `ns/name` of a RayCluster → (uid, when its emulated pods were created).
    pods_since: Mutex<HashMap<String, (String, Timestamp)>>,
    /// `ns/name` of a dangling RayCluster → when it is deleted (`RayClusterDeletionTimestamps`).
    deletion_at: Mutex<HashMap<String, Timestamp>>,
    /// Names generated so far (mixed into the next name, so two in the same instant differ).
    names_generated: Mutex<u64>,
    /// `ns/name` of a RayCluster → when the emulated autoscaler last scaled it.
    autoscaled_at: Mutex<HashMap<String, Timestamp>>,
}
impl Shared {
    fn new(client: Client, clock: Clock, config: EmulatorConfig) -> Self {
        Shared {
            client,
            sim: crate::world::informers::current(),
            config,
            clock,
            names_generated: Mutex::new(0),
            pods_since: Mutex::new(HashMap::new()),
            deletion_at: Mutex::new(HashMap::new()),
            autoscaled_at: Mutex::new(HashMap::new()),
        }
    }

    /// KubeRay's read of one object, fresh (a GET, or [`crate::Sim::read`] in-process).
    pub(crate) async fn get_opt<K>(
        &self,
        api: &Api<K>,
        name: &str,
    ) -> Result<Option<K>, kube::Error>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        match &self.sim {
            Some(sim) => sim
                .read(&format!("{}/{name}", api.resource_url()))
                .map_err(kube_error),
            None => api.get_opt(name).await,
        }
    }

    /// KubeRay's list, fresh (a LIST, or [`crate::Sim::read_list`] in-process).
    pub(crate) async fn list<K>(&self, api: &Api<K>, lp: &ListParams) -> Result<Vec<K>, kube::Error>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let Some(sim) = &self.sim else {
            return api.list(lp).await.map(|l| l.items);
        };
        let query = crate::server::in_process::selector_query(
            lp.label_selector.as_deref(),
            lp.field_selector.as_deref(),
        );
        sim.read_list(api.resource_url(), &query)
            .map_err(kube_error)
    }

    /// The emulator's one reading of time.
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// A sequence number for [`names::generate_cluster_name`].
    pub(crate) fn next_name_seq(&self) -> u64 {
        let mut n = Self::lock(&self.names_generated);
        *n += 1;
        *n
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        // a panic while holding the lock leaves plain data behind: keep using it
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the cluster's emulated pods exist since `at`, unless already recorded.
    pub(crate) fn pods_created(&self, c: &RayCluster, at: Timestamp) -> Timestamp {
        let uid = c.metadata.uid.clone().unwrap_or_default();
        let mut map = Self::lock(&self.pods_since);
        let entry = map
            .entry(key_of(&c.namespace().unwrap_or_default(), &c.name_any()))
            .or_insert_with(|| (uid.clone(), at));
        if entry.0 != uid {
            *entry = (uid, at);
        }
        entry.1
    }

    /// When the cluster's emulated pods were created, if they exist.
    pub(crate) fn pods_since(&self, c: &RayCluster) -> Option<Timestamp> {
        let uid = c.metadata.uid.clone().unwrap_or_default();
        Self::lock(&self.pods_since)
            .get(&key_of(&c.namespace().unwrap_or_default(), &c.name_any()))
            .filter(|(u, _)| *u == uid)
            .map(|(_, t)| *t)
    }

    pub(crate) fn pods_deleted(&self, ns: &str, name: &str) {
        Self::lock(&self.pods_since).remove(&key_of(ns, name));
    }

    /// When the cluster's pods are (or were) ready: `start_delay` after they were created.
    pub(crate) fn ready_at(&self, c: &RayCluster) -> Option<Timestamp> {
        self.pods_since(c)
            .filter(|_| !self.never_ready(c))
            .map(|t| later(t, self.config.start_delay))
    }

    /// Whether `c` runs [`EmulatorConfig::never_ready_image`].
    pub(crate) fn never_ready(&self, c: &RayCluster) -> bool {
        let Some(bad) = self.config.never_ready_image.as_deref() else {
            return false;
        };
        std::iter::once(&c.spec.head_group_spec.template)
            .chain(
                c.spec
                    .worker_group_specs
                    .iter()
                    .flatten()
                    .map(|g| &g.template),
            )
            .filter_map(|t| t.spec.as_ref())
            .flat_map(|s| &s.containers)
            .any(|k| k.image.as_deref() == Some(bad))
    }

    /// KubeRay's readiness of a cluster for serving (`reconcileServe`): not suspended, its pods
    /// ready, and its status saying so (`HeadPodReady=True`, written by the RayCluster side), so
    /// the status the RayService copies at promotion is the ready one. With real pods the
    /// condition, read from the head pod, is the whole answer.
    pub(crate) fn is_ready(&self, c: &RayCluster) -> bool {
        let head_ready = c.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|x| x.type_ == "HeadPodReady" && x.status == "True")
        });
        c.spec.suspend != Some(true)
            && head_ready
            && (self.config.pods || self.ready_at(c).is_some_and(|t| t <= self.now()))
    }

    pub(crate) fn deletion_time(&self, key: &str) -> Option<Timestamp> {
        Self::lock(&self.deletion_at).get(key).copied()
    }

    pub(crate) fn schedule_deletion(&self, key: &str, at: Timestamp) {
        Self::lock(&self.deletion_at).insert(key.to_string(), at);
    }

    pub(crate) fn forget_deletion(&self, key: &str) {
        Self::lock(&self.deletion_at).remove(key);
    }

    pub(crate) fn autoscaled_at(&self, key: &str) -> Option<Timestamp> {
        Self::lock(&self.autoscaled_at).get(key).copied()
    }

    pub(crate) fn autoscaled(&self, key: &str, at: Timestamp) {
        Self::lock(&self.autoscaled_at).insert(key.to_string(), at);
    }
}

/// `utils.ManagedByExternalController`: the other controller's name, if any.
pub(crate) fn managed_externally(managed_by: Option<&str>) -> Option<&str> {
    managed_by.filter(|m| *m != KUBERAY_CONTROLLER)
}

/// `t + d`, saturating.
pub(crate) fn later(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// `t - d`, saturating.
pub(crate) fn earlier(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_sub(d).unwrap_or(Timestamp::MIN)
}

/// How long from `now` until `at` (zero when `at` has passed).
pub(crate) fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// The requeue for `at` (now or later), capped at `cap`.
pub(crate) fn requeue_at(at: Option<Timestamp>, now: Timestamp, cap: Duration) -> Action {
    let wait = at.map(|t| until(now, t)).map_or(cap, |d| d.min(cap));
    // a zero requeue would spin when a timer is due on the same instant: wait a little
    Action::requeue(wait.max(Duration::from_millis(10)))
}

fn error_policy<K>(obj: Arc<K>, err: &EmulatorError, _ctx: Arc<Shared>) -> Action
where
    K: Resource<DynamicType = ()>,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    if err.is_conflict() {
        tracing::debug!(kind = %K::kind(&()), %name, error = %err, "conflict; retrying");
        Action::requeue(Duration::from_millis(100))
    } else {
        tracing::warn!(kind = %K::kind(&()), %name, error = %err, "reconcile failed; retrying");
        Action::requeue(SERVICE_REQUEUE)
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the emulator until `shutdown` resolves, reading time from `clock`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: EmulatorConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), EmulatorError> {
    let ns = config.namespace.clone();
    let ctx = Arc::new(Shared::new(client.clone(), clock, config));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        while !*rx.borrow() {
            if rx.changed().await.is_err() {
                break;
            }
        }
    };

    let services: Api<RayService> = api(&client, ns.as_deref());
    let clusters: Api<RayCluster> = api(&client, ns.as_deref());
    let wc = watcher::Config::default().any_semantic();
    let children = wc.clone().labels(&format!(
        "{ORIGINATED_FROM_CRD_LABEL}={ORIGINATED_FROM_RAYSERVICE}"
    ));

    let service_controller = Controller::new(services, wc.clone())
        .owns(clusters.clone(), children)
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(service::reconcile, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "RayService controller event");
            }
        });
    let mut cluster_controller = Controller::new(clusters, wc.clone());
    if ctx.config.pods {
        // KubeRay's pod cache holds only Ray pods (internal/managercache/cache.go)
        let ray_pods = wc.labels("ray.io/node-type in (head,worker,redis-cleanup)");
        cluster_controller = cluster_controller.owns(api::<Pod>(&client, ns.as_deref()), ray_pods);
    }
    let cluster_controller = cluster_controller
        .graceful_shutdown_on(stopped(stop_rx))
        .run(cluster::reconcile, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "RayCluster controller event");
            }
        });
    tracing::info!(
        namespace = ns.as_deref().unwrap_or("<all>"),
        start_delay = ?ctx.config.start_delay,
        pods = ctx.config.pods,
        version = %ctx.config.version,
        "KubeRay v1.7 emulator started"
    );
    futures::join!(service_controller, cluster_controller);
    tracing::info!("KubeRay v1.7 emulator stopped");
    Ok(())
}
