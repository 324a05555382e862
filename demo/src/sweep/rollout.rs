//! The sweep's rollout story: a node-generation rollout over LeaderWorkerSet groups behind a
//! budget, with the adversities a real cluster brings drawn per seed ([`Adversities`]).
//!
//! Every draw keeps the promise achievable: the budget's floor leaves room for one domain's
//! groups plus what the drawn failures take down on their own (a budget cannot stop an
//! involuntary disruption; a drain that keeps the floor while a worker fails is one that
//! counted that worker before it evicted).

use serde_json::{Value, json};

use super::{Draw, TARGET, checked, secs, shape, usize_of};
use crate::scenario::{
    Action, Checked, ControllerSpec, InjectFault, PatchStep, SpareNodes, StartRollout, StrategyName,
};

/// The most LWS groups a rollout story draws (the sim's work grows with them).
const MAX_GROUPS: u64 = 8;
/// A rollout story's inference start-up range (seconds from container start to Ready).
const START_UP_SECONDS: (u64, u64) = (20, 180);
/// How often a rollout story's floor is at the tight end of what the draws allow.
const TIGHT_FLOOR_PERCENT: u64 = 60;
/// How often a rollout story's spare nodes join just before the rollout (else at the start).
const SPARE_JOIN_LATE_PERCENT: u64 = 80;
/// Of the rollouts, the share that leaves `taintOutdated` unset (raygate's default).
const DEFAULT_TAINT_PERCENT: u64 = 50;
/// Of the rollouts, the share run as a NodeRollout by raygate's controller (else the drain
/// engine in process, `raygate drain run --local`).
const NODE_ROLLOUT_PERCENT: u64 = 50;
/// The share whose leaders' readiness probes lag (period 10 s × 3 failures: 30 s).
const LAGGING_PROBE_PERCENT: u64 = 50;
/// The share where workers fail their readiness probe for a while around the rollout.
const WORKER_FAILURE_PERCENT: u64 = 30;
/// Of the rollouts with room for it in the floor, the share where a node goes down for a while.
const NODE_FAILURE_PERCENT: u64 = 50;
/// The share where evictions are throttled (priority and fairness' 429 with `Retry-After`).
const THROTTLE_PERCENT: u64 = 25;
/// Of the NodeRollouts, the share whose controller is killed and restarted during the rollout.
const RESTART_PERCENT: u64 = 40;
/// The share where a node's upgrade-domain label is changed mid-rollout, then restored.
const LABEL_CHANGE_PERCENT: u64 = 10;
/// The share whose workers only prefer their leader's domain (soft affinity: a full domain
/// splits a group).
const SOFT_AFFINITY_PERCENT: u64 = 15;
/// The share with a node agent that tolerates every taint (a ReplicaSet pinned to a rollout
/// node: its replacement comes back onto the cordoned node).
const TOLERATE_ALL_PERCENT: u64 = 15;
/// The share with a RayService serving beside the groups (not opted into a queue): raygate
/// moves it off each domain before draining it; the baselines take its pods like any other.
const RAY_SERVICE_PERCENT: u64 = 40;
/// How long (from the rollout's start) the timed adversities are spread over.
const ROLLOUT_SPAN: u64 = 900;

/// What a rollout seed drew besides its shape, for its name (readable in a failure report).
#[derive(Default)]
struct Adversities {
    notes: Vec<String>,
    steps: Vec<(std::time::Duration, Action)>,
}

impl Adversities {
    fn at(&mut self, at: u64, action: Action) {
        self.steps.push((secs(at), action));
    }

    /// The notes as the end of a story's name (`; a, b`), or nothing.
    fn story(&self) -> String {
        if self.notes.is_empty() {
            String::new()
        } else {
            format!("; {}", self.notes.join(", "))
        }
    }
}

