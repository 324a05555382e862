//! Per-ClusterQueue series of the built-in admission loop, named and labelled as Kueue v0.19
//! exports them (`pkg/metrics/metrics.go`) under raygate's prefix, so dashboards written for
//! Kueue read them with the prefix changed: `kueue_pending_workloads` is
//! `raygate_pending_workloads`, and so on. Kueue's `replica_role` and custom labels are left out
//! (one admission loop, no custom labels).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::sync::atomic::AtomicU64;

use crate::admission::{ClusterQueueUsage, Snapshot};
use crate::quantity::Quantity;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CqLabels {
    pub cluster_queue: String,
}

/// Kueue's `pending_workloads` labels: `status` is `active` or `inadmissible`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PendingLabels {
    pub cluster_queue: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CqReasonLabels {
    pub cluster_queue: String,
    pub reason: String,
}

/// Kueue's labels of a ClusterQueue's per-resource series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CqResourceLabels {
    pub cohort: String,
    pub cluster_queue: String,
    pub flavor: String,
    pub resource: String,
}

/// Kueue's `cluster_queue_status` labels: `status` is `pending`, `active` or `terminating`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CqStatusLabels {
    pub cluster_queue: String,
    pub status: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The families (registered by [`super::Metrics`]).
#[derive(Clone)]
pub struct QueueMetrics {
    pub pending: Family<PendingLabels, Gauge>,
    pub reserving: Family<CqLabels, Gauge>,
    pub admitted_active: Family<CqLabels, Gauge>,
    pub reservation: Family<CqResourceLabels, FloatGauge>,
    pub usage: Family<CqResourceLabels, FloatGauge>,
    pub nominal: Family<CqResourceLabels, FloatGauge>,
    pub status: Family<CqStatusLabels, Gauge>,
    pub admitted_total: Family<CqLabels, Counter>,
    pub evicted_total: Family<CqReasonLabels, Counter>,
    pub admission_wait: Family<CqLabels, Histogram>,
}

impl Default for QueueMetrics {
    fn default() -> Self {
        QueueMetrics {
            pending: Family::default(),
            reserving: Family::default(),
            admitted_active: Family::default(),
            reservation: Family::default(),
            usage: Family::default(),
            nominal: Family::default(),
            status: Family::default(),
            admitted_total: Family::default(),
            evicted_total: Family::default(),
            // Kueue's buckets for its wait times (`generateExponentialBuckets(14)`: 1 s × 2^k)
            admission_wait: Family::new_with_constructor(|| {
                Histogram::new((0..14).map(|k| f64::from(1u32 << k)))
            }),
        }
    }
}

