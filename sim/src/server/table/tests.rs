use super::*;

fn now() -> Timestamp {
    "2026-01-01T01:00:00Z".parse().unwrap()
}

#[test]
fn human_durations_read_as_kubectl_prints_them() {
    for (secs, want) in [
        (-5, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 3600, "3d1h"),
        (20 * 86400, "20d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (10 * 365 * 86400, "10y"),
    ] {
        assert_eq!(human_duration(secs), want, "{secs}");
    }
}

#[test]
fn json_paths_of_printer_columns_find_their_values() {
    let obj = json!({"status": {"conditions": [
        {"type": "Admitted", "status": "True"}, {"type": "Finished", "status": "False"}],
        "admission": {"clusterQueue": "cq"}}});
    assert_eq!(
        find(&obj, ".status.conditions[?(@.type=='Finished')].status"),
        vec![json!("False")]
    );
    assert_eq!(
        find(&obj, ".status.admission.clusterQueue"),
        vec![json!("cq")]
    );
    assert_eq!(
        find(&obj, ".status.conditions[0].type"),
        vec![json!("Admitted")]
    );
    assert_eq!(find(&obj, ".status.conditions[*].type").len(), 2);
    assert!(find(&obj, ".status.missing").is_empty());
}

#[test]
fn a_crd_list_prints_its_declared_columns_and_a_missing_cell_is_null() {
    let r = crate::server::upstream::registry().unwrap();
    let wl = r.find("kueue.x-k8s.io", "v1beta2", "workloads").unwrap();
    let list = json!({"metadata": {"resourceVersion": "7"}, "items": [
        {"metadata": {"name": "w", "creationTimestamp": "2026-01-01T00:58:00Z"},
         "spec": {"queueName": "lq"},
         "status": {"conditions": [{"type": "Admitted", "status": "True"}]}}]});
    let t = to_table(&wl, "v1beta2", &list, now(), Include::Metadata);
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["metadata"]["resourceVersion"], "7");
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let row = &t["rows"][0];
    let cell = |n: &str| {
        &row["cells"][names
            .iter()
            .position(|x| x.eq_ignore_ascii_case(n))
            .unwrap()]
    };
    assert_eq!(cell("Name"), "w");
    assert_eq!(cell("Queue"), "lq");
    assert_eq!(cell("Admitted"), "True");
    assert_eq!(cell("Finished"), &Value::Null);
    assert_eq!(cell("Age"), "2m");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
}

#[test]
fn pods_and_nodes_print_kube_apiserver_s_columns() {
    let r = crate::server::upstream::registry().unwrap();
    let pods = r.find("", "v1", "pods").unwrap();
    let gated = json!({"metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
    let t = to_table(&pods, "v1", &gated, now(), Include::None);
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "p",
            "0/2",
            "SchedulingGated",
            "0",
            "60m",
            null,
            null,
            null,
            "<none>"
        ])
    );
    assert!(t["rows"][0].get("object").is_none());
    let nodes = r.find("", "v1", "nodes").unwrap();
    let cordoned = json!({"metadata": {"name": "n", "creationTimestamp": "2026-01-01T00:59:00Z",
            "labels": {"node-role.kubernetes.io/gpu": ""}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.36.0"}}});
    let t = to_table(&nodes, "v1", &cordoned, now(), Include::Metadata);
    assert_eq!(
        t["rows"][0]["cells"],
        json!(["n", "Ready,SchedulingDisabled", "gpu", "60s", "v1.36.0"])
    );
}

#[test]
fn only_an_accept_that_asks_for_a_table_first_gets_one() {
    assert!(wants_table(
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
    ));
    assert!(!wants_table("application/json"));
    assert!(!wants_table(
        "application/json, application/json;as=Table;v=v1;g=meta.k8s.io"
    ));
}
