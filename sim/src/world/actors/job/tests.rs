//! The Job controller's syncs of a NonIndexed Job of one completion with `backoffLimit: 0`
//! (KubeRay's Redis cleanup Job).

use super::*;
use raygate_testing::core::{self, PodExt};
use serde_json::json;

fn now() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap()
}

fn job() -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": "rc-redis-cleanup", "namespace": "t", "uid": "uid-j"},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"ray.io/node-type": "redis-cleanup"},
                "annotations": {"a": "b"}, "finalizers": ["f"]},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "ray-head"}]}}}
    }))
    .unwrap()
}

fn pod(phase: &str) -> Pod {
    core::pod("t/rc-redis-cleanup-x", "n")
        .owned_by("batch/v1", "Job", "rc-redis-cleanup")
        .uid("p")
        .phase(phase)
}

fn conditions(status: &JobStatus) -> Vec<(&str, &str, &str)> {
    status
        .conditions
        .iter()
        .flatten()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_deref().unwrap_or(""),
            )
        })
        .collect()
}

#[test]
fn a_new_job_creates_one_pod_from_its_template_and_starts() {
    let plan = decide(&job(), &[], now());
    let pod = plan.create.unwrap();
    assert_eq!(
        pod.metadata.generate_name.as_deref(),
        Some("rc-redis-cleanup-")
    );
    assert_eq!(pod.labels()["ray.io/node-type"], "redis-cleanup");
    assert_eq!(pod.annotations()["a"], "b");
    assert_eq!(pod.finalizers(), ["f"]);
    let owner = &pod.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Job", "uid-j", Some(true))
    );
    assert_eq!(pod.spec.unwrap().restart_policy.as_deref(), Some("Never"));
    let status = plan.status.unwrap();
    assert_eq!(status.start_time, Some(Time(now())));
    assert_eq!(status.active, Some(1));
}

#[test]
fn a_running_pod_is_not_replaced_and_a_terminating_one_is_awaited() {
    let mut j = job();
    j.status = Some(JobStatus {
        start_time: Some(Time(now())),
        active: Some(1),
        ready: Some(0),
        terminating: Some(0),
        succeeded: Some(0),
        failed: Some(0),
        ..Default::default()
    });
    let running = pod("Running");
    assert_eq!(decide(&j, &[&running], now()), Plan::default());
    let going = pod("Running").deleting_since(now());
    let plan = decide(&j, &[&going], now());
    assert!(plan.create.is_none());
    let status = plan.status.unwrap();
    assert_eq!((status.active, status.terminating), (Some(0), Some(1)));
}

#[test]
fn a_succeeded_pod_completes_the_job() {
    let done = pod("Succeeded");
    let status = decide(&job(), &[&done], now()).status.unwrap();
    assert_eq!((status.succeeded, status.active), (Some(1), Some(0)));
    assert_eq!(
        conditions(&status),
        [
            (SUCCESS_CRITERIA_MET, "True", "CompletionsReached"),
            (COMPLETE, "True", "CompletionsReached"),
        ]
    );
    assert_eq!(status.completion_time, Some(Time(now())));
    let mut j = job();
    j.status = Some(status);
    assert!(finished(&j));
    assert_eq!(
        decide(&j, &[], now()),
        Plan::default(),
        "finished: left alone"
    );
}

#[test]
fn a_failed_pod_fails_the_job_without_a_retry() {
    let failed = pod("Failed");
    let plan = decide(&job(), &[&failed], now());
    assert!(plan.create.is_none());
    let status = plan.status.unwrap();
    assert_eq!((status.failed, status.active), (Some(1), Some(0)));
    assert_eq!(
        conditions(&status),
        [
            (FAILURE_TARGET, "True", "BackoffLimitExceeded"),
            (FAILED, "True", "BackoffLimitExceeded"),
        ]
    );
    assert_eq!(status.completion_time, None);
}

#[test]
fn a_deleting_job_creates_nothing() {
    let mut j = job();
    j.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(decide(&j, &[], now()), Plan::default());
}
