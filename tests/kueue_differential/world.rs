//! Random Kueue worlds: the objects `raygate admit` and Kueue's own scheduler both read.
//!
//! A world is plain data (`World`) so the minimizer can take parts away; `World::documents`
//! writes it as the stored objects would read back from the API server, every field Kueue's CRDs
//! default written out (a `namespaceSelector: {}`, the preemption and fungibility policies, the
//! queueing strategy), and every object valid under the CRDs' CEL rules (no `borrowingLimit`
//! without a cohort, no `borrowWithinCohort` with `reclaimWithinCohort: Never`, a lending limit
//! at most the nominal quota).

use serde_json::{Value, json};

/// SplitMix64: small, seedable, the same on every machine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// In `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        *self.pick_ref(items)
    }
    pub fn pick_ref<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.next() as usize % items.len()]
    }
}

#[derive(Clone, Debug)]
pub struct Quota {
    pub nominal: u64,
    pub borrowing: Option<u64>,
    pub lending: Option<u64>,
}

/// One resource group: its resources, and per flavor (in the order listed) the quota of each.
#[derive(Clone, Debug)]
pub struct Group {
    pub resources: Vec<String>,
    pub flavors: Vec<(String, Vec<Quota>)>,
}

#[derive(Clone, Debug)]
pub struct Cohort {
    pub name: String,
    pub parent: Option<String>,
    pub groups: Vec<Group>,
}

#[derive(Clone, Debug)]
pub struct ClusterQueue {
    pub name: String,
    pub cohort: Option<String>,
    pub groups: Vec<Group>,
    pub strategy: &'static str,
    pub reclaim: &'static str,
    pub within: &'static str,
    /// `borrowWithinCohort`: the policy and its `maxPriorityThreshold`.
    pub borrow_within: Option<(&'static str, Option<i32>)>,
    pub when_can_borrow: &'static str,
    pub when_can_preempt: &'static str,
    /// `flavorFungibility.preference` (only with both policies `TryNextFlavor`, as Kueue's CEL
    /// rule allows).
    pub preference: Option<&'static str>,
}

#[derive(Clone, Debug)]
pub struct PodSet {
    pub name: String,
    pub count: u64,
    /// Per pod, per resource (milli-units for cpu are not used: whole units).
    pub requests: Vec<(String, u64)>,
}

/// An admission the Workload already holds.
#[derive(Clone, Debug)]
pub struct Held {
    pub cluster_queue: String,
    /// Per PodSet: resource → flavor.
    pub flavors: Vec<Vec<(String, String)>>,
}

#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub queue: String,
    pub priority: i32,
    pub created_s: u64,
    pub pod_sets: Vec<PodSet>,
    pub held: Option<Held>,
}

#[derive(Clone, Debug)]
pub struct World {
    pub flavors: Vec<String>,
    pub cohorts: Vec<Cohort>,
    pub cluster_queues: Vec<ClusterQueue>,
    pub workloads: Vec<Workload>,
}

const RESOURCES: [&str; 2] = ["cpu", "memory"];
const PRIORITIES: [i32; 6] = [0, 1, 10, 50, 100, 1000];

fn quota(rng: &mut Rng, cohort: bool) -> Quota {
    let nominal = rng.pick(&[0, 0, 2, 3, 4, 6, 8, 10]);
    Quota {
        nominal,
        borrowing: (cohort && rng.chance(25)).then(|| rng.range(0, 6)),
        lending: (cohort && rng.chance(25)).then(|| rng.range(0, nominal)),
    }
}

