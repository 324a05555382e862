//! The engine's own guard in front of the Eviction API: groups counted from their members, a
//! member's eviction as its group's disruption, the stable window before a domain's first
//! protected eviction, re-plan errors and throttling.

use super::*;

fn not_ready(w: &mut World, name: &str) {
    let p = w
        .pods
        .iter_mut()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap();
    *p = p.clone().condition("Ready", "False");
}

fn set_ready(w: &mut World, name: &str) {
    let p = w
        .pods
        .iter_mut()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap();
    *p = p.clone().ready();
}

/// Cordons domain a and lets the cordon show.
fn cordoned(w: &mut World, o: &Options) -> State {
    let s = w.start(o);
    let (s, a) = w.step(&s, o);
    assert_eq!(cordons(&a), ["a1", "a2"]);
    w.apply(&a, evicted);
    s
}

/// The budget still counts gb healthy (its leader is Ready: the leader's probe has not caught
/// up), but gb's worker is not Ready: evicting ga's leader would leave no group available under
/// a floor of one.
#[test]
fn a_protected_eviction_waits_while_another_group_s_members_are_not_ready_though_its_representative_is()
 {
    let mut w = World::new();
    let o = World::options();
    let s = cordoned(&mut w, &o);
    not_ready(&mut w, "gb-1");
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty(), "{a:?}");
    let hold = s.domains[0].hold.clone().expect("held");
    assert_eq!(hold.reason, "GroupsUnavailable");
    assert!(
        hold.message.contains("ns/leaders has 1 group(s) available")
            && hold.message.contains("floor of 1")
            && hold
                .message
                .contains("Ready representatives, members not all Ready: gb"),
        "{}",
        hold.message
    );
    assert!(reasons(&a).contains(&"GroupsUnavailable"));
    assert!(s.waiting.contains("holding"), "{}", s.waiting);
    // the same hold again is not announced again
    let (s, a) = w.step(&s, &o);
    assert!(!reasons(&a).contains(&"GroupsUnavailable"));
    // the NodeRollout says why it is blocked
    let status = crate::drain::rollout::status(None, &s, Some(1), w.now);
    let blocked = status.conditions.iter().find(|c| c.type_ == "Blocked");
    assert_eq!(
        blocked.map(|c| c.reason.as_str()),
        Some("GroupsUnavailable")
    );
    set_ready(&mut w, "gb-1");
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    assert!(s.domains[0].hold.is_none());
}

/// Two groups in the domain and a budget that allows two disruptions: one step sends only as
/// many protected evictions as the groups counted from their members allow.
#[test]
fn one_step_never_sends_more_protected_evictions_than_the_members_allow() {
    let mut w = World::new();
    w.pods.push(member("gc-0", "a1", "gc", true));
    w.pods.push(member("gc-1", "a1", "gc", false));
    w.pdbs = vec![pdb("ns/leaders", &[("role", "leader")]).observed(3, 1)];
    let o = World::options();
    let s = cordoned(&mut w, &o);
    // all three available: both leaders go (3 → 1, the floor)
    let (_, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0", "gc-0"]);
    // gb's worker down: only one may go (2 → 1)
    not_ready(&mut w, "gb-1");
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    assert_eq!(
        s.domains[0].hold.as_ref().map(|h| h.reason.as_str()),
        Some("GroupsUnavailable")
    );
    // the accepted one still shows running in the stores: it is counted as gone already
    w.apply(&a, |_| EvictionResult::Evicted);
    for p in &mut w.pods {
        p.metadata.deletion_timestamp = None;
    }
    let (_, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty(), "{a:?}");
}

/// A broken contract: ga's leader (protected) runs in domain b, its worker in domain a. The
/// worker has no budget of its own, and evicting it disrupts ga: the domain evicts ga's leader
/// first, through the Eviction API, then the worker, so ga moves whole, disrupted once.
#[test]
fn a_split_group_s_representative_elsewhere_goes_first_then_its_member() {
    let mut w = World::new();
    w.pods[0] = member("ga-0", "b1", "ga", true);
    let o = World::options();
    let s = cordoned(&mut w, &o);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["web", "ga-0"], "ga-1 waits for its leader");
    let leader = a.iter().find_map(|a| match a {
        Action::Evict { target, .. } if target.pod.name == "ga-0" => Some(target.clone()),
        _ => None,
    });
    assert_eq!(
        leader.and_then(|t| t.pdb),
        Some("ns/leaders".to_string()),
        "through its budget"
    );
    w.apply(&a, evicted);
    let (s, a) = w.step(&s, &o);
    assert_eq!(
        evictions(&a),
        ["ga-1"],
        "the leader went: its worker follows"
    );
    w.apply(&a, evicted);
    w.terminate();
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].hold.is_none(), "{:?}", s.domains[0].hold);
}

