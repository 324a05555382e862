//! The sim's core controllers through `kube::Client`, each pinned to the Kubernetes code it
//! copies: the disruption controller (pkg/controller/disruption) with the disruption e2e
//! vectors (test/e2e/apps/disruption.go) where the controller — not the test — writes the PDB
//! status; the garbage collector (pkg/controller/garbagecollector) for background, foreground and
//! orphan deletion; the ReplicaSet controller (pkg/controller/replicaset) and the `scale`
//! subresource; node lifecycle for upgrades.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use raygate_sim::Sim;
use raygate_sim::world::World;
use raygate_sim::world::actors::{disruption, garbage_collector, node_lifecycle, replicaset};
use raygate_testing::core::{self, NodeExt, PdbExt, int, pct};
use serde_json::{Value, json};

const NS: &str = "t";

fn sim() -> Sim {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/upstream-crds");
    let crd = |f: &str| std::fs::read_to_string(root.join(f)).unwrap();
    Sim::builder()
        .crds_yaml(&crd("ray.io_rayclusters.yaml"))
        .unwrap()
        .crds_yaml(&crd("leaderworkerset.x-k8s.io_leaderworkersets.yaml"))
        .unwrap()
        .namespace(NS)
        .build()
}

/// Polls `check` every 100 ms of cluster time for up to 10 min of cluster time.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    for _ in 0..6000 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

fn rs_object(name: &str, replicas: i32, node: Option<&str>) -> ReplicaSet {
    let mut spec =
        json!({"containers": [{"name": "c", "image": "x"}], "terminationGracePeriodSeconds": 30});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}))
    .unwrap()
}

async fn pods_of(client: &Client, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

/// Acts as the pods' kubelet: Running, with Ready as given.
async fn run_pods(client: &Client, app: &str, ready: bool) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    for p in pods_of(client, app).await {
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
        api.patch_status(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .unwrap();
    }
}

/// Creates `budget` in namespace `t`.
async fn create_pdb(client: &Client, budget: PodDisruptionBudget) {
    Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
}

/// The PDB's status once the controller has observed its generation and `check` holds.
async fn pdb_status(client: &Client, name: &str, check: impl Fn(&Value) -> bool) -> Value {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    eventually(&format!("PDB {name} status"), || async {
        let p = api.get(name).await.ok()?;
        let status = serde_json::to_value(p.status.as_ref()?).ok()?;
        (status["observedGeneration"] == json!(p.metadata.generation) && check(&status))
            .then_some(status)
    })
    .await
}

fn counts(s: &Value) -> (i64, i64, i64, i64) {
    let n = |k: &str| s[k].as_i64().unwrap_or(0);
    (
        n("expectedPods"),
        n("desiredHealthy"),
        n("currentHealthy"),
        n("disruptionsAllowed"),
    )
}

async fn evict_all(client: &Client, app: &str) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut ok = 0;
    for p in pods_of(client, app).await {
        match api.evict(&p.name_any(), &EvictParams::default()).await {
            Ok(_) => ok += 1,
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 429, "{s:?}"),
            Err(e) => panic!("{e}"),
        }
    }
    ok
}

