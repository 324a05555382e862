//! PodGC, after kubernetes `pkg/controller/podgc/gc_controller.go`. Every `gcCheckPeriod`
//! ([`Config::period`], 20 s) over its caches of Pods and Nodes:
//!
//! - **terminated** (`gcTerminated`, only with a threshold > 0): when more pods than
//!   `--terminated-pod-gc-threshold` ([`Config::terminated_threshold`], 12,500) are terminated
//!   (phase neither Pending, Running nor Unknown), the surplus is deleted, evicted pods
//!   (`Failed`/`Evicted`) first, then oldest by creationTimestamp, then by name;
//! - **terminating on out-of-service nodes** (`gcTerminating`): a deleting pod whose node is not
//!   Ready and carries the `node.kubernetes.io/out-of-service` taint;
//! - **orphaned** (`gcOrphaned`): a pod bound to a node missing from the cache puts the node in
//!   quarantine ([`Config::quarantine`], 40 s); a pass after that confirms with a live GET that the
//!   node is gone and deletes its pods with `DisruptionTarget=True` (`DeletionByPodGC`, "PodGC: node
//!   no longer exists");
//! - **unscheduled terminating** (`gcUnscheduledTerminating`): a deleting pod bound to no node.
//!
//! Each deletion is `markFailedAndDeletePod`: a pod not yet Succeeded/Failed is patched to
//! `Failed` (with the condition, for orphans), then force-deleted (grace period 0) — the only way
//! a pod of a dead kubelet leaves the store. Each is logged ("PodGC is force deleting Pod").
//!
//! [`plan`] and [`orphans`] are pure; [`run`] the IO loop.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Clock;
use crate::world::actors::node_lifecycle::is_ready as node_ready;
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};
use raygate::runtime::SortedState;

/// The taint that lets PodGC force-delete terminating pods of a NotReady node.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";
/// The `DisruptionTarget` reason for orphaned pods.
pub const ORPHAN_REASON: &str = "DeletionByPodGC";
/// The `DisruptionTarget` message for orphaned pods.
pub const ORPHAN_MESSAGE: &str = "PodGC: node no longer exists";

/// PodGC's knobs.
#[derive(Clone, Debug)]
pub struct Config {
    /// `gcCheckPeriod`.
    pub period: Duration,
    /// `quarantineTime`: how long a missing node is waited for before the live check.
    pub quarantine: Duration,
    /// `--terminated-pod-gc-threshold` (0: terminated pods are never collected).
    pub terminated_threshold: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            period: Duration::from_secs(20),
            quarantine: Duration::from_secs(40),
            terminated_threshold: 12_500,
        }
    }
}

/// Why a pod is collected (the `reason` label of `pod_gc_collector_force_delete_pods_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Terminated,
    TerminatingOutOfService,
    Orphaned,
    TerminatingUnscheduled,
}

/// A pod to force-delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collect {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub reason: Reason,
    /// Whether its phase must be set to Failed first.
    pub mark_failed: bool,
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `isPodTerminated`: the phase is neither Pending, Running nor Unknown.
pub fn is_terminated(pod: &Pod) -> bool {
    !matches!(phase(pod), "Pending" | "Running" | "Unknown")
}

fn evicted(pod: &Pod) -> bool {
    phase(pod) == "Failed"
        && pod.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted")
}

fn collect(pod: &Pod, reason: Reason) -> Collect {
    Collect {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        reason,
        mark_failed: !matches!(phase(pod), "Succeeded" | "Failed"),
    }
}

fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// One `gc` pass (pure) but the orphans: the pods to delete, and the quarantined node names
/// whose quarantine is over (to check with a live GET). `quarantine` maps a missing node's name
/// to the time its quarantine ends (`nodeQueue.AddAfter`: the earliest stays).
pub fn plan(
    pods: &[Arc<Pod>],
    nodes: &[Arc<Node>],
    config: &Config,
    quarantine: &mut BTreeMap<String, Timestamp>,
    now: Timestamp,
) -> (Vec<Collect>, Vec<String>) {
    let by_name: BTreeMap<String, &Node> = nodes.iter().map(|n| (n.name_any(), &**n)).collect();
    let mut out = vec![];
    if config.terminated_threshold > 0 {
        let mut terminated: Vec<&Pod> = pods
            .iter()
            .map(|p| &**p)
            .filter(|p| is_terminated(p))
            .collect();
        if terminated.len() > config.terminated_threshold {
            terminated.sort_by(|a, b| {
                evicted(b)
                    .cmp(&evicted(a))
                    .then_with(|| {
                        let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                        t(a).cmp(&t(b))
                    })
                    .then_with(|| a.name_any().cmp(&b.name_any()))
            });
            let surplus = terminated.len() - config.terminated_threshold;
            out.extend(
                terminated[..surplus]
                    .iter()
                    .map(|p| collect(p, Reason::Terminated)),
            );
        }
    }
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_none() {
            continue;
        }
        if let Some(node) = by_name.get(node_of(pod)) {
            let out_of_service = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT));
            if !node_ready(node) && out_of_service {
                out.push(collect(pod, Reason::TerminatingOutOfService));
            }
        }
    }
    for pod in pods {
        let node = node_of(pod);
        if !node.is_empty() && !by_name.contains_key(node) {
            let until = now + config.quarantine;
            let at = quarantine.entry(node.to_string()).or_insert(until);
            *at = (*at).min(until);
        }
    }
    let over: Vec<String> = quarantine
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(n, _)| n.clone())
        .collect();
    for n in &over {
        quarantine.remove(n);
    }
    let check = over
        .into_iter()
        .filter(|n| !by_name.contains_key(n))
        .collect();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() && node_of(pod).is_empty() {
            out.push(collect(pod, Reason::TerminatingUnscheduled));
        }
    }
    (out, check)
}

/// The pods bound to nodes confirmed gone (`gcOrphaned`'s deletions).
pub fn orphans(pods: &[Arc<Pod>], gone: &BTreeSet<String>) -> Vec<Collect> {
    pods.iter()
        .filter(|p| gone.contains(node_of(p)))
        .map(|p| collect(p, Reason::Orphaned))
        .collect()
}

/// PodGC's failing steps (none yet: a failed deletion is logged and retried next period).
#[derive(Debug, thiserror::Error)]
pub enum Error {}

/// Runs PodGC until `shutdown`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) -> Result<(), Error> {
    let mut c = Caches::default();
    let (pods, nodes) = (c.all(&client), c.all(&client));
    let quarantine = BTreeMap::new();
    let actor = PodGc {
        client,
        config,
        pods,
        nodes,
        quarantine,
        next: None,
    };
    support::run(actor, c, clock, Duration::ZERO, shutdown).await
}

struct PodGc {
    client: Client,
    config: Config,
    pods: Store<Pod>,
    nodes: Store<Node>,
    quarantine: BTreeMap<String, Timestamp>,
    /// The next period's start: PodGC acts on its period only, not on changes.
    next: Option<Timestamp>,
}

impl PodGc {
    async fn delete(&self, c: &Collect, expect: &mut Expect) {
        tracing::info!(pod = %c.name, namespace = %c.namespace, reason = ?c.reason, "PodGC is force deleting Pod");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &c.namespace);
        if c.mark_failed {
            let mut status = json!({"phase": "Failed"});
            if c.reason == Reason::Orphaned {
                status["conditions"] = json!([{"type": "DisruptionTarget", "status": "True",
                    "reason": ORPHAN_REASON, "message": ORPHAN_MESSAGE}]);
            }
            let patch = json!({"metadata": {"uid": c.uid}, "status": status});
            if let Err(e) = api
                .patch_status(&c.name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                tracing::debug!(pod = %c.name, error = %e, "PodGC: marking Failed failed");
                return;
            }
        }
        match api
            .delete(&c.name, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => expect.deleted(
                &self.pods,
                ObjectRef::new(&c.name).within(&c.namespace),
                Some(c.uid.clone()),
            ),
            Err(e) => tracing::debug!(pod = %c.name, error = %e, "PodGC: delete failed"),
        }
    }
}

impl Actor for PodGc {
    type Error = Error;

