//! Invariants over a cluster's [`History`] (pure): each returns its violations with when they
//! started, when they ended (`None`: still at the end of the history) and the objects involved.
//!
//! All of them read the cluster's own record (pods, nodes, budgets, queues, slices), never what
//! raygate says it did, so a baseline drainer is judged by the same code as raygate.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use raygate::quantity::{Quantity, Resources};

use crate::history::{History, Key, Kind, PdbState, PodState, State};

/// KubeRay's pod label naming the pod's RayCluster.
pub const RAY_CLUSTER_LABEL: &str = "ray.io/cluster";
/// KubeRay's RayCluster label naming the RayService that made it.
pub const ORIGINATED_FROM_NAME: &str = "ray.io/originated-from-cr-name";

/// Which invariant a violation breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// A ClusterQueue's quota was exceeded by the requests of the pods holding resources.
    QuotaExceeded,
    /// A child RayCluster of an opted-in RayService ran pods no admitted slice covered.
    RanUncovered,
    /// A group was disrupted more than once in the rollout's window.
    GroupDisruptedTwice,
    /// A budget's healthy pods fell below its floor.
    BelowPdbFloor,
    /// A budget's groups available counted from their members (every member Ready) fell below
    /// its floor.
    BelowGroupFloor,
    /// An admitted, unfinished slice outlived the story's need for it.
    SliceLeaked,
    /// A node was not at the target generation at the end.
    NodeNotAtTarget,
}

/// One violation: from when, until when, which objects, and what was seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    pub invariant: Invariant,
    pub from: Timestamp,
    /// `None`: still violated at the end of the history.
    pub until: Option<Timestamp>,
    pub objects: Vec<String>,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let until = self
            .until
            .map_or_else(|| "the end".to_string(), |t| t.to_string());
        write!(
            f,
            "{:?} from {} until {until} [{}]: {}",
            self.invariant,
            self.from,
            self.objects.join(", "),
            self.message
        )
    }
}

/// What is violated at one instant: an id → (objects, message).
type Now = BTreeMap<String, (Vec<String>, String)>;

/// Turns "what is violated at each instant" into intervals: an interval opens the first instant
/// an id is violated (with that instant's message) and closes the first instant it is not.
fn intervals(
    h: &History,
    invariant: Invariant,
    mut violated: impl FnMut(Timestamp, &BTreeMap<Key, State>) -> Now,
) -> Vec<Violation> {
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    let mut out: Vec<Violation> = vec![];
    let mut replay = h.replay();
    while let Some((at, states)) = replay.step() {
        let now = violated(at, states);
        for (id, i) in std::mem::take(&mut open) {
            if now.contains_key(&id) {
                open.insert(id, i);
            } else if let Some(v) = out.get_mut(i) {
                v.until = Some(at);
            }
        }
        for (id, (objects, message)) in now {
            open.entry(id).or_insert_with(|| {
                out.push(Violation {
                    invariant,
                    from: at,
                    until: None,
                    objects,
                    message,
                });
                out.len() - 1
            });
        }
    }
    out
}

fn pods(states: &BTreeMap<Key, State>) -> impl Iterator<Item = (&Key, &PodState)> {
    states.iter().filter_map(|(k, s)| match s {
        State::Pod(p) => Some((k, p)),
        _ => None,
    })
}

/// The RayService (namespace, name) whose child a pod belongs to.
fn service_of_pod(states: &BTreeMap<Key, State>, key: &Key, pod: &PodState) -> Option<String> {
    let cluster = pod.labels.get(RAY_CLUSTER_LABEL)?;
    match states.get(&Key::new(Kind::RayCluster, &key.namespace, cluster))? {
        State::RayCluster(rc) => rc.labels.get(ORIGINATED_FROM_NAME).cloned(),
        _ => None,
    }
}

/// The ClusterQueue a pod is charged to: through its RayService's queue label, or its own.
pub fn queue_of_pod(states: &BTreeMap<Key, State>, key: &Key, pod: &PodState) -> Option<String> {
    let local = match service_of_pod(states, key, pod) {
        Some(svc) => match states.get(&Key::new(Kind::RayService, &key.namespace, &svc))? {
            State::RayService(s) => s.queue.clone()?,
            _ => return None,
        },
        None => pod
            .labels
            .get(raygate::types::kueue::QUEUE_NAME_LABEL)?
            .clone(),
    };
    match states.get(&Key::new(Kind::LocalQueue, &key.namespace, &local))? {
        State::LocalQueue(lq) => Some(lq.cluster_queue.clone()),
        _ => None,
    }
}

