use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

use super::*;
use crate::podsets::{self, PodSet};
use crate::quantity::Quantity;
use crate::types::kueue::condition;
use raygate_testing::{admit_counts, set_condition};

fn ctx(mode: AdmissionMode) -> SliceContext {
    SliceContext {
        owner: SliceOwner {
            namespace: "ns".into(),
            name: "svc".into(),
            uid: "uid-1".into(),
        },
        queue_name: "team-a".into(),
        priority_class_ref: None,
        priority: None,
        mode,
        children_exist: true,
        serving: None,
        now: None,
    }
}

fn ps(name: &str, group: &str, count: i32, cpu: &str) -> PodSet {
    let template = raygate_testing::ray_pod(cpu);
    let requests = podsets::pod_requests(template.spec.as_ref().unwrap(), "t", "t").unwrap();
    PodSet {
        name: name.into(),
        group: group.into(),
        count,
        requests,
        template,
    }
}

/// A PodSet whose template also names a container image (same shape whatever the image).
fn ps_img(name: &str, group: &str, count: i32, cpu: &str, image: &str) -> PodSet {
    let mut p = ps(name, group, count, cpu);
    if let Some(spec) = p.template.spec.as_mut() {
        spec.containers[0].image = Some(image.to_string());
    }
    p
}

fn head(count: i32) -> PodSet {
    ps("head", "headgroup", count, "1")
}

fn workers(count: i32) -> PodSet {
    ps("workers", "workers", count, "1")
}

/// Applies a plan the way the controller does, stamping creation times in order.
fn apply(ws: &mut Vec<Workload>, plan: &SlicePlan, clock: &mut i64) {
    for a in &plan.actions {
        match a {
            SliceAction::Create { workload, .. } => {
                let mut w = (**workload).clone();
                *clock += 1;
                w.metadata.creation_timestamp = Some(Time(Timestamp::from_second(*clock).unwrap()));
                ws.push(w);
            }
            SliceAction::SetPodSets { name, pod_sets, .. } => {
                let w = ws
                    .iter_mut()
                    .find(|w| w.metadata.name.as_deref() == Some(name))
                    .unwrap();
                w.spec.pod_sets = pod_sets.clone();
            }
            SliceAction::Finish { name, reason, .. } => {
                let w = ws
                    .iter_mut()
                    .find(|w| w.metadata.name.as_deref() == Some(name))
                    .unwrap();
                set(w, condition::FINISHED, reason);
            }
            SliceAction::SetPriority {
                name,
                priority_class_ref,
                priority,
            } => {
                let w = ws
                    .iter_mut()
                    .find(|w| w.metadata.name.as_deref() == Some(name))
                    .unwrap();
                w.spec.priority_class_ref = Some(priority_class_ref.clone());
                w.spec.priority = Some(*priority);
            }
        }
    }
}

fn step(
    ws: &mut Vec<Workload>,
    c: &SliceContext,
    desired: &[PodSet],
    clock: &mut i64,
) -> SlicePlan {
    let p = plan(c, desired, ws);
    apply(ws, &p, clock);
    p
}

fn set(w: &mut Workload, type_: &str, reason: &str) {
    set_condition(w, type_, "True", reason, "");
}

fn by_name<'a>(ws: &'a [Workload], n: &str) -> &'a Workload {
    ws.iter()
        .find(|w| w.metadata.name.as_deref() == Some(n))
        .unwrap()
}

fn live(ws: &[Workload]) -> Vec<&Workload> {
    ws.iter()
        .filter(|w| !workload::is_finished(w.status.as_ref()))
        .collect()
}

fn count_of(w: &Workload, podset: &str) -> i32 {
    w.spec
        .pod_sets
        .iter()
        .find(|p| p.name == podset)
        .map(|p| p.count)
        .unwrap_or(-1)
}

#[test]
fn no_slice_creates_a_root_with_kueue_annotations_and_owner() {
    let p = plan(&ctx(AdmissionMode::Builtin), &[head(1), workers(2)], &[]);
    let [
        SliceAction::Create {
            workload,
            replaces: None,
        },
    ] = p.actions.as_slice()
    else {
        panic!("{p:?}")
    };
    let n = workload.metadata.name.clone().unwrap();
    assert_eq!(p.target.as_deref(), Some(n.as_str()));
    assert!(n.starts_with("rayservice-svc-") && n.len() <= 63);
    let ann = workload.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann[ELASTIC_JOB_ANNOTATION], "true");
    assert_eq!(ann[WORKLOAD_SLICE_NAME_ANNOTATION], n);
    assert!(!ann.contains_key(WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION));
    assert_eq!(workload.spec.queue_name.as_deref(), Some("team-a"));
    let owner = &workload.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("RayService", "uid-1", Some(true))
    );
    assert_eq!(
        counts(&workload.spec.pod_sets),
        [("head", 1), ("workers", 2)]
    );
    let group = &workload.spec.pod_sets[1]
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()[GROUP_ANNOTATION];
    assert_eq!(group, "workers");
}

