//! KubeRay's own view of a RayService's children (pure).
//!
//! KubeRay v1.7 names its active and pending cluster in the RayService's status
//! (`status.activeServiceStatus.rayClusterName`, `status.pendingServiceStatus.rayClusterName`);
//! every other labelled child is *dangling* and is deleted after
//! `rayClusterDeletionDelaySeconds` (`cleanUpRayClusterInstance`). A dangling child that raygate
//! holds suspended (e.g. a pending child replaced by a second spec change) has no pods and never
//! will: it is neither released nor charged.
//!
//! KubeRay writes a new pending name into the status *before* it creates that cluster (the next
//! reconcile creates it from the name in its cache), so every child it will ever run as a pending
//! cluster is named in a status write raygate sees, at the latest just after the child itself.
//! A suspended child raygate never released is therefore charged and released only once the
//! status raygate sees names it ([`abandoned`]): a child newer than that status (the RayService
//! watch lagging the RayCluster watch) waits, uncharged, for the next status, and a pending child
//! replaced by a second spec change is dropped however soon the change came — also within the
//! second of its creation, where neither creation times (whole seconds) nor
//! [`LAST_UPDATE_TIME`] can tell which came first. [`is_dangling`] still says when the status
//! provably saw the child and left it out (one that names a cluster created after it, or one
//! written more than [`STATUS_CLOCK_MARGIN`] after its creation): that names the Event.
//!
//! `ray.io/initializing-timeout` (a Go duration or whole seconds): KubeRay fails the RayService
//! for good when `Ready` has been `False/Initializing` for that long
//! (`markFailedOnInitializingTimeout`: `Ready=False/InitializingTimeout`, both cluster names
//! cleared, so every child becomes dangling). [`initializing`] says which of the two applies.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{GateAction, GateDecision};
use crate::events::EventType;
use crate::slices::SliceAction;
use crate::types::kueue::{Workload, reason};
use crate::types::ray::{INITIALIZING_TIMEOUT_ANNOTATION, RayCluster, RayService};

/// RayService annotation (raygate): set while raygate holds a first child that KubeRay will fail
/// at a deadline, or after KubeRay gave up; a sentence for the user.
pub const INITIALIZING_DEADLINE_ANNOTATION: &str = "raygate.io/initializing-deadline";
/// KubeRay's `Ready` condition reasons.
pub const REASON_INITIALIZING: &str = "Initializing";
pub const REASON_INITIALIZING_TIMEOUT: &str = "InitializingTimeout";
/// `status.lastUpdateTime`, set by KubeRay on every status write it makes.
pub const LAST_UPDATE_TIME: &str = "lastUpdateTime";
/// The operator's clock (lastUpdateTime) and the API server's (creationTimestamp) may differ.
pub const STATUS_CLOCK_MARGIN: SignedDuration = SignedDuration::from_secs(2);

fn status_name(service: &RayService, pending: bool) -> Option<&str> {
    let s = service.status.as_ref()?;
    let c = if pending {
        s.pending_service_status.as_ref()
    } else {
        s.active_service_status.as_ref()
    };
    c?.ray_cluster_name.as_deref().filter(|n| !n.is_empty())
}

/// The active child KubeRay names in status.
pub fn active_name(service: &RayService) -> Option<&str> {
    status_name(service, false)
}

/// The pending child KubeRay names in status.
pub fn pending_name(service: &RayService) -> Option<&str> {
    status_name(service, true)
}

fn last_update_time(service: &RayService) -> Option<Timestamp> {
    let v = service.status.as_ref()?.other.get(LAST_UPDATE_TIME)?;
    v.as_str()?.parse().ok()
}

