//! A PDB's pods: which it selects, which are healthy, its `disruptedPods`, the stale
//! `DisruptionTarget` conditions to reset, and pods several PDBs select.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::{DELETION_TIMEOUT, Note};
use crate::server::selector::selector_object_matches;

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
