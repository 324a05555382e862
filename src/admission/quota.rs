//! The cohort tree as Kueue's resource nodes (`pkg/cache/scheduler/resource_node.go`): what a
//! ClusterQueue or Cohort can use now (`available`) and at most (`potential`), and how usage
//! climbs the tree.
//!
//! Every node (ClusterQueue or Cohort) has, per (flavor, resource): its own quota, a `subtree`
//! quota (own nominal plus what its children lend up) and a `guaranteed` part that it never lends
//! (`subtree − lendingLimit`). Usage beyond `guaranteed` is stored in the parent, so a parent's
//! usage is exactly what its children borrowed from it.

use super::ids::{FrIx, NodeIx, TiVec};
use crate::quantity::Quantity;

/// Usage per (flavor, resource) pair, in a short list (a Workload's, what a ClusterQueue keeps).
pub(crate) type Charges = Vec<(FrIx, Quantity)>;

/// Adds `value` of `fr` to `charges` (to its entry, else as a new one at the end).
pub(crate) fn add_charge(charges: &mut Charges, fr: FrIx, value: Quantity) {
    match charges.iter_mut().find(|(f, _)| *f == fr) {
        Some((_, v)) => *v += value,
        None => charges.push((fr, value)),
    }
}

/// Quota of one node for one (flavor, resource).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct FlavorResourceQuota {
    pub nominal: Quantity,
    /// `None`: may borrow without limit.
    pub borrowing_limit: Option<Quantity>,
    /// `None`: lends all of its subtree quota.
    pub lending_limit: Option<Quantity>,
}

/// One ClusterQueue or Cohort.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub parent: Option<NodeIx>,
    pub quota: TiVec<FrIx, FlavorResourceQuota>,
    pub subtree: TiVec<FrIx, Quantity>,
    pub guaranteed: TiVec<FrIx, Quantity>,
    /// Kueue's `getNodeHeight`: 0 for a ClusterQueue or an empty Cohort, else one more than its
    /// highest child Cohort (at least 1).
    pub height: u8,
}

/// All nodes of all cohort trees, `n_fr` (flavor, resource) pairs each.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tree {
    pub n_fr: usize,
    pub nodes: TiVec<NodeIx, Node>,
}

/// Usage per node and (flavor, resource), node-major.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Usage {
    n_fr: usize,
    values: Vec<Quantity>,
}

impl Usage {
    pub fn new(tree: &Tree) -> Self {
        Usage {
            n_fr: tree.n_fr,
            values: vec![Quantity::ZERO; tree.n_fr * tree.nodes.len()],
        }
    }

    pub fn get(&self, node: impl Into<NodeIx>, fr: FrIx) -> Quantity {
        self.values[self.at(node.into(), fr)]
    }

    fn slot(&mut self, node: NodeIx, fr: FrIx) -> &mut Quantity {
        let at = self.at(node, fr);
        &mut self.values[at]
    }

    fn at(&self, node: NodeIx, fr: FrIx) -> usize {
        usize::from(node) * self.n_fr + usize::from(fr)
    }
}

fn max0(q: Quantity) -> Quantity {
    if q.is_negative() { Quantity::ZERO } else { q }
}

impl Tree {
    pub fn new(n_fr: usize) -> Self {
        Tree {
            n_fr,
            nodes: TiVec::new(),
        }
    }

    /// A node: a ClusterQueue's ([`super::ids::CqIx`]) or a Cohort's.
    pub fn node(&self, node: impl Into<NodeIx>) -> &Node {
        &self.nodes[node.into()]
    }

    /// The (flavor, resource) ids, in order.
    pub fn frs(&self) -> impl Iterator<Item = FrIx> + use<> {
        (0..self.n_fr).map(FrIx::from)
    }

    /// Adds a node with its own quota (dense, `n_fr` long); parents are linked later.
    pub fn push(&mut self, quota: TiVec<FrIx, FlavorResourceQuota>) -> NodeIx {
        debug_assert_eq!(quota.len(), self.n_fr);
        self.nodes.push_and_get_key(Node {
            parent: None,
            subtree: quota.iter().map(|q| q.nominal).collect(),
            guaranteed: TiVec::from(vec![Quantity::ZERO; self.n_fr]),
            height: 0,
            quota,
        })
    }