/// The representative elsewhere goes only with its budget's consent, counted from members: with
/// gb's worker not Ready and a floor of 1, evicting ga's leader would leave no group available.
#[test]
fn a_split_group_s_representative_waits_for_the_floor_and_its_member_holds_visibly() {
    let mut w = World::new();
    w.pods[0] = member("ga-0", "b1", "ga", true);
    let o = World::options();
    let s = cordoned(&mut w, &o);
    not_ready(&mut w, "gb-1");
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["web"], "{a:?}");
    let hold = s.domains[0].hold.clone().expect("held");
    assert_eq!(hold.reason, "GroupsUnavailable", "{}", hold.message);
    assert!(hold.message.contains("ns/ga-0"), "{}", hold.message);
    w.apply(&a, evicted);
    w.terminate();
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    assert_eq!(s.domains[0].step, Step::Draining, "never handed off");
    let status = crate::drain::rollout::status(None, &s, Some(1), w.now);
    let blocked = status.conditions.iter().find(|c| c.type_ == "Blocked");
    assert_eq!(
        blocked.map(|c| c.reason.as_str()),
        Some("GroupsUnavailable")
    );
    set_ready(&mut w, "gb-1");
    let (_, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
}

/// The member goes once its group's representative was evicted through the Eviction API.
#[test]
fn a_member_goes_once_its_representative_was_evicted_in_the_domain() {
    let mut w = World::new();
    let o = World::options();
    let s = cordoned(&mut w, &o);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    w.apply(&a, evicted);
    w.terminate();
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-1", "web"]);
    assert!(s.domains[0].hold.is_none());
}

fn windowed() -> Options {
    Options {
        eviction_window: None,
        ..World::options()
    }
}

#[test]
fn the_first_protected_eviction_of_a_domain_waits_the_stable_window_and_a_drop_restarts_it() {
    let mut w = World::new();
    let o = windowed();
    let s = cordoned(&mut w, &o);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    assert!(
        s.domains[0].message.contains("stable window"),
        "{}",
        s.domains[0].message
    );
    // gb's worker drops and comes back: the window starts again at the drop
    w.advance(20);
    not_ready(&mut w, "gb-1");
    let (s, _) = w.step(&s, &o);
    w.advance(5);
    set_ready(&mut w, "gb-1");
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    w.advance(5);
    let (s, a) = w.step(&s, &o);
    assert!(
        evictions(&a).is_empty(),
        "30 s after the start, 10 s after the drop"
    );
    w.advance(20);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"], "30 s after the drop");
    // later protected evictions of the domain do not wait again
    assert!(s.memory.windowed.contains("a"));
}

#[test]
fn a_restarted_engine_waits_the_window_again() {
    let mut w = World::new();
    let o = windowed();
    let s = cordoned(&mut w, &o);
    let (s, _) = w.step(&s, &o);
    w.advance(29);
    let (s, _) = w.step(&s, &o);
    // the caller restarts: the state comes back from its stored JSON, the window does not
    let stored: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    w.advance(1);
    let (s, a) = w.step(&stored, &o);
    assert!(evictions(&a).is_empty(), "the restart restarted the window");
    w.advance(30);
    let (_, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
}

#[test]
fn a_refusal_lifting_restarts_the_window() {
    let mut w = World::new();
    w.pods.push(member("gc-0", "a1", "gc", true));
    w.pods.push(member("gc-1", "a1", "gc", false));
    w.pdbs = vec![pdb("ns/leaders", &[("role", "leader")]).observed(3, 1)];
    let o = windowed();
    let s = cordoned(&mut w, &o);
    w.advance(30);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0", "gc-0"]);
    w.apply(&a, |t| match t.pod.name.as_str() {
        "ga-0" => EvictionResult::Evicted,
        _ => EvictionResult::TooManyRequests {
            message: "The disruption budget leaders needs 1 healthy pods and has 1 currently"
                .into(),
            retry_after: None,
        },
    });
    w.terminate();
    w.set_healthy(2, 1);
    let (s, a) = w.step(&s, &o);
    assert!(reasons(&a).contains(&"EvictionResumed"));
    assert!(evictions(&a).is_empty(), "the window starts again");
    w.advance(30);
    let (_, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["gc-0"]);
}

/// Issue #29 item 5: a node of the draining domain moved to another domain holds the domain
/// (visibly, naming the node and the label) until the label is back, then the drain goes on.
#[test]
fn a_node_whose_domain_label_changed_holds_the_domain_naming_it_until_restored() {
    let mut w = World::new();
    let o = World::options();
    let s = cordoned(&mut w, &o);
    let label = |w: &mut World, value: &str| {
        w.node_mut("a2")
            .metadata
            .labels
            .get_or_insert_default()
            .insert(UD.into(), value.into());
    };
    label(&mut w, "b");
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    assert!(matches!(s.phase, Phase::Running), "{:?}", s.phase);
    let hold = s.domains[0].hold.clone().expect("held");
    assert_eq!(hold.reason, "DomainLabelChanged");
    assert!(
        hold.message.contains("a2") && hold.message.contains(&format!("{UD}=b")),
        "{}",
        hold.message
    );
    assert!(reasons(&a).contains(&"DomainLabelChanged"));
    let status = crate::drain::rollout::status(None, &s, Some(1), w.now);
    let blocked = status.conditions.iter().find(|c| c.type_ == "Blocked");
    assert_eq!(
        blocked.map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("True", "DomainLabelChanged"))
    );
    // still held a step later, without a second Event
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty() && !reasons(&a).contains(&"DomainLabelChanged"));
    label(&mut w, "a");
    let (s, a) = w.step(&s, &o);
    assert!(!evictions(&a).is_empty(), "the drain goes on: {a:?}");
    assert!(s.domains[0].hold.is_none(), "{:?}", s.domains[0].hold);
}