#[test]
fn equal_counts_keep_the_slice_and_planning_is_idempotent() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    let p = plan(&c, &[head(1), workers(2)], &ws);
    assert_eq!(
        plan(&c, &[head(1), workers(2)], &ws),
        p,
        "same input, same plan (and name)"
    );
    apply(&mut ws, &p, &mut clock);
    assert_eq!(plan(&c, &[head(1), workers(2)], &ws).actions, []);
    admit_counts(&mut ws[0]);
    assert_eq!(plan(&c, &[head(1), workers(2)], &ws).actions, []);
}

#[test]
fn a_pending_slice_is_updated_in_place() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(2)], &mut clock);
    let p = plan(&c, &[head(1), workers(5)], &ws);
    assert!(
        matches!(&p.actions[..], [SliceAction::SetPodSets { .. }]),
        "{p:?}"
    );
    apply(&mut ws, &p, &mut clock);
    assert_eq!(ws.len(), 1);
    assert_eq!(count_of(&ws[0], "workers"), 5);
}

#[test]
fn a_scale_down_of_a_reserved_slice_is_in_place_and_keeps_the_podset_list() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(4)], &mut clock);
    admit_counts(&mut ws[0]);
    let p = plan(&c, &[head(1)], &ws);
    apply(&mut ws, &p, &mut clock);
    assert_eq!(ws.len(), 1);
    assert_eq!(counts(&ws[0].spec.pod_sets), [("head", 1), ("workers", 0)]);
}

#[test]
fn a_scale_up_of_a_reserved_slice_is_a_replacement_charged_by_delta() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(1)], &mut clock);
    admit_counts(&mut ws[0]);
    let root = ws[0].metadata.name.clone().unwrap();
    // a zero-downtime upgrade: a second child with the same shapes
    let p = plan(&c, &[head(2), workers(2)], &ws);
    let [
        SliceAction::Create {
            workload,
            replaces: Some(old),
        },
    ] = p.actions.as_slice()
    else {
        panic!("{p:?}")
    };
    assert_eq!(old, &root);
    let ann = workload.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        ann[WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION],
        format!("ns/{root}")
    );
    assert_eq!(ann[WORKLOAD_SLICE_NAME_ANNOTATION], root);
    assert_eq!(
        counts(&workload.spec.pod_sets),
        [("head", 2), ("workers", 2)]
    );
    apply(&mut ws, &p, &mut clock);
    // while it is pending the old slice stays and the plan is stable
    assert_eq!(plan(&c, &[head(2), workers(2)], &ws).actions, []);
    assert!(!workload::is_finished(by_name(&ws, &root).status.as_ref()));
    assert!(!covers(&ws[0], &[head(2), workers(2)]));
}

#[test]
fn a_pending_replacement_follows_further_changes_and_is_dropped_when_not_needed() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(1)], &mut clock);
    admit_counts(&mut ws[0]);
    step(&mut ws, &c, &[head(2), workers(2)], &mut clock);
    let p = plan(&c, &[head(2), workers(3)], &ws);
    assert!(
        matches!(
            &p.actions[..],
            [SliceAction::SetPodSets {
                why: "pending replacement follows the PodSets",
                ..
            }]
        ),
        "{p:?}"
    );
    apply(&mut ws, &p, &mut clock);
    // the upgrade was abandoned: back within the head
    let p = plan(&c, &[head(1), workers(1)], &ws);
    assert!(
        matches!(
            &p.actions[..],
            [SliceAction::Finish {
                reason: "OutOfSync",
                ..
            }]
        ),
        "{p:?}"
    );
    apply(&mut ws, &p, &mut clock);
    assert_eq!(live(&ws).len(), 1);
}

#[test]
fn the_replaced_slice_is_finished_once_its_replacement_holds_quota() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(1)], &mut clock);
    admit_counts(&mut ws[0]);
    step(&mut ws, &c, &[head(2), workers(2)], &mut clock);
    admit_counts(&mut ws[1]);
    let p = plan(&c, &[head(2), workers(2)], &ws);
    assert!(
        matches!(
            &p.actions[..],
            [SliceAction::Finish {
                reason: "WorkloadSliceReplaced",
                ..
            }]
        ),
        "{p:?}"
    );
    apply(&mut ws, &p, &mut clock);
    assert!(workload::is_finished(ws[0].status.as_ref()));
    assert!(covers(&ws[1], &[head(2), workers(2)]));
}

#[test]
fn consecutive_scale_ups_get_distinct_names() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    let mut names = BTreeSet::new();
    for n in 1..=4 {
        step(&mut ws, &c, &[head(1), workers(n)], &mut clock);
        let newest = ws.last_mut().unwrap();
        names.insert(newest.metadata.name.clone().unwrap());
        admit_counts(newest);
        step(&mut ws, &c, &[head(1), workers(n)], &mut clock);
        // scale back down then up again: the same counts must not reuse a finished name
        step(&mut ws, &c, &[head(1), workers(1)], &mut clock);
    }
    assert_eq!(names.len(), 4, "{names:?}");
    let all: BTreeSet<_> = ws
        .iter()
        .map(|w| w.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(all.len(), ws.len(), "no name reused");
}

