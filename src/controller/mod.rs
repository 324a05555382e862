//! Runtime wiring for `raygate controller`: shared watches feeding reflector stores, the gate
//! reconciler per RayService, the admission loop, events, metrics, health and leader election.
//!
//! Everything that decides lives in the pure modules ([`crate::gate`], [`crate::slices`],
//! [`crate::admission`]); this module observes, calls them, and applies their results with
//! narrow merge patches or server-side apply, one field manager per writer. Time comes from the
//! one [`Clock`] in the [`Context`]: the wall clock is read nowhere else (checked by clippy).
#![deny(clippy::disallowed_methods)]

mod admission;
mod coverage;
/// The drain: observe → `drain::engine::decide` → evict and patch nodes → report, one loop for
/// `drain run --local` and each NodeRollout (`drain::rollout`: one worker per rollout on the
/// leader, its status the loop's sink).
pub mod drain;
mod events;
mod fenced;
mod gate;
mod http;
mod leader;
mod metrics;
pub mod peers;
mod runner;
mod startup;
mod stores;
mod ungater;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::admission::AdmissionMode;
use crate::runtime::{Clock, Monotonic, SystemClock};
pub use events::EventSink;
pub use gate::cleanup::{Removed as PodGateRemoved, remove_pod_gates};
pub use leader::Fence;
pub use metrics::Metrics;
pub use stores::Stores;

use crate::types::ray::RayCluster;

// Field managers: one per writer, all here. Each writer owns its fields under its own name, so
// `kubectl get -o yaml --show-managed-fields` tells who wrote what, and a writer's forced apply
// never takes fields from another raygate writer.
//
// | manager              | writes                                                              |
// |----------------------|---------------------------------------------------------------------|
// | `raygate-gate`       | RayService annotations/`spec.suspend`/template gate; RayCluster `spec.suspend`, queue label, flavors |
// | `raygate-slices`     | Workload slices: metadata and spec (apply), `Finished` (status apply) |
// | `raygate-pods-ready` | the `PodsReady` condition on covering slices                        |
// | `raygate-admission`  | Workload admission conditions and `status.admission`; ClusterQueue and LocalQueue status |
// | `raygate-ungater`    | Pod `spec.schedulingGates` (removes `raygate.io/quota` only)        |
// | `raygate-drain`      | Node cordon, taints, upgrade label, uncordon (`drain::DRAIN_MANAGER`) |
// | `raygate-rollout`    | NodeRollout status (`drain::rollout::ROLLOUT_MANAGER`)              |
// | `raygate-leader`     | the leader-election Lease (`leader.rs`)                             |
// | `raygate-dev`        | `raygate dev apply` (not the controller; see `crate::client::dev`)          |

/// Every field manager of raygate's starts with it (the caches keep only these managers'
/// `managedFields` entries).
pub const FIELD_MANAGER_PREFIX: &str = "raygate-";

/// Field manager of the gate's RayService/RayCluster patches.
pub const GATE_MANAGER: &str = crate::gate::GATE_FIELD_MANAGER;
/// Field manager of Workload slices (metadata and spec, and the `Finished` status write: the
/// status subresource keeps its own managed-fields entry under the same name).
pub const SLICES_MANAGER: &str = "raygate-slices";
/// Field manager of the slice planner's status writes (`Finished`): the slice writer's.
pub const SLICES_STATUS_MANAGER: &str = SLICES_MANAGER;
/// Field manager of the `PodsReady` condition on covering slices.
pub const PODS_READY_MANAGER: &str = "raygate-pods-ready";
/// Field manager of admission's status writes (Workload, ClusterQueue, LocalQueue).
pub const ADMISSION_MANAGER: &str = "raygate-admission";
/// Field manager of the pod ungater's patches (removing the scheduling gate from pods).
pub const UNGATER_MANAGER: &str = "raygate-ungater";
/// Field manager of the leader-election Lease, distinct from every object writer's.
pub const LEASE_MANAGER: &str = "raygate-leader";

/// Server-side apply as `manager`, forced (each writer owns its fields), with strict field
/// validation: a field the installed CRD does not know is an error, never a silent drop.
pub(crate) fn apply_params(manager: &str) -> kube::api::PatchParams {
    kube::api::PatchParams::apply(manager)
        .force()
        .validation(kube::api::ValidationDirective::Strict)
}

