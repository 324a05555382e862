//! One cache of this process's own writes that its watch caches may not show yet (Kueue's cache
//! *assumes* a Workload it admitted; controller-runtime keeps *expectations*): each write is laid
//! over what the store shows until the store is seen to show it, or — for a write whose outcome
//! is unknown — until it expires.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use super::Monotonic;

#[derive(Clone, Debug)]
struct Entry<V> {
    value: V,
    /// `Some` for a write that may not have committed: forgotten after this instant.
    expires: Option<Monotonic>,
}

/// Assumed writes by key.
#[derive(Clone, Debug)]
pub struct Assumed<V, K = String> {
    entries: BTreeMap<K, Entry<V>>,
}

impl<V, K> Default for Assumed<V, K> {
    fn default() -> Self {
        Assumed {
            entries: BTreeMap::new(),
        }
    }
}

impl<V, K: Ord> Assumed<V, K> {
    /// Assumes a write that committed (the server answered it).
    pub fn assume(&mut self, key: K, value: V) {
        self.entries.insert(
            key,
            Entry {
                value,
                expires: None,
            },
        );
    }

    /// Assumes a write whose outcome is unknown (it may have committed, then timed out) until
    /// `expires`.
    pub fn assume_until(&mut self, key: K, value: V, expires: Monotonic) {
        self.entries.insert(
            key,
            Entry {
                value,
                expires: Some(expires),
            },
        );
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.get(key).map(|e| &e.value)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.get_mut(key).map(|e| &mut e.value)
    }

    /// Drops the assumption of `key` (the store shows it, or its owner ended).
    pub fn forget<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.remove(key).map(|e| e.value)
    }

    /// Keeps the assumptions that have not expired at `now` and that `unseen` finds the store
    /// not showing yet (it may narrow a value to its part still unseen); forgets the rest.
    pub fn settle(&mut self, now: Monotonic, mut unseen: impl FnMut(&K, &mut V) -> bool) {
        self.entries
            .retain(|k, e| e.expires.is_none_or(|at| now < at) && unseen(k, &mut e.value));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, e)| (k, &e.value))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::{Assumed, Monotonic};

    fn at(s: u64) -> Monotonic {
        Monotonic::from_origin(Duration::from_secs(s))
    }

    #[test]
    fn a_committed_write_is_kept_until_the_store_shows_it() {
        let mut a: Assumed<u64> = Assumed::default();
        a.assume("ns/w".into(), 12);
        // the store at version 11: still assumed, however long it lags
        a.settle(at(10_000), |_, rv| 11 < *rv);
        assert_eq!(a.get("ns/w"), Some(&12));
        a.settle(at(10_000), |_, rv| 12 < *rv);
        assert!(a.is_empty());
    }

    #[test]
    fn a_write_of_unknown_outcome_is_kept_until_it_expires() {
        let mut a: Assumed<u64> = Assumed::default();
        a.assume_until("ns/w".into(), 12, at(30));
        a.settle(at(29), |_, _| true);
        assert_eq!(a.get("ns/w"), Some(&12));
        a.settle(at(30), |_, _| true);
        assert_eq!(a.get("ns/w"), None, "expired");
    }

    #[test]
    fn a_value_is_narrowed_to_its_part_the_store_does_not_show() {
        let mut a: Assumed<BTreeSet<&str>> = Assumed::default();
        a.assume("ns/svc".into(), BTreeSet::from(["a", "b"]));
        let shown = BTreeSet::from(["a"]);
        a.settle(at(0), |_, v| {
            v.retain(|c| !shown.contains(c));
            !v.is_empty()
        });
        assert_eq!(a.get("ns/svc"), Some(&BTreeSet::from(["b"])));
        assert_eq!(a.forget("ns/svc"), Some(BTreeSet::from(["b"])));
        assert!(a.is_empty());
    }
}
