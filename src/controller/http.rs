//! `/metrics`, `/healthz` and `/readyz` (ready once every store has synced).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::watch;

use super::Context;
use crate::runtime::SortedState;

struct Health {
    ctx: Arc<Context>,
    ready: AtomicBool,
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    ctx: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
) {
    let health = Arc::new(Health {
        ctx: ctx.clone(),
        ready: AtomicBool::new(false),
    });
    let watcher = health.clone();
    tokio::spawn(async move {
        if watcher.ctx.stores.wait_until_ready().await {
            watcher.ready.store(true, Ordering::Relaxed);
            tracing::info!("caches synced: ready");
        }
    });
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(h): State<Arc<Health>>| async move {
                scrape(&h.ctx);
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        super::metrics::CONTENT_TYPE,
                    )],
                    h.ctx.metrics.encode(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(h): State<Arc<Health>>| async move {
                if h.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
                }
            }),
        )
        .with_state(health);
    let stop = async move {
        while shutdown.changed().await.is_ok() {
            if *shutdown.borrow() {
                break;
            }
        }
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "metrics server stopped");
    }
}

/// Refreshes the gauges computed from the caches (held RayServices, pending slices, leadership).
fn scrape(ctx: &Context) {
    let services = ctx.stores.services.sorted_state();
    let clusters = ctx.stores.clusters.sorted_state();
    let workloads = ctx.stores.workloads.sorted_state();
    let local_queues = ctx.stores.local_queues.sorted_state();
    let cluster_refs: Vec<&crate::types::ray::RayCluster> =
        clusters.iter().map(|c| c.as_ref()).collect();
    let g = crate::gauges::gauges(
        services.iter().map(|s| s.as_ref()),
        &cluster_refs,
        workloads.iter().map(|w| w.as_ref()),
        local_queues.iter().map(|l| l.as_ref()),
        ctx.clock.now(),
    );
    ctx.metrics.refresh(&g, ctx.is_leader());
}
