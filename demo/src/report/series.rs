//! The report's series, derived from a [`History`] (pure): what each chart draws, in seconds
//! since an origin `t0` (the rollout's start, so runs of different strategies line up).
//!
//! Every series is a step function: a point `(at, value)` holds until the next one; the last
//! point is repeated at the history's end so the step reaches it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use raygate::quantity::{Quantity, Resources};

use crate::history::{ClusterQueueState, History, Key, Kind, PodState, State};
use crate::invariants::{pdb_floor, queue_of_pod, selector_matches, serving_pods};

/// Seconds from `t0` to `at` (negative before it).
pub fn seconds(t0: Timestamp, at: Timestamp) -> f64 {
    at.duration_since(t0).as_secs_f64()
}

/// A step series: `(seconds since t0, value)`, a point only where the value changes.
pub type Steps = Vec<(f64, f64)>;

fn push_step(steps: &mut Steps, at: f64, value: f64) {
    match steps.last() {
        Some((_, v)) if *v == value => {}
        Some((t, _)) if *t == at => {
            steps.pop();
            push_step(steps, at, value);
        }
        _ => steps.push((at, value)),
    }
}

/// Repeats each series' last value at `end` (the step reaches the history's end).
fn close(steps: &mut Steps, end: f64) {
    if let Some(&(t, v)) = steps.last()
        && t < end
    {
        steps.push((end, v));
    }
}

fn pods(states: &BTreeMap<Key, State>) -> impl Iterator<Item = (&Key, &PodState)> {
    states.iter().filter_map(|(k, s)| match s {
        State::Pod(p) => Some((k, p)),
        _ => None,
    })
}

/// One PodDisruptionBudget over time: the healthy pods it selects (Ready, not being deleted: with
/// a budget on the groups' representatives, the available groups) and its floor.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetSeries {
    /// `namespace/name`.
    pub budget: String,
    pub healthy: Steps,
    pub floor: Steps,
}

/// Every budget's healthy pods and floor over time, as the disruption controller counts them
/// ([`pdb_floor`]).
pub fn budgets(h: &History, t0: Timestamp) -> Vec<BudgetSeries> {
    let mut out: BTreeMap<String, BudgetSeries> = BTreeMap::new();
    let mut replay = h.replay();
    let mut end = None;
    while let Some((at, states)) = replay.step() {
        let x = seconds(t0, at);
        end = Some(x);
        for (k, s) in states {
            let State::Pdb(pdb) = s else { continue };
            let Some(selector) = &pdb.selector else {
                continue;
            };
            let selected: Vec<&PodState> = pods(states)
                .filter(|(pk, p)| {
                    pk.namespace == k.namespace && selector_matches(selector, &p.labels)
                })
                .map(|(_, p)| p)
                .collect();
            let healthy = selected.iter().filter(|p| p.healthy()).count();
            let n = i32::try_from(selected.len()).unwrap_or(i32::MAX);
            let Some(floor) = pdb_floor(pdb, n) else {
                continue;
            };
            let name = format!("{}/{}", k.namespace, k.name);
            let series = out.entry(name.clone()).or_insert_with(|| BudgetSeries {
                budget: name,
                healthy: vec![],
                floor: vec![],
            });
            // counts of pods: exact in an f64
            push_step(&mut series.healthy, x, healthy as f64);
            push_step(&mut series.floor, x, f64::from(floor));
        }
    }
    let mut out: Vec<BudgetSeries> = out.into_values().collect();
    if let Some(end) = end {
        for s in &mut out {
            close(&mut s.healthy, end);
            close(&mut s.floor, end);
        }
    }
    out
}

/// One RayService over time: its serving pods (Ready, not terminating, `ray.io/serve=true`, in
/// its active cluster: what the serving invariant counts).
#[derive(Clone, Debug, PartialEq)]
pub struct ServingSeries {
    /// `namespace/name`.
    pub service: String,
    pub pods: Steps,
}

