//! The API semantics raygate relies on, through a real `kube::Client` on the sim. The first
//! tests are `tests/apiserver_smoke.rs`'s scenarios (run there against the real CRD API server),
//! so both servers answer the same requests the same way.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use raygate::types::kueue::{ClusterQueue, Workload};
use raygate::types::ray::RayCluster;
use raygate_sim::Sim;
use serde_json::json;

fn upstream_crds() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/upstream-crds")
}

fn sim() -> Sim {
    Sim::builder()
        .crds_dir(upstream_crds())
        .unwrap()
        .namespace("t")
        .build()
}

fn raycluster(name: &str, ns: &str, replicas: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "smoke"}},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}}},
            "workerGroupSpecs": [{"groupName": "w", "replicas": replicas, "minReplicas": 0, "maxReplicas": 3, "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0"}]}}}]}
    })
}

fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

// --- tests/apiserver_smoke.rs, against the sim ---

#[tokio::test]
async fn server_side_apply_records_the_field_manager_and_conflicts() {
    let sim = sim();
    let api: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    let obj = raycluster("c", "t", json!(1));
    api.patch(
        "c",
        &PatchParams::apply("raygate").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
    let got = api.get("c").await.unwrap();
    let managers: Vec<_> = got
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["raygate"]);
    let mut other = obj.clone();
    other["spec"]["workerGroupSpecs"][0]["replicas"] = json!(2);
    let err = api
        .patch(
            "c",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&other),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &err else {
        panic!("{err}")
    };
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Apply failed with 1 conflict: conflict with \"raygate\": .spec.workerGroupSpecs"
    );
    // KubeRay's CRD leaves workerGroupSpecs atomic (no x-kubernetes-list-type): the whole list
    // is the conflicting field
    // the same value is shared, not a conflict; force takes the field over
    let same_label = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c", "labels": {"app": "smoke"}}});
    let shared = api
        .patch(
            "c",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&same_label),
        )
        .await
        .unwrap();
    assert_eq!(shared.metadata.managed_fields.unwrap().len(), 2);
    let taken = api
        .patch(
            "c",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    assert_eq!(
        taken.spec.worker_group_specs.as_ref().unwrap()[0].replicas,
        Some(2)
    );
}

#[tokio::test]
async fn status_is_a_separate_subresource() {
    let sim = sim();
    let api: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(raycluster("c", "t", json!(1))).unwrap(),
    )
    .await
    .unwrap();
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"state": "ready"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        api.get("c").await.unwrap().status.and_then(|s| s.state),
        None
    );
    api.patch_status(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"state": "ready"}, "spec": {"suspend": true}})),
    )
    .await
    .unwrap();
    let got = api.get("c").await.unwrap();
    assert_eq!(got.status.and_then(|s| s.state).as_deref(), Some("ready"));
    assert_eq!(got.spec.suspend, None, "spec is ignored on /status");
    assert_eq!(
        got.metadata.generation,
        Some(1),
        "a status write is not a spec change"
    );
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict() {
    let sim = sim();
    let api: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(raycluster("c", "t", json!(1))).unwrap(),
        )
        .await
        .unwrap();
    let patched = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    let mut stale = created.clone();
    stale.spec.suspend = Some(false);
    let err = api
        .replace("c", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 409);
    assert_eq!(
        s.message,
        "Operation cannot be fulfilled on rayclusters.ray.io \"c\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // with the current version the replace goes through
    let mut fresh = patched;
    fresh.spec.suspend = Some(false);
    let replaced = api
        .replace("c", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(3));
}

#[tokio::test]
async fn the_real_schema_rejects_a_bad_raycluster() {
    let sim = sim();
    let raw = Api::<kube::api::DynamicObject>::namespaced_with(
        sim.client(),
        "t",
        &kube::discovery::ApiResource::erase::<RayCluster>(&()),
    );
    let err = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(raycluster("c", "t", json!("three"))).unwrap(),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &err else {
        panic!("{err}")
    };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "RayCluster.ray.io \"c\" is invalid: [spec.workerGroupSpecs[0].replicas: Invalid value: \"string\": spec.workerGroupSpecs[0].replicas in body must be of type integer: \"string\", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
    );
    // nothing was stored
    assert_eq!(code(&raw.get("c").await.unwrap_err()), 404);
}

