//! NoExecute taint eviction, after kubernetes `pkg/controller/tainteviction/taint_eviction.go`:
//! a pod bound to a node with `NoExecute` taints is deleted
//!
//! - at once when one of the taints is not tolerated (`GetMatchingTolerations`: each taint takes
//!   the first toleration that tolerates it);
//! - else after the smallest `tolerationSeconds` of the tolerations used (`getMinTolerationTime`:
//!   ≤ 0 → at once; none set → never), counted from when the controller first saw the pod under
//!   the taints; a later change (a taint swapped, tolerations edited) keeps the deletion already
//!   scheduled (`processPodOnNode` keeps a scheduled eviction created before now);
//! - a scheduled deletion is cancelled when the node loses its NoExecute taints or the pod
//!   tolerates them forever (Event `TaintManagerEviction` "Cancelling deletion of Pod ns/name").
//!
//! The deletion adds `DisruptionTarget=True` (`DeletionByTaintManager`, "Taint manager: deleting
//! due to NoExecute taint") to the pod's status and deletes it gracefully, after the Event
//! `TaintManagerEviction` "Marking for deletion Pod ns/name". Every pod gets 300 s tolerations of
//! `not-ready`/`unreachable` from the API server (the DefaultTolerationSeconds admission plugin,
//! `crate::server::admission`), so pods leave a NotReady node 300 s after the node lifecycle
//! tainted it.
//!
//! Chosen where the sim is simpler: a pod already deleting is left alone (its scheduled deletion
//! dropped; the real controller would delete it again, a no-op); a node gone from the cache keeps
//! the deletions already scheduled for its pods and schedules none (as the real controller only
//! forgets the node's taints).
//!
//! [`plan`] is pure; [`run`] the IO loop.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Clock;
use crate::world::actors::scheduler::tolerates;
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Recorder, Shutdown};
use raygate::runtime::SortedState;

/// The Events' reason.
pub const REASON: &str = "TaintManagerEviction";
/// The `DisruptionTarget` reason the controller writes.
pub const DISRUPTION_REASON: &str = "DeletionByTaintManager";
/// The `DisruptionTarget` message the controller writes.
pub const DISRUPTION_MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";

/// `(namespace, name)` of a pod.
pub type PodKey = (String, String);

/// A deletion the controller scheduled (`TimedWorker`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduled {
    /// The pod's uid when it was scheduled.
    pub uid: String,
    pub created_at: Timestamp,
    pub fire_at: Timestamp,
}

/// What the controller does now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Mark `DisruptionTarget` and delete the pod (Event "Marking for deletion Pod ns/name").
    Delete { pod: PodKey, uid: String },
    /// A scheduled deletion was cancelled (Event "Cancelling deletion of Pod ns/name").
    Cancelled { pod: PodKey, uid: String },
}

fn noexecute(node: &Node) -> Vec<&Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "NoExecute")
        .collect()
}

/// `GetMatchingTolerations`: for each taint the first toleration that tolerates it, or `None`
/// when a taint is not tolerated.
pub fn matching_tolerations<'a>(
    taints: &[&Taint],
    tolerations: &'a [Toleration],
) -> Option<Vec<&'a Toleration>> {
    taints
        .iter()
        .map(|taint| {
            tolerations
                .iter()
                .find(|t| tolerates(std::slice::from_ref(*t), taint))
        })
        .collect()
}

/// `getMinTolerationTime`: the smallest `tolerationSeconds` (≤ 0 counts as 0); `None` (forever)
/// when none is set; 0 for no tolerations.
pub fn min_toleration(used: &[&Toleration]) -> Option<SignedDuration> {
    if used.is_empty() {
        return Some(SignedDuration::ZERO);
    }
    used.iter()
        .filter_map(|t| t.toleration_seconds)
        .map(|s| SignedDuration::from_secs(s.max(0)))
        .min()
}

fn key(pod: &Pod) -> PodKey {
    (pod.namespace().unwrap_or_default(), pod.name_any())
}

