//! The disruption controller, after kubernetes `pkg/controller/disruption/disruption.go`
//! (`../shared/reference/eviction-pdb-drain.md` §2): per PodDisruptionBudget, the selected pods
//! (terminating and unready ones included), `expectedPods` and `desiredHealthy` from
//! `minAvailable`/`maxUnavailable` (int or percent, rounded up), the pods' controllers' scale
//! through ownerReferences (ReplicaSet, Deployment through its ReplicaSet, StatefulSet, then any
//! kind's `scale` subresource), `currentHealthy`, the pruned `disruptedPods` (2 min), the
//! `DisruptionAllowed` condition, and `failSafe` (`SyncFailed`, observedGeneration unchanged)
//! when the expected count cannot be computed — e.g. a RayCluster, which has no `scale`.
//!
//! [`decide`] is the pure sync; [`run`] is the IO loop, which reacts to pod, PDB and workload
//! changes after [`Config::lag`] (the controller's reaction lag: its informers and queue).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use crate::Clock;
use crate::actors::support::{self, Actor, Caches, Expect, Pass, Recorder, Shutdown};
use crate::eviction::selector_object_matches;
use raygate::runtime::SortedState;

/// `DeletionTimeout`: how long an eviction's `disruptedPods` entry keeps a pod out of
/// `currentHealthy` while the pod is not seen deleting.
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// A pod controller's answer to the `scale` finder (`getScaleController`).
#[derive(Clone, Debug, PartialEq)]
pub enum ScaleAnswer {
    /// The Scale's uid and `spec.replicas`.
    Scale { uid: String, replicas: i32 },
    /// The object is gone (or the kind serves `scale` but this one is not found): no controller.
    NotFound,
    /// An error the finder returns, e.g. "rayclusters.ray.io does not implement the scale
    /// subresource" or the RESTMapper's "no matches for kind ...".
    Error(String),
}

/// `(namespace, apiVersion, kind, name)` of a pod controller.
pub type ScaleKey = (String, String, String, String);

/// The workloads the finders read (listers in Kubernetes), and the `scale` answers for
/// controllers of other kinds, keyed by [`ScaleKey`].
#[derive(Clone, Debug, Default)]
pub struct Workloads {
    pub replicasets: Vec<ReplicaSet>,
    pub deployments: Vec<Deployment>,
    pub statefulsets: Vec<StatefulSet>,
    pub scales: BTreeMap<ScaleKey, ScaleAnswer>,
}

/// An Event the sync publishes.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    /// `None`: on the PDB; `Some(pod)`: on that pod.
    pub pod: Option<String>,
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// One sync's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The status to write; `None` when the stored one is up to date.
    pub status: Option<PodDisruptionBudgetStatus>,
    pub notes: Vec<Note>,
    /// When a `disruptedPods` entry expires (`recheckQueue.AddAfter`).
    pub recheck_at: Option<Timestamp>,
    /// The failSafe error, if the sync failed.
    pub failed: Option<String>,
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

fn controller_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

fn is_kind(r: &OwnerReference, kind: &str, groups: &[&str]) -> bool {
    r.kind == kind && groups.contains(&group_of(&r.api_version))
}

