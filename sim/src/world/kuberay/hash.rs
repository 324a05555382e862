//! KubeRay's `GenerateHashWithoutReplicasAndWorkersToDelete` over `rayClusterSpecForHashing`.
//!
//! Cleared before hashing (v1.7): `suspend`, `upgradeStrategy`, per worker group `replicas`,
//! `minReplicas`, `maxReplicas` and `scaleStrategy.workersToDelete`, and `tolerations` and
//! `schedulingGates` of the head and worker pod templates. What remains is serialised as JSON with
//! sorted keys, nulls and empty objects/arrays dropped (as Go's `omitempty` drops them, so `{}`
//! and an absent field hash alike), hashed with SHA-256, and the first 20 bytes written in base32
//! (extended hex alphabet, as KubeRay writes its SHA-1): 32 characters.

use serde_json::Value;
use sha2::{Digest, Sha256};

use raygate::types::ray::RayClusterSpec;

/// The JSON KubeRay hashes: the spec without the fields that never trigger a new cluster.
fn for_hashing(spec: &RayClusterSpec) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(spec)?;
    if let Value::Object(o) = &mut v {
        o.remove("suspend");
        o.remove("upgradeStrategy");
    }
    let clear_pod = |template: Option<&mut Value>| {
        if let Some(Value::Object(pod)) = template.and_then(|t| t.pointer_mut("/spec")) {
            pod.remove("tolerations");
            pod.remove("schedulingGates");
        }
    };
    clear_pod(v.pointer_mut("/headGroupSpec/template"));
    if let Some(Value::Array(groups)) = v.pointer_mut("/workerGroupSpecs") {
        for g in groups {
            if let Value::Object(o) = g {
                o.remove("replicas");
                o.remove("minReplicas");
                o.remove("maxReplicas");
                if let Some(Value::Object(s)) = o.get_mut("scaleStrategy") {
                    s.remove("workersToDelete");
                }
            }
            clear_pod(g.get_mut("template"));
        }
    }
    Ok(v)
}

/// Drops nulls and empty containers, recursively; `None` when nothing is left.
fn prune(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(o) => {
            let kept: serde_json::Map<String, Value> = o
                .iter()
                .filter_map(|(k, v)| prune(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(a) => {
            // array elements keep their positions: an empty element stays as null
            (!a.is_empty())
                .then(|| Value::Array(a.iter().map(|e| prune(e).unwrap_or(Value::Null)).collect()))
        }
        other => Some(other.clone()),
    }
}

/// JSON with object keys sorted, whatever serde_json's map order is.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&o[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(e, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn base32hex(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHIJKLMNOPQRSTUV";
    let mut out = String::new();
    let (mut buf, mut bits) = (0u32, 0u32);
    for &b in bytes {
        buf = (buf << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buf >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((buf << (5 - bits)) & 31) as usize] as char);
    }
    out
}

/// How many recent hashes [`cluster_spec_hash`] keeps per thread.
const RECENT_HASHES: usize = 8;

thread_local! {
    /// The last hashes computed on this thread, with the spec and worker-group count they are
    /// of. A reconcile hashes the same goal spec up to six times (`shouldPrepareNewCluster`,
    /// then `shouldUpdateCluster` for the active and the pending cluster, each full and
    /// partial), and the emulator reconciles every 2 s (`ServiceDefaultRequeueDuration`) while
    /// the goal rarely changes: comparing specs is much cheaper than encoding, sorting and
    /// hashing one, and the hash is a function of the spec, so a kept one is the one computed.
    static RECENT: std::cell::RefCell<std::collections::VecDeque<(RayClusterSpec, Option<usize>, String)>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
}

/// The `ray.io/hash-without-replicas-and-workers-to-delete` value of a `rayClusterConfig`.
///
/// `worker_groups`: hash only the first n worker groups (KubeRay's partial comparison, which
/// recognises worker groups appended at the end); `None`: all.
pub fn cluster_spec_hash(
    spec: &RayClusterSpec,
    worker_groups: Option<usize>,
) -> Result<String, serde_json::Error> {
    let kept = RECENT.with(|r| {
        r.borrow()
            .iter()
            .find(|(s, n, _)| *n == worker_groups && s == spec)
            .map(|(_, _, h)| h.clone())
    });
    if let Some(hash) = kept {
        return Ok(hash);
    }
    let hash = computed_hash(spec, worker_groups)?;
    RECENT.with(|r| {
        let mut r = r.borrow_mut();
        if r.len() >= RECENT_HASHES {
            r.pop_front();
        }
        r.push_back((spec.clone(), worker_groups, hash.clone()));
    });
    Ok(hash)
}

