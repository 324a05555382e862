//! Kueue objects: Workloads and their pod sets, ClusterQueues, Cohorts, LocalQueues,
//! ResourceFlavors, WorkloadPriorityClasses.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use raygate_types::kueue::*;

use crate::{NAMESPACE, kq, ts};

// ---------------------------------------------------------------------------------------------
// Workloads

/// A pending Workload `name` in namespace `default`, created at `ts(0)`, generation 1, no pod sets.
pub fn workload(name: &str) -> Workload {
    let mut w = Workload::new(name, WorkloadSpec::default());
    w.metadata.namespace = Some(NAMESPACE.into());
    w.metadata.creation_timestamp = Some(Time(ts(0)));
    w.metadata.generation = Some(1);
    w
}

/// Chained setters on a [`Workload`] (Kueue's `WorkloadWrapper`).
pub trait WorkloadBuilder: Sized {
    /// `spec.queueName`.
    fn queue(self, local_queue: &str) -> Self;
    /// Appends a pod set.
    fn podset(self, podset: PodSet) -> Self;
    /// `metadata.creationTimestamp = ts(secs)`.
    fn created(self, secs: i64) -> Self;
    /// `spec.priority`.
    fn priority(self, priority: i32) -> Self;
    /// Marks this Workload as the replacement slice of `old` (same namespace).
    fn replacing(self, old: &str) -> Self;
    /// Adds (replaces) a condition with an empty message.
    fn condition(self, condition: Condition) -> Self;
    /// Quota reserved and admitted in `cluster_queue` at `at`, every resource of every pod set in
    /// `flavor`, usage = per-pod requests × count (as Kueue writes `status.admission`).
    fn admitted(self, cluster_queue: &str, flavor: &str, at: Timestamp) -> Self;
}

impl WorkloadBuilder for Workload {
    fn queue(mut self, local_queue: &str) -> Self {
        self.spec.queue_name = Some(local_queue.to_string());
        self
    }

    fn podset(mut self, podset: PodSet) -> Self {
        self.spec.pod_sets.push(podset);
        self
    }

    fn created(mut self, secs: i64) -> Self {
        self.metadata.creation_timestamp = Some(Time(ts(secs)));
        self
    }

    fn priority(mut self, priority: i32) -> Self {
        self.spec.priority = Some(priority);
        self
    }

    fn replacing(mut self, old: &str) -> Self {
        let ns = self.metadata.namespace.clone().unwrap_or_default();
        self.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION.to_string(),
                format!("{ns}/{old}"),
            );
        self
    }

    fn condition(mut self, c: Condition) -> Self {
        let st = self.status.get_or_insert_with(WorkloadStatus::default);
        st.conditions.retain(|x| x.type_ != c.type_);
        st.conditions.push(c);
        self
    }

    fn admitted(mut self, cluster_queue: &str, flavor: &str, at: Timestamp) -> Self {
        let assignments = self
            .spec
            .pod_sets
            .iter()
            .map(|ps| {
                let per_pod = pod_requests(&ps.template);
                PodSetAssignment {
                    name: ps.name.clone(),
                    flavors: per_pod
                        .keys()
                        .map(|r| (r.clone(), flavor.to_string()))
                        .collect(),
                    resource_usage: per_pod
                        .iter()
                        .map(|(r, q)| (r.clone(), times(q, ps.count)))
                        .collect(),
                    count: Some(ps.count),
                }
            })
            .collect();
        self.status = Some(WorkloadStatus {
            conditions: vec![
                condition("QuotaReserved", "True", "QuotaReserved", at),
                condition("Admitted", "True", "Admitted", at),
            ],
            admission: Some(Admission {
                cluster_queue: cluster_queue.to_string(),
                pod_set_assignments: assignments,
            }),
            reclaimable_pods: vec![],
            requeue_state: None,
        });
        self
    }
}

/// A condition with an empty message and no observed generation.
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

/// Sets (replaces) condition `type_` on `w` in place, at `ts(-1_699_999_900)` (second 100 of the
/// Unix epoch), the way the slice and gate tests mark a Workload's state.
pub fn set_condition(w: &mut Workload, type_: &str, status: &str, reason: &str, message: &str) {
    let st = w.status.get_or_insert_with(WorkloadStatus::default);
    st.conditions.retain(|c| c.type_ != type_);
    st.conditions.push(Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(Timestamp::from_second(100).unwrap_or(Timestamp::UNIX_EPOCH)),
        observed_generation: None,
    });
}

