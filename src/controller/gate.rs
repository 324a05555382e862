//! The gate reconciler: observe (stores) → decide ([`crate::gate::decide`]) → apply
//! ([`apply`]: one narrow write per action) → report (Events, metrics, one log line).

mod apply;
pub mod cleanup;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::controller::Action;

use super::metrics::{ResultLabels, StepLabels};
use super::{Context, Error, Monotonic, not_synced, resync};
use crate::events::Event;
use crate::gate::pods_ready::PodsReady;
use crate::gate::{self, GateAction, GateDecision, GateOptions};
use crate::runtime::SortedState;
use crate::slices::{self, SliceAction};
use crate::types::kueue::Workload;
use crate::types::ray::{RayCluster, RayService};
use crate::workload;

fn reference(
    service: &RayService,
    children: &[RayCluster],
    child: Option<&str>,
) -> ObjectReference {
    match child {
        None => service.object_ref(&()),
        Some(name) => ObjectReference {
            api_version: Some("ray.io/v1".into()),
            kind: Some("RayCluster".into()),
            name: Some(name.to_string()),
            namespace: service.metadata.namespace.clone(),
            // with its uid, `kubectl describe raycluster` lists the Event
            uid: children
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .and_then(|c| c.metadata.uid.clone()),
            ..Default::default()
        },
    }
}

pub async fn reconcile(service: Arc<RayService>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = ctx.clock.monotonic();
    if let Some(wait) = not_now(&service, &ctx) {
        return Ok(wait);
    }
    let seen = observe(&ctx, service);
    let plan = decide(&ctx, &seen);
    let applied = apply(&ctx, &seen, &plan).await;
    report(&ctx, &seen, &plan, &applied, start).await;
    // pods still holding quota: their going away changes the decision, and no watch of the
    // gate's says so
    // a slice Kueue evicted is requeued once its backoff ends: look again then
    let now = ctx.clock.now();
    let backoff = crate::slices::backoff_ends(&seen.workloads, now)
        .map(|at| at.duration_since(now).unsigned_abs() + BACKOFF_MARGIN);
    let held = (!plan.decision.held_back.is_empty()).then_some(PODS_HELD_RESYNC);
    let next = match backoff.into_iter().chain(held).min() {
        Some(wait) => Action::requeue(wait),
        None => resync(),
    };
    applied.result.map(|()| next)
}

/// Past the end of Kueue's requeuing backoff before the gate looks again (timestamps have
/// one-second resolution).
const BACKOFF_MARGIN: Duration = Duration::from_millis(100);

/// How soon a RayService whose slice stays charged for terminating pods is looked at again.
const PODS_HELD_RESYNC: Duration = Duration::from_secs(2);

/// Why this RayService is not decided on now, as the requeue to return; `None`: decide.
fn not_now(service: &RayService, ctx: &Context) -> Option<Action> {
    // Without the queue label a service raygate still has state or traces on is reconciled to
    // opt it out.
    let opted_in = gate::queue_name(service).is_some()
        || gate::has_state(service)
        || left_behind(service, ctx);
    if !opted_in || service.metadata.deletion_timestamp.is_some() {
        return Some(Action::await_change());
    }
    if !ctx.is_leader() {
        return Some(Action::requeue(Duration::from_secs(5)));
    }
    // never decide on a partial view: an empty RayCluster store would read as "no children"
    // (with the pod gate the Ray pods are one of the kinds: a slice shrinks only once its pods
    // are gone, so no decision before they are listed)
    let unsynced = ctx.stores.ready.pending();
    if !unsynced.is_empty() {
        tracing::debug!(rayservice = %format!("{}/{}", service.metadata.namespace.as_deref().unwrap_or_default(), service.metadata.name.as_deref().unwrap_or_default()), ?unsynced, "caches not synced: no decision yet");
        return Some(not_synced());
    }
    None
}

/// [`gate::left_behind`] on the stores' children and slices of `service`.
fn left_behind(service: &RayService, ctx: &Context) -> bool {
    let ns = service.metadata.namespace.clone().unwrap_or_default();
    let uid = service.metadata.uid.clone().unwrap_or_default();
    let children = ctx.stores.children_of(service);
    let children: Vec<&RayCluster> = children.iter().map(|c| c.as_ref()).collect();
    gate::left_behind(service, &children, &ctx.stores.slices_of(&ns, &uid))
}

