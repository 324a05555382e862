//! Reflector stores read in a stable order: [`SortedState`] lists a store's objects in
//! (namespace, name) order, [`SortedCopies`] keeps owned copies of them up to date without copying
//! unchanged objects again. Used by the controller's loops and by the simulated cluster's actors.

use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{self, Store};

/// A reflector store's objects in (namespace, name) order. `Store::state()` lists them in hash
/// order, which differs between processes and between stores in one process; every read that
/// acts on a store's objects in turn (writes, or a first match) goes through this, so raygate's
/// writes come in a stable, readable order and a simulated run is reproducible.
pub trait SortedState<K> {
    fn sorted_state(&self) -> Vec<Arc<K>>;
}

impl<K> SortedState<K> for Store<K>
where
    K: Resource + reflector::Lookup + Clone + 'static,
    <K as reflector::Lookup>::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn sorted_state(&self) -> Vec<Arc<K>> {
        let mut objects = self.state();
        fn key<K: Resource>(o: &K) -> (Option<&str>, Option<&str>) {
            let m = o.meta();
            (m.namespace.as_deref(), m.name.as_deref())
        }
        objects.sort_by(|a, b| key(a.as_ref()).cmp(&key(b.as_ref())));
        objects
    }
}

/// A reflector store's objects in (namespace, name) order ([`SortedState`]) as owned values, for
/// a loop that decides on owned objects step after step: each [`SortedCopies::refresh`] copies
/// only the objects that changed since the last one. A reflector store hands out its objects
/// behind `Arc`s and replaces an object's `Arc` whenever the object changes, so an `Arc` that is
/// the one copied last time (the same pointer; the `Arc` kept here keeps its address from being
/// reused) holds the same object, and last time's copy is taken over instead of made again. That
/// holds for any reflector store, on a real cluster as on the sim.
pub struct SortedCopies<K> {
    /// The store's `Arc`s the copies were made from, in the same order.
    sources: Vec<(Arc<K>, ())>,
    copies: Vec<K>,
}

impl<K> Default for SortedCopies<K> {
    fn default() -> Self {
        SortedCopies {
            sources: Vec::new(),
            copies: Vec::new(),
        }
    }
}

impl<K> SortedCopies<K>
where
    K: Resource + reflector::Lookup + Clone + 'static,
    <K as reflector::Lookup>::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// The store's objects now, in (namespace, name) order.
    pub fn refresh(&mut self, store: &Store<K>) -> &[K] {
        let now = store.sorted_state().into_iter().map(|a| (a, ())).collect();
        reuse_copies(&mut self.sources, &mut self.copies, now, |a, ()| {
            a.as_ref().clone()
        });
        &self.copies
    }
}

