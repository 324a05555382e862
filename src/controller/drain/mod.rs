//! The drain (IO), in the gate's shape: observe Nodes, Pods and PodDisruptionBudgets (and
//! DaemonSets, where they can be listed: `kubectl drain`'s rule for a pod whose DaemonSet is gone)
//! through reflector stores ([`read`]) → [`engine::decide`] → apply (evictions through the
//! Eviction API, node patches under [`DRAIN_MANAGER`], an Event per report: `apply`) → report
//! each new state to one [`Sink`]. One loop for `raygate drain run --local` (its sink prints) and
//! for each NodeRollout the controller runs ([`rollout`]: its sink is the rollout's status).

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;

use super::Clock;
use super::peers::Peers;
use crate::drain::engine::{self, Action, Disruption, Observation, Options, Outcome, State};
use crate::drain::{Cluster, DrainError};

mod apply;
mod ownership;
pub mod read;
mod report;
pub mod rollout;
mod start;

use apply::{Apply, apply_node_actions};
pub use read::ServiceStores;
use read::{Copies, DrainObjects, DrainStores, Services, Watches};

/// Field manager of the drain's node patches (cordon, taint, upgrade label, uncordon).
pub const DRAIN_MANAGER: &str = "raygate-drain";

/// Why a drain could not run (a failing write is not one: the engine retries it).
#[derive(Debug, thiserror::Error)]
pub enum DrainRunError {
    #[error("planning the drain: {0}")]
    Plan(#[source] DrainError),
    #[error("starting the drain: {0}")]
    Engine(#[source] engine::EngineError),
    #[error("the watches ended before they listed every {kind}")]
    NotSynced { kind: &'static str },
}

/// How the loop runs.
pub struct Run {
    pub options: Options,
    /// Where to go on from (a previous run's state); `None`: plan afresh.
    pub state: Option<State>,
    /// How often to decide when nothing changed (timers: stable period, Retry-After, timeouts).
    pub tick: Duration,
    /// The operator's resumes (a counter, see [`Observation::resumes`]) for [`run`]; a rollout's
    /// come from its object.
    pub resumes: watch::Receiver<u64>,
    /// The other NodeRollouts this drain weighs ([`Observation::elsewhere`]). `None` (`drain
    /// run --local`): none.
    pub peers: Option<Peers>,
    /// Stores shared with other drains (every NodeRollout the leader runs reads one set).
    /// `None`: the loop watches for itself while it runs.
    pub stores: Option<DrainStores>,
}

impl Run {
    pub fn new(options: Options) -> Self {
        Run {
            options,
            state: None,
            tick: Duration::from_secs(1),
            resumes: watch::channel(0).1,
            peers: None,
            stores: None,
        }
    }
}

/// Where the loop's states go, and where the operator's resumes come from. `Break` from any of
/// them ends the loop with the state so far.
pub(crate) trait Sink {
    /// The operator's resumes now (a counter, see [`Observation::resumes`]).
    fn resumes(&mut self) -> u64;
    /// Whether the operator asked to abort (see [`Observation::abort`]); it wakes the loop as a
    /// resume does.
    fn abort_asked(&mut self) -> bool;
    /// Resolves when the resumes may have changed; once they cannot, only once more.
    async fn resumed(&mut self);
    /// Stores `state` before its step's evictions are sent: the engine's bookkeeping for an
    /// eviction (the workload's baseline, the eviction itself) is then never lost to a crash
    /// right after it. `Continue(false)`: nothing of the step is applied; it is decided again.
    async fn ahead(&mut self, state: &State) -> ControlFlow<(), bool>;
    /// Every new state, once its step is applied.
    async fn progress(&mut self, state: &State) -> ControlFlow<()>;
    /// A look at the loop's stores before each step, on the snapshot that step decides on, with
    /// the state so far: keep it short.
    async fn look(&mut self, cluster: &Cluster<'_>, state: &State) -> ControlFlow<()>;
}

/// `drain run --local`'s sink: nothing is stored, `progress` sees every new state.
struct Progress<F> {
    see: F,
    resumes: watch::Receiver<u64>,
    /// A closed resume channel (nobody can resume) must not wake the loop over and over.
    open: bool,
}

impl<F: FnMut(&State)> Sink for Progress<F> {
    fn resumes(&mut self) -> u64 {
        *self.resumes.borrow()
    }

    /// `drain run --local` is stopped with Ctrl-C; nothing asks it to abort.
    fn abort_asked(&mut self) -> bool {
        false
    }

    async fn resumed(&mut self) {
        match self.open {
            true => self.open = self.resumes.changed().await.is_ok(),
            false => std::future::pending().await,
        }
    }

    async fn ahead(&mut self, _: &State) -> ControlFlow<(), bool> {
        ControlFlow::Continue(true)
    }

    async fn progress(&mut self, state: &State) -> ControlFlow<()> {
        (self.see)(state);
        ControlFlow::Continue(())
    }

    async fn look(&mut self, _: &Cluster<'_>, _: &State) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// Runs the drain until it completes or fails, or `shutdown` resolves (Ctrl-C: the state so far
/// is returned, nodes stay as they are). `progress` sees every new state.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    mut run: Run,
    progress: impl FnMut(&State),
    shutdown: impl Future<Output = ()>,
) -> Result<State, DrainRunError> {
    let resumes = std::mem::replace(&mut run.resumes, watch::channel(0).1);
    let mut sink = Progress {
        see: progress,
        resumes,
        open: true,
    };
    run_with(client, clock, run, &mut sink, shutdown).await
}

/// Runs the drain as [`run`] does, its states going to `sink`.
pub(crate) async fn run_with<S: Sink>(
    client: Client,
    clock: Arc<dyn Clock>,
    mut run: Run,
    sink: &mut S,
    shutdown: impl Future<Output = ()>,
) -> Result<State, DrainRunError> {
    let (stores, watches) = match run.stores.take() {
        Some(shared) => (shared, None),
        None => {
            let mut own = Watches::start(&client, Services::Own).await;
            own.synced().await?;
            (own.stores.clone(), Some(own))
        }
    };
    let state = match run.state.take() {
        Some(state) => state,
        None => {
            stores.ready.wait().await;
            plan(&stores.snapshot(), &run.options, clock.now())?
        }
    };
    let drain = Drain {
        apply: Apply::new(client, clock.clone()),
        clock,
        run,
        stores,
        _watches: watches,
        changes_open: true,
        copies: Copies::default(),
        outcomes: Vec::new(),
        state,
    };
    drain.drive(sink, shutdown).await
}

/// The first state of a drain planned afresh on `objects`.
fn plan(
    objects: &DrainObjects,
    options: &Options,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<State, DrainRunError> {
    let plan =
        crate::drain::plan(&objects.cluster(), &options.plan, now).map_err(DrainRunError::Plan)?;
    for d in &plan.domains {
        tracing::info!(
            domain = %d.name,
            nodes = d.nodes.len(),
            protected = d.phase1.len(),
            unprotected = d.phase2.len(),
            "drain plan"
        );
    }
    State::new(&plan, options).map_err(DrainRunError::Engine)
}

/// One running drain.
struct Drain {
    apply: Apply,
    clock: Arc<dyn Clock>,
    run: Run,
    stores: DrainStores,
    /// The loop's own watches (`None`: the stores are shared); dropped, they stop.
    _watches: Option<Watches>,
    /// A closed change counter (the watches are gone) must not wake the loop over and over.
    changes_open: bool,
    copies: Copies,
    /// The outcomes of the evictions sent by the last step applied.
    outcomes: Vec<Outcome>,
    state: State,
}

/// What a step asks of the loop.
enum Step {
    /// The drain finished, or the sink ended it.
    End,
    /// Decide again after the tick (the sink did not store the state).
    Tick,
    /// Decide again soon: what was just applied shows in the stores.
    Soon,
    /// Decide again when something changes (or the tick's timers are due).
    Change,
}

impl Drain {
    async fn drive<S: Sink>(
        mut self,
        sink: &mut S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<State, DrainRunError> {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            if !self.stores.ready.pending().is_empty() {
                // a watch is re-listing (410 Gone): decide again on its complete new list
                tokio::select! {
                    biased;
                    () = self.stores.ready.wait() => {}
                    _ = &mut shutdown => return Ok(self.state),
                }
            }
            let wait = match self.step(sink).await {
                Step::End => return Ok(self.state),
                Step::Tick => self.run.tick,
                Step::Soon => Duration::from_millis(100),
                Step::Change => {
                    tokio::select! {
                        biased;
                        r = self.stores.changes.changed(), if self.changes_open => {
                            self.changes_open = r.is_ok();
                        }
                        () = sink.resumed() => {}
                        _ = tokio::time::sleep(self.run.tick) => {}
                        _ = &mut shutdown => return Ok(self.state),
                    }
                    continue;
                }
            };
            tokio::select! {
                biased;
                _ = tokio::time::sleep(wait) => {}
                _ = &mut shutdown => return Ok(self.state),
            }
        }
    }

    /// Observe → decide → store ahead → apply → report.
    async fn step<S: Sink>(&mut self, sink: &mut S) -> Step {
        let services = self.copies.services(&self.stores);
        let cluster = self.copies.refresh(&self.stores);
        if sink.look(&cluster, &self.state).await.is_break() {
            return Step::End;
        }
        let obs = Observation {
            nodes: cluster.nodes,
            pods: cluster.pods,
            pdbs: cluster.pdbs,
            daemon_sets: cluster.daemon_sets,
            outcomes: &self.outcomes,
            resumes: sink.resumes(),
            abort: sink.abort_asked(),
            elsewhere: &[],
            services: &services,
        };
        let (next, actions) = decide(&self.run, &self.state, obs, self.clock.now());
        let evicts = actions
            .iter()
            .any(|a| matches!(a, Action::Evict { dry_run: false, .. }));
        if evicts {
            match sink.ahead(&next).await {
                ControlFlow::Break(()) => return Step::End,
                ControlFlow::Continue(true) => {}
                ControlFlow::Continue(false) => {
                    // nothing of this step is applied; the outcomes so far are taken next time
                    tracing::info!("drain: the state was not stored; its evictions wait");
                    return Step::Tick;
                }
            }
        }
        self.outcomes = self.apply.all(&actions, cluster.nodes).await;
        if shape(&next.waiting) != shape(&self.state.waiting) || next.phase != self.state.phase {
            tracing::info!(phase = ?next.phase, "drain: {}", next.waiting);
        }
        let changed = next != self.state;
        self.state = next;
        if changed && sink.progress(&self.state).await.is_break() {
            return Step::End;
        }
        if self.state.is_finished() {
            return Step::End;
        }
        match !self.outcomes.is_empty()
            || actions.iter().any(|a| !matches!(a, Action::Report { .. }))
        {
            true => Step::Soon,
            false => Step::Change,
        }
    }
}

/// The engine's next state and actions, weighed against the other rollouts' disruptions where
/// this drain has peers.
fn decide(
    run: &Run,
    state: &State,
    obs: Observation<'_>,
    now: k8s_openapi::jiff::Timestamp,
) -> (State, Vec<Action>) {
    let decide = |elsewhere: &[Disruption]| {
        let obs = Observation { elsewhere, ..obs };
        engine::decide(state, &obs, now, &run.options)
    };
    match &run.peers {
        Some(p) => p.board.step(&p.name, &*p.stored, decide),
        None => decide(&[]),
    }
}

/// A status line without its numbers: counters and timers ticking are not news for the log.
fn shape(line: &str) -> String {
    line.chars().filter(|c| !c.is_ascii_digit()).collect()
}
