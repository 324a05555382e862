//! ClusterQueue and LocalQueue status as the admission loop writes it, on a real API server: the
//! `Active` condition follows `meta.SetStatusCondition` (its `lastTransitionTime` moves only when
//! the status flips) and the LocalQueue gets one too.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::Api;
use raygate::controller::{Config, run};
use raygate::types::kueue::{ClusterQueue, LocalQueue};
use raygate_testing::apiserver::{TestServer, eventually, namespace};
use serde_json::{Value, json};
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(20);

async fn apply(client: &Client, obj: Value) {
    raygate::client::dev::apply(client, &obj.to_string(), "test", None)
        .await
        .unwrap_or_else(|e| panic!("applying {obj}: {e}"));
}

fn cluster_queue(name: &str, flavor: &str) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}})
}

fn active(conditions: &[Condition]) -> Option<Condition> {
    conditions.iter().find(|c| c.type_ == "Active").cloned()
}

#[tokio::test]
async fn queue_active_conditions_keep_their_transition_time_and_the_local_queue_gets_one() {
    raygate_testing::apiserver::init_logs();
    let client = TestServer::get().client().await;
    let ns = namespace("queue-status");
    let (stop, stopped) = oneshot::channel::<()>();
    let config = Config {
        admission_resync: Duration::from_millis(300),
        ..Default::default()
    };
    let controller = tokio::spawn(run(client.clone(), config, async move {
        let _ = stopped.await;
    }));
    let cq = format!("cq-{ns}");
    let (missing_a, missing_b) = (format!("missing-a-{ns}"), format!("missing-b-{ns}"));
    apply(&client, cluster_queue(&cq, &missing_a)).await;
    apply(
        &client,
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}}),
    )
    .await;
    let cqs: Api<ClusterQueue> = Api::all(client.clone());
    let lqs: Api<LocalQueue> = Api::namespaced(client.clone(), &ns);
    let cq_active = |flavor: String| {
        let cqs = cqs.clone();
        let cq = cq.clone();
        move || {
            let cqs = cqs.clone();
            let cq = cq.clone();
            let flavor = flavor.clone();
            async move {
                let c = active(&cqs.get(&cq).await.ok()?.status?.conditions)?;
                c.message.contains(&flavor).then_some(c)
            }
        }
    };

    // inactive: its flavor does not exist
    let first = eventually(
        WAIT,
        "ClusterQueue Active=False naming flavor a",
        cq_active(missing_a.clone()),
    )
    .await;
    assert_eq!(
        (first.status.as_str(), first.reason.as_str()),
        ("False", "FlavorNotFound")
    );
    // the LocalQueue says why it cannot admit either
    let lq = eventually(WAIT, "LocalQueue Active condition", || async {
        active(&lqs.get("lq").await.ok()?.status?.conditions)
    })
    .await;
    assert_eq!(lq.status, "False");
    assert!(lq.message.contains(&missing_a), "{}", lq.message);

    // still inactive, for another missing flavor: the message changes, the transition time not
    tokio::time::sleep(Duration::from_millis(1500)).await;
    apply(&client, cluster_queue(&cq, &missing_b)).await;
    let second = eventually(
        WAIT,
        "ClusterQueue Active=False naming flavor b",
        cq_active(missing_b.clone()),
    )
    .await;
    assert_eq!(second.status, "False");
    assert_eq!(
        second.last_transition_time, first.last_transition_time,
        "only the message changed: lastTransitionTime must stay"
    );

    // the flavor appears: Active flips to True and only now the time moves
    tokio::time::sleep(Duration::from_millis(1500)).await;
    apply(&client, json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": missing_b}})).await;
    let third = eventually(WAIT, "ClusterQueue Active=True", || async {
        let c = active(&cqs.get(&cq).await.ok()?.status?.conditions)?;
        (c.status == "True").then_some(c)
    })
    .await;
    assert!(third.last_transition_time.0 > first.last_transition_time.0);
    let lq = eventually(WAIT, "LocalQueue Active=True", || async {
        active(&lqs.get("lq").await.ok()?.status?.conditions).filter(|c| c.status == "True")
    })
    .await;
    assert_eq!(lq.reason, "Ready");

    let _ = stop.send(());
    controller
        .await
        .expect("controller task")
        .expect("controller stops cleanly");
}
