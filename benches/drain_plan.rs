//! Drain planning at cluster scale: 5,000 nodes in 50 upgrade domains, 100,000 pods (95,000 in
//! 1,900 workloads of 50 pods, one in five a representative; one DaemonSet pod per node) and
//! 2,000 PodDisruptionBudgets (1,900 over the representatives, a tenth of them with
//! `matchExpressions` only, plus 100 that select nothing on the nodes), over 100 namespaces.
//!
//! Prints the time to plan every node, to plan the outdated kubelet generation (half the nodes),
//! and the contract preflight (median of a few runs each). Never asserts a time; the target is a
//! plan in at most 200 ms.
//!
//!   cargo bench --bench drain_plan

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::jiff::Timestamp;
use raygate::drain::{
    Cluster, DomainOrder, DrainRules, Generation, GenerationSource, GenerationTarget,
    GroupContract, GroupLabels, NodeInfoField, PlanOptions, PreflightOptions, plan, preflight,
};
use raygate_testing::core::{self, NodeExt, PdbExt, PodExt, UD, int};

const NODES: usize = 5_000;
const DOMAINS: usize = 50;
const NAMESPACES: usize = 100;
const WORKLOADS: usize = 1_900;
const PODS_PER_WORKLOAD: usize = 50;
const GROUP_SIZE: usize = 5;
const EXTRA_PDBS: usize = 100;
const RUNS: usize = 7;

fn nodes() -> Vec<Node> {
    (0..NODES)
        .map(|i| {
            core::node(&format!("node-{i}"), &format!("ud-{:02}", i % DOMAINS))
                .kubelet(["v1.30.4", "v1.31.1"][i % 2])
        })
        .collect()
}

/// Workload `w`'s pods: groups of [`GROUP_SIZE`] packed on one domain's nodes, groups of one
/// workload spread over domains; each group's leader has a readiness probe.
fn workload_pods(w: usize) -> impl Iterator<Item = Pod> {
    let ns = format!("ns-{}", w % NAMESPACES);
    let app = format!("w{w}");
    (0..PODS_PER_WORKLOAD).map(move |j| {
        let group = j / GROUP_SIZE;
        let leader = j % GROUP_SIZE == 0;
        let domain = (w + group) % DOMAINS;
        let node = domain + DOMAINS * ((w * 7 + j) % (NODES / DOMAINS));
        let p = core::pod(&format!("{ns}/{app}-{j}"), &format!("node-{node}"))
            .owned_by("apps/v1", "StatefulSet", &app)
            .label("app", &app)
            .label("role", if leader { "leader" } else { "worker" })
            .label("group", &format!("{app}-g{group}"));
        if leader { p.readiness_probe() } else { p }
    })
}

fn pods() -> Vec<Pod> {
    let daemon = (0..NODES).map(|n| {
        core::pod(&format!("kube-system/node-agent-{n}"), &format!("node-{n}"))
            .owned_by("apps/v1", "DaemonSet", "node-agent")
            .label("app", "node-agent")
    });
    (0..WORKLOADS)
        .flat_map(workload_pods)
        .chain(daemon)
        .collect()
}

fn pdbs() -> Vec<PodDisruptionBudget> {
    let expr = |key: &str, value: String| LabelSelectorRequirement {
        key: key.into(),
        operator: "In".into(),
        values: Some(vec![value]),
    };
    let per_workload = (0..WORKLOADS).map(|w| {
        let name = format!("ns-{}/w{w}-leaders", w % NAMESPACES);
        let app = format!("w{w}");
        let b = core::pdb(&name, &[("app", &app), ("role", "leader")]).min_available(int(8));
        match w % 10 {
            0 => b.selector(Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![expr("app", app), expr("role", "leader".into())]),
            })),
            _ => b,
        }
    });
    let extra = (0..EXTRA_PDBS).map(|i| {
        let name = format!("ns-{}/other-{i}", i % NAMESPACES);
        core::pdb(&name, &[("app", &format!("elsewhere-{i}"))]).min_available(int(8))
    });
    per_workload.chain(extra).collect()
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

