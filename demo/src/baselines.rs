//! Drains to compare raygate's with (test actors on the simulated cluster, never in the
//! production library), each driving the same node-generation upgrade: a node is drained, handed
//! to the upgrade agent (the sim's node lifecycle reboots it to the next generation), and
//! uncordoned once Ready at the target generation.
//!
//! - [`Strategy::NodeByNode`]: `kubectl drain` one node at a time, as an operator's loop would:
//!   cordon, evict every pod through the Eviction API at once, a 429 retried every 5 s, then wait
//!   until every evicted pod is gone. kubectl's `k8s.io/kubectl/pkg/drain/drain.go` (`evictPods`:
//!   on `IsTooManyRequests` it prints "error when evicting pods/… (will retry after 5s)" and
//!   sleeps 5 s; `waitForDelete` polls every second). No domain logic, no health check.
//! - [`Strategy::RandomConcurrent`]: `k` nodes picked at random (seeded) drained at once, then
//!   the next `k`.
//! - [`Strategy::DomainByDomain`]: every node of an upgrade domain at once, pods in no
//!   particular order (no protected-first), no health check between domains.
//! - [`Strategy::Raygate`]: raygate's executor (`raygate::controller::drain::run`) with the
//!   `reboot` hand-off, until the NodeRollout controller lands.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use raygate::controller::drain::{self as executor, Run};
use raygate::drain::engine::{Handoff, Options as EngineOptions, Phase};
use raygate::drain::{Generation, GenerationSource, GenerationTarget, PlanOptions};
use raygate_sim::Clock;
use raygate_sim::world::actors::node_lifecycle;
use serde_json::json;

/// Why a baseline could not finish.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("listing the nodes: {0}")]
    ListNodes(#[source] kube::Error),
    #[error("listing the pods on node {node}: {source}")]
    ListPods {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("cordoning node {node}: {source}")]
    Cordon {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("evicting pod {pod}: {source}")]
    Evict {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading pod {pod}: {source}")]
    ReadPod {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("handing node {node} to the upgrade agent: {source}")]
    Handoff {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("node {node} not Ready at generation {target} within {limit:?}")]
    NodeNotBack {
        node: String,
        target: String,
        limit: Duration,
    },
    #[error("raygate's drain: {0}")]
    Raygate(#[source] executor::DrainRunError),
    #[error("raygate's drain ended {phase}")]
    RaygateEnded { phase: String },
}

/// A drain strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Strategy {
    NodeByNode,
    RandomConcurrent { k: usize },
    DomainByDomain,
    Raygate,
}

impl Strategy {
    pub fn name(&self) -> String {
        match self {
            Strategy::NodeByNode => "kubectl drain node by node".into(),
            Strategy::RandomConcurrent { k } => format!("random drains of {k} nodes"),
            Strategy::DomainByDomain => "UD by UD, no protected-first".into(),
            Strategy::Raygate => "raygate".into(),
        }
    }
}

/// The upgrade every strategy drives.
#[derive(Clone, Debug)]
pub struct Upgrade {
    /// The node label naming the upgrade domain.
    pub domain_label: String,
    /// The node label carrying the generation (the sim's node lifecycle bumps it on a reboot).
    pub generation_label: String,
    pub target: String,
    /// Seed of [`Strategy::RandomConcurrent`]'s picks.
    pub seed: u64,
    /// kubectl drain's retry after a 429.
    pub retry: Duration,
    /// How long a node may take to come back (cluster time).
    pub node_limit: Duration,
    /// For [`Strategy::Raygate`]: the pod label naming a group.
    pub group_label: Option<String>,
    /// For [`Strategy::Raygate`]: a taint raygate puts on (and takes off) outdated nodes.
    pub taint: Option<Taint>,
    /// For [`Strategy::Raygate`]: the disruption controller's lag in this cluster.
    pub disruption_controller_lag: Duration,
}

impl Default for Upgrade {
    fn default() -> Self {
        Upgrade {
            domain_label: "topology.raygate.io/upgrade-domain".into(),
            generation_label: node_lifecycle::GENERATION.into(),
            target: "1".into(),
            seed: 0,
            retry: Duration::from_secs(5),
            node_limit: Duration::from_secs(3600),
            group_label: None,
            taint: None,
            disruption_controller_lag: Duration::from_secs(5),
        }
    }
}

/// What a run did, by its own account (the invariants read the cluster's history instead).
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub strategy: String,
    pub started: Timestamp,
    pub finished: Timestamp,
    /// Evictions accepted.
    pub evictions: usize,
    /// 429s received.
    pub refusals: usize,
}

