//! Node lifecycle for upgrades, and the one place that writes a Node's `Ready` condition.
//!
//! - [`set_ready`] / [`write_ready`]: the Ready condition as the kubelet (`KubeletReady`,
//!   `KubeletNotReady`) and the node lifecycle controller (`NodeStatusUnknown`) write it, with
//!   `lastTransitionTime` moving only on a status change. Kubelet actors call these.
//! - The lifecycle actor ([`run`]): a node annotated `sim.raygate.io/lifecycle: reboot` or
//!   `replace` ([`request`]) waits until it is drained (no active pod but DaemonSet and mirror
//!   pods), then
//!   - **reboot**: Ready=Unknown and the `node.kubernetes.io/unreachable:NoSchedule` taint for
//!     [`Config::reboot`], then Ready=True at the next generation label
//!     (`sim.raygate.io/generation`) and [`Config::kubelet_version`]; a cordon stays (the
//!     drainer uncordons);
//!   - **replace**: a new node `<old>-g<generation>` joins with the old node's labels (new
//!     hostname and generation) and capacity, NotReady for [`Config::join`], then Ready; the
//!     empty old node is deleted.
//!
//! Cordon (`spec.unschedulable`) and taints are plain Node fields; the API serves them as is.
//! [`step`] is the pure decision; [`run`] the IO loop.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Clock;
use crate::actors::support::{self, Recorder, Wake};

/// Asks for a reboot or a replacement.
pub const LIFECYCLE: &str = "sim.raygate.io/lifecycle";
/// The step in progress (`rebooting`, `joining`), written by the actor.
pub const PHASE: &str = "sim.raygate.io/lifecycle-phase";
/// Until when the step in progress lasts (RFC 3339), written by the actor.
pub const UNTIL: &str = "sim.raygate.io/lifecycle-until";
/// On a replaced node: its replacement's name.
pub const REPLACED_BY: &str = "sim.raygate.io/replaced-by";
/// The node's generation: 0 when absent, +1 per reboot or replacement.
pub const GENERATION: &str = "sim.raygate.io/generation";
/// The taint the node lifecycle controller puts on a node whose kubelet stopped reporting.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// A Ready condition to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// `True/KubeletReady` "kubelet is posting ready status".
    Ready,
    /// `False/KubeletNotReady` with the kubelet's message.
    NotReady(String),
    /// `Unknown/NodeStatusUnknown` "Kubelet stopped posting node status." (node lifecycle
    /// controller, after the grace period).
    Unknown,
}

/// Sets the Ready condition in `status`; `lastTransitionTime` moves only when the status
/// changes, `lastHeartbeatTime` always. Returns whether the condition's status changed.
pub fn set_ready(status: &mut NodeStatus, readiness: &Readiness, now: Timestamp) -> bool {
    let (s, reason, message) = match readiness {
        Readiness::Ready => (
            "True",
            "KubeletReady",
            "kubelet is posting ready status".to_string(),
        ),
        Readiness::NotReady(m) => ("False", "KubeletNotReady", m.clone()),
        Readiness::Unknown => (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.".to_string(),
        ),
    };
    let now = Time(Timestamp::from_second(now.as_second()).unwrap_or(now));
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(c) => {
            let changed = c.status != s;
            if changed {
                c.last_transition_time = Some(now.clone());
            }
            c.status = s.into();
            c.reason = Some(reason.into());
            c.message = Some(message);
            c.last_heartbeat_time = Some(now);
            changed
        }
        None => {
            conditions.push(NodeCondition {
                type_: "Ready".into(),
                status: s.into(),
                reason: Some(reason.into()),
                message: Some(message),
                last_heartbeat_time: Some(now.clone()),
                last_transition_time: Some(now),
            });
            true
        }
    }
}

/// Whether the node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Writes the node's Ready condition (status subresource, guarded by the resourceVersion read).
pub async fn write_ready(
    client: &Client,
    clock: &Clock,
    node: &str,
    readiness: &Readiness,
) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let mut current = api.get(node).await?;
    let mut status = current.status.take().unwrap_or_default();
    set_ready(&mut status, readiness, clock.now());
    current.status = Some(status);
    api.replace_status(node, &PostParams::default(), &current)
        .await
}

