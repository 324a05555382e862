//! Startup checks: read the CRD objects raygate needs and ask [`crate::compat::check`]. While
//! anything is wrong, nothing is watched or written: an error log line names every problem,
//! `/readyz` answers 503 with the same lines (`/healthz` stays ok: restarting would not help),
//! and the check is retried every `check_crds_retry` until it passes or the process stops.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::Api;
use tokio::sync::{oneshot, watch};

use super::{Config, Error};
use crate::admission::AdmissionMode;
use crate::compat;

/// The problems with the installed CRDs for `mode`: a CRD that cannot be read is one too.
pub(crate) async fn problems(client: &Client, admission: AdmissionMode) -> Vec<String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut found = Vec::new();
    let mut unreadable = Vec::new();
    for req in compat::requirements(admission) {
        match api.get_opt(req.crd).await {
            Ok(Some(crd)) => found.push(crd),
            Ok(None) => {}
            Err(e) => unreadable.push(format!(
                "reading CRD {} (raygate needs get on customresourcedefinitions): {e}",
                req.crd
            )),
        }
    }
    if !unreadable.is_empty() {
        return unreadable;
    }
    compat::check(&found, admission)
}

/// Waits until the CRDs pass the check: `Ok(true)` then, `Ok(false)` if shutdown came first.
/// Serves `/healthz` and a failing `/readyz` on the metrics address meanwhile.
pub(crate) async fn wait_until_compatible(
    client: &Client,
    config: &Config,
    mut shutdown: watch::Receiver<bool>,
) -> Result<bool, Error> {
    let mut server: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)> = None;
    let report = Arc::new(Mutex::new(String::new()));
    let mut last = Vec::new();
    let passed = loop {
        let now = problems(client, config.admission).await;
        if now.is_empty() {
            tracing::info!(admission = ?config.admission, "startup checks passed: every CRD raygate needs is installed");
            break true;
        }
        if now != last {
            tracing::error!(
                problems = %now.join("; "),
                retry_seconds = config.check_crds_retry.as_secs(),
                "startup checks failed: raygate waits (not ready) until the cluster is fixed"
            );
            if let Ok(mut r) = report.lock() {
                *r = format!("startup checks failed:\n{}\n", now.join("\n"));
            }
            last = now;
        }
        if server.is_none()
            && let Some(addr) = config.metrics_addr
        {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Serve { addr, source })?;
            let (stop, stopped) = oneshot::channel();
            server = Some((
                stop,
                tokio::spawn(serve_not_ready(listener, report.clone(), stopped)),
            ));
        }
        tokio::select! {
            biased;
            () = tokio::time::sleep(config.check_crds_retry) => {}
            _ = shutdown.wait_for(|s| *s) => break false,
        }
    };
    if let Some((stop, task)) = server {
        let _ = stop.send(());
        // awaited so the port is free for the controller's own server
        let _ = task.await;
    }
    Ok(passed)
}

async fn serve_not_ready(
    listener: tokio::net::TcpListener,
    report: Arc<Mutex<String>>,
    stop: oneshot::Receiver<()>,
) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(r): State<Arc<Mutex<String>>>| async move {
                let text = r.lock().map(|t| t.clone()).unwrap_or_default();
                (StatusCode::SERVICE_UNAVAILABLE, text)
            }),
        )
        .with_state(report);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.await;
        })
        .await
    {
        tracing::error!(error = %e, "startup health server stopped");
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ValidationDirective;

    use crate::controller::{ADMISSION_MANAGER, GATE_MANAGER, apply_params, merge_params};

    #[test]
    fn every_write_asks_for_strict_field_validation() {
        // a field the installed CRD does not know must fail the write, not vanish
        let apply = apply_params(ADMISSION_MANAGER);
        assert!(matches!(
            apply.field_validation,
            Some(ValidationDirective::Strict)
        ));
        assert!(apply.force);
        assert_eq!(apply.field_manager.as_deref(), Some(ADMISSION_MANAGER));
        let merge = merge_params(GATE_MANAGER);
        assert!(matches!(
            merge.field_validation,
            Some(ValidationDirective::Strict)
        ));
        assert!(!merge.force);
        assert_eq!(merge.field_manager.as_deref(), Some(GATE_MANAGER));
    }
}
