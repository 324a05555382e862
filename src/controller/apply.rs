//! The thin IO layer: each gate action becomes one narrow patch or one server-side apply.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Error, GATE_MANAGER, SLICES_MANAGER, SLICES_STATUS_MANAGER};
use crate::gate::{RELEASED_ANNOTATION, SUSPENDED_BY_ANNOTATION};
use crate::slices::SliceAction;
use crate::types::kueue::{Workload, condition};
use crate::types::ray::{RayCluster, RayService};

fn merge(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    }
}

async fn patch_service(
    client: &Client,
    ns: &str,
    name: &str,
    what: &'static str,
    body: serde_json::Value,
) -> Result<(), Error> {
    Api::<RayService>::namespaced(client.clone(), ns)
        .patch(name, &merge(GATE_MANAGER), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| Error::PatchService {
            name: format!("{ns}/{name}"),
            what,
            source,
        })
}

/// `spec.rayClusterConfig.suspend=true` plus the released-children record.
pub async fn gate_template(
    client: &Client,
    ns: &str,
    name: &str,
    released: &[String],
) -> Result<(), Error> {
    let body = json!({
        "metadata": {"annotations": {RELEASED_ANNOTATION: released.join(",")}},
        "spec": {"rayClusterConfig": {"suspend": true}},
    });
    patch_service(client, ns, name, "spec.rayClusterConfig.suspend", body).await
}

/// Records the released children on the RayService.
pub async fn record_released(
    client: &Client,
    ns: &str,
    name: &str,
    released: &[String],
) -> Result<(), Error> {
    let body = json!({"metadata": {"annotations": {RELEASED_ANNOTATION: released.join(",")}}});
    patch_service(client, ns, name, "released-children annotation", body).await
}

/// Top-level `spec.suspend` with raygate's marker.
pub async fn suspend_service(
    client: &Client,
    ns: &str,
    name: &str,
    reason: Option<&str>,
) -> Result<(), Error> {
    let body = json!({
        "metadata": {"annotations": {SUSPENDED_BY_ANNOTATION: reason}},
        "spec": {"suspend": reason.is_some()},
    });
    patch_service(client, ns, name, "spec.suspend", body).await
}

/// Sets or clears the error annotation.
pub async fn report_error(
    client: &Client,
    ns: &str,
    name: &str,
    message: Option<&str>,
) -> Result<(), Error> {
    let body = json!({"metadata": {"annotations": {crate::gate::ERROR_ANNOTATION: message}}});
    patch_service(client, ns, name, "error annotation", body).await
}

/// A child's `spec.suspend`.
pub async fn child_suspend(
    client: &Client,
    ns: &str,
    name: &str,
    suspend: bool,
) -> Result<(), Error> {
    Api::<RayCluster>::namespaced(client.clone(), ns)
        .patch(
            name,
            &merge(GATE_MANAGER),
            &Patch::Merge(&json!({"spec": {"suspend": suspend}})),
        )
        .await
        .map(|_| ())
        .map_err(|source| Error::PatchChildSuspend {
            name: format!("{ns}/{name}"),
            suspend,
            source,
        })
}

/// Applies one slice action.
pub async fn slice(
    client: &Client,
    ns: &str,
    action: &SliceAction,
    now: Timestamp,
) -> Result<(), Error> {
    let api = Api::<Workload>::namespaced(client.clone(), ns);
    match action {
        SliceAction::Create { workload, .. } => {
            let name = workload.metadata.name.clone().unwrap_or_default();
            api.patch(
                &name,
                &PatchParams::apply(SLICES_MANAGER).force(),
                &Patch::Apply(workload.as_ref()),
            )
            .await
            .map(|_| ())
            .map_err(|source| Error::ApplyWorkload {
                name: format!("{ns}/{name}"),
                source,
            })
        }
        SliceAction::SetPodSets { name, pod_sets, .. } => api
            .patch(
                name,
                &merge(SLICES_MANAGER),
                &Patch::Merge(&json!({"spec": {"podSets": pod_sets}})),
            )
            .await
            .map(|_| ())
            .map_err(|source| Error::PatchPodSets {
                name: format!("{ns}/{name}"),
                source,
            }),
        SliceAction::Finish {
            name,
            reason,
            message,
        } => {
            let cond = Condition {
                type_: condition::FINISHED.into(),
                status: "True".into(),
                reason: reason.to_string(),
                message: message.clone(),
                last_transition_time: Time(now),
                observed_generation: None,
            };
            let body = json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "status": {"conditions": [cond]},
            });
            api.patch_status(
                name,
                &PatchParams::apply(SLICES_STATUS_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map(|_| ())
            .map_err(|source| Error::WorkloadStatus {
                name: format!("{ns}/{name}"),
                source,
            })
        }
    }
}

/// Sets (`Some`) or clears (`None`) one annotation on the RayService.
pub async fn annotate_service(
    client: &Client,
    ns: &str,
    name: &str,
    key: &'static str,
    value: Option<&str>,
) -> Result<(), Error> {
    let body = json!({"metadata": {"annotations": {key: value}}});
    patch_service(client, ns, name, key, body).await
}

/// A merge patch of a child RayCluster (e.g. its flavors' node selector and tolerations).
pub async fn patch_child(
    client: &Client,
    ns: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    Api::<RayCluster>::namespaced(client.clone(), ns)
        .patch(name, &merge(GATE_MANAGER), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|source| Error::PatchChildFlavors {
            name: format!("{ns}/{name}"),
            source,
        })
}
