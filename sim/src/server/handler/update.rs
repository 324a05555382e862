//! The update strategy PUT, PATCH and apply share: subresource scoping, immutable metadata,
//! schema, generation, then the commit (or no write when nothing changed).

use std::sync::Arc;

use serde_json::{Value, json};

use super::request::{ApiRequest, Reply, Route, manager_of, meta_str};
use super::state::{State, Strict};
use crate::server::fields::{self, Writer};
use crate::server::kinds::ResourceType;
use crate::server::status::ApiError;
use crate::server::store::{ChangeType, Encoded};

/// Whether `a` and `b` agree on everything but `metadata` (and `status` when it is a separate
/// subresource): the spec part whose change bumps the generation. Compared in place (copying
/// both objects to compare them was a tenth of a patch's cost).
fn same_spec_part(a: &Value, b: &Value, drop_status: bool) -> bool {
    let (Some(x), Some(y)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |k: &String| k != "metadata" && !(drop_status && k == "status");
    x.keys().filter(|k| kept(k)).count() == y.keys().filter(|k| kept(k)).count()
        && x.iter()
            .filter(|(k, _)| kept(k))
            .all(|(k, v)| y.get(k) == Some(v))
}

pub(super) fn tracks_generation(rt: &ResourceType) -> bool {
    !rt.builtin || matches!(rt.group.as_str(), "apps" | "policy" | "batch")
}

impl State {
    /// The update strategy shared by PUT, PATCH and apply: subresource scoping, immutable
    /// metadata, schema, generation, then commit (or no write when nothing changed).
    /// A PUT's or a non-apply PATCH's object written over `old`: scoped to the route's
    /// subresource, `old`'s managedFields carried over and updated for the request's manager,
    /// then stored.
    pub(super) fn write_update(
        &mut self,
        route: &Route,
        req: &ApiRequest,
        now: &str,
        (old, new): (&Arc<Value>, Value),
        dry: bool,
    ) -> Reply {
        let manager = manager_of(req);
        let w = Writer {
            manager: &manager,
            api_version: &route.rt.api_version(&route.version),
            time: now,
            scope: route.scope(),
        };
        let mut new = self.scoped(route, old, new);
        new["metadata"]["managedFields"] = old["metadata"]
            .get("managedFields")
            .cloned()
            .unwrap_or(Value::Null);
        fields::record_update(Some(old), &mut new, route.shape(), &w);
        self.update_existing(route, old, new, dry, Strict::of(req))
    }

    pub(super) fn update_existing(
        &mut self,
        route: &Route,
        old: &Arc<Value>,
        mut new: Value,
        dry: bool,
        strict: Option<Strict>,
    ) -> Reply {
        if (route.rt.group.as_str(), route.rt.kind.as_str()) == ("", "LimitRange") {
            crate::server::admission::default_limit_range(&mut new);
        }
        let name = route.name.clone().unwrap_or_default();
        match meta_str(&new, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        if route.subresource.as_deref() == Some("status") {
            new = status_write(old, new);
        } else if route.rt.status_subresource {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        keep_system_metadata(old, &mut new);
        drop_empty_metadata(&mut new);
        new["apiVersion"] = json!(route.rt.api_version(&route.version));
        new["kind"] = json!(route.rt.kind);
        self.admit_schema(route, &mut new, Some(old), strict)?;
        if tracks_generation(&route.rt) {
            let drop_status = route.rt.status_subresource;
            if !same_spec_part(&new, old, drop_status) {
                let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
                new["metadata"]["generation"] = json!(g + 1);
            }
        }
        if same_but_type_meta(&new, old) {
            return Ok((200, self.stored_out(route, Encoded::new(old.clone()))));
        }
        // `ShouldDeleteDuringUpdate`: no finalizers left and a deletion grace period of 0 (a
        // pod still in its grace period stays for its kubelet)
        let finalized = old["metadata"].get("deletionTimestamp").is_some()
            && new["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty)
            && new["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .is_none_or(|g| g == 0);
        if dry {
            return Ok((200, self.object_out(route, &new).into()));
        }
        let typ = if finalized {
            ChangeType::Deleted
        } else {
            ChangeType::Modified
        };
        let stored = self.store.commit_encoded(&route.key(), typ, new);
        Ok((200, self.stored_out(route, stored)))
    }

    /// The object a write would produce before ownership: status writes keep everything but
    /// status; main writes keep the old status (where it is a subresource).
    pub(super) fn scoped(&self, route: &Route, old: &Value, mut new: Value) -> Value {
        if route.subresource.as_deref() == Some("status") {
            let mut next = new;
            match (next.as_object_mut(), old.as_object()) {
                (Some(n), Some(o)) => restore(n, o, &["status"]),
                _ => return with_status_of(old, &next),
            }
            next
        } else {
            if route.rt.status_subresource {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            new
        }
    }
}

/// `new == old` but for `apiVersion` and `kind` (an update that changes nothing else writes
/// nothing), without copying `old`.
fn same_but_type_meta(new: &Value, old: &Value) -> bool {
    let (Some(n), Some(o)) = (new.as_object(), old.as_object()) else {
        return new == old;
    };
    let kept = |k: &String| k != "apiVersion" && k != "kind";
    n.keys().filter(|k| kept(k)).count() == o.keys().filter(|k| kept(k)).count()
        && n.iter()
            .filter(|(k, _)| kept(k))
            .all(|(k, v)| o.get(k) == Some(v))
}

/// `new` made equal to `old` but for the top-level fields in `keep` (which stay as `new` has
/// them, absent included). Built in place: a status write's object agrees with the stored one
/// nearly everywhere, and comparing costs far less than copying the stored object.
fn restore(
    new: &mut serde_json::Map<String, Value>,
    old: &serde_json::Map<String, Value>,
    keep: &[&str],
) {
    new.retain(|k, _| keep.contains(&k.as_str()) || old.contains_key(k));
    for (k, v) in old {
        if !keep.contains(&k.as_str()) && new.get(k) != Some(v) {
            new.insert(k.clone(), v.clone());
        }
    }
}

/// `old` with the `status` of `new` (none when `new` has none).
fn with_status_of(old: &Value, new: &Value) -> Value {
    let mut next = old.clone();
    match new.get("status") {
        Some(s) => next["status"] = s.clone(),
        None => {
            if let Some(m) = next.as_object_mut() {
                m.remove("status");
            }
        }
    }
    next
}

/// What a status write stores: `old` with the `status` and `metadata.managedFields` of `new`.
fn status_write(old: &Value, mut new: Value) -> Value {
    if let (Some(n), Some(o)) = (new.as_object_mut(), old.as_object()) {
        restore(n, o, &["status", "metadata"]);
        let om = o.get("metadata").and_then(Value::as_object);
        if let (Some(nm), Some(om)) = (n.get_mut("metadata").and_then(Value::as_object_mut), om) {
            restore(nm, om, &["managedFields"]);
            return new;
        }
    }
    let managed = new["metadata"]
        .as_object_mut()
        .and_then(|m| m.remove("managedFields"));
    let mut next = with_status_of(old, &new);
    match managed {
        Some(mf) => next["metadata"]["managedFields"] = mf,
        None => {
            if let Some(m) = next["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
        }
    }
    next
}

/// `ObjectMeta`'s collections are `omitempty`: the server decodes an empty one as none and never
/// writes it back (`labels: {}`, `ownerReferences: []` after the garbage collector orphans a
/// dependent, `finalizers: []` after the last is removed).
pub(super) fn drop_empty_metadata(obj: &mut Value) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        for f in [
            "labels",
            "annotations",
            "ownerReferences",
            "finalizers",
            "managedFields",
        ] {
            let empty = match m.get(f) {
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                m.remove(f);
            }
        }
    }
}

/// The metadata a write cannot change (the registry's `PrepareForUpdate`): the old object's uid,
/// timestamps, generation, namespace, name and resourceVersion, and none where it had none.
fn keep_system_metadata(old: &Value, new: &mut Value) {
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match old["metadata"].get(f) {
            Some(v) => new["metadata"][f] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(f);
                }
            }
        }
    }
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_metadata_collections_are_dropped_as_go_s_omitempty_drops_them() {
        let mut obj = json!({"metadata": {"name": "a", "labels": {}, "annotations": {"k": "v"},
            "ownerReferences": [], "finalizers": null}, "spec": {"list": []}});
        drop_empty_metadata(&mut obj);
        assert_eq!(
            obj,
            json!({"metadata": {"name": "a", "annotations": {"k": "v"}}, "spec": {"list": []}})
        );
    }

    #[test]
    fn a_status_write_keeps_all_but_the_status_and_managed_fields_of_the_stored_object() {
        let old = json!({"metadata": {"name": "a", "managedFields": [1], "labels": {"l": "1"}},
            "spec": {"x": 1}, "status": {"s": 1}, "data": 1});
        let new = json!({"metadata": {"name": "b", "managedFields": [2]},
            "spec": {"x": 2}, "status": {"s": 2}, "extra": 1});
        let want = json!({"metadata": {"name": "a", "managedFields": [2], "labels": {"l": "1"}},
            "spec": {"x": 1}, "status": {"s": 2}, "data": 1});
        assert_eq!(status_write(&old, new.clone()), want);
        let bare = json!({"metadata": {"name": "b"}, "spec": {"x": 2}});
        let want =
            json!({"metadata": {"name": "a", "labels": {"l": "1"}}, "spec": {"x": 1}, "data": 1});
        assert_eq!(status_write(&old, bare), want);
        let mut n = new.as_object().cloned().unwrap_or_default();
        restore(
            &mut n,
            old.as_object().unwrap_or(&serde_json::Map::new()),
            &["status"],
        );
        assert_eq!(Value::Object(n), with_status_of(&old, &new));
    }

    #[test]
    fn the_spec_part_ignores_metadata_and_a_separate_status_only() {
        let a = json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"s": 1}});
        let meta = json!({"metadata": {"name": "b"}, "spec": {"x": 1}, "status": {"s": 1}});
        let status = json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"s": 2}});
        let no_status = json!({"metadata": {"name": "a"}, "spec": {"x": 1}});
        let spec = json!({"metadata": {"name": "a"}, "spec": {"x": 2}, "status": {"s": 1}});
        let extra = json!({"metadata": {}, "spec": {"x": 1}, "status": {"s": 1}, "data": 1});
        assert!(same_spec_part(&a, &meta, false));
        assert!(same_spec_part(&a, &status, true) && same_spec_part(&a, &no_status, true));
        assert!(!same_spec_part(&a, &status, false) && !same_spec_part(&a, &no_status, false));
        assert!(!same_spec_part(&a, &spec, true) && !same_spec_part(&a, &extra, true));
        assert!(!same_spec_part(&extra, &a, true));
        assert!(same_spec_part(&json!(1), &json!(1), true) && !same_spec_part(&json!(1), &a, true));
    }
}