#[test]
fn a_node_that_lost_its_domain_label_holds_the_domain_and_is_never_handed_off() {
    let mut w = World::new();
    with_generations(&mut w);
    let o = generation_options(Handoff::reboot());
    let mut s = w.start(&o);
    for _ in 0..3 {
        let (next, a) = w.step(&s, &o);
        w.apply(&a, evicted);
        s = next;
    }
    w.node_mut("a2")
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(UD);
    for _ in 0..3 {
        let (next, a) = w.step(&s, &o);
        assert!(
            !a.iter()
                .any(|a| matches!(a, Action::LabelForUpgrade { .. })),
            "{a:?}"
        );
        s = next;
    }
    let hold = s.domains[0].hold.clone().expect("held");
    assert_eq!(hold.reason, "DomainLabelChanged");
    assert!(
        hold.message.contains("a2") && hold.message.contains(UD),
        "{}",
        hold.message
    );
    assert_eq!(s.domains[0].step, Step::Draining);
}

/// The hold is bounded: past the drain timeout the failure action decides.
#[test]
fn a_domain_held_over_a_changed_label_meets_the_failure_action_at_the_drain_timeout() {
    let mut w = World::new();
    let o = Options {
        drain_timeout: Some(SignedDuration::from_mins(30)),
        ..World::options()
    };
    let s = cordoned(&mut w, &o);
    w.node_mut("a2")
        .metadata
        .labels
        .get_or_insert_default()
        .insert(UD.into(), "b".into());
    let (s, _) = w.step(&s, &o);
    w.advance(31 * 60);
    let (s, _) = w.step(&s, &o);
    // the default failure action pauses the rollout
    let Phase::Paused { reason } = &s.phase else {
        panic!("not paused: {:?}", s.phase);
    };
    assert!(
        reason.contains("drainTimeout") && reason.contains("a2"),
        "{reason}"
    );
}

#[test]
fn a_throttled_eviction_waits_its_retry_after_and_blames_no_budget() {
    let mut w = World::new();
    let o = World::options();
    let s = cordoned(&mut w, &o);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    w.apply(&a, |_| EvictionResult::Throttled {
        retry_after: Some(secs(5)),
    });
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    assert!(s.domains[0].refusal.is_none(), "no budget refused");
    assert!(reasons(&a).contains(&"EvictionThrottled"));
    assert!(!reasons(&a).contains(&"EvictionRefused"));
    assert!(s.waiting.contains("throttles"), "{}", s.waiting);
    w.advance(4);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    w.advance(1);
    let (_, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
}

/// The budget's status says every group is back, but counted from their members none is: the
/// gate waits (the status lags the members by the representatives' probes).
#[test]
fn the_health_check_counts_a_budget_s_groups_from_their_members_too() {
    let mut w = World::new();
    let o = World::options();
    let s = drain_domain_a(&mut w, &o);
    ga_recovers(&mut w);
    not_ready(&mut w, "gb-1");
    let ga_worker = w
        .pods
        .iter()
        .position(|p| p.metadata.name.as_deref() == Some("ga-1"))
        .unwrap();
    let mut p = w.pods[ga_worker].clone();
    p.status.get_or_insert_default().conditions = None;
    w.pods[ga_worker] = p;
    let (s, _) = w.step(&s, &o);
    assert!(
        s.waiting
            .contains("ns/leaders has 0 group(s) available counted from their members"),
        "{}",
        s.waiting
    );
    set_ready(&mut w, "gb-1");
    set_ready(&mut w, "ga-1");
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].health.healthy_since.is_some(), "{}", s.waiting);
}

