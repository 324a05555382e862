//! Pods that run to completion: a Job's pod (`restartPolicy: Never`, controlled by a batch/v1
//! Job) whose containers exit a fixed runtime after they started, and the terminal status the
//! kubelet writes then (`pkg/kubelet/kubelet_pods.go`: `getPhase` — with `Never`, every
//! container terminated makes the pod `Succeeded`, any non-zero exit `Failed`;
//! `generateAPIPodStatus` — `Ready`/`ContainersReady` `False` with reason `PodCompleted`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::{Action, Runtime, key, secs, stamp};

/// The exit code of a Job pod's containers (a test's fault; absent or unparsable: 0).
pub const EXIT_CODE: &str = "sim.raygate.io/exit-code";

/// Whether `pod` runs to completion: `restartPolicy: Never` and controlled by a batch/v1 Job.
fn runs_to_completion(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let never = spec.and_then(|s| s.restart_policy.as_deref()) == Some("Never");
    let by_job = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.api_version == "batch/v1" && r.kind == "Job");
    never && by_job
}

fn exit_code(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EXIT_CODE))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// When the started containers of `pod` exit: `runtime` after they started, for a pod that
/// runs to completion; `None` for any other pod or containers not started.
pub(super) fn exit_at(pod: &Pod, rt: &Runtime, runtime: Duration) -> Option<Timestamp> {
    let started = rt.started?;
    runs_to_completion(pod).then(|| started.checked_add(secs(runtime)).unwrap_or(Timestamp::MAX))
}

/// The terminal status of `pod` whose containers exited at `at`, written once.
pub(super) fn report_exit(pod: &Pod, rt: &mut Runtime, at: Timestamp) -> Option<Action> {
    if std::mem::replace(&mut rt.exited, true) {
        return None;
    }
    rt.ready = false;
    let code = exit_code(pod);
    let (phase, reason) = if code == 0 {
        ("Succeeded", "Completed")
    } else {
        ("Failed", "Error")
    };
    let started_at = rt.started.map(stamp).unwrap_or_default();
    let containers: Vec<Value> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "image": c.image.clone().unwrap_or_default(),
                "imageID": "", "ready": false, "started": false, "restartCount": rt.restarts,
                "state": {"running": null, "waiting": null, "terminated": {
                    "exitCode": code, "reason": reason,
                    "startedAt": started_at, "finishedAt": stamp(at)}},
            })
        })
        .collect();
    let not_ready = |type_: &str| {
        json!({"type": type_, "status": "False", "reason": "PodCompleted",
            "lastTransitionTime": stamp(at)})
    };
    let (namespace, name) = key(pod);
    Some(Action::Status {
        namespace,
        name,
        patch: json!({"status": {
            "phase": phase,
            "conditions": [not_ready("ContainersReady"), not_ready("Ready")],
            "containerStatuses": containers,
        }}),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Kubelet};
    use super::*;
    use raygate_testing::core::{self, PodExt};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    fn job_pod(name: &str) -> Pod {
        let mut p = core::pod(&format!("ns/{name}"), "n")
            .uid(name)
            .owned_by("batch/v1", "Job", "j")
            .phase("Pending");
        if let Some(s) = p.spec.as_mut() {
            s.restart_policy = Some("Never".into());
        }
        p
    }

    /// The phases the kubelet writes for `pod` second by second from 0 to `to`.
    fn phases(pod: Pod, to: i64) -> Vec<(i64, String)> {
        let mut k = Kubelet::new(&Config {
            start_delay: Duration::from_secs(2),
            stop_after: None,
            job_pod_runtime: Duration::from_secs(3),
        });
        let pods = [Arc::new(pod)];
        let mut out = vec![];
        for s in 0..=to {
            let (actions, _) = k.step(true, &pods, &BTreeMap::new(), t(s));
            for a in actions {
                if let Action::Status { patch, .. } = a {
                    let phase = patch["status"]["phase"].as_str().unwrap_or("").to_string();
                    out.push((s, phase));
                }
            }
        }
        out
    }

    #[test]
    fn a_job_pod_succeeds_its_runtime_after_it_started() {
        let w = phases(job_pod("p"), 10);
        assert_eq!(w, [(2, "Running".into()), (5, "Succeeded".into())]);
    }

    #[test]
    fn a_job_pod_with_a_non_zero_exit_code_fails() {
        let w = phases(job_pod("p").annotation(EXIT_CODE, "1"), 10);
        assert_eq!(w, [(2, "Running".into()), (5, "Failed".into())]);
    }

    #[test]
    fn the_exit_status_terminates_every_container_and_is_not_ready() {
        let p = job_pod("p");
        let mut rt = Runtime::admitted("p".into(), t(0));
        rt.started = Some(t(1));
        let Some(Action::Status { patch, .. }) = report_exit(&p, &mut rt, t(4)) else {
            panic!("no status");
        };
        let c = &patch["status"]["containerStatuses"][0];
        assert_eq!(c["state"]["terminated"]["exitCode"], 0);
        assert_eq!(c["state"]["terminated"]["reason"], "Completed");
        assert!(c["state"]["running"].is_null());
        assert_eq!(patch["status"]["conditions"][1]["status"], "False");
        assert!(report_exit(&p, &mut rt, t(5)).is_none(), "written once");
    }

    #[test]
    fn other_pods_run_until_deleted() {
        let never_unowned = job_pod("a").unowned();
        let mut always = job_pod("b");
        if let Some(s) = always.spec.as_mut() {
            s.restart_policy = Some("Always".into());
        }
        let rs_pod = core::pod("ns/c", "n").uid("c").phase("Pending");
        for p in [never_unowned, always, rs_pod] {
            let name = p.metadata.name.clone();
            assert_eq!(phases(p, 30), [(2, "Running".into())], "{name:?}");
        }
    }
}
