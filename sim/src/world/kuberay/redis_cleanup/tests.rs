//! KubeRay v1.7.0's `buildRedisCleanupJob`, `IsGCSFaultToleranceEnabled` /
//! `IsGCSFaultToleranceEmbedded`, `getGCSFTDeletionTimeout`, `IsJobFinished` and `TrimJobName`.

use super::*;
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use serde_json::{Value, json};

fn cluster(name: &str, annotations: Value, ft: Value) -> RayCluster {
    serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "ns", "uid": "u-1", "annotations": annotations},
        "spec": {
            "gcsFaultToleranceOptions": ft,
            "headGroupSpec": {"rayStartParams": {}, "template": {
                "metadata": {"labels": {"app": "llm"}, "annotations": {"note": "x"}},
                "spec": {
                    "initContainers": [{"name": "wait-for-tls-ip-san"}, {"name": "mine"}],
                    "containers": [
                        {"name": "ray-head", "image": "ray", "env": [{"name": "A", "value": "1"}],
                         "readinessProbe": {"periodSeconds": 5}, "livenessProbe": {"periodSeconds": 5},
                         "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": "1"}}},
                        {"name": "sidecar", "image": "envoy"}]}}},
        }
    }))
    .unwrap()
}

fn ft_cluster() -> RayCluster {
    cluster("rc", json!({}), json!({"redisAddress": "redis:6379"}))
}

fn job_with(conditions: &[(&str, &str)]) -> Job {
    Job {
        status: Some(JobStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s)| JobCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        ..JobCondition::default()
                    })
                    .collect(),
            ),
            ..JobStatus::default()
        }),
        ..Job::default()
    }
}

#[test]
fn gcs_fault_tolerance_is_the_options_or_the_annotation_and_not_the_embedded_backend() {
    assert!(redis_fault_tolerance(&ft_cluster()));
    let annotated = cluster("rc", json!({"ray.io/ft-enabled": "TRUE"}), Value::Null);
    assert!(redis_fault_tolerance(&annotated));
    let off = cluster("rc", json!({"ray.io/ft-enabled": "false"}), Value::Null);
    assert!(!redis_fault_tolerance(&off));
    let rocksdb = cluster("rc", json!({}), json!({"backend": "rocksdb"}));
    assert!(!redis_fault_tolerance(&rocksdb) && embedded(&rocksdb));
    let redis = cluster("rc", json!({}), json!({"backend": "redis"}));
    assert!(redis_fault_tolerance(&redis));
}

#[test]
fn the_deletion_timeout_is_the_annotation_s_positive_seconds_else_300() {
    let with = |v: &str| cluster("rc", json!({DELETION_TIMEOUT_ANNOTATION: v}), Value::Null);
    assert_eq!(deletion_timeout(&ft_cluster()), Duration::from_secs(300));
    assert_eq!(deletion_timeout(&with("60")), Duration::from_secs(60));
    for bad in ["0", "-5", "1m", ""] {
        assert_eq!(
            deletion_timeout(&with(bad)),
            DEFAULT_DELETION_TIMEOUT,
            "{bad:?}"
        );
    }
}

#[test]
fn a_job_is_finished_on_complete_failed_or_failure_target_true() {
    assert_eq!(job_finished(&job_with(&[])), None);
    assert_eq!(
        job_finished(&job_with(&[("SuccessCriteriaMet", "True")])),
        None
    );
    assert_eq!(job_finished(&job_with(&[("Complete", "False")])), None);
    assert_eq!(
        job_finished(&job_with(&[
            ("SuccessCriteriaMet", "True"),
            ("Complete", "True")
        ])),
        Some("Complete")
    );
    assert_eq!(
        job_finished(&job_with(&[("Failed", "True")])),
        Some("Failed")
    );
    assert_eq!(
        job_finished(&job_with(&[("FailureTarget", "True")])),
        Some("Failed")
    );
}

