//! Unit tests of the drain plan. The pod rules are kubectl's
//! (`staging/src/k8s.io/kubectl/pkg/drain/filters.go`): the expected messages are kubectl's.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::*;
use raygate_testing::core::*;

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

fn options() -> PlanOptions {
    PlanOptions {
        domain_label: UD.to_string(),
        ..PlanOptions::default()
    }
}

/// The plan borrows the objects it was made from, and the tests build them inline: they are
/// copied and leaked (a few per test).
fn leak<T: Clone>(items: &[T]) -> &'static [T] {
    Box::leak(items.to_vec().into_boxed_slice())
}

fn run(
    nodes: &[Node],
    pods: &[Pod],
    pdbs: &[PodDisruptionBudget],
    o: &PlanOptions,
) -> Plan<'static> {
    let cluster = Cluster::new(leak(nodes), leak(pods), leak(pdbs));
    plan(&cluster, o, now()).unwrap()
}

fn run_err(nodes: &[Node], o: &PlanOptions) -> DrainError {
    plan(&Cluster::new(nodes, &[], &[]), o, now()).unwrap_err()
}

fn names<T>(items: &[T], f: impl Fn(&T) -> String) -> Vec<String> {
    items.iter().map(f).collect()
}

fn domain_names(p: &Plan) -> Vec<String> {
    names(&p.domains, |d| d.name.clone())
}

/// The single domain of a plan.
fn only<'p, 'a>(p: &'p Plan<'a>) -> &'p DomainPlan<'a> {
    assert_eq!(p.domains.len(), 1, "{p:#?}");
    &p.domains[0]
}

fn one_pod(pod: Pod, rules: DrainRules) -> DomainPlan<'static> {
    let o = PlanOptions { rules, ..options() };
    only(&run(&[node("n1", "a")], &[pod], &[], &o)).clone()
}

#[test]
fn target_nodes_are_grouped_by_upgrade_domain_in_name_order() {
    let nodes = [
        node("n1", "ud-2").label("pool", "gpu"),
        node("n2", "ud-1").label("pool", "gpu"),
        node("n3", "ud-2").label("pool", "gpu"),
        node("n4", "ud-1").label("pool", "cpu"),
        node("n5", ""),
    ];
    let o = PlanOptions {
        node_selector: "pool=gpu".to_string(),
        ..options()
    };
    let p = run(&nodes, &[], &[], &o);
    assert_eq!(domain_names(&p), ["ud-1", "ud-2"]);
    assert_eq!(names(&p.domains[0].nodes, |n| n.name.clone()), ["n2"]);
    assert_eq!(names(&p.domains[1].nodes, |n| n.name.clone()), ["n1", "n3"]);
}

#[test]
fn pods_selected_by_a_pdb_are_phase_one_and_the_rest_phase_two() {
    let pods = [
        pod("ns/leader", "n1")
            .label("app", "llm")
            .label("role", "leader"),
        pod("ns/worker", "n1")
            .label("app", "llm")
            .label("role", "worker"),
        pod("other/leader", "n1").label("role", "leader"),
        pod("ns/elsewhere", "n9").label("role", "leader"),
    ];
    let pdbs = [pdb("ns/leaders", &[("role", "leader")])];
    let nodes = [node("n1", "a"), node("n9", "b").label("keep", "yes")];
    let o = PlanOptions {
        node_selector: "!keep".to_string(),
        ..options()
    };
    let d = only(&run(&nodes, &pods, &pdbs, &o)).clone();
    assert_eq!(
        names(&d.phase1, |p| format!("{} {}", p.pod, p.pdb)),
        ["ns/leader leaders"]
    );
    // A budget only protects pods of its own namespace.
    assert_eq!(
        names(&d.phase2, |p| p.to_string()),
        ["ns/worker", "other/leader"]
    );
    assert_eq!(d.phase1[0].pod.node, "n1");
}

#[test]
fn a_nil_pdb_selector_protects_nothing_and_an_empty_one_protects_its_whole_namespace() {
    let pods = [pod("a/p", "n1"), pod("b/p", "n1")];
    let pdbs = [
        pdb("a/nil", &[]).selector(None),
        pdb("b/all", &[]).selector(Some(LabelSelector::default())),
    ];
    let d = only(&run(&[node("n1", "a")], &pods, &pdbs, &options())).clone();
    assert_eq!(names(&d.phase1, |p| p.pod.to_string()), ["b/p"]);
    assert_eq!(names(&d.phase2, |p| p.to_string()), ["a/p"]);
}

