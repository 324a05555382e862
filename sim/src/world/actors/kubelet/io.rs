//! The kubelets' IO loop: a kubelet per Node watches its Node and pods, feeds them to
//! [`Kubelet::step`](super::Kubelet::step) and applies the actions.

use raygate::runtime::SortedState;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{Action, Config, Kubelet, group_state, node_up};
use crate::Clock;
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};
use crate::world::fanout::Fanout;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

/// Every Pod, as a probe querying the API through a cache sees them, and its change signal.
type ClusterPods = (Store<Pod>, Fanout);

/// Runs the kubelet of node `node` until `shutdown`.
pub async fn run(
    client: kube::Client,
    clock: Clock,
    node: String,
    config: Config,
    shutdown: impl Into<Shutdown>,
) {
    let shutdown = shutdown.into();
    if let Some((_cache, cluster_pods)) = cluster_pods(&client, &shutdown).await {
        run_with(client, clock, node, config, shutdown, cluster_pods).await;
    }
}

/// One cache of every pod for the representatives' probes (it wakes only the kubelets
/// holding representatives), once listed; `None` on shutdown first.
async fn cluster_pods(client: &kube::Client, shutdown: &Shutdown) -> Option<(Caches, ClusterPods)> {
    let mut cache = Caches::default();
    let pods = cache.reflect_broadcast(Api::all(client.clone()), watcher::Config::default());
    tokio::select! {
        biased;
        _ = shutdown.wait() => None,
        _ = cache.wait_ready() => Some((cache, pods)),
    }
}

/// [`run`] reading representatives' groups from `cluster_pods`.
async fn run_with(
    client: kube::Client,
    clock: Clock,
    node: String,
    config: Config,
    shutdown: Shutdown,
    (cluster_pods, group_changed): ClusterPods,
) {
    let mut caches = Caches::default();
    let actor = NodeAgent {
        pods: caches.reflect(
            Api::all(client.clone()),
            watcher::Config::default().fields(&format!("spec.nodeName={node}")),
        ),
        node: caches.reflect(
            Api::all(client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={node}")),
        ),
        kubelet: Kubelet::new(&config),
        client,
        cluster_pods,
        group_changed: group_changed.subscriber(),
        representatives: false,
    };
    support::drive(actor, caches, clock, std::time::Duration::ZERO, shutdown).await;
}

struct NodeAgent {
    client: kube::Client,
    pods: Store<Pod>,
    node: Store<Node>,
    cluster_pods: Store<Pod>,
    group_changed: Arc<tokio::sync::Notify>,
    /// Whether a pod of this node is a group's representative (its probe follows the group).
    representatives: bool,
    kubelet: Kubelet,
}

impl Actor for NodeAgent {
    type Error = std::convert::Infallible;

    async fn pass(&mut self, now: Timestamp, _expect: &mut Expect) -> Pass<Self::Error> {
        let node_obj = self.node.sorted_state().into_iter().next();
        let pod_list = self.pods.sorted_state();
        let mut groups = BTreeMap::new();
        let representatives: Vec<_> = pod_list
            .iter()
            .filter_map(|p| super::readiness_group(p))
            .collect();
        for (ns, key, value, _) in representatives.iter().cloned() {
            // the representative itself is on this node and named in the group
            let rep = pod_list
                .iter()
                .find(|p| {
                    p.metadata.namespace.as_deref() == Some(ns.as_str())
                        && p.metadata.labels.as_ref().and_then(|l| l.get(&key)) == Some(&value)
                        && super::readiness_group(p).is_some()
                })
                .and_then(|p| p.metadata.name.clone())
                .unwrap_or_default();
            let members = self.cluster_pods.sorted_state();
            let members = members.iter().map(|p| &**p).filter(|p| {
                p.metadata.namespace.as_deref() == Some(ns.as_str())
                    && p.metadata.labels.as_ref().and_then(|l| l.get(&key)) == Some(&value)
            });
            let state = group_state(members, &rep);
            groups.insert((ns, key, value), state);
        }
        self.representatives = !representatives.is_empty();
        let (actions, next) =
            self.kubelet
                .step(node_up(node_obj.as_deref()), &pod_list, &groups, now);
        for a in actions {
            apply(&self.client, a).await;
        }
        // without a due moment, a wake-up an hour on
        Ok(Some(
            next.unwrap_or(now + std::time::Duration::from_secs(3600)),
        ))
    }

    /// A representative's probe result moves with its group.
    async fn woken(&mut self) {
        if !self.representatives {
            std::future::pending::<()>().await;
        }
        self.group_changed.notified().await;
    }
}

async fn apply(client: &kube::Client, action: Action) {
    match action {
        Action::Status {
            namespace,
            name,
            patch,
        } => {
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
            {
                tracing::debug!(pod = %name, error = %e, "status write failed");
            }
        }
        Action::Delete {
            namespace,
            name,
            uid,
        } => {
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            if let Err(e) = api.delete(&name, &dp).await {
                tracing::debug!(pod = %name, error = %e, "final delete failed");
            }
        }
    }
}

/// Runs a kubelet for every Node (started as Nodes appear; a kubelet whose Node is deleted
/// idles, as its pods wait for PodGC) until `shutdown`.
pub async fn run_all(
    client: kube::Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) {
    let shutdown = shutdown.into();
    let Some((_cache, cluster_pods)) = cluster_pods(&client, &shutdown).await else {
        return;
    };
    let mut caches = Caches::default();
    let nodes: Store<Node> = caches.all(&client);
    let running = Running::default();
    let spawner = Spawner {
        client,
        clock: clock.clone(),
        config,
        shutdown: shutdown.clone(),
        nodes,
        cluster_pods,
        running: running.clone(),
    };
    support::drive(spawner, caches, clock, std::time::Duration::ZERO, shutdown).await;
    let tasks: Vec<_> = running
        .lock()
        .map(|mut r| r.drain().map(|(_, t)| t).collect())
        .unwrap_or_default();
    for t in tasks {
        let _ = t.await;
    }
}

type Running = Arc<std::sync::Mutex<HashMap<String, tokio::task::JoinHandle<()>>>>;

/// Starts a kubelet per Node as Nodes appear.
struct Spawner {
    client: kube::Client,
    clock: Clock,
    config: Config,
    shutdown: Shutdown,
    nodes: Store<Node>,
    cluster_pods: ClusterPods,
    running: Running,
}

impl Actor for Spawner {
    type Error = std::convert::Infallible;

    async fn pass(&mut self, _now: Timestamp, _expect: &mut Expect) -> Pass<Self::Error> {
        let Ok(mut running) = self.running.lock() else {
            return Ok(None);
        };
        for n in self.nodes.sorted_state() {
            let name = n.metadata.name.clone().unwrap_or_default();
            running.entry(name.clone()).or_insert_with(|| {
                // a kubelet reads the way the manager does (in-process in the demo)
                tokio::spawn(crate::world::informers::carry(run_with(
                    self.client.clone(),
                    self.clock.clone(),
                    name,
                    self.config.clone(),
                    self.shutdown.clone(),
                    self.cluster_pods.clone(),
                )))
            });
        }
        Ok(None)
    }
}
