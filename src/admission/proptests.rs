//! Property tests over random snapshots and random event sequences (admission cycles interleaved
//! with Workloads finishing, scaling down and releasing their quota):
//!
//! 1. no ClusterQueue/flavor/resource uses more than its nominal quota plus permitted borrowing,
//!    and no cohort more than its subtree can hold (checked against a separate model of the
//!    quotas, not the admission code's tree);
//! 2. the usage reported equals the sum over the Workloads that hold quota, so an unchanged PodSet
//!    is never charged twice across a slice chain (a replacement holds exactly its full usage, its
//!    old slice nothing);
//! 3. an old slice is finished only once its replacement holds quota (in the same cycle: after
//!    the admission), and never admitted while its replacement holds quota;
//! 4. a cycle is deterministic, and the incrementally kept index agrees with a fresh one.
//!
//! Everything is generated from one seed (printed on failure) so a case can be replayed.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::testing::*;
use super::*;
use crate::quantity::Quantity;
use crate::types::kueue::*;
use crate::workload::{holds_quota, is_evicted, is_finished};

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const RESOURCES: [&str; 2] = ["cpu", "memory"];

fn unit(resource: &str) -> &'static str {
    if resource == "memory" { "Gi" } else { "" }
}

/// A node's quota for one (flavor, resource), in whole units of the resource.
#[derive(Clone, Copy, Debug, Default)]
struct Limits {
    nominal: i64,
    borrowing: Option<i64>,
    lending: Option<i64>,
}

/// Quota per (flavor, resource).
type Quota = BTreeMap<(String, String), Limits>;

/// The quota model the invariants are checked against.
#[derive(Debug, Default)]
struct Model {
    /// Per ClusterQueue: cohort index and quota per (flavor, resource).
    cqs: BTreeMap<String, (Option<usize>, Quota)>,
    /// Per cohort: parent index and quota.
    cohorts: Vec<(Option<usize>, Quota)>,
}

fn quota_groups(
    flavors: &[String],
    quota: &BTreeMap<(String, String), Limits>,
) -> Vec<ResourceGroup> {
    if flavors.is_empty() {
        return vec![];
    }
    vec![resource_group(
        &RESOURCES,
        flavors
            .iter()
            .map(|f| {
                let rs = RESOURCES
                    .iter()
                    .map(|r| {
                        let l = quota[&(f.clone(), r.to_string())];
                        let u = unit(r);
                        resource_quota(
                            r,
                            &format!("{}{u}", l.nominal),
                            l.borrowing.map(|b| format!("{b}{u}")).as_deref(),
                            l.lending.map(|b| format!("{b}{u}")).as_deref(),
                        )
                    })
                    .collect();
                (f.as_str(), rs)
            })
            .collect(),
    )]
}

fn random_snapshot(rng: &mut Rng) -> (Snapshot, Model) {
    let flavors: Vec<String> = (0..rng.int(1, 3)).map(|i| format!("f{i}")).collect();
    let mut model = Model::default();
    let mut s = Snapshot {
        flavors: flavors.iter().map(|f| resource_flavor(f)).collect(),
        ..Snapshot::default()
    };
    let n_cohorts = rng.int(1, 3) as usize;
    for i in 0..n_cohorts {
        let (c, parent, quota) = random_cohort(rng, i, &flavors);
        s.cohorts.push(c);
        model.cohorts.push((parent, quota));
    }
    let n_cqs = rng.int(1, 6);
    for i in 0..n_cqs {
        let name = format!("cq{i}");
        let (c, cohort_ix, quota) = random_cluster_queue(rng, &name, &flavors, n_cohorts);
        s.cluster_queues.push(c);
        s.local_queues.push(local_queue(&name, &name));
        model.cqs.insert(name, (cohort_ix, quota));
    }
    for i in 0..rng.int(0, 40) {
        let cq = format!("cq{}", rng.below(n_cqs as u64));
        let mut podsets = Vec::new();
        for ps in ["head", "worker", "extra"] {
            if podsets.is_empty() || rng.chance(50) {
                podsets.push(random_podset(rng, ps));
            }
        }
        let mut w = workload(&format!("w{i:02}")).queue(&cq);
        w.spec.pod_sets = podsets;
        w.spec.priority = Some(rng.int(0, 3) as i32);
        s.workloads.push(w.created(rng.int(0, 20)));
    }
    (s, model)
}

