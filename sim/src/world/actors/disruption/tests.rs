//! Vectors after kubernetes `pkg/controller/disruption/disruption_test.go` and
//! `../shared/reference/eviction-pdb-drain.md` §2.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use raygate_testing::core::{self, PdbExt, PodExt, int, pct};

use super::*;
use serde_json::{Value, json};

fn now() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap()
}

fn ago(secs: i64) -> Time {
    Time(now() - SignedDuration::from_secs(secs))
}

fn owner(api_version: &str, kind: &str, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": format!("uid-{name}"), "controller": true})
}

/// Running pod `t/name` labelled `app=ray`, no owner, Ready `True` (`False` when not `ready`).
fn member(name: &str, ready: bool) -> Pod {
    core::pod(&format!("t/{name}"), "")
        .label("app", "ray")
        .unowned()
        .condition("Ready", if ready { "True" } else { "False" })
}

fn rs(name: &str, replicas: i32, controller: Option<Value>) -> ReplicaSet {
    let mut meta = json!({"name": name, "namespace": "t", "uid": format!("uid-{name}")});
    if let Some(o) = controller {
        meta["ownerReferences"] = json!([o]);
    }
    serde_json::from_value(
        json!({"metadata": meta, "spec": {"replicas": replicas, "selector": {}, "template": {}}}),
    )
    .unwrap()
}

/// Budget `t/p` over `app=ray` at generation 2, without a status.
fn budget() -> PodDisruptionBudget {
    let mut b = core::pdb("t/p", &[("app", "ray")]);
    b.metadata.generation = Some(2);
    b
}

/// `b` with `status`.
fn with_status(
    mut b: PodDisruptionBudget,
    status: PodDisruptionBudgetStatus,
) -> PodDisruptionBudget {
    b.status = Some(status);
    b
}

fn rs_pods(n: usize, ready: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| member(&format!("p{i}"), i < ready).owned_by("apps/v1", "ReplicaSet", "r"))
        .collect()
}

fn counts(d: &Decision) -> (i32, i32, i32, i32) {
    let s = d.status.as_ref().unwrap();
    (
        s.expected_pods.unwrap(),
        s.desired_healthy.unwrap(),
        s.current_healthy.unwrap(),
        s.disruptions_allowed.unwrap(),
    )
}

fn condition(d: &Decision) -> (String, String, String) {
    let c = d
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "DisruptionAllowed")
        .unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn workloads_with_rs(replicas: i32) -> Workloads {
    Workloads {
        replicasets: vec![rs("r", replicas, None)],
        ..Default::default()
    }
}

#[test]
fn max_unavailable_one_over_three_ready_replicas_allows_one() {
    let d = decide(
        &budget().max_unavailable(int(1)),
        &rs_pods(3, 3),
        &workloads_with_rs(3),
        now(),
    );
    assert_eq!(counts(&d), (3, 2, 3, 1));
    assert_eq!(
        condition(&d),
        ("True".into(), "SufficientPods".into(), String::new())
    );
    assert_eq!(d.status.unwrap().observed_generation, Some(2));
    assert!(d.failed.is_none());
}

#[test]
fn all_unready_pods_give_zero_healthy_and_insufficient_pods() {
    let d = decide(
        &budget().max_unavailable(int(1)),
        &rs_pods(3, 0),
        &workloads_with_rs(3),
        now(),
    );
    assert_eq!(counts(&d), (3, 2, 0, 0));
    assert_eq!(
        condition(&d),
        ("False".into(), "InsufficientPods".into(), String::new())
    );
}

#[test]
fn expected_pods_come_from_the_controller_scale_not_the_pod_count() {
    // 2 pods of a ReplicaSet scaled to 5 (3 missing): maxUnavailable 1 → desired 4 > healthy 2
    let d = decide(
        &budget().max_unavailable(int(1)),
        &rs_pods(2, 2),
        &workloads_with_rs(5),
        now(),
    );
    assert_eq!(counts(&d), (5, 4, 2, 0));
}

