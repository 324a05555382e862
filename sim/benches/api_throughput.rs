//! Prints (never asserts) the sim's API throughput through `kube::Client` at cluster scale:
//! Nodes and Pods created per second, watch events per second delivered to kube-runtime
//! watchers (one on every Pod, one per label value, a few field-selected per node) while Pods
//! are created and then change status, LISTs, and peak memory.
//!
//! `cargo bench -p raygate-sim --bench api_throughput [-- NODES PODS]` (default 5,000 Nodes,
//! 100,000 Pods). Each phase prints as it ends, so a run cut short still reports.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use raygate_sim::Sim;
use serde_json::json;

/// Label values `n=0..LABELS` spread the Pods; one watcher per value.
const LABELS: usize = 16;
/// Nodes that get a `spec.nodeName` field-selected watcher.
const NODE_WATCHERS: usize = 8;
/// Requests in flight at once (a controller's worker pool).
const CONCURRENCY: usize = 8;

fn peak_rss_mib() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| format!("{} MiB", kb / 1024))
        .unwrap_or_else(|| "?".into())
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// A kube-runtime watcher counting every applied object into `counter`.
fn count_watch<K>(api: Api<K>, config: watcher::Config, counter: Arc<AtomicUsize>)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::spawn(watcher(api, config).applied_objects().for_each(move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
        futures::future::ready(())
    }));
}

fn main() {
    let mut args = std::env::args().filter_map(|a| a.parse::<usize>().ok());
    let nodes = args.next().unwrap_or(5_000);
    let pods = args.next().unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "machine: {} cores (shared); {nodes} nodes, {pods} pods, {} watchers, {CONCURRENCY} requests in flight",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        1 + LABELS + NODE_WATCHERS
    );
    rt.block_on(async move {
        let sim = Sim::builder().namespace("bench").build();
        let client = sim.client();
        let node_api: Api<Node> = Api::all(client.clone());
        let pod_api: Api<Pod> = Api::namespaced(client.clone(), "bench");

        // 1. Nodes
        let t = Instant::now();
        futures::stream::iter(0..nodes)
            .map(|i| {
                let api = node_api.clone();
                async move {
                    let n: Node = serde_json::from_value(json!({"metadata": {"name": format!("node-{i}"),
                        "labels": {"topology.kubernetes.io/zone": format!("z{}", i % 3), "upgrade-domain": format!("ud-{}", i % 10)}},
                        "status": {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}}}))
                        .expect("node");
                    api.create(&PostParams::default(), &n).await.expect("node create");
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let d = t.elapsed();
        println!("{nodes} node creates: {:.0}/s ({d:.2?}); peak memory {}", rate(nodes, d), peak_rss_mib());

        // 2. watchers: every Pod; each label value; a few nodes by field selector
        let all = Arc::new(AtomicUsize::new(0));
        let by_label = Arc::new(AtomicUsize::new(0));
        let by_node = Arc::new(AtomicUsize::new(0));
        count_watch(pod_api.clone(), watcher::Config::default(), all.clone());
        for v in 0..LABELS {
            count_watch(pod_api.clone(), watcher::Config::default().labels(&format!("n={v}")), by_label.clone());
        }
        for k in 0..NODE_WATCHERS {
            count_watch(pod_api.clone(), watcher::Config::default().fields(&format!("spec.nodeName=node-{k}")), by_node.clone());
        }
        while sim.watch_count() < 1 + LABELS + NODE_WATCHERS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let delivered = || all.load(Ordering::Relaxed) + by_label.load(Ordering::Relaxed) + by_node.load(Ordering::Relaxed);
        let per_node = |i: usize| if nodes == 0 { 0 } else { (0..pods).filter(|p| p % nodes == i).count() };
        let node_events: usize = (0..NODE_WATCHERS.min(nodes)).map(per_node).sum();

        // 3. Pods, watched as they are created
        let t = Instant::now();
        let mut last = Instant::now();
        let mut done = 0usize;
        let mut stream = futures::stream::iter(0..pods)
            .map(|i| {
                let api = pod_api.clone();
                async move {
                    let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p-{i}"), "labels": {"app": "bench", "n": (i % LABELS).to_string()}},
                        "spec": {"nodeName": format!("node-{}", i % nodes.max(1)), "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}))
                        .expect("pod");
                    api.create(&PostParams::default(), &p).await.expect("pod create");
                }
            })
            .buffer_unordered(CONCURRENCY);
        while stream.next().await.is_some() {
            done += 1;
            if last.elapsed() > Duration::from_secs(10) {
                last = Instant::now();
                println!("  … {done} pods after {:.1?} ({:.0}/s), peak memory {}", t.elapsed(), rate(done, t.elapsed()), peak_rss_mib());
            }
        }
        let created = t.elapsed();
        let expected = 2 * pods + node_events;
        while delivered() < expected {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let watched = t.elapsed();
        println!(
            "{pods} pod creates: {:.0}/s ({created:.2?}); {expected} watch events delivered by {watched:.2?} ({:.0} events/s); peak memory {}",
            rate(pods, created),
            rate(expected, watched),
            peak_rss_mib()
        );

        // 4. status churn: every Pod becomes Running (a status-subresource merge patch each)
        let before = delivered();
        let t = Instant::now();
        futures::stream::iter(0..pods)
            .map(|i| {
                let api = pod_api.clone();
                async move {
                    api.patch_status(&format!("p-{i}"), &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}})))
                        .await
                        .expect("status patch");
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let patched = t.elapsed();
        while delivered() < before + expected {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let watched = t.elapsed();
        println!(
            "{pods} status patches: {:.0}/s ({patched:.2?}); {expected} MODIFIED events delivered by {watched:.2?} ({:.0} events/s); peak memory {}",
            rate(pods, patched),
            rate(expected, watched),
            peak_rss_mib()
        );

        // 5. LISTs
        let t = Instant::now();
        let listed = pod_api.list(&ListParams::default()).await.expect("list").items.len();
        let list_all = t.elapsed();
        let t = Instant::now();
        let one_node = pod_api.list(&ListParams::default().fields("spec.nodeName=node-7")).await.expect("list").items.len();
        let list_node = t.elapsed();
        let t = Instant::now();
        let one_label = pod_api.list(&ListParams::default().labels("n=3")).await.expect("list").items.len();
        let list_label = t.elapsed();
        let t = Instant::now();
        let paged = pod_api.list(&ListParams::default().limit(500)).await.expect("list").items.len();
        let list_page = t.elapsed();
        let t = Instant::now();
        let node_list = node_api.list(&ListParams::default()).await.expect("list").items.len();
        let list_nodes = t.elapsed();
        println!(
            "LIST: all {listed} pods {list_all:.2?}; spec.nodeName=node-7 ({one_node}) {list_node:.2?}; n=3 ({one_label}) {list_label:.2?}; first page of {paged} {list_page:.2?}; all {node_list} nodes {list_nodes:.2?}"
        );
        println!("peak memory: {}", peak_rss_mib());
    });
}
