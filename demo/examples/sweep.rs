//! The reliability sweep (issue #14 item 5) as a benchmark that prints its numbers:
//!
//! ```text
//! cargo run --profile sweep -p raygate-demo --example sweep -- [SEEDS] [FIRST] [THREADS]
//! ```
//!
//! runs seeds FIRST..FIRST+SEEDS (default 0..100) on THREADS threads (default 2), raygate and
//! each baseline on every seed (`raygate_demo::sweep`), and prints the wall time, seeds per
//! second, violations per invariant per variant, and raygate's failures in full. Exits 1 if
//! raygate broke an invariant or a seed stalled. `RAYGATE_SWEEP_DIGESTS=1` also prints each
//! run's digest (the same seed gives the same digest: compare two sweeps line by line).

#[path = "support/allocator.rs"]
mod allocator;

/// mimalloc: the sweep is allocation-bound (glibc malloc was about 30% of its profile).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use raygate_demo::sweep;

fn main() {
    if !allocator::keep_freed_memory() {
        eprintln!("note: mimalloc's purge delay left as it was (MIMALLOC_PURGE_DELAY set?)");
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .try_init();
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (seeds, first, threads) = (arg(1, 100), arg(2, 0), arg(3, 2));
    // the embedded CRDs (KubeRay, Kueue, LWS, raygate's NodeRollout), as `raygate simulate`
    let registry =
        raygate_sim::server::upstream::registry().unwrap_or_else(|e| panic!("the CRDs: {e}"));
    let wall = Instant::now();
    let summary = sweep::sweep(
        &registry,
        first..first + seeds,
        usize::try_from(threads).unwrap_or(2),
        Duration::from_secs(300),
    );
    let took = wall.elapsed().as_secs_f64();
    print!("{summary}");
    if std::env::var_os("RAYGATE_SWEEP_DIGESTS").is_some() {
        for ((seed, variant), digest) in &summary.digests {
            println!("digest {seed} {variant}: {digest:016x}");
        }
    }
    println!(
        "wall time: {took:.1} s for {seeds} seeds on {threads} threads: {:.2} seeds/s ({:.0} s per 10,000 seeds)",
        seeds as f64 / took,
        10_000.0 * took / seeds as f64
    );
    if !summary.raygate_clean() {
        std::process::exit(1);
    }
}