/// **ClusterQueue quota never exceeded by running pods.** Per ClusterQueue and covered
/// resource, the requests of the pods charged to it (through their RayService's queue, or their
/// own queue label) that hold resources (bound, not terminal: a terminating pod still holds its
/// GPUs) never exceed the nominal quota, plus the borrowing limit when the queue is in a cohort
/// (a resource that may borrow without limit is not checked).
pub fn quota_never_exceeded(h: &History) -> Vec<Violation> {
    intervals(h, Invariant::QuotaExceeded, |_, states| {
        over_quota(states)
            .into_iter()
            .map(|o| {
                let message = format!(
                    "{}: running pods request {}, quota {} ({} pods)",
                    o.resource,
                    o.requested,
                    o.quota,
                    o.objects.len() - 1
                );
                (
                    format!("{}/{}", o.cluster_queue, o.resource),
                    (o.objects, message),
                )
            })
            .collect()
    })
}

/// One ClusterQueue resource over its quota at one instant.
struct Over {
    cluster_queue: String,
    resource: String,
    requested: Quantity,
    quota: Quantity,
    /// The queue, then the pods charged to it.
    objects: Vec<String>,
}

/// What is over quota in `states` (see [`quota_never_exceeded`]).
fn over_quota(states: &BTreeMap<Key, State>) -> Vec<Over> {
    let mut usage: BTreeMap<String, (Resources, Vec<String>)> = BTreeMap::new();
    for (k, p) in pods(states).filter(|(_, p)| p.holds_resources()) {
        if let Some(cq) = queue_of_pod(states, k, p) {
            let e = usage.entry(cq).or_default();
            e.0.add(&p.requests);
            e.1.push(k.to_string());
        }
    }
    let mut out = vec![];
    for (cq, (used, holders)) in usage {
        let Some(State::ClusterQueue(q)) = states.get(&Key::new(Kind::ClusterQueue, "", &cq))
        else {
            continue;
        };
        for (resource, nominal) in q.nominal.iter() {
            let mut limit = Resources::new();
            limit.set(resource, *nominal);
            if q.cohort.is_some() {
                if q.unlimited_borrowing.iter().any(|r| r == resource) {
                    continue;
                }
                let mut borrow = Resources::new();
                borrow.set(resource, q.borrowing_limit.get(resource));
                limit.add(&borrow);
            }
            let (have, max) = (used.get(resource), limit.get(resource));
            if have.nanos() > max.nanos() {
                let mut objects = vec![format!("ClusterQueue/{cq}")];
                objects.extend(holders.iter().cloned());
                out.push(Over {
                    cluster_queue: cq.clone(),
                    resource: resource.to_string(),
                    requested: have,
                    quota: max,
                    objects,
                });
            }
        }
    }
    out
}

/// How far and how long running pods went over a ClusterQueue resource's quota: the measure of
/// [`quota_never_exceeded`]'s violations (KubeRay without the gate overruns; raygate must not).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuotaOverrun {
    /// The largest excess seen: requests of the running pods minus the quota.
    pub peak: Quantity,
    /// The requests at that peak, and the quota.
    pub requested: Quantity,
    pub quota: Quantity,
    /// Cluster seconds spent over the quota.
    pub seconds: f64,
}

/// The overrun per `ClusterQueue/resource` over the history (an empty map: the quota held).
/// Time over quota runs from a change that puts the queue over to the next change (the last
/// one counts until the end of the history).
pub fn quota_overrun(h: &History) -> BTreeMap<String, QuotaOverrun> {
    let mut out: BTreeMap<String, QuotaOverrun> = BTreeMap::new();
    let mut open: Vec<(String, Timestamp)> = vec![];
    let mut replay = h.replay();
    let mut last = None;
    while let Some((at, states)) = replay.step() {
        for (id, since) in open.drain(..) {
            if let Some(o) = out.get_mut(&id) {
                o.seconds += at.duration_since(since).as_secs_f64();
            }
        }
        for o in over_quota(states) {
            let id = format!("{}/{}", o.cluster_queue, o.resource);
            let excess = o.requested - o.quota;
            let e = out.entry(id.clone()).or_default();
            if excess > e.peak {
                e.peak = excess;
                e.requested = o.requested;
                e.quota = o.quota;
            }
            open.push((id, at));
        }
        last = Some(at);
    }
    if let (Some((_, end)), Some(_)) = (h.span(), last) {
        for (id, since) in open {
            if let Some(o) = out.get_mut(&id) {
                o.seconds += end.duration_since(since).as_secs_f64();
            }
        }
    }
    out
}

