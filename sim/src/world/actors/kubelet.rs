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
//! - **Run to completion** (`exit.rs`): the containers of a Job's pod (`restartPolicy: Never`,
//!   controlled by a batch/v1 Job) exit [`Config::job_pod_runtime`] after they started, with
//!   the code the pod's annotation [`EXIT_CODE`] names (a test's fault; else 0): the pod turns
//!   `Succeeded` (0) or `Failed`, as the kubelet's `getPhase` does for `Never` once every
//!   container terminated. Every other pod runs until it is deleted.

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
    /// How long the containers of a Job's pod run before they exit (see "Run to completion").
    pub job_pod_runtime: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            start_delay: Duration::from_secs(5),
            stop_after: Some(Duration::from_secs(1)),
            job_pod_runtime: Duration::from_secs(5),
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
    /// The containers exited (a Job's pod) and their terminal status was written.
    exited: bool,
}

impl Runtime {
    /// A pod first seen at `now` (or a new pod of a known name): admitted, nothing started.
    fn admitted(uid: String, now: Timestamp) -> Self {
        Runtime {
            uid,
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
            exited: false,
        }
    }

    /// The node is back from a reboot: containers that ran (and were not stopping) start again.
    fn restart(&mut self, now: Timestamp) {
        if self.started.is_some() && self.stopping.is_none() && !self.exited {
            self.started = None;
            self.admitted = now;
            self.restarts += 1;
            self.ready = false;
            self.successes = 0;
            self.failures = 0;
            self.next_probe = None;
            self.settled = false;
        }
    }

    /// A deleting pod is not ready; its containers stop at the returned moment: at once when
    /// they never started, else `stop_after` after the kubelet first saw the deletion, capped
    /// by `deadline` (the whole grace period when `stop_after` is `None`).
    fn stop_at(
        &mut self,
        stop_after: Option<Duration>,
        deadline: Timestamp,
        now: Timestamp,
    ) -> Timestamp {
        let since = *self.stopping.get_or_insert(now);
        self.ready = false;
        match (self.started, stop_after) {
            (None, _) => now,
            (Some(_), Some(d)) => since.checked_add(secs(d)).unwrap_or(deadline).min(deadline),
            (Some(_), None) => deadline,
        }
    }

    /// Starts the containers once `start_delay` has passed since admission: Ready at once
    /// without a readiness probe, else the first probe is due after its initial delay and one
    /// period. Returns the moment they start while it has not come.
    fn start(&mut self, pod: &Pod, start_delay: Duration, now: Timestamp) -> Option<Timestamp> {
        if self.started.is_some() {
            return None;
        }
        let at = self
            .admitted
            .checked_add(secs(start_delay))
            .unwrap_or(Timestamp::MAX);
        if now < at {
            return Some(at);
        }
        self.started = Some(now);
        match readiness_probe(pod) {
            None => self.ready = true,
            Some(p) => self.next_probe = Some(plus(now, p.initial_delay + p.period)),
        }
        None
    }

    /// Runs the readiness probe when one is due by `now`, on the period's grid. Returns the
    /// next probe's moment unless the result, repeated, would change nothing (settled).
    fn probe(
        &mut self,
        pod: &Pod,
        groups: &BTreeMap<(String, String, String), GroupState>,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let (Some(p), Some(mut due)) = (readiness_probe(pod), self.next_probe) else {
            return None;
        };
        let ok = probe_ok(pod, groups);
        if due < now && self.settled {
            // the probes skipped while settled all gave the settled result
            while due < now {
                due = plus(due, p.period);
            }
        }
        if now >= due {
            self.count(ok, p);
            // the next probe, on the period's grid
            while due <= now {
                due = plus(due, p.period);
            }
        }
        self.next_probe = Some(due);
        self.settled = if ok {
            self.ready && self.failures == 0
        } else {
            !self.ready && self.successes == 0
        };
        (!self.settled).then_some(due)
    }

    /// Counts one probe's result: `success` consecutive passes make the pod Ready, `failure`
    /// consecutive failures unready.
    fn count(&mut self, ok: bool, p: ProbeTiming) {
        if ok {
            self.successes += 1;
            self.failures = 0;
            if self.successes >= p.success {
                self.ready = true;
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if self.failures >= p.failure {
                self.ready = false;
            }
        }
    }
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
    config_run: Duration,
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
            config_run: config.job_pod_runtime,
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
                rt.restart(now);
            }
        }
        let live: std::collections::HashSet<_> = pods.iter().map(|p| key(p)).collect();
        self.pods.retain(|k, _| live.contains(k));
        let mut actions = vec![];
        let mut next: Option<Timestamp> = None;
        for pod in pods {
            if let Some(t) = self.step_pod(pod, groups, now, &mut actions) {
                next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
            }
        }
        (actions, next)
    }

    /// Advances one pod to `now`, adding its actions to `actions`. Returns the next moment
    /// anything about it is due.
    fn step_pod(
        &mut self,
        pod: &Pod,
        groups: &BTreeMap<(String, String, String), GroupState>,
        now: Timestamp,
        actions: &mut Vec<Action>,
    ) -> Option<Timestamp> {
        let k = key(pod);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let rt = self
            .pods
            .entry(k.clone())
            .or_insert_with(|| Runtime::admitted(uid.clone(), now));
        if rt.uid != uid {
            // a new pod of the same name
            *rt = Runtime::admitted(uid.clone(), now);
        }
        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if let Some(deadline) = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0) {
            let stop_at = rt.stop_at(self.config_stop, deadline, now);
            if now >= stop_at || terminal {
                actions.push(Action::Delete {
                    namespace: k.0,
                    name: k.1,
                    uid,
                });
                return None;
            }
            actions.extend(report(pod, rt));
            return Some(stop_at);
        }
        if terminal {
            return None;
        }
        if let Some(at) = rt.start(pod, self.config_start, now) {
            return Some(at);
        }
        let exit_at = exit::exit_at(pod, rt, self.config_run);
        if let Some(at) = exit_at.filter(|at| now >= *at) {
            actions.extend(exit::report_exit(pod, rt, at));
            return None;
        }
        let due = rt.probe(pod, groups, now);
        actions.extend(report(pod, rt));
        match (due, exit_at) {
            (Some(d), Some(e)) => Some(d.min(e)),
            (d, e) => d.or(e),
        }
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

mod exit;
mod io;

pub use exit::EXIT_CODE;
pub use io::{run, run_all};

#[cfg(test)]
mod tests;
