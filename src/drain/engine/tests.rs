//! The engine step by step on a small world the tests apply the actions to.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, Probe};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::drain::{Generation, GenerationSource, GenerationTarget, GroupLabel, GroupLabels, plan};
use raygate_testing::core::{NodeExt, PdbExt, PodExt, UD, int, node, pdb, pod};

const GROUP: &str = "group";

fn t0() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap()
}

fn secs(s: i64) -> SignedDuration {
    SignedDuration::from_secs(s)
}

fn member(name: &str, node: &str, group: &str, leader: bool) -> Pod {
    let p = pod(&format!("ns/{name}"), node)
        .label(GROUP, group)
        .uid(&format!("uid-{name}"))
        .ready();
    if leader { p.label("role", "leader") } else { p }
}

/// Two domains: `a` (nodes a1, a2: group ga, leader on a1, worker on a2, plus an unprotected
/// pod) and `b` (node b1: group gb). One budget over the leaders, one disruption allowed.
struct World {
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    pdbs: Vec<PodDisruptionBudget>,
    /// `None`: not observed (the executor cannot list them).
    daemon_sets: Option<Vec<DaemonSet>>,
    outcomes: Vec<Outcome>,
    resumes: u64,
    /// The operator asked to abort.
    abort: bool,
    /// Other NodeRollouts' domains in progress.
    elsewhere: Vec<Disruption>,
    /// The RayServices observed.
    services: Vec<ServiceView>,
    /// The clusters marked for a move, `namespace/cluster`.
    marked: Vec<String>,
    now: Timestamp,
}

impl World {
    fn new() -> Self {
        World {
            nodes: ["a1", "a2"]
                .iter()
                .map(|n| node(n, "a").ready())
                .chain([node("b1", "b").ready()])
                .collect(),
            pods: vec![
                member("ga-0", "a1", "ga", true),
                member("ga-1", "a2", "ga", false),
                pod("ns/web", "a2").ready(),
                member("gb-0", "b1", "gb", true),
                member("gb-1", "b1", "gb", false),
            ],
            pdbs: vec![pdb("ns/leaders", &[("role", "leader")]).observed(2, 1)],
            daemon_sets: None,
            outcomes: vec![],
            resumes: 0,
            abort: false,
            elsewhere: vec![],
            services: vec![],
            marked: vec![],
            now: t0(),
        }
    }

    fn options() -> Options {
        Options {
            plan: PlanOptions {
                domain_label: UD.into(),
                groups: GroupLabels::of_labels(&[GROUP]),
                ..PlanOptions::default()
            },
            health_check_stable: Some(secs(30)),
            // the window before evictions has tests of its own (tests/consent.rs)
            eviction_window: Some(SignedDuration::ZERO),
            ..Options::default()
        }
    }

    fn start(&self, options: &Options) -> State {
        let p = plan(
            &Cluster::new(&self.nodes, &self.pods, &self.pdbs),
            &options.plan,
            self.now,
        )
        .unwrap();
        State::new(&p, options).unwrap()
    }

    fn step(&mut self, state: &State, options: &Options) -> (State, Vec<Action>) {
        let obs = Observation {
            nodes: &self.nodes,
            pods: &self.pods,
            pdbs: &self.pdbs,
            daemon_sets: self.daemon_sets.as_deref(),
            outcomes: &self.outcomes,
            resumes: self.resumes,
            abort: self.abort,
            elsewhere: &self.elsewhere,
            services: &self.services,
        };
        let out = decide(state, &obs, self.now, options);
        self.outcomes.clear();
        out
    }

    fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .unwrap()
    }

    /// Applies the actions; evictions are answered by `answer` (accepted ones mark the pod
    /// terminating).
    fn apply(&mut self, actions: &[Action], answer: impl Fn(&EvictTarget) -> EvictionResult) {
        for a in actions {
            match a {
                Action::Cordon { node } => {
                    self.node_mut(node)
                        .spec
                        .get_or_insert_default()
                        .unschedulable = Some(true)
                }
                Action::Taint { node, taint } => self
                    .node_mut(node)
                    .spec
                    .get_or_insert_default()
                    .taints
                    .get_or_insert_default()
                    .push(taint.clone()),
                Action::LabelForUpgrade { node, key, value } => {
                    let n = self.node_mut(node);
                    n.metadata
                        .labels
                        .get_or_insert_default()
                        .insert(key.clone(), value.clone());
                }
                Action::Uncordon {
                    node,
                    keep_cordon,
                    remove_taint,
                    remove_label,
                } => {
                    let n = self.node_mut(node);
                    let spec = n.spec.get_or_insert_default();
                    if !keep_cordon {
                        spec.unschedulable = None;
                    }
                    if let (Some(t), Some(ts)) = (remove_taint, spec.taints.as_mut()) {
                        ts.retain(|x| x.key != t.key);
                    }
                    if let (Some(l), Some(ls)) = (remove_label, n.metadata.labels.as_mut()) {
                        ls.remove(l);
                    }
                }
                Action::Evict { target, .. } => {
                    let result = answer(target);
                    if result == EvictionResult::Evicted {
                        let now = self.now;
                        if let Some(p) = self
                            .pods
                            .iter_mut()
                            .find(|p| p.metadata.name.as_deref() == Some(&target.pod.name))
                        {
                            p.metadata.deletion_timestamp = Some(Time(now));
                        }
                    }
                    self.outcomes.push(Outcome {
                        target: target.clone(),
                        result,
                    });
                }
                Action::Report { .. } | Action::ReportService { .. } => {}
                Action::MoveRayService {
                    namespace, cluster, ..
                } => self.marked.push(format!("{namespace}/{cluster}")),
            }
        }
    }

    /// Terminating pods finish.
    fn terminate(&mut self) {
        self.pods
            .retain(|p| p.metadata.deletion_timestamp.is_none());
    }

    fn advance(&mut self, s: i64) {
        self.now += secs(s);
    }

    fn set_healthy(&mut self, current: i32, desired: i32) {
        let st = self.pdbs[0].status.get_or_insert_default();
        st.current_healthy = Some(current);
        st.desired_healthy = Some(desired);
        st.disruptions_allowed = Some((current - desired).max(0));
    }
}

fn evicted(_: &EvictTarget) -> EvictionResult {
    EvictionResult::Evicted
}

fn evictions(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Evict { target, .. } => Some(target.pod.name.clone()),
            _ => None,
        })
        .collect()
}

