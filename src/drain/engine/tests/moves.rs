//! RayServices moved off a domain before it drains: the ask, the wait for KubeRay's new cluster
//! and its switch, the old cluster's pods leaving, the held move both ways, the domain order.

use super::*;

/// A Ray pod of `cluster` (KubeRay's labels), Ready.
fn ray_pod(name: &str, node: &str, cluster: &str, head: bool) -> Pod {
    let kind = if head { "head" } else { "worker" };
    pod(&format!("ns/{name}"), node)
        .label("ray.io/cluster", cluster)
        .label("ray.io/node-type", kind)
        .label("ray.io/serve", "true")
        .uid(&format!("uid-{name}"))
        .ready()
}

/// The reasons of the Events on RayService ns/llm.
fn told(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ReportService {
                namespace,
                service,
                reason,
                ..
            } if namespace == "ns" && service == "llm" => Some(*reason),
            _ => None,
        })
        .collect()
}

fn service(active: &str, pending: Option<&str>) -> ServiceView {
    ServiceView {
        namespace: "ns".into(),
        name: "llm".into(),
        active: Some(active.into()),
        pending: pending.map(String::from),
        ..ServiceView::default()
    }
}

/// The World with RayService ns/llm serving from cluster llm-a: its head on a1 (domain a), a
/// worker on b1.
fn serving_world() -> World {
    let mut w = World::new();
    w.pods.push(ray_pod("llm-a-head", "a1", "llm-a", true));
    w.pods.push(ray_pod("llm-a-worker", "b1", "llm-a", false));
    w.services = vec![service("llm-a", None)];
    w
}

/// KubeRay started the move's new cluster, and the gate holds it: its slice is short.
fn held_for_quota(w: &mut World) {
    w.services[0].marked = true;
    w.services[0].pending = Some("llm-b".into());
    w.services[0].held =
        Some("slice llm-2 is pending: insufficient quota for nvidia.com/gpu".into());
}

/// Nothing asked, and the domain's first protected pod goes at once.
fn assert_drains_without_a_move(w: &World, a: &[Action]) {
    assert!(
        w.marked.is_empty() && !told(a).contains(&MOVING_RAYSERVICE),
        "{a:?}"
    );
    assert_eq!(evictions(a), ["ga-0"]);
}

fn gone(w: &mut World, prefix: &str) {
    w.pods
        .retain(|p| !p.metadata.name.as_deref().unwrap_or("").starts_with(prefix));
}

fn explicit(order: &[&str]) -> Options {
    let mut o = World::options();
    o.plan.order = DomainOrder::Explicit(order.iter().map(|d| d.to_string()).collect());
    o
}

/// Cordons the first domain and takes the step after: the one that moves.
fn cordoned(w: &mut World, o: &Options) -> (State, Vec<Action>) {
    let s = w.start(o);
    let (s, a) = w.step(&s, o);
    w.apply(&a, evicted);
    w.step(&s, o)
}

/// Domain a holds the service's head: before anything of it is evicted the active cluster is
/// marked (asked again while the mark does not show), the domain waits for the new cluster, for
/// the switch, then for the old cluster's pods to go; only then is its first pod evicted.
#[test]
fn a_serving_cluster_s_head_is_moved_off_the_domain_before_anything_is_evicted() {
    let mut w = serving_world();
    let o = explicit(&["a", "b"]);
    let (s, a) = cordoned(&mut w, &o);
    assert!(evictions(&a).is_empty(), "{a:?}");
    assert!(told(&a).contains(&MOVING_RAYSERVICE), "{a:?}");
    w.apply(&a, evicted);
    assert_eq!(w.marked, ["ns/llm-a"]);
    assert!(
        s.domains[0].message.contains("moving RayService ns/llm"),
        "{}",
        s.domains[0].message
    );
    // the mark did not show: asked again
    let (s, a) = w.step(&s, &o);
    w.apply(&a, evicted);
    assert_eq!(w.marked, ["ns/llm-a", "ns/llm-a"]);
    // KubeRay starts the new cluster
    w.services[0].marked = true;
    w.services[0].pending = Some("llm-b".into());
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty() && w.marked.len() == 2, "{a:?}");
    assert!(
        s.domains[0].message.contains("llm-b is starting"),
        "{}",
        s.domains[0].message
    );
    // it serves: KubeRay switches
    w.pods.push(ray_pod("llm-b-head", "b1", "llm-b", true));
    w.services[0] = service("llm-b", None);
    let (s, a) = w.step(&s, &o);
    assert!(
        evictions(&a).is_empty(),
        "the old cluster is KubeRay's to delete: {a:?}"
    );
    assert!(
        s.domains[0]
            .message
            .contains("delete the old cluster llm-a"),
        "{}",
        s.domains[0].message
    );
    // KubeRay deletes the old cluster after its deletion delay
    gone(&mut w, "llm-a");
    let (s, a) = w.step(&s, &o);
    assert!(told(&a).contains(&RAYSERVICE_MOVED), "{a:?}");
    assert_eq!(evictions(&a), ["ga-0"]);
    assert!(s.domains[0].moves["ns/llm"].done);
}

