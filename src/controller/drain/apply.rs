//! The drain's writes (IO): evictions through the Eviction API (never a delete), node patches
//! (cordon, taints, hand-off label, uncordon) under the field manager [`DRAIN_MANAGER`], and an
//! Event per report. A write that fails is logged; the next step, deciding again on the cluster as
//! it is then, sends it again.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Taint};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use k8s_openapi::jiff::SignedDuration;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::DRAIN_MANAGER;
use crate::controller::events::EventSink;
use crate::drain::engine::{Action, EvictTarget, EvictionResult, Outcome};
use crate::drain::engine::{KUBERAY_SPEC_HASH, MOVE_MARK, MOVED_BY};
use crate::events::{Event, EventType};
use crate::runtime::Clock;
use crate::types::ray::RayCluster;

/// Applies node `actions` (cordon, taint, hand-off label, uncordon) once, as the drain loop does,
/// on `nodes` as they were read: a write that fails is logged, and the caller, deciding again on
/// the nodes as they are then, sends it again.
pub(super) async fn apply_node_actions(
    client: Client,
    clock: Arc<dyn Clock>,
    actions: &[Action],
    nodes: &[Node],
) {
    Apply::new(client, clock).all(actions, nodes).await;
}

pub(super) struct Apply {
    client: Client,
    nodes: Api<Node>,
    events: EventSink,
}

