//! What an admission cycle reads: the stores with the loop's own not-yet-watched writes laid over
//! them (*assumed* statuses, as Kueue's cache assumes workloads).
//!
//! The snapshot is kept between cycles and only the objects that changed are copied again
//! ([`reuse_copies`]): a cycle runs on every change of any Workload or queue, and copying every
//! Workload each time made the loop cost grow with the fleet times its churn.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::runtime::reflector::Store;

use super::super::{Context, Monotonic};
use crate::admission::Snapshot;
use crate::runtime::reuse_copies;
use crate::types::kueue::{Workload, WorkloadStatus};

/// A status this loop wrote that the store may not show yet.
#[derive(Clone, Debug)]
pub(super) struct Assumed {
    /// The store shows the write (or something newer) from this version on.
    pub resource_version: u64,
    /// The version later writes are conditioned on while the assumption holds.
    pub decided_rv: String,
    pub status: WorkloadStatus,
    /// `Some` for a write whose outcome is unknown (it may have committed, then timed out): the
    /// assumption is dropped after this instant if the store never showed a newer version.
    pub expires: Option<Monotonic>,
    /// Tells this assumption from any other (the snapshot copies a Workload again when its
    /// overlay changes).
    serial: u64,
}

impl Assumed {
    pub fn new(
        resource_version: u64,
        decided_rv: String,
        status: WorkloadStatus,
        expires: Option<Monotonic>,
    ) -> Self {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        Assumed {
            resource_version,
            decided_rv,
            status,
            expires,
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// How long a write of unknown outcome is assumed to have committed.
pub(super) const UNCONFIRMED_FOR: Duration = Duration::from_secs(30);

/// What a cycle sees of a Workload the loop wrote: the assumed status, or the store's again.
#[derive(Debug, PartialEq)]
pub(super) enum Overlay {
    Keep,
    Forget,
}

pub(super) fn overlay(store_rv: u64, a: &Assumed, now: Monotonic) -> Overlay {
    if store_rv >= a.resource_version || a.expires.is_some_and(|e| now >= e) {
        Overlay::Forget
    } else {
        Overlay::Keep
    }
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
    pub fn snapshot(&mut self, ctx: &Context, assumed: &mut HashMap<String, Assumed>) -> &Snapshot {
        use crate::runtime::SortedState;
        let s = &ctx.stores;
        let now = ctx.clock.monotonic();
        let mut workloads: Vec<(Arc<Workload>, u64)> = s
            .workloads
            .sorted_state()
            .into_iter()
            .map(|w| (w, 0))
            .collect();
        // each assumption finds its Workload in the sorted list; one the store has caught up
        // with, that expired, or whose Workload is gone is forgotten
        assumed.retain(|k, a| {
            let (ns, name) = k.split_once('/').unwrap_or_default();
            let found = workloads.binary_search_by(|(w, _)| {
                let m = &w.metadata;
                (m.namespace.as_deref(), m.name.as_deref()).cmp(&(Some(ns), Some(name)))
            });
            match found {
                Ok(i) if overlay(rv(&workloads[i].0), a, now) == Overlay::Keep => {
                    workloads[i].1 = a.serial;
                    true
                }
                _ => false,
            }
        });
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
        &self.snapshot
    }
}

/// The store's Workload with its assumed status, if the loop assumes one.
fn laid_over(w: &Arc<Workload>, assumed: &HashMap<String, Assumed>) -> Workload {
    let mut copy = w.as_ref().clone();
    if let Some(a) = assumed.get(&key(w)) {
        copy.status = Some(a.status.clone());
        copy.metadata.resource_version = Some(a.decided_rv.clone());
    }
    copy
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Assumed, Monotonic, Overlay, overlay};

    fn assumed(rv: u64, expires: Option<Monotonic>) -> Assumed {
        Assumed::new(rv, (rv - 1).to_string(), Default::default(), expires)
    }

    #[test]
    fn a_confirmed_write_is_assumed_until_the_store_shows_its_version() {
        let now = Monotonic::from_origin(Duration::from_secs(1000));
        let a = assumed(12, None);
        assert_eq!(overlay(11, &a, now), Overlay::Keep);
        assert_eq!(overlay(12, &a, now), Overlay::Forget);
        assert_eq!(overlay(40, &a, now), Overlay::Forget);
        // no expiry: the store lagging a long time keeps it
        assert_eq!(
            overlay(11, &a, now + Duration::from_secs(3600)),
            Overlay::Keep
        );
    }

    #[test]
    fn a_write_of_unknown_outcome_is_assumed_until_a_newer_version_or_expiry() {
        let now = Monotonic::from_origin(Duration::from_secs(1000));
        // decided on version 11: any newer version in the store settles it
        let a = assumed(12, Some(now + Duration::from_secs(30)));
        assert_eq!(overlay(11, &a, now), Overlay::Keep);
        assert_eq!(
            overlay(11, &a, now + Duration::from_secs(29)),
            Overlay::Keep
        );
        assert_eq!(overlay(12, &a, now), Overlay::Forget);
        // never committed: the assumption does not hold the quota forever
        assert_eq!(
            overlay(11, &a, now + Duration::from_secs(30)),
            Overlay::Forget
        );
    }
}