    /// Computes subtree and guaranteed quotas bottom-up. Parents must form a forest.
    pub fn finalize(&mut self) {
        let n = self.nodes.len();
        let mut depth: TiVec<NodeIx, usize> = TiVec::from(vec![0; n]);
        for (i, d) in depth.iter_mut_enumerated() {
            let mut p = self.nodes[i].parent;
            while let Some(x) = p {
                *d += 1;
                p = self.nodes[x].parent;
                if *d > n {
                    break; // not reachable: the builder cuts cycles
                }
            }
        }
        let mut order: Vec<NodeIx> = self.nodes.keys().collect();
        order.sort_by_key(|&i| std::cmp::Reverse(depth[i]));
        for i in order {
            for fr in self.frs() {
                let node = &mut self.nodes[i];
                node.guaranteed[fr] = match node.quota[fr].lending_limit {
                    Some(l) => max0(node.subtree[fr] - l),
                    None => Quantity::ZERO,
                };
                let lent = node.subtree[fr] - node.guaranteed[fr];
                if let Some(p) = node.parent {
                    self.nodes[p].subtree[fr] += lent;
                }
            }
            // children come before their parent in this order
            if let Some(p) = self.nodes[i].parent {
                let h = self.nodes[i].height.saturating_add(1);
                self.nodes[p].height = self.nodes[p].height.max(h);
            }
        }
    }

    /// What `node` can still use of `fr`, borrowing included (may be negative when over-committed).
    pub fn available(&self, usage: &Usage, node: impl Into<NodeIx>, fr: FrIx) -> Quantity {
        let node = node.into();
        let n = &self.nodes[node];
        let used = usage.get(node, fr);
        let Some(parent) = n.parent else {
            return n.subtree[fr] - used;
        };
        let local = max0(n.guaranteed[fr] - used);
        let mut from_parent = self.available(usage, parent, fr);
        if let Some(bl) = n.quota[fr].borrowing_limit {
            let stored_in_parent = n.subtree[fr] - n.guaranteed[fr];
            let used_in_parent = max0(used - n.guaranteed[fr]);
            from_parent = from_parent.min(stored_in_parent - used_in_parent + bl);
        }
        local + from_parent
    }

    /// What `node` could use of `fr` if nothing were in use.
    pub fn potential(&self, node: impl Into<NodeIx>, fr: FrIx) -> Quantity {
        let n = self.node(node);
        let Some(parent) = n.parent else {
            return n.subtree[fr];
        };
        let mut available = n.guaranteed[fr] + self.potential(parent, fr);
        if let Some(bl) = n.quota[fr].borrowing_limit {
            available = available.min(n.subtree[fr] + bl);
        }
        available
    }

    /// Whether `val` more of `fr` in ClusterQueue `cq` fits in a Cohort of its tree below the
    /// root: Kueue's `FindHeightOfLowestSubtreeThatFits` (`mayReclaimInHierarchy`,
    /// `pkg/scheduler/preemption/classical/hierarchical_preemption.go` v0.19.2). Walking up from
    /// `cq`, the first node that holds `val` (less what each node below guarantees) without
    /// borrowing itself is that subtree; it must have a parent. A ClusterQueue that does not
    /// borrow with `val` answers whether it has a parent.
    pub fn may_reclaim_in_hierarchy(
        &self,
        usage: &Usage,
        cq: impl Into<NodeIx>,
        fr: FrIx,
        val: Quantity,
    ) -> bool {
        let cq = cq.into();
        let n = &self.nodes[cq];
        let used = usage.get(cq, fr);
        if n.parent.is_none() || used + val <= n.quota[fr].nominal {
            return n.parent.is_some();
        }
        let mut remaining = val - max0(n.guaranteed[fr] - used);
        let mut at = n.parent;
        while let Some(x) = at {
            let node = &self.nodes[x];
            if usage.get(x, fr) + remaining <= node.subtree[fr] {
                return node.parent.is_some();
            }
            remaining -= max0(node.guaranteed[fr] - usage.get(x, fr));
            at = node.parent;
        }
        false
    }

    /// The scheduler's borrowing distance for `val` more of `fr` in ClusterQueue `cq`: Kueue's
    /// `FindHeightOfLowestSubtreeThatFits` (same file as above): 0 when it fits in `cq`'s
    /// nominal quota or `cq` has no cohort, else the height of the lowest Cohort on its path that
    /// holds it (what each node below guarantees taken off on the way up), the root's if none
    /// does. In a flat cohort: 1 for anything that borrows.
    pub fn borrowing_height(
        &self,
        usage: &Usage,
        cq: impl Into<NodeIx>,
        fr: FrIx,
        val: Quantity,
    ) -> u8 {
        let cq = cq.into();
        let n = &self.nodes[cq];
        let used = usage.get(cq, fr);
        if n.parent.is_none() || used + val <= n.quota[fr].nominal {
            return 0;
        }
        let mut remaining = val - max0(n.guaranteed[fr] - used);
        let mut at = n.parent;
        let mut last = cq;
        while let Some(x) = at {
            let node = &self.nodes[x];
            if usage.get(x, fr) + remaining <= node.subtree[fr] {
                return node.height;
            }
            remaining -= max0(node.guaranteed[fr] - usage.get(x, fr));
            last = x;
            at = node.parent;
        }
        self.nodes[last].height
    }

