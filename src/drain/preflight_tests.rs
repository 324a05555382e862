//! Unit tests of the contract preflight: each finding, positive and negative.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::preflight::{
    KUBERAY_CLUSTER, KUBERAY_GROUP, KUBERAY_HOST_INDEX, KUBERAY_REPLICA_NAME, LWS_GROUP_KEY,
    LWS_NAME, LWS_WORKER_INDEX,
};
use super::*;
use raygate_testing::core::*;

/// Four nodes, two per domain: n1, n2 in `a`; n3, n4 in `b`.
fn nodes() -> Vec<Node> {
    vec![
        node("n1", "a"),
        node("n2", "a"),
        node("n3", "b"),
        node("n4", "b"),
    ]
}

/// A LeaderWorkerSet pod of group `g` (worker `w`; 0 = the leader, with a readiness probe).
fn lws_pod(group: usize, worker: usize, node: &str) -> Pod {
    let name = match worker {
        0 => format!("serving/llm-{group}"),
        w => format!("serving/llm-{group}-{w}"),
    };
    let owner = match worker {
        0 => "llm".to_string(),
        _ => format!("llm-{group}"),
    };
    let p = pod(&name, node)
        .owned_by("apps/v1", "StatefulSet", &owner)
        .label(LWS_NAME, "llm")
        .label(LWS_GROUP_KEY, &format!("key{group}"))
        .label(LWS_WORKER_INDEX, &worker.to_string());
    match worker {
        0 => p.readiness_probe(),
        _ => p,
    }
}

/// Two groups of two, group 0 in domain a, group 1 in domain b.
fn lws_pods() -> Vec<Pod> {
    vec![
        lws_pod(0, 0, "n1"),
        lws_pod(0, 1, "n2"),
        lws_pod(1, 0, "n3"),
        lws_pod(1, 1, "n4"),
    ]
}

fn leaders_pdb() -> PodDisruptionBudget {
    pdb(
        "serving/llm-leaders",
        &[(LWS_NAME, "llm"), (LWS_WORKER_INDEX, "0")],
    )
}

fn check_with(
    contract: GroupContract,
    nodes: &[Node],
    pods: &[Pod],
    pdbs: &[PodDisruptionBudget],
) -> Vec<Finding> {
    let options = PreflightOptions {
        domain_label: UD.to_string(),
        contracts: vec![contract],
    };
    preflight(&Cluster::new(nodes, pods, pdbs), &options).unwrap()
}

fn check(pods: &[Pod], pdbs: &[PodDisruptionBudget]) -> Vec<Finding> {
    check_with(GroupContract::leader_worker_set(), &nodes(), pods, pdbs)
}

fn checks(findings: &[Finding]) -> Vec<Check> {
    findings.iter().map(|f| f.check).collect()
}

#[test]
fn a_cluster_that_keeps_the_contract_has_no_findings() {
    assert_eq!(check(&lws_pods(), &[leaders_pdb()]), []);
}

#[test]
fn a_group_split_across_domains_is_found() {
    let mut pods = lws_pods();
    pods[1] = lws_pod(0, 1, "n5");
    let mut nodes = nodes();
    nodes.push(node("n5", "c"));
    let contract = GroupContract::leader_worker_set();
    let f = check_with(contract.clone(), &nodes, &pods, &[leaders_pdb()]);
    assert_eq!(checks(&f), [Check::GroupSplitAcrossDomains]);
    assert_eq!(f[0].workload, "LeaderWorkerSet serving/llm");
    assert_eq!(f[0].object, "group serving/key0");
    assert!(f[0].problem.contains("(1 in a, 1 in c)"), "{}", f[0]);
    // Split into the domain of the other group: that domain now holds two groups as well.
    pods[1] = lws_pod(0, 1, "n3");
    let f = check_with(contract, &nodes, &pods, &[leaders_pdb()]);
    assert_eq!(
        checks(&f),
        [Check::GroupSplitAcrossDomains, Check::GroupsShareDomain]
    );
    assert!(f[0].fix.contains(&format!("topologyKey {UD}")), "{}", f[0]);
}

