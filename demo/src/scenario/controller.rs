//! raygate's controller in a story: started on the sim's clock, killed at once or right after
//! its next writes are committed (a crash at a write boundary), restarted as its Deployment
//! would restart a crashed pod.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use kube::Client;
use raygate_sim::Sim;
use tokio::sync::watch;

/// raygate's controller, which a timeline kills and restarts.
pub(super) struct Controller {
    sim: Sim,
    running: Option<(watch::Sender<()>, tokio::task::JoinHandle<()>)>,
    /// The running controller's client's write budget ([`DiesAfterWrites`]).
    writes_left: Arc<AtomicU64>,
    /// Set by a `restartController` that finds raygate still running with a kill armed that has
    /// not landed: the controller's task starts it again right after the kill.
    restart_after_kill: Arc<AtomicBool>,
    pod_gate: bool,
    /// Run the NodeRollout controller (the NodeRollout CRD is served).
    node_rollouts: bool,
}

impl Controller {
    /// Not started yet.
    pub(super) fn new(sim: Sim, pod_gate: bool, node_rollouts: bool) -> Self {
        Controller {
            sim,
            running: None,
            writes_left: Arc::new(AtomicU64::new(u64::MAX)),
            restart_after_kill: Arc::default(),
            pod_gate,
            node_rollouts,
        }
    }

    /// Starts raygate's controller. When it still runs this does nothing, unless a kill armed by
    /// `killController: {afterWrites: N}` has not landed yet (raygate wrote less than N times
    /// since): then raygate is started again right after that kill, as its Deployment would
    /// restart a crashed pod. Without that, a kill landing after the timeline's restart left
    /// raygate dead for the rest of the story (seed 207: an old slice never finished).
    pub(super) fn start(&mut self) {
        use std::sync::atomic::Ordering::SeqCst;
        if self
            .running
            .as_ref()
            .is_some_and(|(_, handle)| !handle.is_finished())
        {
            let armed = (1..u64::MAX).contains(&self.writes_left.load(SeqCst));
            if armed {
                tracing::info!(
                    "raygate's controller still runs with a kill armed: it restarts right after the kill"
                );
                self.restart_after_kill.store(true, SeqCst);
            }
            return;
        }
        self.restart_after_kill.store(false, SeqCst);
        let left = Arc::new(AtomicU64::new(u64::MAX));
        self.writes_left = left.clone();
        let (tx, rx) = watch::channel(());
        let sim = self.sim.clone();
        let restart = self.restart_after_kill.clone();
        let clock: Arc<dyn raygate::runtime::Clock> = Arc::new(self.sim.clock().clone());
        let config = raygate::controller::Config {
            admission_resync: Duration::from_millis(500),
            pod_gate: self.pod_gate,
            node_rollouts: self.node_rollouts,
            ..Default::default()
        };
        let handle = tokio::spawn(async move {
            loop {
                let dies = DiesAfterWrites::new(
                    raygate_sim::server::service::SimService::new(sim.clone())
                        .with_user_agent("raygate"),
                    left.clone(),
                );
                let dead = dies.dead.clone();
                let client = Client::new(dies, "default");
                let mut rx = rx.clone();
                let run = raygate::controller::run_with(
                    client,
                    config.clone(),
                    clock.clone(),
                    async move {
                        let _ = rx.changed().await;
                    },
                );
                tokio::select! {
                    biased;
                    r = run => {
                        if let Err(e) = r {
                            tracing::error!(error = %e, "raygate's controller stopped");
                        }
                        return;
                    },
                    () = dead.notified() => {
                        tracing::info!("raygate's controller killed right after a write");
                    }
                }
                if !restart.swap(false, SeqCst) {
                    return;
                }
                tracing::info!("raygate's controller restarted after its kill");
            }
        });
        self.running = Some((tx, handle));
    }

    /// Arms a kill: raygate dies right after its next `n` writes are committed.
    pub(super) fn kill_after_writes(&self, n: u64) {
        self.writes_left
            .store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// No graceful shutdown: the process is gone.
    pub(super) async fn kill(&mut self) {
        if let Some((_, handle)) = self.running.take() {
            handle.abort();
            let _ = handle.await;
        }
    }
}

/// raygate's client that dies at a write boundary: with `left` = n (not `u64::MAX`), the n-th
/// write from now is committed and then nothing more is answered (that answer included, as when
/// the process dies before reading it); `dead` is notified so the runner ends the controller's
/// task. The sim's own copy of `DiesAfterEviction` (sim/tests/rollout.rs), for any write.
#[derive(Clone)]
struct DiesAfterWrites {
    inner: raygate_sim::server::service::SimService,
    left: Arc<AtomicU64>,
    dead: Arc<tokio::sync::Notify>,
    gone: Arc<AtomicBool>,
}

impl DiesAfterWrites {
    /// `left`: the write budget, shared with the runner (which arms the kill through it).
    fn new(inner: raygate_sim::server::service::SimService, left: Arc<AtomicU64>) -> Self {
        DiesAfterWrites {
            inner,
            left,
            dead: Arc::new(tokio::sync::Notify::new()),
            gone: Arc::new(AtomicBool::new(false)),
        }
    }
}

type SimResponse = raygate_sim::http::Response<raygate_sim::server::service::ResponseBody>;

impl tower_service::Service<raygate_sim::http::Request<kube::client::Body>> for DiesAfterWrites {
    type Response = SimResponse;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<SimResponse, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: raygate_sim::http::Request<kube::client::Body>) -> Self::Future {
        use std::sync::atomic::Ordering::SeqCst;
        if self.gone.load(SeqCst) {
            return Box::pin(futures::future::pending());
        }
        let write = req.method() != raygate_sim::http::Method::GET;
        let counted = write
            && self
                .left
                .fetch_update(SeqCst, SeqCst, |n| (n != u64::MAX && n > 0).then(|| n - 1))
                .is_ok_and(|n| n == 1);
        if counted {
            // the last write allowed: nothing after it is answered
            self.gone.store(true, SeqCst);
        }
        let served = self.inner.call(req);
        let (gone, dead) = (self.gone.clone(), self.dead.clone());
        Box::pin(async move {
            let resp = served.await?;
            if gone.load(SeqCst) {
                if counted {
                    dead.notify_one();
                }
                return futures::future::pending().await;
            }
            Ok(resp)
        })
    }
}
