//! The gate reconciler: observe (stores) → decide ([`crate::gate::decide`]) → apply.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::controller::Action;

use super::metrics::{ResultLabels, StepLabels};
use super::{AdmissionMode, Context, Error, apply, resync};
use crate::gate::{self, EventType, GateAction, GateEvent, GateOptions};
use crate::podsets;
use crate::slices::{self, ChainMode};
use crate::types::kueue::{PRIORITY_CLASS_LABEL, PriorityClassRef, Workload};
use crate::types::ray::{RayCluster, RayService};

fn reference(service: &RayService, child: Option<&str>) -> ObjectReference {
    match child {
        None => service.object_ref(&()),
        Some(name) => ObjectReference {
            api_version: Some("ray.io/v1".into()),
            kind: Some("RayCluster".into()),
            name: Some(name.to_string()),
            namespace: service.metadata.namespace.clone(),
            ..Default::default()
        },
    }
}

/// Resolves the `kueue.x-k8s.io/priority-class` label to a WorkloadPriorityClass.
fn priority(
    service: &RayService,
    ctx: &Context,
) -> (Option<(PriorityClassRef, i32)>, Option<GateEvent>) {
    let Some(class) = service
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PRIORITY_CLASS_LABEL))
    else {
        return (None, None);
    };
    let found = ctx
        .stores
        .priority_classes
        .state()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(class.as_str()));
    match found {
        Some(p) => (
            Some((
                PriorityClassRef {
                    group: "kueue.x-k8s.io".into(),
                    kind: "WorkloadPriorityClass".into(),
                    name: class.clone(),
                },
                p.spec.value,
            )),
            None,
        ),
        None => (
            None,
            Some(GateEvent {
                type_: EventType::Warning,
                reason: "PriorityClassNotFound",
                message: format!(
                    "WorkloadPriorityClass {class} (label {PRIORITY_CLASS_LABEL}) does not exist; slices get priority 0"
                ),
                child: None,
            }),
        ),
    }
}

pub async fn reconcile(service: Arc<RayService>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = Instant::now();
    if gate::queue_name(&service).is_none() || service.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if !ctx.is_leader() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let ns = service.metadata.namespace.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    let uid = service.metadata.uid.clone().unwrap_or_default();

    // observe: everything from the stores, no LIST
    let clusters: Vec<Arc<RayCluster>> = ctx.stores.clusters.state();
    let children = podsets::children_of(&service, clusters.iter().map(|c| c.as_ref()));
    let workloads: Vec<Workload> = ctx
        .stores
        .workloads
        .state()
        .iter()
        .filter(|w| w.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|w| {
            w.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid && o.kind == "RayService")
        })
        .map(|w| w.as_ref().clone())
        .collect();
    let (priority, priority_event) = priority(&service, &ctx);
    let opts = GateOptions {
        mode: match ctx.config.admission {
            AdmissionMode::Builtin => ChainMode::Builtin,
            AdmissionMode::Kueue => ChainMode::KueueCompatible,
        },
        priority,
        now: Some(Timestamp::now()),
        flavors: ctx
            .stores
            .flavors
            .state()
            .iter()
            .filter_map(|f| Some((f.metadata.name.clone()?, f.spec.clone())))
            .collect(),
    };

    // decide
    let decision = gate::decide(&service, &children, &workloads, &opts);

    // apply, in order; events after (they never fail the reconcile)
    let now = Timestamp::now();
    let result = apply_actions(&ctx, &ns, &name, &decision.actions, now).await;
    for ev in priority_event.iter().chain(&decision.events) {
        ctx.events
            .publish(&reference(&service, ev.child.as_deref()), ev)
            .await;
    }
    let pending = workloads
        .iter()
        .filter(|w| !slices::is_finished(w) && !slices::is_reserved(w))
        .count();
    tracing::debug!(rayservice = %format!("{ns}/{name}"), children = children.len(), pending, actions = decision.actions.len(), "reconciled");
    ctx.metrics
        .reconcile_duration
        .observe(start.elapsed().as_secs_f64());
    let label = if result.is_ok() { "ok" } else { "error" };
    ctx.metrics
        .reconciles
        .get_or_create(&ResultLabels {
            result: label.into(),
        })
        .inc();
    result.map(|_| resync())
}

async fn apply_actions(
    ctx: &Context,
    ns: &str,
    name: &str,
    actions: &[GateAction],
    now: Timestamp,
) -> Result<(), Error> {
    for action in actions {
        match action {
            GateAction::GateTemplate { released } => {
                apply::gate_template(&ctx.client, ns, name, released).await?
            }
            GateAction::Slice(a) => apply::slice(&ctx.client, ns, a, now).await?,
            GateAction::Release {
                child,
                released,
                slice,
                admitted_at,
            } => {
                apply::child_suspend(&ctx.client, ns, child, false).await?;
                observe_gate_latency(ctx, &format!("{ns}/{slice}"), *admitted_at, now);
                apply::record_released(&ctx.client, ns, name, released).await?;
            }
            GateAction::RecordReleased { released } => {
                apply::record_released(&ctx.client, ns, name, released).await?
            }
            GateAction::Hold { child } => {
                apply::child_suspend(&ctx.client, ns, child, true).await?
            }
            GateAction::SuspendService { reason } => {
                apply::suspend_service(&ctx.client, ns, name, Some(reason)).await?
            }
            GateAction::ResumeService => {
                apply::suspend_service(&ctx.client, ns, name, None).await?
            }
            GateAction::ReportError { message } => {
                apply::report_error(&ctx.client, ns, name, message.as_deref()).await?
            }
            GateAction::PatchChild { child, patch } => {
                apply::patch_child(&ctx.client, ns, child, patch).await?
            }
            GateAction::Annotate { key, value } => {
                apply::annotate_service(&ctx.client, ns, name, key, value.as_deref()).await?
            }
        }
    }
    Ok(())
}

/// Slice admitted → unsuspend patch sent: exact when this process admitted it, else from the
/// `Admitted` condition (one-second resolution).
fn observe_gate_latency(
    ctx: &Context,
    slice: &str,
    admitted_at: Option<Timestamp>,
    now: Timestamp,
) {
    let local = ctx
        .admitted_at
        .lock()
        .ok()
        .and_then(|m| m.get(slice).copied());
    let seconds = match (local, admitted_at) {
        (Some(at), _) => Some(at.elapsed().as_secs_f64()),
        (None, Some(at)) => Some(now.duration_since(at).as_secs_f64()),
        _ => None,
    };
    if let Some(s) = seconds.filter(|s: &f64| *s >= 0.0) {
        ctx.metrics.gate_latency.observe(s);
    }
}

pub fn error_policy(service: Arc<RayService>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(
        rayservice = %format!("{}/{}", service.metadata.namespace.as_deref().unwrap_or_default(), service.metadata.name.as_deref().unwrap_or_default()),
        error = %error,
        "reconcile failed; retrying"
    );
    ctx.metrics
        .errors
        .get_or_create(&StepLabels {
            step: error.metric_label().into(),
        })
        .inc();
    Action::requeue(Duration::from_secs(2))
}
