//! Where the reliability sweep's time goes, per variant (issue #14 item 5):
//!
//! ```text
//! cargo run --profile sweep -p raygate-demo --example sweep_profile -- [SEEDS] [FIRST]
//! ```
//!
//! runs every variant of seeds FIRST..FIRST+SEEDS one after the other on one thread (each on a
//! fresh paused runtime, as the sweep does) and prints, per variant, the runs, the wall time per
//! run, the cluster time per run, the commits to the sim's store per run (every write that
//! changed an object) and the watches open at the end.
//!
//! `SWEEP_PROFILE_BEFORE_ROLLOUT=1` runs each variant only up to its rollout's start (the steps
//! from the `StartRollout` on left out; the story then settles as any does): the part of a
//! rollout seed its four runs share, to weigh running it once and forking the variants there.

#[path = "support/allocator.rs"]
mod allocator;

/// mimalloc: the sweep is allocation-bound (glibc malloc was about 30% of its profile).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use raygate_demo::{scenario, sweep};
use raygate_sim::Sim;

#[derive(Default)]
struct Figures {
    runs: u64,
    wall: Duration,
    cluster_seconds: u64,
    commits: u64,
    watches: u64,
}

fn main() {
    allocator::keep_freed_memory();
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (seeds, first) = (arg(1, 10), arg(2, 100));
    let before_rollout = std::env::var_os("SWEEP_PROFILE_BEFORE_ROLLOUT").is_some();
    let registry =
        raygate_sim::server::upstream::registry().unwrap_or_else(|e| panic!("the CRDs: {e}"));
    let mut by_variant: BTreeMap<String, Figures> = BTreeMap::new();
    let total = Instant::now();
    for seed in first..first + seeds {
        let checked = sweep::generate(seed);
        for (variant, mut c) in sweep::variants(&checked) {
            if before_rollout {
                cut_at_rollout(&mut c);
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"));
            let wall = Instant::now();
            let (cluster, commits, watches) = rt.block_on(async {
                let sim = Sim::builder().registry(registry.clone()).seed(seed).build();
                let r = scenario::run(sim.clone(), &c).await;
                let cluster = r.map_or(0, |r| {
                    r.ended.duration_since(r.started).as_secs().max(0) as u64
                });
                (cluster, sim.revision(), sim.watch_count() as u64)
            });
            let f = by_variant.entry(variant).or_default();
            f.runs += 1;
            f.wall += wall.elapsed();
            f.cluster_seconds += cluster;
            f.commits += commits;
            f.watches += watches;
        }
    }
    println!(
        "{:<28} {:>5} {:>12} {:>14} {:>14} {:>14} {:>14}",
        "variant", "runs", "ms per run", "cluster s/run", "commits/run", "commits/c.s.", "watches"
    );
    for (name, f) in &by_variant {
        let n = f.runs.max(1) as f64;
        println!(
            "{name:<28} {:>5} {:>12.0} {:>14.0} {:>14.0} {:>14.2} {:>14.1}",
            f.runs,
            f.wall.as_secs_f64() * 1000.0 / n,
            f.cluster_seconds as f64 / n,
            f.commits as f64 / n,
            f.commits as f64 / f.cluster_seconds.max(1) as f64,
            f.watches as f64 / n,
        );
    }
    println!(
        "{seeds} seeds in {:.1} s on one thread",
        total.elapsed().as_secs_f64()
    );
}

/// Leaves out the steps from the rollout's start on (a story without a rollout is kept whole).
fn cut_at_rollout(c: &mut scenario::Checked) {
    let start = c
        .steps
        .iter()
        .find(|(_, a, _)| matches!(a, scenario::Action::StartRollout(_)))
        .map(|(at, _, _)| *at);
    if let Some(start) = start {
        c.steps.retain(|(at, _, _)| *at < start);
    }
}
