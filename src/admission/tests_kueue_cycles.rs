//! Scenario tests for what Kueue's own cycles do that a single greedy pass would not: the
//! nomination of a cycle's heads on the usage at its start, and `borrowWithinCohort`. Each
//! mirrors a class the admission differential (`tests/kueue_differential`) found.

use super::testing::*;
use super::*;
use crate::types::kueue::*;

const RELEASE: Options = Options {
    release_evicted_immediately: true,
};

fn snap(flavors: &[&str], cqs: Vec<ClusterQueue>, workloads: Vec<Workload>) -> Snapshot {
    let local_queues = cqs
        .iter()
        .map(|c| {
            let n = c.metadata.name.clone().unwrap_or_default();
            local_queue(&n, &n)
        })
        .collect();
    Snapshot {
        flavors: flavors.iter().map(|f| resource_flavor(f)).collect(),
        cluster_queues: cqs,
        local_queues,
        workloads,
        ..Snapshot::default()
    }
}

fn preemption(
    mut c: ClusterQueue,
    within: WithinClusterQueue,
    reclaim: ReclaimWithinCohort,
    borrow: Option<(&str, Option<i32>)>,
) -> ClusterQueue {
    c.spec.preemption = Some(ClusterQueuePreemption {
        within_cluster_queue: Some(within),
        reclaim_within_cohort: Some(reclaim),
        borrow_within_cohort: borrow.map(|(policy, max)| BorrowWithinCohort {
            policy: Some(policy.into()),
            max_priority_threshold: max,
        }),
    });
    c
}

