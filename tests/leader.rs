//! Leader election on a real API server. The test server has no coordination.k8s.io, so the test
//! serves Leases from a CRD with the same group, version and fields. A CRD-served Lease accepts
//! create, get and JSON/merge/apply patches but not the strategic-merge patches kube-lease-manager
//! renews and takes over with (a built-in Lease does), so this test covers acquisition, writing
//! only while holding, and stopping writes when the election fails; takeover by a standby is
//! tested on the simulated cluster, which serves Leases (`tests/ops.rs`).

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
        lease_duration_seconds: 3,
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
async fn the_lease_holder_writes_and_a_failed_election_stops_writes() {
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
    let managers: Vec<String> = leases
        .get("raygate")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .into_iter()
        .flatten()
        .filter_map(|m| m.manager)
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
    let gated = || async {
        (services
            .get("svc")
            .await
            .ok()?
            .spec
            .ray_cluster_config
            .suspend
            == Some(true))
        .then_some(())
    };
    eventually(Duration::from_secs(20), "the template gate", gated).await;

    // a standby never writes: its election cannot take the held Lease (here it even fails, as a
    // CRD-served Lease rejects the strategic-merge patch a takeover uses)
    let (_stop_b, b) = replica(&client, &ns, "replica-b");
    a.abort();
    let _ = a.await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    services
        .patch(
            "svc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rayClusterConfig": {"suspend": null}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let svc = services.get("svc").await.unwrap();
    assert_eq!(
        svc.spec.ray_cluster_config.suspend, None,
        "a replica wrote without holding the Lease"
    );
    assert_ne!(holder(&leases).await.as_deref(), Some("replica-b"));
    b.abort();
}
