//! Differential test: the same request sequence against the real CRD API server (etcd +
//! `apiextensions-apiserver`, with the upstream CRDs) and against the embedded sim
//! (`raygate-sim`, same CRDs), comparing status codes, `Status` reasons and messages, and the
//! returned objects (without uid, resourceVersion and timestamps). Watch event sequences are
//! compared too. Every known divergence is listed in `KNOWN` with its reason; anything else fails.

use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
use raygate::types::ray::RayCluster;
use raygate_sim::Sim;
use raygate_testing::apiserver::{TestServer, namespace};
use raygate_testing::upstream;
use serde_json::{Value, json};

/// Steps whose results are allowed to differ, and why.
const KNOWN: &[(&str, &str)] = &[
    (
        "post a body that is not JSON",
        "same code, reason and message prefix; the parse error's wording is serde_json's, not Go's encoding/json",
    ),
    (
        "schema: a merge patch's unknown field refused under fieldValidation=Strict",
        "same code, reason, cause field and strict decoding error; the patched object the message quotes is the sim's JSON (its key order, no managedFields), and the details carry empty name/group/kind",
    ),
    (
        "list with a bad label selector",
        "same code and reason; the parse error's wording differs from apimachinery's label parser",
    ),
];

struct Step {
    name: &'static str,
    method: &'static str,
    /// `{ns}` is replaced by the test namespace.
    path: &'static str,
    content_type: &'static str,
    body: Value,
}

fn step(
    name: &'static str,
    method: &'static str,
    path: &'static str,
    content_type: &'static str,
    body: Value,
) -> Step {
    Step {
        name,
        method,
        path,
        content_type,
        body,
    }
}

const RC: &str = "/apis/ray.io/v1/namespaces/{ns}/rayclusters";
const RC_C: &str = "/apis/ray.io/v1/namespaces/{ns}/rayclusters/c";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

fn raycluster(name: &str, replicas: Value) -> Value {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "labels": {"app": "diff"}},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}}},
            "workerGroupSpecs": [{"groupName": "w", "replicas": replicas, "minReplicas": 0, "maxReplicas": 3, "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0"}]}}}]}
    })
}

fn cond(t: &str) -> Value {
    json!({"type": t, "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn wl_status(conds: &[Value]) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"}, "status": {"conditions": conds}})
}

