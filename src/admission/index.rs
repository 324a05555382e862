//! The indexed view admission works on ([`Index`]), built once from the raw objects of a
//! [`Snapshot`]: the [`Queues`] (quotas parsed into exact quantities and laid out as a cohort
//! tree) and one [`WorkloadEntry`] per Workload, with keys, duplicates and key order resolved.
//!
//! Bad objects never stop the build: a ClusterQueue with a bad quota or a missing flavor is kept
//! with the reason it is inactive, a Workload with a bad template keeps the reason it cannot be
//! admitted. Ids (ClusterQueues, cohorts, flavors, resources) are assigned in name order, so the
//! view does not depend on the order of the input.

use std::collections::HashMap;

use super::queues::Queues;
use super::workloads::WorkloadEntry;
use super::{Options, Snapshot};

/// The whole indexed view.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    pub q: Queues,
    /// Parallel to `Snapshot::workloads`.
    pub workloads: Vec<WorkloadEntry>,
    pub by_key: HashMap<String, usize>,
    /// Workload indexes sorted by key.
    pub sorted: Vec<usize>,
    /// Position of each Workload in `sorted`: compares like its key, without comparing strings.
    pub rank: Vec<u32>,
}

impl Index {
    /// Builds the view. Objects without a name are ignored; of two objects with the same name,
    /// the first (in name order, then input order) is used.
    pub fn build(snapshot: &Snapshot, options: &Options) -> Index {
        let q = Queues::build(snapshot, options);
        let workloads: Vec<WorkloadEntry> =
            snapshot.workloads.iter().map(|w| q.derive(w)).collect();
        let mut ix = Index {
            q,
            workloads,
            ..Index::default()
        };
        ix.reindex_keys();
        ix
    }

    /// Rebuilds the key map and marks duplicates (the first in input order wins).
    pub fn reindex_keys(&mut self) {
        self.by_key.clear();
        for (i, w) in self.workloads.iter_mut().enumerate() {
            w.duplicate = self.by_key.contains_key(&w.key);
            if !w.duplicate {
                self.by_key.insert(w.key.clone(), i);
            }
        }
        let mut sorted: Vec<usize> = self.by_key.values().copied().collect();
        sorted.sort_by(|&a, &b| self.workloads[a].key.cmp(&self.workloads[b].key));
        self.rank = vec![u32::MAX; self.workloads.len()];
        for (r, &i) in sorted.iter().enumerate() {
            self.rank[i] = u32::try_from(r).unwrap_or(u32::MAX);
        }
        self.sorted = sorted;
    }
}
