//! What the API server adds to a pod's requests after its template, charged as Kueue charges it
//! (pure): Kueue v0.19.2's `workload.AdjustResources` (`pkg/workload/resources.go`) lays over
//! every Workload's PodSet templates, before it counts their requests,
//!
//! - the `overhead.podFixed` of the pod's RuntimeClass, when the template names one and sets no
//!   `overhead` itself (the RuntimeClass admission plugin does the same to the pod);
//! - the `default` (limits) and `defaultRequest` (requests) of the namespace's `Container`
//!   LimitRanges, for each init and app container that sets none for a resource (the LimitRanger
//!   plugin's defaulting), the LimitRanges merged first-wins (`limitrange.Summarize`).
//!
//! Limits standing in for unset requests follow in [`super::pod_requests`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, LimitRange, PodSpec, ResourceRequirements};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

type List = BTreeMap<String, Quantity>;

/// A namespace's container defaults: limits and requests.
#[derive(Clone, Debug, Default, PartialEq)]
struct ContainerDefaults {
    limits: List,
    requests: List,
}

/// The LimitRange defaults per namespace and the overhead per RuntimeClass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodDefaults {
    containers: BTreeMap<String, ContainerDefaults>,
    overhead: BTreeMap<String, List>,
}

/// `into` with every entry of `from` it lacks (Kueue's `MergeResourceListKeepFirst`).
fn keep_first(into: &mut List, from: &List) {
    for (name, q) in from {
        into.entry(name.clone()).or_insert_with(|| q.clone());
    }
}

