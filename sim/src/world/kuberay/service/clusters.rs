//! `reconcileRayCluster`: the pending child created by name, the children updated in place when
//! their spec hash calls for it.

use kube::ResourceExt;
use kube::api::PostParams;

use super::children::{
    active_name, construct_cluster, modify_cluster, pending_name, should_update_cluster,
};
use super::ctx::Ctx;
use crate::world::kuberay::EmulatorError;
use raygate::types::ray::{RayCluster, RayService};

/// `reconcileRayCluster`: returns the active and the pending child after creating or updating.
pub(super) async fn reconcile_clusters(
    ctx: &Ctx<'_>,
    rs: &RayService,
) -> Result<(Option<RayCluster>, Option<RayCluster>), EmulatorError> {
    let status = rs.status.clone().unwrap_or_default();
    let version = ctx.shared.config.version.as_str();
    let mut active = ctx.get_cluster(active_name(&status)).await?;
    let mut pending = ctx.get_cluster(pending_name(&status)).await?;
    let pending_wanted = pending_name(&status);
    if !pending_wanted.is_empty() && pending.is_none() {
        let child = construct_cluster(rs, pending_wanted, version)?;
        let created = match ctx.clusters.create(&PostParams::default(), &child).await {
            Ok(c) => c,
            Err(source) => {
                return Err(EmulatorError::CreateCluster {
                    name: ctx.full(pending_wanted),
                    source,
                });
            }
        };
        tracing::info!(
            service = %ctx.full(&ctx.name),
            cluster = pending_wanted,
            suspend = created.spec.suspend.unwrap_or(false),
            "created pending RayCluster"
        );
        return Ok((active, Some(created)));
    }
    for (slot, is_active) in [(&mut active, true), (&mut pending, false)] {
        if !should_update_cluster(rs, slot.as_ref(), is_active, version)? {
            continue;
        }
        let Some(current) = slot.as_ref() else {
            continue;
        };
        let name = current.name_any();
        let goal = construct_cluster(rs, &name, version)?;
        let updated = ctx
            .clusters
            .replace(
                &name,
                &PostParams::default(),
                &modify_cluster(current, goal),
            )
            .await
            .map_err(|source| EmulatorError::UpdateCluster {
                name: ctx.full(&name),
                source,
            })?;
        tracing::info!(
            service = %ctx.full(&ctx.name),
            cluster = %name,
            role = if is_active { "active" } else { "pending" },
            "updated RayCluster in place"
        );
        *slot = Some(updated);
    }
    Ok((active, pending))
}
