//! The reliability sweep (issue #14 item 5): a random cluster and timeline per seed
//! ([`generate`]), run on the simulated cluster for raygate and for each baseline on the same
//! cluster and seed ([`variants`]), every invariant checked from the cluster's own history.
//!
//! A seed draws one of two stories:
//! - **upgrade**: a RayService (head + 1–3 workers) opted into a ClusterQueue whose quota may or
//!   may not fit its zero-downtime upgrade, the upgrade at a random time, the quota raised later
//!   (or never), raygate's writes failing at a random rate (500, 409 or 429), raygate killed at a
//!   random time or right after a random write (a crash at a write boundary) and restarted.
//!   Baseline: KubeRay without the gate ([`crate::scenario::without_gate`]).
//! - **rollout**: 2–3 upgrade domains × 1–2 nodes (4 GPUs each), more LeaderWorkerSet groups
//!   than one domain holds (leader + worker, one GPU each, delegated readiness, the worker in its
//!   leader's domain) that take 20–180 s from start to Ready (`initialDelaySeconds`: a model
//!   server loading its weights), a budget on the leaders with a floor of at least 1 that
//!   raygate can always honour (it tolerates as many groups down as one domain can hold), mostly
//!   the tightest such floor, spare nodes outside the rollout (already at the target
//!   generation, mostly joining just before it, so the groups fill the rollout's domains) that
//!   hold every group, so the groups evicted from a drained domain always have room (no leader
//!   placed where its worker has none), a node-generation rollout once the groups are Ready.
//!   Baselines: kubectl drain node by node, random drains of 2 nodes, UD by UD.
//!
//! Deterministic on a seed: the generator is a pure function of it, the sim's names, uids and
//! faults are seeded with it, and every run is on tokio's paused clock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raygate_sim::{Registry, Sim};
use serde_json::{Value, json};

mod rollout;

use crate::baselines::SplitMix;
use crate::invariants::Invariant;
use crate::scenario::{
    self, Action, Checked, ClusterShape, ControllerSpec, Expectations, InjectFault, RaiseQuota,
    Scenario, without_gate,
};

/// The node generation a rollout story upgrades to (the nodes start at 0).
const TARGET: &str = "1";

/// The story a seed drew.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Story {
    Upgrade,
    Rollout,
}

/// A seeded draw helper over [`SplitMix`].
struct Draw(SplitMix);

