//! The lifecycle actor's pass: each node's [`step`] carried out (taken down, brought up, replaced,
//! removed) and the NotReady reaction written (taints, pods marked not ready), with their Events.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeStatus, Pod, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use super::not_ready::{NOT_READY_TAINT, is_noexecute, noexecute_taints, pods_not_ready};
use super::{
    Config, Error, GENERATION, LIFECYCLE, PHASE, REPLACED_BY, Readiness, Step, UNREACHABLE_TAINT,
    UNTIL, set_ready, step,
};
use crate::world::actors::support::{self, Expect, Pass, Recorder};

/// Writes `n`'s spec and metadata, then `status` on the stored object; the cache is to show the
/// result before the next pass.
async fn write_node(
    api: &Api<Node>,
    cache: &Store<Node>,
    expect: &mut Expect,
    mut n: Node,
    status: NodeStatus,
    (spec_step, status_step): (&'static str, &'static str),
) -> Result<Node, Error> {
    let name = n.name_any();
    let write = |step: &'static str| {
        let node = name.clone();
        move |source| Error::Write { step, node, source }
    };
    n.status = None;
    let mut stored = api
        .replace(&name, &PostParams::default(), &n)
        .await
        .map_err(write(spec_step))?;
    stored.status = Some(status);
    let stored = api
        .replace_status(&name, &PostParams::default(), &stored)
        .await
        .map_err(write(status_step))?;
    expect.written(cache, &stored);
    Ok(stored)
}

/// `n` Ready again: the Ready condition, no node-lifecycle taints, no lifecycle phase.
fn brought_up(node: &Node, now: Timestamp) -> (Node, NodeStatus) {
    let mut n = node.clone();
    let mut status = n.status.take().unwrap_or_default();
    set_ready(&mut status, &Readiness::Ready, now);
    if let Some(t) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) {
        t.retain(|t| t.key != UNREACHABLE_TAINT && !is_noexecute(t, NOT_READY_TAINT));
    }
    let ann = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.remove(PHASE);
    ann.remove(UNTIL);
    (n, status)
}

async fn publish_ready(recorder: &mut Recorder, node: &Node) {
    let message = format!("Node {} status is now: NodeReady", node.name_any());
    let on = support::reference(node);
    recorder.publish(on, "Normal", "NodeReady", &message).await;
}

/// Writes `node`'s NoExecute taints as [`noexecute_taints`] wants them, with a log line naming
/// the ones added.
async fn write_taints(
    api: &Api<Node>,
    cache: &Store<Node>,
    expect: &mut Expect,
    node: &Node,
    taints: Vec<Taint>,
) -> Result<(), Error> {
    let name = node.name_any();
    let mut n = node.clone();
    let added: Vec<String> = taints
        .iter()
        .filter(|t| t.effect == "NoExecute" && t.time_added.is_some())
        .filter(|t| {
            !node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|old| old.contains(t))
        })
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    n.spec.get_or_insert_with(Default::default).taints = (!taints.is_empty()).then_some(taints);
    let stored = api
        .replace(&name, &PostParams::default(), &n)
        .await
        .map_err(|source| Error::Write {
            step: "tainting",
            node: name.clone(),
            source,
        })?;
    expect.written(cache, &stored);
    tracing::info!(node = %name, ?added, "node lifecycle: NoExecute taints updated");
    Ok(())
}