fn decimal(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> f64 {
    Quantity::try_from(q)
        .map(|q| q.nanos() as f64 / 1e9)
        .unwrap_or_default()
}

impl QueueMetrics {
    /// Replaces the per-queue gauges with a cycle's outcome (`usage`, the queues as the cycle left
    /// them; `snapshot`, their specs): a deleted ClusterQueue's series go with it. `inadmissible`
    /// counts each queue's pending Workloads whose `QuotaReserved` condition says `Inadmissible`.
    pub fn set_queues(&self, snapshot: &Snapshot, usage: &[ClusterQueueUsage]) {
        for f in [&self.reservation, &self.usage, &self.nominal] {
            f.clear();
        }
        self.pending.clear();
        self.reserving.clear();
        self.admitted_active.clear();
        self.status.clear();
        let inadmissible = inadmissible_per_queue(snapshot);
        for cq in &snapshot.cluster_queues {
            let name = cq.metadata.name.clone().unwrap_or_default();
            let cohort = cq.spec.cohort_name.clone().unwrap_or_default();
            for f in cq.spec.resource_groups.iter().flat_map(|g| &g.flavors) {
                for r in &f.resources {
                    let labels = CqResourceLabels {
                        cohort: cohort.clone(),
                        cluster_queue: name.clone(),
                        flavor: f.name.clone(),
                        resource: r.name.clone(),
                    };
                    let nominal = r.nominal_quota.as_ref().map(decimal).unwrap_or_default();
                    self.nominal.get_or_create(&labels).set(nominal);
                }
            }
            let Some(u) = usage.iter().find(|u| u.name == name) else {
                continue;
            };
            self.set_one(u, &cohort, inadmissible.get(&name).copied().unwrap_or(0));
        }
    }

    fn set_one(&self, u: &ClusterQueueUsage, cohort: &str, inadmissible: i64) {
        let cq = || CqLabels {
            cluster_queue: u.name.clone(),
        };
        let pending = i64::from(u.pending);
        for (status, n) in [
            ("active", (pending - inadmissible).max(0)),
            ("inadmissible", inadmissible.min(pending)),
        ] {
            self.pending
                .get_or_create(&PendingLabels {
                    cluster_queue: u.name.clone(),
                    status: status.into(),
                })
                .set(n);
        }
        self.reserving
            .get_or_create(&cq())
            .set(i64::from(u.reserving));
        self.admitted_active
            .get_or_create(&cq())
            .set(i64::from(u.admitted));
        // Kueue's "pending" is a queue not yet usable (a missing flavor, a bad spec)
        let status = if u.active.is_ok() {
            "active"
        } else {
            "pending"
        };
        self.status
            .get_or_create(&CqStatusLabels {
                cluster_queue: u.name.clone(),
                status: status.into(),
            })
            .set(1);
        for f in &u.reservation {
            for r in &f.resources {
                let labels = CqResourceLabels {
                    cohort: cohort.into(),
                    cluster_queue: u.name.clone(),
                    flavor: f.name.clone(),
                    resource: r.name.clone(),
                };
                let total = r.total.as_ref().map(decimal).unwrap_or_default();
                // built-in admission has no admission checks: what is reserved is admitted
                self.reservation.get_or_create(&labels).set(total);
                self.usage.get_or_create(&labels).set(total);
            }
        }
    }
}

/// Per ClusterQueue: its pending Workloads whose last `QuotaReserved=False` says `Inadmissible`
/// (no LocalQueue, a stopped queue, a request no flavor has), Kueue's "inadmissible" list.
fn inadmissible_per_queue(snapshot: &Snapshot) -> std::collections::HashMap<String, i64> {
    use crate::types::kueue::{condition, reason};
    let queue_of: std::collections::HashMap<(&str, &str), &str> = snapshot
        .local_queues
        .iter()
        .filter_map(|q| {
            Some((
                (
                    q.metadata.namespace.as_deref()?,
                    q.metadata.name.as_deref()?,
                ),
                q.spec.cluster_queue.as_deref()?,
            ))
        })
        .collect();
    let mut out = std::collections::HashMap::new();
    for w in &snapshot.workloads {
        let status = w.status.as_ref();
        let inadmissible = status
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == condition::QUOTA_RESERVED)
            })
            .is_some_and(|c| c.status == "False" && c.reason == reason::INADMISSIBLE);
        let ns = w.metadata.namespace.as_deref().unwrap_or_default();
        let lq = w.spec.queue_name.as_deref().unwrap_or_default();
        if let (true, Some(cq)) = (inadmissible, queue_of.get(&(ns, lq))) {
            *out.entry((*cq).to_string()).or_insert(0) += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{PendingLabels, QueueMetrics};
    use crate::admission::{ClusterQueueUsage, Snapshot};
    use serde_json::json;

    fn pending(name: &str, reason: &str) -> crate::types::kueue::Workload {
        serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"queueName": "lq", "podSets": []},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": reason,
                "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    /// A pending Workload whose condition says `Inadmissible` counts as Kueue's "inadmissible",
    /// the rest of the queue's pending as "active"; a queue gone from a cycle loses its series.
    #[test]
    fn pending_workloads_split_into_active_and_inadmissible_as_kueue_reports_them() {
        let snapshot = Snapshot {
            cluster_queues: vec![serde_json::from_value(json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                "metadata": {"name": "team"}, "spec": {"resourceGroups": [{"coveredResources": ["cpu"],
                "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1500m"}]}]}]}
            }))
            .unwrap()],
            local_queues: vec![serde_json::from_value(json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "team"}
            }))
            .unwrap()],
            workloads: vec![pending("a", "Pending"), pending("b", "Inadmissible")],
            ..Snapshot::default()
        };
        let usage = ClusterQueueUsage {
            name: "team".into(),
            reservation: vec![],
            pending: 2,
            reserving: 0,
            admitted: 0,
            active: Ok(()),
            active_reason: "Ready".into(),
        };
        let m = QueueMetrics::default();
        m.set_queues(&snapshot, &[usage]);
        let count = |status: &str| {
            m.pending
                .get_or_create(&PendingLabels {
                    cluster_queue: "team".into(),
                    status: status.into(),
                })
                .get()
        };
        assert_eq!((count("active"), count("inadmissible")), (1, 1));
        let mut text = String::new();
        let mut r = prometheus_client::registry::Registry::default();
        r.register("nominal", "", m.nominal.clone());
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains(
                r#"nominal{cohort="",cluster_queue="team",flavor="f",resource="cpu"} 1.5"#
            ),
            "{text}"
        );
        // the queue is gone: its series go
        m.set_queues(&Snapshot::default(), &[]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(!text.contains("team"), "{text}");
    }
}