/// test/e2e/apps/disruption.go "should observe that the PodDisruptionBudget status is not
/// updated for unmanaged pods" is not this; this is "evictions: maxUnavailable allow single
/// eviction" and the unhealthyPodEvictionPolicy vectors, with a 3-replica ReplicaSet whose
/// pods the ReplicaSet controller creates and whose PDB status the disruption controller
/// computes: all ready → exactly 1 eviction under nil, IfHealthyBudget and AlwaysAllow; all
/// unready → 0, 0 and 3.
#[tokio::test(start_paused = true)]
async fn the_disruption_e2e_vectors_hold_with_the_controller_computing_the_budget() {
    for (ready, policy, want) in [
        (true, None, 1),
        (true, Some("IfHealthyBudget"), 1),
        (true, Some("AlwaysAllow"), 1),
        (false, None, 0),
        (false, Some("IfHealthyBudget"), 0),
        (false, Some("AlwaysAllow"), 3),
    ] {
        let sim = sim();
        let client = sim.client();
        let _world = World::on(&sim)
            .replicasets(replicaset::Config::default())
            .disruption(disruption::Config::default())
            .start();
        Api::<ReplicaSet>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &rs_object("ray", 3, Some("n1")))
            .await
            .unwrap();
        eventually("3 pods", || async {
            (pods_of(&client, "ray").await.len() == 3).then_some(())
        })
        .await;
        run_pods(&client, "ray", ready).await;
        let mut budget = core::pdb("budget", &[("app", "ray")]).max_unavailable(int(1));
        if let Some(p) = policy {
            budget = budget.unhealthy_pod_eviction_policy(p);
        }
        create_pdb(&client, budget).await;
        let healthy = if ready { 3 } else { 0 };
        let s = pdb_status(&client, "budget", |s| s["currentHealthy"] == healthy).await;
        assert_eq!(
            counts(&s),
            (3, 2, healthy, if ready { 1 } else { 0 }),
            "{policy:?} ready={ready}"
        );
        assert_eq!(
            evict_all(&client, "ray").await,
            want,
            "{policy:?} ready={ready}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn after_an_eviction_the_replicaset_replaces_the_pod_and_the_budget_recovers() {
    let sim = sim();
    let client = sim.client();
    let _world = World::on(&sim)
        .replicasets(replicaset::Config::default())
        .disruption(disruption::Config::default())
        .start();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    rs_api
        .create(&PostParams::default(), &rs_object("ray", 3, Some("n1")))
        .await
        .unwrap();
    eventually("3 pods", || async {
        (pods_of(&client, "ray").await.len() == 3).then_some(())
    })
    .await;
    run_pods(&client, "ray", true).await;
    let budget = core::pdb("budget", &[("app", "ray")]).max_unavailable(int(1));
    create_pdb(&client, budget).await;
    pdb_status(&client, "budget", |s| s["disruptionsAllowed"] == 1).await;
    assert_eq!(evict_all(&client, "ray").await, 1);
    // the evicted pod terminates in its grace period; the ReplicaSet makes a fourth pod object
    let pods = eventually("a replacement", || async {
        let pods = pods_of(&client, "ray").await;
        (pods.len() == 4).then_some(pods)
    })
    .await;
    let deleting: Vec<_> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .collect();
    assert_eq!(deleting.len(), 1);
    let s = pdb_status(&client, "budget", |s| s["currentHealthy"] == 2).await;
    assert_eq!(counts(&s), (3, 2, 2, 0));
    assert_eq!(
        s["disruptedPods"].as_object().map(|m| m.len()),
        None,
        "a deleting pod's entry is pruned"
    );
    // the kubelet finishes the old pod, the new one becomes ready: one disruption allowed again
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete(
            &deleting[0].name_any(),
            &DeleteParams::default().grace_period(0),
        )
        .await
        .unwrap();
    run_pods(&client, "ray", true).await;
    let s = pdb_status(&client, "budget", |s| s["disruptionsAllowed"] == 1).await;
    assert_eq!(counts(&s), (3, 2, 3, 1));
    let rs = rs_api.get("ray").await.unwrap().status.unwrap();
    assert_eq!((rs.replicas, rs.ready_replicas), (3, Some(3)));
}

#[tokio::test(start_paused = true)]
async fn the_budget_trails_a_pod_going_unready_by_the_controller_s_reaction_lag() {
    let sim = sim();
    let client = sim.client();
    let lag = Duration::from_secs(5);
    let _world = World::on(&sim)
        .replicasets(replicaset::Config::default())
        .disruption(disruption::Config { lag })
        .start();
    Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &rs_object("ray", 3, Some("n1")))
        .await
        .unwrap();
    eventually("3 pods", || async {
        (pods_of(&client, "ray").await.len() == 3).then_some(())
    })
    .await;
    run_pods(&client, "ray", true).await;
    let budget = core::pdb("budget", &[("app", "ray")]).max_unavailable(int(1));
    create_pdb(&client, budget).await;
    pdb_status(&client, "budget", |s| s["disruptionsAllowed"] == 1).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let one = pods_of(&client, "ray").await[0].name_any();
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let unready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    api.patch_status(&one, &PatchParams::default(), &Patch::Merge(unready))
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    tokio::time::sleep(lag - Duration::from_secs(1)).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let stale = pdbs.get("budget").await.unwrap().status.unwrap();
    assert_eq!(
        (stale.current_healthy, stale.disruptions_allowed),
        (Some(3), Some(1)),
        "within the lag the budget is stale"
    );
    pdb_status(&client, "budget", |s| s["currentHealthy"] == 2).await;
    let took = start.elapsed();
    assert!(
        took >= lag && took < lag + Duration::from_secs(1),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_raycluster_owner_has_no_scale_so_max_unavailable_fails_safe_and_an_int_min_available_works()
 {
    let sim = sim();
    let client = sim.client();
    let _world = World::on(&sim)
        .disruption(disruption::Config::default())
        .start();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ray.io", "v1", "RayCluster"),
        "rayclusters",
    );
    let rc: DynamicObject = serde_json::from_value(json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}}}}}))
    .unwrap();
    let rc = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &ar)
        .create(&PostParams::default(), &rc)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..3 {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("w{i}"), "labels": {"app": "ray"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": rc.uid(), "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    run_pods(&client, "ray", true).await;
    let by_max = core::pdb("by-max", &[("app", "ray")]).max_unavailable(int(1));
    create_pdb(&client, by_max).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let failed = eventually("SyncFailed", || async {
        let s = pdbs.get("by-max").await.ok()?.status?;
        let c = s
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "DisruptionAllowed")?
            .clone();
        (c.reason == "SyncFailed").then_some((s, c))
    })
    .await;
    assert_eq!(
        failed.1.message,
        "rayclusters.ray.io does not implement the scale subresource"
    );
    assert_eq!(failed.0.disruptions_allowed, Some(0));
    // observedGeneration is left alone: evictions get the "still being processed" 429
    assert_eq!(failed.0.observed_generation, None);
    let e = pods.evict("w0", &EvictParams::default()).await.unwrap_err();
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 429), "{e}");
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("CalculateExpectedPodCountFailed")
        && e.involved_object.name.as_deref() == Some("by-max")
        && e.message.as_deref() == Some("Failed to calculate the number of expected pods: rayclusters.ray.io does not implement the scale subresource")));
    // replace the PDB by one with an integer minAvailable: it needs no scale
    pdbs.delete("by-max", &DeleteParams::default())
        .await
        .unwrap();
    let by_min = core::pdb("by-min", &[("app", "ray")]).min_available(int(2));
    create_pdb(&client, by_min).await;
    let s = pdb_status(&client, "by-min", |s| s["currentHealthy"] == 3).await;
    assert_eq!(counts(&s), (3, 2, 3, 1));
}

