//! raygate gives back only what it took: a cordon an admin made before the rollout (a
//! quarantine) stays through an abort and a reboot hand-off.

use super::*;

fn admin_cordons(w: &mut World, node: &str) {
    w.node_mut(node).spec.get_or_insert_default().unschedulable = Some(true);
}

#[test]
fn an_abort_lifts_raygate_s_cordons_and_taints_but_not_an_admin_s_cordon() {
    let mut w = World::new();
    admin_cordons(&mut w, "a2");
    admin_cordons(&mut w, "b1");
    let mut o = World::options();
    o.plan.taint = Some(raygate_testing::core::taint(
        "raygate.io/outdated",
        "NoSchedule",
    ));
    o.rollout_timeout = Some(secs(10));
    o.failure_action = FailureAction::Abort;
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    assert_eq!(cordons(&a), ["a1"], "a2 is cordoned already");
    w.apply(&a, evicted);
    w.advance(11);
    let (s, a) = w.step(&s, &o);
    assert!(matches!(s.phase, Phase::Failed { .. }), "{:?}", s.phase);
    w.apply(&a, evicted);
    let tainted = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == "raygate.io/outdated"))
    };
    assert!(!is_cordoned(w.node_mut("a1")), "raygate's cordon lifted");
    for n in ["a2", "b1"] {
        let node = w.node_mut(n).clone();
        assert!(is_cordoned(&node), "{n}: the admin's cordon stays");
        assert!(!tainted(&node), "{n}: raygate's taint goes");
    }
    assert!(!tainted(w.node_mut("a1")));
}

#[test]
fn a_rebooted_node_an_admin_had_cordoned_stays_cordoned_and_the_domain_goes_on() {
    let o = generation_options(Handoff::reboot());
    let mut w = World::new();
    with_generations(&mut w);
    admin_cordons(&mut w, "a2");
    let mut s = drained_to_hand_off(&mut w, &o);
    for n in ["a1", "a2"] {
        w.node_mut(n)
            .metadata
            .labels
            .get_or_insert_default()
            .insert("gen".into(), "2".into());
    }
    for _ in 0..3 {
        let (next, a) = w.step(&s, &o);
        w.apply(&a, evicted);
        s = next;
    }
    assert_eq!(s.domains[0].step, Step::HealthCheck, "{}", s.waiting);
    assert!(!is_cordoned(w.node_mut("a1")));
    let a2 = w.node_mut("a2").clone();
    assert!(is_cordoned(&a2), "the admin's cordon stays");
    assert!(
        !a2.metadata
            .labels
            .unwrap_or_default()
            .contains_key(UPGRADE_LABEL),
        "the upgrade label goes"
    );
}

/// An outdated node that joins the selection after the plan is not drained by this rollout; it
/// completes naming it, rather than claiming every outdated node is done.
#[test]
fn a_rollout_completes_naming_an_outdated_node_that_joined_after_its_plan() {
    let o = generation_options(Handoff::None);
    let mut w = World::new();
    w.pods.clear();
    with_generations(&mut w);
    let mut s = w.start(&o);
    w.nodes.push(node("c1", "c").ready().label("gen", "1"));
    let mut reported = Vec::new();
    for _ in 0..20 {
        let (next, a) = w.step(&s, &o);
        reported.extend(reasons(&a));
        w.apply(&a, evicted);
        s = next;
        if s.phase == Phase::Completed {
            break;
        }
        w.advance(31);
    }
    assert_eq!(s.phase, Phase::Completed, "{}", s.waiting);
    assert_eq!(s.joined, ["c1"]);
    assert!(reported.contains(&"OutdatedNodesJoined"), "{reported:?}");
    let status = crate::drain::rollout::status(None, &s, Some(1), w.now);
    let complete = status.conditions.iter().find(|c| c.type_ == "Complete");
    assert_eq!(
        complete.map(|c| c.reason.as_str()),
        Some("CompletedWithNodesLeft")
    );
}