#[tokio::test]
async fn label_selected_lists_and_watches_through_kube_runtime() {
    let sim = sim();
    let api: Api<Workload> = Api::namespaced(sim.client(), "t");
    let stream =
        watcher(api.clone(), watcher::Config::default().labels("pick=me")).applied_objects();
    let mut stream = Box::pin(stream);
    let wl = |name: &str, pick: &str| -> Workload {
        serde_json::from_value(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "t", "labels": {"pick": pick}},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}]}}))
        .unwrap()
    };
    api.create(&PostParams::default(), &wl("a", "me"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &wl("b", "not-me"))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("a"));
    let listed = api
        .list(&ListParams::default().labels("pick=me"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
}

// --- beyond the smoke tests ---

#[tokio::test]
async fn create_assigns_identity_and_rejects_duplicates() {
    let sim = sim();
    let api: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    let mut obj = raycluster("", "t", json!(1));
    obj["metadata"].as_object_mut().unwrap().remove("name");
    obj["metadata"]["generateName"] = json!("gen-");
    obj["metadata"].as_object_mut().unwrap().remove("namespace");
    let made = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap();
    let name = made.metadata.name.clone().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    assert_eq!(
        made.metadata.namespace.as_deref(),
        Some("t"),
        "namespace from the URL"
    );
    assert_eq!(made.metadata.generation, Some(1));
    assert!(made.metadata.uid.is_some() && made.metadata.creation_timestamp.is_some());
    let again = api.create(&PostParams::default(), &made).await.unwrap_err();
    let kube::Error::Api(s) = &again else {
        panic!("{again}")
    };
    assert_eq!(
        (s.code, s.reason.as_str()),
        (500, "InternalError"),
        "a resourceVersion on create"
    );
    let mut dup = made.clone();
    dup.metadata.resource_version = None;
    let e = api.create(&PostParams::default(), &dup).await.unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e}")
    };
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(
        s.message,
        format!("rayclusters.ray.io \"{name}\" already exists")
    );
    // a namespace that does not exist
    let other: Api<RayCluster> = Api::namespaced(sim.client(), "nope");
    let e = other
        .create(
            &PostParams::default(),
            &serde_json::from_value(raycluster("c", "nope", json!(1))).unwrap(),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e}")
    };
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "namespaces \"nope\" not found")
    );
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let sim = sim();
    let api: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    let rv = sim.revision();
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(
        &pp,
        &serde_json::from_value(raycluster("c", "t", json!(1))).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code(&api.get("c").await.unwrap_err()), 404);
    assert_eq!(sim.revision(), rv);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(raycluster("c", "t", json!(1))).unwrap(),
    )
    .await
    .unwrap();
    let patch = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let would = api
        .patch(
            "c",
            &patch,
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    assert_eq!(would.spec.suspend, Some(true));
    assert_eq!(api.get("c").await.unwrap().spec.suspend, None);
    let dp = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    api.delete("c", &dp).await.unwrap();
    api.get("c").await.unwrap();
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_removed() {
    let sim = sim();
    let api: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    let mut obj = raycluster("c", "t", json!(1));
    obj["metadata"]["finalizers"] = json!(["example.io/hold"]);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(obj).unwrap(),
    )
    .await
    .unwrap();
    api.delete("c", &DeleteParams::default()).await.unwrap();
    let held = api.get("c").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(code(&api.get("c").await.unwrap_err()), 404);
}

#[tokio::test]
async fn a_scheduled_pod_is_deleted_gracefully_an_unscheduled_one_at_once() {
    let sim = sim();
    let api: Api<Pod> = Api::namespaced(sim.client(), "t");
    let pod = |name: &str, node: Option<&str>| -> Pod {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 45, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}))
        .unwrap()
    };
    let created = api
        .create(&PostParams::default(), &pod("a", Some("n1")))
        .await
        .unwrap();
    assert_eq!(
        created.status.unwrap().phase.as_deref(),
        Some("Pending"),
        "status is reset on create"
    );
    api.create(&PostParams::default(), &pod("b", None))
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let a = api.get("a").await.unwrap();
    assert_eq!(a.metadata.deletion_grace_period_seconds, Some(45));
    let ts = a.metadata.deletion_timestamp.unwrap().0;
    assert_eq!(ts.to_string(), "2026-01-01T00:00:45Z");
    api.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(code(&api.get("b").await.unwrap_err()), 404);
    // the kubelet's final delete
    api.delete("a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(code(&api.get("a").await.unwrap_err()), 404);
    let nodes = api
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    assert!(nodes.items.is_empty());
}