fn evicted(r: &CycleResult) -> Vec<String> {
    r.decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Evict { workload, .. } => {
                Some(workload.trim_start_matches("default/").into())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_head_that_no_longer_fits_is_its_queues_head_again_in_the_next_round() {
    // one cohort of 4 CPU. Round 1: "big-a" (cq-a, 3 CPU, no borrowing) goes first, then
    // "big-b" (cq-b, 3 CPU, borrowing), nominated when 4 were free, no longer fits. Kueue
    // requeues it at once: round 2 has it as cq-b's head again (it fails for good), so cq-b's
    // "small-b" is not a head before cq-a's "small-a" takes the last CPU
    let cq = |name: &str, cpu: &str| {
        cluster_queue(name)
            .cohort("pool")
            .flavor_quota("default", &[("cpu", cpu)])
    };
    let w = |name: &str, q: &str, cpu: &str, priority: i32, created: i64| {
        workload(name)
            .queue(q)
            .priority(priority)
            .podset(podset("main").count(1).cpu(cpu))
            .created(created)
    };
    let s = snap(
        &["default"],
        vec![cq("cq-a", "3"), cq("cq-b", "1")],
        vec![
            w("big-a", "cq-a", "3", 10, 1),
            w("small-a", "cq-a", "1", 0, 2),
            w("big-b", "cq-b", "3", 10, 3),
            w("small-b", "cq-b", "1", 5, 4),
        ],
    );
    assert_eq!(admitted_names(&cycle(&s, &RELEASE)), ["big-a", "small-a"]);
}

#[test]
fn borrow_within_cohort_lets_a_borrowing_preemptor_reclaim_lower_priority() {
    // "lender" lends all 4 CPU and "other" borrowed 2 of them at priority 0; "urgent" (priority
    // 100) needs 4 in "team", whose nominal quota is 2: it can only fit by borrowing, so
    // reclaiming "other" needs `borrowWithinCohort`; with a threshold of 0, priority 0 may go
    let team = |borrow| {
        preemption(
            cluster_queue("team")
                .cohort("pool")
                .flavor_quota("default", &[("cpu", "2")]),
            WithinClusterQueue::Never,
            ReclaimWithinCohort::LowerPriority,
            borrow,
        )
    };
    let lender = cluster_queue("lender")
        .cohort("pool")
        .flavor_quota("default", &[("cpu", "2")]);
    let others = || {
        vec![
            workload("other")
                .queue("lender")
                .priority(0)
                .podset(podset("main").count(1).cpu("4"))
                .admitted("lender", "default", ts(0)),
            workload("urgent")
                .queue("team")
                .priority(100)
                .podset(podset("main").count(1).cpu("4"))
                .created(5),
        ]
    };
    let run = |borrow| {
        let s = snap(&["default"], vec![team(borrow), lender.clone()], others());
        evicted(&cycle(&s, &RELEASE))
    };
    assert_eq!(run(None), Vec::<String>::new());
    assert_eq!(run(Some(("Never", None))), Vec::<String>::new());
    assert_eq!(run(Some(("LowerPriority", None))), ["other"]);
    assert_eq!(run(Some(("LowerPriority", Some(0)))), ["other"]);
    // above the threshold: only reclaimable without borrowing, which cannot make room here
    let above: Vec<String> = Vec::new();
    assert_eq!(run(Some(("LowerPriority", Some(-1)))), above);
}

#[test]
fn an_unknown_borrow_within_cohort_policy_names_the_cluster_queue_and_field() {
    let c = preemption(
        cluster_queue("bad").flavor_quota("default", &[("cpu", "4")]),
        WithinClusterQueue::Never,
        ReclaimWithinCohort::LowerPriority,
        Some(("Sometimes", None)),
    );
    let s = snap(
        &["default"],
        vec![c],
        vec![
            workload("w")
                .queue("bad")
                .podset(podset("main").count(1).cpu("1")),
        ],
    );
    let r = cycle(&s, &RELEASE);
    assert_eq!(
        message(&r, "w"),
        "ClusterQueue bad is inactive: spec.preemption.borrowWithinCohort.policy: unknown value \"Sometimes\" (Never or LowerPriority)"
    );
}

#[test]
fn preemption_over_borrowing_prefers_preempting_within_nominal_quota_to_borrowing() {
    // "team" holds 4 CPU of f0 (all of it, for "low") and no f1; "lender" lends its 4 of f1.
    // "high" fits by preempting "low" on f0 or by borrowing on f1: Kueue's default
    // (BorrowingOverPreemption) borrows, PreemptionOverBorrowing preempts
    let team = |preference: Option<&str>| {
        let mut c = cluster_queue("team")
            .cohort("pool")
            .flavor_quota("f0", &[("cpu", "4")])
            .flavor_quota("f1", &[("cpu", "0")]);
        c.spec.flavor_fungibility = Some(FlavorFungibility {
            when_can_borrow: Some("TryNextFlavor".into()),
            when_can_preempt: Some("TryNextFlavor".into()),
            preference: preference.map(Into::into),
        });
        preemption(
            c,
            WithinClusterQueue::LowerPriority,
            ReclaimWithinCohort::Never,
            None,
        )
    };
    let lender = cluster_queue("lender")
        .cohort("pool")
        .flavor_quota("f0", &[("cpu", "0")])
        .flavor_quota("f1", &[("cpu", "4")]);
    let run = |preference| {
        let s = snap(
            &["f0", "f1"],
            vec![team(preference), lender.clone()],
            vec![
                workload("low")
                    .queue("team")
                    .priority(0)
                    .podset(podset("main").count(1).cpu("4"))
                    .admitted("team", "f0", ts(0)),
                workload("high")
                    .queue("team")
                    .priority(100)
                    .podset(podset("main").count(1).cpu("4"))
                    .created(5),
            ],
        );
        let r = cycle(&s, &RELEASE);
        (admitted_names(&r), evicted(&r))
    };
    let borrows = (vec!["high".to_string()], Vec::<String>::new());
    assert_eq!(run(None), borrows);
    assert_eq!(run(Some("BorrowingOverPreemption")), borrows);
    assert_eq!(
        run(Some("PreemptionOverBorrowing")),
        (Vec::<String>::new(), vec!["low".to_string()])
    );
}

#[test]
fn deprecated_fungibility_names_mean_may_stop_search() {
    // Kueue's CRD keeps `Borrow` and `Preempt` as old names of `MayStopSearch`
    let f = super::queues::Fungibility::of(Some(&FlavorFungibility {
        when_can_borrow: Some("Borrow".into()),
        when_can_preempt: Some("Preempt".into()),
        preference: None,
    }));
    assert!(!f.borrow_try_next && !f.preempt_try_next && !f.preemption_over_borrowing);
    let default = super::queues::Fungibility::of(None);
    assert!(!default.borrow_try_next && default.preempt_try_next);
}
