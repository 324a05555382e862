//! A node rollout's lower bound (issue #14 item 3) (pure): Σ over the upgrade domains of
//! (evict + hand-off + recovery), and a rollout's time as a ratio to it.
//!
//! The terms are the simulated cluster's own configured durations, the ones the runner gives its
//! actors, not durations read back from the run's history:
//! - **evict**: how long an evicted pod's containers take to stop (the kubelet's `stop_after`,
//!   else the grace period);
//! - **hand-off**: how long a node handed to the upgrade agent is down (the node lifecycle's
//!   reboot);
//! - **recovery**: from a pod bound to it Ready again: the kubelet's start delay, then its
//!   readiness probe's first success (`initialDelaySeconds + periodSeconds × successThreshold`,
//!   the slowest probe of the story's pod templates).
//!
//! Recovery follows the hand-off when the evicted groups can only come back on the domain's own
//! nodes; where the cluster has room outside the rollout (spare nodes at the target generation),
//! they come back there while the domain's nodes are down, so a domain takes at least evict +
//! max(hand-off, recovery). That form is a lower bound in both cases; the sum is the tighter
//! one where it holds.
//!
//! Why configured, not measured: the bound must be the same for raygate and every baseline on
//! one cluster, so their ratios compare; a bound read from a run's history would carry that run's
//! own waits (an eviction refused by a budget and retried, a pod that waited for room) and
//! flatter the run that waited most. A domain cannot be faster than its pods stopping, its nodes
//! rebooting and its pods coming back, so a rollout that takes one domain at a time takes at
//! least the sum.

use std::time::Duration;

use serde_json::Value;

/// The bound's terms, per domain, and the number of domains the rollout covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LowerBound {
    pub domains: usize,
    pub evict: Duration,
    pub handoff: Duration,
    pub recovery: Duration,
    /// Evicted groups can recover outside the domain while its nodes are handed off.
    pub recovers_elsewhere: bool,
}

impl LowerBound {
    pub fn per_domain(&self) -> Duration {
        if self.recovers_elsewhere {
            self.evict + self.handoff.max(self.recovery)
        } else {
            self.evict + self.handoff + self.recovery
        }
    }

    /// Σ over the domains.
    pub fn total(&self) -> Duration {
        self.per_domain()
            .saturating_mul(u32::try_from(self.domains).unwrap_or(u32::MAX))
    }

    /// `took` over the bound; `None` when the bound is 0.
    pub fn ratio(&self, took: Duration) -> Option<f64> {
        let total = self.total().as_secs_f64();
        (total > 0.0).then(|| took.as_secs_f64() / total)
    }

    /// `4 domains × (evict 1 s + hand-off 120 s + recovery 6 s) = 508 s`, or with
    /// `recovers_elsewhere` `… × (evict 1 s + max(hand-off 120 s, recovery 6 s)) = 484 s`.
    pub fn explain(&self) -> String {
        let (evict, handoff, recovery) = (
            self.evict.as_secs(),
            self.handoff.as_secs(),
            self.recovery.as_secs(),
        );
        let domain = if self.recovers_elsewhere {
            format!("evict {evict} s + max(hand-off {handoff} s, recovery {recovery} s)")
        } else {
            format!("evict {evict} s + hand-off {handoff} s + recovery {recovery} s")
        };
        format!(
            "{} domains × ({domain}) = {} s",
            self.domains,
            self.total().as_secs()
        )
    }
}

