//! The pod-level gate (pure): a scheduling gate on every pod an opted-in RayService's children
//! create, and the ungater's decision of which gated pods may be scheduled.
//!
//! The child-level suspend holds a whole child that no admitted slice covers (a pending child has
//! no pods at all). It cannot hold the *growth* of a child that runs: an autoscaler scale-up
//! creates pods at once. So raygate also puts [`POD_GATE`] on the head and worker templates of
//! `spec.rayClusterConfig` (and of the live children): KubeRay v1.7.0's child hash leaves
//! `schedulingGates` out (`utils.GenerateHashWithoutReplicasAndWorkersToDelete`), so this starts no
//! upgrade, and every pod any child creates is born gated. [`ungate`] then lifts the gate only
//! from pods the newest admitted slice grants, per KubeRay group and per-pod requests, oldest pods
//! first, never more than the granted count; pods beyond it stay gated until a replacement slice
//! is admitted.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{PodSchedulingGate, PodSpec};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::quantity::Resources;
use crate::slices::Grant;
use crate::types::ray::{RayCluster, RayClusterSpec, WAIT_GCS_READY_CONTAINER};

/// The scheduling gate raygate puts on the pods of opted-in RayServices (in both admission
/// modes: Kueue's `kueue.x-k8s.io/elastic-job` belongs to Kueue's own ungater).
pub const POD_GATE: &str = "raygate.io/quota";

fn has_gate(spec: Option<&PodSpec>) -> bool {
    spec.and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == POD_GATE))
}

fn with_gate(spec: Option<&PodSpec>) -> Vec<PodSchedulingGate> {
    let mut gates = spec
        .and_then(|s| s.scheduling_gates.clone())
        .unwrap_or_default();
    if !gates.iter().any(|g| g.name == POD_GATE) {
        gates.push(PodSchedulingGate {
            name: POD_GATE.into(),
        });
    }
    gates
}

/// Whether every pod template of `spec` (head and worker groups) carries [`POD_GATE`].
pub fn templates_gated(spec: &RayClusterSpec) -> bool {
    has_gate(spec.head_group_spec.template.spec.as_ref())
        && spec
            .worker_group_specs
            .iter()
            .flatten()
            .all(|g| has_gate(g.template.spec.as_ref()))
}

/// The merge patch of a `RayClusterSpec` that adds [`POD_GATE`] to every pod template, keeping
/// other gates; `None` when all carry it. The worker groups are a list, which a merge patch
/// replaces whole: the patch must be sent with the `resourceVersion` it was computed from.
pub fn gate_templates_patch(spec: &RayClusterSpec) -> Option<Value> {
    if templates_gated(spec) {
        return None;
    }
    let mut groups = spec.worker_group_specs.clone();
    for g in groups.iter_mut().flatten() {
        let gates = with_gate(g.template.spec.as_ref());
        g.template
            .spec
            .get_or_insert_with(Default::default)
            .scheduling_gates = Some(gates);
    }
    let head = with_gate(spec.head_group_spec.template.spec.as_ref());
    Some(json!({
        "headGroupSpec": {"template": {"spec": {"schedulingGates": head}}},
        "workerGroupSpecs": groups,
    }))
}

/// The [`gate_templates_patch`] of a child RayCluster, with its `resourceVersion`.
pub fn child_patch(child: &RayCluster) -> Option<Value> {
    gate_templates_patch(&child.spec).map(|spec| {
        json!({
            "metadata": {"resourceVersion": child.metadata.resource_version},
            "spec": spec,
        })
    })
}