fn cordons(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Cordon { node } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

fn reasons(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Report { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

/// Runs the world through domain a's drain (everything accepted, pods gone at once) up to the
/// start of its health check.
fn drain_domain_a(w: &mut World, o: &Options) -> State {
    let mut s = w.start(o);
    for _ in 0..10 {
        let (next, actions) = w.step(&s, o);
        w.apply(&actions, evicted);
        w.terminate();
        s = next;
        if s.domains[0].step == Step::HealthCheck {
            return s;
        }
        w.advance(1);
    }
    panic!("domain a never reached its health check: {s:?}");
}

/// The group ga comes back Ready on domain b's node... b1 is not cordoned yet: recreate there.
fn ga_recovers(w: &mut World) {
    w.pods.push(member("ga-0", "b1", "ga", true));
    w.pods.push(member("ga-1", "b1", "ga", false));
    w.set_healthy(2, 1);
}

#[test]
fn the_first_step_cordons_the_first_domain_only_and_evicts_nothing_until_the_cordon_shows() {
    let mut w = World::new();
    let o = World::options();
    let s = w.start(&o);
    let (s, actions) = w.step(&s, &o);
    assert_eq!(cordons(&actions), ["a1", "a2"]);
    assert!(evictions(&actions).is_empty());
    assert_eq!(s.domains[0].step, Step::Draining);
    assert_eq!(s.domains[1].step, Step::Pending);
    assert!(reasons(&actions).contains(&"DomainStarted"));
    // the cordon is not observed yet: the same again, still no eviction
    let (_, again) = w.step(&s, &o);
    assert_eq!(cordons(&again), ["a1", "a2"]);
    assert!(evictions(&again).is_empty());
}

#[test]
fn protected_pods_go_first_and_the_rest_only_once_they_are_gone() {
    let mut w = World::new();
    let o = World::options();
    let s = w.start(&o);
    let (s, actions) = w.step(&s, &o);
    w.apply(&actions, evicted);
    let (s, actions) = w.step(&s, &o);
    assert_eq!(evictions(&actions), ["ga-0"], "phase 1: the leader only");
    w.apply(&actions, evicted);
    // the leader terminates slowly: no phase-2 eviction while it is still there
    let (s, actions) = w.step(&s, &o);
    assert!(evictions(&actions).is_empty(), "{actions:?}");
    assert!(
        s.domains[0].message.contains("protected"),
        "{}",
        s.domains[0].message
    );
    w.terminate();
    let (s, actions) = w.step(&s, &o);
    assert_eq!(evictions(&actions), ["ga-1", "web"]);
    assert_eq!(s.domains[0].evicted.len(), 1);
}

#[test]
fn phase_two_keeps_at_most_the_concurrency_terminating() {
    let mut w = World::new();
    let o = Options {
        eviction_concurrency: 1,
        ..World::options()
    };
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    w.terminate();
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-1"]);
    w.apply(&a, evicted);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty(), "ga-1 is still terminating");
    w.terminate();
    let (_, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["web"]);
}

#[test]
fn a_429_pauses_the_domain_until_retry_after_and_the_observed_budget_allows_again() {
    let mut w = World::new();
    let o = World::options();
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    let (s, a) = w.step(&s, &o);
    let message = "The disruption budget leaders needs 1 healthy pods and has 1 currently";
    w.apply(&a, |_| EvictionResult::TooManyRequests {
        message: message.into(),
        retry_after: Some(secs(10)),
    });
    w.set_healthy(1, 1);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    assert!(reasons(&a).contains(&"EvictionRefused"));
    let refusal = s.domains[0].refusal.clone().unwrap();
    assert_eq!(refusal.pdb, "ns/leaders");
    assert_eq!(refusal.message, message);
    assert!(s.waiting.contains(message), "{}", s.waiting);
    // the budget allows again, but Retry-After has not passed
    w.set_healthy(2, 1);
    w.advance(5);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    // Retry-After passed, but the budget (observed) allows nothing
    w.set_healthy(1, 1);
    w.advance(10);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    assert!(s.waiting.contains("0 disruptions allowed"), "{}", s.waiting);
    // a stale budget status does not lift it either
    w.set_healthy(2, 1);
    w.pdbs[0].metadata.generation = Some(2);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    w.pdbs[0].metadata.generation = Some(1);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    assert!(reasons(&a).contains(&"EvictionResumed"));
    assert!(s.domains[0].refusal.is_none());
}

/// Groups of two kinds in one rollout (a LeaderWorkerSet's and a RayCluster's multi-host
/// replicas, say): `ga` is named by the second label, `gb` by the first. The health check waits
/// for `ga` by name as for any group; a rollout that names only the first label sees no group
/// `ga` at all (its pods count one by one, through the budget only).
#[test]
fn a_rollout_recognises_the_groups_of_every_label_it_names() {
    const REPLICA: &str = "replica";
    let relabel = |p: Pod| {
        let mut p = p;
        let labels = p.metadata.labels.get_or_insert_default();
        if labels.get(GROUP).is_some_and(|g| g == "ga") {
            labels.remove(GROUP);
            labels.insert(REPLICA.into(), "ga".into());
        }
        p
    };
    let waiting_after_domain_a = |o: &Options| {
        let mut w = World::new();
        w.pods = std::mem::take(&mut w.pods)
            .into_iter()
            .map(relabel)
            .collect();
        let s = drain_domain_a(&mut w, o);
        w.set_healthy(1, 1);
        let (s, a) = w.step(&s, o);
        (s, a, w)
    };
    let both = Options {
        plan: PlanOptions {
            groups: GroupLabels::of_labels(&[GROUP, REPLICA]),
            ..World::options().plan
        },
        ..World::options()
    };
    let (s, a, mut w) = waiting_after_domain_a(&both);
    assert!(cordons(&a).is_empty(), "domain b waits");
    assert!(
        s.waiting.contains("group ga is not Ready again"),
        "{}",
        s.waiting
    );
    let groups: Vec<(&str, Option<&str>)> = s.domains[0]
        .evicted
        .iter()
        .map(|e| (e.pod.as_str(), e.group.as_deref()))
        .collect();
    assert_eq!(
        groups,
        [
            ("ns/ga-0", Some("ga")),
            ("ns/ga-1", Some("ga")),
            ("ns/web", None)
        ]
    );
    w.pods.push(relabel(member("ga-0", "b1", "ga", true)));
    w.pods.push(relabel(member("ga-1", "b1", "ga", false)));
    w.set_healthy(2, 1);
    let (s, _) = w.step(&s, &both);
    assert!(!s.waiting.contains("group ga"), "{}", s.waiting);

    let (s, _, _) = waiting_after_domain_a(&World::options());
    assert!(!s.waiting.contains("group ga"), "{}", s.waiting);
}

#[test]
fn the_health_check_waits_for_budgets_groups_and_the_stable_period() {
    let mut w = World::new();
    let o = Options {
        health_check_wait: secs(10),
        ..World::options()
    };
    let s = drain_domain_a(&mut w, &o);
    w.set_healthy(1, 1);
    // within the wait: no check yet
    let (s, _) = w.step(&s, &o);
    assert!(
        s.domains[0].message.contains("wait"),
        "{}",
        s.domains[0].message
    );
    w.advance(10);
    let (s, a) = w.step(&s, &o);
    assert!(cordons(&a).is_empty(), "domain b waits");
    assert!(
        s.waiting.contains("group ga is not Ready again"),
        "{}",
        s.waiting
    );
    ga_recovers(&mut w);
    let (s, _) = w.step(&s, &o);
    let healthy_since = s.domains[0].health.healthy_since.unwrap();
    w.advance(29);
    let (s, a) = w.step(&s, &o);
    assert!(cordons(&a).is_empty(), "29 s of a 30 s stable period");
    // a drop in currentHealthy restarts the stable period even though still satisfied
    w.set_healthy(1, 1);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].health.healthy_since, Some(w.now), "restarted");
    assert!(w.now > healthy_since);
    w.set_healthy(2, 1);
    w.advance(29);
    let (s, a) = w.step(&s, &o);
    assert!(
        cordons(&a).is_empty(),
        "29 s into the restarted stable period"
    );
    w.advance(1);
    let (s, a) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::Done);
    assert_eq!(cordons(&a), ["b1"], "the next domain starts");
    assert!(reasons(&a).contains(&"DomainHealthy"));
}

