//! Builders for admission tests: small objects with the numbers in plain sight.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::{CycleResult, Decision};
use crate::quantity::Quantity;
use crate::types::kueue::*;

pub fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

pub fn kq(s: &str) -> K8sQuantity {
    K8sQuantity(s.to_string())
}

pub fn flavor(name: &str) -> ResourceFlavor {
    ResourceFlavor::new(name, ResourceFlavorSpec::default())
}

pub fn flavor_with_labels(name: &str, labels: &[(&str, &str)]) -> ResourceFlavor {
    ResourceFlavor::new(
        name,
        ResourceFlavorSpec {
            node_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            topology_name: None,
            ..Default::default()
        },
    )
}

/// `ResourceQuota` with optional borrowing and lending limits.
pub fn rq(
    name: &str,
    nominal: &str,
    borrowing: Option<&str>,
    lending: Option<&str>,
) -> ResourceQuota {
    ResourceQuota {
        name: name.to_string(),
        nominal_quota: Some(kq(nominal)),
        borrowing_limit: borrowing.map(kq),
        lending_limit: lending.map(kq),
    }
}

/// One resource group covering `resources`, with flavors in order.
pub fn group(resources: &[&str], flavors: Vec<(&str, Vec<ResourceQuota>)>) -> ResourceGroup {
    ResourceGroup {
        covered_resources: resources.iter().map(|r| r.to_string()).collect(),
        flavors: flavors
            .into_iter()
            .map(|(name, resources)| FlavorQuotas {
                name: name.to_string(),
                resources,
            })
            .collect(),
    }
}

pub fn cq_groups(name: &str, cohort: Option<&str>, groups: Vec<ResourceGroup>) -> ClusterQueue {
    ClusterQueue::new(
        name,
        ClusterQueueSpec {
            resource_groups: groups,
            cohort_name: cohort.map(str::to_string),
            namespace_selector: Some(Default::default()), // `{}`: every namespace
            ..ClusterQueueSpec::default()
        },
    )
}

/// A ClusterQueue with one resource group: `(flavor, resource, nominal)` entries, flavors in order
/// of first appearance.
pub fn cq(name: &str, cohort: Option<&str>, quotas: &[(&str, &str, &str)]) -> ClusterQueue {
    let mut resources: Vec<&str> = Vec::new();
    let mut flavors: Vec<(&str, Vec<ResourceQuota>)> = Vec::new();
    for (f, r, n) in quotas {
        if !resources.contains(r) {
            resources.push(r);
        }
        match flavors.iter_mut().find(|(name, _)| name == f) {
            Some((_, rs)) => rs.push(rq(r, n, None, None)),
            None => flavors.push((f, vec![rq(r, n, None, None)])),
        }
    }
    cq_groups(name, cohort, vec![group(&resources, flavors)])
}

pub fn cohort(name: &str, parent: Option<&str>, groups: Vec<ResourceGroup>) -> Cohort {
    Cohort::new(
        name,
        CohortSpec {
            parent_name: parent.map(str::to_string),
            resource_groups: groups,
        },
    )
}

pub fn lq(name: &str, cluster_queue: &str) -> LocalQueue {
    let mut l = LocalQueue::new(
        name,
        LocalQueueSpec {
            cluster_queue: Some(cluster_queue.to_string()),
            stop_policy: None,
        },
    );
    l.metadata.namespace = Some("default".into());
    l
}

pub fn priority_class(name: &str, value: i32) -> WorkloadPriorityClass {
    WorkloadPriorityClass::new(
        name,
        WorkloadPriorityClassFields {
            value,
            description: None,
        },
    )
}

/// A pod template requesting `cpu` per pod.
pub fn template(cpu: &str) -> PodTemplateSpec {
    template_with(&[("cpu", cpu)])
}

pub fn template_with(requests: &[(&str, &str)]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        requests
                            .iter()
                            .map(|(r, q)| (r.to_string(), kq(q)))
                            .collect(),
                    ),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}