fn created(c: &RayCluster) -> Option<Timestamp> {
    c.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

fn name(c: &RayCluster) -> &str {
    c.metadata.name.as_deref().unwrap_or_default()
}

/// Whether KubeRay (as far as the status shows) has abandoned `child`: it is neither the active
/// nor the pending cluster, and the status provably was written knowing it existed.
pub fn is_dangling(service: &RayService, child: &RayCluster, children: &[&RayCluster]) -> bool {
    if matches!(initializing(service), Initializing::TimedOut { .. }) {
        return true;
    }
    let (active, pending) = (active_name(service), pending_name(service));
    let n = name(child);
    if Some(n) == active || Some(n) == pending {
        return false;
    }
    let Some(born) = created(child) else {
        return false;
    };
    // A named cluster created after this one: KubeRay names before it creates, so the status
    // that names it was written after this child already existed (or had been named and
    // replaced).
    let younger_named = children.iter().any(|c| {
        let cn = name(c);
        (Some(cn) == active || Some(cn) == pending)
            && created(c).is_some_and(|t| t.as_second() > born.as_second())
    });
    let written_after = last_update_time(service)
        .is_some_and(|t| t.as_second() >= born.as_second() + STATUS_CLOCK_MARGIN.as_secs());
    younger_named || written_after
}

/// The children raygate neither releases nor charges: suspended, never released (no pods, none
/// will come until raygate releases them), and not named by the status raygate sees as KubeRay's
/// active or pending cluster — or every such child once KubeRay gave up
/// ([`Initializing::TimedOut`]). `released` is raygate's record of children it released.
pub fn abandoned<'a>(
    service: &RayService,
    children: &[&'a RayCluster],
    released: &BTreeSet<String>,
) -> Vec<&'a RayCluster> {
    let timed_out = matches!(initializing(service), Initializing::TimedOut { .. });
    let (active, pending) = (active_name(service), pending_name(service));
    children
        .iter()
        .copied()
        .filter(|c| c.spec.suspend == Some(true) && !released.contains(name(c)))
        .filter(|c| timed_out || (Some(name(c)) != active && Some(name(c)) != pending))
        .collect()
}

/// Where the RayService stands with KubeRay's initializing timeout.
#[derive(Clone, Debug, PartialEq)]
pub enum Initializing {
    /// No timeout configured, or the RayService is past initializing.
    None,
    /// KubeRay fails the RayService at `deadline` unless it becomes ready first.
    Deadline {
        timeout: Duration,
        deadline: Timestamp,
    },
    /// KubeRay gave up (`Ready=False/InitializingTimeout`): terminal, the user must recreate it.
    TimedOut { message: String },
}

/// Reads `Ready` and [`INITIALIZING_TIMEOUT_ANNOTATION`] as KubeRay v1.7 does.
pub fn initializing(service: &RayService) -> Initializing {
    let ready = service
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    let Some(ready) = ready.filter(|c| c.status == "False") else {
        return Initializing::None;
    };
    if ready.reason == REASON_INITIALIZING_TIMEOUT {
        return Initializing::TimedOut {
            message: ready.message.clone(),
        };
    }
    let timeout = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INITIALIZING_TIMEOUT_ANNOTATION))
        .and_then(|v| crate::duration::kuberay_timeout(v));
    match timeout {
        Some(timeout) if ready.reason == REASON_INITIALIZING => {
            let deadline = SignedDuration::try_from(timeout)
                .ok()
                .and_then(|d| ready.last_transition_time.0.checked_add(d).ok());
            match deadline {
                Some(deadline) => Initializing::Deadline { timeout, deadline },
                None => Initializing::None,
            }
        }
        _ => Initializing::None,
    }
}

/// The sentence for [`INITIALIZING_DEADLINE_ANNOTATION`] while a first child is held.
pub fn deadline_message(timeout: Duration, deadline: Timestamp) -> String {
    format!(
        "KubeRay fails this RayService for good at {deadline} ({INITIALIZING_TIMEOUT_ANNOTATION}={}s) unless its first RayCluster is ready by then; raygate holds it suspended until a slice is admitted",
        timeout.as_secs()
    )
}

/// For [`super::decide`]: drops the [`abandoned`] children from `children`, with an Event each.
pub(super) fn without_abandoned<'a>(
    service: &RayService,
    children: &[&'a RayCluster],
    released: &BTreeSet<String>,
    d: &mut GateDecision,
) -> Vec<&'a RayCluster> {
    let gone = abandoned(service, children, released);
    for c in &gone {
        let (reason, why) = if is_dangling(service, c, children) {
            (
                "Dangling",
                "is neither KubeRay's active nor its pending cluster (KubeRay deletes it after rayClusterDeletionDelaySeconds)",
            )
        } else {
            (
                "NotNamed",
                "is not named as KubeRay's active or pending cluster by the RayService's status yet",
            )
        };
        d.event(
            EventType::Normal,
            reason,
            format!("{} {why}: not released, not charged", name(c)),
            Some(name(c)),
        );
    }
    children
        .iter()
        .copied()
        .filter(|c| !gone.iter().any(|g| std::ptr::eq(*g, *c)))
        .collect()
}