/// The pod template of a leader (delegated readiness) or worker (in its leader's domain, unless
/// the affinity is soft).
fn template(start_up: u64, leader: bool, probe: (u64, u64), soft: bool) -> Value {
    let group_key = "leaderworkerset.sigs.k8s.io/group-key";
    let (period, failures) = probe;
    let labels = json!({"role": if leader { "leader" } else { "worker" }});
    let mut t = json!({"metadata": {"labels": labels}, "spec": {"containers": [{
        "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
        "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000},
            "initialDelaySeconds": start_up, "periodSeconds": period,
            "failureThreshold": failures}}]}});
    if leader {
        t["metadata"]["annotations"] = json!({"sim.raygate.io/readiness-group": group_key});
        return t;
    }
    let term = json!({"labelSelector": {"matchExpressions": [{
            "key": "leaderworkerset.sigs.k8s.io/worker-index", "operator": "In", "values": ["0"]}]},
        "matchLabelKeys": [group_key],
        "topologyKey": "topology.raygate.io/upgrade-domain"});
    t["spec"]["affinity"] = if soft {
        json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}})
    } else {
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    };
    t
}

/// A node-generation rollout over LeaderWorkerSet groups behind a budget.
pub(super) fn rollout(seed: u64, d: &mut Draw) -> Checked {
    let domains = d.int(2, 3);
    let nodes = d.int(1, 2);
    // one node holds 2 groups (4 GPUs, 2 per group), a domain `per_domain`. More groups than one
    // domain holds, so a floor above 0 still lets raygate drain a whole domain.
    let per_domain = 2 * nodes;
    let groups = d.int(per_domain + 1, (domains * per_domain).min(MAX_GROUPS));
    // An inference server's start-up (vLLM loading its weights): its readiness probe's
    // `initialDelaySeconds`, which the sim's kubelet honours, on the leader and the worker.
    let start_up = d.int(START_UP_SECONDS.0, START_UP_SECONDS.1);
    let rollout_at = start_up + 10 + d.int(90, 180);
    let node_rollout = d.chance(NODE_ROLLOUT_PERCENT);
    let mut adv = Adversities::default();
    let probe = if d.chance(LAGGING_PROBE_PERCENT) {
        adv.notes.push("lagging leader probes".into());
        (10, 3)
    } else {
        (1, 1)
    };
    let soft = d.chance(SOFT_AFFINITY_PERCENT);
    if soft {
        adv.notes.push("soft affinity".into());
    }
    // what the drawn failures take down on their own, which the floor leaves room for (a node
    // failure only where a group's pods share a node)
    let slack = groups - per_domain - 1;
    let packed = nodes == 1 && !soft;
    let lost = failures(d, &mut adv, groups, (domains, packed), slack, rollout_at);
    let most = groups - per_domain - lost;
    // floors as admins set them: most often at the tight end, else anywhere in the range
    let floor = if d.chance(TIGHT_FLOOR_PERCENT) {
        most
    } else {
        d.int(1, most)
    };
    interference(d, &mut adv, node_rollout, domains, nodes, rollout_at);
    // Room outside the rollout: spare nodes at the target generation that hold every group.
    let spare = groups.div_ceil(2);
    let mut objects = vec![
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "llm", "namespace": "serving"},
            "spec": {"replicas": groups, "leaderWorkerTemplate": {"size": 2,
                "leaderTemplate": template(start_up, true, probe, false),
                "workerTemplate": template(start_up, false, (1, 1), soft)}}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "leaders", "namespace": "serving"},
            "spec": {"minAvailable": floor, "selector": {"matchLabels": {"role": "leader"}}}}),
    ];
    objects.extend(agent(d, &mut adv, domains));
    // Mostly the spare nodes join 60 s before the rollout (capacity added for the upgrade), so
    // the groups fill the rollout's domains as fleets run; else they are there from the start.
    let join_at = d
        .chance(SPARE_JOIN_LATE_PERCENT)
        .then(|| secs(rollout_at - 60));
    start_rollout(d, &mut adv, node_rollout, rollout_at);
    objects.extend(ray_service(d, &mut adv));
    let joining = join_at.map_or_else(String::new, |at| format!(" joining at {} s", at.as_secs()));
    checked(
        format!(
            "sweep seed {seed}: rollout, {domains} UDs x {nodes} nodes + {spare} spare{joining}, {groups} groups, floor {floor}, start-up {start_up} s{}",
            adv.story()
        ),
        seed,
        with_spare(
            shape(domains, nodes, vec!["serving".into()]),
            spare,
            join_at,
        ),
        ControllerSpec {
            run: node_rollout,
            pod_gate: false,
        },
        objects,
        adv.steps,
        secs(3 * 3600),
    )
}