#[test]
fn a_pod_under_two_pdbs_blocks_its_domain_as_the_eviction_api_refuses_it() {
    let pods = [pod("ns/p", "n1").label("app", "x").label("tier", "y")];
    let pdbs = [
        pdb("ns/by-app", &[("app", "x")]),
        pdb("ns/by-tier", &[("tier", "y")]),
    ];
    let d = only(&run(&[node("n1", "a")], &pods, &pdbs, &options())).clone();
    assert!(d.phase1.is_empty() && d.is_blocked());
    assert_eq!(
        d.blocked[0].reasons,
        [BlockReason::MultiplePdbs {
            pdbs: vec!["by-app".into(), "by-tier".into()]
        }]
    );
}

#[test]
fn daemonset_pods_block_without_ignore_daemonsets_and_are_skipped_with_it() {
    // filters.go daemonSetFilter: daemonSetFatal / daemonSetWarning.
    let ds = || pod("kube-system/agent", "n1").owned_by("apps/v1", "DaemonSet", "agent");
    let d = one_pod(ds(), DrainRules::default());
    assert_eq!(
        d.errors(),
        [
            "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): kube-system/agent"
        ]
    );
    let ignoring = DrainRules {
        ignore_daemonsets: true,
        ..DrainRules::default()
    };
    // DaemonSet first: its emptyDir does not matter once it is skipped.
    let d = one_pod(ds().empty_dir(), ignoring);
    assert_eq!(d.skipped[0].reason, SkipReason::DaemonSet);
    assert!(!d.is_blocked() && d.phase2.is_empty());
    assert_eq!(
        d.warning_lines(),
        ["ignoring DaemonSet-managed Pods: kube-system/agent"]
    );
}

#[test]
fn a_pod_of_a_deleted_daemonset_blocks_without_force_and_is_evicted_with_it() {
    // filters.go daemonSetFilter: a NotFound DaemonSet is an error, or a warning under --force.
    let pods = [pod("ns/orphan", "n1").owned_by("apps/v1", "DaemonSet", "gone")];
    let nodes = [node("n1", "a")];
    let mut cluster = Cluster::new(&nodes, &pods, &[]);
    cluster.daemon_sets = Some(&[]);
    let d = &plan(&cluster, &options(), now()).unwrap().domains[0];
    assert_eq!(
        d.errors(),
        ["cannot delete daemonsets.apps \"gone\" not found (use --force to override): ns/orphan"]
    );
    let forced = PlanOptions {
        rules: DrainRules {
            force: true,
            ..DrainRules::default()
        },
        ..options()
    };
    let d = &plan(&cluster, &forced, now()).unwrap().domains[0];
    assert_eq!(names(&d.phase2, |p| p.to_string()), ["ns/orphan"]);
    assert_eq!(
        d.warning_lines(),
        ["daemonsets.apps \"gone\" not found: ns/orphan"]
    );
}

#[test]
fn a_daemonset_kind_of_another_api_is_an_ordinary_controller_as_kubectl_reads_it() {
    // filters.go (kubectl v0.36.3) isControllerRefDaemonSet: kind DaemonSet *and* apps/v1; an
    // OpenKruise Advanced DaemonSet's pod is drained like a ReplicaSet's.
    let kruise = pod("ns/agent", "n1").owned_by("apps.kruise.io/v1alpha1", "DaemonSet", "agent");
    let d = one_pod(kruise, DrainRules::default());
    assert!(!d.is_blocked(), "{:?}", d.errors());
    assert_eq!(names(&d.phase2, |p| p.to_string()), ["ns/agent"]);
    let ignoring = DrainRules {
        ignore_daemonsets: true,
        ..DrainRules::default()
    };
    let kruise = pod("ns/agent", "n1").owned_by("apps.kruise.io/v1alpha1", "DaemonSet", "agent");
    assert_eq!(
        one_pod(kruise, ignoring).phase2.len(),
        1,
        "not skipped either"
    );
}

#[test]
fn mirror_pods_are_skipped_whatever_the_flags() {
    // filters.go mirrorPodFilter: annotation kubernetes.io/config.mirror.
    let d = one_pod(
        pod("kube-system/etcd-n1", "n1").mirror().unowned(),
        DrainRules::default(),
    );
    assert_eq!(d.skipped[0].reason, SkipReason::Mirror);
    assert!(!d.is_blocked());
}