/// Every RayService's serving pods over time ([`serving_pods`]).
pub fn serving(h: &History, t0: Timestamp) -> Vec<ServingSeries> {
    let mut out: BTreeMap<String, ServingSeries> = BTreeMap::new();
    let mut replay = h.replay();
    let mut end = None;
    while let Some((at, states)) = replay.step() {
        let x = seconds(t0, at);
        end = Some(x);
        for (service, n) in serving_pods(states) {
            let series = out.entry(service.clone()).or_insert_with(|| ServingSeries {
                service,
                pods: vec![],
            });
            // counts of pods: exact in an f64
            push_step(&mut series.pods, x, n as f64);
        }
    }
    let mut out: Vec<ServingSeries> = out.into_values().collect();
    if let Some(end) = end {
        for s in &mut out {
            close(&mut s.pods, end);
        }
    }
    out
}

/// One ClusterQueue's resource over time: the requests of the running pods charged to it (bound,
/// not terminal: what the quota invariant counts) and its limit (nominal quota, plus the
/// borrowing limit in a cohort; `None` while it may borrow without limit).
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSeries {
    pub queue: String,
    pub resource: String,
    /// Resource units (a CPU, a GPU, a byte).
    pub used: Steps,
    pub limit: Vec<(f64, Option<f64>)>,
    /// The largest overrun seen: (used − limit) / limit, as a share (0 when never over; a use
    /// of a resource with a zero limit counts as 1, all of it over).
    pub peak_overrun: f64,
}

/// The most a queue may hold of `resource` (see [`QueueSeries::limit`]).
pub fn queue_limit(q: &ClusterQueueState, resource: &str) -> Option<Quantity> {
    let mut limit = Resources::new();
    limit.set(resource, q.nominal.get(resource));
    if q.cohort.is_some() {
        if q.unlimited_borrowing.iter().any(|r| r == resource) {
            return None;
        }
        let mut borrow = Resources::new();
        borrow.set(resource, q.borrowing_limit.get(resource));
        limit.add(&borrow);
    }
    Some(limit.get(resource))
}

fn units(q: Quantity) -> f64 {
    // nanos to units: a display value, exactness is not needed here
    q.nanos() as f64 / 1e9
}

/// Every ClusterQueue's covered resources over time.
pub fn queues(h: &History, t0: Timestamp) -> Vec<QueueSeries> {
    let mut out: BTreeMap<(String, String), QueueSeries> = BTreeMap::new();
    let mut replay = h.replay();
    let mut end = None;
    while let Some((at, states)) = replay.step() {
        let x = seconds(t0, at);
        end = Some(x);
        let mut usage: BTreeMap<String, Resources> = BTreeMap::new();
        for (k, p) in pods(states).filter(|(_, p)| p.holds_resources()) {
            if let Some(cq) = queue_of_pod(states, k, p) {
                usage.entry(cq).or_default().add(&p.requests);
            }
        }
        for (k, s) in states {
            let State::ClusterQueue(q) = s else { continue };
            for (resource, _) in q.nominal.iter() {
                let used = usage.get(&k.name).map(|u| u.get(resource));
                let used = units(used.unwrap_or(Quantity::ZERO));
                let limit = queue_limit(q, resource).map(units);
                let series = out
                    .entry((k.name.clone(), resource.to_string()))
                    .or_insert_with(|| QueueSeries {
                        queue: k.name.clone(),
                        resource: resource.to_string(),
                        used: vec![],
                        limit: vec![],
                        peak_overrun: 0.0,
                    });
                push_step(&mut series.used, x, used);
                match series.limit.last() {
                    Some((_, l)) if *l == limit => {}
                    _ => series.limit.push((x, limit)),
                }
                if let Some(limit) = limit
                    && used > limit
                {
                    let over = if limit > 0.0 {
                        (used - limit) / limit
                    } else {
                        1.0
                    };
                    series.peak_overrun = series.peak_overrun.max(over);
                }
            }
        }
    }
    let mut out: Vec<QueueSeries> = out.into_values().collect();
    if let Some(end) = end {
        for s in &mut out {
            close(&mut s.used, end);
            if let Some(&(t, l)) = s.limit.last()
                && t < end
            {
                s.limit.push((end, l));
            }
        }
    }
    out
}

/// When a RayCluster was held (`spec.suspend` true): an upgrade's child waiting for quota.
#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    /// `namespace/name`.
    pub cluster: String,
    pub from: f64,
    /// The end of the history when still held.
    pub to: f64,
}

