//! `POST /api/v1/namespaces/{ns}/pods/{name}/eviction`, after
//! `pkg/registry/core/pod/storage/eviction.go` (see `../shared/reference/eviction-pdb-drain.md` §1):
//! no PDB check for Pending, terminal or deleting pods; 500 for more than one PDB; the unhealthy
//! pod policies; the two 429s (still processing, with `Retry-After: 10`; no budget, without);
//! 403 for a negative budget; `disruptedPods`; the `DisruptionTarget` condition; dry-run.
//! The PDB status itself comes from the disruption controller (a later actor) or the test.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::request::{ApiRequest, Reply, Route, dry_run, meta_str, parse_body};
use super::state::State;
use crate::server::selector::selector_object_matches;
use crate::server::status::ApiError;
use crate::server::store::{ChangeType, ResKey};

const BUDGET_MESSAGE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Sets condition `type_` in `conditions` (replacing one of the same type).
fn set_condition(obj: &mut Value, cond: Value) {
    let t = cond["type"].clone();
    if !obj["status"]["conditions"].is_array() {
        obj["status"]["conditions"] = json!([]);
    }
    if let Some(list) = obj["status"]["conditions"].as_array_mut() {
        match list.iter_mut().find(|c| c["type"] == t) {
            Some(c) => *c = cond,
            None => list.push(cond),
        }
    }
}

fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

