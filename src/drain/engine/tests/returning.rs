//! Pods that tolerate the cordon: evicted once, a replacement scheduled back onto the cordoned
//! node left alone.

use k8s_openapi::api::core::v1::Toleration;

use super::*;

/// A pod tolerating every taint (`operator: Exists`, no key), as a node agent run by a
/// Deployment often is.
fn tolerates_all(name: &str, node: &str) -> Pod {
    let mut p = pod(&format!("ns/{name}"), node)
        .uid(&format!("uid-{name}"))
        .ready();
    p.spec.get_or_insert_default().tolerations = Some(vec![Toleration {
        operator: Some("Exists".into()),
        ..Toleration::default()
    }]);
    p
}

/// Domain a holds `agent` (on a2), which tolerates every taint: the drain evicts it with phase
/// 2; its controller's replacement is scheduled back onto a2 (the cordon does not keep it away).
/// The replacement is not evicted again and the domain does not wait for it: it is drained,
/// with a Warning Event naming the pod.
#[test]
fn a_replacement_scheduled_back_onto_a_cordoned_node_is_left_alone_not_evicted_again() {
    let mut w = World::new();
    w.pods.push(tolerates_all("agent", "a2"));
    let o = World::options();
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    assert_eq!(
        s.domains[0].tolerating,
        Some(BTreeSet::from(["uid-agent".to_string()])),
        "taken when the domain starts"
    );
    w.apply(&a, evicted);
    let (s, a) = w.step(&s, &o);
    assert_eq!(evictions(&a), ["ga-0"]);
    w.apply(&a, evicted);
    w.terminate();
    let (s, a) = w.step(&s, &o);
    assert_eq!(
        evictions(&a),
        ["agent", "ga-1", "web"],
        "the first one is evicted"
    );
    w.apply(&a, evicted);
    w.terminate();
    // the ReplicaSet's replacement lands on the cordoned node again
    w.pods.push(tolerates_all("agent-x7k2p", "a2"));
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty(), "evicted again: {a:?}");
    assert_ne!(
        s.domains[0].step,
        Step::Draining,
        "{}",
        s.domains[0].message
    );
    assert!(reasons(&a).contains(&"PodReturned"), "{a:?}");
    assert!(reasons(&a).contains(&"DomainDrained"), "{a:?}");
    assert_eq!(
        s.domains[0].returned,
        BTreeSet::from(["ns/agent-x7k2p".to_string()])
    );
    // announced once
    w.advance(1);
    let (_, a) = w.step(&s, &o);
    assert!(!reasons(&a).contains(&"PodReturned"), "{a:?}");
}

/// A pod that tolerates only some taint (not the cordon) is no such pod: a new one on the
/// domain's node (bound there directly) is drained like any other.
#[test]
fn a_pod_that_does_not_tolerate_the_cordon_is_drained_whenever_it_appears() {
    let mut w = World::new();
    let o = World::options();
    let s = w.start(&o);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    let mut late = tolerates_all("late", "a2");
    late.spec.get_or_insert_default().tolerations = Some(vec![Toleration {
        key: Some("nvidia.com/gpu".into()),
        operator: Some("Exists".into()),
        ..Toleration::default()
    }]);
    w.pods.push(late);
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    w.terminate();
    let (_, a) = w.step(&s, &o);
    assert!(evictions(&a).contains(&"late".to_string()), "{a:?}");
}
