//! The admission loop's memory of reserved slices, so that a deleted one under a running child
//! stays charged ([`lapsed`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::core::v1::ObjectReference;

use super::Context;
use crate::admission::Snapshot;
use crate::events::{Event, EventType};
use crate::slices::lapsed;
use crate::types::kueue::Workload;
use crate::types::ray::RayCluster;

/// The reserved slices the loop saw, and the lapses it told ([`lapsed`]).
#[derive(Default)]
pub(super) struct Coverage {
    remembered: BTreeMap<String, Workload>,
    told: HashSet<String>,
}

/// Keeps a reserved slice deleted under a running child charged ([`lapsed`]): when one lapsed, the
/// snapshot with its stand-in (and the stand-ins' keys) is returned, and a Warning Event on the
/// RayService names the children and the Workload once. The common case (every remembered slice
/// still there) copies nothing.
pub(super) async fn keep_lapsed_coverage(
    ctx: &Context,
    snapshot: &Snapshot,
    coverage: &mut Coverage,
) -> Option<(Snapshot, BTreeSet<String>)> {
    let present: HashSet<&str> = snapshot
        .workloads
        .iter()
        .filter_map(|w| w.metadata.uid.as_deref())
        .collect();
    let gone = if coverage
        .remembered
        .keys()
        .all(|u| present.contains(u.as_str()))
    {
        vec![]
    } else {
        let clusters: Vec<RayCluster> = ctx
            .stores
            .clusters
            .state()
            .iter()
            .map(|c| c.as_ref().clone())
            .collect();
        lapsed::lapsed(&coverage.remembered, &snapshot.workloads, &clusters)
    };
    lapsed::remember_into(&mut coverage.remembered, &snapshot.workloads, &gone);
    coverage
        .told
        .retain(|k| gone.iter().any(|l| &l.stand_in_key() == k));
    if gone.is_empty() {
        return None;
    }
    for l in &gone {
        if !coverage.told.insert(l.stand_in_key()) {
            continue;
        }
        let (ns, service) = l.service();
        let object = ObjectReference {
            api_version: Some("ray.io/v1".into()),
            kind: Some("RayService".into()),
            name: Some(service),
            namespace: Some(ns),
            uid: l
                .deleted
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "RayService")
                .map(|o| o.uid.clone()),
            ..Default::default()
        };
        let message = format!(
            "Workload {} was deleted while {} ran on its quota: it stays charged to its ClusterQueue until a new slice is admitted",
            crate::meta::key(&l.deleted.metadata),
            l.children.join(", ")
        );
        let event = Event {
            type_: EventType::Warning,
            reason: "CoverageLapsed",
            message,
            child: None,
        };
        ctx.events.publish(&object, &event).await;
    }
    let mut with_stand_ins = snapshot.clone();
    let keys = lapsed::stand_in(&mut with_stand_ins.workloads, &gone);
    Some((with_stand_ins, keys))
}
