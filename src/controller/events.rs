//! Events: every gate decision is published as a Kubernetes Event and logged. A server without
//! the Events API (the test API server has none) makes Events log-only, never an error.

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};

use crate::gate::{EventType, GateEvent};

/// Publishes Events, falling back to logs only when the Events API is missing.
pub struct EventSink {
    recorder: Recorder,
    disabled: AtomicBool,
}

impl EventSink {
    pub fn new(client: Client) -> Self {
        let reporter = Reporter {
            controller: "raygate".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        EventSink {
            recorder: Recorder::new(client, reporter),
            disabled: AtomicBool::new(false),
        }
    }

    /// Logs the event and publishes it on `object`.
    pub async fn publish(&self, object: &ObjectReference, ev: &GateEvent) {
        let name = object.name.as_deref().unwrap_or_default();
        let ns = object.namespace.as_deref().unwrap_or_default();
        match ev.type_ {
            EventType::Normal => {
                tracing::info!(object = %format!("{ns}/{name}"), reason = ev.reason, "{}", ev.message)
            }
            EventType::Warning => {
                tracing::warn!(object = %format!("{ns}/{name}"), reason = ev.reason, "{}", ev.message)
            }
        }
        if self.disabled.load(Ordering::Relaxed) {
            return;
        }
        let event = Event {
            type_: match ev.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: ev.reason.to_string(),
            note: Some(truncate(&ev.message, 1024)),
            action: ev.reason.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, object).await {
            if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                tracing::info!("the Events API is not served here: events go to the log only");
                self.disabled.store(true, Ordering::Relaxed);
            } else {
                tracing::debug!(error = %e, "publishing an event failed");
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
