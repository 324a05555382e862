//! The indexed view admission works on ([`Index`]), built once from the raw objects of a
//! [`Snapshot`]: the [`Queues`] (quotas parsed into exact quantities and laid out as a cohort
//! tree) and one [`WorkloadEntry`] per Workload, with keys, duplicates and key order resolved.
//!
//! Bad objects never stop the build: a ClusterQueue with a bad quota or a missing flavor is kept
//! with the reason it is inactive, a Workload with a bad template keeps the reason it cannot be
//! admitted. Ids (ClusterQueues, cohorts, flavors, resources) are assigned in name order, so the
//! view does not depend on the order of the input.

use std::collections::HashMap;

use super::ids::{CqIx, TiVec, WorkloadIx};
use super::queues::Queues;
use super::workloads::{NO_SHAPE, PodSetRequests, WorkloadEntry, shape_hash};
use super::{Options, Snapshot};

/// (ClusterQueue, not a preemptor, priority reversed, queue order time, rank, Workload).
pub(crate) type QueueKey = (
    CqIx,
    bool,
    std::cmp::Reverse<i32>,
    k8s_openapi::jiff::Timestamp,
    u32,
    WorkloadIx,
);

/// The whole indexed view.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    pub q: Queues,
    /// Parallel to `Snapshot::workloads`.
    pub workloads: TiVec<WorkloadIx, WorkloadEntry>,
    pub by_key: HashMap<String, WorkloadIx, foldhash::fast::FixedState>,
    /// Shapes by hash: (shape id, its PodSets); a Workload's `shape` indexes `shape_podsets`.
    shapes: HashMap<u64, Vec<u32>, foldhash::fast::FixedState>,
    shape_podsets: Vec<Vec<PodSetRequests>>,
    /// Workloads sorted by key.
    pub sorted: Vec<WorkloadIx>,
    /// Position of each Workload in `sorted`: compares like its key, without comparing strings.
    pub rank: TiVec<WorkloadIx, u32>,
    /// Every Workload with a ClusterQueue in queue order (see [`Index::queue_key`]), pending or
    /// not; `None` when a change may have moved one (then a pass sorts afresh).
    pub order: Option<Vec<WorkloadIx>>,
    /// A pass reports every Pending decision, also one that would change nothing (tests).
    pub report_unchanged: bool,
}

impl Index {
    /// Builds the view. Objects without a name are ignored; of two objects with the same name,
    /// the first (in name order, then input order) is used.
    pub fn build(snapshot: &Snapshot, options: &Options) -> Index {
        let q = Queues::build(snapshot, options);
        let workloads: TiVec<WorkloadIx, WorkloadEntry> =
            snapshot.workloads.iter().map(|w| q.derive(w)).collect();
        let mut ix = Index {
            q,
            workloads,
            ..Index::default()
        };
        for i in ix.workloads.keys() {
            ix.intern_shape(i);
        }
        ix.reindex_keys();
        ix.sort_queues();
        ix
    }

    /// Sets Workload `i`'s shape: the id of its PodSets, shared with every Workload whose
    /// PodSets are equal (a pass compares shapes for each pending Workload; ids spare it
    /// comparing the PodSets themselves).
    pub fn intern_shape(&mut self, i: WorkloadIx) {
        let Ok(podsets) = &self.workloads[i].podsets else {
            self.workloads[i].shape = NO_SHAPE;
            return;
        };
        let ids = self.shapes.entry(shape_hash(podsets)).or_default();
        let found = ids
            .iter()
            .copied()
            .find(|&id| self.shape_podsets[id as usize] == *podsets);
        let id = match found {
            Some(id) => id,
            None => {
                let id = u32::try_from(self.shape_podsets.len()).unwrap_or(NO_SHAPE);
                if id != NO_SHAPE {
                    ids.push(id);
                    self.shape_podsets.push(podsets.clone());
                }
                id
            }
        };
        self.workloads[i].shape = id;
    }

    /// A Workload's place in its ClusterQueue: a Workload that preempted in an earlier pass
    /// first, then priority (higher first), then queue order time, then key (by rank).
    pub fn queue_key(&self, i: WorkloadIx) -> Option<QueueKey> {
        let w = &self.workloads[i];
        let t = w.target.as_ref().ok()?;
        Some((
            t.cq,
            !w.preemptor,
            std::cmp::Reverse(w.priority),
            w.order_time,
            self.rank[i],
            i,
        ))
    }

    /// Recomputes [`Index::order`].
    pub fn sort_queues(&mut self) {
        let mut keyed: Vec<QueueKey> = self
            .sorted
            .iter()
            .filter_map(|&i| self.queue_key(i))
            .collect();
        keyed.sort_unstable();
        self.order = Some(keyed.into_iter().map(|k| k.5).collect());
    }

    /// Rebuilds the key map and marks duplicates (the first in input order wins).
    pub fn reindex_keys(&mut self) {
        self.by_key.clear();
        for (i, w) in self.workloads.iter_mut_enumerated() {
            w.duplicate = self.by_key.contains_key(&w.key);
            if !w.duplicate {
                self.by_key.insert(w.key.clone(), i);
            }
        }
        let mut sorted: Vec<WorkloadIx> = self.by_key.values().copied().collect();
        sorted.sort_by(|&a, &b| self.workloads[a].key.cmp(&self.workloads[b].key));
        self.rank = TiVec::from(vec![u32::MAX; self.workloads.len()]);
        for (r, &i) in sorted.iter().enumerate() {
            self.rank[i] = u32::try_from(r).unwrap_or(u32::MAX);
        }
        self.sorted = sorted;
        self.order = None;
    }
}
