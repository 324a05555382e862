//! Serving capacity a plan would take down whole (pure): every workload whose serving pods all
//! sit in one domain of the plan, with no budget that keeps one of them running while the
//! domain drains. Draining that domain interrupts the workload until a replacement is Ready
//! elsewhere: `raygate drain plan`, `drain check` and the NodeRollout say so before anything is
//! touched.
//!
//! A workload is a RayCluster's serve pods (KubeRay labels them `ray.io/serve=true`: the pods
//! its serve Service selects, so for a RayService's active cluster its whole serving capacity),
//! or the pods of one Deployment (through its ReplicaSet), ReplicaSet or StatefulSet. Only pods
//! the plan evicts count (phase 1 or 2 of a domain; DaemonSet, mirror and skipped pods stay).
//! A budget keeps the workload serving when it selects some of those pods and tolerates fewer
//! disruptions at once than it selects of them: the drain then evicts the rest only after the
//! first are Ready again elsewhere.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;

use super::pdb::{self, PdbIndex};
use super::{Cluster, FastMap, Plan, controller_of, is_finished, name, namespace};

/// KubeRay's serve label on the pods of a RayService's clusters.
pub const SERVE_LABEL: &str = "ray.io/serve";
/// KubeRay's label naming a pod's RayCluster.
const CLUSTER_LABEL: &str = "ray.io/cluster";
/// The Deployment controller's label on a ReplicaSet's pods (the ReplicaSet is `<deployment>-<hash>`).
const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// The readiness probe's default period (`periodSeconds`), for the interruption estimate.
const DEFAULT_PERIOD_SECONDS: i64 = 10;

/// One workload a domain's drain would take down whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exposure {
    /// `RayCluster ns/name (serve pods)`, `Deployment ns/name`, `StatefulSet ns/name`, ….
    pub workload: String,
    /// The domain whose drain takes every serving pod.
    pub domain: String,
    /// Its serving pods, `ns/name`.
    pub pods: Vec<String>,
    /// The least the interruption lasts: a replacement's readiness probe (initial delay plus one
    /// period) before it can serve; scheduling, image pull and start come on top.
    pub at_least_seconds: i64,
}

impl std::fmt::Display for Exposure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: all {} serving pod(s) are in domain {} and no budget keeps one running: \
             draining it interrupts the workload for at least {} s (a replacement's readiness \
             probe), plus scheduling and start-up",
            self.workload,
            self.pods.len(),
            self.domain,
            self.at_least_seconds
        )
    }
}

/// The workload a pod serves in, if any (see the module).
fn workload_of(pod: &Pod) -> Option<String> {
    let ns = namespace(&pod.metadata);
    let labels = pod.metadata.labels.as_ref();
    if let Some(serve) = labels.and_then(|l| l.get(SERVE_LABEL)) {
        let cluster = labels.and_then(|l| l.get(CLUSTER_LABEL))?;
        return (serve == "true").then(|| format!("RayCluster {ns}/{cluster} (serve pods)"));
    }
    let owner = controller_of(pod)?;
    match owner.kind.as_str() {
        "ReplicaSet" => {
            let hash = labels.and_then(|l| l.get(TEMPLATE_HASH_LABEL));
            let deployment = hash.and_then(|h| owner.name.strip_suffix(&format!("-{h}")));
            Some(match deployment {
                Some(d) => format!("Deployment {ns}/{d}"),
                None => format!("ReplicaSet {ns}/{}", owner.name),
            })
        }
        "StatefulSet" => Some(format!("StatefulSet {ns}/{}", owner.name)),
        _ => None,
    }
}

/// A replacement's least time to Ready: the largest readiness probe initial delay plus one
/// period among the pod's containers (0 without a probe).
fn least_ready_seconds(pod: &Pod) -> i64 {
    let containers = pod.spec.iter().flat_map(|s| s.containers.iter());
    containers
        .filter_map(|c| c.readiness_probe.as_ref())
        .map(|p| {
            i64::from(p.initial_delay_seconds.unwrap_or(0))
                + p.period_seconds.map_or(DEFAULT_PERIOD_SECONDS, i64::from)
        })
        .max()
        .unwrap_or(0)
}

