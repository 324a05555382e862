//! The reliability sweep in the normal suite: a few seeds (raygate and every baseline on each),
//! raygate breaking no invariant and no seed stalling. `RAYGATE_SWEEP_SEEDS=n` runs n seeds
//! (CI may run more), `RAYGATE_SWEEP_FIRST=k` starts at seed k; the full sweep is the
//! `sweep` example.

use std::path::PathBuf;
use std::time::Duration;

use raygate_demo::sweep;

#[test]
fn raygate_breaks_no_invariant_on_random_clusters_and_timelines() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (seeds, first) = (env("RAYGATE_SWEEP_SEEDS", 4), env("RAYGATE_SWEEP_FIRST", 0));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let rollout_crd =
        std::fs::read_to_string(root.join("crds/noderollouts.raygate.io.yaml")).unwrap();
    let registry =
        sweep::registry(&[&root.join("../shared/upstream-crds")], &[&rollout_crd]).unwrap();
    let wall = std::time::Instant::now();
    let summary = sweep::sweep(&registry, first..first + seeds, 2, Duration::from_secs(240));
    eprintln!("{summary}wall time: {:.1} s", wall.elapsed().as_secs_f64());
    assert_eq!(summary.seeds, seeds);
    assert!(summary.raygate_clean(), "{summary}");
    // the baselines ran on the same seeds
    assert!(summary.by_variant.len() >= 2, "{summary}");
}
