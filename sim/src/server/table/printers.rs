//! The cells kube-apiserver's printers compute for built-in kinds
//! (`pkg/printers/internalversion/printers.go`: `printPod`, `printNode`), over the JSON object.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `READY`: ready containers of all containers (`n/m`).
pub fn pod_ready(p: &Value, _: Timestamp) -> Value {
    let total = array(&p["spec"], "containers").len();
    let ready = array(&p["status"], "containerStatuses")
        .iter()
        .filter(|c| c["ready"] == json!(true) && c["state"].get("running").is_some())
        .count();
    json!(format!("{ready}/{total}"))
}

/// `STATUS`: the phase, or the pod's reason, `SchedulingGated`, a container's waiting or
/// terminated reason, `Terminating`.
pub fn pod_status(p: &Value, _: Timestamp) -> Value {
    let status = &p["status"];
    let mut reason = status["reason"]
        .as_str()
        .or(status["phase"].as_str())
        .unwrap_or_default()
        .to_string();
    if array(status, "conditions")
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    for c in array(status, "containerStatuses").iter().rev() {
        let state = &c["state"];
        if let Some(r) = state["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.into();
        } else if let Some(r) = state["terminated"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.into();
        } else if let Some(code) = state["terminated"]["exitCode"].as_i64() {
            reason = format!("ExitCode:{code}");
        }
    }
    if p["metadata"].get("deletionTimestamp").is_some() {
        reason = if status["reason"] == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    json!(reason)
}

/// `RESTARTS`: the containers' restarts.
pub fn pod_restarts(p: &Value, _: Timestamp) -> Value {
    let n: i64 = array(&p["status"], "containerStatuses")
        .iter()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    json!(n.to_string())
}

/// `READINESS GATES`: true gates of all, or `<none>`.
pub fn pod_gates(p: &Value, _: Timestamp) -> Value {
    let gates = array(&p["spec"], "readinessGates");
    if gates.is_empty() {
        return json!("<none>");
    }
    let conditions = array(&p["status"], "conditions");
    let ok = gates
        .iter()
        .filter(|g| {
            conditions
                .iter()
                .any(|c| c["type"] == g["conditionType"] && c["status"] == "True")
        })
        .count();
    json!(format!("{ok}/{}", gates.len()))
}

/// `STATUS`: `Ready`, `NotReady` or `Unknown`, with `,SchedulingDisabled` when cordoned.
pub fn node_status(n: &Value, _: Timestamp) -> Value {
    let ready = array(&n["status"], "conditions")
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| c["status"].as_str().unwrap_or_default());
    let mut s = match ready {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if n["spec"]["unschedulable"] == json!(true) {
        s.push_str(",SchedulingDisabled");
    }
    json!(s)
}

/// `ROLES`: the `node-role.kubernetes.io/<role>` labels (and `kubernetes.io/role`), or `<none>`.
pub fn node_roles(n: &Value, _: Timestamp) -> Value {
    let mut roles: Vec<String> = n["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                (!role.is_empty()).then(|| role.to_string())
            } else if k == "kubernetes.io/role" {
                v.as_str().map(String::from)
            } else {
                None
            }
        })
        .collect();
    roles.sort();
    roles.dedup();
    if roles.is_empty() {
        json!("<none>")
    } else {
        json!(roles.join(","))
    }
}