impl Apply {
    pub(super) fn new(client: Client, clock: Arc<dyn Clock>) -> Self {
        let instance = std::env::var("POD_NAME").unwrap_or_else(|_| DRAIN_MANAGER.into());
        Apply {
            nodes: Api::all(client.clone()),
            events: EventSink::new(client.clone(), clock, instance),
            client,
        }
    }

    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(DRAIN_MANAGER.into()),
            ..PatchParams::default()
        }
    }

    /// Applies `actions` in order; returns the evictions' outcomes.
    pub(super) async fn all(&mut self, actions: &[Action], nodes: &[Node]) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        for action in actions {
            match action {
                Action::Cordon { node } => {
                    self.patch(node, "cordon", json!({"spec": {"unschedulable": true}}))
                        .await
                }
                Action::Taint { node, taint } => {
                    let mut taints = current_taints(nodes, node);
                    taints.push(taint.clone());
                    self.patch_taints(nodes, node, "taint", taints).await;
                }
                Action::LabelForUpgrade { node, key, value } => {
                    self.patch(
                        node,
                        "label for upgrade",
                        json!({"metadata": {"labels": {key: value}}}),
                    )
                    .await
                }
                Action::Uncordon {
                    node,
                    keep_cordon,
                    remove_taint,
                    remove_label,
                } => {
                    let patch = uncordon_patch(
                        nodes,
                        node,
                        *keep_cordon,
                        remove_taint.as_ref(),
                        remove_label.as_deref(),
                    );
                    self.patch(node, "uncordon", patch).await
                }
                Action::Evict { target, dry_run } => {
                    let result = self.evict(target, *dry_run).await;
                    outcomes.push(Outcome {
                        target: target.clone(),
                        result,
                    });
                }
                Action::Report {
                    node,
                    type_,
                    reason,
                    message,
                } => self.report(node, *type_, reason, message).await,
                Action::ReportService {
                    namespace,
                    service,
                    type_,
                    reason,
                    message,
                } => {
                    let on = rayservice_ref(namespace, service);
                    self.publish(&on, *type_, reason, message).await
                }
                Action::MoveRayService {
                    namespace,
                    service,
                    cluster,
                    by,
                } => self.mark_for_move(namespace, service, cluster, by).await,
            }
        }
        outcomes
    }

    /// Marks a RayService's active cluster so that KubeRay moves the service to a new cluster
    /// (server-side apply of two annotations under [`DRAIN_MANAGER`]: the RayService, the
    /// object a GitOps tool manages, is not touched; the marked cluster is deleted by KubeRay
    /// once the move is done).
    async fn mark_for_move(&self, namespace: &str, service: &str, cluster: &str, by: &str) {
        let patch = json!({
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {
                "name": cluster,
                "namespace": namespace,
                "annotations": {KUBERAY_SPEC_HASH: MOVE_MARK, MOVED_BY: by},
            },
        });
        let params = PatchParams::apply(DRAIN_MANAGER).force();
        let api: Api<RayCluster> = Api::namespaced(self.client.clone(), namespace);
        match api.patch(cluster, &params, &Patch::Apply(&patch)).await {
            Ok(_) => tracing::info!(namespace, service, cluster, "drain: RayService move asked"),
            Err(e) => {
                tracing::warn!(namespace, service, cluster, error = %e, "drain: marking the cluster for a move failed; retried")
            }
        }
    }

    async fn patch(&self, node: &str, step: &str, patch: serde_json::Value) {
        match self
            .nodes
            .patch(node, &Self::params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(node, "drain: {step}"),
            // the engine sees the node as it is at the next step and decides again
            Err(e) => tracing::warn!(node, error = %e, "drain: {step} failed; retried"),
        }
    }

    /// The whole taint list, guarded by the resourceVersion it was computed from (a taint added
    /// meanwhile by someone else is a 409, and the next step recomputes).
    async fn patch_taints(&self, nodes: &[Node], node: &str, step: &str, taints: Vec<Taint>) {
        let patch = json!({
            "metadata": {"resourceVersion": resource_version(nodes, node)},
            "spec": {"taints": taints},
        });
        self.patch(node, step, patch).await
    }

    async fn evict(&self, t: &EvictTarget, dry_run: bool) -> EvictionResult {
        let result = match self.send_eviction(t, dry_run).await {
            Ok((code, retry_after, body)) => eviction_result(code, retry_after, &body),
            Err(e) => EvictionResult::Failed {
                code: 0,
                message: e.to_string(),
            },
        };
        match &result {
            EvictionResult::Evicted => {
                tracing::info!(pod = %t.pod, node = %t.pod.node, pdb = ?t.pdb, dry_run, "drain: evicted")
            }
            EvictionResult::Gone => tracing::info!(pod = %t.pod, "drain: already gone"),
            EvictionResult::TooManyRequests { message, .. } => {
                tracing::info!(pod = %t.pod, pdb = ?t.pdb, "drain: eviction refused (429): {message}")
            }
            EvictionResult::Throttled { retry_after } => {
                tracing::info!(pod = %t.pod, ?retry_after, "drain: eviction throttled by the API server (429)")
            }
            EvictionResult::Failed { code, message } => {
                tracing::warn!(pod = %t.pod, code, "drain: eviction failed: {message}")
            }
        }
        result
    }

    /// POSTs the Eviction and returns the answer's code, `Retry-After` header and body as they
    /// came: a throttling 429 carries its wait only in the header, which `kube::Error` drops.
    async fn send_eviction(
        &self,
        t: &EvictTarget,
        dry_run: bool,
    ) -> Result<(u16, Option<u64>, Vec<u8>), kube::Error> {
        let post = PostParams {
            dry_run,
            ..PostParams::default()
        };
        let body = serde_json::to_vec(&eviction(t, dry_run)).map_err(kube::Error::SerdeError)?;
        let url = format!("/api/v1/namespaces/{}/pods", t.pod.namespace);
        let request = kube::core::Request::new(url)
            .create_subresource("eviction", &t.pod.name, &post, body)
            .map_err(kube::Error::BuildRequest)?;
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await?;
        let code = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = response.into_body().collect_bytes().await?;
        Ok((code, retry_after, bytes.to_vec()))
    }

    async fn report(&mut self, node: &str, type_: EventType, reason: &'static str, message: &str) {
        if node.is_empty() {
            match type_ {
                EventType::Normal => tracing::info!(reason, "{message}"),
                EventType::Warning => tracing::warn!(reason, "{message}"),
            }
            return;
        }
        let on = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        };
        self.publish(&on, type_, reason, message).await;
    }

    /// An Event on `on` (logged too, stamped with the injected clock).
    async fn publish(
        &mut self,
        on: &ObjectReference,
        type_: EventType,
        reason: &'static str,
        message: &str,
    ) {
        let event = Event {
            type_,
            reason,
            message: message.to_string(),
            child: None,
        };
        self.events.publish(on, &event).await;
    }
}

