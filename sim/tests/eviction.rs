//! The eviction subresource through `kube::Client`, with PDB statuses written as the disruption
//! controller (a later actor) would write them. Includes the disruption e2e vectors
//! (test/e2e/apps/disruption.go) for the eviction side.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use raygate_sim::Sim;
use raygate_testing::core::{self, PdbExt, PodExt, int};
use serde_json::{Value, json};

const NS: &str = "t";

fn sim() -> Sim {
    Sim::builder().namespace(NS).build()
}

/// Creates pod `name` (`app=ray`, on `n1`, 30 s grace, no owner), then writes its `phase` and
/// Ready condition as its kubelet would.
async fn create_pod(api: &Api<Pod>, name: &str, ready: bool, phase: &str) {
    let p = core::pod(name, "n1")
        .label("app", "ray")
        .grace_period(30)
        .unowned()
        .phase(phase)
        .condition("Ready", if ready { "True" } else { "False" });
    api.create(&PostParams::default(), &p).await.unwrap();
    let status = json!({"status": p.status});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// Creates a PDB over `app=ray` (`maxUnavailable: 1`), then writes `status` as the disruption
/// controller would.
async fn create_pdb(
    api: &Api<PodDisruptionBudget>,
    name: &str,
    policy: Option<&str>,
    status: Value,
) {
    let mut obj = core::pdb(name, &[("app", "ray")]).max_unavailable(int(1));
    if let Some(p) = policy {
        obj = obj.unhealthy_pod_eviction_policy(p);
    }
    api.create(&PostParams::default(), &obj).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap();
}

fn healthy_status(expected: i64, desired: i64, current: i64) -> Value {
    json!({"observedGeneration": 1, "expectedPods": expected, "desiredHealthy": desired, "currentHealthy": current,
        "disruptionsAllowed": (current - desired).max(0)})
}

async fn evict(api: &Api<Pod>, name: &str) -> Result<(), kube::core::Status> {
    match api.evict(name, &EvictParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(*s),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn without_a_pdb_a_pod_is_marked_and_deleted_gracefully() {
    let sim = sim();
    let pods: Api<Pod> = Api::namespaced(sim.client(), NS);
    create_pod(&pods, "a", true, "Running").await;
    evict(&pods, "a").await.unwrap();
    let a = pods.get("a").await.unwrap();
    assert_eq!(a.metadata.deletion_grace_period_seconds, Some(30));
    let cond = a
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_deref()),
        ("True", Some("EvictionByEvictionAPI"))
    );
    let e = evict(&pods, "missing").await.unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "pods \"missing\" not found")
    );
}

#[tokio::test]
async fn a_budget_allows_one_eviction_then_answers_429_without_retry_after() {
    let sim = sim();
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, NS);
    for n in ["a", "b", "c"] {
        create_pod(&pods, n, true, "Running").await;
    }
    create_pdb(&pdbs, "budget", None, healthy_status(3, 2, 3)).await;
    evict(&pods, "a").await.unwrap();
    let st = pdbs.get_status("budget").await.unwrap().status.unwrap();
    assert_eq!(st.disruptions_allowed, Some(0));
    assert!(st.disrupted_pods.unwrap().contains_key("a"));
    let cond = st
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "DisruptionAllowed")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "InsufficientPods")
    );
    let e = evict(&pods, "b").await.unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(
        e.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let details = e.details.unwrap();
    assert_eq!(details.causes[0].reason, "DisruptionBudget");
    assert_eq!(
        details.causes[0].message,
        "The disruption budget budget needs 2 healthy pods and has 3 currently"
    );
    assert_eq!(details.retry_after_seconds, 0);
    // the raw answer carries no Retry-After header
    let resp = raw_evict(&sim, "b");
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().get("retry-after").is_none());
}

fn raw_evict(
    sim: &Sim,
    name: &str,
) -> raygate_sim::http::Response<raygate_sim::server::service::ResponseBody> {
    let req = raygate_sim::http::Request::builder()
        .method("POST")
        .uri(format!("/api/v1/namespaces/{NS}/pods/{name}/eviction"))
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (parts, ()) = req.into_parts();
    let body = serde_json::to_vec(&json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}})).unwrap();
    sim.serve(parts, body.into())
}

#[tokio::test]
async fn a_budget_not_yet_observed_answers_429_with_retry_after_10() {
    let sim = sim();
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, NS);
    create_pod(&pods, "a", true, "Running").await;
    create_pdb(&pdbs, "budget", None, json!({"disruptionsAllowed": 1, "currentHealthy": 1, "desiredHealthy": 0, "expectedPods": 1})).await;
    let resp = raw_evict(&sim, "a");
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers().get("retry-after").unwrap(), "10");
    let e = evict(&pods, "a").await.unwrap_err();
    assert_eq!(
        e.details.unwrap().causes[0].message,
        "The disruption budget budget is still being processed by the server."
    );
}

#[tokio::test]
async fn pending_pods_skip_the_budget_and_two_budgets_are_a_500_and_negative_is_403() {
    let sim = sim();
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, NS);
    create_pod(&pods, "pending", false, "Pending").await;
    create_pod(&pods, "running", true, "Running").await;
    create_pdb(&pdbs, "neg", None, json!({"observedGeneration": 1, "disruptionsAllowed": -1, "currentHealthy": 0, "desiredHealthy": 1, "expectedPods": 1})).await;
    evict(&pods, "pending").await.unwrap();
    let e = evict(&pods, "running").await.unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "poddisruptionbudget.policy \"neg\" is forbidden: pdb disruptions allowed is negative"
    );
    create_pdb(&pdbs, "second", None, healthy_status(1, 0, 1)).await;
    let e = evict(&pods, "running").await.unwrap_err();
    assert_eq!(e.code, 500);
    assert_eq!(
        e.message,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
}

#[tokio::test]
async fn dry_run_evicts_nothing() {
    let sim = sim();
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, NS);
    create_pod(&pods, "a", true, "Running").await;
    create_pdb(&pdbs, "budget", None, healthy_status(1, 0, 1)).await;
    let rv = sim.revision();
    let params = EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
        ..Default::default()
    };
    pods.evict("a", &params).await.unwrap();
    assert_eq!(sim.revision(), rv, "nothing written");
}

/// test/e2e/apps/disruption.go: `maxUnavailable: 1` over 3 pods, evict each. All ready: 1
/// eviction under nil, IfHealthyBudget and AlwaysAllow; all unready: 0, 0 and 3.
#[tokio::test]
async fn the_disruption_e2e_vectors() {
    for (ready, policy, want) in [
        (true, None, 1),
        (true, Some("IfHealthyBudget"), 1),
        (true, Some("AlwaysAllow"), 1),
        (false, None, 0),
        (false, Some("IfHealthyBudget"), 0),
        (false, Some("AlwaysAllow"), 3),
    ] {
        let sim = sim();
        let client = sim.client();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, NS);
        for n in ["a", "b", "c"] {
            create_pod(&pods, n, ready, "Running").await;
        }
        let current = if ready { 3 } else { 0 };
        create_pdb(&pdbs, "budget", policy, healthy_status(3, 2, current)).await;
        let mut evicted = 0;
        for n in ["a", "b", "c"] {
            if evict(&pods, n).await.is_ok() {
                evicted += 1;
            }
        }
        assert_eq!(evicted, want, "ready={ready} policy={policy:?}");
    }
}