/// The finders in Kubernetes' order (`finders()`): ReplicationController (not served by the
/// sim), Deployment through its ReplicaSet, a ReplicaSet no Deployment controls, StatefulSet,
/// then the `scale` subresource. `Ok(None)`: this reference resolves to no controller.
pub fn controller_scale(
    r: &OwnerReference,
    ns: &str,
    w: &Workloads,
) -> Result<Option<(String, i32)>, String> {
    let in_ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, name: &str| {
        m.namespace.as_deref() == Some(ns) && m.name.as_deref() == Some(name)
    };
    if is_kind(r, "ReplicaSet", &["apps", "extensions"])
        && let Some(rs) = w
            .replicasets
            .iter()
            .find(|rs| in_ns(&rs.metadata, &r.name) && rs.metadata.uid.as_deref() == Some(&r.uid))
    {
        let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        match controller_of(&rs.metadata) {
            // getPodDeployment
            Some(d) if is_kind(d, "Deployment", &["apps", "extensions"]) => {
                return Ok(w
                    .deployments
                    .iter()
                    .find(|x| {
                        in_ns(&x.metadata, &d.name) && x.metadata.uid.as_deref() == Some(&d.uid)
                    })
                    .map(|x| {
                        let n = x.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                        (d.uid.clone(), n)
                    }));
            }
            // getPodReplicaSet skips a ReplicaSet controlled by a Deployment of another group
            Some(d) if d.kind == "Deployment" => {}
            _ => return Ok(Some((r.uid.clone(), replicas))),
        }
    }
    if is_kind(r, "StatefulSet", &["apps"])
        && let Some(ss) = w
            .statefulsets
            .iter()
            .find(|s| in_ns(&s.metadata, &r.name) && s.metadata.uid.as_deref() == Some(&r.uid))
    {
        let n = ss.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        return Ok(Some((r.uid.clone(), n)));
    }
    match w.scales.get(&(
        ns.to_string(),
        r.api_version.clone(),
        r.kind.clone(),
        r.name.clone(),
    )) {
        Some(ScaleAnswer::Scale { uid, replicas }) if *uid == r.uid => {
            Ok(Some((uid.clone(), *replicas)))
        }
        Some(ScaleAnswer::Error(e)) => Err(e.clone()),
        _ => Ok(None),
    }
}

/// `getExpectedScale`: Σ scale over the pods' distinct controllers; pods without a controller
/// are unmanaged (returned, not an error).
pub fn expected_scale(pods: &[Pod], ns: &str, w: &Workloads) -> Result<(i32, Vec<String>), String> {
    let mut scales: BTreeMap<String, i32> = BTreeMap::new();
    let mut unmanaged = vec![];
    for pod in pods {
        let Some(r) = controller_of(&pod.metadata) else {
            unmanaged.push(pod.name_any());
            continue;
        };
        if scales.contains_key(&r.uid) {
            continue;
        }
        match controller_scale(r, ns, w)? {
            Some((uid, n)) => {
                scales.insert(uid, n);
            }
            None => return Err(format!("found no controllers for pod {:?}", pod.name_any())),
        }
    }
    Ok((scales.values().sum(), unmanaged))
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
pub fn scaled_value(v: &IntOrString, total: i32) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(num) = s.strip_suffix('%') else {
                return Err(
                    "invalid value for IntOrString: invalid type: string is not a percentage"
                        .into(),
                );
            };
            let pct: i64 = num
                .parse()
                .map_err(|e| format!("invalid value for IntOrString: invalid value {s:?}: {e}"))?;
            let scaled = (pct * i64::from(total) + 99).div_euclid(100);
            Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
        }
    }
}

