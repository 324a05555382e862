//! The capacity check's tests; the world they build is shared with `taint.rs`'s.

use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::drain::{GroupLabel, GroupLabels, name};
use raygate_testing::core::*;

const OUTDATED: &str = "raygate.io/outdated";

/// `n` with `gpu` GPUs, 64 CPUs and room for 110 pods.
fn with_gpus(n: Node, gpu: &str) -> Node {
    n.allocatable(&[("cpu", "64"), ("nvidia.com/gpu", gpu), ("pods", "110")])
}

/// A node with 8 GPUs.
pub(in crate::drain) fn gpu_node(name: &str, domain: &str, pool: &str) -> Node {
    with_gpus(node(name, domain).label("pool", pool), "8")
}

/// Group `g` on `node`: a leader and a worker, one GPU each.
fn group(g: &str, node: &str) -> Vec<Pod> {
    ["leader", "worker"]
        .iter()
        .map(|role| {
            pod(&format!("ns/{g}-{role}"), node)
                .requests(&[("cpu", "1"), ("nvidia.com/gpu", "1")])
                .label("g", g)
                .label("role", role)
        })
        .collect()
}

pub(in crate::drain) fn leaders_pdb(min_available: i32) -> PodDisruptionBudget {
    pdb("ns/leaders", &[("role", "leader")]).min_available(int(min_available))
}

pub(in crate::drain) fn options(taint_outdated: bool) -> PlanOptions {
    PlanOptions {
        domain_label: UD.to_string(),
        node_selector: "pool=old".to_string(),
        taint: taint_outdated.then(|| taint(OUTDATED, "NoSchedule")),
        groups: GroupLabels::of_labels(&["g"]),
        ..PlanOptions::default()
    }
}

/// `a` groups in ud-a (node old-a), `b` in ud-b (node old-b), plus `extra` nodes.
pub(in crate::drain) fn world(a: usize, b: usize, extra: Vec<Node>) -> (Vec<Node>, Vec<Pod>) {
    let mut nodes = vec![
        gpu_node("old-a", "ud-a", "old"),
        gpu_node("old-b", "ud-b", "old"),
    ];
    nodes.extend(extra);
    let mut pods = Vec::new();
    for i in 0..a {
        pods.extend(group(&format!("a{i}"), "old-a"));
    }
    for i in 0..b {
        pods.extend(group(&format!("b{i}"), "old-b"));
    }
    (nodes, pods)
}

fn check(
    nodes: &[Node],
    pods: &[Pod],
    budget: PodDisruptionBudget,
    taint_outdated: bool,
    returns: Returns,
) -> Vec<DeadEnd> {
    let pdbs = vec![budget];
    let cluster = Cluster::new(nodes, pods, &pdbs);
    let options = options(taint_outdated);
    let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
    dead_ends(&cluster, &plan, &options, returns)
}

#[test]
fn a_domain_with_more_groups_than_tolerated_and_no_room_outside_is_a_dead_end() {
    // 4 leaders, minAvailable 2: two down at once; ud-a holds 3, so one must run elsewhere
    let (nodes, pods) = world(3, 1, Vec::new());
    let found = check(&nodes, &pods, leaders_pdb(2), true, Returns::Never);
    assert_eq!(found.len(), 1, "{found:?}");
    let d = &found[0];
    assert_eq!(
        (
            d.domain.as_str(),
            d.pdb.as_str(),
            d.tolerated,
            d.must_move,
            d.capacity
        ),
        ("ud-a", "ns/leaders", 2, 1, 0)
    );
    assert_eq!(d.groups, vec!["a0", "a1", "a2"]);
    assert_eq!(d.group_requests, "cpu 2, nvidia.com/gpu 2, pods 2");
    let m = d.to_string();
    for says in [
        "upgrade domain ud-a holds 3 group(s) under PodDisruptionBudget ns/leaders (a0, a1, a2)",
        "tolerates 2 down: 1 of them must be Ready elsewhere",
        "room for 0 such group(s)",
        "Fix: add capacity outside the rollout (a node of the new generation) for 1 more group(s)",
        "set spec.taintOutdated to false",
        "let the budget tolerate 3 down",
    ] {
        assert!(m.contains(says), "no {says:?} in {m}");
    }
}

#[test]
fn room_outside_the_rollout_for_the_groups_that_must_move_is_no_dead_end() {
    let (nodes, pods) = world(3, 1, vec![gpu_node("new-1", "ud-n", "new")]);
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(2), true, Returns::Never),
        Vec::new()
    );
}