fn steps() -> Vec<Step> {
    let mut bad = raycluster("bad", json!("three"));
    bad["spec"]["headGroupSpec"]["rayStartParams"] = json!("not-a-map");
    let mut unknown = raycluster("pruned", json!(1));
    unknown["spec"]["bogus"] = json!(true);
    unknown["extra"] = json!({"x": 1});
    let mut fin = raycluster("fin", json!(1));
    fin["metadata"]["finalizers"] = json!(["example.io/hold"]);
    let wl = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}]}});
    let apply_m1 = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c", "annotations": {"a": "1", "b": "2"}, "labels": {"m1": "yes"}}});
    let apply_m2 = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c", "annotations": {"a": "other"}}});
    let apply_m1_less = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c", "annotations": {"b": "2"}}});
    vec![
        step("create", "POST", RC, JSON, raycluster("c", json!(1))),
        step(
            "create again: AlreadyExists",
            "POST",
            RC,
            JSON,
            raycluster("c", json!(1)),
        ),
        step("get", "GET", RC_C, "", Value::Null),
        step(
            "get missing: NotFound",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/nope",
            "",
            Value::Null,
        ),
        step(
            "merge patch spec: generation 2",
            "PATCH",
            RC_C,
            MERGE,
            json!({"spec": {"suspend": true}}),
        ),
        step(
            "status through the main resource is ignored",
            "PATCH",
            RC_C,
            MERGE,
            json!({"status": {"state": "ready"}}),
        ),
        step(
            "status subresource",
            "PATCH",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/c/status",
            MERGE,
            json!({"status": {"state": "ready"}, "spec": {"suspend": false}}),
        ),
        step(
            "merge patch with a stale resourceVersion: Conflict",
            "PATCH",
            RC_C,
            MERGE,
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"suspend": false}}),
        ),
        step(
            "apply by m1",
            "PATCH",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/c?fieldManager=m1",
            APPLY,
            apply_m1,
        ),
        step(
            "apply by m2 without force: Conflict",
            "PATCH",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/c?fieldManager=m2",
            APPLY,
            apply_m2.clone(),
        ),
        step(
            "apply by m2 forced",
            "PATCH",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/c?fieldManager=m2&force=true",
            APPLY,
            apply_m2,
        ),
        step(
            "apply by m1 dropping fields",
            "PATCH",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/c?fieldManager=m1",
            APPLY,
            apply_m1_less,
        ),
        step(
            "apply without fieldManager",
            "PATCH",
            RC_C,
            APPLY,
            json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c"}}),
        ),
        step(
            "json patch",
            "PATCH",
            RC_C,
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/suspend", "value": false}]),
        ),
        step(
            "strategic merge patch on a CRD: UnsupportedMediaType",
            "PATCH",
            RC_C,
            "application/strategic-merge-patch+json",
            json!({"spec": {"suspend": true}}),
        ),
        step("schema: Invalid", "POST", RC, JSON, bad),
        step(
            "schema: unknown fields refused under fieldValidation=Strict",
            "POST",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters?fieldValidation=Strict",
            JSON,
            unknown.clone(),
        ),
        step(
            "schema: a merge patch's unknown field refused under fieldValidation=Strict",
            "PATCH",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/c?fieldValidation=Strict",
            MERGE,
            json!({"spec": {"bogus": 1}}),
        ),
        step("schema: unknown fields pruned", "POST", RC, JSON, unknown),
        step(
            "dry-run create",
            "POST",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters?dryRun=All",
            JSON,
            raycluster("dry", json!(1)),
        ),
        step(
            "dry-run object is absent",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/dry",
            "",
            Value::Null,
        ),
        step(
            "list by label",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters?labelSelector=m1%3Dyes",
            "",
            Value::Null,
        ),
        step(
            "list by set label selector",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters?labelSelector=app%20in%20(diff,x),!nope",
            "",
            Value::Null,
        ),
        step(
            "list by field selector",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters?fieldSelector=metadata.name%3Dpruned",
            "",
            Value::Null,
        ),
        step(
            "unsupported field selector",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters?fieldSelector=spec.suspend%3Dtrue",
            "",
            Value::Null,
        ),
        step("create with a finalizer", "POST", RC, JSON, fin),
        step(
            "delete held by the finalizer",
            "DELETE",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/fin",
            JSON,
            json!({}),
        ),
        step(
            "finalizer removed: gone",
            "PATCH",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/fin",
            MERGE,
            json!({"metadata": {"finalizers": null}}),
        ),
        step(
            "after the finalizer",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters/fin",
            "",
            Value::Null,
        ),
        step(
            "workload with schema defaults",
            "POST",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads",
            JSON,
            wl,
        ),
        step(
            "workload status applied by admission",
            "PATCH",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads/w/status?fieldManager=admission&force=true",
            APPLY,
            wl_status(&[cond("QuotaReserved"), cond("Admitted")]),
        ),
        step(
            "workload status applied by slices",
            "PATCH",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads/w/status?fieldManager=slices&force=true",
            APPLY,
            wl_status(&[cond("Finished")]),
        ),
        step(
            "admission drops a condition it owned",
            "PATCH",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads/w/status?fieldManager=admission&force=true",
            APPLY,
            wl_status(&[cond("QuotaReserved")]),
        ),
        step(
            "a keyed list element conflicts on its field",
            "PATCH",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads/w?fieldManager=other",
            APPLY,
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"}, "spec": {"podSets": [{"name": "main", "count": 3}]}}),
        ),
        step(
            "put without resourceVersion",
            "PUT",
            RC_C,
            JSON,
            raycluster("c", json!(1)),
        ),
        step(
            "put with another name",
            "PUT",
            RC_C,
            JSON,
            raycluster("other", json!(1)),
        ),
        step("post into another namespace", "POST", RC, JSON, {
            let mut o = raycluster("x", json!(1));
            o["metadata"]["namespace"] = json!("elsewhere");
            o
        }),
        step(
            "post without a name",
            "POST",
            RC,
            JSON,
            json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {}}),
        ),
        step(
            "post a body that is not JSON",
            "POST",
            RC,
            JSON,
            json!("{not json"),
        ),
        step(
            "list with a bad label selector",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters?labelSelector=a%20in%20b",
            "",
            Value::Null,
        ),
        step(
            "list a page",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/rayclusters?limit=1",
            "",
            Value::Null,
        ),
        step(
            "get an unknown resource",
            "GET",
            "/apis/ray.io/v1/namespaces/{ns}/nothings/x",
            "",
            Value::Null,
        ),
        step("delete", "DELETE", RC_C, JSON, json!({})),
        step("delete missing: NotFound", "DELETE", RC_C, JSON, json!({})),
    ]
}