/// Cohort `co{i}`, under an earlier cohort half of the time, with its own quota 30 % of the time.
fn random_cohort(
    rng: &mut Rng,
    i: usize,
    flavors: &[String],
) -> (Cohort, Option<usize>, BTreeMap<(String, String), Limits>) {
    let parent = (i > 0 && rng.chance(50)).then(|| rng.below(i as u64) as usize);
    let mut quota = BTreeMap::new();
    let mut own = Vec::new();
    if rng.chance(30) {
        for f in flavors {
            for r in RESOURCES {
                quota.insert(
                    (f.clone(), r.to_string()),
                    Limits {
                        nominal: rng.int(0, 6),
                        borrowing: (parent.is_some() && rng.chance(40)).then(|| rng.int(0, 4)),
                        lending: None,
                    },
                );
            }
        }
        own = flavors.to_vec();
    }
    let mut c = cohort(&format!("co{i}"));
    c.spec.parent_name = parent.map(|p| format!("co{p}"));
    c.spec.resource_groups = quota_groups(&own, &quota);
    (c, parent, quota)
}

/// A ClusterQueue in a random cohort (80 %), over a random ordered subset of the flavors, with
/// random limits, queueing strategy and preemption policy.
fn random_cluster_queue(
    rng: &mut Rng,
    name: &str,
    flavors: &[String],
    n_cohorts: usize,
) -> (
    ClusterQueue,
    Option<usize>,
    BTreeMap<(String, String), Limits>,
) {
    let cohort_ix = rng.chance(80).then(|| rng.below(n_cohorts as u64) as usize);
    // a random non-empty ordered subset of the flavors
    let mut fl = flavors.to_vec();
    for k in (1..fl.len()).rev() {
        fl.swap(k, rng.below(k as u64 + 1) as usize);
    }
    fl.truncate(rng.int(1, fl.len() as i64) as usize);
    let mut quota = BTreeMap::new();
    for f in &fl {
        for r in RESOURCES {
            let nominal = rng.int(0, 10);
            quota.insert(
                (f.clone(), r.to_string()),
                Limits {
                    nominal,
                    borrowing: (cohort_ix.is_some() && rng.chance(40)).then(|| rng.int(0, 5)),
                    lending: (cohort_ix.is_some() && rng.chance(30)).then(|| rng.int(0, nominal)),
                },
            );
        }
    }
    let mut c = cluster_queue(name);
    c.spec.cohort_name = cohort_ix.map(|x| format!("co{x}"));
    c.spec.resource_groups = quota_groups(&fl, &quota);
    c.spec.queueing_strategy = Some(if rng.chance(30) {
        QueueingStrategy::StrictFIFO
    } else {
        QueueingStrategy::BestEffortFIFO
    });
    c.spec.preemption = Some(ClusterQueuePreemption {
        within_cluster_queue: Some(
            [
                WithinClusterQueue::Never,
                WithinClusterQueue::LowerPriority,
                WithinClusterQueue::LowerOrNewerEqualPriority,
            ][rng.below(3) as usize],
        ),
        reclaim_within_cohort: Some(
            [
                ReclaimWithinCohort::Never,
                ReclaimWithinCohort::LowerPriority,
                ReclaimWithinCohort::Any,
            ][rng.below(3) as usize],
        ),
        borrow_within_cohort: None,
    });
    (c, cohort_ix, quota)
}

fn random_podset(rng: &mut Rng, name: &str) -> PodSet {
    let cpu = rng.int(1, 3).to_string();
    let memory = format!("{}Gi", rng.int(0, 2));
    PodSet {
        name: name.to_string(),
        template: pod_template(&[("cpu", &cpu), ("memory", &memory)]),
        count: rng.int(0, 4) as i32,
        min_count: None,
    }
}

/// Replacement slices for some admitted Workloads: counts grow, a PodSet may be renamed or added.
fn add_replacements(rng: &mut Rng, s: &mut Snapshot) {
    let holders: Vec<Workload> = s
        .workloads
        .iter()
        .filter(|w| holds_quota(w.status.as_ref()) && !is_evicted(w.status.as_ref()))
        .cloned()
        .collect();
    if holders.is_empty() {
        return;
    }
    for k in 0..rng.int(0, 5) {
        let old = &holders[rng.below(holders.len() as u64) as usize];
        let old_name = old.metadata.name.clone().unwrap_or_default();
        let mut new =
            workload(&format!("r{k}")).queue(old.spec.queue_name.as_deref().unwrap_or(""));
        new.spec = old.spec.clone();
        for ps in &mut new.spec.pod_sets {
            ps.count += rng.int(0, 2) as i32;
        }
        if rng.chance(30) {
            let i = rng.below(new.spec.pod_sets.len() as u64) as usize;
            new.spec.pod_sets[i].name.push_str("-v2");
        }
        if rng.chance(30) {
            new.spec.pod_sets.push(random_podset(rng, "added"));
        }
        s.workloads.push(new.created(30 + k).replacing(&old_name));
    }
}

