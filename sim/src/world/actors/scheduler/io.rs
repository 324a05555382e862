//! The scheduler's IO loop: pending pods placed in queue order on a [`Snapshot`], bound through
//! `pods/binding`, and `PodScheduled=False/Unschedulable` written when a pod fits nowhere.

use raygate::runtime::SortedState;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use super::{Snapshot, queue_order, unschedulable_condition};
use crate::Clock;
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};

/// Scheduler settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The scheduler's name (`spec.schedulerName`); pods naming another are left alone.
    pub name: String,
    /// How often unschedulable pods are retried without a cluster event (the queue's
    /// `podMaxInUnschedulablePodsDuration` flush is 5 min).
    pub retry: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "default-scheduler".into(),
            retry: Duration::from_secs(300),
        }
    }
}

/// Runs the scheduler until `shutdown`.
pub async fn run(
    client: kube::Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) {
    let mut c = Caches::default();
    let (pods, nodes) = (c.all(&client), c.all(&client));
    let actor = Scheduler {
        client,
        clock: clock.clone(),
        config,
        pods,
        nodes,
    };
    support::drive(actor, c, clock, Duration::ZERO, shutdown.into()).await;
}

struct Scheduler {
    client: kube::Client,
    clock: Clock,
    config: Config,
    pods: Store<Pod>,
    nodes: Store<Node>,
}

impl Actor for Scheduler {
    type Error = std::convert::Infallible;

    async fn pass(&mut self, now: Timestamp, expect: &mut Expect) -> Pass<Self::Error> {
        let bound = pass(
            &self.client,
            &self.clock,
            &self.config,
            &self.pods.sorted_state(),
            &self.nodes.sorted_state(),
        )
        .await;
        // kube-scheduler's assume cache: the next pass waits until the pod cache shows every
        // binding of this one, else it would count those pods as pending (no node, no
        // requests) and place others into the room they took (a node over its allocatable)
        for (key, uid) in bound {
            let pods = self.pods.clone();
            expect.until(move || {
                pods.get(&key).is_none_or(|p| {
                    p.metadata.uid.as_deref() != Some(uid.as_str())
                        || p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
                })
            });
        }
        // unschedulable pods are retried on every change and after `retry`
        Ok(Some(now + self.config.retry))
    }
}

/// One scheduling pass; the pods it bound (cache key, uid).
async fn pass(
    client: &kube::Client,
    clock: &Clock,
    config: &Config,
    pods: &[Arc<Pod>],
    nodes: &[Arc<Node>],
) -> Vec<(ObjectRef<Pod>, String)> {
    let mut bound = vec![];
    let mut snapshot = Snapshot::new(nodes.iter().map(|n| &**n), pods.iter().map(|p| &**p));
    for pod in queue_order(pods) {
        let spec_name = pod.spec.as_ref().and_then(|s| s.scheduler_name.clone());
        if spec_name.as_deref().unwrap_or("default-scheduler") != config.name {
            continue;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        match snapshot.place(&pod) {
            Ok(node) => {
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                });
                match api
                    .create_subresource::<_, serde_json::Value>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::debug!(pod = %name, %node, "bound");
                        snapshot.assume(&pod, &node);
                        bound.push((
                            ObjectRef::from_obj(&*pod),
                            pod.metadata.uid.clone().unwrap_or_default(),
                        ));
                    }
                    Err(e) => tracing::debug!(pod = %name, %node, error = %e, "binding failed"),
                }
            }
            Err(fit) => {
                let message = fit.to_string();
                if let Some((reason, message)) = unschedulable_condition(&pod, &message) {
                    tracing::debug!(pod = %name, %message, "unschedulable");
                    let mut cond = json!({
                        "type": "PodScheduled", "status": "False",
                        "reason": reason, "message": message,
                    });
                    // the transition time moves only when the status does
                    let was_false = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
                        .is_some_and(|c| c.status == "False");
                    if !was_false {
                        cond["lastTransitionTime"] = json!(clock.now_rfc3339());
                    }
                    let patch = json!({"status": {"conditions": [cond]}});
                    if let Err(e) = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                        .await
                    {
                        tracing::debug!(pod = %name, error = %e, "writing PodScheduled failed");
                    }
                }
            }
        }
    }
    bound
}
