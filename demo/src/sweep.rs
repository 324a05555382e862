//! The reliability sweep (issue #14 item 5): a random cluster and timeline per seed
//! ([`generate`]), run on the simulated cluster for raygate and for each baseline on the same
//! cluster and seed ([`variants`]), every invariant checked from the cluster's own history.
//!
//! A seed draws one of two stories:
//! - **upgrade**: a RayService (head + 1–3 workers) opted into a ClusterQueue whose quota may or
//!   may not fit its zero-downtime upgrade, the upgrade at a random time, the quota raised later
//!   (or never), raygate's writes failing at a random rate (500, 409 or 429), raygate killed at a
//!   random time or right after a random write (a crash at a write boundary) and restarted.
//!   Baseline: KubeRay without the gate ([`crate::baselines::without_gate`]).
//! - **rollout**: 2–3 upgrade domains × 1–2 nodes (4 GPUs each), 2–N LeaderWorkerSet groups
//!   (leader + worker, one GPU each, delegated readiness, the worker in its leader's domain), a
//!   budget on the leaders with a random floor raygate can always honour (it tolerates as many
//!   groups down as one domain can hold: no fixed-capacity dead end), no more groups than one
//!   domain holds (the groups moved out of a drained domain fit in the one upgraded first, so no
//!   leader is placed where its worker has no room), a node-generation rollout.
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

use crate::baselines::{SplitMix, without_gate};
use crate::invariants::Invariant;
use crate::scenario::{
    self, Action, Checked, ClusterShape, ControllerSpec, Expectations, InjectFault, RaiseQuota,
    Scenario, StartRollout, StrategyName,
};

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
        rollout(seed, &mut d)
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
        Story::Rollout => {
            for (name, strategy, k) in [
                ("kubectl drain node by node", StrategyName::NodeByNode, None),
                (
                    "random drains of 2 nodes",
                    StrategyName::RandomConcurrent,
                    Some(2),
                ),
                ("UD by UD", StrategyName::DomainByDomain, None),
            ] {
                let mut c = checked.clone();
                c.scenario.name = format!("{} ({name})", checked.scenario.name);
                for (_, a, _) in &mut c.steps {
                    if let Action::StartRollout(r) = a {
                        r.strategy = strategy;
                        r.k = k;
                        r.taint_outdated = false;
                    }
                }
                out.push((name.into(), c));
            }
        }
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
    }
}

fn ray_container(version: &str) -> Value {
    json!([{"name": "ray", "image": format!("rayproject/ray:{version}"),
        "resources": {"requests": {"cpu": "1"}}}])
}

/// The held-upgrade story with random sizes, times, faults and kills.
fn upgrade(seed: u64, d: &mut Draw) -> Checked {
    let workers = d.int(1, 3);
    let pods = 1 + workers;
    // the quota fits the running child and 0..=all of the upgrade's surge
    let quota = pods + d.int(0, pods);
    let objects = vec![
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
    ];
    let upgrade_at = d.int(60, 180);
    let mut steps = vec![(
        secs(upgrade_at),
        Action::Patch(scenario::PatchStep {
            api_version: "ray.io/v1".into(),
            kind: "RayService".into(),
            namespace: Some("serving".into()),
            name: "svc".into(),
            patch: json!({"spec": {"rayClusterConfig": {"rayVersion": "2.52.0"}}}),
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

/// A node-generation rollout over LeaderWorkerSet groups behind a budget.
fn rollout(seed: u64, d: &mut Draw) -> Checked {
    let domains = d.int(2, 3);
    let nodes = d.int(1, 2);
    // one domain can hold 2 groups per node (4 GPUs, 2 per group). With the outdated nodes
    // tainted, the groups evicted from ud-k can only go to the domains upgraded before it, and
    // there is no gang scheduling: when they do not all fit, a recreated leader takes a domain's
    // last free GPU and its worker (bound to the leader's domain) waits for good, so the group is
    // never Ready again and the drain pauses on its health check (seeds 105 and 122). Every
    // group fits in one domain: ud-0, upgraded first, has room for all of them.
    let per_domain = 2 * nodes;
    let groups = d.int(2, per_domain);
    // tolerate at least a whole domain's groups down: raygate can always drain a domain
    let floor = d.int(0, groups.saturating_sub(per_domain));
    let group_key = "leaderworkerset.sigs.k8s.io/group-key";
    let template = |labels: Value, readiness: bool| {
        let mut t = json!({"metadata": {"labels": labels}, "spec": {"containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
            "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}},
            "readinessProbe": {"httpGet": {"path": "/health", "port": 8000},
                "periodSeconds": 1, "failureThreshold": 1}}]}});
        if readiness {
            t["metadata"]["annotations"] = json!({"sim.raygate.io/readiness-group": group_key});
        } else {
            t["spec"]["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/worker-index",
                    "operator": "In", "values": ["0"]}]},
                "matchLabelKeys": [group_key],
                "topologyKey": "topology.raygate.io/upgrade-domain"}]}});
        }
        t
    };
    let objects = vec![
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "llm", "namespace": "serving"},
            "spec": {"replicas": groups, "leaderWorkerTemplate": {"size": 2,
                "leaderTemplate": template(json!({"role": "leader"}), true),
                "workerTemplate": template(json!({"role": "worker"}), false)}}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "leaders", "namespace": "serving"},
            "spec": {"minAvailable": floor, "selector": {"matchLabels": {"role": "leader"}}}}),
    ];
    let steps = vec![(
        secs(d.int(90, 180)),
        Action::StartRollout(StartRollout {
            strategy: StrategyName::Raygate,
            target: "1".into(),
            k: None,
            group_label: None,
            taint_outdated: true,
            name: None,
            health_check_stable: None,
        }),
    )];
    checked(
        format!(
            "sweep seed {seed}: rollout, {domains} UDs x {nodes} nodes, {groups} groups, floor {floor}"
        ),
        seed,
        shape(domains, nodes, vec!["serving".into()]),
        ControllerSpec {
            run: false,
            pod_gate: false,
        },
        objects,
        steps,
        secs(3 * 3600),
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
}

