//! The tracked field set of an object (leaf paths, list-map elements keyed `k:{...}`, set
//! elements `v:...`), and reading and removing the value at a path.

use serde_json::{Map, Value};

use super::{FieldSet, Path, Scope, Shape};
use crate::server::kinds::ListType;

pub(super) fn key_token(item: &Value, keys: &[String]) -> Option<String> {
    let obj = item.as_object()?;
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), obj.get(k)?.clone());
    }
    Some(format!("k:{}", Value::Object(m)))
}

/// A map or keyed element with content: owned as a node (FieldsV1 `"."`) besides its fields, and
/// never "changed" by its content alone.
pub(super) fn is_node(v: &Value) -> bool {
    v.as_object().is_some_and(|m| !m.is_empty())
}

pub(super) fn collect(
    v: &Value,
    shape: Shape,
    names: &mut Vec<String>,
    cur: &mut Path,
    out: &mut FieldSet,
) {
    match v {
        // an atomic map is one leaf
        Value::Object(m) if !m.is_empty() && !shape.map_is_atomic(names) => {
            if !cur.is_empty() {
                out.insert(cur.clone());
            }
            for (k, child) in m {
                names.push(k.clone());
                cur.push(format!("f:{k}"));
                match child {
                    Value::Array(items) => collect_list(items, shape, names, cur, out),
                    _ => collect(child, shape, names, cur, out),
                }
                cur.pop();
                names.pop();
            }
        }
        _ => {
            out.insert(cur.clone());
        }
    }
}

pub(super) fn collect_list(
    items: &[Value],
    shape: Shape,
    names: &mut Vec<String>,
    cur: &mut Path,
    out: &mut FieldSet,
) {
    if items.is_empty() {
        out.insert(cur.clone());
        return;
    }
    match shape.list_type(names) {
        ListType::Map(keys) if !keys.is_empty() => {
            let tokens: Option<Vec<String>> = items.iter().map(|i| key_token(i, &keys)).collect();
            match tokens {
                Some(tokens) => {
                    out.insert(cur.clone());
                    for (item, tok) in items.iter().zip(tokens) {
                        cur.push(tok);
                        collect(item, shape, names, cur, out);
                        cur.pop();
                    }
                }
                None => {
                    out.insert(cur.clone());
                }
            }
        }
        ListType::Set => {
            out.insert(cur.clone());
            for item in items {
                cur.push(format!("v:{item}"));
                out.insert(cur.clone());
                cur.pop();
            }
        }
        _ => {
            out.insert(cur.clone());
        }
    }
}

/// Fields the server never tracks (`stripMetaManager`).
pub(super) fn stripped(p: &Path) -> bool {
    match p.as_slice() {
        [a] => a == "f:apiVersion" || a == "f:kind" || a == "f:metadata",
        [m, f, ..] if m == "f:metadata" => matches!(
            f.as_str(),
            "f:name"
                | "f:namespace"
                | "f:creationTimestamp"
                | "f:selfLink"
                | "f:uid"
                | "f:generation"
                | "f:managedFields"
                | "f:resourceVersion"
                | "f:deletionTimestamp"
                | "f:deletionGracePeriodSeconds"
        ),
        _ => false,
    }
}

/// The tracked field set of an object (within `scope`).
pub fn fields_of(v: &Value, shape: Shape, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    collect(v, shape, &mut vec![], &mut vec![], &mut out);
    out.retain(|p| !stripped(p) && scope.admits(p));
    out
}

pub(super) fn parse_token(tok: &str) -> Option<(char, Value)> {
    let (kind, rest) = tok.split_at_checked(2)?;
    match kind {
        "f:" => Some(('f', Value::String(rest.to_string()))),
        "k:" | "v:" => serde_json::from_str(rest)
            .ok()
            .map(|v| (kind.as_bytes()[0] as char, v)),
        _ => None,
    }
}

fn element_matches(item: &Value, kind: char, want: &Value) -> bool {
    match kind {
        'k' => want
            .as_object()
            .is_some_and(|w| w.iter().all(|(k, v)| item.get(k) == Some(v))),
        _ => item == want,
    }
}

/// The value at `path`.
pub fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for tok in path {
        let (kind, arg) = parse_token(tok)?;
        cur = match (kind, cur) {
            ('f', Value::Object(m)) => m.get(arg.as_str()?)?,
            ('k' | 'v', Value::Array(items)) => {
                items.iter().find(|i| element_matches(i, kind, &arg))?
            }
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the field or element at `path` (no-op when absent).
pub fn remove(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for tok in parent {
        let Some((kind, arg)) = parse_token(tok) else {
            return;
        };
        let next = match (kind, cur) {
            ('f', Value::Object(m)) => arg.as_str().and_then(|k| m.get_mut(k)),
            ('k' | 'v', Value::Array(items)) => {
                items.iter_mut().find(|i| element_matches(i, kind, &arg))
            }
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (parse_token(last), cur) {
        (Some(('f', Value::String(k))), Value::Object(m)) => {
            m.remove(&k);
        }
        (Some((kind @ ('k' | 'v'), arg)), Value::Array(items)) => {
            items.retain(|i| !element_matches(i, kind, &arg));
        }
        _ => {}
    }
}

/// The list type at a token path (its field names).
pub(super) fn shape_list(shape: Shape, p: &Path) -> ListType {
    let names: Vec<String> = p
        .iter()
        .filter_map(|t| t.strip_prefix("f:").map(String::from))
        .collect();
    shape.list_type(&names)
}