/// `shape` with `spare` nodes at the target generation outside the rollout, joining at `join_at`
/// (else from the start).
fn with_spare(
    shape: crate::scenario::ClusterShape,
    spare: u64,
    join_at: Option<std::time::Duration>,
) -> crate::scenario::ClusterShape {
    crate::scenario::ClusterShape {
        spare: Some(SpareNodes {
            nodes: usize_of(spare),
            domain: "spare".into(),
            generation: TARGET.into(),
            join_at,
        }),
        ..shape
    }
}

/// `RAY_SERVICE_PERCENT` of the time: a RayService serving from a head and one or two
/// workers (CPU only: the groups hold the GPUs), whose serving the invariants watch.
fn ray_service(d: &mut Draw, adv: &mut Adversities) -> Option<Value> {
    if !d.chance(RAY_SERVICE_PERCENT) {
        return None;
    }
    let workers = d.int(1, 2);
    adv.notes
        .push(format!("a RayService of {workers} worker(s)"));
    let container = |name: &str| {
        json!([{"name": name, "image": "rayproject/ray:2.51.0",
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}])
    };
    Some(json!({"apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": "chat", "namespace": "serving"},
        "spec": {"rayClusterDeletionDelaySeconds": 30, "serveConfigV2": "applications: []",
            "rayClusterConfig": {"rayVersion": "2.51.0",
                "headGroupSpec": {"rayStartParams": {},
                    "template": {"spec": {"containers": container("ray-head")}}},
                "workerGroupSpecs": [{"groupName": "cpu", "replicas": workers,
                    "minReplicas": workers, "maxReplicas": workers, "rayStartParams": {},
                    "template": {"spec": {"containers": container("ray-worker")}}}]}}}))
}

/// `TOLERATE_ALL_PERCENT` of the time: an agent (a ReplicaSet of one) pinned to one rollout
/// node and tolerating every taint, so the drain can only evict it once.
fn agent(d: &mut Draw, adv: &mut Adversities, domains: u64) -> Option<Value> {
    if !d.chance(TOLERATE_ALL_PERCENT) {
        return None;
    }
    let node = format!("ud{}-n0", d.int(0, domains - 1));
    adv.notes
        .push(format!("an agent tolerating every taint on {node}"));
    Some(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "agent", "namespace": "serving"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "agent",
                    "resources": {"requests": {"cpu": "100m"}}}]}}}}))
}

/// The rollout's start at `rollout_at`: raygate's own drain or a NodeRollout, with the outdated
/// nodes tainted unless the defaults are drawn.
fn start_rollout(d: &mut Draw, adv: &mut Adversities, node_rollout: bool, rollout_at: u64) {
    let taint_outdated = (!d.chance(DEFAULT_TAINT_PERCENT)).then_some(true);
    let strategy = if node_rollout {
        adv.notes.push("NodeRollout".into());
        StrategyName::NodeRollout
    } else {
        StrategyName::Raygate
    };
    adv.at(
        rollout_at,
        Action::StartRollout(StartRollout {
            strategy,
            target: TARGET.into(),
            k: None,
            group_label: None,
            taint_outdated,
            name: None,
            health_check_stable: None,
            ray_services: None,
        }),
    );
}

