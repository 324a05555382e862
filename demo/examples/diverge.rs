//! Finds where two runs of one seed first differ (issue #14, determinism):
//!
//! ```text
//! cargo run -p raygate-demo --example diverge -- SEED [VARIANT] [--runs N] [--dump FILE]
//! ```
//!
//! runs VARIANT (default `raygate`; the names are `raygate_demo::sweep::variants`) of SEED N
//! times (default 2) in this process, each on a fresh sim and paused runtime as the sweep does,
//! and prints the first line where a run's history differs from the first run's, with the lines
//! before it (`sweep::history_lines`: per instant, each object's compact state). Exits 1 on a
//! difference. `--dump FILE` writes the first run's lines to FILE, so two processes can be
//! compared with `diff`.

use raygate_demo::sweep;

fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .try_init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let positional: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || !args[i - 1].starts_with("--")))
        .map(|(_, a)| a)
        .collect();
    let Some(seed) = positional.first().and_then(|s| s.parse::<u64>().ok()) else {
        eprintln!("usage: diverge SEED [VARIANT] [--runs N] [--dump FILE]");
        std::process::exit(2);
    };
    let variant = positional.get(1).map_or("raygate", |v| v.as_str());
    let runs: usize = flag("--runs").and_then(|n| n.parse().ok()).unwrap_or(2);
    let registry =
        raygate_sim::server::upstream::registry().unwrap_or_else(|e| panic!("the CRDs: {e}"));
    let lines = |i: usize| match sweep::run_report(&registry, seed, variant) {
        Ok(report) => sweep::history_lines(&report),
        Err(e) => {
            eprintln!("run {i}: {e}");
            std::process::exit(2);
        }
    };
    let first = lines(0);
    if let Some(path) = flag("--dump") {
        std::fs::write(&path, first.join("\n") + "\n")
            .unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }
    for i in 1..runs {
        let other = lines(i);
        if let Some(d) = sweep::first_divergence(&first, &other, 12) {
            println!("seed {seed} {variant}: run {i} differs from run 0 (a: run 0, b: run {i})");
            print!("{d}");
            std::process::exit(1);
        }
    }
    println!(
        "seed {seed} {variant}: {runs} runs, the same {} lines",
        first.len()
    );
}