impl Outcome {
    pub fn took(&self) -> SignedDuration {
        self.finished.duration_since(self.started)
    }
}

/// SplitMix64: a seeded, dependency-free generator for the random picks.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = usize::try_from(self.next_u64() % (i as u64 + 1)).unwrap_or(0);
            items.swap(i, j);
        }
    }
}

/// The batches of nodes a strategy drains, in order (pure): `nodes` are (name, domain) of the
/// nodes not at the target generation.
pub fn batches(strategy: &Strategy, nodes: &[(String, String)], seed: u64) -> Vec<Vec<String>> {
    let mut nodes = nodes.to_vec();
    nodes.sort();
    match strategy {
        Strategy::NodeByNode | Strategy::Raygate => {
            nodes.into_iter().map(|(n, _)| vec![n]).collect()
        }
        Strategy::RandomConcurrent { k } => {
            let mut names: Vec<String> = nodes.into_iter().map(|(n, _)| n).collect();
            SplitMix::new(seed).shuffle(&mut names);
            names.chunks((*k).max(1)).map(<[String]>::to_vec).collect()
        }
        Strategy::DomainByDomain => {
            let mut by_domain: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (n, d) in nodes {
                by_domain.entry(d).or_default().push(n);
            }
            by_domain.into_values().collect()
        }
    }
}

/// Counters of one run.
#[derive(Default)]
struct Counts {
    evictions: std::sync::atomic::AtomicUsize,
    refusals: std::sync::atomic::AtomicUsize,
}

fn is_daemonset_or_mirror(p: &Pod) -> bool {
    p.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        || p.annotations().contains_key("kubernetes.io/config.mirror")
}

