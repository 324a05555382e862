//! The thin IO layer: each gate action becomes one narrow patch or one server-side apply.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::controller::{
    Error, GATE_MANAGER, PODS_READY_MANAGER, SLICES_MANAGER, SLICES_STATUS_MANAGER,
};
use crate::gate::pods_ready::PodsReady;
use crate::gate::{GateAction, OPTED_OUT_ANNOTATION, RELEASED_ANNOTATION, SUSPENDED_BY_ANNOTATION};
use crate::slices::SliceAction;
use crate::types::kueue::{Workload, condition};
use crate::types::ray::{RayCluster, RayService};

fn merge(manager: &str) -> PatchParams {
    crate::controller::merge_params(manager)
}

/// A merge patch of the RayService on the version decided on (`rv`, `None`: unconditional);
/// returns the new version, which the next patch of the same decision is conditioned on.
pub async fn patch_service_at(
    client: &Client,
    ns: &str,
    name: &str,
    what: &'static str,
    mut body: serde_json::Value,
    rv: Option<&str>,
) -> Result<Option<String>, Error> {
    if let Some(rv) = rv {
        body["metadata"]["resourceVersion"] = json!(rv);
    }
    Api::<RayService>::namespaced(client.clone(), ns)
        .patch(name, &merge(GATE_MANAGER), &Patch::Merge(&body))
        .await
        .map(|s| s.metadata.resource_version)
        .map_err(|source| Error::PatchService {
            name: format!("{ns}/{name}"),
            what,
            source,
        })
}

/// The RayService's merge patch for an action that writes only the RayService: what it sets (for
/// errors) and the body. `None`: the action writes something else.
pub fn service_patch(action: &GateAction) -> Option<(&'static str, serde_json::Value)> {
    Some(match action {
        // `spec.rayClusterConfig.suspend=true` plus the released-children record
        GateAction::GateTemplate { released } => (
            "spec.rayClusterConfig.suspend",
            json!({
                "metadata": {"annotations": {
                    RELEASED_ANNOTATION: released.join(","),
                    OPTED_OUT_ANNOTATION: null,
                }},
                "spec": {"rayClusterConfig": {"suspend": true}},
            }),
        ),
        GateAction::RecordReleased { released } => released_record(released),
        // top-level `spec.suspend` with raygate's marker
        GateAction::SuspendService { reason } => suspend(Some(reason)),
        GateAction::ResumeService => suspend(None),
        GateAction::ReportError { message } => (
            "error annotation",
            json!({"metadata": {"annotations": {crate::gate::ERROR_ANNOTATION: message}}}),
        ),
        // opt-out, last step: lifts the template gate (and raygate's `spec.suspend` when
        // `resume`, and the pod scheduling gate) and removes raygate's annotations
        GateAction::OptOut {
            resume,
            pod_templates,
        } => {
            let mut body = json!({
                "metadata": {"annotations": {
                    RELEASED_ANNOTATION: null,
                    SUSPENDED_BY_ANNOTATION: null,
                    crate::gate::ERROR_ANNOTATION: null,
                    OPTED_OUT_ANNOTATION: "true",
                }},
                "spec": {"rayClusterConfig": {"suspend": null}},
            });
            if *resume {
                body["spec"]["suspend"] = json!(false);
            }
            if let Some(serde_json::Value::Object(templates)) = pod_templates {
                for (k, v) in templates {
                    body["spec"]["rayClusterConfig"][k] = v.clone();
                }
            }
            ("opt-out", body)
        }
        // the pod scheduling gate on `spec.rayClusterConfig`'s pod templates
        GateAction::GatePodTemplates { patch } => (
            "pod template scheduling gates",
            json!({"spec": {"rayClusterConfig": patch}}),
        ),
        GateAction::Annotate { key, value } => {
            (*key, json!({"metadata": {"annotations": {*key: value}}}))
        }
        GateAction::Slice(_)
        | GateAction::Release { .. }
        | GateAction::Hold { .. }
        | GateAction::OptOutChild { .. }
        | GateAction::PatchChild { .. } => return None,
    })
}

/// The released children recorded on the RayService.
fn released_record(released: &[String]) -> (&'static str, serde_json::Value) {
    (
        "released-children annotation",
        json!({"metadata": {"annotations": {RELEASED_ANNOTATION: released.join(",")}}}),
    )
}

fn suspend(reason: Option<&String>) -> (&'static str, serde_json::Value) {
    (
        "spec.suspend",
        json!({
            "metadata": {"annotations": {SUSPENDED_BY_ANNOTATION: reason}},
            "spec": {"suspend": reason.is_some()},
        }),
    )
}

/// Records the released children on the RayService.
pub async fn record_released(
    client: &Client,
    ns: &str,
    name: &str,
    released: &[String],
    rv: Option<&str>,
) -> Result<Option<String>, Error> {
    let (what, body) = released_record(released);
    patch_service_at(client, ns, name, what, body, rv).await
}

/// `metadata.resourceVersion` as a precondition of a patch (`None`: unconditional).
fn precondition(rv: Option<&str>) -> serde_json::Value {
    match rv {
        Some(rv) => json!({"resourceVersion": rv}),
        None => json!({}),
    }
}

/// A child's `spec.suspend`, on the version decided on (`rv`).
pub async fn child_suspend(
    client: &Client,
    ns: &str,
    name: &str,
    suspend: bool,
    rv: Option<&str>,
) -> Result<(), Error> {
    Api::<RayCluster>::namespaced(client.clone(), ns)
        .patch(
            name,
            &merge(GATE_MANAGER),
            &Patch::Merge(&json!({"metadata": precondition(rv), "spec": {"suspend": suspend}})),
        )
        .await
        .map(|_| ())
        .map_err(|source| Error::PatchChildSuspend {
            name: format!("{ns}/{name}"),
            suspend,
            source,
        })
}

