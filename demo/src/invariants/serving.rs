//! The serving family: a RayService that was serving never loses all its serving pods.
//!
//! Serving as KubeRay v1.7.0 counts it (`rayservice_controller.go`): the RayService is `Ready`
//! (`NonZeroServeEndpoints`, `calculateConditions`) while `numServeEndpoints > 0`, the pods
//! with a ready endpoint in its serve Service's EndpointSlices
//! (`calculateNumServeEndpointsFromSlices`). That Service selects `ray.io/cluster=<the active
//! cluster>, ray.io/serve=true`; an endpoint is ready while its pod is Ready and not
//! terminating (the EndpointSlice controller). So a RayService's serving pods are counted here
//! from the pods themselves, never from the RayService's own status: the pods of the child its
//! status names active, labelled `ray.io/serve=true`, Ready and not being deleted. (During an
//! incremental upgrade KubeRay also counts the pending cluster's; the simulated KubeRay makes
//! new-cluster upgrades only.)

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use super::owners::{RAY_CLUSTER_LABEL, on_down_node, pods};
use super::violation::{Invariant, Now, Violation, intervals};
use crate::history::{History, Key, Kind, State};

/// KubeRay's pod label: the pod is an endpoint of its cluster's serve Service.
pub const SERVE_LABEL: &str = "ray.io/serve";

/// Each RayService ("namespace/name") now: its serving pods (see the module).
pub fn serving_pods(states: &BTreeMap<Key, State>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (k, s) in states {
        let State::RayService(rs) = s else { continue };
        let n = rs.active.as_ref().map_or(0, |active| {
            pods(states)
                .filter(|(pk, p)| {
                    pk.namespace == k.namespace
                        && p.labels.get(RAY_CLUSTER_LABEL) == Some(active)
                        && p.labels.get(SERVE_LABEL).map(String::as_str) == Some("true")
                        && p.healthy()
                })
                .count()
        });
        out.insert(format!("{}/{}", k.namespace, k.name), n);
    }
    out
}

/// Walks the RayServices: `f(at, until, service, serving pods)` for each instant once the
/// service first served (before that it is still starting).
fn walk(h: &History, mut f: impl FnMut(Timestamp, Option<Timestamp>, &str, usize)) {
    let mut served: BTreeMap<String, ()> = BTreeMap::new();
    let mut replay = h.replay();
    let mut last: Option<(Timestamp, BTreeMap<String, usize>)> = None;
    while let Some((at, states)) = replay.step() {
        if let Some((t, now)) = last.take() {
            for (svc, n) in &now {
                f(t, Some(at), svc, *n);
            }
        }
        let mut now = serving_pods(states);
        for (svc, n) in &now {
            if *n > 0 {
                served.insert(svc.clone(), ());
            }
        }
        now.retain(|svc, _| served.contains_key(svc));
        last = Some((at, now));
    }
    if let Some((t, now)) = last {
        for (svc, n) in &now {
            f(t, None, svc, *n);
        }
    }
}

/// **A RayService that was serving never stops serving.** From the first instant a RayService
/// had a serving pod (see the module) until it is deleted, it always has one: no instant at
/// which its active cluster has no Ready, non-terminating pod labelled `ray.io/serve=true`.
///
/// A drain cannot stop a node failing: a spell that begins while a serving pod of the active
/// cluster is on a node whose Ready condition is not True is the failure's (excused until the
/// service serves again), as the floor invariants excuse a group down with its node.
pub fn never_stopped_serving(h: &History) -> Vec<Violation> {
    let mut served: BTreeMap<String, ()> = BTreeMap::new();
    // the services not serving now: whether their spell is a node failure's
    let mut spells: BTreeMap<String, bool> = BTreeMap::new();
    intervals(h, Invariant::StoppedServing, |_, states| {
        let mut now = Now::new();
        for (svc, n) in serving_pods(states) {
            if n > 0 {
                served.insert(svc.clone(), ());
                spells.remove(&svc);
            } else if served.contains_key(&svc)
                && !*spells
                    .entry(svc.clone())
                    .or_insert_with(|| on_a_failed_node(states, &svc))
            {
                let message = "no serving pod (Ready, not terminating, ray.io/serve=true) in its \
                               active cluster"
                    .to_string();
                now.insert(svc.clone(), (vec![format!("RayService {svc}")], message));
            }
        }
        now
    })
}

