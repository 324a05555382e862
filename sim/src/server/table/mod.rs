//! Server-side printing: a GET or LIST answered as a `meta.k8s.io/v1` `Table` when the client asks
//! for one (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, as `kubectl get` does). A
//! CRD's columns are its `additionalPrinterColumns` (or `Age` when it declares none), evaluated as
//! `k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor` does; built-in
//! kinds have the columns of kube-apiserver's printers (`pkg/printers/internalversion/
//! printers.go`) for Pods, Nodes and Namespaces, and `Name`, `Age` for the others.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::server::kinds::ResourceType;

/// The cells of kube-apiserver's printers for built-in kinds.
mod printers;

/// What each row carries of its object (`includeObject`: `Metadata` by default).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(q: Option<&str>) -> Include {
        match q {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a `Table` first.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

/// A column: name, type, priority (1: `-o wide` only) and how its cell is computed.
struct Column {
    name: String,
    kind: String,
    priority: u64,
    cell: Cell,
}

enum Cell {
    Path(String),
    Builtin(fn(&Value, Timestamp) -> Value),
}

/// `duration.HumanDuration` (`k8s.io/apimachinery/pkg/util/duration`).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let (minutes, hours) = (secs / 60, secs / 3600);
    let with = |big: i64, unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{unit}")
        } else {
            format!("{big}{unit}{small}{small_unit}")
        }
    };
    match () {
        _ if minutes < 10 => with(minutes, "m", secs % 60, "s"),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => with(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => with(hours / 24, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{}d", hours / 24),
        _ if hours < 24 * 365 * 8 => with(hours / 24 / 365, "y", (hours / 24) % 365, "d"),
        _ => format!("{}y", hours / 24 / 365),
    }
}

fn age_of(v: &Value, now: Timestamp) -> Value {
    v.as_str()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map_or(Value::Null, |t| {
            json!(human_duration(now.as_second() - t.as_second()))
        })
}

fn age(obj: &Value, now: Timestamp) -> Value {
    age_of(&obj["metadata"]["creationTimestamp"], now)
}

/// A simple JSONPath as printer columns use it: `.a.b`, `[N]`, `[*]` and
/// `[?(@.key=='value')]`; every match.
pub fn find(obj: &Value, path: &str) -> Vec<Value> {
    let mut current = vec![obj.clone()];
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            current = current.iter().filter_map(|v| v.get(key).cloned()).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return vec![];
            };
            current = index(&current, &r[..end]);
            rest = &r[end + 1..];
        } else {
            return vec![];
        }
    }
    current
}

fn index(current: &[Value], sel: &str) -> Vec<Value> {
    let items = current.iter().filter_map(Value::as_array).flatten();
    if sel == "*" {
        return items.cloned().collect();
    }
    if let Ok(i) = sel.parse::<usize>() {
        return current.iter().filter_map(|v| v.get(i).cloned()).collect();
    }
    let Some(cond) = sel.strip_prefix("?(@.").and_then(|s| s.strip_suffix(')')) else {
        return vec![];
    };
    let Some((key, value)) = cond.split_once("==") else {
        return vec![];
    };
    let value = value.trim().trim_matches(['\'', '"']);
    items
        .filter(|item| item[key.trim()].as_str() == Some(value))
        .cloned()
        .collect()
}

fn crd_columns(rt: &ResourceType, version: &str) -> Vec<Column> {
    let declared = rt.printer_columns.get(version).and_then(Value::as_array);
    let Some(declared) = declared.filter(|c| !c.is_empty()) else {
        return vec![Column {
            name: "Age".into(),
            kind: "date".into(),
            priority: 0,
            cell: Cell::Builtin(age),
        }];
    };
    declared
        .iter()
        .map(|c| Column {
            name: c["name"].as_str().unwrap_or_default().into(),
            kind: c["type"].as_str().unwrap_or("string").into(),
            priority: c["priority"].as_u64().unwrap_or(0),
            cell: Cell::Path(c["jsonPath"].as_str().unwrap_or_default().into()),
        })
        .collect()
}

fn builtin(name: &str, kind: &str, priority: u64, f: fn(&Value, Timestamp) -> Value) -> Column {
    Column {
        name: name.into(),
        kind: kind.into(),
        priority,
        cell: Cell::Builtin(f),
    }
}

fn builtin_columns(rt: &ResourceType) -> Vec<Column> {
    let age = builtin("Age", "string", 0, age);
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => vec![
            builtin("Ready", "string", 0, printers::pod_ready),
            builtin("Status", "string", 0, printers::pod_status),
            builtin("Restarts", "string", 0, printers::pod_restarts),
            age,
            builtin("IP", "string", 1, |p, _| p["status"]["podIP"].clone()),
            builtin("Node", "string", 1, |p, _| p["spec"]["nodeName"].clone()),
            builtin("Nominated Node", "string", 1, |p, _| {
                p["status"]["nominatedNodeName"].clone()
            }),
            builtin("Readiness Gates", "string", 1, printers::pod_gates),
        ],
        ("", "Node") => vec![
            builtin("Status", "string", 0, printers::node_status),
            builtin("Roles", "string", 0, printers::node_roles),
            age,
            builtin("Version", "string", 0, |n, _| {
                n["status"]["nodeInfo"]["kubeletVersion"].clone()
            }),
        ],
        ("", "Namespace") => vec![
            builtin("Status", "string", 0, |n, _| n["status"]["phase"].clone()),
            age,
        ],
        _ => vec![age],
    }
}

fn cell(col: &Column, obj: &Value, now: Timestamp) -> Value {
    match &col.cell {
        Cell::Builtin(f) => f(obj, now),
        Cell::Path(path) => match find(obj, path).into_iter().next() {
            None => Value::Null,
            Some(v) if col.kind == "date" => age_of(&v, now),
            Some(Value::String(s)) => json!(s),
            Some(v) if col.kind == "string" => json!(v.to_string()),
            Some(v) => v,
        },
    }
}

fn row(obj: &Value, columns: &[Column], now: Timestamp, include: Include) -> Value {
    let mut cells = vec![obj["metadata"]["name"].clone()];
    cells.extend(columns.iter().map(|c| cell(c, obj, now)));
    let object = match include {
        Include::None => Value::Null,
        Include::Object => obj.clone(),
        Include::Metadata => json!({"kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}),
    };
    let mut r = json!({"cells": cells});
    if !object.is_null() {
        r["object"] = object;
    }
    r
}

/// `body` (an object or a list of `rt` at `version`) as a `Table`.
pub fn to_table(
    rt: &ResourceType,
    version: &str,
    body: &Value,
    now: Timestamp,
    include: Include,
) -> Value {
    let columns = if rt.builtin {
        builtin_columns(rt)
    } else {
        crd_columns(rt, version)
    };
    let mut definitions = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0})];
    definitions.extend(columns.iter().map(|c| {
        json!({"name": c.name, "type": if c.kind == "date" { "date" } else { c.kind.as_str() },
            "format": "", "description": "", "priority": c.priority})
    }));
    let rows: Vec<Value> = match body.get("items").and_then(Value::as_array) {
        Some(items) => items
            .iter()
            .map(|o| row(o, &columns, now, include))
            .collect(),
        None => vec![row(body, &columns, now, include)],
    };
    let mut metadata = json!({});
    for k in ["resourceVersion", "continue", "remainingItemCount"] {
        if let Some(v) = body["metadata"].get(k) {
            metadata[k] = v.clone();
        }
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
        "columnDefinitions": definitions, "rows": rows})
}

#[cfg(test)]
mod tests;
