//! The node lifecycle controller's reaction to a NotReady node: the NoExecute `not-ready` /
//! `unreachable` taints ([`noexecute_taints`]) and, once a node has been Unknown for the grace
//! period, its pods' `Ready=False` ([`pods_not_ready`], `MarkPodsNotReady`). Pure decisions.

use std::borrow::Borrow;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{Config, UNREACHABLE_TAINT};

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

pub(super) fn is_noexecute(t: &Taint, key: &str) -> bool {
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