/// One pass over every bound pod (pure): updates `scheduled`; returns the deletions and
/// cancellations due now and the earliest scheduled deletion still to come.
pub fn plan(
    scheduled: &mut BTreeMap<PodKey, Scheduled>,
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> (Vec<Action>, Option<Timestamp>) {
    let nodes: BTreeMap<String, &Node> = nodes.iter().map(|n| (n.name_any(), &**n)).collect();
    let mut actions = vec![];
    let mut seen = BTreeSet::new();
    for pod in pods {
        let Some(node_name) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let k = key(pod);
        seen.insert(k.clone());
        if pod.metadata.deletion_timestamp.is_some() {
            scheduled.remove(&k);
            continue;
        }
        let Some(node) = nodes.get(node_name) else {
            continue;
        };
        plan_pod(scheduled, pod, k, node, now, &mut actions);
    }
    // pods gone: their scheduled deletions are cancelled (`handlePodUpdate` on NotFound)
    let gone: Vec<PodKey> = scheduled
        .keys()
        .filter(|k| !seen.contains(*k))
        .cloned()
        .collect();
    for k in gone {
        if let Some(s) = scheduled.remove(&k) {
            actions.push(Action::Cancelled { pod: k, uid: s.uid });
        }
    }
    let due: Vec<PodKey> = scheduled
        .iter()
        .filter(|(_, s)| s.fire_at <= now)
        .map(|(k, _)| k.clone())
        .collect();
    for k in due {
        if let Some(s) = scheduled.remove(&k) {
            actions.push(Action::Delete { pod: k, uid: s.uid });
        }
    }
    let next = scheduled.values().map(|s| s.fire_at).min();
    (actions, next)
}

/// `processPodOnNode` for live pod `pod` (key `k`) on `node`: deleted at once when a NoExecute
/// taint is not tolerated, a deletion scheduled after the smallest `tolerationSeconds` (one
/// scheduled before now kept), else any scheduled deletion cancelled.
fn plan_pod(
    scheduled: &mut BTreeMap<PodKey, Scheduled>,
    pod: &Pod,
    k: PodKey,
    node: &Node,
    now: Timestamp,
    actions: &mut Vec<Action>,
) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let taints = noexecute(node);
    if taints.is_empty() {
        cancel(scheduled, &k, actions);
        return;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let Some(used) = matching_tolerations(&taints, &tolerations) else {
        cancel(scheduled, &k, actions);
        actions.push(Action::Delete { pod: k, uid });
        return;
    };
    let Some(min) = min_toleration(&used) else {
        cancel(scheduled, &k, actions);
        return;
    };
    match scheduled.get(&k) {
        Some(s) if s.uid == uid && s.created_at < now => {}
        _ => {
            cancel(scheduled, &k, actions);
            scheduled.insert(
                k,
                Scheduled {
                    uid,
                    created_at: now,
                    fire_at: now.saturating_add(min).unwrap_or(now),
                },
            );
        }
    }
}

/// Drops pod `k`'s scheduled deletion, if any, with its cancellation.
fn cancel(scheduled: &mut BTreeMap<PodKey, Scheduled>, k: &PodKey, actions: &mut Vec<Action>) {
    if let Some(s) = scheduled.remove(k) {
        actions.push(Action::Cancelled {
            pod: k.clone(),
            uid: s.uid,
        });
    }
}

/// The controller's knobs.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Reaction lag after a change.
    pub lag: Duration,
}

/// The controller's failing steps (none yet: a failed deletion is logged; the pod, still bound
/// to the tainted node, is deleted on the next pass).
#[derive(Debug, thiserror::Error)]
pub enum Error {}

/// Runs the taint eviction controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) -> Result<(), Error> {
    let mut c = Caches::default();
    let actor = Controller {
        nodes: c.all(&client),
        pods: c.all(&client),
        recorder: Recorder::new(client.clone(), clock.clone(), "taint-eviction-controller"),
        client,
        scheduled: BTreeMap::new(),
    };
    support::run(actor, c, clock, config.lag, shutdown).await
}

struct Controller {
    client: Client,
    nodes: Store<Node>,
    pods: Store<Pod>,
    recorder: Recorder,
    scheduled: BTreeMap<PodKey, Scheduled>,
}

impl Actor for Controller {
    type Error = Error;

    async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Error> {
        let (actions, next) = plan(
            &mut self.scheduled,
            &self.nodes.sorted_state(),
            &self.pods.sorted_state(),
            now,
        );
        for action in actions {
            match action {
                Action::Cancelled { pod, uid } => {
                    self.event(&pod, &uid, "Cancelling deletion of Pod").await;
                }
                Action::Delete { pod, uid } => {
                    self.event(&pod, &uid, "Marking for deletion Pod").await;
                    let (ns, name) = pod;
                    tracing::info!(pod = %name, namespace = %ns, "taint eviction: deleting a pod that does not tolerate its node's NoExecute taints");
                    let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
                    let condition = json!({"metadata": {"uid": uid}, "status": {"conditions": [{
                        "type": "DisruptionTarget", "status": "True",
                        "reason": DISRUPTION_REASON, "message": DISRUPTION_MESSAGE,
                        "lastTransitionTime": crate::clock::seconds(now),
                    }]}});
                    if let Err(e) = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(condition))
                        .await
                    {
                        tracing::debug!(pod = %name, error = %e, "taint eviction: condition not written");
                        continue;
                    }
                    let dp = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: Some(uid.clone()),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match api.delete(&name, &dp).await {
                        Ok(_) => {
                            expect.deleted(&self.pods, ObjectRef::new(&name).within(&ns), Some(uid))
                        }
                        Err(e) => {
                            tracing::debug!(pod = %name, error = %e, "taint eviction: delete failed")
                        }
                    }
                }
            }
        }
        Ok(next)
    }
}

