//! The NodeRollout controller (IO): one worker per `NodeRollout`, on the leader only.
//!
//! A worker checks the spec (`drain::rollout_options`), plans once (a paged read of Nodes, Pods,
//! PodDisruptionBudgets and DaemonSets), claims the planned nodes against every other active
//! rollout (`start.rs`), and runs the drain loop ([`super::run_with`]) on the watches every
//! running rollout shares, with the rollout's status as its one sink (`report.rs`): every state
//! the loop reports becomes the status (`drain::rollout::status::next`, field manager
//! [`ROLLOUT_MANAGER`]), with the engine's state in `status.engine`: a new leader reads it and
//! goes on where the last one stopped. Nodes and pods are never trusted to that record alone: the
//! engine re-derives every cordon and eviction from the live view, so a node already cordoned is
//! not cordoned again and a pod already evicted (terminating or gone) is not evicted again.
//!
//! With `spec.groups`, the group contract's preflight (`drain::preflight`, as `raygate drain
//! check`) runs when the rollout is planned (on the plan's read) and, while it runs, over the
//! loop's reflector stores (the sink's look: once they are synced, then every
//! [`CONTRACT_EVERY`]), so a running rollout never lists the cluster again; its findings become
//! the `ContractSatisfied` condition (`drain::rollout::contract`) and a Warning Event when it
//! turns `False`. It warns, it does not stop the rollout: the budgets still protect what they
//! select, and the engine's own guards (`drain::engine`'s consent: groups counted from their
//! members, a member of a group protected elsewhere held) cover what they do not.
//!
//! A started rollout holds on to its selection and its nodes (`drain::lifecycle`): a spec whose
//! `udLabel`, `nodeSelector` or `generation` differs from `status.selection` pauses it until set
//! back, and the finalizer it carries while active (`ownership.rs`) gives its nodes back
//! when it is deleted.
//!
//! `spec.paused: true` stops the loop (an eviction already sent finishes; nothing new is
//! sent) and keeps the state; `false` goes on from it. Events on the `NodeRollout` and the
//! metrics come from the change between two states (`drain::rollout::changes`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::{Mutex, Notify, watch};

use super::DrainRunError;
use super::read::{ReadError, ServiceStores, Services, Watches};
use crate::controller::Metrics;
use crate::controller::events::EventSink;
use crate::controller::metrics::RolloutState;
use crate::controller::peers::Board;
use crate::controller::stores::{Readiness, watch_store};
use crate::drain::PreflightOptions;
use crate::drain::rollout as pure;
use crate::runtime::SortedState;
use crate::runtime::{Assumed, Backoff, Clock};
use crate::types::rollout::{NodeRollout, NodeRolloutStatus};

/// Field manager of the NodeRollout status writes (the node patches keep
/// [`super::DRAIN_MANAGER`]).
pub const ROLLOUT_MANAGER: &str = "raygate-rollout";

/// How often a waiting rollout (a node conflict, a plan the cluster does not allow yet) is tried
/// again.
pub(super) const RETRY: Duration = Duration::from_secs(10);
/// How often a rollout held for want of room ([`NO_CAPACITY`]) is planned again: it waits for the
/// operator (a node added, the spec or a budget changed), and each try reads the whole cluster.
pub(super) const NO_CAPACITY_RETRY: Duration = Duration::from_secs(60);
/// The `Ready=False` reason of a rollout whose plan cannot finish: a domain's groups would have
/// nowhere to run (`drain::dead_ends`), or, with hand-off `None`, nowhere to run again for the
/// domain's health check to pass (`drain::health_dead_ends`). Nothing is cordoned or evicted.
pub const NO_CAPACITY: &str = "NoRoomToRecover";
/// The annotation (value `"true"`) that starts a rollout although its plan shows no room, e.g.
/// where an autoscaler adds nodes for pending pods.
pub const SKIP_CAPACITY_CHECK_ANNOTATION: &str = "raygate.io/skip-room-check";
/// The longest a status lags the engine when only its "why it waits" lines changed.
pub(super) const STATUS_EVERY: Duration = Duration::from_secs(10);
/// How often a running rollout's group contract is checked again, over the drain loop's stores
/// (no read of the cluster).
pub const CONTRACT_EVERY: Duration = Duration::from_secs(60);

