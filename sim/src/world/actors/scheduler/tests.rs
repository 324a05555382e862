use super::*;
use k8s_openapi::api::core::v1::Affinity;
use raygate_testing::core::{self, NodeExt, PodExt};
use serde_json::json;

/// 4 cpu, 16Gi and 10 pods.
const ROOM: &[(&str, &str)] = &[("cpu", "4"), ("memory", "16Gi"), ("pods", "10")];

/// Node `name` labelled `ud: <ud>`, with [`ROOM`] allocatable.
fn ud_node(name: &str, ud: &str) -> Node {
    core::node(name, "").label("ud", ud).allocatable(ROOM)
}

/// Pod `ns/name` as created (Pending, no owner), its container requesting 1 cpu.
fn pending(name: &str) -> Pod {
    core::pod(&format!("ns/{name}"), "")
        .unowned()
        .phase("Pending")
        .requests(&[("cpu", "1")])
}

fn affinity(v: serde_json::Value) -> Affinity {
    serde_json::from_value(v).unwrap()
}

fn bound(mut p: Pod, node: &str) -> Pod {
    p.spec.as_mut().unwrap().node_name = Some(node.into());
    p
}

#[test]
fn requests_are_compared_exactly_and_the_fit_error_reads_as_kube_scheduler_s() {
    // framework.FitError.Error(): "0/N nodes are available: " + sorted "count reason" + "."
    let nodes = [
        ud_node("a", "1"),
        ud_node("b", "1").tainted(core::taint_with_value("gpu", "h100", "NoSchedule")),
        ud_node("c", "2").cordoned(),
    ];
    let full = bound(pending("x").requests(&[("cpu", "3001m")]), "a");
    let s = Snapshot::new(&nodes, [&full]);
    let p = pending("p");
    let err = s.place(&p).unwrap_err();
    assert_eq!(
        err.to_string(),
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {gpu: h100}, 1 node(s) were unschedulable."
    );
    // 999m fits in what 3001m left
    let small = pending("q").requests(&[("cpu", "999m")]);
    assert_eq!(s.place(&small).unwrap(), "a");
    // tolerations open the tainted and the cordoned node
    let tol = pending("t").toleration("", "", None);
    assert_eq!(s.place(&tol).unwrap(), "b", "least allocated, then name");
}

#[test]
fn node_selector_and_required_node_affinity_filter_nodes() {
    let nodes = [ud_node("a", "1"), ud_node("b", "2")];
    let s = Snapshot::new(&nodes, []);
    let sel = pending("p").node_selector("ud", "2");
    assert_eq!(s.place(&sel).unwrap(), "b");
    let aff = pending("p").affinity(affinity(
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "ud", "operator": "NotIn", "values": ["1", "2"]}]}]}}}),
    ));
    assert_eq!(
        s.place(&aff).unwrap_err().to_string(),
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    );
}

#[test]
fn the_first_pod_of_a_self_affine_series_may_go_anywhere_then_the_rest_follow_it() {
    // interpodaffinity.satisfyPodAffinity: no pod matches anywhere and the pod matches its
    // own terms → allowed
    let nodes = [ud_node("a", "1"), ud_node("b", "2")];
    let term = affinity(
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "matchLabelKeys": ["group"], "topologyKey": "ud"}]}}),
    );
    let member = |name: &str, group: &str| {
        pending(name)
            .label("app", "x")
            .label("group", group)
            .affinity(term.clone())
    };
    let first = member("p0", "g1");
    let s = Snapshot::new(&nodes, []);
    assert!(s.place(&first).is_ok());
    let placed = bound(first, "b");
    let s = Snapshot::new(&nodes, [&placed]);
    let second = member("p1", "g1");
    assert_eq!(s.place(&second).unwrap(), "b");
    // another group: matchLabelKeys makes the selector group=g2, which matches no pod, and
    // the pod matches its own term → anywhere
    let other = member("q0", "g2");
    assert!(s.place(&other).is_ok());
}

#[test]
fn anti_affinity_is_checked_both_ways() {
    let nodes = [ud_node("a", "1"), ud_node("b", "2")];
    let anti = affinity(
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "leader"}}, "topologyKey": "ud"}]}}),
    );
    let leader = |name: &str| pending(name).label("role", "leader");
    let existing = bound(leader("l0").affinity(anti.clone()), "a");
    let s = Snapshot::new(&nodes, [&existing]);
    let plain = leader("l1");
    assert_eq!(
        s.place(&plain).unwrap(),
        "b",
        "the existing pod's anti-affinity keeps it out of ud 1"
    );
    let existing_plain = bound(leader("l0"), "a");
    let s = Snapshot::new(&nodes, [&existing_plain]);
    let with_anti = leader("l1").affinity(anti);
    assert_eq!(s.place(&with_anti).unwrap(), "b");
}

#[test]
fn topology_spread_do_not_schedule_bounds_the_skew() {
    // podtopologyspread Filter: matchNum + selfMatch - minMatchNum <= maxSkew
    let nodes = [ud_node("a", "1"), ud_node("b", "2"), ud_node("c", "2")];
    let l0 = bound(pending("l0").label("role", "leader"), "b");
    let s = Snapshot::new(&nodes, [&l0]);
    let mut p = pending("l1").label("role", "leader");
    p.spec.as_mut().unwrap().topology_spread_constraints = Some(
        serde_json::from_value(json!([{"maxSkew": 1, "topologyKey": "ud",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"role": "leader"}}}]))
        .unwrap(),
    );
    assert_eq!(s.place(&p).unwrap(), "a");
    let only_ud2 = p.clone().node_selector("ud", "2");
    // nodeAffinityPolicy Honor: ud 1 is not a domain for this pod, so ud 2 is the minimum
    assert!(s.place(&only_ud2).is_ok());
    // a node without the key is no domain; minDomains 2 with one domain makes the global
    // minimum 0 (skew on ud 2 = 1 + 1 - 0 > 1)
    let mut unlabeled = nodes.to_vec();
    unlabeled[0].metadata.labels = None;
    let s = Snapshot::new(&unlabeled, [&l0]);
    assert_eq!(s.place(&p).unwrap(), "c", "one domain: its own minimum");
    let mut min2 = p.clone();
    min2.spec
        .as_mut()
        .unwrap()
        .topology_spread_constraints
        .as_mut()
        .unwrap()[0]
        .min_domains = Some(2);
    let err = s.place(&min2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label), 2 node(s) didn't match pod topology spread constraints."
    );
}

#[test]
fn gated_bound_and_deleting_pods_are_not_queued_and_priority_goes_first() {
    let mut gated = pending("g").scheduling_gate("x");
    gated.metadata.creation_timestamp = None;
    let with_priority = |name: &str, priority: i32| {
        let mut p = pending(name);
        p.spec.as_mut().unwrap().priority = Some(priority);
        p
    };
    let low = with_priority("b-low", 1);
    let high = with_priority("c-high", 100);
    let bound_pod = bound(pending("a"), "n");
    let q = queue_order(&[
        Arc::new(gated),
        Arc::new(low),
        Arc::new(high),
        Arc::new(bound_pod),
    ]);
    let names: Vec<_> = q.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["c-high", "b-low"]);
}
