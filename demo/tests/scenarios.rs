//! Every scenario shipped in `config/scenarios/`, run on the simulated cluster on the paused
//! clock: each ends with its expectations met (the invariants it expects to hold hold, the ones a
//! baseline is expected to break break).

use std::path::PathBuf;

use raygate_demo::scenario;
use raygate_sim::Sim;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// KubeRay's, Kueue's and LWS's upstream CRDs, and raygate's NodeRollout.
fn sim(seed: u64) -> Sim {
    Sim::builder()
        .crds_dir(root().join("../shared/upstream-crds"))
        .expect("../shared/upstream-crds")
        .crds_yaml(&std::fs::read_to_string(root().join("crds/noderollouts.raygate.io.yaml")).unwrap())
        .unwrap()
        .seed(seed)
        .build()
}

async fn run(file: &str) {
    let wall = std::time::Instant::now();
    let path = root().join("config/scenarios").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let checked = scenario::parse(&text, file).unwrap_or_else(|e| panic!("{e}"));
    let report = scenario::run(sim(checked.scenario.seed), &checked)
        .await
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    eprintln!(
        "{file}: {} cluster-seconds in {:.1} s wall, {} changes recorded, {} violations",
        report.ended.duration_since(report.started).as_secs(),
        wall.elapsed().as_secs_f64(),
        report.history.changes.len(),
        report.violations.len()
    );
    for v in &report.violations {
        eprintln!("  {v}");
    }
    for r in &report.rollouts {
        match r {
            Ok(o) => eprintln!(
                "  rollout {}: {} s, {} evictions, {} 429s",
                o.strategy,
                o.took().as_secs(),
                o.evictions,
                o.refusals
            ),
            Err(e) => eprintln!("  rollout failed: {e}"),
        }
    }
    assert!(report.passed(), "{file}: {:#?}", report.failures);
}

macro_rules! scenarios {
    ($($name:ident => $file:literal),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $name() {
            run($file).await;
        }
    )*};
}

scenarios! {
    quota_held_upgrade => "quota-held-upgrade.yaml",
    quota_held_upgrade_controller_killed => "quota-held-upgrade-controller-killed.yaml",
    quota_held_upgrade_api_faults => "quota-held-upgrade-api-faults.yaml",
    rollout_raygate => "rollout-raygate.yaml",
    rollout_domain_by_domain => "rollout-domain-by-domain.yaml",
    rollout_node_by_node => "rollout-node-by-node.yaml",
    rollout_random_2 => "rollout-random-2.yaml",
}
