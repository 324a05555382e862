//! PodSets: how many pods of which per-pod requests a RayCluster or a RayService needs now.
//!
//! Pure functions over upstream objects. [`of_cluster`] follows KubeRay v1.7's pod counts and
//! Kueue's RayCluster PodSet rules; [`of_service`] sums a RayService's live children, splitting a
//! PodSet name whose children disagree on per-pod requests so the totals stay exact.

mod cluster;
mod defaults;
mod placement;
mod pod;
mod service;

pub use cluster::{
    AUTOSCALER_CONTAINER_NAME, FT_ENABLED_ANNOTATION, HEAD_GROUP, HEAD_PODSET, MAX_PODSETS,
    MAX_WORKER_GROUPS, REDIS_CLEANUP_REQUESTS, gcs_fault_tolerance, head_template, of_cluster,
};
pub use defaults::PodDefaults;
pub use placement::{
    INJECTED_PLACEMENT_ANNOTATION, Injected, InjectedRecord, Placement, injected_record, of_child,
    strip,
};
pub use pod::{container_requests, pod_requests};
pub(crate) use service::shape_name;
pub use service::{ServicePodSets, Source, children_of, of_service};

use k8s_openapi::api::core::v1::PodTemplateSpec;

use crate::quantity::Resources;

/// A group of identical pods: `count` pods, each requesting `requests`, placed as `template`
/// says (its [`Placement`]: node selector and tolerations).
#[derive(Clone, Debug, PartialEq)]
pub struct PodSet {
    /// The Workload PodSet name (a DNS label): `head`, a lower-cased worker group name, or one of
    /// those with a shape suffix when children disagree on per-pod requests or placement.
    pub name: String,
    /// The KubeRay group the pods belong to: `headgroup` or the worker `groupName`.
    pub group: String,
    pub count: i32,
    /// Effective requests of one pod.
    pub requests: Resources,
    /// The pod template (the head's includes KubeRay's autoscaler container when enabled).
    pub template: PodTemplateSpec,
}

impl PodSet {
    /// `count` × `requests`.
    pub fn total(&self) -> Resources {
        self.requests.times(i64::from(self.count))
    }

    /// Where its pods may run: the template's node selector and tolerations.
    pub fn placement(&self) -> Placement {
        Placement::of(&self.template)
    }

    /// Same group, per-pod requests and placement: the same PodSet for quota, whatever its name.
    pub fn same_shape(&self, other: &PodSet) -> bool {
        self.group == other.group
            && self.requests == other.requests
            && self.placement() == other.placement()
    }
}

/// Sum of `count × requests` over PodSets.
pub fn total(podsets: &[PodSet]) -> Resources {
    let mut t = Resources::new();
    for p in podsets {
        t.add(&p.total());
    }
    t
}

/// Why PodSets could not be computed. Every variant names the object and the field path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PodSetError {
    #[error("{object}: {field}: invalid quantity: {reason}")]
    InvalidQuantity {
        object: String,
        field: String,
        reason: String,
    },
    #[error("{object}: {field}: must not be negative (got {value})")]
    Negative {
        object: String,
        field: String,
        value: i32,
    },
    #[error("{object}: {field}: must be at least 1 (got {value})")]
    NotPositive {
        object: String,
        field: String,
        value: i32,
    },
    #[error("{object}: {field}: minReplicas {min} is greater than maxReplicas {max}")]
    MinAboveMax {
        object: String,
        field: String,
        min: i32,
        max: i32,
    },
    #[error("{object}: {field}: pod count overflows int32")]
    CountOverflow { object: String, field: String },
    #[error("{object}: {field}: worker group name {name:?} is reserved for the head PodSet")]
    ReservedGroupName {
        object: String,
        field: String,
        name: String,
    },
    #[error(
        "{object}: {field}: worker group name {name:?} is not a DNS label after lower-casing ({reason})"
    )]
    InvalidGroupName {
        object: String,
        field: String,
        name: String,
        reason: String,
    },
    #[error(
        "{object}: {field}: worker group name {name:?} is used twice (PodSet names are case-insensitive)"
    )]
    DuplicateGroupName {
        object: String,
        field: String,
        name: String,
    },
    #[error(
        "{object}: {field}: {count} worker groups; Kueue allows at most {max} (18 PodSets with the head)"
    )]
    TooManyWorkerGroups {
        object: String,
        field: String,
        count: usize,
        max: usize,
    },
    #[error("{object}: its children need {count} distinct PodSets; a Workload holds at most {max}")]
    TooManyPodSets {
        object: String,
        count: usize,
        max: usize,
    },
}

/// Checks a name is an RFC 1123 DNS label (what Kueue's PodSet names must be).
pub fn dns_label_error(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("empty");
    }
    if name.len() > 63 {
        return Some("longer than 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Some("only a-z, 0-9 and '-' are allowed");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Some("must start and end with a letter or digit");
    }
    None
}
