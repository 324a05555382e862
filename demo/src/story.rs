//! `raygate demo` and `raygate simulate` (IO): a scenario on a fresh simulated cluster built from
//! the CRDs embedded in the binary ([`raygate_sim::server::upstream`]), on tokio's paused clock
//! (hours of cluster time in seconds), with a live display fed by the run's progress, the
//! NodeRollouts' status and raygate's Events. Nothing is read from disk but the scenario file a
//! user names.

use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use raygate::types::rollout::{NodeRollout, NodeRolloutStatus};
use raygate_sim::{Clock, CrdError, Registry, Sim};
use tokio::sync::mpsc;

use crate::scenario::{self, BaselineRun, Checked, Progress, Report, RunError, ScenarioError};
use crate::show::{Line, Narrator};

/// The demo's story: itself a scenario file, embedded.
pub const DEMO: &str = include_str!("../../config/scenarios/demo.yaml");

/// How the embedded story is named in errors.
pub const DEMO_SOURCE: &str = "config/scenarios/demo.yaml (embedded)";

/// The demo's story, checked.
pub fn demo() -> Result<Checked, ScenarioError> {
    scenario::parse(DEMO, DEMO_SOURCE)
}

/// Why a story could not be played.
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    #[error("loading the embedded CRDs: {0}")]
    Crds(#[from] CrdError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("starting the runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// What the display is told.
#[derive(Clone, Debug)]
pub enum Out {
    /// A line that stays.
    Line(String),
    /// The one status line a terminal rewrites in place (cluster time, act, rollout progress).
    Status(String),
}

/// A played story: the run's report, every line shown, the wall time it took.
#[derive(Debug)]
pub struct Played {
    pub report: Report,
    pub lines: Vec<Line>,
    pub wall: Duration,
}

/// What the watchers beside the run report.
enum Seen {
    Rollout(String, Box<NodeRolloutStatus>),
    Event {
        regarding: String,
        kind: String,
        reason: String,
        note: String,
    },
}

fn watch_rollouts(client: Client, tx: mpsc::UnboundedSender<Seen>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stream =
            watcher::watcher(Api::<NodeRollout>::all(client), Default::default()).applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(o) = stream.next().await {
            let Ok(o) = o else { continue };
            let status = Box::new(o.status.clone().unwrap_or_default());
            if tx.send(Seen::Rollout(o.name_any(), status)).is_err() {
                return;
            }
        }
    })
}

/// raygate's Events (its controllers report as `raygate...`).
fn watch_events(client: Client, tx: mpsc::UnboundedSender<Seen>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stream =
            watcher::watcher(Api::<Event>::all(client), Default::default()).applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(e) = stream.next().await {
            let Ok(e) = e else { continue };
            if !e
                .reporting_controller
                .as_deref()
                .is_some_and(|c| c.starts_with("raygate"))
            {
                continue;
            }
            let regarding = e.regarding.as_ref().map_or_else(String::new, |r| {
                let kind = r.kind.clone().unwrap_or_default();
                match &r.namespace {
                    Some(ns) => format!("{kind} {ns}/{}", r.name.clone().unwrap_or_default()),
                    None => format!("{kind} {}", r.name.clone().unwrap_or_default()),
                }
            });
            let seen = Seen::Event {
                regarding,
                kind: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                note: e.note.clone().unwrap_or_default(),
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    })
}

/// A fresh sim for `checked`: the built-in kinds, the embedded upstream CRDs, raygate's
/// NodeRollout, the scenario's seed. Build it inside the (paused) runtime that plays the story:
/// its clock reads tokio's, so one built before the runtime starts would carry the wall time in
/// between into every name and timestamp.
pub fn sim_for(checked: &Checked) -> Result<Sim, PlayError> {
    Ok(sim_with(
        &raygate_sim::server::upstream::registry()?,
        checked,
    ))
}

/// A fresh sim for `checked` over an already built `registry` (parsing the embedded CRDs costs
/// seconds: build it once for a story and its baselines).
pub fn sim_with(registry: &Registry, checked: &Checked) -> Sim {
    Sim::builder()
        .registry(registry.clone())
        .seed(checked.scenario.seed)
        .build()
}