#[test]
fn the_default_stable_period_is_the_slowest_representative_probe_plus_the_lag() {
    let mut w = World::new();
    for p in w.pods.iter_mut().filter(|p| {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("role"))
    }) {
        p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Probe {
            period_seconds: Some(5),
            failure_threshold: Some(3),
            ..Probe::default()
        });
    }
    // a worker's slower probe does not count: workers are not representatives
    w.pods[1].spec.as_mut().unwrap().containers[0].readiness_probe = Some(Probe {
        period_seconds: Some(60),
        ..Probe::default()
    });
    let o = Options {
        health_check_stable: None,
        disruption_controller_lag: secs(7),
        ..World::options()
    };
    let s = w.start(&o);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.stable, Some(secs(22)));
}

#[test]
fn an_unhealthy_domain_fails_after_the_retry_timeout() {
    let mut w = World::new();
    let o = Options {
        health_check_retry_timeout: secs(60),
        ..World::options()
    };
    let s = drain_domain_a(&mut w, &o);
    w.advance(59);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.phase, Phase::Running);
    w.advance(1);
    let (s, a) = w.step(&s, &o);
    assert!(matches!(&s.phase, Phase::Paused { reason } if reason.contains("retry timeout")));
    assert!(reasons(&a).contains(&"RolloutPaused"));
}

#[test]
fn a_domain_timeout_pauses_and_a_resume_restarts_its_timer() {
    let mut w = World::new();
    let o = Options {
        domain_timeout: Some(secs(300)),
        ..World::options()
    };
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, |_| EvictionResult::TooManyRequests {
        message: "needs 1 has 1".into(),
        retry_after: None,
    });
    w.set_healthy(1, 1);
    w.advance(300);
    let (s, a) = w.step(&s, &o);
    assert!(
        matches!(&s.phase, Phase::Paused { reason } if reason.contains("domain a did not finish")),
        "{:?}",
        s.phase
    );
    assert!(evictions(&a).is_empty());
    // paused: nothing happens, even when the budget allows again
    w.set_healthy(2, 1);
    w.advance(10);
    let (s, a) = w.step(&s, &o);
    assert!(a.is_empty(), "{a:?}");
    w.resumes = 1;
    let (s, a) = w.step(&s, &o);
    assert_eq!(s.phase, Phase::Running);
    assert_eq!(evictions(&a), ["ga-0"]);
    assert_eq!(s.domains[0].started, Some(w.now));
    // the same resume counter again resumes nothing twice
    let (s2, _) = w.step(&s, &o);
    assert_eq!(s2.resumes, 1);
}

#[test]
fn a_domain_timeout_with_abort_uncordons_the_domain_and_ends_the_rollout() {
    let mut w = World::new();
    let o = Options {
        domain_timeout: Some(secs(300)),
        failure_action: FailureAction::Abort,
        ..World::options()
    };
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, |_| EvictionResult::TooManyRequests {
        message: "needs 1 has 1".into(),
        retry_after: None,
    });
    w.advance(300);
    let (s, a) = w.step(&s, &o);
    assert!(matches!(s.phase, Phase::Failed { .. }), "{:?}", s.phase);
    assert_eq!(uncordoned(&a), ["a1", "a2"]);
    assert_eq!(s.domains[0].step, Step::Aborted);
    assert_eq!(s.domains[1].step, Step::Pending);
    let (_, a) = w.step(&s, &o);
    assert!(a.is_empty(), "a failed rollout does nothing more");
}

fn generation_options(handoff: Handoff) -> Options {
    let mut o = World::options();
    o.plan.generation = Some(Generation {
        source: GenerationSource::Label("gen".into()),
        target: GenerationTarget::Value("2".into()),
    });
    o.handoff = handoff;
    o
}

/// Steps the World's first domain through its drain (every eviction accepted, every pod gone)
/// to its hand-off.
fn drained_to_hand_off(w: &mut World, o: &Options) -> State {
    let mut s = w.start(o);
    for _ in 0..5 {
        let (next, a) = w.step(&s, o);
        w.apply(&a, evicted);
        w.terminate();
        s = next;
    }
    assert_eq!(s.domains[0].step, Step::HandingOff);
    s
}

fn with_generations(w: &mut World) {
    for n in &mut w.nodes {
        let l = n.metadata.labels.get_or_insert_default();
        l.insert("gen".into(), "1".into());
    }
}