/// What a reconcile read from the stores (no LIST) for one RayService.
struct Observed {
    ns: String,
    name: String,
    /// `ns/name`.
    key: String,
    /// The RayService, with this process's own Releases the store may not show yet laid over.
    service: Arc<RayService>,
    /// The released-children record laid over, when the store's lacks children this process
    /// released (its write lags, or failed).
    overlaid: Option<String>,
    children: Vec<RayCluster>,
    /// The Workloads it owns.
    workloads: Vec<Workload>,
    /// Its Ray pods, with the pod gate on.
    pods: Option<Vec<gate::pod_gate::PodView>>,
}

fn observe(ctx: &Context, service: Arc<RayService>) -> Observed {
    let ns = service.metadata.namespace.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    let uid = service.metadata.uid.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let children: Vec<RayCluster> = ctx
        .stores
        .children_of(&service)
        .iter()
        .map(|c| c.as_ref().clone())
        .collect();
    let live: BTreeSet<String> = children
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let (service, overlaid) = with_just_released(ctx, &key, service, &live);
    let workloads = ctx.stores.slices_of(&ns, &uid);
    let pods = if ctx.config.pod_gate {
        super::ungater::pods_of(ctx, &service, &children)
    } else {
        None
    };
    Observed {
        ns,
        name,
        key,
        service,
        overlaid,
        children,
        workloads,
        pods,
    }
}

/// What the gate decided, and on which time.
struct Plan {
    decision: GateDecision,
    /// One time for the whole reconcile: the decision and the writes agree on it.
    now: Timestamp,
}

fn decide(ctx: &Context, seen: &Observed) -> Plan {
    let now = ctx.clock.now();
    let opts = GateOptions {
        pod_gate: ctx.config.pod_gate,
        pods: seen.pods.clone(),
        mode: ctx.config.admission,
        priority_classes: ctx
            .stores
            .priority_classes
            .sorted_state()
            .iter()
            .filter_map(|p| Some((p.metadata.name.clone()?, p.spec.value)))
            .collect(),
        now: Some(now),
        flavors: ctx
            .stores
            .flavors
            .sorted_state()
            .iter()
            .filter_map(|f| Some((f.metadata.name.clone()?, f.spec.clone())))
            .collect(),
    };
    let children: Vec<&RayCluster> = seen.children.iter().collect();
    let decision = gate::decide(&seen.service, &children, &seen.workloads, &opts);
    Plan {
        decision: record_overlaid(decision, &seen.service, seen.overlaid.as_deref()),
        now,
    }
}

/// The decision, made to write the released-children record when it was decided on a record
/// laid over from memory (`overlaid`) and nothing in it writes the record: a release whose record
/// write failed is persisted even while the child is not covered (a grown child), so a restart
/// (which forgets the memory) never holds it as tampered.
fn record_overlaid(
    mut decision: GateDecision,
    service: &RayService,
    overlaid: Option<&str>,
) -> GateDecision {
    let Some(value) = overlaid else {
        return decision;
    };
    let records = decision.actions.iter().any(|a| {
        matches!(
            a,
            GateAction::Release { .. } | GateAction::RecordReleased { .. }
        )
    });
    if gate::queue_name(service).is_some() && decision.error.is_none() && !records {
        decision.actions.push(GateAction::RecordReleased {
            released: value.split(',').map(str::to_string).collect(),
        });
    }
    decision
}

/// What was applied of a decision.
struct Applied {
    /// How many of the decision's actions were applied (in order: the rest were not tried).
    actions: usize,
    /// The applied Releases, for the gate-latency metric.
    releases: Vec<Released>,
    /// The `PodsReady` condition written on the covering slice, if one was.
    pods_ready: Option<PodsReady>,
    result: Result<(), Error>,
}

/// A child unsuspended for a slice: the slice (`ns/name`), its `Admitted` time, and when the
/// unsuspend patch was sent.
struct Released {
    slice: String,
    admitted_at: Option<Timestamp>,
    at: Monotonic,
}