/// The baselines of a story, each to run on a fresh cluster of the same shape and seed: KubeRay
/// without the gate where raygate's controller gates a RayService (the story without its node
/// rollouts, which need raygate's controller), and the three naive drains where the story rolls
/// nodes out (the same story, each rollout driven by the baseline instead). (name, scenario).
pub fn baselines(checked: &Checked) -> Vec<(String, Checked)> {
    let mut out = vec![];
    let gates_a_rayservice = checked.scenario.controller.run
        && checked
            .scenario
            .objects
            .iter()
            .any(|o| o["kind"] == "RayService");
    if gates_a_rayservice {
        let mut c = scenario::without_gate(checked);
        c.steps
            .retain(|(_, a, _)| !matches!(a, scenario::Action::StartRollout(_)));
        out.push(("KubeRay without the gate".to_string(), c));
    }
    let rolls_out = checked
        .steps
        .iter()
        .any(|(_, a, _)| matches!(a, scenario::Action::StartRollout(_)));
    if rolls_out {
        out.extend(scenario::drain_variants(checked));
    }
    out
}

/// Runs `runs` on `threads` threads, each on a fresh sim over `registry` on a paused runtime of
/// its own (the same story gives the same history whatever the threads); the results in the
/// order given.
pub fn run_all(
    registry: &Registry,
    runs: Vec<(String, Checked)>,
    threads: usize,
) -> std::thread::JoinHandle<Vec<BaselineRun>> {
    let registry = registry.clone();
    std::thread::spawn(move || {
        let queue = std::sync::Mutex::new(runs.into_iter().enumerate().collect::<Vec<_>>());
        let done = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..threads.max(1) {
                scope.spawn(|| {
                    loop {
                        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                        let Some((i, (name, checked))) = next else {
                            return;
                        };
                        // the sim is built inside its paused runtime (see [`sim_for`])
                        let report = block_on_paused(async {
                            scenario::run(sim_with(&registry, &checked), &checked).await
                        })
                        .map_err(|e| e.to_string())
                        .and_then(|r| r.map_err(|e| e.to_string()));
                        done.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((i, (name, report)));
                    }
                });
            }
        });
        let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
        done.sort_by_key(|(i, _)| *i);
        done.into_iter().map(|(_, r)| r).collect()
    })
}

/// Plays `checked` on `sim`, telling `out` every line as it happens (and a status line).
pub async fn play(
    sim: Sim,
    checked: &Checked,
    out: &mut dyn FnMut(Out),
) -> Result<Played, PlayError> {
    let wall = Instant::now();
    let clock: Clock = sim.clock().clone();
    let start = clock.now();
    let mut live = Live {
        narrator: Narrator::new(start),
        lines: vec![],
        narrated: 0,
        rollout_progress: String::new(),
    };
    let (ptx, mut prx) = mpsc::unbounded_channel::<Progress>();
    let (stx, mut srx) = mpsc::unbounded_channel::<Seen>();
    let watchers = [
        watch_rollouts(sim.client(), stx.clone()),
        watch_events(sim.client(), stx),
    ];
    let result = {
        let run = scenario::run_with(sim.clone(), checked, Some(ptx));
        let mut run = std::pin::pin!(run);
        loop {
            // biased: the same run shows its lines in the same order every time
            tokio::select! {
                biased;
                r = &mut run => break r,
                Some(p) = prx.recv() => {
                    live.progress(p, out);
                    out(Out::Status(format!(
                        "cluster time {} | act {} | {}",
                        crate::show::clock(clock.now().duration_since(start)),
                        live.narrator.act(),
                        live.rollout_progress
                    )));
                }
                Some(s) = srx.recv() => live.seen(s, clock.now(), out),
            }
        }
    };
    for w in watchers {
        w.abort();
    }
    let report = result?;
    // what the last second of the run recorded, not yet reported
    while let Ok(p) = prx.try_recv() {
        if let Progress::Changes(cs) = p {
            live.changes(&cs, out);
        }
    }
    let rest = report
        .history
        .changes
        .get(live.narrated..)
        .unwrap_or_default();
    let rest: Vec<Line> = rest.iter().flat_map(|c| live.narrator.change(c)).collect();
    live.emit(out, rest);
    Ok(Played {
        report,
        lines: live.lines,
        wall: wall.elapsed(),
    })
}

/// The live display as a run goes: the narrator, the lines so far, how many of the history's
/// changes were narrated, and the NodeRollout's progress for the status line.
struct Live {
    narrator: Narrator,
    lines: Vec<Line>,
    narrated: usize,
    rollout_progress: String,
}

