//! Scenario tests: one rule each, with the numbers in the body.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::testing::*;
use super::*;
use crate::types::kueue::*;
use crate::workload::{holds_quota, is_finished};

const RELEASE: Options = Options {
    release_evicted_immediately: true,
};
const HOLD: Options = Options {
    release_evicted_immediately: false,
};

/// Flavors `default`, one LocalQueue per ClusterQueue with the ClusterQueue's name.
fn snap(cqs: Vec<ClusterQueue>, workloads: Vec<Workload>) -> Snapshot {
    let local_queues = cqs
        .iter()
        .map(|c| {
            let n = c.metadata.name.clone().unwrap();
            local_queue(&n, &n)
        })
        .collect();
    Snapshot {
        flavors: vec![resource_flavor("default")],
        cluster_queues: cqs,
        local_queues,
        workloads,
        ..Snapshot::default()
    }
}

fn with_preemption(
    mut c: ClusterQueue,
    within: WithinClusterQueue,
    reclaim: ReclaimWithinCohort,
) -> ClusterQueue {
    c.spec.preemption = Some(ClusterQueuePreemption {
        within_cluster_queue: Some(within),
        reclaim_within_cohort: Some(reclaim),
        borrow_within_cohort: None,
    });
    c
}

fn set_quota(c: &mut ClusterQueue, nominal: &str, borrowing: Option<&str>, lending: Option<&str>) {
    let r = &mut c.spec.resource_groups[0].flavors[0].resources[0];
    *r = resource_quota(&r.name, nominal, borrowing, lending);
}

fn final_state(s: Snapshot, options: &Options) -> (Snapshot, Vec<CycleResult>) {
    run_until_stable(s, options, ts(1000), 100)
}

fn status_of<'a>(s: &'a Snapshot, name: &str) -> Option<&'a WorkloadStatus> {
    s.workloads
        .iter()
        .find(|w| w.metadata.name.as_deref() == Some(name))
        .and_then(|w| w.status.as_ref())
}

// ---------------------------------------------------------------------------------------------
// fit, messages and usage
// ---------------------------------------------------------------------------------------------

#[test]
fn a_workload_that_does_not_fit_gets_a_message_naming_queue_flavor_resource_and_shortfall() {
    let s = snap(
        vec![cluster_queue("team-a").flavor_quota("default", &[("cpu", "3")])],
        vec![
            workload("running")
                .queue("team-a")
                .podset(podset("main").count(1).cpu("1"))
                .admitted("team-a", "default", ts(0)),
            workload("big")
                .queue("team-a")
                .podset(podset("main").count(3).cpu("1")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        decision(&r, "big"),
        Some(&Decision::Pending {
            workload: "default/big".into(),
            reason: "Pending",
            message: "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default of ClusterQueue team-a: requested 3, 2 available of nominal 3 (1 more needed)".into(),
        })
    );
    assert_eq!(r.cluster_queues[0].pending, 1);
    assert_eq!(r.cluster_queues[0].admitted, 1);
    assert_eq!(r.cluster_queues[0].active, Ok(()));
}

#[test]
fn a_workload_above_the_maximum_is_told_it_can_never_fit() {
    let s = snap(
        vec![cluster_queue("team-a").flavor_quota("default", &[("cpu", "3")])],
        vec![
            workload("big")
                .queue("team-a")
                .podset(podset("main").count(2).cpu("2")),
        ],
    );
    assert_eq!(
        message(&cycle(&s, &RELEASE), "big"),
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default of ClusterQueue team-a: requested 4, 3 available of nominal 3; the maximum is 3, so it can never fit"
    );
}

#[test]
fn admission_records_flavors_and_total_usage_per_podset() {
    let s = snap(
        vec![cluster_queue("team-a").flavor_quota("default", &[("cpu", "10"), ("memory", "64Gi")])],
        vec![{
            let mut w = workload("w")
                .queue("team-a")
                .podset(podset("head").count(1).cpu("1"))
                .podset(podset("worker").count(3).cpu("1500m"));
            w.spec.pod_sets[1].template = pod_template(&[("cpu", "1500m"), ("memory", "4Gi")]);
            w
        }],
    );
    let r = cycle(&s, &RELEASE);
    let Some(Decision::Admit { admission, .. }) = decision(&r, "w") else {
        panic!("{:?}", r.decisions)
    };
    assert_eq!(admission.cluster_queue, "team-a");
    let worker = &admission.pod_set_assignments[1];
    assert_eq!(worker.count, Some(3));
    assert_eq!(worker.flavors["memory"], "default");
    assert_eq!(worker.resource_usage["cpu"].0, "4500m");
    assert_eq!(worker.resource_usage["memory"].0, "12Gi");
    assert_eq!(usage(&r, "team-a", "default", "cpu").0, q("5500m"));
    assert_eq!(
        usage(&r, "team-a", "default", "memory").0.to_string(),
        "12Gi"
    );
    assert_eq!(r.cluster_queues[0].admitted, 1);
    assert_eq!(r.local_queues[0].admitted, 1);
    assert_eq!(
        r.local_queues[0].reservation[0].resources[0].total,
        Some(kq("5500m"))
    );
}

#[test]
fn later_workloads_see_the_usage_left_by_earlier_ones_in_the_same_cycle() {
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "5")])],
        vec![
            workload("a")
                .queue("cq")
                .podset(podset("main").count(1).cpu("3"))
                .created(1),
            workload("b")
                .queue("cq")
                .podset(podset("main").count(1).cpu("3"))
                .created(2),
            workload("c")
                .queue("cq")
                .podset(podset("main").count(1).cpu("2"))
                .created(3),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(admitted_names(&r), ["a", "c"]);
    assert!(message(&r, "b").contains("requested 3, 2 available of nominal 5 (1 more needed)"));
}

#[test]
fn in_place_scale_down_releases_quota_at_once() {
    // admitted with 4 × 1 cpu, scaled down in place to 2: 2 cpu are free for the next one
    let mut big = workload("big")
        .queue("cq")
        .podset(podset("worker").count(4).cpu("1"))
        .admitted("cq", "default", ts(0));
    big.spec.pod_sets[0].count = 2;
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![
            big,
            workload("next")
                .queue("cq")
                .podset(podset("main").count(2).cpu("1")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(admitted_names(&r), ["next"]);
    assert_eq!(usage(&r, "cq", "default", "cpu").0, q("4"));
}

#[test]
fn zero_count_podsets_need_nothing() {
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "1")])],
        vec![
            workload("w")
                .queue("cq")
                .podset(podset("head").count(1).cpu("1"))
                .podset(podset("idle").count(0).cpu("64")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    let Some(Decision::Admit { admission, .. }) = decision(&r, "w") else {
        panic!("{:?}", r.decisions)
    };
    assert!(admission.pod_set_assignments[1].flavors.is_empty());
    assert_eq!(admission.pod_set_assignments[1].count, Some(0));
}

// ---------------------------------------------------------------------------------------------
// workload slices
// ---------------------------------------------------------------------------------------------

#[test]
fn replacement_slice_is_charged_only_the_delta() {
    // old slice: head 1 + worker 1 = 2 cpu, admitted; replacement: head 1 + worker 3 = 4 cpu
    let old = workload("old")
        .queue("team-a")
        .podset(podset("head").count(1).cpu("1"))
        .podset(podset("worker").count(1).cpu("1"))
        .admitted("team-a", "default", ts(0));
    let new = workload("new")
        .queue("team-a")
        .podset(podset("head").count(1).cpu("1"))
        .podset(podset("worker").count(3).cpu("1"))
        .created(10)
        .replacing("old");
    let s = snap(
        vec![cluster_queue("team-a").flavor_quota("default", &[("cpu", "3")])],
        vec![old, new],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        message(&r, "new"),
        "couldn't assign flavors to pod set worker: insufficient unused quota for cpu in flavor default of ClusterQueue team-a: requested 2 (4 for this slice minus 2 held by default/old), 1 available of nominal 3 (1 more needed)"
    );
    assert!(decision(&r, "old").is_none(), "the old slice is untouched");
    assert_eq!(usage(&r, "team-a", "default", "cpu").0, q("2"));

    // nominal 4: the delta of 2 fits
    let mut s = s;
    set_quota(&mut s.cluster_queues[0], "4", None, None);
    let r = cycle(&s, &RELEASE);
    assert!(
        matches!(r.decisions[0], Decision::Admit { ref workload, .. } if workload == "default/new")
    );
    assert_eq!(
        r.decisions[1],
        Decision::FinishReplaced {
            workload: "default/old".into(),
            replaced_by: "default/new".into()
        }
    );
    assert_eq!(usage(&r, "team-a", "default", "cpu").0, q("4"));
    let (s, _) = final_state(s, &RELEASE);
    assert!(is_finished(status_of(&s, "old")));
    assert!(holds_quota(status_of(&s, "new")));
}

#[test]
fn an_old_slice_left_unfinished_beside_its_admitted_replacement_is_finished_by_the_next_pass() {
    // the pass that admitted "new" finished "old", but that write failed: both hold quota now,
    // and no later admission of "new" comes to finish "old" (found by the sweep's write faults)
    let old = workload("old")
        .queue("team-a")
        .podset(podset("head").count(1).cpu("1"))
        .podset(podset("worker").count(1).cpu("1"))
        .admitted("team-a", "default", ts(0));
    let new = workload("new")
        .queue("team-a")
        .podset(podset("head").count(1).cpu("1"))
        .podset(podset("worker").count(3).cpu("1"))
        .created(10)
        .replacing("old")
        .admitted("team-a", "default", ts(20));
    let waiting = workload("waiting")
        .queue("team-a")
        .podset(podset("main").count(1).cpu("2"))
        .created(30);
    let s = snap(
        vec![cluster_queue("team-a").flavor_quota("default", &[("cpu", "6")])],
        vec![old, new, waiting],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        decision(&r, "old"),
        Some(&Decision::FinishReplaced {
            workload: "default/old".into(),
            replaced_by: "default/new".into()
        })
    );
    // the old slice's 2 cpu are free again in this very pass: 4 + 2 = 6
    assert!(
        matches!(decision(&r, "waiting"), Some(Decision::Admit { .. })),
        "{:?}",
        r.decisions
    );
    assert_eq!(usage(&r, "team-a", "default", "cpu").0, q("6"));
    let (s, _) = final_state(s, &RELEASE);
    assert!(is_finished(status_of(&s, "old")));
    assert!(holds_quota(status_of(&s, "new")));
}

/// A chain whose old slice (1 CPU) was evicted and requeued before its replacement (2 CPUs)
/// was admitted, in full as nothing was left to replace, with 3 CPUs free.
fn requeued_old_slice_beside_its_admitted_replacement() -> Snapshot {
    let evict = Decision::Evict {
        workload: "default/old".into(),
        reason: reason::PREEMPTED.into(),
        message: "Preempted to accommodate a workload (default/urgent)".into(),
    };
    let mut old = workload("old")
        .queue("team-a")
        .podset(podset("head").count(1).cpu("1"))
        .admitted("team-a", "default", ts(0));
    let evicted = apply_decision(old.status.as_ref(), None, &evict, ts(20));
    old.status = Some(release_quota(Some(&evicted), None, ts(21)));
    let new = workload("new")
        .queue("team-a")
        .podset(podset("head").count(2).cpu("1"))
        .created(10)
        .replacing("old")
        .admitted("team-a", "default", ts(30));
    let team_a = cluster_queue("team-a").flavor_quota("default", &[("cpu", "5")]);
    snap(vec![team_a], vec![old, new])
}

#[test]
fn a_slice_evicted_before_its_replacement_was_admitted_is_finished_not_admitted_again() {
    let finished_old = Decision::FinishReplaced {
        workload: "default/old".into(),
        replaced_by: "default/new".into(),
    };
    // "new" holds the chain's PodSets: "old", admitted again, would charge its CPU twice
    for options in [RELEASE, HOLD] {
        let r = cycle(
            &requeued_old_slice_beside_its_admitted_replacement(),
            &options,
        );
        assert_eq!(r.decisions, std::slice::from_ref(&finished_old));
        assert_eq!(usage(&r, "team-a", "default", "cpu").0, q("2"));
    }
    // the same pass: "urgent" preempts "old" while "new" waits behind it; once "urgent" is done,
    // one pass admits "new" in full and comes to "old" next, with room for it
    let old = workload("old")
        .queue("team-a")
        .priority(1)
        .podset(podset("head").count(1).cpu("1"))
        .admitted("team-a", "default", ts(0));
    let new = workload("new")
        .queue("team-a")
        .priority(1)
        .podset(podset("head").count(2).cpu("1"))
        .created(10)
        .replacing("old");
    let urgent = workload("urgent")
        .queue("team-a")
        .priority(2)
        .podset(podset("main").count(6).cpu("1"))
        .created(5);
    let team_a = with_preemption(
        cluster_queue("team-a").flavor_quota("default", &[("cpu", "6")]),
        WithinClusterQueue::LowerPriority,
        ReclaimWithinCohort::Never,
    );
    let mut sched = Scheduler::new(snap(vec![team_a], vec![old, new, urgent]), &RELEASE);
    let r = sched.cycle();
    assert!(matches!(decision(&r, "old"), Some(Decision::Evict { .. })));
    sched.apply(&r, ts(20));
    let r = sched.cycle();
    assert_eq!(admitted_names(&r), ["urgent"]);
    assert_eq!(message(&r, "old"), "replaced by workload slice default/new");
    sched.apply(&r, ts(30));
    sched.finish("default/urgent", "Succeeded", "done", ts(40));
    // "old" queues at its creation time, ahead of "new", but is not admitted beside it; the
    // pass after "new" is admitted finishes it
    let r = sched.cycle();
    assert_eq!(admitted_names(&r), ["new"]);
    assert_eq!(usage(&r, "team-a", "default", "cpu").0, q("2"));
    sched.apply(&r, ts(50));
    let r = sched.cycle();
    assert_eq!(decision(&r, "old"), Some(&finished_old));
    sched.apply(&r, ts(55));
    assert!(is_finished(status_of(sched.snapshot(), "old")));
    assert!(!sched.apply(&sched.cycle(), ts(60)));
}

#[test]
fn unchanged_podset_is_not_charged_twice() {
    // Kueue's "8, not 12": A holds a=4; its replacement has a=4 and a new b=4 → 8 in use, and a
    // later 3-cpu Workload waits on 10 − 8 = 2
    let a = workload("a")
        .queue("cq")
        .podset(podset("a").count(1).cpu("4"))
        .admitted("cq", "default", ts(0));
    let b = workload("b")
        .queue("cq")
        .podset(podset("a").count(1).cpu("4"))
        .podset(podset("b").count(1).cpu("4"))
        .created(1)
        .replacing("a");
    let later = workload("later")
        .queue("cq")
        .podset(podset("main").count(1).cpu("3"))
        .created(2);
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "10")])],
        vec![a, b, later],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(admitted_names(&r), ["b"]);
    assert_eq!(usage(&r, "cq", "default", "cpu").0, q("8"));
    assert!(message(&r, "later").contains("requested 3, 2 available of nominal 10"));
    // and it stays 8 once the old slice is gone
    let (_, results) = final_state(s, &RELEASE);
    assert_eq!(
        usage(results.last().unwrap(), "cq", "default", "cpu").0,
        q("8")
    );
}

