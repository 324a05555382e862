//! What a RayCluster spec asks for: worker replicas (`CalculateDesired/Min/MaxReplicas`) and
//! resources (`CalculateDesiredResources`, GPU resource keys).

use k8s_openapi::api::core::v1::PodSpec;
use raygate::podsets::container_requests;
use raygate::quantity::Resources;
use raygate::types::ray::RayClusterSpec;

/// Worker counts of a spec: (desired, min, max), as `CalculateDesired/Min/MaxReplicas`.
pub(crate) fn worker_replicas(spec: &RayClusterSpec) -> (i32, i32, i32) {
    let (mut desired, mut min, mut max) = (0i64, 0i64, 0i64);
    for g in spec.worker_group_specs.iter().flatten() {
        if g.suspend == Some(true) {
            continue;
        }
        let hosts = i64::from(g.num_of_hosts.unwrap_or(1));
        let lo = g.min_replicas.unwrap_or(0);
        let hi = g.max_replicas.unwrap_or(i32::MAX);
        // GetWorkerGroupDesiredReplicas: below min (or unset) → min; above max → max
        let replicas = match g.replicas {
            None => lo,
            Some(r) if r < lo => lo,
            Some(r) if r > hi => hi,
            Some(r) => r,
        };
        desired += i64::from(replicas) * hosts;
        min += i64::from(lo) * hosts;
        max += i64::from(hi) * hosts;
    }
    let clamp = |n: i64| n.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    (clamp(desired), clamp(min), clamp(max))
}

/// `CalculatePodResource`: the sum over app containers of requests, limits standing in.
fn pod_resources(pod: Option<&PodSpec>, object: &str, field: &str) -> Resources {
    let mut total = Resources::new();
    for (i, c) in pod
        .map(|p| p.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        match container_requests(
            c.resources.as_ref(),
            &format!("{field}.containers[{i}]"),
            object,
        ) {
            Ok(r) => total.add(&r),
            // the CRD schema validates quantities; a bad one counts as nothing, as in Go
            Err(e) => tracing::warn!(error = %e, "ignoring an unparsable quantity"),
        }
    }
    total
}

/// `CalculateDesiredResources`: head + Σ over unsuspended groups of `replicas × numOfHosts` pods
/// (KubeRay multiplies by the raw `replicas`, default 0, not the clamped count).
pub(crate) fn desired_resources(spec: &RayClusterSpec, object: &str) -> Resources {
    let mut total = pod_resources(
        spec.head_group_spec.template.spec.as_ref(),
        object,
        "spec.headGroupSpec.template.spec",
    );
    for (i, g) in spec.worker_group_specs.iter().flatten().enumerate() {
        if g.suspend == Some(true) {
            continue;
        }
        let pods = i64::from(g.replicas.unwrap_or(0)) * i64::from(g.num_of_hosts.unwrap_or(1));
        let per_pod = pod_resources(
            g.template.spec.as_ref(),
            object,
            &format!("spec.workerGroupSpecs[{i}].template.spec"),
        );
        total.add(&per_pod.times(pods));
    }
    total
}

/// `utils.IsGPUResourceKey`: `…gpu`, or NVIDIA MIG `nvidia.com/mig-<n>g.<m>gb`.
pub(crate) fn is_gpu(name: &str) -> bool {
    if name.ends_with("gpu") {
        return true;
    }
    let Some(rest) = name
        .rfind("nvidia.com/mig-")
        .map(|i| &name[i + "nvidia.com/mig-".len()..])
    else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    rest.strip_suffix("gb")
        .and_then(|r| r.split_once("g."))
        .is_some_and(|(a, b)| digits(a) && digits(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use raygate::quantity::Quantity;
    use serde_json::{Value, json};

    fn spec(v: Value) -> RayClusterSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn replicas_and_resources_follow_kuberay() {
        let s = spec(json!({
            "headGroupSpec": {"template": {"spec": {"containers": [
                {"name": "h", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "2Gi"}}}]}}},
            "workerGroupSpecs": [
                {"groupName": "a", "replicas": 5, "minReplicas": 1, "maxReplicas": 3, "numOfHosts": 2,
                 "template": {"spec": {"containers": [{"name": "w", "resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "1"}}}]}}},
                {"groupName": "b", "minReplicas": 1,
                 "template": {"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}]}}},
                {"groupName": "c", "replicas": 4, "suspend": true,
                 "template": {"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}]}}}
            ]
        }));
        // a: clamp(5,1,3)=3 ×2 = 6; b: replicas unset → min 1; c suspended
        let (desired, min, max) = worker_replicas(&s);
        assert_eq!((desired, min), (7, 3));
        assert_eq!(max, i32::MAX);
        let r = desired_resources(&s, "t");
        // head 1 + a: 0.5 × (5 × 2) = 5 + b: replicas unset → 0 pods
        assert_eq!(r.get("cpu"), Quantity::parse("6").unwrap());
        assert_eq!(r.get("memory"), Quantity::parse("2Gi").unwrap());
        assert_eq!(r.get("nvidia.com/gpu"), Quantity::parse("10").unwrap());
    }

    #[test]
    fn gpu_keys() {
        assert!(is_gpu("nvidia.com/gpu"));
        assert!(is_gpu("amd.com/gpu"));
        assert!(is_gpu("nvidia.com/mig-2g.32gb"));
        assert!(!is_gpu("nvidia.com/mig-xg.32gb"));
        assert!(!is_gpu("google.com/tpu"));
    }
}