/// The move's new cluster is held for quota (its slice pending): with the default policy the
/// domain holds (`RayServiceMoveHeld`, a Warning naming the service and the shortfall) and
/// evicts nothing, then the move timeout pauses the rollout.
#[test]
fn a_move_held_for_quota_holds_the_domain_until_the_move_timeout() {
    let mut w = serving_world();
    let o = explicit(&["a", "b"]);
    let (s, a) = cordoned(&mut w, &o);
    w.apply(&a, evicted);
    held_for_quota(&mut w);
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty(), "{a:?}");
    let hold = s.domains[0].hold.clone().expect("held");
    assert_eq!(hold.reason, MOVE_HELD);
    assert!(
        hold.message.contains("ns/llm") && hold.message.contains("insufficient quota"),
        "{hold:?}"
    );
    assert!(reasons(&a).contains(&MOVE_HELD), "{a:?}");
    let (s, a) = w.step(&s, &o);
    assert!(!reasons(&a).contains(&MOVE_HELD), "announced once: {a:?}");
    w.advance(DEFAULT_MOVE_TIMEOUT.as_secs());
    let (s, a) = w.step(&s, &o);
    assert!(evictions(&a).is_empty(), "{a:?}");
    match &s.phase {
        Phase::Paused { reason } => assert!(reason.contains("moveTimeout"), "{reason}"),
        other => panic!("not paused: {other:?}"),
    }
}

/// `whenMoveHeld: Interrupt`: the held move lets the domain drain at once, with a Warning
/// `ServingInterrupted`.
#[test]
fn with_interrupt_a_held_move_lets_the_domain_drain_with_a_warning() {
    let mut w = serving_world();
    let mut o = explicit(&["a", "b"]);
    o.moves.interrupt_when_held = true;
    let (s, a) = cordoned(&mut w, &o);
    w.apply(&a, evicted);
    held_for_quota(&mut w);
    let (s, a) = w.step(&s, &o);
    assert!(told(&a).contains(&SERVING_INTERRUPTED), "{a:?}");
    assert_eq!(evictions(&a), ["ga-0"]);
    assert!(s.domains[0].hold.is_none(), "{:?}", s.domains[0].hold);
}

/// A service KubeRay upgrades in place (`upgradeStrategy.type: None`) is not asked to move: the
/// domain holds on it under the default policy.
#[test]
fn a_service_kuberay_will_not_move_is_not_asked_and_holds_the_domain() {
    let mut w = serving_world();
    w.services[0].unmovable = Some("its spec.upgradeStrategy.type is None".into());
    let o = explicit(&["a", "b"]);
    let (s, a) = cordoned(&mut w, &o);
    w.apply(&a, evicted);
    assert!(w.marked.is_empty(), "{a:?}");
    assert!(evictions(&a).is_empty(), "{a:?}");
    assert_eq!(
        s.domains[0].hold.as_ref().map(|h| h.reason.as_str()),
        Some(MOVE_HELD)
    );
}