/// Marks `node` for a reboot (`"reboot"`) or a replacement (`"replace"`).
pub async fn request(client: &Client, node: &str, what: &str) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    api.patch(
        node,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {LIFECYCLE: what}}})),
    )
    .await
}

/// Whether a pod still keeps `node` from being drained: bound to it, not terminal, and
/// neither a DaemonSet nor a mirror pod (kubectl drain's filters).
pub fn blocks_drain(pod: &Pod, node: &str) -> bool {
    let on_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
    let terminal = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    let daemon = pod
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    on_node && !terminal && !daemon && !mirror
}

/// What the actor does to one node next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing now; look again at this time (or at the next change).
    Wait(Option<Timestamp>),
    /// Take the node down: Ready=Unknown, unreachable taint, phase `rebooting` until then.
    GoDown { until: Timestamp },
    /// Bring the rebooted node up at this generation.
    ComeUp { generation: u64 },
    /// Create the replacement (NotReady, phase `joining` until then).
    Join { node: Box<Node>, until: Timestamp },
    /// The replacement finished joining: make it Ready.
    Joined,
    /// Delete the replaced (empty) node: its replacement is Ready.
    Remove,
}

/// The lifecycle's knobs.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a rebooting node stays down.
    pub reboot: Duration,
    /// How long a replacement node stays NotReady after it joins.
    pub join: Duration,
    /// The kubelet version a rebooted or replacement node reports.
    pub kubelet_version: String,
    /// Reaction lag after a change.
    pub lag: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            reboot: Duration::from_secs(120),
            join: Duration::from_secs(60),
            kubelet_version: "v1.36.0".into(),
            lag: Duration::ZERO,
        }
    }
}

fn generation(node: &Node) -> u64 {
    node.labels()
        .get(GENERATION)
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.annotations().get(key).map(String::as_str)
}

fn until(node: &Node) -> Option<Timestamp> {
    annotation(node, UNTIL).and_then(|t| t.parse().ok())
}

/// The replacement of `old`: its labels with the next generation and a new hostname, its
/// capacity, no cordon, no node-lifecycle taints, NotReady.
pub fn replacement(old: &Node, config: &Config, now: Timestamp) -> Node {
    let next_gen = generation(old) + 1;
    let name = format!(
        "{}-g{next_gen}",
        old.name_any()
            .rsplit_once("-g")
            .filter(|(_, g)| g.parse::<u64>().is_ok())
            .map_or(old.name_any(), |(base, _)| base.to_string())
    );
    let mut labels = old.labels().clone();
    labels.insert(GENERATION.into(), next_gen.to_string());
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    let taints: Vec<Taint> = old
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| !t.key.starts_with("node.kubernetes.io/"))
        .collect();
    let mut status = NodeStatus {
        capacity: old.status.as_ref().and_then(|s| s.capacity.clone()),
        allocatable: old.status.as_ref().and_then(|s| s.allocatable.clone()),
        node_info: old
            .status
            .as_ref()
            .and_then(|s| s.node_info.clone())
            .map(|mut i| {
                i.kubelet_version = config.kubelet_version.clone();
                i
            }),
        ..Default::default()
    };
    set_ready(
        &mut status,
        &Readiness::NotReady("container runtime status check may not have completed yet".into()),
        now,
    );
    let until = now + SignedDuration::try_from(config.join).unwrap_or_default();
    Node {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (PHASE.to_string(), "joining".to_string()),
                (UNTIL.to_string(), until.to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..old.spec.clone().unwrap_or_default()
        })
        .map(|mut s| {
            s.unschedulable = None;
            s
        }),
        status: Some(status),
    }
}