/// A merge patch as `manager`, with strict field validation (see [`apply_params`]).
pub(crate) fn merge_params(manager: &str) -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    }
    .validation(kube::api::ValidationDirective::Strict)
}

/// Controller settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub admission: AdmissionMode,
    pub leader_elect: bool,
    pub lease_name: String,
    pub lease_namespace: String,
    pub identity: String,
    /// How long a Lease holder keeps it without renewing.
    pub lease_duration_seconds: u64,
    /// Where `/metrics`, `/healthz` and `/readyz` are served; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// How often the admission loop runs without a trigger.
    pub admission_resync: Duration,
    /// When finished slices are deleted; `None` keeps them (until their RayService is deleted).
    pub finished_slice_retention: Option<crate::slices::Retention>,
    /// Check the installed CRDs before starting (`raygate controller` always does; off by default
    /// for embedders whose server serves no CRD objects, e.g. the simulated cluster).
    pub check_crds: bool,
    /// How often a failed CRD check is retried.
    pub check_crds_retry: Duration,
    /// The pod-level gate: the `raygate.io/quota` scheduling gate on opted-in RayServices' pod
    /// templates and the ungater that lifts it (needs a server that serves Pods).
    pub pod_gate: bool,
    /// The NodeRollout controller (needs a server that serves Nodes, Pods and
    /// PodDisruptionBudgets, and the NodeRollout CRD).
    pub node_rollouts: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            admission: AdmissionMode::Builtin,
            leader_elect: false,
            lease_name: "raygate".into(),
            lease_namespace: "raygate-system".into(),
            identity: "raygate".into(),
            lease_duration_seconds: 15,
            metrics_addr: None,
            admission_resync: Duration::from_secs(10),
            finished_slice_retention: Some(crate::slices::Retention::default()),
            check_crds: false,
            check_crds_retry: Duration::from_secs(30),
            pod_gate: false,
            node_rollouts: false,
        }
    }
}

/// A failing step, naming the object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("patching RayService {name} ({what}): {source}")]
    PatchService {
        name: String,
        what: &'static str,
        source: kube::Error,
    },
    #[error("patching RayCluster {name} spec.suspend={suspend}: {source}")]
    PatchChildSuspend {
        name: String,
        suspend: bool,
        source: kube::Error,
    },
    #[error("patching RayCluster {name} pod templates (flavors, scheduling gate): {source}")]
    PatchChildFlavors { name: String, source: kube::Error },
    #[error("applying Workload {name}: {source}")]
    ApplyWorkload { name: String, source: kube::Error },
    #[error("patching Workload {name} spec.podSets: {source}")]
    PatchPodSets { name: String, source: kube::Error },
    #[error("patching Workload {name} spec.priority: {source}")]
    PatchPriority { name: String, source: kube::Error },
    #[error("writing Workload {name} status: {source}")]
    WorkloadStatus { name: String, source: kube::Error },
    #[error("writing Workload {name} PodsReady: {source}")]
    PodsReady { name: String, source: kube::Error },
    #[error("writing ClusterQueue {name} status: {source}")]
    ClusterQueueStatus { name: String, source: kube::Error },
    #[error("writing LocalQueue {name} status: {source}")]
    LocalQueueStatus { name: String, source: kube::Error },
    #[error("serving metrics on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("not writing {name}: this replica no longer holds the leader Lease")]
    NotLeader { name: String },
    #[error("leader election on Lease {name}: {reason}")]
    Lease { name: String, reason: String },
    #[error("opting out RayCluster {name} (queue label, spec.suspend): {source}")]
    OptOutChild { name: String, source: kube::Error },
    #[error("removing the pod scheduling gate ({what}): {source}")]
    RemovePodGate { what: String, source: kube::Error },
    #[error("deleting finished Workload {name}: {source}")]
    DeleteWorkload { name: String, source: kube::Error },
    #[error("task {task} ended unexpectedly ({how}): the controller stops")]
    TaskEnded { task: String, how: String },
}

impl Error {
    /// A 409: the object changed since the decision (its `resourceVersion` no longer matches).
    pub fn is_conflict(&self) -> bool {
        let source = match self {
            Error::PatchService { source, .. }
            | Error::PatchChildSuspend { source, .. }
            | Error::PatchChildFlavors { source, .. }
            | Error::OptOutChild { source, .. }
            | Error::ApplyWorkload { source, .. }
            | Error::PatchPodSets { source, .. }
            | Error::PatchPriority { source, .. }
            | Error::WorkloadStatus { source, .. }
            | Error::PodsReady { source, .. }
            | Error::ClusterQueueStatus { source, .. }
            | Error::LocalQueueStatus { source, .. } => source,
            _ => return false,
        };
        matches!(source, kube::Error::Api(s) if s.code == 409)
    }

