//! Coverage that must not lapse (builtin admission): a reserved slice deleted under a running child.
//!
//! Deleting the Workload that covers a running child frees its quota at once, while the child
//! keeps running (raygate never stops a released child for a missing slice). So the admission
//! loop remembers the reserved slices it saw; one that vanished (deleted, not finished) while a
//! child of its RayService runs and no other slice of that RayService holds quota is kept in
//! the admission snapshot as a *stand-in*, holding what it held, and the RayService's pending
//! slice is charged as its replacement (only its delta): nothing else is admitted into the quota
//! the child still uses, and the child's new slice is admitted into it. The stand-in goes once a
//! slice of the RayService holds quota again, or no child runs.

use std::collections::{BTreeMap, BTreeSet};

use super::RAYSERVICE_LABEL;
use crate::meta;
use crate::types::kueue::{WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION, Workload};
use crate::types::ray::RayCluster;
use crate::workload;

/// Suffix of a stand-in's name in the snapshot (a new slice may reuse the deleted one's name).
pub const STAND_IN_SUFFIX: &str = ".lapsed";

/// A reserved slice that vanished under running children.
#[derive(Clone, Debug, PartialEq)]
pub struct Lapsed {
    /// The deleted Workload, as last seen.
    pub deleted: Workload,
    /// Its RayService's running children.
    pub children: Vec<String>,
}

impl Lapsed {
    /// The stand-in's key in the snapshot (`namespace/name.lapsed`).
    pub fn stand_in_key(&self) -> String {
        format!("{}{STAND_IN_SUFFIX}", meta::key(&self.deleted.metadata))
    }

    /// The RayService (`namespace`, `name`) the deleted slice belonged to.
    pub fn service(&self) -> (String, String) {
        owner(&self.deleted).unwrap_or_default()
    }
}

/// The RayService a raygate slice belongs to.
fn owner(w: &Workload) -> Option<(String, String)> {
    let name = meta::label(&w.metadata, RAYSERVICE_LABEL)?;
    Some((w.metadata.namespace.clone()?, name.to_string()))
}

/// The running children (unsuspended, not being deleted) of each RayService.
fn running(clusters: &[RayCluster]) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for c in clusters
        .iter()
        .filter(|c| c.spec.suspend != Some(true) && c.metadata.deletion_timestamp.is_none())
    {
        if let (Some(ns), Some(service)) =
            (&c.metadata.namespace, meta::owning_rayservice(&c.metadata))
        {
            out.entry((ns.clone(), service.to_string()))
                .or_default()
                .push(meta::name(&c.metadata));
        }
    }
    out
}

/// Brings `remembered` up to [`remember`]'s answer, copying only the slices that changed (a
/// slice whose resourceVersion is the one remembered keeps its copy).
pub fn remember_into(
    remembered: &mut BTreeMap<String, Workload>,
    workloads: &[Workload],
    lapsed: &[Lapsed],
) {
    let mut next = BTreeMap::new();
    let kept = workloads
        .iter()
        .filter(|w| owner(w).is_some() && workload::holds_quota(w.status.as_ref()))
        .chain(lapsed.iter().map(|l| &l.deleted));
    for w in kept {
        let Some(uid) = w.metadata.uid.as_deref() else {
            continue;
        };
        let copy = match remembered.remove(uid) {
            Some(old) if old.metadata.resource_version == w.metadata.resource_version => old,
            _ => w.clone(),
        };
        next.insert(uid.to_string(), copy);
    }
    *remembered = next;
}

/// What to remember for the next cycle: the reserved raygate slices of this one (by uid), and
/// the lapsed ones still standing in.
pub fn remember(workloads: &[Workload], lapsed: &[Lapsed]) -> BTreeMap<String, Workload> {
    let mut remembered = BTreeMap::new();
    remember_into(&mut remembered, workloads, lapsed);
    remembered
}