#[tokio::test(start_paused = true)]
async fn pods_of_a_leaderworkerset_count_its_scale_subresource() {
    let sim = sim();
    let client = sim.client();
    let _world = World::on(&sim)
        .disruption(disruption::Config::default())
        .start();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
        "leaderworkersets",
    );
    let lws: DynamicObject = serde_json::from_value(json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws"}, "spec": {"replicas": 4, "leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}}))
    .unwrap();
    let lws = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &ar)
        .create(&PostParams::default(), &lws)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..2 {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("lws-{i}"), "labels": {"app": "lws"},
            "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "lws", "uid": lws.uid(), "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    run_pods(&client, "lws", true).await;
    let groups = core::pdb("groups", &[("app", "lws")]).max_unavailable(pct("50%"));
    create_pdb(&client, groups).await;
    // expectedPods = the LWS's spec.replicas (4) through /scale, not the 2 pods
    let s = pdb_status(&client, "groups", |s| s["expectedPods"] == 4).await;
    assert_eq!(counts(&s), (4, 2, 2, 0));
}

/// Pod `name` labelled `app=gc` on `node` (`None`: unscheduled), controlled by `rs` with
/// `blockOwnerDeletion`.
fn dependent(name: &str, rs: &ReplicaSet, node: Option<&str>) -> Pod {
    // here only: `PodExt::uid` would shadow `ResourceExt::uid` in the tests reading pods' uids
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::Resource;
    use raygate_testing::core::PodExt;
    let mut p = core::pod(name, node.unwrap_or_default()).label("app", "gc");
    p.metadata.owner_references = Some(vec![OwnerReference {
        block_owner_deletion: Some(true),
        ..rs.controller_owner_ref(&()).unwrap()
    }]);
    p
}

async fn gc_fixture(sim: &Sim, node: Option<&str>) -> (Api<ReplicaSet>, Api<Pod>) {
    let client = sim.client();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    // replicas 0: no ReplicaSet controller runs here; the test makes the dependents
    let rs = rs_api
        .create(&PostParams::default(), &rs_object("gc", 0, None))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for n in ["a", "b"] {
        pods.create(&PostParams::default(), &dependent(n, &rs, node))
            .await
            .unwrap();
    }
    (rs_api, pods)
}

