//! The KubeRay v1.7 emulator (`raygate_sim::world::kuberay`) against the real API server: one test
//! per emulated behaviour. Every test has its own namespace and its own emulator restricted to it.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use raygate::types::ray::{RayCluster, RayService, RayServiceStatus};
use raygate_sim::world::kuberay::{EmulatorConfig, cluster_spec_hash, run};
use raygate_sim::{Clock, Sim};
use raygate_testing::apiserver::{TestServer, eventually, namespace};
use serde_json::{Value, json};

const START_DELAY: Duration = Duration::from_millis(300);
const TIMEOUT: Duration = Duration::from_secs(10);
/// Long enough to prove something does not happen (≥ 3 × the start delay).
const QUIET: Duration = Duration::from_millis(1200);

struct Env {
    services: Api<RayService>,
    clusters: Api<RayCluster>,
}

/// A client, a fresh namespace, and an emulator watching only that namespace.
async fn setup(test: &str) -> Env {
    let client: Client = TestServer::get().client().await;
    let ns = namespace(test);
    let config = EmulatorConfig {
        start_delay: START_DELAY,
        namespace: Some(ns.clone()),
        ..Default::default()
    };
    // stops when the test's runtime ends
    tokio::spawn(run(
        client.clone(),
        Clock::wall(),
        config,
        futures::future::pending(),
    ));
    Env {
        services: Api::namespaced(client.clone(), &ns),
        clusters: Api::namespaced(client, &ns),
    }
}

/// A sim with KubeRay's RayService and RayCluster CRDs installed and namespace `ns`.
fn ray_sim(ns: &str) -> Sim {
    let crds = raygate_testing::upstream::dir().join("upstream-crds");
    let crd = |f: &str| std::fs::read_to_string(crds.join(f)).unwrap();
    Sim::builder()
        .crds_yaml(&crd("ray.io_rayservices.yaml"))
        .unwrap()
        .crds_yaml(&crd("ray.io_rayclusters.yaml"))
        .unwrap()
        .namespace(ns)
        .build()
}

fn container(name: &str, image: &str, cpu: &str) -> Value {
    json!({"name": name, "image": image, "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}})
}

fn worker_group(name: &str, replicas: i32) -> Value {
    json!({"groupName": name, "replicas": replicas, "minReplicas": 0, "maxReplicas": 4, "rayStartParams": {},
        "template": {"spec": {"containers": [container("ray-worker", "rayproject/ray:2.52.0", "1")]}}})
}

/// A RayService with one worker group; `child_suspend` is `rayClusterConfig.suspend`.
fn rayservice(name: &str, child_suspend: bool) -> Value {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "team-a", "team": "a"},
            "annotations": {"example.com/note": "kept"}},
        "spec": {
            "serveConfigV2": "applications: []\n",
            "rayClusterConfig": {
                "rayVersion": "2.52.0",
                "suspend": child_suspend,
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                    container("ray-head", "rayproject/ray:2.52.0", "1")]}}},
                "workerGroupSpecs": [worker_group("workers", 1)]
            }
        }
    })
}

async fn create(env: &Env, obj: Value) -> RayService {
    let rs: RayService = serde_json::from_value(obj).unwrap();
    env.services
        .create(&PostParams::default(), &rs)
        .await
        .unwrap()
}

async fn get(env: &Env, name: &str) -> RayService {
    env.services.get(name).await.unwrap()
}

fn status(rs: &RayService) -> RayServiceStatus {
    rs.status.clone().unwrap_or_default()
}

fn active(rs: &RayService) -> Option<String> {
    status(rs)
        .active_service_status
        .and_then(|a| a.ray_cluster_name)
        .filter(|n| !n.is_empty())
}

fn pending(rs: &RayService) -> Option<String> {
    status(rs)
        .pending_service_status
        .and_then(|a| a.ray_cluster_name)
        .filter(|n| !n.is_empty())
}

fn condition(rs: &RayService, type_: &str) -> Option<Condition> {
    status(rs).conditions.into_iter().find(|c| c.type_ == type_)
}

/// `(status, reason)` of a condition, for compact assertions.
fn cond(rs: &RayService, type_: &str) -> (String, String) {
    condition(rs, type_)
        .map(|c| (c.status, c.reason))
        .unwrap_or_default()
}

fn is(rs: &RayService, type_: &str, status: &str, reason: &str) -> bool {
    cond(rs, type_) == (status.to_string(), reason.to_string())
}

/// Polls the RayService until `check` returns `Some`.
async fn wait_for<T>(
    env: &Env,
    name: &str,
    what: &str,
    check: impl Fn(&RayService) -> Option<T>,
) -> T {
    eventually(TIMEOUT, what, || async { check(&get(env, name).await) }).await
}

async fn children(env: &Env, service: &str) -> Vec<RayCluster> {
    let selector =
        format!("ray.io/originated-from-cr-name={service},ray.io/originated-from-crd=RayService");
    env.clusters
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
}

/// Merge-patches `spec.rayClusterConfig` after `edit` on its current JSON (arrays are replaced
/// whole, so edits inside worker groups need the full list, which this gives).
async fn edit_config(env: &Env, name: &str, edit: impl FnOnce(&mut Value)) {
    let rs = get(env, name).await;
    let mut config = serde_json::to_value(&rs.spec.ray_cluster_config).unwrap();
    edit(&mut config);
    patch_spec(env, name, json!({"rayClusterConfig": config})).await;
}

async fn patch_spec(env: &Env, name: &str, spec: Value) {
    env.services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap();
}

async fn patch_child_suspend(env: &Env, name: &str, suspend: bool) {
    env.clusters
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": suspend}})),
        )
        .await
        .unwrap();
}

/// Creates an unsuspended RayService and waits until its first child serves.
async fn serving(env: &Env, name: &str, edit: impl FnOnce(&mut Value)) -> (RayService, String) {
    let mut obj = rayservice(name, false);
    edit(&mut obj);
    create(env, obj).await;
    let first = wait_for(env, name, "the first child to be active and Ready", |rs| {
        is(rs, "Ready", "True", "NonZeroServeEndpoints")
            .then(|| active(rs))
            .flatten()
    })
    .await;
    (get(env, name).await, first)
}