#[test]
fn exactly_as_many_groups_as_the_budget_tolerates_need_no_room() {
    // minAvailable 1 of 4: three down at once, exactly ud-a's three groups
    let (nodes, pods) = world(3, 1, Vec::new());
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(1), true, Returns::Never),
        Vec::new()
    );
    // one more than tolerated, room for exactly one group (2 GPUs free): not a dead end
    let tight = with_gpus(gpu_node("new-1", "ud-n", "new"), "2");
    let (nodes, pods) = world(3, 1, vec![tight.clone()]);
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(2), true, Returns::Never),
        Vec::new()
    );
    // one GPU short of one group (2 each): a dead end, room 0
    let tight = with_gpus(tight, "1");
    let (nodes, pods) = world(3, 1, vec![tight]);
    let found = check(&nodes, &pods, leaders_pdb(2), true, Returns::Never);
    assert_eq!(
        found.iter().map(|d| d.capacity).collect::<Vec<_>>(),
        vec![0]
    );
}

#[test]
fn without_taint_outdated_nothing_is_predicted() {
    let (nodes, pods) = world(3, 1, Vec::new());
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(2), false, Returns::Never),
        Vec::new()
    );
}

#[test]
fn a_cordoned_or_untolerated_tainted_node_outside_is_no_room_and_a_tolerated_one_is() {
    let (nodes, pods) = world(3, 1, vec![gpu_node("new-1", "ud-n", "new").cordoned()]);
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(2), true, Returns::Never).len(),
        1
    );
    let gpu_taint = taint("nvidia.com/gpu", "NoSchedule");
    let tainted = gpu_node("new-1", "ud-n", "new").tainted(gpu_taint);
    let (nodes, mut pods) = world(3, 1, vec![tainted]);
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(2), true, Returns::Never).len(),
        1
    );
    for p in &mut pods {
        p.spec.get_or_insert_default().tolerations = Some(vec![Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: Some("Exists".into()),
            ..Toleration::default()
        }]);
    }
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(2), true, Returns::Never),
        Vec::new()
    );
}

#[test]
fn a_reboot_hand_off_brings_the_earlier_domains_back_and_none_keeps_their_groups_outside() {
    // ud-a (first) holds 1 group, ud-b 3; 4 leaders, two down at once
    let (nodes, pods) = world(1, 3, Vec::new());
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(2), true, Returns::AfterHandOff),
        Vec::new(),
        "ud-a's rebooted node takes ud-b's groups"
    );
    let found = check(&nodes, &pods, leaders_pdb(2), true, Returns::Never);
    assert_eq!(
        found.iter().map(|d| d.domain.as_str()).collect::<Vec<_>>(),
        vec!["ud-b"]
    );
    // hand-off None: ud-a's group took the one free group's room outside first
    let one = with_gpus(gpu_node("new-1", "ud-n", "new"), "2");
    let (nodes, pods) = world(1, 3, vec![one]);
    let found = check(&nodes, &pods, leaders_pdb(2), true, Returns::Never);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (
            found[0].domain.as_str(),
            found[0].capacity,
            found[0].moved_before
        ),
        ("ud-b", 1, 1)
    );
    assert!(
        found[0]
            .to_string()
            .contains("of which the 1 group(s) moved out of earlier domains"),
        "{}",
        found[0]
    );
}

#[test]
fn a_budget_that_never_allows_a_disruption_is_left_to_the_preflight() {
    let (nodes, pods) = world(3, 1, Vec::new());
    assert_eq!(
        check(&nodes, &pods, leaders_pdb(4), true, Returns::Never),
        Vec::new()
    );
}

fn gate(nodes: &[Node], pods: &[Pod], taint_outdated: bool, returns: Returns) -> CapacityCheck {
    // three leaders, two down at once: the budget's dead end stays out of these
    let pdbs = vec![leaders_pdb(1)];
    let cluster = Cluster::new(nodes, pods, &pdbs);
    let options = options(taint_outdated);
    let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
    CapacityCheck::check(&cluster, &plan, &options, returns)
}

fn spare(gpus: &str) -> Node {
    with_gpus(gpu_node("new-1", "ud-n", "new"), gpus)
}

