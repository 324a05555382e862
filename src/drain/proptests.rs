//! Property tests of the drain plan on random clusters: every target pod is placed exactly once,
//! phase 1 is exactly what one budget selects, domains partition the target nodes, and no pod a
//! kubectl rule stops is evicted without its flag.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

use super::rules::{has_local_storage, is_mirror};
use super::*;
use crate::labels::Selector;
use raygate_testing::core::*;

#[derive(Debug, Clone)]
struct NodeSpec {
    domain: usize,
    target: bool,
    cordoned: bool,
}

#[derive(Debug, Clone)]
struct PodSpec {
    node: usize,
    namespace: usize,
    app: usize,
    owner: usize,
    empty_dir: bool,
    mirror: bool,
    phase: usize,
}

#[derive(Debug, Clone)]
struct PdbSpec {
    namespace: usize,
    selector: usize,
    app: usize,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (0..3usize, any::<bool>(), any::<bool>()).prop_map(|(domain, target, cordoned)| NodeSpec {
        domain,
        target,
        cordoned,
    })
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        0..12usize,
        0..2usize,
        0..3usize,
        0..4usize,
        any::<bool>(),
        prop::bool::weighted(0.1),
        0..4usize,
    )
        .prop_map(
            |(node, namespace, app, owner, empty_dir, mirror, phase)| PodSpec {
                node,
                namespace,
                app,
                owner,
                empty_dir,
                mirror,
                phase,
            },
        )
}

fn pdb_spec() -> impl Strategy<Value = PdbSpec> {
    (0..2usize, 0..4usize, 0..3usize).prop_map(|(namespace, selector, app)| PdbSpec {
        namespace,
        selector,
        app,
    })
}

fn build_node(i: usize, s: &NodeSpec) -> Node {
    let n = node(&format!("n{i}"), &format!("d{}", s.domain));
    let n = if s.target { n.label("drain", "yes") } else { n };
    if s.cordoned { n.cordoned() } else { n }
}

fn build_pod(i: usize, s: &PodSpec) -> Pod {
    let mut p = pod(&format!("ns{}/p{i}", s.namespace), &format!("n{}", s.node))
        .label("app", &format!("a{}", s.app))
        .phase(["Running", "Pending", "Succeeded", "Failed"][s.phase]);
    p = match s.owner {
        0 => p.unowned(),
        1 => p,
        2 => p.owned_by("apps/v1", "DaemonSet", "ds"),
        _ => p.owned_by("apps/v1", "StatefulSet", "sts"),
    };
    if s.empty_dir {
        p = p.empty_dir();
    }
    if s.mirror { p.mirror() } else { p }
}

fn build_pdb(i: usize, s: &PdbSpec) -> PodDisruptionBudget {
    let app = format!("a{}", s.app);
    let b = pdb(&format!("ns{}/b{i}", s.namespace), &[("app", &app)]);
    match s.selector {
        0 => b.selector(None),
        1 => b.selector(Some(LabelSelector::default())),
        2 => b,
        _ => b.selector(Some(LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "In".into(),
                values: Some(vec![app, format!("a{}", (s.app + 1) % 3)]),
            }]),
        })),
    }
}

/// The budgets selecting `pod`, by a plain scan (the oracle for the plan's index).
fn selecting(pod: &Pod, pdbs: &[PodDisruptionBudget]) -> usize {
    pdbs.iter()
        .filter(|b| b.metadata.namespace == pod.metadata.namespace)
        .filter(|b| {
            let s = b.spec.as_ref().and_then(|s| s.selector.as_ref());
            Selector::from_optional(s, "spec.selector")
                .is_ok_and(|s| s.matches(pod.metadata.labels.as_ref()))
        })
        .count()
}

fn rules_strategy() -> impl Strategy<Value = DrainRules> {
    (any::<bool>(), any::<bool>(), any::<bool>(), 0..3usize).prop_map(|(ds, ed, force, sel)| {
        DrainRules {
            ignore_daemonsets: ds,
            delete_emptydir_data: ed,
            force,
            pod_selector: ["", "app=a0", "app!=a1"][sel].to_string(),
            skip_wait_for_delete_timeout_seconds: 0,
            grace_period_seconds: None,
        }
    })
}