#[test]
fn podset_names_may_change_between_slices() {
    // worker group renamed and another added: the delta is per (flavor, resource) over the whole
    // Workload, never "incompatible"
    let old = workload("old")
        .queue("cq")
        .podset(podset("head").count(1).cpu("1"))
        .podset(podset("workers-v1").count(2).cpu("1"))
        .admitted("cq", "default", ts(0));
    let new = workload("new")
        .queue("cq")
        .podset(podset("head").count(1).cpu("1"))
        .podset(podset("workers-v2").count(2).cpu("1"))
        .podset(podset("extra").count(1).cpu("1"))
        .created(1)
        .replacing("old");
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![old, new],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(admitted_names(&r), ["new"]);
    assert_eq!(usage(&r, "cq", "default", "cpu").0, q("4"));
}

#[test]
fn replacement_keeps_the_old_slices_flavor_but_new_podsets_choose_freely() {
    let two_flavors = || {
        cluster_queue("cq")
            .flavor_quota("small", &[("cpu", "2")])
            .flavor_quota("large", &[("cpu", "10")])
    };
    let mut s = snap(
        vec![two_flavors()],
        vec![
            workload("old")
                .queue("cq")
                .podset(podset("worker").count(2).cpu("1"))
                .admitted("cq", "small", ts(0)),
            workload("new")
                .queue("cq")
                .podset(podset("worker").count(4).cpu("1"))
                .created(1)
                .replacing("old"),
        ],
    );
    s.flavors.push(resource_flavor("small"));
    s.flavors.push(resource_flavor("large"));
    let r = cycle(&s, &RELEASE);
    assert!(
        message(&r, "new").contains("in flavor small of ClusterQueue cq: requested 2"),
        "{}",
        message(&r, "new")
    );
    // a podset the old slice did not have may go to the flavor with room
    s.workloads[1] = workload("new")
        .queue("cq")
        .podset(podset("worker").count(2).cpu("1"))
        .podset(podset("gpu-free").count(3).cpu("1"))
        .created(1)
        .replacing("old");
    let r = cycle(&s, &RELEASE);
    let Some(Decision::Admit { admission, .. }) = decision(&r, "new") else {
        panic!("{:?}", r.decisions)
    };
    assert_eq!(admission.pod_set_assignments[0].flavors["cpu"], "small");
    assert_eq!(admission.pod_set_assignments[1].flavors["cpu"], "large");
}

#[test]
fn a_replacement_of_a_slice_that_holds_nothing_is_charged_in_full() {
    let old = workload("old")
        .queue("cq")
        .podset(podset("worker").count(2).cpu("1"))
        .created(5); // pending, holds nothing
    let new = workload("new")
        .queue("cq")
        .podset(podset("worker").count(4).cpu("1"))
        .created(1)
        .replacing("old");
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "5")])],
        vec![
            workload("running")
                .queue("cq")
                .podset(podset("main").count(2).cpu("1"))
                .admitted("cq", "default", ts(0)),
            old,
            new,
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert!(
        message(&r, "new").contains("requested 4, 3 available"),
        "{}",
        message(&r, "new")
    );
    assert!(
        !r.decisions
            .iter()
            .any(|d| matches!(d, Decision::FinishReplaced { .. }))
    );
}

#[test]
fn replacement_in_another_namespace_is_ignored() {
    let old = workload("old")
        .queue("cq")
        .podset(podset("worker").count(2).cpu("1"))
        .admitted("cq", "default", ts(0));
    let mut new = workload("new")
        .queue("cq")
        .podset(podset("worker").count(3).cpu("1"))
        .created(1);
    new.metadata.annotations = Some(
        [(
            WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION.to_string(),
            "other/old".to_string(),
        )]
        .into(),
    );
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![old, new],
    );
    let r = cycle(&s, &RELEASE);
    assert!(message(&r, "new").contains("requested 3, 2 available"));
}

#[test]
fn old_slice_is_never_a_victim_of_its_own_replacement() {
    // cq 4: old (prio 5) 2 cpu + other (prio 0) 2 cpu; replacement (prio 5) needs 4 → delta 2:
    // it preempts `other`, never `old`
    let cq4 = with_preemption(
        cluster_queue("cq").flavor_quota("default", &[("cpu", "4")]),
        WithinClusterQueue::LowerPriority,
        ReclaimWithinCohort::Never,
    );
    let old = workload("old")
        .queue("cq")
        .podset(podset("worker").count(2).cpu("1"))
        .admitted("cq", "default", ts(0))
        .priority(5);
    let other = workload("other")
        .queue("cq")
        .podset(podset("main").count(2).cpu("1"))
        .admitted("cq", "default", ts(0))
        .priority(0);
    let new = workload("new")
        .queue("cq")
        .podset(podset("worker").count(4).cpu("1"))
        .created(1)
        .replacing("old")
        .priority(5);
    let s = snap(vec![cq4], vec![old, other, new]);
    let r = cycle(&s, &RELEASE);
    assert!(
        matches!(decision(&r, "other"), Some(Decision::Evict { reason, .. }) if reason == "Preempted")
    );
    assert!(decision(&r, "old").is_none());
    assert!(message(&r, "new").ends_with(". Pending the preemption of 1 workload(s)"));
    let (s, results) = final_state(s, &RELEASE);
    assert!(holds_quota(status_of(&s, "new")));
    assert!(is_finished(status_of(&s, "old")));
    assert!(!holds_quota(status_of(&s, "other")));
    assert_eq!(
        usage(results.last().unwrap(), "cq", "default", "cpu").0,
        q("4")
    );
}

#[test]
fn old_slice_is_finished_only_with_its_replacements_admission() {
    // the replacement does not fit: the old slice keeps running, not finished
    let old = workload("old")
        .queue("cq")
        .podset(podset("worker").count(2).cpu("1"))
        .admitted("cq", "default", ts(0));
    let new = workload("new")
        .queue("cq")
        .podset(podset("worker").count(9).cpu("1"))
        .created(1)
        .replacing("old");
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![old, new],
    );
    let (s, results) = final_state(s, &RELEASE);
    assert!(results.iter().all(|r| {
        r.decisions
            .iter()
            .all(|d| !matches!(d, Decision::FinishReplaced { .. }))
    }));
    assert!(holds_quota(status_of(&s, "old")));
}

// ---------------------------------------------------------------------------------------------
// flavors
// ---------------------------------------------------------------------------------------------

fn spot_and_on_demand() -> Snapshot {
    Snapshot {
        flavors: vec![
            resource_flavor("spot").node_labels(&[("type", "spot")]),
            resource_flavor("on-demand").node_labels(&[("type", "on-demand")]),
        ],
        cluster_queues: vec![
            cluster_queue("cq")
                .flavor_quota("spot", &[("cpu", "2")])
                .flavor_quota("on-demand", &[("cpu", "10")]),
        ],
        local_queues: vec![local_queue("cq", "cq")],
        ..Snapshot::default()
    }
}

fn with_selector(mut w: Workload, key: &str, value: &str) -> Workload {
    for ps in &mut w.spec.pod_sets {
        ps.template.spec.as_mut().unwrap().node_selector =
            Some([(key.to_string(), value.to_string())].into());
    }
    w
}