#[tokio::test]
async fn field_selectors_on_pods_and_their_errors() {
    let sim = sim();
    let api: Api<Pod> = Api::namespaced(sim.client(), "t");
    for (name, node) in [("a", "n1"), ("b", "n2"), ("c", "n1")] {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}})).unwrap();
        api.create(&PostParams::default(), &p).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<Pod>| {
        l.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("spec.nodeName=n1"))
                .await
                .unwrap()
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("spec.nodeName!=n1,status.phase=Pending"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=c"))
                .await
                .unwrap()
        ),
        ["c"]
    );
    let e = api
        .list(&ListParams::default().fields("spec.image=x"))
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e}")
    };
    assert_eq!(
        (s.code, s.message.as_str()),
        (400, "field label not supported: spec.image")
    );
    let all: Api<Pod> = Api::all(sim.client());
    assert_eq!(
        all.list(&ListParams::default().fields("metadata.namespace=t"))
            .await
            .unwrap()
            .items
            .len(),
        3
    );
    // paging
    let page = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let rest = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(page.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(
        rest.metadata.continue_, None,
        "the last page has no continue"
    );
    assert_eq!(names(rest), ["c"]);
    // a page exactly as long as what is left is the last one
    let exact = api.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(exact.metadata.continue_, None);
    assert_eq!(names(exact), ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn watches_resume_from_a_version_get_bookmarks_and_410_when_too_old() {
    let sim = Sim::builder()
        .crds_dir(upstream_crds())
        .unwrap()
        .namespace("t")
        .history(3)
        .build();
    let api: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    let a = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(raycluster("a", "t", json!(1))).unwrap(),
        )
        .await
        .unwrap();
    let rv_a = a.metadata.resource_version.clone().unwrap();
    api.create(
        &PostParams::default(),
        &serde_json::from_value(raycluster("b", "t", json!(1))).unwrap(),
    )
    .await
    .unwrap();
    let mut s = api
        .watch(&WatchParams::default(), &rv_a)
        .await
        .unwrap()
        .boxed();
    match s.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("b")),
        other => panic!("{other:?}"),
    }
    api.delete("a", &DeleteParams::default()).await.unwrap();
    match s.next().await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("a")),
        other => panic!("{other:?}"),
    }
    // idle: a bookmark after the interval (virtual time)
    match s.next().await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.resource_version, sim.revision().to_string())
        }
        other => panic!("{other:?}"),
    }
    for n in ["c", "d", "e"] {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(raycluster(n, "t", json!(1))).unwrap(),
        )
        .await
        .unwrap();
    }
    let mut old = api
        .watch(&WatchParams::default(), &rv_a)
        .await
        .unwrap()
        .boxed();
    match old.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message
                    .starts_with(&format!("too old resource version: {rv_a} (")),
                "{}",
                e.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(old.next().await.is_none(), "the watch ends after the error");
}

#[tokio::test]
async fn status_apply_by_two_managers_keeps_each_ones_conditions() {
    let sim = Sim::builder()
        .crds_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds"))
        .unwrap()
        .namespace("t")
        .build();
    let api: Api<Workload> = Api::namespaced(sim.client(), "t");
    let wl = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w", "namespace": "t"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}]}});
    api.patch(
        "w",
        &PatchParams::apply("raygate").force(),
        &Patch::Apply(&wl),
    )
    .await
    .unwrap();
    let cond = |t: &str| json!({"type": t, "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let status = |conds: serde_json::Value| json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "status": {"conditions": conds}});
    api.patch_status(
        "w",
        &PatchParams::apply("admission").force(),
        &Patch::Apply(status(json!([cond("QuotaReserved"), cond("Admitted")]))),
    )
    .await
    .unwrap();
    api.patch_status(
        "w",
        &PatchParams::apply("slices").force(),
        &Patch::Apply(status(json!([cond("Finished")]))),
    )
    .await
    .unwrap();
    // admission stops applying Admitted: only its own condition goes
    let got = api
        .patch_status(
            "w",
            &PatchParams::apply("admission").force(),
            &Patch::Apply(status(json!([cond("QuotaReserved")]))),
        )
        .await
        .unwrap();
    let types: Vec<_> = got
        .status
        .unwrap()
        .conditions
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(types, ["QuotaReserved", "Finished"]);
    let entries: Vec<_> = got
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap(), m.subresource))
        .collect();
    assert_eq!(
        entries,
        // the server's order: operation, time, manager, subresource
        [
            ("admission".into(), "Apply".into(), Some("status".into())),
            ("raygate".into(), "Apply".into(), None),
            ("slices".into(), "Apply".into(), Some("status".into())),
        ]
    );
    // the main resource's apply never touches status
    let again = api
        .patch(
            "w",
            &PatchParams::apply("raygate").force(),
            &Patch::Apply(&wl),
        )
        .await
        .unwrap();
    assert_eq!(again.status.unwrap().conditions.len(), 2);
    assert_eq!(
        again.metadata.resource_version, got.metadata.resource_version,
        "a no-op apply writes nothing"
    );
}