#[test]
fn groups_sharing_a_domain_beyond_the_budget_are_found() {
    // Both groups in domain a; minAvailable 1 of 2 leaders tolerates 1 disruption.
    let pods = [
        lws_pod(0, 0, "n1"),
        lws_pod(0, 1, "n1"),
        lws_pod(1, 0, "n2"),
        lws_pod(1, 1, "n2"),
    ];
    let f = check(&pods, &[leaders_pdb()]);
    assert_eq!(checks(&f), [Check::GroupsShareDomain]);
    assert_eq!(f[0].object, format!("upgrade domain {UD}=a"));
    assert!(
        f[0].problem.starts_with(
            "2 groups share this domain but PodDisruptionBudget serving/llm-leaders tolerates 1"
        ),
        "{}",
        f[0]
    );
    // A budget that tolerates both (minAvailable 0) is fine.
    let tolerant = leaders_pdb().min_available(int(0));
    assert_eq!(check(&pods, &[tolerant]), []);
}

#[test]
fn representatives_without_a_pdb_are_found() {
    let f = check(&lws_pods(), &[]);
    assert_eq!(checks(&f), [Check::NoPdbOnRepresentatives]);
    assert_eq!(f[0].object, "Pod serving/llm-0, serving/llm-1");
    assert!(
        f[0].problem.starts_with("2 of 2 representative(s)"),
        "{}",
        f[0]
    );
    assert!(f[0].fix.contains("minAvailable (e.g. 1 of 2)"), "{}", f[0]);
}

#[test]
fn a_pdb_that_also_selects_workers_is_found() {
    let every_pod = pdb("serving/llm", &[(LWS_NAME, "llm")]).min_available(int(3));
    let f = check(&lws_pods(), &[every_pod]);
    assert_eq!(checks(&f), [Check::PdbSelectsWorkers]);
    assert_eq!(f[0].object, "PodDisruptionBudget serving/llm");
    assert!(
        f[0].problem
            .starts_with("it selects 2 pod(s) that are not representatives")
    );
    assert!(f[0].fix.contains(&format!("{LWS_WORKER_INDEX}=0")));
}

#[test]
fn a_representative_under_two_pdbs_is_found() {
    let second = pdb("serving/llm-0-only", &[(LWS_GROUP_KEY, "key0")]);
    let f = check(&lws_pods(), &[leaders_pdb(), second]);
    // The second budget also selects group 0's worker.
    assert_eq!(checks(&f), [Check::MultiplePdbs, Check::PdbSelectsWorkers]);
    assert_eq!(f[0].object, "Pod serving/llm-0");
    assert!(
        f[0].problem.contains("(llm-0-only, llm-leaders)"),
        "{}",
        f[0]
    );
}

#[test]
fn a_pdb_needing_every_pod_healthy_is_found() {
    for spec in [int(2), pct("100%")] {
        let strict = leaders_pdb().min_available(spec.clone());
        let f = check(&lws_pods(), &[strict]);
        assert_eq!(checks(&f), [Check::PdbNeverAllowsDisruption], "{spec:?}");
        assert!(
            f[0].problem
                .contains("needs 2 healthy pod(s) of 2 expected"),
            "{}",
            f[0]
        );
        assert_eq!(f[0].workload, "LeaderWorkerSet serving/llm");
    }
    let none = leaders_pdb().max_unavailable(int(0));
    assert_eq!(
        checks(&check(&lws_pods(), &[none])),
        [Check::PdbNeverAllowsDisruption]
    );
    // The observed status wins over the spec: a surge leader makes 3 expected, 2 desired.
    let observed = leaders_pdb().min_available(pct("60%")).observed(3, 2);
    assert_eq!(check(&lws_pods(), &[observed]), []);
    let observed_strict = leaders_pdb().observed(2, 2);
    assert_eq!(
        checks(&check(&lws_pods(), &[observed_strict])),
        [Check::PdbNeverAllowsDisruption]
    );
}

