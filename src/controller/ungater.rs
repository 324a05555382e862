//! The pod ungater (IO): lifts [`POD_GATE`] from the pods of opted-in RayServices' children that
//! the newest admitted slice grants ([`pod_gate::ungate`] decides), and from every pod of a
//! RayService without the queue label (opted out: nothing holds it any more).
//!
//! Observe: Ray pods ([`super::stores::RAY_PODS`]), RayServices, RayClusters and Workloads from
//! the controller's stores. Apply: a JSON patch per pod whose
//! `test` op pins the gate list it read, so a pod whose gates changed since is left for the next
//! pass (422), never ungated twice or with another writer's gate dropped. Pods this process
//! ungated count as ungated until the watch shows it, so a lagging cache never lets a second pass
//! exceed the grant; a restarted process starts from a fresh LIST. Trace: an `Ungated` Event on
//! the RayService and a log line per pod.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;

use super::runner::Pass;
use super::{Context, Monotonic};
use crate::events::{Event, EventType};
use crate::gate::pod_gate::{self, POD_GATE, PodView};
use crate::gate::pods_held;
use crate::podsets::pod_requests;
use crate::runtime::{Assumed, SortedState};
use crate::types::ray::RayService;
use crate::workload;

/// How often the ungater looks again without a pod change (a slice admitted, a store caught up).
pub(super) const RESYNC: Duration = Duration::from_secs(2);
const CLUSTER_LABEL: &str = "ray.io/cluster";
const GROUP_LABEL: &str = "ray.io/group";

pub(super) fn gates(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .map(|g| g.iter().map(|g| g.name.clone()).collect())
        .unwrap_or_default()
}

/// Per-pod requests by `(cluster, group)` from the children's templates
/// ([`pod_gate::template_requests`]).
pub(super) type Shapes = std::collections::HashMap<(String, String), crate::quantity::Resources>;

/// The ungater's view of a pod: its requests as its child's template for its group charges them
/// (`shapes`); for a pod whose child is gone, its own without what KubeRay added to it
/// ([`pod_gate::as_templated`]) (`None`: they cannot be read; it stays gated).
pub(super) fn view(p: &Pod, ungated_here: &UngatedHere, shapes: &Shapes) -> Option<PodView> {
    let name = p.metadata.name.clone()?;
    let spec = p.spec.as_ref()?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    let group = crate::meta::label(&p.metadata, GROUP_LABEL)?.to_string();
    let cluster = crate::meta::label(&p.metadata, CLUSTER_LABEL).unwrap_or_default();
    let requests = match shapes.get(&(cluster.to_string(), group.clone())) {
        Some(r) => r.clone(),
        None => pod_requests(&pod_gate::as_templated(spec), "spec", &name).ok()?,
    };
    Some(PodView {
        requests,
        group,
        created: p.metadata.creation_timestamp.as_ref()?.0,
        gated: gates(p).iter().any(|g| g == POD_GATE) && ungated_here.get(uid.as_str()).is_none(),
        finished: matches!(phase, Some("Succeeded" | "Failed")),
        deleted_at: p.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        name,
    })
}

/// The pods of `service`'s children `live`, and of deleted ones (found by their cluster's name,
/// [`pods_held::belongs`]), from the pods' index, in (cluster, name) order.
fn service_pods(ctx: &Context, service: &RayService, live: &BTreeSet<String>) -> Vec<Arc<Pod>> {
    let (Some(store), Some(index)) = (&ctx.stores.pods, &ctx.stores.pods_by_cluster) else {
        return Vec::new();
    };
    let ns = service.metadata.namespace.as_deref().unwrap_or_default();
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let candidates = index.keys_with_prefix(ns, &format!("{name}-"));
    let known: BTreeSet<String> = candidates
        .iter()
        .filter(|c| ctx.stores.cluster_exists(ns, c))
        .cloned()
        .collect();
    let clusters: BTreeSet<&String> = live
        .iter()
        .chain(
            candidates
                .iter()
                .filter(|c| pods_held::belongs(name, c, live, &known)),
        )
        .collect();
    clusters
        .into_iter()
        .flat_map(|c| index.objects(store, ns, c))
        .collect()
}