fn units(q: &K8sQuantityRef) -> Quantity {
    Quantity::try_from(q).unwrap_or_default()
}
type K8sQuantityRef = k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Usage per (ClusterQueue, flavor, resource) from a cycle's rows.
fn reported(r: &CycleResult) -> BTreeMap<(String, String, String), Quantity> {
    let mut out = BTreeMap::new();
    for c in &r.cluster_queues {
        for f in &c.reservation {
            for x in &f.resources {
                let v = x.total.as_ref().map(units).unwrap_or_default();
                if !v.is_zero() {
                    out.insert((c.name.clone(), f.name.clone(), x.name.clone()), v);
                }
            }
        }
    }
    out
}

/// Usage per (ClusterQueue, flavor, resource) from the Workloads' status, independently.
fn held(s: &Snapshot) -> BTreeMap<(String, String, String), Quantity> {
    let mut out: BTreeMap<(String, String, String), Quantity> = BTreeMap::new();
    for w in &s.workloads {
        if !holds_quota(w.status.as_ref()) {
            continue;
        }
        let Some(adm) = w.status.as_ref().and_then(|s| s.admission.as_ref()) else {
            continue;
        };
        for psa in &adm.pod_set_assignments {
            let admitted = i128::from(psa.count.unwrap_or(0));
            let spec = w
                .spec
                .pod_sets
                .iter()
                .find(|p| p.name == psa.name)
                .map_or(admitted, |p| i128::from(p.count));
            let charged = spec.min(admitted);
            for (res, q) in &psa.resource_usage {
                let total = units(q);
                if admitted == 0 || total.is_zero() {
                    continue;
                }
                let nanos = total.nanos() / admitted * charged;
                let key = (
                    adm.cluster_queue.clone(),
                    psa.flavors[res].clone(),
                    res.clone(),
                );
                let e = out.entry(key).or_default();
                *e += Quantity::parse(&format!("{nanos}n")).unwrap();
            }
        }
    }
    out.retain(|_, v| !v.is_zero());
    out
}

fn scaled(n: i64, resource: &str) -> Quantity {
    Quantity::parse(&format!("{n}{}", unit(resource))).unwrap()
}

/// Invariant 1 against the model: Kueue's quota tree written out separately.
fn check_capacity(
    model: &Model,
    usage: &BTreeMap<(String, String, String), Quantity>,
) -> Result<(), String> {
    let mut frs: Vec<(String, String)> = model
        .cqs
        .values()
        .flat_map(|(_, q)| q.keys().cloned())
        .chain(model.cohorts.iter().flat_map(|(_, q)| q.keys().cloned()))
        .collect();
    frs.sort();
    frs.dedup();
    for (f, r) in &frs {
        check_pair_capacity(model, usage, f, r)?;
    }
    Ok(())
}

/// One (flavor, resource): no ClusterQueue uses more than its nominal quota plus borrowing
/// limit, and no cohort holds more than its subtree quota (plus its own borrowing limit).
fn check_pair_capacity(
    model: &Model,
    usage: &BTreeMap<(String, String, String), Quantity>,
    f: &str,
    r: &str,
) -> Result<(), String> {
    let limits = |q: &BTreeMap<(String, String), Limits>| {
        q.get(&(f.to_string(), r.to_string()))
            .copied()
            .unwrap_or_default()
    };
    let q = |n: i64| scaled(n, r);
    let guaranteed = |subtree: Quantity, l: Limits| match l.lending {
        Some(x) if subtree > q(x) => subtree - q(x),
        _ => Quantity::ZERO,
    };
    // per cohort: (subtree quota, usage stored in it)
    let n = model.cohorts.len();
    let mut subtree: Vec<Quantity> = model
        .cohorts
        .iter()
        .map(|(_, c)| q(limits(c).nominal))
        .collect();
    let mut stored = vec![Quantity::ZERO; n];
    for (name, (cohort, quota)) in &model.cqs {
        let l = limits(quota);
        let used = usage
            .get(&(name.clone(), f.to_string(), r.to_string()))
            .copied()
            .unwrap_or_default();
        let cap = match (cohort, l.borrowing) {
            (None, _) => Some(q(l.nominal)),
            (Some(_), Some(b)) => Some(q(l.nominal + b)),
            (Some(_), None) => None,
        };
        if let Some(cap) = cap
            && used > cap
        {
            return Err(format!("{name} uses {used} of {f}/{r}, more than {cap}"));
        }
        if let Some(c) = cohort {
            let g = guaranteed(q(l.nominal), l);
            subtree[*c] += q(l.nominal) - g;
            if used > g {
                stored[*c] += used - g;
            }
        }
    }
    // children have higher indexes than their parents: fold bottom-up
    for c in (0..n).rev() {
        let (parent, quota) = &model.cohorts[c];
        let l = limits(quota);
        let cap = match (parent, l.borrowing) {
            (None, _) => Some(subtree[c]),
            (Some(_), Some(b)) => Some(subtree[c] + q(b)),
            (Some(_), None) => None,
        };
        if let Some(cap) = cap
            && stored[c] > cap
        {
            return Err(format!(
                "cohort co{c} holds {} of {f}/{r}, more than {cap}",
                stored[c]
            ));
        }
        if let Some(p) = parent {
            let (s, u) = (subtree[c], stored[c]);
            subtree[*p] += s;
            stored[*p] += u;
        }
    }
    Ok(())
}

