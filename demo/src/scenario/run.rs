//! The runner: a checked scenario on a simulated cluster — the core actors, the KubeRay emulator,
//! raygate's controller, the nodes and objects, the timeline — then the invariants over the
//! recorded history and the expectations.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::discovery::{ApiResource, pinned_kind};
use kube::{Client, core::GroupVersionKind};
use raygate_sim::world::actors::{disruption, garbage_collector, kubelet, node_lifecycle};
use raygate_sim::world::kuberay::EmulatorConfig;
use raygate_sim::world::{Running, World, informers};
use raygate_sim::{Faults, Sim};
use tokio::sync::mpsc::UnboundedSender;

use super::actions::{RunError, Story, api_for, apply, create_nodes, describe, resolve, served};
use super::controller::Controller;
use super::format::{Action, Checked, ClusterShape, Scenario};
use crate::baselines::Outcome;
use crate::history::{History, Kind};
use crate::invariants::{self, Expect, Invariant, Violation, Window};
use crate::recorder::Recorder;

/// What a run reports as it goes (for a live display, [`run_with`]).
#[derive(Clone, Debug)]
pub enum Progress {
    /// A timeline step runs now (its note, if any, and what it does).
    Step {
        at: Timestamp,
        line: u64,
        note: Option<String>,
        action: String,
    },
    /// Changes the recorder saw since the last report (every second of cluster time).
    Changes(Vec<crate::history::Change>),
    /// The timeline is done; the rollouts and the settle time remain.
    TimelineDone { at: Timestamp },
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub name: String,
    pub started: Timestamp,
    pub ended: Timestamp,
    pub history: History,
    pub violations: Vec<Violation>,
    /// The invariants the story expects to break (`expect.violations`).
    pub expected: Vec<Invariant>,
    pub rollouts: Vec<Result<Outcome, String>>,
    /// The node rollout's lower bound from the runner's own durations (`None`: the timeline
    /// starts no rollout), see [`crate::bound`].
    pub lower_bound: Option<crate::bound::LowerBound>,
    /// Expectations not met, one line each (violations not expected, expected ones that did not
    /// happen, objects whose field differs, a rollout that failed).
    pub failures: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// A baseline's run: its name and its report, or why it could not run.
pub type BaselineRun = (String, Result<Report, String>);

/// Runs a checked scenario on `sim` (built with the CRDs its objects need): the nodes, the core
/// actors (scheduler, kubelets, LWS, disruption controller with a 5 s lag, node lifecycle), the
/// KubeRay emulator with pods, raygate's controller, the objects, the timeline; then the
/// invariants over the recorded history and the expectations.
pub async fn run(sim: Sim, checked: &Checked) -> Result<Report, RunError> {
    run_with(sim, checked, None).await
}

/// [`run`], reporting its steps and the cluster's changes to `progress` as it goes. The sim's
/// actors read their caches in-process (`Sim::in_process`: shared typed informers, no JSON
/// watches); raygate and the baselines go through `kube::Client`.
pub async fn run_with(
    sim: Sim,
    checked: &Checked,
    progress: Option<tokio::sync::mpsc::UnboundedSender<Progress>>,
) -> Result<Report, RunError> {
    informers::in_process(&sim.clone(), run_in_process(sim, checked, progress)).await
}

async fn run_in_process(
    sim: Sim,
    checked: &Checked,
    progress: Option<UnboundedSender<Progress>>,
) -> Result<Report, RunError> {
    let s = &checked.scenario;
    let client = sim.client();
    let clock = sim.clock().clone();
    let started = clock.now();
    let origin = tokio::time::Instant::now();
    for ns in &s.cluster.namespaces {
        sim.ensure_namespace(ns);
    }
    let actors = spawn_actors(&sim, &client).await;
    let served_kinds = served(&client).await;
    let recorder = Recorder::start(&sim, &served_kinds).map_err(|e| RunError::Step {
        line: 0,
        what: "recording the cluster's history".into(),
        reason: e.message,
    })?;
    let feeder = progress.clone().map(|tx| feed(&recorder, tx));
    let joining = create_cluster_nodes(&client, &s.cluster).await?;
    let mut story = Story {
        sim: sim.clone(),
        client: client.clone(),
        controller: Controller::new(
            sim.clone(),
            s.controller.pod_gate,
            served_kinds.contains(&Kind::NodeRollout),
        ),
        faults: Faults::none(),
        rollouts: vec![],
        expect: Expect::default(),
        _world: actors.world,
    };
    if s.controller.run {
        story.controller.start();
    }
    apply(&client, &s.objects, 1).await?;
    play_timeline(&mut story, checked, joining, origin, progress.as_ref()).await?;
    let deadline = origin + checked.within;
    let rollouts = wait_for_rollouts(&mut story, deadline, checked.within).await;
    tokio::time::sleep_until((tokio::time::Instant::now() + checked.settle).min(deadline)).await;
    let history = recorder.history();
    if let Some(f) = feeder {
        f.abort();
    }
    story.controller.kill().await;
    let ended = clock.now();
    let mut expect = story.expect.clone();
    expect.rollout = rollout_window(&rollouts);
    let violations = invariants::check_all(&history, &expect);
    let mut failures = expectation_failures(s, &violations, &rollouts);
    failures.extend(object_failures(&client, s).await);
    Ok(Report {
        name: s.name.clone(),
        started,
        ended,
        history,
        violations,
        expected: s.expect.violations.iter().map(|v| v.invariant()).collect(),
        rollouts,
        lower_bound: lower_bound(checked, &actors.kubelet, &actors.lifecycle),
        failures,
    })
}

/// The actors a story runs beside raygate: what the runner needs of them later.
struct Actors {
    kubelet: kubelet::Config,
    lifecycle: node_lifecycle::Config,
    /// Dropped, the actors stop.
    world: Running,
}

/// Starts the core actors (scheduler, kubelets, LWS when its CRD is served, disruption
/// controller with a 5 s lag, node lifecycle, ReplicaSets) and, when RayService is served, the
/// garbage collector and the KubeRay emulator with pods.
async fn spawn_actors(sim: &Sim, client: &Client) -> Actors {
    let served = |group: &str, kind: &str| {
        let gvk = GroupVersionKind::gvk(group, "v1", kind);
        async move { pinned_kind(client, &gvk).await.is_ok() }
    };
    let lws_served = served("leaderworkerset.x-k8s.io", "LeaderWorkerSet").await;
    let ray_served = served("ray.io", "RayService").await;
    let kubelet_config = kubelet::Config::default();
    let lifecycle_config = node_lifecycle::Config::default();
    let mut world = World::on(sim)
        .scheduler(Default::default())
        .kubelets(kubelet_config.clone());
    if lws_served {
        world = world.lws(Duration::from_secs(30));
    }
    world = world
        .disruption(disruption::Config {
            lag: Duration::from_secs(5),
        })
        .node_lifecycle(lifecycle_config.clone())
        .replicasets(Default::default());
    if ray_served {
        // the garbage collector deletes a deleted child's pods (KubeRay deletes the RayCluster
        // in the background and leaves its pods to it), as in a real cluster
        let ray = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", kind), plural)
        };
        world = world
            .garbage_collector(
                garbage_collector::Config::default()
                    .cover(ray("RayCluster", "rayclusters"))
                    .cover(ray("RayService", "rayservices")),
            )
            .kuberay(EmulatorConfig {
                pods: true,
                ..Default::default()
            });
    }
    Actors {
        kubelet: kubelet_config,
        lifecycle: lifecycle_config,
        world: world.start(),
    }
}