    /// Charges `value` to `node`; the part beyond its guaranteed quota climbs to the parent.
    pub fn add_usage(&self, usage: &mut Usage, node: impl Into<NodeIx>, fr: FrIx, value: Quantity) {
        let node = node.into();
        let n = &self.nodes[node];
        let local = max0(n.guaranteed[fr] - usage.get(node, fr));
        *usage.slot(node, fr) += value;
        if let Some(parent) = n.parent
            && value > local
        {
            self.add_usage(usage, parent, fr, value - local);
        }
    }

    /// Releases `value` from `node`, the exact inverse of [`Tree::add_usage`].
    pub fn remove_usage(
        &self,
        usage: &mut Usage,
        node: impl Into<NodeIx>,
        fr: FrIx,
        value: Quantity,
    ) {
        let node = node.into();
        let n = &self.nodes[node];
        let stored_in_parent = usage.get(node, fr) - n.guaranteed[fr];
        *usage.slot(node, fr) -= value;
        if let Some(parent) = n.parent
            && stored_in_parent > Quantity::ZERO
        {
            self.remove_usage(usage, parent, fr, value.min(stored_in_parent));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: i64) -> Quantity {
        Quantity::from_units(n)
    }

    fn fq(nominal: i64, bl: Option<i64>, ll: Option<i64>) -> TiVec<FrIx, FlavorResourceQuota> {
        TiVec::from(vec![FlavorResourceQuota {
            nominal: q(nominal),
            borrowing_limit: bl.map(q),
            lending_limit: ll.map(q),
        }])
    }

    /// Node `i` (in the order pushed).
    fn n(i: usize) -> NodeIx {
        NodeIx::from(i)
    }

    /// (flavor, resource) pair `i`.
    fn fr(i: usize) -> FrIx {
        FrIx::from(i)
    }

    /// cohort(root, own 0) ← a (nominal 10, lendingLimit 4), b (nominal 6, borrowingLimit 3)
    fn flat() -> Tree {
        let mut t = Tree::new(1);
        let a = t.push(fq(10, None, Some(4)));
        let b = t.push(fq(6, Some(3), None));
        let c = t.push(fq(0, None, None));
        t.nodes[a].parent = Some(c);
        t.nodes[b].parent = Some(c);
        t.finalize();
        t
    }

    #[test]
    fn borrowing_distance_is_the_height_of_the_lowest_cohort_that_holds_the_request() {
        // co0 (own 0) ⊃ {co2 (own 3) ⊃ cq2 (nominal 8), cq1 (nominal 8)}
        let mut t = Tree::new(1);
        let cq2 = t.push(fq(8, None, None));
        let cq1 = t.push(fq(8, None, None));
        let co2 = t.push(fq(3, None, None));
        let co0 = t.push(fq(0, None, None));
        t.nodes[cq2].parent = Some(co2);
        t.nodes[cq1].parent = Some(co0);
        t.nodes[co2].parent = Some(co0);
        t.finalize();
        assert_eq!((t.nodes[co2].height, t.nodes[co0].height), (1, 2));
        let u = Usage::new(&t);
        assert_eq!(t.borrowing_height(&u, cq2, fr(0), q(8)), 0); // within its nominal quota
        assert_eq!(t.borrowing_height(&u, cq2, fr(0), q(11)), 1); // co2 holds it
        assert_eq!(t.borrowing_height(&u, cq2, fr(0), q(12)), 2); // only co0 does
        assert_eq!(t.borrowing_height(&u, cq1, fr(0), q(9)), 2); // directly under the root
        assert_eq!(t.borrowing_height(&u, cq1, fr(0), q(99)), 2); // nothing holds it: the root's
    }

    #[test]
    fn subtree_counts_only_lendable_quota() {
        let t = flat();
        assert_eq!(t.nodes[n(2)].subtree[fr(0)], q(10)); // 4 from a + 6 from b
        assert_eq!(t.nodes[n(0)].guaranteed[fr(0)], q(6));
        assert_eq!(t.potential(n(0), fr(0)), q(16)); // a: 6 guaranteed + all 10 of the cohort
        assert_eq!(t.potential(n(1), fr(0)), q(9)); // b: 6 + borrowingLimit 3
    }

    #[test]
    fn borrowing_is_bounded_by_limits_and_usage_climbs() {
        let t = flat();
        let mut u = Usage::new(&t);
        assert_eq!(t.available(&u, n(1), fr(0)), q(9));
        t.add_usage(&mut u, n(1), fr(0), q(8)); // b borrows 2 of a's lendable 4
        assert_eq!(u.get(n(2), fr(0)), q(8));
        assert_eq!(t.available(&u, n(1), fr(0)), q(1));
        assert_eq!(t.available(&u, n(0), fr(0)), q(8)); // 6 guaranteed + 2 left in the cohort
        t.add_usage(&mut u, n(0), fr(0), q(7)); // 6 from guaranteed, 1 from cohort
        assert_eq!(u.get(n(2), fr(0)), q(9));
        t.remove_usage(&mut u, n(0), fr(0), q(7));
        t.remove_usage(&mut u, n(1), fr(0), q(8));
        assert_eq!(u, Usage::new(&t));
    }
}