#[test]
fn stray_slices_are_finished_out_of_sync() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1)], &mut clock);
    let mut stray = ws[0].clone();
    stray.metadata.name = Some("stray".into());
    ws.push(stray);
    let p = plan(&c, &[head(1)], &ws);
    assert!(
        p.actions.iter().any(|a| matches!(
            a,
            SliceAction::Finish {
                reason: "OutOfSync",
                ..
            }
        )),
        "{p:?}"
    );
    apply(&mut ws, &p, &mut clock);
    assert_eq!(live(&ws).len(), 1);
}

#[test]
fn an_evicted_slice_keeps_its_quota_until_the_pods_are_gone() {
    let mut c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(2)], &mut clock);
    admit_counts(&mut ws[0]);
    set(&mut ws[0], condition::EVICTED, reason::PREEMPTED);
    assert_eq!(
        plan(&c, &[head(1), workers(2)], &ws),
        SlicePlan {
            actions: vec![],
            target: None
        }
    );
    c.children_exist = false;
    let p = plan(&c, &[head(1), workers(2)], &ws);
    assert!(
        matches!(
            &p.actions[..],
            [
                SliceAction::Finish { .. },
                SliceAction::Create { replaces: None, .. }
            ]
        ),
        "{p:?}"
    );
}

#[test]
fn a_slice_kueue_evicted_for_pods_ready_is_requeued_after_its_backoff_with_its_count() {
    let at = |s: i64| k8s_openapi::jiff::Timestamp::from_second(1_767_225_600 + s).unwrap();
    let mut c = ctx(AdmissionMode::Kueue);
    c.children_exist = false;
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(2)], &mut clock);
    admit_counts(&mut ws[0]);
    set(&mut ws[0], condition::EVICTED, "PodsReadyTimeout");
    // Kueue's `UpdateRequeueState`: the second requeue, not before 120 s from now
    ws[0].status.as_mut().unwrap().requeue_state = Some(crate::types::kueue::RequeueState {
        count: Some(2),
        requeue_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(
            120,
        ))),
    });
    c.now = Some(at(60));
    let p = plan(&c, &[head(1), workers(2)], &ws);
    assert_eq!(p, SlicePlan::default(), "nothing before the backoff ends");
    c.now = Some(at(120));
    let p = plan(&c, &[head(1), workers(2)], &ws);
    let [
        SliceAction::Finish { .. },
        SliceAction::Create { workload, .. },
    ] = &p.actions[..]
    else {
        panic!("{p:?}")
    };
    let carried = workload
        .status
        .as_ref()
        .and_then(|s| s.requeue_state.clone());
    assert_eq!(
        carried,
        Some(crate::types::kueue::RequeueState {
            count: Some(2),
            requeue_at: None
        }),
        "the new slice counts on from the evicted one"
    );
    // the controller looks again when the backoff ends
    assert_eq!(super::backoff_ends(&ws, at(60)), Some(at(120)));
    assert_eq!(super::backoff_ends(&ws, at(120)), None);
    // a preemption sets no requeue state: the new slice carries none
    ws[0].status.as_mut().unwrap().requeue_state = None;
    let p = plan(&c, &[head(1), workers(2)], &ws);
    let [_, SliceAction::Create { workload, .. }] = &p.actions[..] else {
        panic!("{p:?}")
    };
    assert_eq!(workload.status, None);
}

#[test]
fn a_deactivated_slice_is_kept() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1)], &mut clock);
    ws[0].spec.active = Some(false);
    set(&mut ws[0], condition::EVICTED, reason::DEACTIVATED);
    assert_eq!(plan(&c, &[head(1)], &ws).actions, []);
}

#[test]
fn beyond_kueue_a_new_worker_group_is_still_a_delta_replacement() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(2)], &mut clock);
    admit_counts(&mut ws[0]);
    let gpu = ps("gpu", "gpu", 2, "8");
    let p = plan(&c, &[head(2), workers(2), gpu.clone()], &ws);
    let [
        SliceAction::Create {
            workload,
            replaces: Some(_),
        },
    ] = p.actions.as_slice()
    else {
        panic!("{p:?}")
    };
    assert_eq!(
        counts(&workload.spec.pod_sets),
        [("head", 2), ("workers", 2), ("gpu", 2)]
    );
    assert!(
        workload
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION)
    );
}