fn is_generated_name(service: &str, name: &str) -> bool {
    name.strip_prefix(&format!("{service}-")).is_some_and(|s| {
        s.len() == 5
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_child_is_created_from_the_cluster_config_with_labels_annotations_owner_and_suspend()
{
    let env = setup("first-child").await;
    let created = create(&env, rayservice("svc", true)).await;
    let name = wait_for(&env, "svc", "a pending cluster name", pending).await;
    assert!(is_generated_name("svc", &name), "{name}");
    let child = eventually(TIMEOUT, "the pending child", || async {
        env.clusters.get_opt(&name).await.unwrap()
    })
    .await;

    let labels = child.labels();
    assert_eq!(labels["ray.io/originated-from-cr-name"], "svc");
    assert_eq!(labels["ray.io/originated-from-crd"], "RayService");
    assert_eq!(labels["kueue.x-k8s.io/queue-name"], "team-a");
    assert_eq!(labels["team"], "a");
    let annotations = child.annotations();
    assert_eq!(annotations["example.com/note"], "kept");
    assert_eq!(annotations["ray.io/num-worker-groups"], "1");
    assert_eq!(annotations["ray.io/kuberay-version"], "v1.7.0");
    let rs = get(&env, "svc").await;
    assert_eq!(
        annotations["ray.io/hash-without-replicas-and-workers-to-delete"],
        cluster_spec_hash(&rs.spec.ray_cluster_config, None).unwrap()
    );
    let owners = child.owner_references();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].kind, "RayService");
    assert_eq!(owners[0].api_version, "ray.io/v1");
    assert_eq!(owners[0].name, "svc");
    assert_eq!(Some(&owners[0].uid), created.metadata.uid.as_ref());
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(owners[0].block_owner_deletion, Some(true));
    assert_eq!(child.spec.suspend, Some(true));
    assert_eq!(
        child.spec.head_group_spec.template,
        rs.spec.ray_cluster_config.head_group_spec.template
    );
    assert!(
        rs.finalizers()
            .contains(&"ray.io/rayservice-finalizer".to_string())
    );
    assert!(
        is(&rs, "Ready", "False", "Initializing"),
        "{:?}",
        status(&rs)
    );
    assert!(is(&rs, "UpgradeInProgress", "False", "Initializing"));
    assert_eq!(active(&rs), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_is_copied_onto_the_child_only_at_creation() {
    let env = setup("suspend-once").await;
    create(&env, rayservice("svc", true)).await;
    let name = wait_for(&env, "svc", "a pending cluster name", pending).await;
    eventually(TIMEOUT, "the suspended child", || async {
        env.clusters
            .get_opt(&name)
            .await
            .unwrap()
            .filter(|c| c.spec.suspend == Some(true))
    })
    .await;

    // rayClusterConfig.suspend=false is not copied onto the existing child, nor an upgrade
    edit_config(&env, "svc", |c| c["suspend"] = json!(false)).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        env.clusters.get(&name).await.unwrap().spec.suspend,
        Some(true)
    );
    assert_eq!(pending(&get(&env, "svc").await), Some(name.clone()));
    assert_eq!(children(&env, "svc").await.len(), 1);

    // the child's own suspend is not reverted either way
    patch_child_suspend(&env, &name, false).await;
    edit_config(&env, "svc", |c| c["suspend"] = json!(true)).await;
    wait_for(&env, "svc", "the unsuspended child to be promoted", |rs| {
        (active(rs).as_deref() == Some(name.as_str())).then_some(())
    })
    .await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        env.clusters.get(&name).await.unwrap().spec.suspend,
        Some(false)
    );
    let rs = get(&env, "svc").await;
    assert_eq!(pending(&rs), None);
    assert_eq!(children(&env, "svc").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_toleration_and_strategy_only_changes_prepare_no_pending_cluster() {
    let env = setup("replicas-only").await;
    let (_, first) = serving(&env, "svc", |_| {}).await;
    let hash_before = env.clusters.get(&first).await.unwrap().annotations()
        ["ray.io/hash-without-replicas-and-workers-to-delete"]
        .clone();
    edit_config(&env, "svc", |c| {
        let w = &mut c["workerGroupSpecs"][0];
        w["replicas"] = json!(3);
        w["minReplicas"] = json!(1);
        w["maxReplicas"] = json!(4);
        w["scaleStrategy"] = json!({"workersToDelete": ["some-pod"]});
        w["template"]["spec"]["tolerations"] = json!([{"key": "gpu", "operator": "Exists"}]);
        w["template"]["spec"]["schedulingGates"] = json!([{"name": "example.com/gate"}]);
        c["headGroupSpec"]["template"]["spec"]["tolerations"] =
            json!([{"key": "gpu", "operator": "Exists"}]);
        c["upgradeStrategy"] = json!({"type": "Recreate"});
    })
    .await;
    // and an autoscaler edit of the child
    env.clusters
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerGroupSpecs": [worker_group("workers", 2)]}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(QUIET).await;
    let rs = get(&env, "svc").await;
    assert_eq!(pending(&rs), None);
    assert_eq!(active(&rs), Some(first.clone()));
    assert!(is(&rs, "UpgradeInProgress", "False", "NoPendingCluster"));
    let kids = children(&env, "svc").await;
    assert_eq!(kids.len(), 1);
    assert_eq!(
        kids[0].annotations()["ray.io/hash-without-replicas-and-workers-to-delete"],
        hash_before
    );
    // the child keeps the autoscaler's replicas: replicas are never propagated
    assert_eq!(
        kids[0].spec.worker_group_specs.as_ref().unwrap()[0].replicas,
        Some(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ray_version_change_prepares_a_pending_cluster_and_upgrade_in_progress() {
    let env = setup("upgrade").await;
    let (_, first) = serving(&env, "svc", |_| {}).await;
    edit_config(&env, "svc", |c| {
        c["rayVersion"] = json!("2.53.0");
        // held suspended so the upgrade stays in progress
        c["suspend"] = json!(true);
    })
    .await;
    let second = wait_for(&env, "svc", "a pending cluster during the upgrade", |rs| {
        is(
            rs,
            "UpgradeInProgress",
            "True",
            "BothActivePendingClustersExist",
        )
        .then(|| pending(rs))
        .flatten()
    })
    .await;
    assert_ne!(second, first);
    assert!(is_generated_name("svc", &second));
    let child = eventually(TIMEOUT, "the pending child", || async {
        env.clusters.get_opt(&second).await.unwrap()
    })
    .await;
    assert_eq!(child.spec.ray_version.as_deref(), Some("2.53.0"));
    assert_eq!(child.spec.suspend, Some(true));
    let rs = get(&env, "svc").await;
    assert_eq!(active(&rs), Some(first.clone()));
    // the active cluster keeps serving and is not touched
    assert!(is(&rs, "Ready", "True", "NonZeroServeEndpoints"));
    let old = env.clusters.get(&first).await.unwrap();
    assert_eq!(old.spec.ray_version.as_deref(), Some("2.52.0"));
    assert_ne!(
        old.annotations()["ray.io/hash-without-replicas-and-workers-to-delete"],
        child.annotations()["ray.io/hash-without-replicas-and-workers-to-delete"]
    );
    // the suspended pending cluster's status is reported
    let state = wait_for(&env, "svc", "the pending cluster's status copy", |rs| {
        status(rs)
            .pending_service_status
            .and_then(|p| p.ray_cluster_status)
            .and_then(|s| s.state)
    })
    .await;
    assert_eq!(state, "suspended");

    // a second change while pending replaces the pending cluster; the old pending one dangles
    edit_config(&env, "svc", |c| c["rayVersion"] = json!("2.54.0")).await;
    let third = wait_for(&env, "svc", "a new pending cluster", |rs| {
        pending(rs).filter(|p| *p != second)
    })
    .await;
    let child = eventually(TIMEOUT, "the newer pending child", || async {
        env.clusters.get_opt(&third).await.unwrap()
    })
    .await;
    assert_eq!(child.spec.ray_version.as_deref(), Some("2.54.0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_config_only_change_is_in_place() {
    let env = setup("serve-config").await;
    let (_, first) = serving(&env, "svc", |_| {}).await;
    patch_spec(
        &env,
        "svc",
        json!({"serveConfigV2": "applications:\n- name: a\n  import_path: a:app\n"}),
    )
    .await;
    tokio::time::sleep(QUIET).await;
    let rs = get(&env, "svc").await;
    assert_eq!(pending(&rs), None);
    assert_eq!(active(&rs), Some(first));
    assert_eq!(children(&env, "svc").await.len(), 1);
    assert!(is(&rs, "UpgradeInProgress", "False", "NoPendingCluster"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appended_worker_group_updates_the_child_in_place_keeping_its_suspend() {
    let env = setup("append-group").await;
    let (_, first) = serving(&env, "svc", |_| {}).await;
    let before = env.clusters.get(&first).await.unwrap();
    assert_eq!(before.spec.suspend, Some(false));
    edit_config(&env, "svc", |c| {
        c["workerGroupSpecs"]
            .as_array_mut()
            .unwrap()
            .push(worker_group("extra", 2));
        // differs from the child's: must not reach it
        c["suspend"] = json!(true);
    })
    .await;
    let child = eventually(TIMEOUT, "the child updated in place", || async {
        let c = env.clusters.get(&first).await.unwrap();
        (c.annotations()
            .get("ray.io/num-worker-groups")
            .map(String::as_str)
            == Some("2"))
        .then_some(c)
    })
    .await;
    let groups = child.spec.worker_group_specs.clone().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[1].group_name, "extra");
    assert_eq!(child.spec.suspend, Some(false), "suspend is kept in place");
    let rs = get(&env, "svc").await;
    assert_eq!(
        child.annotations()["ray.io/hash-without-replicas-and-workers-to-delete"],
        cluster_spec_hash(&rs.spec.ray_cluster_config, None).unwrap()
    );
    assert_eq!(child.owner_references().len(), 1);
    tokio::time::sleep(QUIET).await;
    let rs = get(&env, "svc").await;
    assert_eq!(pending(&rs), None);
    assert_eq!(active(&rs), Some(first));
    assert_eq!(children(&env, "svc").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_cluster_is_promoted_only_after_it_is_unsuspended_for_the_start_delay() {
    let env = setup("promotion").await;
    create(&env, rayservice("svc", true)).await;
    let name = wait_for(&env, "svc", "a pending cluster name", pending).await;
    eventually(TIMEOUT, "the pending child", || async {
        env.clusters.get_opt(&name).await.unwrap()
    })
    .await;
    // suspended: never ready, never promoted
    tokio::time::sleep(QUIET).await;
    let rs = get(&env, "svc").await;
    assert_eq!(active(&rs), None);
    assert_eq!(pending(&rs), Some(name.clone()));
    assert!(is(&rs, "Ready", "False", "Initializing"));

    let unsuspended = Instant::now();
    patch_child_suspend(&env, &name, false).await;
    wait_for(&env, "svc", "promotion of the pending cluster", |rs| {
        (active(rs).as_deref() == Some(name.as_str()) && pending(rs).is_none()).then_some(())
    })
    .await;
    assert!(
        unsuspended.elapsed() >= START_DELAY,
        "promoted {:?} after unsuspending",
        unsuspended.elapsed()
    );
    let rs = wait_for(&env, "svc", "Ready", |rs| {
        is(rs, "Ready", "True", "NonZeroServeEndpoints").then(|| rs.clone())
    })
    .await;
    assert!(is(&rs, "UpgradeInProgress", "False", "NoPendingCluster"));
    let s = status(&rs);
    assert_eq!(s.service_status.as_deref(), Some("Running"));
    assert_eq!(s.num_serve_endpoints, Some(2), "head + 1 worker");
    assert_eq!(s.observed_generation, rs.metadata.generation);
    let copy = s
        .active_service_status
        .and_then(|a| a.ray_cluster_status)
        .unwrap();
    assert_eq!(copy.state.as_deref(), Some("ready"));
    assert_eq!(copy.ready_worker_replicas, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_cluster_is_deleted_after_the_deletion_delay() {
    let env = setup("deletion-delay").await;
    let (_, first) = serving(&env, "svc", |rs| {
        rs["spec"]["rayClusterDeletionDelaySeconds"] = json!(1)
    })
    .await;
    edit_config(&env, "svc", |c| c["rayVersion"] = json!("2.53.0")).await;
    let second = wait_for(&env, "svc", "promotion of the upgraded cluster", |rs| {
        active(rs).filter(|a| *a != first)
    })
    .await;
    let rs = get(&env, "svc").await;
    assert_eq!(pending(&rs), None);
    assert!(is(&rs, "UpgradeInProgress", "False", "NoPendingCluster"));
    // not deleted at once: the delay (1 s) runs from when the emulator first sees it dangling
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        env.clusters.get_opt(&first).await.unwrap().is_some(),
        "the old cluster survives the promotion for the deletion delay"
    );
    eventually(TIMEOUT, "deletion of the old cluster", || async {
        env.clusters
            .get_opt(&first)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let kids = children(&env, "svc").await;
    assert_eq!(kids.len(), 1);
    assert_eq!(kids[0].name_any(), second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_suspend_deletes_every_child_and_resume_recreates_from_the_current_spec() {
    let env = setup("top-suspend").await;
    serving(&env, "svc", |_| {}).await;
    // an upgrade in progress: two children
    edit_config(&env, "svc", |c| {
        c["rayVersion"] = json!("2.53.0");
        c["suspend"] = json!(true);
    })
    .await;
    let second = wait_for(&env, "svc", "a pending cluster", pending).await;
    eventually(TIMEOUT, "two children", || async {
        (children(&env, "svc").await.len() == 2).then_some(())
    })
    .await;

    patch_spec(&env, "svc", json!({"suspend": true})).await;
    let rs = wait_for(&env, "svc", "Suspended", |rs| {
        is(rs, "Suspended", "True", "SuspendComplete").then(|| rs.clone())
    })
    .await;
    assert!(is(&rs, "Suspending", "False", "SuspendComplete"));
    assert!(is(&rs, "Ready", "False", "SuspendComplete"));
    assert!(is(&rs, "UpgradeInProgress", "False", "SuspendComplete"));
    assert_eq!(active(&rs), None);
    assert_eq!(pending(&rs), None);
    assert!(children(&env, "svc").await.is_empty());
    assert!(env.clusters.get_opt(&second).await.unwrap().is_none());

    // while suspended nothing is created, whatever the spec says
    edit_config(&env, "svc", |c| {
        c["rayVersion"] = json!("2.54.0");
        c["suspend"] = json!(false);
    })
    .await;
    tokio::time::sleep(QUIET).await;
    assert!(children(&env, "svc").await.is_empty());

    patch_spec(&env, "svc", json!({"suspend": false})).await;
    let rs = wait_for(&env, "svc", "resumed and serving again", |rs| {
        is(rs, "Ready", "True", "NonZeroServeEndpoints").then(|| rs.clone())
    })
    .await;
    assert!(is(&rs, "Suspended", "False", "RayServiceResumed"));
    let kids = children(&env, "svc").await;
    assert_eq!(kids.len(), 1);
    assert_eq!(kids[0].spec.ray_version.as_deref(), Some("2.54.0"));
    assert_eq!(active(&rs), Some(kids[0].name_any()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raycluster_status_reports_suspended_then_ready_with_desired_replicas_and_resources() {
    let env = setup("cluster-status").await;
    let rc: RayCluster = serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "standalone"},
        "spec": {
            "suspend": true,
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                {"name": "ray-head", "image": "rayproject/ray:2.52.0",
                 "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}}]}}},
            "workerGroupSpecs": [{
                "groupName": "gpu", "replicas": 3, "minReplicas": 1, "maxReplicas": 4, "numOfHosts": 2, "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0",
                    "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}}
            }]
        }
    }))
    .unwrap();
    env.clusters
        .create(&PostParams::default(), &rc)
        .await
        .unwrap();
    let cond = |c: &RayCluster, t: &str| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|x| x.type_ == t))
            .map(|x| x.status.clone())
            .unwrap_or_default()
    };
    let s = eventually(TIMEOUT, "state=suspended", || async {
        let c = env.clusters.get("standalone").await.unwrap();
        (c.status.as_ref().and_then(|s| s.state.as_deref()) == Some("suspended")
            && cond(&c, "RayClusterSuspended") == "True")
            .then_some(c)
    })
    .await;
    assert_eq!(cond(&s, "HeadPodReady"), "False");
    let st = s.status.clone().unwrap();
    assert_eq!(st.ready_worker_replicas, Some(0));
    // 3 replicas × 2 hosts, computed while suspended
    assert_eq!(st.desired_worker_replicas, Some(6));
    assert_eq!(st.min_worker_replicas, Some(2));
    assert_eq!(st.max_worker_replicas, Some(8));
    // head 1 + 6 × 500m = 4 CPUs; 2Gi + 6 × 1Gi (limits stand in) = 8Gi; 6 GPUs
    assert_eq!(st.desired_cpu.as_ref().map(|q| q.0.as_str()), Some("4"));
    assert_eq!(
        st.desired_memory.as_ref().map(|q| q.0.as_str()),
        Some("8Gi")
    );
    assert_eq!(st.desired_gpu.as_ref().map(|q| q.0.as_str()), Some("6"));
    assert_eq!(st.desired_tpu.as_ref().map(|q| q.0.as_str()), Some("0"));
    assert_eq!(st.observed_generation, s.metadata.generation);

    let unsuspended = Instant::now();
    patch_child_suspend(&env, "standalone", false).await;
    let c = eventually(TIMEOUT, "state=ready", || async {
        let c = env.clusters.get("standalone").await.unwrap();
        (c.status.as_ref().and_then(|s| s.state.as_deref()) == Some("ready")).then_some(c)
    })
    .await;
    assert!(unsuspended.elapsed() >= START_DELAY);
    let st = c.status.clone().unwrap();
    assert_eq!(st.ready_worker_replicas, Some(6));
    assert_eq!(st.available_worker_replicas, Some(6));
    assert_eq!(st.desired_worker_replicas, Some(6));
    assert_eq!(cond(&c, "HeadPodReady"), "True");
    assert_eq!(cond(&c, "RayClusterProvisioned"), "True");
    assert_eq!(cond(&c, "RayClusterSuspended"), "False");
    assert_eq!(cond(&c, "RayClusterSuspending"), "False");

    // suspending again: Suspending first, then suspended with no ready workers
    patch_child_suspend(&env, "standalone", true).await;
    let c = eventually(TIMEOUT, "suspended again", || async {
        let c = env.clusters.get("standalone").await.unwrap();
        (c.status.as_ref().and_then(|s| s.state.as_deref()) == Some("suspended")).then_some(c)
    })
    .await;
    let st = c.status.clone().unwrap();
    assert_eq!(st.ready_worker_replicas, Some(0));
    assert_eq!(cond(&c, "RayClusterSuspended"), "True");
    assert_eq!(cond(&c, "RayClusterProvisioned"), "False");
    assert_eq!(cond(&c, "HeadPodReady"), "False");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_strategy_none_never_prepares_a_new_cluster() {
    let env = setup("strategy-none").await;
    let (_, first) = serving(&env, "svc", |rs| {
        rs["spec"]["upgradeStrategy"] = json!({"type": "None"})
    })
    .await;
    edit_config(&env, "svc", |c| c["rayVersion"] = json!("2.53.0")).await;
    tokio::time::sleep(QUIET).await;
    let rs = get(&env, "svc").await;
    assert_eq!(pending(&rs), None);
    assert_eq!(active(&rs), Some(first));
    assert_eq!(children(&env, "svc").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayservice_managed_by_another_controller_is_skipped() {
    let env = setup("managed-by").await;
    let mut obj = rayservice("svc", false);
    obj["spec"]["managedBy"] = json!("kueue.x-k8s.io/multikueue");
    create(&env, obj).await;
    tokio::time::sleep(QUIET).await;
    let rs = get(&env, "svc").await;
    assert_eq!(rs.status, None);
    assert!(rs.finalizers().is_empty());
    assert!(children(&env, "svc").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_rayservice_deletes_its_children_then_the_finalizer() {
    let env = setup("delete-service").await;
    let (_, first) = serving(&env, "svc", |_| {}).await;
    env.services
        .delete("svc", &DeleteParams::default())
        .await
        .unwrap();
    eventually(TIMEOUT, "the RayService and its child gone", || async {
        let rs = env.services.get_opt("svc").await.unwrap();
        let child = env.clusters.get_opt(&first).await.unwrap();
        (rs.is_none() && child.is_none()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_child_replaced_by_a_second_change_is_deleted_after_the_deletion_delay() {
    let env = setup("replaced-pending").await;
    let (_, first) = serving(&env, "svc", |rs| {
        rs["spec"]["rayClusterDeletionDelaySeconds"] = json!(1)
    })
    .await;
    // a held (suspended) pending child never becomes ready, so it is never promoted
    edit_config(&env, "svc", |c| {
        c["rayVersion"] = json!("2.53.0");
        c["suspend"] = json!(true);
    })
    .await;
    let p1 = wait_for(&env, "svc", "a first pending child", pending).await;
    eventually(TIMEOUT, "the first pending child to be created", || async {
        env.clusters.get_opt(&p1).await.unwrap().map(|_| ())
    })
    .await;
    edit_config(&env, "svc", |c| c["rayVersion"] = json!("2.54.0")).await;
    let p2 = wait_for(&env, "svc", "a second pending child", |rs| {
        pending(rs).filter(|p| *p != p1)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        env.clusters.get_opt(&p1).await.unwrap().is_some(),
        "the replaced pending child is kept for the deletion delay"
    );
    eventually(
        TIMEOUT,
        "deletion of the replaced pending child",
        || async {
            env.clusters
                .get_opt(&p1)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    let mut kids: Vec<String> = children(&env, "svc")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    kids.sort();
    let mut want = vec![first.clone(), p2.clone()];
    want.sort();
    assert_eq!(kids, want);
    assert_eq!(active(&get(&env, "svc").await), Some(first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initializing_timeout_fails_the_rayservice_for_good_and_deletes_its_children() {
    let env = setup("initializing-timeout").await;
    let mut obj = rayservice("svc", true);
    obj["metadata"]["annotations"]["ray.io/initializing-timeout"] = json!("3s");
    obj["spec"]["rayClusterDeletionDelaySeconds"] = json!(1);
    create(&env, obj).await;
    let held = wait_for(&env, "svc", "the first (held) child", pending).await;
    let rs = get(&env, "svc").await;
    assert!(is(&rs, "Ready", "False", "Initializing"));
    let failed = wait_for(&env, "svc", "Ready=False/InitializingTimeout", |rs| {
        is(rs, "Ready", "False", "InitializingTimeout").then(|| rs.clone())
    })
    .await;
    let since = condition(&failed, "Ready").unwrap().last_transition_time.0;
    let created = rs.metadata.creation_timestamp.clone().unwrap().0;
    assert!(
        since.duration_since(created).as_secs() <= 1,
        "lastTransitionTime stays the Initializing one"
    );
    assert_eq!((active(&failed), pending(&failed)), (None, None));
    eventually(TIMEOUT, "deletion of the held child", || async {
        env.clusters
            .get_opt(&held)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // terminal: unsuspending the template creates nothing
    edit_config(&env, "svc", |c| c["suspend"] = json!(false)).await;
    tokio::time::sleep(QUIET).await;
    assert!(children(&env, "svc").await.is_empty());
    assert!(is(
        &get(&env, "svc").await,
        "Ready",
        "False",
        "InitializingTimeout"
    ));
}

/// The emulator as an actor of the sim, on its virtual clock: ten minutes of emulated pod start
/// pass in a moment of wall time, and every time it writes is cluster time (the sim's epoch,
/// 2026-01-01T00:00:00Z), never the machine's.
#[tokio::test(start_paused = true)]
async fn on_the_sims_virtual_clock_pods_start_in_cluster_time_and_every_stamp_is_cluster_time() {
    let sim = ray_sim("serving");
    let client = sim.client();
    let start_delay = Duration::from_secs(600);
    let config = EmulatorConfig {
        start_delay,
        namespace: Some("serving".into()),
        ..Default::default()
    };
    tokio::spawn(run(
        client.clone(),
        sim.clock().clone(),
        config,
        futures::future::pending(),
    ));
    let env = Env {
        services: Api::namespaced(client.clone(), "serving"),
        clusters: Api::namespaced(client, "serving"),
    };
    let (wall, created) = (Instant::now(), sim.clock().now());
    create(&env, rayservice("svc", false)).await;

    // poll once a second of cluster time (every 20 ms would be 30,000 polls for 10 minutes)
    let rs = loop {
        let rs = get(&env, "svc").await;
        if is(&rs, "Ready", "True", "NonZeroServeEndpoints") {
            break rs;
        }
        let waited = sim.clock().now().duration_since(created);
        assert!(
            waited < SignedDuration::from_secs(3600),
            "not ready after {waited:?}: {:?}",
            status(&rs)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let child = active(&rs).unwrap();
    let ready = condition(&rs, "Ready").unwrap().last_transition_time.0;
    let served_after = ready.duration_since(created);
    assert!(
        served_after >= SignedDuration::try_from(start_delay).unwrap()
            && served_after < SignedDuration::from_secs(660),
        "Ready {served_after:?} of cluster time after the RayService was created"
    );
    assert!(
        wall.elapsed() < TIMEOUT,
        "10 min of cluster time took {:?} of wall time",
        wall.elapsed()
    );

    let epoch = Timestamp::from_second(raygate_sim::clock::DEFAULT_EPOCH_SECONDS).unwrap();
    let on_the_sim_clock = |what: &str, t: Timestamp| {
        assert!(
            t >= epoch && t <= sim.clock().now(),
            "{what} {t} is not on the sim's clock ({epoch} .. {})",
            sim.clock().now()
        );
    };
    let last_update = |other: &std::collections::BTreeMap<String, Value>| -> Timestamp {
        other["lastUpdateTime"].as_str().unwrap().parse().unwrap()
    };
    let s = status(&rs);
    on_the_sim_clock("RayService lastUpdateTime", last_update(&s.other));
    for c in &s.conditions {
        on_the_sim_clock(&c.type_, c.last_transition_time.0);
    }
    let c = env.clusters.get(&child).await.unwrap();
    let cs = c.status.unwrap();
    assert_eq!(cs.state.as_deref(), Some("ready"));
    on_the_sim_clock("RayCluster lastUpdateTime", last_update(&cs.other));
    for c in &cs.conditions {
        on_the_sim_clock(&c.type_, c.last_transition_time.0);
    }
    let ready_since = cs.other["stateTransitionTimes"]["ready"].as_str().unwrap();
    on_the_sim_clock("stateTransitionTimes.ready", ready_since.parse().unwrap());
}

/// The emulator with real pods (`EmulatorConfig::pods`), on the sim with its scheduler, a kubelet
/// per node (containers stop only at the end of their grace period) and the garbage collector,
/// all on the paused clock.
mod with_pods {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::ApiResource;
    use raygate_sim::world::actors::{garbage_collector, kubelet};
    use raygate_sim::world::kuberay::pods::{
        CLUSTER_LABEL, GROUP_LABEL, HOST_INDEX_LABEL, NODE_TYPE_LABEL, REPLICA_INDEX_LABEL,
        REPLICA_NAME_LABEL,
    };
    use raygate_sim::world::{Running, World};
    use std::collections::BTreeSet;

    const NS: &str = "serving";
    /// Virtual time allowed for a condition.
    const WAIT: Duration = Duration::from_secs(1800);
    const GRACE: i64 = 45;

    struct PodEnv {
        sim: Sim,
        clusters: Api<RayCluster>,
        services: Api<RayService>,
        pods: Api<Pod>,
        _world: Running,
    }

    async fn setup() -> PodEnv {
        let sim = super::ray_sim(NS);
        let client = sim.client();
        let nodes: Api<Node> = Api::all(client.clone());
        for i in 0..4 {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": format!("node-{i}"), "labels": {"kubernetes.io/hostname": format!("node-{i}")}},
                "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap();
            nodes.create(&PostParams::default(), &node).await.unwrap();
        }
        let kubelets = kubelet::Config {
            stop_after: None,
            ..Default::default()
        };
        let world = World::on(&sim)
            .scheduler(Default::default())
            .kubelets(kubelets)
            .garbage_collector(
                garbage_collector::Config::default()
                    .cover(ApiResource::erase::<RayCluster>(&()))
                    .cover(ApiResource::erase::<RayService>(&())),
            )
            .kuberay(EmulatorConfig {
                namespace: Some(NS.into()),
                pods: true,
                ..Default::default()
            })
            .start();
        PodEnv {
            clusters: Api::namespaced(client.clone(), NS),
            services: Api::namespaced(client.clone(), NS),
            pods: Api::namespaced(client, NS),
            sim,
            _world: world,
        }
    }

    async fn eventually<T, F, Fut>(what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        raygate_sim::world::fixtures::eventually_within(WAIT, Duration::from_secs(1), what, check)
            .await
    }

    fn group(name: &str, replicas: i32, hosts: i32) -> Value {
        json!({"groupName": name, "replicas": replicas, "minReplicas": 0, "maxReplicas": 8,
            "numOfHosts": hosts, "rayStartParams": {},
            "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {
                "terminationGracePeriodSeconds": GRACE,
                "containers": [container("ray-worker", "rayproject/ray:2.52.0", "1")]}}})
    }

    fn raycluster(name: &str, groups: Value, suspend: bool) -> RayCluster {
        serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"rayVersion": "2.52.0", "suspend": suspend,
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                    "terminationGracePeriodSeconds": GRACE,
                    "containers": [container("ray-head", "rayproject/ray:2.52.0", "1")]}}},
                "workerGroupSpecs": groups}
        }))
        .unwrap()
    }

    async fn pods_of(env: &PodEnv, cluster: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("{CLUSTER_LABEL}={cluster}"));
        env.pods.list(&lp).await.unwrap().items
    }

    fn lbl<'a>(p: &'a Pod, k: &str) -> &'a str {
        p.labels().get(k).map(String::as_str).unwrap_or("")
    }

    fn is_ready(p: &Pod) -> bool {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }

    async fn cluster_state(env: &PodEnv, name: &str) -> (Option<String>, i32) {
        let s = env
            .clusters
            .get(name)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        (s.state, s.ready_worker_replicas.unwrap_or(0))
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_gets_kuberay_s_pods_and_its_status_follows_their_readiness() {
        let env = setup().await;
        let rc = raycluster("rc", json!([group("tpu", 2, 2), group("cpu", 1, 1)]), false);
        let rc = env
            .clusters
            .create(&PostParams::default(), &rc)
            .await
            .unwrap();
        let ready = eventually("the cluster ready", || async {
            let (state, workers) = cluster_state(&env, "rc").await;
            (state.as_deref() == Some("ready")).then_some(workers)
        })
        .await;
        assert_eq!(ready, 5, "2 replicas × 2 hosts + 1");
        let pods = pods_of(&env, "rc").await;
        assert_eq!(pods.len(), 6);
        assert!(pods.iter().all(is_ready));
        let head: Vec<&Pod> = pods
            .iter()
            .filter(|p| lbl(p, NODE_TYPE_LABEL) == "head")
            .collect();
        assert_eq!(head.len(), 1);
        assert!(
            head[0].name_any().starts_with("rc-head-"),
            "{}",
            head[0].name_any()
        );
        assert_eq!(lbl(head[0], GROUP_LABEL), "headgroup");
        for p in &pods {
            let o = &p.owner_references()[0];
            assert_eq!(
                (o.kind.as_str(), o.uid.as_str(), o.controller),
                ("RayCluster", rc.uid().unwrap().as_str(), Some(true))
            );
            assert!(p.spec.as_ref().unwrap().node_name.is_some(), "scheduled");
        }
        let tpu: Vec<&Pod> = pods
            .iter()
            .filter(|p| lbl(p, GROUP_LABEL) == "tpu")
            .collect();
        assert!(
            tpu.iter()
                .all(|p| p.name_any().starts_with("rc-tpu-worker-"))
        );
        let replicas: BTreeSet<(&str, &str)> = tpu
            .iter()
            .map(|p| (lbl(p, REPLICA_NAME_LABEL), lbl(p, REPLICA_INDEX_LABEL)))
            .collect();
        assert_eq!(replicas.len(), 2);
        assert_eq!(
            replicas.iter().map(|r| r.1).collect::<BTreeSet<_>>(),
            BTreeSet::from(["0", "1"])
        );
        let hosts: BTreeSet<&str> = tpu.iter().map(|p| lbl(p, HOST_INDEX_LABEL)).collect();
        assert_eq!(hosts, BTreeSet::from(["0", "1"]));
        let s = env.clusters.get("rc").await.unwrap().status.unwrap();
        assert_eq!(s.available_worker_replicas, Some(5));
        assert!(
            s.conditions
                .iter()
                .any(|c| c.type_ == "HeadPodReady" && c.status == "True")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_suspended_cluster_has_no_pods_and_suspending_waits_out_the_grace_period() {
        let env = setup().await;
        let rc = raycluster("rc", json!([group("cpu", 2, 1)]), true);
        env.clusters
            .create(&PostParams::default(), &rc)
            .await
            .unwrap();
        eventually("suspended", || async {
            (cluster_state(&env, "rc").await.0.as_deref() == Some("suspended")).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            pods_of(&env, "rc").await.is_empty(),
            "a suspended cluster has no pods"
        );

        let patch = |suspend: bool| json!({"spec": {"suspend": suspend}});
        env.clusters
            .patch("rc", &PatchParams::default(), &Patch::Merge(&patch(false)))
            .await
            .unwrap();
        eventually("ready", || async {
            (cluster_state(&env, "rc").await.0.as_deref() == Some("ready")).then_some(())
        })
        .await;
        env.clusters
            .patch("rc", &PatchParams::default(), &Patch::Merge(&patch(true)))
            .await
            .unwrap();
        let asked = env.sim.clock().now();
        eventually("pods terminating", || async {
            let pods = pods_of(&env, "rc").await;
            pods.iter()
                .all(|p| p.metadata.deletion_timestamp.is_some())
                .then_some(())
        })
        .await;
        eventually("suspended again", || async {
            (cluster_state(&env, "rc").await.0.as_deref() == Some("suspended")).then_some(())
        })
        .await;
        let took = env.sim.clock().now().duration_since(asked);
        assert!(
            took >= SignedDuration::from_secs(GRACE),
            "suspended {took:?} after the suspend: before the pods' {GRACE} s grace period ended"
        );
        assert!(pods_of(&env, "rc").await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_deleted_in_the_background_leaves_its_pods_for_their_grace_period() {
        let env = setup().await;
        let rc = raycluster("rc", json!([group("cpu", 2, 1)]), false);
        env.clusters
            .create(&PostParams::default(), &rc)
            .await
            .unwrap();
        eventually("ready", || async {
            (cluster_state(&env, "rc").await.0.as_deref() == Some("ready")).then_some(())
        })
        .await;
        env.clusters
            .delete("rc", &DeleteParams::background())
            .await
            .unwrap();
        let deleted = env.sim.clock().now();
        eventually("the cluster gone", || async {
            env.clusters
                .get_opt("rc")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
        eventually("pods terminating", || async {
            let pods = pods_of(&env, "rc").await;
            (!pods.is_empty() && pods.iter().all(|p| p.metadata.deletion_timestamp.is_some()))
                .then_some(())
        })
        .await;
        let lingered = eventually("pods gone", || async {
            pods_of(&env, "rc")
                .await
                .is_empty()
                .then(|| env.sim.clock().now().duration_since(deleted))
        })
        .await;
        assert!(
            lingered >= SignedDuration::from_secs(GRACE),
            "pods gone {lingered:?} after the cluster: sooner than their grace period"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_autoscaler_s_workers_to_delete_removes_exactly_the_named_replica() {
        let env = setup().await;
        let mut rc = raycluster("rc", json!([group("tpu", 3, 2)]), false);
        rc.spec.enable_in_tree_autoscaling = Some(true);
        env.clusters
            .create(&PostParams::default(), &rc)
            .await
            .unwrap();
        eventually("ready", || async {
            (cluster_state(&env, "rc").await.0.as_deref() == Some("ready")).then_some(())
        })
        .await;
        let pods = pods_of(&env, "rc").await;
        let victim = pods
            .iter()
            .find(|p| lbl(p, REPLICA_INDEX_LABEL) == "1" && lbl(p, HOST_INDEX_LABEL) == "1")
            .unwrap();
        let replica = lbl(victim, REPLICA_NAME_LABEL).to_string();
        // what the autoscaler writes: fewer replicas and the pod to remove
        let patch = json!({"spec": {"workerGroupSpecs": [{"groupName": "tpu", "replicas": 2,
            "minReplicas": 0, "maxReplicas": 8, "numOfHosts": 2, "rayStartParams": {},
            "scaleStrategy": {"workersToDelete": [victim.name_any()]},
            "template": group("tpu", 2, 2)["template"].clone()}]}});
        env.clusters
            .patch("rc", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let left = eventually("the replica gone", || async {
            let pods = pods_of(&env, "rc").await;
            let live: Vec<Pod> = pods
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            (live.len() == 5).then_some(live)
        })
        .await;
        assert!(left.iter().all(|p| lbl(p, REPLICA_NAME_LABEL) != replica));
        let indexes: BTreeSet<&str> = left
            .iter()
            .filter(|p| lbl(p, NODE_TYPE_LABEL) == "worker")
            .map(|p| lbl(p, REPLICA_INDEX_LABEL))
            .collect();
        assert_eq!(indexes, BTreeSet::from(["0", "2"]));
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(pods_of(&env, "rc").await.len(), 5, "nothing recreated");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rayservice_child_s_gated_pods_stay_pending_and_the_service_waits() {
        let env = setup().await;
        let mut rs = rayservice("svc", false);
        rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["schedulingGates"] =
            json!([{"name": "raygate.io/quota"}]);
        let rs: RayService = serde_json::from_value(rs).unwrap();
        env.services
            .create(&PostParams::default(), &rs)
            .await
            .unwrap();
        let child = eventually("a child with pods", || async {
            let cs = env
                .clusters
                .list(&ListParams::default())
                .await
                .unwrap()
                .items;
            let c = cs.first()?.name_any();
            (pods_of(&env, &c).await.len() == 2).then_some(c)
        })
        .await;
        tokio::time::sleep(Duration::from_secs(120)).await;
        let pods = pods_of(&env, &child).await;
        let worker = pods
            .iter()
            .find(|p| lbl(p, NODE_TYPE_LABEL) == "worker")
            .unwrap();
        assert!(
            worker.spec.as_ref().unwrap().node_name.is_none(),
            "gated: not scheduled"
        );
        assert_eq!(lbl(worker, "ray.io/serve"), "true");
        let (state, workers) = cluster_state(&env, &child).await;
        assert_ne!(state.as_deref(), Some("ready"));
        assert_eq!(workers, 0);
        // the gate lifted: the cluster becomes ready and the service serves
        let patch = json!({"spec": {"schedulingGates": null}});
        env.pods
            .patch(
                &worker.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .unwrap();
        eventually("the service ready", || async {
            let rs = env.services.get("svc").await.unwrap();
            is(&rs, "Ready", "True", "NonZeroServeEndpoints").then_some(())
        })
        .await;
    }
}

/// `NewClusterWithIncrementalUpgrade` with real pods and the emulated Ray autoscaler, on the sim's
/// paused clock: KubeRay v1.7.0's `constructRayClusterForRayService` (pending child without
/// `replicas`), `reconcileServeTargetCapacity` / `checkIfNeedTargetCapacityUpdate` (capacities
/// step by `maxSurgePercent`), `calculateTrafficRoutedPercent` (traffic steps by `stepSizePercent`
/// every `intervalSeconds`), `IsIncrementalUpgradeComplete` (promotion).
mod incremental {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::ApiResource;
    use raygate_sim::world::actors::garbage_collector;
    use raygate_sim::world::kuberay::AutoscalerConfig;
    use raygate_sim::world::kuberay::pods::{CLUSTER_LABEL, NODE_TYPE_LABEL};
    use raygate_sim::world::{Running, World};

    const NS: &str = "serving";
    const WAIT: Duration = Duration::from_secs(1800);

    struct IncEnv {
        _sim: Sim,
        services: Api<RayService>,
        clusters: Api<RayCluster>,
        pods: Api<Pod>,
        _world: Running,
    }

    async fn setup(autoscaler: AutoscalerConfig) -> IncEnv {
        let sim = super::ray_sim(NS);
        let client = sim.client();
        let nodes: Api<Node> = Api::all(client.clone());
        for i in 0..2 {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": format!("node-{i}")},
                "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap();
            nodes.create(&PostParams::default(), &node).await.unwrap();
        }
        let world = World::on(&sim)
            .scheduler(Default::default())
            .kubelets(Default::default())
            .garbage_collector(
                garbage_collector::Config::default()
                    .cover(ApiResource::erase::<RayCluster>(&()))
                    .cover(ApiResource::erase::<RayService>(&())),
            )
            .kuberay(EmulatorConfig {
                namespace: Some(NS.into()),
                pods: true,
                autoscaler: Some(autoscaler),
                ..Default::default()
            })
            .start();
        IncEnv {
            services: Api::namespaced(client.clone(), NS),
            clusters: Api::namespaced(client.clone(), NS),
            pods: Api::namespaced(client, NS),
            _sim: sim,
            _world: world,
        }
    }

    fn service(image: &str) -> Value {
        let pod = json!({"spec": {"terminationGracePeriodSeconds": 5,
            "containers": [container("ray", image, "1")]}});
        json!({
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "namespace": NS},
            "spec": {
                "serveConfigV2": "applications: []\n",
                "rayClusterDeletionDelaySeconds": 5,
                "upgradeStrategy": {"type": "NewClusterWithIncrementalUpgrade",
                    "clusterUpgradeOptions": {"gatewayClassName": "istio", "maxSurgePercent": 50,
                        "stepSizePercent": 25, "intervalSeconds": 10}},
                "rayClusterConfig": {"rayVersion": "2.52.0", "enableInTreeAutoscaling": true,
                    "headGroupSpec": {"rayStartParams": {}, "template": pod.clone()},
                    "workerGroupSpecs": [{"groupName": "w", "replicas": 4, "minReplicas": 0,
                        "maxReplicas": 8, "rayStartParams": {}, "template": pod}]}
            }
        })
    }

    /// A side's `targetCapacity` and `trafficRoutedPercent` (-1: unset).
    fn numbers(rs: &RayService, pending: bool) -> (i64, i64) {
        let s = status(rs);
        let slot = if pending {
            s.pending_service_status
        } else {
            s.active_service_status
        };
        let get = |k: &str| {
            slot.as_ref()
                .and_then(|s| s.other.get(k))
                .and_then(Value::as_i64)
                .unwrap_or(-1)
        };
        (get("targetCapacity"), get("trafficRoutedPercent"))
    }

    /// Live (not terminating) worker pods of a cluster.
    async fn workers(env: &IncEnv, cluster: &str) -> usize {
        let lp = ListParams::default().labels(&format!(
            "{CLUSTER_LABEL}={cluster},{NODE_TYPE_LABEL}=worker"
        ));
        env.pods
            .list(&lp)
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count()
    }

    async fn eventually<T, F, Fut>(what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        raygate_sim::world::fixtures::eventually_within(WAIT, Duration::from_secs(1), what, check)
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn an_incremental_upgrade_grows_the_pending_child_by_autoscaler_steps_and_moves_traffic_by_steps()
     {
        let env = setup(AutoscalerConfig {
            step: 1,
            period: Duration::from_secs(5),
        })
        .await;
        let rs: RayService = serde_json::from_value(service("rayproject/ray:2.52.0")).unwrap();
        env.services
            .create(&PostParams::default(), &rs)
            .await
            .unwrap();
        let old = eventually("the first cluster serves with 4 workers", || async {
            let rs = env.services.get("svc").await.unwrap();
            let a = active(&rs)?;
            (is(&rs, "Ready", "True", "NonZeroServeEndpoints")
                && workers(&env, &a).await == 4
                && numbers(&rs, false) == (100, 100))
                .then_some(a)
        })
        .await;

        // an image change: an incremental upgrade
        let patch = json!({"spec": {"rayClusterConfig": service("rayproject/ray:2.53.0")["spec"]["rayClusterConfig"]}});
        env.services
            .patch("svc", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let new = eventually("the pending child created", || async {
            let rs = env.services.get("svc").await.unwrap();
            let p = pending(&rs)?;
            env.clusters.get_opt(&p).await.unwrap().map(|_| p)
        })
        .await;
        let child = env.clusters.get(&new).await.unwrap();
        let g = &child.spec.worker_group_specs.as_ref().unwrap()[0];
        // KubeRay sends no replicas; the CRD's default makes it 0
        assert_eq!(
            g.replicas,
            Some(0),
            "the pending child starts without replicas"
        );
        assert_eq!(numbers(&env.services.get("svc").await.unwrap(), true).0, 0);

        // watch the upgrade once a second until promotion
        let mut capacities: Vec<(i64, i64)> = Vec::new();
        let mut traffic: Vec<i64> = Vec::new();
        let mut pending_workers: Vec<usize> = Vec::new();
        let mut active_workers: Vec<usize> = Vec::new();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let rs = env.services.get("svc").await.unwrap();
            if active(&rs).as_deref() == Some(new.as_str()) {
                assert_eq!(pending(&rs), None);
                assert_eq!(
                    numbers(&rs, false),
                    (100, 100),
                    "the promoted side's numbers"
                );
                break;
            }
            let ((atc, _), (ptc, ptraffic)) = (numbers(&rs, false), numbers(&rs, true));
            if ptc >= 0 && capacities.last() != Some(&(atc, ptc)) {
                capacities.push((atc, ptc));
            }
            if ptraffic >= 0 && traffic.last() != Some(&ptraffic) {
                traffic.push(ptraffic);
            }
            for (name, seen) in [(&new, &mut pending_workers), (&old, &mut active_workers)] {
                let n = workers(&env, name).await;
                if seen.last() != Some(&n) {
                    seen.push(n);
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "no promotion");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        // the active side's last step to 0 and the promotion land in one status write
        assert_eq!(
            capacities,
            vec![(100, 0), (100, 50), (50, 50), (50, 100)],
            "target capacities step by maxSurgePercent"
        );
        // 100 % and the active side's last capacity step follow within one pass: the traffic
        // at 100 shows on the promoted side
        assert_eq!(
            traffic,
            vec![0, 25, 50, 75],
            "traffic steps by stepSizePercent"
        );
        assert_eq!(
            pending_workers,
            vec![0, 1, 2, 3, 4],
            "the autoscaler grows the pending child one worker at a time"
        );
        // the active one shrinks to its 50 % capacity; its step to 0 promotes the pending child
        // in the same pass, and the old child goes whole after the deletion delay
        assert_eq!(active_workers, vec![4, 3, 2], "and shrinks the active one");
        let rs = env.services.get("svc").await.unwrap();
        let promoted = &status(&rs).active_service_status.unwrap().other;
        assert!(promoted.contains_key("lastTrafficMigratedTime"));
        eventually("the old child deleted after the deletion delay", || async {
            env.clusters
                .get_opt(&old)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
        assert_eq!(workers(&env, &new).await, 4);
    }
}

/// How raygate can move a RayService to new nodes without changing what its user declared
/// (issue #32): KubeRay v1.7.0 compares the RayService's spec hash with the active child's
/// `ray.io/hash-without-replicas-and-workers-to-delete` annotation (`shouldPrepareNewCluster`,
/// `isClusterSpecHashEqual` in `rayservice_controller.go`), and `shouldUpdateCluster` leaves an
/// active cluster alone unless its KubeRay version changed. So a child whose annotation no
/// longer matches makes KubeRay prepare a new cluster from the unchanged spec, switch traffic
/// once it is Ready and delete the old one: a zero-downtime upgrade to the same spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_hash_on_the_active_child_moves_the_service_to_a_new_cluster_with_the_same_spec() {
    let env = setup("move").await;
    let (rs, first) = serving(&env, "svc", |o| {
        o["spec"]["rayClusterDeletionDelaySeconds"] = json!(0);
    })
    .await;
    let generation = rs.metadata.generation;
    let old = env.clusters.get(&first).await.unwrap();
    let hash_key = "ray.io/hash-without-replicas-and-workers-to-delete";
    let hash = old.annotations()[hash_key].clone();
    env.clusters
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {hash_key: "moved-by-raygate"}}})),
        )
        .await
        .unwrap();
    let second = wait_for(&env, "svc", "a new active cluster", |rs| {
        active(rs).filter(|a| *a != first)
    })
    .await;
    let new = env.clusters.get(&second).await.unwrap();
    assert_eq!(new.annotations()[hash_key], hash, "the same spec");
    assert_eq!(new.spec.ray_version, old.spec.ray_version);
    eventually(TIMEOUT, "the old cluster deleted", || async {
        env.clusters
            .get_opt(&first)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let rs = get(&env, "svc").await;
    assert!(is(&rs, "Ready", "True", "NonZeroServeEndpoints"));
    assert_eq!(
        rs.metadata.generation, generation,
        "the user's spec untouched"
    );
}
