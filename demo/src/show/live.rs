//! The live display (pure): a line per step, per change that matters, per NodeRollout domain
//! phase and per raygate Event — the act, the domain, the pods evicted, why it waits.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use raygate::quantity::Resources;
use raygate::types::rollout::NodeRolloutStatus;
use raygate_sim::world::actors::node_lifecycle;

use crate::history::{Change, Key, Kind, State};

/// One line of the live display.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub at: Timestamp,
    /// The act it belongs to (0: before the first step whose note starts with `Act N`).
    pub act: usize,
    /// Goes into the timeline at the end too.
    pub milestone: bool,
    pub text: String,
}

/// `1h02m03s`, `12m03s`, `7s`.
pub fn clock(d: SignedDuration) -> String {
    let s = d.as_secs().max(0);
    let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
    if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

/// The act a note opens: `Act 2: ...` is 2.
fn act_of(note: &str) -> Option<usize> {
    let rest = note.strip_prefix("Act ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Turns what a run reports into lines, remembering what it saw.
#[derive(Debug)]
pub struct Narrator {
    start: Timestamp,
    act: usize,
    states: BTreeMap<Key, State>,
    rollouts: BTreeMap<String, NodeRolloutStatus>,
    events: BTreeSet<(String, String, String)>,
}

impl Narrator {
    pub fn new(start: Timestamp) -> Self {
        Narrator {
            start,
            act: 0,
            states: BTreeMap::new(),
            rollouts: BTreeMap::new(),
            events: BTreeSet::new(),
        }
    }

    pub fn act(&self) -> usize {
        self.act
    }

    fn line(&self, at: Timestamp, milestone: bool, text: String) -> Line {
        Line {
            at,
            act: self.act,
            milestone,
            text,
        }
    }

    /// A timeline step runs.
    pub fn step(&mut self, at: Timestamp, note: Option<&str>, action: &str) -> Vec<Line> {
        let mut out = vec![];
        if let Some(n) = note {
            if let Some(a) = act_of(n) {
                self.act = a;
            }
            out.push(self.line(at, true, format!("== {n}")));
        }
        out.push(self.line(at, false, format!("step: {action}")));
        out
    }

    /// The timeline is done.
    pub fn timeline_done(&mut self, at: Timestamp) -> Vec<Line> {
        vec![self.line(
            at,
            false,
            "timeline done; waiting for the rollouts and the cluster to settle".into(),
        )]
    }

    /// The domain a node is in (from its labels, as last seen).
    fn domain_of(&self, node: &str) -> Option<String> {
        match self.states.get(&Key::new(Kind::Node, "", node)) {
            Some(State::Node(n)) => n
                .labels
                .iter()
                .find(|(k, _)| k.ends_with("upgrade-domain"))
                .map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    /// One change the recorder saw.
    pub fn change(&mut self, c: &Change) -> Vec<Line> {
        let before = match &c.state {
            Some(s) => self.states.insert(c.key.clone(), s.clone()),
            None => self.states.remove(&c.key),
        };
        let who = format!("{}/{}", c.key.namespace, c.key.name);
        let text = match (&before, &c.state) {
            (Some(State::ClusterQueue(a)), Some(State::ClusterQueue(b)))
                if a.nominal != b.nominal =>
            {
                Some((
                    true,
                    format!(
                        "ClusterQueue {}: quota {} -> {}",
                        c.key.name,
                        resources(&a.nominal),
                        resources(&b.nominal)
                    ),
                ))
            }
            (Some(State::Pod(a)), Some(State::Pod(b))) if !a.evicted && b.evicted => {
                let node = b.node.clone().unwrap_or_default();
                let domain = self.domain_of(&node).unwrap_or_else(|| "?".into());
                Some((
                    false,
                    format!("pod {who} evicted from node {node} (domain {domain})"),
                ))
            }
            (Some(State::Node(a)), Some(State::Node(b))) => {
                let generation = |n: &crate::history::NodeState| {
                    n.labels.get(node_lifecycle::GENERATION).cloned()
                };
                (generation(a) != generation(b)).then(|| {
                    (
                        false,
                        format!(
                            "node {} at generation {}",
                            c.key.name,
                            generation(b).unwrap_or_default()
                        ),
                    )
                })
            }
            (before, after) => child_or_slice_change(before, after, &who),
        };
        text.map(|(m, t)| self.line(c.at, m, t))
            .into_iter()
            .collect()
    }

    /// A NodeRollout's status as its watch delivered it: the rollout's phase, each domain's
    /// phase, and what a domain waits for.
    pub fn rollout(&mut self, at: Timestamp, name: &str, s: &NodeRolloutStatus) -> Vec<Line> {
        let before = self
            .rollouts
            .insert(name.into(), s.clone())
            .unwrap_or_default();
        let mut out = vec![];
        if before.phase != s.phase
            && let Some(p) = &s.phase
        {
            let progress = s.progress.as_deref().unwrap_or("");
            let text = format!("NodeRollout {name}: {p} {progress}");
            out.push(self.line(at, true, text.trim_end().to_string()));
        }
        for d in &s.domains {
            let old = before.domains.iter().find(|o| o.name == d.name);
            if old.map(|o| &o.phase) != Some(&d.phase) {
                let detail = match d.phase.as_str() {
                    "Draining" => format!(" (nodes {})", d.nodes.join(", ")),
                    "Done" => format!(
                        ": evicted {} protected and {} other pods",
                        d.protected_evicted, d.other_evicted
                    ),
                    _ => String::new(),
                };
                let milestone = matches!(d.phase.as_str(), "Draining" | "Done");
                out.push(self.line(
                    at,
                    milestone,
                    format!("NodeRollout {name}: domain {} {}{detail}", d.name, d.phase),
                ));
            }
            let why = d.blocked_by.clone().or_else(|| d.message.clone());
            let old_why = old.and_then(|o| o.blocked_by.clone().or_else(|| o.message.clone()));
            if why != old_why
                && let Some(w) = why
                && d.phase != "Done"
            {
                out.push(self.line(
                    at,
                    false,
                    format!("NodeRollout {name}: domain {} waits: {w}", d.name),
                ));
            }
        }
        out
    }

    /// An Event raygate wrote (each distinct one once).
    pub fn event(
        &mut self,
        at: Timestamp,
        regarding: &str,
        kind: &str,
        reason: &str,
        note: &str,
    ) -> Vec<Line> {
        if !self
            .events
            .insert((regarding.into(), reason.into(), note.into()))
        {
            return vec![];
        }
        let warning = if kind == "Warning" { "Warning " } else { "" };
        vec![self.line(
            at,
            false,
            format!("Event {warning}{reason} on {regarding}: {note}"),
        )]
    }

    /// `[  12m03s] act 2 | text`.
    pub fn render(&self, l: &Line) -> String {
        render(self.start, l)
    }
}

/// A change of a child RayCluster or a slice worth a line: (milestone, text).
fn child_or_slice_change(
    before: &Option<State>,
    after: &Option<State>,
    who: &str,
) -> Option<(bool, String)> {
    match (before, after) {
        (None, Some(State::RayCluster(rc))) if rc.suspended => Some((
            true,
            format!(
                "RayCluster {who} created suspended: held by raygate until an admitted slice covers it"
            ),
        )),
        (None, Some(State::RayCluster(_))) => Some((false, format!("RayCluster {who} created"))),
        (Some(State::RayCluster(a)), Some(State::RayCluster(b))) if a.suspended != b.suspended => {
            Some(if b.suspended {
                (true, format!("RayCluster {who} suspended"))
            } else {
                (
                    true,
                    format!("RayCluster {who} released: its slice is admitted"),
                )
            })
        }
        (Some(State::RayCluster(_)), None) => Some((
            true,
            format!("RayCluster {who} deleted (the old child, after promotion)"),
        )),
        (None, Some(State::Workload(w))) => Some((
            false,
            format!(
                "Workload {who}: a slice of RayService {} ({} pods){}",
                w.rayservice.as_deref().unwrap_or("?"),
                w.pods,
                if w.admitted {
                    ", admitted"
                } else {
                    ", waiting for quota"
                }
            ),
        )),
        (Some(State::Workload(a)), Some(State::Workload(b))) if !a.admitted && b.admitted => {
            Some((
                true,
                format!(
                    "Workload {who} admitted by ClusterQueue {}",
                    b.cluster_queue.as_deref().unwrap_or("?")
                ),
            ))
        }
        (Some(State::Workload(a)), Some(State::Workload(b))) if !a.finished && b.finished => {
            Some((false, format!("Workload {who} finished: its quota is free")))
        }
        _ => None,
    }
}

pub fn render(start: Timestamp, l: &Line) -> String {
    let act = if l.act == 0 {
        "setup".to_string()
    } else {
        format!("act {}", l.act)
    };
    format!(
        "[{:>8}] {act:<5} | {}",
        clock(l.at.duration_since(start)),
        l.text
    )
}

fn resources(r: &Resources) -> String {
    r.iter()
        .map(|(k, q)| format!("{k}={}", q))
        .collect::<Vec<_>>()
        .join(",")
}