fn groups(rng: &mut Rng, flavors: &[String], resources: &[String], cohort: bool) -> Vec<Group> {
    let split = resources.len() == 2 && flavors.len() >= 2 && rng.chance(30);
    let sets: Vec<Vec<String>> = if split {
        resources.iter().map(|r| vec![r.clone()]).collect()
    } else {
        vec![resources.to_vec()]
    };
    let mut pool: Vec<String> = flavors.to_vec();
    let mut out = Vec::new();
    for (i, set) in sets.iter().enumerate() {
        // a flavor belongs to at most one group of a queue (Kueue's CRD validation)
        let left = sets.len() - i - 1;
        let max = pool.len() - left;
        let n = rng.range(1, max.min(3) as u64) as usize;
        let mut chosen = Vec::new();
        for _ in 0..n {
            let k = rng.next() as usize % pool.len();
            chosen.push(pool.remove(k));
        }
        let flavors = chosen
            .into_iter()
            .map(|f| (f, set.iter().map(|_| quota(rng, cohort)).collect()))
            .collect();
        out.push(Group {
            resources: set.clone(),
            flavors,
        });
    }
    out
}

/// A pod's requests: every resource when there is one, else each with a chance of 80 %.
fn requests(rng: &mut Rng, resources: &[String]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for r in resources {
        if resources.len() == 1 || rng.chance(80) {
            out.push((r.clone(), rng.range(1, 3)));
        }
    }
    out
}

