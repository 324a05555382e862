use std::sync::Arc;

use super::*;
use raygate_testing::core::{self, NodeExt, PodExt};

const NO_NODES: &[Node] = &[];
const NO_PODS: &[Pod] = &[];

fn now() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap()
}

/// 2025-01-01, when the nodes' and pods' conditions last changed.
fn since() -> Timestamp {
    "2025-01-01T00:00:00Z".parse().unwrap()
}

/// Node `name` of generation 2 in zone `ud-1`, cordoned, tainted `gpu:NoSchedule`, 8 cpu, kubelet
/// v1.35.0, Ready (`KubeletReady`) since [`since`].
fn gpu_node(name: &str) -> Node {
    let mut n = core::node(name, "")
        .label("topology.kubernetes.io/zone", "ud-1")
        .label("kubernetes.io/hostname", name)
        .label(GENERATION, "2")
        .cordoned()
        .tainted(core::taint("gpu", "NoSchedule"))
        .tainted(core::taint(
            "node.kubernetes.io/unschedulable",
            "NoSchedule",
        ))
        .capacity(&[("cpu", "8")])
        .kubelet("v1.35.0");
    n.status.as_mut().unwrap().conditions = Some(vec![NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some("KubeletReady".into()),
        last_transition_time: Some(Time(since())),
        ..NodeCondition::default()
    }]);
    n
}

/// Running pod `p` (no namespace, no owner) on `node`.
fn running_on(node: &str) -> Pod {
    core::pod("p", node).unowned()
}

#[test]
fn ready_transitions_move_last_transition_time_only_on_a_status_change() {
    let mut status = gpu_node("n").status.unwrap();
    assert!(!set_ready(&mut status, &Readiness::Ready, now()));
    let c = &status.conditions.as_ref().unwrap()[0];
    assert_eq!(
        c.last_transition_time.as_ref().unwrap().0.to_string(),
        "2025-01-01T00:00:00Z"
    );
    assert_eq!(c.last_heartbeat_time.as_ref().unwrap().0, now());
    assert!(set_ready(&mut status, &Readiness::Unknown, now()));
    let c = &status.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("Unknown", Some("NodeStatusUnknown"))
    );
    assert_eq!(c.last_transition_time.as_ref().unwrap().0, now());
}

#[test]
fn a_reboot_waits_for_the_drain_but_not_for_daemonset_mirror_or_finished_pods() {
    let n = gpu_node("n").annotation(LIFECYCLE, "reboot");
    let cfg = Config::default();
    let busy = [running_on("n")];
    assert_eq!(step(&n, NO_NODES, &busy, &cfg, now()), Step::Wait(None));
    let fine = [
        running_on("n").owned_by("apps/v1", "DaemonSet", "d"),
        running_on("n").annotation("kubernetes.io/config.mirror", "x"),
        running_on("n").phase("Succeeded"),
        running_on("other"),
        // tolerates every taint: a cordon cannot keep its replacement off the node
        running_on("n").toleration("", "", None),
    ];
    assert_eq!(
        step(&n, NO_NODES, &fine, &cfg, now()),
        Step::GoDown {
            until: now() + SignedDuration::from_secs(120)
        }
    );
}

#[test]
fn a_rebooting_node_comes_up_at_the_next_generation_when_its_time_is_over() {
    let t = now() + SignedDuration::from_secs(120);
    let n = gpu_node("n")
        .annotation(PHASE, "rebooting")
        .annotation(UNTIL, &t.to_string());
    assert_eq!(
        step(&n, NO_NODES, NO_PODS, &Config::default(), now()),
        Step::Wait(Some(t))
    );
    assert_eq!(
        step(&n, NO_NODES, NO_PODS, &Config::default(), t),
        Step::ComeUp { generation: 3 }
    );
}

#[test]
fn a_replacement_copies_labels_and_capacity_at_the_next_generation_uncordoned() {
    let old = gpu_node("gpu-7-g2").annotation(LIFECYCLE, "replace");
    let Step::Join { node: new, until } = step(&old, NO_NODES, NO_PODS, &Config::default(), now())
    else {
        panic!()
    };
    assert_eq!(new.name_any(), "gpu-7-g3");
    assert_eq!(until, now() + SignedDuration::from_secs(60));
    let labels = new.labels();
    assert_eq!(labels.get(GENERATION).map(String::as_str), Some("3"));
    assert_eq!(
        labels.get("kubernetes.io/hostname").map(String::as_str),
        Some("gpu-7-g3")
    );
    assert_eq!(
        labels
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("ud-1")
    );
    let spec = new.spec.as_ref().unwrap();
    assert_eq!(spec.unschedulable, None);
    assert_eq!(
        spec.taints
            .as_ref()
            .unwrap()
            .iter()
            .map(|t| t.key.as_str())
            .collect::<Vec<_>>(),
        ["gpu"]
    );
    assert!(!is_ready(&new));
    assert_eq!(
        new.status
            .as_ref()
            .unwrap()
            .node_info
            .as_ref()
            .unwrap()
            .kubelet_version,
        "v1.36.0"
    );
}

