//! A kubelet per node. Pure part: [`Kubelet::step`] turns the node's pods, the node's readiness
//! and the time into status writes and final deletions; the IO loop ([`run`]) watches the node
//! and its pods (`spec.nodeName`) and sleeps until the next due moment.
//!
//! - **Start**: a bound pod runs `start_delay` after the kubelet first sees it (image pull and
//!   container start): `phase: Running`, `startTime`, `containerStatuses` running,
//!   `Initialized=True`.
//! - **Readiness** (`pkg/kubelet/prober/worker.go`): without a readiness probe a started pod is
//!   Ready at once; with one (the first container's), probes run at `start + initialDelaySeconds +
//!   k × periodSeconds` (k ≥ 1); `successThreshold` consecutive successes make it Ready,
//!   `failureThreshold` consecutive failures unready. A probe fails while the pod carries the
//!   annotation [`FAIL_READINESS`] `"true"` (a test's fault).
//! - **Delegated readiness**: a pod annotated [`READINESS_GROUP`]`: <label key>` (a group's
//!   representative, e.g. an LWS leader) passes its probe only while every *other* pod of its
//!   namespace with the same value of that label is Ready and there are
//!   [`READINESS_GROUP_SIZE`] (else `leaderworkerset.sigs.k8s.io/size`) members in all, so it
//!   goes unready `periodSeconds × failureThreshold` after a member does — the probe's lag.
//! - **Graceful termination**: a pod with `deletionTimestamp` is reported not ready; its
//!   containers stop after `stop_after` (what the app takes on SIGTERM; `None`: the whole grace
//!   period) capped by the grace period (`deletionTimestamp`); then the kubelet deletes it with
//!   grace 0 (uid precondition). A pod that never started is deleted at once.
//! - **Node down**: while the Node's `Ready` condition is `False`/`Unknown`, or the Node is gone,
//!   the kubelet does nothing (it is the kubelet that is down: no status, no deletions — pods
//!   stay `Terminating` as in Kubernetes, until PodGC or the node returns). Marking its pods
//!   NotReady and tainting the node is the node lifecycle controller's job; deleting pods of a
//!   deleted node is PodGC's. When the node is Ready again every pod that had started restarts
//!   its containers (`restartCount + 1`, not ready, running again after `start_delay`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Probe};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

/// A readiness probe fails while the pod carries this annotation with `"true"`.
pub const FAIL_READINESS: &str = "sim.raygate.io/fail-readiness";
/// Delegated readiness: the label key naming the pod's group.
pub const READINESS_GROUP: &str = "sim.raygate.io/readiness-group";
/// Delegated readiness: how many pods the group has (leader included).
pub const READINESS_GROUP_SIZE: &str = "sim.raygate.io/readiness-group-size";
const LWS_SIZE: &str = "leaderworkerset.sigs.k8s.io/size";

/// Kubelet settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// From first seeing a bound pod to its containers running.
    pub start_delay: Duration,
    /// How long containers take to stop on SIGTERM (`None`: the whole grace period).
    pub stop_after: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            start_delay: Duration::from_secs(5),
            stop_after: Some(Duration::from_secs(1)),
        }
    }
}

/// The readiness probe's timing (Kubernetes' defaults for unset fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeTiming {
    pub initial_delay: i64,
    pub period: i64,
    pub success: i64,
    pub failure: i64,
}

impl ProbeTiming {
    pub fn of(p: &Probe) -> Self {
        ProbeTiming {
            initial_delay: i64::from(p.initial_delay_seconds.unwrap_or(0)).max(0),
            period: i64::from(p.period_seconds.unwrap_or(10)).max(1),
            success: i64::from(p.success_threshold.unwrap_or(1)).max(1),
            failure: i64::from(p.failure_threshold.unwrap_or(3)).max(1),
        }
    }
}

fn readiness_probe(pod: &Pod) -> Option<ProbeTiming> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find_map(|c| c.readiness_probe.as_ref())
        .map(ProbeTiming::of)
}

/// What one pod's containers are doing, as this kubelet knows it.
#[derive(Clone, Debug)]
struct Runtime {
    uid: String,
    admitted: Timestamp,
    started: Option<Timestamp>,
    restarts: i32,
    ready: bool,
    successes: i64,
    failures: i64,
    next_probe: Option<Timestamp>,
    stopping: Option<Timestamp>,
    /// (started, ready, restarts, stopping) last written
    reported: Option<(bool, bool, i32, bool)>,
    /// Whether the last probe's result, repeated, changes nothing (probes are then skipped: the
    /// result can only change with a watch event, which wakes the kubelet).
    settled: bool,
}