impl Draw {
    /// Uniform in `lo..=hi`.
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.next_u64() % (hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.0.next_u64() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[usize_of(self.0.next_u64() % items.len() as u64)]
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The story of `seed`, for raygate: a pure function of the seed.
pub fn generate(seed: u64) -> Checked {
    let mut d = Draw(SplitMix::new(seed ^ 0x5eed_5eed));
    if d.chance(50) {
        upgrade(seed, &mut d)
    } else {
        rollout::rollout(seed, &mut d)
    }
}

/// The story a generated scenario tells.
pub fn story(checked: &Checked) -> Story {
    if checked
        .steps
        .iter()
        .any(|(_, a, _)| matches!(a, Action::StartRollout(_)))
    {
        Story::Rollout
    } else {
        Story::Upgrade
    }
}

/// raygate's run and each baseline's on the same cluster and seed: (name, scenario).
pub fn variants(checked: &Checked) -> Vec<(String, Checked)> {
    let mut out = vec![("raygate".to_string(), checked.clone())];
    match story(checked) {
        Story::Upgrade => out.push(("KubeRay without the gate".into(), without_gate(checked))),
        Story::Rollout => out.extend(scenario::drain_variants(checked).into_iter().map(
            |(name, mut c)| {
                // the story has nothing else for raygate's controller: the baselines drain
                // without it (and without its restarts)
                c.scenario.controller.run = false;
                c.steps.retain(|(_, a, _)| {
                    !matches!(
                        a,
                        Action::KillController
                            | Action::KillControllerAfterWrites(_)
                            | Action::RestartController
                    )
                });
                (name, c)
            },
        )),
    }
    out
}

fn checked(
    name: String,
    seed: u64,
    cluster: ClusterShape,
    controller: ControllerSpec,
    objects: Vec<Value>,
    mut steps: Vec<(Duration, Action)>,
    within: Duration,
) -> Checked {
    steps.sort_by_key(|(at, _)| *at);
    Checked {
        scenario: Scenario {
            name,
            description: String::new(),
            seed,
            cluster,
            controller,
            objects,
            timeline: vec![],
            expect: Expectations::default(),
        },
        steps: steps
            .into_iter()
            .enumerate()
            .map(|(i, (at, a))| (at, a, i as u64 + 1))
            .collect(),
        notes: BTreeMap::new(),
        within,
        settle: secs(120),
    }
}

fn shape(domains: u64, nodes: u64, namespaces: Vec<String>) -> ClusterShape {
    ClusterShape {
        upgrade_domains: usize_of(domains),
        nodes_per_domain: usize_of(nodes),
        allocatable: [("nvidia.com/gpu".to_string(), "4".to_string())].into(),
        domain_label: "topology.raygate.io/upgrade-domain".into(),
        node_labels: BTreeMap::new(),
        namespaces,
        spare: None,
    }
}

fn ray_container(version: &str) -> Value {
    json!([{"name": "ray", "image": format!("rayproject/ray:{version}"),
        "resources": {"requests": {"cpu": "1"}}}])
}

/// The held-upgrade story's objects: a queue with `quota` cpu and a RayService of `workers`
/// workers opted into it.
fn upgrade_objects(workers: u64, quota: u64) -> Vec<Value> {
    vec![
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": "default"}}),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "team"},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": "default", "resources": [{"name": "cpu", "nominalQuota": quota.to_string()}]}]}]}}),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "serving"}, "spec": {"clusterQueue": "team"}}),
        json!({"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "namespace": "serving",
                "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"rayClusterDeletionDelaySeconds": 1, "serveConfigV2": "applications: []",
                "rayClusterConfig": {"rayVersion": "2.51.0", "suspend": true,
                    "headGroupSpec": {"rayStartParams": {},
                        "template": {"spec": {"containers": ray_container("2.51.0")}}},
                    "workerGroupSpecs": [{"groupName": "w", "replicas": workers,
                        "minReplicas": 0, "maxReplicas": 10, "rayStartParams": {},
                        "template": {"spec": {"containers": ray_container("2.51.0")}}}]}}}),
    ]
}

/// The held-upgrade story with random sizes, times, faults and kills.
fn upgrade(seed: u64, d: &mut Draw) -> Checked {
    let workers = d.int(1, 3);
    let pods = 1 + workers;
    // the quota fits the running child and 0..=all of the upgrade's surge
    let quota = pods + d.int(0, pods);
    let objects = upgrade_objects(workers, quota);
    let upgrade_at = d.int(60, 180);
    let mut steps = vec![(
        secs(upgrade_at),
        Action::Patch(scenario::PatchStep {
            api_version: "ray.io/v1".into(),
            kind: "RayService".into(),
            namespace: Some("serving".into()),
            name: "svc".into(),
            patch: json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.0"}}}),
            if_exists: false,
        }),
    )];
    let raise_at = upgrade_at + d.int(60, 400);
    if d.chance(80) {
        steps.push((
            secs(raise_at),
            Action::RaiseQuota(RaiseQuota {
                cluster_queue: "team".into(),
                resource: "cpu".into(),
                to: (2 * pods).to_string(),
                flavor: None,
            }),
        ));
    }
    if d.chance(60) {
        let code = d.pick(&[500, 500, 409, 429]);
        let rate = d.pick(&[0.02, 0.05, 0.1]);
        steps.push((
            secs(0),
            Action::InjectFault(InjectFault {
                verbs: vec![],
                resource: None,
                user_agent: Some("raygate".into()),
                code,
                rate,
            }),
        ));
    }
    if d.chance(50) {
        let at = d.int(5, raise_at + 60);
        let kill = if d.chance(60) {
            Action::KillControllerAfterWrites(d.int(1, 40))
        } else {
            Action::KillController
        };
        steps.push((secs(at), kill));
        steps.push((secs(at + d.int(10, 120)), Action::RestartController));
    }
    checked(
        format!("sweep seed {seed}: upgrade, {workers} workers, quota {quota}"),
        seed,
        shape(1, d.int(1, 2), vec!["serving".into()]),
        ControllerSpec {
            run: true,
            pod_gate: false,
        },
        objects,
        steps,
        secs(30 * 60),
    )
}

