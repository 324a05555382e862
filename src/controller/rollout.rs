//! The NodeRollout controller (IO): one worker per `NodeRollout`, on the leader only.
//!
//! A worker checks the spec (`drain::rollout_options`), plans once (a paged read of Nodes, Pods,
//! PodDisruptionBudgets and DaemonSets), claims the planned nodes against every other active
//! rollout, and runs the engine through the executor ([`super::drain::run`]). Every state the
//! executor reports becomes the status (`drain::rollout::status`, field manager
//! [`ROLLOUT_MANAGER`]), with the engine's state in `status.engine`: a new leader reads it and
//! goes on where the last one stopped. Nodes and pods are never trusted to that record alone: the
//! engine re-derives every cordon and eviction from the live view, so a node already cordoned is
//! not cordoned again and a pod already evicted (terminating or gone) is not evicted again.
//!
//! With `spec.groups`, the group contract's preflight (`drain::preflight`, as `raygate drain
//! check`) runs when the rollout is planned (on the plan's read) and, while it runs, over the
//! executor's own reflector stores (a [`executor::Observer`]: once they are synced, then every
//! [`CONTRACT_EVERY`]), so a running rollout never lists the cluster again; its findings become
//! the `ContractSatisfied` condition (`drain::rollout::contract`) and a Warning Event when it
//! turns `False`. It warns, it does not stop the rollout: the budgets still protect what they
//! select, and the engine's own guards (`drain::engine`'s consent: groups counted from their
//! members, a member of a group protected elsewhere held) cover what they do not.
//!
//! A started rollout holds on to its selection and its nodes (`drain::lifecycle`): a spec whose
//! `udLabel`, `nodeSelector` or `generation` differs from `status.selection` pauses it until set
//! back, and the finalizer it carries while active (`rollout/ownership.rs`) gives its nodes back
//! when it is deleted.
//!
//! `spec.paused: true` stops the executor (an eviction already sent finishes; nothing new is
//! sent) and keeps the state; `false` goes on from it. Events on the `NodeRollout` and the
//! metrics come from the change between two states (`drain::rollout::changes`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify, mpsc, watch};

use super::SortedState;
use super::drain::{self as executor, DrainRunError, Observer, Run, WriteAhead};
use super::events::EventSink;
use super::peers::{Board, Peers, StoredDisruptions};
use super::{Clock, Metrics};
use crate::drain::engine::{Handoff, Options, State};
use crate::drain::lifecycle::{self, SelectionCheck};
use crate::drain::rollout::{self as pure, NotReady};
use crate::drain::{
    DeadEnd, DrainError, GateDeadEnd, NoRoom, PreflightOptions, Returns, auto_taint,
    outdated_taint, rollout_options,
};
use crate::types::rollout::{NodeRollout, NodeRolloutStatus, RolloutSelection};

mod ownership;

/// Field manager of the NodeRollout status writes (the node patches keep
/// [`super::drain::DRAIN_MANAGER`]).
pub const ROLLOUT_MANAGER: &str = "raygate-rollout";

/// How often a waiting rollout (a node conflict, a plan the cluster does not allow yet) is tried
/// again.
const RETRY: Duration = Duration::from_secs(10);
/// How often a rollout held for want of room ([`NO_ROOM`]) is planned again: it waits for the
/// operator (a node added, the spec or a budget changed), and each try reads the whole cluster.
const NO_ROOM_RETRY: Duration = Duration::from_secs(60);
/// The `Ready=False` reason of a rollout whose plan cannot finish: a domain's groups would have
/// nowhere to run (`drain::dead_ends`), or, with hand-off `None`, nowhere to run again for the
/// domain's health gate to pass (`drain::gate_dead_ends`). Nothing is cordoned or evicted.
pub const NO_ROOM: &str = "NoRoomToRecover";
/// The annotation (value `"true"`) that starts a rollout although its plan shows no room, e.g.
/// where an autoscaler adds nodes for pending pods.
pub const SKIP_ROOM_CHECK_ANNOTATION: &str = "raygate.io/skip-room-check";
/// The longest a status lags the engine when only its "why it waits" lines changed.
const STATUS_EVERY: Duration = Duration::from_secs(10);
/// How often a running rollout's group contract is checked again, over the executor's stores
/// (no read of the cluster).
pub const CONTRACT_EVERY: Duration = Duration::from_secs(60);

