//! The timeline's actions on the running story: applying and patching objects, raising a quota,
//! starting a rollout, killing and restarting raygate, injecting faults, failing nodes; and the
//! cluster writes the runner shares with them (nodes, objects).

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiResource, Scope, pinned_kind};
use kube::{Client, core::GroupVersionKind};
use raygate_sim::world::Running;
use raygate_sim::world::actors::{lws, node_lifecycle};
use raygate_sim::{FaultRule, Faults, Sim, Verb};
use serde_json::{Value, json};

use super::controller::Controller;
use super::format::{
    Action, ClusterShape, InjectFault, PatchStep, RaiseQuota, StartRollout, StrategyName,
};
use super::parse::verb_of;
use crate::baselines::{self, Outcome, Strategy, Upgrade};
use crate::history::Kind;
use crate::invariants::Expect;

/// Why a scenario could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("creating node {node}: {source}")]
    CreateNode {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("line {line}: resolving {kind} ({api_version}): {source}")]
    Resolve {
        line: u64,
        kind: String,
        api_version: String,
        #[source]
        source: kube::Error,
    },
    #[error("line {line}: {what}: {source}")]
    Write {
        line: u64,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("line {line}: {what}: {reason}")]
    Step {
        line: u64,
        what: String,
        reason: String,
    },
}

/// The running story: the sim, its actors, raygate's controller.
pub(super) struct Story {
    pub(super) sim: Sim,
    pub(super) client: Client,
    pub(super) controller: Controller,
    pub(super) faults: Faults,
    pub(super) rollouts: Vec<tokio::task::JoinHandle<Result<Outcome, String>>>,
    pub(super) expect: Expect,
    /// Dropped, the actors stop.
    pub(super) _world: Running,
}

pub(super) async fn resolve(
    client: &Client,
    api_version: &str,
    kind: &str,
    line: u64,
) -> Result<(ApiResource, bool), RunError> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = pinned_kind(client, &gvk)
        .await
        .map_err(|source| RunError::Resolve {
            line,
            kind: kind.into(),
            api_version: api_version.into(),
            source,
        })?;
    Ok((ar, caps.scope == Scope::Namespaced))
}

pub(super) fn api_for(
    client: &Client,
    ar: &ApiResource,
    namespaced: bool,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    if namespaced {
        Api::namespaced_with(client.clone(), ns.unwrap_or("default"), ar)
    } else {
        Api::all_with(client.clone(), ar)
    }
}

/// Server-side applies `objects` in order (field manager `raygate-scenario`, forced).
pub(super) async fn apply(client: &Client, objects: &[Value], line: u64) -> Result<(), RunError> {
    for o in objects {
        let api_version = o["apiVersion"].as_str().unwrap_or_default();
        let kind = o["kind"].as_str().unwrap_or_default();
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let (ar, namespaced) = resolve(client, api_version, kind, line).await?;
        let api = api_for(client, &ar, namespaced, o["metadata"]["namespace"].as_str());
        api.patch(
            name,
            &PatchParams::apply("raygate-scenario").force(),
            &Patch::Apply(o),
        )
        .await
        .map_err(|source| RunError::Write {
            line,
            what: format!("applying {kind} {name}"),
            source,
        })?;
    }
    Ok(())
}