#[test]
fn reboot_labels_the_drained_nodes_waits_for_the_target_generation_and_uncordons() {
    let o = generation_options(Handoff::reboot());
    let mut w = World::new();
    with_generations(&mut w);
    let mut s = w.start(&o);
    let mut labelled = vec![];
    for _ in 0..5 {
        let (next, a) = w.step(&s, &o);
        labelled.extend(a.iter().filter_map(|a| match a {
            Action::LabelForUpgrade { node, key, value } => Some(format!("{node} {key}={value}")),
            _ => None,
        }));
        w.apply(&a, evicted);
        w.terminate();
        s = next;
    }
    assert_eq!(s.domains[0].step, Step::HandingOff);
    assert_eq!(
        labelled,
        [
            "a1 raygate.io/upgrade=requested",
            "a2 raygate.io/upgrade=requested"
        ]
    );
    // a1 comes back at the target generation, Ready; a2 is still rebooting (NotReady)
    w.node_mut("a1")
        .metadata
        .labels
        .get_or_insert_default()
        .insert("gen".into(), "2".into());
    let a2 = w.node_mut("a2");
    a2.metadata
        .labels
        .get_or_insert_default()
        .insert("gen".into(), "2".into());
    a2.status.as_mut().unwrap().conditions = None;
    let (s, a) = w.step(&s, &o);
    assert_eq!(
        a.iter()
            .filter_map(|a| match a {
                Action::Uncordon {
                    node, remove_label, ..
                } => Some((node.as_str(), remove_label.clone())),
                _ => None,
            })
            .collect::<Vec<_>>(),
        [("a1", Some(UPGRADE_LABEL.to_string()))]
    );
    w.apply(&a, evicted);
    assert_eq!(s.domains[0].step, Step::HandingOff);
    assert!(s.waiting.contains("a2 (not Ready)"), "{}", s.waiting);
    *w.node_mut("a2") = w.node_mut("a2").clone().ready();
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::HealthCheck);
    assert!(!is_cordoned(w.node_mut("a2")));
}

#[test]
fn replace_waits_until_the_domain_has_new_nodes_at_the_target_generation() {
    let mut w = World::new();
    with_generations(&mut w);
    let o = generation_options(Handoff::replace());
    let s = drained_to_hand_off(&mut w, &o);
    w.nodes.push(node("a1-g2", "a").ready().label("gen", "2"));
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::HandingOff, "1 of 2 new nodes");
    assert!(s.waiting.contains("1 of 2"), "{}", s.waiting);
    w.nodes.push(node("a2-g2", "a").ready().label("gen", "2"));
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::HealthCheck);
}

/// A node that never comes back from the reboot hand-off: the domain waits silently for
/// `NODE_RETURN_GRACE` (a reboot takes minutes), then holds naming the node (`Blocked`, one
/// Warning `NodeNotReturning`), and the hand-off timeout applies the failure action.
#[test]
fn a_node_that_never_returns_from_the_reboot_is_named_then_fails_the_rollout_at_the_timeout() {
    let o = generation_options(Handoff::reboot());
    let mut w = World::new();
    with_generations(&mut w);
    let s = drained_to_hand_off(&mut w, &o);
    w.advance(NODE_RETURN_GRACE.as_secs() - 1);
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].hold.is_none(), "a reboot takes minutes");
    w.advance(1);
    let (s, a) = w.step(&s, &o);
    let hold = s.domains[0].hold.clone().expect("named");
    assert_eq!(hold.reason, NODE_NOT_RETURNING);
    assert!(hold.message.contains("a1 (upgrading)"), "{hold:?}");
    assert_eq!(reasons(&a), [NODE_NOT_RETURNING]);
    w.advance(60);
    let (s, a) = w.step(&s, &o);
    assert!(
        !reasons(&a).contains(&NODE_NOT_RETURNING),
        "announced once: {a:?}"
    );
    w.advance(DEFAULT_HANDOFF_TIMEOUT.as_secs());
    let (s, _) = w.step(&s, &o);
    match &s.phase {
        Phase::Paused { reason } => assert!(reason.contains("handOff.timeout"), "{reason}"),
        other => panic!("not paused: {other:?}"),
    }
}

#[test]
fn a_reboot_or_replace_hand_off_needs_a_generation() {
    let w = World::new();
    let mut o = World::options();
    o.handoff = Handoff::reboot();
    let p = plan(&Cluster::new(&w.nodes, &w.pods, &w.pdbs), &o.plan, w.now).unwrap();
    assert_eq!(
        State::new(&p, &o),
        Err(EngineError::HandoffNeedsGeneration { handoff: "reboot" })
    );
}

#[test]
fn none_leaves_the_nodes_cordoned_and_tainted() {
    let mut w = World::new();
    let mut o = World::options();
    o.plan.taint = Some(raygate_testing::core::taint(
        "raygate.io/outdated",
        "NoSchedule",
    ));
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    let taints = a
        .iter()
        .filter(|a| matches!(a, Action::Taint { .. }))
        .count();
    assert_eq!(taints, 3, "domain a's nodes and, up front, domain b's");
    assert!(evictions(&a).is_empty(), "not before the taints show");
    w.apply(&a, evicted);
    let mut s = s;
    for _ in 0..4 {
        let (next, a) = w.step(&s, &o);
        assert!(!a.iter().any(|a| matches!(a, Action::Uncordon { .. })));
        w.apply(&a, evicted);
        w.terminate();
        s = next;
    }
    assert_eq!(s.domains[0].step, Step::HealthCheck);
    assert!(is_cordoned(w.node_mut("a1")));
}