/// What the rollout controller needs.
pub struct Rollouts {
    pub client: Client,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    /// True while this replica may write.
    pub leader: watch::Receiver<bool>,
    /// Until when this replica may write, on `clock` ([`crate::controller::Fence::open`] without
    /// leader election).
    pub fence: crate::controller::Fence,
    /// This replica's name (the Events' `reportingInstance`).
    pub identity: String,
    /// How often the drain loop decides when nothing changed.
    pub tick: Duration,
    /// The gate's RayServices, clusters and slices: a serving RayService is moved off a domain
    /// before it drains (`None`: none is).
    pub services: Option<ServiceStores>,
}

/// A failing step, naming the rollout.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("reading the cluster to plan NodeRollout {name}: {source}")]
    Read { name: String, source: ReadError },
    #[error("writing NodeRollout {name} status: {source}")]
    WriteStatus { name: String, source: kube::Error },
    #[error("re-reading NodeRollout {name} after a conflict: {source}")]
    Reread { name: String, source: kube::Error },
    #[error("NodeRollout {name}: its status was written by someone else meanwhile; re-reading")]
    Superseded { name: String },
    #[error("not writing NodeRollout {name}: this replica no longer holds the leader Lease")]
    NotLeader { name: String },
    #[error("running NodeRollout {name}: {source}")]
    Executor { name: String, source: DrainRunError },
    #[error("updating NodeRollout {name}'s finalizer: {source}")]
    Finalizer { name: String, source: kube::Error },
    #[error("reading node {node} to give it back from deleted NodeRollout {name}: {source}")]
    ReadNode {
        name: String,
        node: String,
        source: kube::Error,
    },
}

impl RolloutError {
    fn metric_label(&self) -> &'static str {
        match self {
            RolloutError::Read { .. } => "rollout_read",
            RolloutError::WriteStatus { .. } => "rollout_status",
            RolloutError::Reread { .. } => "rollout_reread",
            RolloutError::Superseded { .. } => "rollout_superseded",
            RolloutError::NotLeader { .. } => "not_leader",
            RolloutError::Executor { .. } => "rollout_executor",
            RolloutError::Finalizer { .. } => "rollout_finalizer",
            RolloutError::ReadNode { .. } => "rollout_read_node",
        }
    }
}

pub(super) struct Shared {
    pub(super) client: Client,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) leader: watch::Receiver<bool>,
    pub(super) fence: crate::controller::Fence,
    pub(super) tick: Duration,
    pub(super) events: EventSink,
    pub(super) store: Store<NodeRollout>,
    /// Nodes claimed by the rollouts this process started (the store may not show their
    /// status yet); checked and updated under the lock, so two new rollouts never both claim.
    pub(super) claims: Mutex<Assumed<BTreeSet<String>>>,
    /// What each running rollout's domains disrupt, read and written by every step under one
    /// lock (at most `maxUnavailableDomains` domains of one workload across rollouts).
    pub(super) board: Board,
    /// The drain loops' watches, one set while any rollout runs (each running loop holds it).
    pub(super) watches: Mutex<Weak<Watches>>,
    pub(super) services: Option<ServiceStores>,
}

impl Shared {
    /// Whether this replica may write now: it leads, and its write deadline has not passed.
    pub(super) fn may_write(&self) -> bool {
        *self.leader.borrow() && self.fence.open_at(self.clock.monotonic())
    }
}

impl Shared {
    /// The running rollouts' watches, started by the first to run.
    pub(super) async fn watches(&self) -> Arc<Watches> {
        let mut held = self.watches.lock().await;
        if let Some(w) = held.upgrade() {
            return w;
        }
        let services = self
            .services
            .clone()
            .map_or(Services::Off, Services::Shared);
        let w = Arc::new(Watches::start(&self.client, services).await);
        *held = Arc::downgrade(&w);
        w
    }
}

