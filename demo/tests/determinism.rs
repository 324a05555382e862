//! The same seed gives the same run (issue #14): sweep seeds of both stories, each variant run
//! twice on fresh sims and paused runtimes in this process and once in another process (the test
//! runs itself as a child), compared line by line (`sweep::history_lines`: the cluster after
//! every instant, the violations, the rollouts' outcomes, the end) and by digest. Hash order
//! differs between maps in one process and between processes, so both catch a decision or a
//! write that follows it.

use raygate_demo::scenario::Action;
use raygate_demo::sweep::{self, Story};

/// Set in the child: it prints its digests for the parent.
const CHILD: &str = "RAYGATE_DETERMINISM_CHILD";

/// Two rollout seeds (3 UDs, LWS groups, a PDB) and two upgrade seeds, one with injected
/// faults and a kill at a write boundary; with the variant each is run as.
fn runs() -> Vec<(u64, String)> {
    let rollouts = (0..)
        .filter(|&s| {
            let c = sweep::generate(s);
            sweep::story(&c) == Story::Rollout && c.scenario.cluster.upgrade_domains == 3
        })
        .take(2);
    let faulty_upgrade = (0..)
        .find(|&s| {
            let c = sweep::generate(s);
            let has = |f: &dyn Fn(&Action) -> bool| c.steps.iter().any(|(_, a, _)| f(a));
            sweep::story(&c) == Story::Upgrade
                && has(&|a| matches!(a, Action::InjectFault(_)))
                && has(&|a| matches!(a, Action::KillControllerAfterWrites(_)))
        })
        .unwrap();
    let upgrade = (0..)
        .find(|&s| sweep::story(&sweep::generate(s)) == Story::Upgrade && s != faulty_upgrade)
        .unwrap();
    let mut out = vec![];
    for seed in rollouts.chain([faulty_upgrade, upgrade]) {
        out.push((seed, "raygate".to_string()));
    }
    // and one baseline of each story
    out.push((out[0].0, "kubectl drain node by node".into()));
    out.push((faulty_upgrade, "KubeRay without the gate".into()));
    // four LeaderWorkerSet groups evicted at once and recreated in one instant: their pods' uids
    // follow the order in which the kubelets and the LWS controller, sharing the sim's pod
    // informers, wake within that instant
    out.push((11, "random drains of 2 nodes".into()));
    out
}

/// Each run's digest, as a line; `twice`: each run twice, their lines the same.
fn digests(twice: bool) -> Vec<String> {
    let registry = raygate_sim::server::upstream::registry().unwrap();
    let mut out = vec![];
    for (seed, variant) in runs() {
        let run = || {
            let report = sweep::run_report(&registry, seed, &variant).unwrap();
            (sweep::history_lines(&report), sweep::digest(&report))
        };
        let (a, digest) = run();
        assert!(a.len() > 3, "seed {seed} {variant}: a history was recorded");
        if twice && let Some(d) = sweep::first_divergence(&a, &run().0, 4) {
            panic!("seed {seed} {variant}: two runs in one process differ\n{d}");
        }
        out.push(format!("digest {seed} {variant}: {digest:016x}"));
    }
    out
}

#[test]
fn a_seed_gives_the_same_history_twice_in_a_process_and_in_another_process() {
    if std::env::var_os(CHILD).is_some() {
        for line in digests(false) {
            println!("{line}");
        }
        return;
    }
    let here = digests(true);
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "a_seed_gives_the_same_history_twice_in_a_process_and_in_another_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "the child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let there: Vec<String> = stdout
        .lines()
        // the harness may print "test NAME ... " on the line of the first
        .filter_map(|l| l.find("digest ").map(|i| l[i..].to_string()))
        .collect();
    assert_eq!(here, there, "the same seeds in another process");
}