/// The patch that gives a node back: the cordon lifted (unless kept), raygate's taint and upgrade
/// label removed; a taint change carries the node's `resourceVersion` (the taint list is replaced).
fn uncordon_patch(
    nodes: &[Node],
    node: &str,
    keep_cordon: bool,
    remove_taint: Option<&Taint>,
    remove_label: Option<&str>,
) -> serde_json::Value {
    let mut patch = match keep_cordon {
        true => json!({"spec": {}}),
        false => json!({"spec": {"unschedulable": null}}),
    };
    if let Some(key) = remove_label {
        patch["metadata"] = json!({"labels": {key: null}});
    }
    if let Some(t) = remove_taint {
        let taints: Vec<Taint> = current_taints(nodes, node)
            .into_iter()
            .filter(|x| !(x.key == t.key && x.effect == t.effect))
            .collect();
        patch["spec"]["taints"] = json!(taints);
        patch["metadata"]["resourceVersion"] = json!(resource_version(nodes, node));
    }
    patch
}

/// A RayService as an Event's object.
fn rayservice_ref(namespace: &str, service: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("ray.io/v1".into()),
        kind: Some("RayService".into()),
        namespace: Some(namespace.to_string()),
        name: Some(service.to_string()),
        ..ObjectReference::default()
    }
}

/// What an eviction's answer means for the engine. A 429 is a budget's refusal only with a
/// `DisruptionBudget` cause (`pkg/registry/core/pod/storage/eviction.go` sets one on every budget
/// 429); any other 429 is the API server's own throttling (the max-in-flight and
/// priority-and-fairness filters answer in plain text with `Retry-After`).
fn eviction_result(code: u16, retry_after: Option<u64>, body: &[u8]) -> EvictionResult {
    let header = retry_after
        .filter(|&s| s > 0)
        .map(|s| SignedDuration::from_secs(i64::try_from(s).unwrap_or(i64::MAX)));
    if (200..300).contains(&code) {
        return EvictionResult::Evicted;
    }
    let status: Option<kube::core::Status> = serde_json::from_slice(body).ok();
    let message = status.as_ref().map_or_else(
        || String::from_utf8_lossy(body).trim().to_string(),
        |s| s.message.clone(),
    );
    match code {
        404 => EvictionResult::Gone,
        429 => {
            let details = status.as_ref().and_then(|s| s.details.as_ref());
            // the budget's own words are in the cause; the top message is generic
            let cause = details
                .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"))
                .map(|c| c.message.clone());
            let retry = details
                .map(|d| d.retry_after_seconds)
                .filter(|&s| s > 0)
                .map(|s| SignedDuration::from_secs(i64::from(s)))
                .or(header);
            match cause {
                Some(message) => EvictionResult::TooManyRequests {
                    message,
                    retry_after: retry,
                },
                None => EvictionResult::Throttled { retry_after: retry },
            }
        }
        _ => EvictionResult::Failed { code, message },
    }
}

fn find<'a>(nodes: &'a [Node], name: &str) -> Option<&'a Node> {
    nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
}

fn current_taints(nodes: &[Node], node: &str) -> Vec<Taint> {
    find(nodes, node)
        .and_then(|n| n.spec.as_ref())
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn resource_version(nodes: &[Node], node: &str) -> Option<String> {
    find(nodes, node).and_then(|n| n.metadata.resource_version.clone())
}

/// The Eviction sent for `t`: the pod's uid as a precondition (a pod recreated under the same name
/// is not evicted by mistake), the dry run and `--grace-period` (kubectl's `makeDeleteOptions`:
/// `gracePeriodSeconds` only when one is given), in the body's `deleteOptions` as the API server
/// reads them. kube 5's `Api::evict` writes them under `delete_options`, which the server ignores.
fn eviction(t: &EvictTarget, dry_run: bool) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(t.pod.name.clone()),
            namespace: Some(t.pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            dry_run: dry_run.then(|| vec!["All".to_string()]),
            grace_period_seconds: t.grace_period_seconds.and_then(|s| i64::try_from(s).ok()),
            preconditions: t.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        }),
    }
}