/// A group's members as a representative's probe sees them: (members, ready members), the
/// representative excluded.
pub type GroupState = (usize, usize);

/// What the kubelet does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// A strategic-merge patch of the pod's status.
    Status {
        namespace: String,
        name: String,
        patch: Value,
    },
    /// The final delete (grace 0, uid precondition).
    Delete {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// The group a representative pod's probe checks: (namespace, label key, value, expected size).
pub fn readiness_group(pod: &Pod) -> Option<(String, String, String, Option<usize>)> {
    let ann = pod.metadata.annotations.as_ref()?;
    let key = ann.get(READINESS_GROUP)?;
    let value = pod.metadata.labels.as_ref()?.get(key)?;
    let size = ann
        .get(READINESS_GROUP_SIZE)
        .or_else(|| ann.get(LWS_SIZE))
        .and_then(|s| s.parse().ok());
    Some((
        pod.metadata.namespace.clone().unwrap_or_default(),
        key.clone(),
        value.clone(),
        size,
    ))
}

fn secs(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

fn plus(t: Timestamp, s: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(s))
        .unwrap_or(Timestamp::MAX)
}

fn stamp(t: Timestamp) -> String {
    crate::clock::seconds(t)
}

fn key(pod: &Pod) -> (String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// One node's kubelet state.
#[derive(Debug, Default)]
pub struct Kubelet {
    config_start: Duration,
    config_stop: Option<Duration>,
    pods: HashMap<(String, String), Runtime>,
    node_up: bool,
}

/// Whether the Node is up as its kubelet sees it: present, and `Ready` not `False`/`Unknown`
/// (a node without a `Ready` condition yet counts as up).
pub fn node_up(node: Option<&Node>) -> bool {
    node.is_some_and(|n| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_none_or(|c| c.status == "True")
    })
}

impl Kubelet {
    pub fn new(config: &Config) -> Self {
        Kubelet {
            config_start: config.start_delay,
            config_stop: config.stop_after,
            pods: HashMap::new(),
            node_up: true,
        }
    }

    /// Advances every pod to `now`. `groups` holds the state of the groups of the
    /// representatives among `pods` ([`readiness_group`]), keyed by (namespace, label key,
    /// value). Returns the actions and the next moment anything is due; between those, only a
    /// change to the pods or groups (a watch event) can change anything.
    pub fn step(
        &mut self,
        node_up: bool,
        pods: &[Arc<Pod>],
        groups: &BTreeMap<(String, String, String), GroupState>,
        now: Timestamp,
    ) -> (Vec<Action>, Option<Timestamp>) {
        let was_up = std::mem::replace(&mut self.node_up, node_up);
        if !node_up {
            return (vec![], None);
        }
        if !was_up {
            // back from a reboot: every container that ran starts again
            for rt in self.pods.values_mut() {
                if rt.started.is_some() && rt.stopping.is_none() {
                    rt.started = None;
                    rt.admitted = now;
                    rt.restarts += 1;
                    rt.ready = false;
                    rt.successes = 0;
                    rt.failures = 0;
                    rt.next_probe = None;
                    rt.settled = false;
                }
            }
        }
        let live: std::collections::HashSet<_> = pods.iter().map(|p| key(p)).collect();
        self.pods.retain(|k, _| live.contains(k));
        let mut actions = vec![];
        let mut next: Option<Timestamp> = None;
        let mut wake = |t: Timestamp| {
            next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
        };
        for pod in pods {
            let k = key(pod);
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let rt = self.pods.entry(k.clone()).or_insert_with(|| Runtime {
                uid: uid.clone(),
                admitted: now,
                started: None,
                restarts: 0,
                ready: false,
                successes: 0,
                failures: 0,
                next_probe: None,
                stopping: None,
                reported: None,
                settled: false,
            });
            if rt.uid != uid {
                // a new pod of the same name
                *rt = Runtime {
                    uid: uid.clone(),
                    admitted: now,
                    started: None,
                    restarts: 0,
                    ready: false,
                    successes: 0,
                    failures: 0,
                    next_probe: None,
                    stopping: None,
                    reported: None,
                    settled: false,
                };
            }
            let terminal = matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
            if let Some(deadline) = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0) {
                let since = *rt.stopping.get_or_insert(now);
                rt.ready = false;
                let stop_at = match (rt.started, self.config_stop) {
                    (None, _) => now,
                    (Some(_), Some(d)) => {
                        since.checked_add(secs(d)).unwrap_or(deadline).min(deadline)
                    }
                    (Some(_), None) => deadline,
                };
                if now >= stop_at || terminal {
                    actions.push(Action::Delete {
                        namespace: k.0.clone(),
                        name: k.1.clone(),
                        uid: uid.clone(),
                    });
                } else {
                    wake(stop_at);
                    if let Some(a) = report(pod, rt) {
                        actions.push(a);
                    }
                }
                continue;
            }
            if terminal {
                continue;
            }
            if rt.started.is_none() {
                let at = rt
                    .admitted
                    .checked_add(secs(self.config_start))
                    .unwrap_or(Timestamp::MAX);
                if now < at {
                    wake(at);
                    continue;
                }
                rt.started = Some(now);
                match readiness_probe(pod) {
                    None => rt.ready = true,
                    Some(p) => rt.next_probe = Some(plus(now, p.initial_delay + p.period)),
                }
            }
            if let (Some(p), Some(mut due)) = (readiness_probe(pod), rt.next_probe) {
                let ok = probe_ok(pod, groups);
                if due < now && rt.settled {
                    // the probes skipped while settled all gave the settled result
                    while due < now {
                        due = plus(due, p.period);
                    }
                }
                if now >= due {
                    if ok {
                        rt.successes += 1;
                        rt.failures = 0;
                        if rt.successes >= p.success {
                            rt.ready = true;
                        }
                    } else {
                        rt.failures += 1;
                        rt.successes = 0;
                        if rt.failures >= p.failure {
                            rt.ready = false;
                        }
                    }
                    // the next probe, on the period's grid
                    while due <= now {
                        due = plus(due, p.period);
                    }
                }
                rt.next_probe = Some(due);
                rt.settled = if ok {
                    rt.ready && rt.failures == 0
                } else {
                    !rt.ready && rt.successes == 0
                };
                if !rt.settled {
                    wake(due);
                }
            }
            if let Some(a) = report(pod, rt) {
                actions.push(a);
            }
        }
        (actions, next)
    }
}

