//! A violation of an invariant, and the intervals it is built from: what is violated at each
//! instant of a history, turned into spells from the first instant to the first one it is not.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use crate::history::{History, Key, State};

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
    /// A RayService that was serving had no serving pod (Ready, not terminating,
    /// `ray.io/serve=true`) in its active cluster.
    StoppedServing,
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
pub(super) type Now = BTreeMap<String, (Vec<String>, String)>;

/// Turns "what is violated at each instant" into intervals: an interval opens the first instant
/// an id is violated (with that instant's message) and closes the first instant it is not.
pub(super) fn intervals(
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