/// Runs every variant of `seed` on fresh sims over `registry` (the CRDs: KubeRay's, Kueue's,
/// LWS's, raygate's NodeRollout).
pub async fn run_seed(registry: &Registry, seed: u64) -> Vec<RunResult> {
    let checked = generate(seed);
    let story = story(&checked);
    let mut out = vec![];
    for (variant, c) in variants(&checked) {
        let sim = Sim::builder().registry(registry.clone()).seed(seed).build();
        let mut r = RunResult {
            seed,
            story,
            variant,
            violations: vec![],
            errors: vec![],
            cluster_seconds: 0,
        };
        match scenario::run(sim, &c).await {
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
            }
            Err(e) => r.errors.push(e.to_string()),
        }
        out.push(r);
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
}

impl Summary {
    pub fn add(&mut self, results: &[RunResult]) {
        self.seeds += 1;
        if let Some(r) = results.first() {
            *self.stories.entry(format!("{:?}", r.story)).or_default() += 1;
        }
        for r in results {
            let t = self.by_variant.entry(r.variant.clone()).or_default();
            t.runs += 1;
            for (inv, _) in &r.violations {
                *t.violations.entry(format!("{inv:?}")).or_default() += 1;
            }
            t.errors += r.errors.len() as u64;
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

    /// raygate broke nothing and nothing stalled.
    pub fn raygate_clean(&self) -> bool {
        self.raygate_failures.is_empty() && self.stalled.is_empty()
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "seeds: {} ({:?}); stalled: {:?}",
            self.seeds, self.stories, self.stalled
        )?;
        writeln!(
            f,
            "{:<28} {:>6} {:>12} {:>7}  violations per invariant",
            "variant", "runs", "failed runs", "errors"
        )?;
        for (name, t) in &self.by_variant {
            writeln!(
                f,
                "{name:<28} {:>6} {:>12} {:>7}  {:?}",
                t.runs, t.failed_runs, t.errors, t.violations
            )?;
        }
        for r in &self.raygate_failures {
            writeln!(f, "raygate failed on seed {} ({:?}):", r.seed, r.story)?;
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

/// Runs `seeds` on `threads` threads, each seed on a paused runtime of its own thread; a seed
/// not done within `wall_limit` of wall time is reported stalled (cluster time stopped: a task
/// spinning) and its thread left behind.
pub fn sweep(
    registry: &Registry,
    seeds: std::ops::Range<u64>,
    threads: usize,
    wall_limit: Duration,
) -> Summary {
    let next = Arc::new(AtomicU64::new(seeds.start));
    let summary = Arc::new(Mutex::new(Summary::default()));
    let workers: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let (next, summary, registry) = (next.clone(), summary.clone(), registry.clone());
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
                    let outcome = rx.recv_timeout(wall_limit);
                    let mut s = summary.lock().unwrap_or_else(|p| p.into_inner());
                    match outcome {
                        Ok(results) => s.add(&results),
                        Err(_) => {
                            s.seeds += 1;
                            s.stalled.push(seed);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    summary.lock().unwrap_or_else(|p| p.into_inner()).clone()
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
    fn every_rollout_tolerates_a_whole_domain_down_and_fits_in_one_domain() {
        for seed in 0..500 {
            let c = generate(seed);
            if story(&c) != Story::Rollout {
                continue;
            }
            let per_domain = 2 * c.scenario.cluster.nodes_per_domain as i64;
            let groups = c.scenario.objects[0]["spec"]["replicas"].as_i64().unwrap();
            let floor = c.scenario.objects[1]["spec"]["minAvailable"]
                .as_i64()
                .unwrap();
            let domains = c.scenario.cluster.upgrade_domains as i64;
            assert!(groups - floor >= per_domain.min(groups), "seed {seed}");
            assert!(
                groups <= per_domain,
                "seed {seed}: every group fits in one domain"
            );
            assert!(domains >= 2, "seed {seed}");
        }
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