#[test]
fn kueue_compatible_replacements_keep_the_podset_list_identical() {
    let c = ctx(AdmissionMode::Kueue);
    let (mut ws, mut clock) = (vec![], 0);
    step(
        &mut ws,
        &c,
        &[head(1), workers(2), ps("gpu", "gpu", 1, "8")],
        &mut clock,
    );
    admit_counts(&mut ws[0]);
    // gpu group removed, workers scaled up: same list, gpu count 0
    let p = plan(&c, &[head(1), workers(4)], &ws);
    let [SliceAction::Create { workload, .. }] = p.actions.as_slice() else {
        panic!("{p:?}")
    };
    assert_eq!(
        counts(&workload.spec.pod_sets),
        [("head", 1), ("workers", 4), ("gpu", 0)]
    );
    // a group new to the chain starts a new chain instead
    let p = plan(
        &c,
        &[
            head(1),
            workers(2),
            ps("gpu", "gpu", 1, "8"),
            ps("tpu", "tpu", 1, "2"),
        ],
        &ws,
    );
    let [
        SliceAction::Create {
            workload,
            replaces: Some(_),
        },
    ] = p.actions.as_slice()
    else {
        panic!("{p:?}")
    };
    let ann = workload.metadata.annotations.as_ref().unwrap();
    assert!(ann.contains_key(SUPERSEDES_ANNOTATION));
    assert!(!ann.contains_key(WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION));
    assert_eq!(
        ann[WORKLOAD_SLICE_NAME_ANNOTATION],
        workload.metadata.name.clone().unwrap()
    );
}

#[test]
fn after_a_resource_changing_upgrade_the_slice_shrinks_onto_the_right_shape() {
    // chain admitted during the upgrade: old workers (1 cpu) and new workers (2 cpu) side by side
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    let big = |n: i32, name: &str| ps(name, "workers", n, "2");
    step(
        &mut ws,
        &c,
        &[head(2), workers(2), big(2, "workers-abc")],
        &mut clock,
    );
    admit_counts(&mut ws[0]);
    // the old child is gone: of_service now names the big shape plainly "workers"
    let p = plan(&c, &[head(1), big(2, "workers")], &ws);
    let [
        SliceAction::SetPodSets {
            pod_sets,
            why: "scale-down in place",
            ..
        },
    ] = p.actions.as_slice()
    else {
        panic!("{p:?}")
    };
    // the 2-cpu pods stay charged under their chain name, the 1-cpu PodSet drops to 0
    assert_eq!(
        counts(pod_sets),
        [("head", 1), ("workers", 0), ("workers-abc", 2)]
    );
    apply(&mut ws, &p, &mut clock);
    assert!(covers(&ws[0], &[head(1), big(2, "workers")]));
    assert!(!covers(&ws[0], &[head(1), big(3, "workers")]));
}

#[test]
fn covers_is_shape_exact() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(2)], &mut clock);
    admit_counts(&mut ws[0]);
    assert!(covers(&ws[0], &[head(1), workers(2)]));
    assert!(covers(&ws[0], &[head(1), workers(1)]));
    assert!(!covers(&ws[0], &[head(2), workers(2)]));
    assert!(
        !covers(&ws[0], &[head(1), ps("workers", "workers", 2, "2")]),
        "same name, bigger pods"
    );
    assert_eq!(
        Quantity::parse("1").unwrap(),
        ws[0]
            .spec
            .pod_sets
            .iter()
            .map(|p| shape(p).unwrap().requests.get("cpu"))
            .next()
            .unwrap()
    );
}

/// Random sequences of desired PodSets and admissions.
#[derive(Debug, Clone)]
enum Event {
    Desire(Vec<(usize, i32, u8, u8, u8)>), // (group index, count, cpu, image, pool)
    AdmitNewest,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => prop::collection::vec((0usize..4, 0i32..5, 1u8..3, 0u8..2, 0u8..3), 0..4).prop_map(Event::Desire),
        2 => Just(Event::AdmitNewest),
    ]
}

