//! Other NodeRollouts: at most `maxUnavailableDomains` upgrade domains, of any rollout, disrupt
//! one workload (budget) at a time.

use super::*;

/// This rollout is `mine`; the World's budget `ns/leaders` also selects leader `gx-0`, which runs
/// on node x1 of another rollout's pool (x1 is no node of this plan).
fn shared_budget() -> (World, Options) {
    let mut w = World::new();
    w.pods.push(member("gx-0", "x1", "gx", true));
    let o = Options {
        rollout: "mine".into(),
        ..World::options()
    };
    (w, o)
}

/// Another rollout's domain `x` draining node x1 since `since`.
fn draining(rollout: &str, since: Timestamp) -> Disruption {
    Disruption {
        rollout: rollout.into(),
        domain: "x".into(),
        since: Some(since),
        nodes: vec!["x1".into()],
        budgets: BTreeSet::new(),
    }
}

fn blocked(s: &State, w: &World) -> (String, String, String) {
    let status = crate::drain::rollout::status(None, s, Some(1), w.now);
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Blocked")
        .expect("a Blocked condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

/// Another rollout drains a domain holding a pod of the same budget since a minute ago: this
/// rollout's first domain, whose nodes hold that budget's pods too, is not started (nothing
/// cordoned), shows why, and starts once the other domain is through.
#[test]
fn a_domain_is_not_started_while_another_rollout_s_domain_disrupts_the_same_budget() {
    let (mut w, o) = shared_budget();
    w.elsewhere = vec![draining("other", w.now - secs(60))];
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    assert!(cordons(&a).is_empty(), "{a:?}");
    assert_eq!(s.domains[0].step, Step::Pending);
    assert!(reasons(&a).contains(&"OtherRolloutDisrupting"), "{a:?}");
    let (status, reason, message) = blocked(&s, &w);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "OtherRolloutDisrupting")
    );
    for says in [
        "upgrade domain a",
        "PodDisruptionBudget ns/leaders is disrupted by NodeRollout other's upgrade domain x",
        "at most 1 upgrade domain(s)",
    ] {
        assert!(message.contains(says), "{message}");
    }
    assert!(s.waiting.contains("not started"), "{}", s.waiting);
    // the same hold is not announced again
    w.advance(5);
    let (s, a) = w.step(&s, &o);
    assert!(!reasons(&a).contains(&"OtherRolloutDisrupting"), "{a:?}");
    // the other domain is through its health check: this one starts
    w.elsewhere.clear();
    let (s, a) = w.step(&s, &o);
    assert_eq!(cordons(&a), ["a1", "a2"]);
    assert_eq!(s.domains[0].step, Step::Draining);
    assert!(s.domains[0].hold.is_none());
    assert_eq!(blocked(&s, &w).0, "False");
}

/// Both rollouts started their domains at the same time (neither saw the other): the order is
/// by rollout name, so exactly one of them evicts the budget's pods.
#[test]
fn two_domains_started_at_once_over_one_budget_evict_in_rollout_name_order() {
    for (other, held) in [("another", true), ("zeta", false)] {
        let (mut w, o) = shared_budget();
        let s = w.start(&o);
        let (s, a) = w.step(&s, &o);
        w.apply(&a, evicted);
        w.elsewhere = vec![draining(other, t0())];
        let (s, a) = w.step(&s, &o);
        if held {
            assert!(evictions(&a).is_empty(), "{other}: {a:?}");
            let hold = s.domains[0].hold.clone().expect("held");
            assert_eq!(hold.reason, "OtherRolloutDisrupting");
            assert!(
                hold.message
                    .contains("NodeRollout another's upgrade domain x")
                    && hold.message.contains("evicting ns/ga-0 waits"),
                "{}",
                hold.message
            );
            assert!(reasons(&a).contains(&"OtherRolloutDisrupting"));
            assert_eq!(blocked(&s, &w).1, "OtherRolloutDisrupting");
        } else {
            assert_eq!(evictions(&a), ["ga-0"], "{other} comes after mine");
            assert!(s.domains[0].hold.is_none());
        }
    }
}

/// The other rollout's domain is in its health check: its nodes are drained, but it evicted a pod
/// the budget protected, so the budget's workload is still disrupted by it.
#[test]
fn a_domain_in_its_health_check_still_disrupts_the_budgets_it_evicted_from() {
    let (mut w, o) = shared_budget();
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    let gate = Disruption {
        nodes: Vec::new(),
        budgets: BTreeSet::from(["ns/leaders".to_string()]),
        ..draining("other", t0() - secs(300))
    };
    w.elsewhere = vec![gate.clone()];
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty(), "{a:?}");
    assert_eq!(
        s.domains[0].hold.as_ref().unwrap().reason,
        "OtherRolloutDisrupting"
    );
    // a budget it never touched holds nothing
    w.elsewhere = vec![Disruption {
        budgets: BTreeSet::from(["ns/other".to_string()]),
        ..gate
    }];
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    assert!(s.domains[0].hold.is_none());
}

/// `maxUnavailableDomains: 2`: one other domain disrupting the budget leaves room for this one.
#[test]
fn max_unavailable_domains_is_the_number_of_domains_one_workload_may_have_disrupted() {
    let (mut w, o) = shared_budget();
    let o = Options {
        max_unavailable_domains: 2,
        ..o
    };
    w.elsewhere = vec![draining("other", w.now - secs(60))];
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    // domain a is the second domain of ns/leaders; domain b would be the third
    assert_eq!(cordons(&a), ["a1", "a2"]);
    assert_eq!(s.domains[1].step, Step::Pending);
    let hold = s.domains[1].hold.clone().expect("domain b held");
    assert_eq!(hold.reason, "OtherRolloutDisrupting");
    assert!(
        hold.message
            .contains("NodeRollout other's upgrade domain x")
            && hold.message.contains("at most 2 upgrade domain(s)"),
        "{}",
        hold.message
    );
    w.apply(&a, evicted);
    let (_, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
}

/// What a rollout's state tells the others: its domains between cordon and the end of their
/// health check, the nodes of those that drain, the budgets they evicted from.
#[test]
fn a_state_s_disruptions_are_its_domains_in_progress() {
    let (mut w, o) = shared_budget();
    let s = drain_domain_a(&mut w, &o);
    let d = s.disruptions("mine");
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].rollout.as_str(), d[0].domain.as_str()), ("mine", "a"));
    assert_eq!(d[0].since, Some(t0()));
    assert!(
        d[0].nodes.is_empty(),
        "drained: no pods left to disrupt there"
    );
    assert_eq!(d[0].budgets, BTreeSet::from(["ns/leaders".to_string()]));
    let mut draining = s.clone();
    draining.domains[0].step = Step::Draining;
    assert_eq!(draining.disruptions("mine")[0].nodes, ["a1", "a2"]);
    let mut done = s.clone();
    done.phase = Phase::Completed;
    assert!(done.disruptions("mine").is_empty());
    // a resume moves the domain's timers, not its place in the order
    let mut resumed = s;
    resumed.domains[0].started = Some(t0() + secs(600));
    assert_eq!(resumed.disruptions("mine")[0].since, Some(t0()));
}