    async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Error> {
        if let Some(next) = self.next
            && now < next
        {
            return Ok(Some(next));
        }
        let pods = self.pods.sorted_state();
        let (collect, check) = plan(
            &pods,
            &self.nodes.sorted_state(),
            &self.config,
            &mut self.quarantine,
            now,
        );
        for c in &collect {
            self.delete(c, expect).await;
        }
        let mut gone = BTreeSet::new();
        let nodes: Api<Node> = Api::all(self.client.clone());
        for name in check {
            match nodes.get_opt(&name).await {
                Ok(None) => {
                    gone.insert(name);
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::debug!(node = %name, error = %e, "PodGC: node check failed"),
            }
        }
        for c in orphans(&pods, &gone) {
            self.delete(&c, expect).await;
        }
        let next = now + self.config.period;
        self.next = Some(next);
        Ok(Some(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Taint;
    use raygate_testing::core::{self, NodeExt, PodExt};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    /// Pod `ns/name` (uid `name`, no owner) in `phase` on `node` (`""`: none), created at `t(at)`.
    fn created(name: &str, node: &str, phase: &str, at: i64) -> Pod {
        core::pod(&format!("ns/{name}"), node)
            .uid(name)
            .unowned()
            .phase(phase)
            .created_at(t(at))
    }

    /// Node `name`, Ready `True` (`Unknown` when not `ready`), with `taints`.
    fn ready_node(name: &str, ready: bool, taints: &[Taint]) -> Arc<Node> {
        let n = core::node(name, "").condition("Ready", if ready { "True" } else { "Unknown" });
        Arc::new(taints.iter().cloned().fold(n, NodeExt::tainted))
    }

    fn names(c: &[Collect]) -> Vec<(&str, Reason)> {
        c.iter().map(|c| (c.name.as_str(), c.reason)).collect()
    }

    #[test]
    fn terminated_pods_beyond_the_threshold_go_evicted_first_then_oldest() {
        let mut evicted = created("evicted", "n", "Failed", 50);
        evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
        let pods = vec![
            Arc::new(created("new", "n", "Succeeded", 30)),
            Arc::new(created("old", "n", "Failed", 10)),
            Arc::new(created("b-mid", "n", "Succeeded", 20)),
            Arc::new(created("a-mid", "n", "Succeeded", 20)),
            Arc::new(evicted),
            Arc::new(created("running", "n", "Running", 0)),
        ];
        let config = Config {
            terminated_threshold: 2,
            ..Config::default()
        };
        let nodes = [ready_node("n", true, &[])];
        let (c, _) = plan(&pods, &nodes, &config, &mut BTreeMap::new(), t(100));
        assert_eq!(
            names(&c),
            [
                ("evicted", Reason::Terminated),
                ("old", Reason::Terminated),
                ("a-mid", Reason::Terminated)
            ]
        );
        assert!(c.iter().all(|c| !c.mark_failed), "already terminal");
        let off = Config {
            terminated_threshold: 0,
            ..Config::default()
        };
        assert!(
            plan(&pods, &nodes, &off, &mut BTreeMap::new(), t(100))
                .0
                .is_empty()
        );
    }

    #[test]
    fn a_terminating_pod_goes_only_from_a_not_ready_out_of_service_node() {
        let oos = [core::taint_with_value(
            OUT_OF_SERVICE_TAINT,
            "nodeshutdown",
            "NoExecute",
        )];
        let nodes = [
            ready_node("down-oos", false, &oos),
            ready_node("down", false, &[]),
            ready_node("up-oos", true, &oos),
        ];
        let deleting = |p: Pod| p.deleting_since(t(1));
        let pods = [
            deleting(created("a", "down-oos", "Running", 0)),
            deleting(created("b", "down", "Running", 0)),
            deleting(created("c", "up-oos", "Running", 0)),
            created("d", "down-oos", "Running", 0),
            deleting(created("e", "", "Pending", 0)),
        ]
        .map(Arc::new);
        let (c, _) = plan(
            &pods,
            &nodes,
            &Config::default(),
            &mut BTreeMap::new(),
            t(0),
        );
        assert_eq!(
            names(&c),
            [
                ("a", Reason::TerminatingOutOfService),
                ("e", Reason::TerminatingUnscheduled)
            ]
        );
        assert!(c[0].mark_failed);
    }

    #[test]
    fn a_missing_node_is_quarantined_40s_before_its_pods_are_orphans() {
        let pods = [Arc::new(created("p", "gone", "Running", 0))];
        let mut q = BTreeMap::new();
        let config = Config::default();
        let (_, check) = plan(&pods, &[], &config, &mut q, t(0));
        assert!(check.is_empty());
        assert_eq!(q.get("gone"), Some(&t(40)));
        // a later pass keeps the earliest end
        assert!(plan(&pods, &[], &config, &mut q, t(20)).1.is_empty());
        assert_eq!(q.get("gone"), Some(&t(40)));
        let (_, check) = plan(&pods, &[], &config, &mut q, t(40));
        assert_eq!(check, ["gone"]);
        let gone = BTreeSet::from(["gone".to_string()]);
        let o = orphans(&pods, &gone);
        assert_eq!(names(&o), [("p", Reason::Orphaned)]);
        assert!(o[0].mark_failed);
        // a node that came back within its quarantine is not checked
        let mut q = BTreeMap::new();
        plan(&pods, &[], &config, &mut q, t(0));
        let back = [ready_node("gone", true, &[])];
        assert!(plan(&pods, &back, &config, &mut q, t(40)).1.is_empty());
    }
}