/// `spec`'s scheduling gates without [`POD_GATE`] (`None` when none is left).
fn without_gate(spec: Option<&PodSpec>) -> Option<Vec<PodSchedulingGate>> {
    let kept: Vec<PodSchedulingGate> = spec
        .and_then(|s| s.scheduling_gates.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|g| g.name != POD_GATE)
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// Whether any pod template of `spec` (head or worker group) carries [`POD_GATE`].
pub fn any_template_gated(spec: &RayClusterSpec) -> bool {
    has_gate(spec.head_group_spec.template.spec.as_ref())
        || spec
            .worker_group_specs
            .iter()
            .flatten()
            .any(|g| has_gate(g.template.spec.as_ref()))
}

/// The merge patch of a `RayClusterSpec` that removes [`POD_GATE`] from every pod template,
/// keeping other gates; `None` when none carries it. Like [`gate_templates_patch`] it replaces
/// the worker groups whole: send it with the `resourceVersion` it was computed from.
pub fn ungate_templates_patch(spec: &RayClusterSpec) -> Option<Value> {
    if !any_template_gated(spec) {
        return None;
    }
    let mut groups = spec.worker_group_specs.clone();
    for g in groups.iter_mut().flatten() {
        if let Some(pod) = g.template.spec.as_mut() {
            pod.scheduling_gates = without_gate(Some(pod));
        }
    }
    let head = without_gate(spec.head_group_spec.template.spec.as_ref());
    Some(json!({
        "headGroupSpec": {"template": {"spec": {"schedulingGates": head}}},
        "workerGroupSpecs": groups,
    }))
}

/// The [`ungate_templates_patch`] of a child RayCluster, with its `resourceVersion`.
pub fn child_ungate_patch(child: &RayCluster) -> Option<Value> {
    ungate_templates_patch(&child.spec).map(|spec| {
        json!({
            "metadata": {"resourceVersion": child.metadata.resource_version},
            "spec": spec,
        })
    })
}

/// One pod of a child RayCluster, as the ungater sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    pub name: String,
    /// `ray.io/group`: `headgroup` or the worker group name.
    pub group: String,
    pub requests: Resources,
    pub created: Timestamp,
    /// Carries [`POD_GATE`].
    pub gated: bool,
    /// Succeeded or Failed: holds nothing. (A terminating pod still holds its node until it is
    /// gone, so it counts.)
    pub finished: bool,
    /// Its `deletionTimestamp`: when its grace period ends (`None`: not being deleted).
    pub deleted_at: Option<Timestamp>,
}

/// The pods to ungate: per (group, per-pod requests), the granted count minus the ungated pods
/// that still hold resources, taken from the gated pods oldest first (then by name). Pods whose
/// shape no grant names stay gated.
pub fn ungate(grants: &[Grant], pods: &[PodView]) -> Vec<String> {
    // several PodSets of one shape (e.g. split by placement) pool their counts
    let mut pools: Vec<(&str, &Resources, i64)> = Vec::new();
    for g in grants {
        match pools
            .iter_mut()
            .find(|(group, req, _)| *group == g.group && **req == g.requests)
        {
            Some(pool) => pool.2 += i64::from(g.count.max(0)),
            None => pools.push((&g.group, &g.requests, i64::from(g.count.max(0)))),
        }
    }
    let mut out = Vec::new();
    for (group, requests, count) in pools {
        let of_shape = || {
            pods.iter()
                .filter(move |p| !p.finished && p.group == group && p.requests == *requests)
        };
        let holding = of_shape().filter(|p| !p.gated).count() as i64;
        let room = usize::try_from(count - holding).unwrap_or(0);
        let mut waiting: Vec<&PodView> = of_shape().filter(|p| p.gated).collect();
        waiting.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
        out.extend(waiting.into_iter().take(room).map(|p| p.name.clone()));
    }
    out
}

/// Each child's per-pod requests by KubeRay group, `(cluster, group)`, as its slices charge them
/// (its templates, with KubeRay's autoscaler sidecar on the head: [`crate::podsets::of_child`]). A pod
/// is matched to the grants by its child and group, not by its own requests: KubeRay's worker
/// init container (`wait-gcs-ready`, 200m / 256Mi in v1.7.0's `common/pod.go`), LimitRange
/// defaults, RuntimeClass overhead or an injected sidecar change those, and Kueue's RayCluster
/// integration charges the templates too (`BuildPodSets`). A child whose PodSets cannot be
/// computed adds nothing (its pods are then matched by their own requests).
pub fn template_requests<'a>(
    children: impl IntoIterator<Item = &'a RayCluster>,
) -> HashMap<(String, String), Resources> {
    let mut out = HashMap::new();
    for child in children {
        let name = child.metadata.name.clone().unwrap_or_default();
        let Ok(podsets) = crate::podsets::of_child(child, &name) else {
            continue;
        };
        for p in podsets {
            out.insert((name.clone(), p.group), p.requests);
        }
    }
    out
}

/// A pod's spec without what KubeRay adds to its template when it builds the pod (the
/// `wait-gcs-ready` init container), for a pod whose child, and so whose template, is gone.
/// What a LimitRange, a RuntimeClass or a webhook added stays: such a pod of a deleted child may
/// match no PodSet and its quota is then freed before it is gone.
pub fn as_templated(spec: &PodSpec) -> PodSpec {
    let mut spec = spec.clone();
    if let Some(init) = spec.init_containers.as_mut() {
        init.retain(|c| c.name != WAIT_GCS_READY_CONTAINER);
        if init.is_empty() {
            spec.init_containers = None;
        }
    }
    spec
}

