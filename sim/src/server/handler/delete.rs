//! DELETE: options and preconditions, graceful deletion, finalizers and propagation.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::request::{ApiRequest, Body, Reply, Route, dry_run, meta_str};
use super::state::State;
use crate::server::status::{ApiError, FieldCause};
use crate::server::store::{ChangeType, Encoded};

impl State {
    /// DELETE: finalizers keep the object (with `deletionTimestamp`) until they are gone; a
    /// scheduled, running pod is deleted gracefully (its kubelet finishes it).
    pub fn delete(
        &mut self,
        route: &Route,
        req: &ApiRequest,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Reply {
        let opts = delete_options(req)?;
        let dry = dry_run(&req.query)?
            || opts["dryRun"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == "All"));
        let old = self.existing(route)?;
        check_preconditions(&opts, &old)?;
        let grace_param = req
            .query
            .get("gracePeriodSeconds")
            .and_then(|g| g.parse::<i64>().ok())
            .or_else(|| opts["gracePeriodSeconds"].as_i64());
        let grace = grace_period(route, &old, grace_param);
        let propagation = propagation(&opts, &req.query)?;
        let old_finalizers = finalizers(&old);
        let new_finalizers = gc_finalizers(&old_finalizers, propagation);
        if grace > 0 || !new_finalizers.is_empty() {
            let next = deleting(&old, &old_finalizers, new_finalizers, grace, now);
            if next == *old {
                return Ok((200, self.stored_out(route, Encoded::new(old))));
            }
            if dry {
                return Ok((200, self.object_out(route, &next).into()));
            }
            let stored = self
                .store
                .commit_encoded(&route.key(), ChangeType::Modified, next);
            return Ok((200, self.stored_out(route, stored)));
        }
        if dry {
            return Ok((200, self.deleted_reply(route, Encoded::new(old))));
        }
        let stored = self
            .store
            .commit_encoded(&route.key(), ChangeType::Deleted, (*old).clone());
        Ok((200, self.deleted_reply(route, stored)))
    }

    /// Pods answer an immediate delete with the object (`ReturnDeletedObject`), others with a
    /// success `Status`.
    fn deleted_reply(&self, route: &Route, stored: Encoded) -> Body {
        if route.rt.builtin && route.rt.group.is_empty() && route.rt.kind == "Pod" {
            return self.stored_out(route, stored);
        }
        let obj = &stored.object;
        Body::Built(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {
                "name": meta_str(obj, "name").unwrap_or_default(),
                "group": route.rt.group,
                "kind": route.rt.plural,
                "uid": meta_str(obj, "uid").unwrap_or_default(),
            },
        }))
    }
}

/// The request's `DeleteOptions` (an empty body is none), or the decoder's 400.
fn delete_options(req: &ApiRequest) -> Result<Value, ApiError> {
    if req.body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(&req.body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })
}

/// The options' `preconditions` (uid, then resourceVersion) against the stored object.
fn check_preconditions(opts: &Value, old: &Value) -> Result<(), ApiError> {
    if let Some(uid) = opts["preconditions"]["uid"].as_str()
        && Some(uid) != meta_str(old, "uid")
    {
        return Err(ApiError::apply_conflict(
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(old, "uid").unwrap_or_default()
            ),
            vec![],
        ));
    }
    if let Some(rv) = opts["preconditions"]["resourceVersion"].as_str()
        && Some(rv) != meta_str(old, "resourceVersion")
    {
        return Err(ApiError::apply_conflict(
            format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta_str(old, "resourceVersion").unwrap_or_default()
            ),
            vec![],
        ));
    }
    Ok(())
}

