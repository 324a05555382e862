//! Secondary indexes over a reflector store: (namespace, key) → object names, kept from the same
//! watch events as the store, as client-go's `Indexer` (`cache.NewIndexer` with index functions)
//! keeps its indices beside its items. kube-runtime's `Store` offers no index, and reading a
//! RayService's children, slices or pods by scanning every cached object made each reconcile cost
//! as much as the whole fleet.
//!
//! The watch driver applies each event to the index *before* the store, so a reader triggered by
//! the store's change finds the index already up to date; a name the index lists that the store
//! does not hold yet (or any more) is skipped ([`Index::objects`]). A re-list is buffered from
//! `Init` to `InitDone` and then replaces the index whole, as the store does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::Event;

/// The key function of an index: an object's key within its namespace (`None`: not indexed).
pub type KeyFn<K> = fn(&K) -> Option<String>;

/// (namespace, name).
type At = (String, String);

#[derive(Default)]
struct Inner {
    /// (namespace, key) → names.
    by_key: BTreeMap<(String, String), BTreeSet<String>>,
    /// (namespace, name) → key, to move or drop an object's entry.
    key_of: HashMap<At, String>,
    /// The objects of a re-list in progress.
    relist: Option<Vec<(At, String)>>,
}

impl Inner {
    fn remove(&mut self, at: &At) {
        if let Some(old) = self.key_of.remove(at) {
            let k = (at.0.clone(), old);
            if let Some(names) = self.by_key.get_mut(&k) {
                names.remove(&at.1);
                if names.is_empty() {
                    self.by_key.remove(&k);
                }
            }
        }
    }

    fn insert(&mut self, at: At, key: Option<String>) {
        self.remove(&at);
        if let Some(key) = key {
            self.by_key
                .entry((at.0.clone(), key.clone()))
                .or_default()
                .insert(at.1.clone());
            self.key_of.insert(at, key);
        }
    }
}

/// One index over a store of `K`; clones share it.
pub struct Index<K> {
    inner: Arc<RwLock<Inner>>,
    key: KeyFn<K>,
}

impl<K> Clone for Index<K> {
    fn clone(&self) -> Self {
        Index {
            inner: self.inner.clone(),
            key: self.key,
        }
    }
}

