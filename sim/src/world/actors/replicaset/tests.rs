//! Vectors after `pkg/controller/replicaset/replica_set_test.go` and
//! `pkg/controller/controller_utils_test.go` (`TestSortingActivePodsWithRanks`).

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

fn now() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap()
}

fn rs(replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({"metadata": {"name": "r", "namespace": "t", "uid": "u-r", "generation": 3},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "ray"}},
                 "template": {"metadata": {"labels": {"app": "ray", "tier": "w"}, "annotations": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
    .unwrap()
}

fn pod(name: &str, extra: Value) -> Pod {
    let mut v = json!({"metadata": {"name": name, "namespace": "t", "uid": format!("u-{name}"),
            "labels": {"app": "ray", "tier": "w"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u-r", "controller": true}]},
        "spec": {"containers": []}, "status": {"phase": "Running"}});
    json_patch::merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

fn ready(secs_ago: i64) -> Value {
    json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "lastTransitionTime": Time(now() - SignedDuration::from_secs(secs_ago))}]}})
}

#[test]
fn missing_replicas_are_created_from_the_template_with_a_controller_reference() {
    let plan = decide(&rs(3), &[pod("a", json!({}))], now());
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
        ("ReplicaSet", "u-r", Some(true), Some(true))
    );
}

#[test]
fn deleting_and_terminal_pods_are_replaced() {
    let pods = [
        pod(
            "a",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        ),
        pod("b", json!({"status": {"phase": "Failed"}})),
        pod("c", json!({})),
    ];
    let plan = decide(&rs(3), &pods, now());
    assert_eq!(plan.create.len(), 2);
    assert_eq!(plan.status.unwrap().replicas, 1);
}

#[test]
fn surplus_pods_go_unassigned_pending_unready_first() {
    let pods = [
        pod("running-ready", {
            let mut v = ready(100);
            v["spec"] = json!({"nodeName": "n1"});
            v
        }),
        pod("running-unready", json!({"spec": {"nodeName": "n2"}})),
        pod(
            "pending",
            json!({"spec": {"nodeName": "n3"}, "status": {"phase": "Pending"}}),
        ),
        pod("unassigned", json!({"status": {"phase": "Pending"}})),
    ];
    let plan = decide(&rs(1), &pods, now());
    assert_eq!(plan.delete, ["unassigned", "pending", "running-unready"]);
}

#[test]
fn among_equals_the_doubled_up_then_newer_pod_goes_first() {
    let on = |n: &str, created: &str| json!({"spec": {"nodeName": n}, "metadata": {"creationTimestamp": created}});
    let pods = [
        pod("old-alone", on("n1", "2025-01-01T00:00:00Z")),
        pod("old-shared", on("n2", "2025-01-01T00:00:00Z")),
        pod("new-shared", on("n2", "2025-06-01T00:00:00Z")),
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
    let pods = [
        pod("a", ready(60)),
        pod("b", ready(10)),
        pod("c", json!({"metadata": {"labels": {"tier": null}}})),
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
    let orphan = pod("o", json!({"metadata": {"ownerReferences": null}}));
    let strayed = pod("s", json!({"metadata": {"labels": {"app": "web"}}}));
    let foreign = pod(
        "f",
        json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u-x", "controller": true}]}}),
    );
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
            let mut pods: Vec<Pod> = (0..active).map(|i| pod(&format!("a{i}"), json!({}))).collect();
            pods.extend((0..deleting).map(|i| pod(&format!("d{i}"), json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}))));
            pods.extend((0..failed).map(|i| pod(&format!("f{i}"), json!({"status": {"phase": "Failed"}}))));
            let plan = decide(&rs(replicas), &pods, now());
            prop_assert!(plan.delete.iter().all(|d| d.starts_with('a')), "only active pods are deleted");
            let after = active + plan.create.len() - plan.delete.len();
            prop_assert_eq!(after, replicas as usize);
        }
    }
}