/// Marks `w` admitted in place in ClusterQueue `cq` with its current pod-set counts (no flavors,
/// no usage): what the slice and gate decisions read.
pub fn admit_counts(w: &mut Workload) {
    let assignments = w
        .spec
        .pod_sets
        .iter()
        .map(|p| PodSetAssignment {
            name: p.name.clone(),
            count: Some(p.count),
            ..Default::default()
        })
        .collect();
    w.status
        .get_or_insert_with(WorkloadStatus::default)
        .admission = Some(Admission {
        cluster_queue: "cq".into(),
        pod_set_assignments: assignments,
    });
    set_condition(
        w,
        condition::QUOTA_RESERVED,
        "True",
        reason::QUOTA_RESERVED,
        "",
    );
    set_condition(w, condition::ADMITTED, "True", reason::ADMITTED, "");
}

// ---------------------------------------------------------------------------------------------
// Pod sets and templates

/// A pod set `name` of one pod whose template has one container with no requests.
pub fn podset(name: &str) -> PodSet {
    PodSet {
        name: name.to_string(),
        template: pod_template(&[]),
        count: 1,
        min_count: None,
    }
}

/// Chained setters on a [`PodSet`].
pub trait PodSetBuilder: Sized {
    fn count(self, count: i32) -> Self;
    fn min_count(self, min_count: i32) -> Self;
    /// Per-pod request of `cpu`.
    fn cpu(self, q: &str) -> Self {
        self.request("cpu", q)
    }
    /// Per-pod request of `resource` (on the template's first container).
    fn request(self, resource: &str, q: &str) -> Self;
    /// Replaces the pod template.
    fn template(self, template: PodTemplateSpec) -> Self;
}

impl PodSetBuilder for PodSet {
    fn count(mut self, count: i32) -> Self {
        self.count = count;
        self
    }

    fn min_count(mut self, min_count: i32) -> Self {
        self.min_count = Some(min_count);
        self
    }

    fn request(mut self, resource: &str, q: &str) -> Self {
        if let Some(c) = self
            .template
            .spec
            .as_mut()
            .and_then(|s| s.containers.first_mut())
        {
            c.resources
                .get_or_insert_with(ResourceRequirements::default)
                .requests
                .get_or_insert_with(BTreeMap::new)
                .insert(resource.to_string(), kq(q));
        }
        self
    }

    fn template(mut self, template: PodTemplateSpec) -> Self {
        self.template = template;
        self
    }
}