/// Applies the actions in order, then (all applied) deletes expired slices, then writes
/// Kueue's `PodsReady` on the covering slice (decided on what was applied: a Release just
/// applied shows next time).
async fn apply(ctx: &Context, seen: &Observed, plan: &Plan) -> Applied {
    let (ns, name) = (seen.ns.as_str(), seen.name.as_str());
    let actions = &plan.decision.actions;
    let mut decided = Decided {
        workloads: &seen.workloads,
        children: &seen.children,
        service_rv: seen.service.metadata.resource_version.clone(),
        releases: vec![],
        child_rvs: Default::default(),
    };
    let (applied, mut result) = apply_actions(ctx, ns, name, actions, &mut decided, plan.now).await;
    if result.is_ok() && applied == actions.len() {
        result = delete_expired_slices(ctx, ns, name, &seen.workloads, plan.now).await;
    }
    let released_now: BTreeSet<String> = actions[..applied]
        .iter()
        .filter_map(|a| match a {
            GateAction::Release { child, .. } => Some(child.clone()),
            _ => None,
        })
        .collect();
    let children: Vec<&RayCluster> = seen.children.iter().collect();
    let mut pods_ready = None;
    if result.is_ok()
        && let Some(pr) = gate::pods_ready::decide(
            &children,
            &released_now,
            gate::children::active_name(&seen.service),
            &seen.workloads,
        )
        && !seen
            .workloads
            .iter()
            .any(|w| w.metadata.name.as_deref() == Some(pr.slice.as_str()) && pr.is_set_on(w))
    {
        result = if ctx.is_leader() {
            apply::pods_ready(
                &ctx.client,
                ns,
                &pr,
                decided.workload_rv(&pr.slice),
                plan.now,
            )
            .await
        } else {
            Err(Error::NotLeader {
                name: seen.key.clone(),
            })
        };
        if result.is_ok() {
            pods_ready = Some(pr);
        }
    }
    Applied {
        actions: applied,
        releases: decided.releases,
        pods_ready,
        result,
    }
}

/// Every trace a reconcile leaves, in one place: the Events of what was applied (and the
/// observations), the gate-latency, duration, result and error metrics, and the log lines.
async fn report(ctx: &Context, seen: &Observed, plan: &Plan, applied: &Applied, start: Monotonic) {
    // an Event says a decision was applied only when it was
    let events = applied_events(&plan.decision, applied.actions);
    // an Event is a write too: a deposed leader leaves the telling to the new one
    let events = if ctx.is_leader() {
        events
    } else {
        if !events.is_empty() {
            tracing::info!(rayservice = %seen.key, events = events.len(), "not the leader (any more): Events not published");
        }
        vec![]
    };
    for ev in events {
        ctx.events
            .publish(
                &reference(&seen.service, &seen.children, ev.child.as_deref()),
                ev,
            )
            .await;
    }
    for r in &applied.releases {
        observe_gate_latency(ctx, r, plan.now);
    }
    if let Some(pr) = &applied.pods_ready {
        tracing::info!(workload = %format!("{}/{}", seen.ns, pr.slice), ready = pr.ready, reason = pr.reason, "PodsReady");
    }
    let pending = seen
        .workloads
        .iter()
        .filter(|w| {
            !workload::is_finished(w.status.as_ref()) && !workload::holds_quota(w.status.as_ref())
        })
        .count();
    tracing::debug!(rayservice = %seen.key, children = seen.children.len(), pending, actions = plan.decision.actions.len(), "reconciled");
    ctx.metrics
        .reconcile_duration
        .observe(ctx.clock.monotonic().saturating_since(start).as_secs_f64());
    let label = if applied.result.is_ok() {
        "ok"
    } else {
        "error"
    };
    ctx.metrics
        .reconciles
        .get_or_create(&ResultLabels {
            result: label.into(),
        })
        .inc();
    match &applied.result {
        Ok(()) => {
            if let Ok(mut f) = ctx.failures.lock() {
                f.succeeded(seen.key.as_str());
            }
        }
        Err(e) => {
            ctx.metrics
                .errors
                .get_or_create(&StepLabels {
                    step: e.metric_label().into(),
                })
                .inc();
        }
    }
}

