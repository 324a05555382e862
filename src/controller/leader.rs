//! Leader election on a coordination.k8s.io Lease: every replica watches, only the holder writes.

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use super::{Config, Error};

/// A running election: whether this replica leads, and the task that releases the Lease.
pub struct Election {
    pub leads: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Election {
    /// Stops contending and waits (at most `timeout`) until the Lease is released, so a standby
    /// takes over at once instead of after the lease duration. Returns whether it was.
    pub async fn release(self, timeout: std::time::Duration) -> bool {
        let _ = self.stop.send(true);
        tokio::time::timeout(timeout, self.task).await.is_ok()
    }
}

/// Starts contending for the Lease; the receiver says whether this replica holds it. When the
/// election itself fails (the Lease API is gone, RBAC is missing), it turns `false` for good:
/// a replica that cannot prove it leads never writes.
pub async fn elect(client: Client, config: &Config) -> Result<Election, Error> {
    let lease = format!("{}/{}", config.lease_namespace, config.lease_name);
    let err = |e: kube_lease_manager::LeaseManagerError| Error::Lease {
        name: lease.clone(),
        reason: e.to_string(),
    };
    let manager = LeaseManagerBuilder::new(client, &config.lease_name)
        .with_namespace(&config.lease_namespace)
        .with_identity(&config.identity)
        .with_duration(config.lease_duration_seconds.max(1))
        .with_grace((config.lease_duration_seconds / 3).clamp(1, 5))
        .with_field_manager(super::LEASE_MANAGER)
        .build()
        .await
        .map_err(err)?;
    let (mut held, task) = manager.watch().await;
    let (tx, rx) = watch::channel(*held.borrow());
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                // shutdown: drop our receiver so the manager releases the Lease
                _ = stopped.changed() => {
                    drop(held);
                    break;
                }
                changed = held.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let leads = *held.borrow();
                    tracing::info!(lease = %lease, leads, "leadership changed");
                    let _ = tx.send(leads);
                }
                // the controller stopped: drop our receiver so the manager releases the Lease
                _ = tx.closed() => {
                    drop(held);
                    break;
                }
            }
        }
        let _ = tx.send(false);
        match task.await {
            Ok(Ok(_)) => {
                tracing::info!(lease = %lease, "leader election stopped; this replica no longer writes")
            }
            Ok(Err(e)) => {
                tracing::error!(lease = %lease, error = %e, "leader election failed; this replica no longer writes")
            }
            Err(e) => {
                tracing::error!(lease = %lease, error = %e, "leader election task ended abnormally; this replica no longer writes")
            }
        }
    });
    Ok(Election {
        leads: rx,
        stop,
        task,
    })
}