/// One variant's run of one seed.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub seed: u64,
    pub story: Story,
    pub variant: String,
    /// The invariants broken (one entry per violation).
    pub violations: Vec<(Invariant, String)>,
    /// A rollout that failed or a run that could not finish (the runner's error), or a stall.
    pub errors: Vec<String>,
    /// Cluster seconds the story took.
    pub cluster_seconds: i64,
    /// [`digest`] of the run's report (0 when it could not finish): the same seed gives the
    /// same digest.
    pub digest: u64,
    /// Its rollout's time over the rollout's lower bound ([`crate::bound`]); `None` without a
    /// rollout that finished.
    pub ratio: Option<f64>,
}

/// What a run found, as lines: the cluster after every instant of its history (one line per
/// object an instant changed, its compact state as [`crate::history::History::replay`] applies
/// it, in key order), then its violations, its rollouts' outcomes, when it ended and its
/// failures. Two runs of one seed give the same lines; [`first_divergence`] finds where two
/// differ.
pub fn history_lines(report: &scenario::Report) -> Vec<String> {
    let start = report.started;
    let mut out = vec![];
    let mut instant: BTreeMap<&crate::history::Key, &Option<crate::history::State>> =
        BTreeMap::new();
    let mut changes = report.history.changes.iter().peekable();
    while let Some(c) = changes.next() {
        instant.insert(&c.key, &c.state);
        if changes.peek().is_none_or(|n| n.at != c.at) {
            let ms = c.at.duration_since(start).as_millis();
            for (key, state) in &instant {
                out.push(format!("{ms:>9} ms {key}: {state:?}"));
            }
            instant.clear();
        }
    }
    out.extend(report.violations.iter().map(|v| format!("violation: {v}")));
    out.push(format!("rollouts: {:?}", report.rollouts));
    out.push(format!(
        "ended: {} ms",
        report.ended.duration_since(start).as_millis()
    ));
    out.extend(report.failures.iter().map(|f| format!("failure: {f}")));
    out
}

/// A digest of a run's [`history_lines`].
pub fn digest(report: &scenario::Report) -> u64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same on every run and machine
    let mut h = std::hash::DefaultHasher::new();
    history_lines(report).hash(&mut h);
    h.finish()
}

/// Where two runs' [`history_lines`] first differ: the `context` lines before it both share,
/// then up to `context` lines of each from there; `None` when they are the same.
pub fn first_divergence(a: &[String], b: &[String], context: usize) -> Option<String> {
    let at = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let mut out = format!(
        "first difference at line {at} of {} / {}\n",
        a.len(),
        b.len()
    );
    for l in &a[at.saturating_sub(context)..at] {
        out.push_str(&format!("    {l}\n"));
    }
    for (side, lines) in [("a", a), ("b", b)] {
        out.push_str(&format!("  -- {side}:\n"));
        for l in lines.iter().skip(at).take(context.max(1)) {
            out.push_str(&format!("  {side} {l}\n"));
        }
    }
    Some(out)
}