proptest! {
    #[test]
    fn chains_stay_normal_under_random_events(events in prop::collection::vec(event(), 1..25), kueue in any::<bool>()) {
        let c = ctx(if kueue { AdmissionMode::Kueue } else { AdmissionMode::Builtin });
        let (mut ws, mut clock) = (vec![], 0i64);
        let mut desired = vec![head(1)];
        for e in events {
            match e {
                Event::Desire(groups) => {
                    desired = vec![head(1)];
                    let mut seen = BTreeSet::new();
                    for (g, n, cpu, image, pool) in groups {
                        if seen.insert(g) {
                            let p = ps_img(&format!("g{g}"), &format!("g{g}"), n, &cpu.to_string(), &format!("ray:{image}"));
                            // pool 0: no node selector; 1, 2: a GPU pool
                            desired.push(if pool == 0 { p } else { in_pool(p, &format!("p{pool}")) });
                        }
                    }
                }
                Event::AdmitNewest => {
                    if let Some(w) = ws.iter_mut().rev().find(|w: &&mut Workload| !workload::is_finished(w.status.as_ref()) && !workload::holds_quota(w.status.as_ref())) {
                        admit_counts(w);
                    }
                }
            }
            let p = plan(&c, &desired, &ws);
            // Kueue's webhook: a quota-holding slice's PodSets change only by count decreases
            for a in &p.actions {
                if let SliceAction::SetPodSets { name, pod_sets, .. } = a {
                    let stored = by_name(&ws, name);
                    if workload::holds_quota(stored.status.as_ref()) {
                        prop_assert_eq!(pod_sets.len(), stored.spec.pod_sets.len());
                        for (new, old) in pod_sets.iter().zip(&stored.spec.pod_sets) {
                            prop_assert!(new.count <= old.count, "count raised in place");
                            prop_assert_eq!(&kueue::PodSet { count: old.count, ..new.clone() }, old, "more than a count changed in place");
                        }
                    }
                }
            }
            apply(&mut ws, &p, &mut clock);
            // after applying: planning again changes nothing (idempotent)
            let again = plan(&c, &desired, &ws);
            prop_assert_eq!(&again.actions, &vec![], "not idempotent");
            let live = live(&ws);
            let reserved = live.iter().filter(|w| workload::holds_quota(w.status.as_ref())).count();
            prop_assert!(reserved <= 1, "{} reserved", reserved);
            prop_assert!(live.len() - reserved <= 1, "more than one pending");
            // the target, once admitted, covers the desired PodSets exactly
            let target = by_name(&ws, p.target.as_deref().unwrap());
            let mut t = target.clone();
            admit_counts(&mut t);
            prop_assert!(covers(&t, &desired));
            // every PodSet list fits a Workload and names are unique
            for w in &live {
                prop_assert!(w.spec.pod_sets.len() <= podsets::MAX_PODSETS);
                let names: BTreeSet<_> = w.spec.pod_sets.iter().map(|p| &p.name).collect();
                prop_assert_eq!(names.len(), w.spec.pod_sets.len());
            }
            // Kueue-compatible: a replacement's list equals its old slice's
            if kueue {
                for w in &live {
                    if let Some(old) = workload::replacement_for(w, w.metadata.namespace.as_deref().unwrap_or_default()) {
                        let old = ws.iter().find(|o| meta::key(&o.metadata) == old).unwrap();
                        let a: Vec<_> = w.spec.pod_sets.iter().map(|p| &p.name).collect();
                        let b: Vec<_> = old.spec.pod_sets.iter().map(|p| &p.name).collect();
                        prop_assert_eq!(a, b);
                    }
                }
            }
        }
        let names: BTreeSet<_> = ws.iter().map(|w| w.metadata.name.clone()).collect();
        prop_assert_eq!(names.len(), ws.len(), "a slice name was reused");
    }
}

#[test]
fn an_image_only_change_never_rewrites_a_reserved_slice_template() {
    let c = ctx(AdmissionMode::Kueue);
    let (mut ws, mut clock) = (vec![], 0);
    let v1 = |n| ps_img("workers", "workers", n, "1", "ray:1");
    step(&mut ws, &c, &[head(1), v1(4)], &mut clock);
    admit_counts(&mut ws[0]);
    let stored = ws[0].spec.pod_sets.clone();
    // same shape, new image, fewer pods: the stored PodSets with the new count, nothing else
    let v2 = ps_img("workers", "workers", 2, "1", "ray:2");
    let p = plan(&c, &[head(1), v2], &ws);
    let [SliceAction::SetPodSets { pod_sets, .. }] = p.actions.as_slice() else {
        panic!("{p:?}")
    };
    assert_eq!(pod_sets[0], stored[0]);
    assert_eq!(
        pod_sets[1],
        kueue::PodSet {
            count: 2,
            ..stored[1].clone()
        }
    );
    // same counts, new image: nothing to write
    let v2 = ps_img("workers", "workers", 4, "1", "ray:2");
    assert_eq!(plan(&c, &[head(1), v2], &ws).actions, []);
}

#[test]
fn a_replacement_created_in_the_same_second_is_the_head_not_the_older_name() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(1)], &mut clock);
    admit_counts(&mut ws[0]);
    step(&mut ws, &c, &[head(1), workers(2)], &mut clock);
    assert_eq!(ws.len(), 2);
    ws[1].metadata.creation_timestamp = ws[0].metadata.creation_timestamp.clone();
    ws[1].metadata.name = Some("rayservice-svc-0".into()); // sorts before its predecessor
    admit_counts(&mut ws[1]);
    let p = plan(&c, &[head(1), workers(2)], &ws);
    let old = ws[0].metadata.name.clone().unwrap();
    assert_eq!(
        p.actions,
        [SliceAction::Finish {
            name: old,
            reason: reason::WORKLOAD_SLICE_REPLACED,
            message: "replaced by rayservice-svc-0".into(),
        }]
    );
    assert_eq!(p.target.as_deref(), Some("rayservice-svc-0"));
}

