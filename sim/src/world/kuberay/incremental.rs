//! `NewClusterWithIncrementalUpgrade` (KubeRay v1.7.0, `rayservice_controller.go`), pure, plus
//! an emulated Ray autoscaler that reacts to Serve's `target_capacity`.
//!
//! KubeRay creates the pending child with every worker group's `replicas` unset
//! (`constructRayClusterForRayService`; the CRD's default makes it 0, so KubeRay runs
//! `minReplicas` workers) and steers the upgrade through three numbers per side, kept in
//! `status.{active,pending}ServiceStatus`:
//! - `targetCapacity`: the Serve `target_capacity` submitted to that cluster
//!   (`reconcileServeTargetCapacity`): the pending side rises by `maxSurgePercent` while the sum is
//!   at most 100, the active side falls by `maxSurgePercent` while the sum is above 100, and each
//!   waits until the traffic has caught up with the pending capacity;
//! - `trafficRoutedPercent`: the HTTPRoute weights (`calculateTrafficRoutedPercent`): the pending
//!   side gains `stepSizePercent` every `intervalSeconds` once its cluster is ready, never past its
//!   `targetCapacity`;
//! - `lastTrafficMigratedTime`: when a side's weight last changed (`calculateStatus`).
//!
//! Promotion comes when the active capacity is 0 and the pending side takes 100 % of the traffic
//! (`utils.IsIncrementalUpgradeComplete`). The Ray autoscaler, which KubeRay leaves to Ray, is
//! emulated by [`goal_replicas`] and [`step_toward`]: Serve's demand at a `target_capacity` of
//! T % is T % of the group's full size, rounded up, within `[minReplicas, maxReplicas]`.
//!
//! Not emulated: the Gateway and HTTPRoute objects (taken as ready), the per-cluster Serve
//! Services, actual traffic, and the rollback (`RollbackInProgress`).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use raygate::types::ray::{RayService, RayServiceClusterStatus};

/// `rayv1.RayServiceNewClusterWithIncrementalUpgrade`.
pub(crate) const INCREMENTAL: &str = "NewClusterWithIncrementalUpgrade";
const TARGET_CAPACITY: &str = "targetCapacity";
const TRAFFIC: &str = "trafficRoutedPercent";
const LAST_MIGRATED: &str = "lastTrafficMigratedTime";

/// `utils.IsIncrementalUpgradeEnabled`: the `RayServiceIncrementalUpgrade` gate (Beta, on in
/// v1.7.0) and `upgradeStrategy.type=NewClusterWithIncrementalUpgrade`.
pub(crate) fn is_enabled(rs: &RayService) -> bool {
    rs.spec
        .upgrade_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref())
        == Some(INCREMENTAL)
}

/// `clusterUpgradeOptions` (`utils.GetRayServiceClusterUpgradeOptions`), `maxSurgePercent`
/// defaulting to 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub max_surge: i32,
    pub step_size: i32,
    pub interval: Duration,
}

/// The options of `rs`; `None` without `clusterUpgradeOptions` (KubeRay returns an error then:
/// "ClusterUpgradeOptions are not set during upgrade", and nothing moves).
pub(crate) fn options(rs: &RayService) -> Option<Options> {
    let o = rs
        .spec
        .upgrade_strategy
        .as_ref()?
        .cluster_upgrade_options
        .as_ref()?;
    Some(Options {
        max_surge: o.max_surge_percent.unwrap_or(100),
        step_size: o.step_size_percent?,
        interval: Duration::from_secs(u64::try_from(o.interval_seconds?).unwrap_or(0)),
    })
}

/// The incremental fields of one side of `status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Side {
    pub target_capacity: Option<i32>,
    pub traffic: Option<i32>,
    pub last_migrated: Option<Timestamp>,
}

fn int(slot: &RayServiceClusterStatus, key: &str) -> Option<i32> {
    slot.other
        .get(key)
        .and_then(Value::as_i64)
        .and_then(|v| i32::try_from(v).ok())
}

impl Side {
    pub(crate) fn read(slot: Option<&RayServiceClusterStatus>) -> Side {
        let Some(slot) = slot else {
            return Side::default();
        };
        Side {
            target_capacity: int(slot, TARGET_CAPACITY),
            traffic: int(slot, TRAFFIC),
            last_migrated: slot
                .other
                .get(LAST_MIGRATED)
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok()),
        }
    }

    pub(crate) fn write(&self, slot: &mut RayServiceClusterStatus) {
        let mut put = |key: &str, v: Option<Value>| match v {
            Some(v) => {
                slot.other.insert(key.to_string(), v);
            }
            None => {
                slot.other.remove(key);
            }
        };
        put(TARGET_CAPACITY, self.target_capacity.map(Value::from));
        put(TRAFFIC, self.traffic.map(Value::from));
        put(
            LAST_MIGRATED,
            self.last_migrated
                .and_then(|t| serde_json::to_value(Time(t)).ok()),
        );
    }
}

