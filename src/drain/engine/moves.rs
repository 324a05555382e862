//! RayServices moved off a domain before it drains (pure): KubeRay's own zero-downtime upgrade
//! moves the service — a new cluster with the same spec, placed off the cordoned (and tainted)
//! nodes, its surge charged to quota by raygate's gate like any upgrade's; traffic switched once
//! it serves; the old cluster deleted — and only then is anything of the domain evicted.
//!
//! A service is moved off a domain when draining the domain would stop it serving: its active
//! cluster's head is there (the Ray cluster goes with it), or no pod of the cluster that serves
//! (`ray.io/serve=true`, Ready) would be left (a multi-host worker replica with one host there
//! goes whole: KubeRay recreates the replica). A move is asked for by marking the active cluster's
//! spec hash ([`MOVE_MARK`]); the domain waits until the service serves from another cluster
//! and the old cluster's pods are gone from the domain (KubeRay deletes it after the service's
//! `rayClusterDeletionDelaySeconds`). A move that cannot finish — its new cluster held for
//! quota, no new cluster started, a service KubeRay upgrades in place — holds the domain
//! (`RayServiceMoveHeld`) until [`MoveOptions::timeout`], or lets it drain at once with
//! [`MoveOptions::interrupt_when_held`] (a Warning `ServingInterrupted`).

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{Action, DomainOrder, Step, Stepper, human, pod_serving};
use crate::drain::exposure::SERVE_LABEL;
use crate::drain::preflight::{KUBERAY_CLUSTER, KUBERAY_REPLICA_NAME};
use crate::drain::{is_finished, namespace};
use crate::events::EventType;

/// KubeRay's annotation on a RayService's cluster: the hash of the cluster spec it was made
/// from (`utils.HashWithoutReplicasAndWorkersToDeleteKey`). KubeRay v1.7 compares it with the
/// RayService's spec (`isClusterSpecHashEqual`) and, when they differ on the active cluster,
/// starts a new cluster from the unchanged spec (`shouldPrepareNewCluster`), switches traffic to
/// it once it serves and deletes the old one.
pub const KUBERAY_SPEC_HASH: &str = "ray.io/hash-without-replicas-and-workers-to-delete";
/// The value a move writes there: no spec hashes to it.
pub const MOVE_MARK: &str = "raygate-move";
/// raygate's annotation on a cluster it moves a RayService off: `<NodeRollout>/<domain>`.
pub const MOVED_BY: &str = "raygate.io/moved-by";

/// How RayServices serving from a domain are moved off it before it drains: KubeRay's
/// zero-downtime upgrade starts a new cluster with the same spec (its surge charged by the
/// gate), switches traffic to it and deletes the old one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveOptions {
    /// Off: a serving RayService's pods are evicted like any other.
    pub enabled: bool,
    /// A move that cannot finish (its new cluster held for quota, none started, KubeRay not
    /// upgrading the service this way): drain the domain anyway (`true`) or hold it (`false`).
    pub interrupt_when_held: bool,
    /// From a move's start until its old cluster's pods are gone; past it, the failure action
    /// (`None`: no limit but the drain timeout).
    pub timeout: Option<SignedDuration>,
}

/// `spec.rayServices.moveTimeout`'s default.
pub const DEFAULT_MOVE_TIMEOUT: SignedDuration = SignedDuration::from_mins(20);

impl Default for MoveOptions {
    fn default() -> Self {
        MoveOptions {
            enabled: true,
            interrupt_when_held: false,
            timeout: Some(DEFAULT_MOVE_TIMEOUT),
        }
    }
}

/// A RayService's move off a domain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Move {
    /// The cluster it moves off (the active cluster when the move started).
    pub from: String,
    pub since: Timestamp,
    /// raygate asked KubeRay for the new cluster (`false`: an upgrade already under way moves it).
    #[serde(default)]
    pub asked: bool,
    /// KubeRay switched the service to its new cluster.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub switched: bool,
    /// The old cluster's pods are gone from the domain: the move is done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
    /// The domain drains without waiting for it (`whenMoveHeld: Interrupt`): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
}