fn named(found: &CapacityCheck) -> Vec<(&str, usize, usize)> {
    found
        .health_dead_ends
        .iter()
        .map(|d| (d.domain.as_str(), d.groups.len(), d.moved_before))
        .collect()
}

#[test]
fn hand_off_none_needs_room_outside_the_rollout_for_every_group_drained_so_far() {
    // ud-a holds a0 and a1, ud-b holds b0 (2 GPUs each); tainted, only new-1 is room: ud-a's
    // gate needs 4 GPUs there, ud-b's 6 (a0 and a1 stay there, the domains stay cordoned)
    let (nodes, pods) = world(2, 1, vec![spare("6")]);
    let at = gate(&nodes, &pods, true, Returns::Never);
    assert_eq!(
        at,
        CapacityCheck::default(),
        "exactly room for the three groups"
    );
    // one GPU short: ud-b's gate cannot pass, ud-a's can
    let (nodes, pods) = world(2, 1, vec![spare("5")]);
    let below = gate(&nodes, &pods, true, Returns::Never);
    assert_eq!(below.dead_ends, Vec::new(), "the budget tolerates ud-a's 2");
    assert_eq!(named(&below), vec![("ud-b", 1, 2)]);
    let d = &below.health_dead_ends[0];
    assert_eq!(d.groups, vec!["b0"]);
    assert_eq!(
        (d.capacity, d.group_requests.as_deref()),
        (Some(2), Some("cpu 2, nvidia.com/gpu 2, pods 2"))
    );
    assert_eq!(d.requests, "cpu 6, nvidia.com/gpu 6, pods 6");
    assert_eq!(d.free, "cpu 64, nvidia.com/gpu 5, pods 110");
    assert_eq!(d.short, "nvidia.com/gpu 1");
    assert!(d.taint_outdated && !d.capacity_without_taint, "{d:?}");
    // 3 GPUs: not even ud-a's two groups fit
    let (nodes, pods) = world(2, 1, vec![spare("3")]);
    let found = gate(&nodes, &pods, true, Returns::Never);
    assert_eq!(named(&found), vec![("ud-a", 2, 0), ("ud-b", 1, 2)]);
    assert_eq!(found.domains(), 2);
    // a reboot or replace hand-off gives the drained nodes back: nothing to predict
    assert_eq!(
        gate(&nodes, &pods, true, Returns::AfterHandOff),
        CapacityCheck::default()
    );
}

#[test]
fn without_taint_outdated_the_later_domains_are_room_until_the_last_one() {
    // a0 on old-a, b0 on old-b, nothing outside the pool
    let (nodes, pods) = world(1, 1, Vec::new());
    let found = gate(&nodes, &pods, false, Returns::Never);
    // ud-a's group runs again on old-b; ud-b's gate needs room for both outside the pool
    assert_eq!(named(&found), vec![("ud-b", 1, 1)]);
    let d = &found.health_dead_ends[0];
    assert!(!d.taint_outdated && !d.capacity_without_taint, "{d:?}");
    let m = d.to_string();
    for says in [
        "upgrade domain ud-b: with hand-off None its nodes stay cordoned, so its health check \
         waits until its 1 group(s) (b0) are Ready again on nodes outside the domains drained \
         so far, as must the 1 group(s) moved out of earlier domains",
        "those nodes have nothing free and the 2 group(s) request cpu 4, nvidia.com/gpu 4, pods 4",
        "(room for 0 such group(s); one group requests cpu 2, nvidia.com/gpu 2, pods 2)",
        "the health check would fail after healthCheckRetryTimeout",
        "Fix: add capacity outside the domains drained so far (a node of the new generation) \
         for cpu 4, nvidia.com/gpu 4, pods 4 (2 more group(s)), or hand the nodes back \
         (spec.handOff.mode Reboot or Replace",
    ] {
        assert!(m.contains(says), "no {says:?} in {m}");
    }
    assert!(!m.contains("taintOutdated"), "{m}");
    // tainted, ud-a's group cannot use old-b either; without the taint it could
    let found = gate(&nodes, &pods, true, Returns::Never);
    assert_eq!(named(&found), vec![("ud-a", 1, 0), ("ud-b", 1, 1)]);
    let d = &found.health_dead_ends[0];
    assert!(d.capacity_without_taint, "{d:?}");
    assert!(
        d.fix()
            .ends_with("or set spec.taintOutdated to false (the later domains' nodes have room)"),
        "{}",
        d.fix()
    );
    assert!(!found.health_dead_ends[1].capacity_without_taint);
    // room for both outside the pool: nothing
    let (nodes, pods) = world(1, 1, vec![spare("4")]);
    assert_eq!(
        gate(&nodes, &pods, true, Returns::Never),
        CapacityCheck::default()
    );
    assert_eq!(
        gate(&nodes, &pods, false, Returns::Never),
        CapacityCheck::default()
    );
}

