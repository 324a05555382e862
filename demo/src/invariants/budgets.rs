//! The budget family: a PodDisruptionBudget's floor as the disruption controller computes it,
//! the pods or groups it counts never below it, and how far and long they were.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::groups::{Down, Spell, Spells};
use super::owners::pods;
use super::violation::{Invariant, Now, Violation, intervals};
use crate::history::{History, Key, PdbState, PodState, State};

/// Whether `labels` match `selector` (metav1.LabelSelector: matchLabels and matchExpressions
/// ANDed; an empty selector matches everything).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    by_labels
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let have = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => have.is_some_and(|v| values.contains(v)),
                "NotIn" => have.is_none_or(|v| !values.contains(v)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

/// `GetScaledValueFromIntOrPercent(v, total, roundUp=true)`, as the disruption controller
/// scales a budget's percentages.
fn scaled(v: &IntOrString, total: i32) -> i32 {
    match v {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let p: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let total = i64::from(total);
            i32::try_from((p * total + 99) / 100).unwrap_or(i32::MAX)
        }
    }
}

/// A budget's floor (`desiredHealthy`), as the disruption controller computes it
/// (`pkg/controller/disruption/disruption.go`, `getExpectedPodCount`): `minAvailable` as a
/// number is the floor; as a percentage, of the expected pods, rounded up; `maxUnavailable`:
/// expected pods minus it (rounded up). Expected pods: the budget's own `status.expectedPods`
/// (the controllers' scale), else the pods it selects. `None`: no floor.
pub fn pdb_floor(pdb: &PdbState, selected: i32) -> Option<i32> {
    let expected = pdb.expected_pods.unwrap_or(selected);
    let floor = match (&pdb.min_available, &pdb.max_unavailable) {
        (_, Some(max)) => expected - scaled(max, expected),
        (Some(IntOrString::Int(n)), None) => *n,
        (Some(min), None) => scaled(min, expected),
        (None, None) => return None,
    };
    Some(floor.max(0))
}

/// Per budget at one instant: (healthy pods, floor).
type Budgets = BTreeMap<Key, (i32, i32)>;

/// Each budget with a selector and the pods it selects (in its namespace).
fn selections(
    states: &BTreeMap<Key, State>,
) -> impl Iterator<Item = (&Key, &PdbState, Vec<&PodState>)> {
    states.iter().filter_map(move |(k, s)| {
        let State::Pdb(pdb) = s else { return None };
        let selector = pdb.selector.as_ref()?;
        let selected = pods(states)
            .filter(|(pk, p)| pk.namespace == k.namespace && selector_matches(selector, &p.labels))
            .map(|(_, p)| p)
            .collect();
        Some((k, pdb, selected))
    })
}

fn budgets(states: &BTreeMap<Key, State>) -> Budgets {
    let mut out = BTreeMap::new();
    for (k, pdb, selected) in selections(states) {
        let healthy = selected.iter().filter(|p| p.healthy()).count();
        let healthy = i32::try_from(healthy).unwrap_or(i32::MAX);
        let n = i32::try_from(selected.len()).unwrap_or(i32::MAX);
        if let Some(floor) = pdb_floor(pdb, n) {
            out.insert(k.clone(), (healthy, floor));
        }
    }
    out
}

/// Walks the budgets: `f(at, until, budget, healthy, floor)` for each instant once the budget's
/// floor was first met (before that its workload is still starting).
fn walk_budgets(h: &History, mut f: impl FnMut(Timestamp, Option<Timestamp>, &Key, i32, i32)) {
    let mut met: BTreeSet<Key> = BTreeSet::new();
    let mut replay = h.replay();
    let mut pending: Option<(Timestamp, Budgets)> = None;
    while let Some((at, states)) = replay.step() {
        if let Some((t, b)) = pending.take() {
            for (k, (healthy, floor)) in &b {
                f(t, Some(at), k, *healthy, *floor);
            }
        }
        let mut b = budgets(states);
        for (k, (healthy, floor)) in &b {
            if healthy >= floor {
                met.insert(k.clone());
            }
        }
        b.retain(|k, _| met.contains(k));
        pending = Some((at, b));
    }
    if let Some((t, b)) = pending {
        for (k, (healthy, floor)) in &b {
            f(t, None, k, *healthy, *floor);
        }
    }
}