/// Both sides of an upgrade.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Upgrade {
    pub active: Side,
    pub pending: Side,
}

/// Which child a step is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Active,
    Pending,
}

/// `checkIfNeedTargetCapacityUpdate` (Gateway and HTTPRoute taken as ready, no rollback): both
/// children exist (the caller's check) and the upgrade has not reached active 0 / pending 100.
pub(crate) fn need_target_capacity_update(u: &Upgrade) -> bool {
    let (Some(active_tc), Some(_), Some(pending_tc), Some(_)) = (
        u.active.target_capacity,
        u.active.traffic,
        u.pending.target_capacity,
        u.pending.traffic,
    ) else {
        // "RayServiceStatus missing TargetCapacity or TrafficRoutedPercent"
        return true;
    };
    !(active_tc == 0 && pending_tc == 100)
}

/// `reconcileServeTargetCapacity` for the child in `role` (no rollback): unset capacities start
/// at active 100 / pending 0; nothing moves while the pending traffic lags its capacity; then the
/// pending side rises by `maxSurgePercent` while the sum is at most 100, or the active side falls
/// by it while the sum is above 100. Returns the new capacity of `role`'s side when it changed.
pub(crate) fn reconcile_target_capacity(
    u: &mut Upgrade,
    opts: &Options,
    role: Role,
) -> Option<i32> {
    let active_tc = *u.active.target_capacity.get_or_insert(100);
    let pending_tc = *u.pending.target_capacity.get_or_insert(0);
    let pending_traffic = u.pending.traffic.unwrap_or(0);
    if pending_tc != pending_traffic {
        // "Traffic is currently being migrated to pending cluster"
        return None;
    }
    let sum = active_tc.saturating_add(pending_tc);
    let (side, goal) = match role {
        Role::Active if sum > 100 => (&mut u.active, (active_tc - opts.max_surge).max(0)),
        Role::Pending if sum <= 100 => (
            &mut u.pending,
            pending_tc.saturating_add(opts.max_surge).min(100),
        ),
        _ => return None,
    };
    // applyServeTargetCapacity: no write when the goal is what the cluster has
    (side.target_capacity != Some(goal)).then(|| {
        side.target_capacity = Some(goal);
        goal
    })
}

/// `calculateTrafficRoutedPercent` (no rollback): the (active, pending) weights. The pending
/// weight stops at its `targetCapacity`; otherwise it gains `stepSizePercent` once `interval` has
/// passed since its `lastTrafficMigratedTime` (or at once without one), if the pending cluster is
/// ready.
pub(crate) fn traffic_weights(
    u: &Upgrade,
    opts: &Options,
    pending_ready: bool,
    now: Timestamp,
) -> (i32, i32) {
    let active = u.active.traffic.unwrap_or(100);
    let pending = u.pending.traffic.unwrap_or(0);
    let pending_tc = u.pending.target_capacity.unwrap_or(0);
    if pending == pending_tc {
        return (active, pending);
    }
    let due = u
        .pending
        .last_migrated
        .is_none_or(|t| now.duration_since(t).as_secs_f64() >= opts.interval.as_secs_f64());
    if !due || !pending_ready {
        return (active, pending);
    }
    let pending = pending
        .saturating_add(opts.step_size)
        .min(100)
        .min(pending_tc);
    (100 - pending, pending)
}

/// When the next traffic step is due (`None`: none is waiting on time).
pub(crate) fn next_traffic_step(u: &Upgrade, opts: &Options) -> Option<Timestamp> {
    let pending = u.pending.traffic.unwrap_or(0);
    if pending == u.pending.target_capacity.unwrap_or(0) {
        return None;
    }
    let last = u.pending.last_migrated?;
    last.checked_add(opts.interval).ok()
}