#[tokio::test(start_paused = true)]
async fn background_deletion_removes_the_dependents_after_the_owner() {
    let sim = sim();
    let _world = World::on(&sim)
        .garbage_collector(garbage_collector::Config::default())
        .start();
    let (rs_api, pods) = gc_fixture(&sim, None).await;
    rs_api
        .delete("gc", &DeleteParams::background())
        .await
        .unwrap();
    assert!(
        rs_api.get_opt("gc").await.unwrap().is_none(),
        "the owner goes at once"
    );
    eventually("dependents collected", || async {
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn foreground_deletion_keeps_the_owner_until_its_blocking_dependents_are_gone() {
    let sim = sim();
    let _world = World::on(&sim)
        .garbage_collector(garbage_collector::Config::default())
        .start();
    // scheduled pods: deleted gracefully, they stay until their kubelet finishes them
    let (rs_api, pods) = gc_fixture(&sim, Some("n1")).await;
    rs_api
        .delete("gc", &DeleteParams::foreground())
        .await
        .unwrap();
    let owner = rs_api.get("gc").await.unwrap();
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert_eq!(owner.finalizers(), ["foregroundDeletion"]);
    eventually("dependents deleting", || async {
        let items = pods.list(&ListParams::default()).await.unwrap().items;
        items
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        rs_api.get_opt("gc").await.unwrap().is_some(),
        "the owner waits for its dependents"
    );
    for n in ["a", "b"] {
        pods.delete(n, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    eventually("owner gone", || async {
        rs_api.get_opt("gc").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn orphan_deletion_removes_the_owner_reference_and_keeps_the_dependents() {
    let sim = sim();
    let _world = World::on(&sim)
        .garbage_collector(garbage_collector::Config::default())
        .start();
    let (rs_api, pods) = gc_fixture(&sim, None).await;
    let owner = rs_api.get("gc").await.unwrap();
    let deleting = rs_api.delete("gc", &DeleteParams::orphan()).await.unwrap();
    let deleting = deleting.left().expect("the owner stays while it orphans");
    assert_eq!(deleting.finalizers(), ["orphan"]);
    eventually("owner gone", || async {
        rs_api.get_opt("gc").await.unwrap().is_none().then_some(())
    })
    .await;
    let left = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(left.len(), 2);
    for p in left {
        assert!(
            p.owner_references()
                .iter()
                .all(|r| r.uid != owner.uid().unwrap()),
            "{:?}",
            p.metadata.owner_references
        );
    }
}

#[tokio::test]
async fn a_delete_with_an_unknown_propagation_policy_is_invalid() {
    let sim = sim();
    let client = sim.client();
    let (rs_api, _) = gc_fixture(&sim, None).await;
    let req = http::Request::delete(format!("/apis/apps/v1/namespaces/{NS}/replicasets/gc"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"propagationPolicy": "Sometimes"})).unwrap())
        .unwrap();
    let e = client.request::<Value>(req).await.unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("{e}")
    };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sometimes\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );
    let both = json!({"propagationPolicy": "Orphan", "orphanDependents": true});
    let req = http::Request::delete(format!("/apis/apps/v1/namespaces/{NS}/replicasets/gc"))
        .body(serde_json::to_vec(&both).unwrap())
        .unwrap();
    assert!(
        matches!(client.request::<Value>(req).await, Err(kube::Error::Api(s)) if s.code == 422)
    );
    assert!(
        rs_api.get_opt("gc").await.unwrap().is_some(),
        "nothing deleted"
    );
    // orphanDependents: true is the deprecated spelling of Orphan
    let req = http::Request::delete(format!("/apis/apps/v1/namespaces/{NS}/replicasets/gc"))
        .body(serde_json::to_vec(&json!({"orphanDependents": true})).unwrap())
        .unwrap();
    client.request::<Value>(req).await.unwrap();
    assert_eq!(rs_api.get("gc").await.unwrap().finalizers(), ["orphan"]);
}

#[tokio::test(start_paused = true)]
async fn the_scale_subresource_drives_the_replicaset_controller() {
    let sim = sim();
    let client = sim.client();
    let _world = World::on(&sim)
        .replicasets(replicaset::Config::default())
        .start();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    rs_api
        .create(&PostParams::default(), &rs_object("web", 2, None))
        .await
        .unwrap();
    eventually("2 pods", || async {
        (pods_of(&client, "web").await.len() == 2).then_some(())
    })
    .await;
    let scale = rs_api.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    rs_api
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    eventually("5 pods", || async {
        (pods_of(&client, "web").await.len() == 5).then_some(())
    })
    .await;
    let rs = eventually("status", || async {
        let rs = rs_api.get("web").await.ok()?;
        (rs.status.as_ref()?.replicas == 5).then_some(rs)
    })
    .await;
    assert_eq!(
        rs.status.unwrap().observed_generation,
        rs.metadata.generation
    );
    // a deleted pod is replaced; a scale-down deletes the surplus
    let victim = pods_of(&client, "web").await[0].name_any();
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    eventually("replacement", || async {
        let pods = pods_of(&client, "web").await;
        (pods.len() == 5 && pods.iter().all(|p| p.name_any() != victim)).then_some(())
    })
    .await;
    rs_api
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually("1 pod", || async {
        (pods_of(&client, "web").await.len() == 1).then_some(())
    })
    .await;
    // a stale resourceVersion on the Scale is a conflict
    let stale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "resourceVersion": "1"}, "spec": {"replicas": 3}});
    let req = http::Request::put(format!(
        "/apis/apps/v1/namespaces/{NS}/replicasets/web/scale"
    ))
    .body(serde_json::to_vec(&stale).unwrap())
    .unwrap();
    assert!(
        matches!(client.request::<Value>(req).await, Err(kube::Error::Api(s)) if s.code == 409)
    );
}

#[tokio::test]
async fn discovery_lists_scale_only_where_it_is_served() {
    let sim = sim();
    let client = sim.client();
    let apps = client.list_api_group_resources("apps/v1").await.unwrap();
    assert!(
        apps.resources
            .iter()
            .any(|r| r.name == "replicasets/scale" && r.kind == "Scale")
    );
    let ray = client.list_api_group_resources("ray.io/v1").await.unwrap();
    assert!(ray.resources.iter().any(|r| r.name == "rayclusters"));
    assert!(!ray.resources.iter().any(|r| r.name == "rayclusters/scale"));
    let lws = client
        .list_api_group_resources("leaderworkerset.x-k8s.io/v1")
        .await
        .unwrap();
    assert!(
        lws.resources
            .iter()
            .any(|r| r.name == "leaderworkersets/scale")
    );
    let core = client.list_core_api_resources("v1").await.unwrap();
    assert!(core.resources.iter().any(|r| r.name == "pods/eviction"));
}

async fn ready_node(client: &Client, clock: &raygate_sim::Clock, name: &str) {
    let node = core::node(name, "")
        .label("kubernetes.io/hostname", name)
        .label("raygate.io/ud", "1")
        .capacity(&[("cpu", "8")]);
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    node_lifecycle::write_ready(client, clock, name, &node_lifecycle::Readiness::Ready)
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_drained_node_reboots_then_comes_back_ready_at_the_next_generation() {
    let sim = sim();
    let client = sim.client();
    let _world = World::on(&sim)
        .node_lifecycle(node_lifecycle::Config::default())
        .start();
    ready_node(&client, sim.clock(), "n1").await;
    let nodes: Api<Node> = Api::all(client.clone());
    // cordon: a plain field
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "busy"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}})).unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    node_lifecycle::request(&client, "n1", "reboot")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        node_lifecycle::is_ready(&nodes.get("n1").await.unwrap()),
        "not drained yet: no reboot"
    );
    pods.delete("busy", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let down = eventually("down", || async {
        let n = nodes.get("n1").await.ok()?;
        (!node_lifecycle::is_ready(&n)).then_some((n, tokio::time::Instant::now()))
    })
    .await;
    let taints = down.0.spec.as_ref().unwrap().taints.clone().unwrap();
    assert_eq!(taints[0].key, node_lifecycle::UNREACHABLE_TAINT);
    let up = eventually("up", || async {
        let n = nodes.get("n1").await.ok()?;
        node_lifecycle::is_ready(&n).then_some(n)
    })
    .await;
    let took = down.1.elapsed();
    assert!(
        took >= Duration::from_secs(119) && took <= Duration::from_secs(121),
        "{took:?}"
    );
    assert_eq!(
        up.labels()
            .get(node_lifecycle::GENERATION)
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(
        up.status
            .as_ref()
            .unwrap()
            .node_info
            .as_ref()
            .unwrap()
            .kubelet_version,
        "v1.36.0"
    );
    assert_eq!(
        up.spec.as_ref().unwrap().unschedulable,
        Some(true),
        "the cordon stays for the drainer to lift"
    );
    assert!(
        up.spec
            .as_ref()
            .unwrap()
            .taints
            .as_ref()
            .is_none_or(|t| t.is_empty())
    );
}

#[tokio::test(start_paused = true)]
async fn a_replaced_node_is_deleted_once_its_replacement_joined_ready() {
    let sim = sim();
    let client = sim.client();
    let _world = World::on(&sim)
        .node_lifecycle(node_lifecycle::Config::default())
        .start();
    ready_node(&client, sim.clock(), "n1").await;
    node_lifecycle::request(&client, "n1", "replace")
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let new = eventually("replacement", || async {
        nodes.get_opt("n1-g1").await.ok()?
    })
    .await;
    assert!(!node_lifecycle::is_ready(&new));
    assert_eq!(
        new.labels().get("raygate.io/ud").map(String::as_str),
        Some("1")
    );
    eventually("old node gone", || async {
        nodes.get_opt("n1").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(node_lifecycle::is_ready(&nodes.get("n1-g1").await.unwrap()));
}

/// `ShouldDeleteDuringUpdate`: an object whose last finalizer goes is deleted only when its
/// deletion grace period is 0; a pod still in its grace period stays for its kubelet.
#[tokio::test]
async fn a_pod_whose_last_finalizer_goes_during_its_grace_period_stays_for_its_kubelet() {
    let sim = sim();
    let pods: Api<Pod> = Api::namespaced(sim.client(), NS);
    let p: Pod = serde_json::from_value(
        json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    pods.delete("f", &DeleteParams::default()).await.unwrap();
    let drop_finalizer = json!({"metadata": {"finalizers": null}});
    pods.patch("f", &PatchParams::default(), &Patch::Merge(drop_finalizer))
        .await
        .unwrap();
    let still = pods.get("f").await.unwrap();
    assert_eq!(still.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete("f", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(pods.get_opt("f").await.unwrap().is_none());
}

/// disruption.go `syncStalePodDisruption`: a `DisruptionTarget=True` condition left on a pod
/// that is not terminating (e.g. an eviction whose delete never happened) is reset to False
/// after 2 min.
#[tokio::test(start_paused = true)]
async fn a_stale_disruption_target_condition_is_reset_after_two_minutes() {
    let sim = sim();
    let client = sim.client();
    let _world = World::on(&sim)
        .disruption(disruption::Config::default())
        .start();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}})).unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let now = sim.clock().now_rfc3339();
    let cond = json!({"status": {"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "True",
        "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting", "lastTransitionTime": now}]}});
    pods.patch_status("s", &PatchParams::default(), &Patch::Merge(cond))
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    let target = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "DisruptionTarget")
            .map(|c| c.status.clone())
    };
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_eq!(
        target(&pods.get("s").await.unwrap()).as_deref(),
        Some("True")
    );
    eventually("reset", || async {
        (target(&pods.get("s").await.ok()?).as_deref() == Some("False")).then_some(())
    })
    .await;
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(119) && took <= Duration::from_secs(122),
        "{took:?}"
    );
}

/// The loop's expectations stand in for the ReplicaSet controller's `ControlleeExpectations`: a
/// pass never runs on a cache that has not shown the pods the last one created, so scaling up
/// creates each missing pod exactly once (no surplus created, then deleted).
#[tokio::test(start_paused = true)]
async fn a_replicaset_scaled_up_creates_each_missing_pod_exactly_once() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let sim = sim();
    let client = sim.client();
    let created = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let seen = created.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    tokio::spawn(
        watcher(pods.clone(), watcher::Config::default())
            .applied_objects()
            .for_each(move |p| {
                if let Ok(p) = p {
                    seen.lock().unwrap().insert(p.uid().unwrap_or_default());
                }
                async {}
            }),
    );
    let _world = World::on(&sim)
        .replicasets(replicaset::Config::default())
        .start();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    sets.create(&PostParams::default(), &rs_object("web", 1, None))
        .await
        .unwrap();
    for replicas in [5, 12, 30] {
        sets.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
        eventually("scaled", || async {
            (pods_of(&client, "web").await.len() == replicas as usize).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    assert_eq!(
        created.lock().unwrap().len(),
        30,
        "every pod ever created is one of the 30"
    );
    assert!(
        pods_of(&client, "web")
            .await
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_none())
    );
}
