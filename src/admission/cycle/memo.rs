//! Decisions reused within a pass for Workloads of the same shape, while nothing changed in
//! their cohort tree.

use crate::admission::PendingMessage;
use crate::admission::ids::{CqIx, NodeIx, TiVec, WorkloadIx};
use crate::admission::index::Index;
use crate::admission::workloads::NO_SHAPE;
use crate::types::kueue::WithinClusterQueue;

/// How many shapes per ClusterQueue [`Memo`] remembers.
pub(super) const MEMO_WIDTH: usize = 8;

/// What a pass decided for a Workload that changed nothing, reused for the next Workload of the
/// same ClusterQueue with the same PodSets (and, for a pending one, the same standing in
/// preemption) while nothing changed in its cohort tree: a pass looks at thousands of pending
/// Workloads of a few shapes against the same usage. Decisions are exactly those computed
/// afresh; only the work is saved.
pub(super) struct Memo {
    /// Per cohort tree root: bumped when usage, victims or the pass's admissions change in it.
    epoch: TiVec<NodeIx, u64>,
    /// Per ClusterQueue: (a Workload, epoch, how far it would borrow).
    pub borrows: TiVec<CqIx, Vec<Remembered<u8>>>,
    /// Per ClusterQueue: (a Workload left pending without any change, epoch, its message).
    pub pending: TiVec<CqIx, Vec<Remembered<PendingMessage>>>,
}

/// (a Workload, the epoch of its cohort tree, what was decided for it).
pub(super) type Remembered<T> = (WorkloadIx, u64, T);

impl Memo {
    pub fn new(ix: &Index) -> Self {
        Memo {
            epoch: TiVec::from(vec![0; ix.q.tree.nodes.len()]),
            borrows: TiVec::from(vec![Vec::new(); ix.q.cqs.len()]),
            pending: TiVec::from(vec![Vec::new(); ix.q.cqs.len()]),
        }
    }

    /// The epoch of ClusterQueue `c`'s cohort tree.
    pub fn epoch(&self, ix: &Index, c: CqIx) -> u64 {
        self.epoch[ix.q.cqs[c].root]
    }

    /// Something changed in ClusterQueue `c`'s cohort tree: what was remembered there is stale.
    pub fn changed(&mut self, ix: &Index, c: CqIx) {
        self.epoch[ix.q.cqs[c].root] += 1;
    }

    /// A remembered entry for `i` in `c` at the current epoch, `same` telling which Workloads
    /// stand for `i`; stale entries are dropped.
    pub fn find<T>(
        entries: &mut Vec<Remembered<T>>,
        epoch: u64,
        same: impl Fn(WorkloadIx) -> bool,
    ) -> Option<&T> {
        entries.retain(|e| e.1 == epoch);
        entries.iter().find(|e| same(e.0)).map(|e| &e.2)
    }

    pub fn remember<T>(entries: &mut Vec<Remembered<T>>, entry: Remembered<T>) {
        if entries.len() >= MEMO_WIDTH {
            entries.remove(0);
        }
        entries.push(entry);
    }
}

/// Same PodSets (names, counts, requests, node selectors): the same interned shape.
pub(super) fn same_podsets(ix: &Index, a: WorkloadIx, b: WorkloadIx) -> bool {
    let shape = ix.workloads[a].shape;
    a == b || (shape != NO_SHAPE && shape == ix.workloads[b].shape)
}

/// Same PodSets, and the same standing as a preemptor in ClusterQueue `c`: priority, and the
/// queue order time where `withinClusterQueue` compares it.
pub(super) fn same_standing(ix: &Index, c: CqIx, a: WorkloadIx, b: WorkloadIx) -> bool {
    let (x, y) = (&ix.workloads[a], &ix.workloads[b]);
    x.priority == y.priority
        && (ix.q.cqs[c].within != WithinClusterQueue::LowerOrNewerEqualPriority
            || x.order_time == y.order_time)
        && same_podsets(ix, a, b)
}