fn taints(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Taint { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn taint_outdated_taints_every_domain_s_nodes_up_front_and_evicts_only_once_they_show() {
    let mut w = World::new();
    let mut o = World::options();
    o.plan.taint = Some(raygate_testing::core::taint(
        "raygate.io/outdated",
        "NoSchedule",
    ));
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    assert_eq!(
        cordons(&a),
        ["a1", "a2"],
        "the cordon goes domain by domain"
    );
    let mut tainted = taints(&a);
    tainted.sort();
    assert_eq!(
        tainted,
        ["a1", "a2", "b1"],
        "the taint covers the generation at once"
    );
    // b1's taint does not show yet: domain a evicts nothing
    let only_a: Vec<Action> = a
        .iter()
        .filter(|x| !matches!(x, Action::Taint { node, .. } if node == "b1"))
        .cloned()
        .collect();
    w.apply(&only_a, evicted);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    assert_eq!(taints(&a), ["b1"]);
    assert!(
        s.domains[0]
            .message
            .contains("tainting 1 node(s) of later domains"),
        "{}",
        s.domains[0].message
    );
    w.apply(&a, evicted);
    let (_, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    assert!(taints(&a).is_empty(), "nothing tainted twice");
}

#[test]
fn abort_takes_the_up_front_taint_off_the_domains_not_started() {
    let mut w = World::new();
    let mut o = World::options();
    o.plan.taint = Some(raygate_testing::core::taint(
        "raygate.io/outdated",
        "NoSchedule",
    ));
    o.rollout_timeout = Some(secs(10));
    o.failure_action = FailureAction::Abort;
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    w.advance(11);
    let (s, a) = w.step(&s, &o);
    assert!(matches!(s.phase, Phase::Failed { .. }), "{:?}", s.phase);
    w.apply(&a, evicted);
    for n in ["a1", "a2", "b1"] {
        let node = w.node_mut(n).clone();
        assert!(!is_cordoned(&node), "{n} uncordoned");
        assert!(
            !node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "raygate.io/outdated"),
            "{n} untainted"
        );
    }
}

/// The World's groups as one workload (`app=llm`), as KubeRay's replicas of a worker group.
fn one_workload(w: &mut World) {
    for p in &mut w.pods {
        let labels = p.metadata.labels.get_or_insert_default();
        if labels.contains_key(GROUP) {
            labels.insert("app".into(), "llm".into());
        }
    }
}

fn workload_options() -> Options {
    let mut o = World::options();
    o.plan.groups = GroupLabels::new([GroupLabel::with_workload(GROUP, vec!["app".into()])]);
    o
}

#[test]
fn an_evicted_group_recreated_under_a_new_name_is_ready_again_by_its_workload_s_count() {
    // KubeRay v1.7 (raycluster_controller.go reconcileMultiHostWorkerGroup): a replica that lost
    // a pod is deleted whole and recreated as `<group>-<5 random>`, a name never seen before.
    let mut w = World::new();
    one_workload(&mut w);
    let o = workload_options();
    let s = drain_domain_a(&mut w, &o);
    let baseline = &s.domains[0].workloads["ns/app=llm"];
    assert_eq!((baseline.ready_groups, baseline.group_size), (2, 2));
    assert_eq!(baseline.groups, BTreeSet::from(["ga".to_string()]));
    w.set_healthy(1, 1);
    let (s, _) = w.step(&s, &o);
    assert!(
        s.waiting
            .contains("workload ns/app=llm has 1 of its 2 Ready groups back (evicted: ga)"),
        "{}",
        s.waiting
    );
    // the replacement's first pod: not a whole group yet
    w.pods
        .push(member("gc-0", "b1", "gc", true).label("app", "llm"));
    w.set_healthy(2, 1);
    let (s, _) = w.step(&s, &o);
    assert!(s.waiting.contains("1 of its 2"), "{}", s.waiting);
    w.pods
        .push(member("gc-1", "b1", "gc", false).label("app", "llm"));
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].health.healthy_since.is_some(), "{}", s.waiting);
    assert!(!s.waiting.contains("group ga"), "not waited for by name");
    w.advance(30);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::Done);
}

#[test]
fn a_workload_short_of_its_groups_holds_the_gate_even_if_the_evicted_name_comes_back() {
    // the same name back is not enough when the workload lost another group meanwhile
    let mut w = World::new();
    one_workload(&mut w);
    let o = workload_options();
    let s = drain_domain_a(&mut w, &o);
    w.pods
        .push(member("ga-0", "b1", "ga", true).label("app", "llm"));
    w.pods
        .push(member("ga-1", "b1", "ga", false).label("app", "llm"));
    let gb = w
        .pods
        .iter_mut()
        .find(|p| p.metadata.name.as_deref() == Some("gb-1"))
        .unwrap();
    gb.status = None; // unready
    w.set_healthy(2, 1);
    let (s, _) = w.step(&s, &o);
    assert!(s.waiting.contains("1 of its 2"), "{}", s.waiting);
}

/// The node's kubelet stops reporting: the node lifecycle controller marks it and its pods not
/// Ready.
fn fail_node(w: &mut World, name: &str) {
    let n = w.node_mut(name);
    n.status = None;
    for p in &mut w.pods {
        if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name) {
            p.status = None;
        }
    }
}

/// ga recreated on `node` (a spare node `s1` is added first), its leader Ready or starting.
fn ga_recreated_on(w: &mut World, node_name: &str, leader_ready: bool) {
    if node_name == "s1" {
        w.nodes.push(node("s1", "spare").ready());
    }
    let mut leader = member("ga-0", node_name, "ga", true).label("app", "llm");
    if !leader_ready {
        leader.status = None; // starting
    }
    w.pods.push(leader);
    w.pods
        .push(member("ga-1", node_name, "ga", false).label("app", "llm"));
}

#[test]
fn a_group_down_with_its_failed_node_does_not_hold_the_gate_and_is_named() {
    // ga is back on a spare; gb's node b1 failed meanwhile: the node's failure, not the domain's
    let mut w = World::new();
    one_workload(&mut w);
    let o = workload_options();
    let s = drain_domain_a(&mut w, &o);
    ga_recreated_on(&mut w, "s1", true);
    fail_node(&mut w, "b1");
    w.set_healthy(1, 1);
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].health.healthy_since.is_some(), "{}", s.waiting);
    assert!(
        s.waiting
            .contains("not waited for: group gb of ns/app=llm is down with its node b1 not Ready"),
        "{}",
        s.waiting
    );
    w.advance(30);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::Done, "{}", s.waiting);
}

#[test]
fn an_evicted_group_whose_new_node_fails_before_it_is_ready_does_not_hold_the_gate() {
    // ga's replacement lands on b1, which fails before ga is Ready (a budget that lets both go:
    // one under its floor would hold the gate, the budget check counts every group)
    let mut w = World::new();
    one_workload(&mut w);
    w.pdbs[0] = pdb("ns/leaders", &[("role", "leader")])
        .min_available(int(0))
        .observed(2, 0);
    let o = workload_options();
    let s = drain_domain_a(&mut w, &o);
    ga_recreated_on(&mut w, "b1", true);
    fail_node(&mut w, "b1");
    w.set_healthy(0, 0);
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].health.healthy_since.is_some(), "{}", s.waiting);
    assert!(
        s.waiting
            .contains("group ga of ns/app=llm is down with its node b1"),
        "{}",
        s.waiting
    );
}

