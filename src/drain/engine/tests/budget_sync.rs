//! A budget whose status never catches up with its spec: the refusal it answers with is named
//! for what it is after a bounded wait, and the drain timeout bounds the domain.

use super::*;

/// The Eviction API's answer for a budget whose `observedGeneration` lags (`eviction.go`'s
/// `createTooManyRequestsError`).
fn still_processing(_: &EvictTarget) -> EvictionResult {
    EvictionResult::TooManyRequests {
        message: "The disruption budget leaders is still being processed by the server.".into(),
        retry_after: Some(secs(10)),
    }
}

/// The budget was edited (generation 2) and the disruption controller fails on it, so its
/// status stays at generation 1: the domain's first protected eviction is refused, and after
/// `BUDGET_SYNC_WAIT` the rollout is `Blocked=True` as `BudgetNotSynced`, naming the budget, the
/// generations and the controller's message, with one Warning Event; once the budget syncs the
/// domain evicts; and the drain timeout ends the wait if it never does.
#[test]
fn a_refusing_budget_that_never_syncs_is_named_after_a_bounded_wait() {
    let mut w = World::new();
    w.pdbs[0].metadata.generation = Some(2);
    w.pdbs[0] = w.pdbs[0]
        .clone()
        .sync_failed("rayclusters.ray.io does not implement the scale subresource");
    let o = Options {
        drain_timeout: Some(secs(600)),
        ..World::options()
    };
    let blocked = |s: &State, w: &World| {
        let status = crate::drain::rollout::status(None, s, Some(1), w.now);
        let c = status.conditions.into_iter().find(|c| c.type_ == "Blocked");
        c.map(|c| (c.reason, c.message)).unwrap_or_default()
    };
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    w.apply(&a, still_processing);
    let (s, _) = w.step(&s, &o);
    assert_eq!(blocked(&s, &w).0, "EvictionRefused");
    w.advance(59);
    let (s, a) = w.step(&s, &o);
    assert_eq!(blocked(&s, &w).0, "EvictionRefused", "within the wait");
    assert!(!reasons(&a).contains(&"BudgetNotSynced"));
    w.advance(1);
    let (s, a) = w.step(&s, &o);
    let (reason, message) = blocked(&s, &w);
    assert_eq!(reason, "BudgetNotSynced");
    for says in [
        "upgrade domain a",
        "PodDisruptionBudget ns/leaders has not synced for over 1m0s",
        "its status is at generation 1 of 2",
        "SyncFailed: rayclusters.ray.io does not implement the scale subresource",
        "up to its drain timeout (10m0s)",
    ] {
        assert!(message.contains(says), "{message}");
    }
    assert!(reasons(&a).contains(&"BudgetNotSynced"), "{a:?}");
    w.advance(5);
    let (s, a) = w.step(&s, &o);
    assert!(!reasons(&a).contains(&"BudgetNotSynced"), "announced once");
    // never synced: the drain timeout pauses the rollout, saying why
    let obs = Observation {
        nodes: &w.nodes,
        pods: &w.pods,
        pdbs: &w.pdbs,
        daemon_sets: None,
        outcomes: &[],
        resumes: w.resumes,
        abort: false,
        elsewhere: &[],
        services: &[],
    };
    let (paused, _) = decide(&s, &obs, w.now + secs(600), &o);
    let Phase::Paused { reason } = &paused.phase else {
        panic!("not paused: {:?}", paused.phase);
    };
    assert!(reason.contains("has not synced"), "{reason}");
    // the budget syncs: the refusal lifts and the domain evicts
    w.pdbs[0] = pdb("ns/leaders", &[("role", "leader")]).observed(2, 1);
    w.pdbs[0].metadata.generation = Some(2);
    w.pdbs[0].status.as_mut().unwrap().observed_generation = Some(2);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    assert!(s.domains[0].hold.is_none());
    assert_eq!(blocked(&s, &w).0, "NotBlocked");
}
