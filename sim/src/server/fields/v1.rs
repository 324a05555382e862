//! FieldsV1 JSON: encoding and decoding field sets, and a look-up without decoding.

use serde_json::{Map, Value, json};

use super::{FieldSet, Path};

/// FieldsV1 JSON of a field set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for p in set {
        let mut cur = &mut root;
        for tok in p {
            let Value::Object(m) = cur else { break };
            cur = m.entry(tok.clone()).or_insert_with(|| json!({}));
        }
    }
    // an owned node with owned children is marked "."
    mark(&mut root, &mut vec![], set);
    root
}

fn mark(node: &mut Value, cur: &mut Path, set: &FieldSet) {
    let Value::Object(m) = node else { return };
    if !cur.is_empty() && !m.is_empty() && set.contains(cur) {
        m.insert(".".into(), json!({}));
    }
    for (tok, child) in m.iter_mut() {
        if tok == "." {
            continue;
        }
        cur.push(tok.clone());
        mark(child, cur, set);
        cur.pop();
    }
}

fn from_v1(v: &Value, cur: &mut Path, out: &mut FieldSet) {
    if let Value::Object(m) = v {
        for (tok, child) in m {
            if tok == "." {
                out.insert(cur.clone());
                continue;
            }
            cur.push(tok.clone());
            if child.as_object().is_some_and(Map::is_empty) {
                out.insert(cur.clone());
            } else {
                from_v1(child, cur, out);
            }
            cur.pop();
        }
    }
}

/// The field set of FieldsV1 JSON.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    from_v1(v, &mut vec![], &mut out);
    out
}

/// Whether FieldsV1 JSON holds `p` (as a leaf `{}` or a node marked `"."`), without decoding it.
pub(super) fn v1_contains(v1: &Value, p: &Path) -> bool {
    let mut node = v1;
    for tok in p {
        match node.get(tok) {
            Some(n) => node = n,
            None => return false,
        }
    }
    node.as_object()
        .is_some_and(|m| m.is_empty() || m.contains_key("."))
}
