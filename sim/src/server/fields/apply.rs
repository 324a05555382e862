//! Server-side apply: the applier's field set, conflicts with other managers (or a forced
//! takeover), the merge, and removal of fields the applier stopped applying.

use serde_json::{Value, json};

use super::entries::{Entry, entries, set_entries};
use super::paths::{fields_of, get, is_node, key_token, parse_token, remove, shape_list};
use super::{FieldSet, Path, Shape, Writer};
use crate::server::kinds::ListType;
use crate::server::status::ApiError;

fn merge_into(live: &mut Value, applied: &Value, shape: Shape, names: &mut Vec<String>) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) if !shape.map_is_atomic(names) => {
            for (k, av) in a {
                names.push(k.clone());
                match l.get_mut(k) {
                    Some(lv) => merge_into(lv, av, shape, names),
                    None => {
                        l.insert(k.clone(), av.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(l), Value::Array(a)) => match shape.list_type(names) {
            ListType::Map(keys) if !keys.is_empty() => {
                for item in a {
                    let tok = key_token(item, &keys);
                    let found = tok.as_ref().and_then(|t| {
                        l.iter_mut()
                            .find(|li| key_token(li, &keys).as_ref() == Some(t))
                    });
                    match found {
                        Some(li) => merge_into(li, item, shape, names),
                        None => l.push(item.clone()),
                    }
                }
            }
            ListType::Set => {
                for item in a {
                    if !l.contains(item) {
                        l.push(item.clone());
                    }
                }
            }
            _ => *l = a.clone(),
        },
        (l, a) => *l = a.clone(),
    }
}

fn path_string(p: &Path) -> String {
    let mut s = String::new();
    for tok in p {
        match parse_token(tok) {
            Some(('f', Value::String(f))) => {
                s.push('.');
                s.push_str(&f);
            }
            Some(('k', Value::Object(m))) => {
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            Some((_, v)) => s.push_str(&format!("[={v}]")),
            None => s.push_str(tok),
        }
    }
    s
}

fn print_manager(e: &Entry) -> String {
    let mut m = format!("{:?}", e.manager);
    if let Some(s) = &e.subresource {
        m = format!("{m} with subresource {s:?}");
    }
    if e.operation == "Update" {
        m = format!("{m} using {}", e.api_version);
    }
    m
}

/// Server-side apply of `applied` (already scoped) over `live` (`None`: create).
///
/// Returns the merged object with updated `managedFields`, or the 409 conflict error.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    force: bool,
    shape: Shape,
    w: &Writer,
) -> Result<Value, ApiError> {
    let mut list = live.map(entries).unwrap_or_default();
    let applied_fields = applied_fields(applied, shape, w);
    let sub = w.scope.subresource();
    let conflicts = match live {
        Some(live) => conflicts(live, applied, &applied_fields, &list, w.manager),
        None => vec![],
    };
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts, &list));
    }
    for (i, p) in &conflicts {
        list[*i].fields.remove(p);
    }
    let mut merged = live.cloned().unwrap_or_else(|| json!({}));
    merge_into(&mut merged, applied, shape, &mut vec![]);
    remove_unapplied(&mut merged, &list, &applied_fields, w.manager, sub);
    match list.iter_mut().find(|e| e.is(w.manager, "Apply", sub)) {
        Some(e) => {
            e.fields = applied_fields;
            e.time = w.time.to_string();
            e.api_version = w.api_version.to_string();
        }
        None => list.push(Entry {
            manager: w.manager.to_string(),
            operation: "Apply".into(),
            api_version: w.api_version.to_string(),
            time: w.time.to_string(),
            subresource: sub.map(String::from),
            fields: applied_fields,
        }),
    }
    // fields that vanished from the object leave every owner
    let present = fields_of(&merged, shape, w.scope);
    for e in list.iter_mut() {
        if e.subresource.as_deref() == sub {
            e.fields.retain(|p| present.contains(p));
        }
    }
    if merged.get("metadata").is_none() {
        merged["metadata"] = json!({});
    }
    set_entries(&mut merged, &list);
    Ok(merged)
}

/// The fields an applier owns: what it set, leaves and list elements, not the maps and merged
/// lists around them (an Update owns those too: `"."` in its FieldsV1).
fn applied_fields(applied: &Value, shape: Shape, w: &Writer) -> FieldSet {
    fields_of(applied, shape, w.scope)
        .into_iter()
        .filter(|p| {
            if p.last()
                .is_some_and(|t| t.starts_with("k:") || t.starts_with("v:"))
            {
                return true;
            }
            match get(applied, p) {
                Some(v) if is_node(v) => false,
                Some(Value::Array(items)) if !items.is_empty() => {
                    shape_list(shape, p) == ListType::Atomic
                }
                _ => true,
            }
        })
        .collect()
}

/// The applied fields whose live value differs from the applied one, each with every other
/// manager (by its index in `list`) that owns it.
fn conflicts(
    live: &Value,
    applied: &Value,
    applied_fields: &FieldSet,
    list: &[Entry],
    manager: &str,
) -> Vec<(usize, Path)> {
    let mut conflicts: Vec<(usize, Path)> = vec![];
    for p in applied_fields {
        let Some(lv) = get(live, p) else { continue };
        let av = get(applied, p);
        if av == Some(lv) || (is_node(lv) && av.is_some_and(is_node)) {
            continue;
        }
        for (i, e) in list.iter().enumerate() {
            if e.manager != manager && e.fields.contains(p) {
                conflicts.push((i, p.clone()));
            }
        }
    }
    conflicts
}

/// The 409 of an apply with `conflicts` (not forced): one cause per conflict, the message
/// grouped by manager.
fn conflict_error(conflicts: &[(usize, Path)], list: &[Entry]) -> ApiError {
    let causes = conflicts
        .iter()
        .map(|(i, p)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", print_manager(&list[*i])), "field": path_string(p)})
        })
        .collect();
    let message = if conflicts.len() == 1 {
        let (i, p) = &conflicts[0];
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            print_manager(&list[*i]),
            path_string(p)
        )
    } else {
        let mut by: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (i, p) in conflicts {
            by.entry(print_manager(&list[*i]))
                .or_default()
                .push(path_string(p));
        }
        let mut lines = vec![];
        for (m, paths) in by {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(paths.into_iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    ApiError::apply_conflict(message, causes)
}

/// Removes from `merged` the fields the applier applied before but not now, unless another
/// manager owns them (or something below them).
fn remove_unapplied(
    merged: &mut Value,
    list: &[Entry],
    applied_fields: &FieldSet,
    manager: &str,
    sub: Option<&str>,
) {
    let previously: FieldSet = list
        .iter()
        .find(|e| e.is(manager, "Apply", sub))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: Vec<&Entry> = list
        .iter()
        .filter(|e| !e.is(manager, "Apply", sub))
        .collect();
    let mut dropped: Vec<&Path> = previously
        .difference(applied_fields)
        .filter(|p| {
            !others
                .iter()
                .any(|e| e.fields.iter().any(|q| q.starts_with(p)))
        })
        .collect();
    // a removed element takes its fields with it (removing them first would lose its key)
    let all: Vec<&Path> = dropped.clone();
    dropped.retain(|p| !all.iter().any(|q| q.len() < p.len() && p.starts_with(q)));
    for p in dropped {
        remove(merged, p);
    }
}