fn node_object(shape: &ClusterShape, name: &str, domain: &str, generation: &str) -> Value {
    let mut allocatable: BTreeMap<String, String> =
        [("cpu", "64"), ("memory", "512Gi"), ("pods", "110")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    allocatable.extend(shape.allocatable.clone());
    let mut labels = shape.node_labels.clone();
    labels.insert(shape.domain_label.clone(), domain.into());
    labels.insert("kubernetes.io/hostname".into(), name.into());
    labels.insert(node_lifecycle::GENERATION.into(), generation.into());
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": allocatable, "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// Creates the nodes (name, domain, generation) of `shape`.
pub(super) async fn create_nodes(
    client: &Client,
    shape: &ClusterShape,
    names: Vec<(String, String, String)>,
) -> Result<(), RunError> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for (name, domain, generation) in names {
        let object = node_object(shape, &name, &domain, &generation);
        let node = serde_json::from_value(object).map_err(|e| RunError::Step {
            line: 1,
            what: format!("node {name}"),
            reason: e.to_string(),
        })?;
        nodes
            .create(&Default::default(), &node)
            .await
            .map_err(|source| RunError::CreateNode { node: name, source })?;
    }
    Ok(())
}

/// The kinds this sim serves (a CRD not installed is left out of the history).
pub(super) async fn served(client: &Client) -> Vec<Kind> {
    let mut out = vec![];
    for kind in Kind::ALL {
        let (group, version, kind_name, _, _) = kind.resource();
        let gvk = GroupVersionKind::gvk(group, version, kind_name);
        if pinned_kind(client, &gvk).await.is_ok() {
            out.push(kind);
        }
    }
    out
}

async fn raise_quota(client: &Client, q: &RaiseQuota, line: u64) -> Result<(), RunError> {
    let (ar, _) = resolve(client, "kueue.x-k8s.io/v1beta2", "ClusterQueue", line).await?;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let what = format!("raising ClusterQueue {}'s {}", q.cluster_queue, q.resource);
    // read-modify-replace, again on a 409 (the controller writes the queue's status meanwhile)
    for _ in 0..20 {
        let cq = api
            .get(&q.cluster_queue)
            .await
            .map_err(|source| RunError::Write {
                line,
                what: what.clone(),
                source,
            })?;
        let mut v = serde_json::to_value(&cq).unwrap_or_default();
        let mut done = false;
        for g in v["spec"]["resourceGroups"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            for f in g["flavors"].as_array_mut().into_iter().flatten() {
                if done || q.flavor.as_deref().is_some_and(|n| f["name"] != n) {
                    continue;
                }
                for r in f["resources"].as_array_mut().into_iter().flatten() {
                    if r["name"] == q.resource.as_str() {
                        r["nominalQuota"] = json!(q.to);
                        done = true;
                    }
                }
            }
        }
        if !done {
            return Err(RunError::Step {
                line,
                what,
                reason: "no flavor of the queue covers the resource".into(),
            });
        }
        let object: DynamicObject = serde_json::from_value(v).map_err(|e| RunError::Step {
            line,
            what: what.clone(),
            reason: e.to_string(),
        })?;
        match api
            .replace(&q.cluster_queue, &Default::default(), &object)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(source) => return Err(RunError::Write { line, what, source }),
        }
    }
    Err(RunError::Step {
        line,
        what,
        reason: "20 conflicts in a row".into(),
    })
}

impl Story {
    /// Runs one timeline step's action (`line`: the step's, for errors).
    pub(super) async fn act(
        &mut self,
        action: &Action,
        line: u64,
        domain_label: &str,
        seed: u64,
    ) -> Result<(), RunError> {
        let client = self.client.clone();
        match action {
            Action::Apply(objects) => apply(&client, objects, line).await,
            Action::Patch(p) => patch(&client, p, line).await,
            Action::RaiseQuota(q) => raise_quota(&client, q, line).await,
            Action::StartRollout(r) if r.strategy == StrategyName::NodeRollout => {
                self.start_node_rollout(r, domain_label);
                Ok(())
            }
            Action::StartRollout(r) => self.start_rollout(r, line, domain_label, seed).await,
            Action::KillController => {
                self.controller.kill().await;
                Ok(())
            }
            Action::KillControllerAfterWrites(n) => {
                self.controller.kill_after_writes(*n);
                Ok(())
            }
            Action::RestartController => {
                self.controller.start();
                Ok(())
            }
            Action::InjectFault(f) => {
                self.inject_fault(f);
                Ok(())
            }
            Action::ClearFaults => {
                self.faults = Faults::none();
                self.sim.set_faults(Faults::none());
                Ok(())
            }
            Action::FailNode(n) | Action::RestoreNode(n) => {
                let readiness = if matches!(action, Action::FailNode(_)) {
                    node_lifecycle::Readiness::Unknown
                } else {
                    node_lifecycle::Readiness::Ready
                };
                node_lifecycle::write_ready(&client, self.sim.clock(), n, &readiness)
                    .await
                    .map(|_| ())
                    .map_err(|source| RunError::Write {
                        line,
                        what: format!("node {n}"),
                        source,
                    })
            }
        }
    }