/// The names of `service`'s live children.
fn child_names(ctx: &Context, service: &RayService) -> BTreeSet<String> {
    ctx.stores
        .children_of(service)
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

/// A pod to ungate, with its gates as read.
type Picked = (Arc<Pod>, Vec<String>);

/// Every gated pod of a RayService without the queue label (opted out, or never in: only raygate
/// puts [`POD_GATE`] on, so nothing else would ever lift it), except pods being deleted.
fn decide_opted_out(
    ctx: &Context,
    service: &RayService,
    ungated_here: &UngatedHere,
) -> Vec<Picked> {
    service_pods(ctx, service, &child_names(ctx, service))
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            ungated_here
                .get(p.metadata.uid.as_deref().unwrap_or_default())
                .is_none()
        })
        .filter(|p| gates(p).iter().any(|g| g == POD_GATE))
        .map(|p| (p.clone(), gates(p)))
        .collect()
}

/// The pods to ungate for one opted-in RayService: `(pod, its gates as read)`, and the slice
/// that grants them.
fn decide(
    ctx: &Context,
    service: &RayService,
    ungated_here: &UngatedHere,
) -> (Vec<Picked>, Option<String>) {
    let ns = service.metadata.namespace.clone().unwrap_or_default();
    let uid = service.metadata.uid.clone().unwrap_or_default();
    let workloads = ctx.stores.slices_of(&ns, &uid);
    let mut admitted: Vec<&crate::types::kueue::Workload> = workloads
        .iter()
        .filter(|w| !workload::is_finished(w.status.as_ref()))
        .filter(|w| workload::is_admitted(w.status.as_ref()))
        .collect();
    workload::sort_chain_order(&mut admitted, &workloads);
    let Some(newest) = admitted.last() else {
        return (vec![], None);
    };
    // pods of deleted children still hold their grant until they are gone
    let children = ctx.stores.children_of(service);
    let live = children
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let mine = service_pods(ctx, service, &live);
    let shapes = pod_gate::template_requests(children.iter().map(|c| c.as_ref()));
    // a gated pod being deleted holds nothing and is never ungated
    let views: Vec<PodView> = mine
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none() || !gates(p).iter().any(|g| g == POD_GATE)
        })
        .filter_map(|p| view(p, ungated_here, &shapes))
        .collect();
    let picked = pod_gate::ungate(&crate::slices::grants(newest), &views);
    let picked = mine
        .iter()
        .filter(|p| p.metadata.name.as_ref().is_some_and(|n| picked.contains(n)))
        .map(|p| (p.clone(), gates(p)))
        .collect();
    (picked, newest.metadata.name.clone())
}

/// The pods of `service` (of its live children, and of deleted ones still terminating) as the
/// pure core sees them; `None` until the pod watch has listed (with `--pod-gate`).
pub(super) fn pods_of(
    ctx: &Context,
    service: &RayService,
    children: &[crate::types::ray::RayCluster],
) -> Option<Vec<PodView>> {
    // `Stores` tracks the pods' readiness with every other kind's: the gate decides only once
    // all of them have listed
    ctx.stores.pods.as_ref()?;
    let live: BTreeSet<String> = children
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let shapes = pod_gate::template_requests(children);
    Some(
        service_pods(ctx, service, &live)
            .iter()
            .filter_map(|p| view(p, &UngatedHere::default(), &shapes))
            .collect(),
    )
}

/// Pod annotation (raygate): the slice whose grant lifted the pod's [`POD_GATE`]. The pod gate's
/// admission policy then keeps the labels raygate counts the pod by (`ray.io/cluster`,
/// `ray.io/group`, `ray.io/node-type`) and this annotation as they are.
pub const GRANTED_BY_ANNOTATION: &str = "raygate.io/granted-by";

