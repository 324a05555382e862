use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;
use raygate_testing::{
    MetaBuilder, RayClusterBuilder, RayClusterSpecBuilder, RayServiceBuilder, WorkerGroupBuilder,
    admit_counts, ray_cluster, ray_cluster_spec, ray_service, set_condition, worker_group,
};

fn service(annotations: serde_json::Value, suspend: Option<bool>) -> RayService {
    ray_service("svc")
        .in_namespace("ns")
        .uid("u1")
        .queue("team-a")
        .annotations(serde_json::from_value(annotations).unwrap())
        .cluster(
            ray_cluster_spec()
                .suspend(true)
                .worker_group(worker_group("w").replicas(1).min_max(0, 5)),
        )
        .service_suspend(suspend)
        // KubeRay names its active and pending child in the status before it creates them
        .cluster_names("svc-a", "svc-b")
}

fn child(name: &str, second: i64, suspend: bool, replicas: i32) -> RayCluster {
    ray_cluster(name)
        .in_namespace("ns")
        .child_of("svc")
        .spec(
            ray_cluster_spec()
                .suspend(suspend)
                .worker_group(worker_group("w").replicas(replicas).min_max(0, 5)),
        )
        .created_at(Timestamp::from_second(second).unwrap())
}

fn cond(w: &mut Workload, type_: &str, reason: &str, message: &str, status: &str) {
    set_condition(w, type_, status, reason, message);
}

/// Applies the slice actions of a decision to the Workload list.
fn apply_slices(ws: &mut Vec<Workload>, d: &GateDecision, second: &mut i64) {
    for a in &d.actions {
        match a {
            GateAction::Slice(SliceAction::Create { workload, .. }) => {
                let mut w = (**workload).clone();
                *second += 1;
                w.metadata.creation_timestamp =
                    Some(Time(Timestamp::from_second(*second).unwrap()));
                ws.push(w);
            }
            GateAction::Slice(SliceAction::SetPodSets { name, pod_sets, .. }) => {
                ws.iter_mut()
                    .find(|w| w.metadata.name.as_deref() == Some(name))
                    .unwrap()
                    .spec
                    .pod_sets = pod_sets.clone();
            }
            GateAction::Slice(SliceAction::Finish { name, reason, .. }) => {
                let w = ws
                    .iter_mut()
                    .find(|w| w.metadata.name.as_deref() == Some(name))
                    .unwrap();
                cond(w, condition::FINISHED, reason, "", "True");
            }
            _ => {}
        }
    }
}

fn gated(released: &str) -> serde_json::Value {
    json!({ RELEASED_ANNOTATION: released })
}

fn kinds(d: &GateDecision) -> Vec<String> {
    d.actions
        .iter()
        .map(|a| match a {
            GateAction::GateTemplate { .. } => "GateTemplate".to_string(),
            GateAction::Slice(SliceAction::Create { .. }) => "Create".into(),
            GateAction::Slice(SliceAction::SetPodSets { .. }) => "SetPodSets".into(),
            GateAction::Slice(SliceAction::Finish { .. }) => "Finish".into(),
            GateAction::Slice(SliceAction::SetPriority { .. }) => "SetPriority".into(),
            GateAction::Release { child, .. } => format!("Release {child}"),
            GateAction::Hold { child } => format!("Hold {child}"),
            GateAction::RecordReleased { released } => {
                format!("RecordReleased {}", released.join(","))
            }
            GateAction::SuspendService { reason } => format!("SuspendService {reason}"),
            GateAction::ResumeService => "ResumeService".into(),
            GateAction::ReportError { message } => format!("ReportError {}", message.is_some()),
            GateAction::OptOutChild { child, unsuspend } => {
                format!("OptOutChild {child} unsuspend={unsuspend}")
            }
            GateAction::OptOut {
                resume,
                pod_templates,
            } => format!(
                "OptOut resume={resume}{}",
                if pod_templates.is_some() {
                    " ungate"
                } else {
                    ""
                }
            ),
            GateAction::PatchChild { child, .. } => format!("PatchChild {child}"),
            GateAction::Annotate { key, value } => format!("Annotate {key} {}", value.is_some()),
            GateAction::GatePodTemplates { .. } => "GatePodTemplates".into(),
        })
        .collect()
}

#[test]
fn a_service_without_the_queue_label_is_left_alone() {
    let mut s = service(json!({}), None);
    s.metadata.labels = None;
    assert_eq!(
        decide(&s, &[], &[], &GateOptions::default()),
        GateDecision::default()
    );
}