    /// A NodeRollout object, run by raygate's controller.
    fn start_node_rollout(&mut self, r: &StartRollout, domain_label: &str) {
        let client = self.client.clone();
        let request = crate::noderollout::Request {
            name: r
                .name
                .clone()
                .unwrap_or_else(|| format!("node-generation-{}", r.target)),
            domain_label: domain_label.into(),
            target: r.target.clone(),
            taint_outdated: r.taint_outdated,
            group_label: r
                .group_label
                .clone()
                .unwrap_or_else(|| lws::GROUP_KEY.to_string()),
            health_check_stable: r.health_check_stable.clone(),
            ray_services: r.ray_services.clone(),
        };
        self.expect.group_label = Some(request.group_label.clone());
        self.expect.generation = Some((node_lifecycle::GENERATION.to_string(), r.target.clone()));
        let clock = self.sim.clock().clone();
        self.rollouts.push(tokio::spawn(async move {
            crate::noderollout::run(&client, &clock, &request).await
        }));
    }

    /// raygate's drain engine in process, or a baseline drain.
    async fn start_rollout(
        &mut self,
        r: &StartRollout,
        line: u64,
        domain_label: &str,
        seed: u64,
    ) -> Result<(), RunError> {
        let client = self.client.clone();
        let strategy = match r.strategy {
            StrategyName::Raygate | StrategyName::NodeRollout => Strategy::Raygate,
            StrategyName::NodeByNode => Strategy::NodeByNode,
            StrategyName::DomainByDomain => Strategy::DomainByDomain,
            StrategyName::RandomConcurrent => Strategy::RandomConcurrent {
                k: r.k.unwrap_or(1),
            },
        };
        let group_label = r
            .group_label
            .clone()
            .unwrap_or_else(|| lws::GROUP_KEY.to_string());
        let mut upgrade = Upgrade {
            domain_label: domain_label.into(),
            target: r.target.clone(),
            seed,
            group_label: Some(group_label.clone()),
            ..Upgrade::default()
        };
        let taint = match (r.taint_outdated, &strategy) {
            (Some(taint), _) => taint,
            (None, Strategy::Raygate) => {
                let now = self.sim.clock().now();
                crate::auto_taint::decide(&client, now, &upgrade)
                    .await
                    .map_err(|reason| RunError::Step {
                        line,
                        what: "starting the rollout".into(),
                        reason,
                    })?
            }
            (None, _) => false,
        };
        upgrade.taint = taint.then(raygate::drain::outdated_taint);
        // raygate's engine taints the outdated nodes itself (later than its first step where a
        // RayService must move before anything is upgraded); the baselines get them tainted here
        if let Some(t) = upgrade
            .taint
            .as_ref()
            .filter(|_| strategy != Strategy::Raygate)
        {
            taint_outdated(&client, t, &r.target, line).await?;
        }
        self.expect.group_label = Some(group_label);
        self.expect.generation = Some((node_lifecycle::GENERATION.to_string(), r.target.clone()));
        let clock = self.sim.clock().clone();
        // the drain's requests carry its client's name, as kubectl's and raygate's do
        let client = self.sim.client_as(match strategy {
            Strategy::Raygate => "raygate",
            _ => "kubectl",
        });
        self.rollouts.push(tokio::spawn(async move {
            baselines::run(&client, &clock, &strategy, &upgrade)
                .await
                .map_err(|e| e.to_string())
        }));
        Ok(())
    }