/// `calculateStatus`: the HTTPRoute's weights become `trafficRoutedPercent`, stamping
/// `lastTrafficMigratedTime` on a side whose weight changed (the pending side only while a
/// pending child exists).
pub(crate) fn record_weights(
    u: &mut Upgrade,
    (active, pending): (i32, i32),
    pending_exists: bool,
    now: Timestamp,
) {
    let set = |side: &mut Side, w: i32| {
        if side.traffic.unwrap_or(-1) != w {
            side.last_migrated = Some(now);
        }
        side.traffic = Some(w);
    };
    set(&mut u.active, active);
    if pending_exists {
        set(&mut u.pending, pending);
    }
}

/// `utils.IsIncrementalUpgradeComplete` (with the pending child present).
pub(crate) fn is_complete(u: &Upgrade) -> bool {
    u.active.target_capacity == Some(0) && u.pending.traffic == Some(100)
}

/// The emulated autoscaler's goal for a worker group of full size `full` (its `replicas` in the
/// RayService's `rayClusterConfig`) at `target_capacity` `tc` %: Serve asks for `tc` % of its
/// replicas, rounded up, and the autoscaler keeps the group within `[min, max]`.
pub(crate) fn goal_replicas(full: i32, tc: i32, min: i32, max: i32) -> i32 {
    let full = i64::from(full.max(0));
    let tc = i64::from(tc.clamp(0, 100));
    let want = (full * tc + 99) / 100;
    let want = i32::try_from(want).unwrap_or(i32::MAX);
    want.clamp(min.max(0), max.max(min.max(0)))
}

/// One autoscaler step from `current` toward `goal`, at most `step` replicas.
pub(crate) fn step_toward(current: i32, goal: i32, step: i32) -> i32 {
    let step = step.max(1);
    if goal > current {
        current.saturating_add(step).min(goal)
    } else {
        current.saturating_sub(step).max(goal)
    }
}

/// A worker the autoscaler may remove, as it sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Worker {
    pub name: String,
    /// The multi-host replica it is in (its whole replica goes with it), else its own name.
    pub replica: String,
    /// Never started: gated, or not bound to a node.
    pub idle_never_started: bool,
    pub created: Option<Timestamp>,
}

