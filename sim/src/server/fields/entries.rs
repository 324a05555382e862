//! `metadata.managedFields` entries: reading them, writing them in the server's order.

use serde_json::{Value, json};

use super::FieldSet;
use super::v1::{from_fields_v1, to_fields_v1};

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    pub(super) fn is(&self, manager: &str, operation: &str, sub: Option<&str>) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.as_deref() == sub
    }
}

/// The entries of an object's `metadata.managedFields`.
pub fn entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(entry_of)
        .collect()
}

pub(super) fn entry_of(e: &Value) -> Entry {
    Entry {
        manager: e["manager"].as_str().unwrap_or_default().to_string(),
        operation: e["operation"].as_str().unwrap_or("Update").to_string(),
        api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
        time: e["time"].as_str().unwrap_or_default().to_string(),
        subresource: e["subresource"].as_str().map(String::from),
        fields: from_fields_v1(&e["fieldsV1"]),
    }
}

/// [`Entry::is`] on an entry's JSON.
pub(super) fn entry_is(e: &Value, manager: &str, operation: &str, sub: Option<&str>) -> bool {
    e["manager"].as_str().unwrap_or_default() == manager
        && e["operation"].as_str().unwrap_or("Update") == operation
        && e["subresource"].as_str() == sub
}

pub(super) fn entry_json(e: &Entry) -> Value {
    let mut v = json!({
        "manager": e.manager,
        "operation": e.operation,
        "apiVersion": e.api_version,
        "time": e.time,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(&e.fields),
    });
    if let Some(s) = &e.subresource {
        v["subresource"] = json!(s);
    }
    v
}

/// Writes `entries` into `metadata.managedFields` (dropping empty ones).
pub fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let list = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(entry_json)
        .collect();
    set_entry_values(obj, list);
}

/// Writes entries' JSON into `metadata.managedFields` in the server's order: operation, time,
/// manager, subresource.
pub(super) fn set_entry_values(obj: &mut Value, mut list: Vec<Value>) {
    let key = |e: &Value| {
        (
            e["operation"].as_str().unwrap_or("Update").to_string(),
            e["time"].as_str().unwrap_or_default().to_string(),
            e["manager"].as_str().unwrap_or_default().to_string(),
            e["subresource"].as_str().map(String::from),
        )
    };
    list.sort_by_cached_key(key);
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}
