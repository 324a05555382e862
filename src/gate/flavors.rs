//! Flavors reach the pods (pure): what Kueue v0.19's `podset.FromAssignment` + `podset.Merge`
//! (`RunWithPodSetsInfo`) do to a job's pod templates when it is admitted, for a child RayCluster
//! released against a slice.
//!
//! For each PodSet of the child, the flavors its slice PodSet was assigned (one per resource,
//! each counted once) give a node selector (the union of their `nodeLabels`) and tolerations
//! (their `tolerations`, without duplicates). They are merged into the group's pod template; a
//! node selector key the template already sets to another value is a conflict (Kueue:
//! `BadPodSetsUpdate`), and the child is not released. `nodeTaints` only steer flavor matching;
//! nothing of them reaches the pods. What was added is recorded on the child
//! ([`INJECTED_PLACEMENT_ANNOTATION`]) and left out of its PodSets, since placement is part of a
//! PodSet's shape: a released child must not look like a move to another pool.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PodSpec, Toleration};
use serde_json::{Value, json};

use super::{GateAction, GateDecision};
use crate::events::EventType;
use crate::podsets::{self, HEAD_GROUP, INJECTED_PLACEMENT_ANNOTATION, Injected, PodSet};
use crate::types::kueue::{ResourceFlavorSpec, Workload};
use crate::types::ray::RayCluster;

/// What a flavor assignment adds to one pod template.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlavorInfo {
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
}

/// `podset.FromAssignment`: the node selector and tolerations of the flavors assigned to the
/// slice PodSet `name`. Flavors unknown to `flavors` add nothing.
pub fn from_assignment(
    slice: &Workload,
    name: &str,
    flavors: &BTreeMap<String, ResourceFlavorSpec>,
) -> FlavorInfo {
    let mut info = FlavorInfo::default();
    let assigned: BTreeSet<&String> = slice
        .status
        .as_ref()
        .and_then(|s| s.admission.as_ref())
        .and_then(|a| a.pod_set_assignments.iter().find(|p| p.name == name))
        .map(|p| p.flavors.values().collect())
        .unwrap_or_default();
    for f in assigned {
        let Some(spec) = flavors.get(f) else {
            continue;
        };
        for (k, v) in spec.node_labels.iter().flatten() {
            info.node_selector.insert(k.clone(), v.clone());
        }
        for t in spec.tolerations.iter().flatten() {
            if !info.tolerations.contains(t) {
                info.tolerations.push(t.clone());
            }
        }
    }
    info
}

/// `podset.Merge` on a pod spec: `Err(key)` on a node selector conflict; otherwise what it
/// added (empty when the spec did not change).
pub fn merge(spec: &mut PodSpec, info: &FlavorInfo) -> Result<Injected, String> {
    let mut added = Injected::default();
    let selector = spec.node_selector.get_or_insert_with(Default::default);
    for (k, v) in &info.node_selector {
        match selector.get(k) {
            Some(old) if old == v => {}
            Some(old) => return Err(format!("nodeSelector {k}={old} (flavor wants {v})")),
            None => {
                selector.insert(k.clone(), v.clone());
                added.node_selector.insert(k.clone(), v.clone());
            }
        }
    }
    if selector.is_empty() {
        spec.node_selector = None;
    }
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for t in &info.tolerations {
        if !tolerations.contains(t) {
            tolerations.push(t.clone());
            added.tolerations.push(t.clone());
        }
    }
    if tolerations.is_empty() {
        spec.tolerations = None;
    }
    Ok(added)
}

/// The slice PodSet a child's PodSet is charged to: the same shape (group annotation, per-pod
/// requests, placement).
fn slice_podset<'a>(slice: &'a Workload, p: &PodSet) -> Option<&'a str> {
    slice
        .spec
        .pod_sets
        .iter()
        .find(|sp| crate::slices::shape(sp).is_some_and(|s| s.fits(p)))
        .map(|sp| sp.name.as_str())
}