#[test]
fn percentages_round_up_for_both_max_unavailable_and_min_available() {
    // TestMaxUnavailablePercent-like: 30% of 10 → 3 unavailable → desired 7
    let w = workloads_with_rs(10);
    let d = decide(
        &budget().max_unavailable(pct("30%")),
        &rs_pods(10, 10),
        &w,
        now(),
    );
    assert_eq!(counts(&d), (10, 7, 10, 3));
    // 25% of 10 → ceil(2.5) = 3 unavailable
    let d = decide(
        &budget().max_unavailable(pct("25%")),
        &rs_pods(10, 10),
        &w,
        now(),
    );
    assert_eq!(counts(&d), (10, 7, 10, 3));
    // minAvailable 28% of 10 → ceil(2.8) = 3
    let d = decide(
        &budget().min_available(pct("28%")),
        &rs_pods(10, 4),
        &w,
        now(),
    );
    assert_eq!(counts(&d), (10, 3, 4, 1));
    assert_eq!(scaled_value(&IntOrString::String("1%".into()), 1), Ok(1));
    assert_eq!(scaled_value(&IntOrString::String("0%".into()), 7), Ok(0));
    assert_eq!(
        scaled_value(&IntOrString::String("3".into()), 7),
        Err("invalid value for IntOrString: invalid type: string is not a percentage".into())
    );
}

#[test]
fn an_integer_min_available_counts_the_selected_pods_and_needs_no_controller() {
    let pods: Vec<Pod> = (0..3).map(|i| member(&format!("n{i}"), i > 0)).collect();
    let d = decide(
        &budget().min_available(int(1)),
        &pods,
        &Workloads::default(),
        now(),
    );
    assert_eq!(counts(&d), (3, 1, 2, 1));
    assert!(d.notes.iter().all(|n| n.reason != "UnmanagedPods"));
}

#[test]
fn unmanaged_pods_are_skipped_with_a_warning_and_zero_expected_allows_nothing() {
    let pods: Vec<Pod> = (0..2).map(|i| member(&format!("n{i}"), true)).collect();
    let d = decide(
        &budget().max_unavailable(int(1)),
        &pods,
        &Workloads::default(),
        now(),
    );
    // expectedPods 0 → disruptionsAllowed 0 although 2 are healthy
    assert_eq!(counts(&d), (0, 0, 2, 0));
    assert!(
        d.notes
            .iter()
            .any(|n| n.reason == "UnmanagedPods" && n.type_ == "Warning")
    );
}

#[test]
fn a_raycluster_owner_without_scale_fails_safe_and_keeps_the_observed_generation() {
    let pods: Vec<Pod> = (0..3)
        .map(|i| member(&format!("w{i}"), true).owned_by("ray.io/v1", "RayCluster", "rc"))
        .collect();
    let mut w = Workloads::default();
    w.scales.insert(
        (
            "t".into(),
            "ray.io/v1".into(),
            "RayCluster".into(),
            "rc".into(),
        ),
        ScaleAnswer::Error("rayclusters.ray.io does not implement the scale subresource".into()),
    );
    let old = PodDisruptionBudgetStatus {
        observed_generation: Some(1),
        disruptions_allowed: Some(1),
        current_healthy: Some(3),
        desired_healthy: Some(2),
        expected_pods: Some(3),
        ..Default::default()
    };
    let d = decide(
        &with_status(budget().max_unavailable(int(1)), old),
        &pods,
        &w,
        now(),
    );
    assert_eq!(
        d.failed.as_deref(),
        Some("rayclusters.ray.io does not implement the scale subresource")
    );
    let s = d.status.as_ref().unwrap();
    assert_eq!(
        (
            s.disruptions_allowed,
            s.observed_generation,
            s.current_healthy
        ),
        (Some(0), Some(1), Some(3))
    );
    assert_eq!(
        condition(&d),
        (
            "False".into(),
            "SyncFailed".into(),
            "rayclusters.ray.io does not implement the scale subresource".into()
        )
    );
    assert!(d.notes.iter().any(|n| n.reason == "CalculateExpectedPodCountFailed"
        && n.message == "Failed to calculate the number of expected pods: rayclusters.ray.io does not implement the scale subresource"));
    // an integer minAvailable needs no scale: the same pods sync
    let d = decide(&budget().min_available(int(2)), &pods, &w, now());
    assert_eq!(counts(&d), (3, 2, 3, 1));
}

#[test]
fn a_replicaset_of_a_deployment_counts_the_deployment_scale() {
    let dep: Deployment = serde_json::from_value(
        json!({"metadata": {"name": "d", "namespace": "t", "uid": "uid-d"},
        "spec": {"replicas": 4, "selector": {}, "template": {}}}),
    )
    .unwrap();
    let w = Workloads {
        replicasets: vec![rs("r", 2, Some(owner("apps/v1", "Deployment", "d")))],
        deployments: vec![dep],
        ..Default::default()
    };
    let d = decide(&budget().max_unavailable(int(1)), &rs_pods(2, 2), &w, now());
    assert_eq!(counts(&d), (4, 3, 2, 0));
    // the Deployment gone: no finder resolves the pod
    let w = Workloads {
        deployments: vec![],
        ..w
    };
    let d = decide(&budget().max_unavailable(int(1)), &rs_pods(2, 2), &w, now());
    assert_eq!(
        d.failed.as_deref(),
        Some("found no controllers for pod \"p0\"")
    );
}

