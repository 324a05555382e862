//! The same seed gives the same run (issue #14): one rollout seed and one upgrade seed of the
//! sweep, raygate's variant, each run twice on fresh sims and paused runtimes, compared by the
//! digest of the cluster's history, the violations, the rollouts' outcomes and the end time
//! ([`sweep::digest`]).

use raygate_demo::scenario::Action;
use raygate_demo::sweep::{self, RunResult, Story};

fn run_raygate(registry: &raygate_sim::Registry, seed: u64) -> RunResult {
    let checked = sweep::generate(seed);
    let story = sweep::story(&checked);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(sweep::run_variant(
        registry,
        seed,
        story,
        "raygate".into(),
        &checked,
    ))
}

fn assert_same_twice(registry: &raygate_sim::Registry, seed: u64) {
    let (a, b) = (run_raygate(registry, seed), run_raygate(registry, seed));
    assert!(a.errors.is_empty(), "seed {seed}: {:?}", a.errors);
    assert_ne!(a.digest, 0, "seed {seed}: the run finished");
    assert_eq!(
        (a.cluster_seconds, &a.violations, &a.errors),
        (b.cluster_seconds, &b.violations, &b.errors),
        "seed {seed}"
    );
    assert_eq!(
        a.digest, b.digest,
        "seed {seed}: the same seed, another history"
    );
}

/// The first seed drawing a rollout on 2 UDs × 1 node (the smallest), and the first drawing an
/// upgrade with injected faults and a kill at a write boundary.
fn seeds() -> (u64, u64) {
    let rollout = (0..)
        .find(|&s| {
            let c = sweep::generate(s);
            sweep::story(&c) == Story::Rollout
                && c.scenario.cluster.upgrade_domains == 2
                && c.scenario.cluster.nodes_per_domain == 1
        })
        .unwrap();
    let upgrade = (0..)
        .find(|&s| {
            let c = sweep::generate(s);
            let has = |f: &dyn Fn(&Action) -> bool| c.steps.iter().any(|(_, a, _)| f(a));
            sweep::story(&c) == Story::Upgrade
                && has(&|a| matches!(a, Action::InjectFault(_)))
                && has(&|a| matches!(a, Action::KillControllerAfterWrites(_)))
        })
        .unwrap();
    (rollout, upgrade)
}

#[test]
fn a_rollout_seed_gives_the_same_history_twice() {
    let registry = raygate_sim::upstream::registry().unwrap();
    assert_same_twice(&registry, seeds().0);
}

#[test]
fn an_upgrade_seed_with_faults_and_a_kill_gives_the_same_history_twice() {
    let registry = raygate_sim::upstream::registry().unwrap();
    assert_same_twice(&registry, seeds().1);
}