#[test]
fn a_pdb_that_sets_neither_field_expects_no_pod_and_is_found() {
    let mut empty = leaders_pdb();
    if let Some(spec) = empty.spec.as_mut() {
        spec.min_available = None;
    }
    let f = check(&lws_pods(), &[empty]);
    assert_eq!(checks(&f), [Check::PdbNeverAllowsDisruption]);
    assert!(
        f[0].problem
            .contains("neither minAvailable nor maxUnavailable")
    );
}

/// A KubeRay multi-host worker group `gpu` of RayCluster `rc`: replicas of two hosts.
fn ray_pod(replica: &str, host: usize, node: &str) -> Pod {
    let p = pod(&format!("serving/rc-gpu-{replica}-{host}"), node)
        .owned_by("ray.io/v1", "RayCluster", "rc")
        .label(KUBERAY_CLUSTER, "rc")
        .label(KUBERAY_GROUP, "gpu")
        .label(KUBERAY_REPLICA_NAME, &format!("gpu-{replica}"))
        .label(KUBERAY_HOST_INDEX, &host.to_string());
    match host {
        0 => p.readiness_probe(),
        _ => p,
    }
}

fn ray_pods() -> Vec<Pod> {
    vec![
        ray_pod("abcde", 0, "n1"),
        ray_pod("abcde", 1, "n2"),
        ray_pod("fghij", 0, "n3"),
        ray_pod("fghij", 1, "n4"),
    ]
}

fn ray_pdb() -> PodDisruptionBudget {
    pdb(
        "serving/rc-gpu",
        &[(KUBERAY_CLUSTER, "rc"), (KUBERAY_HOST_INDEX, "0")],
    )
}

fn check_ray(pdbs: &[PodDisruptionBudget]) -> Vec<Finding> {
    check_with(GroupContract::kuberay(), &nodes(), &ray_pods(), pdbs)
}

#[test]
fn max_unavailable_over_raycluster_pods_never_allows_a_disruption() {
    // RayCluster has no scale subresource: the disruption controller fails (SyncFailed).
    assert_eq!(check_ray(&[ray_pdb()]), []);
    for spec in [int(1), pct("50%")] {
        let f = check_ray(&[ray_pdb().max_unavailable(spec.clone())]);
        assert_eq!(checks(&f), [Check::PdbNeverAllowsDisruption], "{spec:?}");
        assert_eq!(f[0].workload, "RayCluster worker group serving/rc/gpu");
        assert!(
            f[0].problem
                .contains("controlled by RayCluster rc, which has no scale"),
            "{}",
            f[0]
        );
        assert!(
            f[0].fix.contains("minAvailable: 1 for its 2 pods"),
            "{}",
            f[0]
        );
    }
    let percent_min = ray_pdb().min_available(pct("50%"));
    assert_eq!(
        checks(&check_ray(&[percent_min])),
        [Check::PdbNeverAllowsDisruption]
    );
}

#[test]
fn a_sync_failed_condition_is_reported_with_its_message() {
    let msg = "jobs.example.com does not implement the scale subresource";
    let failed = ray_pdb().sync_failed(msg);
    let f = check_ray(&[failed]);
    assert_eq!(checks(&f), [Check::PdbNeverAllowsDisruption]);
    assert!(f[0].problem.contains(msg), "{}", f[0]);
}

#[test]
fn a_representative_without_readiness_probe_or_gate_is_found() {
    let mut pods = lws_pods();
    if let Some(spec) = pods[2].spec.as_mut() {
        spec.containers[0].readiness_probe = None;
    }
    let f = check(&pods, &[leaders_pdb()]);
    assert_eq!(checks(&f), [Check::RepresentativeWithoutReadinessProbe]);
    assert_eq!(f[0].object, "Pod serving/llm-1");
    // A readiness gate delegates readiness too.
    pods[2] = pods[2].clone().readiness_gate();
    assert_eq!(check(&pods, &[leaders_pdb()]), []);
}