/// What is compared: code, and the Status or the object without server-assigned identity.
fn normalize(v: Value) -> Value {
    let mut v = v;
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "namespace",
            "selfLink",
        ] {
            m.remove(f);
        }
        if let Some(Value::Array(mf)) = m.get_mut("managedFields") {
            for e in mf.iter_mut() {
                if let Some(e) = e.as_object_mut() {
                    e.remove("time");
                }
            }
            // entries are ordered by time first: the two servers run at different speeds
            mf.sort_by_key(|e| {
                (
                    e["operation"].to_string(),
                    e["manager"].to_string(),
                    e["subresource"].to_string(),
                )
            });
        }
    }
    if let Some(d) = v.get_mut("details").and_then(Value::as_object_mut) {
        d.remove("uid");
    }
    // the real server lists field errors in Go map order (random): compare them as a set
    let causes: Vec<Value> = v["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let message = v["message"].as_str().unwrap_or_default().to_string();
    if causes.len() > 1
        && let Some((prefix, _)) = message.split_once(": [")
    {
        let mut rendered: Vec<String> = causes
            .iter()
            .map(|c| {
                format!(
                    "{}: {}",
                    c["field"].as_str().unwrap_or_default(),
                    c["message"].as_str().unwrap_or_default()
                )
            })
            .collect();
        if rendered.iter().all(|r| message.contains(r.as_str())) {
            rendered.sort();
            let mut sorted = causes.clone();
            sorted.sort_by_key(|c| c.to_string());
            v["details"]["causes"] = Value::Array(sorted);
            v["message"] = json!(format!("{prefix}: [{}]", rendered.join(", ")));
        }
    }
    if let Some(items) = v.get("items").and_then(Value::as_array) {
        let names: Vec<Value> = items
            .iter()
            .map(|i| i["metadata"]["name"].clone())
            .collect();
        v = json!({"kind": v["kind"], "names": names});
    }
    v
}