/// The grace period of a delete: a scheduled, non-terminal pod's (the request's, else its
/// `terminationGracePeriodSeconds`, else 30); 0 for anything else.
fn grace_period(route: &Route, old: &Value, grace_param: Option<i64>) -> i64 {
    let is_pod = route.rt.builtin && route.rt.group.is_empty() && route.rt.kind == "Pod";
    if !is_pod {
        return 0;
    }
    let unscheduled = old["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
    let terminal = matches!(
        old["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    if unscheduled || terminal {
        0
    } else {
        grace_param
            .or_else(|| old["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30)
            .max(0)
    }
}

/// `old` being deleted: the delete's finalizers, and `deletionTimestamp` (`grace` from `now`)
/// unless an earlier one stands; the first one bumps the generation (`BeforeDelete`).
fn deleting(
    old: &Value,
    old_finalizers: &[String],
    new_finalizers: Vec<String>,
    grace: i64,
    now: k8s_openapi::jiff::Timestamp,
) -> Value {
    let mut next = old.clone();
    if new_finalizers != old_finalizers {
        next["metadata"]["finalizers"] = json!(new_finalizers);
    }
    let at = now
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(grace))
        .unwrap_or(now);
    let at = crate::clock::seconds(at);
    let earlier = meta_str(old, "deletionTimestamp").is_none_or(|t| at.as_str() < t);
    if earlier {
        next["metadata"]["deletionTimestamp"] = json!(at);
        next["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    }
    // setting deletionTimestamp bumps the generation (`BeforeDelete`)
    if meta_str(old, "deletionTimestamp").is_none()
        && let Some(g) = old["metadata"]["generation"].as_i64()
    {
        next["metadata"]["generation"] = json!(g + 1);
    }
    next
}

/// A delete's propagation: `propagationPolicy` (body or query) or the deprecated
/// `orphanDependents`, validated as `ValidateDeleteOptions` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Foreground,
    Background,
    Orphan,
}

fn propagation(
    opts: &Value,
    query: &HashMap<String, String>,
) -> Result<Option<Propagation>, ApiError> {
    let policy = opts["propagationPolicy"]
        .as_str()
        .map(String::from)
        .or_else(|| query.get("propagationPolicy").cloned());
    let orphan = opts["orphanDependents"].as_bool().or_else(|| {
        query
            .get("orphanDependents")
            .and_then(|o| o.parse::<bool>().ok())
    });
    let invalid = |cause| ApiError::invalid("meta.k8s.io", "DeleteOptions", "", vec![cause]);
    if let (Some(p), Some(_)) = (&policy, orphan) {
        return Err(invalid(FieldCause::invalid(
            "propagationPolicy",
            &format!("\"{p}\""),
            "orphanDependents and deletionPropagation cannot be both set",
        )));
    }
    match (policy.as_deref(), orphan) {
        (Some("Foreground"), _) => Ok(Some(Propagation::Foreground)),
        (Some("Background"), _) => Ok(Some(Propagation::Background)),
        (Some("Orphan"), _) | (None, Some(true)) => Ok(Some(Propagation::Orphan)),
        (None, Some(false)) => Ok(Some(Propagation::Background)),
        (None, None) => Ok(None),
        (Some(other), _) => Err(invalid(FieldCause::not_supported(
            "propagationPolicy",
            &format!("\"{other}\""),
            &["\"Foreground\"", "\"Background\"", "\"Orphan\"", "\"nil\""].map(String::from),
        ))),
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .collect()
}

/// The finalizers a delete leaves (`deletionFinalizersForGarbageCollection`): `orphan` and
/// `foregroundDeletion` are removed and added back as the policy says; without a policy an
/// existing one of them stands; every kind served here defaults to background deletion.
pub fn gc_finalizers(existing: &[String], policy: Option<Propagation>) -> Vec<String> {
    let has = |f: &str| existing.iter().any(|e| e == f);
    let (orphan, foreground) = match policy {
        Some(Propagation::Orphan) => (true, false),
        Some(Propagation::Foreground) => (false, true),
        Some(Propagation::Background) => (false, false),
        // shouldOrphanDependents reads the finalizers in order; shouldDeleteDependents any
        None => {
            let first = existing
                .iter()
                .find(|f| *f == ORPHAN_FINALIZER || *f == FOREGROUND_FINALIZER);
            (
                first.is_some_and(|f| f == ORPHAN_FINALIZER),
                has(FOREGROUND_FINALIZER),
            )
        }
    };
    let mut out: Vec<String> = existing
        .iter()
        .filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER)
        .cloned()
        .collect();
    if orphan {
        out.push(ORPHAN_FINALIZER.into());
    }
    if foreground {
        out.push(FOREGROUND_FINALIZER.into());
    }
    let same = out.len() == existing.len() && out.iter().all(|f| has(f));
    if same { existing.to_vec() } else { out }
}

/// `metav1.FinalizerOrphanDependents`.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// `metav1.FinalizerDeleteDependents`.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delete_finalizers_follow_the_propagation_policy() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(gc_finalizers(&[], None), s(&[]));
        assert_eq!(gc_finalizers(&[], Some(Propagation::Background)), s(&[]));
        assert_eq!(
            gc_finalizers(&s(&["x"]), Some(Propagation::Foreground)),
            s(&["x", "foregroundDeletion"])
        );
        assert_eq!(
            gc_finalizers(&s(&["orphan"]), Some(Propagation::Foreground)),
            s(&["foregroundDeletion"])
        );
        assert_eq!(
            gc_finalizers(&s(&["foregroundDeletion"]), Some(Propagation::Orphan)),
            s(&["orphan"])
        );
        // without a policy an existing GC finalizer stands
        assert_eq!(gc_finalizers(&s(&["orphan"]), None), s(&["orphan"]));
        assert_eq!(
            gc_finalizers(&s(&["foregroundDeletion", "x"]), None),
            s(&["foregroundDeletion", "x"])
        );
        // an explicit Background drops both
        assert_eq!(
            gc_finalizers(&s(&["orphan", "x"]), Some(Propagation::Background)),
            s(&["x"])
        );
    }
}
