//! A minimal Job controller, after kubernetes `pkg/controller/job/job_controller.go`, for the
//! Jobs the simulated world runs (KubeRay's Redis cleanup Job): a Job runs one pod, created from
//! `spec.template` (`GetPodFromTemplate`: the template's labels, annotations and finalizers,
//! `generateName` `<job>-`, a controller ownerReference to the Job), and finishes with it:
//!
//! - the pod `Succeeded`: `status.succeeded=1` and the conditions `SuccessCriteriaMet` then
//!   `Complete` (`True`, reason `CompletionsReached`), `completionTime`;
//! - the pod `Failed`: `status.failed=1` and `FailureTarget` then `Failed` (`True`, reason
//!   `BackoffLimitExceeded`), as with the `backoffLimit: 0` KubeRay sets;
//! - meanwhile `startTime` (from the first sync), `active`, `ready`, `terminating`.
//!
//! A finished or deleting Job is left alone. Left out: `completions` and `parallelism` other than
//! 1, retries up to a `backoffLimit` above 0, `activeDeadlineSeconds`, `ttlSecondsAfterFinished`,
//! `suspend`, Indexed Jobs, success and pod failure policies, the `batch.kubernetes.io/job-tracking`
//! pod finalizer and the pod-replacement policy (a deleted pod is replaced at once while the Job
//! has not finished). The pods run to completion on the simulated kubelet
//! ([`kubelet::Config::job_pod_runtime`](super::kubelet::Config::job_pod_runtime)).
//!
//! [`decide`] is pure; [`run`] is the IO loop over caches of Jobs and Pods.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use crate::Clock;
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};
use raygate::runtime::SortedState;

/// `batchv1.JobComplete`.
pub const COMPLETE: &str = "Complete";
/// `batchv1.JobFailed`.
pub const FAILED: &str = "Failed";
/// `batchv1.JobSuccessCriteriaMet`: written before `Complete`.
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
/// `batchv1.JobFailureTarget`: written before `Failed`.
pub const FAILURE_TARGET: &str = "FailureTarget";

/// What one sync of a Job does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The pod to create from the template.
    pub create: Option<Pod>,
    /// The status to write, if it changed.
    pub status: Option<JobStatus>,
}

/// The controller reference a Job puts on its pods.
pub fn controller_ref(job: &Job) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: job.name_any(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `GetPodFromTemplate`: the template's labels, annotations and finalizers, `generateName`
/// `<job>-`, the controller reference, the template's spec.
pub fn pod_from_template(job: &Job) -> Pod {
    let template = job.spec.clone().unwrap_or_default().template;
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", job.name_any())),
            namespace: job.namespace(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_ref(job)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// `IsJobFinished`: `Complete` or `Failed` is `True`.
pub fn finished(job: &Job) -> bool {
    job.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn count(pods: &[&Pod], f: impl Fn(&Pod) -> bool) -> i32 {
    i32::try_from(pods.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX)
}

fn condition(type_: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// One sync of `job` over the pods it controls (its controller ownerReference's uid).
pub fn decide(job: &Job, owned: &[&Pod], now: Timestamp) -> Plan {
    if finished(job) || job.metadata.deletion_timestamp.is_some() {
        return Plan::default();
    }
    let old = job.status.clone().unwrap_or_default();
    let deleting = |p: &Pod| p.metadata.deletion_timestamp.is_some();
    let terminal = |p: &Pod| matches!(phase(p), Some("Succeeded" | "Failed"));
    let active = count(owned, |p| !terminal(p) && !deleting(p));
    let succeeded = count(owned, |p| phase(p) == Some("Succeeded"));
    let failed = count(owned, |p| phase(p) == Some("Failed"));
    let mut status = JobStatus {
        start_time: old.start_time.clone().or(Some(Time(now))),
        active: Some(active),
        ready: Some(count(owned, |p| !terminal(p) && !deleting(p) && ready(p))),
        terminating: Some(count(owned, |p| !terminal(p) && deleting(p))),
        succeeded: Some(succeeded),
        failed: Some(failed),
        ..old.clone()
    };
    let mut plan = Plan::default();
    let end = if succeeded > 0 {
        let why = "Reached expected number of succeeded pods";
        Some((SUCCESS_CRITERIA_MET, COMPLETE, "CompletionsReached", why))
    } else if failed > 0 {
        let why = "Job has reached the specified backoff limit";
        Some((FAILURE_TARGET, FAILED, "BackoffLimitExceeded", why))
    } else {
        None
    };
    match end {
        Some((interim, terminal_type, reason, message)) => {
            status.active = Some(0);
            status.ready = Some(0);
            status.terminating = Some(0);
            let conditions = status.conditions.get_or_insert_default();
            conditions.push(condition(interim, reason, message, now));
            conditions.push(condition(terminal_type, reason, message, now));
            if terminal_type == COMPLETE {
                status.completion_time = Some(Time(now));
            }
        }
        // every owned pod is active, terminating or terminal: none is one to replace
        None if owned.is_empty() => {
            plan.create = Some(pod_from_template(job));
            status.active = Some(1);
        }
        None => {}
    }
    if status != old {
        plan.status = Some(status);
    }
    plan
}

/// The controller's knobs.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Reaction lag after a change.
    pub lag: Duration,
}

/// The controller's failing steps (none yet: a failed write is logged and the next pass retries).
#[derive(Debug, thiserror::Error)]
pub enum Error {}

/// Runs the Job controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) -> Result<(), Error> {
    let mut c = Caches::default();
    let (jobs, pods) = (c.all(&client), c.all(&client));
    let actor = Controller { client, jobs, pods };
    support::run(actor, c, clock, config.lag, shutdown).await
}

struct Controller {
    client: Client,
    jobs: Store<Job>,
    pods: Store<Pod>,
}

impl Actor for Controller {
    type Error = Error;

    async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Error> {
        let jobs = self.jobs.sorted_state();
        if jobs.is_empty() {
            return Ok(None);
        }
        let pods = self.pods.sorted_state();
        for job in &jobs {
            let uid = job.metadata.uid.as_deref().unwrap_or_default();
            let owned: Vec<&Pod> = pods
                .iter()
                .map(|p| &**p)
                .filter(|p| {
                    p.owner_references()
                        .iter()
                        .any(|r| r.controller == Some(true) && r.uid == uid)
                })
                .collect();
            let plan = decide(job, &owned, now);
            self.apply(job, plan, expect).await;
        }
        Ok(None)
    }
}

impl Controller {
    /// Creates the pod, then writes the status; a failed write is logged and left to the next
    /// sync.
    async fn apply(&self, job: &Job, plan: Plan, expect: &mut Expect) {
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        if let Some(pod) = &plan.create {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            match api.create(&PostParams::default(), pod).await {
                Ok(created) => {
                    tracing::info!(job = %name, namespace = %ns, pod = %created.name_any(), "job controller: created a pod");
                    expect.written(&self.pods, &created);
                }
                Err(e) => {
                    tracing::warn!(job = %name, error = %e, "job controller: pod create failed")
                }
            }
        }
        let Some(status) = plan.status else {
            return;
        };
        let mut next = job.clone();
        next.status = Some(status);
        let api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        match api
            .replace_status(&name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => expect.written(&self.jobs, &written),
            Err(e) => {
                tracing::debug!(job = %name, error = %e, "job controller: status write failed (next sync retries)")
            }
        }
    }
}

#[cfg(test)]
mod tests;