/// A pending Workload in namespace `default`: `(podset, count, cpu per pod)`, created at `ts(0)`.
pub fn wl(name: &str, queue: &str, podsets: &[(&str, i32, &str)]) -> Workload {
    let mut w = Workload::new(
        name,
        WorkloadSpec {
            pod_sets: podsets
                .iter()
                .map(|(n, count, cpu)| PodSet {
                    name: n.to_string(),
                    template: template(cpu),
                    count: *count,
                    min_count: None,
                })
                .collect(),
            queue_name: Some(queue.to_string()),
            ..WorkloadSpec::default()
        },
    );
    w.metadata.namespace = Some("default".into());
    w.metadata.creation_timestamp = Some(Time(ts(0)));
    w.metadata.generation = Some(1);
    w
}

pub fn created(mut w: Workload, secs: i64) -> Workload {
    w.metadata.creation_timestamp = Some(Time(ts(secs)));
    w
}

pub fn priority(mut w: Workload, p: i32) -> Workload {
    w.spec.priority = Some(p);
    w
}

/// Marks `w` as the replacement of `old` (same namespace).
pub fn replacing(mut w: Workload, old: &str) -> Workload {
    w.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION.to_string(),
            format!("default/{old}"),
        );
    w
}

pub fn condition(type_: &str, status: &str, reason: &str, at: Timestamp) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: Time(at),
    }
}

/// Admits `w` in `cluster_queue` with every resource in `flavor` (as Kueue would have written it).
pub fn admit(mut w: Workload, cluster_queue: &str, flavor: &str, at: Timestamp) -> Workload {
    let assignments = w
        .spec
        .pod_sets
        .iter()
        .map(|ps| {
            let per_pod =
                crate::podsets::pod_requests(ps.template.spec.as_ref().unwrap(), "spec", "test")
                    .unwrap();
            PodSetAssignment {
                name: ps.name.clone(),
                flavors: per_pod
                    .names()
                    .map(|r| (r.to_string(), flavor.to_string()))
                    .collect(),
                resource_usage: per_pod
                    .iter()
                    .map(|(r, q)| (r.to_string(), q.times(i64::from(ps.count)).to_k8s()))
                    .collect(),
                count: Some(ps.count),
            }
        })
        .collect();
    w.status = Some(WorkloadStatus {
        conditions: vec![
            condition("QuotaReserved", "True", "QuotaReserved", at),
            condition("Admitted", "True", "Admitted", at),
        ],
        admission: Some(Admission {
            cluster_queue: cluster_queue.to_string(),
            pod_set_assignments: assignments,
        }),
        reclaimable_pods: vec![],
    });
    w
}

pub fn admitted_wl(
    name: &str,
    queue: &str,
    cluster_queue: &str,
    podsets: &[(&str, i32, &str)],
    flavor: &str,
) -> Workload {
    admit(wl(name, queue, podsets), cluster_queue, flavor, ts(0))
}

pub fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

/// The decision about `name` (`default/<name>`), if any.
pub fn decision<'a>(r: &'a CycleResult, name: &str) -> Option<&'a Decision> {
    let key = format!("default/{name}");
    r.decisions.iter().find(|d| d.workload() == key)
}

pub fn admitted_names(r: &CycleResult) -> Vec<String> {
    r.decisions
        .iter()
        .filter(|d| matches!(d, Decision::Admit { .. }))
        .map(|d| d.workload().trim_start_matches("default/").to_string())
        .collect()
}

pub fn message<'a>(r: &'a CycleResult, name: &str) -> &'a str {
    match decision(r, name) {
        Some(Decision::Pending { message, .. } | Decision::Evict { message, .. }) => message,
        other => panic!("no pending/evict decision for {name}: {other:?}"),
    }
}

/// Usage of `(flavor, resource)` in a ClusterQueue row.
pub fn usage(r: &CycleResult, cq: &str, flavor: &str, resource: &str) -> (Quantity, Quantity) {
    let row = r.cluster_queues.iter().find(|c| c.name == cq).unwrap();
    let f = row.reservation.iter().find(|f| f.name == flavor).unwrap();
    let x = f.resources.iter().find(|x| x.name == resource).unwrap();
    (
        Quantity::try_from(x.total.as_ref().unwrap()).unwrap(),
        Quantity::try_from(x.borrowed.as_ref().unwrap()).unwrap(),
    )
}