#[tokio::test]
async fn an_apply_that_drops_a_field_removes_it_unless_another_manager_owns_it() {
    let sim = sim();
    let api: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    let mut obj = raycluster("c", "t", json!(1));
    obj["metadata"]["annotations"] = json!({"a": "1", "b": "2"});
    api.patch("c", &PatchParams::apply("m1"), &Patch::Apply(&obj))
        .await
        .unwrap();
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"b": "3"}}})),
    )
    .await
    .unwrap();
    obj["metadata"]["annotations"] = json!({});
    let got = api
        .patch("c", &PatchParams::apply("m1"), &Patch::Apply(&obj))
        .await
        .unwrap();
    let ann = got.metadata.annotations.unwrap_or_default();
    assert_eq!(ann.get("a"), None, "only m1 owned a");
    assert_eq!(
        ann.get("b").map(String::as_str),
        Some("3"),
        "the merge patch's writer owns b now"
    );
}

#[tokio::test]
async fn leases_take_strategic_merge_patches_and_crds_refuse_them() {
    let sim = sim();
    let leases: Api<Lease> = Api::namespaced(sim.client(), "t");
    leases
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).unwrap())
        .await
        .unwrap();
    let got = leases
        .patch(
            "l",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"holderIdentity": "b"}})),
        )
        .await
        .unwrap();
    let spec = got.spec.unwrap();
    assert_eq!(
        (spec.holder_identity.as_deref(), spec.lease_duration_seconds),
        (Some("b"), Some(15))
    );
    let rc: Api<RayCluster> = Api::namespaced(sim.client(), "t");
    rc.create(
        &PostParams::default(),
        &serde_json::from_value(raycluster("c", "t", json!(1))).unwrap(),
    )
    .await
    .unwrap();
    let e = rc
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 415);
}

#[tokio::test]
async fn malformed_requests_are_400s_and_change_nothing() {
    let sim = sim();
    let client = sim.client();
    let rv = sim.revision();
    let send = |method: &str, uri: &str, ct: &str, body: &'static str| {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", ct)
            .body(body.as_bytes().to_vec())
            .unwrap()
    };
    for (req, want) in [
        (
            send(
                "POST",
                "/apis/ray.io/v1/namespaces/t/rayclusters",
                "application/json",
                "{not json",
            ),
            400,
        ),
        (
            send(
                "POST",
                "/apis/ray.io/v1/namespaces/t/rayclusters",
                "application/json",
                "[1,2]",
            ),
            400,
        ),
        (
            send(
                "GET",
                "/apis/ray.io/v1/namespaces/t/rayclusters?labelSelector=a%20in%20b",
                "",
                "",
            ),
            400,
        ),
        (
            send(
                "GET",
                "/apis/ray.io/v1/namespaces/t/rayclusters?fieldSelector=spec.x%3Dy",
                "",
                "",
            ),
            400,
        ),
        (send("GET", "/apis/nothing.io/v1/things", "", ""), 404),
        (
            send(
                "GET",
                "/apis/ray.io/v1/namespaces/t/rayclusters/c/nonsense",
                "",
                "",
            ),
            404,
        ),
        (
            send(
                "POST",
                "/apis/ray.io/v1/namespaces/t/rayclusters?dryRun=Some",
                "application/json",
                "{}",
            ),
            400,
        ),
        (
            send("DELETE", "/apis/ray.io/v1/namespaces/t/rayclusters", "", ""),
            405,
        ),
    ] {
        let uri = req.uri().to_string();
        let err = client.request::<serde_json::Value>(req).await.unwrap_err();
        assert_eq!(code(&err), want, "{uri}: {err}");
    }
    assert_eq!(sim.revision(), rv);
}

#[tokio::test]
async fn namespaces_are_served_as_kube_runtime_reads_them() {
    let sim = sim();
    let api: Api<Namespace> = Api::all(sim.client());
    let names: Vec<_> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
            "t"
        ]
    );
    let ns = api.get("t").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
}

#[tokio::test]
async fn a_cluster_queue_round_trips_and_is_listed_cluster_wide() {
    let sim = sim();
    let cq: Api<ClusterQueue> = Api::all(sim.client());
    let obj = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}]}});
    cq.create(
        &PostParams::default(),
        &serde_json::from_value(obj).unwrap(),
    )
    .await
    .unwrap();
    let got = cq.get("cq").await.unwrap();
    assert_eq!(got.metadata.namespace, None);
    assert_eq!(
        cq.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}