/// Runs `variant` (a name of [`variants`]) of `seed` on a fresh sim over `registry`, on a paused
/// current-thread runtime of its own, as the sweep does; its report, or why it could not run.
pub fn run_report(
    registry: &Registry,
    seed: u64,
    variant: &str,
) -> Result<scenario::Report, String> {
    let (_, checked) = variants(&generate(seed))
        .into_iter()
        .find(|(name, _)| name == variant)
        .ok_or_else(|| format!("seed {seed} has no variant {variant:?}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| format!("no runtime: {e}"))?;
    // the sim (its clock) is made inside the runtime, on its paused clock
    rt.block_on(async {
        let sim = Sim::builder().registry(registry.clone()).seed(seed).build();
        scenario::run(sim, &checked).await
    })
    .map_err(|e| e.to_string())
}

/// Runs one variant (`checked`) of `seed` on a fresh sim over `registry`.
pub async fn run_variant(
    registry: &Registry,
    seed: u64,
    story: Story,
    variant: String,
    checked: &Checked,
) -> RunResult {
    let sim = Sim::builder().registry(registry.clone()).seed(seed).build();
    let mut r = RunResult {
        seed,
        story,
        variant,
        violations: vec![],
        errors: vec![],
        cluster_seconds: 0,
        digest: 0,
        ratio: None,
    };
    match scenario::run(sim, checked).await {
        Ok(report) => {
            r.cluster_seconds = report.ended.duration_since(report.started).as_secs();
            r.violations = report
                .violations
                .iter()
                .map(|v| (v.invariant, v.to_string()))
                .collect();
            r.errors = report
                .rollouts
                .iter()
                .filter_map(|o| o.as_ref().err().cloned())
                .collect();
            r.digest = digest(&report);
            r.ratio = report.lower_bound.as_ref().and_then(|b| {
                let from = report.rollouts.iter().flatten().map(|o| o.started).min()?;
                let to = report.rollouts.iter().flatten().map(|o| o.finished).max()?;
                b.ratio(Duration::try_from(to.duration_since(from)).ok()?)
            });
        }
        Err(e) => r.errors.push(e.to_string()),
    }
    r
}

/// Runs every variant of `seed` on fresh sims over `registry` (the CRDs: KubeRay's, Kueue's,
/// LWS's, raygate's NodeRollout).
pub async fn run_seed(registry: &Registry, seed: u64) -> Vec<RunResult> {
    let checked = generate(seed);
    let story = story(&checked);
    let mut out = vec![];
    for (variant, c) in variants(&checked) {
        out.push(run_variant(registry, seed, story, variant, &c).await);
    }
    out
}

/// The sweep's figures per variant.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub runs: u64,
    /// Runs with at least one violation or error.
    pub failed_runs: u64,
    pub violations: BTreeMap<String, u64>,
    pub errors: u64,
    /// Seeds of the failed runs (the first few).
    pub failed_seeds: Vec<u64>,
    /// Each finished rollout's ratio to its lower bound.
    pub ratios: Vec<f64>,
}

impl Tally {
    /// The median and the largest ratio to the lower bound.
    pub fn ratio_median_max(&self) -> Option<(f64, f64)> {
        let mut r = self.ratios.clone();
        r.sort_by(f64::total_cmp);
        Some((*r.get(r.len() / 2)?, *r.last()?))
    }
}

/// What a sweep found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub seeds: u64,
    pub stalled: Vec<u64>,
    pub stories: BTreeMap<String, u64>,
    pub by_variant: BTreeMap<String, Tally>,
    /// raygate's violations and errors in full (each is a bug or a named test).
    pub raygate_failures: Vec<RunResult>,
    /// Each run's [`digest`] by (seed, variant).
    pub digests: BTreeMap<(u64, String), u64>,
}

impl Summary {
    pub fn add(&mut self, results: &[RunResult]) {
        self.seeds += 1;
        if let Some(r) = results.first() {
            *self.stories.entry(format!("{:?}", r.story)).or_default() += 1;
        }
        for r in results {
            self.digests.insert((r.seed, r.variant.clone()), r.digest);
            let t = self.by_variant.entry(r.variant.clone()).or_default();
            t.runs += 1;
            for (inv, _) in &r.violations {
                *t.violations.entry(format!("{inv:?}")).or_default() += 1;
            }
            t.errors += r.errors.len() as u64;
            t.ratios.extend(r.ratio);
            if !r.violations.is_empty() || !r.errors.is_empty() {
                t.failed_runs += 1;
                if t.failed_seeds.len() < 20 {
                    t.failed_seeds.push(r.seed);
                }
                if r.variant == "raygate" {
                    self.raygate_failures.push(r.clone());
                }
            }
        }
    }