/// Creates a slice (server-side apply of its metadata and spec), then writes the requeue count it
/// carries from an evicted slice, which lives in the status subresource.
async fn create_slice(api: &Api<Workload>, ns: &str, workload: &Workload) -> Result<(), Error> {
    let name = workload.metadata.name.clone().unwrap_or_default();
    let failed = |source| Error::ApplyWorkload {
        name: format!("{ns}/{name}"),
        source,
    };
    api.patch(
        &name,
        &crate::controller::apply_params(SLICES_MANAGER),
        &Patch::Apply(workload),
    )
    .await
    .map_err(failed)?;
    match workload
        .status
        .as_ref()
        .and_then(|s| s.requeue_state.as_ref())
    {
        Some(requeue) => {
            let status = json!({"status": {"requeueState": requeue}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await
                .map(|_| ())
                .map_err(failed)
        }
        None => Ok(()),
    }
}

/// Applies one slice action; changes to an existing Workload carry `rv`, the version decided on.
pub async fn slice(
    client: &Client,
    ns: &str,
    action: &SliceAction,
    rv: Option<&str>,
    now: Timestamp,
) -> Result<(), Error> {
    let api = Api::<Workload>::namespaced(client.clone(), ns);
    match action {
        SliceAction::Create { workload, .. } => create_slice(&api, ns, workload).await,
        SliceAction::SetPodSets { name, pod_sets, .. } => {
            let spec = json!({"podSets": pod_sets});
            patch_spec(&api, name, rv, spec)
                .await
                .map_err(|source| Error::PatchPodSets {
                    name: format!("{ns}/{name}"),
                    source,
                })
        }
        SliceAction::SetPriority {
            name,
            priority_class_ref,
            priority,
        } => {
            let spec = json!({"priorityClassRef": priority_class_ref, "priority": priority});
            patch_spec(&api, name, rv, spec)
                .await
                .map_err(|source| Error::PatchPriority {
                    name: format!("{ns}/{name}"),
                    source,
                })
        }
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
                "metadata": precondition(rv),
                "status": {"conditions": [cond]},
            });
            api.patch_status(
                name,
                &crate::controller::apply_params(SLICES_STATUS_MANAGER),
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

/// A merge patch of an existing slice's `spec`, made on version `rv`.
async fn patch_spec(
    api: &Api<Workload>,
    name: &str,
    rv: Option<&str>,
    spec: serde_json::Value,
) -> Result<(), kube::Error> {
    let body = json!({"metadata": precondition(rv), "spec": spec});
    api.patch(name, &merge(SLICES_MANAGER), &Patch::Merge(&body))
        .await
        .map(|_| ())
}

/// Opt-out of one child: drop its opt-in labels and, when `unsuspend`, release it.
pub async fn opt_out_child(
    client: &Client,
    ns: &str,
    name: &str,
    unsuspend: bool,
) -> Result<(), Error> {
    let labels: serde_json::Map<String, serde_json::Value> = crate::gate::OPT_IN_LABELS
        .iter()
        .map(|k| (k.to_string(), serde_json::Value::Null))
        .collect();
    let mut body = json!({"metadata": {"labels": labels}});
    if unsuspend {
        body["spec"] = json!({"suspend": false});
    }
    Api::<RayCluster>::namespaced(client.clone(), ns)
        .patch(name, &merge(GATE_MANAGER), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| Error::OptOutChild {
            name: format!("{ns}/{name}"),
            source,
        })
}

/// Deletes a finished slice past its retention (gone already is fine).
pub async fn delete_slice(client: &Client, ns: &str, name: &str) -> Result<(), Error> {
    match Api::<Workload>::namespaced(client.clone(), ns)
        .delete(name, &Default::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::DeleteWorkload {
            name: format!("{ns}/{name}"),
            source,
        }),
    }
}
/// The `PodsReady` condition on a covering slice (its own field manager), on the version
/// decided on (`rv`).
pub async fn pods_ready(
    client: &Client,
    ns: &str,
    pr: &PodsReady,
    rv: Option<&str>,
    now: Timestamp,
) -> Result<(), Error> {
    let cond = Condition {
        type_: condition::PODS_READY.into(),
        status: if pr.ready { "True" } else { "False" }.into(),
        reason: pr.reason.to_string(),
        message: pr.message.to_string(),
        last_transition_time: Time(now),
        observed_generation: None,
    };
    let body = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": precondition(rv),
        "status": {"conditions": [cond]},
    });
    Api::<Workload>::namespaced(client.clone(), ns)
        .patch_status(
            &pr.slice,
            &crate::controller::apply_params(PODS_READY_MANAGER),
            &Patch::Apply(&body),
        )
        .await
        .map(|_| ())
        .map_err(|source| Error::PodsReady {
            name: format!("{ns}/{}", pr.slice),
            source,
        })
}

/// A merge patch of a child RayCluster (e.g. its flavors' node selector and tolerations); the
/// patch carries the child's `resourceVersion`. Returns the child's new version.
pub async fn patch_child(
    client: &Client,
    ns: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<Option<String>, Error> {
    Api::<RayCluster>::namespaced(client.clone(), ns)
        .patch(name, &merge(GATE_MANAGER), &Patch::Merge(patch))
        .await
        .map(|c| c.metadata.resource_version)
        .map_err(|source| Error::PatchChildFlavors {
            name: format!("{ns}/{name}"),
            source,
        })
}