#[test]
fn a_custom_contract_names_the_workload_by_its_controller() {
    let p = |name: &str, rep: bool, node: &str| {
        let p = pod(name, node)
            .owned_by("example.com/v1", "Gang", "trainer")
            .label("gang", "g1");
        match rep {
            true => p.label("gang-role", "head"),
            false => p,
        }
    };
    let pods = [p("ml/h", true, "n1"), p("ml/w", false, "n3")];
    let contract = GroupContract::custom("gang", "gang-role=head");
    let f = check_with(contract, &nodes(), &pods, &[]);
    assert_eq!(
        checks(&f),
        [
            Check::GroupSplitAcrossDomains,
            Check::NoPdbOnRepresentatives,
            Check::RepresentativeWithoutReadinessProbe
        ]
    );
    assert!(f.iter().all(|f| f.workload == "Gang ml/trainer"), "{f:#?}");
}

#[test]
fn an_unknown_domain_label_or_bad_representative_selector_is_an_error() {
    let options = |domain: &str, rep: &str| PreflightOptions {
        domain_label: domain.to_string(),
        contracts: vec![GroupContract::custom("g", rep)],
    };
    let nodes = nodes();
    let cluster = Cluster::new(&nodes, &[], &[]);
    assert_eq!(
        preflight(&cluster, &options("zone", "r=1")),
        Err(DrainError::UnknownDomainLabel { key: "zone".into() })
    );
    assert!(matches!(
        preflight(&cluster, &options(UD, "r in (")),
        Err(DrainError::RepresentativeSelector(_))
    ));
}

#[test]
fn every_finding_reads_as_one_line_with_its_fix() {
    let f = check(&lws_pods(), &[]);
    let line = f[0].to_string();
    assert!(
        line.starts_with("NoPdbOnRepresentatives: LeaderWorkerSet serving/llm: Pod serving/llm-0"),
        "{line}"
    );
    assert!(
        line.contains(". Fix: create one PodDisruptionBudget in serving"),
        "{line}"
    );
}

/// LeaderWorkerSet groups and a RayCluster's multi-host replicas in one cluster, both presets
/// checked at once: each workload by its own contract (its representatives, its fix).
#[test]
fn every_preset_checks_its_own_groups_in_one_run() {
    let presets = |pods: &[Pod], pdbs: &[PodDisruptionBudget]| {
        let options = PreflightOptions {
            domain_label: UD.to_string(),
            contracts: GroupContract::presets(),
        };
        preflight(&Cluster::new(&nodes(), pods, pdbs), &options).unwrap()
    };
    let pods: Vec<Pod> = lws_pods().into_iter().chain(ray_pods()).collect();
    assert_eq!(presets(&pods, &[leaders_pdb(), ray_pdb()]), []);

    let f = presets(&pods, &[leaders_pdb()]);
    assert_eq!(checks(&f), [Check::NoPdbOnRepresentatives]);
    assert_eq!(f[0].workload, "RayCluster worker group serving/rc/gpu");
    assert_eq!(
        f[0].object,
        "Pod serving/rc-gpu-abcde-0, serving/rc-gpu-fghij-0"
    );
    assert!(
        f[0].fix.contains(&format!("{KUBERAY_HOST_INDEX}=0")),
        "{}",
        f[0]
    );
    // the LeaderWorkerSet contract alone sees no RayCluster group
    let lws_only = check_with(
        GroupContract::leader_worker_set(),
        &nodes(),
        &pods,
        &[leaders_pdb()],
    );
    assert_eq!(lws_only, []);

    let every_ray_pod = pdb("serving/rc", &[(KUBERAY_CLUSTER, "rc")]).min_available(int(3));
    let f = presets(&pods, &[leaders_pdb(), every_ray_pod]);
    assert_eq!(checks(&f), [Check::PdbSelectsWorkers]);
    assert_eq!(f[0].object, "PodDisruptionBudget serving/rc");
    assert!(f[0].problem.starts_with("it selects 2 pod(s)"), "{}", f[0]);
    assert!(
        f[0].fix.contains(&format!("{KUBERAY_HOST_INDEX}=0")),
        "{}",
        f[0]
    );
}