/// Every RayCluster's held (suspended) intervals, in the order they began.
pub fn held(h: &History, t0: Timestamp) -> Vec<Held> {
    let mut since: BTreeMap<String, f64> = BTreeMap::new();
    let mut out = vec![];
    for c in h.changes.iter().filter(|c| c.key.kind == Kind::RayCluster) {
        let name = format!("{}/{}", c.key.namespace, c.key.name);
        let x = seconds(t0, c.at);
        match &c.state {
            Some(State::RayCluster(rc)) if rc.suspended => {
                since.entry(name).or_insert(x);
            }
            _ => {
                if let Some(from) = since.remove(&name) {
                    out.push(Held {
                        cluster: name,
                        from,
                        to: x,
                    });
                }
            }
        }
    }
    if let Some((_, end)) = h.span() {
        let end = seconds(t0, end);
        out.extend(since.into_iter().map(|(cluster, from)| Held {
            cluster,
            from,
            to: end,
        }));
    }
    out.sort_by(|a, b| a.from.total_cmp(&b.from));
    out
}

/// What an upgrade domain is going through, from its nodes and pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// A node cordoned, its pods still running, none being evicted yet (a drain waiting: a
    /// budget's 429, raygate's health check).
    Cordoned,
    /// A pod on its nodes being evicted or deleted.
    Evicting,
    /// Its nodes empty and cordoned or not Ready (handed to the upgrade agent, rebooting).
    Upgrading,
    /// Its nodes back, the pods that ran on them not all healthy again yet.
    Recovering,
}

impl Phase {
    pub const ALL: [Phase; 4] = [
        Phase::Cordoned,
        Phase::Evicting,
        Phase::Upgrading,
        Phase::Recovering,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Cordoned => "cordoned",
            Phase::Evicting => "evicting",
            Phase::Upgrading => "upgrading",
            Phase::Recovering => "recovering",
        }
    }
}

/// One bar of the Gantt: a phase from `from` to `to` (seconds since t0).
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub phase: Phase,
    pub from: f64,
    pub to: f64,
}

/// One upgrade domain's row of the Gantt.
#[derive(Clone, Debug, PartialEq)]
pub struct DomainRow {
    pub domain: String,
    pub spans: Vec<Span>,
}

/// A domain's episode: from its first active instant until its pods are healthy again.
#[derive(Default)]
struct Episode {
    /// Pods on its nodes while it was active (the ones it evicts).
    pods: BTreeSet<Key>,
    /// Healthy pods in the cluster just before it began.
    healthy_before: usize,
}

/// Each upgrade domain's phases (nodes labelled `domain_label`) from `from` on, as a Gantt.
///
/// At each instant a domain is **evicting** if a pod on its nodes is being evicted or deleted,
/// else **cordoned** if one of its nodes is unschedulable with pods still on it, else
/// **upgrading** if one of its nodes is unschedulable or not Ready; after any of these it is
/// **recovering** until every pod that was on its nodes meanwhile is healthy again (or gone) and
/// the cluster has at least as many healthy pods as just before it began (replacements under new names
/// count).
pub fn domain_phases(
    h: &History,
    domain_label: &str,
    t0: Timestamp,
    from: Timestamp,
) -> Vec<DomainRow> {
    let mut gantt = Gantt::default();
    let mut replay = h.replay();
    let mut end = None;
    // healthy pods at the instant before: what a domain's episode must get back to (at its own
    // first instant its evictions may already count)
    let mut healthy_before: Option<usize> = None;
    while let Some((at, states)) = replay.step() {
        let x = seconds(t0, at);
        end = Some(x);
        let before = healthy_before;
        let live: Vec<(&Key, &PodState)> = pods(states)
            .filter(|(_, p)| !matches!(p.phase.as_str(), "Succeeded" | "Failed"))
            .collect();
        let healthy = live.iter().filter(|(_, p)| p.healthy()).count();
        healthy_before = Some(healthy);
        let (domain_of, down) = domains_now(states, domain_label);
        for domain in down.keys() {
            gantt.rows.entry(domain.to_string()).or_default();
        }
        if at < from {
            continue;
        }
        for (domain, (cordoned, not_ready)) in down {
            let on: Vec<&(&Key, &PodState)> = live
                .iter()
                .filter(|(_, p)| p.holds_resources())
                .filter(|(_, p)| {
                    p.node
                        .as_deref()
                        .and_then(|n| domain_of.get(n))
                        .is_some_and(|d| *d == domain)
                })
                .collect();
            let active = active_phase(&on, cordoned, not_ready);
            let now = Moment {
                states,
                healthy,
                healthy_before: before.unwrap_or(healthy),
            };
            let phase = gantt.phase(domain, active, &on, &now);
            gantt.set(domain, phase, x);
        }
    }
    gantt.rows(end)
}