    /// The failing step, as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::PatchService { .. } => "patch_rayservice",
            Error::PatchChildSuspend { .. } => "patch_child_suspend",
            Error::PatchChildFlavors { .. } => "patch_child_flavors",
            Error::ApplyWorkload { .. } => "apply_workload",
            Error::PatchPodSets { .. } => "patch_podsets",
            Error::PatchPriority { .. } => "patch_priority",
            Error::WorkloadStatus { .. } => "workload_status",
            Error::PodsReady { .. } => "pods_ready",
            Error::ClusterQueueStatus { .. } => "clusterqueue_status",
            Error::LocalQueueStatus { .. } => "localqueue_status",
            Error::Serve { .. } => "serve",
            Error::Lease { .. } => "lease",
            Error::OptOutChild { .. } => "opt_out_child",
            Error::DeleteWorkload { .. } => "delete_workload",
            Error::RemovePodGate { .. } => "remove_pod_gate",
            Error::NotLeader { .. } => "not_leader",
            Error::TaskEnded { .. } => "task_ended",
        }
    }
}

/// Shared by the reconciler and the admission loop.
pub struct Context {
    pub client: Client,
    /// Every time the controller needs (decisions, written times, latencies, expiries).
    pub clock: Arc<dyn Clock>,
    pub config: Config,
    pub stores: Stores,
    pub metrics: Arc<Metrics>,
    pub events: EventSink,
    /// True while this replica may write (always, without leader election).
    pub leader: watch::Receiver<bool>,
    /// Until when this replica may write, on `clock` (open without leader election).
    pub fence: leader::Fence,
    /// When the admission loop admitted a Workload (key `ns/name`), for the gate-latency metric.
    pub admitted_at: std::sync::Mutex<std::collections::HashMap<String, Monotonic>>,
    /// Consecutive failed reconciles per RayService (`ns/name`), for the error backoff.
    pub failures: std::sync::Mutex<crate::runtime::Backoff>,
    /// Children this process released whose record the RayService in the store may not show yet
    /// (key `ns/name` of the RayService), see [`gate::overlay_released`].
    pub just_released:
        std::sync::Mutex<crate::runtime::Assumed<std::collections::BTreeSet<String>>>,
}

impl Context {
    /// Whether this replica may write now: it leads, and its write deadline has not passed.
    fn is_leader(&self) -> bool {
        *self.leader.borrow() && self.fence.open_at(self.clock.monotonic())
    }
}

/// Runs the controller on the system clock until `shutdown` resolves.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    run_with(client, config, Arc::new(SystemClock::default()), shutdown).await
}

/// Whether this replica leads, and until when it may write.
type Leadership = (watch::Receiver<bool>, leader::Fence);

/// With leader election: whether this replica leads, its write fence, and the running
/// election; without: always leading, never fenced.
fn elect(
    client: &Client,
    config: &Config,
    clock: &Arc<dyn Clock>,
) -> Result<(Leadership, Option<leader::Election>), Error> {
    if !config.leader_elect {
        return Ok(((watch::channel(true).1, leader::Fence::open()), None));
    }
    let election = leader::elect(client.clone(), config, clock.clone())?;
    let leads = (election.leads.clone(), election.fence.clone());
    Ok((leads, Some(election)))
}

/// Whether this replica may write now: it leads, and its write deadline has not passed.
fn may_write(
    (leader, fence): &Leadership,
    clock: &Arc<dyn Clock>,
) -> Arc<dyn Fn() -> bool + Send + Sync> {
    let (leader, fence, clock) = (leader.clone(), fence.clone(), clock.clone());
    Arc::new(move || *leader.borrow() && fence.open_at(clock.monotonic()))
}

