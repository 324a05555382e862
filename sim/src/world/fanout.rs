//! A change signal for several waiters, woken in the order they subscribed.
//!
//! Why not `tokio::sync::watch`: a watch channel's waiters sit on one of eight `Notify`s picked
//! by tokio's per-runtime random generator (seeded afresh for every runtime, and not settable on
//! stable tokio), and a send wakes them shard by shard. Several actors waiting on one watch
//! channel therefore run in another order in every run, and on the paused clock that order is
//! the order of their writes within one instant: the same seed gave different histories. Here
//! each subscriber has its own [`Notify`] and a change wakes them in subscription order.

use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// Subscribers' `Notify`s in subscription order; one that was dropped is forgotten at the next
/// [`Fanout::notify`].
#[derive(Clone, Default)]
pub struct Fanout(Arc<Mutex<Vec<Weak<Notify>>>>);

impl Fanout {
    /// Wakes `waiter` (`notify_one`: a change while nobody waits is kept for the next wait) on
    /// every later change, for as long as it lives.
    pub fn subscribe(&self, waiter: &Arc<Notify>) {
        self.lock().push(Arc::downgrade(waiter));
    }

    /// A new `Notify` subscribed to this signal.
    pub fn subscriber(&self) -> Arc<Notify> {
        let waiter = Arc::new(Notify::new());
        self.subscribe(&waiter);
        waiter
    }

    /// Wakes every live subscriber, in subscription order.
    pub fn notify(&self) {
        let live: Vec<Arc<Notify>> = {
            let mut subscribers = self.lock();
            subscribers.retain(|w| w.strong_count() > 0);
            subscribers.iter().filter_map(Weak::upgrade).collect()
        };
        for waiter in live {
            waiter.notify_one();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Notify>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// The order in which `n` tasks subscribed to one fan-out run after each of `rounds`
    /// changes.
    async fn wake_order(n: usize, rounds: usize) -> Vec<usize> {
        let order = Arc::new(Mutex::new(Vec::new()));
        let fanout = Fanout::default();
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let (waiter, order) = (fanout.subscriber(), order.clone());
                tokio::spawn(async move {
                    for _ in 0..rounds {
                        waiter.notified().await;
                        order.lock().unwrap().push(i);
                    }
                })
            })
            .collect();
        for _ in 0..rounds {
            // every task waits before the change
            tokio::task::yield_now().await;
            fanout.notify();
            tokio::task::yield_now().await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        Arc::try_unwrap(order).unwrap().into_inner().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_run_in_subscription_order_every_time() {
        let order = wake_order(16, 8).await;
        let expected: Vec<usize> = (0..8).flat_map(|_| 0..16).collect();
        assert_eq!(order, expected);
    }

    /// What the fan-out replaces: tokio's watch channel wakes its waiters in an order drawn from
    /// the runtime's random generator, so two runtimes order the same waiters differently.
    #[test]
    fn a_watch_channel_wakes_its_waiters_in_another_order_per_runtime() {
        let run = || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            rt.block_on(async {
                let (tx, rx) = tokio::sync::watch::channel(0u32);
                let order = Arc::new(Mutex::new(Vec::new()));
                let tasks: Vec<_> = (0..16)
                    .map(|i| {
                        let (mut rx, order) = (rx.clone(), order.clone());
                        tokio::spawn(async move {
                            if rx.changed().await.is_ok() {
                                order.lock().unwrap().push(i);
                            }
                        })
                    })
                    .collect();
                tokio::task::yield_now().await;
                tx.send_replace(1);
                for t in tasks {
                    t.await.unwrap();
                }
                order.lock().unwrap().clone()
            })
        };
        let first = run();
        assert!(
            (0..20).any(|_| run() != first),
            "20 runtimes woke 16 watch waiters in one order"
        );
    }

    #[test]
    fn a_dropped_subscriber_is_forgotten() {
        let fanout = Fanout::default();
        let kept = fanout.subscriber();
        drop(fanout.subscriber());
        fanout.notify();
        assert_eq!(fanout.lock().len(), 1);
        assert!(futures::FutureExt::now_or_never(kept.notified()).is_some());
    }
}