impl State {
    /// The eviction subresource.
    pub fn evict(&mut self, route: &Route, req: &ApiRequest, now: Timestamp) -> Reply {
        let body = parse_body("Eviction", &req.body)?;
        let name = route.name.clone().unwrap_or_default();
        if meta_str(&body, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        if meta_str(&body, "namespace")
            .is_some_and(|n| !n.is_empty() && Some(n) != route.namespace.as_deref())
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let opts = body
            .get("deleteOptions")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let body_dry = opts["dryRun"]
            .as_array()
            .map(|d| d.iter().any(|x| x == "All"));
        let query_dry = req
            .query
            .contains_key("dryRun")
            .then(|| dry_run(&req.query))
            .transpose()?;
        if let (Some(q), Some(b)) = (query_dry, body_dry)
            && q != b
        {
            return Err(ApiError::plain_failure(
                500,
                format!("Non-matching dry-run options in request and content: {q} and {b}"),
            ));
        }
        let dry = query_dry.unwrap_or(false) || body_dry.unwrap_or(false);
        let pod_route = Route {
            subresource: None,
            ..route.clone()
        };
        let pod = self.existing(&pod_route)?;
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        let deleting = pod["metadata"].get("deletionTimestamp").is_some();
        if matches!(phase, "Succeeded" | "Failed" | "Pending") || deleting {
            return self.evict_delete(&pod_route, &pod, &opts, dry, now);
        }
        let ns = route.namespace.clone().unwrap_or_default();
        let pdb_key: ResKey = Arc::from("policy/poddisruptionbudgets");
        let labels = pod["metadata"].get("labels");
        let pdbs: Vec<Arc<Value>> = self
            .store
            .list(&pdb_key, Some(&ns))
            .into_iter()
            .filter(|p| selector_object_matches(p["spec"].get("selector"), labels) == Some(true))
            .collect();
        let pdb = match pdbs.as_slice() {
            [] => return self.evict_delete(&pod_route, &pod, &opts, dry, now),
            [one] => one.clone(),
            _ => {
                return Err(ApiError::plain_failure(
                    500,
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
        };
        if !is_ready(&pod) {
            let policy = pdb["spec"]["unhealthyPodEvictionPolicy"].as_str();
            let current = pdb["status"]["currentHealthy"].as_i64().unwrap_or(0);
            let desired = pdb["status"]["desiredHealthy"].as_i64().unwrap_or(0);
            if policy == Some("AlwaysAllow") || (current >= desired && desired > 0) {
                return self.evict_delete(&pod_route, &pod, &opts, dry, now);
            }
        }
        self.check_and_decrement(&pdb_key, &pdb, &name, dry, now)?;
        self.evict_delete(&pod_route, &pod, &opts, dry, now)
    }

    fn check_and_decrement(
        &mut self,
        key: &ResKey,
        pdb: &Value,
        pod: &str,
        dry: bool,
        now: Timestamp,
    ) -> Result<(), ApiError> {
        let name = meta_str(pdb, "name").unwrap_or_default().to_string();
        let status = &pdb["status"];
        let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(0);
        if status["observedGeneration"].as_i64().unwrap_or(0) < generation {
            return Err(ApiError::too_many_requests(
                BUDGET_MESSAGE.into(),
                10,
                vec![
                    json!({"reason": "DisruptionBudget", "message": format!("The disruption budget {name} is still being processed by the server.")}),
                ],
            ));
        }
        let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
        if allowed < 0 {
            return Err(ApiError::forbidden(
                "policy",
                "poddisruptionbudget",
                &name,
                "pdb disruptions allowed is negative",
            ));
        }
        let disrupted = status["disruptedPods"]
            .as_object()
            .map(|m| m.len())
            .unwrap_or(0);
        if disrupted > 2000 {
            return Err(ApiError::forbidden(
                "policy",
                "poddisruptionbudget",
                &name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ));
        }
        if allowed == 0 {
            return Err(ApiError::too_many_requests(
                BUDGET_MESSAGE.into(),
                0,
                vec![json!({"reason": "DisruptionBudget", "message": format!(
                    "The disruption budget {name} needs {} healthy pods and has {} currently",
                    status["desiredHealthy"].as_i64().unwrap_or(0),
                    status["currentHealthy"].as_i64().unwrap_or(0)
                )})],
            ));
        }
        if dry {
            return Ok(());
        }
        let stamp = crate::clock::seconds(now);
        let mut next = pdb.clone();
        next["status"]["disruptionsAllowed"] = json!(allowed - 1);
        if allowed - 1 == 0 {
            set_condition(
                &mut next,
                json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "",
                    "lastTransitionTime": stamp, "observedGeneration": generation}),
            );
        }
        next["status"]["disruptedPods"][pod] = json!(stamp);
        self.store.commit(key, ChangeType::Modified, next);
        Ok(())
    }

    /// `addConditionAndDeletePod`: `DisruptionTarget=True` on the pod, then a graceful delete.
    fn evict_delete(
        &mut self,
        route: &Route,
        pod: &Value,
        opts: &Value,
        dry: bool,
        now: Timestamp,
    ) -> Reply {
        let pre = &opts["preconditions"];
        let uid_ok = pre["uid"]
            .as_str()
            .is_none_or(|u| Some(u) == meta_str(pod, "uid"));
        let rv_ok = pre["resourceVersion"]
            .as_str()
            .is_none_or(|rv| Some(rv) == meta_str(pod, "resourceVersion"));
        if !uid_ok || !rv_ok {
            return Err(ApiError::conflict(
                "",
                "pods",
                route.name.as_deref().unwrap_or_default(),
            ));
        }
        let mut delete_opts = opts.clone();
        if let Some(o) = delete_opts.as_object_mut() {
            o.remove("preconditions");
        }
        if !dry {
            let mut next = pod.clone();
            set_condition(
                &mut next,
                json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting", "lastTransitionTime": crate::clock::seconds(now)}),
            );
            if next != *pod {
                self.store.commit(&route.key(), ChangeType::Modified, next);
            }
        }
        let mut query = std::collections::HashMap::new();
        if dry {
            query.insert("dryRun".to_string(), "All".to_string());
        }
        let req = ApiRequest {
            method: "DELETE".into(),
            body: serde_json::to_vec(&delete_opts).unwrap_or_default(),
            query,
            ..Default::default()
        };
        self.delete(route, &req, now)?;
        Ok((201, success().into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_objects_match_as_policy_v1_reads_them() {
        let labels = json!({"app": "ray", "tier": "gpu"});
        let m = |s: Value| selector_object_matches(Some(&s), Some(&labels));
        assert_eq!(
            selector_object_matches(None, Some(&labels)),
            Some(false),
            "nil matches nothing"
        );
        assert_eq!(
            m(json!({})),
            Some(true),
            "an empty selector matches everything"
        );
        assert_eq!(m(json!({"matchLabels": {"app": "ray"}})), Some(true));
        assert_eq!(m(json!({"matchLabels": {"app": "web"}})), Some(false));
        assert_eq!(
            m(json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]})),
            Some(true)
        );
        assert_eq!(
            m(json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]})),
            Some(true)
        );
        assert_eq!(
            m(json!({"matchExpressions": [{"key": "x", "operator": "Bogus"}]})),
            None
        );
    }
}
