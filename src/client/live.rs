//! `raygate status` and `raygate drain plan|check` against a live cluster: reads the objects
//! (one GET or paged LIST each) and hands them to the pure summaries in [`crate::cli::status`] and
//! the pure drain plan (the drain's read is the controller's, [`crate::controller::drain::read`]).

use std::path::Path;

use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::status::{QueueReport, ServiceReport, queue_report, service_report};
use crate::cli::status_list::{ServiceList, service_list};
use crate::types::kueue::{ClusterQueue, LocalQueue, Workload};
use crate::types::ray::{
    ORIGINATED_FROM_CR_NAME_LABEL, ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE,
    RayCluster, RayService,
};

/// What `raygate status` was asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    RayService(String),
    /// Every opted-in RayService (of the namespace, or all with `-A`).
    RayServices,
    ClusterQueue(String),
}

impl std::str::FromStr for Target {
    type Err = String;

    /// `rayservice/NAME` (also `rayservices`, `ray`... as kubectl's short forms), `rayservices`
    /// (every opted-in one) or `clusterqueue/NAME` (`cq`, `clusterqueues`).
    fn from_str(s: &str) -> Result<Self, String> {
        if matches!(
            s.to_ascii_lowercase().as_str(),
            "rayservice" | "rayservices" | "rayservice.ray.io" | "rayservices.ray.io"
        ) {
            return Ok(Target::RayServices);
        }
        let (kind, name) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: expected rayservice/NAME or clusterqueue/NAME"))?;
        if name.is_empty() {
            return Err(format!("{s:?}: the name is missing"));
        }
        match kind.to_ascii_lowercase().as_str() {
            "rayservice" | "rayservices" | "rayservice.ray.io" | "rayservices.ray.io" => {
                Ok(Target::RayService(name.into()))
            }
            "clusterqueue"
            | "clusterqueues"
            | "cq"
            | "clusterqueue.kueue.x-k8s.io"
            | "clusterqueues.kueue.x-k8s.io" => Ok(Target::ClusterQueue(name.into())),
            other => Err(format!(
                "{other:?}: raygate status knows rayservice/NAME and clusterqueue/NAME"
            )),
        }
    }
}

/// Why `raygate status` failed, naming the object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubeconfig: {0}")]
    Config(String),
    #[error("reading {what}: {source}")]
    Read { what: String, source: kube::Error },
    #[error("{what} not found")]
    NotFound { what: String },
    /// Flags that do not go together (`-A` with one named object).
    #[error("{0}")]
    Usage(String),
}

/// A client from `kubeconfig` (else `$KUBECONFIG`, `~/.kube/config`, in-cluster) and `context`.
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Client, Error> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| Error::Config(e.to_string()))?
        }
        None if context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| Error::Config(e.to_string()))?,
        None => Config::infer()
            .await
            .map_err(|e| Error::Config(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| Error::Config(e.to_string()))
}

/// The namespace `-n` names, else the kubeconfig context's, else `default` (as kubectl).
pub fn default_namespace(client: &Client, namespace: Option<&str>) -> String {
    namespace
        .map(str::to_string)
        .unwrap_or_else(|| client.default_namespace().to_string())
}

/// The object `name` (`what`, e.g. `RayService ns/name`, names it in an error; a missing one is
/// [`Error::NotFound`]).
async fn named<K>(api: Api<K>, name: &str, what: String) -> Result<K, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(|source| Error::Read {
            what: what.clone(),
            source,
        })?
        .ok_or(Error::NotFound { what })
}