    /// Adds a fault rule to the sim's.
    fn inject_fault(&mut self, f: &InjectFault) {
        let mut rule = if f.verbs.is_empty() {
            FaultRule::writes()
        } else {
            let verbs: Vec<Verb> = f.verbs.iter().filter_map(|v| verb_of(v)).collect();
            FaultRule::any().verbs(&verbs)
        };
        if let Some(r) = &f.resource {
            rule = rule.resource(r.clone());
        }
        if let Some(ua) = &f.user_agent {
            rule = rule.user_agent(ua.clone());
        }
        self.faults = self.faults.clone().rule(rule.error(f.code, f.rate));
        self.sim.set_faults(self.faults.clone());
    }
}

/// A merge patch of one object; a missing one fails the story unless the step says `ifExists`.
async fn patch(client: &Client, p: &PatchStep, line: u64) -> Result<(), RunError> {
    let (ar, namespaced) = resolve(client, &p.api_version, &p.kind, line).await?;
    let patched = api_for(client, &ar, namespaced, p.namespace.as_deref())
        .patch(&p.name, &PatchParams::default(), &Patch::Merge(&p.patch))
        .await;
    match patched {
        Err(kube::Error::Api(s)) if s.code == 404 && p.if_exists => Ok(()),
        r => r.map(|_| ()).map_err(|source| RunError::Write {
            line,
            what: format!("patching {} {}", p.kind, p.name),
            source,
        }),
    }
}

async fn taint_outdated(
    client: &Client,
    taint: &k8s_openapi::api::core::v1::Taint,
    target: &str,
    line: u64,
) -> Result<(), RunError> {
    use k8s_openapi::api::core::v1::Node;
    use kube::ResourceExt;
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&Default::default())
        .await
        .map_err(|source| RunError::Write {
            line,
            what: "listing nodes".into(),
            source,
        })?;
    for n in list.items {
        if n.labels()
            .get(node_lifecycle::GENERATION)
            .map(String::as_str)
            == Some(target)
        {
            continue;
        }
        let mut taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if taints.iter().any(|t| t.key == taint.key) {
            continue;
        }
        taints.push(taint.clone());
        nodes
            .patch(
                &n.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": taints}})),
            )
            .await
            .map_err(|source| RunError::Write {
                line,
                what: format!("tainting node {}", n.name_any()),
                source,
            })?;
    }
    Ok(())
}

/// One line saying what a step does.
pub fn describe(action: &Action) -> String {
    let object = |api_version: &str, kind: &str, ns: Option<&str>, name: &str| match ns {
        Some(ns) => format!("{kind} {ns}/{name} ({api_version})"),
        None => format!("{kind} {name} ({api_version})"),
    };
    match action {
        Action::Apply(objects) => {
            let names: Vec<String> = objects
                .iter()
                .map(|o| {
                    object(
                        o["apiVersion"].as_str().unwrap_or_default(),
                        o["kind"].as_str().unwrap_or_default(),
                        o["metadata"]["namespace"].as_str(),
                        o["metadata"]["name"].as_str().unwrap_or_default(),
                    )
                })
                .collect();
            format!("apply {}", names.join(", "))
        }
        Action::Patch(p) => format!(
            "patch {}: {}",
            object(&p.api_version, &p.kind, p.namespace.as_deref(), &p.name),
            p.patch
        ),
        Action::RaiseQuota(q) => format!(
            "set ClusterQueue {}'s {} quota to {}",
            q.cluster_queue, q.resource, q.to
        ),
        Action::StartRollout(r) => format!(
            "start a rollout to node generation {} ({:?})",
            r.target, r.strategy
        ),
        Action::KillController => "kill raygate's controller".into(),
        Action::KillControllerAfterWrites(n) => {
            format!("kill raygate's controller right after its next {n} writes")
        }
        Action::RestartController => "restart raygate's controller".into(),
        Action::InjectFault(f) => format!(
            "inject HTTP {} on {:.0}% of {}",
            f.code,
            f.rate * 100.0,
            if f.verbs.is_empty() {
                "writes".to_string()
            } else {
                f.verbs.join("/")
            }
        ),
        Action::ClearFaults => "clear injected faults".into(),
        Action::FailNode(n) => format!("node {n} stops reporting (NotReady)"),
        Action::RestoreNode(n) => format!("node {n} reports Ready again"),
    }
}