/// The service with the children this process released laid over its released-children
/// record (see [`overlay_released`]); forgets them once the store shows the record.
fn with_just_released(
    ctx: &Context,
    key: &str,
    service: Arc<RayService>,
    live: &BTreeSet<String>,
) -> (Arc<RayService>, Option<String>) {
    let Ok(mut map) = ctx.just_released.lock() else {
        return (service, None);
    };
    let Some(just) = map.get_mut(key) else {
        return (service, None);
    };
    let recorded = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(gate::RELEASED_ANNOTATION))
        .map(String::as_str);
    let (annotation, still) = overlay_released(recorded, just, live);
    if still.is_empty() {
        map.forget(key);
    } else {
        *just = still;
    }
    match annotation {
        None => (service, None),
        Some(value) => {
            tracing::debug!(rayservice = %key, released = %value, "the store lags the released-children record: using this process's own");
            let mut s = service.as_ref().clone();
            s.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(gate::RELEASED_ANNOTATION.to_string(), value.clone());
            (Arc::new(s), Some(value))
        }
    }
}

/// The released-children record to decide on when the store's copy of the RayService may lag
/// this process's own Releases: `recorded` (the store's annotation) plus the children in `just`
/// (released here) that are still live and missing from it. Returns the annotation value to use
/// (`None`: the store's is complete) and the children that still need laying over.
///
/// Without it, a reconcile that sees the child unsuspended (its watch is ahead) but the
/// RayService annotation not yet updated (its watch is behind) would hold the child as
/// tampered right after releasing it.
pub(crate) fn overlay_released(
    recorded: Option<&str>,
    just: &BTreeSet<String>,
    live: &BTreeSet<String>,
) -> (Option<String>, BTreeSet<String>) {
    // never recorded: the gate grandfathers every running child anyway
    let Some(recorded) = recorded else {
        return (None, just.intersection(live).cloned().collect());
    };
    let have: BTreeSet<&str> = recorded.split(',').filter(|n| !n.is_empty()).collect();
    let missing: BTreeSet<String> = just
        .intersection(live)
        .filter(|n| !have.contains(n.as_str()))
        .cloned()
        .collect();
    if missing.is_empty() {
        return (None, missing);
    }
    let all: BTreeSet<&str> = have
        .into_iter()
        .chain(missing.iter().map(String::as_str))
        .collect();
    (Some(all.into_iter().collect::<Vec<_>>().join(",")), missing)
}

/// The decision's Events that may be published when only its first `applied` actions were
/// applied: an Event that announces an action ([`GateDecision::announces`]) goes only when that
/// action was applied; the others (`Holding`, `InvalidPodSets`) are observations, always published.
pub(crate) fn applied_events(decision: &GateDecision, applied: usize) -> Vec<&Event> {
    decision
        .events
        .iter()
        .enumerate()
        .filter(|(i, _)| decision.announces(*i).is_none_or(|a| a < applied))
        .map(|(_, ev)| ev)
        .collect()
}

/// Applies the actions in order, stopping at the first failure; returns how many were applied.
async fn apply_actions(
    ctx: &Context,
    ns: &str,
    name: &str,
    actions: &[GateAction],
    decided: &mut Decided<'_>,
    now: Timestamp,
) -> (usize, Result<(), Error>) {
    for (i, action) in actions.iter().enumerate() {
        // a deposed leader stops writing at once, even mid-decision
        if !ctx.is_leader() {
            return (
                i,
                Err(Error::NotLeader {
                    name: format!("{ns}/{name}"),
                }),
            );
        }
        if let Err(e) = apply_action(ctx, ns, name, action, decided, now).await {
            return (i, Err(e));
        }
    }
    (actions.len(), Ok(()))
}

