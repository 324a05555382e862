//! `raygate rollout get|pause|resume NAME`: the commands' library halves
//! (`raygate::client::rollout`, `raygate::cli::rollout_verbs`) against the simulated cluster with
//! the NodeRollout controller running in-process, on the paused clock.

use std::time::Duration;

use kube::Client;
use raygate::cli::rollout::Ended;
use raygate::cli::rollout::RolloutRequest;
use raygate::cli::rollout_verbs::{exit, view, view_table};
use raygate::client::rollout::{
    VerbError, abort_rollout, create, get, pause_rollout, resume_rollout, watch,
};
use raygate::drain::rollout::RESUME_ANNOTATION;
use raygate::types::rollout::NodeRollout;

#[path = "support/rollout_cluster.rs"]
mod rollout_cluster;
use rollout_cluster::{UD, cluster};

async fn start(client: &Client, manual: bool) {
    let req = RolloutRequest {
        domain_label: UD.into(),
        selector: "pool=old".into(),
        health_check_stable_seconds: Some(0),
        health_check_retry_timeout_seconds: 600,
        max_unavailable_domains: 1,
        manual,
        ..RolloutRequest::default()
    };
    create(client, Some("r"), req.spec().unwrap(), false)
        .await
        .unwrap();
}

/// The rollout once `done` holds of it (at most 10 simulated minutes).
async fn until(client: &Client, done: impl Fn(&NodeRollout) -> bool) -> NodeRollout {
    for _ in 0..600 {
        let o = get(client, "r").await.unwrap();
        if done(&o) {
            return o;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("not reached: {:?}", get(client, "r").await.unwrap().status);
}

fn phase(o: &NodeRollout) -> Option<&str> {
    o.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn annotation(o: &NodeRollout) -> Option<&str> {
    o.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESUME_ANNOTATION))
        .map(String::as_str)
}

#[tokio::test(start_paused = true)]
async fn pause_sets_spec_paused_get_shows_it_and_resume_goes_on_to_completion() {
    let (sim, _stop) = cluster(1).await;
    let client = sim.client();
    start(&client, false).await;
    until(&client, |o| phase(o) == Some("Running")).await;
    let paused = pause_rollout(&client, "r").await.unwrap();
    assert!(paused.spec.paused);
    let o = until(&client, |o| phase(o) == Some("Paused")).await;
    let v = view(&o);
    assert!(v.paused_by_spec && v.paused_by_engine.is_none(), "{v:?}");
    assert_eq!(
        raygate::cli::render(&v, raygate::cli::Output::Name).unwrap(),
        "noderollout.raygate.io/r\n"
    );
    let table = view_table(&v);
    let progressing = o
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    for want in [
        "NodeRollout r\n".to_string(),
        "Phase:     Paused".to_string(),
        "by spec.paused".to_string(),
        format!("Progressing=False PausedBySpec: {}", progressing.message),
        "Ready=True".to_string(),
    ] {
        assert!(table.contains(&want), "{want:?} in\n{table}");
    }
    let done = resume_rollout(&client, "r").await.unwrap();
    assert!(done.unpause_spec && done.bump_to.is_none(), "{done:?}");
    let o = until(&client, |o| phase(o) == Some("Completed")).await;
    assert!(!o.spec.paused);
    assert_eq!(annotation(&o), None, "a spec pause needs no resume counter");
}

#[tokio::test(start_paused = true)]
async fn resume_of_an_engine_pause_bumps_the_counter_each_time_and_the_rollout_goes_on() {
    let (sim, _stop) = cluster(1).await;
    let client = sim.client();
    start(&client, true).await;
    let awaiting = |o: &NodeRollout| view(o).paused_by_engine.is_some();
    let o = until(&client, awaiting).await;
    assert!(view_table(&view(&o)).contains("by the engine (manual mode: upgrade domain ud-a"));
    // paused by both: one resume lifts both
    pause_rollout(&client, "r").await.unwrap();
    let done = resume_rollout(&client, "r").await.unwrap();
    assert_eq!((done.unpause_spec, done.bump_to), (true, Some(1)));
    let o = get(&client, "r").await.unwrap();
    assert_eq!((o.spec.paused, annotation(&o)), (false, Some("1")));
    // the next domain: N to N+1
    let on_b = |o: &NodeRollout| {
        view(o)
            .paused_by_engine
            .is_some_and(|why| why.contains("ud-b"))
    };
    until(&client, on_b).await;
    let done = resume_rollout(&client, "r").await.unwrap();
    assert_eq!((done.unpause_spec, done.bump_to), (false, Some(2)));
    assert_eq!(annotation(&get(&client, "r").await.unwrap()), Some("2"));
    until(&client, |o| phase(o) == Some("Completed")).await;
    // nothing left to resume: nothing written
    let done = resume_rollout(&client, "r").await.unwrap();
    assert!(done.line("r").contains("nothing to resume"), "{done:?}");
}

/// `abort` on a rollout stopped after its first domain (manual mode, then paused by its spec
/// too): the rollout fails as aborted and the next domain is never touched; the drained domain
/// keeps what its hand-off (`None`) left, its node cordoned for the infrastructure (the engine's
/// tests pin that a domain in progress is given back); a second abort has nothing to do.
#[tokio::test(start_paused = true)]
async fn abort_fails_the_rollout_before_its_next_domain() {
    use raygate::types::k8s_openapi::api::core::v1::Node;
    let (sim, _stop) = cluster(1).await;
    let client = sim.client();
    start(&client, true).await;
    until(&client, |o| view(o).paused_by_engine.is_some()).await;
    pause_rollout(&client, "r").await.unwrap();
    assert_eq!(abort_rollout(&client, "r").await.unwrap(), None);
    let o = until(&client, |o| phase(o) == Some("Failed")).await;
    let failed = o
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed");
    assert!(
        failed.is_some_and(|c| c.reason == "AbortedOnRequest" && c.message == "aborted on request"),
        "{:?}",
        o.status
    );
    assert!(!o.spec.paused);
    let nodes = kube::Api::<Node>::all(client.clone());
    let cordoned = |n: &Node| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    assert!(
        cordoned(&nodes.get("n1").await.unwrap()),
        "hand-off None keeps it"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        !cordoned(&nodes.get("n2").await.unwrap()),
        "the next domain is never touched"
    );
    let again = abort_rollout(&client, "r").await.unwrap();
    assert_eq!(again.as_deref(), Some("already failed: nothing to abort"));
}

#[tokio::test(start_paused = true)]
async fn a_missing_rollout_is_not_found_with_its_name_and_exit_code_2() {
    let (sim, _stop) = cluster(1).await;
    let client = sim.client();
    for e in [
        get(&client, "nope").await.unwrap_err(),
        pause_rollout(&client, "nope").await.unwrap_err(),
        resume_rollout(&client, "nope").await.unwrap_err(),
        watch(&client, "nope", |_| {}, std::future::pending())
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(e, VerbError::NotFound { .. }), "{e:?}");
        assert_eq!(e.to_string(), "noderollout \"nope\" not found");
        assert_eq!(e.exit_code(), exit::NOT_FOUND);
        assert_eq!(exit::NOT_FOUND, 2);
    }
}