/// Seed → world. Sizes grow with nothing but the seed: 1–3 flavors, 1–2 resources, 0–3 Cohort
/// objects (nested), 1–5 ClusterQueues, 2–25 Workloads, some already admitted.
pub fn generate(seed: u64) -> World {
    let mut rng = Rng(seed);
    // draws added after the first generator come from a stream of their own, so that a seed's
    // world keeps everything it had
    let mut later = Rng(seed ^ 0x5eed_1a7e_0000_0001);
    let flavors: Vec<String> = (0..rng.range(1, 3)).map(|i| format!("f{i}")).collect();
    let resources: Vec<String> = RESOURCES[..rng.range(1, 2) as usize]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let n_cohorts = rng.range(0, 3) as usize;
    let mut cohorts = Vec::new();
    for i in 0..n_cohorts {
        let parent = (i > 0 && rng.chance(50)).then(|| format!("co{}", rng.range(0, i as u64 - 1)));
        let groups = if rng.chance(30) {
            groups(&mut rng, &flavors, &resources, true)
        } else {
            vec![]
        };
        cohorts.push(Cohort {
            name: format!("co{i}"),
            parent,
            groups,
        });
    }
    let n_cqs = rng.range(1, 5) as usize;
    let mut cluster_queues = Vec::new();
    for i in 0..n_cqs {
        let cohort = if rng.chance(80) {
            // an existing Cohort object, or one named only by its members
            Some(format!("co{}", rng.range(0, n_cohorts as u64)))
        } else {
            None
        };
        let reclaim = rng.pick(&["Never", "LowerPriority", "Any"]);
        let borrow_within = (reclaim != "Never" && rng.chance(30)).then(|| {
            let threshold = rng.chance(50).then(|| rng.pick(&PRIORITIES));
            ("LowerPriority", threshold)
        });
        cluster_queues.push(ClusterQueue {
            name: format!("cq{i}"),
            groups: groups(&mut rng, &flavors, &resources, cohort.is_some()),
            cohort,
            strategy: rng.pick(&["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"]),
            reclaim,
            within: rng.pick(&["Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
            borrow_within,
            when_can_borrow: rng.pick(&["MayStopSearch", "MayStopSearch", "TryNextFlavor"]),
            when_can_preempt: rng.pick(&["TryNextFlavor", "TryNextFlavor", "MayStopSearch"]),
            preference: None,
        });
        let cq = cluster_queues.last_mut().expect("just pushed");
        if cq.when_can_borrow == "TryNextFlavor" && cq.when_can_preempt == "TryNextFlavor" {
            cq.preference = later.pick(&[
                None,
                Some("BorrowingOverPreemption"),
                Some("PreemptionOverBorrowing"),
            ]);
        }
    }
    let n_wl = rng.range(2, 25) as usize;
    let mut workloads: Vec<Workload> = Vec::new();
    let mut created = 0;
    for i in 0..n_wl {
        let cq = rng.range(0, n_cqs as u64 - 1);
        let n_ps = if rng.chance(25) { 2 } else { 1 };
        let pod_sets = (0..n_ps)
            .map(|p| PodSet {
                name: if p == 0 {
                    "main".into()
                } else {
                    "workers".into()
                },
                count: rng.range(1, 3),
                requests: requests(&mut rng, &resources),
            })
            .filter(|ps| !ps.requests.is_empty())
            .collect::<Vec<_>>();
        if pod_sets.is_empty() {
            continue;
        }
        created += rng.range(0, 2); // equal creation times happen
        workloads.push(Workload {
            name: format!("w{i:02}"),
            queue: format!("lq-cq{cq}"),
            priority: rng.pick(&PRIORITIES),
            created_s: created,
            pod_sets,
            held: None,
        });
    }
    let mut world = World {
        flavors,
        cohorts,
        cluster_queues,
        workloads,
    };
    admit_some(&mut rng, &mut world);
    world
}

/// Marks some Workloads as already admitted, each within its ClusterQueue's nominal quota in the
/// flavor chosen (so the starting state is one Kueue could have reached without borrowing).
fn admit_some(rng: &mut Rng, world: &mut World) {
    use std::collections::BTreeMap;
    let mut used: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for i in 0..world.workloads.len() {
        if !rng.chance(35) {
            continue;
        }
        let w = &world.workloads[i];
        let cq_name = w.queue.trim_start_matches("lq-").to_string();
        let Some(cq) = world.cluster_queues.iter().find(|c| c.name == cq_name) else {
            continue;
        };
        let mut add: BTreeMap<(String, String, String), u64> = BTreeMap::new();
        let mut flavors = Vec::new();
        let mut ok = true;
        for ps in &w.pod_sets {
            let mut chosen = Vec::new();
            for group in &cq.groups {
                let (flavor, quotas) = rng.pick_ref(&group.flavors);
                for (r, q) in group.resources.iter().zip(quotas) {
                    let Some(per_pod) = ps.requests.iter().find(|(n, _)| n == r).map(|x| x.1)
                    else {
                        continue;
                    };
                    let key = (cq_name.clone(), flavor.clone(), r.clone());
                    let total = used.get(&key).copied().unwrap_or(0)
                        + add.get(&key).copied().unwrap_or(0)
                        + per_pod * ps.count;
                    ok &= total <= q.nominal;
                    *add.entry(key).or_default() += per_pod * ps.count;
                    chosen.push((r.clone(), flavor.clone()));
                }
            }
            ok &= chosen.len() == ps.requests.len();
            flavors.push(chosen);
        }
        if ok {
            for (k, v) in add {
                *used.entry(k).or_default() += v;
            }
            world.workloads[i].held = Some(Held {
                cluster_queue: cq_name,
                flavors,
            });
        }
    }
}

/// A quantity of resource `r`: whole CPUs, memory in GiB.
fn amount(r: &str, n: u64) -> String {
    if r == "memory" {
        format!("{n}Gi")
    } else {
        n.to_string()
    }
}

fn time(created_s: u64) -> String {
    format!("2026-01-01T00:{:02}:{:02}Z", created_s / 60, created_s % 60)
}

fn group_json(g: &Group) -> Value {
    let flavors: Vec<Value> = g
        .flavors
        .iter()
        .map(|(name, quotas)| {
            let resources: Vec<Value> = g
                .resources
                .iter()
                .zip(quotas)
                .map(|(r, q)| {
                    let mut v = json!({"name": r, "nominalQuota": amount(r, q.nominal)});
                    if let Some(b) = q.borrowing {
                        v["borrowingLimit"] = json!(amount(r, b));
                    }
                    if let Some(l) = q.lending {
                        v["lendingLimit"] = json!(amount(r, l));
                    }
                    v
                })
                .collect();
            json!({"name": name, "resources": resources})
        })
        .collect();
    json!({"coveredResources": g.resources, "flavors": flavors})
}

fn kueue(kind: &str, name: &str, namespace: Option<&str>, spec: Value) -> Value {
    let mut meta = json!({"name": name});
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": spec})
}

fn cluster_queue_json(cq: &ClusterQueue) -> Value {
    let mut preemption =
        json!({"reclaimWithinCohort": cq.reclaim, "withinClusterQueue": cq.within});
    if let Some((policy, threshold)) = cq.borrow_within {
        preemption["borrowWithinCohort"] = json!({"policy": policy});
        if let Some(t) = threshold {
            preemption["borrowWithinCohort"]["maxPriorityThreshold"] = json!(t);
        }
    }
    let mut spec = json!({
        "namespaceSelector": {},
        "queueingStrategy": cq.strategy,
        "resourceGroups": cq.groups.iter().map(group_json).collect::<Vec<_>>(),
        "preemption": preemption,
        "flavorFungibility": {"whenCanBorrow": cq.when_can_borrow, "whenCanPreempt": cq.when_can_preempt},
        "stopPolicy": "None",
    });
    if let Some(p) = cq.preference {
        spec["flavorFungibility"]["preference"] = json!(p);
    }
    if let Some(c) = &cq.cohort {
        spec["cohortName"] = json!(c);
    }
    kueue("ClusterQueue", &cq.name, None, spec)
}

fn workload_json(w: &Workload) -> Value {
    let pod_sets: Vec<Value> = w
        .pod_sets
        .iter()
        .map(|ps| {
            let requests: serde_json::Map<String, Value> = ps
                .requests
                .iter()
                .map(|(r, q)| (r.clone(), json!(amount(r, *q))))
                .collect();
            json!({"name": ps.name, "count": ps.count, "template": {"spec": {"containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": requests}}]}}})
        })
        .collect();
    let spec =
        json!({"queueName": w.queue, "priority": w.priority, "active": true, "podSets": pod_sets});
    let mut v = kueue("Workload", &w.name, Some("default"), spec);
    v["metadata"]["creationTimestamp"] = json!(time(w.created_s));
    if let Some(h) = &w.held {
        v["status"] = held_status(w, h);
    }
    v
}

