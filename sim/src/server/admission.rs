//! Mutating admission the API server runs on Pods, and the API defaulting of LimitRanges (pure).
//!
//! **DefaultTolerationSeconds** (`plugin/pkg/admission/defaulttolerationseconds`): a Pod created
//! without a toleration of `node.kubernetes.io/not-ready:NoExecute` gets one (`Exists`,
//! `tolerationSeconds: 300`), and the same for `node.kubernetes.io/unreachable:NoExecute`. A
//! toleration with an empty key (all keys) or an empty effect (all effects) counts as one. The
//! plugin also runs on updates; the sim runs it on create only (tolerations can only be added
//! to a live pod, so an update rarely matters).
//!
//! **LimitRanger** (`plugin/pkg/admission/limitranger`): on create, each init and app container
//! gets, per resource it sets none of, the `defaultRequest` (requests) and `default` (limits) of
//! the namespace's `Container` LimitRanges (`mergeContainerResources`). Not copied: the
//! `kubernetes.io/limit-ranger` annotation naming what was set, and the min/max/ratio
//! validation. The LimitRange itself is defaulted on write as `SetDefaults_LimitRangeItem` does
//! (`pkg/apis/core/v1/defaults.go`): a missing `default` from `max`, a missing `defaultRequest`
//! from `default`, then from `min`.
//!
//! **RuntimeClass** (`plugin/pkg/admission/runtimeclass`): on create, a Pod naming a
//! RuntimeClass that does not exist is forbidden; the class's `overhead.podFixed` becomes the
//! Pod's `overhead` (a different one the Pod set is forbidden; one set without the class
//! defining any too); its `scheduling.nodeSelector` is merged into the Pod's (a conflicting
//! value is forbidden) and its `scheduling.tolerations` added.

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

/// `SetDefaults_LimitRangeItem` on every `Container` item of a LimitRange object.
pub fn default_limit_range(obj: &mut Value) {
    let Some(items) = obj["spec"]["limits"].as_array_mut() else {
        return;
    };
    for item in items.iter_mut().filter(|i| i["type"] == "Container") {
        let fill = |item: &mut Value, into: &str, from: &str| {
            let Some(from) = item[from].as_object().cloned() else {
                return;
            };
            if !item[into].is_object() {
                item[into] = json!({});
            }
            for (k, v) in from {
                if item[into].get(&k).is_none() {
                    item[into][k] = v;
                }
            }
        };
        fill(item, "default", "max");
        fill(item, "defaultRequest", "default");
        fill(item, "defaultRequest", "min");
    }
}

/// LimitRanger's defaulting of a Pod's `spec` by the `Container` items of `limit_ranges` (the
/// namespace's, in any order; the first range to name a resource wins, as the plugin merges
/// them in list order).
pub fn default_container_resources(spec: &mut Value, limit_ranges: &[&Value]) {
    let items: Vec<&Value> = limit_ranges
        .iter()
        .filter_map(|lr| lr["spec"]["limits"].as_array())
        .flatten()
        .filter(|i| i["type"] == "Container")
        .collect();
    if items.is_empty() {
        return;
    }
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec[list].as_array_mut() else {
            continue;
        };
        for c in containers {
            for item in &items {
                merge_defaults(c, "requests", &item["defaultRequest"]);
                merge_defaults(c, "limits", &item["default"]);
            }
        }
    }
}

fn merge_defaults(container: &mut Value, into: &str, defaults: &Value) {
    let Some(defaults) = defaults.as_object().filter(|d| !d.is_empty()) else {
        return;
    };
    if !container["resources"].is_object() {
        container["resources"] = json!({});
    }
    let res = &mut container["resources"];
    if !res[into].is_object() {
        res[into] = json!({});
    }
    for (k, v) in defaults {
        if res[into].get(k).is_none() {
            res[into][k] = v.clone();
        }
    }
}

/// The RuntimeClass plugin on a Pod's `spec` naming `class` (`None`: the class does not exist);
/// the error is why the Pod is forbidden.
pub fn runtime_class(spec: &mut Value, name: &str, class: Option<&Value>) -> Result<(), String> {
    let Some(class) = class else {
        return Err(format!("pod rejected: RuntimeClass \"{name}\" not found"));
    };
    let pod_overhead = spec["overhead"]
        .as_object()
        .filter(|o| !o.is_empty())
        .cloned();
    match (class["overhead"]["podFixed"].as_object(), pod_overhead) {
        (Some(fixed), Some(own)) if !same_quantities(fixed, &own) => {
            return Err(
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into(),
            );
        }
        (Some(fixed), _) => spec["overhead"] = Value::Object(fixed.clone()),
        (None, Some(_)) => {
            return Err(
                "pod rejected: Pod Overhead set without corresponding RuntimeClass \
                        defined Overhead"
                    .into(),
            );
        }
        (None, None) => {}
    }
    merge_scheduling(spec, &class["scheduling"])
}

/// Quantities equal by value (`1` and `1000m`), as `apiequality.Semantic` compares them.
fn same_quantities(a: &serde_json::Map<String, Value>, b: &serde_json::Map<String, Value>) -> bool {
    let value = |v: &Value| {
        v.as_str()
            .and_then(|q| raygate::quantity::Quantity::parse(q).ok())
    };
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            b.get(k).is_some_and(|w| match (value(v), value(w)) {
                (Some(x), Some(y)) => x == y,
                _ => v == w,
            })
        })
}

