//! Prometheus metrics (`/metrics`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UsageLabels {
    pub cluster_queue: String,
    pub flavor: String,
    pub resource: String,
}

/// Every metric raygate exports.
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<ResultLabels, Counter>,
    pub errors: Family<StepLabels, Counter>,
    pub reconcile_duration: Histogram,
    /// Seconds from a slice's admission to the unsuspend patch of the child it covers.
    pub gate_latency: Histogram,
    pub pending_slices: Gauge,
    pub admission_cycles: Counter,
    /// Reserved quota per ClusterQueue, flavor and resource (display only: decisions use exact quantities).
    pub cluster_queue_usage: Family<UsageLabels, Gauge<f64, AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("raygate");
        let reconciles = Family::<ResultLabels, Counter>::default();
        let errors = Family::<StepLabels, Counter>::default();
        let reconcile_duration =
            Histogram::new([0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0]);
        let gate_latency = Histogram::new([
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
        ]);
        let pending_slices = Gauge::default();
        let admission_cycles = Counter::default();
        let cluster_queue_usage = Family::<UsageLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "reconciles",
            "RayService reconciles by result",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconcile steps by step",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one RayService reconcile",
            reconcile_duration.clone(),
        );
        registry.register(
            "gate_latency_seconds",
            "From a slice admitted to the unsuspend patch of the child it covers",
            gate_latency.clone(),
        );
        registry.register(
            "pending_slices",
            "Workload slices waiting for quota",
            pending_slices.clone(),
        );
        registry.register(
            "admission_cycles",
            "Admission cycles run",
            admission_cycles.clone(),
        );
        registry.register(
            "cluster_queue_usage",
            "Reserved quota per ClusterQueue, flavor and resource",
            cluster_queue_usage.clone(),
        );
        Metrics {
            registry,
            reconciles,
            errors,
            reconcile_duration,
            gate_latency,
            pending_slices,
            admission_cycles,
            cluster_queue_usage,
        }
    }
}

impl Metrics {
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