#[test]
fn the_job_name_is_trimmed_to_its_last_63_characters_as_check_label_does() {
    assert_eq!(job_name(&ft_cluster()), "rc-redis-cleanup");
    let long = format!("{}-x", "a".repeat(60));
    let name = job_name(&cluster(&long, json!({}), Value::Null));
    assert_eq!(name.len(), 63);
    assert!(name.ends_with("-x-redis-cleanup"), "{name}");
    // the cut lands on a '-': `CheckLabel` replaces it with 'r'
    let dash = format!("{}-{}", "b".repeat(3), "c".repeat(48));
    assert_eq!(
        pods::check_label(&format!("{dash}-{REDIS_CLEANUP_NODE}")),
        format!("r{}-redis-cleanup", "c".repeat(48))
    );
}

#[test]
fn the_cleanup_job_is_the_head_pod_relabelled_with_only_its_ray_container() {
    let job = cleanup_job(&ft_cluster());
    assert_eq!(job.name_any(), "rc-redis-cleanup");
    assert_eq!(job.namespace().as_deref(), Some("ns"));
    let labels = job.labels();
    assert_eq!(labels[NODE_TYPE_LABEL], "redis-cleanup");
    assert_eq!(labels[CLUSTER_LABEL], "rc");
    assert_eq!(labels["ray.io/group"], "headgroup");
    assert_eq!(labels["app"], "llm");
    assert_eq!(job.annotations()["note"], "x");
    let owner = &job.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("RayCluster", "rc", "u-1")
    );
    assert_eq!(owner.controller, Some(true));
    let spec = job.spec.unwrap();
    assert_eq!(
        (spec.backoff_limit, spec.active_deadline_seconds),
        (Some(0), Some(300))
    );
    let template = spec.template;
    let meta = template.metadata.unwrap();
    assert_eq!(meta.labels.unwrap()[NODE_TYPE_LABEL], "redis-cleanup");
    let pod = template.spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let init: Vec<&str> = pod
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(init, ["mine"]);
    let [ray] = pod.containers.as_slice() else {
        panic!("one container: {:?}", pod.containers);
    };
    assert_eq!(ray.name, "ray-head");
    assert!(ray.readiness_probe.is_none() && ray.liveness_probe.is_none());
    assert_eq!(
        ray.command.as_deref(),
        Some(&["/bin/bash".to_string(), "-c".into(), "--".into()][..])
    );
    let args = &ray.args.as_ref().unwrap()[0];
    assert!(args.starts_with("echo \"To get more information"), "{args}");
    assert!(
        args.ends_with("else None\"") && !args.contains("username="),
        "{args}"
    );
    let env: Vec<(&str, &str)> = ray
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        env,
        [
            ("A", "1"),
            ("RAY_redis_db_connect_retries", "120"),
            ("RAY_redis_db_connect_wait_milliseconds", "500"),
        ]
    );
    let res = ray.resources.as_ref().unwrap();
    let fixed = |m: &Option<std::collections::BTreeMap<String, Quantity>>| {
        m.as_ref()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect::<Vec<_>>()
    };
    let want = vec![
        ("cpu".into(), "200m".into()),
        ("memory".into(), "256Mi".into()),
    ];
    assert_eq!(
        fixed(&res.requests),
        want,
        "no GPU: KubeRay's fixed requests"
    );
    assert_eq!(fixed(&res.limits), want);
}

#[test]
fn a_redis_username_in_the_env_passes_it_to_the_cleanup() {
    let mut rc = ft_cluster();
    let head = &mut rc.spec.head_group_spec.template;
    let ray = &mut head.spec.as_mut().unwrap().containers[0];
    ray.env.get_or_insert_default().push(EnvVar {
        name: "REDIS_USERNAME".into(),
        value: Some("u".into()),
        ..EnvVar::default()
    });
    let job = cleanup_job(&rc);
    let pod = job.spec.unwrap().template.spec.unwrap();
    let args = &pod.containers[0].args.as_ref().unwrap()[0];
    assert!(
        args.contains("username=os.getenv('REDIS_USERNAME', parsed.username)"),
        "{args}"
    );
}