fn merge_scheduling(spec: &mut Value, scheduling: &Value) -> Result<(), String> {
    if let Some(selector) = scheduling["nodeSelector"].as_object() {
        if !spec["nodeSelector"].is_object() {
            spec["nodeSelector"] = json!({});
        }
        for (k, v) in selector {
            match spec["nodeSelector"].get(k) {
                Some(own) if own != v => {
                    return Err(format!(
                        "conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; \
                         pod.spec.nodeSelector[{k}] = {}",
                        v.as_str().unwrap_or_default(),
                        own.as_str().unwrap_or_default()
                    ));
                }
                _ => spec["nodeSelector"][k] = v.clone(),
            }
        }
    }
    if let Some(tolerations) = scheduling["tolerations"].as_array() {
        let mut all = spec["tolerations"].as_array().cloned().unwrap_or_default();
        for t in tolerations {
            if !all.contains(t) {
                all.push(t.clone());
            }
        }
        spec["tolerations"] = Value::Array(all);
    }
    Ok(())
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

    #[test]
    fn a_limit_range_is_defaulted_as_the_api_server_does() {
        let mut lr = json!({"spec": {"limits": [
            {"type": "Container", "max": {"cpu": "4", "memory": "8Gi"}, "default": {"cpu": "2"},
             "min": {"memory": "1Mi", "ephemeral-storage": "1Gi"}},
            {"type": "Pod", "max": {"cpu": "8"}}]}});
        default_limit_range(&mut lr);
        let c = &lr["spec"]["limits"][0];
        // default from max where unset; defaultRequest from default, then from min
        assert_eq!(c["default"], json!({"cpu": "2", "memory": "8Gi"}));
        assert_eq!(
            c["defaultRequest"],
            json!({"cpu": "2", "memory": "8Gi", "ephemeral-storage": "1Gi"})
        );
        assert_eq!(
            lr["spec"]["limits"][1],
            json!({"type": "Pod", "max": {"cpu": "8"}})
        );
    }

    #[test]
    fn limit_ranger_fills_what_each_container_leaves_unset_first_range_first() {
        let a = json!({"spec": {"limits": [{"type": "Container",
            "default": {"cpu": "2"}, "defaultRequest": {"cpu": "500m"}}]}});
        let b = json!({"spec": {"limits": [{"type": "Container",
            "default": {"cpu": "3", "memory": "1Gi"}, "defaultRequest": {"memory": "256Mi"}}]}});
        let mut spec = json!({"initContainers": [{"name": "wait"}], "containers": [
            {"name": "ray", "resources": {"requests": {"cpu": "1"}}}]});
        default_container_resources(&mut spec, &[&a, &b]);
        assert_eq!(
            spec["containers"][0]["resources"],
            json!({"requests": {"cpu": "1", "memory": "256Mi"},
                   "limits": {"cpu": "2", "memory": "1Gi"}})
        );
        assert_eq!(
            spec["initContainers"][0]["resources"]["requests"],
            json!({"cpu": "500m", "memory": "256Mi"})
        );
        let mut untouched = json!({"containers": [{"name": "ray"}]});
        default_container_resources(&mut untouched, &[]);
        assert_eq!(untouched, json!({"containers": [{"name": "ray"}]}));
    }

    #[test]
    fn the_runtime_class_plugin_sets_overhead_and_scheduling_and_forbids_mismatches() {
        let class = json!({"overhead": {"podFixed": {"cpu": "250m"}},
            "scheduling": {"nodeSelector": {"sandbox": "kata"},
                "tolerations": [{"key": "sandbox", "operator": "Exists"}]}});
        let mut spec = json!({"containers": [], "nodeSelector": {"pool": "a"}});
        runtime_class(&mut spec, "kata", Some(&class)).unwrap();
        assert_eq!(spec["overhead"], json!({"cpu": "250m"}));
        assert_eq!(
            spec["nodeSelector"],
            json!({"pool": "a", "sandbox": "kata"})
        );
        assert_eq!(
            spec["tolerations"],
            json!([{"key": "sandbox", "operator": "Exists"}])
        );
        // the same overhead written another way is the same
        let mut same = json!({"overhead": {"cpu": "0.25"}});
        assert_eq!(runtime_class(&mut same, "kata", Some(&class)), Ok(()));
        let mut other = json!({"overhead": {"cpu": "1"}});
        let e = runtime_class(&mut other, "kata", Some(&class)).unwrap_err();
        assert!(e.contains("doesn't match"), "{e}");
        let mut conflict = json!({"nodeSelector": {"sandbox": "gvisor"}});
        let e = runtime_class(&mut conflict, "kata", Some(&class)).unwrap_err();
        assert!(
            e.starts_with("conflict: runtimeClass.scheduling.nodeSelector[sandbox]"),
            "{e}"
        );
        let e = runtime_class(&mut json!({}), "gone", None).unwrap_err();
        assert_eq!(e, "pod rejected: RuntimeClass \"gone\" not found");
        let plain = json!({"handler": "runc"});
        let e = runtime_class(&mut json!({"overhead": {"cpu": "1"}}), "runc", Some(&plain));
        assert!(
            e.unwrap_err()
                .contains("without corresponding RuntimeClass")
        );
    }
}