/// The pods to name in `workersToDelete` to remove `n` replicas: one pod per replica, replicas
/// whose pods never started first, then the newest (the Ray autoscaler removes idle nodes; a node
/// that never launched is the idlest).
pub(crate) fn victims(workers: &[Worker], n: usize) -> Vec<String> {
    let mut by_replica: Vec<&Worker> = Vec::new();
    for w in workers {
        match by_replica.iter_mut().find(|x| x.replica == w.replica) {
            // a replica counts as started once any of its pods did
            Some(x) if !w.idle_never_started => *x = w,
            Some(_) => {}
            None => by_replica.push(w),
        }
    }
    by_replica.sort_by(|a, b| {
        b.idle_never_started
            .cmp(&a.idle_never_started)
            .then(b.created.cmp(&a.created))
            .then(b.name.cmp(&a.name))
    });
    by_replica
        .into_iter()
        .take(n)
        .map(|w| w.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn opts(max_surge: i32, step_size: i32, interval: u64) -> Options {
        Options {
            max_surge,
            step_size,
            interval: Duration::from_secs(interval),
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    /// One emulated reconcile of the upgrade's numbers, in KubeRay's order: `reconcileServe` on
    /// the pending then the active child (`checkIfNeedTargetCapacityUpdate` →
    /// `reconcileServeTargetCapacity`), the HTTPRoute's weights, `calculateStatus`.
    fn pass(u: &mut Upgrade, o: &Options, now: Timestamp) {
        for role in [Role::Pending, Role::Active] {
            if need_target_capacity_update(u) {
                reconcile_target_capacity(u, o, role);
            }
        }
        let w = traffic_weights(u, o, true, now);
        record_weights(u, w, true, now);
    }

    #[test]
    fn capacities_and_traffic_step_as_kuberay_v1_7_does() {
        // maxSurgePercent 50, stepSizePercent 25 every 10 s: pending TC 0 → 50, traffic 25, 50,
        // active TC 100 → 50, pending TC → 100, traffic 75, 100, active TC → 0: complete
        let o = opts(50, 25, 10);
        let mut u = Upgrade {
            pending: Side {
                target_capacity: Some(0),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut seen = Vec::new();
        for s in (0..200).step_by(2) {
            pass(&mut u, &o, t(s));
            let row = (
                u.active.target_capacity.unwrap(),
                u.pending.target_capacity.unwrap(),
                u.pending.traffic.unwrap(),
            );
            if seen.last() != Some(&row) {
                seen.push(row);
            }
            if is_complete(&u) {
                break;
            }
        }
        assert_eq!(
            seen,
            vec![
                (100, 50, 25),
                (100, 50, 50),
                (50, 50, 50),
                (50, 100, 50),
                (50, 100, 75),
                (50, 100, 100),
                (0, 100, 100),
            ]
        );
        assert_eq!(u.active.traffic, Some(0));
    }

    #[test]
    fn traffic_waits_for_the_interval_and_a_ready_pending_cluster() {
        let o = opts(100, 20, 30);
        let mut u = Upgrade::default();
        u.pending.target_capacity = Some(100);
        u.pending.traffic = Some(20);
        u.pending.last_migrated = Some(t(0));
        assert_eq!(traffic_weights(&u, &o, true, t(29)), (100, 20));
        assert_eq!(next_traffic_step(&u, &o), Some(t(30)));
        assert_eq!(traffic_weights(&u, &o, false, t(30)), (100, 20));
        assert_eq!(traffic_weights(&u, &o, true, t(30)), (60, 40));
        // never past the pending target capacity
        u.pending.target_capacity = Some(30);
        assert_eq!(traffic_weights(&u, &o, true, t(30)), (70, 30));
    }

    #[test]
    fn status_fields_round_trip() {
        let side = Side {
            target_capacity: Some(40),
            traffic: Some(25),
            last_migrated: Some(t(7)),
        };
        let mut slot = RayServiceClusterStatus::default();
        side.write(&mut slot);
        assert_eq!(slot.other["targetCapacity"], 40);
        assert_eq!(
            slot.other["lastTrafficMigratedTime"],
            "2026-01-01T00:00:07Z"
        );
        assert_eq!(Side::read(Some(&slot)), side);
    }

    #[test]
    fn the_autoscaler_follows_target_capacity_within_min_and_max() {
        assert_eq!(goal_replicas(4, 0, 0, 10), 0);
        assert_eq!(goal_replicas(4, 0, 1, 10), 1);
        assert_eq!(goal_replicas(4, 30, 0, 10), 2, "30 % of 4 rounds up");
        assert_eq!(goal_replicas(4, 100, 0, 3), 3);
        assert_eq!(step_toward(0, 4, 1), 1);
        assert_eq!(step_toward(4, 0, 3), 1);
        assert_eq!(step_toward(2, 2, 1), 2);
    }

    #[test]
    fn scale_down_names_never_started_workers_first_then_the_newest() {
        let w = |name: &str, idle: bool, s: i64| Worker {
            name: name.into(),
            replica: name.into(),
            idle_never_started: idle,
            created: Some(t(s)),
        };
        let ws = [
            w("a", false, 1),
            w("b", false, 3),
            w("c", true, 0),
            w("d", false, 2),
        ];
        assert_eq!(victims(&ws, 2), vec!["c", "b"]);
        // a multi-host replica goes once
        let mut m = vec![
            w("r1-0", false, 1),
            w("r1-1", false, 1),
            w("r2-0", false, 5),
        ];
        m[0].replica = "r1".into();
        m[1].replica = "r1".into();
        m[2].replica = "r2".into();
        assert_eq!(victims(&m, 5).len(), 2);
    }

    proptest! {
        /// Whatever the options, the upgrade completes, the pending capacity never falls and the
        /// active one never rises, the traffic split always sums to 100 and the pending weight
        /// never passes its capacity; and the active capacity plus the pending one never exceed
        /// 100 + maxSurgePercent (KubeRay's surge bound).
        #[test]
        fn every_upgrade_completes_within_the_surge_bound(
            max_surge in 1i32..=100, step in 1i32..=100, interval in 0u64..60,
        ) {
            let step = step.min(max_surge);
            let o = opts(max_surge, step, interval);
            let mut u = Upgrade::default();
            u.pending.target_capacity = Some(0);
            let (mut last_pending, mut last_active) = (0, 100);
            let mut s = 0;
            while !is_complete(&u) {
                pass(&mut u, &o, t(s));
                let (a, p) = (u.active.target_capacity.unwrap(), u.pending.target_capacity.unwrap());
                prop_assert!(p >= last_pending && a <= last_active);
                prop_assert!(a + p <= 100 + max_surge);
                prop_assert_eq!(u.active.traffic.unwrap() + u.pending.traffic.unwrap(), 100);
                prop_assert!(u.pending.traffic.unwrap() <= p);
                (last_pending, last_active) = (p, a);
                s += 1;
                prop_assert!(s < 100_000, "no completion: {:?}", u);
            }
        }
    }
}