/// Writes the pods [`pods_not_ready`] chose through the status subresource, guarded by the
/// resourceVersion read (`UpdateStatus`), each followed by `MarkPodsNotReady`'s Event (Warning
/// `NodeNotReady` "Node is not ready" on the pod). A pod deleted or changed meanwhile is left to
/// the next pass, which its change starts.
async fn mark_pods_not_ready(
    client: &Client,
    recorder: &mut Recorder,
    cache: &Store<Pod>,
    expect: &mut Expect,
    node: &str,
    marked: Vec<Pod>,
) -> Result<(), Error> {
    let (reason, message) = ("NodeNotReady", "Node is not ready");
    for pod in marked {
        let name = pod.name_any();
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let stored = match api
            .replace_status(&name, &PostParams::default(), &pod)
            .await
        {
            Ok(stored) => stored,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                tracing::debug!(pod = %name, code = s.code, "node lifecycle: pod not marked not ready (next pass retries)");
                continue;
            }
            Err(source) => {
                return Err(Error::MarkPod {
                    pod: name,
                    node: node.into(),
                    source,
                });
            }
        };
        expect.written(cache, &stored);
        tracing::info!(pod = %name, node, "node lifecycle: pod marked not ready");
        let on = support::reference(&stored);
        // one Event per marking: the pod goes not ready again if its node fails again
        recorder.forget(&on, reason, message);
        recorder.publish(on, "Warning", reason, message).await;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn pass(
    client: &Client,
    config: &Config,
    recorder: &mut Recorder,
    caches: (&Store<Node>, &Store<Pod>),
    expect: &mut Expect,
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> Pass<Error> {
    let (cache, pod_cache) = caches;
    let api: Api<Node> = Api::all(client.clone());
    let mut next: Option<Timestamp> = None;
    let mut wake_at = |t: Timestamp| next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
    for node in nodes {
        let node: &Node = node;
        match step(node, nodes, pods, config, now) {
            Step::Wait(at) => {
                let (taints, taint_at) = noexecute_taints(node, config, now);
                let (marked, mark_at) = pods_not_ready(node, pods, config, now);
                for t in [at, taint_at, mark_at].into_iter().flatten() {
                    wake_at(t);
                }
                if let Some(taints) = taints {
                    write_taints(&api, cache, expect, node, taints).await?;
                }
                if !marked.is_empty() {
                    let name = node.name_any();
                    mark_pods_not_ready(client, recorder, pod_cache, expect, &name, marked).await?;
                }
            }
            Step::GoDown { until } => {
                go_down(&api, cache, expect, recorder, node, until, now).await?;
                wake_at(until);
            }
            Step::ComeUp { generation } => {
                let io = (&api, cache);
                come_up(io, expect, recorder, node, generation, config, now).await?;
            }
            Step::Join { node: new, until } => {
                join(&api, cache, expect, recorder, node, &new).await?;
                wake_at(until);
            }
            Step::Joined => {
                let (n, status) = brought_up(node, now);
                let steps = ("finishing the join", "marking Ready");
                write_node(&api, cache, expect, n, status, steps).await?;
                publish_ready(recorder, node).await;
            }
            Step::Remove => {
                let name = node.name_any();
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map_err(write_error(&name, "deleting the replaced node"))?;
                expect.deleted(cache, ObjectRef::new(&name), node.metadata.uid.clone());
                tracing::info!(node = %name, "node lifecycle: replaced node deleted");
            }
        }
    }
    Ok(next)
}

/// The [`Error::Write`] of `step` on `node`.
fn write_error(node: &str, step: &'static str) -> impl FnOnce(kube::Error) -> Error {
    let node = node.to_string();
    move |source| Error::Write { step, node, source }
}

/// [`Step::GoDown`]: Ready=Unknown, the unreachable taint and the `rebooting` phase until
/// `until`, and the `NodeNotReady` Event.
async fn go_down(
    api: &Api<Node>,
    cache: &Store<Node>,
    expect: &mut Expect,
    recorder: &mut Recorder,
    node: &Node,
    until: Timestamp,
    now: Timestamp,
) -> Result<(), Error> {
    let name = node.name_any();
    let mut n = node.clone();
    let mut status = n.status.take().unwrap_or_default();
    set_ready(&mut status, &Readiness::Unknown, now);
    let mut taints = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints.retain(|t| t.key != UNREACHABLE_TAINT);
    taints.push(Taint {
        key: UNREACHABLE_TAINT.into(),
        effect: "NoSchedule".into(),
        time_added: None,
        value: None,
    });
    n.spec.get_or_insert_with(Default::default).taints = Some(taints);
    let ann = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.remove(LIFECYCLE);
    ann.insert(PHASE.into(), "rebooting".into());
    ann.insert(UNTIL.into(), until.to_string());
    let steps = ("taking down", "marking NotReady");
    write_node(api, cache, expect, n, status, steps).await?;
    let message = format!("Node {name} status is now: NodeNotReady");
    let on = support::reference(node);
    recorder
        .publish(on, "Normal", "NodeNotReady", &message)
        .await;
    Ok(())
}

/// [`Step::ComeUp`]: the rebooted node Ready at `generation` and the configured kubelet
/// version, with the `Rebooted` and `NodeReady` Events.
async fn come_up(
    (api, cache): (&Api<Node>, &Store<Node>),
    expect: &mut Expect,
    recorder: &mut Recorder,
    node: &Node,
    generation: u64,
    config: &Config,
    now: Timestamp,
) -> Result<(), Error> {
    let name = node.name_any();
    let (mut n, mut status) = brought_up(node, now);
    status
        .node_info
        .get_or_insert_with(Default::default)
        .kubelet_version = config.kubelet_version.clone();
    n.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(GENERATION.into(), generation.to_string());
    write_node(
        api,
        cache,
        expect,
        n,
        status,
        ("bringing up", "marking Ready"),
    )
    .await?;
    let message = format!("Node {name} has been rebooted");
    let on = support::reference(node);
    recorder.publish(on, "Warning", "Rebooted", &message).await;
    publish_ready(recorder, node).await;
    Ok(())
}

/// [`Step::Join`]: the replacement `new` created (or read, when it exists) with its status, the
/// old node marked replaced by it, and the `RegisteredNode` Event.
async fn join(
    api: &Api<Node>,
    cache: &Store<Node>,
    expect: &mut Expect,
    recorder: &mut Recorder,
    node: &Node,
    new: &Node,
) -> Result<(), Error> {
    let name = node.name_any();
    let new_name = new.name_any();
    let status = new.status.clone();
    let mut created = match api.create(&PostParams::default(), new).await {
        Ok(c) => c,
        Err(kube::Error::Api(s)) if s.code == 409 => api
            .get(&new_name)
            .await
            .map_err(write_error(&name, "reading the replacement"))?,
        Err(source) => {
            return Err(Error::Write {
                step: "creating the replacement",
                node: name,
                source,
            });
        }
    };
    created.status = status;
    let created = api
        .replace_status(&new_name, &PostParams::default(), &created)
        .await
        .map_err(write_error(&name, "reporting the replacement"))?;
    expect.written(cache, &created);
    let mut old = node.clone();
    let ann = old.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.remove(LIFECYCLE);
    ann.insert(PHASE.into(), "replaced".into());
    ann.insert(REPLACED_BY.into(), new_name.clone());
    let stored = api
        .replace(&name, &PostParams::default(), &old)
        .await
        .map_err(write_error(&name, "marking replaced"))?;
    expect.written(cache, &stored);
    recorder
        .publish(
            support::reference(&created),
            "Normal",
            "RegisteredNode",
            &format!("Node {new_name} event: Registered Node {new_name} (replacing {name})"),
        )
        .await;
    Ok(())
}