/// The next step for `node` (pure). `nodes` are all nodes, `pods` all pods.
pub fn step(node: &Node, nodes: &[Node], pods: &[Pod], config: &Config, now: Timestamp) -> Step {
    let name = node.name_any();
    match (annotation(node, PHASE), annotation(node, LIFECYCLE)) {
        (Some("rebooting"), _) => match until(node) {
            Some(t) if t > now => Step::Wait(Some(t)),
            _ => Step::ComeUp {
                generation: generation(node) + 1,
            },
        },
        (Some("joining"), _) => match until(node) {
            Some(t) if t > now => Step::Wait(Some(t)),
            _ => Step::Joined,
        },
        (Some("replaced"), _) => {
            let by = annotation(node, REPLACED_BY).unwrap_or_default();
            let ready = nodes
                .iter()
                .any(|n| n.name_any() == by && is_ready(n) && annotation(n, PHASE).is_none());
            let empty = !pods.iter().any(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str())
                    && blocks_drain(p, &name)
            });
            if ready && empty {
                Step::Remove
            } else {
                Step::Wait(None)
            }
        }
        (_, Some(what @ ("reboot" | "replace"))) => {
            if pods.iter().any(|p| blocks_drain(p, &name)) {
                return Step::Wait(None);
            }
            if what == "reboot" {
                Step::GoDown {
                    until: now + SignedDuration::try_from(config.reboot).unwrap_or_default(),
                }
            } else {
                let new = replacement(node, config, now);
                let until = until(&new).unwrap_or(now);
                Step::Join {
                    node: Box::new(new),
                    until,
                }
            }
        }
        _ => Step::Wait(None),
    }
}

/// The lifecycle actor's failing steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listing {what}: {source}")]
    List {
        what: &'static str,
        source: kube::Error,
    },
    #[error("{step} of node {node}: {source}")]
    Write {
        step: &'static str,
        node: String,
        source: kube::Error,
    },
    #[error("every watch of the node lifecycle actor ended")]
    WatchesEnded,
}

/// Runs the lifecycle actor until `shutdown` completes.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let mut wake = Wake::default()
        .watch(Api::<Node>::all(client.clone()))
        .watch(Api::<Pod>::all(client.clone()));
    let mut recorder = Recorder::new(client.clone(), clock.clone(), "node-lifecycle");
    let mut next: Option<tokio::time::Instant> = None;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            more = wake.next(config.lag) => if !more { return Err(Error::WatchesEnded) },
            _ = async { if let Some(at) = next { tokio::time::sleep_until(at).await } }, if next.is_some() => {}
        }
        next = match pass(&client, &clock, &config, &mut recorder).await {
            Ok(at) => at.map(|t| {
                let wait = Duration::try_from(clock.now().duration_until(t)).unwrap_or_default();
                tokio::time::Instant::now() + wait
            }),
            Err(e) => {
                tracing::warn!(error = %e, "node lifecycle: pass failed; retrying in 1s");
                Some(tokio::time::Instant::now() + Duration::from_secs(1))
            }
        };
    }
}