/// Per node its domain, and per domain (a node cordoned, a node not Ready), at one instant.
type DomainsNow<'a> = (BTreeMap<&'a str, &'a str>, BTreeMap<&'a str, (bool, bool)>);

fn domains_now<'a>(states: &'a BTreeMap<Key, State>, domain_label: &str) -> DomainsNow<'a> {
    let mut domain_of: BTreeMap<&str, &str> = BTreeMap::new();
    let mut down: BTreeMap<&str, (bool, bool)> = BTreeMap::new(); // (cordoned, not ready)
    for (k, s) in states {
        let State::Node(n) = s else { continue };
        let Some(d) = n.labels.get(domain_label) else {
            continue;
        };
        domain_of.insert(k.name.as_str(), d.as_str());
        let e = down.entry(d.as_str()).or_default();
        e.0 |= n.unschedulable;
        e.1 |= !n.ready;
    }
    (domain_of, down)
}

/// A domain's active phase from its pods (`on`) and nodes; `None`: not active.
fn active_phase(on: &[&(&Key, &PodState)], cordoned: bool, not_ready: bool) -> Option<Phase> {
    if on.iter().any(|(_, p)| p.deleting || p.evicted) {
        Some(Phase::Evicting)
    } else if cordoned && !on.is_empty() {
        Some(Phase::Cordoned)
    } else if cordoned || not_ready {
        Some(Phase::Upgrading)
    } else {
        None
    }
}

/// The cluster at one instant, as a domain's recovery reads it.
struct Moment<'a> {
    states: &'a BTreeMap<Key, State>,
    /// Healthy pods now.
    healthy: usize,
    /// Healthy pods at the instant before (now, at the first instant).
    healthy_before: usize,
}

/// The rows being drawn: each domain's spans, its open one and its episode.
#[derive(Default)]
struct Gantt {
    rows: BTreeMap<String, Vec<Span>>,
    current: BTreeMap<String, (Phase, f64)>,
    episodes: BTreeMap<String, Episode>,
}

impl Gantt {
    /// A domain's phase now: its active one (its episode then counts the pods on its nodes), else
    /// recovering until its episode's pods are healthy again (or gone) and the cluster has as many
    /// healthy pods as before the episode.
    fn phase(
        &mut self,
        domain: &str,
        active: Option<Phase>,
        on: &[&(&Key, &PodState)],
        now: &Moment,
    ) -> Option<Phase> {
        if let Some(phase) = active {
            let e = self
                .episodes
                .entry(domain.to_string())
                .or_insert_with(|| Episode {
                    pods: BTreeSet::new(),
                    healthy_before: now.healthy_before,
                });
            e.pods.extend(on.iter().map(|(k, _)| (*k).clone()));
            return Some(phase);
        }
        let e = self.episodes.get(domain)?;
        let back = e.pods.iter().all(|k| match now.states.get(k) {
            Some(State::Pod(p)) => p.healthy(),
            _ => true,
        });
        if back && now.healthy >= e.healthy_before {
            self.episodes.remove(domain);
            None
        } else {
            Some(Phase::Recovering)
        }
    }

    /// A domain's phase at `x`: the open span closes when it changes.
    fn set(&mut self, domain: &str, phase: Option<Phase>, x: f64) {
        let was = self.current.get(domain).map(|(p, _)| *p);
        if was == phase {
            return;
        }
        if let Some((p, since)) = self.current.remove(domain) {
            self.rows.entry(domain.to_string()).or_default().push(Span {
                phase: p,
                from: since,
                to: x,
            });
        }
        if let Some(p) = phase {
            self.current.insert(domain.to_string(), (p, x));
        }
    }

    /// The rows, the open spans closed at `end`.
    fn rows(mut self, end: Option<f64>) -> Vec<DomainRow> {
        if let Some(end) = end {
            for (domain, (p, since)) in self.current {
                self.rows.entry(domain).or_default().push(Span {
                    phase: p,
                    from: since,
                    to: end,
                });
            }
        }
        self.rows
            .into_iter()
            .map(|(domain, spans)| DomainRow { domain, spans })
            .collect()
    }
}

#[cfg(test)]
mod tests;
