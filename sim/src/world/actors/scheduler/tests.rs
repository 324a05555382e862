use super::*;
use serde_json::json;

fn node(name: &str, ud: &str, extra: serde_json::Value) -> Node {
    let mut v = json!({"metadata": {"name": name, "labels": {"ud": ud}},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "10"}}});
    if let Some(spec) = extra.get("spec") {
        v["spec"] = spec.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn pod(name: &str, labels: serde_json::Value, spec: serde_json::Value) -> Pod {
    let mut s = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]});
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": s}),
    )
    .unwrap()
}

fn bound(mut p: Pod, node: &str) -> Pod {
    p.spec.as_mut().unwrap().node_name = Some(node.into());
    p
}

#[test]
fn requests_are_compared_exactly_and_the_fit_error_reads_as_kube_scheduler_s() {
    // framework.FitError.Error(): "0/N nodes are available: " + sorted "count reason" + "."
    let nodes = [
        node("a", "1", json!({})),
        node(
            "b",
            "1",
            json!({"spec": {"taints": [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}]}}),
        ),
        node("c", "2", json!({"spec": {"unschedulable": true}})),
    ];
    let full = bound(
        pod(
            "x",
            json!({}),
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "3001m"}}}]}),
        ),
        "a",
    );
    let s = Snapshot::new(&nodes, [&full]);
    let p = pod("p", json!({}), json!({}));
    let err = s.place(&p).unwrap_err();
    assert_eq!(
        err.to_string(),
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {gpu: h100}, 1 node(s) were unschedulable."
    );
    // 999m fits in what 3001m left
    let small = pod(
        "q",
        json!({}),
        json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "999m"}}}]}),
    );
    assert_eq!(s.place(&small).unwrap(), "a");
    // tolerations open the tainted and the cordoned node
    let tol = pod(
        "t",
        json!({}),
        json!({"tolerations": [{"operator": "Exists"}]}),
    );
    assert_eq!(s.place(&tol).unwrap(), "b", "least allocated, then name");
}

#[test]
fn node_selector_and_required_node_affinity_filter_nodes() {
    let nodes = [node("a", "1", json!({})), node("b", "2", json!({}))];
    let s = Snapshot::new(&nodes, []);
    let sel = pod("p", json!({}), json!({"nodeSelector": {"ud": "2"}}));
    assert_eq!(s.place(&sel).unwrap(), "b");
    let aff = pod(
        "p",
        json!({}),
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "ud", "operator": "NotIn", "values": ["1", "2"]}]}]}}}}),
    );
    assert_eq!(
        s.place(&aff).unwrap_err().to_string(),
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    );
}

#[test]
fn the_first_pod_of_a_self_affine_series_may_go_anywhere_then_the_rest_follow_it() {
    // interpodaffinity.satisfyPodAffinity: no pod matches anywhere and the pod matches its
    // own terms → allowed
    let nodes = [node("a", "1", json!({})), node("b", "2", json!({}))];
    let term = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "matchLabelKeys": ["group"], "topologyKey": "ud"}]}}});
    let first = pod("p0", json!({"app": "x", "group": "g1"}), term.clone());
    let s = Snapshot::new(&nodes, []);
    assert!(s.place(&first).is_ok());
    let placed = bound(first, "b");
    let s = Snapshot::new(&nodes, [&placed]);
    let second = pod("p1", json!({"app": "x", "group": "g1"}), term.clone());
    assert_eq!(s.place(&second).unwrap(), "b");
    // another group: matchLabelKeys makes the selector group=g2, which matches no pod, and
    // the pod matches its own term → anywhere
    let other = pod("q0", json!({"app": "x", "group": "g2"}), term);
    assert!(s.place(&other).is_ok());
}

#[test]
fn anti_affinity_is_checked_both_ways() {
    let nodes = [node("a", "1", json!({})), node("b", "2", json!({}))];
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "leader"}}, "topologyKey": "ud"}]}}});
    let existing = bound(pod("l0", json!({"role": "leader"}), anti.clone()), "a");
    let s = Snapshot::new(&nodes, [&existing]);
    let plain = pod("l1", json!({"role": "leader"}), json!({}));
    assert_eq!(
        s.place(&plain).unwrap(),
        "b",
        "the existing pod's anti-affinity keeps it out of ud 1"
    );
    let existing_plain = bound(pod("l0", json!({"role": "leader"}), json!({})), "a");
    let s = Snapshot::new(&nodes, [&existing_plain]);
    let with_anti = pod("l1", json!({"role": "leader"}), anti);
    assert_eq!(s.place(&with_anti).unwrap(), "b");
}

#[test]
fn topology_spread_do_not_schedule_bounds_the_skew() {
    // podtopologyspread Filter: matchNum + selfMatch - minMatchNum <= maxSkew
    let nodes = [
        node("a", "1", json!({})),
        node("b", "2", json!({})),
        node("c", "2", json!({})),
    ];
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "ud",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"role": "leader"}}}]});
    let l0 = bound(pod("l0", json!({"role": "leader"}), json!({})), "b");
    let s = Snapshot::new(&nodes, [&l0]);
    let p = pod("l1", json!({"role": "leader"}), spread.clone());
    assert_eq!(s.place(&p).unwrap(), "a");
    let mut only_ud2 = p.clone();
    only_ud2.spec.as_mut().unwrap().node_selector =
        Some([("ud".to_string(), "2".to_string())].into());
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
    let mut gated = pod("g", json!({}), json!({"schedulingGates": [{"name": "x"}]}));
    gated.metadata.creation_timestamp = None;
    let low = pod("b-low", json!({}), json!({"priority": 1}));
    let high = pod("c-high", json!({}), json!({"priority": 100}));
    let bound_pod = bound(pod("a", json!({}), json!({})), "n");
    let q = queue_order(&[
        Arc::new(gated),
        Arc::new(low),
        Arc::new(high),
        Arc::new(bound_pod),
    ]);
    let names: Vec<_> = q.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["c-high", "b-low"]);
}
