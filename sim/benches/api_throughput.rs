//! Prints (never asserts) the sim's API throughput through `kube::Client`: Pod creates/s, a
//! full LIST, watch events/s delivered to a kube-runtime watcher, and peak memory.
//! `cargo bench -p raygate-sim --bench api_throughput [-- PODS]`

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use raygate_sim::Sim;
use serde_json::json;

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

fn main() {
    let pods: usize = std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let sim = Sim::builder().namespace("bench").build();
        let api: Api<Pod> = Api::namespaced(sim.client(), "bench");
        // a watcher receiving every change
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = seen.clone();
        let watch = tokio::spawn(
            watcher(api.clone(), watcher::Config::default())
                .applied_objects()
                .for_each(move |_| {
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    futures::future::ready(())
                }),
        );
        let start = Instant::now();
        for i in 0..pods {
            let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p-{i}"), "labels": {"app": "bench", "n": (i % 16).to_string()}},
                "spec": {"nodeName": format!("node-{}", i % 5000), "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}))
                .expect("pod");
            api.create(&PostParams::default(), &p).await.expect("create");
        }
        let create = start.elapsed();
        while seen.load(std::sync::atomic::Ordering::Relaxed) < pods {
            tokio::task::yield_now().await;
        }
        let watched = start.elapsed();
        let t = Instant::now();
        let all = api.list(&ListParams::default()).await.expect("list");
        let list = t.elapsed();
        let t = Instant::now();
        let one_node = api
            .list(&ListParams::default().fields("spec.nodeName=node-7"))
            .await
            .expect("list");
        let selected = t.elapsed();
        watch.abort();
        println!("machine: {} cores", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0));
        println!(
            "{pods} pod creates through kube::Client: {:.0} creates/s ({create:?})",
            pods as f64 / create.as_secs_f64()
        );
        println!(
            "watch: {pods} ADDED events delivered to a kube-runtime watcher by {watched:?} ({:.0} events/s)",
            pods as f64 / watched.as_secs_f64()
        );
        println!("LIST of {} pods: {list:?}; fieldSelector spec.nodeName ({} pods): {selected:?}", all.items.len(), one_node.items.len());
        println!("peak memory: {}", peak_rss_mib());
    });
}
