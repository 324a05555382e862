//! Mutating admission the API server runs on Pods (pure).
//!
//! **DefaultTolerationSeconds** (`plugin/pkg/admission/defaulttolerationseconds`): a Pod created
//! without a toleration of `node.kubernetes.io/not-ready:NoExecute` gets one (`Exists`,
//! `tolerationSeconds: 300`), and the same for `node.kubernetes.io/unreachable:NoExecute`. A
//! toleration with an empty key (all keys) or an empty effect (all effects) counts as one. The
//! plugin also runs on updates; the sim runs it on create only (tolerations can only be added
//! to a live pod, so an update rarely matters).

use serde_json::{Value, json};

/// `node.kubernetes.io/not-ready`.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// `node.kubernetes.io/unreachable`.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// `--default-not-ready-toleration-seconds` and `--default-unreachable-toleration-seconds`.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// Adds the default NoExecute tolerations to a Pod's `spec` (the plugin's `Admit`).
pub fn default_toleration_seconds(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    let tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    let covers = |key: &str| {
        tolerations.iter().any(|t| {
            let k = t["key"].as_str().unwrap_or("");
            let e = t["effect"].as_str().unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        })
    };
    let mut added = tolerations.clone();
    for key in [NOT_READY, UNREACHABLE] {
        if !covers(key) {
            added.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}),
            );
        }
    }
    if added.len() != tolerations.len() {
        spec["tolerations"] = Value::Array(added);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_without_tolerations_gets_both_defaults_of_300s() {
        let mut spec = json!({"containers": []});
        default_toleration_seconds(&mut spec);
        assert_eq!(
            spec["tolerations"],
            json!([
                {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
    }

    #[test]
    fn an_existing_toleration_of_the_key_or_of_everything_is_kept_as_is() {
        let own = json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30});
        let mut spec = json!({"tolerations": [own.clone()]});
        default_toleration_seconds(&mut spec);
        assert_eq!(spec["tolerations"][0], own);
        assert_eq!(spec["tolerations"][1]["key"], NOT_READY);
        assert_eq!(spec["tolerations"].as_array().map(Vec::len), Some(2));
        // an empty key with an empty effect tolerates both taints: nothing added
        let mut all = json!({"tolerations": [{"operator": "Exists"}]});
        default_toleration_seconds(&mut all);
        assert_eq!(all["tolerations"].as_array().map(Vec::len), Some(1));
        // a NoSchedule toleration of the key does not count
        let mut ns = json!({"tolerations": [{"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]});
        default_toleration_seconds(&mut ns);
        assert_eq!(ns["tolerations"].as_array().map(Vec::len), Some(3));
    }
}
