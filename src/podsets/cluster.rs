//! PodSets of one RayCluster spec.

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::{PodSet, PodSetError, dns_label_error, pod::pod_requests};
use crate::types::ray::{RayClusterSpec, WorkerGroupSpec};

/// An object's annotations.
type Annotations = std::collections::BTreeMap<String, String>;

/// Name of the head PodSet.
pub const HEAD_PODSET: &str = "head";
/// KubeRay's `ray.io/group` value for the head.
pub const HEAD_GROUP: &str = "headgroup";
/// Kueue's limit on PodSets in one Workload.
pub const MAX_PODSETS: usize = 18;
/// Worker groups allowed next to the head.
pub const MAX_WORKER_GROUPS: usize = MAX_PODSETS - 1;
/// Name of the container KubeRay adds to the head when in-tree autoscaling is on.
pub const AUTOSCALER_CONTAINER_NAME: &str = "autoscaler";

/// KubeRay's default autoscaler container resources (requests = limits).
fn default_autoscaler_resources() -> ResourceRequirements {
    let list = [
        ("cpu".to_string(), K8sQuantity("500m".into())),
        ("memory".to_string(), K8sQuantity("512Mi".into())),
    ]
    .into_iter()
    .collect::<std::collections::BTreeMap<_, _>>();
    ResourceRequirements {
        limits: Some(list.clone()),
        requests: Some(list),
        ..Default::default()
    }
}

/// The head template as KubeRay runs it: with the autoscaler sidecar when autoscaling is on
/// (KubeRay v1.7 `common/pod.go` `BuildAutoscalerContainer`: requests = limits = 500m CPU and
/// 512Mi, replaced whole by `autoscalerOptions.resources`). Kueue v0.19.2 counts it the same way
/// in its RayCluster head PodSet (`pkg/controller/jobs/raycluster/common.go`, #12405).
pub fn head_template(spec: &RayClusterSpec) -> PodTemplateSpec {
    let mut template = spec.head_group_spec.template.clone();
    if spec.enable_in_tree_autoscaling == Some(true) {
        let resources = spec
            .autoscaler_options
            .as_ref()
            .and_then(|o| o.resources.clone())
            .unwrap_or_else(default_autoscaler_resources);
        let pod = template.spec.get_or_insert_with(Default::default);
        if !pod
            .containers
            .iter()
            .any(|c| c.name == AUTOSCALER_CONTAINER_NAME)
        {
            pod.containers.push(Container {
                name: AUTOSCALER_CONTAINER_NAME.to_string(),
                resources: Some(resources),
                ..Default::default()
            });
        }
    }
    template
}

/// KubeRay's annotation turning GCS fault tolerance on (`RayFTEnabledAnnotationKey`).
pub const FT_ENABLED_ANNOTATION: &str = "ray.io/ft-enabled";

/// What KubeRay v1.7 requests for the Redis cleanup Job it runs when a RayCluster with GCS fault
/// tolerance is deleted (`buildRedisCleanupJob`: hard-coded 200m CPU, 256Mi).
pub const REDIS_CLEANUP_REQUESTS: [(&str, &str); 2] = [("cpu", "200m"), ("memory", "256Mi")];

/// KubeRay's `IsGCSFaultToleranceEnabled`: the annotation `ray.io/ft-enabled: "true"` (any case)
/// or `spec.gcsFaultToleranceOptions` set.
pub fn gcs_fault_tolerance(spec: &RayClusterSpec, annotations: Option<&Annotations>) -> bool {
    let annotated = annotations
        .and_then(|a| a.get(FT_ENABLED_ANNOTATION))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    annotated
        || spec
            .other
            .get("gcsFaultToleranceOptions")
            .is_some_and(|v| !v.is_null())
}