/// A RayService, its children and its Workloads, summarised.
pub async fn service(client: &Client, namespace: &str, name: &str) -> Result<ServiceReport, Error> {
    let service = named(
        Api::<RayService>::namespaced(client.clone(), namespace),
        name,
        format!("RayService {namespace}/{name}"),
    )
    .await?;
    let children = ListParams::default().labels(&format!(
        "{ORIGINATED_FROM_CRD_LABEL}={ORIGINATED_FROM_RAYSERVICE},{ORIGINATED_FROM_CR_NAME_LABEL}={name}"
    ));
    let clusters = Api::<RayCluster>::namespaced(client.clone(), namespace)
        .list(&children)
        .await
        .map_err(|source| Error::Read {
            what: format!("RayClusters of {namespace}/{name}"),
            source,
        })?;
    let workloads = Api::<Workload>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("{}={name}", crate::slices::RAYSERVICE_LABEL)))
        .await
        .map_err(|source| Error::Read {
            what: format!("Workloads of {namespace}/{name}"),
            source,
        })?;
    Ok(service_report(&service, &clusters.items, &workloads.items))
}

/// Every opted-in RayService of `namespace` (`None`: of every namespace), each summarised as
/// [`service`] does, from three LISTs.
pub async fn services(client: &Client, namespace: Option<&str>) -> Result<ServiceList, Error> {
    fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let read = |what: &str| {
        let what = what.to_string();
        move |source| Error::Read { what, source }
    };
    // opted in by either label: one LIST per label, each service once
    let mut services: Vec<RayService> = vec![];
    for label in crate::gate::OPT_IN_LABELS {
        let listed = api::<RayService>(client, namespace)
            .list(&ListParams::default().labels(label))
            .await
            .map_err(read("RayServices"))?;
        for s in listed {
            if !services
                .iter()
                .any(|have| have.metadata.uid == s.metadata.uid)
            {
                services.push(s);
            }
        }
    }
    services.sort_by(|a, b| {
        let key = |s: &RayService| (s.metadata.namespace.clone(), s.metadata.name.clone());
        key(a).cmp(&key(b))
    });
    let children = ListParams::default().labels(&format!(
        "{ORIGINATED_FROM_CRD_LABEL}={ORIGINATED_FROM_RAYSERVICE}"
    ));
    let clusters = api::<RayCluster>(client, namespace)
        .list(&children)
        .await
        .map_err(read("RayClusters"))?;
    let workloads = api::<Workload>(client, namespace)
        .list(&ListParams::default().labels(crate::slices::RAYSERVICE_LABEL))
        .await
        .map_err(read("Workloads"))?;
    Ok(service_list(&services, &clusters.items, &workloads.items))
}

/// A ClusterQueue, the LocalQueues feeding it and their Workloads, summarised.
pub async fn cluster_queue(client: &Client, name: &str) -> Result<QueueReport, Error> {
    let queue = named(
        Api::<ClusterQueue>::all(client.clone()),
        name,
        format!("ClusterQueue {name}"),
    )
    .await?;
    let local_queues = Api::<LocalQueue>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Read {
            what: "LocalQueues".into(),
            source,
        })?;
    let workloads = Api::<Workload>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Read {
            what: "Workloads".into(),
            source,
        })?;
    Ok(queue_report(&queue, &local_queues.items, &workloads.items))
}

pub use crate::controller::drain::read::DrainObjects;

/// Reads what `raygate drain plan|check` needs, cluster-wide (the controller's read).
pub async fn drain_objects(client: &Client) -> Result<DrainObjects, Error> {
    crate::controller::drain::read::drain_objects(client)
        .await
        .map_err(|e| Error::Read {
            what: e.what,
            source: e.source,
        })
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn targets_take_kubectl_style_kind_slash_name() {
        assert_eq!(
            "rayservice/svc".parse(),
            Ok(Target::RayService("svc".into()))
        );
        assert_eq!(
            "RayServices/svc".parse(),
            Ok(Target::RayService("svc".into()))
        );
        assert_eq!(
            "cq/team-a".parse(),
            Ok(Target::ClusterQueue("team-a".into()))
        );
        assert_eq!(
            "pod/x".parse::<Target>(),
            Err("\"pod\": raygate status knows rayservice/NAME and clusterqueue/NAME".into())
        );
        assert!("svc".parse::<Target>().is_err());
        assert!("rayservice/".parse::<Target>().is_err());
    }
}
