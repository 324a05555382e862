//! Gate latency on the test API server: from a slice's admission to the unsuspend of the child it
//! covers, as one watcher sees both. raygate's controller (built-in admission) runs in-process;
//! the benchmark plays KubeRay (it creates each held child itself). Prints p50/p99; asserts nothing.
//!
//! `cargo bench --bench gate_latency` (needs `hack/install-test-apiserver.sh`). `GATE_BENCH_N` sets
//! the number of releases (default 40).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use raygate::controller::{Config, run};
use raygate::types::kueue::{ClusterQueue, LocalQueue, ResourceFlavor, Workload};
use raygate::types::ray::{RayCluster, RayService};
use raygate_testing::apiserver::{TestServer, eventually, namespace};
use serde_json::json;
use tokio::sync::mpsc;

enum Seen {
    Admitted(String, Instant),
    Released(String, Instant),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("GATE_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let server = TestServer::get();
    let client = server.client().await;
    let ns = namespace("gate-latency");
    let pod = json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray", "resources": {"requests": {"cpu": "1"}}}]}});
    Api::<ResourceFlavor>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "bench"}})).unwrap())
        .await
        .unwrap();
    let cq_api: Api<ClusterQueue> = Api::all(client.clone());
    let cq = |cpu: usize| {
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "bench"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "bench", "resources": [{"name": "cpu", "nominalQuota": cpu.to_string()}]}]}]}})
    };
    cq_api
        .patch(
            "bench",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(cq(0)),
        )
        .await
        .unwrap();
    Api::<LocalQueue>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": "bench"}})).unwrap())
        .await
        .unwrap();

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(run(
        client.clone(),
        Config {
            admission_resync: Duration::from_secs(5),
            ..Default::default()
        },
        async move {
            let _ = stop_rx.await;
        },
    ));

    // one watcher observes both transitions
    let (tx, mut rx) = mpsc::unbounded_channel();
    let wtx = tx.clone();
    let workloads: Api<Workload> = Api::namespaced(client.clone(), &ns);
    tokio::spawn(
        watcher(workloads.clone(), watcher::Config::default())
            .applied_objects()
            .for_each(move |w| {
                if let Ok(w) = w
                    && raygate::workload::is_admitted(w.status.as_ref())
                {
                    let owner = w
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("raygate.io/rayservice"))
                        .cloned()
                        .unwrap_or_default();
                    let _ = wtx.send(Seen::Admitted(owner, Instant::now()));
                }
                futures::future::ready(())
            }),
    );
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), &ns);
    tokio::spawn(
        watcher(clusters.clone(), watcher::Config::default())
            .applied_objects()
            .for_each(move |c| {
                if let Ok(c) = c
                    && c.spec.suspend == Some(false)
                {
                    let owner = c
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("ray.io/originated-from-cr-name"))
                        .cloned()
                        .unwrap_or_default();
                    let _ = tx.send(Seen::Released(owner, Instant::now()));
                }
                futures::future::ready(())
            }),
    );

    let services: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let mut latencies = Vec::with_capacity(n);
    let (mut admitted, mut released): (HashMap<String, Instant>, HashMap<String, Instant>) =
        (HashMap::new(), HashMap::new());
    for i in 0..n {
        let name = format!("svc-{i}");
        let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"rayClusterConfig": {"suspend": true, "headGroupSpec": {"rayStartParams": {}, "template": pod}}}});
        let created = services
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).unwrap(),
            )
            .await
            .unwrap();
        // KubeRay names the pending child in the status before it creates it
        let pending = json!({"status": {"pendingServiceStatus": {"rayClusterName": format!("{name}-abcde")}}});
        services
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&pending))
            .await
            .unwrap();
        let child = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": format!("{name}-abcde"), "namespace": ns,
                "labels": {"ray.io/originated-from-cr-name": name, "ray.io/originated-from-crd": "RayService"},
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": name, "uid": created.metadata.uid, "controller": true}]},
            "spec": {"suspend": true, "headGroupSpec": {"rayStartParams": {}, "template": pod}}});
        clusters
            .create(
                &PostParams::default(),
                &serde_json::from_value(child).unwrap(),
            )
            .await
            .unwrap();
        // its slice exists and waits for quota
        eventually(Duration::from_secs(20), "a pending slice", || async {
            let list = workloads
                .list(
                    &kube::api::ListParams::default()
                        .labels(&format!("raygate.io/rayservice={name}")),
                )
                .await
                .ok()?;
            (list.items.len() == 1).then_some(())
        })
        .await;
        // one more CPU: exactly this slice fits
        cq_api
            .patch(
                "bench",
                &PatchParams::apply("bench").force(),
                &Patch::Apply(cq(i + 1)),
            )
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(admitted.contains_key(&name) && released.contains_key(&name)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, rx.recv()).await {
                Ok(Some(Seen::Admitted(o, t))) => {
                    admitted.entry(o).or_insert(t);
                }
                Ok(Some(Seen::Released(o, t))) => {
                    released.entry(o).or_insert(t);
                }
                _ => panic!("{name} was not released in time"),
            }
        }
        latencies.push(released[&name].saturating_duration_since(admitted[&name]));
    }
    let _ = stop_tx.send(());
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!(
        "gate latency (slice admitted -> child unsuspended, as one watcher sees both), {} releases",
        latencies.len()
    );
    println!(
        "  p50 {:?}  p90 {:?}  p99 {:?}  max {:?}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        latencies[latencies.len() - 1]
    );
    println!(
        "  machine: {} cores, {cpus}; test apiserver (apiextensions-apiserver 1.36) on loopback",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
}