/// Kueue v0.19.2's charge for the Redis cleanup Job on the head PodSet
/// (`accountForRedisCleanupInHeadPodSet`): the Ray container's (the first) requests raised to at
/// least [`REDIS_CLEANUP_REQUESTS`], resource by resource (`MergeResourceListKeepMax`). The pod
/// KubeRay runs is not changed; only what the PodSet charges.
fn charge_redis_cleanup(template: &mut PodTemplateSpec) {
    let Some(ray) = template
        .spec
        .as_mut()
        .and_then(|p| p.containers.first_mut())
    else {
        return;
    };
    let requests = ray
        .resources
        .get_or_insert_with(Default::default)
        .requests
        .get_or_insert_with(Default::default);
    for (name, floor) in REDIS_CLEANUP_REQUESTS {
        let below = requests.get(name).is_none_or(|q| {
            crate::quantity::Quantity::parse(&q.0)
                .is_ok_and(|q| crate::quantity::Quantity::parse(floor).is_ok_and(|f| q < f))
        });
        if below {
            requests.insert(name.to_string(), K8sQuantity(floor.to_string()));
        }
    }
}

/// The PodSets of a RayCluster spec: `head` (count 1) and one per worker group.
///
/// Counts are the pods KubeRay v1.7 creates: `clamp(replicas ?? minReplicas, min, max) × numOfHosts`,
/// 0 for a suspended group. With GCS fault tolerance on (the spec, or the object's
/// `annotations`), the head is charged the Redis cleanup Job as Kueue charges it
/// ([`charge_redis_cleanup`]). `object` names the object and `field` the path of `spec` in it
/// (`spec` for a RayCluster, `spec.rayClusterConfig` for a RayService), for error messages.
pub fn of_cluster(
    spec: &RayClusterSpec,
    annotations: Option<&Annotations>,
    object: &str,
    field: &str,
) -> Result<Vec<PodSet>, PodSetError> {
    let groups = spec.worker_group_specs.as_deref().unwrap_or_default();
    if groups.len() > MAX_WORKER_GROUPS {
        return Err(PodSetError::TooManyWorkerGroups {
            object: object.to_string(),
            field: format!("{field}.workerGroupSpecs"),
            count: groups.len(),
            max: MAX_WORKER_GROUPS,
        });
    }
    let mut out = Vec::with_capacity(groups.len() + 1);
    let mut head = head_template(spec);
    if gcs_fault_tolerance(spec, annotations) {
        charge_redis_cleanup(&mut head);
    }
    let head_requests = match &head.spec {
        Some(pod) => pod_requests(pod, &format!("{field}.headGroupSpec.template.spec"), object)?,
        None => Default::default(),
    };
    out.push(PodSet {
        name: HEAD_PODSET.to_string(),
        group: HEAD_GROUP.to_string(),
        count: 1,
        requests: head_requests,
        template: head,
    });
    for (i, g) in groups.iter().enumerate() {
        let gfield = format!("{field}.workerGroupSpecs[{i}]");
        let name = worker_podset_name(g, &out, &gfield, object)?;
        let count = worker_count(g, &gfield, object)?;
        let requests = match &g.template.spec {
            Some(pod) => pod_requests(pod, &format!("{gfield}.template.spec"), object)?,
            None => Default::default(),
        };
        out.push(PodSet {
            name,
            group: g.group_name.clone(),
            count,
            requests,
            template: g.template.clone(),
        });
    }
    Ok(out)
}

/// A worker group's PodSet name: its lowercased `groupName`, a DNS label that is neither `head`
/// nor taken by an earlier PodSet in `out`.
fn worker_podset_name(
    g: &WorkerGroupSpec,
    out: &[PodSet],
    gfield: &str,
    object: &str,
) -> Result<String, PodSetError> {
    let field = format!("{gfield}.groupName");
    let name = g.group_name.to_lowercase();
    if name == HEAD_PODSET {
        return Err(PodSetError::ReservedGroupName {
            object: object.to_string(),
            field,
            name: g.group_name.clone(),
        });
    }
    if let Some(reason) = dns_label_error(&name) {
        return Err(PodSetError::InvalidGroupName {
            object: object.to_string(),
            field,
            name: g.group_name.clone(),
            reason: reason.to_string(),
        });
    }
    if out.iter().any(|p| p.name == name) {
        return Err(PodSetError::DuplicateGroupName {
            object: object.to_string(),
            field,
            name: g.group_name.clone(),
        });
    }
    Ok(name)
}

