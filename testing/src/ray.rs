//! KubeRay objects: RayServices, RayClusters and their worker groups, and metadata setters shared
//! by every builder's object.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use raygate_types::kueue::{ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload};
use raygate_types::ray::*;

use crate::{NAMESPACE, kq};

/// A Ray pod template: one container `ray` requesting `cpu` (no image: KubeRay's tests do the same).
pub fn ray_pod(cpu: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "ray".into(),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".to_string(), kq(cpu))].into()),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}

/// Chained setters on a [`PodTemplateSpec`]'s first container.
pub trait PodTemplateBuilder: Sized {
    /// The container's image.
    fn image(self, image: &str) -> Self;
    /// Adds a request of `quantity` of `resource`.
    fn request(self, resource: &str, quantity: &str) -> Self;
}

impl PodTemplateBuilder for PodTemplateSpec {
    fn image(mut self, image: &str) -> Self {
        if let Some(c) = first_container(&mut self) {
            c.image = Some(image.to_string());
        }
        self
    }

    fn request(mut self, resource: &str, quantity: &str) -> Self {
        if let Some(c) = first_container(&mut self) {
            c.resources
                .get_or_insert_with(ResourceRequirements::default)
                .requests
                .get_or_insert_with(BTreeMap::new)
                .insert(resource.to_string(), kq(quantity));
        }
        self
    }
}

fn first_container(t: &mut PodTemplateSpec) -> Option<&mut Container> {
    t.spec.as_mut().and_then(|s| s.containers.first_mut())
}

/// A RayCluster spec with a head of [`ray_pod`]`("1")` and no worker groups.
pub fn ray_cluster_spec() -> RayClusterSpec {
    RayClusterSpec {
        head_group_spec: HeadGroupSpec {
            template: ray_pod("1"),
            ..HeadGroupSpec::default()
        },
        ..RayClusterSpec::default()
    }
}

/// A worker group `name` of [`ray_pod`]`("1")`, replicas unset.
pub fn worker_group(name: &str) -> WorkerGroupSpec {
    WorkerGroupSpec {
        group_name: name.to_string(),
        template: ray_pod("1"),
        ..WorkerGroupSpec::default()
    }
}

/// Chained setters on a [`WorkerGroupSpec`].
pub trait WorkerGroupBuilder: Sized {
    fn replicas(self, replicas: i32) -> Self;
    /// `minReplicas` and `maxReplicas`.
    fn min_max(self, min: i32, max: i32) -> Self;
    fn template(self, template: PodTemplateSpec) -> Self;
}

impl WorkerGroupBuilder for WorkerGroupSpec {
    fn replicas(mut self, replicas: i32) -> Self {
        self.replicas = Some(replicas);
        self
    }

    fn min_max(mut self, min: i32, max: i32) -> Self {
        self.min_replicas = Some(min);
        self.max_replicas = Some(max);
        self
    }

    fn template(mut self, template: PodTemplateSpec) -> Self {
        self.template = template;
        self
    }
}

/// Chained setters on a [`RayClusterSpec`] (also reached through RayService and RayCluster).
pub trait RayClusterSpecBuilder: Sized {
    /// `spec.suspend`.
    fn suspend(self, suspend: bool) -> Self;
    /// Replaces the head's pod template.
    fn head(self, template: PodTemplateSpec) -> Self;
    /// Appends a worker group.
    fn worker_group(self, group: WorkerGroupSpec) -> Self;
}

impl RayClusterSpecBuilder for RayClusterSpec {
    fn suspend(mut self, suspend: bool) -> Self {
        self.suspend = Some(suspend);
        self
    }

    fn head(mut self, template: PodTemplateSpec) -> Self {
        self.head_group_spec.template = template;
        self
    }

    fn worker_group(mut self, group: WorkerGroupSpec) -> Self {
        self.worker_group_specs
            .get_or_insert_with(Vec::new)
            .push(group);
        self
    }
}

/// A RayService `name` in namespace `default` whose cluster config is [`ray_cluster_spec`].
pub fn ray_service(name: &str) -> RayService {
    let mut s = RayService::new(
        name,
        RayServiceSpec {
            ray_cluster_config: ray_cluster_spec(),
            ..RayServiceSpec::default()
        },
    );
    s.metadata.namespace = Some(NAMESPACE.into());
    s
}

/// Chained setters on a [`RayService`].
pub trait RayServiceBuilder: Sized {
    /// The top-level `spec.suspend` (KubeRay v1.7).
    fn service_suspend(self, suspend: Option<bool>) -> Self;
    /// Replaces `spec.rayClusterConfig`.
    fn cluster(self, spec: RayClusterSpec) -> Self;
    /// The `kueue.x-k8s.io/queue-name` label.
    fn queue(self, local_queue: &str) -> Self;
    /// `status.activeServiceStatus.rayClusterName` and `status.pendingServiceStatus.rayClusterName`
    /// (`""` is written as KubeRay clears a name).
    fn cluster_names(self, active: &str, pending: &str) -> Self;
    /// `status.lastUpdateTime = at`.
    fn status_updated_at(self, at: Timestamp) -> Self;
    /// Appends a condition to `status.conditions`.
    fn status_condition(self, condition: Condition) -> Self;
}

impl RayServiceBuilder for RayService {
    fn service_suspend(mut self, suspend: Option<bool>) -> Self {
        self.spec.suspend = suspend;
        self
    }

    fn cluster(mut self, spec: RayClusterSpec) -> Self {
        self.spec.ray_cluster_config = spec;
        self
    }

    fn queue(self, local_queue: &str) -> Self {
        self.label("kueue.x-k8s.io/queue-name", local_queue)
    }

    fn cluster_names(mut self, active: &str, pending: &str) -> Self {
        let status = self.status.get_or_insert_with(RayServiceStatus::default);
        let named = |name: &str| RayServiceClusterStatus {
            ray_cluster_name: Some(name.to_string()),
            ..RayServiceClusterStatus::default()
        };
        status.active_service_status = Some(named(active));
        status.pending_service_status = Some(named(pending));
        self
    }

    fn status_updated_at(mut self, at: Timestamp) -> Self {
        self.status
            .get_or_insert_with(RayServiceStatus::default)
            .other
            .insert("lastUpdateTime".into(), at.to_string().into());
        self
    }

    fn status_condition(mut self, condition: Condition) -> Self {
        self.status
            .get_or_insert_with(RayServiceStatus::default)
            .conditions
            .push(condition);
        self
    }
}

/// A RayCluster `name` in namespace `default` with spec [`ray_cluster_spec`].
pub fn ray_cluster(name: &str) -> RayCluster {
    let mut c = RayCluster::new(name, ray_cluster_spec());
    c.metadata.namespace = Some(NAMESPACE.into());
    c
}

/// Chained setters on a [`RayCluster`].
pub trait RayClusterBuilder: Sized {
    /// Replaces the spec.
    fn spec(self, spec: RayClusterSpec) -> Self;
    /// The `ray.io/originated-from-*` labels KubeRay puts on a RayService's children.
    fn child_of(self, ray_service: &str) -> Self;
    /// `status.state` (`ready`, `suspended`, …).
    fn state(self, state: &str) -> Self;
}

impl RayClusterBuilder for RayCluster {
    fn spec(mut self, spec: RayClusterSpec) -> Self {
        self.spec = spec;
        self
    }

    fn child_of(self, ray_service: &str) -> Self {
        self.label(ORIGINATED_FROM_CR_NAME_LABEL, ray_service)
            .label(ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE)
    }

    fn state(mut self, state: &str) -> Self {
        self.status
            .get_or_insert_with(RayClusterStatus::default)
            .state = Some(state.to_string());
        self
    }
}

/// A RayCluster's own spec setters.
impl RayClusterSpecBuilder for RayCluster {
    fn suspend(mut self, suspend: bool) -> Self {
        self.spec = self.spec.suspend(suspend);
        self
    }

    fn head(mut self, template: PodTemplateSpec) -> Self {
        self.spec = self.spec.head(template);
        self
    }

    fn worker_group(mut self, group: WorkerGroupSpec) -> Self {
        self.spec = self.spec.worker_group(group);
        self
    }
}

/// Metadata setters for every object the builders make.
pub trait MetaBuilder: Sized {
    fn meta_mut(&mut self) -> &mut ObjectMeta;

    /// `metadata.namespace`.
    fn in_namespace(mut self, namespace: &str) -> Self {
        self.meta_mut().namespace = Some(namespace.to_string());
        self
    }
    /// `metadata.uid`.
    fn uid(mut self, uid: &str) -> Self {
        self.meta_mut().uid = Some(uid.to_string());
        self
    }
    /// Adds a label (creating the map).
    fn label(mut self, key: &str, value: &str) -> Self {
        self.meta_mut()
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }
    /// Replaces `metadata.annotations` with `annotations` (an empty list still sets `{}`).
    fn annotations(mut self, annotations: BTreeMap<String, String>) -> Self {
        self.meta_mut().annotations = Some(annotations);
        self
    }
    /// `metadata.resourceVersion`.
    fn resource_version(mut self, version: &str) -> Self {
        self.meta_mut().resource_version = Some(version.to_string());
        self
    }
    /// `metadata.creationTimestamp = at`.
    fn created_at(mut self, at: Timestamp) -> Self {
        self.meta_mut().creation_timestamp = Some(Time(at));
        self
    }
}

macro_rules! meta_builder {
    ($($t:ty),*) => {$(
        impl MetaBuilder for $t {
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    )*};
}

meta_builder!(
    RayService,
    RayCluster,
    Workload,
    LocalQueue,
    ClusterQueue,
    Cohort,
    ResourceFlavor
);