fn is_finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// One pod through the Eviction API, a 429 retried every `retry` (kubectl's `evictPods`), then
/// waited for until it is gone or replaced (kubectl's `waitForDelete`, every second).
async fn evict_and_wait(
    client: &Client,
    pod: &Pod,
    retry: Duration,
    counts: &Counts,
) -> Result<(), BaselineError> {
    use std::sync::atomic::Ordering::Relaxed;
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let uid = pod.uid();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let id = format!("{ns}/{name}");
    loop {
        match api.evict(&name, &EvictParams::default()).await {
            Ok(_) => {
                tracing::info!(pod = %id, "evicted");
                counts.evictions.fetch_add(1, Relaxed);
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 429 => {
                counts.refusals.fetch_add(1, Relaxed);
                tracing::info!(pod = %id, "error when evicting pod (will retry after {retry:?}): {}", s.message);
                tokio::time::sleep(retry).await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(source) => return Err(BaselineError::Evict { pod: id, source }),
        }
    }
    loop {
        match api.get_opt(&name).await {
            Ok(None) => return Ok(()),
            Ok(Some(p)) if p.uid() != uid => return Ok(()),
            Ok(Some(_)) => tokio::time::sleep(Duration::from_secs(1)).await,
            Err(source) => return Err(BaselineError::ReadPod { pod: id, source }),
        }
    }
}

async fn set_unschedulable(client: &Client, node: &str, on: bool) -> Result<(), BaselineError> {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": on}})),
        )
        .await
        .map(|_| ())
        .map_err(|source| BaselineError::Cordon {
            node: node.into(),
            source,
        })
}

/// `kubectl drain` of `nodes` at once: cordon each, then evict every pod on them (DaemonSet and
/// mirror pods and finished pods skipped, as kubectl's filters do) concurrently.
async fn kubectl_drain(
    client: &Client,
    nodes: &[String],
    retry: Duration,
    counts: &Counts,
) -> Result<(), BaselineError> {
    for n in nodes {
        set_unschedulable(client, n, true).await?;
    }
    let mut pods = vec![];
    for n in nodes {
        let list = Api::<Pod>::all(client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={n}")))
            .await
            .map_err(|source| BaselineError::ListPods {
                node: n.clone(),
                source,
            })?;
        pods.extend(
            list.items
                .into_iter()
                .filter(|p| !is_daemonset_or_mirror(p) && !is_finished(p)),
        );
    }
    try_join_all(
        pods.iter()
            .map(|p| evict_and_wait(client, p, retry, counts)),
    )
    .await?;
    Ok(())
}

fn at_generation(n: &Node, label: &str, target: &str) -> bool {
    n.labels().get(label).map(String::as_str) == Some(target)
        && node_lifecycle::is_ready(n)
        && !n.annotations().contains_key(node_lifecycle::PHASE)
        && !n.annotations().contains_key(node_lifecycle::LIFECYCLE)
}

/// The hand-off: the node to the upgrade agent (a reboot to the next generation), then uncordoned
/// once Ready at `target`.
async fn reboot_and_uncordon(
    client: &Client,
    node: &str,
    upgrade: &Upgrade,
) -> Result<(), BaselineError> {
    node_lifecycle::request(client, node, "reboot")
        .await
        .map_err(|source| BaselineError::Handoff {
            node: node.into(),
            source,
        })?;
    // a watch of the one node, as `kubectl wait node/N --for=…` waits (and as an upgrade agent
    // reporting completion would), not a GET every second: 15% of a baseline run's CPU was that
    // poll
    let api: Api<Node> = Api::all(client.clone());
    let back = |n: Option<&Node>| {
        n.is_some_and(|n| at_generation(n, &upgrade.generation_label, &upgrade.target))
    };
    let waited = tokio::time::timeout(upgrade.node_limit, async {
        // a failed watch is watched again, as the poll retried a failed GET
        while let Err(e) = kube::runtime::wait::await_condition(api.clone(), node, back).await {
            tracing::debug!(%node, error = %e, "baseline: watching the node failed");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
    if waited.is_err() {
        return Err(BaselineError::NodeNotBack {
            node: node.into(),
            target: upgrade.target.clone(),
            limit: upgrade.node_limit,
        });
    }
    set_unschedulable(client, node, false).await
}

/// The nodes not at the target generation: (name, domain).
async fn outdated(
    client: &Client,
    upgrade: &Upgrade,
) -> Result<Vec<(String, String)>, BaselineError> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(BaselineError::ListNodes)?;
    Ok(nodes
        .items
        .iter()
        .filter(|n| n.labels().get(&upgrade.generation_label) != Some(&upgrade.target))
        .map(|n| {
            (
                n.name_any(),
                n.labels()
                    .get(&upgrade.domain_label)
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect())
}

/// Runs `strategy` to the end: every node upgraded to `upgrade.target`.
pub async fn run(
    client: &Client,
    clock: &Clock,
    strategy: &Strategy,
    upgrade: &Upgrade,
) -> Result<Outcome, BaselineError> {
    let started = clock.now();
    if *strategy == Strategy::Raygate {
        return run_raygate(client, clock, upgrade).await;
    }
    let counts = Counts::default();
    let nodes = outdated(client, upgrade).await?;
    for batch in batches(strategy, &nodes, upgrade.seed) {
        tracing::info!(strategy = %strategy.name(), nodes = ?batch, "draining");
        kubectl_drain(client, &batch, upgrade.retry, &counts).await?;
        try_join_all(
            batch
                .iter()
                .map(|n| reboot_and_uncordon(client, n, upgrade)),
        )
        .await?;
    }
    Ok(Outcome {
        strategy: strategy.name(),
        started,
        finished: clock.now(),
        evictions: counts.evictions.into_inner(),
        refusals: counts.refusals.into_inner(),
    })
}

/// The upgrade agent for raygate's `reboot` hand-off (what a system-upgrade-controller Plan
/// selecting the label would be): reboots a node labelled `raygate.io/upgrade=requested` that is
/// not at the `target` generation yet, once per generation (the label stays until raygate
/// uncordons the upgraded node), through the sim's node lifecycle. Runs until aborted.
pub fn reboot_agent(
    client: Client,
    generation_label: String,
    target: String,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stream = watcher::watcher(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().labels("raygate.io/upgrade=requested"),
        )
        .applied_objects();
        let mut stream = std::pin::pin!(stream);
        let mut requested: std::collections::BTreeSet<(String, String)> = Default::default();
        while let Some(event) = stream.next().await {
            let Ok(n) = event else { continue };
            let generation = n
                .labels()
                .get(&generation_label)
                .cloned()
                .unwrap_or_default();
            if generation == target
                || n.annotations().contains_key(node_lifecycle::LIFECYCLE)
                || n.annotations().contains_key(node_lifecycle::PHASE)
                || !requested.insert((n.name_any(), generation))
            {
                continue;
            }
            if let Err(e) = node_lifecycle::request(&client, &n.name_any(), "reboot").await {
                tracing::warn!(node = %n.name_any(), error = %e, "upgrade agent: reboot request failed");
            }
        }
    })
}

async fn run_raygate(
    client: &Client,
    clock: &Clock,
    upgrade: &Upgrade,
) -> Result<Outcome, BaselineError> {
    let started = clock.now();
    let agent = reboot_agent(
        client.clone(),
        upgrade.generation_label.clone(),
        upgrade.target.clone(),
    );
    let options = EngineOptions {
        plan: PlanOptions {
            domain_label: upgrade.domain_label.clone(),
            generation: Some(Generation {
                source: GenerationSource::Label(upgrade.generation_label.clone()),
                target: GenerationTarget::Value(upgrade.target.clone()),
            }),
            groups: raygate::drain::GroupLabels::of_labels(upgrade.group_label.as_slice()),
            taint: upgrade.taint.clone(),
            ..PlanOptions::default()
        },
        disruption_controller_lag: SignedDuration::try_from(upgrade.disruption_controller_lag)
            .unwrap_or(SignedDuration::ZERO),
        handoff: Handoff::reboot(),
        ..EngineOptions::default()
    };
    let mut evictions = 0;
    let mut refusals = 0;
    // a refusal is counted when a domain's pause on a 429 starts
    let mut paused: Vec<bool> = vec![];
    let end = executor::run(
        client.clone(),
        Arc::new(clock.clone()),
        Run::new(options),
        |s| {
            tracing::debug!(phase = ?s.phase, waiting = %s.waiting, "raygate's drain");
            evictions = s.domains.iter().map(|d| d.evicted.len()).sum();
            paused.resize(s.domains.len(), false);
            for (was, d) in paused.iter_mut().zip(&s.domains) {
                if d.refusal.is_some() && !*was {
                    refusals += 1;
                }
                *was = d.refusal.is_some();
            }
        },
        std::future::pending(),
    )
    .await;
    agent.abort();
    let end = end.map_err(BaselineError::Raygate)?;
    if end.phase != Phase::Completed {
        return Err(BaselineError::RaygateEnded {
            phase: format!("{:?}: {}", end.phase, end.waiting),
        });
    }
    Ok(Outcome {
        strategy: Strategy::Raygate.name(),
        started,
        finished: clock.now(),
        evictions,
        refusals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<(String, String)> {
        [
            ("n-3", "ud-1"),
            ("n-0", "ud-0"),
            ("n-1", "ud-0"),
            ("n-2", "ud-1"),
        ]
        .iter()
        .map(|(n, d)| (n.to_string(), d.to_string()))
        .collect()
    }

    #[test]
    fn node_by_node_drains_one_node_at_a_time_in_name_order() {
        assert_eq!(
            batches(&Strategy::NodeByNode, &nodes(), 0),
            vec![vec!["n-0"], vec!["n-1"], vec!["n-2"], vec!["n-3"]]
        );
    }

    #[test]
    fn domain_by_domain_drains_a_whole_domain_at_once() {
        assert_eq!(
            batches(&Strategy::DomainByDomain, &nodes(), 0),
            vec![vec!["n-0", "n-1"], vec!["n-2", "n-3"]]
        );
    }

    #[test]
    fn random_drains_are_seeded_and_cover_every_node_once() {
        let s = Strategy::RandomConcurrent { k: 2 };
        let a = batches(&s, &nodes(), 7);
        assert_eq!(a, batches(&s, &nodes(), 7), "same seed, same picks");
        assert!(a.iter().all(|b| b.len() == 2));
        let mut all: Vec<String> = a.concat();
        all.sort();
        assert_eq!(all, vec!["n-0", "n-1", "n-2", "n-3"]);
        let differs = (0..20).any(|seed| batches(&s, &nodes(), seed) != a);
        assert!(differs, "the seed changes the picks");
    }
}