#[test]
fn opting_in_gates_the_template_and_grandfathers_running_children() {
    let mut s = service(json!({}), None);
    s.spec.ray_cluster_config.suspend = None;
    let running = child("svc-a", 1, false, 1);
    let d = decide(&s, &[&running], &[], &GateOptions::default());
    assert_eq!(
        d.actions[0],
        GateAction::GateTemplate {
            released: vec!["svc-a".into()]
        }
    );
    assert!(kinds(&d).contains(&"Create".to_string()));
    assert!(
        !kinds(&d).iter().any(|k| k.starts_with("Hold")),
        "a running service is not stopped by opting in"
    );
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == "TemplateGated" && e.message.contains("svc-a"))
    );
}

#[test]
fn the_upgrade_waits_for_the_replacement_slice_then_releases_the_pending_child() {
    let s = service(gated("svc-a"), None);
    let (mut ws, mut t) = (vec![], 10);
    let active = child("svc-a", 1, false, 1);
    // steady state: one child, one admitted slice
    {
        let d = decide(&s, &[&active], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    admit_counts(&mut ws[0]);
    assert_eq!(
        kinds(&decide(&s, &[&active], &ws, &GateOptions::default())),
        Vec::<String>::new()
    );
    // KubeRay creates the pending child, born suspended
    let pending = child("svc-b", 2, true, 1);
    let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["Create"]);
    apply_slices(&mut ws, &d, &mut t);
    cond(
        &mut ws[1],
        condition::QUOTA_RESERVED,
        "Pending",
        "insufficient unused quota for cpu in flavor default",
        "False",
    );
    let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
    assert_eq!(
        kinds(&d),
        Vec::<String>::new(),
        "held: the old slice does not cover both children"
    );
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == "Holding" && e.message.contains("insufficient unused quota"))
    );
    // quota arrives
    admit_counts(&mut ws[1]);
    let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["Finish", "Release svc-b"]);
    let GateAction::Release {
        released, slice, ..
    } = &d.actions[1]
    else {
        unreachable!()
    };
    assert_eq!(released, &["svc-a", "svc-b"]);
    assert_eq!(slice, ws[1].metadata.name.as_ref().unwrap());
}

#[test]
fn a_child_unsuspended_without_a_covering_slice_is_suspended_again() {
    let s = service(gated(""), None);
    let rogue = child("svc-a", 1, false, 1);
    let d = decide(&s, &[&rogue], &[], &GateOptions::default());
    assert!(
        kinds(&d).contains(&"Hold svc-a".to_string()),
        "{:?}",
        kinds(&d)
    );
    assert!(d.events.iter().any(|e| e.type_ == EventType::Warning
        && e.reason == "Tampered"
        && e.child.as_deref() == Some("svc-a")));
}