/// Invariants 2 and 3 for one applied cycle. A slice is finished only once its replacement
/// holds quota: admitted earlier in the same cycle, or already holding quota when the cycle
/// began (a replacement whose old slice is still charged after a failed finish write, or whose
/// old slice was evicted and requeued before the replacement was admitted:
/// `finish_stale_replaced`, as Kueue's `normalizeActiveSlices`).
fn check_slices(
    r: &CycleResult,
    holding_before: &[String],
    after: &Snapshot,
) -> Result<(), String> {
    for (j, d) in r.decisions.iter().enumerate() {
        let Decision::FinishReplaced {
            workload,
            replaced_by,
        } = d
        else {
            continue;
        };
        let admitted_now = r.decisions[..j]
            .iter()
            .any(|x| matches!(x, Decision::Admit { workload: w, .. } if w == replaced_by));
        if !admitted_now && !holding_before.contains(replaced_by) {
            return Err(format!(
                "{workload} finished without {replaced_by} admitted before it"
            ));
        }
        let find = |key: &str| {
            after
                .workloads
                .iter()
                .find(|w| format!("default/{}", w.metadata.name.as_deref().unwrap_or("")) == key)
        };
        let (Some(old), Some(new)) = (find(workload), find(replaced_by)) else {
            return Err("missing slice".into());
        };
        if !is_finished(old.status.as_ref()) || !holds_quota(new.status.as_ref()) {
            return Err(format!("{workload}/{replaced_by} not finished/admitted"));
        }
        check_full_usage(new, admitted_now)?;
    }
    check_replaced_not_admitted(r, after)
}

/// No cycle admits a slice whose replacement holds quota: the replacement already holds the
/// chain's PodSets, so the old slice's quota would be charged twice.
fn check_replaced_not_admitted(r: &CycleResult, after: &Snapshot) -> Result<(), String> {
    for d in &r.decisions {
        let Decision::Admit { workload, .. } = d else {
            continue;
        };
        let replacement = after.workloads.iter().find(|w| {
            holds_quota(w.status.as_ref())
                && crate::workload::replacement_for(w, "default").as_ref() == Some(workload)
        });
        if let Some(w) = replacement {
            return Err(format!(
                "{workload} admitted while its replacement {} holds quota",
                w.metadata.name.as_deref().unwrap_or("")
            ));
        }
    }
    Ok(())
}

/// A replacement's admission holds its full usage, not a delta: per PodSet, the per-pod
/// requests times the admitted count. Admitted in this cycle, the admitted count is the spec's;
/// admitted in an earlier one, the spec may have been scaled down in place since, which leaves
/// `status.admission` as it was (Kueue's `EnsureWorkloadSlices` changes only the spec's counts,
/// and the usage charged is `min(spec count, admitted count)`).
fn check_full_usage(new: &Workload, admitted_now: bool) -> Result<(), String> {
    let name = new.metadata.name.as_deref().unwrap_or("");
    let adm = new
        .status
        .as_ref()
        .and_then(|s| s.admission.as_ref())
        .ok_or("no admission")?;
    for ps in &new.spec.pod_sets {
        let psa = adm
            .pod_set_assignments
            .iter()
            .find(|a| a.name == ps.name)
            .ok_or("no assignment")?;
        let count = psa.count.ok_or("no admitted count")?;
        if admitted_now && count != ps.count {
            return Err(format!(
                "{name} {}: admitted {count} of {}",
                ps.name, ps.count
            ));
        }
        let per_pod =
            crate::podsets::pod_requests(ps.template.spec.as_ref().unwrap(), "", "").unwrap();
        for (res, q) in per_pod.iter() {
            let want = q.times(i64::from(count));
            let got = psa.resource_usage.get(res).map(units).unwrap_or_default();
            if want != got {
                return Err(format!("default/{name} {}: {res} {got} != {want}", ps.name));
            }
        }
    }
    Ok(())
}