/// **No child RayCluster ran uncovered.** For each opted-in RayService (queue label), whenever
/// its children run pods (bound, not terminal, not being deleted), an admitted, unfinished slice
/// of it exists and the largest one counts at least as many pods as run.
pub fn no_child_ran_uncovered(h: &History) -> Vec<Violation> {
    intervals(h, Invariant::RanUncovered, |_, states| {
        let mut running: BTreeMap<(String, String), BTreeMap<String, usize>> = BTreeMap::new();
        for (k, p) in pods(states).filter(|(_, p)| p.running()) {
            if let Some(svc) = service_of_pod(states, k, p) {
                let opted_in = matches!(
                    states.get(&Key::new(Kind::RayService, &k.namespace, &svc)),
                    Some(State::RayService(s)) if s.queue.is_some()
                );
                if opted_in {
                    let child = p.labels.get(RAY_CLUSTER_LABEL).cloned().unwrap_or_default();
                    *running
                        .entry((k.namespace.clone(), svc))
                        .or_default()
                        .entry(child)
                        .or_default() += 1;
                }
            }
        }
        let mut now = Now::new();
        for ((ns, svc), children) in running {
            let granted = states
                .iter()
                .filter_map(|(k, s)| match s {
                    State::Workload(w)
                        if k.namespace == ns
                            && w.rayservice.as_deref() == Some(svc.as_str())
                            && w.admitted
                            && !w.finished =>
                    {
                        Some(w.pods)
                    }
                    _ => None,
                })
                .max();
            let total: usize = children.values().sum();
            let message = match granted {
                None => format!("{total} pods ran with no admitted slice"),
                Some(g) if i64::try_from(total).unwrap_or(i64::MAX) > g => {
                    format!("{total} pods ran, the admitted slice covers {g}")
                }
                Some(_) => continue,
            };
            let objects = children
                .iter()
                .map(|(c, n)| format!("RayCluster {ns}/{c} ({n} pods)"))
                .collect();
            now.insert(
                format!("{ns}/{svc}"),
                (objects, format!("RayService {ns}/{svc}: {message}")),
            );
        }
        now
    })
}

/// A time window (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub from: Timestamp,
    pub to: Timestamp,
}

impl Window {
    pub fn contains(&self, t: Timestamp) -> bool {
        self.from <= t && t <= self.to
    }
}

/// One group at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct GroupNow {
    /// Its full size in pods, all Ready, none being deleted.
    up: bool,
    /// A member is missing, being deleted or evicted (not merely not Ready).
    removed: bool,
    /// A member is on a node that is not Ready (what follows is the node's failure).
    on_down_node: bool,
}

/// Each group (pods sharing a value of `group_label`, per namespace) now: up while it has at
/// least its size in pods (LeaderWorkerSet's size annotation, else the most pods it ever had),
/// all Ready and none being deleted.
fn groups_now(
    states: &BTreeMap<Key, State>,
    group_label: &str,
    sizes: &mut BTreeMap<String, usize>,
) -> BTreeMap<String, GroupNow> {
    let mut members: BTreeMap<String, Vec<&PodState>> = BTreeMap::new();
    for (k, p) in pods(states) {
        if let Some(g) = p.labels.get(group_label) {
            members
                .entry(format!("{}/{g}", k.namespace))
                .or_default()
                .push(p);
        }
    }
    let gone = GroupNow {
        up: false,
        removed: true,
        on_down_node: false,
    };
    let node_down = |p: &PodState| {
        p.node.as_ref().is_some_and(|n| {
            matches!(states.get(&Key::new(Kind::Node, "", n)), Some(State::Node(node)) if !node.ready)
        })
    };
    let mut out: BTreeMap<String, GroupNow> = sizes.keys().map(|g| (g.clone(), gone)).collect();
    for (g, ps) in members {
        let live: Vec<&&PodState> = ps.iter().filter(|p| !p.deleting).collect();
        let declared = ps.iter().filter_map(|p| p.group_size).max();
        let size = sizes.entry(g.clone()).or_default();
        *size = declared.unwrap_or((*size).max(live.len()));
        let removed = live.len() < *size || ps.iter().any(|p| p.evicted);
        let up = live.len() >= *size && live.iter().all(|p| p.ready);
        let on_down_node = ps.iter().any(|p| node_down(p));
        out.insert(
            g,
            GroupNow {
                up,
                removed,
                on_down_node,
            },
        );
    }
    out
}

/// Whether each group is up (see [`groups_now`]).
fn groups_up(
    states: &BTreeMap<Key, State>,
    group_label: &str,
    sizes: &mut BTreeMap<String, usize>,
) -> BTreeMap<String, bool> {
    groups_now(states, group_label, sizes)
        .into_iter()
        .map(|(g, now)| (g, now.up))
        .collect()
}