/// The remembered slices that lapsed: gone from `workloads` (by uid), their RayService with
/// running children and no slice holding quota.
pub fn lapsed(
    remembered: &BTreeMap<String, Workload>,
    workloads: &[Workload],
    clusters: &[RayCluster],
) -> Vec<Lapsed> {
    let present: BTreeSet<&str> = workloads
        .iter()
        .filter_map(|w| w.metadata.uid.as_deref())
        .collect();
    let covered: BTreeSet<(String, String)> = workloads
        .iter()
        .filter(|w| workload::holds_quota(w.status.as_ref()))
        .filter_map(owner)
        .collect();
    let running = running(clusters);
    remembered
        .iter()
        .filter(|(uid, _)| !present.contains(uid.as_str()))
        .filter_map(|(_, w)| {
            let service = owner(w)?;
            let children = running.get(&service)?;
            (!covered.contains(&service)).then(|| Lapsed {
                deleted: w.clone(),
                children: children.clone(),
            })
        })
        .collect()
}

/// Adds the stand-ins to `workloads` and makes each RayService's pending slices replacements of
/// its stand-in (in the snapshot only). Returns the stand-ins' keys.
pub fn stand_in(workloads: &mut Vec<Workload>, lapsed: &[Lapsed]) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for l in lapsed {
        let key = l.stand_in_key();
        let service = l.service();
        for w in workloads.iter_mut().filter(|w| {
            owner(w).as_ref() == Some(&service)
                && !workload::is_finished(w.status.as_ref())
                && !workload::holds_quota(w.status.as_ref())
        }) {
            w.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION.into(),
                    key.clone(),
                );
        }
        let mut s = l.deleted.clone();
        s.metadata.name = Some(format!(
            "{}{STAND_IN_SUFFIX}",
            meta::name(&l.deleted.metadata)
        ));
        s.metadata.uid = None;
        workloads.push(s);
        keys.insert(key);
    }
    keys
}

#[cfg(test)]
mod tests {
    use raygate_testing::{
        MetaBuilder, RayClusterBuilder, RayClusterSpecBuilder, WorkloadBuilder, admit_counts,
        podset, ray_cluster, workload,
    };

    use super::*;

    fn slice(name: &str, uid: &str, service: &str, reserved: bool) -> Workload {
        let mut w = workload(name)
            .in_namespace("ns")
            .uid(uid)
            .label(RAYSERVICE_LABEL, service)
            .podset(podset("head"));
        if reserved {
            admit_counts(&mut w);
        }
        w
    }

    fn child(name: &str, service: &str, suspend: bool) -> RayCluster {
        ray_cluster(name)
            .in_namespace("ns")
            .child_of(service)
            .suspend(suspend)
    }

    #[test]
    fn a_reserved_slice_deleted_under_a_running_child_stands_in_until_a_new_one_holds_quota() {
        let old = slice("s1", "u1", "svc", true);
        let remembered = remember(std::slice::from_ref(&old), &[]);
        let running = [child("svc-a", "svc", false)];
        // deleted; the gate's new slice (same name, new uid) is pending
        let mut now = vec![slice("s1", "u2", "svc", false)];
        let gone = lapsed(&remembered, &now, &running);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].children, ["svc-a"]);
        let keys = stand_in(&mut now, &gone);
        assert_eq!(keys, ["ns/s1.lapsed".to_string()].into());
        assert_eq!(
            workload::predecessor(&now[0]).as_deref(),
            Some("ns/s1.lapsed"),
            "the pending slice is charged as its replacement"
        );
        assert!(workload::holds_quota(now[1].status.as_ref()));
        // remembered across cycles while it lapses
        let remembered = remember(&now[..1], &gone);
        assert_eq!(lapsed(&remembered, &now[..1], &running).len(), 1);
        // the new slice holds quota: the stand-in goes
        let admitted = [slice("s1", "u2", "svc", true)];
        assert_eq!(lapsed(&remembered, &admitted, &running), []);
    }

    #[test]
    fn no_stand_in_without_a_running_child_or_for_a_finished_slice() {
        let remembered = remember(&[slice("s1", "u1", "svc", true)], &[]);
        assert_eq!(lapsed(&remembered, &[], &[]), []);
        assert_eq!(lapsed(&remembered, &[], &[child("svc-a", "svc", true)]), []);
        assert_eq!(lapsed(&remembered, &[], &[child("x-a", "x", false)]), []);
        let mut finished = slice("s2", "u2", "svc", true);
        raygate_testing::set_condition(&mut finished, "Finished", "True", "OutOfSync", "");
        assert!(remember(&[finished], &[]).is_empty());
    }
}