#[test]
fn a_group_down_on_a_ready_node_still_holds_the_gate_beside_one_down_with_its_node() {
    // gb down with its failed node is excused; ga, not back and on no failed node, is not
    let mut w = World::new();
    one_workload(&mut w);
    let o = workload_options();
    let s = drain_domain_a(&mut w, &o);
    ga_recreated_on(&mut w, "s1", false);
    fail_node(&mut w, "b1");
    w.set_healthy(1, 1);
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].health.healthy_since.is_none(), "{}", s.waiting);
    assert!(s.waiting.contains("0 of its 2"), "{}", s.waiting);
}

#[test]
fn manual_mode_waits_for_a_resume_after_each_domain() {
    let mut w = World::new();
    let o = Options {
        manual: true,
        health_check_stable: Some(SignedDuration::ZERO),
        ..World::options()
    };
    let s = drain_domain_a(&mut w, &o);
    ga_recovers(&mut w);
    let (s, a) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::AwaitingResume);
    assert!(cordons(&a).is_empty());
    assert!(s.waiting.contains("manual"), "{}", s.waiting);
    w.resumes = 1;
    let (s, a) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::Done);
    assert_eq!(cordons(&a), ["b1"]);
}

#[test]
fn two_unavailable_domains_start_together() {
    let mut w = World::new();
    let o = Options {
        max_unavailable_domains: 2,
        ..World::options()
    };
    let s = w.start(&o);
    let (_, a) = w.step(&s, &o);
    assert_eq!(cordons(&a), ["a1", "a2", "b1"]);
}

#[test]
fn a_dry_run_sends_dry_run_evictions_of_both_phases_and_touches_no_node() {
    let mut w = World::new();
    let o = Options {
        dry_run: true,
        ..World::options()
    };
    let mut s = w.start(&o);
    let mut sent = vec![];
    for _ in 0..4 {
        let (next, a) = w.step(&s, &o);
        assert!(cordons(&a).is_empty());
        assert!(
            a.iter()
                .all(|a| !matches!(a, Action::Evict { dry_run: false, .. }))
        );
        sent.extend(evictions(&a));
        w.apply(&a, |_| EvictionResult::Evicted);
        // a dry run changes nothing on the server
        for p in &mut w.pods {
            p.metadata.deletion_timestamp = None;
        }
        s = next;
    }
    assert_eq!(sent, ["ga-0", "ga-1", "web", "gb-0", "gb-1"]);
    assert_eq!(s.phase, Phase::Completed);
}

#[test]
fn the_state_round_trips_through_json() {
    let mut w = World::new();
    let o = World::options();
    let s = drain_domain_a(&mut w, &o);
    let text = serde_json::to_string(&s).unwrap();
    let back: State = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
    assert!(text.contains("\"phase\":\"running\""), "{text}");
}

// ---------------------------------------------------------------------------------------------
// property: the engine's invariants over random worlds and random API answers

#[derive(Clone, Debug)]
struct Script {
    /// Pods per domain: (leader?, node index within the domain).
    pods: Vec<Vec<bool>>,
    /// Per step: the answer to evictions (0 accept, 1 429, 2 500), whether terminating pods
    /// finish, whether the budget recovers.
    steps: Vec<(u8, bool, bool)>,
    max_unavailable: usize,
    concurrency: usize,
}

fn script() -> impl Strategy<Value = Script> {
    (
        prop::collection::vec(prop::collection::vec(any::<bool>(), 0..5), 1..5),
        prop::collection::vec((0u8..3, any::<bool>(), any::<bool>()), 1..60),
        1usize..3,
        1usize..4,
    )
        .prop_map(|(pods, steps, max_unavailable, concurrency)| Script {
            pods,
            steps,
            max_unavailable,
            concurrency,
        })
}

fn world_of(script: &Script) -> World {
    let mut w = World::new();
    w.nodes = (0..script.pods.len())
        .flat_map(|d| (0..2).map(move |i| node(&format!("n{d}-{i}"), &format!("d{d}")).ready()))
        .collect();
    // a node outside the plan's selection
    w.nodes
        .push(node("other", "d0").ready().label("keep", "yes"));
    w.pods = script
        .pods
        .iter()
        .enumerate()
        .flat_map(|(d, pods)| {
            pods.iter().enumerate().map(move |(i, &leader)| {
                member(
                    &format!("p{d}-{i}"),
                    &format!("n{d}-{}", i % 2),
                    &format!("g{d}-{i}"),
                    leader,
                )
            })
        })
        .chain([member("other-0", "other", "x", true)])
        .collect();
    w.pdbs = vec![
        pdb("ns/leaders", &[("role", "leader")])
            .max_unavailable(int(1))
            .observed(3, 2),
    ];
    w
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn no_phase_two_eviction_while_protected_pods_remain_domains_stay_bounded_and_only_planned_nodes_are_touched(script in script()) {
        let mut w = world_of(&script);
        let mut o = World::options();
        o.plan.node_selector = "keep!=yes".into();
        o.max_unavailable_domains = script.max_unavailable;
        o.eviction_concurrency = script.concurrency;
        o.health_check_stable = Some(secs(5));
        let mut s = w.start(&o);
        let planned: BTreeSet<String> = s.nodes().map(String::from).collect();
        prop_assert!(!planned.contains("other"));
        for &(answer, finish, recover) in &script.steps {
            let (next, actions) = w.step(&s, &o);
            // never more than max_unavailable domains between cordon and the end of the gate
            let unavailable = next.domains.iter().filter(|d| d.step.is_unavailable()).count();
            prop_assert!(unavailable <= script.max_unavailable, "{next:?}");
            for a in &actions {
                let node = match a {
                    Action::Cordon { node } | Action::Taint { node, .. }
                    | Action::LabelForUpgrade { node, .. } | Action::Uncordon { node, .. } => node.clone(),
                    Action::Evict { target, .. } => target.pod.node.clone(),
                    Action::Report { .. } | Action::ReportService { .. } | Action::MoveRayService { .. } => continue,
                };
                prop_assert!(planned.contains(&node), "{a:?} acts outside the plan");
                if let Action::Evict { target, .. } = a {
                    // the pod's node is cordoned (as observed) before it is evicted
                    let n = w.nodes.iter().find(|n| n.metadata.name.as_deref() == Some(node.as_str())).unwrap();
                    prop_assert!(is_cordoned(n), "{a:?} on an uncordoned node");
                    if target.pdb.is_none() {
                        // phase 2: no protected pod of the domain is left on its nodes
                        let d = next.domains.iter().find(|d| d.nodes.contains(&node)).unwrap();
                        let protected_left = w.pods.iter().any(|p| {
                            p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| d.nodes.contains(n))
                                && p.metadata.labels.as_ref().is_some_and(|l| l.contains_key("role"))
                        });
                        prop_assert!(!protected_left, "{a:?} while a protected pod remains");
                    }
                }
            }
            w.apply(&actions, |_| match answer {
                0 => EvictionResult::Evicted,
                1 => EvictionResult::TooManyRequests { message: "needs 2 has 2".into(), retry_after: None },
                _ => EvictionResult::Failed { code: 500, message: "boom".into() },
            });
            if finish {
                w.terminate();
            }
            if recover {
                w.set_healthy(3, 2);
            } else {
                w.set_healthy(2, 2);
            }
            w.advance(3);
            s = next;
        }
    }
}