#[test]
fn pods_with_empty_dir_block_without_delete_emptydir_data() {
    // filters.go localStorageFilter: localStorageFatal / localStorageWarning.
    let d = one_pod(pod("ns/cache", "n1").empty_dir(), DrainRules::default());
    assert_eq!(
        d.errors(),
        [
            "cannot delete Pods with local storage (use --delete-emptydir-data to override): ns/cache"
        ]
    );
    let rules = DrainRules {
        delete_emptydir_data: true,
        ..DrainRules::default()
    };
    let d = one_pod(pod("ns/cache", "n1").empty_dir(), rules);
    assert_eq!(names(&d.phase2, |p| p.to_string()), ["ns/cache"]);
    assert_eq!(
        d.warning_lines(),
        ["deleting Pods with local storage: ns/cache"]
    );
}

#[test]
fn pods_without_a_controller_block_without_force() {
    // filters.go unreplicatedFilter: unmanagedFatal / unmanagedWarning.
    let d = one_pod(pod("ns/bare", "n1").unowned(), DrainRules::default());
    assert_eq!(
        d.errors(),
        ["cannot delete Pods that declare no controller (use --force to override): ns/bare"]
    );
    let rules = DrainRules {
        force: true,
        ..DrainRules::default()
    };
    let d = one_pod(pod("ns/bare", "n1").unowned(), rules);
    assert_eq!(names(&d.phase2, |p| p.to_string()), ["ns/bare"]);
    assert_eq!(
        d.warning_lines(),
        ["deleting Pods that declare no controller: ns/bare"]
    );
}

#[test]
fn a_pod_blocked_by_two_rules_names_both_flags_at_once() {
    let d = one_pod(
        pod("ns/p", "n1").unowned().empty_dir(),
        DrainRules::default(),
    );
    assert_eq!(
        d.blocked[0].reasons,
        [BlockReason::LocalStorage, BlockReason::Unmanaged]
    );
    let both = DrainRules {
        force: true,
        delete_emptydir_data: true,
        ..DrainRules::default()
    };
    let d = one_pod(pod("ns/p", "n1").unowned().empty_dir(), both);
    assert_eq!(d.phase2.len(), 1);
    assert_eq!(d.warnings.len(), 2);
}

#[test]
fn finished_pods_are_skipped_and_never_block() {
    for phase in ["Succeeded", "Failed"] {
        let p = pod("ns/job", "n1").phase(phase).unowned().empty_dir();
        let d = one_pod(p, DrainRules::default());
        assert_eq!(d.skipped[0].reason, SkipReason::Finished, "{phase}");
        assert!(!d.is_blocked());
    }
    let pending = one_pod(pod("ns/p", "n1").phase("Pending"), DrainRules::default());
    assert_eq!(pending.phase2.len(), 1);
}

#[test]
fn pod_selector_limits_the_drain_to_the_pods_it_selects() {
    let rules = DrainRules {
        pod_selector: "app=llm".to_string(),
        ..DrainRules::default()
    };
    let pods = [
        pod("ns/llm", "n1").label("app", "llm"),
        pod("ns/bare", "n1").unowned(),
    ];
    let o = PlanOptions { rules, ..options() };
    let d = only(&run(&[node("n1", "a")], &pods, &[], &o)).clone();
    assert_eq!(names(&d.phase2, |p| p.to_string()), ["ns/llm"]);
    assert_eq!(d.skipped[0].reason, SkipReason::NotSelected);
    assert!(!d.is_blocked(), "an unselected pod does not block");
}

#[test]
fn skip_wait_for_delete_timeout_skips_pods_deleting_for_longer() {
    let rules = |seconds| DrainRules {
        skip_wait_for_delete_timeout_seconds: seconds,
        ..DrainRules::default()
    };
    let since = now() - SignedDuration::from_secs(61);
    let deleting = || pod("ns/p", "n1").deleting_since(since);
    assert_eq!(
        one_pod(deleting(), rules(60)).skipped[0].reason,
        SkipReason::DeletingTooLong
    );
    assert_eq!(one_pod(deleting(), rules(61)).phase2.len(), 1);
    assert_eq!(one_pod(deleting(), rules(0)).phase2.len(), 1);
}