fn at<K: Resource>(o: &K) -> At {
    let m = o.meta();
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

impl<K> Index<K>
where
    K: Resource + reflector::Lookup + Clone + 'static,
    <K as reflector::Lookup>::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// An empty index keyed by `key`.
    pub fn new(key: KeyFn<K>) -> Self {
        Index {
            inner: Arc::default(),
            key,
        }
    }

    /// Applies one watch event (before the store does).
    pub fn apply(&self, event: &Event<K>) {
        let Ok(mut inner) = self.inner.write() else {
            return;
        };
        match event {
            Event::Apply(o) => inner.insert(at(o), (self.key)(o)),
            Event::Delete(o) => inner.remove(&at(o)),
            Event::Init => inner.relist = Some(Vec::new()),
            Event::InitApply(o) => {
                let key = (self.key)(o);
                if let (Some(list), Some(key)) = (inner.relist.as_mut(), key) {
                    list.push((at(o), key));
                }
            }
            Event::InitDone => {
                let listed = inner.relist.take().unwrap_or_default();
                *inner = Inner::default();
                for (at, key) in listed {
                    inner.insert(at, Some(key));
                }
            }
        }
    }

    /// The names under `key` in `namespace`, in name order.
    pub fn names(&self, namespace: &str, key: &str) -> Vec<String> {
        self.inner
            .read()
            .ok()
            .and_then(|i| {
                i.by_key
                    .get(&(namespace.to_string(), key.to_string()))
                    .map(|n| n.iter().cloned().collect())
            })
            .unwrap_or_default()
    }

    /// The keys in `namespace` that start with `prefix`, in order.
    pub fn keys_with_prefix(&self, namespace: &str, prefix: &str) -> Vec<String> {
        let Ok(inner) = self.inner.read() else {
            return Vec::new();
        };
        let from = (namespace.to_string(), prefix.to_string());
        inner
            .by_key
            .range(from..)
            .take_while(|((ns, k), _)| ns == namespace && k.starts_with(prefix))
            .map(|((_, k), _)| k.clone())
            .collect()
    }

    /// The objects of `store` under `key` in `namespace`, in name order (the order of
    /// [`super::SortedState`] within a namespace).
    pub fn objects(&self, store: &Store<K>, namespace: &str, key: &str) -> Vec<Arc<K>> {
        self.names(namespace, key)
            .into_iter()
            .filter_map(|n| store.get(&ObjectRef::new(&n).within(namespace)))
            .filter(|o| (self.key)(o).as_deref() == Some(key))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::SortedState;
    use k8s_openapi::api::core::v1::Pod;
    use proptest::prelude::*;
    use raygate_testing::core::{self, PodExt};

    fn cluster_of(p: &Pod) -> Option<String> {
        p.metadata.labels.as_ref()?.get("ray.io/cluster").cloned()
    }

    fn pod(ns: u8, name: u8, cluster: Option<u8>) -> Pod {
        let p = core::pod(&format!("ns{ns}/p{name}"), "n1").unowned();
        match cluster {
            Some(c) => p.label("ray.io/cluster", &format!("c{c}")),
            None => p,
        }
    }

    #[derive(Clone, Debug)]
    enum Step {
        Apply(u8, u8, Option<u8>),
        Delete(u8, u8),
        /// A re-list of these (namespace, name, cluster).
        Relist(Vec<(u8, u8, Option<u8>)>),
    }

    fn step() -> impl Strategy<Value = Step> {
        let obj = (0u8..2, 0u8..6, proptest::option::of(0u8..3));
        prop_oneof![
            6 => obj.clone().prop_map(|(n, m, c)| Step::Apply(n, m, c)),
            3 => (0u8..2, 0u8..6).prop_map(|(n, m)| Step::Delete(n, m)),
            1 => proptest::collection::vec(obj, 0..8).prop_map(Step::Relist),
        ]
    }

    fn events(s: &Step) -> Vec<Event<Pod>> {
        match s {
            Step::Apply(n, m, c) => vec![Event::Apply(pod(*n, *m, *c))],
            Step::Delete(n, m) => vec![Event::Delete(pod(*n, *m, None))],
            Step::Relist(objs) => {
                let mut v = vec![Event::Init];
                // a re-list lists each object once
                let mut seen = std::collections::BTreeSet::new();
                for (n, m, c) in objs {
                    if seen.insert((*n, *m)) {
                        v.push(Event::InitApply(pod(*n, *m, *c)));
                    }
                }
                v.push(Event::InitDone);
                v
            }
        }
    }

    proptest! {
        /// Whatever the events, a lookup finds exactly what a scan of the store finds, in the
        /// same order.
        #[test]
        fn lookups_agree_with_a_scan_of_the_store(steps in proptest::collection::vec(step(), 0..40)) {
            let (store, mut writer) = reflector::store::<Pod>();
            let index = Index::new(cluster_of);
            for s in &steps {
                for e in events(s) {
                    index.apply(&e);
                    writer.apply_watcher_event(&e);
                }
                for ns in ["ns0", "ns1"] {
                    for c in ["c0", "c1", "c2"] {
                        let scanned: Vec<String> = store
                            .sorted_state()
                            .iter()
                            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
                            .filter(|p| cluster_of(p).as_deref() == Some(c))
                            .filter_map(|p| p.metadata.name.clone())
                            .collect();
                        let found: Vec<String> = index
                            .objects(&store, ns, c)
                            .iter()
                            .filter_map(|p| p.metadata.name.clone())
                            .collect();
                        prop_assert_eq!(&found, &scanned, "{} {}", ns, c);
                        prop_assert_eq!(index.names(ns, c), scanned);
                    }
                    let keys: Vec<String> = store
                        .state()
                        .iter()
                        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
                        .filter_map(|p| cluster_of(p))
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    prop_assert_eq!(index.keys_with_prefix(ns, "c"), keys);
                }
            }
        }
    }
}