/// Every workload whose serving pods the plan evicts all from one domain, unprotected (see the
/// module); sorted by domain and workload.
pub fn exposures(cluster: &Cluster, plan: &Plan) -> Vec<Exposure> {
    let mut evicted_in: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    for d in &plan.domains {
        let pods = d.phase1.iter().map(|p| &p.pod).chain(d.phase2.iter());
        for p in pods {
            evicted_in.insert((p.namespace, p.name), d.name.as_str());
        }
    }
    let mut workloads: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    let live = cluster
        .pods
        .iter()
        .filter(|p| !is_finished(p) && p.metadata.deletion_timestamp.is_none());
    for pod in live {
        if let Some(w) = workload_of(pod) {
            workloads.entry(w).or_default().push(pod);
        }
    }
    let pdbs = PdbIndex::new(cluster.pdbs);
    let selects = selected_counts(cluster, &pdbs);
    let mut out = vec![];
    for (workload, pods) in workloads {
        let domains: BTreeSet<Option<&str>> = pods
            .iter()
            .map(|p| {
                let key = (namespace(&p.metadata), name(&p.metadata));
                evicted_in.get(&key).copied()
            })
            .collect();
        let [Some(domain)] = domains.into_iter().collect::<Vec<_>>()[..] else {
            continue;
        };
        if protected(&pdbs, &selects, &pods) {
            continue;
        }
        out.push(Exposure {
            workload,
            domain: domain.to_string(),
            pods: pods
                .iter()
                .map(|p| format!("{}/{}", namespace(&p.metadata), name(&p.metadata)))
                .collect(),
            at_least_seconds: pods
                .iter()
                .map(|p| least_ready_seconds(p))
                .max()
                .unwrap_or(0),
        });
    }
    out.sort_by(|a, b| (&a.domain, &a.workload).cmp(&(&b.domain, &b.workload)));
    out
}

/// Per budget (by its address in the observed slice): the live pods it selects.
fn selected_counts(cluster: &Cluster, pdbs: &PdbIndex) -> FastMap<usize, i64> {
    let mut out = FastMap::default();
    for pod in cluster.pods.iter().filter(|p| !is_finished(p)) {
        for p in pdbs.matching(pod) {
            *out.entry(address(p.pdb)).or_default() += 1;
        }
    }
    out
}

fn address(pdb: &PodDisruptionBudget) -> usize {
    std::ptr::from_ref(pdb) as usize
}

