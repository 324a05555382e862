//! The one loop the controller's own periodic tasks run in (the admission loop, the pod
//! ungater), shaped like the simulated cluster's actor loop: a pass on every trigger, at the
//! instant the last pass asked for, and at least every resync — only while this replica leads
//! and once every cache holds a complete list (never a decision on a partial view: quota would
//! look free, a grant unused).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::{Context, Monotonic};

/// How soon a loop looks again when a cache is re-listing.
const UNSYNCED_RETRY: Duration = Duration::from_millis(200);

/// A task the loop runs.
pub(crate) trait Pass: Send {
    /// The task's name in logs.
    const NAME: &'static str;

    /// One pass, for the wake-up at `woke`; returns the latest instant the next pass is wanted
    /// at (`None`: the resync is soon enough).
    fn pass(
        &mut self,
        ctx: &Context,
        woke: Monotonic,
    ) -> impl Future<Output = Option<Monotonic>> + Send;
}

/// When a loop wakes besides the instants its passes ask for.
pub(crate) struct Wake {
    /// Notified on every change of what the task reads.
    pub trigger: Arc<Notify>,
    /// The longest time between two passes.
    pub resync: Duration,
}

/// Runs `task` until `shutdown` turns true.
pub(crate) async fn run<P: Pass>(
    mut task: P,
    ctx: Arc<Context>,
    wake: Wake,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        biased;
        changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { return },
        _ = ctx.stores.wait_until_ready() => {}
    }
    tracing::info!(task = P::NAME, "running");
    let mut next: Option<Monotonic> = None;
    loop {
        let now = ctx.clock.monotonic();
        let wait = next.map_or(wake.resync, |at| at.saturating_since(now).min(wake.resync));
        tokio::select! {
            biased;
            changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { return },
            () = wake.trigger.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
        let woke = ctx.clock.monotonic();
        if !ctx.is_leader() {
            next = None;
            continue;
        }
        let unsynced = ctx.stores.ready.pending();
        if !unsynced.is_empty() {
            tracing::debug!(task = P::NAME, ?unsynced, "caches not synced: no pass");
            next = Some(woke + UNSYNCED_RETRY);
            continue;
        }
        next = task.pass(&ctx, woke).await;
    }
}
