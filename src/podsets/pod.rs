//! Effective requests of a pod, as the scheduler (and Kueue) compute them.
//!
//! Kubernetes `resourcehelper.PodRequests`: the sum of app containers plus restartable init
//! containers (sidecars); the max of that with each regular init container plus the sidecars
//! started before it; plus the pod `overhead`. Per container and resource, a limit stands in for
//! an unset request (API defaulting does the same).

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};

use super::PodSetError;
use crate::quantity::{Quantity, Resources};

/// Requests of one container, limits standing in for unset requests.
pub fn container_requests(
    res: Option<&ResourceRequirements>,
    field: &str,
    object: &str,
) -> Result<Resources, PodSetError> {
    let mut out = Resources::new();
    let Some(res) = res else { return Ok(out) };
    let parse =
        |kind: &str, name: &str, q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
            Quantity::try_from(q).map_err(|e| PodSetError::InvalidQuantity {
                object: object.to_string(),
                field: format!("{field}.resources.{kind}[{name}]"),
                reason: e.to_string(),
            })
        };
    if let Some(limits) = &res.limits {
        for (name, q) in limits {
            out.set(name.clone(), parse("limits", name, q)?);
        }
    }
    if let Some(requests) = &res.requests {
        for (name, q) in requests {
            out.set(name.clone(), parse("requests", name, q)?);
        }
    }
    Ok(out)
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Effective requests of a pod spec. `field` is the path of the spec, for error messages.
pub fn pod_requests(spec: &PodSpec, field: &str, object: &str) -> Result<Resources, PodSetError> {
    let mut total = Resources::new();
    for (i, c) in spec.containers.iter().enumerate() {
        total.add(&container_requests(
            c.resources.as_ref(),
            &format!("{field}.containers[{i}]"),
            object,
        )?);
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(
            c.resources.as_ref(),
            &format!("{field}.initContainers[{i}]"),
            object,
        )?;
        let mut during = if is_sidecar(c) {
            total.add(&r);
            sidecars.add(&r);
            sidecars.clone()
        } else {
            r
        };
        if !is_sidecar(c) {
            during.add(&sidecars);
        }
        init_peak.max_with(&during);
    }
    total.max_with(&init_peak);
    if let Some(overhead) = &spec.overhead {
        let o =
            Resources::from_k8s(overhead).map_err(|(name, e)| PodSetError::InvalidQuantity {
                object: object.to_string(),
                field: format!("{field}.overhead[{name}]"),
                reason: e.to_string(),
            })?;
        total.add(&o);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn req(spec_json: serde_json::Value) -> Resources {
        pod_requests(&spec(spec_json), "spec", "Pod t").unwrap()
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn app_containers_are_summed() {
        let r = req(json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "0.5", "nvidia.com/gpu": "1"}}}
        ]}));
        assert_eq!(r.get("cpu"), q("1"));
        assert_eq!(r.get("memory"), q("1Gi"));
        assert_eq!(r.get("nvidia.com/gpu"), q("1"));
    }

    #[test]
    fn limits_stand_in_for_unset_requests_per_resource() {
        let r = req(json!({"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1"}}}
        ]}));
        assert_eq!(r.get("cpu"), q("1"));
        assert_eq!(r.get("memory"), q("4Gi"));
    }

    #[test]
    fn regular_init_container_raises_the_peak_with_earlier_sidecars() {
        // app 1 cpu; sidecar 1 cpu (adds to app: 2); a later init container of 2 cpu runs beside
        // the sidecar (3) which is the peak.
        let r = req(json!({
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
        }));
        assert_eq!(r.get("cpu"), q("3"));
        assert_eq!(r.get("memory"), q("1Gi"));
    }

    #[test]
    fn init_container_before_a_sidecar_does_not_see_it() {
        let r = req(json!({
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "2"}}},
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]
        }));
        // init alone 2; app+sidecar 1.5 → peak 2
        assert_eq!(r.get("cpu"), q("2"));
    }

    #[test]
    fn overhead_is_added() {
        let r = req(json!({
            "overhead": {"cpu": "250m", "memory": "120Mi"},
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
        }));
        assert_eq!(r.get("cpu"), q("1250m"));
        assert_eq!(r.get("memory"), q("1144Mi"));
    }

    #[test]
    fn a_bad_quantity_names_the_field() {
        let s = spec(
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}),
        );
        let e = pod_requests(&s, "spec.template.spec", "RayCluster ns/x").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("RayCluster ns/x"), "{msg}");
        assert!(
            msg.contains("spec.template.spec.containers[0].resources.requests[cpu]"),
            "{msg}"
        );
    }
}
