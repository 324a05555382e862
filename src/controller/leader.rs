//! Leader election on a coordination.k8s.io Lease: every replica watches, only the holder writes.

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use super::{Config, Error};

/// Starts contending for the Lease; the receiver says whether this replica holds it.
pub async fn elect(client: Client, config: &Config) -> Result<watch::Receiver<bool>, Error> {
    let err = |e: kube_lease_manager::LeaseManagerError| Error::Lease {
        name: format!("{}/{}", config.lease_namespace, config.lease_name),
        reason: e.to_string(),
    };
    let manager = LeaseManagerBuilder::new(client, &config.lease_name)
        .with_namespace(&config.lease_namespace)
        .with_identity(&config.identity)
        .with_field_manager(super::GATE_MANAGER)
        .build()
        .await
        .map_err(err)?;
    let (leader, task) = manager.watch().await;
    tokio::spawn(async move {
        match task.await {
            Ok(Ok(_)) => tracing::info!("leader election stopped"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "leader election failed; this replica stops writing")
            }
            Err(e) => tracing::error!(error = %e, "leader election task panicked"),
        }
    });
    Ok(leader)
}