/// The caller stored the state of the step that decided an eviction, sent it and died before
/// the answer reached the next step (a NodeRollout controller killed right after the call): the
/// next step, from that stored state and the live view, counts a terminating (or gone) pod as
/// evicted, so the health check waits for its group; a pod still running was not evicted and is a
/// target again.
#[test]
fn an_eviction_whose_answer_never_came_is_settled_from_the_live_view() {
    let mut w = World::new();
    let o = World::options();
    let s = w.start(&o);
    let (s, actions) = w.step(&s, &o);
    w.apply(&actions, evicted);
    let (stored, actions) = w.step(&s, &o);
    assert_eq!(evictions(&actions), ["ga-0"]);
    let d = &stored.domains[0];
    assert_eq!(d.sending.len(), 1, "the decided eviction is in the state");
    assert_eq!(d.sending[0].group.as_deref(), Some("ga"));
    assert!(d.evicted.is_empty());
    // the state survives a restart: through JSON, as status.engine keeps it
    let stored: State = serde_json::from_str(&serde_json::to_string(&stored).unwrap()).unwrap();
    // sent and accepted, but the answer is lost with the caller
    w.apply(&actions, evicted);
    w.outcomes.clear();
    let (s, actions) = w.step(&stored, &o);
    assert!(evictions(&actions).is_empty(), "not evicted again");
    assert!(s.domains[0].sending.is_empty());
    assert_eq!(s.domains[0].evicted.len(), 1, "counted: {:?}", s.domains[0]);
    assert_eq!(s.domains[0].evicted[0].pdb.as_deref(), Some("ns/leaders"));
    // ... and its group is waited for once the domain is drained
    let mut s = s;
    for _ in 0..10 {
        w.terminate();
        let (next, actions) = w.step(&s, &o);
        w.apply(&actions, evicted);
        s = next;
        if s.domains[0].step == Step::HealthCheck {
            break;
        }
        w.advance(1);
    }
    w.set_healthy(1, 1);
    let (s, a) = w.step(&s, &o);
    assert!(cordons(&a).is_empty(), "domain b waits");
    assert!(
        s.waiting.contains("group ga is not Ready again"),
        "{}",
        s.waiting
    );
    // the same stored state, but the eviction never reached the server: the leader is a
    // target again
    let mut w = World::new();
    let (_, actions) = w.step(&w.start(&o), &o);
    w.apply(&actions, evicted);
    let (s, actions) = w.step(&stored, &o);
    assert!(s.domains[0].evicted.is_empty());
    assert_eq!(evictions(&actions), ["ga-0"], "evicted again, once");
    assert_eq!(s.domains[0].sending.len(), 1);
}

/// kubectl v0.36.3 `daemonSetFilter`: a pod whose DaemonSet is not found stops the drain without
/// `--force` ("daemonsets.apps \"gone\" not found") and is evicted with it; the executor passes
/// the DaemonSets it watches, so the engine re-plans with them. Not observed (`None`): taken to
/// exist, skipped under `--ignore-daemonsets`.
#[test]
fn a_pod_whose_daemon_set_is_gone_blocks_without_force_and_is_evicted_with_it() {
    let orphan = || {
        pod("kube-system/agent-a1", "a1")
            .owned_by("apps/v1", "DaemonSet", "gone")
            .ready()
    };
    let options = |force: bool| {
        let mut o = World::options();
        o.plan.rules.ignore_daemonsets = true;
        o.plan.rules.force = force;
        o
    };
    let drain = |w: &mut World, o: &Options| {
        let mut s = w.start(o);
        let mut sent = Vec::new();
        for _ in 0..6 {
            let (next, actions) = w.step(&s, o);
            sent.extend(evictions(&actions));
            w.apply(&actions, evicted);
            w.terminate();
            s = next;
            w.advance(1);
        }
        (s, sent)
    };
    let mut w = World::new();
    w.pods.push(orphan());
    w.daemon_sets = Some(vec![]);
    let (s, sent) = drain(&mut w, &options(false));
    assert!(
        s.domains[0].message.contains(
            "blocked (nothing evicted): cannot delete daemonsets.apps \"gone\" not found (use \
             --force to override): kube-system/agent-a1"
        ),
        "{}",
        s.domains[0].message
    );
    assert!(sent.is_empty(), "{sent:?}");
    assert!(
        !is_cordoned(w.node_mut("a1")) && !is_cordoned(w.node_mut("a2")),
        "a domain blocked from the start is not cordoned"
    );

    let mut w = World::new();
    w.pods.push(orphan());
    w.daemon_sets = Some(vec![]);
    let (_, sent) = drain(&mut w, &options(true));
    assert!(sent.contains(&"agent-a1".to_string()), "{sent:?}");

    // not observed: the DaemonSet is taken to exist, so its pod is skipped
    let mut w = World::new();
    w.pods.push(orphan());
    let (s, sent) = drain(&mut w, &options(true));
    assert!(!sent.contains(&"agent-a1".to_string()), "{sent:?}");
    assert_ne!(
        s.domains[0].step,
        Step::Draining,
        "{}",
        s.domains[0].message
    );
}

// ---------------------------------------------------------------------------------------------
// the stored state's bound: a restart from the compacted state decides as the full one

