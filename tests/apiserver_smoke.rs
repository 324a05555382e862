//! Smoke tests of the test API server: the capabilities raygate relies on, on real semantics.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use raygate::types::kueue::{ClusterQueue, Workload};
use raygate::types::ray::RayCluster;
use raygate_testing::apiserver::{TestServer, namespace};
use serde_json::json;

fn raycluster(name: &str, ns: &str, replicas: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "smoke"}},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}}},
            "workerGroupSpecs": [{"groupName": "w", "replicas": replicas, "minReplicas": 0, "maxReplicas": 3, "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0"}]}}}]}
    })
}

#[tokio::test]
async fn server_side_apply_records_the_field_manager_and_conflicts() {
    let client = TestServer::get().client().await;
    let ns = namespace("ssa");
    let api: Api<RayCluster> = Api::namespaced(client, &ns);
    let obj = raycluster("c", &ns, json!(1));
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
    assert!(managers.contains(&"raygate".to_string()), "{managers:?}");
    // another manager changing the same field without force conflicts (409)
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
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err}"
    );
}

#[tokio::test]
async fn status_is_a_separate_subresource() {
    let client = TestServer::get().client().await;
    let ns = namespace("status");
    let api: Api<RayCluster> = Api::namespaced(client, &ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(raycluster("c", &ns, json!(1))).unwrap(),
    )
    .await
    .unwrap();
    // status through the main resource is ignored; through /status it sticks
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
        &Patch::Merge(json!({"status": {"state": "ready"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        api.get("c")
            .await
            .unwrap()
            .status
            .and_then(|s| s.state)
            .as_deref(),
        Some("ready")
    );
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict() {
    let client = TestServer::get().client().await;
    let ns = namespace("conflict");
    let api: Api<RayCluster> = Api::namespaced(client, &ns);
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(raycluster("c", &ns, json!(1))).unwrap(),
        )
        .await
        .unwrap();
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .unwrap();
    let mut stale = created.clone();
    stale.spec.suspend = Some(false);
    let err = api
        .replace("c", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err}"
    );
}

#[tokio::test]
async fn the_real_schema_rejects_a_bad_raycluster_and_kueue_cel_rules_apply() {
    let client = TestServer::get().client().await;
    let ns = namespace("schema");
    // a string `replicas` cannot even be typed: send it untyped
    let raw = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::discovery::ApiResource::erase::<RayCluster>(&()),
    );
    let err = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(raycluster("c", &ns, json!("three"))).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );
    // Kueue's CEL: borrowingLimit without a cohort is rejected
    let cq: Api<ClusterQueue> = Api::all(client);
    let bad_cq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": format!("{ns}-cq")},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}]}]}]}});
    let err = cq
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad_cq).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("borrowingLimit must be nil")),
        "{err}"
    );
}

#[tokio::test]
async fn label_selected_lists_and_watches_through_kube_runtime() {
    let client = TestServer::get().client().await;
    let ns = namespace("watch");
    let api: Api<Workload> = Api::namespaced(client, &ns);
    let stream =
        watcher(api.clone(), watcher::Config::default().labels("pick=me")).applied_objects();
    let mut stream = Box::pin(stream);
    let wl = |name: &str, pick: &str| -> Workload {
        serde_json::from_value(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, "labels": {"pick": pick}},
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

#[tokio::test]
async fn a_slice_built_by_the_planner_is_accepted_by_kueues_workload_crd() {
    use raygate::podsets::{children_of, of_service};
    use raygate::slices::{SliceAction, SliceContext, SliceOwner, plan};
    let client = TestServer::get().client().await;
    let ns = namespace("slice-ssa");
    let svc: raygate::types::ray::RayService = serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "svc", "namespace": ns, "uid": "u-1"},
        "spec": {"rayClusterConfig": {"enableInTreeAutoscaling": true, "headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray", "resources": {"requests": {"cpu": "1"}}}]}}},
            "workerGroupSpecs": [{"groupName": "W", "replicas": 2, "minReplicas": 0, "maxReplicas": 3, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray", "resources": {"limits": {"cpu": "2"}}}]}}}]}}
    }))
    .unwrap();
    let none: Vec<raygate::types::ray::RayCluster> = vec![];
    let podsets = of_service(&svc, &children_of(&svc, &none)).unwrap().podsets;
    let ctx = SliceContext {
        owner: SliceOwner {
            namespace: ns.clone(),
            name: "svc".into(),
            uid: "u-1".into(),
        },
        queue_name: "lq".into(),
        ..Default::default()
    };
    let p = plan(&ctx, &podsets, &[]);
    let SliceAction::Create { workload, .. } = &p.actions[0] else {
        panic!("{p:?}")
    };
    let api: Api<Workload> = Api::namespaced(client, &ns);
    let name = workload.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("raygate").force(),
        &Patch::Apply(workload.as_ref()),
    )
    .await
    .unwrap();
    let got = api.get(&name).await.unwrap();
    assert_eq!(
        got.spec
            .pod_sets
            .iter()
            .map(|p| (p.name.as_str(), p.count))
            .collect::<Vec<_>>(),
        [("head", 1), ("w", 2)]
    );
    assert_eq!(
        got.spec.pod_sets[0]
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers
            .len(),
        2,
        "the autoscaler container is kept"
    );
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed.items.len(),
        1,
        "readable through a LIST (what the watch does)"
    );
}