fn probe_ok(pod: &Pod, groups: &BTreeMap<(String, String, String), GroupState>) -> bool {
    let failing = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FAIL_READINESS))
        .is_some_and(|v| v == "true");
    if failing {
        return false;
    }
    match readiness_group(pod) {
        None => true,
        Some((ns, key, value, size)) => match groups.get(&(ns, key, value)) {
            None => false,
            Some((members, ready)) => ready == members && size.is_none_or(|s| members + 1 >= s),
        },
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Counts a group: (members, ready members), `except` left out.
pub fn group_state<'a>(members: impl IntoIterator<Item = &'a Pod>, except: &str) -> GroupState {
    let mut n = 0;
    let mut ready = 0;
    for p in members {
        if p.metadata.name.as_deref() == Some(except) || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        n += 1;
        ready += usize::from(is_ready(p));
    }
    (n, ready)
}

/// The status patch for `rt`, when it differs from what was last written.
fn report(pod: &Pod, rt: &mut Runtime) -> Option<Action> {
    let state = (
        rt.started.is_some(),
        rt.ready,
        rt.restarts,
        rt.stopping.is_some(),
    );
    if rt.reported == Some(state) {
        return None;
    }
    let was = rt.reported;
    rt.reported = Some(state);
    let (namespace, name) = key(pod);
    let started_at = rt.started.map(stamp);
    let containers: Vec<Value> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let st = match &started_at {
                Some(at) => json!({"running": {"startedAt": at}}),
                None => json!({"waiting": {"reason": "ContainerCreating"}}),
            };
            json!({
                "name": c.name, "image": c.image.clone().unwrap_or_default(),
                "imageID": "", "ready": rt.ready, "started": rt.started.is_some(),
                "restartCount": rt.restarts, "state": st,
            })
        })
        .collect();
    let now = rt.stopping.or(rt.started).unwrap_or(rt.admitted);
    let ready = if rt.ready { "True" } else { "False" };
    let mut conditions = vec![
        json!({"type": "Initialized", "status": "True"}),
        json!({"type": "ContainersReady", "status": ready}),
        json!({"type": "Ready", "status": ready}),
    ];
    // the transition time moves only when the readiness does
    let ready_changed = was.is_none_or(|w| w.1 != rt.ready);
    for c in &mut conditions {
        if c["type"] != "Initialized" && ready_changed {
            c["lastTransitionTime"] = json!(stamp(now));
        }
    }
    let mut status = json!({
        "phase": if rt.started.is_some() || rt.restarts > 0 { "Running" } else { "Pending" },
        "startTime": stamp(rt.admitted.min(rt.started.unwrap_or(rt.admitted))),
        "conditions": conditions,
        "containerStatuses": containers,
    });
    if pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .is_some()
        && let Some(m) = status.as_object_mut()
    {
        m.remove("startTime");
    }
    Some(Action::Status {
        namespace,
        name,
        patch: json!({"status": status}),
    })
}