#[tokio::test(start_paused = true)]
async fn watch_shows_each_change_until_completed_and_an_interrupt_leaves_the_rollout_running() {
    let (sim, _stop) = cluster(1).await;
    let client = sim.client();
    start(&client, true).await;
    // interrupted while the engine waits in manual mode: nothing written, the rollout goes on
    let waiting = |o: &NodeRollout| view(o).paused_by_engine.is_some();
    until(&client, waiting).await;
    let mut seen = vec![];
    let ended = watch(
        &client,
        "r",
        |l| seen.push(l.to_string()),
        tokio::time::sleep(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    assert_eq!(ended, Ended::Interrupted);
    assert_eq!(ended.exit_code(), 130);
    assert_eq!(seen.len(), 1, "one line while nothing changes: {seen:?}");
    let o = get(&client, "r").await.unwrap();
    assert!(!o.spec.paused && annotation(&o).is_none(), "only read");
    // watched to the end: a line per change, then Completed
    let mut seen = vec![];
    let watching = watch(
        &client,
        "r",
        |l| seen.push(l.to_string()),
        std::future::pending(),
    );
    let resuming = async {
        for _ in 0..600 {
            let o = get(&client, "r").await.unwrap();
            if phase(&o) == Some("Completed") {
                return;
            }
            if view(&o).paused_by_engine.is_some() {
                resume_rollout(&client, "r").await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let (ended, ()) = tokio::join!(watching, resuming);
    assert_eq!(ended.unwrap(), Ended::Completed);
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0] != w[1]),
        "only changes: {seen:?}"
    );
    assert!(seen.last().unwrap().starts_with("Completed"), "{seen:?}");
}