#[test]
fn a_covered_running_child_missing_from_the_record_is_recorded() {
    // a crash between the unsuspend patch and the record
    let s = service(gated(""), None);
    let (mut ws, mut t) = (vec![], 10);
    let held = child("svc-a", 1, true, 1);
    {
        let d = decide(&s, &[&held], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    admit_counts(&mut ws[0]);
    let running = child("svc-a", 1, false, 1);
    assert_eq!(
        kinds(&decide(&s, &[&running], &ws, &GateOptions::default())),
        ["RecordReleased svc-a"]
    );
}

/// `child` with `spec.suspend` owned by field manager `manager` (its last writer).
fn suspend_written_by(mut c: RayCluster, manager: &str) -> RayCluster {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    c.metadata.managed_fields = Some(vec![
        ManagedFieldsEntry {
            manager: Some("kuberay-operator".into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:headGroupSpec": {}}}))),
            ..Default::default()
        },
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:suspend": {}}}))),
            ..Default::default()
        },
    ]);
    c
}

/// Issue #31: a crash between a Release's unsuspend and its record, then the child grows past
/// every slice: uncovered, unsuspended and unrecorded, but raygate's field manager owns its
/// `spec.suspend=false`, so it was released by raygate: recorded, not held. Anyone else's
/// unsuspend is still tampering.
#[test]
fn a_child_raygate_unsuspended_is_recorded_even_when_uncovered() {
    let s = service(gated(""), None);
    let grown = child("svc-a", 1, false, 9);
    let d = decide(
        &s,
        &[&suspend_written_by(grown.clone(), GATE_FIELD_MANAGER)],
        &[],
        &GateOptions::default(),
    );
    assert!(
        kinds(&d).contains(&"RecordReleased svc-a".to_string()),
        "{:?}",
        kinds(&d)
    );
    assert!(!kinds(&d).iter().any(|k| k.starts_with("Hold")));
    assert!(!d.events.iter().any(|e| e.reason == "Tampered"));
    let d = decide(
        &s,
        &[&suspend_written_by(grown, "kubectl-patch")],
        &[],
        &GateOptions::default(),
    );
    assert!(
        kinds(&d).contains(&"Hold svc-a".to_string()),
        "{:?}",
        kinds(&d)
    );
}

#[test]
fn a_released_child_that_grows_is_not_stopped() {
    let s = service(gated("svc-a"), None);
    let (mut ws, mut t) = (vec![], 10);
    let small = child("svc-a", 1, false, 1);
    {
        let d = decide(&s, &[&small], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    admit_counts(&mut ws[0]);
    let grown = child("svc-a", 1, false, 3);
    let d = decide(&s, &[&grown], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["Create"], "a replacement slice, no Hold");
}

#[test]
fn an_evicted_slice_stops_the_service_and_readmission_resumes_it() {
    let (mut ws, mut t) = (vec![], 10);
    let s = service(gated("svc-a"), None);
    let running = child("svc-a", 1, false, 1);
    {
        let d = decide(&s, &[&running], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    admit_counts(&mut ws[0]);
    cond(
        &mut ws[0],
        condition::EVICTED,
        reason::PREEMPTED,
        "preempted",
        "True",
    );
    let d = decide(&s, &[&running], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["SuspendService Preempted"]);
    // KubeRay suspended it and deleted the children: the evicted slice finishes, a new one queues
    let s = service(
        json!({ RELEASED_ANNOTATION: "svc-a", SUSPENDED_BY_ANNOTATION: "Preempted" }),
        Some(true),
    );
    let d = decide(&s, &[], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["Finish", "Create"]);
    apply_slices(&mut ws, &d, &mut t);
    assert_eq!(
        kinds(&decide(&s, &[], &ws, &GateOptions::default())),
        Vec::<String>::new()
    );
    admit_counts(&mut ws[1]);
    assert_eq!(
        kinds(&decide(&s, &[], &ws, &GateOptions::default())),
        ["ResumeService"]
    );
}

#[test]
fn a_suspend_set_by_the_owner_is_never_cleared_and_frees_quota_once_pods_are_gone() {
    let (mut ws, mut t) = (vec![], 10);
    let s = service(gated("svc-a"), None);
    let running = child("svc-a", 1, false, 1);
    {
        let d = decide(&s, &[&running], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    admit_counts(&mut ws[0]);
    let s = service(gated("svc-a"), Some(true));
    assert_eq!(
        kinds(&decide(&s, &[&running], &ws, &GateOptions::default())),
        Vec::<String>::new()
    );
    assert_eq!(
        kinds(&decide(&s, &[], &ws, &GateOptions::default())),
        ["Finish"]
    );
}

#[test]
fn invalid_podsets_raise_a_warning_and_touch_nothing() {
    let s = service(gated(""), None);
    let bad = child("svc-a", 1, true, -3);
    let d = decide(&s, &[&bad], &[], &GateOptions::default());
    assert_eq!(
        kinds(&d),
        ["ReportError true"],
        "only the error is recorded"
    );
    let GateAction::ReportError { message: Some(m) } = &d.actions[0] else {
        unreachable!()
    };
    assert!(m.contains("must not be negative"), "{m}");
    // recorded once; cleared when fixed
    let mut recorded = service(
        json!({ RELEASED_ANNOTATION: "", ERROR_ANNOTATION: m }),
        None,
    );
    assert_eq!(
        kinds(&decide(&recorded, &[&bad], &[], &GateOptions::default())),
        Vec::<String>::new()
    );
    let good = child("svc-a", 1, true, 1);
    recorded
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ERROR_ANNOTATION.into(), m.clone());
    assert_eq!(
        kinds(&decide(&recorded, &[&good], &[], &GateOptions::default()))[0],
        "ReportError false"
    );
    let e = d
        .events
        .iter()
        .find(|e| e.reason == "InvalidPodSets")
        .unwrap();
    assert!(
        e.message
            .contains("RayCluster ns/svc-a: spec.workerGroupSpecs[0].replicas"),
        "{}",
        e.message
    );
    assert!(d.error.is_some());
}

#[test]
fn invalid_podsets_keep_the_tamper_and_stop_protections() {
    let (mut ws, mut t) = (vec![], 10);
    let s = service(gated("svc-a"), None);
    let running = child("svc-a", 1, false, 1);
    {
        let d = decide(&s, &[&running], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    admit_counts(&mut ws[0]);
    // a second child with invalid PodSets, unsuspended by hand: held again, the released one kept
    let rogue = child("svc-b", 2, false, -3);
    let d = decide(&s, &[&running, &rogue], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["ReportError true", "Hold svc-b"]);
    // a suspended child is not released on PodSets that cannot be computed
    let held = child("svc-b", 2, true, -3);
    let d = decide(&s, &[&running, &held], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["ReportError true"]);
    assert!(d.events.iter().any(|e| e.reason == "Holding"));
    // an evicted slice still stops the service
    cond(
        &mut ws[0],
        condition::EVICTED,
        reason::PREEMPTED,
        "preempted",
        "True",
    );
    let d = decide(&s, &[&running, &held], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["ReportError true", "SuspendService Preempted"]);
}

#[test]
fn the_newest_admitted_slice_is_found_through_replacement_links_not_names() {
    let s = service(gated("svc-a"), None);
    let (mut ws, mut t) = (vec![], 10);
    let active = child("svc-a", 1, false, 1);
    {
        let d = decide(&s, &[&active], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    admit_counts(&mut ws[0]);
    let pending = child("svc-b", 2, true, 1);
    let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["Create"]);
    apply_slices(&mut ws, &d, &mut t);
    // the replacement is created in the same second as its predecessor and sorts first by name
    ws[1].metadata.creation_timestamp = ws[0].metadata.creation_timestamp.clone();
    ws[1].metadata.name = Some("rayservice-svc-0".into());
    admit_counts(&mut ws[1]);
    let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["Finish", "Release svc-b"]);
    let GateAction::Slice(SliceAction::Finish { name, .. }) = &d.actions[0] else {
        unreachable!()
    };
    assert_eq!(
        Some(name),
        ws[0].metadata.name.as_ref(),
        "the old slice finishes"
    );
}

fn opted_out(annotations: serde_json::Value, suspend: Option<bool>) -> RayService {
    let mut s = service(annotations, suspend);
    s.metadata.labels = None;
    s
}

#[test]
fn removing_the_queue_label_frees_the_quota_releases_held_children_and_lifts_the_gate() {
    let (mut ws, mut t) = (vec![], 10);
    let s = service(gated("svc-a"), None);
    let active = child("svc-a", 1, false, 1);
    let pending = child("svc-b", 2, true, 1);
    {
        let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    let labelled = |mut c: RayCluster| {
        c.metadata
            .labels
            .get_or_insert_default()
            .insert(QUEUE_NAME_LABEL.into(), "team-a".into());
        c
    };
    let (active, pending) = (labelled(active), labelled(pending));
    let out = opted_out(gated("svc-a"), None);
    let d = decide(&out, &[&active, &pending], &ws, &GateOptions::default());
    assert_eq!(
        kinds(&d),
        [
            "Finish",
            "OptOutChild svc-a unsuspend=false",
            "OptOutChild svc-b unsuspend=true",
            "OptOut resume=false"
        ]
    );
    assert!(d.events.iter().any(|e| e.reason == "OptedOut"));
    // the opt-out finished the slices
    apply_slices(&mut ws, &d, &mut t);
    // raygate's own suspend is cleared too; the owner's is not, nor are its children released
    let out = opted_out(
        json!({ RELEASED_ANNOTATION: "svc-a", SUSPENDED_BY_ANNOTATION: "Preempted" }),
        Some(true),
    );
    assert_eq!(
        kinds(&decide(&out, &[], &[], &GateOptions::default())),
        ["OptOut resume=true"]
    );
    let out = opted_out(gated("svc-a"), Some(true));
    let held = child("svc-b", 2, true, 1);
    assert_eq!(
        kinds(&decide(&out, &[&held], &[], &GateOptions::default())),
        ["OptOut resume=false"]
    );
    // once the annotations are gone (and the slices finished) the service is left alone
    assert_eq!(
        decide(
            &opted_out(json!({}), None),
            &[&held],
            &ws,
            &GateOptions::default()
        ),
        GateDecision::default()
    );
}

/// raygate's own opt-in label opts a RayService in like Kueue's, and counts first; an empty value
/// counts as none.
#[test]
fn raygate_s_own_label_opts_in_and_counts_before_kueue_s() {
    let labelled = |labels: serde_json::Value| {
        let mut s = service(gated(""), None);
        s.metadata.labels = Some(serde_json::from_value(labels).unwrap());
        s
    };
    assert_eq!(
        queue_name(&labelled(json!({OPT_IN_LABEL: "serving"}))),
        Some("serving")
    );
    assert_eq!(
        queue_name(&labelled(
            json!({OPT_IN_LABEL: "serving", QUEUE_NAME_LABEL: "team-a"})
        )),
        Some("serving")
    );
    assert_eq!(
        queue_name(&labelled(
            json!({OPT_IN_LABEL: "", QUEUE_NAME_LABEL: "team-a"})
        )),
        Some("team-a")
    );
    assert_eq!(queue_name(&labelled(json!({OPT_IN_LABEL: ""}))), None);
    // opted in by raygate's label alone: the upgrade's pending child is held for its slice
    let s = labelled(json!({OPT_IN_LABEL: "team-a"}));
    let (active, pending) = (child("svc-a", 1, false, 1), child("svc-b", 2, true, 1));
    let d = decide(&s, &[&active, &pending], &[], &GateOptions::default());
    assert!(kinds(&d).contains(&"Create".to_string()), "{:?}", kinds(&d));
}

/// A running child that carries raygate's label (copied by KubeRay) loses it when its RayService
/// opts out, so the admission policy stops applying to it.
#[test]
fn opting_out_drops_raygate_s_label_from_the_children_too() {
    let (mut ws, mut t) = (vec![], 10);
    let mut s = service(gated("svc-a"), None);
    s.metadata.labels = Some([(OPT_IN_LABEL.to_string(), "team-a".to_string())].into());
    let active = child("svc-a", 1, false, 1);
    let d = decide(&s, &[&active], &ws, &GateOptions::default());
    apply_slices(&mut ws, &d, &mut t);
    let mut active = active;
    active
        .metadata
        .labels
        .get_or_insert_default()
        .insert(OPT_IN_LABEL.into(), "team-a".into());
    let out = opted_out(gated("svc-a"), None);
    let d = decide(&out, &[&active], &ws, &GateOptions::default());
    assert!(
        kinds(&d).contains(&"OptOutChild svc-a unsuspend=false".to_string()),
        "{:?}",
        kinds(&d)
    );
}

fn with_queue_label(mut c: RayCluster) -> RayCluster {
    c.metadata
        .labels
        .get_or_insert_default()
        .insert(QUEUE_NAME_LABEL.into(), "team-a".into());
    c
}

/// Issue #31: opting out is not one-shot. Its last step leaves [`OPTED_OUT_ANNOTATION`]; a child
/// KubeRay creates afterwards from a template it read still gated (born suspended, with or
/// without the queue label) is released; a child its owner holds (its own
/// `rayClusterConfig.suspend`) is not; nothing left: nothing done.
#[test]
fn a_child_created_after_the_opt_out_is_released_too() {
    let mut out = opted_out(json!({ OPTED_OUT_ANNOTATION: "true" }), None);
    out.spec.ray_cluster_config.suspend = None;
    let running = child("svc-a", 1, false, 1);
    let late = child("svc-b", 2, true, 1);
    let opts = GateOptions::default();
    assert_eq!(
        kinds(&decide(&out, &[&running, &late], &[], &opts)),
        ["OptOutChild svc-b unsuspend=true", "OptOut resume=false"]
    );
    assert_eq!(
        kinds(&decide(
            &out,
            &[&running, &with_queue_label(late.clone())],
            &[],
            &opts
        )),
        ["OptOutChild svc-b unsuspend=true", "OptOut resume=false"]
    );
    assert_eq!(
        decide(&out, &[&running], &[], &opts),
        GateDecision::default()
    );
    let mut owners = out.clone();
    owners.spec.ray_cluster_config.suspend = Some(true);
    assert_eq!(
        decide(&owners, &[&late], &[], &opts),
        GateDecision::default()
    );
}

/// Issue #31: `kubectl replace` from a manifest without raygate's label and annotations: the
/// live slice is finished (no leaked quota) and the held child, which carries the queue label
/// (so the admission policy keeps its owner from releasing it), is released and unlabelled.
#[test]
fn a_service_replaced_without_raygate_s_metadata_is_still_opted_out() {
    let (mut ws, mut t) = (vec![], 10);
    let s = service(gated("svc-a"), None);
    let active = with_queue_label(child("svc-a", 1, false, 1));
    let pending = with_queue_label(child("svc-b", 2, true, 1));
    {
        let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
    }
    let mut replaced = opted_out(json!({}), None);
    replaced.spec.ray_cluster_config.suspend = None;
    let d = decide(
        &replaced,
        &[&active, &pending],
        &ws,
        &GateOptions::default(),
    );
    assert_eq!(
        kinds(&d),
        [
            "Finish",
            "OptOutChild svc-a unsuspend=false",
            "OptOutChild svc-b unsuspend=true",
            "OptOut resume=false"
        ]
    );
    assert!(left_behind(&replaced, &[&active, &pending], &ws));
    // done: the slices finished, the children unlabelled and running
    apply_slices(&mut ws, &d, &mut t);
    let (active, pending) = (child("svc-a", 1, false, 1), child("svc-b", 2, false, 1));
    assert!(!left_behind(&replaced, &[&active, &pending], &ws));
    assert_eq!(
        decide(
            &replaced,
            &[&active, &pending],
            &ws,
            &GateOptions::default()
        ),
        GateDecision::default()
    );
}

/// The spec with [`pod_gate::POD_GATE`] on every pod template, as raygate's pod gate leaves it.
fn pod_gated(spec: &crate::types::ray::RayClusterSpec) -> crate::types::ray::RayClusterSpec {
    let mut v = serde_json::to_value(spec).unwrap();
    json_patch::merge(&mut v, &pod_gate::gate_templates_patch(spec).unwrap());
    serde_json::from_value(v).unwrap()
}

/// Issue #31: opting out removes the pod scheduling gate (the flag on or off now), from each
/// child's templates before its queue label goes and from `spec.rayClusterConfig` in the last
/// step; a service without it gets no such patch.
#[test]
fn opting_out_removes_the_pod_gate_from_the_templates() {
    let mut out = opted_out(gated("svc-a"), None);
    out.spec.ray_cluster_config = pod_gated(&out.spec.ray_cluster_config);
    let mut active = child("svc-a", 1, false, 1);
    active.spec = pod_gated(&active.spec);
    let mut leaving = child("svc-0", 0, false, 1);
    leaving.spec = pod_gated(&leaving.spec);
    leaving.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(5).unwrap()));
    for pod_gate_on in [true, false] {
        let opts = GateOptions {
            pod_gate: pod_gate_on,
            ..Default::default()
        };
        let d = decide(&out, &[&active, &leaving], &[], &opts);
        assert_eq!(
            kinds(&d),
            ["PatchChild svc-a", "OptOut resume=false ungate"],
            "pod gate on: {pod_gate_on}"
        );
        let GateAction::PatchChild { patch, .. } = &d.actions[0] else {
            unreachable!()
        };
        assert_eq!(
            patch["spec"]["headGroupSpec"]["template"]["spec"]["schedulingGates"],
            serde_json::Value::Null
        );
        let GateAction::OptOut {
            pod_templates: Some(templates),
            ..
        } = &d.actions[1]
        else {
            unreachable!()
        };
        assert!(!pod_gate::any_template_gated(&{
            let mut v = serde_json::to_value(&out.spec.ray_cluster_config).unwrap();
            json_patch::merge(&mut v, templates);
            serde_json::from_value(v).unwrap()
        }));
        assert!(
            d.events
                .iter()
                .any(|e| e.reason == "OptedOut" && e.message.contains(pod_gate::POD_GATE))
        );
    }
}

#[test]
fn each_announcing_event_is_paired_with_the_action_it_announces() {
    // opting in with a rogue child: the template gate, a new slice and a hold, each announced
    let s = service(serde_json::json!({}), None);
    let rogue = child("svc-a", 1, false, 1);
    let pending = child("svc-b", 2, true, 1);
    let d = decide(&s, &[&rogue, &pending], &[], &GateOptions::default());
    let paired: Vec<(&str, String)> = (0..d.events.len())
        .filter_map(|e| {
            let a = d.announces(e)?;
            Some((
                d.events[e].reason,
                kinds(&GateDecision {
                    actions: vec![d.actions[a].clone()],
                    ..Default::default()
                })
                .concat(),
            ))
        })
        .collect();
    assert_eq!(
        paired,
        [
            ("TemplateGated", "GateTemplate".to_string()),
            ("SliceCreated", "Create".to_string()),
        ],
        "{:?} / {:?}",
        d.events,
        kinds(&d)
    );
    // an observation announces nothing
    let holding = d.events.iter().position(|e| e.reason == "Holding");
    assert!(
        holding.is_some_and(|h| d.announces(h).is_none()),
        "{:?}",
        d.events
    );
}

#[test]
fn the_priority_class_label_resolves_into_the_slice_and_a_missing_class_warns() {
    let mut s = service(json!({}), None);
    s.metadata
        .labels
        .get_or_insert_default()
        .insert(PRIORITY_CLASS_LABEL.into(), "high".into());
    let missing = decide(&s, &[], &[], &GateOptions::default());
    assert_eq!(missing.priority, None);
    assert_eq!(missing.events[0].type_, EventType::Warning);
    assert_eq!(missing.events[0].reason, "PriorityClassNotFound");
    assert!(missing.events[0].message.contains("high"));

    let opts = GateOptions {
        priority_classes: [("high".to_string(), 1000)].into(),
        ..GateOptions::default()
    };
    let d = decide(&s, &[], &[], &opts);
    assert!(d.events.iter().all(|e| e.reason != "PriorityClassNotFound"));
    let Some((class, 1000)) = &d.priority else {
        panic!("not resolved: {:?}", d.priority);
    };
    assert_eq!(class.name, "high");
    let created = d.actions.iter().find_map(|a| match a {
        GateAction::Slice(SliceAction::Create { workload, .. }) => Some(workload),
        _ => None,
    });
    let w = created.expect("a first slice");
    assert_eq!(w.spec.priority, Some(1000));
    assert_eq!(
        w.spec.priority_class_ref.as_ref().map(|r| r.name.as_str()),
        Some("high")
    );
}

#[test]
fn a_held_child_is_told_on_itself_with_the_service_slice_and_shortfall_and_its_release_too() {
    let s = service(gated("svc-a"), None);
    let (mut ws, mut t) = (vec![], 10);
    let active = child("svc-a", 1, false, 1);
    let d = decide(&s, &[&active], &ws, &GateOptions::default());
    apply_slices(&mut ws, &d, &mut t);
    admit_counts(&mut ws[0]);
    let pending = child("svc-b", 2, true, 1);
    let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
    apply_slices(&mut ws, &d, &mut t);
    cond(
        &mut ws[1],
        condition::QUOTA_RESERVED,
        "Pending",
        "insufficient unused quota for cpu in flavor default, 1 more needed",
        "False",
    );
    let slice = ws[1].metadata.name.clone().unwrap();
    let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
    let held: Vec<_> = d
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.child.as_deref() == Some("svc-b"))
        .collect();
    assert_eq!(held.len(), 1, "{:?}", d.events);
    let (i, ev) = held[0];
    assert_eq!(ev.reason, QUOTA_HELD);
    assert_eq!(
        ev.message,
        format!(
            "held suspended by RayService ns/svc until an admitted slice covers it: slice {slice} is pending: insufficient unused quota for cpu in flavor default, 1 more needed"
        )
    );
    // an observation: published whatever is applied
    assert_eq!(d.announces(i), None);
    // quota arrives: the release is told on the child too, once the release is applied
    admit_counts(&mut ws[1]);
    let d = decide(&s, &[&active, &pending], &ws, &GateOptions::default());
    let (i, ev) = d
        .events
        .iter()
        .enumerate()
        .find(|(_, e)| e.child.as_deref() == Some("svc-b"))
        .expect("an Event on svc-b");
    assert_eq!(ev.reason, QUOTA_RELEASED);
    assert_eq!(
        ev.message,
        format!("released by RayService ns/svc: slice {slice} is admitted and covers every child")
    );
    let release = d
        .actions
        .iter()
        .position(|a| matches!(a, GateAction::Release { child, .. } if child == "svc-b"));
    assert_eq!(d.announces(i), release);
    assert!(release.is_some());
}

#[test]
fn an_upgrade_s_evicted_slice_holds_only_the_upgrade_and_a_service_s_own_eviction_stops_it() {
    let s = service(gated("svc-a,svc-b"), None).cluster_names("svc-a", "svc-b");
    let (mut ws, mut t) = (vec![], 10);
    let active = child("svc-a", 1, false, 1);
    let released = child("svc-b", 2, false, 1);
    let both = [&active, &released];
    for admit in [0, 1] {
        let d = decide(&s, &both[..=admit], &ws, &GateOptions::default());
        apply_slices(&mut ws, &d, &mut t);
        admit_counts(&mut ws[admit]);
    }
    let d = decide(&s, &both, &ws, &GateOptions::default());
    apply_slices(&mut ws, &d, &mut t);
    assert!(workload::is_finished(ws[0].status.as_ref()));
    let slice = ws[1].metadata.name.clone().unwrap();
    cond(
        &mut ws[1],
        condition::EVICTED,
        "PodsReadyTimeout",
        "timeout",
        "True",
    );
    // the pending child is suspended again; the service is not stopped
    let d = decide(&s, &both, &ws, &GateOptions::default());
    assert_eq!(
        kinds(&d),
        [
            format!("Annotate {UPGRADE_EVICTED_ANNOTATION} true"),
            "Hold svc-b".to_string()
        ]
    );
    let warned = |on: Option<&str>| {
        d.events.iter().any(|e| {
            e.reason == "UpgradeEvicted"
                && e.type_ == EventType::Warning
                && e.child.as_deref() == on
                && e.message.contains(&slice)
                && e.message.contains("PodsReadyTimeout")
        })
    };
    assert!(warned(None) && warned(Some("svc-b")), "{:?}", d.events);
    // held: the evicted slice shrinks to the serving child and the upgrade queues again
    let s = service(
        json!({ RELEASED_ANNOTATION: "svc-a,svc-b", UPGRADE_EVICTED_ANNOTATION: slice }),
        None,
    )
    .cluster_names("svc-a", "svc-b");
    let held = child("svc-b", 2, true, 1);
    let d = decide(&s, &[&active, &held], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["SetPodSets", "Create"]);
    apply_slices(&mut ws, &d, &mut t);
    // KubeRay drops the pending child: the shrunk evicted slice still covers the serving child
    let d = decide(&s, &[&active], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["Finish"]);
    // without an upgrade, an eviction of the service's own slice stops it, as before
    let plain = service(gated("svc-a"), None).cluster_names("svc-a", "");
    let d = decide(&plain, &[&active], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["SuspendService PodsReadyTimeout"]);
}

#[test]
fn with_kueue_a_running_child_whose_slice_was_deleted_is_not_stopped_and_a_warning_says_so() {
    let s = service(gated("svc-a"), None).cluster_names("svc-a", "");
    let running = child("svc-a", 1, false, 1);
    let kueue = GateOptions {
        mode: crate::admission::AdmissionMode::Kueue,
        ..Default::default()
    };
    // the covering Workload is gone: a new slice is created, nothing is held or stopped
    let d = decide(&s, &[&running], &[], &kueue);
    assert_eq!(kinds(&d), ["Create"]);
    let warning = d
        .events
        .iter()
        .find(|e| e.reason == "CoverageLapsed")
        .expect("a CoverageLapsed Event");
    assert_eq!(warning.type_, EventType::Warning);
    assert!(warning.message.contains("svc-a"), "{}", warning.message);
    assert!(
        warning
            .message
            .contains(d.target.as_deref().unwrap_or("none")),
        "{}",
        warning.message
    );
    // builtin admission keeps the deleted slice charged and tells it there
    let d = decide(&s, &[&running], &[], &GateOptions::default());
    assert!(d.events.iter().all(|e| e.reason != "CoverageLapsed"));
    // once the new slice holds quota, no warning
    let mut ws = vec![];
    apply_slices(&mut ws, &decide(&s, &[&running], &[], &kueue), &mut 10);
    admit_counts(&mut ws[0]);
    let d = decide(&s, &[&running], &ws, &kueue);
    assert!(d.events.iter().all(|e| e.reason != "CoverageLapsed"));
}

#[test]
fn an_eviction_of_the_serving_child_s_own_slice_stops_the_service_even_with_an_upgrade_held() {
    let s = service(gated("svc-a"), None).cluster_names("svc-a", "svc-b");
    let (mut ws, mut t) = (vec![], 10);
    let active = child("svc-a", 1, false, 1);
    let held = child("svc-b", 2, true, 1);
    let d = decide(&s, &[&active], &ws, &GateOptions::default());
    apply_slices(&mut ws, &d, &mut t);
    admit_counts(&mut ws[0]);
    // the upgrade's replacement is pending; the serving child's own slice is preempted
    let d = decide(&s, &[&active, &held], &ws, &GateOptions::default());
    apply_slices(&mut ws, &d, &mut t);
    cond(
        &mut ws[0],
        condition::EVICTED,
        reason::PREEMPTED,
        "preempted",
        "True",
    );
    let d = decide(&s, &[&active, &held], &ws, &GateOptions::default());
    assert_eq!(kinds(&d), ["SuspendService Preempted"]);
}