#[test]
fn nodes_are_cordoned_and_tainted_only_where_not_already() {
    let t = taint("raygate.io/outdated", "NoSchedule");
    let nodes = [
        node("n1", "a"),
        node("n2", "a").cordoned().tainted(t.clone()),
        node("n3", "a").tainted(taint("raygate.io/outdated", "NoExecute")),
    ];
    let o = PlanOptions {
        taint: Some(t.clone()),
        ..options()
    };
    let d = only(&run(&nodes, &[], &[], &o)).clone();
    let summary = names(&d.nodes, |n| {
        format!("{} {} {}", n.name, n.cordon, n.taint.is_some())
    });
    assert_eq!(summary, ["n1 true true", "n2 false false", "n3 true true"]);
}

#[test]
fn outdated_generation_targets_nodes_below_the_newest_kubelet() {
    let g = Generation {
        source: GenerationSource::NodeInfo(NodeInfoField::KubeletVersion),
        target: GenerationTarget::Newest,
    };
    let nodes = [
        node("n1", "a").kubelet("v1.31.0"),
        node("n2", "a").kubelet("v1.9.8"),
        node("n3", "b").kubelet("v1.30.2"),
        node("n4", "b").kubelet("v1.31.0"),
        node("n5", "c"),
    ];
    let o = PlanOptions {
        generation: Some(g),
        order: DomainOrder::OldestGeneration,
        ..options()
    };
    let p = run(&nodes, &[], &[], &o);
    assert_eq!(p.target_generation.as_deref(), Some("v1.31.0"));
    // v1.9.8 is older than v1.30.2: domain a first.
    assert_eq!(domain_names(&p), ["a", "b"]);
    assert_eq!(p.domains[0].generation.as_deref(), Some("v1.9.8"));
    assert_eq!(names(&p.domains[0].nodes, |n| n.name.clone()), ["n2"]);
    assert_eq!(names(&p.domains[1].nodes, |n| n.name.clone()), ["n3"]);
    assert_eq!(
        p.notes,
        ["1 selected node(s) have no status.nodeInfo.kubeletVersion and are left alone: n5"]
    );
}

#[test]
fn a_label_generation_with_a_target_value_targets_every_other_value() {
    let g = |target: &str| Generation {
        source: GenerationSource::Label("pool-generation".into()),
        target: GenerationTarget::Value(target.into()),
    };
    let nodes = [
        node("n1", "a").label("pool-generation", "g1"),
        node("n2", "b").label("pool-generation", "g2"),
        node("n3", "c").label("pool-generation", "g3"),
    ];
    let o = PlanOptions {
        generation: Some(g("g2")),
        ..options()
    };
    assert_eq!(domain_names(&run(&nodes, &[], &[], &o)), ["a", "c"]);
    let all_current = PlanOptions {
        generation: Some(g("g2")),
        node_selector: "pool-generation=g2".into(),
        ..options()
    };
    assert_eq!(
        run_err(&nodes, &all_current).to_string(),
        "no node matched: node selector \"pool-generation=g2\": every selected node is at node \
         label pool-generation = g2"
    );
}

#[test]
fn fewest_protected_groups_first_counts_a_group_once() {
    let leader = |name: &str, node: &str, group: &str| {
        pod(name, node)
            .label("role", "leader")
            .label("group", group)
    };
    let pods = [
        // domain a: 2 protected pods of one group
        leader("ns/a0", "n1", "g0"),
        leader("ns/a1", "n1", "g0"),
        // domain b: 2 groups
        leader("ns/b0", "n2", "g1"),
        leader("ns/b1", "n2", "g2"),
        // domain c: none protected
        pod("ns/c0", "n3"),
    ];
    let pdbs = [pdb("ns/leaders", &[("role", "leader")])];
    let nodes = [node("n1", "a"), node("n2", "b"), node("n3", "c")];
    let o = PlanOptions {
        order: DomainOrder::FewestProtectedGroups,
        groups: GroupLabels::of_labels(&["group"]),
        ..options()
    };
    let p = run(&nodes, &pods, &pdbs, &o);
    assert_eq!(domain_names(&p), ["c", "a", "b"]);
    assert_eq!(
        names(&p.domains, |d| d.protected_groups.to_string()),
        ["0", "1", "2"]
    );
    let ungrouped = PlanOptions {
        groups: GroupLabels::default(),
        ..o
    };
    // Each protected pod counts: a and b both have 2, ties by name.
    assert_eq!(
        domain_names(&run(&nodes, &pods, &pdbs, &ungrouped)),
        ["c", "a", "b"]
    );
}