/// A 403 (or a 500 for a pod under two budgets, a 422) is no budget's refusal and no throttling:
/// the domain retries it and shows it as its block until an eviction succeeds.
#[test]
fn an_eviction_failing_other_than_with_a_429_blocks_the_domain_visibly_until_one_succeeds() {
    let mut w = World::new();
    let o = World::options();
    let s = cordoned(&mut w, &o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, |_| EvictionResult::Failed {
        code: 403,
        message: "pods \"ga-0\" is forbidden".into(),
    });
    let (s, a) = w.step(&s, &o);
    assert!(reasons(&a).contains(&"EvictionFailed"));
    let status = crate::drain::rollout::status(None, &s, Some(1), w.now);
    let blocked = status.conditions.iter().find(|c| c.type_ == "Blocked");
    assert_eq!(
        blocked.map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("True", "EvictionFailed"))
    );
    assert!(blocked.is_some_and(|c| c.message.contains("(403)")));
    w.advance(5);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"], "retried");
    w.apply(&a, evicted);
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].failed.is_none());
    let status = crate::drain::rollout::status(None, &s, Some(1), w.now);
    let blocked = status.conditions.iter().find(|c| c.type_ == "Blocked");
    assert_eq!(blocked.map(|c| c.status.as_str()), Some("False"));
}

/// A hold that never lifts is bounded: past the drain timeout (30 minutes by default, the
/// managed node pools') the failure action decides, with the hold's reason in the pause.
#[test]
fn a_domain_held_past_its_drain_timeout_pauses_the_rollout_with_the_reason() {
    let mut w = World::new();
    let o = Options {
        drain_timeout: Options::default().drain_timeout,
        ..World::options()
    };
    assert_eq!(o.drain_timeout, Some(SignedDuration::from_mins(30)));
    let s = cordoned(&mut w, &o);
    not_ready(&mut w, "gb-1");
    let (s, _) = w.step(&s, &o);
    w.advance(29 * 60);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.phase, Phase::Running);
    w.advance(60);
    let (s, a) = w.step(&s, &o);
    let Phase::Paused { reason } = &s.phase else {
        panic!("not paused: {:?}", s.phase);
    };
    assert!(
        reason.contains("not drained within its timeout (drainTimeout 30m0s)")
            && reason.contains("GroupsUnavailable") | reason.contains("holding"),
        "{reason}"
    );
    assert!(reasons(&a).contains(&"RolloutPaused"));
    let status = crate::drain::rollout::status(None, &s, Some(1), w.now);
    let failed = status.conditions.iter().find(|c| c.type_ == "Progressing");
    assert_eq!(failed.map(|c| c.reason.as_str()), Some("PausedOnFailure"));
}

/// Pods evicted from a node that then stops reporting (Ready `Unknown`) never finish
/// terminating: the domain shows why it waits (`UnreachableNode`), and after Cluster API's five
/// minutes goes on without them instead of stalling.
#[test]
fn pods_terminating_on_an_unreachable_node_are_waited_for_five_minutes_then_left() {
    let mut w = World::new();
    let o = World::options();
    let s = cordoned(&mut w, &o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    w.terminate();
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-1", "web"]);
    w.apply(&a, evicted);
    *w.node_mut("a2") = w.node_mut("a2").clone().condition("Ready", "Unknown");
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty());
    assert_eq!(s.domains[0].step, Step::Draining);
    let hold = s.domains[0].hold.clone().expect("held");
    assert_eq!(hold.reason, "UnreachableNode");
    assert!(hold.message.contains("ns/ga-1 on a2"), "{}", hold.message);
    assert!(reasons(&a).contains(&"UnreachableNode"));
    w.advance(4 * 60);
    let (s, a) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::Draining);
    assert!(!reasons(&a).contains(&"UnreachableNode"), "announced once");
    w.advance(60);
    let (s, _) = w.step(&s, &o);
    assert_ne!(s.domains[0].step, Step::Draining, "{}", s.waiting);
    assert!(s.domains[0].hold.is_none());
}

/// A restart in the middle of a domain's stable period starts the period again: the time the
/// controller was down is no evidence that the domain stayed healthy.
#[test]
fn a_restart_during_the_stable_period_starts_it_again() {
    let mut w = World::new();
    let o = World::options();
    let s = drain_domain_a(&mut w, &o);
    ga_recovers(&mut w);
    let (s, _) = w.step(&s, &o);
    let since = s.domains[0].health.healthy_since.expect("healthy");
    w.advance(20);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].health.healthy_since, Some(since));
    // stored, then read by a new controller 20 s later
    let stored: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    w.advance(20);
    let (s, a) = w.step(&stored, &o);
    assert!(
        cordons(&a).is_empty(),
        "40 s since healthy, but not watched"
    );
    assert_eq!(s.domains[0].health.healthy_since, Some(w.now), "restarted");
    w.advance(30);
    let (_, a) = w.step(&s, &o);
    assert_eq!(cordons(&a), ["b1"], "30 s watched after the restart");
}