/// The merge patch that puts the flavors of `slice` onto `child`'s pod templates (with the
/// child's resourceVersion as precondition: `workerGroupSpecs` is replaced whole) and records
/// what it added in [`INJECTED_PLACEMENT_ANNOTATION`] (so the child's PodSets stay the user's,
/// see [`podsets::of_child`]); `Ok(None)` when nothing changes, `Err` on a node selector conflict.
pub fn child_patch(
    child: &RayCluster,
    slice: &Workload,
    flavors: &BTreeMap<String, ResourceFlavorSpec>,
) -> Result<Option<Value>, String> {
    let obj = format!(
        "RayCluster {}",
        child.metadata.name.as_deref().unwrap_or_default()
    );
    let ps = podsets::of_child(child, &obj).map_err(|e| e.to_string())?;
    let info_for = |group: &str| -> FlavorInfo {
        ps.iter()
            .filter(|p| p.group == group)
            .find_map(|p| slice_podset(slice, p))
            .map(|name| from_assignment(slice, name, flavors))
            .unwrap_or_default()
    };
    let mut spec = child.spec.clone();
    let mut record = podsets::injected_record(child);
    let mut changed = false;
    let mut note = |group: &str, added: Injected| {
        if !added.is_empty() {
            changed = true;
            record.entry(group.to_string()).or_default().extend(&added);
        }
    };
    let head = spec
        .head_group_spec
        .template
        .spec
        .get_or_insert_with(Default::default);
    note(
        HEAD_GROUP,
        merge(head, &info_for(HEAD_GROUP)).map_err(|e| format!("{obj} head: {e}"))?,
    );
    for g in spec.worker_group_specs.iter_mut().flatten() {
        let info = info_for(&g.group_name);
        let pod = g.template.spec.get_or_insert_with(Default::default);
        let added = merge(pod, &info).map_err(|e| format!("{obj} group {}: {e}", g.group_name))?;
        note(&g.group_name, added);
    }
    if !changed {
        return Ok(None);
    }
    let record = serde_json::to_string(&record).map_err(|e| format!("{obj}: {e}"))?;
    let head_spec = spec.head_group_spec.template.spec.as_ref();
    Ok(Some(json!({
        "metadata": {
            "resourceVersion": child.metadata.resource_version,
            "annotations": {INJECTED_PLACEMENT_ANNOTATION: record},
        },
        "spec": {
            "headGroupSpec": {"template": {"spec": {
                "nodeSelector": head_spec.and_then(|s| s.node_selector.clone()),
                "tolerations": head_spec.and_then(|s| s.tolerations.clone()),
            }}},
            "workerGroupSpecs": spec.worker_group_specs,
        }
    })))
}

/// For [`super::decide`]: the [`child_patch`] action before a release; `false` (with a Warning
/// Event) when the flavors conflict with the child's node selector and it must stay held.
pub(super) fn before_release(
    child: &RayCluster,
    slice: &Workload,
    flavors: &BTreeMap<String, ResourceFlavorSpec>,
    d: &mut GateDecision,
) -> bool {
    let name = child.metadata.name.clone().unwrap_or_default();
    match child_patch(child, slice, flavors) {
        Ok(None) => true,
        Ok(Some(patch)) => {
            d.event(
                EventType::Normal,
                "FlavorsApplied",
                format!(
                    "set the node selector and tolerations of slice {}'s flavors on {name}'s pod templates",
                    slice.metadata.name.as_deref().unwrap_or_default()
                ),
                Some(&name),
            );
            d.actions
                .push(GateAction::PatchChild { child: name, patch });
            true
        }
        Err(e) => {
            d.event(
                EventType::Warning,
                "FlavorConflict",
                format!("holding {name}: the admitted flavors contradict its pod template: {e}"),
                Some(&name),
            );
            false
        }
    }
}

