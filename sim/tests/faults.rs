//! Fault injection as `kube::Client` sees it: injected answers with the real server's shapes
//! that write nothing, faults singled out by client, latency in cluster time, watch drops that
//! kube-runtime's watcher survives, 410 on a watch from a resourceVersion, and the same failures
//! for the same seed.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use raygate_sim::{FaultRule, Faults, Sim, Verb};
use raygate_testing::core::{self, PodExt};

fn status(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn injected_errors_have_the_real_shapes_and_write_nothing() {
    let sim = Sim::builder().namespace("t").build();
    let pods: Api<Pod> = Api::namespaced(sim.client(), "t");
    let expected = [
        (
            409,
            "Conflict",
            "Operation cannot be fulfilled on pods \"p\": the object has been modified; please apply your changes to the latest version and try again",
        ),
        // plain text, as the max-in-flight filter answers: kube-client reports it unparsed
        (
            429,
            "Failed to parse error data",
            "Too many requests, please try again later.",
        ),
        (
            500,
            "InternalError",
            "Internal error occurred: etcdserver: request timed out",
        ),
        (
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
    ];
    for (code, reason, message) in expected {
        sim.set_faults(Faults::none().rule(FaultRule::writes().resource("pods").error(code, 1.0)));
        let before = sim.revision();
        let err = pods
            .create(&PostParams::default(), &core::pod("p", "").unowned())
            .await
            .unwrap_err();
        assert_eq!(status(err), (code, reason.to_string(), message.to_string()));
        assert_eq!(sim.revision(), before, "an injected {code} writes nothing");
    }
    // reads are not writes
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 0);
    // faults change at runtime
    sim.set_faults(Faults::none());
    pods.create(&PostParams::default(), &core::pod("p", "").unowned())
        .await
        .unwrap();
    assert_eq!(sim.fault_stats().errors.values().sum::<u64>(), 4);
}

#[tokio::test]
async fn a_rule_singles_out_one_client_by_its_user_agent() {
    let sim = Sim::builder()
        .namespace("t")
        .faults(Faults::none().rule(FaultRule::any().user_agent("raygate").error(500, 1.0)))
        .build();
    let flaky: Api<Pod> = Api::namespaced(sim.client_as("raygate/0.1"), "t");
    let healthy: Api<Pod> = Api::namespaced(sim.client_as("kubectl"), "t");
    assert_eq!(
        status(
            flaky
                .create(&PostParams::default(), &core::pod("a", "").unowned())
                .await
                .unwrap_err()
        )
        .0,
        500
    );
    healthy
        .create(&PostParams::default(), &core::pod("a", "").unowned())
        .await
        .unwrap();
    assert_eq!(status(flaky.get("a").await.unwrap_err()).0, 500);
    // the default field manager follows the User-Agent, as on the real server
    let got = healthy.get("a").await.unwrap();
    let managers: Vec<_> = got
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["kubectl"]);
}

#[tokio::test(start_paused = true)]
async fn latency_is_cluster_time() {
    let sim = Sim::builder()
        .namespace("t")
        .faults(
            Faults::none().rule(
                FaultRule::any()
                    .verbs(&[Verb::Get])
                    .latency(Duration::from_secs(30)),
            ),
        )
        .build();
    let pods: Api<Pod> = Api::namespaced(sim.client(), "t");
    pods.create(&PostParams::default(), &core::pod("p", "").unowned())
        .await
        .unwrap();
    let (wall, t0, c0) = (
        std::time::Instant::now(),
        tokio::time::Instant::now(),
        sim.clock().now(),
    );
    pods.get("p").await.unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(30));
    assert!(sim.clock().now().duration_since(c0).as_secs() >= 30);
    assert!(
        wall.elapsed() < Duration::from_secs(5),
        "{:?}",
        wall.elapsed()
    );
    assert_eq!(sim.fault_stats().delayed, 1);
}