pub use io::{run, run_all};

mod io {
    use raygate::runtime::SortedState;
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Arc;

    use super::{Action, Config, Kubelet, group_state, node_up};
    use crate::Clock;
    use crate::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};
    use crate::fanout::Fanout;
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
    async fn cluster_pods(
        client: &kube::Client,
        shutdown: &Shutdown,
    ) -> Option<(Caches, ClusterPods)> {
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
                    tokio::spawn(crate::informers::carry(run_with(
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ann: Value, probe: Option<(i32, i32, i32)>) -> Arc<Pod> {
        let mut c = json!({"name": "c", "image": "x"});
        if let Some((period, success, failure)) = probe {
            c["readinessProbe"] = json!({"periodSeconds": period, "successThreshold": success, "failureThreshold": failure});
        }
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "uid": name,
                "labels": {"g": "1"}, "annotations": ann}, "spec": {"nodeName": "n", "containers": [c]}}))
            .unwrap(),
        )
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    fn ready_writes(actions: &[Action]) -> Vec<bool> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Status { patch, .. } => {
                    Some(patch["status"]["conditions"][2]["status"] == "True")
                }
                _ => None,
            })
            .collect()
    }

    /// Runs the kubelet second by second, returning the seconds at which readiness was written.
    fn run(
        k: &mut Kubelet,
        pods: &[Arc<Pod>],
        groups: &BTreeMap<(String, String, String), GroupState>,
        from: i64,
        to: i64,
    ) -> Vec<(i64, bool)> {
        let mut out = vec![];
        for s in from..=to {
            let (a, _) = k.step(true, pods, groups, t(s));
            out.extend(ready_writes(&a).into_iter().map(|r| (s, r)));
        }
        out
    }

    #[test]
    fn a_pod_starts_after_the_delay_and_is_ready_after_period_times_success_threshold() {
        let mut k = Kubelet::new(&Config {
            start_delay: Duration::from_secs(5),
            stop_after: None,
        });
        let p = [pod("p", json!({}), Some((10, 2, 3)))];
        let w = run(&mut k, &p, &BTreeMap::new(), 0, 30);
        // running (not ready) at 5; probes at 15 and 25 → Ready at 25
        assert_eq!(w, [(5, false), (25, true)]);
        let (_, next) = k.step(true, &p, &BTreeMap::new(), t(31));
        assert_eq!(
            next, None,
            "Ready and passing: settled, nothing to wake for"
        );
    }

    #[test]
    fn a_representative_goes_unready_failure_threshold_periods_after_its_group() {
        let mut k = Kubelet::new(&Config {
            start_delay: Duration::ZERO,
            stop_after: None,
        });
        let rep = [pod(
            "leader",
            json!({READINESS_GROUP: "g", READINESS_GROUP_SIZE: "3"}),
            Some((5, 1, 3)),
        )];
        let key = ("ns".to_string(), "g".to_string(), "1".to_string());
        let mut groups = BTreeMap::from([(key.clone(), (2, 2))]);
        assert_eq!(run(&mut k, &rep, &groups, 0, 10), [(0, false), (5, true)]);
        groups.insert(key.clone(), (2, 1));
        // failures at 15, 20, 25 → unready at 25: period × failureThreshold after 10
        assert_eq!(run(&mut k, &rep, &groups, 11, 40), [(25, false)]);
        groups.insert(key.clone(), (2, 2));
        assert_eq!(run(&mut k, &rep, &groups, 41, 50), [(45, true)]);
        // a missing member (the group has fewer than its size) also fails the probe
        groups.insert(key, (1, 1));
        assert_eq!(run(&mut k, &rep, &groups, 51, 70), [(65, false)]);
    }

    #[test]
    fn a_settled_pod_is_not_woken_and_a_change_is_probed_on_its_original_grid() {
        // the kubelet sleeps through probes whose result cannot change anything; when a watch
        // event wakes it, the next probe is still on start + k × period
        let mut k = Kubelet::new(&Config {
            start_delay: Duration::ZERO,
            stop_after: None,
        });
        let rep = [pod(
            "leader",
            json!({READINESS_GROUP: "g"}),
            Some((5, 1, 3)),
        )];
        let key = ("ns".to_string(), "g".to_string(), "1".to_string());
        let mut groups = BTreeMap::from([(key.clone(), (2, 2))]);
        k.step(true, &rep, &groups, t(0));
        let (a, next) = k.step(true, &rep, &groups, t(5));
        assert_eq!(ready_writes(&a), [true]);
        assert_eq!(next, None, "settled: nothing to wake for");
        // an event at 52: the group lost a member's readiness
        groups.insert(key, (2, 1));
        let (a, next) = k.step(true, &rep, &groups, t(52));
        assert!(a.is_empty());
        assert_eq!(next, Some(t(55)));
        let mut at = t(55);
        let mut writes = vec![];
        // only at the moments the kubelet asked for
        loop {
            let (a, next) = k.step(true, &rep, &groups, at);
            writes.extend(ready_writes(&a).into_iter().map(|r| (at, r)));
            match next {
                Some(n) => at = n,
                None => break,
            }
        }
        assert_eq!(writes, [(t(65), false)], "failures at 55, 60, 65");
    }

    #[test]
    fn a_deleted_pod_stops_then_is_removed_within_its_grace_period_and_a_down_node_does_nothing() {
        let mut k = Kubelet::new(&Config {
            start_delay: Duration::ZERO,
            stop_after: Some(Duration::from_secs(3)),
        });
        let p = pod("p", json!({}), None);
        let (a, _) = k.step(true, std::slice::from_ref(&p), &BTreeMap::new(), t(0));
        assert_eq!(ready_writes(&a), [true]);
        let mut deleting = (*p).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(30)));
        let d = [Arc::new(deleting)];
        let (a, next) = k.step(true, &d, &BTreeMap::new(), t(1));
        assert_eq!(ready_writes(&a), [false], "terminating: not ready");
        assert_eq!(next, Some(t(4)));
        // node down: nothing happens, however late
        assert_eq!(k.step(false, &d, &BTreeMap::new(), t(100)), (vec![], None));
        let (a, _) = k.step(true, &d, &BTreeMap::new(), t(101));
        assert!(
            a.iter()
                .any(|a| matches!(a, Action::Delete { name, .. } if name == "p"))
        );
    }

    /// Conformance with the kubelet's prober (`pkg/kubelet/prober/worker.go`, `doProbe`: "Probe
    /// disabled for InitialDelaySeconds": a probe while the container has run less than
    /// `initialDelaySeconds` since its `startedAt` is skipped, neither success nor failure): a
    /// readiness probe's `initialDelaySeconds` holds a started pod unready that long (a model
    /// server loading its weights), then probes on its period count. A restarted container (the
    /// node back from a reboot: a new `startedAt`) waits the delay again. Here the first counted
    /// probe is one period after the delay (upstream: the first tick of the worker's ticker at or
    /// after it, so up to one period earlier).
    #[test]
    fn initial_delay_seconds_holds_a_started_pod_unready_from_each_container_start() {
        let mut k = Kubelet::new(&Config {
            start_delay: Duration::from_secs(5),
            stop_after: None,
        });
        let p = [Arc::new(
            serde_json::from_value::<Pod>(json!({
                "metadata": {"name": "vllm", "namespace": "ns", "uid": "u1"},
                "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "x",
                    "readinessProbe": {"initialDelaySeconds": 90, "periodSeconds": 10,
                        "successThreshold": 1, "failureThreshold": 3}}]}}))
            .unwrap(),
        )];
        let none = BTreeMap::new();
        // running (not ready) at 5; probes at 5 + 90 + 10 = 105, not at 15, 25, ...
        assert_eq!(run(&mut k, &p, &none, 0, 200), [(5, false), (105, true)]);
        // the node reboots at 300 and is back at 400: the container starts again at 405 and
        // waits its initial delay again
        assert_eq!(k.step(false, &p, &none, t(300)), (vec![], None));
        assert_eq!(
            run(&mut k, &p, &none, 400, 600),
            [(405, false), (505, true)]
        );
    }
}