/// Where the plan put each pod: `ns/name` → (domain, place).
fn placements(p: &Plan) -> BTreeMap<String, Vec<(String, &'static str)>> {
    let mut at: BTreeMap<String, Vec<(String, &'static str)>> = BTreeMap::new();
    for d in &p.domains {
        let mut put = |pod: &PodRef<&str>, place| {
            at.entry(pod.to_string())
                .or_default()
                .push((d.name.clone(), place));
        };
        d.phase1.iter().for_each(|x| put(&x.pod, "phase1"));
        d.phase2.iter().for_each(|x| put(x, "phase2"));
        d.skipped.iter().for_each(|x| put(&x.pod, "skipped"));
        d.blocked.iter().for_each(|x| put(&x.pod, "blocked"));
    }
    at
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_plan_places_every_target_pod_once_and_protects_exactly_what_one_pdb_selects(
        node_specs in prop::collection::vec(node_spec(), 1..10),
        pod_specs in prop::collection::vec(pod_spec(), 0..40),
        pdb_specs in prop::collection::vec(pdb_spec(), 0..6),
        rules in rules_strategy(),
    ) {
        let nodes: Vec<Node> = node_specs.iter().enumerate().map(|(i, s)| build_node(i, s)).collect();
        let pods: Vec<Pod> = pod_specs.iter().enumerate().map(|(i, s)| build_pod(i, s)).collect();
        let pdbs: Vec<PodDisruptionBudget> =
            pdb_specs.iter().enumerate().map(|(i, s)| build_pdb(i, s)).collect();
        let options = PlanOptions {
            domain_label: UD.into(),
            node_selector: "drain=yes".into(),
            rules: rules.clone(),
            ..PlanOptions::default()
        };
        let result = plan(&Cluster::new(&nodes, &pods, &pdbs), &options, Timestamp::UNIX_EPOCH);
        let any_target = node_specs.iter().any(|n| n.target);
        prop_assert_eq!(result.is_ok(), any_target);
        let Ok(p) = result else { return Ok(()) };

        // Domains partition the target nodes, each under its own label value.
        let mut planned: Vec<String> = Vec::new();
        for d in &p.domains {
            for n in &d.nodes {
                let i: usize = n.name[1..].parse().unwrap();
                prop_assert_eq!(&d.name, &format!("d{}", node_specs[i].domain));
                prop_assert_eq!(n.cordon, !node_specs[i].cordoned);
                planned.push(n.name.clone());
            }
        }
        planned.sort();
        let mut targets: Vec<String> = node_specs.iter().enumerate()
            .filter(|(_, s)| s.target).map(|(i, _)| format!("n{i}")).collect();
        targets.sort();
        prop_assert_eq!(planned, targets);

        let at = placements(&p);
        for (i, (spec, pod)) in pod_specs.iter().zip(&pods).enumerate() {
            let key = crate::meta::key(&pod.metadata);
            let on_target = node_specs.get(spec.node).is_some_and(|n| n.target);
            let placed = at.get(&key).cloned().unwrap_or_default();
            if !on_target {
                prop_assert!(placed.is_empty(), "pod {} on a non-target node placed: {:?}", i, placed);
                continue;
            }
            // Exactly once, in the domain of its node.
            prop_assert_eq!(placed.len(), 1, "pod {} placed {:?}", i, placed);
            let (domain, place) = &placed[0];
            prop_assert_eq!(domain, &format!("d{}", node_specs[spec.node].domain));
            let budgets = selecting(pod, &pdbs);
            match *place {
                "phase1" => prop_assert_eq!(budgets, 1),
                "phase2" => prop_assert_eq!(budgets, 0),
                _ => {}
            }
            if matches!(*place, "phase1" | "phase2") {
                // kubectl's rules: nothing a rule stops is evicted without its flag.
                prop_assert!(!is_finished(pod) && !is_mirror(pod));
                prop_assert!(rules.delete_emptydir_data || !has_local_storage(pod));
                prop_assert!(rules.force || controller_of(pod).is_some());
                prop_assert!(controller_of(pod).is_none_or(|o| o.kind != "DaemonSet"));
            }
            if *place != "skipped" && budgets > 1 {
                prop_assert_eq!(*place, "blocked");
            }
        }
    }
}