/// [`cluster_spec_hash`] without the kept hashes.
fn computed_hash(
    spec: &RayClusterSpec,
    worker_groups: Option<usize>,
) -> Result<String, serde_json::Error> {
    let mut spec = spec.clone();
    if let (Some(n), Some(groups)) = (worker_groups, spec.worker_group_specs.as_mut()) {
        groups.truncate(n);
    }
    let v = prune(&for_hashing(&spec)?).unwrap_or(Value::Null);
    let mut text = String::new();
    canonical(&v, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    Ok(base32hex(&digest[..20]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> RayClusterSpec {
        serde_json::from_value(v).unwrap()
    }

    fn base() -> Value {
        json!({
            "rayVersion": "2.52.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "h", "image": "ray:1"}]}}},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 3,
                "template": {"spec": {"containers": [{"name": "w", "image": "ray:1"}]}}}]
        })
    }

    fn h(v: Value) -> String {
        cluster_spec_hash(&spec(v), None).unwrap()
    }

    #[test]
    fn stable_and_kuberay_shaped() {
        let a = h(base());
        assert_eq!(a, h(base()));
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        );
    }

    #[test]
    fn ignored_fields_do_not_change_the_hash() {
        let a = h(base());
        let mut v = base();
        v["suspend"] = json!(true);
        v["upgradeStrategy"] = json!({"type": "Recreate"});
        v["workerGroupSpecs"][0]["replicas"] = json!(3);
        v["workerGroupSpecs"][0]["minReplicas"] = json!(2);
        v["workerGroupSpecs"][0]["maxReplicas"] = json!(9);
        v["workerGroupSpecs"][0]["scaleStrategy"] = json!({"workersToDelete": ["p"]});
        v["workerGroupSpecs"][0]["template"]["spec"]["tolerations"] =
            json!([{"key": "k", "operator": "Exists"}]);
        v["workerGroupSpecs"][0]["template"]["spec"]["schedulingGates"] = json!([{"name": "g"}]);
        v["headGroupSpec"]["template"]["spec"]["tolerations"] =
            json!([{"key": "k", "operator": "Exists"}]);
        v["headGroupSpec"]["rayStartParams"] = json!(null);
        assert_eq!(a, h(v));
    }

    #[test]
    fn other_fields_change_the_hash() {
        let a = h(base());
        let mut v = base();
        v["rayVersion"] = json!("2.53.0");
        assert_ne!(a, h(v));
        let mut v = base();
        v["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = json!("ray:2");
        assert_ne!(a, h(v));
    }

    #[test]
    fn partial_hash_recognises_appended_groups() {
        let a = h(base());
        let mut v = base();
        let extra = v["workerGroupSpecs"][0].clone();
        v["workerGroupSpecs"].as_array_mut().unwrap().push(extra);
        assert_ne!(a, h(v.clone()));
        assert_eq!(a, cluster_spec_hash(&spec(v), Some(1)).unwrap());
    }

    #[test]
    fn a_kept_hash_is_the_computed_one_and_a_changed_spec_is_hashed_again() {
        // more specs than are kept, each asked twice (the second from the kept ones) and again
        // after the others pushed it out
        let specs: Vec<RayClusterSpec> = (0..RECENT_HASHES + 3)
            .map(|i| {
                let mut v = base();
                v["rayVersion"] = json!(format!("2.{i}.0"));
                spec(v)
            })
            .collect();
        for round in 0..2 {
            for s in &specs {
                for groups in [None, Some(1), Some(0)] {
                    let want = computed_hash(s, groups).unwrap();
                    assert_eq!(cluster_spec_hash(s, groups).unwrap(), want, "round {round}");
                    assert_eq!(cluster_spec_hash(s, groups).unwrap(), want, "round {round}");
                }
            }
        }
        let distinct: std::collections::BTreeSet<String> = specs
            .iter()
            .map(|s| cluster_spec_hash(s, None).unwrap())
            .collect();
        assert_eq!(distinct.len(), specs.len());
    }

    #[test]
    fn base32hex_matches_rfc4648() {
        assert_eq!(base32hex(b"foobar"), "CPNMUOJ1E8");
        assert_eq!(base32hex(b"f"), "CO");
    }
}
