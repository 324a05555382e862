//! What an admission cycle reads: the stores with the loop's own not-yet-watched writes laid over
//! them (*assumed* statuses, as Kueue's cache assumes workloads).
//!
//! The snapshot is kept between cycles and only the objects that changed are copied again
//! ([`reuse_copies`]): a cycle runs on every change of any Workload or queue, and copying every
//! Workload each time made the loop cost grow with the fleet times its churn.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::runtime::reflector::Store;

use super::super::{Context, Monotonic};
use crate::admission::Snapshot;
use crate::podsets::PodDefaults;
use crate::runtime::{Assumed, reuse_copies};
use crate::types::kueue::{Workload, WorkloadStatus};

/// A status this loop wrote that the store may not show yet.
#[derive(Clone, Debug)]
pub(super) struct AssumedStatus {
    /// The store shows the write (or something newer) from this version on.
    pub resource_version: u64,
    /// The version later writes are conditioned on while the assumption holds.
    pub decided_rv: String,
    pub status: WorkloadStatus,
    /// Tells this assumption from any other (the snapshot copies a Workload again when its
    /// overlay changes).
    serial: u64,
}

impl AssumedStatus {
    pub fn new(resource_version: u64, decided_rv: String, status: WorkloadStatus) -> Self {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        AssumedStatus {
            resource_version,
            decided_rv,
            status,
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// The loop's assumed statuses by Workload (`ns/name`).
pub(super) type Assumptions = Assumed<AssumedStatus>;

/// How long a write of unknown outcome is assumed to have committed.
pub(super) const UNCONFIRMED_FOR: Duration = Duration::from_secs(30);

/// Lays each assumption over its Workload in `workloads` (sorted by namespace and name: the
/// assumption's serial marks the copy); forgets those the store has caught up with, that
/// expired at `now`, or whose Workload is gone.
fn settle(assumed: &mut Assumptions, workloads: &mut [(Arc<Workload>, u64)], now: Monotonic) {
    assumed.settle(now, |k, a| {
        let (ns, name) = k.split_once('/').unwrap_or_default();
        let found = workloads.binary_search_by(|(w, _)| {
            let m = &w.metadata;
            (m.namespace.as_deref(), m.name.as_deref()).cmp(&(Some(ns), Some(name)))
        });
        match found {
            Ok(i) if rv(&workloads[i].0) < a.resource_version => {
                workloads[i].1 = a.serial;
                true
            }
            _ => false,
        }
    });
}

pub(super) fn key(w: &Workload) -> String {
    format!(
        "{}/{}",
        w.metadata.namespace.as_deref().unwrap_or_default(),
        w.metadata.name.as_deref().unwrap_or_default()
    )
}

pub(super) fn rv(w: &Workload) -> u64 {
    w.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The store objects each kind of the snapshot was copied from (with the overlay laid over a
/// Workload: `0` for none, else its assumption's serial).
#[derive(Default)]
struct Sources {
    workloads: Vec<(Arc<Workload>, u64)>,
    flavors: Vec<(Arc<crate::types::kueue::ResourceFlavor>, ())>,
    cohorts: Vec<(Arc<crate::types::kueue::Cohort>, ())>,
    cluster_queues: Vec<(Arc<crate::types::kueue::ClusterQueue>, ())>,
    local_queues: Vec<(Arc<crate::types::kueue::LocalQueue>, ())>,
    priority_classes: Vec<(Arc<crate::types::kueue::WorkloadPriorityClass>, ())>,
}

/// The admission loop's view, kept between cycles.
#[derive(Default)]
pub(super) struct Observer {
    snapshot: Snapshot,
    sources: Sources,
}

/// `store`'s objects in (namespace, name) order, each with no variant.
fn plain<K>(store: &Store<K>) -> Vec<(Arc<K>, ())>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    use crate::runtime::SortedState;
    store.sorted_state().into_iter().map(|a| (a, ())).collect()
}

fn copy<K: Clone>(a: &Arc<K>, (): ()) -> K {
    a.as_ref().clone()
}

impl Observer {
    /// Everything admission reads now. Assumptions the store has caught up with (or that
    /// expired), and those of deleted Workloads, are forgotten.
    pub fn snapshot(&mut self, ctx: &Context, assumed: &mut Assumptions) -> &Snapshot {
        use crate::runtime::SortedState;
        let s = &ctx.stores;
        let now = ctx.clock.monotonic();
        let mut workloads: Vec<(Arc<Workload>, u64)> = s
            .workloads
            .sorted_state()
            .into_iter()
            .map(|w| (w, 0))
            .collect();
        settle(assumed, &mut workloads, now);
        let snap = &mut self.snapshot;
        let src = &mut self.sources;
        reuse_copies(
            &mut src.workloads,
            &mut snap.workloads,
            workloads,
            |w, _| laid_over(w, assumed),
        );
        reuse_copies(&mut src.flavors, &mut snap.flavors, plain(&s.flavors), copy);
        reuse_copies(&mut src.cohorts, &mut snap.cohorts, plain(&s.cohorts), copy);
        reuse_copies(
            &mut src.cluster_queues,
            &mut snap.cluster_queues,
            plain(&s.cluster_queues),
            copy,
        );
        reuse_copies(
            &mut src.local_queues,
            &mut snap.local_queues,
            plain(&s.local_queues),
            copy,
        );
        reuse_copies(
            &mut src.priority_classes,
            &mut snap.priority_classes,
            plain(&s.priority_classes),
            copy,
        );
        snap.namespace_labels = s
            .namespaces
            .as_ref()
            .map(|ns| {
                ns.sorted_state()
                    .iter()
                    .filter_map(|n| {
                        Some((
                            n.metadata.name.clone()?,
                            n.metadata.labels.clone().unwrap_or_default(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        snap.pod_defaults = pod_defaults(ctx);
        &self.snapshot
    }
}

/// What the cached LimitRanges and RuntimeClasses add to a PodSet's requests.
fn pod_defaults(ctx: &Context) -> PodDefaults {
    use crate::runtime::SortedState;
    let s = &ctx.stores;
    let limit_ranges = s.limit_ranges.as_ref().map(|st| st.sorted_state());
    let runtime_classes = s.runtime_classes.as_ref().map(|st| st.sorted_state());
    let lr: Vec<_> = limit_ranges.iter().flatten().map(|a| a.as_ref()).collect();
    let rc: Vec<_> = runtime_classes
        .iter()
        .flatten()
        .map(|a| a.as_ref())
        .collect();
    PodDefaults::new(&lr, &rc)
}

/// The store's Workload with its assumed status, if the loop assumes one.
fn laid_over(w: &Arc<Workload>, assumed: &Assumptions) -> Workload {
    let mut copy = w.as_ref().clone();
    if let Some(a) = assumed.get(key(w).as_str()) {
        copy.status = Some(a.status.clone());
        copy.metadata.resource_version = Some(a.decided_rv.clone());
    }
    copy
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{AssumedStatus, Assumptions, Monotonic, Workload, settle};

    fn workload(name: &str, rv: u64) -> (Arc<Workload>, u64) {
        let mut w = Workload::new(name, Default::default());
        w.metadata.namespace = Some("ns".into());
        w.metadata.resource_version = Some(rv.to_string());
        (Arc::new(w), 0)
    }

    fn assumed(rv: u64) -> AssumedStatus {
        AssumedStatus::new(rv, (rv - 1).to_string(), Default::default())
    }

    #[test]
    fn a_confirmed_write_is_assumed_until_the_store_shows_its_version() {
        let now = Monotonic::from_origin(Duration::from_secs(1000));
        let mut a = Assumptions::default();
        a.assume("ns/w".into(), assumed(12));
        let mut store = [workload("w", 11)];
        // no expiry: the store lagging a long time keeps it, laid over its Workload
        settle(&mut a, &mut store, now + Duration::from_secs(3600));
        assert!(a.get("ns/w").is_some());
        assert_ne!(store[0].1, 0, "the copy is marked with the assumption");
        let mut store = [workload("w", 12)];
        settle(&mut a, &mut store, now);
        assert!(a.get("ns/w").is_none());
        assert_eq!(store[0].1, 0);
    }

    #[test]
    fn a_write_of_unknown_outcome_is_assumed_until_a_newer_version_or_expiry() {
        let now = Monotonic::from_origin(Duration::from_secs(1000));
        let expires = now + Duration::from_secs(30);
        let mut a = Assumptions::default();
        a.assume_until("ns/w".into(), assumed(12), expires);
        settle(
            &mut a,
            &mut [workload("w", 11)],
            now + Duration::from_secs(29),
        );
        assert!(a.get("ns/w").is_some());
        // never committed: the assumption does not hold the quota forever
        settle(&mut a, &mut [workload("w", 11)], expires);
        assert!(a.get("ns/w").is_none());
        // decided on version 11: any newer version in the store settles it
        a.assume_until("ns/w".into(), assumed(12), expires);
        settle(&mut a, &mut [workload("w", 12)], now);
        assert!(a.get("ns/w").is_none());
    }

    #[test]
    fn the_assumption_of_a_deleted_workload_is_forgotten() {
        let now = Monotonic::from_origin(Duration::ZERO);
        let mut a = Assumptions::default();
        a.assume("ns/gone".into(), assumed(12));
        settle(&mut a, &mut [workload("w", 1)], now);
        assert!(a.is_empty());
    }
}
