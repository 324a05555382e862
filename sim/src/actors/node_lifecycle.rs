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

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Clock;
use crate::actors::support::{self, Actor, Caches, Expect, Pass, Recorder, Shutdown};
use raygate::runtime::SortedState;

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

/// The NoExecute taint the node lifecycle controller puts on a node whose Ready condition is
/// False (`NotReadyTaintTemplate`).
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// A node's Ready condition: its status and when it last changed.
fn ready_condition(node: &Node) -> Option<(&str, Option<Timestamp>)> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map(|c| {
            (
                c.status.as_str(),
                c.last_transition_time.as_ref().map(|t| t.0),
            )
        })
}

/// When a Ready condition that turned `Unknown` at `since` has been so for [`Config::grace`]
/// (`now` when the transition time is missing).
fn grace_over(since: Option<Timestamp>, config: &Config, now: Timestamp) -> Timestamp {
    since.map_or(now, |s| {
        s + SignedDuration::try_from(config.grace).unwrap_or_default()
    })
}

fn is_noexecute(t: &Taint, key: &str) -> bool {
    t.key == key && t.effect == "NoExecute"
}

/// The node lifecycle controller's NoExecute tainting (`processTaintBaseEviction`,
/// `doNoExecuteTaintingPass`), pure: the node's taints as they should be now — `None` when they
/// already are — and when to look again.
///
/// - Ready `False` (the kubelet reports NotReady): `node.kubernetes.io/not-ready:NoExecute`
///   (an `unreachable` one swapped for it), at once.
/// - Ready `Unknown` (the kubelet stopped reporting): `node.kubernetes.io/unreachable:NoExecute`
///   (a `not-ready` one swapped for it) once the condition has been Unknown for
///   [`Config::grace`]. The sim writes `Unknown` the moment a kubelet stops (a reboot), where the
///   real controller writes it after `--node-monitor-grace-period` without a heartbeat and
///   taints on its next pass; so the taint lands when it would in a real cluster.
/// - Ready `True`: both NoExecute taints removed (`markNodeAsReachable`).
///
/// New NoExecute taints carry `timeAdded` (now). Not modelled: the per-zone eviction rate
/// limiter (`--node-eviction-rate`, 0.1 node/s) and the zone states (`PartialDisruption`,
/// `FullDisruption`: no tainting while every node of a zone is NotReady).
pub fn noexecute_taints(
    node: &Node,
    config: &Config,
    now: Timestamp,
) -> (Option<Vec<Taint>>, Option<Timestamp>) {
    let Some((status, since)) = ready_condition(node) else {
        return (None, None);
    };
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let (want, drop) = match status {
        "True" => (None, [NOT_READY_TAINT, UNREACHABLE_TAINT]),
        "False" => (
            Some(NOT_READY_TAINT),
            [UNREACHABLE_TAINT, UNREACHABLE_TAINT],
        ),
        _ => {
            let due = grace_over(since, config, now);
            if due > now {
                return (None, Some(due));
            }
            (Some(UNREACHABLE_TAINT), [NOT_READY_TAINT, NOT_READY_TAINT])
        }
    };
    let mut next: Vec<Taint> = taints
        .iter()
        .filter(|t| !drop.iter().any(|k| is_noexecute(t, k)))
        .cloned()
        .collect();
    if let Some(key) = want
        && !next.iter().any(|t| is_noexecute(t, key))
    {
        next.push(Taint {
            key: key.into(),
            effect: "NoExecute".into(),
            time_added: Some(Time(Timestamp::from_second(now.as_second()).unwrap_or(now))),
            value: None,
        });
    }
    ((next != taints).then_some(next), None)
}

