//! One reconcile's context and its API calls: reading the children, deleting one, the status and
//! finalizer writes, and the clean-up of dangling children (`cleanUpRayClusterInstance`).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::children::{active_name, pending_name};
use super::{READY, SUSPENDED, SUSPENDING, UPGRADE_IN_PROGRESS};
use crate::world::kuberay::status::merge_diff;
use crate::world::kuberay::{DEFAULT_DELETION_DELAY, EmulatorError, Shared, later};
use raygate::conditions::find;
use raygate::meta;
use raygate::types::ray::{
    ORIGINATED_FROM_CR_NAME_LABEL, ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE,
    RayCluster, RayService, RayServiceStatus,
};

/// What one reconcile of a RayService works with.
pub(super) struct Ctx<'a> {
    pub(super) shared: &'a Shared,
    /// The emulator's clock when this reconcile started.
    pub(super) now: Timestamp,
    pub(super) services: Api<RayService>,
    pub(super) clusters: Api<RayCluster>,
    pub(super) ns: String,
    pub(super) name: String,
}

impl Ctx<'_> {
    pub(super) fn full(&self, name: &str) -> String {
        format!("{}/{}", self.ns, name)
    }

    pub(super) async fn get_cluster(
        &self,
        name: &str,
    ) -> Result<Option<RayCluster>, EmulatorError> {
        if name.is_empty() {
            return Ok(None);
        }
        self.shared
            .get_opt(&self.clusters, name)
            .await
            .map_err(|source| EmulatorError::GetCluster {
                name: self.full(name),
                source,
            })
    }

    /// `RayServiceRayClustersAssociationOptions`: the labelled children.
    pub(super) async fn children(&self) -> Result<Vec<RayCluster>, EmulatorError> {
        let selector = format!(
            "{ORIGINATED_FROM_CR_NAME_LABEL}={},{ORIGINATED_FROM_CRD_LABEL}={ORIGINATED_FROM_RAYSERVICE}",
            self.name
        );
        self.shared
            .list(&self.clusters, &ListParams::default().labels(&selector))
            .await
            .map_err(|source| EmulatorError::ListChildren {
                name: self.full(&self.name),
                source,
            })
    }

    pub(super) async fn delete_cluster(&self, name: &str, why: &str) -> Result<(), EmulatorError> {
        match self
            .clusters
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => {
                tracing::info!(service = %self.full(&self.name), cluster = name, reason = why, "deleted RayCluster");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(EmulatorError::DeleteCluster {
                    name: self.full(name),
                    source,
                });
            }
        }
        self.shared.forget_deletion(&meta::key_of(&self.ns, name));
        self.shared.pods_deleted(&self.ns, name);
        Ok(())
    }

    /// Writes `new` as the status when it differs from the object's (merge patch of the
    /// difference, with the object's resourceVersion as precondition); returns the fresh object.
    pub(super) async fn write_status(
        &self,
        rs: RayService,
        mut new: RayServiceStatus,
    ) -> Result<RayService, EmulatorError> {
        let old = rs.status.clone().unwrap_or_default();
        if old == new {
            return Ok(rs);
        }
        new.other.insert(
            "lastUpdateTime".into(),
            serde_json::to_value(Time(self.now)).unwrap_or(Value::Null),
        );
        let to_json = |s: &RayServiceStatus| serde_json::to_value(s).unwrap_or_else(|_| json!({}));
        let old_json = rs.status.as_ref().map_or_else(|| json!({}), to_json);
        let Some(diff) = merge_diff(&old_json, &to_json(&new)) else {
            return Ok(rs);
        };
        let patch = json!({
            "metadata": {"resourceVersion": rs.meta().resource_version},
            "status": diff,
        });
        let updated = self
            .services
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| EmulatorError::ServiceStatus {
                name: self.full(&self.name),
                source,
            })?;
        let s = updated.status.clone().unwrap_or_default();
        let cond = |t: &str| {
            find(&s.conditions, t)
                .map(|c| format!("{}/{}", c.status, c.reason))
                .unwrap_or_default()
        };
        tracing::info!(
            service = %self.full(&self.name),
            active = active_name(&s),
            pending = pending_name(&s),
            ready = %cond(READY),
            upgrade_in_progress = %cond(UPGRADE_IN_PROGRESS),
            suspending = %cond(SUSPENDING),
            suspended = %cond(SUSPENDED),
            "RayService status"
        );
        Ok(updated)
    }

    /// Sets the finalizer list (with the object's resourceVersion as precondition).
    pub(super) async fn set_finalizers(
        &self,
        rs: &RayService,
        finalizers: Vec<String>,
    ) -> Result<RayService, EmulatorError> {
        let patch = json!({"metadata": {
            "resourceVersion": rs.meta().resource_version,
            "finalizers": finalizers,
        }});
        self.services
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| EmulatorError::Finalizer {
                name: self.full(&self.name),
                source,
            })
    }

    /// `cleanUpRayClusterInstance`: schedules dangling children for deletion after the delay and
    /// deletes those whose time has come. Returns whether any child still needs cleaning up, and
    /// the earliest pending deletion time.
    pub(super) async fn clean_up(
        &self,
        rs: &RayService,
        children: &[RayCluster],
    ) -> Result<(bool, Option<Timestamp>), EmulatorError> {
        let deleting = rs.metadata.deletion_timestamp.is_some();
        let delay = if deleting {
            Duration::ZERO
        } else {
            rs.spec
                .ray_cluster_deletion_delay_seconds
                .map_or(DEFAULT_DELETION_DELAY, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                })
        };
        let status = rs.status.clone().unwrap_or_default();
        let (active, pending) = (active_name(&status), pending_name(&status));
        let (mut has_to_clean, mut next) = (false, None::<Timestamp>);
        let now = self.now;
        for c in children {
            let name = c.name_any();
            if !deleting && (name == active || name == pending) {
                continue;
            }
            has_to_clean = true;
            let k = meta::key_of(&self.ns, &name);
            match self.shared.deletion_time(&k) {
                _ if deleting => {
                    self.delete_cluster(&name, "RayService is being deleted")
                        .await?
                }
                Some(at) if now >= at => {
                    self.delete_cluster(&name, "deletion delay passed").await?
                }
                Some(at) => next = Some(next.map_or(at, |n| n.min(at))),
                None => {
                    let at = later(now, delay);
                    self.shared.schedule_deletion(&k, at);
                    tracing::info!(service = %self.full(&self.name), cluster = %name, ?delay, "scheduled dangling RayCluster for deletion");
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
            }
        }
        Ok((has_to_clean, next))
    }

    /// `deleteRayServiceOwnedResources` (RayClusters only: no Services here). True when none
    /// remained.
    pub(super) async fn delete_all_children(
        &self,
        children: &[RayCluster],
    ) -> Result<bool, EmulatorError> {
        for c in children {
            if c.metadata.deletion_timestamp.is_none() {
                self.delete_cluster(&c.name_any(), "RayService suspend")
                    .await?;
            }
        }
        Ok(children.is_empty())
    }
}