impl Controller {
    /// Event `TaintManagerEviction` "<what> ns/name" on the pod.
    async fn event(&mut self, (ns, name): &PodKey, uid: &str, what: &str) {
        let message = &format!("{what} {ns}/{name}");
        let on = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            uid: Some(uid.into()),
            ..Default::default()
        };
        // the same pod can be marked, cancelled and marked again: every one is an Event
        self.recorder.forget(&on, REASON, message);
        self.recorder.publish(on, "Normal", REASON, message).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raygate_testing::core::{self, NodeExt, PodExt};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    /// Node `name` with NoExecute taints of `keys`.
    fn tainted(name: &str, keys: &[&str]) -> Arc<Node> {
        let n = keys.iter().fold(core::node(name, ""), |n, k| {
            n.tainted(core::taint(k, "NoExecute"))
        });
        Arc::new(n)
    }

    /// Pod `ns/name` on `node`, uid `<name>-uid`, no owner.
    fn on(name: &str, node: &str) -> Pod {
        core::pod(&format!("ns/{name}"), node)
            .uid(&format!("{name}-uid"))
            .unowned()
    }

    /// The two tolerations the DefaultTolerationSeconds admission plugin adds.
    fn defaults(p: Pod) -> Pod {
        p.toleration("node.kubernetes.io/not-ready", "NoExecute", Some(300))
            .toleration("node.kubernetes.io/unreachable", "NoExecute", Some(300))
    }

    fn deletes(a: &[Action]) -> Vec<&str> {
        a.iter()
            .filter_map(|a| match a {
                Action::Delete { pod, .. } => Some(pod.1.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_untolerated_noexecute_taint_deletes_at_once_and_noschedule_is_ignored() {
        let nodes = [
            tainted("a", &["maintenance"]),
            Arc::new(core::node("b", "").tainted(core::taint("maintenance", "NoSchedule"))),
        ];
        let pods = [
            on("p", "a"),
            on("q", "b"),
            on("r", "a").toleration("maintenance", "", None),
        ]
        .map(Arc::new);
        let mut s = BTreeMap::new();
        let (a, next) = plan(&mut s, &nodes, &pods, t(0));
        assert_eq!(deletes(&a), ["p"]);
        assert_eq!(next, None, "r tolerates forever (no tolerationSeconds)");
    }

    #[test]
    fn the_default_tolerations_delete_300s_after_the_controller_saw_the_unreachable_taint() {
        let unreachable = [tainted("a", &["node.kubernetes.io/unreachable"])];
        let pods = [Arc::new(defaults(on("p", "a")))];
        let mut s = BTreeMap::new();
        let (a, next) = plan(&mut s, &unreachable, &pods, t(10));
        assert!(a.is_empty());
        assert_eq!(next, Some(t(310)));
        // the taint swapped for not-ready later: the deletion keeps its time
        let swapped = [tainted("a", &["node.kubernetes.io/not-ready"])];
        let (a, next) = plan(&mut s, &swapped, &pods, t(100));
        assert!(a.is_empty());
        assert_eq!(next, Some(t(310)));
        assert!(plan(&mut s, &swapped, &pods, t(309)).0.is_empty());
        let (a, next) = plan(&mut s, &swapped, &pods, t(310));
        assert_eq!(deletes(&a), ["p"]);
        assert_eq!(next, None);
    }

    #[test]
    fn the_smallest_toleration_seconds_counts_and_a_removed_taint_cancels() {
        let nodes = [tainted("a", &["x", "y"])];
        let pods = [Arc::new(
            on("p", "a")
                .toleration("x", "NoExecute", Some(60))
                .toleration("y", "", Some(30)),
        )];
        let mut s = BTreeMap::new();
        assert_eq!(plan(&mut s, &nodes, &pods, t(0)).1, Some(t(30)));
        let clean = [tainted("a", &[])];
        let (a, next) = plan(&mut s, &clean, &pods, t(20));
        assert_eq!(
            a,
            [Action::Cancelled {
                pod: ("ns".into(), "p".into()),
                uid: "p-uid".into()
            }]
        );
        assert_eq!(next, None);
        // a zero or negative tolerationSeconds is immediate
        let now = [Arc::new(on("p", "a").toleration("", "", Some(-5)))];
        assert_eq!(deletes(&plan(&mut s, &nodes, &now, t(30)).0), ["p"]);
    }

    #[test]
    fn a_deleting_pod_is_left_alone_and_a_gone_pod_s_deletion_is_cancelled() {
        let nodes = [tainted("a", &["x"])];
        let tolerating = on("p", "a").toleration("x", "", Some(60));
        let mut s = BTreeMap::new();
        plan(&mut s, &nodes, &[Arc::new(tolerating)], t(0));
        let (a, _) = plan(&mut s, &nodes, &[], t(1));
        assert!(matches!(&a[..], [Action::Cancelled { .. }]));
        let deleting = on("p", "a").deleting_since(t(5));
        assert_eq!(
            plan(&mut s, &nodes, &[Arc::new(deleting)], t(2)),
            (vec![], None)
        );
    }
}