/// Involuntary failures timed around the rollout, at most `slack` groups' worth: workers that
/// fail their readiness probe for a while, or a node that goes down and comes back. Returns the
/// groups they can take down at once.
fn failures(
    d: &mut Draw,
    adv: &mut Adversities,
    groups: u64,
    (domains, packed): (u64, bool),
    slack: u64,
    rollout_at: u64,
) -> u64 {
    let from = rollout_at.saturating_sub(30);
    // A node holds 4 pods: with one node per domain a group's two pods share it (the worker
    // is bound to its leader's domain), so it takes 2 groups down; a spare node (one domain of
    // several nodes) may hold parts of 4.
    if packed && slack >= 2 && d.chance(NODE_FAILURE_PERCENT) {
        let node = format!("ud{}-n0", d.int(0, domains - 1));
        let at = d.int(from, rollout_at + ROLLOUT_SPAN);
        let back = at + d.int(60, 600);
        adv.notes.push(format!("{node} down {at}-{back} s"));
        adv.at(at, Action::FailNode(node.clone()));
        adv.at(back, Action::RestoreNode(node));
        return 2;
    }
    if slack == 0 || !d.chance(WORKER_FAILURE_PERCENT) {
        return 0;
    }
    let workers = d.int(1, slack.min(2));
    for _ in 0..workers {
        let group = d.int(0, groups - 1);
        let at = d.int(from, rollout_at + ROLLOUT_SPAN);
        let back = at + d.int(20, 300);
        adv.notes
            .push(format!("worker of group {group} not Ready {at}-{back} s"));
        let fail = |value: &str| {
            Action::Patch(PatchStep {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: Some("serving".into()),
                name: format!("llm-{group}-1"),
                patch: json!({"metadata": {"annotations": {"sim.raygate.io/fail-readiness": value}}}),
                // a worker being recreated has no pod to fail
                if_exists: true,
            })
        };
        adv.at(at, fail("true"));
        adv.at(back, fail("false"));
    }
    workers
}