/// **Available groups never below any budget's floor.** Per PodDisruptionBudget: the pods it
/// selects that are healthy (Ready, not being deleted) never fall below its floor
/// ([`pdb_floor`]), from the first time the floor was met. With a budget on the groups'
/// representatives (delegated readiness) that counts available groups.
///
/// With `group_label`, a selected pod whose group is down for a failure the drain does not
/// answer for counts as healthy (see [`never_below_group_floor`]); without it every unhealthy
/// pod counts.
pub fn never_below_pdb_floor(h: &History, group_label: Option<&str>) -> Vec<Violation> {
    match group_label {
        None => below_floor(h, Invariant::BelowPdbFloor, |_, s| budgets(s), "healthy"),
        Some(label) => {
            let mut floors = GroupFloors::new(label);
            let count = |at, states: &_| floors.pdb_counts(at, states);
            below_floor(h, Invariant::BelowPdbFloor, count, "healthy")
        }
    }
}

/// Intervals where a budget's count (`count` at each instant: per budget, (count, floor)) is
/// below its floor, from the first time the floor was met; `what` names the count.
fn below_floor(
    h: &History,
    invariant: Invariant,
    mut count: impl FnMut(Timestamp, &BTreeMap<Key, State>) -> Budgets,
    what: &str,
) -> Vec<Violation> {
    let mut met: BTreeSet<Key> = BTreeSet::new();
    intervals(h, invariant, |at, states| {
        let mut now = Now::new();
        for (k, (n, floor)) in count(at, states) {
            if n >= floor {
                met.insert(k);
            } else if met.contains(&k) {
                let message = format!("{n} {what}, floor {floor}");
                now.insert(k.to_string(), (vec![k.to_string()], message));
            }
        }
        now
    })
}

/// Σ over budgets and time of (floor − healthy) while below the floor: group-seconds below
/// the floor (see [`never_below_pdb_floor`]).
pub fn seconds_below_pdb_floor(h: &History) -> f64 {
    let mut total = 0.0;
    walk_budgets(h, |at, until, _, healthy, floor| {
        if let Some(until) = until
            && healthy < floor
        {
            total += f64::from(floor - healthy) * until.duration_since(at).as_secs_f64();
        }
    });
    total
}

/// One budget at one instant: its key, the pods it selects with their group keys, its floor.
type BudgetNow<'s> = (Key, Vec<(&'s PodState, Option<String>)>, i32);

/// The groups of each budget counted from their members, and which of those that are down the
/// drain does not answer for.
///
/// A budget cannot stop an involuntary failure (a member failing its probe, a node failing),
/// and the disruption controller counts one against the budget only from when it happens. So a
/// group down for a failure that began after the latest ongoing disruption of the budget's
/// groups began (or while none of them is disrupted) is *excused*: no eviction was made with it
/// in view. A failure that was already there when a group was disrupted is not: the drain
/// could see it (counted from the members) and evicted anyway.
struct GroupFloors<'a> {
    group_label: &'a str,
    spells: Spells,
    /// Per budget, its groups: those any of whose pods it ever selected (so a group whose pods
    /// are all gone still counts as down).
    owners: BTreeMap<Key, BTreeSet<String>>,
}

/// The groups among `groups` that are down for a failure the drain does not answer for (see
/// [`GroupFloors`]).
fn excused<'g>(spells: &Spells, groups: &'g BTreeSet<String>) -> BTreeSet<&'g String> {
    let latest = groups
        .iter()
        .filter_map(|g| match spells.get(g) {
            Spell::Down(Down::Disrupted(at)) => Some(at),
            _ => None,
        })
        .max();
    groups
        .iter()
        .filter(|g| match spells.get(g) {
            Spell::Down(Down::Failed(since) | Down::NodeFailed(since)) => {
                latest.is_none_or(|l| since > l)
            }
            _ => false,
        })
        .collect()
}

impl<'a> GroupFloors<'a> {
    fn new(group_label: &'a str) -> Self {
        Self {
            group_label,
            spells: Spells::default(),
            owners: BTreeMap::new(),
        }
    }