#[test]
fn a_podset_without_an_assignment_grants_nothing() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1), workers(3)], &mut clock);
    admit_counts(&mut ws[0]);
    assert!(covers(&ws[0], &[head(1), workers(3)]));
    let admission = ws[0]
        .status
        .as_mut()
        .and_then(|s| s.admission.as_mut())
        .unwrap();
    admission.pod_set_assignments.retain(|a| a.name == "head");
    assert!(!covers(&ws[0], &[head(1), workers(3)]));
    assert!(covers(&ws[0], &[head(1), workers(0)]));
    // an assignment without a count (older Kueue) grants the PodSet's count
    ws[0]
        .status
        .as_mut()
        .and_then(|s| s.admission.as_mut())
        .unwrap()
        .pod_set_assignments[0]
        .count = None;
    assert!(covers(&ws[0], &[head(1)]));
}

#[test]
fn a_pending_slice_follows_a_queue_or_priority_class_change() {
    let mut c = ctx(AdmissionMode::Builtin);
    c.queue_name = "team-typo".into();
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1)], &mut clock);
    c.queue_name = "team-a".into();
    let p = step(&mut ws, &c, &[head(1)], &mut clock);
    assert!(
        matches!(&p.actions[..], [SliceAction::Finish { reason: r, .. }, SliceAction::Create { .. }] if *r == reason::OUT_OF_SYNC),
        "{p:?}"
    );
    let target = by_name(&ws, p.target.as_deref().unwrap());
    assert_eq!(target.spec.queue_name.as_deref(), Some("team-a"));
    assert_eq!(live(&ws).len(), 1);
    // a priority raise: the pending slice follows in place, keeping its place in the queue
    c.priority_class_ref = Some(class("high"));
    c.priority = Some(1000);
    let before = live(&ws)[0].metadata.creation_timestamp.clone();
    let p = step(&mut ws, &c, &[head(1)], &mut clock);
    assert!(
        matches!(
            &p.actions[..],
            [SliceAction::SetPriority { priority: 1000, .. }]
        ),
        "{p:?}"
    );
    let target = by_name(&ws, p.target.as_deref().unwrap());
    assert_eq!(target.spec.priority, Some(1000));
    assert_eq!(target.metadata.creation_timestamp, before);
    assert_eq!(live(&ws).len(), 1);
    assert_eq!(plan(&c, &[head(1)], &ws).actions, []);
    // a class that does not resolve (missing, or not seen yet) does not recreate it at priority 0
    let unresolved = SliceContext {
        priority_class_ref: None,
        priority: None,
        ..c.clone()
    };
    assert_eq!(plan(&unresolved, &[head(1)], &ws).actions, []);
    // once it holds quota, its queue is Kueue's to keep: no change
    let n = p.target.clone().unwrap();
    admit_counts(
        ws.iter_mut()
            .find(|w| w.metadata.name.as_deref() == Some(&n))
            .unwrap(),
    );
    c.queue_name = "team-b".into();
    assert_eq!(plan(&c, &[head(1)], &ws).actions, []);
}

fn class(name: &str) -> PriorityClassRef {
    PriorityClassRef {
        group: "kueue.x-k8s.io".into(),
        kind: "WorkloadPriorityClass".into(),
        name: name.into(),
    }
}

