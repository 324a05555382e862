//! Server-side apply: the applied object read and scoped, then merged by field ownership into a
//! create or an update.

use serde_json::{Value, json};

use super::request::{ApiRequest, Reply, Route, meta_str};
use super::state::State;
use crate::server::fields::{self, Scope, Writer};
use crate::server::status::{ApiError, FieldCause};

/// An apply patch's body: YAML, or JSON (what clients such as kube send), which is YAML too and
/// reads as the same object, so it is read by the faster JSON reader. Only printable ASCII goes
/// that way: the YAML reader refuses some characters JSON carries raw (C1 controls), and the
/// server's reader refuses them too. What is not JSON goes to the YAML reader.
fn apply_body(body: &[u8]) -> Result<Value, ApiError> {
    let plain = body
        .iter()
        .all(|b| matches!(b, b' '..=b'~' | b'\n' | b'\r' | b'\t'));
    if plain && let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the body of the request is not UTF-8"))?;
    raygate::manifest::from_yaml(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// The apply's `fieldManager` (required).
fn apply_manager(req: &ApiRequest) -> Result<String, ApiError> {
    req.query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .cloned()
        .ok_or_else(|| {
            ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![FieldCause::required(
                    "fieldManager",
                    "is required for apply patch",
                )],
            )
        })
}

/// The apply's `force` (absent: false).
fn apply_force(req: &ApiRequest) -> Result<bool, ApiError> {
    match req.query.get("force").map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid force value: {other}"
        ))),
    }
}

/// Keeps only the part of `applied` that `scope` (the subresource) covers.
fn scope_applied(applied: &mut Value, scope: Scope) {
    if let Some(m) = applied.as_object_mut() {
        match scope {
            Scope::Status => {
                m.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
            }
            Scope::Main {
                status_separate: true,
            } => {
                m.remove("status");
            }
            Scope::Main { .. } => {}
        }
    }
}

impl State {
    pub(super) fn apply(&mut self, route: &Route, req: &ApiRequest, now: &str, dry: bool) -> Reply {
        let manager = apply_manager(req)?;
        let force = apply_force(req)?;
        let applied = self.applied_object(route, req)?;
        let name = route.name.clone().unwrap_or_default();
        let api_version = route.rt.api_version(&route.version);
        let w = Writer {
            manager: &manager,
            api_version: &api_version,
            time: now,
            scope: route.scope(),
        };
        let live = self.store.get(
            &route.key(),
            route.namespace.as_deref().unwrap_or_default(),
            &name,
        );
        if let Some(rv) = meta_str(&applied, "resourceVersion")
            && live.as_deref().and_then(|l| meta_str(l, "resourceVersion")) != Some(rv)
        {
            return Err(self.conflict(route));
        }
        match live {
            None => {
                if route.subresource.is_some() {
                    return Err(route.not_found(&name));
                }
                let merged = fields::apply(None, &applied, force, route.shape(), &w)?;
                let obj = self.prepare_create(route, merged, now, None)?;
                self.finish_create(route, obj, dry)
            }
            Some(old) => {
                let merged = fields::apply(Some(&old), &applied, force, route.shape(), &w)?;
                self.update_existing(route, &old, merged, dry, None)
            }
        }
    }

    /// The applied object: read, checked against the route (type, namespace, name) and
    /// scoped to the route's subresource.
    fn applied_object(&self, route: &Route, req: &ApiRequest) -> Result<Value, ApiError> {
        let mut applied = apply_body(&req.body)?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "error decoding YAML: expected an object",
            ));
        }
        self.check_type_meta(route, &applied)?;
        if applied.get("apiVersion").is_none() || applied.get("kind").is_none() {
            return Err(ApiError::bad_request("invalid object type: /, Kind="));
        }
        self.check_namespace_in_body(route, &mut applied)?;
        let name = route.name.clone().unwrap_or_default();
        match meta_str(&applied, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => applied["metadata"]["name"] = json!(name),
        }
        // only the subresource's part counts
        scope_applied(&mut applied, route.scope());
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1.0e6f64..1.0e6).prop_map(Value::from),
            prop_oneof![
                Just("yes".to_string()),
                Just("0755".to_string()),
                Just("1e5".to_string()),
                Just("~".to_string()),
                Just("null".to_string()),
                Just("- a: b".to_string()),
                ".*",
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(".*", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// An apply body in JSON (as kube sends it) reads as the same object through the JSON
        /// reader as through the YAML reader.
        #[test]
        fn a_json_apply_body_reads_as_the_yaml_reader_reads_it(v in json_value()) {
            let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod", "spec": v})).unwrap();
            let yaml = raygate::manifest::from_yaml::<Value>(std::str::from_utf8(&body).unwrap());
            match (apply_body(&body), yaml) {
                (Ok(read), Ok(yaml)) => prop_assert_eq!(read, yaml),
                (Err(_), Err(_)) => {}
                (read, yaml) => prop_assert!(false, "{read:?} but the YAML reader: {yaml:?}"),
            }
        }
    }

    #[test]
    fn an_apply_body_in_yaml_is_read_as_yaml() {
        let body = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  mode: 0755\n";
        assert_eq!(
            apply_body(body).unwrap(),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"mode": 493}})
        );
        assert_eq!(apply_body(b"a: [").unwrap_err().code, 400);
    }
}
