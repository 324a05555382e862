//! KubeRay v1.7.0's deletion of a RayCluster with GCS fault tolerance, on the simulated cluster
//! with real pods (scheduler, kubelets, the Job controller, the garbage collector and the KubeRay
//! emulator, on the paused clock): the Redis cleanup finalizer, the pods deleted, the head waited
//! for, the `<cluster>-redis-cleanup` Job, the finalizer removed once the Job finished or the
//! deletion timeout passed. Also the batch/v1 Jobs the sim serves.

use std::cell::Cell;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use raygate::types::ray::RayCluster;
use raygate_sim::Sim;
use raygate_sim::world::actors::{garbage_collector, kubelet};
use raygate_sim::world::kuberay::EmulatorConfig;
use raygate_sim::world::kuberay::pods::{CLUSTER_LABEL, NODE_TYPE_LABEL};
use raygate_sim::world::kuberay::redis_cleanup::{DELETION_TIMEOUT_ANNOTATION, FINALIZER};
use raygate_sim::world::{Running, World};
use serde_json::{Value, json};

const NS: &str = "serving";
/// Virtual time allowed for a condition.
const WAIT: Duration = Duration::from_secs(1800);
/// The Ray pods' grace period: the head stays `Terminating` this long.
const GRACE: i64 = 30;
const POLL: Duration = Duration::from_secs(1);

struct Env {
    sim: Sim,
    clusters: Api<RayCluster>,
    pods: Api<Pod>,
    jobs: Api<Job>,
    _world: Running,
}

/// The world's knobs.
struct Knobs {
    /// How long a Job's pod runs.
    job_pod_runtime: Duration,
    /// Real pods (else emulated by time).
    pods: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            job_pod_runtime: Duration::from_secs(5),
            pods: true,
        }
    }
}

fn ray_sim() -> Sim {
    let crds = raygate_testing::upstream::dir().join("upstream-crds");
    let crd = |f: &str| std::fs::read_to_string(crds.join(f)).unwrap();
    Sim::builder()
        .crds_yaml(&crd("ray.io_rayclusters.yaml"))
        .unwrap()
        .namespace(NS)
        .build()
}

async fn setup(knobs: Knobs) -> Env {
    let sim = ray_sim();
    let client: Client = sim.client();
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
    // Jobs are not covered: a finished Job outlives its cluster for the tests to read
    let gc = garbage_collector::Config::default().cover(ApiResource::erase::<RayCluster>(&()));
    let world = World::on(&sim)
        .scheduler(Default::default())
        .kubelets(kubelet::Config {
            stop_after: None,
            job_pod_runtime: knobs.job_pod_runtime,
            ..Default::default()
        })
        .jobs(Default::default())
        .garbage_collector(gc)
        .kuberay(EmulatorConfig {
            namespace: Some(NS.into()),
            pods: knobs.pods,
            ..Default::default()
        })
        .start();
    Env {
        clusters: Api::namespaced(client.clone(), NS),
        pods: Api::namespaced(client.clone(), NS),
        jobs: Api::namespaced(client, NS),
        sim,
        _world: world,
    }
}

async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    raygate_sim::world::fixtures::eventually_within(WAIT, POLL, what, check).await
}

/// A RayCluster with one worker; `ft` is `spec.gcsFaultToleranceOptions` (`null`: none).
fn raycluster(name: &str, annotations: Value, ft: Value, head_annotations: Value) -> RayCluster {
    let container = |name: &str| {
        json!({"name": name, "image": "rayproject/ray:2.52.0",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}})
    };
    let mut rc = json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"rayVersion": "2.52.0", "gcsFaultToleranceOptions": ft,
            "headGroupSpec": {"rayStartParams": {}, "template": {
                "metadata": {"annotations": head_annotations},
                "spec": {"terminationGracePeriodSeconds": GRACE,
                    "containers": [container("ray-head"), container("sidecar")]}}},
            "workerGroupSpecs": [{"groupName": "cpu", "replicas": 1, "minReplicas": 0,
                "maxReplicas": 4, "numOfHosts": 1, "rayStartParams": {},
                "template": {"spec": {"terminationGracePeriodSeconds": GRACE,
                    "containers": [container("ray-worker")]}}}]}
    });
    if ft.is_null()
        && let Some(spec) = rc["spec"].as_object_mut()
    {
        spec.remove("gcsFaultToleranceOptions");
    }
    serde_json::from_value(rc).unwrap()
}

fn ft_cluster(name: &str) -> RayCluster {
    raycluster(
        name,
        json!({}),
        json!({"redisAddress": "redis:6379"}),
        json!({}),
    )
}

async fn pods_of(env: &Env, cluster: &str, node_type: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!(
        "{CLUSTER_LABEL}={cluster},{NODE_TYPE_LABEL}={node_type}"
    ));
    env.pods.list(&lp).await.unwrap().items
}

/// Deletes RayCluster `name` in the background; its `deletionTimestamp`.
async fn delete(env: &Env, name: &str) -> Timestamp {
    env.clusters
        .delete(name, &DeleteParams::background())
        .await
        .unwrap();
    let deleting = env.clusters.get(name).await.unwrap();
    deleting.metadata.deletion_timestamp.unwrap().0
}