/// Whether some budget selecting `pods` tolerates fewer disruptions at once than it selects of
/// them (it keeps one serving while the drain waits for the others' replacements).
fn protected(pdbs: &PdbIndex, selects: &FastMap<usize, i64>, pods: &[&Pod]) -> bool {
    let mut mine: BTreeMap<usize, (&PodDisruptionBudget, i64)> = BTreeMap::new();
    for pod in pods {
        for p in pdbs.matching(pod) {
            mine.entry(address(p.pdb)).or_insert((p.pdb, 0)).1 += 1;
        }
    }
    mine.iter().any(|(at, (budget, n))| {
        let all = selects.get(at).copied().unwrap_or(*n);
        pdb::tolerated(budget, all).is_some_and(|t| t < *n)
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Probe};
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::drain::{PlanOptions, plan};
    use raygate_testing::core::*;

    fn exposed(nodes: &[Node], pods: &[Pod], pdbs: &[PodDisruptionBudget]) -> Vec<Exposure> {
        let options = PlanOptions {
            domain_label: UD.to_string(),
            ..PlanOptions::default()
        };
        let cluster = Cluster::new(nodes, pods, pdbs);
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let plan = plan(&cluster, &options, now).unwrap();
        exposures(&cluster, &plan)
    }

    fn nodes() -> Vec<Node> {
        vec![node("a0", "ud-0"), node("b0", "ud-1")]
    }

    /// A pod of Deployment `web` (ReplicaSet `web-5d8f`), with a readiness probe.
    fn web(name: &str, node: &str) -> Pod {
        let mut p = pod(&format!("ns/{name}"), node)
            .owned_by("apps/v1", "ReplicaSet", "web-5d8f")
            .label(TEMPLATE_HASH_LABEL, "5d8f")
            .label("app", "web");
        if let Some(c) = p.spec.as_mut().and_then(|s| s.containers.first_mut()) {
            c.readiness_probe = Some(Probe {
                initial_delay_seconds: Some(20),
                period_seconds: Some(5),
                ..Probe::default()
            });
        }
        p
    }

    fn ray(name: &str, node: &str, serve: &str) -> Pod {
        pod(&format!("ns/{name}"), node)
            .owned_by("ray.io/v1", "RayCluster", "llm-x")
            .label(CLUSTER_LABEL, "llm-x")
            .label(SERVE_LABEL, serve)
    }

    #[test]
    fn a_one_replica_deployment_in_one_domain_without_a_budget_is_exposed() {
        let found = exposed(&nodes(), &[web("web-1", "a0")], &[]);
        assert_eq!(
            found,
            vec![Exposure {
                workload: "Deployment ns/web".into(),
                domain: "ud-0".into(),
                pods: vec!["ns/web-1".into()],
                at_least_seconds: 25,
            }]
        );
        assert!(
            found[0].to_string().contains("at least 25 s"),
            "{}",
            found[0]
        );
        // replicas in two domains: one keeps serving while the other's domain drains
        assert!(exposed(&nodes(), &[web("web-1", "a0"), web("web-2", "b0")], &[]).is_empty());
    }

    #[test]
    fn a_budget_that_keeps_one_pod_running_protects_the_workload() {
        let pods = [web("web-1", "a0"), web("web-2", "a0")];
        let one_at_a_time = pdb("ns/web", &[("app", "web")]).max_unavailable(int(1));
        assert!(exposed(&nodes(), &pods, &[one_at_a_time]).is_empty());
        // a budget that lets both go at once does not
        let both = pdb("ns/web", &[("app", "web")]).max_unavailable(int(2));
        assert_eq!(exposed(&nodes(), &pods, &[both]).len(), 1);
    }

    #[test]
    fn a_ray_cluster_s_serve_pods_in_one_domain_are_exposed_its_head_aside() {
        // the head does not serve (ray.io/serve=false) and sits in the other domain
        let pods = [
            ray("llm-head", "b0", "false"),
            ray("llm-w0", "a0", "true"),
            ray("llm-w1", "a0", "true"),
        ];
        let found = exposed(&nodes(), &pods, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].workload, "RayCluster ns/llm-x (serve pods)");
        assert_eq!(found[0].domain, "ud-0");
        assert_eq!(found[0].pods, vec!["ns/llm-w0", "ns/llm-w1"]);
        assert_eq!(found[0].at_least_seconds, 0);
    }

    #[test]
    fn pods_the_plan_does_not_evict_are_not_exposed() {
        // a DaemonSet's pod and a mirror pod stay where they are
        let ds = pod("ns/agent", "a0").owned_by("apps/v1", "DaemonSet", "agent");
        let mirror = web("web-1", "a0").mirror();
        assert!(exposed(&nodes(), &[ds, mirror], &[]).is_empty());
        // a pod being deleted or finished serves nothing
        let gone = web("web-2", "a0").deleting_since(Timestamp::from_second(1).unwrap());
        let done = web("web-3", "a0").phase("Succeeded");
        assert!(exposed(&nodes(), &[gone, done], &[]).is_empty());
    }
}
