//! `raygate drain run` over a NodeRollout: the command's library half (`raygate::cli::rollout`:
//! the spec from the flags, create, follow, Ctrl-C pauses) against the simulated cluster with the
//! NodeRollout controller running in-process, on the paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams};
use raygate::cli::rollout::{Ended, RolloutRequest};
use raygate::client::rollout::{create, follow};
use raygate::types::k8s_openapi::api::core::v1::{Node, Pod};
use raygate::types::rollout::NodeRollout;
use tokio::sync::watch;

#[path = "support/rollout_cluster.rs"]
mod rollout_cluster;
use rollout_cluster::{UD, cluster};

fn request() -> RolloutRequest {
    RolloutRequest {
        domain_label: UD.into(),
        selector: "pool=old".into(),
        health_check_stable_seconds: Some(0),
        health_check_retry_timeout_seconds: 600,
        max_unavailable_domains: 1,
        ..RolloutRequest::default()
    }
}

async fn pods(client: &Client) -> usize {
    Api::<Pod>::namespaced(client.clone(), "t")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test(start_paused = true)]
async fn drain_run_creates_a_node_rollout_and_follows_it_line_by_line_to_completion() {
    let (sim, _stop) = cluster(2).await;
    let client = sim.client();
    // each domain stays in its health check for 3 s: the 1 s polls see it in progress
    let mut req = request();
    req.health_check_stable_seconds = Some(3);
    let o = create(&client, None, req.spec().unwrap(), false)
        .await
        .unwrap();
    let name = o.metadata.name.clone().unwrap();
    assert!(name.starts_with("drain-"), "{name}");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = lines.clone();
    let ended = follow(
        &client,
        &name,
        move |l| out.lock().unwrap().push(l.to_string()),
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(ended, Ended::Completed);
    assert_eq!(ended.exit_code(), 0);
    let lines = lines.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Running 0/2 domain ud-a")),
        "{lines:#?}"
    );
    assert!(
        lines.last().unwrap().starts_with("Completed 2/2"),
        "{lines:#?}"
    );
    let mut dedup = lines.clone();
    dedup.dedup();
    assert_eq!(dedup, lines, "a line repeated without a change");
    assert_eq!(pods(&client).await, 0, "every pod drained");
}

#[tokio::test(start_paused = true)]
async fn ctrl_c_pauses_the_rollout_and_exits_130() {
    let (sim, _stop) = cluster(2).await;
    let client = sim.client();
    let spec = request().spec().unwrap();
    create(&client, Some("r"), spec, false).await.unwrap();
    let (running, mut seen) = watch::channel(false);
    let ended = follow(
        &client,
        "r",
        move |l| {
            if l.starts_with("Running") {
                running.send_replace(true);
            }
        },
        async move {
            let _ = seen.wait_for(|r| *r).await;
        },
    )
    .await
    .unwrap();
    assert_eq!(ended, Ended::Interrupted);
    assert_eq!(ended.exit_code(), 130);
    let api = Api::<NodeRollout>::all(client.clone());
    assert!(api.get("r").await.unwrap().spec.paused);
    let mut phase = None;
    for _ in 0..60 {
        phase = api.get("r").await.unwrap().status.and_then(|s| s.phase);
        if phase.as_deref() == Some("Paused") {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(phase.as_deref(), Some("Paused"));
    // it stays paused: ud-b is never started
    tokio::time::sleep(Duration::from_secs(300)).await;
    let n2: Node = Api::all(client.clone()).get("n2").await.unwrap();
    assert_ne!(n2.spec.and_then(|s| s.unschedulable), Some(true));
}

#[tokio::test(start_paused = true)]
async fn an_upgrade_domain_label_no_node_has_is_bad_input_exit_2_and_a_dry_run_stores_nothing() {
    let (sim, _stop) = cluster(2).await;
    let client = sim.client();
    let bad = RolloutRequest {
        domain_label: "example.com/rack".into(),
        ..request()
    };
    let dry = create(&client, Some("dry"), bad.spec().unwrap(), true)
        .await
        .unwrap();
    assert_eq!(dry.metadata.name.as_deref(), Some("dry"));
    let api = Api::<NodeRollout>::all(client.clone());
    assert!(
        api.get_opt("dry").await.unwrap().is_none(),
        "a dry run stored it"
    );
    create(&client, Some("bad"), bad.spec().unwrap(), false)
        .await
        .unwrap();
    let ended = follow(&client, "bad", |_| {}, std::future::pending())
        .await
        .unwrap();
    match &ended {
        Ended::BadInput(why) => assert!(
            why.starts_with("UnknownDomainLabel: no node carries the upgrade-domain label"),
            "{why}"
        ),
        other => panic!("expected bad input, got {other:?}"),
    }
    assert_eq!(ended.exit_code(), 2);
    assert_eq!(pods(&client).await, 4, "nothing was evicted");
    // left paused, so the controller does not start it later with nobody following it
    let left = api.get("bad").await.unwrap();
    assert!(left.spec.paused, "{:?}", left.spec);
}

#[test]
fn the_binary_exits_2_on_flags_a_node_rollout_cannot_take_before_reading_the_cluster() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_raygate"))
        .args([
            "drain",
            "run",
            "--ud-label",
            UD,
            "--group-label",
            "team/group",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ])
        .output()
        .expect("the raygate binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--group-label team/group needs --representative QUERY"),
        "{err}"
    );
}