    /// One digest of every run's [`digest`], in seed and variant order: the same seeds give the
    /// same digest, on any number of threads.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        self.digests.hash(&mut h);
        self.stalled.hash(&mut h);
        h.finish()
    }

    /// raygate broke nothing and nothing stalled.
    pub fn raygate_clean(&self) -> bool {
        self.raygate_failures.is_empty() && self.stalled.is_empty()
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "seeds: {} ({:?}); stalled: {:?}; digest {:016x}",
            self.seeds,
            self.stories,
            self.stalled,
            self.digest()
        )?;
        writeln!(
            f,
            "{:<28} {:>6} {:>12} {:>7} {:>16}  violations per invariant",
            "variant", "runs", "failed runs", "errors", "ratio p50/max"
        )?;
        for (name, t) in &self.by_variant {
            let ratio = t
                .ratio_median_max()
                .map_or_else(|| "-".into(), |(m, x)| format!("{m:.2}/{x:.2}"));
            writeln!(
                f,
                "{name:<28} {:>6} {:>12} {:>7} {ratio:>16}  {:?}",
                t.runs, t.failed_runs, t.errors, t.violations
            )?;
        }
        for r in &self.raygate_failures {
            writeln!(
                f,
                "raygate failed on seed {} ({:?}): {}",
                r.seed,
                r.story,
                generate(r.seed).scenario.name
            )?;
            for (_, v) in &r.violations {
                writeln!(f, "  {v}")?;
            }
            for e in &r.errors {
                writeln!(f, "  error: {e}")?;
            }
        }
        Ok(())
    }
}

/// How far a sweep has come, told after each seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Seeds finished (or stalled) so far.
    pub done: u64,
    pub total: u64,
    /// Of those, the seeds that stalled.
    pub stalled: u64,
}

/// [`sweep_reporting`] telling no one.
pub fn sweep(
    registry: &Registry,
    seeds: std::ops::Range<u64>,
    threads: usize,
    wall_limit: Duration,
) -> Summary {
    sweep_reporting(registry, seeds, threads, wall_limit, Arc::new(|_| {}))
}

