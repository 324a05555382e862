//! `/metrics`, `/healthz` and `/readyz` (ready once every store has synced).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::watch;

use super::Context;

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
            get(|State(h): State<Arc<Health>>| async move { h.ctx.metrics.encode() }),
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