/// The node lifecycle controller's marking of a down node's pods as not ready, pure: the pods of
/// `node` as they are to be written, their `Ready` condition `False`, and when to look again.
///
/// After `MarkPodsNotReady` (pkg/controller/util/node/controller_utils.go), which
/// `monitorNodeHealth` (pkg/controller/nodelifecycle/node_lifecycle_controller.go) calls when
/// its own pass turns a node's Ready condition from `True` to `Unknown` (no heartbeat for
/// `--node-monitor-grace-period`), and `processPod` for a pod newly bound to a node that is not
/// Ready. For each pod bound to the node it takes the pod's `Ready` condition as it is, sets its
/// status to `False` and lets `UpdatePodCondition` (pkg/api/v1/pod/util.go) move
/// `lastTransitionTime` to now; reason and message stay, `ContainersReady` and the phase are not
/// written. A pod without a `Ready` condition, or whose `Ready` is already `False`, is left
/// alone; terminal and terminating pods are not skipped.
///
/// - Ready `Unknown` for [`Config::grace`]: the pods are marked. The sim writes `Unknown` the
///   moment a kubelet stops, the real controller after the grace period; so the pods go not
///   ready when they would in a cluster, with the `unreachable:NoExecute` taint
///   ([`noexecute_taints`]).
/// - Ready `False` (the kubelet reports NotReady) or `True`: nothing, as upstream, whose
///   transition test (`observedReadyCondition` True, the current one not) holds only for the
///   controller's own `Unknown`. Pods bound to such a node later have no `Ready` condition in
///   the sim (their kubelet is down), so `processPod` would change nothing either.
///
/// Upstream marks once, at the transition (retrying failed writes); this marks every pod of the
/// node whose `Ready` is not `False`, on every pass. The result is the same, since nothing else
/// writes a down node's pods' readiness (its kubelet is down) — except a node that went
/// `Unknown` from `False`: upstream marks nothing there, this marks its pods.
pub fn pods_not_ready<P: Borrow<Pod>>(
    node: &Node,
    pods: &[P],
    config: &Config,
    now: Timestamp,
) -> (Vec<Pod>, Option<Timestamp>) {
    let Some(("Unknown", since)) = ready_condition(node) else {
        return (vec![], None);
    };
    let due = grace_over(since, config, now);
    if due > now {
        return (vec![], Some(due));
    }
    let name = node.metadata.name.as_deref();
    let marked = pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p: &&Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == name)
        .filter_map(|p| not_ready(p, now))
        .collect();
    (marked, None)
}

/// `pod` with its `Ready` condition `False` and `lastTransitionTime` now (`UpdatePodCondition`),
/// or `None` when it has no `Ready` condition or it is `False` already.
fn not_ready(pod: &Pod, now: Timestamp) -> Option<Pod> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let i = conditions.iter().position(|c| c.type_ == "Ready")?;
    if conditions[i].status == "False" {
        return None;
    }
    let now = Time(Timestamp::from_second(now.as_second()).unwrap_or(now));
    let mut next = pod.clone();
    if let Some(c) = next
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| cs.get_mut(i))
    {
        c.status = "False".into();
        c.last_transition_time = Some(now);
    }
    Some(next)
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

/// Writes `n`'s spec and metadata, then `status` on the stored object; the cache is to show the
/// result before the next pass.
async fn write_node(
    api: &Api<Node>,
    cache: &Store<Node>,
    expect: &mut Expect,
    mut n: Node,
    status: NodeStatus,
    (spec_step, status_step): (&'static str, &'static str),
) -> Result<Node, Error> {
    let name = n.name_any();
    let write = |step: &'static str| {
        let node = name.clone();
        move |source| Error::Write { step, node, source }
    };
    n.status = None;
    let mut stored = api
        .replace(&name, &PostParams::default(), &n)
        .await
        .map_err(write(spec_step))?;
    stored.status = Some(status);
    let stored = api
        .replace_status(&name, &PostParams::default(), &stored)
        .await
        .map_err(write(status_step))?;
    expect.written(cache, &stored);
    Ok(stored)
}

/// `n` Ready again: the Ready condition, no node-lifecycle taints, no lifecycle phase.
fn brought_up(node: &Node, now: Timestamp) -> (Node, NodeStatus) {
    let mut n = node.clone();
    let mut status = n.status.take().unwrap_or_default();
    set_ready(&mut status, &Readiness::Ready, now);
    if let Some(t) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) {
        t.retain(|t| t.key != UNREACHABLE_TAINT && !is_noexecute(t, NOT_READY_TAINT));
    }
    let ann = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.remove(PHASE);
    ann.remove(UNTIL);
    (n, status)
}

async fn publish_ready(recorder: &mut Recorder, node: &Node) {
    let message = format!("Node {} status is now: NodeReady", node.name_any());
    let on = support::reference(node);
    recorder.publish(on, "Normal", "NodeReady", &message).await;
}

/// Writes `node`'s NoExecute taints as [`noexecute_taints`] wants them, with a log line naming
/// the ones added.
async fn write_taints(
    api: &Api<Node>,
    cache: &Store<Node>,
    expect: &mut Expect,
    node: &Node,
    taints: Vec<Taint>,
) -> Result<(), Error> {
    let name = node.name_any();
    let mut n = node.clone();
    let added: Vec<String> = taints
        .iter()
        .filter(|t| t.effect == "NoExecute" && t.time_added.is_some())
        .filter(|t| {
            !node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|old| old.contains(t))
        })
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    n.spec.get_or_insert_with(Default::default).taints = (!taints.is_empty()).then_some(taints);
    let stored = api
        .replace(&name, &PostParams::default(), &n)
        .await
        .map_err(|source| Error::Write {
            step: "tainting",
            node: name.clone(),
            source,
        })?;
    expect.written(cache, &stored);
    tracing::info!(node = %name, ?added, "node lifecycle: NoExecute taints updated");
    Ok(())
}