async fn pass(
    client: &Client,
    clock: &Clock,
    config: &Config,
    recorder: &mut Recorder,
) -> Result<Option<Timestamp>, Error> {
    let api: Api<Node> = Api::all(client.clone());
    let nodes = api
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::List {
            what: "Nodes",
            source,
        })?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::List {
            what: "Pods",
            source,
        })?
        .items;
    let mut next: Option<Timestamp> = None;
    for node in &nodes {
        let name = node.name_any();
        let now = clock.now();
        let node_name = name.clone();
        let write = |step: &'static str| {
            let node = node_name.clone();
            move |source| Error::Write { step, node, source }
        };
        match step(node, &nodes, &pods, config, now) {
            Step::Wait(at) => {
                if let Some(t) = at {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
            Step::GoDown { until } => {
                let mut n = node.clone();
                let mut status = n.status.take().unwrap_or_default();
                set_ready(&mut status, &Readiness::Unknown, now);
                let mut taints = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default();
                taints.retain(|t| t.key != UNREACHABLE_TAINT);
                taints.push(Taint {
                    key: UNREACHABLE_TAINT.into(),
                    effect: "NoSchedule".into(),
                    time_added: None,
                    value: None,
                });
                n.spec.get_or_insert_with(Default::default).taints = Some(taints);
                let ann = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
                ann.remove(LIFECYCLE);
                ann.insert(PHASE.into(), "rebooting".into());
                ann.insert(UNTIL.into(), until.to_string());
                let stored = api
                    .replace(&name, &PostParams::default(), &n)
                    .await
                    .map_err(write("taking down"))?;
                let mut s = stored;
                s.status = Some(status);
                api.replace_status(&name, &PostParams::default(), &s)
                    .await
                    .map_err(write("marking NotReady"))?;
                recorder
                    .publish(
                        support::reference(node),
                        "Normal",
                        "NodeNotReady",
                        &format!("Node {name} status is now: NodeNotReady"),
                    )
                    .await;
                next = Some(next.map_or(until, |x| x.min(until)));
            }
            Step::ComeUp { generation } => {
                let mut n = node.clone();
                let mut status = n.status.take().unwrap_or_default();
                set_ready(&mut status, &Readiness::Ready, now);
                status
                    .node_info
                    .get_or_insert_with(Default::default)
                    .kubelet_version = config.kubelet_version.clone();
                if let Some(t) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) {
                    t.retain(|t| t.key != UNREACHABLE_TAINT);
                }
                n.metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(GENERATION.into(), generation.to_string());
                let ann = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
                ann.remove(PHASE);
                ann.remove(UNTIL);
                let mut s = api
                    .replace(&name, &PostParams::default(), &n)
                    .await
                    .map_err(write("bringing up"))?;
                s.status = Some(status);
                api.replace_status(&name, &PostParams::default(), &s)
                    .await
                    .map_err(write("marking Ready"))?;
                recorder
                    .publish(
                        support::reference(node),
                        "Warning",
                        "Rebooted",
                        &format!("Node {name} has been rebooted"),
                    )
                    .await;
                recorder
                    .publish(
                        support::reference(node),
                        "Normal",
                        "NodeReady",
                        &format!("Node {name} status is now: NodeReady"),
                    )
                    .await;
            }
            Step::Join { node: new, until } => {
                let new_name = new.name_any();
                let status = new.status.clone();
                let mut created = match api.create(&PostParams::default(), &new).await {
                    Ok(c) => c,
                    Err(kube::Error::Api(s)) if s.code == 409 => api
                        .get(&new_name)
                        .await
                        .map_err(write("reading the replacement"))?,
                    Err(source) => {
                        return Err(Error::Write {
                            step: "creating the replacement",
                            node: name,
                            source,
                        });
                    }
                };
                created.status = status;
                api.replace_status(&new_name, &PostParams::default(), &created)
                    .await
                    .map_err(write("reporting the replacement"))?;
                let mut old = node.clone();
                let ann = old.metadata.annotations.get_or_insert_with(BTreeMap::new);
                ann.remove(LIFECYCLE);
                ann.insert(PHASE.into(), "replaced".into());
                ann.insert(REPLACED_BY.into(), new_name.clone());
                api.replace(&name, &PostParams::default(), &old)
                    .await
                    .map_err(write("marking replaced"))?;
                recorder
                    .publish(
                        support::reference(&created),
                        "Normal",
                        "RegisteredNode",
                        &format!(
                            "Node {new_name} event: Registered Node {new_name} (replacing {name})"
                        ),
                    )
                    .await;
                next = Some(next.map_or(until, |x| x.min(until)));
            }
            Step::Joined => {
                let mut n = node.clone();
                let mut status = n.status.take().unwrap_or_default();
                set_ready(&mut status, &Readiness::Ready, now);
                let ann = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
                ann.remove(PHASE);
                ann.remove(UNTIL);
                let mut s = api
                    .replace(&name, &PostParams::default(), &n)
                    .await
                    .map_err(write("finishing the join"))?;
                s.status = Some(status);
                api.replace_status(&name, &PostParams::default(), &s)
                    .await
                    .map_err(write("marking Ready"))?;
                recorder
                    .publish(
                        support::reference(node),
                        "Normal",
                        "NodeReady",
                        &format!("Node {name} status is now: NodeReady"),
                    )
                    .await;
            }
            Step::Remove => {
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map_err(write("deleting the replaced node"))?;
                tracing::info!(node = %name, "node lifecycle: replaced node deleted");
            }
        }
    }
    Ok(next)
}

impl crate::Sim {
    /// Starts the node lifecycle actor on this cluster (until the handle is aborted or the runtime ends).
    pub fn spawn_node_lifecycle(
        &self,
        config: Config,
    ) -> tokio::task::JoinHandle<Result<(), Error>> {
        tokio::spawn(run(
            self.client(),
            self.clock().clone(),
            config,
            std::future::pending(),
        ))
    }
}

#[cfg(test)]
mod tests;