/// A RayService as a domain's drain weighs it: read by the caller from the RayService, its
/// clusters and its slices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceView {
    pub namespace: String,
    pub name: String,
    /// `status.activeServiceStatus.rayClusterName`.
    pub active: Option<String>,
    /// `status.pendingServiceStatus.rayClusterName`: an upgrade (or a move) under way.
    pub pending: Option<String>,
    /// Why KubeRay would start no new cluster for it (its `spec.upgradeStrategy.type`).
    pub unmovable: Option<String>,
    /// The pending cluster is held suspended and its slice is not admitted: the admission's
    /// message (the shortfall).
    pub held: Option<String>,
    /// The active cluster carries [`MOVE_MARK`]: a move was asked for.
    pub marked: bool,
}

/// The Event of a move asked for.
pub const MOVING_RAYSERVICE: &str = "MovingRayService";
/// The Event of a move done (the old cluster's pods gone from the domain).
pub const RAYSERVICE_MOVED: &str = "RayServiceMoved";
/// The hold (and Warning Event) of a move that cannot finish.
pub const MOVE_HELD: &str = "RayServiceMoveHeld";
/// The Warning Event of a domain drained with a service serving from it.
pub const SERVING_INTERRUPTED: &str = "ServingInterrupted";
/// KubeRay's label of a pod's node type (`head`, `worker`).
const NODE_TYPE_LABEL: &str = "ray.io/node-type";
/// How long KubeRay gets to start the new cluster once asked: it does so in its next
/// reconcile, unless zero-downtime upgrades are turned off (`ENABLE_ZERO_DOWNTIME=false`).
const START_GRACE: SignedDuration = SignedDuration::from_mins(2);

/// Where a service stands in a domain's step.
enum Standing {
    /// Nothing to wait for.
    Clear,
    /// The move is under way: what it waits for.
    Moving(String),
    /// The move cannot finish: why.
    Held(String),
    /// Past the move timeout: the failure's reason.
    Late(String),
}

/// The live pods of each RayCluster, by (namespace, cluster).
type ClusterPods<'a> = HashMap<(&'a str, &'a str), Vec<&'a Pod>>;

fn cluster_pods(pods: &[Pod]) -> ClusterPods<'_> {
    let mut out: ClusterPods<'_> = HashMap::new();
    let live = pods
        .iter()
        .filter(|p| !is_finished(p) && p.metadata.deletion_timestamp.is_none());
    for pod in live {
        if let Some(cluster) = label(pod, KUBERAY_CLUSTER) {
            out.entry((namespace(&pod.metadata), cluster))
                .or_default()
                .push(pod);
        }
    }
    out
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

impl<'a> Stepper<'a> {
    /// An Event on the RayService, where its team looks (`kubectl describe rayservice`); the
    /// rollout's own status shows the domain waiting.
    fn tell(&mut self, svc: &ServiceView, type_: EventType, reason: &'static str, message: String) {
        self.actions.push(Action::ReportService {
            namespace: svc.namespace.clone(),
            service: svc.name.clone(),
            type_,
            reason,
            message,
        });
    }

    /// Before the domain's evictions: moves every RayService the domain would stop serving;
    /// `true` while the domain waits for one.
    pub(super) fn moving(&mut self, i: usize) -> bool {
        if !self.o.moves.enabled || self.obs.services.is_empty() || self.o.dry_run {
            return false;
        }
        let pods = cluster_pods(self.obs.pods);
        let before = self.s.domains[i].hold.clone();
        let (mut moving, mut held) = (Vec::new(), Vec::new());
        for svc in self.obs.services {
            match self.standing(i, svc, &pods) {
                Standing::Clear => {}
                Standing::Moving(line) => moving.push(line),
                Standing::Held(line) => held.push(line),
                Standing::Late(reason) => {
                    self.fail(reason);
                    return true;
                }
            }
        }
        if held.is_empty() {
            let d = &mut self.s.domains[i];
            if d.hold.as_ref().is_some_and(|h| h.reason == MOVE_HELD) {
                d.hold = None;
            }
        } else {
            self.set_hold(i, MOVE_HELD, held.clone());
            self.announce_hold(i, before.as_ref());
        }
        if moving.is_empty() && held.is_empty() {
            return false;
        }
        moving.extend(held);
        self.s.domains[i].message = moving.join("; ");
        true
    }