fn run_case(seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed);
    let (base, model) = random_snapshot(&mut rng);
    let (mut s, _) = run_until_stable(
        base,
        &Options {
            release_evicted_immediately: true,
        },
        ts(100),
        50,
    );
    add_replacements(&mut rng, &mut s);
    let options = Options {
        release_evicted_immediately: rng.chance(50),
    };
    let mut sched = Scheduler::new(s, &options);
    for step in 0..rng.int(1, 14) {
        let now = ts(200 + step);
        let holders: Vec<String> = sched
            .snapshot()
            .workloads
            .iter()
            .filter(|w| holds_quota(w.status.as_ref()))
            .map(|w| format!("default/{}", w.metadata.name.as_deref().unwrap_or("")))
            .collect();
        let pick = |rng: &mut Rng| {
            holders
                .get(rng.below(holders.len() as u64) as usize)
                .cloned()
        };
        match rng.below(10) {
            0 | 1 => {
                if let Some(k) = pick(&mut rng) {
                    sched.finish(&k, "Succeeded", "done", now);
                }
            }
            2 | 3 => {
                if let Some(k) = pick(&mut rng) {
                    let (i, by) = (rng.below(3) as usize, rng.int(1, 2) as i32);
                    sched.update_workload(&k, |w| {
                        let n = w.spec.pod_sets.len().max(1);
                        if let Some(ps) = w.spec.pod_sets.get_mut(i % n) {
                            ps.count = (ps.count - by).max(0);
                        }
                    });
                }
            }
            4 => release_evicted(&mut sched, holders, now),
            _ => check_pass(&mut sched, &options, &model, now)?,
        }
    }
    Ok(())
}

/// The owner's side of an eviction: evicted holders' pods are gone, their quota released.
fn release_evicted(sched: &mut Scheduler, holders: Vec<String>, now: Timestamp) {
    for w in holders {
        let s = sched
            .snapshot()
            .workloads
            .iter()
            .find(|x| format!("default/{}", x.metadata.name.as_deref().unwrap_or("")) == w)
            .and_then(|x| x.status.clone());
        if is_evicted(s.as_ref()) {
            sched.update_workload(&w, |x| {
                x.status = Some(release_quota(x.status.as_ref(), None, now))
            });
        }
    }
}

/// One pass: deterministic, equal to a fresh index's, within capacity, reporting exactly the
/// usage held, and slices finished only with their replacements.
fn check_pass(
    sched: &mut Scheduler,
    options: &Options,
    model: &Model,
    now: Timestamp,
) -> Result<(), String> {
    let r = sched.cycle();
    if r != sched.cycle() {
        return Err("cycle is not deterministic".into());
    }
    if r != cycle(sched.snapshot(), options) {
        return Err("the kept index disagrees with a fresh one".into());
    }
    let holding_before = holder_keys(sched.snapshot());
    sched.apply(&r, now);
    let rows = reported(&r);
    check_capacity(model, &rows)?;
    let held = held(sched.snapshot());
    if rows != held {
        return Err(format!("reported usage {rows:?} != held usage {held:?}"));
    }
    check_slices(&r, &holding_before, sched.snapshot())
}

/// The keys of the Workloads holding quota (`default/name`).
fn holder_keys(s: &Snapshot) -> Vec<String> {
    s.workloads
        .iter()
        .filter(|w| holds_quota(w.status.as_ref()))
        .map(|w| format!("default/{}", w.metadata.name.as_deref().unwrap_or("")))
        .collect()
}

proptest! {
    // 400 cases unless PROPTEST_CASES says otherwise
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400),
        ..ProptestConfig::default()
    })]

    #[test]
    fn admission_invariants_hold_over_random_histories(seed in any::<u64>()) {
        if let Err(e) = run_case(seed) {
            prop_assert!(false, "seed {seed}: {e}");
        }
    }
}