/// For [`super::decide`]: once KubeRay gave up (`InitializingTimeout`), raygate releases nothing
/// and finishes every live slice as soon as no child runs (held children have no pods). Returns
/// `true` when `decide` must stop here.
pub(super) fn after_timeout(
    service: &RayService,
    children: &[&RayCluster],
    live: &[&Workload],
    d: &mut GateDecision,
) -> bool {
    let Initializing::TimedOut { message } = initializing(service) else {
        return false;
    };
    let running: Vec<&str> = children
        .iter()
        .filter(|c| c.spec.suspend != Some(true))
        .map(|c| name(c))
        .collect();
    let note = if running.is_empty() {
        for w in live {
            d.actions.push(GateAction::Slice(SliceAction::Finish {
                name: w.metadata.name.clone().unwrap_or_default(),
                reason: reason::OUT_OF_SYNC,
                message: "KubeRay failed the RayService (InitializingTimeout); no child runs"
                    .into(),
            }));
        }
        "raygate finished its slices (quota freed)".to_string()
    } else {
        format!(
            "raygate finishes its slices once KubeRay has deleted {}",
            running.join(", ")
        )
    };
    let text = format!(
        "KubeRay gave up on this RayService (Ready=False/InitializingTimeout: {message}); {note}; delete and recreate it to try again"
    );
    d.event(
        EventType::Warning,
        "InitializingTimedOut",
        text.clone(),
        None,
    );
    set_deadline_annotation(service, Some(text), d);
    true
}

/// For [`super::decide`]: while a first child (no active cluster) is held and KubeRay has an
/// initializing deadline, a Warning Event and [`INITIALIZING_DEADLINE_ANNOTATION`]; otherwise the
/// annotation is cleared.
pub(super) fn warn_deadline(
    service: &RayService,
    holding: bool,
    now: Option<Timestamp>,
    d: &mut GateDecision,
) {
    let first = active_name(service).is_none();
    match initializing(service) {
        Initializing::Deadline { timeout, deadline } if holding && first => {
            let text = deadline_message(timeout, deadline);
            let left = now
                .map(|n| format!(" ({}s left)", deadline.duration_since(n).as_secs().max(0)))
                .unwrap_or_default();
            d.event(
                EventType::Warning,
                "InitializingDeadline",
                format!("{text}{left}"),
                None,
            );
            set_deadline_annotation(service, Some(text), d);
        }
        _ => set_deadline_annotation(service, None, d),
    }
}