#[test]
fn a_node_only_some_groups_tolerate_is_room_for_those_only() {
    let gpu_taint = taint("nvidia.com/gpu", "NoSchedule");
    let (nodes, mut pods) = world(1, 0, vec![spare("8").tainted(gpu_taint)]);
    assert_eq!(
        named(&gate(&nodes, &pods, true, Returns::Never)),
        vec![("ud-a", 1, 0)]
    );
    for p in &mut pods {
        p.spec.get_or_insert_default().tolerations = Some(vec![Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: Some("Exists".into()),
            ..Toleration::default()
        }]);
    }
    assert_eq!(
        gate(&nodes, &pods, true, Returns::Never),
        CapacityCheck::default()
    );
    // a second, untolerating group: checked on the nodes it may use, alone
    let mut more = group("a1", "old-a");
    pods.append(&mut more);
    let found = gate(&nodes, &pods, true, Returns::Never);
    assert_eq!(named(&found), vec![("ud-a", 1, 0)]);
    assert_eq!(found.health_dead_ends[0].groups, vec!["a1"]);
}

#[test]
fn without_a_group_label_the_gate_waits_for_budgets_only_and_nothing_is_predicted() {
    let (nodes, pods) = world(1, 1, Vec::new());
    let pdbs = vec![leaders_pdb(1)];
    let cluster = Cluster::new(&nodes, &pods, &pdbs);
    let options = PlanOptions {
        groups: GroupLabels::default(),
        ..options(true)
    };
    let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
    assert_eq!(
        health_dead_ends(&cluster, &plan, &options, Returns::Never),
        Vec::new()
    );
}

#[test]
fn the_condition_message_names_the_budgets_dead_ends_then_the_health_checks() {
    let (nodes, pods) = world(3, 1, Vec::new());
    let pdbs = vec![leaders_pdb(2)];
    let cluster = Cluster::new(&nodes, &pods, &pdbs);
    let options = options(true);
    let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
    let found = CapacityCheck::check(&cluster, &plan, &options, Returns::Never);
    assert_eq!(found.dead_ends.len(), 1);
    assert_eq!(named(&found), vec![("ud-a", 3, 0), ("ud-b", 1, 3)]);
    assert_eq!(found.domains(), 2);
    let m = found.message();
    assert!(m.starts_with(&dead_end_message(&found.dead_ends)), "{m}");
    assert!(
        m.contains(
            ". 2 upgrade domain(s) would fail their health check, their groups would \
                    have nowhere to run again: upgrade domain ud-a: with hand-off None"
        ),
        "{m}"
    );
    let only_gate = CapacityCheck {
        dead_ends: Vec::new(),
        ..found.clone()
    };
    assert!(
        only_gate
            .message()
            .starts_with("2 upgrade domain(s) would fail")
    );
}

#[test]
fn by_workload_only_the_groups_ready_now_must_come_back() {
    let (nodes, mut pods) = world(1, 1, Vec::new());
    let check = |pods: &[Pod]| {
        let pdbs = vec![leaders_pdb(1)];
        let cluster = Cluster::new(&nodes, pods, &pdbs);
        let options = PlanOptions {
            groups: GroupLabels::new([GroupLabel::with_workload("g", vec!["role".into()])]),
            ..options(true)
        };
        let plan = crate::drain::plan(&cluster, &options, Timestamp::UNIX_EPOCH).unwrap();
        health_dead_ends(&cluster, &plan, &options, Returns::Never)
            .iter()
            .map(|d| (d.domain.clone(), d.groups.clone()))
            .collect::<Vec<_>>()
    };
    // no pod Ready: the workloads count no Ready group to restore
    assert_eq!(check(&pods), Vec::new());
    for p in pods
        .iter_mut()
        .filter(|p| name(&p.metadata).starts_with("a0"))
    {
        *p = p.clone().ready();
    }
    assert_eq!(
        check(&pods),
        vec![("ud-a".to_string(), vec!["a0".to_string()])]
    );
}
