//! Prometheus metrics (`/metrics`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use std::sync::atomic::AtomicU64;

mod queues;
pub use queues::{CqLabels, CqReasonLabels, QueueMetrics};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub step: String,
}

/// A NodeRollout phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

/// One NodeRollout.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    pub noderollout: String,
}

/// One NodeRollout in its phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutPhaseLabels {
    pub noderollout: String,
    pub phase: String,
}

/// A NodeRollout as the per-rollout gauges show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutState {
    pub name: String,
    pub phase: String,
    /// Its Blocked condition is True.
    pub blocked: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
}

/// A held RayService.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    pub namespace: String,
    pub rayservice: String,
    pub local_queue: String,
    pub cluster_queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceResourceLabels {
    pub namespace: String,
    pub rayservice: String,
    pub local_queue: String,
    pub cluster_queue: String,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub cluster_queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueResourceLabels {
    pub cluster_queue: String,
    pub resource: String,
}

/// The content type of `/metrics`: prometheus-client writes OpenMetrics text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric name carries it.
const PREFIX: &str = "raygate";

/// Every metric raygate exports.
pub struct Metrics {
    pub registry: Registry,
    /// What was registered (prefixed name, type), in order: `/metrics` lists a family only once
    /// it has a series, so this is the one complete list (alerts and dashboards are checked
    /// against it).
    families: Vec<(String, MetricType)>,
    pub reconciles: Family<ResultLabels, Counter>,
    pub errors: Family<StepLabels, Counter>,
    pub reconcile_duration: Histogram,
    /// Seconds from a slice's admission to the unsuspend patch of the child it covers.
    pub gate_latency: Histogram,
    pub pending_slices: Gauge,
    pub admission_cycles: Counter,
    /// Kueue's per-ClusterQueue series, built-in admission only (display only: decisions use
    /// exact quantities).
    pub queues: QueueMetrics,
    /// 1, labelled with the version.
    pub build_info: Family<BuildLabels, Gauge>,
    /// 1 while this replica holds the Lease (always without leader election).
    pub is_leader: Gauge,
    /// Per held RayService (scrape time, from the caches): children held, seconds since the
    /// oldest held child was created, and the held children's requests by resource.
    pub held_children: Family<ServiceLabels, Gauge>,
    pub hold_duration: Family<ServiceLabels, Gauge<f64, AtomicU64>>,
    pub held_resources: Family<ServiceResourceLabels, Gauge<f64, AtomicU64>>,
    /// Per ClusterQueue: held RayServices and their held requests by resource.
    pub cluster_queue_held: Family<QueueLabels, Gauge>,
    pub cluster_queue_held_resources: Family<QueueResourceLabels, Gauge<f64, AtomicU64>>,
    /// NodeRollouts (the rollout controller): upgrade domains done, evictions by result
    /// (`evicted`, `429`, `error`), seconds evictions were refused by budgets, rollouts by phase.
    pub rollout_domains_completed: Counter,
    pub rollout_evictions: Family<ResultLabels, Counter>,
    pub rollout_blocked_seconds: Counter<f64, AtomicU64>,
    pub rollouts: Family<PhaseLabels, Gauge>,
    /// Per NodeRollout: 1 on its phase, and 1 while Blocked=True (0 otherwise), so a stuck
    /// rollout can be alerted on while it is stuck (the blocked-seconds counter grows only
    /// once a refusal ends).
    pub rollout_phase: Family<RolloutPhaseLabels, Gauge>,
    pub rollout_blocked: Family<RolloutLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        let mut m = Metrics {
            registry: Registry::with_prefix(PREFIX),
            families: Vec::new(),
            reconciles: Family::default(),
            errors: Family::default(),
            reconcile_duration: Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
            ]),
            gate_latency: Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
            ]),
            pending_slices: Gauge::default(),
            admission_cycles: Counter::default(),
            queues: QueueMetrics::default(),
            build_info,
            is_leader: Gauge::default(),
            held_children: Family::default(),
            hold_duration: Family::default(),
            held_resources: Family::default(),
            cluster_queue_held: Family::default(),
            cluster_queue_held_resources: Family::default(),
            rollout_domains_completed: Counter::default(),
            rollout_evictions: Family::default(),
            rollout_blocked_seconds: Counter::default(),
            rollouts: Family::default(),
            rollout_phase: Family::default(),
            rollout_blocked: Family::default(),
        };
        // registered in this order, which is the order `/metrics` lists them in
        m.register_reconciles();
        m.register_holds();
        m.register_queues();
        m.register_rollouts();
        m
    }
}