/// What the rollout controller needs.
pub struct Rollouts {
    pub client: Client,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    /// True while this replica may write.
    pub leader: watch::Receiver<bool>,
    /// This replica's name (the Events' `reportingInstance`).
    pub identity: String,
    /// How often the executor decides when nothing changed.
    pub tick: Duration,
}

/// A failing step, naming the rollout.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("reading the cluster to plan NodeRollout {name}: {source}")]
    Read {
        name: String,
        source: crate::live::Error,
    },
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

struct Shared {
    client: Client,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    leader: watch::Receiver<bool>,
    tick: Duration,
    events: EventSink,
    store: Store<NodeRollout>,
    /// Nodes claimed by the rollouts this process started (the store may not show their
    /// status yet); checked and updated under the lock, so two new rollouts never both claim.
    claims: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// What each running rollout's domains disrupt, read and written by every step under one
    /// lock (at most `maxUnavailableDomains` domains of one workload across rollouts).
    board: Board,
}

/// What a worker does next.
enum Next {
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
/// replica that stops leading stops them (the executor stops at its next step).
pub async fn run(r: Rollouts, mut shutdown: watch::Receiver<bool>) {
    let changed = Arc::new(Notify::new());
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(
            Api::<NodeRollout>::all(r.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    );
    let notify = changed.clone();
    let watch_task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                tracing::debug!(error = %e, "NodeRollout watch error; the watcher retries");
            }
            notify.notify_one();
        }
    });
    let _watch = AbortOnDrop(watch_task);
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
        tick: r.tick,
        store,
        claims: Mutex::default(),
        board: Board::default(),
    });
    let mut leader = r.leader;
    let mut workers: BTreeMap<String, watch::Sender<Option<Arc<NodeRollout>>>> = BTreeMap::new();
    // dropped with this future: a stopped controller stops its workers
    let mut tasks = tokio::task::JoinSet::new();
    let mut leader_open = true;
    tracing::info!("NodeRollout controller started");
    loop {
        while tasks.try_join_next().is_some() {}
        let rollouts = sh.store.sorted_state();
        let mut phases: BTreeMap<String, i64> = BTreeMap::new();
        for o in &rollouts {
            let phase = o.status.as_ref().and_then(|s| s.phase.clone());
            *phases
                .entry(phase.unwrap_or_else(|| pure::PENDING.into()))
                .or_default() += 1;
        }
        sh.metrics.refresh_rollouts(&phases);
        if *leader.borrow() {
            let names: BTreeSet<String> = rollouts.iter().map(|o| o.name_any()).collect();
            // a worker whose object is gone (or that ended) is dropped: its receiver closes
            workers.retain(|name, tx| names.contains(name) && !tx.is_closed());
            for o in rollouts {
                let name = o.name_any();
                match workers.get(&name) {
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
                    None => {
                        let (tx, rx) = watch::channel(Some(o));
                        tasks.spawn(worker(sh.clone(), name.clone(), rx));
                        workers.insert(name, tx);
                    }
                }
            }
        } else if !workers.is_empty() {
            tracing::info!("not leading: NodeRollout workers stop");
            workers.clear();
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
    workers.clear();
    // the workers see their channel close and stop at the executor's next step
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One rollout, while this replica leads and the object exists.
async fn worker(sh: Arc<Shared>, name: String, mut obj: watch::Receiver<Option<Arc<NodeRollout>>>) {
    let mut w = Worker {
        sh: sh.clone(),
        name: name.clone(),
        written: None,
        preflight: None,
        contract: None,
        given_back: None,
    };
    let mut failures = 0u32;
    loop {
        let Some(nro) = obj.borrow_and_update().clone() else {
            break;
        };
        let next = match w.step(&nro, &mut obj).await {
            Ok(next) => {
                failures = 0;
                next
            }
            Err(e) => {
                failures += 1;
                sh.metrics
                    .errors
                    .get_or_create(&super::metrics::StepLabels {
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
                let delay = super::backoff(failures);
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
    sh.claims.lock().await.remove(&name);
    sh.board.leave(&name);
}

/// The last status this worker wrote, and the `resourceVersion` the server gave it.
struct Written {
    status: NodeRolloutStatus,
    resource_version: Option<String>,
}

struct Worker {
    sh: Arc<Shared>,
    name: String,
    written: Option<Written>,
    /// The spec's group contract (`None`: no `groups`, no preflight).
    preflight: Option<PreflightOptions>,
    /// The last preflight's condition.
    contract: Option<pure::Contract>,
    /// The last Event published while giving the nodes of a deleted rollout back.
    given_back: Option<String>,
}

impl Worker {
    /// The status to start from: this worker's last write (the store may lag it), else the
    /// object's.
    fn current_status(&self, nro: &NodeRollout) -> Option<NodeRolloutStatus> {
        match &self.written {
            Some(w) => Some(w.status.clone()),
            None => nro.status.clone(),
        }
    }

    async fn step(
        &mut self,
        nro: &NodeRollout,
        obj: &mut watch::Receiver<Option<Arc<NodeRollout>>>,
    ) -> Result<Next, RolloutError> {
        let mut prev = self.current_status(nro);
        let prev_state: Option<State> = prev
            .as_ref()
            .and_then(|s| s.engine.as_deref())
            .and_then(|e| serde_json::from_str(e).ok());
        if let Some(next) = self.own(nro, prev_state.as_ref()).await? {
            return Ok(next);
        }
        if prev_state.as_ref().is_some_and(State::is_finished) {
            self.sh.claims.lock().await.remove(&self.name);
            return Ok(Next::WaitChange);
        }
        if self.selection_changed(nro, &mut prev).await? {
            return Ok(Next::WaitChange);
        }
        let options = match rollout_options(&nro.spec) {
            Ok(o) => o,
            Err(e) => {
                let why = NotReady {
                    reason: "InvalidSpec",
                    message: e.to_string(),
                };
                self.not_running(nro, prev.as_ref(), Some(&why), false)
                    .await?;
                return Ok(Next::WaitChange);
            }
        };
        self.preflight = options.preflight.clone();
        if options.paused {
            self.not_running(nro, prev.as_ref(), None, true).await?;
            return Ok(Next::WaitChange);
        }
        let mut engine = pure::engine_options(&options);
        engine.rollout = self.name.clone();
        let auto = options.taint_auto;
        let (state, base) = match prev_state {
            Some(state) => {
                let state = self.resumed(nro, prev.as_ref(), state).await;
                self.sh
                    .claims
                    .lock()
                    .await
                    .insert(self.name.clone(), state.nodes().map(String::from).collect());
                (state, prev)
            }
            None => match self.plan(nro, &engine, auto).await? {
                Ok((state, planned)) => {
                    // held before the first state is stored, so before any node is touched
                    if !self.set_finalizer(true).await? {
                        return Ok(Next::Retry);
                    }
                    if let Some(note) = pure::tolerating_note(&planned) {
                        self.publish(nro, true, pure::TOLERATE_CORDON, &note).await;
                    }
                    (state, Some(planned))
                }
                Err(why) => {
                    self.not_running(nro, prev.as_ref(), Some(&why), false)
                        .await?;
                    if why.reason == NO_ROOM {
                        return Ok(Next::RetryAfter(NO_ROOM_RETRY));
                    }
                    return Ok(Next::Retry);
                }
            },
        };
        if auto {
            engine.plan.taint = (state.taint_outdated == Some(true)).then(outdated_taint);
        }
        self.execute(nro, state, base, engine, obj).await
    }

    /// Whether the spec's selection differs from the one the started rollout runs on: then the
    /// rollout is held (its status says which field). A rollout started without a record gets
    /// the spec's in `prev`, written with its next status.
    async fn selection_changed(
        &mut self,
        nro: &NodeRollout,
        prev: &mut Option<NodeRolloutStatus>,
    ) -> Result<bool, RolloutError> {
        match lifecycle::check_selection(&nro.spec, prev.as_ref()) {
            SelectionCheck::Changed(why) => {
                tracing::warn!(rollout = %self.name, reason = why.reason, "{}", why.message);
                self.not_running(nro, prev.as_ref(), Some(&why), false)
                    .await?;
                return Ok(true);
            }
            SelectionCheck::Unrecorded(selection) => {
                if let Some(p) = prev.as_mut() {
                    p.selection = Some(selection);
                }
            }
            SelectionCheck::Free | SelectionCheck::Same => {}
        }
        Ok(false)
    }

    /// The stored `state` of a started rollout going on after a pause that stopped the executor
    /// (`spec.paused`, or a changed selection): its timers shifted over the pause, and an Event
    /// saying it goes on.
    async fn resumed(
        &self,
        nro: &NodeRollout,
        prev: Option<&NodeRolloutStatus>,
        state: State,
    ) -> State {
        let now = self.sh.clock.now();
        let by_spec = prev
            .and_then(|s| crate::conditions::find(&s.conditions, pure::PROGRESSING))
            .filter(|c| c.reason == "PausedBySpec")
            .map(|c| c.last_transition_time.0);
        if let Some(at) = by_spec {
            self.publish(nro, false, "Resumed", "spec.paused is false: going on")
                .await;
            return pure::after_spec_pause(&state, at, now);
        }
        if let Some(at) = lifecycle::selection_paused_at(prev) {
            let message = "the spec selects what the rollout started with again: going on";
            tracing::info!(rollout = %self.name, "{message}");
            self.publish(nro, false, lifecycle::SELECTION_RESTORED, message)
                .await;
            return pure::after_spec_pause(&state, at, now);
        }
        state
    }

    /// Plans the rollout from a fresh read of the cluster (and checks the group contract on
    /// it) and claims its nodes.
    async fn plan(
        &mut self,
        nro: &NodeRollout,
        options: &Options,
        taint_auto: bool,
    ) -> Result<Result<(State, NodeRolloutStatus), NotReady>, RolloutError> {
        let objects = crate::live::drain_objects(&self.sh.client)
            .await
            .map_err(|source| RolloutError::Read {
                name: self.name.clone(),
                source,
            })?;
        self.check_contract(nro, &objects).await;
        let now = self.sh.clock.now();
        let cluster = objects.cluster();
        let returns = match options.handoff {
            Handoff::None => Returns::Never,
            Handoff::Reboot { .. } | Handoff::Replace { .. } => Returns::AfterHandOff,
        };
        let mut options = options.clone();
        if taint_auto {
            let auto = match auto_taint(&cluster, &options.plan, now, returns) {
                Ok(a) => a,
                Err(e) => {
                    return Ok(Err(NotReady {
                        reason: plan_reason(&e),
                        message: plan_message(&e),
                    }));
                }
            };
            options.plan.taint = auto.taint.then(outdated_taint);
            if let Some(tainted) = &auto.skipped {
                let message = pure::taint_skipped(tainted);
                self.publish(nro, true, pure::TAINT_SKIPPED, &message).await;
            }
        }
        let (plan, found) = match plan_and_check(&cluster, &options, now, returns) {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        let mut state = match State::new(&plan, &options) {
            Ok(s) => s,
            Err(e) => {
                return Ok(Err(NotReady {
                    reason: "InvalidSpec",
                    message: e.to_string(),
                }));
            }
        };
        if taint_auto {
            state.taint_outdated = Some(options.plan.taint.is_some());
        }
        let skip = crate::meta::annotation(&nro.metadata, SKIP_ROOM_CHECK_ANNOTATION);
        let (dead, gate) = (&found.dead_ends, &found.gate_dead_ends);
        if let Some(why) = no_room(dead, gate, skip == Some("true")) {
            return Ok(Err(why));
        }
        if !found.is_empty() {
            tracing::warn!(rollout = %self.name, domains = found.domains(),
                "NodeRollout started without room for its groups ({SKIP_ROOM_CHECK_ANNOTATION}=true)");
        }
        let mine: BTreeSet<String> = state.nodes().map(String::from).collect();
        let mut claims = self.sh.claims.lock().await;
        let others: Vec<(String, BTreeSet<String>)> = self
            .sh
            .store
            .sorted_state()
            .iter()
            .filter(|o| o.name_any() != self.name)
            .filter_map(|o| Some((o.name_any(), pure::claimed_nodes(o.status.as_ref())?)))
            .chain(
                claims
                    .iter()
                    .filter(|(k, _)| **k != self.name)
                    .map(|(k, v)| (k.clone(), v.clone())),
            )
            .collect();
        if let Some((other, nodes)) = pure::conflict(&mine, &others) {
            return Ok(Err(NotReady {
                reason: "NodeConflict",
                message: format!(
                    "node(s) {} are drained by NodeRollout {other}, which is still active: this \
                     rollout waits until {other} completes or fails (or is deleted)",
                    nodes.join(", ")
                ),
            }));
        }
        claims.insert(self.name.clone(), mine);
        for d in &plan.domains {
            tracing::info!(rollout = %self.name, domain = %d.name, nodes = d.nodes.len(),
                protected = d.phase1.len(), unprotected = d.phase2.len(), "NodeRollout planned");
        }
        let mut planned = pure::planned(&plan);
        planned.selection = Some(RolloutSelection::of(&nro.spec));
        Ok(Ok((state, planned)))
    }

    /// Runs the executor from `state` until it finishes or the object changes generation (or
    /// goes, or this replica stops leading), writing the status on the way.
    async fn execute(
        &mut self,
        nro: &NodeRollout,
        state: State,
        base: Option<NodeRolloutStatus>,
        options: Options,
        obj: &mut watch::Receiver<Option<Arc<NodeRollout>>>,
    ) -> Result<Next, RolloutError> {
        let generation = nro.metadata.generation;
        let mut last = state.clone();
        let now = self.sh.clock.now();
        let mut first = pure::status(base.as_ref(), &state, generation, now);
        self.with_contract(&mut first, generation, now);
        self.write(nro, first).await?;
        let resume_count = |o: &NodeRollout| {
            pure::resumes(crate::meta::annotation(
                &o.metadata,
                pure::RESUME_ANNOTATION,
            ))
        };
        let (resume_tx, resume_rx) = watch::channel(resume_count(nro));
        let (progress_tx, mut progress_rx) = watch::channel(state.clone());
        let mut stop = obj.clone();
        let stopped = async move {
            let _ = stop
                .wait_for(|o| {
                    o.as_ref().is_none_or(|o| {
                        o.metadata.generation != generation
                            || o.metadata.deletion_timestamp.is_some()
                    })
                })
                .await;
        };
        // the executor stores each state with new evictions here before it sends them
        let (ahead_tx, mut ahead_rx) = mpsc::channel::<WriteAhead>(1);
        // the group contract over the executor's stores, when they sync and every CONTRACT_EVERY
        let (contract_tx, mut contract_rx) = watch::channel::<Option<pure::Contract>>(None);
        let observer = self.preflight.clone().map(|preflight| Observer {
            every: CONTRACT_EVERY,
            look: Box::new(move |cluster: &crate::drain::Cluster<'_>| {
                let findings = crate::drain::preflight(cluster, &preflight);
                contract_tx.send_replace(Some(pure::contract(findings.as_deref())));
            }),
        });
        let store = self.sh.store.clone();
        let cache = std::sync::Mutex::new(StoredDisruptions::default());
        let peers = Peers {
            board: self.sh.board.clone(),
            name: self.name.clone(),
            stored: Box::new(move || {
                let mut cache = cache
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                cache.read(&store)
            }),
        };
        let run = Run {
            options,
            state: Some(state),
            tick: self.sh.tick,
            resumes: resume_rx,
            write_ahead: Some(ahead_tx),
            observer,
            peers: Some(peers),
        };
        let exec = executor::run(
            self.sh.client.clone(),
            self.sh.clock.clone(),
            run,
            move |s: &State| {
                progress_tx.send_replace(s.clone());
            },
            stopped,
        );
        let mut exec = std::pin::pin!(exec);
        let mut current = Arc::new(nro.clone());
        let (mut progress_open, mut obj_open) = (true, true);
        let mut last_write = self.sh.clock.monotonic();
        let mut contract_open = true;
        let end = loop {
            tokio::select! {
                biased;
                end = &mut exec => break end,
                Some(ahead) = ahead_rx.recv() => {
                    // what the executor reported before is older than this state
                    progress_rx.mark_unchanged();
                    self.report(&current, &mut last, ahead.state).await?;
                    last_write = self.sh.clock.monotonic();
                    let _ = ahead.stored.send(true);
                }
                r = contract_rx.changed(), if contract_open => {
                    if r.is_err() {
                        contract_open = false;
                        continue;
                    }
                    let Some(new) = contract_rx.borrow_and_update().clone() else {
                        continue;
                    };
                    let before = self.contract.clone();
                    self.take_contract(&current, new).await;
                    if self.contract != before {
                        let s = progress_rx.borrow().clone();
                        self.report(&current, &mut last, s).await?;
                        last_write = self.sh.clock.monotonic();
                    }
                }
                r = progress_rx.changed(), if progress_open => {
                    if r.is_err() {
                        progress_open = false;
                        continue;
                    }
                    let s = progress_rx.borrow_and_update().clone();
                    let due = self.sh.clock.monotonic().saturating_since(last_write) >= STATUS_EVERY;
                    if pure::needs_write_now(&last, &s) || due {
                        self.report(&current, &mut last, s).await?;
                        last_write = self.sh.clock.monotonic();
                    }
                }
                r = obj.changed(), if obj_open => {
                    if r.is_err() {
                        obj_open = false;
                        continue;
                    }
                    if let Some(o) = obj.borrow().clone() {
                        resume_tx.send_replace(resume_count(&o));
                        current = o;
                    }
                }
            }
        };
        let end = end.map_err(|source| RolloutError::Executor {
            name: self.name.clone(),
            source,
        })?;
        self.report(&current, &mut last, end.clone()).await?;
        if end.is_finished() {
            self.sh.claims.lock().await.remove(&self.name);
            return Ok(Next::WaitChange);
        }
        // stopped by a spec change (e.g. paused), a deleted object or lost leadership
        Ok(Next::Again)
    }

    /// Writes the status for `state`, publishes the Events of the change from `last` and counts it.
    async fn report(
        &mut self,
        nro: &NodeRollout,
        last: &mut State,
        state: State,
    ) -> Result<(), RolloutError> {
        let now = self.sh.clock.now();
        let prev = self.current_status(nro);
        let mut status = pure::status(prev.as_ref(), &state, nro.metadata.generation, now);
        self.with_contract(&mut status, nro.metadata.generation, now);
        self.write(nro, status).await?;
        let (notes, counts) = pure::changes(last, &state, now);
        self.sh.metrics.count_rollout(&counts);
        for n in notes {
            self.publish(nro, n.warning, n.reason, &n.message).await;
        }
        *last = state;
        Ok(())
    }

    /// The status of a rollout that does not run (bad spec, plan not possible, conflict,
    /// paused), with an Event when it says something new.
    async fn not_running(
        &mut self,
        nro: &NodeRollout,
        prev: Option<&NodeRolloutStatus>,
        why: Option<&NotReady>,
        paused: bool,
    ) -> Result<(), RolloutError> {
        let now = self.sh.clock.now();
        let mut status = pure::waiting_status(prev, why, paused, nro.metadata.generation, now);
        self.with_contract(&mut status, nro.metadata.generation, now);
        let condition = |s: Option<&NodeRolloutStatus>, t: &str| {
            s.and_then(|s| crate::conditions::find(&s.conditions, t))
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let news = condition(prev, pure::READY) != condition(Some(&status), pure::READY)
            || condition(prev, pure::PROGRESSING) != condition(Some(&status), pure::PROGRESSING);
        if prev == Some(&status) {
            return Ok(());
        }
        self.write(nro, status).await?;
        if news {
            match (why, paused) {
                (Some(why), _) => self.publish(nro, true, why.reason, &why.message).await,
                (None, true) => {
                    self.publish(
                        nro,
                        false,
                        "Paused",
                        "spec.paused is true: no new evictions; those already sent finish",
                    )
                    .await
                }
                (None, false) => {}
            }
        }
        Ok(())
    }

    /// Runs the group contract's preflight on the plan's read and keeps its condition; an Event
    /// when it turns.
    async fn check_contract(&mut self, nro: &NodeRollout, objects: &crate::live::DrainObjects) {
        let Some(preflight) = self.preflight.clone() else {
            self.contract = None;
            return;
        };
        let findings = crate::drain::preflight(&objects.cluster(), &preflight);
        self.take_contract(nro, pure::contract(findings.as_deref()))
            .await;
    }

    /// Keeps `new` as the contract's condition; an Event when it turns.
    async fn take_contract(&mut self, nro: &NodeRollout, new: pure::Contract) {
        // a new worker (a new leader) knows the condition from the status
        let old = self.contract.clone().or_else(|| {
            let status = self.current_status(nro)?;
            let c = crate::conditions::find(&status.conditions, pure::CONTRACT_SATISFIED)?;
            Some(pure::Contract {
                status: match c.status.as_str() {
                    "True" => "True",
                    "False" => "False",
                    _ => "Unknown",
                },
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
        });
        if let Some(note) = pure::contract_note(old.as_ref(), &new) {
            tracing::info!(rollout = %self.name, reason = note.reason, "{}", note.message);
            self.publish(nro, note.warning, note.reason, &note.message)
                .await;
        }
        self.contract = Some(new);
    }

    /// Puts the contract's condition on `status` (removes it when the spec has no `groups`).
    fn with_contract(
        &self,
        status: &mut NodeRolloutStatus,
        generation: Option<i64>,
        now: k8s_openapi::jiff::Timestamp,
    ) {
        match (&self.preflight, &self.contract) {
            (None, _) => pure::set_contract(status, None, generation, now),
            (Some(_), Some(c)) => pure::set_contract(status, Some(c), generation, now),
            (Some(_), None) => {}
        }
    }

    /// A merge patch of the whole status, guarded by the `resourceVersion` of this worker's last
    /// write (or of the object it read): a 409 re-reads, and goes on only if the status there is
    /// still the one this worker knows.
    async fn write(
        &mut self,
        nro: &NodeRollout,
        status: NodeRolloutStatus,
    ) -> Result<(), RolloutError> {
        if !*self.sh.leader.borrow() {
            return Err(RolloutError::NotLeader {
                name: self.name.clone(),
            });
        }
        let api: Api<NodeRollout> = Api::all(self.sh.client.clone());
        let mut rv = match &self.written {
            Some(w) => w.resource_version.clone(),
            None => nro.metadata.resource_version.clone(),
        };
        let known = self.current_status(nro);
        for attempt in 0..2 {
            let body =
                json!({"metadata": {"resourceVersion": rv}, "status": status_patch(&status)});
            match api
                .patch_status(
                    &self.name,
                    &super::merge_params(ROLLOUT_MANAGER),
                    &Patch::Merge(&body),
                )
                .await
            {
                Ok(o) => {
                    self.written = Some(Written {
                        status,
                        resource_version: o.metadata.resource_version,
                    });
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {
                    let fresh =
                        api.get(&self.name)
                            .await
                            .map_err(|source| RolloutError::Reread {
                                name: self.name.clone(),
                                source,
                            })?;
                    let engine = |s: Option<&NodeRolloutStatus>| s.and_then(|s| s.engine.clone());
                    if engine(fresh.status.as_ref()) != engine(known.as_ref()) {
                        self.written = None;
                        return Err(RolloutError::Superseded {
                            name: self.name.clone(),
                        });
                    }
                    rv = fresh.metadata.resource_version;
                }
                Err(source) => {
                    return Err(RolloutError::WriteStatus {
                        name: self.name.clone(),
                        source,
                    });
                }
            }
        }
        Err(RolloutError::Superseded {
            name: self.name.clone(),
        })
    }

    async fn publish(&self, nro: &NodeRollout, warning: bool, reason: &'static str, message: &str) {
        if !*self.sh.leader.borrow() {
            return;
        }
        let on = ObjectReference {
            api_version: Some("raygate.io/v1alpha1".into()),
            kind: Some("NodeRollout".into()),
            name: Some(self.name.clone()),
            uid: nro.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let event = crate::gate::GateEvent {
            type_: if warning {
                crate::gate::EventType::Warning
            } else {
                crate::gate::EventType::Normal
            },
            reason,
            message: message.to_string(),
            child: None,
        };
        self.sh.events.publish(&on, &event).await;
    }
}

/// The status as a merge patch: fields that are unset now are removed (`null`), lists replaced.
fn status_patch(status: &NodeRolloutStatus) -> Value {
    let mut v = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(map) = v.as_object_mut() {
        for key in [
            "phase",
            "currentDomain",
            "progress",
            "targetGeneration",
            "observedGeneration",
            "selection",
            "engine",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
        for key in ["domains", "conditions"] {
            map.entry(key).or_insert(json!([]));
        }
    }
    v
}

/// Why a rollout whose plan cannot finish is not started (`None`: it can, or the operator said
/// to start anyway).
/// The plan of `options` on `cluster` and its dead ends (nothing is decided on them here).
fn plan_and_check<'a>(
    cluster: &crate::drain::Cluster<'a>,
    options: &Options,
    now: k8s_openapi::jiff::Timestamp,
    returns: Returns,
) -> Result<(crate::drain::Plan<'a>, NoRoom), NotReady> {
    let plan = crate::drain::plan(cluster, &options.plan, now).map_err(|e| NotReady {
        reason: plan_reason(&e),
        message: plan_message(&e),
    })?;
    let found = NoRoom::check(cluster, &plan, &options.plan, returns);
    Ok((plan, found))
}

fn no_room(dead: &[DeadEnd], gate: &[GateDeadEnd], skip: bool) -> Option<NotReady> {
    let found = NoRoom {
        dead_ends: dead.to_vec(),
        gate_dead_ends: gate.to_vec(),
    };
    if found.is_empty() || skip {
        return None;
    }
    Some(NotReady {
        reason: NO_ROOM,
        message: format!(
            "{}. Nothing was cordoned or evicted; the plan is checked again every minute (or when \
             the rollout changes); to start anyway (e.g. an autoscaler adds nodes for pending \
             pods), annotate the rollout {SKIP_ROOM_CHECK_ANNOTATION}=true",
            found.message(),
        ),
    })
}

/// The `Ready=False` reason for a plan the cluster does not allow.
fn plan_reason(e: &DrainError) -> &'static str {
    match e {
        DrainError::UnknownDomainLabel { .. } => "UnknownDomainLabel",
        DrainError::NodesWithoutDomain { .. } => "NodesWithoutDomain",
        DrainError::NoNodesMatched { .. } => "NoNodesMatched",
        DrainError::NoGeneration { .. } => "NoGeneration",
        DrainError::UnknownDomain { .. } | DrainError::DomainsNotListed { .. } => {
            "ExplicitOrderMismatch"
        }
        _ => "InvalidSpec",
    }
}

/// The plan's error with what to do about it.
fn plan_message(e: &DrainError) -> String {
    let fix = match e {
        DrainError::UnknownDomainLabel { .. } => {
            "; label the nodes with their upgrade domain, or set spec.udLabel to the label they carry"
        }
        DrainError::NodesWithoutDomain { .. } => {
            "; label those nodes with their upgrade domain, or leave them out with spec.nodeSelector"
        }
        DrainError::NoNodesMatched { .. } => {
            "; check spec.nodeSelector and spec.generation against the nodes' labels (nothing was drained)"
        }
        _ => "",
    };
    format!("{e}{fix}; nothing was cordoned or evicted")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_patch_clears_what_is_no_longer_set() {
        let s = NodeRolloutStatus {
            phase: Some("Completed".into()),
            ..NodeRolloutStatus::default()
        };
        let v = status_patch(&s);
        assert_eq!(v["phase"], "Completed");
        assert_eq!(v["currentDomain"], Value::Null);
        assert!(v.get("currentDomain").is_some());
        assert_eq!(v["domains"], json!([]));
    }

    #[test]
    fn a_plan_that_cannot_finish_holds_the_rollout_unless_the_operator_says_start() {
        let dead = DeadEnd {
            domain: "ud-0".into(),
            pdb: "serving/leaders".into(),
            groups: vec!["a".into(), "b".into()],
            tolerated: 1,
            must_move: 1,
            moved_before: 0,
            room: 0,
            group_requests: "nvidia.com/gpu 2, pods 2".into(),
        };
        assert_eq!(no_room(&[], &[], false), None);
        assert_eq!(no_room(std::slice::from_ref(&dead), &[], true), None);
        let why = no_room(&[dead], &[], false).unwrap();
        assert_eq!(why.reason, NO_ROOM);
        for says in [
            "1 upgrade domain(s) cannot be drained",
            "upgrade domain ud-0 holds 2 group(s)",
            "Nothing was cordoned or evicted",
            "raygate.io/skip-room-check=true",
        ] {
            assert!(why.message.contains(says), "{}", why.message);
        }
    }

    #[test]
    fn a_health_gate_without_room_holds_the_rollout_under_the_same_reason() {
        let gate = GateDeadEnd {
            domain: "ud-1".into(),
            groups: vec!["b".into()],
            moved_before: 2,
            taint_outdated: false,
            room_without_taint: false,
            requests: "nvidia.com/gpu 6, pods 6".into(),
            free: "nvidia.com/gpu 4, pods 108".into(),
            short: "nvidia.com/gpu 2".into(),
            room: Some(2),
            group_requests: Some("nvidia.com/gpu 2, pods 2".into()),
        };
        assert_eq!(no_room(&[], std::slice::from_ref(&gate), true), None);
        let why = no_room(&[], &[gate], false).unwrap();
        assert_eq!(why.reason, NO_ROOM);
        for says in [
            "1 upgrade domain(s) would fail their health check",
            "upgrade domain ud-1: with hand-off None its nodes stay cordoned",
            "Fix: add capacity outside the domains drained so far",
            "Nothing was cordoned or evicted",
            "raygate.io/skip-room-check=true",
        ] {
            assert!(why.message.contains(says), "{}", why.message);
        }
    }

    #[test]
    fn a_plan_error_says_what_to_fix_and_that_nothing_was_touched() {
        let e = DrainError::UnknownDomainLabel {
            key: "topology.example.com/ud".into(),
        };
        assert_eq!(plan_reason(&e), "UnknownDomainLabel");
        let m = plan_message(&e);
        assert!(
            m.starts_with("no node carries the upgrade-domain label"),
            "{m}"
        );
        assert!(m.ends_with("nothing was cordoned or evicted"), "{m}");
    }
}