/// Writes the pods [`pods_not_ready`] chose through the status subresource, guarded by the
/// resourceVersion read (`UpdateStatus`), each followed by `MarkPodsNotReady`'s Event (Warning
/// `NodeNotReady` "Node is not ready" on the pod). A pod deleted or changed meanwhile is left to
/// the next pass, which its change starts.
async fn mark_pods_not_ready(
    client: &Client,
    recorder: &mut Recorder,
    cache: &Store<Pod>,
    expect: &mut Expect,
    node: &str,
    marked: Vec<Pod>,
) -> Result<(), Error> {
    let (reason, message) = ("NodeNotReady", "Node is not ready");
    for pod in marked {
        let name = pod.name_any();
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let stored = match api
            .replace_status(&name, &PostParams::default(), &pod)
            .await
        {
            Ok(stored) => stored,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                tracing::debug!(pod = %name, code = s.code, "node lifecycle: pod not marked not ready (next pass retries)");
                continue;
            }
            Err(source) => {
                return Err(Error::MarkPod {
                    pod: name,
                    node: node.into(),
                    source,
                });
            }
        };
        expect.written(cache, &stored);
        tracing::info!(pod = %name, node, "node lifecycle: pod marked not ready");
        let on = support::reference(&stored);
        // one Event per marking: the pod goes not ready again if its node fails again
        recorder.forget(&on, reason, message);
        recorder.publish(on, "Warning", reason, message).await;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn pass(
    client: &Client,
    config: &Config,
    recorder: &mut Recorder,
    caches: (&Store<Node>, &Store<Pod>),
    expect: &mut Expect,
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> Pass<Error> {
    let (cache, pod_cache) = caches;
    let api: Api<Node> = Api::all(client.clone());
    let mut next: Option<Timestamp> = None;
    let mut wake_at = |t: Timestamp| next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
    for node in nodes {
        let node: &Node = node;
        let name = node.name_any();
        let node_name = name.clone();
        let write = |step: &'static str| {
            let node = node_name.clone();
            move |source| Error::Write { step, node, source }
        };
        match step(node, nodes, pods, config, now) {
            Step::Wait(at) => {
                let (taints, taint_at) = noexecute_taints(node, config, now);
                let (marked, mark_at) = pods_not_ready(node, pods, config, now);
                for t in [at, taint_at, mark_at].into_iter().flatten() {
                    wake_at(t);
                }
                if let Some(taints) = taints {
                    write_taints(&api, cache, expect, node, taints).await?;
                }
                if !marked.is_empty() {
                    mark_pods_not_ready(client, recorder, pod_cache, expect, &name, marked).await?;
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
                let steps = ("taking down", "marking NotReady");
                write_node(&api, cache, expect, n, status, steps).await?;
                let message = format!("Node {name} status is now: NodeNotReady");
                let on = support::reference(node);
                recorder
                    .publish(on, "Normal", "NodeNotReady", &message)
                    .await;
                wake_at(until);
            }
            Step::ComeUp { generation } => {
                let (mut n, mut status) = brought_up(node, now);
                status
                    .node_info
                    .get_or_insert_with(Default::default)
                    .kubelet_version = config.kubelet_version.clone();
                n.metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(GENERATION.into(), generation.to_string());
                write_node(
                    &api,
                    cache,
                    expect,
                    n,
                    status,
                    ("bringing up", "marking Ready"),
                )
                .await?;
                let message = format!("Node {name} has been rebooted");
                let on = support::reference(node);
                recorder.publish(on, "Warning", "Rebooted", &message).await;
                publish_ready(recorder, node).await;
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
                let created = api
                    .replace_status(&new_name, &PostParams::default(), &created)
                    .await
                    .map_err(write("reporting the replacement"))?;
                expect.written(cache, &created);
                let mut old = node.clone();
                let ann = old.metadata.annotations.get_or_insert_with(BTreeMap::new);
                ann.remove(LIFECYCLE);
                ann.insert(PHASE.into(), "replaced".into());
                ann.insert(REPLACED_BY.into(), new_name.clone());
                let stored = api
                    .replace(&name, &PostParams::default(), &old)
                    .await
                    .map_err(write("marking replaced"))?;
                expect.written(cache, &stored);
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
                wake_at(until);
            }
            Step::Joined => {
                let (n, status) = brought_up(node, now);
                let steps = ("finishing the join", "marking Ready");
                write_node(&api, cache, expect, n, status, steps).await?;
                publish_ready(recorder, node).await;
            }
            Step::Remove => {
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map_err(write("deleting the replaced node"))?;
                expect.deleted(cache, ObjectRef::new(&name), node.metadata.uid.clone());
                tracing::info!(node = %name, "node lifecycle: replaced node deleted");
            }
        }
    }
    Ok(next)
}

super::spawn_on_sim!(
    /// Starts the node lifecycle actor on this cluster (until the handle is aborted or the runtime ends).
    spawn_node_lifecycle
);

#[cfg(test)]
mod tests;