/// `getExpectedPodCount`: (expectedPods, desiredHealthy, unmanaged pods).
pub fn expected_pod_count(
    pdb: &PodDisruptionBudget,
    pods: &[Pod],
    w: &Workloads,
) -> Result<(i32, i32, Vec<String>), String> {
    let ns = pdb.namespace().unwrap_or_default();
    let spec = pdb.spec.clone().unwrap_or_default();
    if let Some(max) = &spec.max_unavailable {
        let (expected, unmanaged) = expected_scale(pods, &ns, w)?;
        let max = scaled_value(max, expected)?;
        return Ok((expected, (expected - max).max(0), unmanaged));
    }
    match &spec.min_available {
        Some(IntOrString::Int(min)) => Ok((pods.len() as i32, *min, vec![])),
        Some(min @ IntOrString::String(_)) => {
            let (expected, unmanaged) = expected_scale(pods, &ns, w)?;
            Ok((expected, scaled_value(min, expected)?, unmanaged))
        }
        None => Ok((0, 0, vec![])),
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// `buildDisruptedPodMap`: entries of present, non-deleting pods whose deletion is still
/// expected; expired ones get a `NotDeleted` Warning. Also the earliest expiry (a recheck).
pub fn disrupted_pod_map(
    pdb: &PodDisruptionBudget,
    pods: &[Pod],
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<Timestamp>, Vec<Note>) {
    let mut kept = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    let mut notes = vec![];
    let Some(old) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
        return (kept, recheck, notes);
    };
    let ns = pdb.namespace().unwrap_or_default();
    for pod in pods.iter().filter(|p| !deleting(p)) {
        let name = pod.name_any();
        let Some(t) = old.get(&name) else { continue };
        let expected = t.0.saturating_add(DELETION_TIMEOUT).unwrap_or(t.0);
        if expected < now {
            notes.push(Note {
                pod: Some(name),
                type_: "Warning",
                reason: "NotDeleted",
                // upstream prints the PDB's namespace twice
                message: format!("Pod was expected by PDB {ns}/{ns} to be deleted but it wasn't"),
            });
        } else {
            recheck = Some(recheck.map_or(expected, |r| r.min(expected)));
            kept.insert(name, t.clone());
        }
    }
    (kept, recheck, notes)
}

/// `countHealthyPods`: not deleting, not recently disrupted, Ready=True (phase not checked).
pub fn count_healthy(pods: &[Pod], disrupted: &BTreeMap<String, Time>, now: Timestamp) -> i32 {
    pods.iter()
        .filter(|p| !deleting(p))
        .filter(|p| {
            disrupted
                .get(&p.name_any())
                .is_none_or(|t| t.0.saturating_add(DELETION_TIMEOUT).unwrap_or(t.0) <= now)
        })
        .filter(|p| is_ready(p))
        .count() as i32
}

/// `apimeta.SetStatusCondition`: `lastTransitionTime` moves only when the status changes.
fn set_condition(conditions: &mut Vec<Condition>, mut c: Condition) {
    match conditions.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) => {
            if x.status != c.status {
                x.status = c.status;
                x.last_transition_time = c.last_transition_time;
            }
            x.reason = c.reason;
            x.message = c.message;
            x.observed_generation = c.observed_generation;
        }
        None => {
            c.last_transition_time = c.last_transition_time.clone();
            conditions.push(c);
        }
    }
}

fn allowed_condition(
    status: &PodDisruptionBudgetStatus,
    reason: &str,
    message: String,
    now: Timestamp,
) -> Condition {
    let ok = reason == "SufficientPods";
    Condition {
        type_: "DisruptionAllowed".into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        observed_generation: status.observed_generation,
        last_transition_time: Time(Timestamp::from_second(now.as_second()).unwrap_or(now)),
    }
}

/// `pdbhelper.ConditionsAreUpToDate`.
fn conditions_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = &pdb.status else {
        return false;
    };
    let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed")
    else {
        return false;
    };
    if status.observed_generation != pdb.metadata.generation {
        return false;
    }
    if status.disruptions_allowed.unwrap_or(0) > 0 {
        c.status == "True" && c.reason == "SufficientPods"
    } else {
        c.status == "False" && c.reason == "InsufficientPods"
    }
}

/// The pods a PDB selects (`getPodsForPdb`, by `LabelSelectorAsSelector`: nil selects none),
/// copied out of `pods` (owned, or the cache's `Arc`s).
pub fn pods_for<P: Borrow<Pod>>(pdb: &PodDisruptionBudget, pods: &[P]) -> Vec<Pod> {
    let selects = selector_of(pdb);
    pods.iter()
        .map(Borrow::borrow)
        .filter(|p| selects(p))
        .cloned()
        .collect()
}

/// Whether a pod is one `pdb` selects: in its namespace and matched by its label selector.
fn selector_of(pdb: &PodDisruptionBudget) -> impl Fn(&Pod) -> bool {
    let selector = pdb
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| serde_json::to_value(s).ok());
    let ns = pdb.namespace();
    move |p: &Pod| {
        p.namespace() == ns && {
            let labels = serde_json::to_value(&p.metadata.labels).ok();
            selector_object_matches(selector.as_ref(), labels.as_ref()) == Some(true)
        }
    }
}

/// `stalePodDisruptionTimeout`: after this, a `DisruptionTarget=True` condition on a pod that is
/// not terminating is reset to False.
pub const STALE_POD_DISRUPTION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// `nonTerminatingPodHasStaleDisruptionCondition`: `None` when the pod has no condition to reset
/// (none, not True, set by the kubelet, or the pod deleting or terminal); else when to reset it.
pub fn stale_disruption_target(pod: &Pod) -> Option<Timestamp> {
    if deleting(pod) {
        return None;
    }
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let c = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")?;
    if c.status != "True" || c.reason.as_deref() == Some("TerminationByKubelet") {
        return None;
    }
    let since = c
        .last_transition_time
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    Some(
        since
            .saturating_add(STALE_POD_DISRUPTION_TIMEOUT)
            .unwrap_or(since),
    )
}