/// The JSON patch that removes [`POD_GATE`] from a pod whose gates are still `read`, and with a
/// `grant` records it in [`GRANTED_BY_ANNOTATION`] (a pod without annotations gets the map only
/// if it is still the version read, so no annotation written since is replaced).
pub(super) fn lift_patch(pod: &Pod, read: &[String], grant: Option<&str>) -> serde_json::Value {
    let as_objects = |names: &[String]| -> Vec<serde_json::Value> {
        names
            .iter()
            .map(|n| serde_json::json!({"name": n}))
            .collect()
    };
    let kept: Vec<String> = read.iter().filter(|g| *g != POD_GATE).cloned().collect();
    let mut ops = vec![
        serde_json::json!({"op": "test", "path": "/spec/schedulingGates", "value": as_objects(read)}),
        serde_json::json!({"op": "replace", "path": "/spec/schedulingGates", "value": as_objects(&kept)}),
    ];
    if let Some(slice) = grant {
        if pod.metadata.annotations.is_some() {
            ops.push(serde_json::json!({"op": "add",
                "path": "/metadata/annotations/raygate.io~1granted-by", "value": slice}));
        } else {
            ops.push(
                serde_json::json!({"op": "test", "path": "/metadata/resourceVersion",
                "value": pod.metadata.resource_version}),
            );
            ops.push(
                serde_json::json!({"op": "add", "path": "/metadata/annotations",
                "value": {GRANTED_BY_ANNOTATION: slice}}),
            );
        }
    }
    serde_json::Value::Array(ops)
}

/// Removes [`POD_GATE`] from `pod`, only if its gates are still `read` ([`lift_patch`]).
pub(super) async fn lift(
    client: &kube::Client,
    pod: &Pod,
    read: &[String],
    grant: Option<&str>,
) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let patch: json_patch::Patch =
        serde_json::from_value(lift_patch(pod, read, grant)).map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(super::UNGATER_MANAGER.into()),
        ..Default::default()
    };
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch(&name, &params, &Patch::<()>::Json(patch))
        .await
        .map(|_| ())
}

/// Pods (by uid) this process ungated, counted as ungated until the watch shows it.
pub(super) type UngatedHere = Assumed<()>;

/// One pass over every RayService (opted in or not).
async fn pass(ctx: &Context, pods: &Store<Pod>, ungated_here: &mut UngatedHere) {
    // forget what the watch now shows ungated (or gone)
    if !ungated_here.is_empty() {
        let all = pods.state();
        let gated: HashSet<&str> = all
            .iter()
            .filter(|p| gates(p).iter().any(|g| g == POD_GATE))
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        ungated_here.settle(ctx.clock.monotonic(), |uid, ()| {
            gated.contains(uid.as_str())
        });
    }
    for service in ctx.stores.services.sorted_state() {
        if !ctx.is_leader() {
            continue;
        }
        let (picked, grant, why) = if crate::gate::queue_name(&service).is_some() {
            let (picked, grant) = decide(ctx, &service, ungated_here);
            (picked, grant, "the newest admitted slice grants it")
        } else {
            (
                decide_opted_out(ctx, &service, ungated_here),
                None,
                "the RayService is not opted in (no queue label)",
            )
        };
        for (pod, read) in picked {
            let lift = Lift {
                pod: &pod,
                read: &read,
                grant: grant.as_deref(),
                why,
            };
            lift_and_tell(ctx, &service, lift, ungated_here).await;
        }
    }
}

/// One pod to ungate: its gates as read, the slice that grants it, and why.
struct Lift<'a> {
    pod: &'a Pod,
    read: &'a [String],
    grant: Option<&'a str>,
    why: &'a str,
}