/// When each group (see [`no_group_disrupted_more_than_once`]) was disrupted within `window`:
/// the first instant of a spell down in which a member was removed (missing, being deleted or
/// evicted). A spell down without a removal (a member failing its readiness probe), or in which a
/// member's node failed (its pods then deleted by the taint manager), is an involuntary outage,
/// not a disruption.
pub fn group_disruptions(
    h: &History,
    group_label: &str,
    window: Window,
) -> BTreeMap<String, Vec<Timestamp>> {
    let mut sizes = BTreeMap::new();
    // per group: down since, and whether that spell has been counted
    let mut spells: BTreeMap<String, Option<bool>> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<Timestamp>> = BTreeMap::new();
    let mut replay = h.replay();
    while let Some((at, states)) = replay.step() {
        for (g, now) in groups_now(states, group_label, &mut sizes) {
            let spell = spells.entry(g.clone()).or_insert(Some(true));
            if now.up {
                *spell = None;
                continue;
            }
            // a spell starts when an up group goes down; groups never up have no spell; a
            // node failure's spell is never counted
            let counted = spell.get_or_insert(false);
            if now.on_down_node {
                *counted = true;
            } else if !*counted && now.removed {
                *counted = true;
                if window.contains(at) {
                    out.entry(g).or_default().push(at);
                }
            }
        }
    }
    out
}