/// The objects a decision was made on: writes carry their `resourceVersion`, so a write on an
/// object that changed since fails with 409 and the next reconcile re-decides.
struct Decided<'a> {
    workloads: &'a [Workload],
    children: &'a [RayCluster],
    /// The RayService's version: decided on, then the one each of its patches returned.
    service_rv: Option<String>,
    /// The Releases applied so far.
    releases: Vec<Released>,
    /// The versions this decision's own patches of a child returned: a later write of the same
    /// child (a Release after its flavors' patch) is conditioned on them, not on the stale one.
    child_rvs: std::collections::BTreeMap<String, String>,
}

impl Decided<'_> {
    fn workload_rv(&self, name: &str) -> Option<&str> {
        self.workloads
            .iter()
            .find(|w| w.metadata.name.as_deref() == Some(name))
            .and_then(|w| w.metadata.resource_version.as_deref())
    }

    fn child_rv(&self, name: &str) -> Option<&str> {
        if let Some(rv) = self.child_rvs.get(name) {
            return Some(rv);
        }
        self.children
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .and_then(|c| c.metadata.resource_version.as_deref())
    }
}

async fn apply_action(
    ctx: &Context,
    ns: &str,
    name: &str,
    action: &GateAction,
    decided: &mut Decided<'_>,
    now: Timestamp,
) -> Result<(), Error> {
    match action {
        GateAction::Slice(a) => {
            let rv = match a {
                SliceAction::SetPodSets { name, .. }
                | SliceAction::SetPriority { name, .. }
                | SliceAction::Finish { name, .. } => decided.workload_rv(name),
                SliceAction::Create { .. } => None,
            };
            apply::slice(&ctx.client, ns, a, rv, now).await?
        }
        GateAction::Release {
            child,
            released,
            slice,
            admitted_at,
        } => {
            release(
                ctx,
                ns,
                name,
                (child, released, slice, *admitted_at),
                decided,
            )
            .await?
        }
        GateAction::Hold { child } => {
            apply::child_suspend(&ctx.client, ns, child, true, decided.child_rv(child)).await?
        }
        GateAction::OptOutChild { child, unsuspend } => {
            apply::opt_out_child(&ctx.client, ns, child, *unsuspend).await?
        }
        GateAction::PatchChild { child, patch } => {
            if let Some(rv) = apply::patch_child(&ctx.client, ns, child, patch).await? {
                decided.child_rvs.insert(child.clone(), rv);
            }
        }
        // every other action is one patch of the RayService, on the version decided on
        service => {
            if let Some((what, body)) = apply::service_patch(service) {
                decided.service_rv = apply::patch_service_at(
                    &ctx.client,
                    ns,
                    name,
                    what,
                    body,
                    decided.service_rv.as_deref(),
                )
                .await?
            }
        }
    }
    Ok(())
}

/// A child released: unsuspended, remembered, then recorded on the RayService.
async fn release(
    ctx: &Context,
    ns: &str,
    name: &str,
    (child, released, slice, admitted_at): (&String, &[String], &String, Option<Timestamp>),
    decided: &mut Decided<'_>,
) -> Result<(), Error> {
    apply::child_suspend(&ctx.client, ns, child, false, decided.child_rv(child)).await?;
    // remembered before the record is written: the record may fail or lag
    if let Ok(mut m) = ctx.just_released.lock() {
        let key = format!("{ns}/{name}");
        match m.get_mut(key.as_str()) {
            Some(children) => {
                children.insert(child.clone());
            }
            None => m.assume(key, BTreeSet::from([child.clone()])),
        }
    }
    decided.releases.push(Released {
        slice: format!("{ns}/{slice}"),
        admitted_at,
        at: ctx.clock.monotonic(),
    });
    // two writes in one action: a leader deposed during the first writes no second
    // (the next leader records the running, covered child itself)
    if !ctx.is_leader() {
        return Err(Error::NotLeader {
            name: format!("{ns}/{name}"),
        });
    }
    decided.service_rv = apply::record_released(
        &ctx.client,
        ns,
        name,
        released,
        decided.service_rv.as_deref(),
    )
    .await?;
    Ok(())
}