impl Metrics {
    fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        self.families
            .push((format!("{PREFIX}_{name}"), metric.metric_type()));
        self.registry.register(name, help, metric);
    }

    /// Every sample name `/metrics` can show: a counter's `_total`, a histogram's `_bucket`,
    /// `_sum` and `_count`, a gauge's own name.
    pub fn sample_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, kind) in &self.families {
            match kind {
                MetricType::Counter => out.push(format!("{name}_total")),
                MetricType::Histogram => {
                    out.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")))
                }
                MetricType::Info => out.push(format!("{name}_info")),
                MetricType::Gauge | MetricType::Unknown => out.push(name.clone()),
            }
        }
        out
    }

    /// The reconcile, admission and process metrics.
    fn register_reconciles(&mut self) {
        self.register(
            "reconciles",
            "RayService reconciles by result",
            self.reconciles.clone(),
        );
        self.register(
            "reconcile_errors",
            "Failed reconcile steps by step",
            self.errors.clone(),
        );
        self.register(
            "reconcile_duration_seconds",
            "Duration of one RayService reconcile",
            self.reconcile_duration.clone(),
        );
        self.register(
            "gate_latency_seconds",
            "From a slice admitted to the unsuspend patch of the child it covers",
            self.gate_latency.clone(),
        );
        self.register(
            "pending_slices",
            "Workload slices waiting for quota",
            self.pending_slices.clone(),
        );
        self.register(
            "admission_cycles",
            "Admission cycles run",
            self.admission_cycles.clone(),
        );
        self.register("build_info", "raygate's version", self.build_info.clone());
        self.register(
            "is_leader",
            "1 while this replica holds the leader Lease (always 1 without leader election)",
            self.is_leader.clone(),
        );
    }

    /// The held children, per RayService and per ClusterQueue.
    fn register_holds(&mut self) {
        self.register(
            "held_children",
            "Children of a RayService that raygate holds suspended until quota covers them",
            self.held_children.clone(),
        );
        self.register(
            "hold_duration_seconds",
            "Seconds since the oldest child raygate holds of a RayService was created",
            self.hold_duration.clone(),
        );
        self.register(
            "held_resources",
            "Requests of the held children's pods by resource (cpu in cores, memory in bytes, GPUs)",
            self.held_resources.clone(),
        );
        self.register(
            "cluster_queue_held_rayservices",
            "RayServices with a held child, per ClusterQueue",
            self.cluster_queue_held.clone(),
        );
        self.register(
            "cluster_queue_held_resources",
            "Requests of held children per ClusterQueue and resource",
            self.cluster_queue_held_resources.clone(),
        );
    }

    /// Kueue's per-ClusterQueue series ([`QueueMetrics`]), under Kueue's names.
    fn register_queues(&mut self) {
        // families share their series with their clones
        let q = self.queues.clone();
        let pending = "Pending Workloads per ClusterQueue and status (active, inadmissible)";
        self.register("pending_workloads", pending, q.pending);
        let reserving = "Workloads holding quota per ClusterQueue";
        self.register("reserving_active_workloads", reserving, q.reserving);
        let admitted = "Admitted Workloads per ClusterQueue";
        self.register("admitted_active_workloads", admitted, q.admitted_active);
        let reserved = "Quota reserved per ClusterQueue, flavor and resource";
        self.register(
            "cluster_queue_resource_reservation",
            reserved,
            q.reservation,
        );
        let used = "Quota used by admitted Workloads per ClusterQueue, flavor and resource";
        self.register("cluster_queue_resource_usage", used, q.usage);
        let nominal = "Nominal quota per ClusterQueue, flavor and resource";
        self.register("cluster_queue_nominal_quota", nominal, q.nominal);
        let status = "1 for each ClusterQueue on its status (pending, active)";
        self.register("cluster_queue_status", status, q.status);
        let admissions = "Workloads admitted per ClusterQueue";
        self.register("admitted_workloads", admissions, q.admitted_total);
        let evictions = "Workloads evicted per ClusterQueue and reason";
        self.register("evicted_workloads", evictions, q.evicted_total);
        let wait = "From a Workload's creation to its admission, per ClusterQueue";
        self.register("admission_wait_time_seconds", wait, q.admission_wait);
    }

    /// The NodeRollout controller's.
    fn register_rollouts(&mut self) {
        self.register(
            "noderollout_domains_completed",
            "Upgrade domains NodeRollouts completed",
            self.rollout_domains_completed.clone(),
        );
        self.register(
            "noderollout_evictions",
            "Evictions NodeRollouts sent, by result (evicted, 429, error)",
            self.rollout_evictions.clone(),
        );
        self.register(
            "noderollout_pdb_blocked_seconds",
            "Seconds NodeRollout domains waited on a PodDisruptionBudget's refusal (counted when the refusal ends)",
            self.rollout_blocked_seconds.clone(),
        );
        self.register(
            "noderollouts",
            "NodeRollouts by phase (Pending, Running, Paused, Completed, Failed)",
            self.rollouts.clone(),
        );
        self.register(
            "noderollout_phase",
            "1 for each NodeRollout on its phase",
            self.rollout_phase.clone(),
        );
        self.register(
            "noderollout_blocked",
            "1 while a NodeRollout's Blocked condition is True, else 0",
            self.rollout_blocked.clone(),
        );
    }
}