fn held_status(w: &Workload, h: &Held) -> Value {
    let at = time(w.created_s + 1);
    let assignments: Vec<Value> = w
        .pod_sets
        .iter()
        .zip(&h.flavors)
        .map(|(ps, flavors)| {
            let usage: serde_json::Map<String, Value> = ps
                .requests
                .iter()
                .map(|(r, q)| (r.clone(), json!(amount(r, q * ps.count))))
                .collect();
            let flavors: serde_json::Map<String, Value> =
                flavors.iter().map(|(r, f)| (r.clone(), json!(f))).collect();
            json!({"name": ps.name, "count": ps.count, "flavors": flavors, "resourceUsage": usage})
        })
        .collect();
    let cond = |t: &str, reason: &str| json!({"type": t, "status": "True", "reason": reason, "message": "", "lastTransitionTime": at});
    json!({
        "admission": {"clusterQueue": h.cluster_queue, "podSetAssignments": assignments},
        "conditions": [cond("QuotaReserved", "QuotaReserved"), cond("Admitted", "Admitted")],
    })
}

impl World {
    /// The objects as a multi-document YAML file (each document written as JSON, which is YAML).
    pub fn documents(&self) -> String {
        let mut docs =
            vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})];
        for f in &self.flavors {
            docs.push(kueue("ResourceFlavor", f, None, json!({})));
        }
        for c in &self.cohorts {
            let mut spec =
                json!({"resourceGroups": c.groups.iter().map(group_json).collect::<Vec<_>>()});
            if let Some(p) = &c.parent {
                spec["parentName"] = json!(p);
            }
            docs.push(kueue("Cohort", &c.name, None, spec));
        }
        for cq in &self.cluster_queues {
            docs.push(cluster_queue_json(cq));
            let spec = json!({"clusterQueue": cq.name, "stopPolicy": "None"});
            docs.push(kueue(
                "LocalQueue",
                &format!("lq-{}", cq.name),
                Some("default"),
                spec,
            ));
        }
        for w in &self.workloads {
            docs.push(workload_json(w));
        }
        docs.iter()
            .map(|d| serde_json::to_string(d).expect("json"))
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    /// How many parts the minimizer can still take away (for its progress line).
    pub fn size(&self) -> usize {
        self.flavors.len() + self.cohorts.len() + self.cluster_queues.len() + self.workloads.len()
    }
}