/// Counts of pods per state for a trace line: (gated, ungated and holding).
pub fn census(pods: &[PodView]) -> BTreeMap<&'static str, usize> {
    let live = pods.iter().filter(|p| !p.finished);
    let gated = live.clone().filter(|p| p.gated).count();
    BTreeMap::from([("gated", gated), ("running", live.count() - gated)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;
    use proptest::prelude::*;

    fn cpu(n: i64) -> Resources {
        let mut r = Resources::new();
        r.set("cpu", Quantity::from_units(n));
        r
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    fn pod(name: &str, group: &str, cpus: i64, created: i64, gated: bool) -> PodView {
        PodView {
            name: name.into(),
            group: group.into(),
            requests: cpu(cpus),
            created: at(created),
            gated,
            finished: false,
            deleted_at: None,
        }
    }

    fn grant(group: &str, cpus: i64, count: i32) -> Grant {
        Grant {
            group: group.into(),
            requests: cpu(cpus),
            count,
        }
    }

    #[test]
    fn scale_up_beyond_the_grant_ungates_only_the_oldest_up_to_the_granted_count() {
        // granted 4 workers; 2 run, 3 new ones are gated: only the 2 oldest go
        let pods = [
            pod("w-a", "gpu", 8, 0, false),
            pod("w-b", "gpu", 8, 0, false),
            pod("w-e", "gpu", 8, 30, true),
            pod("w-c", "gpu", 8, 10, true),
            pod("w-d", "gpu", 8, 10, true),
        ];
        assert_eq!(ungate(&[grant("gpu", 8, 4)], &pods), ["w-c", "w-d"]);
        // the replacement slice admitted with 5: the last one goes
        let after: Vec<PodView> = pods
            .iter()
            .map(|p| PodView {
                gated: p.name == "w-e",
                ..p.clone()
            })
            .collect();
        assert_eq!(ungate(&[grant("gpu", 8, 5)], &after), ["w-e"]);
        assert!(ungate(&[grant("gpu", 8, 4)], &after).is_empty());
    }

    #[test]
    fn shapes_are_kept_apart_and_an_unknown_shape_stays_gated() {
        let pods = [
            pod("head", "headgroup", 2, 0, true),
            pod("old", "gpu", 8, 0, true),
            pod("new", "gpu", 16, 0, true),
            pod("other", "cpu", 1, 0, true),
        ];
        let grants = [grant("headgroup", 2, 1), grant("gpu", 16, 1)];
        assert_eq!(ungate(&grants, &pods), ["head", "new"]);
    }

    #[test]
    fn terminating_pods_hold_their_grant_and_finished_ones_do_not() {
        let mut leaving = pod("leaving", "gpu", 8, 0, false);
        let waiting = pod("waiting", "gpu", 8, 5, true);
        assert!(ungate(&[grant("gpu", 8, 1)], &[leaving.clone(), waiting.clone()]).is_empty());
        leaving.finished = true;
        assert_eq!(
            ungate(&[grant("gpu", 8, 1)], &[leaving, waiting]),
            ["waiting"]
        );
    }

    #[test]
    fn the_template_patch_adds_the_gate_once_and_keeps_other_gates() {
        let spec: RayClusterSpec = serde_json::from_value(json!({
            "headGroupSpec": {"template": {"spec": {"containers": []}}},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "template": {"spec": {
                "containers": [], "schedulingGates": [{"name": "example.com/other"}]}}}]
        }))
        .unwrap();
        let patch = gate_templates_patch(&spec).unwrap();
        assert_eq!(
            patch["headGroupSpec"]["template"]["spec"]["schedulingGates"],
            json!([{"name": POD_GATE}])
        );
        assert_eq!(
            patch["workerGroupSpecs"][0]["template"]["spec"]["schedulingGates"],
            json!([{"name": "example.com/other"}, {"name": POD_GATE}])
        );
        assert_eq!(patch["workerGroupSpecs"][0]["replicas"], json!(2));
        let mut v = serde_json::to_value(&spec).unwrap();
        v["headGroupSpec"]["template"]["spec"]["schedulingGates"] =
            patch["headGroupSpec"]["template"]["spec"]["schedulingGates"].clone();
        v["workerGroupSpecs"] = patch["workerGroupSpecs"].clone();
        let gated: RayClusterSpec = serde_json::from_value(v).unwrap();
        assert!(templates_gated(&gated));
        assert_eq!(gate_templates_patch(&gated), None);
    }

    #[test]
    fn the_ungate_patch_removes_only_raygate_s_gate_from_every_template() {
        let spec: RayClusterSpec = serde_json::from_value(json!({
            "headGroupSpec": {"template": {"spec": {"containers": [],
                "schedulingGates": [{"name": POD_GATE}]}}},
            "workerGroupSpecs": [
                {"groupName": "w", "replicas": 2, "template": {"spec": {"containers": [],
                    "schedulingGates": [{"name": "example.com/other"}, {"name": POD_GATE}]}}},
                {"groupName": "v", "replicas": 1, "template": {"spec": {"containers": [],
                    "schedulingGates": [{"name": POD_GATE}]}}}]
        }))
        .unwrap();
        let patch = ungate_templates_patch(&spec).unwrap();
        // null removes the head's list; the worker groups are sent whole, other gates kept
        assert_eq!(
            patch["headGroupSpec"]["template"]["spec"]["schedulingGates"],
            Value::Null
        );
        assert_eq!(
            patch["workerGroupSpecs"][0]["template"]["spec"]["schedulingGates"],
            json!([{"name": "example.com/other"}])
        );
        assert_eq!(patch["workerGroupSpecs"][0]["replicas"], json!(2));
        assert!(
            patch["workerGroupSpecs"][1]["template"]["spec"]
                .get("schedulingGates")
                .is_none()
        );
        let mut v = serde_json::to_value(&spec).unwrap();
        v["headGroupSpec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("schedulingGates");
        v["workerGroupSpecs"] = patch["workerGroupSpecs"].clone();
        let ungated: RayClusterSpec = serde_json::from_value(v).unwrap();
        assert!(!any_template_gated(&ungated));
        assert_eq!(ungate_templates_patch(&ungated), None);
        // the gate on one worker template only is found too
        assert!(any_template_gated(&spec));
    }

    fn arb_pods() -> impl Strategy<Value = Vec<PodView>> {
        prop::collection::vec(
            (0usize..3, 1i64..3, 0i64..100, any::<bool>(), any::<bool>()),
            0..24,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (g, c, t, gated, finished))| PodView {
                    finished,
                    deleted_at: None,
                    ..pod(&format!("p{i:02}"), ["headgroup", "a", "b"][g], c, t, gated)
                })
                .collect()
        })
    }

    proptest! {
        /// Never more pods hold a shape than granted (unless already so before), only gated pods
        /// of granted shapes are picked, each gated pod left waiting is no older than every one
        /// picked of its shape, and a second pass over the result picks nothing.
        #[test]
        fn never_more_than_granted_oldest_first_and_idempotent(
            pods in arb_pods(),
            counts in prop::collection::vec(0i32..6, 3),
        ) {
            let grants: Vec<Grant> = ["headgroup", "a", "b"]
                .iter()
                .zip(&counts)
                .map(|(g, n)| grant(g, 1, *n))
                .collect();
            let picked = ungate(&grants, &pods);
            let after: Vec<PodView> = pods
                .iter()
                .map(|p| PodView { gated: p.gated && !picked.contains(&p.name), ..p.clone() })
                .collect();
            for g in &grants {
                let holding = |ps: &[PodView]| ps
                    .iter()
                    .filter(|p| !p.finished && !p.gated && p.group == g.group && p.requests == g.requests)
                    .count() as i32;
                let before = holding(&pods);
                prop_assert!(holding(&after) <= g.count.max(before));
                let chosen: Vec<&PodView> = pods.iter().filter(|p| picked.contains(&p.name) && p.group == g.group && p.requests == g.requests).collect();
                for left in after.iter().filter(|p| p.gated && !p.finished && p.group == g.group && p.requests == g.requests) {
                    for c in &chosen {
                        prop_assert!((c.created, &c.name) <= (left.created, &left.name));
                    }
                }
            }
            for name in &picked {
                let p = pods.iter().find(|p| &p.name == name).unwrap();
                prop_assert!(p.gated && !p.finished && p.requests == cpu(1));
            }
            prop_assert!(ungate(&grants, &after).is_empty());
        }
    }
}