#[test]
fn a_replaced_node_is_removed_once_its_replacement_is_ready_and_it_is_empty() {
    let old = gpu_node("n")
        .annotation(PHASE, "replaced")
        .annotation(REPLACED_BY, "n-g3");
    let joining = gpu_node("n-g3").annotation(PHASE, "joining");
    assert_eq!(
        step(&old, &[joining], NO_PODS, &Config::default(), now()),
        Step::Wait(None)
    );
    let joined = gpu_node("n-g3");
    assert_eq!(
        step(
            &old,
            std::slice::from_ref(&joined),
            &[running_on("n")],
            &Config::default(),
            now()
        ),
        Step::Wait(None)
    );
    assert_eq!(
        step(&old, &[joined], NO_PODS, &Config::default(), now()),
        Step::Remove
    );
}

fn taint_keys(taints: &[Taint]) -> Vec<(&str, &str)> {
    taints
        .iter()
        .map(|t| (t.key.as_str(), t.effect.as_str()))
        .collect()
}

/// `processTaintBaseEviction`: False → not-ready:NoExecute at once; Unknown → unreachable:NoExecute
/// once the condition has been Unknown for the grace period (the sim writes Unknown when the
/// kubelet stops); True → both gone. Other taints are kept.
#[test]
fn a_not_ready_node_gets_its_noexecute_taint_unknown_after_the_grace_period() {
    let config = Config::default();
    let mut n = gpu_node("n");
    let mut status = n.status.take().unwrap();
    set_ready(
        &mut status,
        &Readiness::NotReady("runtime down".into()),
        now(),
    );
    n.status = Some(status.clone());
    let (taints, at) = noexecute_taints(&n, &config, now());
    let taints = taints.expect("tainted at once");
    assert_eq!(at, None);
    assert_eq!(
        taint_keys(&taints),
        [
            ("gpu", "NoSchedule"),
            ("node.kubernetes.io/unschedulable", "NoSchedule"),
            (NOT_READY_TAINT, "NoExecute")
        ]
    );
    assert_eq!(taints[2].time_added.as_ref().map(|t| t.0), Some(now()));
    n.spec.as_mut().unwrap().taints = Some(taints);
    assert_eq!(
        noexecute_taints(&n, &config, now()),
        (None, None),
        "settled"
    );
    // the kubelet stops reporting: Unknown; the taint swaps only after the grace period
    let t0 = now() + SignedDuration::from_secs(10);
    set_ready(&mut status, &Readiness::Unknown, t0);
    n.status = Some(status.clone());
    let due = t0 + SignedDuration::from_secs(50);
    assert_eq!(noexecute_taints(&n, &config, t0), (None, Some(due)));
    let (taints, _) = noexecute_taints(&n, &config, due);
    let taints = taints.expect("swapped");
    assert_eq!(taint_keys(&taints)[2..], [(UNREACHABLE_TAINT, "NoExecute")]);
    n.spec.as_mut().unwrap().taints = Some(taints);
    // Ready again: the NoExecute taints go, the others stay
    set_ready(&mut status, &Readiness::Ready, due);
    n.status = Some(status);
    let (taints, _) = noexecute_taints(&n, &config, due);
    assert_eq!(
        taint_keys(&taints.expect("untainted")),
        [
            ("gpu", "NoSchedule"),
            ("node.kubernetes.io/unschedulable", "NoSchedule")
        ]
    );
}

#[test]
fn step_reads_the_caches_arcs_as_it_reads_owned_objects() {
    // the actor's pass hands `step` the reflector's `Arc`s instead of copies
    let old = gpu_node("n")
        .annotation(PHASE, "replaced")
        .annotation(REPLACED_BY, "n-g3");
    let joined = gpu_node("n-g3");
    let busy = running_on("n");
    let cfg = Config::default();
    for (nodes, pods) in [
        (vec![joined.clone()], vec![busy.clone()]),
        (vec![joined.clone()], vec![]),
        (vec![], vec![]),
    ] {
        let arc_nodes: Vec<Arc<Node>> = nodes.iter().cloned().map(Arc::new).collect();
        let arc_pods: Vec<Arc<Pod>> = pods.iter().cloned().map(Arc::new).collect();
        assert_eq!(
            step(&old, &arc_nodes, &arc_pods, &cfg, now()),
            step(&old, &nodes, &pods, &cfg, now())
        );
    }
    assert_eq!(
        step(&old, &[Arc::new(joined)], &[Arc::new(busy)], &cfg, now()),
        Step::Wait(None)
    );
}