/// Whether a serving pod (`ray.io/serve=true`, not deleted) of `svc`'s active cluster is on a
/// node that is not Ready.
fn on_a_failed_node(states: &BTreeMap<Key, State>, svc: &str) -> bool {
    let (ns, name) = svc.split_once('/').unwrap_or(("", svc));
    let Some(State::RayService(rs)) = states.get(&Key::new(Kind::RayService, ns, name)) else {
        return false;
    };
    let Some(active) = &rs.active else {
        return false;
    };
    pods(states).any(|(k, p)| {
        k.namespace == ns
            && p.labels.get(RAY_CLUSTER_LABEL) == Some(active)
            && p.labels.get(SERVE_LABEL).map(String::as_str) == Some("true")
            && on_down_node(states, p)
    })
}

/// Per RayService that served: the seconds it had no serving pod (see
/// [`never_stopped_serving`]), until the end of the history or its deletion.
pub fn serving_seconds_lost(h: &History) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    walk(h, |at, until, svc, n| {
        let lost = out.entry(svc.to_string()).or_default();
        if let Some(until) = until
            && n == 0
        {
            *lost += until.duration_since(at).as_secs_f64();
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{NodeState, PodState, RayServiceState};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn service(h: &mut History, at: i64, active: Option<&str>) {
        let state = State::RayService(RayServiceState {
            queue: None,
            active: active.map(String::from),
        });
        h.record(t(at), Key::new(Kind::RayService, "ns", "llm"), Some(state));
    }

    /// A pod of cluster `cluster`; `serve`: its `ray.io/serve` label.
    fn pod(h: &mut History, at: i64, name: &str, cluster: &str, serve: &str, ready: bool) {
        let labels = [(RAY_CLUSTER_LABEL, cluster), (SERVE_LABEL, serve)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let state = State::Pod(PodState {
            labels,
            ready,
            ..Default::default()
        });
        h.record(t(at), Key::new(Kind::Pod, "ns", name), Some(state));
    }

    fn gone(h: &mut History, at: i64, name: &str) {
        h.record(t(at), Key::new(Kind::Pod, "ns", name), None);
    }

    #[test]
    fn a_service_with_no_serving_pod_in_its_active_cluster_is_flagged_from_when_it_served() {
        let mut h = History::new();
        service(&mut h, 0, None);
        // starting: no active cluster, then pods not Ready yet: not a violation
        service(&mut h, 5, Some("llm-a"));
        pod(&mut h, 5, "head", "llm-a", "false", true);
        pod(&mut h, 5, "w0", "llm-a", "true", false);
        pod(&mut h, 20, "w0", "llm-a", "true", true);
        assert!(never_stopped_serving(&h).is_empty());
        // the worker is evicted; the head (ray.io/serve=false) serves nothing
        h.record(
            t(100),
            Key::new(Kind::Pod, "ns", "w0"),
            Some(State::Pod(PodState {
                labels: [(RAY_CLUSTER_LABEL, "llm-a"), (SERVE_LABEL, "true")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ready: true,
                deleting: true,
                ..Default::default()
            })),
        );
        gone(&mut h, 101, "w0");
        pod(&mut h, 110, "w1", "llm-a", "true", false);
        pod(&mut h, 130, "w1", "llm-a", "true", true);
        let v = never_stopped_serving(&h);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].invariant, Invariant::StoppedServing);
        assert_eq!((v[0].from, v[0].until), (t(100), Some(t(130))));
        assert_eq!(v[0].objects, vec!["RayService ns/llm"]);
        assert_eq!(serving_seconds_lost(&h)["ns/llm"], 30.0);
    }

    #[test]
    fn a_switch_to_a_ready_new_cluster_keeps_serving_and_a_pending_cluster_does_not_count() {
        let mut h = History::new();
        service(&mut h, 0, Some("llm-a"));
        pod(&mut h, 0, "a0", "llm-a", "true", true);
        // the pending cluster's pods are Ready, but traffic still goes to llm-a
        pod(&mut h, 50, "b0", "llm-b", "true", true);
        gone(&mut h, 60, "a0");
        service(&mut h, 70, Some("llm-b"));
        let v = never_stopped_serving(&h);
        assert_eq!((v[0].from, v[0].until), (t(60), Some(t(70))), "{v:?}");
        assert_eq!(serving_seconds_lost(&h)["ns/llm"], 10.0);
        // KubeRay's order: switch first, then delete the old cluster
        let mut h = History::new();
        service(&mut h, 0, Some("llm-a"));
        pod(&mut h, 0, "a0", "llm-a", "true", true);
        pod(&mut h, 50, "b0", "llm-b", "true", true);
        service(&mut h, 60, Some("llm-b"));
        gone(&mut h, 70, "a0");
        assert!(never_stopped_serving(&h).is_empty());
        assert_eq!(serving_seconds_lost(&h)["ns/llm"], 0.0);
        // a deleted RayService no longer serves, and that is not a loss
        h.record(t(80), Key::new(Kind::RayService, "ns", "llm"), None);
        assert!(never_stopped_serving(&h).is_empty());
    }

    /// A serving pod's node fails: the spell that follows is the failure's, however long; a
    /// spell that begins with every serving pod's node Ready is not.
    #[test]
    fn a_spell_that_begins_with_a_serving_pod_on_a_failed_node_is_excused() {
        let node = |h: &mut History, at: i64, ready: bool| {
            let state = State::Node(NodeState {
                ready,
                ..Default::default()
            });
            h.record(t(at), Key::new(Kind::Node, "", "n1"), Some(state));
        };
        let on_n1 = |h: &mut History, at: i64, ready: bool, deleting: bool| {
            let labels = [(RAY_CLUSTER_LABEL, "llm-a"), (SERVE_LABEL, "true")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let state = State::Pod(PodState {
                labels,
                node: Some("n1".into()),
                ready,
                deleting,
                ..Default::default()
            });
            h.record(t(at), Key::new(Kind::Pod, "ns", "w0"), Some(state));
        };
        let mut h = History::new();
        node(&mut h, 0, true);
        service(&mut h, 0, Some("llm-a"));
        on_n1(&mut h, 0, true, false);
        // the node fails: its pod turns NotReady, is deleted later, a new one serves at 400
        node(&mut h, 100, false);
        on_n1(&mut h, 100, false, false);
        on_n1(&mut h, 300, false, true);
        gone(&mut h, 310, "w0");
        node(&mut h, 350, true);
        pod(&mut h, 400, "w1", "llm-a", "true", true);
        assert!(never_stopped_serving(&h).is_empty());
        assert_eq!(serving_seconds_lost(&h)["ns/llm"], 300.0, "still a loss");
        // the same pod taken away on a Ready node is a violation
        let mut h = History::new();
        node(&mut h, 0, true);
        service(&mut h, 0, Some("llm-a"));
        on_n1(&mut h, 0, true, false);
        on_n1(&mut h, 100, true, true);
        gone(&mut h, 110, "w0");
        node(&mut h, 120, false);
        pod(&mut h, 400, "w1", "llm-a", "true", true);
        let v = never_stopped_serving(&h);
        assert_eq!((v.len(), v[0].from), (1, t(100)), "{v:?}");
    }
}
