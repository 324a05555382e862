//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch
//! (core kinds only, as the real server: merge keys from the Go types, `$patch`, `$retainKeys`,
//! `$deleteFromPrimitiveList`, `$setElementOrder` accepted).

use serde_json::{Map, Value};

use crate::server::fields::Shape;
use crate::server::kinds::ListType;
use crate::server::status::ApiError;

/// The PATCH flavours, by `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let ct = ct.split(';').next().unwrap_or_default().trim();
        match ct {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Applies a merge, JSON or strategic patch to `doc`.
pub fn apply(
    kind: PatchType,
    doc: &mut Value,
    patch: &Value,
    shape: Shape,
) -> Result<(), ApiError> {
    match kind {
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: json: cannot unmarshal into Go value of type map[string]interface {}",
                ));
            }
            json_patch::merge(doc, patch);
            Ok(())
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(doc, &ops).map_err(|e| {
                ApiError::invalid_patch(format!(
                    "the server rejected our request due to an error in our request: {e}"
                ))
            })
        }
        PatchType::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: expected a JSON object",
                ));
            }
            strategic(doc, patch, shape, &mut vec![]);
            Ok(())
        }
        PatchType::Apply => Err(ApiError::bad_request("apply is not a patch")),
    }
}

fn merge_key(shape: Shape, names: &[String]) -> ListType {
    let n: Vec<&str> = names.iter().map(String::as_str).collect();
    shape.rt.list_type(shape.version, &n)
}

fn strategic(doc: &mut Value, patch: &Value, shape: Shape, names: &mut Vec<String>) {
    let Some(p) = patch.as_object() else {
        *doc = patch.clone();
        return;
    };
    if replaced_whole(doc, p) {
        return;
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let Some(d) = doc.as_object_mut() else { return };
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        d.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, pv) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(del)) = (d.get_mut(field), pv.as_array()) {
                items.retain(|i| !del.contains(i));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            d.remove(k);
            continue;
        }
        names.push(k.clone());
        match (d.get_mut(k), pv) {
            (Some(dv @ Value::Object(_)), Value::Object(_)) => strategic(dv, pv, shape, names),
            (Some(Value::Array(items)), Value::Array(pitems)) => {
                merge_list(items, pitems, shape, names)
            }
            (_, pv) => {
                let mut fresh = pv.clone();
                strip_directives(&mut fresh);
                d.insert(k.clone(), fresh);
            }
        }
        names.pop();
    }
}

/// A patch object's `$patch: replace` (the patch, less the directive, becomes `doc`) or
/// `$patch: delete` (`doc` becomes empty). Returns whether `doc` was replaced.
fn replaced_whole(doc: &mut Value, p: &Map<String, Value>) -> bool {
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            *doc = Value::Object(m);
            true
        }
        Some("delete") => {
            *doc = Value::Object(Map::new());
            true
        }
        _ => false,
    }
}

/// Patches list `items` (at `names`) by its list type: a map list merges items by their first
/// merge key, a set adds the missing values, any other list is replaced.
fn merge_list(items: &mut Vec<Value>, pitems: &[Value], shape: Shape, names: &mut Vec<String>) {
    match merge_key(shape, names) {
        ListType::Map(keys) if !keys.is_empty() => {
            let key = &keys[0];
            for pi in pitems {
                merge_item(items, pi, key, shape, names);
            }
        }
        ListType::Set => {
            for pi in pitems {
                if !items.contains(pi) {
                    items.push(pi.clone());
                }
            }
        }
        _ => *items = pitems.to_vec(),
    }
}

/// Patches the item of map list `items` whose `key` matches patch item `pi`: removed on
/// `$patch: delete`, else merged, or appended when there is none.
fn merge_item(
    items: &mut Vec<Value>,
    pi: &Value,
    key: &str,
    shape: Shape,
    names: &mut Vec<String>,
) {
    let kv = pi.get(key);
    let pos = kv.and_then(|kv| items.iter().position(|i| i.get(key) == Some(kv)));
    let delete = pi.get("$patch").and_then(Value::as_str) == Some("delete");
    match (pos, delete) {
        (Some(i), true) => {
            items.remove(i);
        }
        (None, true) => {}
        (Some(i), false) => strategic(&mut items[i], pi, shape, names),
        (None, false) => {
            let mut fresh = Value::Object(Map::new());
            strategic(&mut fresh, pi, shape, names);
            items.push(fresh);
        }
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::kinds::Registry;
    use serde_json::json;

    fn with_pods<T>(f: impl FnOnce(Shape) -> T) -> T {
        let r = Registry::with_builtins();
        let rt = r.find("", "v1", "pods").unwrap();
        f(Shape {
            rt: &rt,
            version: "v1",
        })
    }

    #[test]
    fn strategic_merge_merges_containers_by_name_and_deletes_by_directive() {
        with_pods(|shape| {
            let mut doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
                "spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}], "tolerations": [{"key": "t"}]}});
            let patch = json!({"metadata": {"labels": {"b": null, "c": "3"}, "finalizers": ["y"]},
                "spec": {"containers": [{"name": "b", "image": "2"}, {"name": "a", "$patch": "delete"}, {"name": "c", "image": "9"}],
                    "tolerations": [{"key": "u"}], "$setElementOrder/containers": [{"name": "b"}]}});
            apply(PatchType::Strategic, &mut doc, &patch, shape).unwrap();
            assert_eq!(
                doc,
                json!({"metadata": {"labels": {"a": "1", "c": "3"}, "finalizers": ["x", "y"]},
                "spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "9"}], "tolerations": [{"key": "u"}]}})
            );
        })
    }

    #[test]
    fn merge_and_json_patches_follow_their_rfcs() {
        with_pods(|shape| {
            let mut doc = json!({"spec": {"containers": [{"name": "a"}], "nodeName": "n"}});
            apply(
                PatchType::Merge,
                &mut doc,
                &json!({"spec": {"containers": [{"name": "b"}], "nodeName": null}}),
                shape,
            )
            .unwrap();
            assert_eq!(doc, json!({"spec": {"containers": [{"name": "b"}]}}));
            apply(
                PatchType::Json,
                &mut doc,
                &json!([{"op": "add", "path": "/spec/nodeName", "value": "m"}]),
                shape,
            )
            .unwrap();
            assert_eq!(doc["spec"]["nodeName"], "m");
            let e = apply(
                PatchType::Json,
                &mut doc,
                &json!([{"op": "test", "path": "/spec/nodeName", "value": "x"}]),
                shape,
            )
            .unwrap_err();
            assert_eq!(e.code, 422);
            let e = apply(PatchType::Json, &mut doc, &json!({"op": "add"}), shape).unwrap_err();
            assert_eq!(e.code, 400);
        })
    }
}