/// What a worker does next.
pub(super) enum Next {
    /// Wait until the object changes.
    WaitChange,
    /// Wait until it changes, or `RETRY`.
    Retry,
    /// Wait until it changes, or this long.
    RetryAfter(Duration),
    /// Look again at once.
    Again,
}

/// Runs the controller until `shutdown` is true. Workers run only while `leader` is true; a
/// replica that stops leading stops them (the loop stops at its next step).
pub async fn run(r: Rollouts, mut shutdown: watch::Receiver<bool>) {
    let changed = Arc::new(Notify::new());
    let (store, _watch) = watch_rollouts(&r.client, changed.clone());
    tokio::select! {
        biased;
        ready = store.wait_until_ready() => if ready.is_err() { return },
        _ = shutdown.wait_for(|s| *s) => return,
    }
    let identity = r.identity.clone();
    let sh = Arc::new(Shared {
        events: EventSink::new(r.client.clone(), r.clock.clone(), identity),
        client: r.client,
        clock: r.clock,
        metrics: r.metrics,
        leader: r.leader.clone(),
        fence: r.fence.clone(),
        tick: r.tick,
        store,
        claims: Mutex::default(),
        board: Board::default(),
        watches: Mutex::new(Weak::new()),
        services: r.services,
    });
    let mut leader = r.leader;
    let mut workers = Workers::default();
    let mut leader_open = true;
    tracing::info!("NodeRollout controller started");
    loop {
        workers.reap(&sh);
        let rollouts = sh.store.sorted_state();
        count_phases(&sh.metrics, &rollouts);
        if *leader.borrow() {
            workers.follow(&sh, rollouts, worker);
        } else if !workers.senders.is_empty() {
            tracing::info!("not leading: NodeRollout workers stop");
            workers.senders.clear();
        }
        tokio::select! {
            biased;
            _ = changed.notified() => {}
            // a closed channel (a fixed leadership) must not wake the loop over and over
            r = leader.changed(), if leader_open => leader_open = r.is_ok(),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    workers.senders.clear();
    // the workers see their channel close and stop at the loop's next step
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while workers.tasks.join_next().await.is_some() {}
    })
    .await;
}

/// The NodeRollouts' store, on the controller's one watch driver, and its watch (stopped when
/// the guard drops); `changed` is notified at every event.
fn watch_rollouts(client: &Client, changed: Arc<Notify>) -> (Store<NodeRollout>, AbortOnDrop) {
    let ready = Arc::new(Readiness::default());
    let (store, (_, driver)) = watch_store(
        Api::<NodeRollout>::all(client.clone()),
        watcher::Config::default(),
        ready,
        changed,
    );
    (store, AbortOnDrop(tokio::spawn(driver)))
}

/// Each rollout's phase and whether it is blocked, for the metrics.
fn count_phases(metrics: &Metrics, rollouts: &[Arc<NodeRollout>]) {
    let states: Vec<RolloutState> = rollouts
        .iter()
        .map(|o| {
            let status = o.status.as_ref();
            RolloutState {
                name: o.name_any(),
                phase: status
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_else(|| pure::PENDING.into()),
                blocked: status.is_some_and(|s| {
                    crate::conditions::find_true(&s.conditions, pure::BLOCKED).is_some()
                }),
            }
        })
        .collect();
    metrics.refresh_rollouts(&states);
}

/// A worker's view of its rollout: the newest object, `None` once it is gone.
type ObjectFeed = watch::Receiver<Option<Arc<NodeRollout>>>;

/// The running workers, one per rollout, each fed its object through a channel, supervised: a
/// worker that panics is logged with its rollout's name, counted (`reconcile_errors`, step
/// `noderollout worker panicked`) and started again after a backoff.
#[derive(Default)]
struct Workers {
    senders: BTreeMap<String, watch::Sender<Option<Arc<NodeRollout>>>>,
    /// Dropped with the controller's future: a stopped controller stops its workers.
    tasks: tokio::task::JoinSet<()>,
    /// Each running task's rollout.
    names: HashMap<tokio::task::Id, String>,
    /// Rollouts whose worker panicked: how many times, and when it may start again.
    panics: Backoff,
}