    /// One service's move in domain `i`: started, followed, finished.
    fn standing(&mut self, i: usize, svc: &ServiceView, pods: &ClusterPods<'_>) -> Standing {
        let key = format!("{}/{}", svc.namespace, svc.name);
        let Some(active) = svc.active.as_deref() else {
            return Standing::Clear;
        };
        let record = self.s.domains[i].moves.get(&key).cloned();
        let Some(mut m) = record.filter(|m| !m.done || m.from == active) else {
            return match self.must_move(i, &svc.namespace, active, pods) {
                true => self.start_move(i, svc, &key, active),
                false => Standing::Clear,
            };
        };
        let standing = match () {
            _ if m.done || m.interrupted.is_some() => Standing::Clear,
            _ if m.switched || m.from != active => self.old_cluster_going(i, svc, &mut m, pods),
            _ => self.new_cluster_coming(i, svc, &mut m),
        };
        let standing = match standing {
            Standing::Moving(line) | Standing::Held(line) if self.move_late(&m) => {
                Standing::Late(format!(
                    "RayService {key} was not moved off upgrade domain {} within moveTimeout \
                     ({}): {line}",
                    self.s.domains[i].name,
                    human(self.o.moves.timeout.unwrap_or_default())
                ))
            }
            other => other,
        };
        self.s.domains[i].moves.insert(key, m);
        standing
    }

    fn move_late(&self, m: &Move) -> bool {
        self.o
            .moves
            .timeout
            .is_some_and(|limit| self.now.duration_since(m.since) >= limit)
    }

    /// Whether `pod` runs on one of domain `i`'s nodes.
    fn on_domain(&self, i: usize, pod: &Pod) -> bool {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        node.is_some_and(|n| self.s.domains[i].nodes.iter().any(|d| d == n))
    }

    /// Whether draining domain `i` stops the cluster serving: its head is there, or no pod of
    /// it that serves survives the drain (a multi-host replica with a host there goes whole).
    fn must_move(&self, i: usize, ns: &str, cluster: &str, pods: &ClusterPods<'_>) -> bool {
        let Some(pods) = pods.get(&(ns, cluster)) else {
            return false;
        };
        let here = |p: &Pod| self.on_domain(i, p);
        let hit: Vec<&Pod> = pods.iter().copied().filter(|p| here(p)).collect();
        if hit.is_empty() {
            return false;
        }
        if hit
            .iter()
            .any(|p| label(p, NODE_TYPE_LABEL) == Some("head"))
        {
            return true;
        }
        let broken: HashSet<&str> = hit
            .iter()
            .filter_map(|p| label(p, KUBERAY_REPLICA_NAME))
            .collect();
        let survives = |p: &Pod| {
            !here(p) && label(p, KUBERAY_REPLICA_NAME).is_none_or(|r| !broken.contains(r))
        };
        !pods
            .iter()
            .any(|p| survives(p) && label(p, SERVE_LABEL) == Some("true") && pod_serving(p))
    }

    fn start_move(&mut self, i: usize, svc: &ServiceView, key: &str, active: &str) -> Standing {
        let domain = self.s.domains[i].name.clone();
        let asked = svc.pending.is_none() && svc.unmovable.is_none();
        let mut m = Move {
            from: active.to_string(),
            since: self.now,
            asked,
            switched: false,
            done: false,
            interrupted: None,
        };
        if asked {
            // the ask itself goes out below, while the mark does not show
            let message = format!(
                "moving RayService {key} off upgrade domain {domain} before draining it: KubeRay \
                 starts a new cluster with the same spec, switches traffic to it and deletes \
                 cluster {active}"
            );
            self.tell(svc, EventType::Normal, MOVING_RAYSERVICE, message);
        }
        let standing = self.new_cluster_coming(i, svc, &mut m);
        self.s.domains[i].moves.insert(key.to_string(), m);
        standing
    }

    /// The move before the switch: the new cluster starting, or held.
    fn new_cluster_coming(&mut self, i: usize, svc: &ServiceView, m: &mut Move) -> Standing {
        let key = format!("{}/{}", svc.namespace, svc.name);
        if m.asked && svc.pending.is_none() && !svc.marked {
            // the mark did not show (a write lost, a cluster recreated): ask again
            self.actions.push(Action::MoveRayService {
                namespace: svc.namespace.clone(),
                service: svc.name.clone(),
                cluster: m.from.clone(),
                by: format!("{}/{}", self.o.rollout, self.s.domains[i].name),
            });
        }
        let late_start =
            m.asked && svc.pending.is_none() && self.now.duration_since(m.since) >= START_GRACE;
        let why = svc
            .unmovable
            .clone()
            .or_else(|| svc.held.clone())
            .or_else(|| {
                late_start.then(|| {
                    format!(
                        "KubeRay started no new cluster within {} (are zero-downtime upgrades off: \
                     ENABLE_ZERO_DOWNTIME=false?)",
                        human(START_GRACE)
                    )
                })
            });
        let Some(why) = why else {
            return Standing::Moving(match &svc.pending {
                Some(c) => format!("moving RayService {key}: its new cluster {c} is starting"),
                None => format!("moving RayService {key}: waiting for KubeRay's new cluster"),
            });
        };
        let line = format!(
            "RayService {key} cannot move off upgrade domain {}: {why}",
            self.s.domains[i].name
        );
        if !self.o.moves.interrupt_when_held {
            return Standing::Held(line);
        }
        let message = format!("{line}; draining the domain anyway (whenMoveHeld: Interrupt)");
        self.tell(svc, EventType::Warning, SERVING_INTERRUPTED, message);
        m.interrupted = Some(why);
        Standing::Clear
    }