/// Runs the controller on `clock` (e.g. a simulated cluster's virtual clock) until `shutdown`
/// resolves.
pub async fn run_with(
    client: Client,
    config: Config,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::default());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = shutdown_tx.send(true);
    });
    if config.check_crds
        && !startup::wait_until_compatible(&client, &config, shutdown_rx.clone()).await?
    {
        return Ok(());
    }
    let (stores, streams) = stores::start(client.clone(), config.admission, config.pod_gate).await;
    let (leader, election) = elect(&client, &config, &clock)?;
    // every task writes through the fence; the watches above and the Lease use the plain client
    let client = fenced::fenced(client, may_write(&leader, &clock));
    let ctx = Arc::new(Context {
        client: client.clone(),
        events: EventSink::new(client.clone(), clock.clone(), config.identity.clone()),
        clock,
        config: config.clone(),
        stores,
        metrics: metrics.clone(),
        leader: leader.0,
        fence: leader.1,
        admitted_at: Default::default(),
        failures: Default::default(),
        just_released: Default::default(),
    });

    let mut tasks = Supervisor::default();
    let triggers = (&streams.admission_trigger, &streams.pods_changed);
    spawn_loops(&mut tasks, &ctx, triggers, shutdown_rx.clone()).await?;
    for (name, driver) in streams.drivers {
        tasks.spawn(name, driver);
    }

    let controller = Controller::for_shared_stream(streams.services, ctx.stores.services.clone())
        .watches_shared_stream(streams.clusters, |c: Arc<RayCluster>| {
            stores::rayservice_of(&c)
        })
        .owns_shared_stream(streams.workloads)
        .reconcile_on(streams.deleted)
        .with_config(kube::runtime::controller::Config::default().concurrency(8))
        .graceful_shutdown_on({
            let mut stop = shutdown_rx.clone();
            async move { while stop.changed().await.is_ok() && !*stop.borrow() {} }
        })
        .run(gate::reconcile, gate::error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "reconcile loop event");
            }
        });
    tracing::info!(admission = ?config.admission, "raygate controller started");
    // a task that ends while the controller runs (a panic in the admission loop, a watch driver
    // or the HTTP server) stops the process: nothing would admit while /readyz stayed green
    let result = tokio::select! {
        biased;
        () = controller => Ok(()),
        e = tasks.first_unexpected_end(shutdown_rx.clone()) => Err(e),
    };
    tasks.abort_all();
    if let Some(election) = election {
        release(election, &config).await;
    }
    match &result {
        Ok(()) => tracing::info!("raygate controller stopped"),
        Err(e) => tracing::error!(error = %e, "raygate controller failed"),
    }
    result
}

/// Starts the loops besides the gate's reconcile: the HTTP server, the admission loop, the pod
/// ungater and the NodeRollout controller, as configured. `triggers`: the admission loop's and
/// the ungater's.
async fn spawn_loops(
    tasks: &mut Supervisor,
    ctx: &Arc<Context>,
    (admission_trigger, pods_changed): (&Arc<tokio::sync::Notify>, &Arc<tokio::sync::Notify>),
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    if let Some(addr) = ctx.config.metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Serve { addr, source })?;
        tasks.spawn(
            "http server",
            http::serve(listener, ctx.clone(), shutdown.clone()),
        );
    }
    if ctx.config.admission == AdmissionMode::Builtin {
        tasks.spawn(
            "admission loop",
            runner::run(
                admission::Admission::default(),
                ctx.clone(),
                runner::Wake {
                    trigger: admission_trigger.clone(),
                    resync: ctx.config.admission_resync,
                },
                shutdown.clone(),
            ),
        );
    }
    if ctx.config.pod_gate {
        let (ungater, wake) = (
            ungater::Ungater::new(ctx),
            runner::Wake {
                trigger: pods_changed.clone(),
                resync: ungater::RESYNC,
            },
        );
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        tasks.spawn("pod ungater", async move {
            match ungater {
                Some(u) => runner::run(u, ctx, wake, shutdown).await,
                None => tracing::error!("the pod ungater needs the Ray pods' store (pod gate on)"),
            }
        });
    } else {
        // nothing lifts the gate without the flag: a pod born gated would wait forever
        tasks.spawn(
            "pod gate removal",
            gate::cleanup::run(ctx.clone(), shutdown.clone()),
        );
    }
    if ctx.config.node_rollouts {
        let rollouts = drain::rollout::Rollouts {
            client: ctx.client.clone(),
            clock: ctx.clock.clone(),
            metrics: ctx.metrics.clone(),
            leader: ctx.leader.clone(),
            fence: ctx.fence.clone(),
            identity: ctx.config.identity.clone(),
            tick: Duration::from_secs(1),
            services: Some(drain::ServiceStores {
                services: ctx.stores.services.clone(),
                clusters: ctx.stores.clusters.clone(),
                workloads: ctx.stores.workloads.clone(),
            }),
        };
        tasks.spawn(
            "noderollout controller",
            drain::rollout::run(rollouts, shutdown.clone()),
        );
    }
    Ok(())
}