    /// Advances the groups to `at`; then per budget: (its pods' group keys, floor).
    fn step<'s>(&mut self, at: Timestamp, states: &'s BTreeMap<Key, State>) -> Vec<BudgetNow<'s>> {
        self.spells.step(at, states, self.group_label);
        let mut out = vec![];
        for (k, pdb, selected) in selections(states) {
            let keyed: Vec<_> = selected
                .into_iter()
                .map(|p| {
                    let g = p.labels.get(self.group_label);
                    (p, g.map(|g| format!("{}/{g}", k.namespace)))
                })
                .collect();
            let groups = self.owners.entry(k.clone()).or_default();
            groups.extend(keyed.iter().filter_map(|(_, g)| g.clone()));
            let n = i32::try_from(keyed.len()).unwrap_or(i32::MAX);
            if let Some(floor) = pdb_floor(pdb, n) {
                out.push((k.clone(), keyed, floor));
            }
        }
        out
    }

    /// Per budget: (groups up plus excused groups, floor).
    fn group_counts(&mut self, at: Timestamp, states: &BTreeMap<Key, State>) -> Budgets {
        let mut out = Budgets::new();
        for (k, _, floor) in self.step(at, states) {
            let groups = &self.owners[&k];
            let up = groups
                .iter()
                .filter(|g| self.spells.get(g) == Spell::Up)
                .count();
            let n = up + excused(&self.spells, groups).len();
            out.insert(k, (i32::try_from(n).unwrap_or(i32::MAX), floor));
        }
        out
    }

    /// Per budget: (healthy pods plus unhealthy ones of excused groups, floor).
    fn pdb_counts(&mut self, at: Timestamp, states: &BTreeMap<Key, State>) -> Budgets {
        let mut out = Budgets::new();
        for (k, pods, floor) in self.step(at, states) {
            let excused = excused(&self.spells, &self.owners[&k]);
            let counted = pods
                .iter()
                .filter(|(p, g)| p.healthy() || g.as_ref().is_some_and(|g| excused.contains(g)))
                .count();
            out.insert(k, (i32::try_from(counted).unwrap_or(i32::MAX), floor));
        }
        out
    }
}

/// **Available groups, counted from their members, never below any budget's floor.** The
/// ground truth beside [`never_below_pdb_floor`], which counts what the budget selects (with
/// delegated readiness, the representatives, whose readiness lags their members'): per budget,
/// its groups (`group_label`) that are up — their full size in pods, every one Ready, none being
/// deleted — never fall below the budget's floor, from the first time the floor was met.
///
/// A group down for an involuntary failure that began after the latest ongoing disruption of
/// the budget's groups counts as up: a budget cannot protect against a failure that comes after
/// the evictions it allowed (see [`GroupFloors`]).
pub fn never_below_group_floor(h: &History, group_label: &str) -> Vec<Violation> {
    let mut floors = GroupFloors::new(group_label);
    let count = |at, states: &_| floors.group_counts(at, states);
    let what = "group(s) available counted from their members";
    below_floor(h, Invariant::BelowGroupFloor, count, what)
}

/// Σ over budgets and time of (floor − available groups) while below it, the groups counted
/// from their members as [`never_below_group_floor`] counts them.
pub fn seconds_below_group_floor(h: &History, group_label: &str) -> f64 {
    let mut floors = GroupFloors::new(group_label);
    let mut met: BTreeSet<Key> = BTreeSet::new();
    let mut total = 0.0;
    let mut last: Option<(Timestamp, Budgets)> = None;
    let mut replay = h.replay();
    while let Some((at, states)) = replay.step() {
        if let Some((t, b)) = last.take() {
            for (k, (available, floor)) in &b {
                if met.contains(k) && available < floor {
                    total += f64::from(floor - available) * at.duration_since(t).as_secs_f64();
                }
            }
        }
        let b = floors.group_counts(at, states);
        met.extend(
            b.iter()
                .filter(|(_, (a, f))| a >= f)
                .map(|(k, _)| k.clone()),
        );
        last = Some((at, b));
    }
    total
}
