//! `raygate status` and `raygate drain plan|check` against a live cluster: reads the objects
//! (one GET or paged LIST each) and hands them to the pure summaries in [`crate::cli::status`] and
//! the pure drain plan.

use std::path::Path;

use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::status::{QueueReport, ServiceReport, queue_report, service_report};
use crate::types::kueue::{ClusterQueue, LocalQueue, Workload};
use crate::types::ray::{
    ORIGINATED_FROM_CR_NAME_LABEL, ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE,
    RayCluster, RayService,
};

/// What `raygate status` was asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    RayService(String),
    ClusterQueue(String),
}

impl std::str::FromStr for Target {
    type Err = String;

    /// `rayservice/NAME` (also `rayservices`, `ray`... as kubectl's short forms) or `clusterqueue/NAME`
    /// (`cq`, `clusterqueues`).
    fn from_str(s: &str) -> Result<Self, String> {
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

/// A RayService, its children and its Workloads, summarised.
pub async fn service(client: &Client, namespace: &str, name: &str) -> Result<ServiceReport, Error> {
    let what = format!("RayService {namespace}/{name}");
    let service = Api::<RayService>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|source| Error::Read {
            what: what.clone(),
            source,
        })?
        .ok_or(Error::NotFound { what })?;
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

/// A ClusterQueue, the LocalQueues feeding it and their Workloads, summarised.
pub async fn cluster_queue(client: &Client, name: &str) -> Result<QueueReport, Error> {
    let what = format!("ClusterQueue {name}");
    let queue = Api::<ClusterQueue>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(|source| Error::Read {
            what: what.clone(),
            source,
        })?
        .ok_or(Error::NotFound { what })?;
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

/// What a drain plan or preflight reads: every Node, Pod, PodDisruptionBudget and DaemonSet.
#[derive(Clone, Debug, Default)]
pub struct DrainObjects {
    pub nodes: Vec<k8s_openapi::api::core::v1::Node>,
    pub pods: Vec<k8s_openapi::api::core::v1::Pod>,
    pub pdbs: Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    /// `None` when the DaemonSets could not be listed (not served, or not permitted): every
    /// DaemonSet a pod names is then taken to exist.
    pub daemon_sets: Option<Vec<k8s_openapi::api::apps::v1::DaemonSet>>,
}

impl DrainObjects {
    /// The objects as the pure plan reads them (with the DaemonSets, a pod of a deleted one is
    /// found, as kubectl drain finds it).
    pub fn cluster(&self) -> crate::drain::Cluster<'_> {
        crate::drain::Cluster {
            daemon_sets: self.daemon_sets.as_deref(),
            ..crate::drain::Cluster::new(&self.nodes, &self.pods, &self.pdbs)
        }
    }
}

/// Every object of a kind, in pages of 500 (as kubectl lists), so a large cluster is never
/// asked for one 100,000-object response.
async fn list_all<K>(api: Api<K>, what: &str) -> Result<Vec<K>, Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.map_err(|source| Error::Read {
            what: what.to_string(),
            source,
        })?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// Reads what `raygate drain plan|check` needs, cluster-wide.
pub async fn drain_objects(client: &Client) -> Result<DrainObjects, Error> {
    Ok(DrainObjects {
        nodes: list_all(Api::all(client.clone()), "Nodes").await?,
        pods: list_all(Api::all(client.clone()), "Pods").await?,
        pdbs: list_all(Api::all(client.clone()), "PodDisruptionBudgets").await?,
        daemon_sets: match list_all(Api::all(client.clone()), "DaemonSets").await {
            Ok(sets) => Some(sets),
            Err(Error::Read {
                source: kube::Error::Api(status),
                ..
            }) if status.code == 403 || status.code == 404 => None,
            Err(e) => return Err(e),
        },
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