/// `syncStalePodDisruption`: the condition becomes `DisruptionTarget=False` (no reason or
/// message, `lastTransitionTime` now), as `apipod.UpdatePodCondition` writes it.
pub fn reset_disruption_target(pod: &mut Pod, now: Timestamp) {
    let now = Time(Timestamp::from_second(now.as_second()).unwrap_or(now));
    if let Some(c) = pod
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| cs.iter_mut().find(|c| c.type_ == "DisruptionTarget"))
    {
        *c = k8s_openapi::api::core::v1::PodCondition {
            type_: "DisruptionTarget".into(),
            status: "False".into(),
            last_transition_time: Some(now),
            ..Default::default()
        };
    }
}

/// `getPdbForPod`'s Warning for pods several PDBs select: `(pod index, message)`; the first PDB
/// by name is the one "chosen" (a lister's order is unspecified).
pub fn multiple_budgets<P: Borrow<Pod>>(
    pdbs: &[PodDisruptionBudget],
    pods: &[P],
) -> Vec<(usize, String)> {
    let mut names: Vec<Vec<String>> = vec![vec![]; pods.len()];
    let mut sorted: Vec<&PodDisruptionBudget> = pdbs.iter().collect();
    sorted.sort_by_key(|p| (p.namespace(), p.name_any()));
    for pdb in sorted {
        let selects = selector_of(pdb);
        for (i, pod) in pods.iter().enumerate() {
            if selects(pod.borrow()) {
                names[i].push(pdb.name_any());
            }
        }
    }
    names
        .into_iter()
        .enumerate()
        .filter(|(_, n)| n.len() > 1)
        .map(|(i, n)| {
            let pod: &Pod = pods[i].borrow();
            (
                i,
                format!(
                    "Pod {:?}/{:?} matches multiple PodDisruptionBudgets.  Chose {:?} arbitrarily.",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any(),
                    n[0]
                ),
            )
        })
        .collect()
}

/// One PDB's sync (`trySync`, and `failSafe` when it fails). `pods` are the pods the PDB
/// selects.
pub fn decide(pdb: &PodDisruptionBudget, pods: &[Pod], w: &Workloads, now: Timestamp) -> Decision {
    let mut notes = vec![];
    if pods.is_empty() {
        notes.push(Note {
            pod: None,
            type_: "Normal",
            reason: "NoPods",
            message: "No matching pods found".into(),
        });
    }
    let old = pdb.status.clone().unwrap_or_default();
    let (expected, desired, unmanaged) = match expected_pod_count(pdb, pods, w) {
        Ok(x) => x,
        Err(e) => {
            notes.push(Note {
                pod: None,
                type_: "Warning",
                reason: "CalculateExpectedPodCountFailed",
                message: format!("Failed to calculate the number of expected pods: {e}"),
            });
            let mut status = old.clone();
            status.disruptions_allowed = Some(0);
            let mut conditions = status.conditions.take().unwrap_or_default();
            set_condition(
                &mut conditions,
                allowed_condition(&status, "SyncFailed", e.clone(), now),
            );
            status.conditions = Some(conditions);
            return Decision {
                status: (status != old).then_some(status),
                notes,
                recheck_at: None,
                failed: Some(e),
            };
        }
    };
    if !unmanaged.is_empty() {
        notes.push(Note {
            pod: None,
            type_: "Warning",
            reason: "UnmanagedPods",
            message: format!(
                "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.",
                pdb.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .and_then(|s| serde_json::to_string(s).ok())
                    .unwrap_or_default()
            ),
        });
    }
    let (disrupted, recheck_at, expired) = disrupted_pod_map(pdb, pods, now);
    notes.extend(expired);
    let healthy = count_healthy(pods, &disrupted, now);
    let allowed = if expected <= 0 || healthy - desired <= 0 {
        0
    } else {
        healthy - desired
    };
    let old_disrupted = old.disrupted_pods.clone().unwrap_or_default();
    let up_to_date = old.current_healthy == Some(healthy)
        && old.desired_healthy == Some(desired)
        && old.expected_pods == Some(expected)
        && old.disruptions_allowed == Some(allowed)
        && old_disrupted == disrupted
        && old.observed_generation == pdb.metadata.generation
        && conditions_up_to_date(pdb);
    if up_to_date {
        return Decision {
            status: None,
            notes,
            recheck_at,
            failed: None,
        };
    }
    let mut status = PodDisruptionBudgetStatus {
        current_healthy: Some(healthy),
        desired_healthy: Some(desired),
        expected_pods: Some(expected),
        disruptions_allowed: Some(allowed),
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        observed_generation: pdb.metadata.generation,
        conditions: None,
    };
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let reason = if allowed > 0 {
        "SufficientPods"
    } else {
        "InsufficientPods"
    };
    set_condition(
        &mut conditions,
        allowed_condition(&status, reason, String::new(), now),
    );
    status.conditions = Some(conditions);
    Decision {
        status: Some(status),
        notes,
        recheck_at,
        failed: None,
    }
}