impl Metrics {
    /// Replaces the scrape-time gauges with `g` (series of services no longer held disappear).
    pub fn refresh(&self, g: &crate::gauges::Gauges, is_leader: bool) {
        self.is_leader.set(i64::from(is_leader));
        self.pending_slices.set(g.pending_slices as i64);
        self.held_children.clear();
        self.hold_duration.clear();
        self.held_resources.clear();
        self.cluster_queue_held.clear();
        self.cluster_queue_held_resources.clear();
        for h in &g.held {
            let labels = ServiceLabels {
                namespace: h.namespace.clone(),
                rayservice: h.name.clone(),
                local_queue: h.local_queue.clone(),
                cluster_queue: h.cluster_queue.clone(),
            };
            self.held_children
                .get_or_create(&labels)
                .set(h.held_children as i64);
            self.hold_duration
                .get_or_create(&labels)
                .set(h.hold_seconds);
            for (resource, q) in h.held.iter() {
                self.held_resources
                    .get_or_create(&ServiceResourceLabels {
                        namespace: h.namespace.clone(),
                        rayservice: h.name.clone(),
                        local_queue: h.local_queue.clone(),
                        cluster_queue: h.cluster_queue.clone(),
                        resource: resource.to_string(),
                    })
                    .set(q.nanos() as f64 / 1e9);
            }
        }
        for (cq, (n, held)) in &g.cluster_queues {
            self.cluster_queue_held
                .get_or_create(&QueueLabels {
                    cluster_queue: cq.clone(),
                })
                .set(*n as i64);
            for (resource, q) in held.iter() {
                self.cluster_queue_held_resources
                    .get_or_create(&QueueResourceLabels {
                        cluster_queue: cq.clone(),
                        resource: resource.to_string(),
                    })
                    .set(q.nanos() as f64 / 1e9);
            }
        }
    }

    /// Counts one NodeRollout state change (see `drain::rollout::changes`).
    pub fn count_rollout(&self, c: &crate::drain::rollout::Counts) {
        self.rollout_domains_completed.inc_by(c.domains_completed);
        for (result, n) in [
            ("evicted", c.evicted),
            ("429", c.refused),
            ("error", c.failed),
        ] {
            if n > 0 {
                self.rollout_evictions
                    .get_or_create(&ResultLabels {
                        result: result.into(),
                    })
                    .inc_by(n);
            }
        }
        if c.blocked_seconds > 0.0 {
            self.rollout_blocked_seconds.inc_by(c.blocked_seconds);
        }
    }

    /// Replaces the NodeRollout gauges: by phase, and per rollout (series of deleted rollouts
    /// disappear).
    pub fn refresh_rollouts(&self, rollouts: &[RolloutState]) {
        let mut phases: std::collections::BTreeMap<&str, i64> = Default::default();
        self.rollouts.clear();
        self.rollout_phase.clear();
        self.rollout_blocked.clear();
        for r in rollouts {
            *phases.entry(&r.phase).or_default() += 1;
            self.rollout_phase
                .get_or_create(&RolloutPhaseLabels {
                    noderollout: r.name.clone(),
                    phase: r.phase.clone(),
                })
                .set(1);
            self.rollout_blocked
                .get_or_create(&RolloutLabels {
                    noderollout: r.name.clone(),
                })
                .set(i64::from(r.blocked));
        }
        for (phase, n) in phases {
            self.rollouts
                .get_or_create(&PhaseLabels {
                    phase: phase.to_string(),
                })
                .set(n);
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, phase: &str, blocked: bool) -> RolloutState {
        RolloutState {
            name: name.into(),
            phase: phase.into(),
            blocked,
        }
    }

    #[test]
    fn rollout_gauges_show_each_rollout_and_forget_deleted_ones() {
        let m = Metrics::default();
        m.refresh_rollouts(&[
            state("gpu-a", "Running", true),
            state("gpu-b", "Running", false),
            state("cpu", "Completed", false),
        ]);
        let text = m.encode();
        for line in [
            "raygate_noderollouts{phase=\"Running\"} 2",
            "raygate_noderollouts{phase=\"Completed\"} 1",
            "raygate_noderollout_phase{noderollout=\"gpu-a\",phase=\"Running\"} 1",
            "raygate_noderollout_blocked{noderollout=\"gpu-a\"} 1",
            "raygate_noderollout_blocked{noderollout=\"gpu-b\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        let names = m.sample_names();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            assert!(names.iter().any(|n| n == name), "{name} in sample_names()");
        }
        m.refresh_rollouts(&[state("gpu-b", "Completed", false)]);
        let text = m.encode();
        assert!(!text.contains("gpu-a"), "{text}");
        assert!(!text.contains("phase=\"Running\""), "{text}");
    }
}