/// **No group disrupted more than once per rollout.** A group is up while it has its full size
/// in pods, all Ready and none being deleted; a disruption is a spell down in which a member was
/// removed (see [`group_disruptions`]). More than
/// one disruption of a group within `window` (the rollout) is a violation, from its second one.
pub fn no_group_disrupted_more_than_once(
    h: &History,
    group_label: &str,
    window: Window,
) -> Vec<Violation> {
    group_disruptions(h, group_label, window)
        .into_iter()
        .filter(|(_, times)| times.len() > 1)
        .map(|(g, times)| Violation {
            invariant: Invariant::GroupDisruptedTwice,
            from: times[1],
            until: None,
            objects: vec![format!("group {g}")],
            message: format!(
                "disrupted {} times in the rollout: {}",
                times.len(),
                times
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
        .collect()
}

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
pub fn never_below_pdb_floor(h: &History) -> Vec<Violation> {
    below_floor(h, Invariant::BelowPdbFloor, budgets, "healthy")
}

/// Intervals where a budget's count (`count` at each instant: per budget, (count, floor)) is
/// below its floor, from the first time the floor was met; `what` names the count.
fn below_floor(
    h: &History,
    invariant: Invariant,
    mut count: impl FnMut(&BTreeMap<Key, State>) -> Budgets,
    what: &str,
) -> Vec<Violation> {
    let mut met: BTreeSet<Key> = BTreeSet::new();
    intervals(h, invariant, |_, states| {
        let mut now = Now::new();
        for (k, (n, floor)) in count(states) {
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

/// Per budget at one instant, counted from the groups' members: (available groups, floor).
/// A budget's groups are those (per `group_label`) any of whose pods it ever selected
/// (`owners` remembers them, so a group whose pods are all gone still counts as down).
fn group_budgets(
    states: &BTreeMap<Key, State>,
    group_label: &str,
    sizes: &mut BTreeMap<String, usize>,
    owners: &mut BTreeMap<Key, BTreeSet<String>>,
) -> Budgets {
    let up = groups_up(states, group_label, sizes);
    let mut out = Budgets::new();
    for (k, pdb, selected) in selections(states) {
        let groups = owners.entry(k.clone()).or_default();
        groups.extend(
            selected
                .iter()
                .filter_map(|p| Some(format!("{}/{}", k.namespace, p.labels.get(group_label)?))),
        );
        let available = groups.iter().filter(|g| up.get(*g) == Some(&true)).count();
        let n = i32::try_from(selected.len()).unwrap_or(i32::MAX);
        if let Some(floor) = pdb_floor(pdb, n) {
            out.insert(
                k.clone(),
                (i32::try_from(available).unwrap_or(i32::MAX), floor),
            );
        }
    }
    out
}

/// **Available groups, counted from their members, never below any budget's floor.** The
/// ground truth beside [`never_below_pdb_floor`], which counts what the budget selects (with
/// delegated readiness, the representatives, whose readiness lags their members'): per budget,
/// its groups (`group_label`) that are up — their full size in pods, every one Ready, none being
/// deleted — never fall below the budget's floor, from the first time the floor was met.
pub fn never_below_group_floor(h: &History, group_label: &str) -> Vec<Violation> {
    let (mut sizes, mut owners) = (BTreeMap::new(), BTreeMap::new());
    let count =
        |states: &BTreeMap<Key, State>| group_budgets(states, group_label, &mut sizes, &mut owners);
    let what = "group(s) available counted from their members";
    below_floor(h, Invariant::BelowGroupFloor, count, what)
}

/// Σ over budgets and time of (floor − available groups) while below it, the groups counted
/// from their members (see [`never_below_group_floor`]).
pub fn seconds_below_group_floor(h: &History, group_label: &str) -> f64 {
    let (mut sizes, mut owners) = (BTreeMap::new(), BTreeMap::new());
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
        let b = group_budgets(states, group_label, &mut sizes, &mut owners);
        met.extend(
            b.iter()
                .filter(|(_, (a, f))| a >= f)
                .map(|(k, _)| k.clone()),
        );
        last = Some((at, b));
    }
    total
}

/// **No slice leaked after the story ends.** At the end of the history, an admitted, unfinished
/// slice must charge a RayService that still exists, is still opted in and still has a child;
/// and a RayService has at most one such slice (an old slice finishes when its replacement is
/// admitted).
pub fn no_slice_leaked(h: &History) -> Vec<Violation> {
    let Some((_, end)) = h.span() else {
        return vec![];
    };
    let states = h.current();
    let mut live: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut out = vec![];
    for (k, s) in states {
        let State::Workload(w) = s else { continue };
        let Some(svc) = &w.rayservice else { continue };
        if w.admitted && !w.finished {
            live.entry((k.namespace.clone(), svc.clone()))
                .or_default()
                .push(k.to_string());
        }
    }
    for ((ns, svc), slices) in live {
        let opted_in = matches!(
            states.get(&Key::new(Kind::RayService, &ns, &svc)),
            Some(State::RayService(s)) if s.queue.is_some()
        );
        let has_child = states.iter().any(|(k, s)| {
            matches!(s, State::RayCluster(rc)
                if k.namespace == ns && rc.labels.get(ORIGINATED_FROM_NAME) == Some(&svc))
        });
        let message = if !opted_in {
            format!("RayService {ns}/{svc} is gone or no longer opted in")
        } else if !has_child {
            format!("RayService {ns}/{svc} has no child left")
        } else if slices.len() > 1 {
            format!(
                "RayService {ns}/{svc} holds {} admitted slices",
                slices.len()
            )
        } else {
            continue;
        };
        out.push(Violation {
            invariant: Invariant::SliceLeaked,
            from: end,
            until: None,
            objects: slices,
            message,
        });
    }
    out
}

/// **Every node at the target generation at the end**: node label `label` = `target`.
pub fn every_node_at_target(h: &History, label: &str, target: &str) -> Vec<Violation> {
    let Some((_, end)) = h.span() else {
        return vec![];
    };
    h.current()
        .iter()
        .filter_map(|(k, s)| match s {
            State::Node(n) if n.labels.get(label).map(String::as_str) != Some(target) => {
                Some(Violation {
                    invariant: Invariant::NodeNotAtTarget,
                    from: end,
                    until: None,
                    objects: vec![k.to_string()],
                    message: format!(
                        "{label}={} at the end, target {target}",
                        n.labels.get(label).map_or("<none>", String::as_str)
                    ),
                })
            }
            _ => None,
        })
        .collect()
}

/// What a story expects, for [`check_all`].
#[derive(Clone, Debug, Default)]
pub struct Expect {
    /// The pod label naming a group (e.g. LeaderWorkerSet's group key); `None`: no group check.
    pub group_label: Option<String>,
    /// The rollout's window, for the group check (default: the whole history).
    pub rollout: Option<Window>,
    /// (node label, target value) every node must have at the end.
    pub generation: Option<(String, String)>,
}

/// Every invariant, in the order of [`Invariant`].
pub fn check_all(h: &History, expect: &Expect) -> Vec<Violation> {
    let mut out = quota_never_exceeded(h);
    out.extend(no_child_ran_uncovered(h));
    if let (Some(label), Some((from, to))) = (&expect.group_label, h.span()) {
        let window = expect.rollout.unwrap_or(Window { from, to });
        out.extend(no_group_disrupted_more_than_once(h, label, window));
    }
    out.extend(never_below_pdb_floor(h));
    if let Some(label) = &expect.group_label {
        out.extend(never_below_group_floor(h, label));
    }
    out.extend(no_slice_leaked(h));
    if let Some((label, target)) = &expect.generation {
        out.extend(every_node_at_target(h, label, target));
    }
    out
}

#[cfg(test)]
mod tests;