/// The controller's knobs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Reaction lag: after a change, the controller waits this long before it syncs (its
    /// informers' and queue's delay). A PDB's status therefore trails the pods by about this.
    pub lag: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lag: Duration::from_millis(100),
        }
    }
}

/// The disruption controller's failing steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status of PodDisruptionBudget {namespace}/{name}: {source}")]
    WriteStatus {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

/// The `scale` finder's IO: RESTMapper through discovery, GET `.../scale`, and on 404 whether the
/// resource implements `scale` at all (`implementsScale`).
async fn scale_answer(client: &Client, ns: &str, r: &OwnerReference) -> ScaleAnswer {
    let (plural, _) = match support::rest_mapping(client, &r.api_version, &r.kind).await {
        Ok(m) => m,
        Err(e) => return ScaleAnswer::Error(e),
    };
    let group = group_of(&r.api_version);
    let prefix = if group.is_empty() {
        format!("/api/{}", r.api_version)
    } else {
        format!("/apis/{}", r.api_version)
    };
    let url = format!("{prefix}/namespaces/{ns}/{plural}/{}/scale", r.name);
    let req = match http::Request::get(url).body(Vec::new()) {
        Ok(r) => r,
        Err(e) => return ScaleAnswer::Error(e.to_string()),
    };
    match client
        .request::<k8s_openapi::api::autoscaling::v1::Scale>(req)
        .await
    {
        Ok(s) => ScaleAnswer::Scale {
            uid: s.metadata.uid.unwrap_or_default(),
            replicas: s.spec.and_then(|s| s.replicas).unwrap_or(0),
        },
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let implements = support::resources(client, &r.api_version)
                .await
                .map(|l| {
                    l.resources
                        .iter()
                        .any(|x| x.name == format!("{plural}/scale"))
                })
                .unwrap_or(false);
            if implements {
                ScaleAnswer::NotFound
            } else {
                let gr = if group.is_empty() {
                    plural
                } else {
                    format!("{plural}.{group}")
                };
                ScaleAnswer::Error(format!("{gr} does not implement the scale subresource"))
            }
        }
        Err(e) => ScaleAnswer::Error(e.to_string()),
    }
}

/// Runs the disruption controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) -> Result<(), Error> {
    let mut c = Caches::default();
    let actor = Controller {
        pods: c.all(&client),
        pdbs: c.all(&client),
        replicasets: c.all(&client),
        deployments: c.all(&client),
        statefulsets: c.all(&client),
        recorder: Recorder::new(client.clone(), clock.clone(), "controllermanager"),
        client,
    };
    support::run(actor, c, clock, config.lag, shutdown).await
}

struct Controller {
    client: Client,
    pods: Store<Pod>,
    pdbs: Store<PodDisruptionBudget>,
    replicasets: Store<ReplicaSet>,
    deployments: Store<Deployment>,
    statefulsets: Store<StatefulSet>,
    recorder: Recorder,
}

