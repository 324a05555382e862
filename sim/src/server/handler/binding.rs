//! `POST /api/v1/namespaces/{ns}/pods/{name}/binding`, after `pkg/registry/core/pod/storage/storage.go`
//! (`BindingREST.Create` → `assignPod` → `setPodNodeAndMetadata`): the binding's name must be the
//! pod's, its target a Node; a pod being deleted, already bound, or still carrying scheduling gates
//! is a 409 `Conflict` on `pods/binding`; otherwise `spec.nodeName` is set, the binding's
//! annotations merged, `PodScheduled=True` set, and the answer is `201 Status{Success}`.
//!
//! Also the status the server gives a new Pod (`podStrategy.PrepareForCreate`): `phase: Pending`,
//! and `PodScheduled=False` reason `SchedulingGated` when the pod has scheduling gates.

use serde_json::{Value, json};

use super::request::{ApiRequest, Reply, Route, dry_run, meta_str, parse_body};
use super::state::State;
use crate::server::status::{ApiError, FieldCause};
use crate::server::store::ChangeType;

/// `PodScheduled` reason and message for a gated pod (`apis/core/types.go`,
/// `pkg/registry/core/pod/strategy.go` `applySchedulingGatedCondition`).
pub const SCHEDULING_GATED: &str = "SchedulingGated";
pub const SCHEDULING_GATED_MESSAGE: &str =
    "Scheduling is blocked due to non-empty scheduling gates";

/// The status of a Pod as created.
pub fn created_pod_status(spec: &Value) -> Value {
    let gated = spec["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty());
    if gated {
        json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False",
            "reason": SCHEDULING_GATED, "message": SCHEDULING_GATED_MESSAGE,
        }]})
    } else {
        json!({"phase": "Pending"})
    }
}

/// Sets `cond` in `status.conditions` (`UpdatePodCondition`: the transition time moves only when
/// the status changes).
pub(crate) fn set_pod_condition(pod: &mut Value, mut cond: Value, now: &str) {
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    if let Some(list) = pod["status"]["conditions"].as_array_mut() {
        match list.iter_mut().find(|c| c["type"] == cond["type"]) {
            Some(c) => {
                if c["status"] == cond["status"] {
                    if let Some(t) = c.get("lastTransitionTime") {
                        cond["lastTransitionTime"] = t.clone();
                    }
                } else {
                    cond["lastTransitionTime"] = json!(now);
                }
                *c = cond;
            }
            None => {
                cond["lastTransitionTime"] = json!(now);
                list.push(cond);
            }
        }
    }
}

/// The binding's target node, after the checks on the binding itself: its namespace and name
/// are the pod's, its target a Node with a name.
fn binding_target<'a>(body: &'a Value, route: &Route, name: &str) -> Result<&'a str, ApiError> {
    if meta_str(body, "namespace")
        .is_some_and(|n| !n.is_empty() && Some(n) != route.namespace.as_deref())
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if meta_str(body, "name").is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Binding object: {name}"
        )));
    }
    let kind = body["target"]["kind"].as_str().unwrap_or_default();
    if !kind.is_empty() && kind != "Node" {
        return Err(ApiError::invalid(
            "",
            "Binding",
            name,
            vec![FieldCause::not_supported(
                "target.kind",
                kind,
                &["Node".to_string(), "<empty>".to_string()],
            )],
        ));
    }
    let node = body["target"]["name"].as_str().unwrap_or_default();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "",
            "Binding",
            name,
            vec![FieldCause::required("target.name", "")],
        ));
    }
    Ok(node)
}

/// The 409 of a pod that cannot be bound: being deleted, already bound, or gated.
fn check_assignable(pod: &Value, name: &str) -> Result<(), ApiError> {
    let conflict = |why: String| ApiError::conflict_because("", "pods/binding", name, &why);
    if pod["metadata"].get("deletionTimestamp").is_some() {
        return Err(conflict(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        )));
    }
    if let Some(bound) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(conflict(format!(
            "pod {name} is already assigned to node \"{bound}\""
        )));
    }
    if pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty())
    {
        return Err(conflict(format!(
            "pod {name} has non-empty .spec.schedulingGates"
        )));
    }
    Ok(())
}

impl State {
    /// The binding subresource.
    pub fn bind(&mut self, route: &Route, req: &ApiRequest, now: &str) -> Reply {
        let body = parse_body("Binding", &req.body)?;
        let dry = dry_run(&req.query)?;
        let name = route.name.clone().unwrap_or_default();
        let node = binding_target(&body, route, &name)?;
        let pod_route = Route {
            subresource: None,
            ..route.clone()
        };
        let pod = self.existing(&pod_route)?;
        check_assignable(&pod, &name)?;
        let mut next = (*pod).clone();
        next["spec"]["nodeName"] = json!(node);
        if let Some(ann) = body["metadata"]["annotations"].as_object() {
            if !next["metadata"]["annotations"].is_object() {
                next["metadata"]["annotations"] = json!({});
            }
            for (k, v) in ann {
                next["metadata"]["annotations"][k] = v.clone();
            }
        }
        set_pod_condition(
            &mut next,
            json!({"type": "PodScheduled", "status": "True"}),
            now,
        );
        if !dry {
            self.store
                .commit(&pod_route.key(), ChangeType::Modified, next);
        }
        Ok((
            201,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
                .into(),
        ))
    }
}
