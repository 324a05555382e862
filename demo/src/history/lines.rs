//! A history as JSON lines, for other tools (`raygate simulate --history FILE`).
//!
//! One line per recorded change, in the order recorded (cluster time never goes back):
//! `{"seconds": 12.5, "at": "2026-01-01T00:00:12.5Z", "kind": "Pod", "namespace": "ns",
//! "name": "llm-head-x", "state": {...}}`. `seconds` is cluster time since the run started,
//! `at` the cluster's own timestamp, `kind` the object's Kubernetes kind, `namespace` empty for
//! a cluster-scoped object, `state` the fields the invariants read (camelCase, as in
//! `docs/simulations.md`, "History lines") or `null` once the object is deleted.

use std::io::Write;

use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::History;

impl History {
    /// Writes every change as one JSON line (see the module); `start` is the run's start.
    pub fn write_lines(&self, start: Timestamp, mut out: impl Write) -> std::io::Result<()> {
        for c in &self.changes {
            let (_, _, kind, _, _) = c.key.kind.resource();
            let seconds = c.at.duration_since(start).as_secs_f64();
            let line = json!({
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "at": c.at.to_string(),
                "kind": kind,
                "namespace": c.key.namespace,
                "name": c.key.name,
                "state": c.state,
            });
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Key, Kind, PodState, RayServiceState, State};

    #[test]
    fn each_change_is_one_line_with_its_time_object_and_fields() {
        let start = Timestamp::from_second(1_700_000_000).unwrap();
        let at = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
        let mut h = History::new();
        let pod = State::Pod(PodState {
            node: Some("n0".into()),
            ready: true,
            ..Default::default()
        });
        h.record(at(3), Key::new(Kind::Pod, "ns", "p"), Some(pod));
        let svc = State::RayService(RayServiceState {
            queue: Some("lq".into()),
            active: Some("llm-a".into()),
        });
        h.record(at(4), Key::new(Kind::RayService, "ns", "llm"), Some(svc));
        h.record(at(9), Key::new(Kind::Pod, "ns", "p"), None);
        let mut out = vec![];
        h.write_lines(start, &mut out).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["seconds"], 3.0);
        assert_eq!(lines[0]["kind"], "Pod");
        assert_eq!(lines[0]["namespace"], "ns");
        assert_eq!(lines[0]["name"], "p");
        assert_eq!(lines[0]["state"]["node"], "n0");
        assert_eq!(lines[0]["state"]["ready"], true);
        assert_eq!(lines[1]["kind"], "RayService");
        assert_eq!(lines[1]["state"]["active"], "llm-a");
        assert_eq!(lines[2]["at"], at(9).to_string());
        assert!(lines[2]["state"].is_null());
    }
}