    /// The move after the switch: the old cluster's pods leaving the domain.
    fn old_cluster_going(
        &mut self,
        i: usize,
        svc: &ServiceView,
        m: &mut Move,
        pods: &ClusterPods<'_>,
    ) -> Standing {
        let key = format!("{}/{}", svc.namespace, svc.name);
        m.switched = true;
        let left = pods
            .get(&(svc.namespace.as_str(), m.from.as_str()))
            .map_or(0, |ps| ps.iter().filter(|p| self.on_domain(i, p)).count());
        if left > 0 {
            return Standing::Moving(format!(
                "RayService {key} serves from cluster {}; waiting for KubeRay to delete the old \
                 cluster {} (after its rayClusterDeletionDelaySeconds): {left} pod(s) left on the \
                 domain",
                svc.active.as_deref().unwrap_or_default(),
                m.from
            ));
        }
        m.done = true;
        let message = format!(
            "RayService {key} moved off upgrade domain {} in {}: it serves from cluster {}",
            self.s.domains[i].name,
            human(self.now.duration_since(m.since)),
            svc.active.as_deref().unwrap_or_default()
        );
        self.tell(svc, EventType::Normal, RAYSERVICE_MOVED, message);
        Standing::Clear
    }

    /// Whether draining domain `i` would stop a RayService serving.
    fn needs_move(&self, i: usize, pods: &ClusterPods<'_>) -> bool {
        self.obs.services.iter().any(|svc| {
            svc.active
                .as_deref()
                .is_some_and(|c| self.must_move(i, &svc.namespace, c, pods))
        })
    }

    /// Moves apply, and no domain is done yet: nothing upgraded to move a service to.
    fn nowhere_upgraded(&self) -> bool {
        self.o.moves.enabled
            && !self.obs.services.is_empty()
            && !self.o.dry_run
            && !self.s.domains.iter().any(|d| d.step == Step::Done)
    }

    /// The domain to start next: the first pending one, but while no domain is done (no
    /// upgraded node to move a service to) one that needs no move goes first, unless the
    /// order is explicit.
    pub(super) fn next_domain(&self) -> Option<usize> {
        let first = self
            .s
            .domains
            .iter()
            .position(|d| d.step == Step::Pending)?;
        if !self.nowhere_upgraded() || matches!(self.o.plan.order, DomainOrder::Explicit(_)) {
            return Some(first);
        }
        let pods = cluster_pods(self.obs.pods);
        if !self.needs_move(first, &pods) {
            return Some(first);
        }
        let free = (first..self.s.domains.len())
            .find(|&i| self.s.domains[i].step == Step::Pending && !self.needs_move(i, &pods));
        Some(free.unwrap_or(first))
    }

    /// Whether the later domains' taint waits: a move before any domain is done has nowhere
    /// upgraded to go, so its new cluster goes to a later domain's nodes (and moves again when
    /// that domain's turn comes); they are tainted once the service switched.
    pub(super) fn taint_waits_for_moves(&self) -> bool {
        if !self.nowhere_upgraded() {
            return false;
        }
        let pods = cluster_pods(self.obs.pods);
        let open = |m: &Move| !m.switched && !m.done && m.interrupted.is_none();
        let moving = self.s.domains.iter().enumerate().any(|(i, d)| {
            d.step == Step::Draining
                && match d.moves.is_empty() {
                    true => self.needs_move(i, &pods),
                    false => d.moves.values().any(open),
                }
        });
        let none_started = self.s.domains.iter().all(|d| d.step == Step::Pending);
        moving
            || (none_started
                && self
                    .next_domain()
                    .is_some_and(|i| self.needs_move(i, &pods)))
    }
}