#[test]
fn a_controller_with_a_different_uid_is_not_the_pods_controller() {
    let mut w = workloads_with_rs(3);
    w.replicasets[0].metadata.uid = Some("another".into());
    let d = decide(&budget().max_unavailable(int(1)), &rs_pods(3, 3), &w, now());
    assert_eq!(
        d.failed.as_deref(),
        Some("found no controllers for pod \"p0\"")
    );
}

#[test]
fn disrupted_pods_stay_unhealthy_for_two_minutes_then_expire_with_a_warning() {
    let pods = rs_pods(3, 3);
    let status = PodDisruptionBudgetStatus {
        observed_generation: Some(2),
        disrupted_pods: Some(BTreeMap::from([
            ("p0".into(), ago(60)),
            ("p1".into(), ago(180)),
            ("gone".into(), ago(10)),
        ])),
        ..Default::default()
    };
    let d = decide(
        &with_status(budget().max_unavailable(int(1)), status),
        &pods,
        &workloads_with_rs(3),
        now(),
    );
    // p0 (60 s ago) still counts as disrupted; p1 (180 s) expired; "gone" is not a pod any more
    assert_eq!(counts(&d), (3, 2, 2, 0));
    let kept: Vec<&String> = d
        .status
        .as_ref()
        .unwrap()
        .disrupted_pods
        .as_ref()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(kept, ["p0"]);
    assert_eq!(d.recheck_at, Some(now() + SignedDuration::from_secs(60)));
    assert!(
        d.notes
            .iter()
            .any(|n| n.reason == "NotDeleted" && n.pod.as_deref() == Some("p1"))
    );
}

#[test]
fn deleting_pods_are_selected_but_never_healthy() {
    let mut pods = rs_pods(3, 3);
    pods[0].metadata.deletion_timestamp = Some(ago(1));
    let status = PodDisruptionBudgetStatus {
        disrupted_pods: Some(BTreeMap::from([("p0".into(), ago(1))])),
        ..Default::default()
    };
    let d = decide(
        &with_status(budget().max_unavailable(int(1)), status),
        &pods,
        &workloads_with_rs(3),
        now(),
    );
    assert_eq!(counts(&d), (3, 2, 2, 0));
    assert!(
        d.status.unwrap().disrupted_pods.is_none(),
        "a deleting pod's entry is pruned"
    );
}

#[test]
fn an_up_to_date_status_is_not_written_again() {
    let w = workloads_with_rs(3);
    let first = decide(&budget().max_unavailable(int(1)), &rs_pods(3, 3), &w, now());
    let status = first.status.unwrap();
    let again = decide(
        &with_status(budget().max_unavailable(int(1)), status.clone()),
        &rs_pods(3, 3),
        &w,
        now(),
    );
    assert_eq!(again.status, None);
    // a spec edit (generation 3) is a change: observedGeneration follows
    let mut edited = with_status(budget().max_unavailable(int(1)), status);
    edited.metadata.generation = Some(3);
    let d = decide(&edited, &rs_pods(3, 3), &w, now());
    assert_eq!(d.status.unwrap().observed_generation, Some(3));
}

#[test]
fn no_selected_pods_is_a_normal_event_and_nothing_allowed() {
    let d = decide(
        &budget().max_unavailable(int(1)),
        &[],
        &Workloads::default(),
        now(),
    );
    assert_eq!(counts(&d), (0, 0, 0, 0));
    assert!(
        d.notes
            .iter()
            .any(|n| n.reason == "NoPods" && n.type_ == "Normal")
    );
}

#[test]
fn a_nil_selector_selects_nothing_and_an_empty_one_everything() {
    let pods = rs_pods(2, 2);
    let p = budget().max_unavailable(int(1)).selector(None);
    assert!(pods_for(&p, &pods).is_empty());
    let p = p.selector(Some(LabelSelector::default()));
    assert_eq!(pods_for(&p, &pods).len(), 2);
}

