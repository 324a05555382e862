//! The group family: a group (the pods sharing a group label) up or down at each instant, when it
//! was disrupted, and no group disrupted twice in a rollout.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use super::owners::{on_down_node, pods};
use super::violation::{Invariant, Violation, Window};
use crate::history::{History, Key, PodState, State};

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
    let node_down = |p: &PodState| on_down_node(states, p);
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

/// Why a group is down in the spell it is in, and since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Down {
    /// A member failed (its readiness probe) and none was removed: since then.
    Failed(Timestamp),
    /// A member's node failed before any member was removed: since then. What follows (its
    /// pods deleted by the taint manager) is the failure's, not a disruption.
    NodeFailed(Timestamp),
    /// A member was removed (missing, being deleted or evicted): a disruption, at this instant.
    Disrupted(Timestamp),
}

/// A group's state across instants: never up yet (starting, no spell), up, or down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Spell {
    #[default]
    NeverUp,
    Up,
    Down(Down),
}

impl Spell {
    /// The spell after an instant at which the group is `now`. A spell's cause is what came
    /// first: a node failure stays one; a failing member's spell becomes a disruption once a
    /// member is removed.
    fn next(self, now: GroupNow, at: Timestamp) -> Spell {
        use Down::*;
        if now.up {
            return Spell::Up;
        }
        let down = match self {
            Spell::NeverUp => return Spell::NeverUp,
            Spell::Up if now.on_down_node => NodeFailed(at),
            Spell::Up if now.removed => Disrupted(at),
            Spell::Up => Failed(at),
            Spell::Down(Failed(s)) if now.on_down_node => NodeFailed(s),
            Spell::Down(Failed(_)) if now.removed => Disrupted(at),
            Spell::Down(d) => d,
        };
        Spell::Down(down)
    }
}

/// Every group's [`Spell`], advanced instant by instant through a history's replay.
#[derive(Debug, Default)]
pub(super) struct Spells {
    sizes: BTreeMap<String, usize>,
    spells: BTreeMap<String, Spell>,
}

impl Spells {
    /// Advances every group to the instant `at` (see [`groups_now`]); returns the groups
    /// whose spell became a disruption at this instant.
    pub(super) fn step(
        &mut self,
        at: Timestamp,
        states: &BTreeMap<Key, State>,
        group_label: &str,
    ) -> Vec<String> {
        let mut disrupted = vec![];
        for (g, now) in groups_now(states, group_label, &mut self.sizes) {
            let spell = self.spells.entry(g.clone()).or_default();
            let next = spell.next(now, at);
            if matches!(next, Spell::Down(Down::Disrupted(d)) if d == at)
                && !matches!(*spell, Spell::Down(Down::Disrupted(_)))
            {
                disrupted.push(g);
            }
            *spell = next;
        }
        disrupted
    }

    /// Group `g`'s spell now.
    pub(super) fn get(&self, g: &str) -> Spell {
        self.spells.get(g).copied().unwrap_or_default()
    }
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
    let mut spells = Spells::default();
    let mut out: BTreeMap<String, Vec<Timestamp>> = BTreeMap::new();
    let mut replay = h.replay();
    while let Some((at, states)) = replay.step() {
        for g in spells.step(at, states, group_label) {
            if window.contains(at) {
                out.entry(g).or_default().push(at);
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
