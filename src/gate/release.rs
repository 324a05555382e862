//! Release and hold: each child against the newest admitted slice that covers every child's
//! PodSets — released once its flavors reach it, held suspended (with why) until then, suspended
//! again when unsuspended without one, unless raygate's own write unsuspended it.

use std::collections::BTreeSet;

use super::{Facts, GateAction, GateDecision, admitted_at, child_name, flavors, is_suspended};
use crate::events::EventType;
use crate::types::kueue::{Workload, condition};
use crate::types::ray::RayCluster;
use crate::{conditions, meta, slices, workload};

/// Release or hold each child against the newest admitted slice, if it covers every child's
/// PodSets; suspend again a child unsuspended without one. Returns whether a child is held.
pub(super) fn release_or_hold(
    f: &Facts,
    target: Option<&Workload>,
    released: &mut BTreeSet<String>,
    d: &mut GateDecision,
) -> bool {
    let mut admitted: Vec<&Workload> = f
        .live
        .iter()
        .copied()
        .filter(|w| {
            // an evicted slice may still hold the serving child's reservation; it releases nothing
            workload::is_admitted(w.status.as_ref()) && !workload::is_evicted(w.status.as_ref())
        })
        .collect();
    workload::sort_chain_order(&mut admitted, f.workloads);
    let cover = admitted
        .last()
        .copied()
        .filter(|w| f.podsets.is_some_and(|p| slices::covers(w, p)));
    let mut holding = false;
    for child in f.children {
        let name = child_name(child);
        match (is_suspended(child), cover) {
            (true, Some(slice)) if child.metadata.deletion_timestamp.is_none() => {
                release(f, child, slice, released, d);
            }
            (true, None) => {
                holding = true;
                hold_suspended(f, &name, target, d);
            }
            (false, Some(_)) if !released.contains(&name) => {
                released.insert(name);
                d.actions.push(GateAction::RecordReleased {
                    released: released.iter().cloned().collect(),
                });
            }
            (false, Some(slice)) if child.metadata.deletion_timestamp.is_none() => {
                flavors::keep_placement(child, slice, &f.opts.flavors, d);
            }
            // released by raygate, its record lost (a crash between the two writes)
            (false, None) if !released.contains(&name) && suspend_lifted_by_raygate(child) => {
                released.insert(name);
                d.actions.push(GateAction::RecordReleased {
                    released: released.iter().cloned().collect(),
                });
            }
            (false, None) if !released.contains(&name) => {
                d.announce(
                    GateAction::Hold {
                        child: name.clone(),
                    },
                    EventType::Warning,
                    "Tampered",
                    format!("{name} was unsuspended without an admitted slice covering it: suspended it again"),
                    Some(&name),
                );
            }
            _ => {}
        }
    }
    holding
}

/// The field manager of the gate's writes to RayServices and RayClusters.
pub const GATE_FIELD_MANAGER: &str = "raygate-gate";

/// Whether `child`'s `spec.suspend=false` was written by raygate: its field manager owns the
/// field (a write that changes a field takes its ownership, so another writer's later
/// unsuspend would own it instead). A Release unsuspends before it records, so after a crash in
/// between this is the only trace of the release.
pub(super) fn suspend_lifted_by_raygate(child: &RayCluster) -> bool {
    child.spec.suspend == Some(false)
        && child
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.manager.as_deref() == Some(GATE_FIELD_MANAGER))
            .filter(|m| m.subresource.as_deref().unwrap_or_default().is_empty())
            .filter_map(|m| m.fields_v1.as_ref())
            .any(|f| f.0["f:spec"].get("f:suspend").is_some())
}

/// Release a suspended child covered by admitted `slice` (after its flavors reach it).
fn release(
    f: &Facts,
    child: &RayCluster,
    slice: &Workload,
    released: &mut BTreeSet<String>,
    d: &mut GateDecision,
) {
    if !flavors::before_release(child, slice, &f.opts.flavors, d) {
        return;
    }
    let name = child_name(child);
    released.insert(name.clone());
    let slice_name = meta::name(&slice.metadata);
    let message =
        format!("slice {slice_name} is admitted and covers every child: unsuspended {name}");
    let on_child = format!(
        "released by RayService {}: slice {slice_name} is admitted and covers every child",
        meta::key(&f.service.metadata)
    );
    d.announce(
        GateAction::Release {
            child: name.clone(),
            released: released.iter().cloned().collect(),
            slice: slice_name,
            admitted_at: admitted_at(slice),
        },
        EventType::Normal,
        "Released",
        message,
        None,
    );
    d.announce_last(EventType::Normal, QUOTA_RELEASED, on_child, Some(&name));
}

/// Tell why a suspended child stays suspended.
fn hold_suspended(f: &Facts, name: &str, target: Option<&Workload>, d: &mut GateDecision) {
    let why = if f.podsets.is_none() {
        "the RayService's PodSets are invalid (see the InvalidPodSets Event)".into()
    } else {
        target
            .map(pending_message)
            .unwrap_or_else(|| "no slice yet".into())
    };
    d.event(
        EventType::Normal,
        "Holding",
        format!("holding {name} suspended until an admitted slice covers it: {why}"),
        None,
    );
    // the same on the RayCluster itself, where `kubectl describe raycluster` shows it
    d.event(
        EventType::Normal,
        QUOTA_HELD,
        format!(
            "held suspended by RayService {} until an admitted slice covers it: {why}",
            meta::key(&f.service.metadata)
        ),
        Some(name),
    );
}

/// The reason of the Event on a child RayCluster the gate holds suspended for quota.
pub const QUOTA_HELD: &str = "QuotaHeld";
/// The reason of the Event on a child RayCluster the gate released.
pub const QUOTA_RELEASED: &str = "QuotaReleased";

/// The slice's `QuotaReserved=False` message, or a placeholder.
fn pending_message(w: &Workload) -> String {
    let name = w.metadata.name.as_deref().unwrap_or_default();
    w.status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, condition::QUOTA_RESERVED))
        .filter(|c| c.status != "True")
        .map(|c| format!("slice {name} is pending: {}", c.message))
        .unwrap_or_else(|| format!("slice {name} is not admitted yet"))
}
