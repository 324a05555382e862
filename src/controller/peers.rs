//! What the NodeRollouts the leader runs disrupt, shared between them (IO glue around the
//! engine's pure [`Disruption`]s): a [`Board`] every rollout's drain loop reads and writes under
//! one lock at each step, and [`StoredDisruptions`], what the rollouts not stepping in this
//! process (paused by their spec, not started yet by a new leader) disrupt, from their stored
//! engine state. The engine decides with them (`drain::engine`'s peers: at most
//! `maxUnavailableDomains` domains, of any rollout, disrupt one workload at a time).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};

use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::drain::engine::{Disruption, State};
use crate::types::rollout::NodeRollout;

/// What the drains of one process disrupt, by NodeRollout name: each step reads the others' and
/// puts its own under one lock, so two rollouts deciding at once never both find the other idle.
#[derive(Clone, Default)]
pub struct Board(Arc<std::sync::Mutex<BTreeMap<String, Vec<Disruption>>>>);

impl Board {
    /// Decides with what the other rollouts disrupt (the board's, else `stored`'s) and puts
    /// what the decided state disrupts on the board for `name`, all under the lock.
    pub(super) fn step<A>(
        &self,
        name: &str,
        stored: &(dyn Fn() -> BTreeMap<String, Vec<Disruption>> + Send),
        decide: impl FnOnce(&[Disruption]) -> (State, A),
    ) -> (State, A) {
        let mut board = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut others = stored();
        others.extend(board.iter().map(|(k, v)| (k.clone(), v.clone())));
        others.remove(name);
        let elsewhere: Vec<Disruption> = others.into_values().flatten().collect();
        let (next, out) = decide(&elsewhere);
        board.insert(name.to_string(), next.disruptions(name));
        (next, out)
    }

    /// Takes `name` off the board (its worker stopped; its stored status speaks for it).
    pub fn leave(&self, name: &str) {
        let mut board = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        board.remove(name);
    }
}

/// This drain's place among the NodeRollouts (see [`super::drain::Run::peers`]).
pub struct Peers {
    pub board: Board,
    /// This NodeRollout's name.
    pub name: String,
    /// What the rollouts not on the board disrupt, by name, from their stored status (a
    /// rollout paused by its spec, or not stepped yet by this leader).
    pub stored: Box<dyn Fn() -> BTreeMap<String, Vec<Disruption>> + Send>,
}

/// What the NodeRollouts in the store disrupt, from their stored engine state, each parsed
/// again only when its `resourceVersion` changed.
#[derive(Default)]
pub struct StoredDisruptions {
    parsed: BTreeMap<String, (Option<String>, Vec<Disruption>)>,
}

impl StoredDisruptions {
    pub fn read(&mut self, store: &Store<NodeRollout>) -> BTreeMap<String, Vec<Disruption>> {
        let mut out = BTreeMap::new();
        let objects = store.state();
        for o in &objects {
            let (name, rv) = (o.name_any(), o.resource_version());
            let fresh = self.parsed.get(&name).is_some_and(|(v, _)| *v == rv);
            if !fresh {
                let state: Option<State> = o
                    .status
                    .as_ref()
                    .and_then(|s| s.engine.as_deref())
                    .and_then(|e| serde_json::from_str(e).ok());
                let disrupts = state.map(|s| s.disruptions(&name)).unwrap_or_default();
                self.parsed.insert(name.clone(), (rv, disrupts));
            }
            if let Some((_, d)) = self.parsed.get(&name).filter(|(_, d)| !d.is_empty()) {
                out.insert(name, d.clone());
            }
        }
        let names: BTreeSet<String> = objects.iter().map(|o| o.name_any()).collect();
        self.parsed.retain(|k, _| names.contains(k));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::engine::{DomainState, Step};

    fn draining(domain: &str) -> State {
        State {
            domains: vec![DomainState {
                name: domain.into(),
                nodes: vec![format!("{domain}-node")],
                step: Step::Draining,
                ..DomainState::default()
            }],
            ..State::default()
        }
    }

    /// A step sees the other rollouts' latest steps (the board over their stored status, which
    /// may lag), never its own, and what it decides is what the next one sees.
    #[test]
    fn a_step_sees_the_others_latest_state_and_publishes_its_own() {
        let board = Board::default();
        let stored = || {
            BTreeMap::from([
                ("a".to_string(), draining("stale-a").disruptions("a")),
                ("c".to_string(), draining("c0").disruptions("c")),
            ])
        };
        let seen = |b: &Board, name: &str, next: State| {
            b.step(name, &stored, |elsewhere| {
                let mut d: Vec<String> = elsewhere
                    .iter()
                    .map(|x| format!("{}/{}", x.rollout, x.domain))
                    .collect();
                d.sort();
                (next, d)
            })
            .1
        };
        // a's first step: only c, from its stored status (a's own stored record is not read)
        assert_eq!(seen(&board, "a", draining("a0")), ["c/c0"]);
        // b sees a's decided state, not a's stale stored one
        assert_eq!(seen(&board, "b", State::default()), ["a/a0", "c/c0"]);
        board.leave("a");
        assert_eq!(seen(&board, "b", State::default()), ["a/stale-a", "c/c0"]);
    }
}
