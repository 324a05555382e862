//! The kubelet's steps on the virtual clock: start delay, readiness probes, delegated readiness,
//! graceful termination, node down and reboot.

use super::*;
use k8s_openapi::api::core::v1::Probe;
use raygate_testing::core::{self, PodExt};

/// Pod `ns/name` on node `n` as created (uid `name`, label `g=1`, no owner).
fn admitted(name: &str) -> Pod {
    core::pod(&format!("ns/{name}"), "n")
        .uid(name)
        .label("g", "1")
        .unowned()
        .phase("Pending")
}

/// `p` probed for readiness every `period` s, Ready after `success`, unready after `failure`.
fn probed(mut p: Pod, period: i32, success: i32, failure: i32) -> Arc<Pod> {
    p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Probe {
        period_seconds: Some(period),
        success_threshold: Some(success),
        failure_threshold: Some(failure),
        ..Probe::default()
    });
    Arc::new(p)
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + s).unwrap()
}

fn ready_writes(actions: &[Action]) -> Vec<bool> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Status { patch, .. } => {
                Some(patch["status"]["conditions"][2]["status"] == "True")
            }
            _ => None,
        })
        .collect()
}

/// Runs the kubelet second by second, returning the seconds at which readiness was written.
fn run(
    k: &mut Kubelet,
    pods: &[Arc<Pod>],
    groups: &BTreeMap<(String, String, String), GroupState>,
    from: i64,
    to: i64,
) -> Vec<(i64, bool)> {
    let mut out = vec![];
    for s in from..=to {
        let (a, _) = k.step(true, pods, groups, t(s));
        out.extend(ready_writes(&a).into_iter().map(|r| (s, r)));
    }
    out
}

#[test]
fn a_pod_starts_after_the_delay_and_is_ready_after_period_times_success_threshold() {
    let mut k = Kubelet::new(&Config {
        start_delay: Duration::from_secs(5),
        stop_after: None,
        ..Config::default()
    });
    let p = [probed(admitted("p"), 10, 2, 3)];
    let w = run(&mut k, &p, &BTreeMap::new(), 0, 30);
    // running (not ready) at 5; probes at 15 and 25 → Ready at 25
    assert_eq!(w, [(5, false), (25, true)]);
    let (_, next) = k.step(true, &p, &BTreeMap::new(), t(31));
    assert_eq!(
        next, None,
        "Ready and passing: settled, nothing to wake for"
    );
}

#[test]
fn a_representative_goes_unready_failure_threshold_periods_after_its_group() {
    let mut k = Kubelet::new(&Config {
        start_delay: Duration::ZERO,
        stop_after: None,
        ..Config::default()
    });
    let leader = admitted("leader")
        .annotation(READINESS_GROUP, "g")
        .annotation(READINESS_GROUP_SIZE, "3");
    let rep = [probed(leader, 5, 1, 3)];
    let key = ("ns".to_string(), "g".to_string(), "1".to_string());
    let mut groups = BTreeMap::from([(key.clone(), (2, 2))]);
    assert_eq!(run(&mut k, &rep, &groups, 0, 10), [(0, false), (5, true)]);
    groups.insert(key.clone(), (2, 1));
    // failures at 15, 20, 25 → unready at 25: period × failureThreshold after 10
    assert_eq!(run(&mut k, &rep, &groups, 11, 40), [(25, false)]);
    groups.insert(key.clone(), (2, 2));
    assert_eq!(run(&mut k, &rep, &groups, 41, 50), [(45, true)]);
    // a missing member (the group has fewer than its size) also fails the probe
    groups.insert(key, (1, 1));
    assert_eq!(run(&mut k, &rep, &groups, 51, 70), [(65, false)]);
}