/// Brings `copies` (made by `make` from `sources`, in the same order) up to `now`: an entry whose
/// `Arc` is the one copied last time (the same pointer, kept alive in `sources` so its address is
/// not reused) with the same variant `V` keeps last time's copy; any other is made again. Whether
/// anything changed is returned. See [`SortedCopies`] for why a pointer is enough.
pub(crate) fn reuse_copies<K, V: Copy + PartialEq>(
    sources: &mut Vec<(Arc<K>, V)>,
    copies: &mut Vec<K>,
    now: Vec<(Arc<K>, V)>,
    make: impl Fn(&Arc<K>, V) -> K,
) -> bool {
    let same = |(a, v): &(Arc<K>, V), (b, w): &(Arc<K>, V)| Arc::ptr_eq(a, b) && v == w;
    if now.len() == sources.len() && now.iter().zip(sources.iter()).all(|(a, b)| same(a, b)) {
        return false;
    }
    let copied: std::collections::HashMap<*const K, usize> = sources
        .iter()
        .enumerate()
        .map(|(i, (a, _))| (Arc::as_ptr(a), i))
        .collect();
    let mut before: Vec<Option<K>> = std::mem::take(copies).into_iter().map(Some).collect();
    *copies = now
        .iter()
        .map(|n| {
            copied
                .get(&Arc::as_ptr(&n.0))
                .filter(|&&i| same(n, &sources[i]))
                .and_then(|&i| before.get_mut(i).and_then(Option::take))
                .unwrap_or_else(|| make(&n.0, n.1))
        })
        .collect();
    *sources = now;
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn sorted_copies_follow_the_store_through_adds_changes_and_deletes() {
        use super::{SortedCopies, SortedState};
        use k8s_openapi::api::core::v1::Pod;
        use kube::runtime::{reflector, watcher};
        let pod = |ns: &str, name: &str, node: &str| {
            raygate_testing::core::pod(&format!("{ns}/{name}"), node)
        };
        let (store, mut writer) = reflector::store::<Pod>();
        let mut copies = SortedCopies::default();
        let fresh = |store: &reflector::Store<Pod>| -> Vec<Pod> {
            store.sorted_state().iter().map(|p| (**p).clone()).collect()
        };
        assert!(copies.refresh(&store).is_empty());
        for (ns, name) in [("b", "x"), ("a", "y"), ("a", "x")] {
            writer.apply_watcher_event(&watcher::Event::Apply(pod(ns, name, "n1")));
        }
        assert_eq!(copies.refresh(&store), fresh(&store).as_slice());
        let names: Vec<_> = copies
            .refresh(&store)
            .iter()
            .map(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()))
            .collect();
        assert_eq!(
            names,
            [("a", "x"), ("a", "y"), ("b", "x")].map(|(n, m)| (Some(n.into()), Some(m.into())))
        );
        // a change to one pod shows; the others are taken over
        writer.apply_watcher_event(&watcher::Event::Apply(pod("a", "y", "n2")));
        let now = copies.refresh(&store).to_vec();
        assert_eq!(now, fresh(&store));
        assert_eq!(
            now[1].spec.as_ref().unwrap().node_name.as_deref(),
            Some("n2")
        );
        // the same content again, in a new Arc: still right
        writer.apply_watcher_event(&watcher::Event::Apply(pod("a", "y", "n2")));
        assert_eq!(copies.refresh(&store), fresh(&store).as_slice());
        writer.apply_watcher_event(&watcher::Event::Delete(pod("a", "x", "n1")));
        writer.apply_watcher_event(&watcher::Event::Apply(pod("c", "z", "n3")));
        assert_eq!(copies.refresh(&store), fresh(&store).as_slice());
        assert_eq!(copies.refresh(&store).len(), 3);
    }

    /// A copy is made again when its source or its variant changed, and only then.
    #[test]
    fn copies_are_made_again_only_for_a_new_source_or_a_new_variant() {
        use super::{Arc, reuse_copies};
        use std::cell::Cell;
        let made = Cell::new(0);
        let make = |a: &Arc<String>, v: u64| {
            made.set(made.get() + 1);
            format!("{a}{v}")
        };
        let (x, y) = (Arc::new("x".to_string()), Arc::new("y".to_string()));
        let (mut sources, mut copies) = (vec![], vec![]);
        assert!(reuse_copies(
            &mut sources,
            &mut copies,
            vec![(x.clone(), 0), (y.clone(), 0)],
            make
        ));
        assert_eq!(
            (copies.clone(), made.get()),
            (vec!["x0".into(), "y0".into()], 2)
        );
        // nothing changed: nothing made, and it says so
        assert!(!reuse_copies(
            &mut sources,
            &mut copies,
            vec![(x.clone(), 0), (y.clone(), 0)],
            make
        ));
        assert_eq!(made.get(), 2);
        // y's overlay changed: only y is made again
        assert!(reuse_copies(
            &mut sources,
            &mut copies,
            vec![(x.clone(), 0), (y.clone(), 7)],
            make
        ));
        assert_eq!(
            (copies.clone(), made.get()),
            (vec!["x0".into(), "y7".into()], 3)
        );
        // the same content in a new Arc is made again; a dropped entry goes
        let x2 = Arc::new("x".to_string());
        assert!(reuse_copies(&mut sources, &mut copies, vec![(x2, 0)], make));
        assert_eq!((copies, made.get()), (vec!["x0".to_string()], 4));
    }
}