/// Histories that once broke an invariant, every run the same (the property test above draws
/// new seeds each run). In 16656716417743428434 an old slice, evicted and requeued before its
/// replacement was admitted (in full, nothing being left to replace), was admitted again beside
/// it, charging the chain's PodSets twice; the next pass finished it. In 5582736761562076394
/// such an old slice is finished a pass after its replacement was admitted and then scaled down
/// in place, whose admission then records more than its spec asks.
#[test]
fn histories_that_once_broke_an_invariant_keep_it() {
    for seed in [16656716417743428434, 5582736761562076394] {
        run_case(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn the_initial_stable_state_respects_capacity_for_many_seeds() {
    for seed in 0..200u64 {
        let mut rng = Rng(seed);
        let (base, model) = random_snapshot(&mut rng);
        let (_, results) = run_until_stable(
            base,
            &Options {
                release_evicted_immediately: true,
            },
            ts(100),
            50,
        );
        for r in &results {
            check_capacity(&model, &reported(r)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Issue #15: no preemption churn on static cohorts
// ---------------------------------------------------------------------------------------------

/// (victim, preemptor) of every preemption in a pass, from the Evict messages.
fn preemptions(r: &CycleResult) -> Vec<(String, String)> {
    r.decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Evict {
                workload,
                reason,
                message,
            } if reason == reason::PREEMPTED => {
                let by = message.split_once('(')?.1.split_once(')')?.0;
                Some((workload.clone(), by.to_string()))
            }
            _ => None,
        })
        .collect()
}

/// Every preemption is by a Workload its policy lets preempt the victim: a higher priority, or
/// an equal priority and strictly older (nothing here was evicted, so the queue order time is
/// the creation time) under `LowerOrNewerEqualPriority`, or any priority when
/// reclaiming quota the victim's ClusterQueue borrows under `reclaimWithinCohort: Any`.
fn check_preemptors(s: &Snapshot, r: &CycleResult) -> Result<(), String> {
    let find = |key: &str| {
        s.workloads
            .iter()
            .find(|w| format!("default/{}", w.metadata.name.as_deref().unwrap_or("")) == key)
    };
    let policy = |cq: &str| {
        s.cluster_queues
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(cq))
            .and_then(|c| c.spec.preemption.clone())
            .unwrap_or_default()
    };
    for (victim, by) in preemptions(r) {
        let (Some(v), Some(p)) = (find(&victim), find(&by)) else {
            return Err(format!("{victim} preempted by unknown {by}"));
        };
        let (vp, pp) = (v.spec.priority.unwrap_or(0), p.spec.priority.unwrap_or(0));
        if pp > vp {
            continue;
        }
        let same_queue = v.spec.queue_name == p.spec.queue_name;
        let pol = policy(p.spec.queue_name.as_deref().unwrap_or(""));
        let allowed = if same_queue {
            pp == vp
                && pol.within_cluster_queue == Some(WithinClusterQueue::LowerOrNewerEqualPriority)
                && v.metadata.creation_timestamp > p.metadata.creation_timestamp
        } else {
            pol.reclaim_within_cohort == Some(ReclaimWithinCohort::Any)
        };
        if !allowed {
            return Err(format!(
                "{victim} (priority {vp}) preempted by {by} (priority {pp}), same queue: {same_queue}"
            ));
        }
    }
    Ok(())
}

/// Fresh random cohorts, nothing finishing: no pass preempts anything (what one pass admits, no
/// later one takes back); then with a random part of the Workloads arriving only after the rest
/// settled, every preemption until the state is stable respects the preemptors' policies.
/// A static case: `Err` if it churns, else whether its fixed point is live ([`check_live`]).
fn run_static_case(seed: u64) -> Result<Result<(), String>, String> {
    let mut rng = Rng(seed);
    let (base, model) = random_snapshot(&mut rng);
    let options = Options {
        release_evicted_immediately: rng.chance(50),
    };
    let mut sched = Scheduler::new(base.clone(), &options);
    // nothing held at first: the first pass cannot preempt; no later one may
    for pass in 0..20 {
        let r = sched.cycle();
        let churn = preemptions(&r);
        if !churn.is_empty() {
            return Err(format!("pass {pass} preempts {churn:?}"));
        }
        if !sched.apply(&r, ts(100 + pass)) {
            break;
        }
    }
    // a settled part, then the rest arrives
    let mut early = base.clone();
    let mut later = Vec::new();
    early.workloads.retain(|w| {
        let keep = rng.chance(50);
        if !keep {
            later.push(w.clone());
        }
        keep
    });
    let release = Options {
        release_evicted_immediately: true,
    };
    let (mut s, _) = run_until_stable(early, &release, ts(100), 50);
    s.workloads.extend(later);
    let mut sched = Scheduler::new(s, &release);
    for pass in 0..50 {
        let r = sched.cycle();
        check_preemptors(sched.snapshot(), &r)?;
        if !sched.apply(&r, ts(200 + pass)) {
            return Ok(check_live(&model, sched.snapshot()));
        }
    }
    Err("not stable after 50 passes".into())
}

/// Liveness at a fixed point: no pending Workload fits the quota left free (on the model, all
/// its PodSets on one flavor of its ClusterQueue) unless it waits behind its queue's head
/// (StrictFIFO, a head held back for a reclaimer, a head preempting for quota), as its
/// `QuotaReserved=False` message says and the Workloads show (the head it names is pending, in
/// the same queue). The error follows the chain of what each waits for.
fn check_live(model: &Model, s: &Snapshot) -> Result<(), String> {
    let usage = held(s);
    let message = |name: &str| {
        s.workloads
            .iter()
            .find(|w| w.metadata.name.as_deref() == Some(name))
            .and_then(|w| w.status.as_ref())
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "QuotaReserved"))
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    for w in &s.workloads {
        let status = w.status.as_ref();
        if holds_quota(status) || is_finished(status) {
            continue;
        }
        let Some(f) = free_flavor(model, &usage, w) else {
            continue;
        };
        let name = w.metadata.name.as_deref().unwrap_or("");
        // the claim is checked, not taken: the head it names is pending in the same queue
        let head = message(name)
            .strip_prefix("waiting behind workload default/")
            .and_then(|r| r.split([' ', ',']).next())
            .and_then(|h| {
                s.workloads
                    .iter()
                    .find(|x| x.metadata.name.as_deref() == Some(h))
            });
        if head.is_some_and(|h| {
            !holds_quota(h.status.as_ref()) && h.spec.queue_name == w.spec.queue_name
        }) {
            continue;
        }
        let mut chain = vec![format!("{name}: {}", message(name))];
        let mut next = name.to_string();
        for _ in 0..6 {
            let m = message(&next);
            let Some(n) = [
                "not admitted in this pass: workload default/",
                "waiting behind workload default/",
            ]
            .iter()
            .find_map(|p| m.strip_prefix(p))
            .and_then(|r| r.split([' ', ',']).next()) else {
                break;
            };
            next = n.to_string();
            chain.push(format!("{next}: {}", message(&next)));
        }
        return Err(format!(
            "pending though it fits flavor {f} of the quota left free: {}",
            chain.join(" | ")
        ));
    }
    Ok(())
}

/// A flavor of the Workload's ClusterQueue that all its PodSets fit on together, on the model
/// with `usage` held.
fn free_flavor(
    model: &Model,
    usage: &BTreeMap<(String, String, String), Quantity>,
    w: &Workload,
) -> Option<String> {
    let cq = w.spec.queue_name.clone()?;
    let (_, quota) = model.cqs.get(&cq)?;
    let flavors: std::collections::BTreeSet<&String> = quota.keys().map(|(f, _)| f).collect();
    flavors.into_iter().find_map(|f| {
        let mut after = usage.clone();
        for ps in &w.spec.pod_sets {
            let containers = ps.template.spec.iter().flat_map(|p| &p.containers);
            for c in containers {
                let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
                for (res, q) in requests.into_iter().flatten() {
                    let mut total = Quantity::ZERO;
                    for _ in 0..ps.count {
                        total += units(q);
                    }
                    *after
                        .entry((cq.clone(), f.clone(), res.clone()))
                        .or_default() += total;
                }
            }
        }
        check_capacity(model, &after).is_ok().then(|| f.clone())
    })
}

/// Seeds 0..6000 and the seeds beyond that used to churn, every run the same;
/// `CHURN_SEEDS=a..b` runs the range a..b instead (0..20000 takes about 100 s of CPU in a dev
/// build, see docs/decisions.md). Seeds 3022 and 3729 used to preempt once on the second pass: a Workload
/// short of quota in a pass looked only at the pass's starting holders, so it preempted one of
/// those while Kueue would take back the one just admitted (pinned by
/// `quota_lent_in_a_pass_is_not_reclaimed_from_an_older_holder_in_the_same_pass`). Seeds 6123,
/// 7467, 7578, 7724 and 14021 did too: queues reopened at the end of a pass one after another
/// instead of in round order, and not to a fixed point (pinned, shrunk, by
/// `queues_reopened_at_the_end_of_a_pass_take_turns_in_round_order` and
/// `a_head_held_back_for_a_reclaimer_admitted_by_another_reopened_queue_is_reopened_too`).
/// Seeds 9147, 9868, 10985, 14999 and 18403 did too: holds formed a cycle through queues waiting
/// behind a held-back head (pinned, shrunk, by
/// `a_held_back_head_does_not_hold_back_the_rest_of_a_best_effort_fifo_queue` and
/// `hold_cycles_through_queues_waiting_behind_a_held_back_head_do_not_churn`).
/// Seed 14785 did too: a held-back Workload's reservation kept another queue's Workload from
/// its own nominal quota; the next pass it took that quota, and the held-back one reclaimed from a
/// borrower instead (pinned, shrunk, by
/// `a_held_back_reservation_does_not_keep_another_queue_from_its_own_nominal_quota`).
/// Seeds 23412 and 25995 did too: a Workload requesting more than its ClusterQueue's nominal
/// quota preempted to fit while borrowing, where Kueue's `fitsResourceQuota` says it does not fit
/// (pinned, shrunk, by
/// `a_workload_requesting_more_than_its_nominal_quota_does_not_preempt_in_a_flat_cohort`).
/// With that check, seeds 24105, 28596 and 33920 did too: a held-back Workload no longer fit at
/// the end of the pass, so its reservation kept quota the next pass gave to what it had kept out
/// (pinned, shrunk, by
/// `quota_a_reservation_kept_until_the_end_of_a_pass_is_offered_again_to_what_it_kept_out`).
/// Seed 36870 did too: a Workload held back for a reclaimer left what it would borrow to its own
/// queue's next Workload, which pushed the reclaimer to another flavor, where it was held back in
/// turn (pinned, shrunk, by
/// `a_workload_held_back_for_a_reclaimer_keeps_what_it_would_borrow_until_the_reclaimer_comes`).
/// Seed 25890 did too: what such a Workload kept from its own queue was only what it would
/// borrow, so a queue-mate took the rest and chose another flavor than Kueue's (pinned, shrunk,
/// by the same test). Seed 22730 (a preemption on pass 3, not shrunk) settles with the rule.
/// Seeds 51152 and 53550 did too, and 61058, 67035 and 81175 two or three passes later: the end
/// of a pass checks each waiting Workload alone, while the next pass first admits what was held
/// back or kept out by a reservation; a pass is now checked against the passes after it, run on
/// its decisions applied (pinned, shrunk, by
/// `a_pass_is_redone_when_the_next_pass_would_evict_what_it_admitted`).
/// Seeds 75654 and 101278 never settled in the second phase: a preemption a later pass undid,
/// two Workloads reclaiming from each other (75654, hierarchical cohorts) or three in a ring
/// (101278, one flat cohort), each step allowed by Kueue (pinned, shrunk, by
/// `a_reclaim_its_victim_would_take_back_once_the_preemptor_borrows_is_not_made`).
#[test]
fn static_cohorts_do_not_churn() {
    let seeds: Vec<u64> = match std::env::var("CHURN_SEEDS") {
        Ok(range) => {
            let (a, b) = range.split_once("..").expect("CHURN_SEEDS=a..b");
            (a.parse().expect("a number")..b.parse().expect("a number")).collect()
        }
        Err(_) => (0..6000u64)
            .chain([
                6123, 7467, 7578, 7724, 9147, 9868, 10811, 10985, 14021, 14785, 14999, 18403,
                22730, 23412, 24105, 25890, 25995, 28596, 33920, 36870, 51152, 53550, 61058, 67035,
                75654, 81175, 101278,
            ])
            .collect(),
    };
    let failed: Vec<String> = seeds
        .into_iter()
        .filter_map(|seed| {
            run_static_case(seed)
                .err()
                .map(|e| format!("seed {seed}: {e}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} seeds churn:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// Seeds of [`static_cohorts_do_not_churn`] among 0..6000 whose fixed point is not live: a
/// Workload stays pending though it fits the quota left free. The holds form a cycle through
/// queues waiting behind held-back heads (759: cq2's w14 is held back for cq0's w33, which waits
/// behind cq0's w28, held back for cq2's w21, which waits behind w14; 850 likewise through a
/// reservation), or the reclaimer fits neither on its own flavors with the held-back Workload
/// out nor on those it would take after preempting it (5837: cq3's w07, held back for w10). Ending such a hold made other seeds churn (a
/// preemption on the next pass), so these wait for a rule of their own; the list is exact both
/// ways: a seed that leaves it, or joins it, fails here. (Nine more seeds were in it while a
/// reclaimer that fits only once it preempted the held-back Workload was not admitted on the
/// flavors it would take then: `Pass::pins`.) On 3570 Kueue's own scheduler ends with the same
/// admissions (`tests/kueue_differential`'s driver); on 5559 it never stops changing them.
const NOT_LIVE: [u64; 4] = [759, 3570, 5559, 5837];

#[test]
fn static_cohorts_settle_where_nothing_pending_fits_the_free_quota() {
    // `LIVE_SEEDS=a..b` runs the range a..b instead
    let range = match std::env::var("LIVE_SEEDS") {
        Ok(range) => {
            let (a, b) = range.split_once("..").expect("LIVE_SEEDS=a..b");
            a.parse().expect("a number")..b.parse().expect("a number")
        }
        Err(_) => 0..6000u64,
    };
    let mut not_live = Vec::new();
    let mut messages = Vec::new();
    for seed in range.clone() {
        if let Ok(Err(e)) = run_static_case(seed) {
            not_live.push(seed);
            messages.push(format!("seed {seed}: {e}"));
        }
    }
    let expected: Vec<u64> = NOT_LIVE.into_iter().filter(|s| range.contains(s)).collect();
    assert_eq!(not_live, expected, "\n{}", messages.join("\n"));
}