#[cfg(test)]
mod eviction_tests {
    use super::*;

    #[test]
    fn a_429_is_a_budget_s_refusal_only_with_its_cause_and_throttling_keeps_the_header_s_wait() {
        // the priority-and-fairness filter: plain text, the wait only in the header
        let throttled = eviction_result(
            429,
            Some(1),
            b"Too many requests, please try again later.\n",
        );
        assert_eq!(
            throttled,
            EvictionResult::Throttled {
                retry_after: Some(SignedDuration::from_secs(1))
            }
        );
        // eviction.go's refusal: a Status whose cause names the budget
        let refusal = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests", "code": 429,
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget leaders needs 4 healthy pods and has 4 currently"}]}});
        let body = serde_json::to_vec(&refusal).unwrap();
        assert_eq!(
            eviction_result(429, None, &body),
            EvictionResult::TooManyRequests {
                message: "The disruption budget leaders needs 4 healthy pods and has 4 currently"
                    .into(),
                retry_after: None
            }
        );
        // a budget still being processed: its retryAfterSeconds
        let mut processing = refusal.clone();
        processing["details"]["retryAfterSeconds"] = json!(10);
        let body = serde_json::to_vec(&processing).unwrap();
        let EvictionResult::TooManyRequests { retry_after, .. } =
            eviction_result(429, Some(10), &body)
        else {
            panic!("not a refusal");
        };
        assert_eq!(retry_after, Some(SignedDuration::from_secs(10)));
        // a JSON 429 without a budget's cause is no budget's either
        let other = json!({"kind": "Status", "code": 429, "message": "slow down"});
        let body = serde_json::to_vec(&other).unwrap();
        assert_eq!(
            eviction_result(429, None, &body),
            EvictionResult::Throttled { retry_after: None }
        );
        assert_eq!(eviction_result(201, None, b"{}"), EvictionResult::Evicted);
        assert_eq!(eviction_result(404, None, b"{}"), EvictionResult::Gone);
        let forbidden = json!({"kind": "Status", "code": 403, "message": "pods is forbidden"});
        assert_eq!(
            eviction_result(403, None, &serde_json::to_vec(&forbidden).unwrap()),
            EvictionResult::Failed {
                code: 403,
                message: "pods is forbidden".into()
            }
        );
    }

    #[test]
    fn the_eviction_body_carries_the_uid_precondition_and_dry_run_where_the_server_reads_them() {
        let plan_pod = crate::drain::PodRef {
            namespace: "ns".into(),
            name: "leader-0".into(),
            node: "n1".into(),
        };
        let t = EvictTarget {
            pod: plan_pod,
            uid: Some("u-1".into()),
            pdb: None,
            group: None,
            grace_period_seconds: None,
        };
        let body = serde_json::to_value(eviction(&t, true)).expect("serialises");
        assert_eq!(body["apiVersion"], "policy/v1");
        assert_eq!(body["kind"], "Eviction");
        assert_eq!(body["metadata"]["name"], "leader-0");
        assert_eq!(body["deleteOptions"]["preconditions"]["uid"], "u-1");
        assert_eq!(body["deleteOptions"]["dryRun"], serde_json::json!(["All"]));
        assert!(body.get("delete_options").is_none());
        // kubectl's --grace-period=-1 sends none: the pod's own grace period
        assert!(body["deleteOptions"].get("gracePeriodSeconds").is_none());
        let t = EvictTarget {
            grace_period_seconds: Some(15),
            ..t
        };
        let body = serde_json::to_value(eviction(&t, false)).expect("serialises");
        assert_eq!(body["deleteOptions"]["gracePeriodSeconds"], 15);
        assert!(body["deleteOptions"].get("dryRun").is_none());
    }
}