/// What interferes with the drain itself: throttled evictions, the controller killed and
/// restarted, a node's upgrade-domain label changed and restored.
fn interference(
    d: &mut Draw,
    adv: &mut Adversities,
    node_rollout: bool,
    domains: u64,
    nodes: u64,
    rollout_at: u64,
) {
    if d.chance(THROTTLE_PERCENT) {
        let rate = d.pick(&[0.1, 0.3, 0.5]);
        adv.notes.push(format!("{rate} of evictions throttled"));
        for agent in ["raygate", "kubectl"] {
            adv.at(
                0,
                Action::InjectFault(InjectFault {
                    verbs: vec!["create".into()],
                    resource: Some("pods".into()),
                    user_agent: Some(agent.into()),
                    code: 429,
                    rate,
                }),
            );
        }
    }
    if node_rollout && d.chance(RESTART_PERCENT) {
        for _ in 0..d.int(1, 3) {
            let at = d.int(rollout_at + 1, rollout_at + ROLLOUT_SPAN);
            let back = at + d.int(1, 60);
            adv.notes.push(format!("controller down {at}-{back} s"));
            adv.at(at, Action::KillController);
            adv.at(back, Action::RestartController);
        }
    }
    if d.chance(LABEL_CHANGE_PERCENT) {
        let node = format!("ud{}-n{}", d.int(0, domains - 1), d.int(0, nodes - 1));
        let at = d.int(rollout_at + 1, rollout_at + ROLLOUT_SPAN);
        let back = at + d.int(30, 300);
        adv.notes
            .push(format!("{node}'s domain label changed {at}-{back} s"));
        let label = |value: Value| {
            Action::Patch(PatchStep {
                api_version: "v1".into(),
                kind: "Node".into(),
                namespace: None,
                name: node.clone(),
                patch: json!({"metadata": {"labels": {"topology.raygate.io/upgrade-domain": value}}}),
                if_exists: false,
            })
        };
        let ud = node
            .split('-')
            .next()
            .unwrap_or_default()
            .replace("ud", "ud-");
        adv.at(at, label(json!("ud-moved")));
        adv.at(back, label(json!(ud)));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Story, generate, story, variants};
    use super::*;

    /// The rollout stories among the first `n` seeds.
    fn rollouts(n: u64) -> Vec<(u64, Checked)> {
        (0..n)
            .map(|seed| (seed, generate(seed)))
            .filter(|(_, c)| story(c) == Story::Rollout)
            .collect()
    }

    fn has(c: &Checked, f: impl Fn(&Action) -> bool) -> bool {
        c.steps.iter().any(|(_, a, _)| f(a))
    }

    /// What the story's drawn failures can take down at once, read from its timeline.
    fn lost(c: &Checked) -> i64 {
        if has(c, |a| matches!(a, Action::FailNode(_))) {
            return 2;
        }
        let failing = c.steps.iter().filter(|(_, a, _)| {
            matches!(a, Action::Patch(p) if p.patch.pointer("/metadata/annotations/sim.raygate.io~1fail-readiness") == Some(&json!("true")))
        });
        i64::try_from(failing.count()).unwrap_or(i64::MAX)
    }

    fn numbers(c: &Checked) -> (i64, i64, i64) {
        let per_domain = 2 * c.scenario.cluster.nodes_per_domain as i64;
        let groups = c.scenario.objects[0]["spec"]["replicas"].as_i64().unwrap();
        let floor = c.scenario.objects[1]["spec"]["minAvailable"]
            .as_i64()
            .unwrap();
        (per_domain, groups, floor)
    }

    #[test]
    fn every_rollout_has_room_outside_it_and_a_floor_above_0_it_can_honour_through_its_failures() {
        let all = rollouts(500);
        assert!(all.len() > 150, "{} rollouts in 500 seeds", all.len());
        for (seed, c) in &all {
            let cluster = &c.scenario.cluster;
            let (per_domain, groups, floor) = numbers(c);
            assert!(cluster.upgrade_domains >= 2, "seed {seed}");
            assert!(floor >= 1, "seed {seed}: the floor is tested");
            assert!(
                groups - floor >= per_domain + lost(c),
                "seed {seed}: a whole domain's groups down, and what the failures take, leave the floor up"
            );
            let spare = cluster.spare.as_ref().expect("spare nodes");
            assert!(
                2 * spare.nodes as i64 >= groups,
                "seed {seed}: the spare nodes hold every group"
            );
            let target = c.steps.iter().find_map(|(_, a, _)| match a {
                Action::StartRollout(r) => Some(r.target.clone()),
                _ => None,
            });
            assert_eq!(
                target.as_deref(),
                Some(spare.generation.as_str()),
                "seed {seed}: the spare nodes are outside the rollout"
            );
            assert_ne!(spare.domain, "ud-0", "seed {seed}");
        }
    }

    /// The floor invariants must be able to bite a naive drain. Rollouts draw slow start-ups
    /// (both pods of a group wait the same `initialDelaySeconds`, across 20–180 s), floors mostly
    /// at the tight end, spare nodes mostly joining just before the rollout (after the groups
    /// were placed), and the rollout only once the groups are Ready.
    #[test]
    fn rollouts_draw_slow_start_ups_tight_floors_and_spare_nodes_joining_before_the_rollout() {
        let all = rollouts(500);
        let (mut tight, mut late) = (0, 0);
        let mut start_ups = std::collections::BTreeSet::new();
        for (seed, c) in &all {
            let lws = &c.scenario.objects[0]["spec"];
            let delay = |role: &str| {
                lws["leaderWorkerTemplate"][role]["spec"]["containers"][0]["readinessProbe"]
                    ["initialDelaySeconds"]
                    .as_u64()
                    .unwrap()
            };
            let start_up = delay("leaderTemplate");
            assert_eq!(start_up, delay("workerTemplate"), "seed {seed}");
            assert!((20..=180).contains(&start_up), "seed {seed}: {start_up}");
            start_ups.insert(start_up);
            let (per_domain, groups, floor) = numbers(c);
            tight += usize::from(floor == groups - per_domain - lost(c));
            let rollout_at = c
                .steps
                .iter()
                .find_map(|(at, a, _)| matches!(a, Action::StartRollout(_)).then_some(*at))
                .unwrap();
            // the kubelet's 5 s start, the probe's delay, a period for the worker, three for a
            // lagging leader: the groups are Ready before the rollout
            assert!(
                rollout_at > secs(5 + start_up + 30),
                "seed {seed}: rollout at {rollout_at:?}, start-up {start_up} s"
            );
            if let Some(join) = c.scenario.cluster.spare.as_ref().unwrap().join_at {
                late += 1;
                assert!(
                    join >= secs(30) && join < rollout_at,
                    "seed {seed}: the spare nodes join after the groups were placed and before the rollout: {join:?}"
                );
            }
        }
        let n = all.len();
        assert!(
            start_ups.first() < Some(&60) && start_ups.last() > Some(&150),
            "start-ups across the range: {start_ups:?}"
        );
        assert!(
            tight * 2 > n && tight < n,
            "{tight} tight floors of {n}: mostly, not always"
        );
        assert!(
            late * 3 > n * 2 && late < n,
            "{late} of {n} with the spare nodes joining before the rollout: mostly, not always"
        );
    }

    /// Issue #29 item 9: the adversities a real cluster brings, each drawn in some rollouts and
    /// not in others.
    #[test]
    fn rollouts_draw_every_adversity() {
        let all = rollouts(500);
        let count = |f: &dyn Fn(&Checked) -> bool| all.iter().filter(|(_, c)| f(c)).count();
        let leader_period = |c: &Checked| {
            c.scenario.objects[0]
                .pointer("/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/readinessProbe/periodSeconds")
                .and_then(Value::as_u64)
        };
        let drawn = [
            (
                "lagging leader probes",
                count(&|c| leader_period(c) == Some(10)),
            ),
            (
                "worker readiness failures",
                count(&|c| has(c, |a| matches!(a, Action::Patch(p) if p.kind == "Pod"))),
            ),
            (
                "node failures",
                count(&|c| has(c, |a| matches!(a, Action::FailNode(_)))),
            ),
            (
                "throttled evictions",
                count(&|c| has(c, |a| matches!(a, Action::InjectFault(f) if f.code == 429))),
            ),
            (
                "controller restarts",
                count(&|c| has(c, |a| matches!(a, Action::KillController))),
            ),
            (
                "soft affinity",
                count(&|c| {
                    c.scenario.objects[0]
                    .pointer("/spec/leaderWorkerTemplate/workerTemplate/spec/affinity/podAffinity/preferredDuringSchedulingIgnoredDuringExecution")
                    .is_some()
                }),
            ),
            (
                "label changes",
                count(&|c| has(c, |a| matches!(a, Action::Patch(p) if p.kind == "Node"))),
            ),
            (
                "NodeRollouts",
                count(&|c| {
                    has(
                        c,
                        |a| matches!(a, Action::StartRollout(r) if r.strategy == StrategyName::NodeRollout),
                    )
                }),
            ),
            (
                "default taint",
                count(&|c| {
                    has(
                        c,
                        |a| matches!(a, Action::StartRollout(r) if r.taint_outdated.is_none()),
                    )
                }),
            ),
        ];
        for (what, n) in drawn {
            assert!(
                n >= 10 && n < all.len(),
                "{what}: {n} of {} rollouts",
                all.len()
            );
        }
        // the controller is killed only where it runs the rollout
        for (seed, c) in &all {
            if has(c, |a| matches!(a, Action::KillController)) {
                assert!(c.scenario.controller.run, "seed {seed}");
            }
        }
    }

    #[test]
    fn the_baselines_drain_without_raygate_s_controller_and_its_restarts() {
        let (_, c) = rollouts(500)
            .into_iter()
            .find(|(_, c)| has(c, |a| matches!(a, Action::KillController)))
            .expect("a rollout with controller restarts");
        for (name, v) in variants(&c).into_iter().skip(1) {
            assert!(!v.scenario.controller.run, "{name}");
            assert!(
                !has(&v, |a| matches!(
                    a,
                    Action::KillController | Action::RestartController
                )),
                "{name}"
            );
            // the same failures and throttling as raygate's run
            let faults = |c: &Checked| {
                c.steps
                    .iter()
                    .filter(|(_, a, _)| {
                        matches!(
                            a,
                            Action::InjectFault(_) | Action::FailNode(_) | Action::Patch(_)
                        )
                    })
                    .count()
            };
            assert_eq!(faults(&v), faults(&c), "{name}");
        }
    }
}