/// For [`super::decide`], on a running child raygate placed at its release (it carries
/// [`INJECTED_PLACEMENT_ANNOTATION`]): the covering slice's flavors kept on its pod templates, so
/// a worker group KubeRay appended in place, a template KubeRay rewrote (a KubeRay upgrade
/// rewrites the active cluster) and a PodSet a replacement slice admitted give new pods the
/// placement their grant was admitted on — as Kueue v0.19's elastic-job ungater brings a
/// scaled-up pod's admission to it. A conflict (a group already placed on another flavor) leaves
/// the templates as they are, with a Warning: the child runs on.
pub(super) fn keep_placement(
    child: &RayCluster,
    slice: &Workload,
    flavors: &BTreeMap<String, ResourceFlavorSpec>,
    d: &mut GateDecision,
) {
    if crate::meta::annotation(&child.metadata, INJECTED_PLACEMENT_ANNOTATION).is_none() {
        return;
    }
    let name = child.metadata.name.clone().unwrap_or_default();
    let slice_name = slice.metadata.name.as_deref().unwrap_or_default();
    match child_patch(child, slice, flavors) {
        Ok(None) => {}
        Ok(Some(patch)) => {
            d.event(
                EventType::Normal,
                "FlavorsApplied",
                format!(
                    "set the node selector and tolerations of slice {slice_name}'s flavors on running {name}'s pod templates that lacked them (a group added or rewritten in place)"
                ),
                Some(&name),
            );
            d.actions
                .push(GateAction::PatchChild { child: name, patch });
        }
        Err(e) => d.event(
            EventType::Warning,
            "FlavorConflict",
            format!(
                "{name} runs on, but its new pods keep their placement, not slice {slice_name}'s flavors: {e}"
            ),
            Some(&name),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::kueue::PodSetAssignment;
    use raygate_testing::{
        MetaBuilder, RayClusterSpecBuilder, WorkerGroupBuilder, WorkloadBuilder, admit_counts,
        ray_cluster, ray_pod, worker_group, workload,
    };

    /// Child `svc-a` (resourceVersion 7): a head and one worker group `gpu` whose pods carry
    /// `node_selector`, and a field raygate does not know (it must survive the patch).
    fn child(node_selector: &[(&str, &str)]) -> RayCluster {
        let mut pod = ray_pod("1");
        if let Some(spec) = pod.spec.as_mut().filter(|_| !node_selector.is_empty()) {
            spec.node_selector = Some(
                node_selector
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        let mut gpu = worker_group("gpu").replicas(1).template(pod);
        gpu.other.insert("unknownField".into(), json!("kept"));
        ray_cluster("svc-a")
            .in_namespace("ns")
            .resource_version("7")
            .suspend(true)
            .worker_group(gpu)
    }

    fn slice_for(c: &RayCluster, flavor_of: &[(&str, &str)]) -> Workload {
        let ps = podsets::of_cluster(&c.spec, None, "x", "spec").unwrap();
        let pod_sets: Vec<crate::types::kueue::PodSet> = ps
            .iter()
            .map(|p| {
                let mut t = p.template.clone();
                t.metadata
                    .get_or_insert_with(Default::default)
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(crate::slices::GROUP_ANNOTATION.into(), p.group.clone());
                crate::types::kueue::PodSet {
                    name: p.name.clone(),
                    template: t,
                    count: p.count,
                    min_count: None,
                }
            })
            .collect();
        let mut w = workload("s").in_namespace("ns").queue("q");
        w.spec.pod_sets = pod_sets;
        admit_counts(&mut w);
        let adm = w.status.as_mut().unwrap().admission.as_mut().unwrap();
        for a in &mut adm.pod_set_assignments {
            let f = flavor_of
                .iter()
                .find(|(n, _)| *n == a.name)
                .map(|(_, f)| f.to_string());
            if let Some(f) = f {
                *a = PodSetAssignment {
                    flavors: [("cpu".to_string(), f)].into(),
                    ..a.clone()
                };
            }
        }
        w
    }

    fn flavors() -> BTreeMap<String, ResourceFlavorSpec> {
        let spec = |v: Value| serde_json::from_value::<ResourceFlavorSpec>(v).unwrap();
        [
            ("default".to_string(), spec(json!({}))),
            (
                "h100".to_string(),
                spec(json!({"nodeLabels": {"pool": "h100"},
                    "nodeTaints": [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}],
                    "tolerations": [{"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}]})),
            ),
        ]
        .into()
    }

    #[test]
    fn the_flavor_s_node_labels_and_tolerations_reach_the_group_s_template() {
        let c = child(&[]);
        let w = slice_for(&c, &[("head", "default"), ("gpu", "h100")]);
        let patch = child_patch(&c, &w, &flavors()).unwrap().expect("a patch");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let g = &patch["spec"]["workerGroupSpecs"][0];
        assert_eq!(
            g["template"]["spec"]["nodeSelector"],
            json!({"pool": "h100"})
        );
        assert_eq!(
            g["template"]["spec"]["tolerations"],
            json!([{"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}])
        );
        assert_eq!(g["unknownField"], "kept", "the rest of the group is kept");
        assert_eq!(g["groupName"], "gpu");
        // the head's flavor has no labels: nothing there
        assert_eq!(
            patch["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"],
            Value::Null
        );
        // applied once, it is not applied again
        let done = patched(&c, &patch);
        assert_eq!(child_patch(&done, &w, &flavors()), Ok(None));
    }

    /// `child` with a [`child_patch`] merged in (the fields it sets).
    fn patched(child: &RayCluster, patch: &Value) -> RayCluster {
        let mut done = child.clone();
        let wg: Vec<crate::types::ray::WorkerGroupSpec> =
            serde_json::from_value(patch["spec"]["workerGroupSpecs"].clone()).unwrap();
        done.spec.worker_group_specs = Some(wg);
        let head: PodSpec = serde_json::from_value(json!({"containers": []})).unwrap();
        let head_patch = &patch["spec"]["headGroupSpec"]["template"]["spec"];
        let spec = done.spec.head_group_spec.template.spec.get_or_insert(head);
        spec.node_selector = serde_json::from_value(head_patch["nodeSelector"].clone()).unwrap();
        spec.tolerations = serde_json::from_value(head_patch["tolerations"].clone()).unwrap();
        for (k, v) in patch["metadata"]["annotations"]
            .as_object()
            .into_iter()
            .flatten()
        {
            done.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(k.clone(), v.as_str().unwrap().to_string());
        }
        done
    }

    /// Issue #9 (a): placement is part of a PodSet's shape, but what raygate injected is not
    /// the user's placement: a released child has the PodSets it had before its release, so
    /// its slice still covers it and no replacement is planned.
    #[test]
    fn a_released_child_s_injection_is_not_a_move_to_another_pool() {
        let mut c = child(&[]);
        let gpu = &mut c.spec.worker_group_specs.as_mut().unwrap()[0];
        gpu.template.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            key: Some("mine".into()),
            operator: Some("Exists".into()),
            ..Toleration::default()
        }]);
        let w = slice_for(&c, &[("head", "h100"), ("gpu", "h100")]);
        let patch = child_patch(&c, &w, &flavors()).unwrap().expect("a patch");
        let record: podsets::InjectedRecord = serde_json::from_str(
            patch["metadata"]["annotations"][INJECTED_PLACEMENT_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(record.len(), 2, "head and gpu: {record:?}");
        assert_eq!(record["gpu"].node_selector["pool"], "h100");
        assert_eq!(
            record["gpu"].tolerations.len(),
            1,
            "the user's own is not recorded"
        );
        let done = patched(&c, &patch);
        let raw = podsets::of_cluster(&done.spec, None, "x", "spec").unwrap();
        assert_eq!(
            raw[1].placement().node_selector["pool"],
            "h100",
            "the injection is on the child"
        );
        let before = podsets::of_child(&c, "x").unwrap();
        let after = podsets::of_child(&done, "x").unwrap();
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            assert!(b.same_shape(a), "{b:?} vs {a:?}");
        }
        assert!(crate::slices::covers(&w, &after));
        // a placement the user really changed is a new shape
        let mut moved = done.clone();
        let groups = moved.spec.worker_group_specs.as_mut().unwrap();
        groups[0]
            .template
            .spec
            .as_mut()
            .unwrap()
            .node_selector
            .get_or_insert_with(Default::default)
            .insert("zone".into(), "z2".into());
        let moved = podsets::of_child(&moved, "x").unwrap();
        assert!(!crate::slices::covers(&w, &moved));
    }

    /// A worker group KubeRay appends in place to a released child (or a template it rewrites)
    /// gets the covering slice's flavors; a child raygate never placed is left as it is.
    #[test]
    fn a_running_child_s_group_added_in_place_gets_its_flavors() {
        let c = child(&[]);
        let w = slice_for(&c, &[("head", "default"), ("gpu", "h100")]);
        let patch = child_patch(&c, &w, &flavors()).unwrap().expect("a patch");
        let mut placed = patched(&c, &patch);
        placed.spec.suspend = Some(false);
        let mut d = GateDecision::default();
        keep_placement(&placed, &w, &flavors(), &mut d);
        assert!(d.actions.is_empty(), "nothing to keep: {:?}", d.actions);
        // KubeRay appends group `gpu2` in place; the replacement slice admits it on h100
        let mut grown = placed.clone();
        let mut g2 = worker_group("gpu2").replicas(1).template(ray_pod("2"));
        g2.other.clear();
        grown.spec.worker_group_specs.as_mut().unwrap().push(g2);
        let w2 = slice_for(
            &grown,
            &[("head", "default"), ("gpu", "h100"), ("gpu2", "h100")],
        );
        let mut d = GateDecision::default();
        keep_placement(&grown, &w2, &flavors(), &mut d);
        let [GateAction::PatchChild { child, patch }] = &d.actions[..] else {
            panic!("one patch: {:?}", d.actions);
        };
        assert_eq!(child, "svc-a");
        assert_eq!(
            patch["spec"]["workerGroupSpecs"][1]["template"]["spec"]["nodeSelector"],
            json!({"pool": "h100"})
        );
        // a child raygate did not place (no record) is left alone
        let mut d = GateDecision::default();
        keep_placement(&c, &w2, &flavors(), &mut d);
        assert!(d.actions.is_empty());
    }

    #[test]
    fn a_flavor_without_labels_or_tolerations_changes_nothing() {
        let c = child(&[]);
        let w = slice_for(&c, &[("head", "default"), ("gpu", "default")]);
        assert_eq!(child_patch(&c, &w, &flavors()), Ok(None));
    }

    #[test]
    fn a_conflicting_node_selector_is_an_error_and_an_equal_one_is_kept() {
        let c = child(&[("pool", "a100")]);
        let w = slice_for(&c, &[("gpu", "h100")]);
        let e = child_patch(&c, &w, &flavors()).unwrap_err();
        assert!(e.contains("pool=a100"), "{e}");
        let c = child(&[("pool", "h100")]);
        let w = slice_for(&c, &[("gpu", "h100")]);
        let patch = child_patch(&c, &w, &flavors())
            .unwrap()
            .expect("tolerations");
        assert_eq!(
            patch["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"],
            json!({"pool": "h100"})
        );
    }
}