/// A pod template with one container `c` requesting `requests` (none: `requests: {}`).
pub fn pod_template(requests: &[(&str, &str)]) -> PodTemplateSpec {
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

/// Per-pod requests of a template built here: its containers' requests (a resource requested by
/// two containers is a test mistake: these builders make one container).
fn pod_requests(t: &PodTemplateSpec) -> BTreeMap<String, K8sQuantity> {
    let mut out = BTreeMap::new();
    for c in t.spec.iter().flat_map(|s| &s.containers) {
        for (r, q) in c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .into_iter()
            .flatten()
        {
            assert!(
                out.insert(r.clone(), q.clone()).is_none(),
                "admitted(): {r} is requested by two containers; build one container per pod"
            );
        }
    }
    out
}

/// `q × n` for a plain decimal quantity with an optional suffix (`1500m`, `2`, `1.5Gi`).
fn times(q: &K8sQuantity, n: i32) -> K8sQuantity {
    let s = q.0.as_str();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let mantissa: i128 = format!("{int}{frac}")
        .parse()
        .unwrap_or_else(|_| panic!("admitted(): cannot multiply quantity {s:?}"));
    let digits = (mantissa * i128::from(n)).to_string();
    let number = if frac.is_empty() {
        digits
    } else {
        let digits = format!("{digits:0>width$}", width = frac.len() + 1);
        let (i, f) = digits.split_at(digits.len() - frac.len());
        let f = f.trim_end_matches('0');
        if f.is_empty() {
            i.to_string()
        } else {
            format!("{i}.{f}")
        }
    };
    K8sQuantity(format!("{number}{suffix}"))
}

// ---------------------------------------------------------------------------------------------
// Queues, cohorts, flavors, priority classes

/// A ClusterQueue `name` admitting from every namespace (`namespaceSelector: {}`), no quota.
pub fn cluster_queue(name: &str) -> ClusterQueue {
    ClusterQueue::new(
        name,
        ClusterQueueSpec {
            namespace_selector: Some(Default::default()),
            ..ClusterQueueSpec::default()
        },
    )
}

/// Chained setters on a [`ClusterQueue`] (Kueue's `ClusterQueueWrapper`).
pub trait ClusterQueueBuilder: Sized {
    /// `spec.cohortName`.
    fn cohort(self, cohort: &str) -> Self;
    /// Appends `flavor` with nominal quotas `(resource, nominal)` to the first resource group
    /// (created if none), adding its resources to the group's covered resources.
    fn flavor_quota(self, flavor: &str, nominal: &[(&str, &str)]) -> Self;
    /// Appends a resource group.
    fn resource_group(self, group: ResourceGroup) -> Self;
}

impl ClusterQueueBuilder for ClusterQueue {
    fn cohort(mut self, cohort: &str) -> Self {
        self.spec.cohort_name = Some(cohort.to_string());
        self
    }

    fn flavor_quota(mut self, flavor: &str, nominal: &[(&str, &str)]) -> Self {
        if self.spec.resource_groups.is_empty() {
            self.spec.resource_groups.push(resource_group(&[], vec![]));
        }
        let group = &mut self.spec.resource_groups[0];
        for (r, _) in nominal {
            if !group.covered_resources.iter().any(|c| c == r) {
                group.covered_resources.push(r.to_string());
            }
        }
        group.flavors.push(FlavorQuotas {
            name: flavor.to_string(),
            resources: nominal
                .iter()
                .map(|(r, n)| resource_quota(r, n, None, None))
                .collect(),
        });
        self
    }

    fn resource_group(mut self, group: ResourceGroup) -> Self {
        self.spec.resource_groups.push(group);
        self
    }
}

/// One resource group covering `resources`, with flavors in order.
pub fn resource_group(
    resources: &[&str],
    flavors: Vec<(&str, Vec<ResourceQuota>)>,
) -> ResourceGroup {
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

/// A `ResourceQuota` with optional borrowing and lending limits.
pub fn resource_quota(
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

/// A Cohort `name` with no parent and no quota.
pub fn cohort(name: &str) -> Cohort {
    Cohort::new(name, CohortSpec::default())
}

/// Chained setters on a [`Cohort`].
pub trait CohortBuilder: Sized {
    /// `spec.parentName`.
    fn parent(self, parent: &str) -> Self;
    /// Appends a resource group.
    fn resource_group(self, group: ResourceGroup) -> Self;
}

impl CohortBuilder for Cohort {
    fn parent(mut self, parent: &str) -> Self {
        self.spec.parent_name = Some(parent.to_string());
        self
    }

    fn resource_group(mut self, group: ResourceGroup) -> Self {
        self.spec.resource_groups.push(group);
        self
    }
}

/// A LocalQueue `name` in namespace `default` pointing at ClusterQueue `cluster_queue`.
pub fn local_queue(name: &str, cluster_queue: &str) -> LocalQueue {
    let mut l = LocalQueue::new(
        name,
        LocalQueueSpec {
            cluster_queue: Some(cluster_queue.to_string()),
            stop_policy: None,
        },
    );
    l.metadata.namespace = Some(NAMESPACE.into());
    l
}

/// A ResourceFlavor `name` with no node labels.
pub fn resource_flavor(name: &str) -> ResourceFlavor {
    ResourceFlavor::new(name, ResourceFlavorSpec::default())
}

/// Chained setters on a [`ResourceFlavor`].
pub trait ResourceFlavorBuilder: Sized {
    /// `spec.nodeLabels`.
    fn node_labels(self, labels: &[(&str, &str)]) -> Self;
}

impl ResourceFlavorBuilder for ResourceFlavor {
    fn node_labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.spec.node_labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        self
    }
}

/// A WorkloadPriorityClass `name` of `value`.
pub fn workload_priority_class(name: &str, value: i32) -> WorkloadPriorityClass {
    WorkloadPriorityClass::new(
        name,
        WorkloadPriorityClassFields {
            value,
            description: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_keeps_the_suffix_and_the_decimals() {
        assert_eq!(times(&kq("1500m"), 3).0, "4500m");
        assert_eq!(times(&kq("1"), 4).0, "4");
        assert_eq!(times(&kq("1.5Gi"), 2).0, "3Gi");
        assert_eq!(times(&kq("0.25"), 3).0, "0.75");
        assert_eq!(times(&kq("64"), 0).0, "0");
    }

    #[test]
    fn flavor_quota_builds_one_group_in_order() {
        let cq = cluster_queue("cq")
            .flavor_quota("a", &[("cpu", "2")])
            .flavor_quota("b", &[("cpu", "3"), ("memory", "1Gi")]);
        let g = &cq.spec.resource_groups[0];
        assert_eq!(g.covered_resources, ["cpu", "memory"]);
        assert_eq!(g.flavors.len(), 2);
        assert_eq!(g.flavors[1].resources[1].nominal_quota, Some(kq("1Gi")));
    }
}
