//! An upgrade's slice evicted: only the upgrade stops.
//!
//! During an upgrade the covering slice is a replacement covering the serving (active) child and
//! the pending one; Kueue finished the slice it replaced when it admitted it. Evicting it
//! (preemption, `waitForPodsReady`, a queue drained) would stop the serving child with the
//! RayService, and KubeRay would delete the healthy cluster. So while KubeRay names an active
//! child that runs, an evicted slice stops only the other children: they are suspended again,
//! the serving child keeps running on the evicted slice's reservation, and the chain queues the
//! upgrade's delta again ([`crate::slices::ServingCover`]). The RayService is marked with
//! [`UPGRADE_EVICTED_ANNOTATION`] so that the same slice, shrunk to the serving child, is still
//! recognised once the pending children are gone.

use super::{Facts, GateAction, GateDecision, child_name, eviction_reason, is_suspended};
use crate::events::EventType;
use crate::podsets;
use crate::slices::{self, ServingCover};
use crate::types::kueue::Workload;
use crate::types::ray::{RayCluster, RayService};
use crate::{meta, workload};

/// RayService annotation: the evicted slice raygate keeps for the serving child.
pub const UPGRADE_EVICTED_ANNOTATION: &str = "raygate.io/upgrade-evicted";

/// The serving child: the one KubeRay names active, unsuspended and not being deleted.
pub(super) fn serving<'a>(
    service: &RayService,
    children: &[&'a RayCluster],
) -> Option<&'a RayCluster> {
    let active = super::children::active_name(service)?;
    children.iter().copied().find(|c| {
        c.metadata.name.as_deref() == Some(active)
            && !is_suspended(c)
            && c.metadata.deletion_timestamp.is_none()
    })
}

/// The evicted (not deactivated) slice whose eviction stops only the upgrade: a serving child
/// runs and the slice grants an upgrade's delta too (another live child exists and the slice
/// grants more than the serving child needs), or raygate already kept this slice for the
/// serving child. An eviction of the serving child's own coverage stops the RayService.
pub(super) fn evicted<'a>(f: &Facts<'a>) -> Option<&'a Workload> {
    let serving = f.serving?;
    let marked = meta::annotation(&f.service.metadata, UPGRADE_EVICTED_ANNOTATION);
    let upgrading = f
        .children
        .iter()
        .any(|c| child_name(c) != child_name(serving) && c.metadata.deletion_timestamp.is_none());
    let own = || {
        podsets::of_service(f.service, &[serving])
            .ok()
            .map(|p| p.podsets)
    };
    f.live.iter().copied().rev().find(|w| {
        workload::is_evicted(w.status.as_ref())
            && w.spec.active != Some(false)
            && (marked == w.metadata.name.as_deref()
                || (upgrading && own().is_some_and(|p| slices::beyond(w, &p))))
    })
}

/// What the slice chain needs while [`evicted`] applies: the serving child's PodSets, and
/// whether every other child is suspended again.
pub(super) fn cover(f: &Facts) -> Option<ServingCover> {
    evicted(f)?;
    let serving = f.serving?;
    let podsets = podsets::of_service(f.service, &[serving]).ok()?.podsets;
    let upgrade_held = f
        .children
        .iter()
        .all(|c| child_name(c) == child_name(serving) || is_suspended(c));
    Some(ServingCover {
        podsets,
        upgrade_held,
    })
}

/// Suspends again every child but the serving one, marks the slice kept for it, and tells why.
pub(super) fn hold_upgrade(f: &Facts, slice: &Workload, d: &mut GateDecision) {
    let name = meta::name(&slice.metadata);
    if meta::annotation(&f.service.metadata, UPGRADE_EVICTED_ANNOTATION) != Some(name.as_str()) {
        d.actions.push(GateAction::Annotate {
            key: UPGRADE_EVICTED_ANNOTATION,
            value: Some(name.clone()),
        });
    }
    let Some(serving) = f.serving.map(child_name) else {
        return;
    };
    let why = eviction_reason(slice);
    for child in f.children.iter().filter(|c| {
        child_name(c) != serving && !is_suspended(c) && c.metadata.deletion_timestamp.is_none()
    }) {
        let held = child_name(child);
        d.announce(
            GateAction::Hold {
                child: held.clone(),
            },
            EventType::Warning,
            "UpgradeEvicted",
            format!(
                "slice {name} was evicted ({why}) during an upgrade: suspended {held} again; {serving} keeps serving on the slice's reservation and the upgrade is queued again"
            ),
            None,
        );
        d.announce_last(
            EventType::Warning,
            "UpgradeEvicted",
            format!(
                "suspended again by RayService {}: slice {name} was evicted ({why}); {serving} keeps serving",
                meta::key(&f.service.metadata)
            ),
            Some(&held),
        );
    }
}

/// Clears [`UPGRADE_EVICTED_ANNOTATION`] once the slice it names is no longer kept.
pub(super) fn clear_mark(f: &Facts, kept: Option<&Workload>, d: &mut GateDecision) {
    let marked = meta::annotation(&f.service.metadata, UPGRADE_EVICTED_ANNOTATION);
    if marked.is_some() && marked != kept.and_then(|w| w.metadata.name.as_deref()) {
        d.actions.push(GateAction::Annotate {
            key: UPGRADE_EVICTED_ANNOTATION,
            value: None,
        });
    }
}
