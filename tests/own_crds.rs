//! raygate's own `crds/` on a real API server (in place of Kueue's): every write the controller
//! makes (Workload spec and status, ClusterQueue and LocalQueue status) passes their schemas. The
//! test plays KubeRay by hand: it creates the child RayCluster itself.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use raygate::controller::{Config, run};
use raygate::types::kueue::{ClusterQueue, LocalQueue, Workload};
use raygate::types::ray::{RayCluster, RayService};
use raygate_testing::apiserver::{KueueCrds, TestServer, eventually, namespace};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_runs_on_raygates_own_crds() {
    raygate_testing::apiserver::init_logs();
    let server = TestServer::get_with(KueueCrds::Raygate);
    let client = server.client().await;
    let ns = namespace("own-crds");
    let pod = json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray", "resources": {"requests": {"cpu": "1"}}}]}});
    // a ResourceFlavor without spec, as Kueue's samples write it
    let rf = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}});
    Api::<raygate::types::kueue::ResourceFlavor>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(rf).unwrap())
        .await
        .unwrap();
    let cq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}});
    Api::<ClusterQueue>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(cq).unwrap())
        .await
        .unwrap();
    let lq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": "team"}});
    Api::<LocalQueue>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &serde_json::from_value(lq).unwrap())
        .await
        .unwrap();
    let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "svc", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"rayClusterConfig": {"headGroupSpec": {"rayStartParams": {}, "template": pod},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "minReplicas": 0, "maxReplicas": 4, "rayStartParams": {}, "template": pod}]}}});
    let services: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let created = services
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
    let config = Config {
        admission_resync: Duration::from_millis(500),
        metrics_addr,
        ..Default::default()
    };
    let controller = tokio::spawn(run(client.clone(), config, async move {
        let _ = stopped.await;
    }));
    eventually(Duration::from_secs(20), "/healthz answers", || async {
        http_get(port, "/healthz")
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "/readyz once the caches synced",
        || async {
            http_get(port, "/readyz")
                .await
                .filter(|(code, _)| *code == 200)
        },
    )
    .await;

    // raygate gates the template
    eventually(
        Duration::from_secs(20),
        "rayClusterConfig.suspend=true",
        || async {
            (services
                .get("svc")
                .await
                .ok()?
                .spec
                .ray_cluster_config
                .suspend
                == Some(true))
            .then_some(())
        },
    )
    .await;
    // "KubeRay" creates the child, born suspended
    let child = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "svc-abcde", "namespace": ns,
            "labels": {"ray.io/originated-from-cr-name": "svc", "ray.io/originated-from-crd": "RayService"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": "svc", "uid": created.metadata.uid, "controller": true}]},
        "spec": {"suspend": true, "headGroupSpec": {"rayStartParams": {}, "template": pod},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "minReplicas": 0, "maxReplicas": 4, "rayStartParams": {}, "template": pod}]}});
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(child).unwrap(),
        )
        .await
        .unwrap();

    eventually(
        Duration::from_secs(20),
        "the child is released once its slice is admitted",
        || async {
            (clusters.get("svc-abcde").await.ok()?.spec.suspend == Some(false)).then_some(())
        },
    )
    .await;
    let workloads: Api<Workload> = Api::namespaced(client.clone(), &ns);
    let wl = workloads.list(&Default::default()).await.unwrap().items;
    assert_eq!(wl.len(), 1);
    assert!(raygate::workload::is_admitted(wl[0].status.as_ref()));
    let admission = wl[0].status.as_ref().unwrap().admission.as_ref().unwrap();
    assert_eq!(admission.cluster_queue, "team");
    assert_eq!(admission.pod_set_assignments.len(), 2);
    eventually(
        Duration::from_secs(20),
        "ClusterQueue and LocalQueue status",
        || async {
            let cq = Api::<ClusterQueue>::all(client.clone())
                .get("team")
                .await
                .ok()?;
            let st = cq.status?;
            let cpu = st
                .flavors_reservation
                .first()?
                .resources
                .iter()
                .find(|r| r.name == "cpu")?
                .total
                .clone()?;
            let lq = Api::<LocalQueue>::namespaced(client.clone(), &ns)
                .get("lq")
                .await
                .ok()?;
            (cpu.0 == "3"
                && st.admitted_workloads == Some(1)
                && lq.status?.admitted_workloads == Some(1))
            .then_some(())
        },
    )
    .await;
    // a scale-down of the child shrinks the slice in place and releases quota at once
    clusters
        .patch("svc-abcde", &PatchParams::default(), &Patch::Merge(json!({"spec": {"workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 4, "rayStartParams": {}, "template": pod}]}})))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "2 CPU after the in-place scale-down",
        || async {
            let cq = Api::<ClusterQueue>::all(client.clone())
                .get("team")
                .await
                .ok()?;
            let cpu = cq
                .status?
                .flavors_reservation
                .first()?
                .resources
                .iter()
                .find(|r| r.name == "cpu")?
                .total
                .clone()?;
            (cpu.0 == "2").then_some(())
        },
    )
    .await;
    let (code, metrics) = http_get(port, "/metrics").await.expect("metrics");
    assert_eq!(code, 200);
    for name in [
        "raygate_reconciles_total",
        "raygate_gate_latency_seconds_count",
        "raygate_admission_cycles_total",
        "raygate_cluster_queue_usage",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
    assert!(
        metrics.contains("raygate_gate_latency_seconds_count 1"),
        "one release was timed:\n{metrics}"
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), controller).await;
}

/// A plain HTTP/1.1 GET on loopback: (status, body).
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out))
}