fn owned<K>(store: &Store<K>) -> Vec<K>
where
    K: kube::Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.sorted_state().iter().map(|o| (**o).clone()).collect()
}

impl Actor for Controller {
    type Error = Error;

    /// Syncs every PDB once; the earliest recheck time.
    async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Error> {
        let client = &self.client;
        let pdbs = owned(&self.pdbs);
        let mut recheck: Option<Timestamp> = None;
        for pod in self.pods.sorted_state() {
            let Some(at) = stale_disruption_target(&pod) else {
                continue;
            };
            if at > now {
                recheck = Some(recheck.map_or(at, |r| r.min(at)));
                continue;
            }
            let mut next = (*pod).clone();
            reset_disruption_target(&mut next, now);
            let api: Api<Pod> =
                Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
            match api
                .replace_status(&pod.name_any(), &PostParams::default(), &next)
                .await
            {
                Ok(written) => {
                    expect.written(&self.pods, &written);
                    tracing::info!(pod = %pod.name_any(), "disruption controller: reset a stale DisruptionTarget condition to False")
                }
                Err(e) => {
                    tracing::debug!(pod = %pod.name_any(), error = %e, "disruption controller: stale condition reset failed (next wake retries)")
                }
            }
        }
        if pdbs.is_empty() {
            return Ok(recheck.map(|t| t + Duration::from_millis(1)));
        }
        // the cache's own pods: a pass runs on every pod change and copies only the pods each
        // PDB selects
        let pods = self.pods.sorted_state();
        let mut w = Workloads {
            replicasets: owned(&self.replicasets),
            deployments: owned(&self.deployments),
            statefulsets: owned(&self.statefulsets),
            scales: BTreeMap::new(),
        };
        for (i, message) in multiple_budgets(&pdbs, &pods) {
            self.recorder
                .publish(
                    support::reference(&*pods[i]),
                    "Warning",
                    "MultiplePodDisruptionBudgets",
                    &message,
                )
                .await;
        }
        for pdb in &pdbs {
            let ns = pdb.namespace().unwrap_or_default();
            let selected = pods_for(pdb, &pods);
            for pod in &selected {
                if let Some(r) = controller_of(&pod.metadata) {
                    let key = (
                        ns.clone(),
                        r.api_version.clone(),
                        r.kind.clone(),
                        r.name.clone(),
                    );
                    let typed = matches!(controller_scale(r, &ns, &w), Ok(Some(_)));
                    if !typed && !w.scales.contains_key(&key) {
                        let answer = scale_answer(client, &ns, r).await;
                        w.scales.insert(key, answer);
                    }
                }
            }
            let d = decide(pdb, &selected, &w, now);
            for n in &d.notes {
                let on = match &n.pod {
                    Some(p) => match selected.iter().find(|x| x.name_any() == *p) {
                        Some(pod) => support::reference(pod),
                        None => continue,
                    },
                    None => support::reference(pdb),
                };
                self.recorder
                    .publish(on, n.type_, n.reason, &n.message)
                    .await;
            }
            if let Some(e) = &d.failed {
                tracing::info!(pdb = %pdb.name_any(), namespace = %ns, error = %e, "disruption controller: failSafe");
            }
            if let Some(status) = d.status {
                let mut next = pdb.clone();
                next.status = Some(status);
                let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
                match api
                    .replace_status(&pdb.name_any(), &PostParams::default(), &next)
                    .await
                {
                    Ok(written) => expect.written(&self.pdbs, &written),
                    // a 409 requeues without failSafe: the next wake reads the newer PDB
                    Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                        recheck = Some(now);
                        continue;
                    }
                    Err(source) => {
                        return Err(Error::WriteStatus {
                            namespace: ns,
                            name: pdb.name_any(),
                            source,
                        });
                    }
                }
            }
            if let Some(at) = d.recheck_at {
                recheck = Some(recheck.map_or(at, |r| r.min(at)));
            }
        }
        Ok(recheck.map(|t| t + Duration::from_millis(1)))
    }
}

super::spawn_on_sim!(
    /// Starts the disruption controller on this cluster (until the handle is aborted or the runtime ends).
    spawn_disruption_controller
);

#[cfg(test)]
mod tests;