#[test]
fn a_pod_two_budgets_select_gets_a_warning_naming_the_first() {
    let pods = rs_pods(1, 1);
    let mut a = budget().max_unavailable(int(1));
    a.metadata.name = Some("b-second".into());
    let mut b = a.clone();
    b.metadata.name = Some("a-first".into());
    let notes = multiple_budgets(&[a.clone(), b], &pods);
    assert_eq!(
        notes,
        vec![(0, "Pod \"t\"/\"p0\" matches multiple PodDisruptionBudgets.  Chose \"a-first\" arbitrarily.".to_string())]
    );
    assert!(multiple_budgets(&[a], &pods).is_empty());
}

#[test]
fn the_caches_arcs_select_and_warn_as_owned_pods_do() {
    // the actor's pass reads the reflector's `Arc`s instead of copies of every pod
    let mut pods = rs_pods(2, 2);
    pods[1].metadata.namespace = Some("elsewhere".into());
    let arcs: Vec<std::sync::Arc<Pod>> = pods.iter().cloned().map(std::sync::Arc::new).collect();
    let mut a = budget().max_unavailable(int(1));
    a.metadata.name = Some("b-second".into());
    let mut b = a.clone();
    b.metadata.name = Some("a-first".into());
    let pdbs = [a.clone(), b];
    assert_eq!(pods_for(&a, &arcs), pods_for(&a, &pods));
    assert_eq!(pods_for(&a, &arcs).len(), 1);
    assert_eq!(
        multiple_budgets(&pdbs, &arcs),
        multiple_budgets(&pdbs, &pods)
    );
    assert_eq!(multiple_budgets(&pdbs, &arcs).len(), 1);
}

#[test]
fn a_disruption_target_left_on_a_live_pod_goes_stale_after_two_minutes() {
    // a Running pod whose only condition is DisruptionTarget, set 30 s ago
    let with = |status: &str, reason: &str| {
        core::pod("t/p", "")
            .label("app", "ray")
            .unowned()
            .condition_at("DisruptionTarget", status, reason, ago(30).0)
    };
    let p = with("True", "EvictionByEvictionAPI");
    assert_eq!(
        stale_disruption_target(&p),
        Some(now() + SignedDuration::from_secs(90))
    );
    assert_eq!(
        stale_disruption_target(&with("True", "TerminationByKubelet")),
        None
    );
    assert_eq!(stale_disruption_target(&with("False", "")), None);
    let terminal = with("True", "EvictionByEvictionAPI").phase("Failed");
    assert_eq!(stale_disruption_target(&terminal), None);
    let gone = with("True", "EvictionByEvictionAPI").deleting_since(ago(1).0);
    assert_eq!(stale_disruption_target(&gone), None);
    let mut reset = p;
    reset_disruption_target(&mut reset, now());
    let c = &reset.status.unwrap().conditions.unwrap()[0];
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("False", None));
    assert_eq!(c.last_transition_time.as_ref().unwrap().0, now());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn budgets() -> impl Strategy<Value = PodDisruptionBudget> {
        prop_oneof![
            (0i32..6).prop_map(|n| budget().max_unavailable(int(n))),
            (0i32..=100).prop_map(|p| budget().max_unavailable(pct(&format!("{p}%")))),
            (0i32..6).prop_map(|n| budget().min_available(int(n))),
            (0i32..=100).prop_map(|p| budget().min_available(pct(&format!("{p}%")))),
        ]
    }

    proptest! {
        /// The invariants the eviction subresource relies on: never a negative budget, never
        /// more disruptions than healthy pods above the desired count, none without expected pods.
        #[test]
        fn the_budget_is_never_negative_nor_more_than_the_healthy_surplus(
            pdb in budgets(), replicas in 0i32..8, n in 0usize..8, ready in 0usize..8, deleting in 0usize..3,
        ) {
            let mut pods = rs_pods(n, ready.min(n));
            for p in pods.iter_mut().take(deleting) {
                p.metadata.deletion_timestamp = Some(ago(1));
            }
            let d = decide(&pdb, &pods, &workloads_with_rs(replicas), now());
            let s = d.status.unwrap();
            let (expected, desired, healthy, allowed) = (
                s.expected_pods.unwrap(), s.desired_healthy.unwrap(), s.current_healthy.unwrap(), s.disruptions_allowed.unwrap());
            prop_assert!(allowed >= 0 && desired >= 0);
            prop_assert!(healthy <= n as i32 - deleting.min(n) as i32);
            prop_assert_eq!(allowed, if expected <= 0 { 0 } else { (healthy - desired).max(0) });
            let c = s.conditions.unwrap();
            prop_assert_eq!(c[0].reason.as_str(), if allowed > 0 { "SufficientPods" } else { "InsufficientPods" });
        }
    }
}