/// A pending replacement, and the admitted head beside it, follow a priority class change and a
/// class value change in place (Kueue v0.19.2's `UpdateWorkloadPriority` and its
/// WorkloadPriorityClass controller); a head that reserved quota without a class keeps none.
#[test]
fn every_live_slice_follows_the_priority_class_and_its_value_in_place() {
    let mut c = ctx(AdmissionMode::Builtin);
    c.priority_class_ref = Some(class("low"));
    c.priority = Some(10);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &c, &[head(1)], &mut clock);
    admit_counts(&mut ws[0]);
    step(&mut ws, &c, &[head(1), workers(2)], &mut clock);
    assert_eq!(live(&ws).len(), 2, "head and a pending replacement");
    let names: Vec<String> = live(&ws).iter().map(|w| meta::name(&w.metadata)).collect();
    for (name, value) in [("high", 1000), ("high", 2000)] {
        c.priority_class_ref = Some(class(name));
        c.priority = Some(value);
        let p = step(&mut ws, &c, &[head(1), workers(2)], &mut clock);
        let set: Vec<&str> = p
            .actions
            .iter()
            .filter_map(|a| match a {
                SliceAction::SetPriority { name, priority, .. } if *priority == value => {
                    Some(name.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(set, names, "{p:?}");
        assert_eq!(p.actions.len(), 2, "nothing else: {p:?}");
        for w in live(&ws) {
            assert_eq!(w.spec.priority, Some(value));
            assert_eq!(w.spec.priority_class_ref, Some(class(name)));
        }
        assert_eq!(plan(&c, &[head(1), workers(2)], &ws).actions, []);
    }
    // a head that reserved quota with no class cannot be given one; its pending replacement can
    let mut plain = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    step(&mut ws, &plain, &[head(1)], &mut clock);
    admit_counts(&mut ws[0]);
    step(&mut ws, &plain, &[head(1), workers(2)], &mut clock);
    plain.priority_class_ref = Some(class("high"));
    plain.priority = Some(1000);
    let p = plan(&plain, &[head(1), workers(2)], &ws);
    let pending = meta::name(&live(&ws)[1].metadata);
    assert!(
        matches!(&p.actions[..], [SliceAction::SetPriority { name, .. }] if *name == pending),
        "{p:?}"
    );
}

fn finished_at(w: &mut Workload, second: i64) {
    let st = w.status.get_or_insert_with(Default::default);
    st.conditions.retain(|c| c.type_ != condition::FINISHED);
    st.conditions
        .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: condition::FINISHED.into(),
            status: "True".into(),
            reason: reason::WORKLOAD_SLICE_REPLACED.into(),
            message: String::new(),
            last_transition_time: Time(Timestamp::from_second(second).unwrap()),
            observed_generation: None,
        });
}

#[test]
fn finished_slices_are_deleted_after_the_retention_keeping_the_newest() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    // a chain of six slices: five finished (replaced) at seconds 100..=500, one live
    for n in 1..=6 {
        step(&mut ws, &c, &[head(1), workers(n)], &mut clock);
        let last = ws.len() - 1;
        admit_counts(&mut ws[last]);
        step(&mut ws, &c, &[head(1), workers(n)], &mut clock);
    }
    assert_eq!(ws.len(), 6);
    for (i, w) in ws.iter_mut().take(5).enumerate() {
        finished_at(w, 100 * (i as i64 + 1));
    }
    assert_eq!(live(&ws).len(), 1);
    let retention = Retention {
        after_finished: std::time::Duration::from_secs(1000),
        keep_newest: 2,
    };
    let names: Vec<String> = ws
        .iter()
        .map(|w| w.metadata.name.clone().unwrap())
        .collect();
    let at = |s| Timestamp::from_second(s).unwrap();
    assert_eq!(expired(&ws, at(1099), &retention), Vec::<String>::new());
    assert_eq!(expired(&ws, at(1100), &retention), [names[0].clone()]);
    // the newest two finished (400, 500) stay however old; the live slice is never a candidate
    assert_eq!(expired(&ws, at(100_000), &retention), names[..3].to_vec());
}

/// Every eviction starts a new chain: the newest finished slices are kept per RayService, not
/// per chain, so chains ended by evictions do not pile up.
#[test]
fn finished_slices_of_many_chains_are_kept_per_rayservice() {
    let at = |s| Timestamp::from_second(s).unwrap();
    let mut ws = Vec::new();
    for chain in 0..10 {
        for i in 0..3 {
            let mut w = Workload::new(&format!("c{chain}-s{i}"), Default::default());
            w.metadata.annotations = Some(
                [(
                    crate::types::kueue::WORKLOAD_SLICE_NAME_ANNOTATION.to_string(),
                    format!("c{chain}-s0"),
                )]
                .into(),
            );
            finished_at(&mut w, 100 * chain + i);
            ws.push(w);
        }
    }
    let retention = Retention {
        after_finished: std::time::Duration::from_secs(60),
        keep_newest: 3,
    };
    let gone = expired(&ws, at(100_000), &retention);
    assert_eq!(gone.len(), 27, "{gone:?}");
    assert!(
        gone.iter().all(|n| !n.starts_with("c9-")),
        "the newest chain's three stay"
    );
    assert_eq!(
        gone.first().map(String::as_str),
        Some("c0-s0"),
        "oldest first"
    );
}