/// Asked, and KubeRay starts no new cluster within its grace: the move is held, naming why.
#[test]
fn a_move_kuberay_never_starts_is_held_after_its_grace() {
    let mut w = serving_world();
    let o = explicit(&["a", "b"]);
    let (s, a) = cordoned(&mut w, &o);
    w.apply(&a, evicted);
    w.services[0].marked = true;
    let (s, _) = w.step(&s, &o);
    assert!(s.domains[0].hold.is_none());
    w.advance(121);
    let (s, _) = w.step(&s, &o);
    let hold = s.domains[0].hold.clone().expect("held");
    assert!(hold.message.contains("ENABLE_ZERO_DOWNTIME"), "{hold:?}");
}

/// A service that keeps a serving pod outside the domain (and its head too) stays where it is:
/// the domain drains as before.
#[test]
fn a_service_still_serving_outside_the_domain_is_not_moved() {
    let mut w = World::new();
    w.pods.push(ray_pod("llm-a-head", "b1", "llm-a", true));
    w.pods.push(ray_pod("llm-a-worker", "a2", "llm-a", false));
    w.services = vec![service("llm-a", None)];
    let o = explicit(&["a", "b"]);
    let (_, a) = cordoned(&mut w, &o);
    assert_drains_without_a_move(&w, &a);
}

/// While no domain is done (nowhere upgraded to move to), a domain that needs no move starts
/// first; an explicit order is kept as given.
#[test]
fn the_first_domain_is_one_that_needs_no_move_unless_the_order_is_explicit() {
    let mut w = serving_world();
    let o = World::options();
    let s = w.start(&o);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::Pending, "a holds the head");
    assert_eq!(s.domains[1].step, Step::Draining);
    let o = explicit(&["a", "b"]);
    let s = w.start(&o);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.domains[0].step, Step::Draining);
}

/// Moves off: the service's pods are evicted like any other.
#[test]
fn with_moves_off_nothing_is_asked() {
    let mut w = serving_world();
    let mut o = explicit(&["a", "b"]);
    o.moves.enabled = false;
    let (_, a) = cordoned(&mut w, &o);
    assert_drains_without_a_move(&w, &a);
}

/// A multi-host replica with one host in the domain goes whole: its other host, outside the
/// domain, does not keep the service serving, so the service is moved first.
#[test]
fn a_multi_host_replica_with_a_host_in_the_domain_does_not_count_as_serving_elsewhere() {
    let mut w = World::new();
    let host = |name: &str, node: &str| {
        ray_pod(name, node, "llm-a", false).label("ray.io/worker-group-replica-name", "llm-a-gpu-x")
    };
    // KubeRay labels the head serve=false until its proxy is found healthy
    w.pods
        .push(ray_pod("llm-a-head", "b1", "llm-a", true).label("ray.io/serve", "false"));
    w.pods.push(host("llm-a-h0", "a2"));
    w.pods.push(host("llm-a-h1", "b1"));
    w.services = vec![service("llm-a", None)];
    let o = explicit(&["a", "b"]);
    let (_, a) = cordoned(&mut w, &o);
    assert!(told(&a).contains(&MOVING_RAYSERVICE), "{a:?}");
    assert!(evictions(&a).is_empty(), "{a:?}");
}

/// A rollout paused by the move timeout and resumed gives the move a fresh timeout (as the
/// domain's own timers restart), and goes on once the quota lets the new cluster run.
#[test]
fn a_resumed_rollout_gives_a_held_move_a_fresh_timeout() {
    let mut w = serving_world();
    let o = explicit(&["a", "b"]);
    let (s, a) = cordoned(&mut w, &o);
    w.apply(&a, evicted);
    held_for_quota(&mut w);
    let (s, _) = w.step(&s, &o);
    w.advance(DEFAULT_MOVE_TIMEOUT.as_secs());
    let (s, _) = w.step(&s, &o);
    assert!(matches!(s.phase, Phase::Paused { .. }), "{:?}", s.phase);
    w.resumes += 1;
    w.advance(1);
    let (s, _) = w.step(&s, &o);
    assert_eq!(s.phase, Phase::Running, "resumed, not paused again at once");
    assert_eq!(
        s.domains[0].hold.as_ref().map(|h| h.reason.as_str()),
        Some(MOVE_HELD)
    );
}