/// Runs `seeds` on `threads` threads, each seed on a paused runtime of its own thread; a seed
/// not done within `wall_limit` of wall time is reported stalled (cluster time stopped: a task
/// spinning) and its thread left behind. `progress` hears of each seed as it ends. The summary
/// adds the seeds in seed order, whatever thread finished first: the same seeds give the same
/// summary on any number of threads.
pub fn sweep_reporting(
    registry: &Registry,
    seeds: std::ops::Range<u64>,
    threads: usize,
    wall_limit: Duration,
    progress: Arc<dyn Fn(Progress) + Send + Sync>,
) -> Summary {
    let total = seeds.end.saturating_sub(seeds.start);
    let next = Arc::new(AtomicU64::new(seeds.start));
    // per seed: its runs, or `None` when it stalled
    let done: Arc<Mutex<BTreeMap<u64, Option<Vec<RunResult>>>>> = Arc::default();
    let workers: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let (next, done, registry) = (next.clone(), done.clone(), registry.clone());
            let progress = progress.clone();
            let end = seeds.end;
            std::thread::spawn(move || {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= end {
                        return;
                    }
                    let (tx, rx) = std::sync::mpsc::channel();
                    let registry = registry.clone();
                    std::thread::spawn(move || {
                        let rt = match tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .start_paused(true)
                            .build()
                        {
                            Ok(rt) => rt,
                            Err(e) => {
                                tracing::error!(error = %e, "no runtime for the sweep");
                                return;
                            }
                        };
                        let _ = tx.send(rt.block_on(run_seed(&registry, seed)));
                    });
                    let outcome = rx.recv_timeout(wall_limit).ok();
                    // told under the lock: in the order the seeds ended
                    let mut done = done.lock().unwrap_or_else(|p| p.into_inner());
                    done.insert(seed, outcome);
                    progress(Progress {
                        done: done.len() as u64,
                        total,
                        stalled: done.values().filter(|o| o.is_none()).count() as u64,
                    });
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let done = std::mem::take(&mut *done.lock().unwrap_or_else(|p| p.into_inner()));
    let mut summary = Summary::default();
    for (seed, outcome) in done {
        match outcome {
            Some(results) => summary.add(&results),
            None => {
                summary.seeds += 1;
                summary.stalled.push(seed);
            }
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_generates_the_same_story() {
        for seed in 0..50 {
            let (a, b) = (generate(seed), generate(seed));
            assert_eq!(a.scenario.name, b.scenario.name);
            assert_eq!(format!("{:?}", a.steps), format!("{:?}", b.steps));
            assert_eq!(a.scenario.objects, b.scenario.objects);
        }
        let names: std::collections::BTreeSet<String> =
            (0..50).map(|s| generate(s).scenario.name).collect();
        assert!(names.len() > 30, "seeds draw different stories: {names:?}");
    }

    #[test]
    fn both_stories_faults_and_kills_are_drawn() {
        let all: Vec<Checked> = (0..200).map(generate).collect();
        let count = |f: &dyn Fn(&Checked) -> bool| all.iter().filter(|c| f(c)).count();
        assert!(count(&|c| story(c) == Story::Upgrade) > 50);
        assert!(count(&|c| story(c) == Story::Rollout) > 50);
        let has = |c: &Checked, f: &dyn Fn(&Action) -> bool| c.steps.iter().any(|(_, a, _)| f(a));
        assert!(count(&|c| has(c, &|a| matches!(a, Action::InjectFault(_)))) > 30);
        assert!(count(&|c| has(c, &|a| matches!(a, Action::KillControllerAfterWrites(_)))) > 10);
        assert!(count(&|c| has(c, &|a| matches!(a, Action::KillController))) > 10);
    }

    #[test]
    fn the_summary_shows_the_median_and_largest_ratio_to_the_lower_bound() {
        let result = |seed: u64, ratio: Option<f64>| RunResult {
            seed,
            story: Story::Rollout,
            variant: "raygate".into(),
            violations: vec![],
            errors: vec![],
            cluster_seconds: 600,
            digest: seed,
            ratio,
        };
        let mut s = Summary::default();
        for (seed, ratio) in [(1, Some(1.2)), (2, Some(2.0)), (3, None), (4, Some(1.5))] {
            s.add(&[result(seed, ratio)]);
        }
        let t = &s.by_variant["raygate"];
        assert_eq!(t.ratio_median_max(), Some((1.5, 2.0)));
        assert!(s.to_string().contains("1.50/2.00"), "{s}");
        assert_eq!(Tally::default().ratio_median_max(), None);
    }

    #[test]
    fn the_variants_are_raygate_and_each_baseline_on_the_same_cluster() {
        let upgrade = (0..)
            .map(generate)
            .find(|c| story(c) == Story::Upgrade)
            .unwrap();
        let v = variants(&upgrade);
        assert_eq!(v.len(), 2);
        assert!(!v[1].1.scenario.controller.run, "KubeRay alone");
        assert!(
            v[1].1
                .scenario
                .objects
                .iter()
                .all(|o| o["spec"]["rayClusterConfig"].get("suspend").is_none()),
            "nothing asks to be created suspended"
        );
        let rollout = (0..)
            .map(generate)
            .find(|c| story(c) == Story::Rollout)
            .unwrap();
        let v = variants(&rollout);
        assert_eq!(v.len(), 4);
        for (_, c) in &v {
            assert_eq!(c.scenario.objects, rollout.scenario.objects);
            assert_eq!(c.scenario.seed, rollout.scenario.seed);
        }
    }
}