fn set_deadline_annotation(service: &RayService, value: Option<String>, d: &mut GateDecision) {
    let current = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INITIALIZING_DEADLINE_ANNOTATION));
    if current != value.as_ref() {
        d.actions.push(GateAction::Annotate {
            key: INITIALIZING_DEADLINE_ANNOTATION,
            value,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use raygate_testing::{
        MetaBuilder, RayClusterBuilder, RayClusterSpecBuilder, RayServiceBuilder,
        WorkerGroupBuilder, condition, ray_cluster, ray_cluster_spec, ray_service, worker_group,
    };

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn service(active: &str, pending: &str, updated: Option<i64>) -> RayService {
        let s = ray_service("svc")
            .in_namespace("ns")
            .cluster_names(active, pending);
        match updated {
            Some(u) => s.status_updated_at(at(u)),
            None => s,
        }
    }

    fn child(name: &str, second: i64, suspend: bool) -> RayCluster {
        ray_cluster(name)
            .in_namespace("ns")
            .suspend(suspend)
            .created_at(at(second))
    }

    /// `Ready=False` with `reason` since second `since`.
    fn not_ready(reason: &str, since: i64, message: &str) -> Condition {
        Condition {
            message: message.into(),
            ..condition("Ready", "False", reason, at(since))
        }
    }

    fn names(v: &[&RayCluster]) -> Vec<String> {
        v.iter().map(|c| name(c).to_string()).collect()
    }

    #[test]
    fn a_replaced_pending_child_is_abandoned_once_its_successor_is_named_and_created() {
        let (a, p1, p2) = (
            child("svc-a", 100, false),
            child("svc-p1", 200, true),
            child("svc-p2", 230, true),
        );
        let s = service("svc-a", "svc-p2", Some(230));
        let kids = [&a, &p1, &p2];
        assert_eq!(
            names(&abandoned(&s, &kids, &BTreeSet::new())),
            vec!["svc-p1"]
        );
    }

    #[test]
    fn a_replaced_pending_child_is_abandoned_by_a_later_status_write_alone() {
        // The successor is named but not created yet (KubeRay creates it on the next reconcile).
        let (a, p1) = (child("svc-a", 100, false), child("svc-p1", 200, true));
        let s = service("svc-a", "svc-p2", Some(210));
        assert_eq!(
            names(&abandoned(&s, &[&a, &p1], &BTreeSet::new())),
            vec!["svc-p1"]
        );
    }

    #[test]
    fn a_child_newer_than_the_status_seen_waits_uncharged_until_it_is_named() {
        // The RayService watch lags: the status does not name the new pending child yet.
        let (a, p) = (child("svc-a", 100, false), child("svc-p", 200, true));
        for updated in [None, Some(150), Some(199), Some(200), Some(201)] {
            let s = service("svc-a", "", updated);
            assert_eq!(
                names(&abandoned(&s, &[&a, &p], &BTreeSet::new())),
                vec!["svc-p"],
                "lastUpdateTime {updated:?}"
            );
            assert!(!is_dangling(&s, &p, &[&a, &p]), "not provably dangling");
        }
        // First child, status not written at all yet.
        let s = service("", "", None);
        assert_eq!(
            names(&abandoned(&s, &[&p], &BTreeSet::new())),
            vec!["svc-p"]
        );
        // Named: charged.
        for s in [
            service("svc-a", "svc-p", Some(201)),
            service("", "svc-p", None),
        ] {
            assert!(abandoned(&s, &[&a, &p], &BTreeSet::new()).is_empty());
        }
        // Status written well after the child's creation, not naming it: dangling.
        let s = service("svc-a", "", Some(202));
        assert!(is_dangling(&s, &p, &[&a, &p]));
    }

    #[test]
    fn a_pending_child_replaced_within_its_own_second_is_dropped() {
        // Two spec edits within a second: svc-p1 and svc-p2 created in the same second, the
        // status (written then too) names svc-p2. Neither creation times nor the status time
        // prove svc-p1 dangling; it is still neither charged nor released.
        let (a, p1, p2) = (
            child("svc-a", 100, false),
            child("svc-p1", 200, true),
            child("svc-p2", 200, true),
        );
        let s = service("svc-a", "svc-p2", Some(200));
        assert!(!is_dangling(&s, &p1, &[&a, &p1, &p2]));
        assert_eq!(
            names(&abandoned(&s, &[&a, &p1, &p2], &BTreeSet::new())),
            vec!["svc-p1"]
        );
    }

    #[test]
    fn running_or_released_dangling_children_are_still_counted() {
        // The old active child after promotion still has pods until KubeRay deletes it.
        let (old, new) = (child("svc-a", 100, false), child("svc-b", 200, false));
        let s = service("svc-b", "", Some(300));
        assert!(is_dangling(&s, &old, &[&old, &new]));
        assert!(abandoned(&s, &[&old, &new], &BTreeSet::new()).is_empty());
        // Suspended but once released: its pods may still be terminating.
        let held = child("svc-x", 150, true);
        let released = BTreeSet::from(["svc-x".to_string()]);
        assert!(abandoned(&s, &[&held, &new], &released).is_empty());
    }

    fn with_ready(
        mut s: RayService,
        reason: &str,
        since: i64,
        timeout: Option<&str>,
    ) -> RayService {
        s = s.status_condition(not_ready(reason, since, "m"));
        if let Some(t) = timeout {
            s.metadata.annotations =
                Some([(INITIALIZING_TIMEOUT_ANNOTATION.to_string(), t.to_string())].into());
        }
        s
    }

    #[test]
    fn the_initializing_deadline_is_ready_since_plus_the_timeout() {
        let s = with_ready(service("", "svc-p", None), "Initializing", 1000, Some("5m"));
        assert_eq!(
            initializing(&s),
            Initializing::Deadline {
                timeout: Duration::from_secs(300),
                deadline: at(1300)
            }
        );
        let s = with_ready(service("", "svc-p", None), "Initializing", 1000, None);
        assert_eq!(initializing(&s), Initializing::None);
        let s = with_ready(
            service("", "", None),
            "InitializingTimeout",
            1000,
            Some("5m"),
        );
        assert!(matches!(initializing(&s), Initializing::TimedOut { .. }));
        // Timed out: every child is dangling, whatever the status names.
        let p = child("svc-p", 900, true);
        assert_eq!(
            names(&abandoned(&s, &[&p], &BTreeSet::new())),
            vec!["svc-p"]
        );
    }

    // ---- through `decide` ----

    use crate::gate::{GateAction, GateOptions, RELEASED_ANNOTATION, decide};
    use raygate_testing::admit_counts;

    /// Worker group `w`: one replica of one CPU, 0..5.
    fn workers() -> crate::types::ray::WorkerGroupSpec {
        worker_group("w").replicas(1).min_max(0, 5)
    }

    fn gated_service(active: &str, pending: &str, updated: i64) -> RayService {
        ray_service("svc")
            .in_namespace("ns")
            .uid("u1")
            .queue("team-a")
            .annotations([(RELEASED_ANNOTATION.to_string(), active.to_string())].into())
            .cluster(ray_cluster_spec().suspend(true).worker_group(workers()))
            .cluster_names(active, pending)
            .status_updated_at(at(updated))
    }

    fn ray_child(name: &str, second: i64, suspend: bool) -> RayCluster {
        ray_cluster(name)
            .in_namespace("ns")
            .child_of("svc")
            .suspend(suspend)
            .worker_group(workers())
            .created_at(at(second))
    }

    fn created_slice(d: &crate::gate::GateDecision) -> Option<Workload> {
        d.actions.iter().find_map(|a| match a {
            GateAction::Slice(SliceAction::Create { workload, .. }) => Some((**workload).clone()),
            _ => None,
        })
    }

    fn released(d: &crate::gate::GateDecision) -> Vec<String> {
        d.actions
            .iter()
            .filter_map(|a| match a {
                GateAction::Release { child, .. } => Some(child.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_newest_pending_child_runs_once_the_active_one_plus_it_fit() {
        // A second spec change replaced pending svc-p1 by svc-p2; svc-p1 waits for deletion.
        let s = gated_service("svc-a", "svc-p2", 240);
        let (a, p1, p2) = (
            ray_child("svc-a", 100, false),
            ray_child("svc-p1", 200, true),
            ray_child("svc-p2", 230, true),
        );
        let kids = [&a, &p1, &p2];
        let d = decide(&s, &kids, &[], &GateOptions::default());
        let counts: Vec<(String, i32)> = d
            .podsets
            .iter()
            .map(|p| (p.name.clone(), p.count))
            .collect();
        assert_eq!(
            counts,
            vec![("head".into(), 2), ("w".into(), 2)],
            "svc-p1 is not charged"
        );
        assert!(
            d.events
                .iter()
                .any(|e| e.reason == "Dangling" && e.child.as_deref() == Some("svc-p1"))
        );
        // The slice for the active child plus svc-p2 is admitted: svc-p2 runs, svc-p1 never.
        let mut w = created_slice(&d).expect("a slice");
        w.metadata.creation_timestamp = Some(Time(at(250)));
        admit_counts(&mut w);
        let d = decide(&s, &kids, &[w], &GateOptions::default());
        assert_eq!(released(&d), vec!["svc-p2".to_string()]);
    }

    #[test]
    fn a_pending_child_is_charged_and_released_once_the_status_names_it() {
        // The RayService watch lags: status written before svc-p was named and created.
        let (a, p) = (
            ray_child("svc-a", 100, false),
            ray_child("svc-p", 200, true),
        );
        let lagging = gated_service("svc-a", "", 150);
        let d = decide(&lagging, &[&a, &p], &[], &GateOptions::default());
        let counts: Vec<i32> = d.podsets.iter().map(|p| p.count).collect();
        assert_eq!(counts, vec![1, 1], "svc-p waits uncharged");
        assert!(
            d.events
                .iter()
                .any(|e| e.reason == "NotNamed" && e.child.as_deref() == Some("svc-p"))
        );
        // The next status names it: charged, then released once its slice is admitted.
        let named = gated_service("svc-a", "svc-p", 201);
        let d = decide(&named, &[&a, &p], &[], &GateOptions::default());
        let counts: Vec<i32> = d.podsets.iter().map(|p| p.count).collect();
        assert_eq!(counts, vec![2, 2]);
        let mut w = created_slice(&d).expect("a slice");
        w.metadata.creation_timestamp = Some(Time(at(250)));
        admit_counts(&mut w);
        let d = decide(
            &lagging,
            &[&a, &p],
            std::slice::from_ref(&w),
            &GateOptions::default(),
        );
        assert!(released(&d).is_empty(), "never released while unnamed");
        let d = decide(&named, &[&a, &p], &[w], &GateOptions::default());
        assert_eq!(released(&d), vec!["svc-p".to_string()]);
    }

    fn initializing_service(reason: &str, since: i64, timeout: &str) -> RayService {
        let mut s = gated_service("", "svc-p", since);
        s.metadata.annotations = Some(
            [
                (RELEASED_ANNOTATION.to_string(), String::new()),
                (
                    INITIALIZING_TIMEOUT_ANNOTATION.to_string(),
                    timeout.to_string(),
                ),
            ]
            .into(),
        );
        s.status_condition(not_ready(
            reason,
            since,
            "RayService failed to become ready",
        ))
    }

    #[test]
    fn a_held_first_child_warns_of_kuberays_initializing_deadline() {
        let s = initializing_service("Initializing", 1000, "10m");
        let p = ray_child("svc-p", 1000, true);
        let opts = GateOptions {
            now: Some(at(1100)),
            ..Default::default()
        };
        let d = decide(&s, &[&p], &[], &opts);
        let ev = d
            .events
            .iter()
            .find(|e| e.reason == "InitializingDeadline")
            .expect("a warning");
        assert_eq!(ev.type_, EventType::Warning);
        assert!(ev.message.contains(&at(1600).to_string()), "{}", ev.message);
        assert!(ev.message.contains("500s left"), "{}", ev.message);
        assert!(d.actions.iter().any(|a| matches!(a,
            GateAction::Annotate { key: INITIALIZING_DEADLINE_ANNOTATION, value: Some(v) } if v.contains(&at(1600).to_string()))));
        // Once the child runs (released), the warning and the annotation go.
        let mut s = s;
        s.metadata.annotations.as_mut().unwrap().insert(
            INITIALIZING_DEADLINE_ANNOTATION.into(),
            deadline_message(Duration::from_secs(600), at(1600)),
        );
        let running = ray_child("svc-p", 1000, false);
        let d = decide(&s, &[&running], &[], &opts);
        assert!(!d.events.iter().any(|e| e.reason == "InitializingDeadline"));
        assert!(d.actions.contains(&GateAction::Annotate {
            key: INITIALIZING_DEADLINE_ANNOTATION,
            value: None
        }));
    }

    #[test]
    fn after_kuberays_initializing_timeout_the_slices_are_finished_and_nothing_is_released() {
        let held = initializing_service("Initializing", 1000, "10m");
        let p = ray_child("svc-p", 1000, true);
        let mut w = created_slice(&decide(&held, &[&p], &[], &GateOptions::default())).unwrap();
        w.metadata.creation_timestamp = Some(Time(at(1001)));
        let wname = w.metadata.name.clone().unwrap();
        let mut s = initializing_service("InitializingTimeout", 1600, "10m");
        s.status.as_mut().unwrap().pending_service_status = None;
        // Admitted just too late: still not released, and finished.
        admit_counts(&mut w);
        let d = decide(&s, &[&p], &[w.clone()], &GateOptions::default());
        assert!(released(&d).is_empty());
        assert!(created_slice(&d).is_none());
        assert!(d.actions.iter().any(|a| matches!(a,
            GateAction::Slice(SliceAction::Finish { name, .. }) if *name == wname)));
        assert!(
            d.events
                .iter()
                .any(|e| e.reason == "InitializingTimedOut" && e.type_ == EventType::Warning)
        );
        // A released child still has pods: the slice stays until KubeRay deleted it.
        let running = ray_child("svc-r", 1000, false);
        let mut s2 = s.clone();
        s2.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(RELEASED_ANNOTATION.into(), "svc-r".into());
        let d = decide(&s2, &[&running], &[w], &GateOptions::default());
        assert!(
            !d.actions
                .iter()
                .any(|a| matches!(a, GateAction::Slice(SliceAction::Finish { .. })))
        );
    }
}
