//! Ownership after a non-apply write (create, update, patch).

use serde_json::Value;

use super::diff::changed_and_removed;
use super::entries::{Entry, entry_is, entry_json, entry_of, set_entry_values};
use super::v1::v1_contains;
use super::{Path, Shape, Writer};

/// Ownership after a non-apply write (create, update, patch): the writer takes every field it
/// changed; fields that disappeared leave every owner. A write that changes no owned field
/// leaves `managedFields` as they were (stored objects hold them as [`set_entries`] wrote them).
pub fn record_update(old: Option<&Value>, new: &mut Value, shape: Shape, w: &Writer) {
    let (changed, removed) = changed_and_removed(old, new, shape, w.scope);
    if changed.is_empty() && removed.is_empty() {
        let kept = old
            .and_then(|o| o["metadata"].get("managedFields"))
            .filter(|m| m.as_array().is_some_and(|l| !l.is_empty()));
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            match kept {
                Some(mf) if meta.get("managedFields") != Some(mf) => {
                    meta.insert("managedFields".into(), mf.clone());
                }
                Some(_) => {}
                None => {
                    meta.remove("managedFields");
                }
            }
        }
        return;
    }
    let sub = w.scope.subresource();
    let olds = old
        .and_then(|o| o["metadata"]["managedFields"].as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    // entries the write does not touch keep their JSON as stored: only the writer's entry and
    // those losing a field are decoded and encoded again
    let mut kept: Vec<Value> = Vec::with_capacity(olds.len() + 1);
    let mut mine: Option<Entry> = None;
    for raw in olds {
        let writers = entry_is(raw, w.manager, "Update", sub);
        let loses = |p: &Path| v1_contains(&raw["fieldsV1"], p);
        let touched = removed.iter().any(loses) || (!writers && changed.iter().any(loses));
        // the writer's first entry is decoded to take the changed fields
        let takes = writers && mine.is_none();
        if !(touched || takes) {
            kept.push(raw.clone());
            continue;
        }
        let mut e = entry_of(raw);
        e.fields.retain(|p| !removed.contains(p));
        if !writers {
            e.fields.retain(|p| !changed.contains(p));
        }
        match (writers, &mine) {
            (true, None) => mine = Some(e),
            _ if !e.fields.is_empty() => kept.push(entry_json(&e)),
            _ => {}
        }
    }
    if !changed.is_empty() {
        match mine.as_mut() {
            Some(e) => {
                e.fields.extend(changed);
                e.time = w.time.to_string();
                e.api_version = w.api_version.to_string();
            }
            None => {
                mine = Some(Entry {
                    manager: w.manager.to_string(),
                    operation: "Update".into(),
                    api_version: w.api_version.to_string(),
                    time: w.time.to_string(),
                    subresource: sub.map(String::from),
                    fields: changed,
                })
            }
        }
    }
    if let Some(e) = mine.filter(|e| !e.fields.is_empty()) {
        kept.push(entry_json(&e));
    }
    set_entry_values(new, kept);
}