/// Lifts the gate from the pod, remembers it and tells why in an `Ungated` Event on `service`
/// and a log line.
async fn lift_and_tell(
    ctx: &Context,
    service: &RayService,
    l: Lift<'_>,
    ungated_here: &mut UngatedHere,
) {
    let Lift {
        pod,
        read,
        grant,
        why,
    } = l;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let key = format!(
        "{}/{name}",
        pod.metadata.namespace.as_deref().unwrap_or_default()
    );
    match lift(&ctx.client, pod, read, grant).await {
        Ok(()) => {
            ungated_here.assume(pod.metadata.uid.clone().unwrap_or_default(), ());
            tracing::info!(pod = %key, gate = POD_GATE, "ungated: {why}");
            let ev = Event {
                type_: EventType::Normal,
                reason: "Ungated",
                message: format!("removed scheduling gate {POD_GATE} from pod {name}: {why}"),
                child: None,
            };
            ctx.events
                .publish(&kube::Resource::object_ref(service, &()), &ev)
                .await;
        }
        // its gates changed since they were read: the next pass sees the new ones
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 || s.code == 404 => {
            tracing::debug!(pod = %key, code = s.code, "ungate skipped: the pod changed");
        }
        Err(e) => tracing::warn!(pod = %key, error = %e, "ungating failed; retrying"),
    }
}

/// The pod ungater, run by [`super::runner`]: a pass on every change of the Ray pods and every
/// [`RESYNC`].
pub(super) struct Ungater {
    pods: Store<Pod>,
    ungated_here: UngatedHere,
}

impl Ungater {
    /// The ungater over the Ray pods' store (`None` without one: the pod gate is off).
    pub(super) fn new(ctx: &Context) -> Option<Self> {
        Some(Ungater {
            pods: ctx.stores.pods.clone()?,
            ungated_here: UngatedHere::default(),
        })
    }
}

impl Pass for Ungater {
    const NAME: &'static str = "pod ungater";

    async fn pass(&mut self, ctx: &Context, _woke: Monotonic) -> Option<Monotonic> {
        pass(ctx, &self.pods, &mut self.ungated_here).await;
        None
    }
}

#[cfg(test)]
mod tests {
    use raygate_testing::core::{self, PodExt};
    use serde_json::json;

    use super::*;
    use crate::types::ray::RayCluster;