async fn run(client: &Client, ns: &str, step: &Step) -> Value {
    let uri = step.path.replace("{ns}", ns);
    let body = match &step.body {
        Value::Null => vec![],
        // a string body is sent as is (malformed input)
        Value::String(raw) => raw.as_bytes().to_vec(),
        // `{ns}` in a body names cluster-scoped objects per run (the real server is shared)
        other => serde_json::to_string(other)
            .unwrap_or_default()
            .replace("{ns}", ns)
            .into_bytes(),
    };
    let mut req = raygate_sim::http::Request::builder()
        .method(step.method)
        .uri(uri);
    if !step.content_type.is_empty() {
        req = req.header("content-type", step.content_type);
    }
    let req = req.body(body).expect("request");
    let result = match client.request_text(req).await {
        Ok(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        Err(kube::Error::Api(s)) => serde_json::to_value(&s).unwrap_or_default(),
        Err(e) => json!({"client error": e.to_string()}),
    };
    let mut out = normalize(result);
    // namespaces differ between the two runs
    let text = out.to_string().replace(ns, "{ns}");
    out = serde_json::from_str(&text).unwrap_or(out);
    out
}

/// Watch from the version after the first create: the event sequence of a create, an update
/// and a delete, as (type, name, generation).
async fn watch_sequence(client: &Client, ns: &str) -> Vec<(String, String, Option<i64>)> {
    let api: Api<RayCluster> = Api::namespaced(client.clone(), ns);
    let pp = kube::api::PostParams::default();
    let first = api
        .create(
            &pp,
            &serde_json::from_value(raycluster("w1", json!(1))).unwrap(),
        )
        .await
        .unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    api.create(
        &pp,
        &serde_json::from_value(raycluster("w2", json!(1))).unwrap(),
    )
    .await
    .unwrap();
    api.patch(
        "w1",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .unwrap();
    api.patch(
        "w1",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .unwrap();
    api.delete("w2", &Default::default()).await.unwrap();
    let mut stream = api
        .watch(&WatchParams::default().labels("app=diff"), &rv)
        .await
        .unwrap()
        .boxed();
    let mut out = vec![];
    while out.len() < 4 {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("watch event in time")
            .expect("stream open")
            .expect("event");
        let (t, o) = match ev {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("{e:?}"),
        };
        out.push((
            t.to_string(),
            o.metadata.name.unwrap_or_default(),
            o.metadata.generation,
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_answers_as_the_real_api_server_does() {
    let real = TestServer::get().client().await;
    let ns = namespace("diff");
    let sim = Sim::builder()
        .crds_dir(upstream::dir().join("upstream-crds"))
        .expect("upstream CRDs load")
        .namespace(&ns)
        .build();
    let simc = sim.client();
    // the real server serves RayClusters etc. but no Namespaces: nothing to create there
    let _ = Api::<DynamicObject>::namespaced_with(
        real.clone(),
        &ns,
        &kube::discovery::ApiResource::erase::<RayCluster>(&()),
    );

    let mut matched = vec![];
    let mut diverged = vec![];
    for s in steps() {
        let a = run(&real, &ns, &s).await;
        let b = run(&simc, &ns, &s).await;
        if a == b {
            matched.push(s.name);
        } else {
            diverged.push((s.name, a, b));
        }
    }
    let wa = watch_sequence(&real, &ns).await;
    let wb = watch_sequence(&simc, &ns).await;
    eprintln!("matched ({}): {matched:#?}", matched.len());
    let mut unexpected = vec![];
    for (name, a, b) in &diverged {
        let known = KNOWN.iter().find(|(k, _)| k == name);
        eprintln!(
            "DIVERGED {name}{}\n  real: {a}\n  sim:  {b}",
            known
                .map(|(_, why)| format!(" (known: {why})"))
                .unwrap_or_default()
        );
        if known.is_none() {
            unexpected.push(*name);
        }
    }
    assert_eq!(wa, wb, "watch sequences (real, sim)");
    assert!(
        unexpected.is_empty(),
        "unexpected divergences: {unexpected:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// CEL validation rules (`x-kubernetes-validations`) of the installed CRDs
// ---------------------------------------------------------------------------------------------

const CQ: &str = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues";
const COHORT: &str = "/apis/kueue.x-k8s.io/v1beta2/cohorts";
const LQ: &str = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues";
const LQ_L: &str = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues/l";
const RF: &str = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors";
const RF_T: &str = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/cel-topo-{ns}";
const WL: &str = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads";
const WL_W: &str = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads/w";
const WL_W_STATUS: &str = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads/w/status";
const RS: &str = "/apis/ray.io/v1/namespaces/{ns}/rayservices";

fn cq(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec})
}

fn rg(covered: &[&str], resources: Value) -> Value {
    json!([{"coveredResources": covered, "flavors": [{"name": "f", "resources": resources}]}])
}

fn rf(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec})
}

fn workload(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["podSets"] = json!([{"name": "main", "count": spec.get("count").cloned().unwrap_or(json!(2)),
        "minCount": spec.get("minCount").cloned().unwrap_or(json!(1)),
        "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}]);
    if let Some(m) = spec.as_object_mut() {
        m.remove("count");
        m.remove("minCount");
    }
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name}, "spec": spec})
}

fn admission(assignments: &[&str]) -> Value {
    let psa: Vec<Value> = assignments
        .iter()
        .map(|n| json!({"name": n, "count": 2, "flavors": {"cpu": "f"}}))
        .collect();
    json!({"clusterQueue": "cq", "podSetAssignments": psa})
}

fn rayservice(name: &str, managed_by: &str) -> Value {
    let mut rc = raycluster(name, json!(1))["spec"].clone();
    rc["managedBy"] = json!(managed_by);
    json!({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": name},
        "spec": {"rayClusterConfig": rc}})
}

/// Per rule family of the installed CRDs a valid and an invalid request, and the transition
/// rules (`oldSelf`) with an allowed and a refused change. `true`: the real server accepts it.
fn cel_steps() -> Vec<(Step, bool)> {
    let one_cpu = json!([{"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}]);
    let reserved = cond("QuotaReserved");
    vec![
        // ClusterQueue: rules on spec (`!has(self.cohortName)` …) and on list items
        (
            step(
                "cel cq: borrowingLimit without a cohort",
                "POST",
                CQ,
                JSON,
                cq(
                    "cel-a-{ns}",
                    json!({"resourceGroups": rg(&["cpu"], one_cpu.clone())}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel cq: borrowingLimit with a cohort",
                "POST",
                CQ,
                JSON,
                cq(
                    "cel-b-{ns}",
                    json!({"cohortName": "co", "resourceGroups": rg(&["cpu"], one_cpu.clone())}),
                ),
            ),
            true,
        ),
        (
            step(
                "cel cq: a flavor not covering every resource (list item rule)",
                "POST",
                CQ,
                JSON,
                cq(
                    "cel-c-{ns}",
                    json!({"resourceGroups": rg(&["cpu", "memory"], json!([{"name": "cpu", "nominalQuota": "1"}]))}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel cq: preference with the defaulted whenCanBorrow",
                "POST",
                CQ,
                JSON,
                cq(
                    "cel-d-{ns}",
                    json!({"flavorFungibility": {"preference": "BorrowingOverPreemption"}}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel cq: preference with TryNextFlavor",
                "POST",
                CQ,
                JSON,
                cq(
                    "cel-e-{ns}",
                    json!({"flavorFungibility": {"preference": "BorrowingOverPreemption", "whenCanBorrow": "TryNextFlavor"}}),
                ),
            ),
            true,
        ),
        (
            step(
                "cel cq: borrowWithinCohort under reclaimWithinCohort Never",
                "POST",
                CQ,
                JSON,
                cq(
                    "cel-f-{ns}",
                    json!({"preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel cq: schema errors block the rules",
                "POST",
                CQ,
                JSON,
                cq(
                    "cel-g-{ns}",
                    json!({"preemption": {"reclaimWithinCohort": "Sometimes"}, "resourceGroups": rg(&["cpu"], one_cpu.clone())}),
                ),
            ),
            false,
        ),
        // Cohort
        (
            step(
                "cel cohort: a flavor not covering every resource",
                "POST",
                COHORT,
                JSON,
                json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "cel-a-{ns}"},
                "spec": {"resourceGroups": rg(&["cpu", "memory"], json!([{"name": "cpu", "nominalQuota": "1"}]))}}),
            ),
            false,
        ),
        (
            step(
                "cel cohort: flavors covering every resource",
                "POST",
                COHORT,
                JSON,
                json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "cel-b-{ns}"},
                "spec": {"resourceGroups": rg(&["cpu"], json!([{"name": "cpu", "nominalQuota": "1"}]))}}),
            ),
            true,
        ),
        // LocalQueue: a transition rule on a string (`self == oldSelf`)
        (
            step(
                "cel lq: create",
                "POST",
                LQ,
                JSON,
                json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "l"}, "spec": {"clusterQueue": "a"}}),
            ),
            true,
        ),
        (
            step(
                "cel lq: an unchanged clusterQueue",
                "PATCH",
                LQ_L,
                MERGE,
                json!({"spec": {"clusterQueue": "a", "stopPolicy": "Hold"}}),
            ),
            true,
        ),
        (
            step(
                "cel lq: clusterQueue is immutable",
                "PATCH",
                LQ_L,
                MERGE,
                json!({"spec": {"clusterQueue": "b"}}),
            ),
            false,
        ),
        // ResourceFlavor: rules on lists (`self.all(…)`), spec rules, transition rules
        (
            step(
                "cel rf: a toleration with operator Exists and a value",
                "POST",
                RF,
                JSON,
                rf(
                    "cel-a-{ns}",
                    json!({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel rf: a toleration without a key must be Exists",
                "POST",
                RF,
                JSON,
                rf(
                    "cel-b-{ns}",
                    json!({"tolerations": [{"operator": "Equal", "value": "v"}]}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel rf: tolerationSeconds needs NoExecute",
                "POST",
                RF,
                JSON,
                rf(
                    "cel-c-{ns}",
                    json!({"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel rf: a taint with an unknown effect",
                "POST",
                RF,
                JSON,
                rf(
                    "cel-d-{ns}",
                    json!({"nodeTaints": [{"key": "k", "effect": "Sometimes"}]}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel rf: valid tolerations and taints",
                "POST",
                RF,
                JSON,
                rf(
                    "cel-e-{ns}",
                    json!({"nodeTaints": [{"key": "k", "effect": "NoSchedule"}], "tolerations": [{"operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 5}]}),
                ),
            ),
            true,
        ),
        (
            step(
                "cel rf: topologyName without nodeLabels",
                "POST",
                RF,
                JSON,
                rf("cel-f-{ns}", json!({"topologyName": "t"})),
            ),
            false,
        ),
        (
            step(
                "cel rf: topologyName with nodeLabels",
                "POST",
                RF,
                JSON,
                rf(
                    "cel-topo-{ns}",
                    json!({"topologyName": "t", "nodeLabels": {"pool": "a"}}),
                ),
            ),
            true,
        ),
        (
            step(
                "cel rf: nodeLabels are immutable under a topology",
                "PATCH",
                RF_T,
                MERGE,
                json!({"spec": {"nodeLabels": {"pool": "b"}}}),
            ),
            false,
        ),
        (
            step(
                "cel rf: topologyName is immutable once set",
                "PATCH",
                RF_T,
                MERGE,
                json!({"spec": {"topologyName": "u"}}),
            ),
            false,
        ),
        // Workload: spec rules, list item rules, object rules, root rules on status
        (
            step(
                "cel wl: priorityClassRef without priority",
                "POST",
                WL,
                JSON,
                workload(
                    "p",
                    json!({"queueName": "q", "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel wl: a PriorityClass ref of the wrong kind",
                "POST",
                WL,
                JSON,
                workload(
                    "k",
                    json!({"queueName": "q", "priority": 1, "priorityClassRef": {"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}}),
                ),
            ),
            false,
        ),
        (
            step(
                "cel wl: minCount above count (list item)",
                "POST",
                WL,
                JSON,
                workload("m", json!({"queueName": "q", "count": 2, "minCount": 3})),
            ),
            false,
        ),
        (
            step(
                "cel wl: create",
                "POST",
                WL,
                JSON,
                workload(
                    "w",
                    json!({"queueName": "q", "priority": 1, "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}}),
                ),
            ),
            true,
        ),
        (
            step(
                "cel wl: an admission with as many podSets as the spec",
                "PATCH",
                WL_W_STATUS,
                MERGE,
                json!({"status": {"conditions": [reserved.clone()], "admission": admission(&["main"])}}),
            ),
            true,
        ),
        (
            step(
                "cel wl: an admission with more podSets than the spec (root rule)",
                "PATCH",
                WL_W_STATUS,
                MERGE,
                json!({"status": {"admission": admission(&["main", "other"])}}),
            ),
            false,
        ),
        (
            step(
                "cel wl: queueName is immutable while quota is reserved (root transition rule)",
                "PATCH",
                WL_W,
                MERGE,
                json!({"spec": {"queueName": "q2"}}),
            ),
            false,
        ),
        (
            step(
                "cel wl: a spec change the rules allow while reserved",
                "PATCH",
                WL_W,
                MERGE,
                json!({"spec": {"active": false}}),
            ),
            true,
        ),
        (
            step(
                "cel wl: clusterName set",
                "PATCH",
                WL_W_STATUS,
                MERGE,
                json!({"status": {"clusterName": "one"}}),
            ),
            true,
        ),
        (
            step(
                "cel wl: clusterName is immutable once set (status transition rule)",
                "PATCH",
                WL_W_STATUS,
                MERGE,
                json!({"status": {"clusterName": "two"}}),
            ),
            false,
        ),
        // RayService: a string rule with the value in the message, deep in the spec
        (
            step(
                "cel rs: an unknown managedBy",
                "POST",
                RS,
                JSON,
                rayservice("bad", "someone"),
            ),
            false,
        ),
        (
            step(
                "cel rs: kuberay's managedBy",
                "POST",
                RS,
                JSON,
                rayservice("good", "ray.io/kuberay-operator"),
            ),
            true,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_rules_answer_as_on_the_real_api_server() {
    let real = TestServer::get().client().await;
    let ns = namespace("diff-cel");
    let sim = Sim::builder()
        .crds_dir(upstream::dir().join("upstream-crds"))
        .expect("upstream CRDs load")
        .namespace(&ns)
        .build();
    let simc = sim.client();
    let mut diverged = vec![];
    let mut wrong = vec![];
    for (s, valid) in cel_steps() {
        let a = run(&real, &ns, &s).await;
        let b = run(&simc, &ns, &s).await;
        let refused = |v: &Value| v["code"] == 422;
        // not vacuous: the real server answers each as the step says
        if refused(&a) == valid {
            wrong.push((s.name, a.clone()));
        }
        eprintln!("{}: {a}", s.name);
        if a != b {
            eprintln!("DIVERGED {}\n  real: {a}\n  sim:  {b}", s.name);
            diverged.push(s.name);
        }
    }
    assert!(
        wrong.is_empty(),
        "the real server did not answer as expected: {wrong:#?}"
    );
    assert!(diverged.is_empty(), "CEL divergences: {diverged:?}");
}

/// A CRD of this test's own exercising what the installed CRDs' rules do not: `messageExpression`,
/// `reason`, `fieldPath`, `optionalOldSelf`, rules on `additionalProperties`, on list items of
/// scalars, on map-list items with `oldSelf`, on `number`s, and on the status subresource.
fn cel_check_crd() -> Value {
    let string = |max: u32| json!({"type": "string", "maxLength": max});
    let labels = json!({"type": "object", "maxProperties": 4, "additionalProperties": {"type": "string", "maxLength": 16,
        "x-kubernetes-validations": [{"rule": "self.size() <= 5", "message": "label too long"}]}});
    let tags = json!({"type": "array", "maxItems": 4, "items": {"type": "string", "maxLength": 16,
        "x-kubernetes-validations": [{"rule": "self.startsWith('t-')"}]}});
    let port_item = json!({"type": "object", "required": ["name"], "properties": {"name": string(16), "port": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "a port keeps its number"}]});
    let ports = json!({"type": "array", "maxItems": 4, "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"], "items": port_item});
    let owner = json!({"type": "string", "maxLength": 16, "x-kubernetes-validations": [
        {"rule": "!oldSelf.hasValue() || oldSelf.value() == self", "optionalOldSelf": true, "message": "owner is immutable"},
        {"rule": "oldSelf.hasValue() || self.startsWith('team-')", "optionalOldSelf": true, "message": "a new owner is a team"},
    ]});
    let spec_rules = json!([
        {"rule": "self.replicas <= self.max", "fieldPath": ".replicas", "reason": "FieldValueForbidden",
         "messageExpression": "'replicas above max in mode ' + self.mode"},
        {"rule": "!has(self.mode) || self.mode != 'legacy'", "message": "legacy is gone", "reason": "FieldValueRequired"},
    ]);
    let spec = json!({"type": "object", "x-kubernetes-validations": spec_rules, "properties": {
        "replicas": {"type": "integer"}, "max": {"type": "integer"}, "mode": string(16),
        "ratio": {"type": "number", "x-kubernetes-validations": [{"rule": "self <= 1.0", "message": "a ratio"}]},
        "labels": labels, "tags": tags, "ports": ports, "owner": owner}});
    let status = json!({"type": "object", "properties": {"phase": {"type": "string", "maxLength": 8,
        "x-kubernetes-validations": [{"rule": "self in ['A', 'B']", "message": "unknown phase"}]}}});
    let version = json!({"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec, "status": status}}}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "celchecks.cel.raygate.io"},
        "spec": {"group": "cel.raygate.io", "scope": "Namespaced",
            "names": {"kind": "CelCheck", "plural": "celchecks", "singular": "celcheck", "listKind": "CelCheckList"},
            "versions": [version]}
    })
}

const CC: &str = "/apis/cel.raygate.io/v1/namespaces/{ns}/celchecks";
const CC_C: &str = "/apis/cel.raygate.io/v1/namespaces/{ns}/celchecks/c";

fn cel_check(name: &str, spec: Value) -> Value {
    let mut full = json!({"replicas": 1, "max": 2, "owner": "team-a", "ratio": 0.5, "labels": {"a": "x"},
        "tags": ["t-1"], "ports": [{"name": "http", "port": 80}]});
    for (k, v) in spec.as_object().into_iter().flatten() {
        full[k] = v.clone();
    }
    json!({"apiVersion": "cel.raygate.io/v1", "kind": "CelCheck", "metadata": {"name": name}, "spec": full})
}

fn cel_check_steps() -> Vec<(Step, bool)> {
    vec![
        (
            step(
                "celcheck: create",
                "POST",
                CC,
                JSON,
                cel_check("c", json!({})),
            ),
            true,
        ),
        (
            step(
                "celcheck: messageExpression, fieldPath and reason",
                "POST",
                CC,
                JSON,
                cel_check("x1", json!({"replicas": 3, "mode": "fast"})),
            ),
            false,
        ),
        (
            step(
                "celcheck: reason Required",
                "POST",
                CC,
                JSON,
                cel_check("x2", json!({"mode": "legacy"})),
            ),
            false,
        ),
        (
            step(
                "celcheck: a rule on additionalProperties",
                "POST",
                CC,
                JSON,
                cel_check("x3", json!({"labels": {"a": "toolong"}})),
            ),
            false,
        ),
        (
            step(
                "celcheck: a rule on scalar list items, no message",
                "POST",
                CC,
                JSON,
                cel_check("x4", json!({"tags": ["t-1", "x"]})),
            ),
            false,
        ),
        (
            step(
                "celcheck: optionalOldSelf on create",
                "POST",
                CC,
                JSON,
                cel_check("x5", json!({"owner": "bob"})),
            ),
            false,
        ),
        (
            step(
                "celcheck: a rule on a number",
                "POST",
                CC,
                JSON,
                cel_check("x6", json!({"ratio": 1.5})),
            ),
            false,
        ),
        (
            step(
                "celcheck: optionalOldSelf on update",
                "PATCH",
                CC_C,
                MERGE,
                json!({"spec": {"owner": "team-b"}}),
            ),
            false,
        ),
        (
            step(
                "celcheck: a new map-list item has no oldSelf",
                "PATCH",
                CC_C,
                MERGE,
                json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "grpc", "port": 9}]}}),
            ),
            true,
        ),
        (
            step(
                "celcheck: a map-list item correlates by key",
                "PATCH",
                CC_C,
                MERGE,
                json!({"spec": {"ports": [{"name": "grpc", "port": 9}, {"name": "http", "port": 81}]}}),
            ),
            false,
        ),
        (
            step(
                "celcheck: a rule on status",
                "PATCH",
                "/apis/cel.raygate.io/v1/namespaces/{ns}/celchecks/c/status",
                MERGE,
                json!({"status": {"phase": "C"}}),
            ),
            false,
        ),
        (
            step(
                "celcheck: a valid status",
                "PATCH",
                "/apis/cel.raygate.io/v1/namespaces/{ns}/celchecks/c/status",
                MERGE,
                json!({"status": {"phase": "A"}}),
            ),
            true,
        ),
        (
            step(
                "celcheck: server-side apply is validated too",
                "PATCH",
                "/apis/cel.raygate.io/v1/namespaces/{ns}/celchecks/c?fieldManager=m1&force=true",
                APPLY,
                json!({"apiVersion": "cel.raygate.io/v1", "kind": "CelCheck", "metadata": {"name": "c"}, "spec": {"replicas": 9}}),
            ),
            false,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_rule_features_answer_as_on_the_real_api_server() {
    let real = TestServer::get().client().await;
    let ns = namespace("diff-celcheck");
    let crd = cel_check_crd();
    let sim = Sim::builder()
        .crds_yaml(&crd.to_string())
        .expect("the CelCheck CRD loads")
        .namespace(&ns)
        .build();
    let simc = sim.client();
    // the real server gets the CRD through its API (once per server) and serves it when established
    let create = step(
        "create the CelCheck CRD",
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        JSON,
        crd,
    );
    let created = run(&real, &ns, &create).await;
    assert!(
        created["code"].is_null() || created["code"] == 409,
        "the CRD is refused: {created}"
    );
    raygate_testing::apiserver::eventually(
        Duration::from_secs(30),
        "the CelCheck CRD is served",
        || async {
            let probe = step("list", "GET", CC, "", Value::Null);
            let v = run(&real, &ns, &probe).await;
            v["names"].is_array().then_some(())
        },
    )
    .await;
    let mut diverged = vec![];
    let mut wrong = vec![];
    for (s, valid) in cel_check_steps() {
        let a = run(&real, &ns, &s).await;
        let b = run(&simc, &ns, &s).await;
        if (a["code"] == 422) == valid {
            wrong.push((s.name, a.clone()));
        }
        eprintln!("{}: {a}", s.name);
        if a != b {
            eprintln!("DIVERGED {}\n  real: {a}\n  sim:  {b}", s.name);
            diverged.push(s.name);
        }
    }
    assert!(
        wrong.is_empty(),
        "the real server did not answer as expected: {wrong:#?}"
    );
    assert!(diverged.is_empty(), "CEL divergences: {diverged:?}");
}