impl Live {
    /// What the runner reported.
    fn progress(&mut self, p: Progress, out: &mut dyn FnMut(Out)) {
        match p {
            Progress::Step {
                at, note, action, ..
            } => {
                let new = self.narrator.step(at, note.as_deref(), &action);
                self.emit(out, new);
            }
            Progress::Changes(cs) => self.changes(&cs, out),
            Progress::TimelineDone { at } => {
                let new = self.narrator.timeline_done(at);
                self.emit(out, new);
            }
        }
    }

    /// Changes the recorder saw.
    fn changes(&mut self, cs: &[crate::history::Change], out: &mut dyn FnMut(Out)) {
        self.narrated += cs.len();
        let new = cs.iter().flat_map(|c| self.narrator.change(c)).collect();
        self.emit(out, new);
    }

    /// What the watches saw: a NodeRollout's status, an Event raygate wrote.
    fn seen(&mut self, s: Seen, now: k8s_openapi::jiff::Timestamp, out: &mut dyn FnMut(Out)) {
        let new = match s {
            Seen::Rollout(name, status) => {
                self.rollout_progress = format!(
                    "NodeRollout {name} {} {} {}",
                    status.phase.as_deref().unwrap_or("Pending"),
                    status.progress.as_deref().unwrap_or(""),
                    status.current_domain.as_deref().unwrap_or("")
                )
                .trim_end()
                .to_string();
                self.narrator.rollout(now, &name, &status)
            }
            Seen::Event {
                regarding,
                kind,
                reason,
                note,
            } => self.narrator.event(now, &regarding, &kind, &reason, &note),
        };
        self.emit(out, new);
    }

    fn emit(&mut self, out: &mut dyn FnMut(Out), new: Vec<Line>) {
        for l in new {
            out(Out::Line(self.narrator.render(&l)));
            self.lines.push(l);
        }
    }
}

/// Runs `f` on a current-thread runtime whose clock is paused (tokio auto-advances it whenever
/// every task waits), as the tests run the sim: cluster time costs no wall time.
pub fn block_on_paused<F: Future>(f: F) -> Result<F::Output, PlayError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(PlayError::Runtime)?;
    Ok(rt.block_on(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Action, StrategyName};

    fn strategies(c: &Checked) -> Vec<(StrategyName, Option<usize>)> {
        c.steps
            .iter()
            .filter_map(|(_, a, _)| match a {
                Action::StartRollout(r) => Some((r.strategy, r.k)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_demo_s_baselines_are_kuberay_without_the_gate_and_the_three_drains_on_the_same_story() {
        let demo = demo().unwrap();
        assert_eq!(strategies(&demo), [(StrategyName::NodeRollout, None)]);
        let runs = baselines(&demo);
        let names: Vec<&str> = runs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "KubeRay without the gate",
                "kubectl drain node by node",
                "random drains of 2 nodes",
                "UD by UD"
            ]
        );
        for (_, c) in &runs {
            assert_eq!(c.scenario.seed, demo.scenario.seed);
            assert_eq!(c.scenario.objects.len(), demo.scenario.objects.len());
        }
        // without the gate: no raygate, so no NodeRollout either; act 1's steps all stay
        let without = &runs[0].1;
        assert!(!without.scenario.controller.run);
        assert!(strategies(without).is_empty());
        assert_eq!(without.steps.len(), demo.steps.len() - 1);
        // the drains: raygate still gates act 1; act 2 is driven by the baseline
        let drains: Vec<_> = runs[1..].iter().map(|(_, c)| strategies(c)).collect();
        assert_eq!(
            drains,
            [
                vec![(StrategyName::NodeByNode, None)],
                vec![(StrategyName::RandomConcurrent, Some(2))],
                vec![(StrategyName::DomainByDomain, None)],
            ]
        );
        assert!(runs[1..].iter().all(|(_, c)| c.scenario.controller.run));
    }

    #[test]
    fn a_story_with_no_rollout_and_no_gated_rayservice_has_no_baselines() {
        let mut c = demo().unwrap();
        c.scenario.controller.run = false;
        c.steps
            .retain(|(_, a, _)| !matches!(a, Action::StartRollout(_)));
        assert!(baselines(&c).is_empty());
    }
}
