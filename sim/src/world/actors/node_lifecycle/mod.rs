//! Node lifecycle for upgrades, and the one place that writes a Node's `Ready` condition.
//!
//! - [`set_ready`] / [`write_ready`]: the Ready condition as the kubelet (`KubeletReady`,
//!   `KubeletNotReady`) and the node lifecycle controller (`NodeStatusUnknown`) write it, with
//!   `lastTransitionTime` moving only on a status change. Kubelet actors call these.
//! - The lifecycle actor ([`run`]): a node annotated `sim.raygate.io/lifecycle: reboot` or
//!   `replace` ([`request`]) waits until it is drained (no active pod but DaemonSet and mirror
//!   pods and pods that tolerate the cordon), then
//!   - **reboot**: Ready=Unknown and the `node.kubernetes.io/unreachable:NoSchedule` taint for
//!     [`Config::reboot`], then Ready=True at the next generation label
//!     (`sim.raygate.io/generation`) and [`Config::kubelet_version`]; a cordon stays (the
//!     drainer uncordons);
//!   - **replace**: a new node `<old>-g<generation>` joins with the old node's labels (new
//!     hostname and generation) and capacity, NotReady for [`Config::join`], then Ready; the
//!     empty old node is deleted.
//! - The node lifecycle controller's reaction to a NotReady node: the NoExecute taints
//!   ([`noexecute_taints`]) and, once a node has been Unknown for the grace period, its pods'
//!   `Ready=False` ([`pods_not_ready`], `MarkPodsNotReady`).
//!
//! Cordon (`spec.unschedulable`) and taints are plain Node fields; the API serves them as is.
//! [`step`], [`noexecute_taints`] and [`pods_not_ready`] are the pure decisions; [`run`] the IO
//! loop.

/// The NotReady reaction: NoExecute taints, pods marked not ready.
mod not_ready;
/// The actor's pass and its writes.
mod pass;

use std::borrow::Borrow;
use std::collections::BTreeMap;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Clock;
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Recorder, Shutdown};
use raygate::runtime::SortedState;

pub use not_ready::{NOT_READY_TAINT, noexecute_taints, pods_not_ready};
use pass::pass;

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

/// Whether a pod still keeps `node` from being drained: bound to it, not terminal, neither a
/// DaemonSet nor a mirror pod (kubectl drain's filters), and not one a cordon cannot keep off
/// (it tolerates the cordon's taint): an upgrade agent that drains as kubectl does (kured,
/// Cluster API) waits for the pods it evicted, not for their replacements, so such a pod's
/// replacement scheduled back onto the node does not stop its reboot.
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
    let returns = raygate::drain::tolerates_cordon(pod, None);
    on_node && !terminal && !daemon && !mirror && !returns
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
    /// `--node-monitor-grace-period`: how long a node's Ready condition stays Unknown before the
    /// `unreachable:NoExecute` taint (50 s since Kubernetes v1.32, 40 s before).
    pub grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            reboot: Duration::from_secs(120),
            join: Duration::from_secs(60),
            kubelet_version: "v1.36.0".into(),
            lag: Duration::ZERO,
            grace: Duration::from_secs(50),
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

/// The next step for `node` (pure). `nodes` are all nodes, `pods` all pods: owned or as the
/// cache's `Arc`s, so a pass reads the cache without copying every object.
pub fn step<N: Borrow<Node>, P: Borrow<Pod>>(
    node: &Node,
    nodes: &[N],
    pods: &[P],
    config: &Config,
    now: Timestamp,
) -> Step {
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
            let ready = nodes.iter().map(Borrow::borrow).any(|n: &Node| {
                n.name_any() == by && is_ready(n) && annotation(n, PHASE).is_none()
            });
            let empty = !pods.iter().map(Borrow::borrow).any(|p: &Pod| {
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
            if pods.iter().any(|p: &P| blocks_drain(p.borrow(), &name)) {
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
    #[error("{step} of node {node}: {source}")]
    Write {
        step: &'static str,
        node: String,
        source: kube::Error,
    },
    #[error("marking pod {pod} of node {node} not ready: {source}")]
    MarkPod {
        pod: String,
        node: String,
        source: kube::Error,
    },
}

/// Runs the lifecycle actor until `shutdown`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) -> Result<(), Error> {
    let mut c = Caches::default();
    let lag = config.lag;
    let actor = Lifecycle {
        nodes: c.all(&client),
        pods: c.all(&client),
        recorder: Recorder::new(client.clone(), clock.clone(), "node-lifecycle"),
        client,
        config,
    };
    support::run(actor, c, clock, lag, shutdown).await
}

struct Lifecycle {
    client: Client,
    config: Config,
    nodes: Store<Node>,
    pods: Store<Pod>,
    recorder: Recorder,
}

impl Actor for Lifecycle {
    type Error = Error;

    async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Error> {
        // the cache's own objects: a pass runs on every pod and node change and reads them all,
        // and copying every pod for it was about 7% of a sweep's CPU
        let nodes = self.nodes.sorted_state();
        let pods = self.pods.sorted_state();
        pass(
            &self.client,
            &self.config,
            &mut self.recorder,
            (&self.nodes, &self.pods),
            expect,
            &nodes,
            &pods,
            now,
        )
        .await
    }
}

#[cfg(test)]
mod tests;
