//! Vectors after `pkg/controller/replicaset/replica_set_test.go` and
//! `pkg/controller/controller_utils_test.go` (`TestSortingActivePodsWithRanks`).

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use raygate_testing::core::{self, PodExt};
use serde_json::json;

fn now() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap()
}

fn ago(secs: i64) -> Timestamp {
    now() - SignedDuration::from_secs(secs)
}

fn rs(replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({"metadata": {"name": "r", "namespace": "t", "uid": "uid-r", "generation": 3},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "ray"}},
                 "template": {"metadata": {"labels": {"app": "ray", "tier": "w"}, "annotations": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
    .unwrap()
}

/// Running pod `t/name` of ReplicaSet `r` (uid `u-<name>`, labels `app=ray`, `tier=w`) on `node`
/// (`""`: unassigned).
fn replica(name: &str, node: &str) -> Pod {
    core::pod(&format!("t/{name}"), node)
        .uid(&format!("u-{name}"))
        .label("app", "ray")
        .label("tier", "w")
        .owned_by("apps/v1", "ReplicaSet", "r")
}

#[test]
fn missing_replicas_are_created_from_the_template_with_a_controller_reference() {
    let plan = decide(&rs(3), &[replica("a", "")], now());
    assert_eq!(plan.create.len(), 2);
    let p = &plan.create[0];
    assert_eq!(p.metadata.generate_name.as_deref(), Some("r-"));
    assert_eq!(p.labels().get("tier").map(String::as_str), Some("w"));
    assert_eq!(p.annotations().get("a").map(String::as_str), Some("b"));
    let r = &p.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            r.kind.as_str(),
            r.uid.as_str(),
            r.controller,
            r.block_owner_deletion
        ),
        ("ReplicaSet", "uid-r", Some(true), Some(true))
    );
}

#[test]
fn deleting_and_terminal_pods_are_replaced() {
    let pods = [
        replica("a", "").deleting_since(now()),
        replica("b", "").phase("Failed"),
        replica("c", ""),
    ];
    let plan = decide(&rs(3), &pods, now());
    assert_eq!(plan.create.len(), 2);
    assert_eq!(plan.status.unwrap().replicas, 1);
}

#[test]
fn surplus_pods_go_unassigned_pending_unready_first() {
    let pods = [
        replica("running-ready", "n1").condition_at("Ready", "True", "", ago(100)),
        replica("running-unready", "n2"),
        replica("pending", "n3").phase("Pending"),
        replica("unassigned", "").phase("Pending"),
    ];
    let plan = decide(&rs(1), &pods, now());
    assert_eq!(plan.delete, ["unassigned", "pending", "running-unready"]);
}

#[test]
fn among_equals_the_doubled_up_then_newer_pod_goes_first() {
    let on =
        |name: &str, n: &str, created: &str| replica(name, n).created_at(created.parse().unwrap());
    let pods = [
        on("old-alone", "n1", "2025-01-01T00:00:00Z"),
        on("old-shared", "n2", "2025-01-01T00:00:00Z"),
        on("new-shared", "n2", "2025-06-01T00:00:00Z"),
    ];
    assert_eq!(decide(&rs(2), &pods, now()).delete, ["new-shared"]);
    assert_eq!(
        decide(&rs(1), &pods, now()).delete,
        ["new-shared", "old-shared"]
    );
}

#[test]
fn status_counts_ready_available_and_fully_labeled_pods() {
    let mut mr = rs(3);
    mr.spec.as_mut().unwrap().min_ready_seconds = Some(30);
    let mut c = replica("c", "");
    c.metadata.labels.as_mut().unwrap().remove("tier");
    let pods = [
        replica("a", "").condition_at("Ready", "True", "", ago(60)),
        replica("b", "").condition_at("Ready", "True", "", ago(10)),
        c,
    ];
    let plan = decide(&mr, &pods, now());
    let s = plan.status.unwrap();
    assert_eq!(
        (
            s.replicas,
            s.ready_replicas,
            s.available_replicas,
            s.fully_labeled_replicas,
            s.observed_generation
        ),
        (3, Some(2), Some(1), Some(2), Some(3))
    );
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(30)));
}

#[test]
fn matching_orphans_are_adopted_and_non_matching_owned_pods_released() {
    let orphan = replica("o", "").unowned();
    let strayed = replica("s", "").label("app", "web");
    let foreign = replica("f", "").owned_by("apps/v1", "ReplicaSet", "x");
    let plan = decide(&rs(1), &[orphan, strayed, foreign], now());
    assert_eq!(plan.adopt, ["o"]);
    assert_eq!(plan.release, ["s"]);
    assert!(plan.create.is_empty() && plan.delete.is_empty(), "{plan:?}");
}

#[test]
fn a_deleting_replicaset_manages_no_replicas() {
    let mut r = rs(3);
    r.metadata.deletion_timestamp = Some(Time(now()));
    let plan = decide(&r, &[], now());
    assert!(plan.create.is_empty() && plan.adopt.is_empty());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// After the plan is applied, the ReplicaSet has exactly `replicas` active pods.
        #[test]
        fn applying_the_plan_reaches_the_desired_count(
            replicas in 0i32..10, active in 0usize..12, deleting in 0usize..3, failed in 0usize..3,
        ) {
            let mut pods: Vec<Pod> = (0..active).map(|i| replica(&format!("a{i}"), "")).collect();
            pods.extend((0..deleting).map(|i| replica(&format!("d{i}"), "").deleting_since(now())));
            pods.extend((0..failed).map(|i| replica(&format!("f{i}"), "").phase("Failed")));
            let plan = decide(&rs(replicas), &pods, now());
            prop_assert!(plan.delete.iter().all(|d| d.starts_with('a')), "only active pods are deleted");
            let after = active + plan.create.len() - plan.delete.len();
            prop_assert_eq!(after, replicas as usize);
        }
    }
}