impl Workers {
    /// Collects the workers that ended; a panic holds its rollout's next worker back.
    fn reap(&mut self, sh: &Shared) {
        while let Some(ended) = self.tasks.try_join_next_with_id() {
            let (id, panic) = match ended {
                Ok((id, ())) => (id, None),
                Err(e) if e.is_panic() => (e.id(), Some(e.into_panic())),
                Err(e) => (e.id(), None),
            };
            let name = self.names.remove(&id).unwrap_or_default();
            let Some(payload) = panic else { continue };
            let now = sh.clock.monotonic();
            let delay = self.panics.failed(name.clone(), now).wait(now);
            sh.metrics
                .errors
                .get_or_create(&crate::controller::metrics::StepLabels {
                    step: "noderollout worker panicked".into(),
                })
                .inc();
            tracing::error!(
                rollout = %name,
                panic = %crate::controller::panic_message(payload),
                "NodeRollout worker panicked; started again in {}s",
                delay.as_secs()
            );
        }
    }

    /// Hands each rollout its newest object, starting a worker for a new one (or for one whose
    /// worker panicked, once its backoff has passed).
    fn follow<F>(
        &mut self,
        sh: &Arc<Shared>,
        rollouts: Vec<Arc<NodeRollout>>,
        start: impl Fn(Arc<Shared>, String, ObjectFeed) -> F,
    ) where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let names: BTreeSet<String> = rollouts.iter().map(|o| o.name_any()).collect();
        // a worker whose object is gone (or that ended) is dropped: its receiver closes
        self.senders
            .retain(|name, tx| names.contains(name) && !tx.is_closed());
        self.panics.retain(|name| names.contains(name));
        let now = sh.clock.monotonic();
        for o in rollouts {
            let name = o.name_any();
            match self.senders.get(&name) {
                Some(tx) => {
                    tx.send_if_modified(|cur| {
                        let newer = cur.as_ref().map(|c| c.resource_version())
                            != Some(o.resource_version());
                        if newer {
                            *cur = Some(o.clone());
                        }
                        newer
                    });
                }
                None if !self.panics.ready(name.as_str(), now) => {}
                None => {
                    let (tx, rx) = watch::channel(Some(o));
                    let task = self.tasks.spawn(start(sh.clone(), name.clone(), rx));
                    self.names.insert(task.id(), name.clone());
                    self.senders.insert(name, tx);
                }
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One rollout, while this replica leads and the object exists.
async fn worker(sh: Arc<Shared>, name: String, mut obj: ObjectFeed) {
    let mut w = Worker {
        sh: sh.clone(),
        name: name.clone(),
        written: None,
        preflight: None,
        contract: None,
        given_back: None,
    };
    let mut failures: Backoff<()> = Backoff::default();
    loop {
        let Some(nro) = obj.borrow_and_update().clone() else {
            break;
        };
        let next = match w.step(&nro, &mut obj).await {
            Ok(next) => {
                failures.succeeded(&());
                next
            }
            Err(e) => {
                sh.metrics
                    .errors
                    .get_or_create(&crate::controller::metrics::StepLabels {
                        step: e.metric_label().into(),
                    })
                    .inc();
                if matches!(e, RolloutError::NotLeader { .. }) {
                    tracing::info!(rollout = %name, "{e}");
                    break;
                }
                tracing::warn!(rollout = %name, error = %e, "NodeRollout step failed; retried");
                // what was written may not be what the server has: read it again
                w.written = None;
                let now = sh.clock.monotonic();
                let delay = failures.failed((), now).wait(now);
                tokio::select! {
                    biased;
                    r = obj.changed() => if r.is_err() { break },
                    _ = tokio::time::sleep(delay) => {}
                }
                continue;
            }
        };
        match next {
            Next::Again => {}
            Next::WaitChange => {
                if obj.changed().await.is_err() {
                    break;
                }
            }
            Next::Retry => tokio::select! {
                biased;
                r = obj.changed() => if r.is_err() { break },
                _ = tokio::time::sleep(RETRY) => {}
            },
            Next::RetryAfter(after) => tokio::select! {
                biased;
                r = obj.changed() => if r.is_err() { break },
                _ = tokio::time::sleep(after) => {}
            },
        }
    }
    sh.claims.lock().await.forget(name.as_str());
    sh.board.leave(&name);
}

/// The last status this worker wrote, and the `resourceVersion` the server gave it.
pub(super) struct Written {
    pub(super) status: NodeRolloutStatus,
    pub(super) resource_version: Option<String>,
}

pub(super) struct Worker {
    pub(super) sh: Arc<Shared>,
    pub(super) name: String,
    pub(super) written: Option<Written>,
    /// The spec's group contract (`None`: no `groups`, no preflight).
    pub(super) preflight: Option<PreflightOptions>,
    /// The last preflight's condition.
    pub(super) contract: Option<pure::Contract>,
    /// The last Event published while giving the nodes of a deleted rollout back.
    pub(super) given_back: Option<String>,
}

impl Worker {
    /// The status to start from: this worker's last write (the store may lag it), else the
    /// object's.
    pub(super) fn current_status(&self, nro: &NodeRollout) -> Option<NodeRolloutStatus> {
        match &self.written {
            Some(w) => Some(w.status.clone()),
            None => nro.status.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::controller::fenced::tests::Counting;
    use crate::controller::metrics::StepLabels;
    use crate::runtime::ManualClock;

    fn shared(clock: Arc<ManualClock>) -> Arc<Shared> {
        // no server: these tests never reach it
        let client = Client::new(Counting::default(), "default");
        let (store, _writer) = kube::runtime::reflector::store();
        Arc::new(Shared {
            events: EventSink::new(client.clone(), clock.clone(), "raygate-0"),
            client,
            clock,
            metrics: Arc::new(Metrics::default()),
            leader: watch::channel(true).1,
            fence: crate::controller::Fence::open(),
            tick: Duration::from_secs(1),
            store,
            claims: Mutex::default(),
            board: Board::default(),
            watches: Mutex::new(Weak::new()),
            services: None,
        })
    }

    fn rollout(name: &str) -> Arc<NodeRollout> {
        let mut o: NodeRollout = serde_json::from_value(serde_json::json!({
            "apiVersion": "raygate.io/v1alpha1", "kind": "NodeRollout",
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"udLabel": "ud", "nodeSelector": {}}}))
        .unwrap();
        o.metadata.uid = Some(format!("uid-{name}"));
        Arc::new(o)
    }

    #[tokio::test]
    async fn a_worker_that_panics_is_counted_and_started_again_after_a_backoff() {
        let clock = Arc::new(ManualClock::starting_at(Timestamp::UNIX_EPOCH));
        let sh = shared(clock.clone());
        let starts = Arc::new(AtomicU32::new(0));
        let start = {
            let starts = starts.clone();
            move |_: Arc<Shared>, name: String, _: ObjectFeed| {
                starts.fetch_add(1, Ordering::SeqCst);
                async move { panic!("worker {name} broke") }
            }
        };
        let panics = || {
            sh.metrics
                .errors
                .get_or_create(&StepLabels {
                    step: "noderollout worker panicked".into(),
                })
                .get()
        };
        let mut w = Workers::default();
        w.follow(&sh, vec![rollout("r")], &start);
        while !w.tasks.is_empty() {
            tokio::task::yield_now().await;
            w.reap(&sh);
        }
        assert_eq!((starts.load(Ordering::SeqCst), panics()), (1, 1));
        // held back for the first backoff (2 s), then started again
        w.follow(&sh, vec![rollout("r")], &start);
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        clock.advance(Duration::from_secs(2));
        w.follow(&sh, vec![rollout("r")], &start);
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        // a second panic doubles the wait
        while w.names.values().any(|n| n == "r") {
            tokio::task::yield_now().await;
            w.reap(&sh);
        }
        assert_eq!(panics(), 2);
        clock.advance(Duration::from_secs(3));
        w.follow(&sh, vec![rollout("r")], &start);
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        clock.advance(Duration::from_secs(1));
        w.follow(&sh, vec![rollout("r")], &start);
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        // a rollout that is gone is forgotten, backoff and all
        w.follow(&sh, vec![], &start);
        assert!(w.panics.is_empty() && w.senders.is_empty());
    }
}