#[tokio::test(start_paused = true)]
async fn watches_drop_and_kube_runtime_s_watcher_carries_on() {
    let sim = Sim::builder()
        .namespace("t")
        .faults(Faults::none().watch_drops(Duration::from_secs(10)))
        .build();
    let pods: Api<Pod> = Api::namespaced(sim.client(), "t");
    // a raw watch ends after 10 s of cluster time, well before its timeoutSeconds
    let t0 = tokio::time::Instant::now();
    let mut raw = pods
        .watch(&WatchParams::default().timeout(290), "0")
        .await
        .unwrap()
        .boxed();
    while raw.next().await.is_some() {}
    assert_eq!(t0.elapsed(), Duration::from_secs(10));
    assert_eq!(sim.fault_stats().watches_dropped, 1);
    // the watcher re-watches from its last version and sees every pod
    let seen = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let sink = seen.clone();
    let watch = tokio::spawn(
        watcher(pods.clone(), watcher::Config::default())
            .applied_objects()
            .for_each(move |p| {
                if let Ok(p) = p {
                    sink.lock()
                        .unwrap()
                        .push(p.metadata.name.unwrap_or_default());
                }
                futures::future::ready(())
            }),
    );
    for i in 0..5 {
        tokio::time::sleep(Duration::from_secs(7)).await;
        pods.create(
            &PostParams::default(),
            &core::pod(&format!("p{i}"), "").unowned(),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let mut seen = seen.lock().unwrap().clone();
    seen.dedup();
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4"]);
    assert!(
        sim.fault_stats().watches_dropped >= 4,
        "{:?}",
        sim.fault_stats()
    );
}

#[tokio::test]
async fn a_watch_from_a_version_can_be_answered_410_gone() {
    let sim = Sim::builder()
        .namespace("t")
        .faults(Faults::none().rewatch_gone(1.0))
        .build();
    let pods: Api<Pod> = Api::namespaced(sim.client(), "t");
    pods.create(&PostParams::default(), &core::pod("p", "").unowned())
        .await
        .unwrap();
    let rv = sim.revision();
    let mut from_version = pods
        .watch(&WatchParams::default(), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    match from_version.next().await {
        Some(Ok(WatchEvent::Error(e))) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert_eq!(e.message, format!("too old resource version: {rv} ({rv})"));
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    // a watch from now cannot be too old
    let mut from_now = pods
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        from_now.next().await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    assert_eq!(sim.fault_stats().watches_gone, 1);
}

#[tokio::test]
async fn the_same_seed_fails_the_same_requests() {
    async fn outcomes(seed: u64) -> Vec<bool> {
        let sim = Sim::builder()
            .seed(seed)
            .namespace("t")
            .faults(Faults::none().rule(FaultRule::writes().error(500, 0.2)))
            .build();
        let pods: Api<Pod> = Api::namespaced(sim.client(), "t");
        let mut out = vec![];
        for i in 0..60 {
            out.push(
                pods.create(
                    &PostParams::default(),
                    &core::pod(&format!("p{i}"), "").unowned(),
                )
                .await
                .is_ok(),
            );
        }
        out
    }
    let a = outcomes(1).await;
    assert_eq!(a, outcomes(1).await);
    assert_ne!(a, outcomes(2).await);
    let failed = a.iter().filter(|ok| !**ok).count();
    assert!(
        (4..=24).contains(&failed),
        "{failed} of 60 failed at a 20% rate"
    );
}

#[tokio::test]
async fn an_in_process_observer_sees_the_list_then_every_change_without_faults() {
    // every watch of every client dropped and every request failed: not the observer's
    let sim = Sim::builder()
        .namespace("t")
        .faults(Faults::none().rule(FaultRule::any().user_agent("raygate").error(500, 1.0)))
        .build();
    let pods: Api<Pod> = Api::namespaced(sim.client_as("kubectl"), "t");
    pods.create(&PostParams::default(), &core::pod("a", "").unowned())
        .await
        .unwrap();
    let mut feed = sim.observe("/api/v1/pods").unwrap();
    let listed = feed.try_recv().unwrap();
    assert_eq!(
        (listed.typ, listed.object["metadata"]["name"].as_str()),
        ("ADDED", Some("a"))
    );
    assert!(
        feed.try_recv().is_err(),
        "the list is queued before observe returns"
    );
    pods.create(&PostParams::default(), &core::pod("b", "").unowned())
        .await
        .unwrap();
    let added = feed.recv().await.unwrap();
    assert_eq!(
        (added.typ, added.object["metadata"]["name"].as_str()),
        ("ADDED", Some("b"))
    );
    assert!(
        sim.observe("/apis/nowhere.example/v1/things").is_err(),
        "not served"
    );
}