/// Deletes the owner's finished slices past the retention ([`slices::expired`]), one log line each.
async fn delete_expired_slices(
    ctx: &Context,
    ns: &str,
    name: &str,
    workloads: &[Workload],
    now: Timestamp,
) -> Result<(), Error> {
    let Some(retention) = &ctx.config.finished_slice_retention else {
        return Ok(());
    };
    for slice in slices::expired(workloads, now, retention) {
        if !ctx.is_leader() {
            return Err(Error::NotLeader {
                name: format!("{ns}/{slice}"),
            });
        }
        apply::delete_slice(&ctx.client, ns, &slice).await?;
        tracing::info!(rayservice = %format!("{ns}/{name}"), slice = %slice, after_finished_seconds = retention.after_finished.as_secs(), "deleted finished slice past its retention");
    }
    Ok(())
}

/// Slice admitted → unsuspend patch sent: exact when this process admitted it, else from the
/// `Admitted` condition (one-second resolution).
fn observe_gate_latency(ctx: &Context, r: &Released, now: Timestamp) {
    let local = ctx
        .admitted_at
        .lock()
        .ok()
        .and_then(|m| m.get(&r.slice).copied());
    let seconds = match (local, r.admitted_at) {
        (Some(at), _) => Some(r.at.saturating_since(at).as_secs_f64()),
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
    // the error metric is counted by `report`
    if let Error::NotLeader { .. } = error {
        return Action::requeue(Duration::from_secs(5));
    }
    // the object changed since the decision: re-read and re-decide, not a persistent error
    if error.is_conflict() {
        return Action::requeue(Duration::from_millis(200));
    }
    let key = format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    );
    let now = ctx.clock.monotonic();
    let wait = ctx
        .failures
        .lock()
        .map(|mut f| f.failed(key, now).wait(now))
        .unwrap_or(crate::runtime::backoff_delay(1));
    Action::requeue(wait)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{applied_events, overlay_released, record_overlaid};
    use crate::events::{Event, EventType};
    use crate::gate::{GateAction, GateDecision};

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_just_released_child_is_laid_over_a_stale_record() {
        // released b; the store's RayService still shows only a
        let (ann, still) = overlay_released(Some("a"), &set(&["b"]), &set(&["a", "b"]));
        assert_eq!(ann.as_deref(), Some("a,b"));
        assert_eq!(still, set(&["b"]));
        // the store caught up: nothing to lay over, nothing to remember
        let (ann, still) = overlay_released(Some("a,b"), &set(&["b"]), &set(&["a", "b"]));
        assert_eq!(ann, None);
        assert!(still.is_empty());
        // an empty record
        let (ann, _) = overlay_released(Some(""), &set(&["b"]), &set(&["b"]));
        assert_eq!(ann.as_deref(), Some("b"));
    }

    /// Issue #9 (b): a record decided on from memory is written even when nothing else in the
    /// decision writes it (the released child grew past its slice, so no `RecordReleased`).
    #[test]
    fn a_record_laid_over_from_memory_is_written() {
        let svc: crate::types::ray::RayService = serde_json::from_value(serde_json::json!({
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"rayClusterConfig": {"headGroupSpec": {"template": {}}}}
        }))
        .unwrap();
        let d = record_overlaid(GateDecision::default(), &svc, Some("a,b"));
        assert_eq!(
            d.actions,
            [GateAction::RecordReleased {
                released: vec!["a".into(), "b".into()]
            }]
        );
        // the store's record is complete: nothing added
        assert!(
            record_overlaid(GateDecision::default(), &svc, None)
                .actions
                .is_empty()
        );
        // a decision that writes the record anyway: not twice
        let mut d = GateDecision::default();
        d.actions.push(release("c"));
        assert_eq!(record_overlaid(d, &svc, Some("a,b")).actions.len(), 1);
        // opted out meanwhile: the opt-out removes the record, it is not written back
        let mut out = svc.clone();
        out.metadata.labels = None;
        assert!(
            record_overlaid(GateDecision::default(), &out, Some("a,b"))
                .actions
                .is_empty()
        );
    }

    fn conflict() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("the object has been modified", "Conflict")
                .with_code(409)
                .boxed(),
        )
    }

    /// Issue #31: the opt-out's last patch leaves the opted-out marker (so later children are
    /// released too) and opting in again removes it.
    #[test]
    fn the_opt_out_marker_is_left_by_the_opt_out_and_removed_by_opting_in() {
        use crate::gate::OPTED_OUT_ANNOTATION;
        let (_, out) = super::apply::service_patch(&GateAction::OptOut {
            resume: false,
            pod_templates: None,
        })
        .unwrap();
        assert_eq!(
            out["metadata"]["annotations"][OPTED_OUT_ANNOTATION],
            serde_json::json!("true")
        );
        let (_, gate) =
            super::apply::service_patch(&GateAction::GateTemplate { released: vec![] }).unwrap();
        let annotations = gate["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(
            annotations.get(OPTED_OUT_ANNOTATION),
            Some(&serde_json::Value::Null)
        );
    }

    /// Issue #31: a 409 on a child's flavor (or pod gate) patch or on an opt-out patch is a
    /// re-read and re-decide (requeue in 0.2 s), not a failure backed off up to 5 minutes.
    #[test]
    fn a_409_on_a_child_patch_is_a_conflict() {
        use crate::controller::Error;
        let name = "ns/svc-a".to_string();
        for e in [
            Error::PatchChildFlavors {
                name: name.clone(),
                source: conflict(),
            },
            Error::OptOutChild {
                name: name.clone(),
                source: conflict(),
            },
            Error::PatchChildSuspend {
                name: name.clone(),
                suspend: false,
                source: conflict(),
            },
        ] {
            assert!(e.is_conflict(), "{e}");
        }
    }

    /// Issue #31: a Release right after the child's flavor patch in the same decision is
    /// conditioned on the version that patch returned, not on the one decided on (a certain 409).
    #[test]
    fn a_child_s_later_write_uses_the_version_its_patch_returned() {
        let child: crate::types::ray::RayCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "svc-a", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"headGroupSpec": {"template": {}}}
        }))
        .unwrap();
        let children = [child];
        let mut decided = super::Decided {
            workloads: &[],
            children: &children,
            service_rv: None,
            releases: vec![],
            child_rvs: Default::default(),
        };
        assert_eq!(decided.child_rv("svc-a"), Some("7"));
        decided.child_rvs.insert("svc-a".into(), "9".into());
        assert_eq!(decided.child_rv("svc-a"), Some("9"));
        assert_eq!(decided.child_rv("svc-b"), None);
    }

    #[test]
    fn a_released_child_that_is_gone_is_forgotten() {
        let (ann, still) = overlay_released(Some("a"), &set(&["b"]), &set(&["a"]));
        assert_eq!(ann, None);
        assert!(still.is_empty());
    }

    fn ev(reason: &'static str) -> Event {
        Event {
            type_: EventType::Normal,
            reason,
            message: String::new(),
            child: None,
        }
    }

    fn release(child: &str) -> GateAction {
        GateAction::Release {
            child: child.into(),
            released: vec![],
            slice: "s".into(),
            admitted_at: None,
        }
    }

    #[test]
    fn an_event_is_published_only_for_an_applied_action() {
        let decision = GateDecision {
            actions: vec![
                GateAction::GateTemplate { released: vec![] },
                release("a"),
                release("b"),
                GateAction::Hold { child: "c".into() },
            ],
            // the Released Events come before their actions' positions would suggest: the
            // pairing, not the order or the reason, links them
            events: vec![
                ev("Released"),
                ev("TemplateGated"),
                ev("Released"),
                ev("Holding"),
                ev("Tampered"),
            ],
            announced: vec![(0, 2), (1, 0), (2, 1), (4, 3)],
            ..Default::default()
        };
        let reasons = |applied| -> Vec<&str> {
            applied_events(&decision, applied)
                .iter()
                .map(|e| e.reason)
                .collect()
        };
        assert_eq!(
            reasons(4),
            vec![
                "Released",
                "TemplateGated",
                "Released",
                "Holding",
                "Tampered"
            ]
        );
        // the second release (b, announced by the first Released Event) failed: its Event and
        // the later ones' are not published; an observation (Holding) still is
        assert_eq!(reasons(2), vec!["TemplateGated", "Released", "Holding"]);
        assert_eq!(reasons(0), vec!["Holding"]);
    }
}