/// The pods KubeRay v1.7 creates for a worker group:
/// `clamp(replicas ?? minReplicas, min, max) × numOfHosts`, 0 when the group is suspended.
fn worker_count(g: &WorkerGroupSpec, gfield: &str, object: &str) -> Result<i32, PodSetError> {
    let non_negative = |leaf: &str, v: Option<i32>| -> Result<Option<i32>, PodSetError> {
        match v {
            Some(v) if v < 0 => Err(PodSetError::Negative {
                object: object.to_string(),
                field: format!("{gfield}.{leaf}"),
                value: v,
            }),
            v => Ok(v),
        }
    };
    let min = non_negative("minReplicas", g.min_replicas)?.unwrap_or(0);
    let max = non_negative("maxReplicas", g.max_replicas)?.unwrap_or(i32::MAX);
    let replicas = non_negative("replicas", g.replicas)?.unwrap_or(min);
    if min > max {
        return Err(PodSetError::MinAboveMax {
            object: object.to_string(),
            field: gfield.to_string(),
            min,
            max,
        });
    }
    let hosts = g.num_of_hosts.unwrap_or(1);
    if hosts < 1 {
        return Err(PodSetError::NotPositive {
            object: object.to_string(),
            field: format!("{gfield}.numOfHosts"),
            value: hosts,
        });
    }
    if g.suspend == Some(true) {
        return Ok(0);
    }
    replicas
        .clamp(min, max)
        .checked_mul(hosts)
        .ok_or_else(|| PodSetError::CountOverflow {
            object: object.to_string(),
            field: gfield.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;
    use raygate_testing::ray_pod;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> RayClusterSpec {
        serde_json::from_value(v).unwrap()
    }

    fn group(name: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut g = json!({"groupName": name, "template": ray_pod("1")});
        for (k, v) in extra.as_object().unwrap() {
            g[k] = v.clone();
        }
        g
    }

    fn counts(s: &RayClusterSpec) -> Vec<(String, i32)> {
        of_cluster(s, None, "RayCluster ns/rc", "spec")
            .unwrap()
            .into_iter()
            .map(|p| (p.name, p.count))
            .collect()
    }

    /// Kueue v0.19.2's `accountForRedisCleanupInHeadPodSet`: with GCS fault tolerance (the
    /// annotation in any case, or `gcsFaultToleranceOptions`), the Ray container's requests are
    /// raised to 200m CPU and 256Mi where below, before the pod's sum; without it, nothing.
    #[test]
    fn gcs_fault_tolerance_charges_the_head_the_redis_cleanup_job() {
        let head = |s: &RayClusterSpec, annotations: Option<&Annotations>| {
            of_cluster(s, annotations, "o", "spec").unwrap()[0]
                .requests
                .clone()
        };
        let q = |v: &str| Quantity::parse(v).unwrap();
        let plain = spec(json!({"headGroupSpec": {"template": ray_pod("100m")}}));
        assert_eq!(head(&plain, None).get("cpu"), q("100m"));
        assert_eq!(head(&plain, None).get("memory"), Quantity::ZERO);
        let ft: Annotations = [(FT_ENABLED_ANNOTATION.to_string(), "True".to_string())].into();
        let charged = head(&plain, Some(&ft));
        assert_eq!(charged.get("cpu"), q("200m"));
        assert_eq!(charged.get("memory"), q("256Mi"));
        let off: Annotations = [(FT_ENABLED_ANNOTATION.to_string(), "false".to_string())].into();
        assert_eq!(head(&plain, Some(&off)).get("cpu"), q("100m"));
        // by the spec, with the autoscaler: the floor is on the Ray container, then the sum
        let options = spec(json!({"headGroupSpec": {"template": ray_pod("2")},
            "gcsFaultToleranceOptions": {"redisAddress": "redis:6379"},
            "enableInTreeAutoscaling": true}));
        let charged = head(&options, None);
        assert_eq!(charged.get("cpu"), q("2500m"), "2 + the autoscaler's 500m");
        assert_eq!(
            charged.get("memory"),
            q("768Mi"),
            "256Mi + the autoscaler's 512Mi"
        );
        // the pod KubeRay runs is not changed
        assert_eq!(
            head_template(&options).spec.unwrap().containers[0]
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .map(|r| r.len()),
            Some(1)
        );
    }

    #[test]
    fn head_then_worker_groups_lower_cased_with_kuberay_counts() {
        let s = spec(
            json!({"headGroupSpec": {"template": ray_pod("2")}, "workerGroupSpecs": [
                group("Small", json!({"replicas": 3, "minReplicas": 1, "maxReplicas": 5})),
                group("big", json!({"replicas": 9, "minReplicas": 1, "maxReplicas": 4})),
                group("low", json!({"replicas": 0, "minReplicas": 2, "maxReplicas": 4})),
                group("unset", json!({"minReplicas": 2})),
                group("multi", json!({"replicas": 2, "numOfHosts": 4})),
                group("paused", json!({"replicas": 2, "suspend": true}))
            ]}),
        );
        assert_eq!(
            counts(&s),
            vec![
                ("head".into(), 1),
                ("small".into(), 3),
                ("big".into(), 4),
                ("low".into(), 2),
                ("unset".into(), 2),
                ("multi".into(), 8),
                ("paused".into(), 0)
            ]
        );
    }

    #[test]
    fn autoscaler_container_is_added_to_the_head() {
        let mut s = spec(
            json!({"enableInTreeAutoscaling": true, "headGroupSpec": {"template": ray_pod("1")}}),
        );
        let head = &of_cluster(&s, None, "o", "spec").unwrap()[0];
        assert_eq!(head.requests.get("cpu"), Quantity::parse("1500m").unwrap());
        assert_eq!(
            head.requests.get("memory"),
            Quantity::parse("512Mi").unwrap()
        );
        s.autoscaler_options = Some(
            serde_json::from_value(json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}))
                .unwrap(),
        );
        let head = &of_cluster(&s, None, "o", "spec").unwrap()[0];
        assert_eq!(head.requests.get("cpu"), Quantity::parse("2").unwrap());
        assert_eq!(head.requests.get("memory"), Quantity::parse("1Gi").unwrap());
    }

    #[test]
    fn rejects_what_kueue_rejects() {
        let too_many: Vec<_> = (0..18)
            .map(|i| group(&format!("g{i}"), json!({})))
            .collect();
        let cases = [
            (json!([group("Head", json!({}))]), "reserved"),
            (json!(too_many), "at most 17"),
            (json!([group("under_score", json!({}))]), "DNS label"),
            (
                json!([group("a", json!({})), group("A", json!({}))]),
                "used twice",
            ),
            (
                json!([group("a", json!({"replicas": -1}))]),
                "workerGroupSpecs[0].replicas: must not be negative",
            ),
            (
                json!([group("a", json!({"minReplicas": 3, "maxReplicas": 2}))]),
                "greater than maxReplicas",
            ),
            (
                json!([group("a", json!({"numOfHosts": 0}))]),
                "numOfHosts: must be at least 1",
            ),
            (
                json!([group("a", json!({"replicas": 2147483647, "numOfHosts": 2}))]),
                "overflows",
            ),
        ];
        for (groups, want) in cases {
            let s = spec(
                json!({"headGroupSpec": {"template": ray_pod("1")}, "workerGroupSpecs": groups}),
            );
            let err = of_cluster(&s, None, "RayCluster ns/rc", "spec")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(want) && err.contains("RayCluster ns/rc"),
                "{err} should contain {want}"
            );
        }
    }

    #[test]
    fn seventeen_worker_groups_are_allowed() {
        let groups: Vec<_> = (0..17)
            .map(|i| group(&format!("g{i}"), json!({})))
            .collect();
        let s =
            spec(json!({"headGroupSpec": {"template": ray_pod("1")}, "workerGroupSpecs": groups}));
        assert_eq!(of_cluster(&s, None, "o", "spec").unwrap().len(), 18);
    }
}
