//! Leader election on a real API server: the check of raygate's elector against a real server's
//! Lease semantics. The test server has no coordination.k8s.io, so the test serves Leases from a
//! CRD with the same group, version and fields; the elector reads them with GET and writes them
//! with create and PUT, whose optimistic concurrency (a 409 on a stale `resourceVersion`) is the
//! same for every kind. Covered: acquisition, writing only while holding, a standby waiting out a
//! crashed holder's Lease and taking it over, a stale write refused, and no writes once the
//! election cannot reach the Lease. Takeover timing on cluster time: `tests/ops.rs`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use raygate::controller::{Config, run};
use raygate::types::ray::RayService;
use raygate_testing::apiserver::{TestServer, eventually, namespace};
use serde_json::json;

async fn serve_leases(client: &kube::Client) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "leases.coordination.k8s.io", "annotations": {"api-approved.kubernetes.io": "unapproved, test only"}},
        "spec": {"group": "coordination.k8s.io", "scope": "Namespaced",
            "names": {"kind": "Lease", "plural": "leases", "singular": "lease", "listKind": "LeaseList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    });
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(crd).unwrap(),
    )
    .await
    .unwrap();
    let established = kube::runtime::wait::await_condition(
        api,
        "leases.coordination.k8s.io",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(20), established)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The replicas' Lease duration: renew deadline 2 s, retry period 0.4 s.
const LEASE_SECONDS: u64 = 3;

fn replica(
    client: &kube::Client,
    ns: &str,
    identity: &str,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let config = Config {
        leader_elect: true,
        lease_namespace: ns.to_string(),
        identity: identity.to_string(),
        lease_duration_seconds: LEASE_SECONDS,
        admission_resync: Duration::from_millis(500),
        ..Default::default()
    };
    let client = client.clone();
    let handle = tokio::spawn(async move {
        run(client, config, async move {
            let _ = rx.await;
        })
        .await
        .expect("controller runs");
    });
    (tx, handle)
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases.get("raygate").await.ok()?.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_holder_writes_a_standby_takes_over_on_expiry_and_a_failed_election_stops_writes()
{
    raygate_testing::apiserver::init_logs();
    let client = TestServer::get().client().await;
    serve_leases(&client).await;
    let ns = namespace("leader");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let (_stop_a, a) = replica(&client, &ns, "replica-a");
    eventually(
        Duration::from_secs(20),
        "replica-a holds the Lease",
        || async { (holder(&leases).await.as_deref() == Some("replica-a")).then_some(()) },
    )
    .await;
    // the Lease is written under its own field manager, not a writer's of gated objects
    let held_by_a = leases.get("raygate").await.unwrap();
    let managers: Vec<String> = held_by_a
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers
            .iter()
            .any(|m| m == raygate::controller::LEASE_MANAGER)
            && !managers
                .iter()
                .any(|m| m == raygate::controller::GATE_MANAGER),
        "{managers:?}"
    );

    // the leader gates an opted-in RayService
    let services: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "svc", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"rayClusterConfig": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray"}]}}}}}});
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();
    let suspended = || async {
        services
            .get("svc")
            .await
            .ok()
            .and_then(|s| s.spec.ray_cluster_config.suspend)
            == Some(true)
    };
    eventually(Duration::from_secs(20), "the template gate", || async {
        suspended().await.then_some(())
    })
    .await;
    let unsuspend = || async {
        services
            .patch(
                "svc",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"rayClusterConfig": {"suspend": null}}})),
            )
            .await
            .unwrap();
    };

    // replica-a crashes (nothing released); a standby waits the Lease out, then takes it over and
    // gates again, and nothing is gated by a replica that does not hold the Lease
    a.abort();
    let _ = a.await;
    let before = leases.get("raygate").await.unwrap();
    let b_started = std::time::Instant::now();
    let (_stop_b, b) = replica(&client, &ns, "replica-b");
    unsuspend().await;
    eventually(
        Duration::from_secs(60),
        "replica-b takes over and gates",
        || async {
            if !suspended().await {
                return None;
            }
            // read after the gate: whoever wrote it held the Lease before writing
            assert_eq!(
                holder(&leases).await.as_deref(),
                Some("replica-b"),
                "gated by a replica that does not hold the Lease"
            );
            Some(())
        },
    )
    .await;
    assert!(
        b_started.elapsed() >= Duration::from_secs(LEASE_SECONDS),
        "the standby waited out the crashed holder's Lease ({:?})",
        b_started.elapsed()
    );
    let taken = leases.get("raygate").await.unwrap().spec.unwrap();
    let a_spec = held_by_a.spec.clone().unwrap();
    assert_eq!(taken.lease_transitions, Some(1));
    assert!(taken.acquire_time.unwrap().0 > a_spec.acquire_time.unwrap().0);
    assert_eq!(taken.lease_duration_seconds, Some(LEASE_SECONDS as i32));

    // what the elector relies on: a write over a stale read is refused
    match leases
        .replace("raygate", &PostParams::default(), &before)
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        other => panic!("a PUT with a stale resourceVersion: {other:?}"),
    }
    assert_eq!(holder(&leases).await.as_deref(), Some("replica-b"));

    // the election fails (the Lease API is gone): past the renew deadline the leader stops writing
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("leases.coordination.k8s.io", &Default::default())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "Leases are no longer served",
        || async {
            matches!(leases.get("raygate").await, Err(kube::Error::Api(s)) if s.code == 404)
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;
    unsuspend().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !suspended().await,
        "a replica wrote without holding the Lease"
    );
    b.abort();
}
