//! What the NodeRollout tests on the simulated cluster share: raygate's NodeRollout controller
//! running on a sim, on the sim's clock.
#![allow(dead_code)] // each test binary uses a part

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use raygate::controller::drain::rollout::{self, Rollouts};
use raygate::controller::{Fence, Metrics};
use raygate_sim::Sim;
use tokio::sync::watch;

/// The NodeRollout controller's inputs on `sim`: `client`, the sim's clock, always leading and
/// never fenced, as `raygate-0`, deciding every second.
pub fn rollouts(sim: &Sim, client: Client, metrics: Arc<Metrics>) -> Rollouts {
    Rollouts {
        client,
        clock: Arc::new(sim.clock().clone()),
        metrics,
        leader: watch::channel(true).1,
        fence: Fence::open(),
        identity: "raygate-0".into(),
        tick: Duration::from_secs(1),
        services: None,
    }
}

/// The NodeRollout controller on `sim` with `client`, leading, until the sender is dropped.
pub fn controller_on(
    sim: &Sim,
    client: Client,
    metrics: Arc<Metrics>,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, shutdown) = watch::channel(false);
    let r = rollouts(sim, client, metrics);
    (stop, tokio::spawn(rollout::run(r, shutdown)))
}

/// The NodeRollout controller on `sim` as `raygate`, leading, until the sender is dropped.
pub fn controller(sim: &Sim) -> watch::Sender<bool> {
    controller_on(sim, sim.client_as("raygate"), Arc::new(Metrics::default())).0
}