#[test]
fn an_explicit_order_is_followed_and_must_list_every_target_domain() {
    let nodes = [
        node("n1", "a"),
        node("n2", "b"),
        node("n3", "c").label("done", "yes"),
    ];
    let explicit = |order: &[&str]| PlanOptions {
        order: DomainOrder::Explicit(order.iter().map(|s| s.to_string()).collect()),
        node_selector: "!done".into(),
        ..options()
    };
    let p = run(&nodes, &[], &[], &explicit(&["b", "c", "a"]));
    assert_eq!(domain_names(&p), ["b", "a"]);
    assert_eq!(
        p.notes,
        ["listed domain(s) with no target node, nothing to drain: c"]
    );
    assert_eq!(
        run_err(&nodes, &explicit(&["b"])),
        DrainError::DomainsNotListed {
            domains: vec!["a".into()]
        }
    );
    assert_eq!(
        run_err(&nodes, &explicit(&["b", "a", "zz"])).to_string(),
        format!("the explicit domain order names \"zz\", but no node has {UD}=zz")
    );
}

#[test]
fn bad_options_are_errors_that_name_what_is_wrong() {
    let nodes = [node("n1", "a"), node("n2", "")];
    let typo = PlanOptions {
        domain_label: "topology.example.com/upgrade-domian".into(),
        ..options()
    };
    assert_eq!(
        run_err(&nodes, &typo).to_string(),
        "no node carries the upgrade-domain label \"topology.example.com/upgrade-domian\""
    );
    assert_eq!(
        run_err(&nodes, &options()).to_string(),
        format!("1 target node(s) lack the upgrade-domain label \"{UD}\": n2")
    );
    let none = PlanOptions {
        node_selector: "pool=tpu".into(),
        ..options()
    };
    assert_eq!(
        run_err(&nodes, &none).to_string(),
        "no node matched: node selector \"pool=tpu\""
    );
    let bad = PlanOptions {
        node_selector: "pool in (a".into(),
        ..options()
    };
    assert!(matches!(run_err(&nodes, &bad), DrainError::NodeSelector(_)));
    let order = PlanOptions {
        order: DomainOrder::OldestGeneration,
        ..options()
    };
    assert_eq!(run_err(&nodes, &order), DrainError::OrderNeedsGeneration);
}

/// A pod the cordon does not keep away (a toleration `operator: Exists` without a key tolerates
/// every taint; one for `node.kubernetes.io/unschedulable` tolerates the cordon alone) is
/// listed, so the plan says which replacements may be scheduled back; with a taint option the
/// pod must tolerate the taint too.
#[test]
fn the_plan_lists_the_pods_that_tolerate_the_cordon() {
    use k8s_openapi::api::core::v1::Toleration;
    let tolerating = |name: &str, key: Option<&str>| {
        let mut p = pod(&format!("ns/{name}"), "n1");
        p.spec.get_or_insert_default().tolerations = Some(vec![Toleration {
            key: key.map(str::to_string),
            operator: Some("Exists".into()),
            ..Toleration::default()
        }]);
        p
    };
    let pods = [
        tolerating("everything", None),
        tolerating("cordon", Some(rules::UNSCHEDULABLE_TAINT)),
        tolerating("gpu", Some("nvidia.com/gpu")),
        pod("ns/plain", "n1"),
    ];
    let d = only(&run(&[node("n1", "a")], &pods, &[], &options())).clone();
    assert_eq!(
        names(&d.tolerating, |p| p.to_string()),
        ["ns/cordon", "ns/everything"]
    );
    assert_eq!(
        d.warning_lines(),
        [
            "Pods that tolerate the cordon (evicted once; a replacement scheduled back onto \
             these nodes is left there, as DaemonSet pods): ns/cordon, ns/everything"
        ]
    );
    let tainted = PlanOptions {
        taint: Some(outdated_taint()),
        ..options()
    };
    let d = only(&run(&[node("n1", "a")], &pods, &[], &tainted)).clone();
    assert_eq!(names(&d.tolerating, |p| p.to_string()), ["ns/everything"]);
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["tolerating"][0]["name"], "everything");
}