    /// A child whose worker group asks 100m CPU and 128Mi per pod, its head 1 CPU and 1Gi.
    fn child() -> RayCluster {
        serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "llm-a", "namespace": "ns"},
            "spec": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}},
                "workerGroupSpecs": [{"groupName": "small", "replicas": 2, "template": {"spec": {
                    "containers": [{"name": "ray-worker",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}],
            },
        }))
        .unwrap()
    }

    /// A gated pod of `llm-a` as the cluster made it: `spec` is what it carries.
    fn pod(name: &str, group: &str, spec: serde_json::Value) -> Pod {
        let mut p = core::pod(&format!("ns/{name}"), "");
        p.spec = Some(serde_json::from_value(spec).unwrap());
        p.unowned()
            .uid(name)
            .created_at("2026-01-01T00:00:00Z".parse().unwrap())
            .label("ray.io/cluster", "llm-a")
            .label("ray.io/group", group)
            .scheduling_gate(POD_GATE)
    }

    /// Pods whose own requests differ from their template's — KubeRay v1.7.0's worker init
    /// container (`wait-gcs-ready`, 200m / 256Mi, above the worker's own requests), a
    /// LimitRange's default limit on a container without one, an injected sidecar — are
    /// matched to their group's grant by their child and group, and ungated; matched by their
    /// own requests they matched no grant and stayed gated for ever.
    #[test]
    fn pods_changed_after_their_template_are_matched_by_child_and_group() {
        let c = child();
        let shapes = pod_gate::template_requests([&c]);
        let worker = pod(
            "w-1",
            "small",
            json!({
            "initContainers": [{"name": "wait-gcs-ready",
                "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}}}],
            "containers": [{"name": "ray-worker",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}),
        );
        let sidecar = pod(
            "w-2",
            "small",
            json!({"containers": [
            {"name": "ray-worker", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
            {"name": "istio-proxy", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}),
        );
        let head = pod(
            "h",
            "headgroup",
            json!({"containers": [{"name": "ray-head",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}}}]}),
        );
        let none = UngatedHere::default();
        let views: Vec<PodView> = [&worker, &sidecar, &head]
            .iter()
            .filter_map(|p| view(p, &none, &shapes))
            .collect();
        let grants = [
            crate::slices::Grant {
                group: "headgroup".into(),
                requests: shapes[&("llm-a".into(), "headgroup".into())].clone(),
                count: 1,
            },
            crate::slices::Grant {
                group: "small".into(),
                requests: shapes[&("llm-a".into(), "small".into())].clone(),
                count: 2,
            },
        ];
        let mut ungated = pod_gate::ungate(&grants, &views);
        ungated.sort();
        assert_eq!(ungated, ["h", "w-1", "w-2"]);
        // a child that is gone: each pod's own requests, KubeRay's init container left out, so
        // only the worker KubeRay alone changed still matches
        let own: Vec<PodView> = [&worker, &sidecar, &head]
            .iter()
            .filter_map(|p| view(p, &none, &Shapes::new()))
            .collect();
        assert_eq!(pod_gate::ungate(&grants, &own), ["w-1"]);
    }

    #[test]
    fn lifting_records_the_grant_and_keeps_every_other_annotation_and_gate() {
        let read = vec!["example.com/other".to_string(), POD_GATE.to_string()];
        let apply = |pod: &Pod, grant: Option<&str>| -> Pod {
            let mut doc = serde_json::to_value(pod).unwrap();
            let patch: json_patch::Patch =
                serde_json::from_value(lift_patch(pod, &read, grant)).unwrap();
            json_patch::patch(&mut doc, &patch).unwrap();
            serde_json::from_value(doc).unwrap()
        };
        let mut bare = pod(
            "w-1",
            "small",
            json!({"containers": [{"name": "ray-worker"}],
            "schedulingGates": [{"name": "example.com/other"}]}),
        );
        bare.metadata.annotations = None;
        bare.metadata.resource_version = Some("7".into());
        let annotated = bare.clone().annotation("team", "a");
        for (before, grant) in [
            (&bare, Some("llm-x1")),
            (&annotated, Some("llm-x1")),
            (&annotated, None),
        ] {
            let after = apply(before, grant);
            assert_eq!(gates(&after), vec!["example.com/other".to_string()]);
            let annotations = after.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                annotations.get(GRANTED_BY_ANNOTATION).map(String::as_str),
                grant,
                "{before:?}"
            );
            for (k, v) in before.metadata.annotations.iter().flatten() {
                assert_eq!(annotations.get(k), Some(v), "kept");
            }
        }
        // a pod that got annotations since it was read is left for the next pass
        let mut since = bare.clone();
        since.metadata.resource_version = Some("8".into());
        let mut doc = serde_json::to_value(since.annotation("team", "a")).unwrap();
        let patch: json_patch::Patch =
            serde_json::from_value(lift_patch(&bare, &read, Some("llm-x1"))).unwrap();
        assert!(json_patch::patch(&mut doc, &patch).is_err());
        // the gates changed since they were read: refused as well
        let mut moved = annotated.clone();
        moved.spec.as_mut().unwrap().scheduling_gates = Some(vec![]);
        let mut doc = serde_json::to_value(moved).unwrap();
        let patch: json_patch::Patch =
            serde_json::from_value(lift_patch(&annotated, &read, Some("llm-x1"))).unwrap();
        assert!(json_patch::patch(&mut doc, &patch).is_err());
    }
}
