//! Typed ids of the indexed view: each dense id names the table it indexes, so a Workload id
//! cannot index the ClusterQueues, nor a ClusterQueue id the (flavor, resource) pairs. Tables
//! are [`TiVec`]s keyed by their id (`typed-index-collections`; see `docs/decisions.md`).
//!
//! Ids are assigned by the index in name order (see [`super::index`]) and compare as their
//! numbers, so sorting by an id sorts as the plain index did.

pub(crate) use typed_index_collections::{TiSlice, TiVec};

/// A dense id: a `usize` that only indexes its own table.
macro_rules! dense_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub(crate) struct $name(usize);

        impl From<usize> for $name {
            fn from(i: usize) -> Self {
                $name(i)
            }
        }

        impl From<$name> for usize {
            fn from(id: $name) -> usize {
                id.0
            }
        }
    };
}

dense_id!(
    /// A Workload: its place in `Snapshot::workloads` and in the index's entries.
    WorkloadIx
);
dense_id!(
    /// A ClusterQueue, in name order; also its node in the cohort tree ([`CqIx::node`]).
    CqIx
);
dense_id!(
    /// A LocalQueue, in (namespace, name) order.
    LqIx
);
dense_id!(
    /// A node of the cohort tree: a ClusterQueue (the first ids, one per [`CqIx`]) or a Cohort.
    NodeIx
);
dense_id!(
    /// A ResourceFlavor, or a flavor name something refers to.
    FlavorIx
);
dense_id!(
    /// A resource name (`cpu`, `memory`, …).
    ResourceIx
);
dense_id!(
    /// A (flavor, resource) pair: the unit quota and usage are kept in.
    FrIx
);

impl CqIx {
    /// The ClusterQueue's node in the cohort tree (ClusterQueues are the tree's first nodes).
    pub fn node(self) -> NodeIx {
        NodeIx(self.0)
    }
}

impl From<CqIx> for NodeIx {
    fn from(c: CqIx) -> NodeIx {
        c.node()
    }
}