#[test]
fn a_settled_pod_is_not_woken_and_a_change_is_probed_on_its_original_grid() {
    // the kubelet sleeps through probes whose result cannot change anything; when a watch
    // event wakes it, the next probe is still on start + k × period
    let mut k = Kubelet::new(&Config {
        start_delay: Duration::ZERO,
        stop_after: None,
        ..Config::default()
    });
    let leader = admitted("leader").annotation(READINESS_GROUP, "g");
    let rep = [probed(leader, 5, 1, 3)];
    let key = ("ns".to_string(), "g".to_string(), "1".to_string());
    let mut groups = BTreeMap::from([(key.clone(), (2, 2))]);
    k.step(true, &rep, &groups, t(0));
    let (a, next) = k.step(true, &rep, &groups, t(5));
    assert_eq!(ready_writes(&a), [true]);
    assert_eq!(next, None, "settled: nothing to wake for");
    // an event at 52: the group lost a member's readiness
    groups.insert(key, (2, 1));
    let (a, next) = k.step(true, &rep, &groups, t(52));
    assert!(a.is_empty());
    assert_eq!(next, Some(t(55)));
    let mut at = t(55);
    let mut writes = vec![];
    // only at the moments the kubelet asked for
    loop {
        let (a, next) = k.step(true, &rep, &groups, at);
        writes.extend(ready_writes(&a).into_iter().map(|r| (at, r)));
        match next {
            Some(n) => at = n,
            None => break,
        }
    }
    assert_eq!(writes, [(t(65), false)], "failures at 55, 60, 65");
}

#[test]
fn a_deleted_pod_stops_then_is_removed_within_its_grace_period_and_a_down_node_does_nothing() {
    let mut k = Kubelet::new(&Config {
        start_delay: Duration::ZERO,
        stop_after: Some(Duration::from_secs(3)),
        ..Config::default()
    });
    let p = admitted("p");
    let (a, _) = k.step(true, &[Arc::new(p.clone())], &BTreeMap::new(), t(0));
    assert_eq!(ready_writes(&a), [true]);
    let d = [Arc::new(p.deleting_since(t(30)))];
    let (a, next) = k.step(true, &d, &BTreeMap::new(), t(1));
    assert_eq!(ready_writes(&a), [false], "terminating: not ready");
    assert_eq!(next, Some(t(4)));
    // node down: nothing happens, however late
    assert_eq!(k.step(false, &d, &BTreeMap::new(), t(100)), (vec![], None));
    let (a, _) = k.step(true, &d, &BTreeMap::new(), t(101));
    assert!(
        a.iter()
            .any(|a| matches!(a, Action::Delete { name, .. } if name == "p"))
    );
}

/// Conformance with the kubelet's prober (`pkg/kubelet/prober/worker.go`, `doProbe`: "Probe
/// disabled for InitialDelaySeconds": a probe while the container has run less than
/// `initialDelaySeconds` since its `startedAt` is skipped, neither success nor failure): a
/// readiness probe's `initialDelaySeconds` holds a started pod unready that long (a model
/// server loading its weights), then probes on its period count. A restarted container (the
/// node back from a reboot: a new `startedAt`) waits the delay again. Here the first counted
/// probe is one period after the delay (upstream: the first tick of the worker's ticker at or
/// after it, so up to one period earlier).
#[test]
fn initial_delay_seconds_holds_a_started_pod_unready_from_each_container_start() {
    let mut k = Kubelet::new(&Config {
        start_delay: Duration::from_secs(5),
        stop_after: None,
        ..Config::default()
    });
    let p = [Arc::new(
        serde_json::from_value::<Pod>(json!({
            "metadata": {"name": "vllm", "namespace": "ns", "uid": "u1"},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "x",
                "readinessProbe": {"initialDelaySeconds": 90, "periodSeconds": 10,
                    "successThreshold": 1, "failureThreshold": 3}}]}}))
        .unwrap(),
    )];
    let none = BTreeMap::new();
    // running (not ready) at 5; probes at 5 + 90 + 10 = 105, not at 15, 25, ...
    assert_eq!(run(&mut k, &p, &none, 0, 200), [(5, false), (105, true)]);
    // the node reboots at 300 and is back at 400: the container starts again at 405 and
    // waits its initial delay again
    assert_eq!(k.step(false, &p, &none, t(300)), (vec![], None));
    assert_eq!(
        run(&mut k, &p, &none, 400, 600),
        [(405, false), (505, true)]
    );
}