/// This thread's CPU time (user + system, Linux `/proc/thread-self/stat`, 10 ms ticks): on a
/// shared machine the wall time also counts waiting for a core.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Median wall time, mean CPU time per run, and the last result.
struct Timed<T> {
    wall: Duration,
    cpu: Option<Duration>,
    out: T,
}

fn time<T>(f: impl Fn() -> T) -> Timed<T> {
    let mut out = None;
    let cpu_start = cpu_time();
    let runs = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            out = Some(f());
            start.elapsed()
        })
        .collect();
    let cpu = cpu_time()
        .zip(cpu_start)
        .map(|(end, start)| (end - start) / RUNS as u32);
    Timed {
        wall: median(runs),
        cpu,
        // `RUNS` > 0, so `out` is set.
        out: out.unwrap_or_else(|| unreachable!()),
    }
}

fn show(d: Option<Duration>) -> String {
    d.map_or("n/a".into(), |d| format!("{d:.0?}"))
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{cpus} CPUs ({model}); one thread used")
}

fn main() {
    println!("raygate drain plan benchmark on {}", machine());
    let build = Instant::now();
    let (nodes, pods, pdbs) = (nodes(), pods(), pdbs());
    println!(
        "  cluster: {} nodes, {} pods, {} PDBs (built in {:.0?})",
        nodes.len(),
        pods.len(),
        pdbs.len(),
        build.elapsed()
    );
    let cluster = Cluster::new(&nodes, &pods, &pdbs);
    let now = Timestamp::UNIX_EPOCH;
    let every_node = PlanOptions {
        domain_label: UD.into(),
        order: DomainOrder::FewestProtectedGroups,
        groups: GroupLabels::of_labels(&["group"]),
        rules: DrainRules {
            ignore_daemonsets: true,
            ..DrainRules::default()
        },
        ..PlanOptions::default()
    };
    let t = time(|| plan(&cluster, &every_node, now));
    let took = format!("{:.0?} wall, {} CPU", t.wall, show(t.cpu));
    match t.out {
        Ok(p) => {
            let count = |f: fn(&raygate::drain::DomainPlan) -> usize| {
                p.domains.iter().map(f).sum::<usize>()
            };
            println!(
                "  plan, every node:        {took}  ({} domains, phase 1 {}, phase 2 {}, skipped {}, blocked {})",
                p.domains.len(),
                count(|d| d.phase1.len()),
                count(|d| d.phase2.len()),
                count(|d| d.skipped.len()),
                count(|d| d.blocked.len()),
            );
        }
        Err(e) => println!("  plan, every node: error {e}"),
    }
    let outdated = PlanOptions {
        generation: Some(Generation {
            source: GenerationSource::NodeInfo(NodeInfoField::KubeletVersion),
            target: GenerationTarget::Newest,
        }),
        order: DomainOrder::OldestGeneration,
        ..every_node.clone()
    };
    let t = time(|| plan(&cluster, &outdated, now));
    let targets = t
        .out
        .map_or(0, |p| p.domains.iter().map(|d| d.nodes.len()).sum());
    println!(
        "  plan, outdated kubelet:  {:.0?} wall, {} CPU  ({targets} target nodes)",
        t.wall,
        show(t.cpu)
    );
    let check = PreflightOptions {
        domain_label: UD.into(),
        contracts: vec![GroupContract::custom("group", "role=leader")],
    };
    let t = time(|| preflight(&cluster, &check));
    let findings = t.out.map_or(0, |f| f.len());
    println!(
        "  preflight:               {:.0?} wall, {} CPU  ({findings} findings)",
        t.wall,
        show(t.cpu)
    );
    println!("  target: a plan in <= 200 ms (median wall time and mean CPU time of {RUNS} runs)");
}