/// Creates `rc` and waits until it is ready.
async fn create_ready(env: &Env, rc: &RayCluster) -> RayCluster {
    env.clusters
        .create(&PostParams::default(), rc)
        .await
        .unwrap();
    let name = rc.name_any();
    eventually("the cluster ready", || async {
        let c = env.clusters.get(&name).await.unwrap();
        let ready = c.status.as_ref().and_then(|s| s.state.as_deref()) == Some("ready");
        ready.then_some(c)
    })
    .await
}

fn job_condition(job: &Job, type_: &str) -> bool {
    job.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn requests(pod: &Pod) -> Vec<(String, String)> {
    let spec = pod.spec.as_ref().unwrap();
    let res = spec.containers[0].resources.as_ref().unwrap();
    res.requests
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// The cluster is deleted; returns the Job once it exists, checking at every poll that no Job
/// exists while a head pod is left (the Job is read first: head pods never come back).
async fn job_after_head_gone(env: &Env, name: &str) -> Job {
    let job_name = format!("{name}-redis-cleanup");
    let saw_head_terminating = Cell::new(false);
    let job = eventually("the Redis cleanup Job", || async {
        let job = env.jobs.get_opt(&job_name).await.unwrap();
        let heads = pods_of(env, name, "head").await;
        assert!(
            job.is_none() || heads.is_empty(),
            "the Redis cleanup Job exists while the head pod is left"
        );
        let terminating = heads
            .iter()
            .any(|p| p.metadata.deletion_timestamp.is_some());
        saw_head_terminating.set(saw_head_terminating.get() || terminating);
        job
    })
    .await;
    assert!(
        saw_head_terminating.get(),
        "the head was seen terminating before the Job"
    );
    assert!(pods_of(env, name, "worker").await.is_empty());
    job
}

#[tokio::test(start_paused = true)]
async fn a_gcs_ft_cluster_is_deleted_after_its_head_is_gone_and_its_redis_cleanup_job_completed() {
    let env = setup(Knobs::default()).await;
    let rc = create_ready(&env, &ft_cluster("rc")).await;
    assert_eq!(rc.finalizers(), [FINALIZER]);
    let deleted = delete(&env, "rc").await;
    let job = job_after_head_gone(&env, "rc").await;
    let created = job.metadata.creation_timestamp.clone().unwrap().0;
    let waited = created.duration_since(deleted).as_secs();
    assert!(
        waited >= GRACE,
        "the Job {waited} s after the deletion: the head's grace is {GRACE} s"
    );
    assert_eq!(job.labels()[NODE_TYPE_LABEL], "redis-cleanup");
    assert_eq!(job.labels()[CLUSTER_LABEL], "rc");
    let owner = &job.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("RayCluster", rc.uid().unwrap().as_str(), Some(true))
    );
    let pod = eventually("the Redis cleanup pod", || async {
        pods_of(&env, "rc", "redis-cleanup")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(pod.owner_references()[0].kind, "Job");
    assert_eq!(pod.spec.as_ref().unwrap().containers.len(), 1);
    assert_eq!(
        requests(&pod),
        [
            ("cpu".to_string(), "200m".to_string()),
            ("memory".into(), "256Mi".into())
        ]
    );
    let lingered = Cell::new(false);
    let gone_at: Timestamp = eventually("the cluster gone", || async {
        let cluster = env.clusters.get_opt("rc").await.unwrap();
        let job = env.jobs.get("rc-redis-cleanup").await.unwrap();
        match cluster {
            Some(c) => {
                assert!(c.metadata.deletion_timestamp.is_some());
                lingered.set(lingered.get() || !job_condition(&job, "Complete"));
                None
            }
            None => Some(env.sim.clock().now()),
        }
    })
    .await;
    assert!(lingered.get(), "the cluster was seen while its Job ran");
    let job = env.jobs.get("rc-redis-cleanup").await.unwrap();
    assert!(job_condition(&job, "Complete"), "{:?}", job.status);
    let completed = job.status.unwrap().completion_time.unwrap().0;
    assert!(
        completed <= gone_at,
        "gone at {gone_at}, Job completed at {completed}"
    );
    let cleanup = pods_of(&env, "rc", "redis-cleanup").await;
    let status = cleanup[0].status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let state = status.container_statuses.unwrap()[0].state.clone().unwrap();
    assert!(state.running.is_none(), "{state:?}");
    assert_eq!(state.terminated.map(|t| t.exit_code), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_cluster_without_gcs_fault_tolerance_gets_no_finalizer_and_no_cleanup_job() {
    let env = setup(Knobs::default()).await;
    let rc = raycluster("plain", json!({}), Value::Null, json!({}));
    let rc = create_ready(&env, &rc).await;
    assert!(rc.finalizers().is_empty());
    env.clusters
        .delete("plain", &DeleteParams::background())
        .await
        .unwrap();
    assert!(env.clusters.get_opt("plain").await.unwrap().is_none());
    eventually("the pods gone", || async {
        let left = pods_of(&env, "plain", "head").await.len()
            + pods_of(&env, "plain", "worker").await.len();
        (left == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let jobs = env.jobs.list(&ListParams::default()).await.unwrap();
    assert!(jobs.items.is_empty(), "{:?}", jobs.items);
}

#[tokio::test(start_paused = true)]
async fn a_failed_redis_cleanup_job_also_releases_the_cluster_then_the_collector_takes_the_job() {
    let env = setup(Knobs::default()).await;
    let exit = json!({kubelet::EXIT_CODE: "1"});
    let rc = raycluster("rc", json!({}), json!({"redisAddress": "redis:6379"}), exit);
    create_ready(&env, &rc).await;
    delete(&env, "rc").await;
    job_after_head_gone(&env, "rc").await;
    eventually("the cluster gone", || async {
        let cluster = env.clusters.get_opt("rc").await.unwrap();
        let job = env.jobs.get("rc-redis-cleanup").await.unwrap();
        if cluster.is_some() {
            return None;
        }
        assert!(job_condition(&job, "Failed"), "{:?}", job.status);
        Some(())
    })
    .await;
    let pod = &pods_of(&env, "rc", "redis-cleanup").await[0];
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Failed"));
    // a collector covering Jobs: the Job's owner is gone, so is the Job, then its pod
    let _gc = World::on(&env.sim)
        .garbage_collector(
            garbage_collector::Config::default()
                .cover(ApiResource::erase::<RayCluster>(&()))
                .cover(ApiResource::erase::<Job>(&())),
        )
        .start();
    eventually("the Job and its pod collected", || async {
        let job = env.jobs.get_opt("rc-redis-cleanup").await.unwrap();
        let pods = pods_of(&env, "rc", "redis-cleanup").await;
        (job.is_none() && pods.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_deletion_timeout_releases_a_cluster_whose_cleanup_job_never_finishes() {
    let env = setup(Knobs {
        job_pod_runtime: Duration::from_secs(24 * 3600),
        ..Knobs::default()
    })
    .await;
    let rc = raycluster(
        "rc",
        json!({DELETION_TIMEOUT_ANNOTATION: "120"}),
        json!({"redisAddress": "redis:6379"}),
        json!({}),
    );
    create_ready(&env, &rc).await;
    let deleted = delete(&env, "rc").await;
    job_after_head_gone(&env, "rc").await;
    let gone_at = eventually("the cluster gone", || async {
        let gone = env.clusters.get_opt("rc").await.unwrap().is_none();
        gone.then(|| env.sim.clock().now())
    })
    .await;
    let after = gone_at.duration_since(deleted).as_secs();
    assert!(
        (120..=125).contains(&after),
        "gone {after} s after deletion"
    );
    let job = env.jobs.get("rc-redis-cleanup").await.unwrap();
    assert!(!job_condition(&job, "Complete") && !job_condition(&job, "Failed"));
}

#[tokio::test(start_paused = true)]
async fn with_pods_emulated_by_time_the_cleanup_takes_the_start_delay_and_no_job() {
    let env = setup(Knobs {
        pods: false,
        ..Knobs::default()
    })
    .await;
    let rc = create_ready(&env, &ft_cluster("rc")).await;
    assert_eq!(rc.finalizers(), [FINALIZER]);
    let deleted = delete(&env, "rc").await;
    let gone_at = eventually("the cluster gone", || async {
        let gone = env.clusters.get_opt("rc").await.unwrap().is_none();
        gone.then(|| env.sim.clock().now())
    })
    .await;
    let after = gone_at.duration_since(deleted).as_secs();
    let start_delay = EmulatorConfig::default().start_delay.as_secs() as i64;
    assert!(
        (start_delay..=start_delay + 2).contains(&after),
        "gone {after} s after deletion"
    );
    let jobs = env.jobs.list(&ListParams::default()).await.unwrap();
    assert!(jobs.items.is_empty());
}

/// Conformance with the Job registry (`pkg/registry/batch/job`): the status is the server's on
/// create and written through `status` only; `generation` starts at 1 and moves with the spec.
#[tokio::test]
async fn the_sim_serves_batch_v1_jobs_with_a_status_subresource_and_a_generation() {
    let sim = ray_sim();
    let jobs: Api<Job> = Api::namespaced(sim.client(), NS);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "j"},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}}},
        "status": {"succeeded": 1}
    }))
    .unwrap();
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none_or(|s| s.succeeded.is_none()));
    let mut next = jobs.get("j").await.unwrap();
    next.status = Some(serde_json::from_value(json!({"active": 1})).unwrap());
    let written = jobs
        .replace_status("j", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(written.status.unwrap().active, Some(1));
    let mut spec_change = jobs.get("j").await.unwrap();
    if let Some(s) = spec_change.spec.as_mut() {
        s.backoff_limit = Some(2);
    }
    let replaced = jobs
        .replace("j", &PostParams::default(), &spec_change)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(
        replaced.status.unwrap().active,
        Some(1),
        "spec writes keep the status"
    );
}