/// Reports the recorder's changes to `tx` every second of cluster time.
fn feed(recorder: &Recorder, tx: UnboundedSender<Progress>) -> tokio::task::JoinHandle<()> {
    let mut follower = recorder.follower();
    tokio::spawn(async move {
        loop {
            let changes = follower.next_changes();
            if !changes.is_empty() && tx.send(Progress::Changes(changes)).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Nodes (name, domain, generation) that join the cluster at a time of the timeline.
type Joining = Option<(Duration, Vec<(String, String, String)>)>;

/// Creates the rollout's nodes, and the spare nodes now or, with a `joinAt`, returns them to
/// create then (between the timeline's steps).
async fn create_cluster_nodes(client: &Client, shape: &ClusterShape) -> Result<Joining, RunError> {
    let names: Vec<(String, String, String)> = (0..shape.upgrade_domains)
        .flat_map(|d| {
            (0..shape.nodes_per_domain)
                .map(move |i| (format!("ud{d}-n{i}"), format!("ud-{d}"), "0".to_string()))
        })
        .collect();
    create_nodes(client, shape, names).await?;
    let Some(spare) = &shape.spare else {
        return Ok(None);
    };
    let names = (0..spare.nodes)
        .map(|i| {
            (
                format!("spare-n{i}"),
                spare.domain.clone(),
                spare.generation.clone(),
            )
        })
        .collect();
    match spare.join_at {
        None => {
            create_nodes(client, shape, names).await?;
            Ok(None)
        }
        Some(at) => Ok(Some((at, names))),
    }
}

/// The timeline's steps at their times, the spare nodes joining between them, each step
/// reported to `progress`.
async fn play_timeline(
    story: &mut Story,
    checked: &Checked,
    mut joining: Joining,
    origin: tokio::time::Instant,
    progress: Option<&UnboundedSender<Progress>>,
) -> Result<(), RunError> {
    let s = &checked.scenario;
    let client = story.client.clone();
    let clock = story.sim.clock().clone();
    for (at, action, line) in &checked.steps {
        if let Some((join_at, _)) = &joining
            && join_at <= at
            && let Some((join_at, names)) = joining.take()
        {
            tokio::time::sleep_until(origin + join_at).await;
            create_nodes(&client, &s.cluster, names).await?;
        }
        tokio::time::sleep_until(origin + *at).await;
        if let Some(tx) = progress {
            let _ = tx.send(Progress::Step {
                at: clock.now(),
                line: *line,
                note: checked.notes.get(line).cloned(),
                action: describe(action),
            });
        }
        story
            .act(action, *line, &s.cluster.domain_label, s.seed)
            .await?;
    }
    if let Some((join_at, names)) = joining.take() {
        tokio::time::sleep_until(origin + join_at).await;
        create_nodes(&client, &s.cluster, names).await?;
    }
    if let Some(tx) = progress {
        let _ = tx.send(Progress::TimelineDone { at: clock.now() });
    }
    Ok(())
}

/// Each rollout the story started, waited for until `deadline`.
async fn wait_for_rollouts(
    story: &mut Story,
    deadline: tokio::time::Instant,
    within: Duration,
) -> Vec<Result<Outcome, String>> {
    let mut rollouts = vec![];
    for handle in std::mem::take(&mut story.rollouts) {
        match tokio::time::timeout_at(deadline, handle).await {
            Ok(Ok(r)) => rollouts.push(r),
            Ok(Err(e)) => rollouts.push(Err(e.to_string())),
            Err(_) => rollouts.push(Err(format!("not done within {within:?}"))),
        }
    }
    rollouts
}

/// From the first finished rollout's start to the last one's end.
fn rollout_window(rollouts: &[Result<Outcome, String>]) -> Option<Window> {
    rollouts
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|o| Window {
            from: o.started,
            to: o.finished,
        })
        .reduce(|a, b| Window {
            from: a.from.min(b.from),
            to: a.to.max(b.to),
        })
}

/// Violations not expected, expected ones that did not happen, rollouts that failed.
fn expectation_failures(
    s: &Scenario,
    violations: &[Violation],
    rollouts: &[Result<Outcome, String>],
) -> Vec<String> {
    let mut failures = vec![];
    let expected: Vec<Invariant> = s.expect.violations.iter().map(|v| v.invariant()).collect();
    for v in violations {
        if !expected.contains(&v.invariant) {
            failures.push(format!("invariant broken: {v}"));
        }
    }
    for e in &expected {
        if !violations.iter().any(|v| v.invariant == *e) {
            failures.push(format!("expected {e:?} to break; it held"));
        }
    }
    for r in rollouts {
        if let Err(e) = r {
            failures.push(format!("rollout failed: {e}"));
        }
    }
    failures
}

/// The expected object fields that differ at the end (or whose object is gone).
async fn object_failures(client: &Client, s: &Scenario) -> Vec<String> {
    let mut failures = vec![];
    for o in &s.expect.objects {
        let found = match resolve(client, &o.api_version, &o.kind, 1).await {
            Ok((ar, namespaced)) => api_for(client, &ar, namespaced, o.namespace.as_deref())
                .get_opt(&o.name)
                .await
                .ok()
                .flatten()
                .and_then(|obj| serde_json::to_value(obj).ok())
                .and_then(|v| v.pointer(&o.path).cloned()),
            Err(_) => None,
        };
        if found.as_ref() != Some(&o.equals) {
            failures.push(format!(
                "{} {}: {} is {}, expected {}",
                o.kind,
                o.name,
                o.path,
                found.map_or_else(|| "absent".to_string(), |v| v.to_string()),
                o.equals
            ));
        }
    }
    failures
}

/// The node rollout's lower bound from the runner's own durations; `None` when the timeline
/// starts no rollout.
fn lower_bound(
    checked: &Checked,
    kubelet_config: &kubelet::Config,
    lifecycle_config: &node_lifecycle::Config,
) -> Option<crate::bound::LowerBound> {
    let s = &checked.scenario;
    checked
        .steps
        .iter()
        .any(|(_, a, _)| matches!(a, Action::StartRollout(_)))
        .then(|| {
            let mut objects = s.objects.clone();
            for (_, a, _) in &checked.steps {
                if let Action::Apply(more) = a {
                    objects.extend(more.iter().cloned());
                }
            }
            crate::bound::lower_bound(
                s.cluster.upgrade_domains,
                kubelet_config.stop_after.unwrap_or(Duration::from_secs(30)),
                lifecycle_config.reboot + lifecycle_config.lag,
                kubelet_config.start_delay,
                &objects,
                s.cluster.spare.is_some(),
            )
        })
}