/// Pod `name` (no namespace, no owner) on `node` in `phase` with `ContainersReady=True` and,
/// when given, a `Ready` condition of that status (reason `PodReason`), both since [`since`].
fn with_ready(name: &str, node: &str, phase: &str, ready: Option<&str>) -> Pod {
    let p = core::pod(name, node).unowned().phase(phase).condition_at(
        "ContainersReady",
        "True",
        "",
        since(),
    );
    match ready {
        Some(r) => p.condition_at("Ready", r, "PodReason", since()),
        None => p,
    }
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> &'a k8s_openapi::api::core::v1::PodCondition {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .unwrap()
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(ResourceExt::name_any).collect()
}

/// `MarkPodsNotReady` once the node has been Unknown for the grace period (when the real
/// controller writes Unknown): every pod bound to the node whose Ready condition is not False —
/// terminal ones too — gets Ready=False with `lastTransitionTime` now, reason and message kept;
/// ContainersReady and the phase are not written; pods without a Ready condition, already not
/// ready, or on another node are left alone.
#[test]
fn mark_pods_not_ready_a_node_unknown_for_the_grace_period_has_its_pods_ready_false() {
    let config = Config::default();
    let t0 = now();
    let mut n = gpu_node("n");
    set_ready(n.status.as_mut().unwrap(), &Readiness::Unknown, t0);
    let pods = [
        with_ready("ready", "n", "Running", Some("True")),
        with_ready("unknown", "n", "Running", Some("Unknown")),
        with_ready("done", "n", "Succeeded", Some("True")),
        with_ready("already", "n", "Running", Some("False")),
        with_ready("fresh", "n", "Pending", None),
        with_ready("elsewhere", "m", "Running", Some("True")),
    ];
    let due = t0 + SignedDuration::from_secs(50);
    assert_eq!(
        pods_not_ready(&n, &pods, &config, due - SignedDuration::from_secs(1)),
        (vec![], Some(due)),
        "within the grace period: nothing yet, a look at its end"
    );
    let (marked, at) = pods_not_ready(&n, &pods, &config, due);
    assert_eq!(at, None);
    assert_eq!(names(&marked), ["ready", "unknown", "done"]);
    for (was, p) in pods.iter().zip(&marked) {
        let ready = condition(p, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("PodReason"));
        assert_eq!(ready.last_transition_time.as_ref().map(|t| t.0), Some(due));
        assert_eq!(
            condition(p, "ContainersReady"),
            condition(was, "ContainersReady")
        );
        assert_eq!(
            p.status.as_ref().unwrap().phase,
            was.status.as_ref().unwrap().phase
        );
    }
    // written: nothing left to mark on the next pass
    let mut after: Vec<Pod> = marked;
    after.extend(pods[3..].iter().cloned());
    assert_eq!(pods_not_ready(&n, &after, &config, due), (vec![], None));
    // the cache's `Arc`s read as owned pods
    let arcs: Vec<Arc<Pod>> = pods.iter().cloned().map(Arc::new).collect();
    assert_eq!(
        names(&pods_not_ready(&n, &arcs, &config, due).0),
        ["ready", "unknown", "done"]
    );
}

/// `monitorNodeHealth` marks pods only when its own pass turns Ready from True to Unknown: a
/// Ready node, one whose kubelet reports NotReady (False), and one that never reported are left
/// alone.
#[test]
fn mark_pods_not_ready_leaves_a_ready_a_kubelet_not_ready_and_an_unreported_node_alone() {
    let config = Config::default();
    let pods = [with_ready("ready", "n", "Running", Some("True"))];
    let mut n = gpu_node("n");
    let later = now() + SignedDuration::from_secs(3600);
    assert_eq!(pods_not_ready(&n, &pods, &config, later), (vec![], None));
    set_ready(
        n.status.as_mut().unwrap(),
        &Readiness::NotReady("PLEG is not healthy".into()),
        now(),
    );
    assert_eq!(pods_not_ready(&n, &pods, &config, later), (vec![], None));
    n.status.as_mut().unwrap().conditions = None;
    assert_eq!(pods_not_ready(&n, &pods, &config, later), (vec![], None));
}