/// Releases the Lease before the process exits, awaited: a standby takes over at once instead
/// of after the lease duration (on SIGTERM or a failure).
async fn release(election: leader::Election, config: &Config) {
    let lease = format!("{}/{}", config.lease_namespace, config.lease_name);
    if election.release(LEASE_RELEASE_TIMEOUT).await {
        tracing::info!(lease = %lease, "leader election stopped; the Lease is released");
    } else {
        tracing::warn!(lease = %lease, timeout = ?LEASE_RELEASE_TIMEOUT, "releasing the Lease timed out; a standby takes over when it expires");
    }
}

/// The controller's long-running tasks, by name: [`Supervisor::first_unexpected_end`] turns the
/// first one that ends before shutdown (returns, panics, is cancelled) into an error naming it.
#[derive(Default)]
pub(crate) struct Supervisor {
    tasks: tokio::task::JoinSet<()>,
    names: std::collections::HashMap<tokio::task::Id, String>,
}

impl Supervisor {
    pub(crate) fn spawn(
        &mut self,
        name: impl Into<String>,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), name.into());
    }

    /// Waits for a task to end while `shutdown` is not requested; never resolves otherwise (and
    /// not at all without tasks).
    pub(crate) async fn first_unexpected_end(&mut self, shutdown: watch::Receiver<bool>) -> Error {
        while let Some(ended) = self.tasks.join_next_with_id().await {
            let (id, how) = match ended {
                Ok((id, ())) => (id, "returned".to_string()),
                Err(e) if e.is_panic() => {
                    let id = e.id();
                    (id, format!("panicked: {}", panic_message(e.into_panic())))
                }
                Err(e) => (e.id(), "cancelled".to_string()),
            };
            let task = self.names.remove(&id).unwrap_or_else(|| format!("{id}"));
            if *shutdown.borrow() {
                tracing::debug!(task, how, "task stopped on shutdown");
                continue;
            }
            return Error::TaskEnded { task, how };
        }
        std::future::pending().await
    }

    fn abort_all(&mut self) {
        self.tasks.abort_all();
    }
}

/// A panic's message (a `&str` or `String` payload; empty otherwise).
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// How long a stopping controller waits for its Lease to be released.
const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Requeue interval for a healthy RayService: a safety resync, not the driver.
pub(crate) fn resync() -> Action {
    Action::requeue(Duration::from_secs(300))
}

/// Requeue delay while a cache has not synced: short, nothing is decided meanwhile.
pub(crate) fn not_synced() -> Action {
    Action::requeue(Duration::from_millis(500))
}

/// Watch configuration shared by all watches.
pub(crate) fn watch_config() -> watcher::Config {
    watcher::Config::default().any_semantic()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::watch;

    use super::{Error, Supervisor};

    #[tokio::test]
    async fn a_panicking_task_stops_the_controller_with_an_error_naming_it() {
        let (_stop, shutdown) = watch::channel(false);
        let mut tasks = Supervisor::default();
        tasks.spawn("watch RayCluster", std::future::pending());
        tasks.spawn("admission loop", async { panic!("index out of bounds") });
        let e = tokio::time::timeout(
            Duration::from_secs(10),
            tasks.first_unexpected_end(shutdown),
        )
        .await
        .map_err(|_| "the supervisor never noticed the panic");
        match e {
            Ok(Error::TaskEnded { task, how }) => {
                assert_eq!(task, "admission loop");
                assert_eq!(how, "panicked: index out of bounds");
            }
            other => panic!("expected TaskEnded, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_task_that_returns_early_is_an_error_but_not_after_shutdown() {
        let (stop, shutdown) = watch::channel(false);
        let mut tasks = Supervisor::default();
        tasks.spawn("http server", async {});
        let e = tasks.first_unexpected_end(shutdown.clone()).await;
        assert_eq!(
            e.to_string(),
            "task http server ended unexpectedly (returned): the controller stops"
        );
        // on shutdown the tasks return by design: nothing to report
        let _ = stop.send(true);
        tasks.spawn("admission loop", async {});
        let waited = tokio::time::timeout(
            Duration::from_millis(300),
            tasks.first_unexpected_end(shutdown),
        )
        .await;
        assert!(waited.is_err(), "a task ending on shutdown was reported");
    }
}