/// What a restart reads back: the compacted state through JSON (`status.engine`).
fn stored(s: &State, keep: usize) -> State {
    serde_json::from_str(&serde_json::to_string(&s.compacted(keep)).unwrap()).unwrap()
}

#[test]
fn a_compacted_health_check_waits_for_the_same_groups_and_budgets() {
    // by workload: the baseline's groups count as evicted once their evictions are folded
    let mut w = World::new();
    one_workload(&mut w);
    let o = workload_options();
    let full = drain_domain_a(&mut w, &o);
    let restart = stored(&full, 0);
    assert!(restart.domains[0].evicted.is_empty());
    assert_eq!(restart.domains[0].evicted_counts(), (1, 2));
    assert_eq!(full.domains[0].evicted_counts(), (1, 2));
    assert_eq!(
        restart.domains[0].folded.budgets,
        BTreeSet::from(["ns/leaders".to_string()])
    );
    assert!(restart.domains[0].workloads["ns/app=llm"].folded);
    w.set_healthy(1, 1);
    let (a, _) = w.step(&full, &o);
    let (b, _) = w.step(&restart, &o);
    assert!(
        b.waiting
            .contains("1 of its 2 Ready groups back (evicted: ga)"),
        "{}",
        b.waiting
    );
    assert_eq!(a.waiting, b.waiting);
    // by name: a folded group is still waited for, and a folded budget still checked
    let mut w = World::new();
    let o = World::options();
    let full = drain_domain_a(&mut w, &o);
    let restart = stored(&full, 0);
    assert_eq!(
        restart.domains[0].folded.groups,
        BTreeSet::from(["ns/ga".to_string()])
    );
    w.set_healthy(1, 1);
    let (a, _) = w.step(&full, &o);
    let (b, _) = w.step(&restart, &o);
    assert_eq!(a.waiting, b.waiting);
    assert!(
        b.waiting.contains("group ga is not Ready again"),
        "{}",
        b.waiting
    );
    // recovered: both pass the gate and the domain is done after the stable period, nothing
    // evicted again
    ga_recovers(&mut w);
    let (a, acts_a) = w.step(&a, &o);
    let (b, acts_b) = w.step(&b, &o);
    assert_eq!(acts_a, acts_b);
    w.advance(30);
    let (a, acts_a) = w.step(&a, &o);
    let (b, acts_b) = w.step(&b, &o);
    assert_eq!(acts_a, acts_b);
    assert!(
        evictions(&acts_b).iter().all(|p| !p.starts_with("ga")),
        "{acts_b:?}"
    );
    assert_eq!(
        (a.domains[0].step, b.domains[0].step),
        (Step::Done, Step::Done)
    );
    assert_eq!(a.compacted(0), b.compacted(0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Restarting from the stored (compacted) state at every step decides exactly what the
    /// full state, restarted as often, decides: the same actions (no eviction sent again, none
    /// missed), the same health check, the same counts. (Both lose the in-memory windows at each
    /// restart, by design; compaction loses nothing more.)
    #[test]
    fn a_restart_from_the_compacted_state_at_any_step_decides_as_the_full_state(
        script in script(),
        keep in 0usize..3,
        workloads in any::<bool>(),
    ) {
        let mut w = world_of(&script);
        if workloads {
            one_workload(&mut w);
        }
        let mut o = if workloads { workload_options() } else { World::options() };
        o.plan.node_selector = "keep!=yes".into();
        o.max_unavailable_domains = script.max_unavailable;
        o.eviction_concurrency = script.concurrency;
        o.health_check_stable = Some(secs(5));
        let mut full = w.start(&o);
        let mut restarted = full.clone();
        for &(answer, finish, recover) in &script.steps {
            let obs = Observation {
                nodes: &w.nodes,
                pods: &w.pods,
                pdbs: &w.pdbs,
                daemon_sets: None,
                outcomes: &w.outcomes,
                resumes: w.resumes,
                abort: false,
                elsewhere: &w.elsewhere,
                services: &w.services,
            };
            let uncompacted: State =
                serde_json::from_str(&serde_json::to_string(&full).unwrap()).unwrap();
            let (next_full, actions) = decide(&uncompacted, &obs, w.now, &o);
            let (next_restarted, again) = decide(&stored(&restarted, keep), &obs, w.now, &o);
            prop_assert_eq!(&again, &actions);
            prop_assert_eq!(next_restarted.compacted(keep), next_full.compacted(keep));
            for (a, b) in next_full.domains.iter().zip(&next_restarted.domains) {
                prop_assert_eq!(a.evicted_counts(), b.evicted_counts());
            }
            w.outcomes.clear();
            w.apply(&actions, |_| match answer {
                0 => EvictionResult::Evicted,
                1 => EvictionResult::TooManyRequests { message: "needs 2 has 2".into(), retry_after: None },
                _ => EvictionResult::Failed { code: 500, message: "boom".into() },
            });
            if finish {
                w.terminate();
            }
            if recover {
                w.set_healthy(3, 2);
            } else {
                w.set_healthy(2, 2);
            }
            w.advance(3);
            full = next_full;
            restarted = next_restarted;
        }
    }
}

mod budget_sync;
mod consent;
mod moves;
mod ownership;
mod peers;
mod returning;

#[test]
fn an_abort_on_request_gives_the_drained_nodes_back_and_fails_the_rollout_once() {
    let mut w = World::new();
    let o = World::options();
    let s = w.start(&o);
    let (s, actions) = w.step(&s, &o);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Cordon { node } if node == "a1"))
    );
    w.apply(&actions, |_| EvictionResult::Evicted);
    w.abort = true;
    let (s, actions) = w.step(&s, &o);
    assert_eq!(
        s.phase,
        Phase::Failed {
            reason: "aborted on request".into()
        }
    );
    assert_eq!(uncordoned(&actions), ["a1", "a2"]);
    assert!(!actions.iter().any(|a| matches!(a, Action::Evict { .. })));
    assert!(actions.iter().any(|a| matches!(a,
        Action::Report { reason: "RolloutAborted", message, .. } if message.contains("given back"))));
    assert_eq!(s.domains[0].step, Step::Aborted);
    // final: the next step does nothing more
    let (_, again) = w.step(&s, &o);
    assert!(again.is_empty(), "{again:?}");
}

/// The nodes `actions` give back, in order.
fn uncordoned(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Uncordon { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect()
}