/// `p` placed on GPU pool `pool`: a node selector and a toleration.
fn in_pool(mut p: PodSet, pool: &str) -> PodSet {
    if let Some(spec) = p.template.spec.as_mut() {
        spec.node_selector = Some([("gpu-pool".to_string(), pool.to_string())].into());
        spec.tolerations = Some(vec![k8s_openapi::api::core::v1::Toleration {
            key: Some("gpu-pool".into()),
            value: Some(pool.into()),
            operator: Some("Equal".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }]);
    }
    p
}

/// Issue #9 (a): an upgrade that only moves a worker group to another GPU pool gives a PodSet of
/// its own, so the replacement is charged to the new pool's flavor (not counted into the old one).
#[test]
fn a_group_moved_to_another_pool_is_a_podset_of_its_own() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    let a = |n: i32, name: &str| in_pool(ps(name, "workers", n, "1"), "a");
    let b = |n: i32, name: &str| in_pool(ps(name, "workers", n, "1"), "b");
    step(&mut ws, &c, &[head(1), a(2, "workers")], &mut clock);
    admit_counts(&mut ws[0]);
    // the upgrade: the new child's workers on pool b (of_service names them with a suffix)
    let p = plan(&c, &[head(2), a(2, "workers"), b(2, "workers-b")], &ws);
    let [SliceAction::Create { workload, .. }] = p.actions.as_slice() else {
        panic!("{p:?}")
    };
    assert_eq!(
        counts(&workload.spec.pod_sets),
        [("head", 2), ("workers", 2), ("workers-b", 2)]
    );
    let moved = &workload.spec.pod_sets[2].template;
    assert_eq!(
        moved.spec.as_ref().unwrap().node_selector,
        Some([("gpu-pool".to_string(), "b".to_string())].into())
    );
    // the old slice covers neither the moved group nor the same group without a placement
    assert!(covers(&ws[0], &[head(1), a(2, "workers")]));
    assert!(!covers(&ws[0], &[head(1), b(2, "workers")]));
    assert!(!covers(&ws[0], &[head(1), workers(2)]));
    apply(&mut ws, &p, &mut clock);
    admit_counts(&mut ws[1]);
    // promoted: the old child is gone; the chain shrinks onto the pool-b PodSet in place
    let p = plan(&c, &[head(1), b(2, "workers")], &ws);
    let shrink = p
        .actions
        .iter()
        .find_map(|a| match a {
            SliceAction::SetPodSets { pod_sets, .. } => Some(counts(pod_sets)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{p:?}"));
    assert_eq!(shrink, [("head", 1), ("workers", 0), ("workers-b", 2)]);
}

/// Issue #9 (a): tolerations alone make a placement too, and their order does not.
#[test]
fn tolerations_alone_distinguish_podsets_but_their_order_does_not() {
    let c = ctx(AdmissionMode::Builtin);
    let (mut ws, mut clock) = (vec![], 0);
    let tolerate = |keys: &[&str]| {
        let mut p = workers(1);
        p.template.spec.as_mut().unwrap().tolerations = Some(
            keys.iter()
                .map(|k| k8s_openapi::api::core::v1::Toleration {
                    key: Some(k.to_string()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                })
                .collect(),
        );
        p
    };
    step(&mut ws, &c, &[head(1), tolerate(&["x", "y"])], &mut clock);
    admit_counts(&mut ws[0]);
    assert!(covers(&ws[0], &[head(1), tolerate(&["y", "x"])]));
    assert_eq!(plan(&c, &[head(1), tolerate(&["y", "x"])], &ws).actions, []);
    assert!(!covers(&ws[0], &[head(1), tolerate(&["x"])]));
    assert!(!covers(&ws[0], &[head(1), workers(1)]));
}

#[test]
fn an_upgrade_s_evicted_slice_keeps_the_serving_child_then_requeues_only_the_delta() {
    for mode in [AdmissionMode::Builtin, AdmissionMode::Kueue] {
        let c = ctx(mode);
        let (mut ws, mut clock) = (vec![], 0);
        step(&mut ws, &c, &[head(1), workers(1)], &mut clock);
        admit_counts(&mut ws[0]);
        // the upgrade's replacement is admitted, the old slice finished
        step(&mut ws, &c, &[head(2), workers(2)], &mut clock);
        admit_counts(&mut ws[1]);
        step(&mut ws, &c, &[head(2), workers(2)], &mut clock);
        let evicted = ws[1].metadata.name.clone().unwrap();
        set(&mut ws[1], condition::EVICTED, "PodsReadyTimeout");
        let serving = |upgrade_held| SliceContext {
            serving: Some(ServingCover {
                podsets: vec![head(1), workers(1)],
                upgrade_held,
            }),
            ..c.clone()
        };
        // while the pending child still runs: nothing finishes, nothing is queued
        let p = plan(&serving(false), &[head(2), workers(2)], &ws);
        assert_eq!(p.actions, [], "{mode:?}");
        assert_eq!(p.target.as_deref(), Some(evicted.as_str()));
        // once it is held: the evicted slice shrinks to the serving child in place, and the
        // upgrade is queued again as its replacement (charged its delta)
        let p = step(&mut ws, &serving(true), &[head(2), workers(2)], &mut clock);
        let [
            SliceAction::SetPodSets { name, .. },
            SliceAction::Create {
                replaces: Some(old),
                ..
            },
        ] = p.actions.as_slice()
        else {
            panic!("{mode:?}: {p:?}")
        };
        assert_eq!((name, old), (&evicted, &evicted));
        assert_eq!(
            counts(&by_name(&ws, &evicted).spec.pod_sets),
            [("head", 1), ("workers", 1)]
        );
        assert!(workload::holds_quota(
            by_name(&ws, &evicted).status.as_ref()
        ));
        // stable; and without the upgrade (its child gone) the shrunk slice is the target
        assert_eq!(
            plan(&serving(true), &[head(2), workers(2)], &ws).actions,
            []
        );
        let p = plan(&serving(true), &[head(1), workers(1)], &ws);
        assert_eq!(p.target.as_deref(), Some(evicted.as_str()));
        assert!(
            matches!(&p.actions[..], [SliceAction::Finish { .. }]),
            "{mode:?}: the queued upgrade is dropped: {p:?}"
        );
    }
}