/// The slowest readiness probe's time to its first success among every `readinessProbe` in
/// `objects` (pod templates anywhere inside them); 0 without one.
pub fn slowest_probe(objects: &[Value]) -> Duration {
    fn walk(v: &Value, out: &mut u64) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if k == "readinessProbe" {
                        let field = |name: &str, default: u64| {
                            v.get(name).and_then(Value::as_u64).unwrap_or(default)
                        };
                        let ready = field("initialDelaySeconds", 0)
                            + field("periodSeconds", 10).max(1)
                                * field("successThreshold", 1).max(1);
                        *out = (*out).max(ready);
                    } else {
                        walk(v, out);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut slowest = 0;
    objects.iter().for_each(|o| walk(o, &mut slowest));
    Duration::from_secs(slowest)
}

/// The bound for a rollout over `domains` upgrade domains of a cluster whose kubelet stops a
/// pod in `stop` and starts one in `start`, whose nodes reboot in `reboot`, running `objects`;
/// `recovers_elsewhere` when it has room outside the rollout (spare nodes).
pub fn lower_bound(
    domains: usize,
    stop: Duration,
    reboot: Duration,
    start: Duration,
    objects: &[Value],
    recovers_elsewhere: bool,
) -> LowerBound {
    LowerBound {
        domains,
        evict: stop,
        handoff: reboot,
        recovery: start + slowest_probe(objects),
        recovers_elsewhere,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_slowest_probe_wins_with_kubernetes_defaults_for_unset_fields() {
        let objects = [
            json!({"spec": {"template": {"spec": {"containers": [
                {"readinessProbe": {"periodSeconds": 1, "failureThreshold": 1}}]}}}}),
            json!({"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
                {"readinessProbe": {"initialDelaySeconds": 3, "periodSeconds": 5, "successThreshold": 2}}]}}}}}),
        ];
        assert_eq!(slowest_probe(&objects), Duration::from_secs(3 + 5 * 2));
        // unset: period 10, success 1
        assert_eq!(
            slowest_probe(&[json!({"readinessProbe": {"httpGet": {"port": 80}}})]),
            Duration::from_secs(10)
        );
        assert_eq!(
            slowest_probe(&[json!({"kind": "ConfigMap"})]),
            Duration::ZERO
        );
    }

    #[test]
    fn the_bound_sums_each_domain_and_a_rollout_is_a_ratio_of_it() {
        let b = lower_bound(
            2,
            Duration::from_secs(1),
            Duration::from_secs(120),
            Duration::from_secs(5),
            &[json!({"readinessProbe": {"periodSeconds": 1}})],
            false,
        );
        assert_eq!(b.per_domain(), Duration::from_secs(127));
        assert_eq!(b.total(), Duration::from_secs(254));
        assert_eq!(b.ratio(Duration::from_secs(381)), Some(1.5));
        assert_eq!(
            b.explain(),
            "2 domains × (evict 1 s + hand-off 120 s + recovery 6 s) = 254 s"
        );
        let none = LowerBound { domains: 0, ..b };
        assert_eq!(none.ratio(Duration::from_secs(10)), None);
    }

    #[test]
    fn with_room_outside_the_rollout_recovery_overlaps_the_hand_off() {
        let objects = [json!({"readinessProbe": {"initialDelaySeconds": 150, "periodSeconds": 1}})];
        let b = |elsewhere| {
            lower_bound(
                3,
                Duration::from_secs(1),
                Duration::from_secs(120),
                Duration::from_secs(5),
                &objects,
                elsewhere,
            )
        };
        // recovery 5 + 151 = 156 s, longer than the 120 s reboot: it is the domain's floor
        assert_eq!(b(true).per_domain(), Duration::from_secs(1 + 156));
        assert_eq!(b(false).per_domain(), Duration::from_secs(1 + 120 + 156));
        assert_eq!(
            b(true).explain(),
            "3 domains × (evict 1 s + max(hand-off 120 s, recovery 156 s)) = 471 s"
        );
        // a reboot longer than recovery is the floor instead
        let fast = lower_bound(
            3,
            Duration::from_secs(1),
            Duration::from_secs(120),
            Duration::from_secs(5),
            &[json!({"readinessProbe": {"periodSeconds": 1}})],
            true,
        );
        assert_eq!(fast.per_domain(), Duration::from_secs(121));
    }
}