impl PodDefaults {
    /// The defaults of `limit_ranges` (any namespace, merged in name order) and the overheads of
    /// `runtime_classes`.
    pub fn new(limit_ranges: &[&LimitRange], runtime_classes: &[&RuntimeClass]) -> Self {
        let mut ranges: Vec<&LimitRange> = limit_ranges.to_vec();
        ranges.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut containers: BTreeMap<String, ContainerDefaults> = BTreeMap::new();
        for lr in ranges {
            let ns = lr.metadata.namespace.clone().unwrap_or_default();
            let items = lr.spec.iter().flat_map(|s| &s.limits);
            for item in items.filter(|i| i.type_ == "Container") {
                let d = containers.entry(ns.clone()).or_default();
                if let Some(limits) = &item.default {
                    keep_first(&mut d.limits, limits);
                }
                if let Some(requests) = &item.default_request {
                    keep_first(&mut d.requests, requests);
                }
            }
        }
        let overhead = runtime_classes
            .iter()
            .filter_map(|rc| {
                let fixed = rc.overhead.as_ref()?.pod_fixed.clone()?;
                Some((rc.metadata.name.clone()?, fixed))
            })
            .collect();
        PodDefaults {
            containers,
            overhead,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.overhead.is_empty()
    }

    /// `spec` as charged in `namespace`, or `None` when nothing is added to it.
    pub fn adjust(&self, namespace: &str, spec: &PodSpec) -> Option<PodSpec> {
        let defaults = self.containers.get(namespace);
        let overhead = spec
            .runtime_class_name
            .as_ref()
            .filter(|_| spec.overhead.as_ref().is_none_or(|o| o.is_empty()))
            .and_then(|rc| self.overhead.get(rc));
        if defaults.is_none() && overhead.is_none() {
            return None;
        }
        let mut out = spec.clone();
        if let Some(o) = overhead {
            out.overhead = Some(o.clone());
        }
        if let Some(d) = defaults {
            let init = out.init_containers.iter_mut().flatten();
            for c in out.containers.iter_mut().chain(init) {
                default_container(c, d);
            }
        }
        (&out != spec).then_some(out)
    }
}

fn default_container(c: &mut Container, d: &ContainerDefaults) {
    let res = c
        .resources
        .get_or_insert_with(ResourceRequirements::default);
    let mut limits = res.limits.take().unwrap_or_default();
    keep_first(&mut limits, &d.limits);
    let mut requests = res.requests.take().unwrap_or_default();
    keep_first(&mut requests, &d.requests);
    res.limits = (!limits.is_empty()).then_some(limits);
    res.requests = (!requests.is_empty()).then_some(requests);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::podsets::pod_requests;

    fn limit_range(ns: &str, name: &str, items: serde_json::Value) -> LimitRange {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns},
            "spec": {"limits": items}}))
        .unwrap()
    }

    fn runtime_class(name: &str, overhead: serde_json::Value) -> RuntimeClass {
        serde_json::from_value(json!({"metadata": {"name": name}, "handler": "kata",
            "overhead": {"podFixed": overhead}}))
        .unwrap()
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn cpu_memory(d: &PodDefaults, ns: &str, s: &PodSpec) -> (String, String) {
        let adjusted = d.adjust(ns, s);
        let r = pod_requests(adjusted.as_ref().unwrap_or(s), "spec", "pod").unwrap();
        (r.get("cpu").to_string(), r.get("memory").to_string())
    }

    /// A LimitRange's
    /// default request fills an unset request, its default limit an unset limit (which then
    /// stands in for the request), a set value is kept, and init containers are defaulted too.
    #[test]
    fn a_namespace_s_limit_range_defaults_fill_what_containers_leave_unset() {
        let lr = limit_range(
            "ns",
            "defaults",
            json!([{"type": "Container", "default": {"cpu": "2", "memory": "1Gi"},
                "defaultRequest": {"cpu": "500m"}},
                {"type": "Pod", "max": {"cpu": "64"}}]),
        );
        let d = PodDefaults::new(&[&lr], &[]);
        let bare = spec(json!({"containers": [{"name": "ray"}]}));
        // cpu: the default request; memory: the default limit standing in for the request
        assert_eq!(cpu_memory(&d, "ns", &bare), ("500m".into(), "1Gi".into()));
        let set = spec(json!({"containers": [{"name": "ray",
            "resources": {"requests": {"cpu": "3"}, "limits": {"memory": "2Gi"}}}]}));
        assert_eq!(cpu_memory(&d, "ns", &set), ("3".into(), "2Gi".into()));
        let init = spec(json!({"initContainers": [{"name": "wait"}],
            "containers": [{"name": "ray", "resources": {"requests": {"cpu": "100m", "memory": "1Mi"}}}]}));
        // the init container's defaults (500m, 1Gi) exceed the app container's: they count
        assert_eq!(cpu_memory(&d, "ns", &init), ("500m".into(), "1Gi".into()));
        // another namespace has no LimitRange
        assert_eq!(d.adjust("other", &bare), None);
    }

    #[test]
    fn limit_ranges_merge_first_wins_in_name_order() {
        let a = limit_range(
            "ns",
            "a",
            json!([{"type": "Container", "defaultRequest": {"cpu": "1"}}]),
        );
        let b = limit_range(
            "ns",
            "b",
            json!([{"type": "Container", "defaultRequest": {"cpu": "2", "memory": "3Gi"}}]),
        );
        let d = PodDefaults::new(&[&b, &a], &[]);
        let bare = spec(json!({"containers": [{"name": "ray"}]}));
        assert_eq!(cpu_memory(&d, "ns", &bare), ("1".into(), "3Gi".into()));
    }

    #[test]
    fn a_runtime_class_s_overhead_is_charged_unless_the_pod_sets_its_own() {
        let rc = runtime_class("kata", json!({"cpu": "250m", "memory": "160Mi"}));
        let d = PodDefaults::new(&[], &[&rc]);
        let kata = spec(json!({"runtimeClassName": "kata",
            "containers": [{"name": "ray", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}));
        assert_eq!(
            cpu_memory(&d, "ns", &kata),
            ("1250m".into(), "1184Mi".into())
        );
        let mut own = kata.clone();
        own.overhead = Some([("cpu".to_string(), Quantity("100m".into()))].into());
        assert_eq!(d.adjust("ns", &own), None);
        let mut unknown = kata;
        unknown.runtime_class_name = Some("gvisor".into());
        assert_eq!(
            d.adjust("ns", &unknown),
            None,
            "a RuntimeClass not found adds nothing"
        );
        assert!(!d.is_empty());
        assert!(PodDefaults::default().is_empty());
    }
}