#[test]
fn flavors_are_tried_in_order_and_node_selectors_narrow_them() {
    let mut s = spot_and_on_demand();
    s.workloads = vec![
        workload("a-big")
            .queue("cq")
            .podset(podset("main").count(3).cpu("1"))
            .created(1), // spot has 2: on-demand
        workload("b-small")
            .queue("cq")
            .podset(podset("main").count(1).cpu("1"))
            .created(2), // spot fits
        with_selector(
            workload("c-pinned")
                .queue("cq")
                .podset(podset("main").count(1).cpu("1"))
                .created(3),
            "type",
            "on-demand",
        ),
        with_selector(
            workload("d-gpu")
                .queue("cq")
                .podset(podset("main").count(1).cpu("1"))
                .created(4),
            "type",
            "gpu",
        ),
    ];
    let r = cycle(&s, &RELEASE);
    let flavor_of = |name: &str| match decision(&r, name) {
        Some(Decision::Admit { admission, .. }) => {
            admission.pod_set_assignments[0].flavors["cpu"].clone()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(flavor_of("a-big"), "on-demand");
    assert_eq!(flavor_of("b-small"), "spot");
    assert_eq!(flavor_of("c-pinned"), "on-demand");
    assert_eq!(
        message(&r, "d-gpu"),
        "couldn't assign flavors to pod set main: flavor spot doesn't match the node selector type=gpu (its nodeLabels have type=spot); flavor on-demand doesn't match the node selector type=gpu (its nodeLabels have type=on-demand)"
    );
}

/// ClusterQueue `cq` with flavors `f0` then `f1` and `flavorFungibility` (whenCanBorrow,
/// whenCanPreempt).
fn two_flavors(f0: &str, f1: &str, borrow: &str, preempt: &str) -> ClusterQueue {
    let mut c = cluster_queue("cq")
        .flavor_quota("f0", &[("cpu", f0)])
        .flavor_quota("f1", &[("cpu", f1)]);
    c.spec.flavor_fungibility = Some(FlavorFungibility {
        when_can_borrow: Some(borrow.into()),
        when_can_preempt: Some(preempt.into()),
        preference: None,
    });
    c
}

fn flavor_snap(cqs: Vec<ClusterQueue>, workloads: Vec<Workload>) -> Snapshot {
    let mut s = snap(cqs, workloads);
    s.flavors = vec![resource_flavor("f0"), resource_flavor("f1")];
    s
}

fn cpu_flavor(r: &CycleResult, name: &str) -> String {
    match decision(r, name) {
        Some(Decision::Admit { admission, .. }) => {
            admission.pod_set_assignments[0].flavors["cpu"].clone()
        }
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn when_can_borrow_try_next_flavor_passes_over_a_flavor_it_would_borrow_in() {
    // f0 has no nominal quota of its own (the cohort lends it 4), f1 has 4: MayStopSearch stops
    // at the first flavor that fits, borrowing or not; TryNextFlavor goes on to one that fits
    // without borrowing (Kueue's `shouldTryNextFlavor`)
    for (policy, want) in [("MayStopSearch", "f0"), ("TryNextFlavor", "f1")] {
        let cq = two_flavors("0", "4", policy, "TryNextFlavor").cohort("pool");
        let lender = cluster_queue("lender")
            .cohort("pool")
            .flavor_quota("f0", &[("cpu", "4")]);
        let s = flavor_snap(
            vec![cq, lender],
            vec![
                workload("w")
                    .queue("cq")
                    .podset(podset("main").count(2).cpu("1")),
            ],
        );
        assert_eq!(cpu_flavor(&cycle(&s, &RELEASE), "w"), want, "{policy}");
    }
}

#[test]
fn when_can_preempt_may_stop_search_preempts_in_the_first_flavor_with_victims() {
    // f0 is full of a lower-priority Workload, f1 is free: TryNextFlavor (Kueue's default)
    // takes f1 without preempting, MayStopSearch preempts in f0
    for (policy, admitted) in [("TryNextFlavor", true), ("MayStopSearch", false)] {
        let cq = with_preemption(
            two_flavors("2", "2", "MayStopSearch", policy),
            WithinClusterQueue::LowerPriority,
            ReclaimWithinCohort::Never,
        );
        let s = flavor_snap(
            vec![cq],
            vec![
                workload("low")
                    .queue("cq")
                    .priority(1)
                    .podset(podset("main").count(2).cpu("1"))
                    .admitted("cq", "f0", ts(0)),
                workload("high")
                    .queue("cq")
                    .priority(100)
                    .podset(podset("main").count(2).cpu("1"))
                    .created(5),
            ],
        );
        let r = cycle(&s, &RELEASE);
        if admitted {
            assert_eq!(cpu_flavor(&r, "high"), "f1");
        } else {
            assert!(
                r.decisions.iter().any(|d| matches!(d,
                    Decision::Evict { workload, .. } if workload == "default/low")),
                "{:?}",
                r.decisions
            );
        }
    }
}

#[test]
fn a_flavor_whose_preemption_finds_no_victim_is_passed_over() {
    // f0 would need preemption, but the only Workload there is older and of equal priority
    // (`LowerOrNewerEqualPriority` spares it): Kueue's oracle finds no candidates, and the
    // search goes on to f1 even with whenCanPreempt: MayStopSearch
    let cq = with_preemption(
        two_flavors("3", "4", "MayStopSearch", "MayStopSearch"),
        WithinClusterQueue::LowerOrNewerEqualPriority,
        ReclaimWithinCohort::Never,
    );
    let s = flavor_snap(
        vec![cq],
        vec![
            workload("older")
                .queue("cq")
                .podset(podset("main").count(1).cpu("1"))
                .admitted("cq", "f0", ts(0)),
            workload("newer")
                .queue("cq")
                .podset(podset("main").count(3).cpu("1"))
                .created(5),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(cpu_flavor(&r, "newer"), "f1");
    assert!(
        !r.decisions
            .iter()
            .any(|d| matches!(d, Decision::Evict { .. }))
    );
}

#[test]
fn all_resources_of_a_group_share_one_flavor() {
    // flavor a has cpu room but no memory room: both go to b
    let c = cluster_queue("cq").resource_group(resource_group(
        &["cpu", "memory"],
        vec![
            (
                "a",
                vec![
                    resource_quota("cpu", "10", None, None),
                    resource_quota("memory", "1Gi", None, None),
                ],
            ),
            (
                "b",
                vec![
                    resource_quota("cpu", "10", None, None),
                    resource_quota("memory", "10Gi", None, None),
                ],
            ),
        ],
    ));
    let mut s = snap(vec![c], vec![]);
    s.flavors = vec![resource_flavor("a"), resource_flavor("b")];
    let mut w = workload("w")
        .queue("cq")
        .podset(podset("main").count(1).cpu("1"));
    w.spec.pod_sets[0].template = pod_template(&[("cpu", "1"), ("memory", "2Gi")]);
    s.workloads = vec![w];
    let r = cycle(&s, &RELEASE);
    let Some(Decision::Admit { admission, .. }) = decision(&r, "w") else {
        panic!("{:?}", r.decisions)
    };
    assert_eq!(admission.pod_set_assignments[0].flavors["cpu"], "b");
    assert_eq!(admission.pod_set_assignments[0].flavors["memory"], "b");
}

#[test]
fn a_resource_no_group_covers_is_named() {
    let mut w = workload("w")
        .queue("cq")
        .podset(podset("main").count(1).cpu("1"));
    w.spec.pod_sets[0].template = pod_template(&[("cpu", "1"), ("nvidia.com/gpu", "1")]);
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![w],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        message(&r, "w"),
        "couldn't assign flavors to pod set main: resource nvidia.com/gpu is not covered by ClusterQueue cq"
    );
}

// ---------------------------------------------------------------------------------------------
// cohorts
// ---------------------------------------------------------------------------------------------

#[test]
fn borrowing_is_bounded_by_the_borrowing_limit() {
    let mut a = cluster_queue("a")
        .cohort("pool")
        .flavor_quota("default", &[("cpu", "4")]);
    set_quota(&mut a, "4", Some("2"), None);
    let b = cluster_queue("b")
        .cohort("pool")
        .flavor_quota("default", &[("cpu", "6")]);
    let s = snap(
        vec![a.clone(), b.clone()],
        vec![
            workload("too-big")
                .queue("a")
                .podset(podset("main").count(7).cpu("1"))
                .created(1),
            workload("ok")
                .queue("a")
                .podset(podset("main").count(6).cpu("1"))
                .created(2),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        message(&r, "too-big"),
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default of ClusterQueue a: requested 7, 6 available of nominal 4; the maximum is 6 with borrowing limit 2, so it can never fit"
    );
    assert_eq!(admitted_names(&r), ["ok"]);
    assert_eq!(usage(&r, "a", "default", "cpu"), (q("6"), q("2")));
}

#[test]
fn lending_limit_keeps_part_of_the_quota_home() {
    // a lends at most 3 of its 10: b (nominal 2) reaches 5, and a keeps 7 for itself
    let mut a = cluster_queue("a")
        .cohort("pool")
        .flavor_quota("default", &[("cpu", "10")]);
    set_quota(&mut a, "10", None, Some("3"));
    let b = cluster_queue("b")
        .cohort("pool")
        .flavor_quota("default", &[("cpu", "2")]);
    let s = snap(
        vec![a, b],
        vec![
            workload("b-6")
                .queue("b")
                .podset(podset("main").count(6).cpu("1"))
                .created(1),
            workload("b-5")
                .queue("b")
                .podset(podset("main").count(5).cpu("1"))
                .created(2),
            workload("a-7")
                .queue("a")
                .podset(podset("main").count(7).cpu("1"))
                .created(3),
            workload("a-1")
                .queue("a")
                .podset(podset("main").count(1).cpu("1"))
                .created(4),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert!(
        message(&r, "b-6").contains("the maximum is 5 with all the cohort can lend"),
        "{}",
        message(&r, "b-6")
    );
    // Kueue's cycle order: a-7 and then a-1 fit in a's nominal quota and go before b-5, which
    // borrows; a-1 takes 1 of the 3 a lends, so b-5 (2 own + 3 lent) no longer fits
    assert_eq!(admitted_names(&r), ["a-7", "a-1"]);
    assert!(
        message(&r, "b-5").contains("requested 5, 4 available of nominal 2"),
        "{}",
        message(&r, "b-5")
    );
    // without a-1, b reaches its 5 and a keeps its 7
    let mut s = s;
    s.workloads
        .retain(|w| w.metadata.name.as_deref() != Some("a-1"));
    let r = cycle(&s, &RELEASE);
    assert_eq!(admitted_names(&r), ["a-7", "b-5"]);
    assert_eq!(usage(&r, "b", "default", "cpu"), (q("5"), q("3")));
}

#[test]
fn a_cohort_tree_lends_its_own_quota_down() {
    // org (own 10 cpu) ← team (cohort, no quota) ← x (nominal 2); y sits in org with nominal 0
    let org = cohort("org").resource_group(resource_group(
        &["cpu"],
        vec![("default", vec![resource_quota("cpu", "10", None, None)])],
    ));
    let team = cohort("team").parent("org");
    let x = cluster_queue("x")
        .cohort("team")
        .flavor_quota("default", &[("cpu", "2")]);
    let y = cluster_queue("y")
        .cohort("org")
        .flavor_quota("default", &[("cpu", "0")]);
    let mut s = snap(
        vec![x, y],
        vec![
            workload("x-12")
                .queue("x")
                .podset(podset("main").count(12).cpu("1"))
                .created(1),
            workload("y-1")
                .queue("y")
                .podset(podset("main").count(1).cpu("1"))
                .created(2),
        ],
    );
    s.cohorts = vec![org, team];
    let r = cycle(&s, &RELEASE);
    assert_eq!(admitted_names(&r), ["x-12"]);
    assert_eq!(usage(&r, "x", "default", "cpu"), (q("12"), q("10")));
    assert!(message(&r, "y-1").contains("0 available of nominal 0"));
    // a borrowing limit on the child cohort caps what reaches x
    s.cohorts[1] = cohort("team").parent("org").resource_group(resource_group(
        &["cpu"],
        vec![("default", vec![resource_quota("cpu", "0", Some("4"), None)])],
    ));
    let r = cycle(&s, &RELEASE);
    assert!(
        message(&r, "x-12").contains("the maximum is 6"),
        "{}",
        message(&r, "x-12")
    );
    assert_eq!(admitted_names(&r), ["y-1"]);
}

// ---------------------------------------------------------------------------------------------
// order and queueing strategy
// ---------------------------------------------------------------------------------------------

#[test]
fn higher_priority_goes_first_then_older() {
    let mut s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "2")])],
        vec![
            workload("early-low")
                .queue("cq")
                .podset(podset("main").count(2).cpu("1"))
                .created(1),
            {
                let mut w = workload("late-high")
                    .queue("cq")
                    .podset(podset("main").count(2).cpu("1"))
                    .created(9);
                w.spec.priority_class_ref = Some(PriorityClassRef {
                    group: "kueue.x-k8s.io".into(),
                    kind: "WorkloadPriorityClass".into(),
                    name: "high".into(),
                });
                w
            },
        ],
    );
    s.priority_classes = vec![workload_priority_class("high", 100)];
    assert_eq!(admitted_names(&cycle(&s, &RELEASE)), ["late-high"]);
    // a missing class falls back to spec.priority (unset: 0): creation order decides
    s.priority_classes.clear();
    assert_eq!(admitted_names(&cycle(&s, &RELEASE)), ["early-low"]);
}

#[test]
fn a_requeued_workload_queues_by_creation_time_unless_evicted_for_pods_ready() {
    // Kueue's GetQueueOrderTimestamp: a preempted Workload goes back at its creation time, ahead
    // of one created after it; one evicted by a waitForPodsReady timeout at its eviction time
    let requeued = |reason: &str| {
        let mut w = workload("requeued")
            .queue("cq")
            .podset(podset("main").count(2).cpu("1"))
            .created(1);
        w.status = Some(WorkloadStatus {
            conditions: vec![condition("Evicted", "True", reason, ts(100))],
            ..WorkloadStatus::default()
        });
        let fresh = workload("fresh")
            .queue("cq")
            .podset(podset("main").count(2).cpu("1"))
            .created(50);
        let cq = cluster_queue("cq").flavor_quota("default", &[("cpu", "2")]);
        admitted_names(&cycle(&snap(vec![cq], vec![w, fresh]), &RELEASE))
    };
    assert_eq!(requeued("Preempted"), ["requeued"]);
    assert_eq!(requeued("PodsReadyTimeout"), ["fresh"]);
    assert_eq!(requeued("AdmissionCheck"), ["fresh"]);
}

fn fifo(strategy: QueueingStrategy) -> CycleResult {
    let mut c = cluster_queue("cq").flavor_quota("default", &[("cpu", "4")]);
    c.spec.queueing_strategy = Some(strategy);
    let s = snap(
        vec![c],
        vec![
            workload("running")
                .queue("cq")
                .podset(podset("main").count(2).cpu("1"))
                .admitted("cq", "default", ts(0)),
            workload("head")
                .queue("cq")
                .podset(podset("main").count(3).cpu("1"))
                .created(1),
            workload("next")
                .queue("cq")
                .podset(podset("main").count(1).cpu("1"))
                .created(2),
        ],
    );
    cycle(&s, &RELEASE)
}

#[test]
fn best_effort_fifo_lets_smaller_workloads_past_a_blocked_head() {
    assert_eq!(
        admitted_names(&fifo(QueueingStrategy::BestEffortFIFO)),
        ["next"]
    );
}

#[test]
fn strict_fifo_keeps_later_workloads_behind_the_head() {
    let r = fifo(QueueingStrategy::StrictFIFO);
    assert!(admitted_names(&r).is_empty());
    assert_eq!(
        message(&r, "next"),
        "waiting behind workload default/head in StrictFIFO ClusterQueue cq"
    );
}

// ---------------------------------------------------------------------------------------------
// stop policies and deactivation
// ---------------------------------------------------------------------------------------------

fn stopped(policy: StopPolicy, on_local_queue: bool) -> CycleResult {
    let mut s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![
            workload("running")
                .queue("cq")
                .podset(podset("main").count(2).cpu("1"))
                .admitted("cq", "default", ts(0)),
            workload("waiting")
                .queue("cq")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    if on_local_queue {
        s.local_queues[0].spec.stop_policy = Some(policy);
    } else {
        s.cluster_queues[0].spec.stop_policy = Some(policy);
    }
    cycle(&s, &HOLD)
}

#[test]
fn hold_admits_nothing_new_and_keeps_what_runs() {
    let r = stopped(StopPolicy::Hold, false);
    assert!(decision(&r, "running").is_none());
    assert_eq!(
        decision(&r, "waiting"),
        Some(&Decision::Pending {
            workload: "default/waiting".into(),
            reason: "Inadmissible",
            message: "ClusterQueue cq is stopped".into()
        })
    );
    assert_eq!(r.cluster_queues[0].active_reason, "Stopped");
    let r = stopped(StopPolicy::Hold, true);
    assert_eq!(message(&r, "waiting"), "LocalQueue default/cq is stopped");
}

#[test]
fn hold_and_drain_evicts_what_runs() {
    let r = stopped(StopPolicy::HoldAndDrain, false);
    assert!(
        matches!(decision(&r, "running"), Some(Decision::Evict { reason, .. }) if reason == "ClusterQueueStopped")
    );
    // held until its pods are gone (controller mode)
    assert_eq!(r.cluster_queues[0].admitted, 1);
    let r = stopped(StopPolicy::HoldAndDrain, true);
    assert!(
        matches!(decision(&r, "running"), Some(Decision::Evict { reason, .. }) if reason == "LocalQueueStopped")
    );
}

#[test]
fn deactivated_workloads_are_evicted_or_kept_out() {
    let mut running = workload("running")
        .queue("cq")
        .podset(podset("main").count(2).cpu("1"))
        .admitted("cq", "default", ts(0));
    running.spec.active = Some(false);
    let mut waiting = workload("waiting")
        .queue("cq")
        .podset(podset("main").count(1).cpu("1"));
    waiting.spec.active = Some(false);
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![running, waiting],
    );
    let r = cycle(&s, &RELEASE);
    assert!(
        matches!(decision(&r, "running"), Some(Decision::Evict { reason, .. }) if reason == "Deactivated")
    );
    assert_eq!(
        decision(&r, "waiting"),
        Some(&Decision::Pending {
            workload: "default/waiting".into(),
            reason: "Inadmissible",
            message: "the workload is deactivated".into()
        })
    );
    assert_eq!(
        usage(&r, "cq", "default", "cpu").0,
        q("0"),
        "released at once"
    );
}

// ---------------------------------------------------------------------------------------------
// preemption
// ---------------------------------------------------------------------------------------------

fn preempting(within: WithinClusterQueue, workloads: Vec<Workload>) -> CycleResult {
    let c = with_preemption(
        cluster_queue("cq").flavor_quota("default", &[("cpu", "4")]),
        within,
        ReclaimWithinCohort::Never,
    );
    cycle(&snap(vec![c], workloads), &RELEASE)
}

fn admitted_at(name: &str, cpu: i32, prio: i32, at: i64) -> Workload {
    workload(name)
        .queue("cq")
        .podset(podset("main").count(cpu).cpu("1"))
        .created(at)
        .admitted("cq", "default", ts(at))
        .priority(prio)
}

fn evicted(r: &CycleResult) -> Vec<String> {
    r.decisions
        .iter()
        .filter(|d| matches!(d, Decision::Evict { .. }))
        .map(|d| d.workload().trim_start_matches("default/").to_string())
        .collect()
}

#[test]
fn never_does_not_preempt() {
    let r = preempting(
        WithinClusterQueue::Never,
        vec![
            admitted_at("low", 4, 0, 1),
            workload("high")
                .queue("cq")
                .podset(podset("main").count(2).cpu("1"))
                .created(5)
                .priority(10),
        ],
    );
    assert!(evicted(&r).is_empty());
    assert!(message(&r, "high").contains("0 available of nominal 4"));
}

#[test]
fn lower_priority_preempts_the_most_recently_admitted_first() {
    let r = preempting(
        WithinClusterQueue::LowerPriority,
        vec![
            admitted_at("low-old", 2, 0, 1),
            admitted_at("low-new", 2, 0, 2),
            workload("high")
                .queue("cq")
                .podset(podset("main").count(2).cpu("1"))
                .created(5)
                .priority(10),
        ],
    );
    assert_eq!(evicted(&r), ["low-new"]);
    assert_eq!(
        message(&r, "low-new"),
        "Preempted to accommodate a workload (default/high) due to prioritization in the ClusterQueue"
    );
    assert!(message(&r, "high").ends_with("Pending the preemption of 1 workload(s)"));
    // equal priority is not lower
    let r = preempting(
        WithinClusterQueue::LowerPriority,
        vec![
            admitted_at("peer", 4, 10, 9),
            workload("high")
                .queue("cq")
                .podset(podset("main").count(2).cpu("1"))
                .created(5)
                .priority(10),
        ],
    );
    assert!(evicted(&r).is_empty());
}

#[test]
fn lower_or_newer_equal_priority_preempts_newer_peers() {
    let make = |within| {
        preempting(
            within,
            vec![
                admitted_at("newer-peer", 4, 0, 9),
                workload("older")
                    .queue("cq")
                    .podset(podset("main").count(2).cpu("1"))
                    .created(5),
            ],
        )
    };
    assert_eq!(
        evicted(&make(WithinClusterQueue::LowerOrNewerEqualPriority)),
        ["newer-peer"]
    );
    assert!(evicted(&make(WithinClusterQueue::LowerPriority)).is_empty());
}

#[test]
fn victims_are_a_minimal_set() {
    // cq 6 full: a (prio 0, 1 cpu, newest), b (prio 0, 4 cpu), c (prio 1, 1 cpu). The preemptor
    // needs 4: a then b are taken in order, then a is given back (b alone frees 4).
    let mut c = with_preemption(
        cluster_queue("cq").flavor_quota("default", &[("cpu", "6")]),
        WithinClusterQueue::LowerPriority,
        ReclaimWithinCohort::Never,
    );
    set_quota(&mut c, "6", None, None);
    let r = cycle(
        &snap(
            vec![c],
            vec![
                admitted_at("a", 1, 0, 3),
                admitted_at("b", 4, 0, 2),
                admitted_at("c", 1, 1, 1),
                workload("p")
                    .queue("cq")
                    .podset(podset("main").count(4).cpu("1"))
                    .created(5)
                    .priority(10),
            ],
        ),
        &RELEASE,
    );
    assert_eq!(evicted(&r), ["b"]);
}

fn reclaim(policy: ReclaimWithinCohort, preemptor_priority: i32) -> CycleResult {
    // a and b have 4 each; b runs 6 (borrowing 2 of a's); a's Workload needs 4 of its own
    let a = with_preemption(
        cluster_queue("a")
            .cohort("pool")
            .flavor_quota("default", &[("cpu", "4")]),
        WithinClusterQueue::Never,
        policy,
    );
    let b = cluster_queue("b")
        .cohort("pool")
        .flavor_quota("default", &[("cpu", "4")]);
    let in_b = |name: &str, cpu: i32, at: i64| {
        workload(name)
            .queue("b")
            .podset(podset("main").count(cpu).cpu("1"))
            .created(at)
            .admitted("b", "default", ts(at))
            .priority(10)
    };
    cycle(
        &snap(
            vec![a, b],
            vec![
                in_b("b-first", 4, 1),
                in_b("b-borrowing", 2, 2),
                workload("a-own")
                    .queue("a")
                    .podset(podset("main").count(4).cpu("1"))
                    .created(5)
                    .priority(preemptor_priority),
            ],
        ),
        &RELEASE,
    )
}

#[test]
fn reclaim_within_cohort_takes_back_lent_quota() {
    let r = reclaim(ReclaimWithinCohort::Any, 0);
    assert_eq!(evicted(&r), ["b-borrowing"]);
    assert_eq!(
        message(&r, "b-borrowing"),
        "Preempted to accommodate a workload (default/a-own) due to reclamation within the cohort"
    );
    assert!(evicted(&reclaim(ReclaimWithinCohort::LowerPriority, 0)).is_empty());
    assert_eq!(
        evicted(&reclaim(ReclaimWithinCohort::LowerPriority, 20)),
        ["b-borrowing"]
    );
    assert!(evicted(&reclaim(ReclaimWithinCohort::Never, 20)).is_empty());
}

#[test]
fn preempted_quota_is_held_until_released_in_controller_mode() {
    let c = with_preemption(
        cluster_queue("cq").flavor_quota("default", &[("cpu", "4")]),
        WithinClusterQueue::LowerPriority,
        ReclaimWithinCohort::Never,
    );
    let s = snap(
        vec![c],
        vec![
            admitted_at("low", 4, 0, 1),
            workload("high")
                .queue("cq")
                .podset(podset("main").count(4).cpu("1"))
                .created(5)
                .priority(10),
        ],
    );
    let mut sched = Scheduler::new(s, &HOLD);
    let r1 = sched.cycle();
    assert_eq!(evicted(&r1), ["low"]);
    sched.apply(&r1, ts(10));
    // the victim still holds its quota: no new eviction, the preemptor keeps waiting, as its
    // status already says (a Pending decision that would change nothing is left out)
    let r2 = sched.cycle();
    assert!(evicted(&r2).is_empty());
    assert!(admitted_names(&r2).is_empty());
    assert_eq!(decision(&r2, "high"), None);
    let shown = status_of(sched.snapshot(), "high")
        .and_then(|s| crate::conditions::find(&s.conditions, condition::QUOTA_RESERVED))
        .map(|c| c.message.clone());
    assert!(shown.is_some_and(|m| m.ends_with("Pending the preemption of 1 workload(s)")));
    // its owner reports the pods gone
    sched.update_workload("default/low", |w| {
        w.status = Some(release_quota(w.status.as_ref(), None, ts(20)));
    });
    assert_eq!(admitted_names(&sched.cycle()), ["high"]);
}

/// Kueue #3948's shape: root (no quota) ⊃ {best-effort (nominal 0), Cohort guaranteed (100m)
/// ⊃ guaranteed (nominal 0)}, both queues `reclaimWithinCohort: Any`; `holder` holds 100m in
/// `held_in`, `wants` (in the other queue) asks for 100m.
fn guaranteed_and_best_effort(held_in: &str, wants_in: &str) -> Snapshot {
    let policy = |c| with_preemption(c, WithinClusterQueue::Never, ReclaimWithinCohort::Any);
    let mut s = snap(
        vec![
            policy(
                cluster_queue("best-effort")
                    .cohort("root")
                    .flavor_quota("default", &[("cpu", "0")]),
            ),
            policy(
                cluster_queue("guaranteed")
                    .cohort("guaranteed")
                    .flavor_quota("default", &[("cpu", "0")]),
            ),
        ],
        vec![
            workload("holder")
                .queue(held_in)
                .podset(podset("main").count(1).cpu("100m"))
                .admitted(held_in, "default", ts(0)),
            workload("wants")
                .queue(wants_in)
                .podset(podset("main").count(1).cpu("100m"))
                .created(1),
        ],
    );
    s.cohorts = vec![
        cohort("root"),
        cohort("guaranteed")
            .parent("root")
            .resource_group(resource_group(
                &["cpu"],
                vec![("default", vec![resource_quota("cpu", "100m", None, None)])],
            )),
    ];
    s
}

#[test]
fn a_queue_whose_sub_cohort_holds_its_request_reclaims_it_from_a_queue_outside_even_while_borrowing()
 {
    // Kueue #3948 (hierarchical cohorts, v0.19.2 `collectCandidatesForHierarchicalReclaim`):
    // best-effort borrows the guaranteed Cohort's 100m; guaranteed, at its own nominal quota
    // (0), asks for it. Its Cohort holds the request within its subtree quota, so guaranteed is
    // closer to that quota than best-effort and reclaims it, though guaranteed itself borrows
    // from its Cohort to fit. Treating the tree as one flat cohort, guaranteed was not under its
    // nominal quota and could not reclaim anything: red before.
    let s = guaranteed_and_best_effort("best-effort", "guaranteed");
    let r = cycle(&s, &RELEASE);
    assert_eq!(evicted(&r), ["holder"], "{:?}", r.decisions);
    assert!(message(&r, "holder").contains("(default/wants)"));
    let (s, _) = final_state(s, &RELEASE);
    assert!(holds_quota(status_of(&s, "wants")));
    assert!(!holds_quota(status_of(&s, "holder")));
}

#[test]
fn a_queue_over_its_nominal_quota_inside_a_sub_cohort_within_quota_is_not_reclaimed_from_outside() {
    // The reverse of Kueue #3948: guaranteed holds its Cohort's 100m (over its own nominal 0,
    // but the Cohort is within its subtree quota: nothing is borrowed from the root);
    // best-effort, with nothing of its own, cannot take it, whatever its policy.
    let s = guaranteed_and_best_effort("guaranteed", "best-effort");
    let (s, results) = final_state(s, &RELEASE);
    assert!(results.iter().all(|r| evicted(r).is_empty()));
    assert!(holds_quota(status_of(&s, "holder")));
    assert!(!holds_quota(status_of(&s, "wants")));
}

/// Issue #15, seed 75654 shrunk (one flavor, cpu): co0 (no quota) ⊃ {co2 (own 3) ⊃ cq2
/// (nominal 8), cq1 (nominal 8, lendingLimit 3)}; co2's subtree quota is 11, co0's 14. cq1 holds
/// `cq1_holds`, cq2 holds `cq2_holds` (each a list of (name, cpu, priority)); `wants` asks
/// for `cpu` in `queue` with priority 3. Both queues: `withinClusterQueue: LowerPriority`,
/// `reclaimWithinCohort: Any`.
fn seed_75654_tree(
    cq1_holds: &[(&str, &str, i32)],
    cq2_holds: &[(&str, &str, i32)],
    queue: &str,
    cpu: &str,
) -> Snapshot {
    let policy = |c| {
        with_preemption(
            c,
            WithinClusterQueue::LowerPriority,
            ReclaimWithinCohort::Any,
        )
    };
    let mut cq1 = cluster_queue("cq1")
        .cohort("co0")
        .flavor_quota("default", &[("cpu", "8")]);
    set_quota(&mut cq1, "8", None, Some("3"));
    let cq2 = cluster_queue("cq2")
        .cohort("co2")
        .flavor_quota("default", &[("cpu", "8")]);
    let holder = |(name, cpu, prio): &(&str, &str, i32), cq: &str| {
        workload(name)
            .queue(cq)
            .priority(*prio)
            .podset(podset("main").count(1).cpu(cpu))
            .admitted(cq, "default", ts(0))
    };
    let mut workloads: Vec<Workload> = cq1_holds.iter().map(|h| holder(h, "cq1")).collect();
    workloads.extend(cq2_holds.iter().map(|h| holder(h, "cq2")));
    workloads.push(
        workload("wants")
            .queue(queue)
            .priority(3)
            .podset(podset("main").count(1).cpu(cpu))
            .created(1),
    );
    let mut s = snap(vec![policy(cq1), policy(cq2)], workloads);
    s.cohorts = vec![
        cohort("co0"),
        cohort("co2").parent("co0").resource_group(resource_group(
            &["cpu"],
            vec![("default", vec![resource_quota("cpu", "3", None, None)])],
        )),
    ];
    s
}

#[test]
fn a_queue_over_its_nominal_quota_is_reclaimed_from_only_while_its_sub_cohort_is_over_too() {
    // Issue #15, seed 75654 shrunk (see `seed_75654_tree`). cq1 borrows 5 of co0 (13 over a
    // nominal 8); cq2's `wants` (8, priority 3) finds 4 and is short. co2 holds it within its
    // subtree quota (2 + 8 ≤ 11), so cq2 is closer to that quota than cq1 and reclaims it even
    // while borrowing (Kueue's hierarchical reclaim): only cq1's Workload goes. As one flat
    // cohort, cq2 had to fit within its own nominal quota and evicted its own Workload too.
    let s = seed_75654_tree(&[("cq1-13", "13", 1)], &[("cq2-2", "2", 1)], "cq2", "8");
    let r = cycle(&s, &RELEASE);
    assert_eq!(evicted(&r), ["cq1-13"], "{:?}", r.decisions);
    // cq2 holds 11 (over its nominal 8, but co2 is within its 11): cq1's `wants` (7, priority
    // 3), short with 6 available (3 of its guaranteed 5, 3 left in co0), reclaims nothing from
    // it, though its policy is `Any` (a guard: as one flat cohort, cq1 would have had to fit
    // without borrowing, which it cannot, so this was green before too).
    let s = seed_75654_tree(&[("cq1-2", "2", 3)], &[("cq2-11", "11", 1)], "cq1", "7");
    let (s, results) = final_state(s, &RELEASE);
    assert!(results.iter().all(|r| evicted(r).is_empty()));
    assert!(holds_quota(status_of(&s, "cq2-11")));
    assert!(!holds_quota(status_of(&s, "wants")));
}

#[test]
fn a_reclaim_its_victim_would_take_back_once_the_preemptor_borrows_is_not_made() {
    // Issue #15, seed 75654's ping-pong shrunk (cpu; flavors f0, f1, f2): co0 (no quota) ⊃
    // {co2 (f0: 3) ⊃ cq2 (f0: 8, f1: 10), cq1 (f0: 8 lendingLimit 3, f2: 9)}. cq2's w13
    // (priority 3) holds 12 of f0: cq2 and co2 (11) are over their quota. cq1's w07 (priority
    // 1, `reclaimWithinCohort: Any`; head 9, worker 6) finds 5 of f0: its head goes to f2, its
    // worker, within cq1's nominal quota, reclaims w13 (hierarchical reclaim). Admitted on the
    // next pass, with f0 free, w07's head takes f0 (the first flavor that fits, borrowing: 17
    // of cq1's 8), and w13 (head now on f1, extra 8 on f0, which cq2's nominal quota holds)
    // reclaims w07 (cq2: `LowerPriority`); then w07 reclaims w13 again, forever. Kueue v0.19.2
    // allows every step. A preemption whose preemptor a later pass evicts is not made: w07 is
    // held back for w13, and nothing is evicted. Red before (one flat cohort: w07 reclaimed
    // w13 just the same), and red with hierarchical preemption alone.
    let mut cq1 = cluster_queue("cq1")
        .cohort("co0")
        .flavor_quota("f0", &[("cpu", "8")])
        .flavor_quota("f2", &[("cpu", "9")]);
    set_quota(&mut cq1, "8", None, Some("3"));
    let cq1 = with_preemption(cq1, WithinClusterQueue::Never, ReclaimWithinCohort::Any);
    let cq2 = with_preemption(
        cluster_queue("cq2")
            .cohort("co2")
            .flavor_quota("f0", &[("cpu", "8")])
            .flavor_quota("f1", &[("cpu", "10")]),
        WithinClusterQueue::Never,
        ReclaimWithinCohort::LowerPriority,
    );
    let mut s = snap(
        vec![cq1, cq2],
        vec![
            workload("w11")
                .queue("cq1")
                .priority(3)
                .podset(podset("main").count(1).cpu("2"))
                .admitted("cq1", "f0", ts(0)),
            workload("w13")
                .queue("cq2")
                .priority(3)
                .podset(podset("head").count(2).cpu("2"))
                .podset(podset("extra").count(4).cpu("2"))
                .admitted("cq2", "f0", ts(0)),
            workload("w07")
                .queue("cq1")
                .priority(1)
                .podset(podset("head").count(3).cpu("3"))
                .podset(podset("worker").count(3).cpu("2"))
                .created(1),
        ],
    );
    s.flavors = ["f0", "f1", "f2"].map(resource_flavor).into();
    s.cohorts = vec![
        cohort("co0"),
        cohort("co2").parent("co0").resource_group(resource_group(
            &["cpu"],
            vec![("f0", vec![resource_quota("cpu", "3", None, None)])],
        )),
    ];
    let mut sched = Scheduler::new(s, &RELEASE);
    for pass in 0..20 {
        let r = sched.cycle();
        assert!(evicted(&r).is_empty(), "pass {pass}: {:?}", r.decisions);
        if !sched.apply(&r, ts(100 + pass)) {
            break;
        }
    }
    let s = sched.snapshot();
    assert!(holds_quota(status_of(s, "w13")));
    assert!(!holds_quota(status_of(s, "w07")));
}

// ---------------------------------------------------------------------------------------------
// bad input
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_queues_are_named() {
    let mut s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![
            workload("no-lq")
                .queue("nope")
                .podset(podset("main").count(1).cpu("1")),
            workload("no-cq")
                .queue("dangling")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    s.local_queues.push(local_queue("dangling", "gone"));
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        message(&r, "no-lq"),
        "LocalQueue default/nope doesn't exist"
    );
    assert_eq!(message(&r, "no-cq"), "ClusterQueue gone doesn't exist");
    assert!(
        matches!(decision(&r, "no-cq"), Some(Decision::Pending { reason, .. }) if *reason == "Inadmissible")
    );
    assert_eq!(
        r.local_queues
            .iter()
            .find(|l| l.name == "dangling")
            .unwrap()
            .active,
        Err("ClusterQueue gone doesn't exist".to_string())
    );
}

#[test]
fn a_missing_flavor_makes_the_cluster_queue_inactive() {
    let s = snap(
        vec![
            cluster_queue("team-a").flavor_quota("gpu-a100", &[("cpu", "4")]),
            cluster_queue("team-b").flavor_quota("default", &[("cpu", "4")]),
        ],
        vec![
            workload("a")
                .queue("team-a")
                .podset(podset("main").count(1).cpu("1")),
            workload("b")
                .queue("team-b")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    let want = r#"ClusterQueue team-a is inactive: flavor "gpu-a100" not found"#;
    assert_eq!(message(&r, "a"), want);
    assert_eq!(r.cluster_queues[0].active, Err(want.to_string()));
    assert_eq!(r.cluster_queues[0].active_reason, "FlavorNotFound");
    assert_eq!(admitted_names(&r), ["b"]);
}

#[test]
fn an_invalid_quota_names_the_cluster_queue_and_field() {
    let mut bad = cluster_queue("bad").flavor_quota("default", &[("cpu", "4")]);
    bad.spec.resource_groups[0].flavors[0].resources[0].nominal_quota = Some(kq("four"));
    let s = snap(
        vec![bad],
        vec![
            workload("w")
                .queue("bad")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert!(
        message(&r, "w").starts_with(
            "ClusterQueue bad is inactive: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: invalid quantity"
        ),
        "{}",
        message(&r, "w")
    );
}

#[test]
fn a_cohort_cycle_makes_its_cluster_queues_inactive() {
    let mut s = snap(
        vec![
            cluster_queue("in-cycle")
                .cohort("a")
                .flavor_quota("default", &[("cpu", "4")]),
            cluster_queue("fine")
                .cohort("c")
                .flavor_quota("default", &[("cpu", "4")]),
        ],
        vec![
            workload("x")
                .queue("in-cycle")
                .podset(podset("main").count(1).cpu("1")),
            workload("y")
                .queue("fine")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    s.cohorts = vec![cohort("a").parent("b"), cohort("b").parent("a")];
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        message(&r, "x"),
        "ClusterQueue in-cycle is inactive: cohort a is part of a cycle (a -> b -> a)"
    );
    assert_eq!(admitted_names(&r), ["y"]);
}

#[test]
fn a_bad_workload_template_is_inadmissible_and_others_go_on() {
    let mut bad = workload("bad")
        .queue("cq")
        .podset(podset("main").count(1).cpu("1"));
    bad.spec.pod_sets[0].template = pod_template(&[("cpu", "lots")]);
    let mut negative = workload("negative")
        .queue("cq")
        .podset(podset("main").count(1).cpu("1"));
    negative.spec.pod_sets[0].count = -1;
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![
            bad,
            negative,
            workload("good")
                .queue("cq")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert!(
        message(&r, "bad").starts_with(
            "Workload default/bad: spec.podSets[0].template.spec.containers[0].resources.requests[cpu]: invalid quantity"
        ),
        "{}",
        message(&r, "bad")
    );
    assert_eq!(
        message(&r, "negative"),
        "Workload default/negative: spec.podSets[0].count: must not be negative (got -1)"
    );
    assert_eq!(admitted_names(&r), ["good"]);
}

#[test]
fn namespace_selector_must_select_the_namespace() {
    let mut c = cluster_queue("cq").flavor_quota("default", &[("cpu", "4")]);
    c.spec.namespace_selector = Some(LabelSelector {
        match_labels: Some([("team".to_string(), "a".to_string())].into()),
        match_expressions: None,
    });
    let mut s = snap(
        vec![c],
        vec![
            workload("w")
                .queue("cq")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        message(&r, "w"),
        "namespace default doesn't match the namespaceSelector of ClusterQueue cq"
    );
    s.namespace_labels.insert(
        "default".into(),
        [("team".to_string(), "a".to_string())].into(),
    );
    assert_eq!(admitted_names(&cycle(&s, &RELEASE)), ["w"]);
    // no selector: every namespace (lenient; Kueue would select none)
    s.namespace_labels.clear();
    s.cluster_queues[0].spec.namespace_selector = None;
    assert_eq!(admitted_names(&cycle(&s, &RELEASE)), ["w"]);
}

#[test]
fn the_result_does_not_depend_on_input_order() {
    let s = snap(
        vec![
            cluster_queue("a")
                .cohort("pool")
                .flavor_quota("default", &[("cpu", "4")]),
            cluster_queue("b")
                .cohort("pool")
                .flavor_quota("default", &[("cpu", "4")]),
        ],
        (0..12)
            .map(|i| {
                workload(&format!("w{i}"))
                    .queue(if i % 2 == 0 { "a" } else { "b" })
                    .podset(podset("main").count(1 + i % 3).cpu("1"))
                    .created(i64::from(i % 4))
            })
            .collect(),
    );
    let mut reversed = s.clone();
    reversed.workloads.reverse();
    reversed.cluster_queues.reverse();
    reversed.local_queues.reverse();
    assert_eq!(cycle(&s, &RELEASE), cycle(&reversed, &RELEASE));
}

#[test]
fn a_request_too_large_to_account_is_inadmissible() {
    let s = snap(
        vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "4")])],
        vec![
            workload("huge")
                .queue("cq")
                .podset(podset("main").count(i32::MAX).cpu("9223372036854775807")),
            workload("ok")
                .queue("cq")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert!(
        message(&r, "huge").contains("is too large to account"),
        "{}",
        message(&r, "huge")
    );
    assert_eq!(admitted_names(&r), ["ok"]);
}

// ---------------------------------------------------------------------------------------------
// Kueue's cycle order (issue #15)
// ---------------------------------------------------------------------------------------------

/// One cohort of ClusterQueues `cq-0..` (nominal 20 CPU, borrowing limit 100,
/// `reclaimWithinCohort: Any`, `withinClusterQueue: LowerPriority`), `per_queue` Workloads of
/// 20 CPU each, all of priority 0, created queue by queue (so `cq-0`'s are all older).
fn probe(queues: usize, per_queue: usize) -> Snapshot {
    let mut cqs = Vec::new();
    let mut workloads = Vec::new();
    let mut created = 0;
    for k in 0..queues {
        let name = format!("cq-{k}");
        let mut c = cluster_queue(&name)
            .cohort("all")
            .flavor_quota("default", &[("cpu", "20")]);
        set_quota(&mut c, "20", Some("100"), None);
        cqs.push(with_preemption(
            c,
            WithinClusterQueue::LowerPriority,
            ReclaimWithinCohort::Any,
        ));
        for i in 0..per_queue {
            created += 1;
            workloads.push(
                workload(&format!("{name}-w{i}"))
                    .queue(&name)
                    .podset(podset("main").cpu("20"))
                    .created(created),
            );
        }
    }
    snap(cqs, workloads)
}

#[test]
fn each_queue_of_a_full_cohort_admits_its_first_workload_without_preemption() {
    // Kueue v0.19: every ClusterQueue's head fits in its nominal quota and goes before any
    // entry that borrows; the next heads would borrow from a full cohort, and nothing may be
    // reclaimed (nobody borrows) or preempted (equal priority): 6 admitted, 0 preempted.
    let (after, results) = final_state(probe(6, 10), &RELEASE);
    let evictions: usize = results.iter().map(|r| evicted(r).len()).sum();
    assert_eq!(evictions, 0);
    let mut holders: Vec<String> = after
        .workloads
        .iter()
        .filter(|w| holds_quota(w.status.as_ref()))
        .map(|w| w.metadata.name.clone().unwrap())
        .collect();
    holders.sort();
    let first: Vec<String> = (0..6).map(|k| format!("cq-{k}-w0")).collect();
    assert_eq!(holders, first);
    // all of it in the first pass; the second changes nothing
    assert_eq!(admitted_names(&results[0]).len(), 6);
    assert_eq!(results.len(), 2);
}

#[test]
fn a_queue_borrows_only_after_every_queue_took_its_nominal_share() {
    // 3 queues × 3 Workloads of 20 CPU, a cohort of 60: one round admits every head (no
    // borrowing), and the second heads would all borrow from a full cohort.
    let r = cycle(&probe(3, 3), &RELEASE);
    assert_eq!(admitted_names(&r), ["cq-0-w0", "cq-1-w0", "cq-2-w0"]);
    // with a 4th, empty queue lending 20, the oldest second head borrows it
    let mut s = probe(3, 3);
    let mut idle = cluster_queue("idle")
        .cohort("all")
        .flavor_quota("default", &[("cpu", "20")]);
    set_quota(&mut idle, "20", None, None);
    s.cluster_queues.push(idle);
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        admitted_names(&r),
        ["cq-0-w0", "cq-1-w0", "cq-2-w0", "cq-0-w1"]
    );
    assert!(evicted(&r).is_empty());
}

#[test]
fn quota_lent_in_a_pass_is_not_reclaimed_from_an_older_holder_in_the_same_pass() {
    // Issue #15, seed 3022 of `static_cohorts_do_not_churn` shrunk by hand: cohort of 7 CPU,
    // a (nominal 2, reclaim Any), b (nominal 5) holding b-old (4). Round 1: a-1 fits without
    // borrowing, then b-new borrows the last 2 CPU (b at 6 of 5). Round 2: a-2 is short by 1 and
    // reclaims from b, which borrows. Kueue, one cycle after b-new's admission, would take the
    // most recently admitted Workload, b-new, back; raygate used to look only at the pass's
    // starting holders and evicted b-old. Now b-new is not admitted in this pass: a-2 fits, and
    // nothing is preempted, now or later.
    let mut a = cluster_queue("a")
        .cohort("all")
        .flavor_quota("default", &[("cpu", "2")]);
    set_quota(&mut a, "2", None, None);
    let mut b = cluster_queue("b")
        .cohort("all")
        .flavor_quota("default", &[("cpu", "5")]);
    set_quota(&mut b, "5", None, None);
    let s = snap(
        vec![
            with_preemption(
                a,
                WithinClusterQueue::LowerPriority,
                ReclaimWithinCohort::Any,
            ),
            with_preemption(
                b,
                WithinClusterQueue::LowerPriority,
                ReclaimWithinCohort::LowerPriority,
            ),
        ],
        vec![
            workload("b-old")
                .queue("b")
                .podset(podset("main").count(4).cpu("1"))
                .created(0)
                .admitted("b", "default", ts(1)),
            workload("a-1")
                .queue("a")
                .podset(podset("main").cpu("1"))
                .created(2),
            workload("b-new")
                .queue("b")
                .podset(podset("main").count(2).cpu("1"))
                .created(3),
            workload("a-2")
                .queue("a")
                .podset(podset("main").cpu("1"))
                .created(4),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert!(evicted(&r).is_empty(), "{:?}", r.decisions);
    assert_eq!(admitted_names(&r), ["a-1", "a-2"]);
    assert!(
        message(&r, "b-new").contains("couldn't assign flavors"),
        "{}",
        message(&r, "b-new")
    );
    let (after, results) = final_state(s, &RELEASE);
    let evictions: usize = results.iter().map(|r| evicted(r).len()).sum();
    assert_eq!(evictions, 0);
    let mut holders: Vec<String> = after
        .workloads
        .iter()
        .filter(|w| holds_quota(w.status.as_ref()))
        .map(|w| w.metadata.name.clone().unwrap())
        .collect();
    holders.sort();
    assert_eq!(holders, ["a-1", "a-2", "b-old"]);
}

/// A shrunk case of the property test `static_cohorts_do_not_churn` (`testdata/churn.jsonl`, one
/// snapshot per line, found by seed), with nothing held at first: the passes run until nothing
/// changes, and none may preempt (what one pass admits, no later one takes back).
fn assert_no_churn(seed: u64) {
    let line = include_str!("testdata/churn.jsonl")
        .lines()
        .find(|l| l.contains(&format!("\"seed\":{seed},")))
        .unwrap_or_else(|| panic!("no case for seed {seed}"));
    let case: serde_json::Value = serde_json::from_str(line).unwrap();
    let field = |k: &str| case[k].clone();
    let s = Snapshot {
        flavors: serde_json::from_value(field("flavors")).unwrap(),
        cohorts: serde_json::from_value(field("cohorts")).unwrap(),
        cluster_queues: serde_json::from_value(field("clusterQueues")).unwrap(),
        local_queues: serde_json::from_value(field("localQueues")).unwrap(),
        workloads: serde_json::from_value(field("workloads")).unwrap(),
        ..Snapshot::default()
    };
    let options = Options {
        release_evicted_immediately: case["release"].as_bool().unwrap(),
    };
    let mut sched = Scheduler::new(s, &options);
    for pass in 0..20 {
        let r = sched.cycle();
        let churn = evicted(&r);
        assert!(
            churn.is_empty(),
            "seed {seed}: pass {pass} evicts {churn:?}: {:?}",
            r.decisions
        );
        if !sched.apply(&r, ts(100 + pass)) {
            return;
        }
    }
    panic!("seed {seed}: not stable after 20 passes");
}

#[test]
fn queues_reopened_at_the_end_of_a_pass_take_turns_in_round_order() {
    // Issue #15, seed 6123 shrunk: cq1's and cq2's heads were held back by retries and reopened
    // at the end of the pass once their reclaimers were admitted. Reopened one ClusterQueue after
    // the other, cq1's borrowing Workloads took the quota cq2's w26 needed within its nominal
    // quota; the next pass w26 reclaimed it (evicting w06). Taken in turns as Kueue's cycles
    // would (fits without borrowing first), w26 gets it.
    assert_no_churn(6123);
}

#[test]
fn a_head_held_back_for_a_reclaimer_admitted_by_another_reopened_queue_is_reopened_too() {
    // Issue #15, seed 7467 shrunk: cq0's head was held back for cq1's w25, admitted only when
    // cq1 was reopened; cq0 had been checked before that and stayed held back, so the next pass
    // admitted differently and preempted. Reopening runs to a fixed point, and a Workload held
    // back for a reclaimer still waiting stays held back (reopening used to clear its mark, so
    // the retry that set it could never take effect).
    assert_no_churn(7467);
}

#[test]
fn other_shrunk_churn_seeds_settle_without_preemption() {
    // Issue #15, seeds 7578, 7724 and 14021 shrunk: the same two causes.
    for seed in [7578, 7724, 14021] {
        assert_no_churn(seed);
    }
}

#[test]
fn a_held_back_head_does_not_hold_back_the_rest_of_a_best_effort_fifo_queue() {
    // Issue #15, seed 14999 shrunk: cq1's w13 (14 CPUs, borrowing) was held back because cq0's
    // w11 could reclaim what it borrowed, w11 was held back because cq1's w10 could reclaim what
    // it borrowed, and w10 waited behind w13: a cycle of holds. Only cq0's w24 (borrowing 3 of
    // cq1's CPUs) was admitted; the next pass, without the holds, admitted w10 and w23 reclaimed
    // w24. Kueue's BestEffortFIFO moves on to the next Workload whatever its head does: so does
    // a queue whose head is held back, and cq1's w10 and w23 take their nominal quota at once.
    assert_no_churn(14999);
}

#[test]
fn hold_cycles_through_queues_waiting_behind_a_held_back_head_do_not_churn() {
    // Issue #15, seeds 9147, 9868, 10985 and 18403 shrunk: each time a Workload waiting behind a
    // held-back head of a BestEffortFIFO queue reclaimed, on the next pass, quota another
    // ClusterQueue had borrowed while that queue was held.
    for seed in [9147, 9868, 10985, 18403] {
        assert_no_churn(seed);
    }
}

#[test]
fn the_parts_of_the_hold_rule_each_keep_a_static_cohort_from_churning() {
    // Issue #15: cases shrunk from seeds that churned while the rule above was built, one per
    // part of it (each seen red while that part was missing):
    // - 939: cq1's w22 was held back while cq2's w11 borrowed the nominal quota w22 would use;
    //   the next pass w22 reclaimed it. A held-back Workload keeps what it needs of its
    //   ClusterQueue's unused nominal quota from other ClusterQueues for the rest of the pass.
    // - 3349: cq1's w18 was held back for cq0's w04, which waits behind a StrictFIFO head that
    //   can never fit; a Workload waiting behind such a head reclaims nothing next pass either.
    // - 2781: cq2's w11 (priority 0) was admitted while cq2's w13 (priority 3) was held back; the
    //   next pass w13 preempted it. What a held-back head could preempt waits behind it.
    // - 10811: cq5's w04 borrowed, in the same pass, the room cq2's w19 then took back from an
    //   older holder. If the pass's own admissions alone could make room for a preemptor, the
    //   pass is redone without them instead of evicting the older holder.
    for seed in [939, 3349, 2781, 10811] {
        assert_no_churn(seed);
    }
}

#[test]
fn a_held_back_reservation_does_not_keep_another_queue_from_its_own_nominal_quota() {
    // Issue #15, seed 14785 shrunk (cpu only; f1: cohort co0 6, cq0 4, cq1 8, cq3 8 under co1,
    // 26 in all). cq1's w06 fits within its nominal quota, then cq3's w04 (priority 2) borrows
    // 10 of f1 before cq0's w10 (priority 1, borrowing too); w10 no longer fits. cq0's w15
    // (priority 0) would take 3 of cq0's nominal 4, but w10 could preempt it
    // (`withinClusterQueue`), so it is held back and keeps those 3 from other queues' borrowing
    // (hold rule 2). cq1's w11 (4 of f1, within cq1's nominal 8) then found 1 left and stayed
    // pending. The next pass, without the hold, w11 took the last 4 of the cohort, and w15,
    // under cq0's nominal quota and short, reclaimed them from w04 (pass 1 preempted w04 for
    // w15). A reservation keeps quota from borrowing, as its reason says: an entry that fits
    // within its own ClusterQueue's nominal quota, on the usage without the pass's
    // reservations, is admitted. w04 is then what w15 would reclaim, and the pass is redone
    // without it: w06, w09, w10, w11 and w15 hold quota, as Kueue ends up after preempting w04.
    assert_no_churn(14785);
}

#[test]
fn a_workload_requesting_more_than_its_nominal_quota_does_not_preempt_in_a_flat_cohort() {
    // Issue #15, seeds 23412 and 25995 shrunk. 23412: cq2 (cpu 8, memory 0) and cq3 (cpu 4,
    // memory 4Gi) share a cohort with no sub-cohorts. cq2's w26 (priority 1) needs 4Gi of memory,
    // all borrowed; it preempted w05 of its own queue (priority 0) to fit while borrowing. 25995:
    // cq1's w00 (8 CPUs over a nominal 6) did the same to a lower-priority Workload of cq1.
    // Kueue v0.19.2's `fitsResourceQuota` tries preemption only when the request fits the
    // ClusterQueue's nominal quota, or a sub-cohort below the root would hold it
    // (`FindHeightOfLowestSubtreeThatFits`); else the flavor does not fit (no
    // `borrowWithinCohort` here). Both were red before that check.
    for seed in [23412, 25995] {
        assert_no_churn(seed);
    }
}

#[test]
fn quota_a_reservation_kept_until_the_end_of_a_pass_is_offered_again_to_what_it_kept_out() {
    // Issue #15, seed 28596 shrunk (one flavor; cq1: 3 CPUs, 1Gi, reclaimWithinCohort Any,
    // withinClusterQueue LowerPriority; cq2: 8 CPUs, 7Gi). cq2's w10 (4 CPUs, 8Gi: borrows cq1's
    // 1Gi) is held back because cq1's w21 (1 CPU, 1Gi, priority 0) would reclaim that 1Gi; it
    // keeps cq2's 4 CPUs and 7Gi from borrowing (hold rule 2), so cq1's w16 (9 CPUs over a
    // nominal 3, priority 1) finds 7 CPUs and does not fit. w21 is admitted, w10 is reopened
    // (rule 6) and no longer fits at all (8Gi over its nominal 7Gi: no preemption), so its
    // reservation is gone, but w16 was not looked at again. The next pass w16 took 9 CPUs and
    // cq1's w01 (priority 1) preempted w21 for the last one. Kueue admits w10, evicts it for
    // w21, then admits w16 and preempts w21 for w01. A pending Workload left out while a
    // reservation that is gone at the end of the pass kept quota from it is looked at again,
    // with the reopened ones: w16 and w01 hold quota, as in Kueue, with no eviction. Seed 33920
    // (shrunk) churned the same way. In seed 24105 (shrunk), cq2's w16 was held back for cq3's
    // w11, which stayed pending; by the end of the pass w16 did not fit at all any more (12 CPUs
    // over a nominal 4), so the next pass left it out, cq5's w00 took the quota w16 had kept,
    // and cq5's w08 preempted w24 for the rest. A held-back Workload that would not fit on the
    // usage the pass leaves, even by preemption, is reopened as well: its hold changes nothing
    // on the next pass. All three were red before.
    for seed in [28596, 24105, 33920] {
        assert_no_churn(seed);
    }
}

#[test]
fn a_workload_held_back_for_a_reclaimer_keeps_what_it_would_borrow_until_the_reclaimer_comes() {
    // Issue #15, seed 36870 shrunk (cpu only; cq0: f2 3, f0 0; cq1: f2 0, f0 3; flavors tried
    // f2 first). Kueue admits cq1's w32 (priority 1, 3 CPUs) on f2, borrowing all of cq0's f2;
    // cq1's w02 (1 CPU) finds f2 taken and goes to f0; cq0's w30 (3 CPUs) reclaims f2 from
    // w32, which then fits nowhere: w02 on f0, w30 on f2, w32 pending. raygate held w32 back
    // for w30 and its own queue saw nothing of it, so w02 took 1 of f2, w30 no longer fit f2
    // and borrowed f0 instead, and was held back in turn for w32 (which would reclaim f0): each
    // held back for the other, the next pass admitted w32 on f0 and w30 reclaimed f2 from w02.
    // A Workload held back for a reclaimer keeps what it needs from the Workloads of its own
    // ClusterQueue (as the admitted Workload it is in Kueue until the reclaimer evicts it),
    // until that reclaimer is admitted. Seed 30023 (shrunk) pins the "own": kept from other
    // ClusterQueues too, w08's borrowed 6 CPUs kept cq3's w13 and w16 out until w08's
    // reclaimer w15 was admitted, and the next pass w16 preempted w15 (Kueue's holders: w26,
    // w13, w16). 36870 was red before the rule, 30023 with that first form of it.
    //
    // Seed 25890 (shrunk) pins "what it needs", not only what it would borrow: cq3's w17 (3 CPUs
    // of f0 within cq3's nominal quota, 4Gi of f1 memory borrowed) is held back for cq2's w13,
    // which would reclaim that memory. With only the borrowed part kept, cq3's w11 (9 CPUs) found
    // f0 free and took it, cq2's w08 then borrowed f1's CPUs, so w13 (one CPU on f1) would borrow
    // and could no longer reclaim: w13 stayed pending, w17 and w14 held back for it, and the
    // next pass cq2's w14 reclaimed f0 from w11. Kueue admits w17, w11 goes to f1, w13 reclaims
    // w17, w14 is admitted: w26, w11, w13, w14 hold quota, as raygate now in one pass. Red with
    // the borrowed part only.
    assert_no_churn(25890);
    assert_no_churn(36870);
    assert_no_churn(30023);
}

#[test]
fn a_pass_is_redone_when_the_next_pass_would_evict_what_it_admitted() {
    // Issue #15, seed 51152 shrunk (one flavor, cpu; cq0 2, cq1 0, cq3 9; cq1 and cq3 reclaim).
    // cq3's w08 was held back for w16 in an early retry of the pass (w16 could preempt it on the
    // usage of that retry); at the end of the pass w16 could not preempt it any more, but the
    // hold stood, so w13, waiting behind w08, was never looked at and cq1's w21 borrowed the CPUs
    // w13 needs within cq3's nominal quota. The next pass admitted w08, and w13 reclaimed w21.
    //
    // Seed 53550 shrunk: cq3's w32 held back for cq2's w24, which waits behind cq2's w34, held
    // back for cq2's w31, which stays pending only because w32's reservation keeps cq3's CPUs
    // from its borrowing; cq5's w00 borrows cq2's f1 memory meanwhile. The next pass (no
    // reservations) admits w31, which takes f0's memory, and w34 reclaims f1 from w00.
    //
    // Neither shows at the end of the pass (each waiting Workload checked alone against its
    // usage); the next pass run on the decisions applied does, and the pass is redone with w21
    // (w00) held back for the Workload that would evict it. Both churned before that check.
    assert_no_churn(51152);
    assert_no_churn(53550);
}

#[test]
fn a_pending_message_reads_as_kueue_writes_it_and_compares_without_formatting() {
    // Issue #15: Decision::Pending carries its message in parts; what a status shows is
    // unchanged, and comparing with a condition's text needs no formatted copy
    let preempting = PendingMessage::Preempting {
        text: "couldn't assign flavors to pod set main: insufficient unused quota".into(),
        victims: 2,
    };
    let text = "couldn't assign flavors to pod set main: insufficient unused quota. Pending the preemption of 2 workload(s)";
    assert_eq!(preempting.to_string(), text);
    assert!(preempting.is(text));
    assert!(preempting.is_preemptor());
    assert!(!preempting.is(&text[..text.len() - 1]));
    assert!(!preempting.is(&format!("{text}.")));
    let waiting = PendingMessage::WaitingBehind(std::sync::Arc::new(WaitingBehind {
        head: "default/a".into(),
        cluster_queue: "cq".into(),
        why: WaitingFor::StrictFifo,
    }));
    assert!(waiting.is("waiting behind workload default/a in StrictFIFO ClusterQueue cq"));
    assert!(!waiting.is_preemptor());
    // equal when they read the same, whatever their parts
    assert_eq!(
        waiting,
        PendingMessage::from("waiting behind workload default/a in StrictFIFO ClusterQueue cq")
    );
    assert_ne!(waiting, PendingMessage::from("waiting"));
    // a status showing the message is unchanged by it; another message changes it
    let mut s = WorkloadStatus::default();
    assert!(status::apply_pending_in_place(
        &mut s,
        Some(1),
        "Pending",
        &preempting,
        ts(1)
    ));
    assert!(pending_unchanged(Some(&s), Some(1), "Pending", &preempting));
    assert!(!pending_unchanged(Some(&s), Some(1), "Pending", &waiting));
    assert!(!pending_unchanged(
        Some(&s),
        Some(2),
        "Pending",
        &preempting
    ));
}

/// The shape of `benches/admission.rs` ("small": 5 cohorts × 6 ClusterQueues, nominal 20 CPU,
/// borrowing limit 100, `reclaimWithinCohort: Any`, `withinClusterQueue: LowerPriority`), with
/// `per_queue` (1-CPU, 5-CPU, 20-CPU) Workloads of priority 50, 100, 200 per ClusterQueue,
/// created 100 ms apart.
fn bench_shape(per_queue: (usize, usize, usize)) -> Snapshot {
    let mut cqs = Vec::new();
    let mut workloads = Vec::new();
    let mut created = 0;
    for c in 0..5 {
        for k in 0..6 {
            let name = format!("cohort-{c}-cq-{k}");
            let mut cq = cluster_queue(&name)
                .cohort(&format!("cohort-{c}"))
                .flavor_quota("default", &[("cpu", "20")]);
            set_quota(&mut cq, "20", Some("100"), None);
            cqs.push(with_preemption(
                cq,
                WithinClusterQueue::LowerPriority,
                ReclaimWithinCohort::Any,
            ));
            let (small, medium, large) = per_queue;
            for (class, count, cpu, priority) in [
                ("small", small, "1", 50),
                ("medium", medium, "5", 100),
                ("large", large, "20", 200),
            ] {
                for i in 0..count {
                    created += 100;
                    workloads.push(
                        workload(&format!("{name}-{class}-{i}"))
                            .queue(&name)
                            .podset(podset("main").cpu(cpu))
                            .priority(priority)
                            .created_at(
                                ts(0) + k8s_openapi::jiff::SignedDuration::from_millis(created),
                            ),
                    );
                }
            }
        }
    }
    snap(cqs, workloads)
}

#[test]
fn pending_decisions_that_change_nothing_are_left_out_and_every_status_is_as_before() {
    // Issue #15: a pass reports a Pending decision only where the Workload's status changes. On
    // the benchmark's shape (admitted Workloads finishing one pass later), a scheduler reporting
    // every Pending decision, as passes did before, and one leaving the unchanged ones out decide
    // alike pass by pass (the same decisions, less those that would change nothing; the same
    // admissions and queue usage) and leave every Workload with the same status
    let shape = bench_shape((35, 10, 5));
    let mut every = Scheduler::new(shape.clone(), &RELEASE);
    every.report_unchanged_pending();
    let mut changed = Scheduler::new(shape, &RELEASE);
    let (mut running, mut passes) = (Vec::<String>::new(), 0);
    let (mut left_out, mut reported) = (0, 0);
    loop {
        passes += 1;
        assert!(passes < 500, "not done after 500 passes");
        let now = ts(100 + passes);
        let (all, r) = (every.cycle(), changed.cycle());
        let shows: std::collections::HashMap<String, &Workload> = every
            .snapshot()
            .workloads
            .iter()
            .map(|w| {
                (
                    format!("default/{}", w.metadata.name.as_deref().unwrap()),
                    w,
                )
            })
            .collect();
        let changing: Vec<&Decision> = all
            .decisions
            .iter()
            .filter(|d| match d {
                Decision::Pending {
                    workload,
                    reason,
                    message,
                } => {
                    let w = shows[workload.as_str()];
                    !pending_unchanged(w.status.as_ref(), w.metadata.generation, reason, message)
                }
                _ => true,
            })
            .collect();
        left_out += all.decisions.len() - changing.len();
        reported += r
            .decisions
            .iter()
            .filter(|d| matches!(d, Decision::Pending { .. }))
            .count();
        let got: Vec<&Decision> = r.decisions.iter().collect();
        if got != changing {
            let at = (0..).find(|&k| got.get(k) != changing.get(k));
            let at = at.unwrap_or_default();
            panic!(
                "pass {passes}: {} decisions reported, {} change a status; the first difference, at {at}: {:?} reported, {:?} expected",
                got.len(),
                changing.len(),
                got.get(at),
                changing.get(at)
            );
        }
        assert_eq!(admitted_names(&all), admitted_names(&r), "pass {passes}");
        assert_eq!(
            (&all.cluster_queues, &all.local_queues),
            (&r.cluster_queues, &r.local_queues),
            "pass {passes}"
        );
        every.apply(&all, now);
        changed.apply(&r, now);
        for k in running.drain(..) {
            for s in [&mut every, &mut changed] {
                s.finish(&k, "Succeeded", "done", now);
            }
        }
        running = r
            .decisions
            .iter()
            .filter(|d| matches!(d, Decision::Admit { .. }))
            .map(|d| d.workload().to_string())
            .collect();
        let (a, b) = (&every.snapshot().workloads, &changed.snapshot().workloads);
        if let Some(k) = (0..a.len()).find(|&k| a[k] != b[k]) {
            panic!(
                "pass {passes}: {:?} shows {:?}, {:?} when every Pending decision is applied",
                b[k].metadata.name, b[k].status, a[k].status
            );
        }
        let pending: i32 = r.cluster_queues.iter().map(|c| c.pending).sum();
        if pending == 0 && running.is_empty() {
            break;
        }
    }
    let finished = changed
        .snapshot()
        .workloads
        .iter()
        .filter(|w| is_finished(w.status.as_ref()))
        .count();
    assert_eq!(finished, 1500, "every Workload ran");
    assert!(
        left_out > reported,
        "most Pending decisions change nothing: {left_out} left out, {reported} reported in {passes} passes"
    );
}
