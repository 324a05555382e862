//! Reads of the store from inside the process: no HTTP, no JSON, no injected faults. A watch
//! of the store's own events ([`Sim::observe`]), what a GET or a LIST answers at this instant,
//! typed and without `managedFields` ([`Sim::read`], [`Sim::read_list`]).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::Sim;
use super::decode::without_managed_fields;
use super::handler::route;
use super::status::ApiError;
use super::store::WatchEvent;

/// A watch's or LIST's query from its label and field selectors.
pub fn selector_query(labels: Option<&str>, fields: Option<&str>) -> HashMap<String, String> {
    [("labelSelector", labels), ("fieldSelector", fields)]
        .into_iter()
        .filter_map(|(k, v)| {
            v.filter(|v| !v.is_empty())
                .map(|v| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Typed copies of stored objects by (type, resource, namespace, name): the last decoded one and
/// its resourceVersion.
type Copies = HashMap<(TypeId, String), (String, Arc<dyn Any + Send + Sync>)>;

/// The sim's [`Copies`] (kept as its [`Sim::extension`]).
#[derive(Default)]
struct Decoded(Mutex<Copies>);

impl Sim {
    /// Watches the collection at `path` (`/api/v1/pods`, `/apis/ray.io/v1/rayclusters`) from
    /// inside the process: every object as `ADDED` (queued before this returns), then every
    /// change, as the store's own events. No HTTP, no JSON and no injected faults: this is how
    /// an observer of the cluster's history (the demo's recorder) reads it, not a client under
    /// test. The watch ends when the receiver is dropped.
    pub fn observe(&self, path: &str) -> Result<UnboundedReceiver<WatchEvent>, ApiError> {
        self.observe_query(path, &HashMap::new()).map(|(rx, _)| rx)
    }

    /// [`Sim::observe`] with a watch's query (`labelSelector`, `fieldSelector`), also returning
    /// how many of the queued events are the initial `ADDED`s.
    pub fn observe_query(
        &self,
        path: &str,
        query: &HashMap<String, String>,
    ) -> Result<(UnboundedReceiver<WatchEvent>, usize), ApiError> {
        let (tx, rx) = unbounded_channel();
        let mut state = self.lock();
        let route = route(&state.registry, path)?;
        state.watch(&route, query, tx)?;
        // under the lock no change can have been queued after the initial objects
        let listed = rx.len();
        Ok((rx, listed))
    }

    /// A GET of the object at `path` (`/apis/ray.io/v1/namespaces/ns/rayclusters/name`) from
    /// inside the process: what the API server answers at this instant, typed (`None` for a 404).
    /// For an actor that must read fresh (the KubeRay emulator): no HTTP, no JSON, no injected
    /// faults, no `managedFields`; an object unchanged since the last read is not decoded again.
    pub fn read<K>(&self, path: &str) -> Result<Option<K>, ApiError>
    where
        K: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let found = {
            let state = self.lock();
            let route = route(&state.registry, path)?;
            let name = route.name.clone().unwrap_or_default();
            let ns = route.namespace.clone().unwrap_or_default();
            let at = format!("{}/{ns}/{name}", route.key());
            state
                .store
                .get(&route.key(), &ns, &name)
                .map(|o| (at, state.served(&route, o)))
        };
        let decoded = self.extension::<Decoded>();
        found.map(|(at, o)| typed(&decoded, &at, &o)).transpose()
    }

    /// A LIST of the collection at `path` with `query`'s selectors from inside the process
    /// ([`Sim::read`]'s terms), every page at once, in the API server's order.
    pub fn read_list<K>(
        &self,
        path: &str,
        query: &HashMap<String, String>,
    ) -> Result<Vec<K>, ApiError>
    where
        K: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let objects = {
            let state = self.lock();
            let route = route(&state.registry, path)?;
            let selected = state.selected(&route, query)?;
            selected
                .into_iter()
                .map(|o| {
                    let at = format!(
                        "{}/{}/{}",
                        route.key(),
                        o["metadata"]["namespace"].as_str().unwrap_or_default(),
                        o["metadata"]["name"].as_str().unwrap_or_default()
                    );
                    (at, state.served(&route, o))
                })
                .collect::<Vec<_>>()
        };
        let decoded = self.extension::<Decoded>();
        objects
            .iter()
            .map(|(at, o)| typed(&decoded, at, o))
            .collect()
    }
}

/// `o` as `K` without its `managedFields` ([`super::decode`]), decoded again only if its
/// resourceVersion changed since the last read at `at` ([`Decoded`]).
fn typed<K>(decoded: &Decoded, at: &str, o: &serde_json::Value) -> Result<K, ApiError>
where
    K: DeserializeOwned + Clone + Send + Sync + 'static,
{
    let rv = o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    let key = (TypeId::of::<K>(), at.to_string());
    let mut decoded = decoded.0.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((seen, obj)) = decoded.get(&key)
        && seen == rv
        && let Some(k) = obj.downcast_ref::<K>()
    {
        return Ok(k.clone());
    }
    let k = without_managed_fields::<K>(o)
        .map_err(|e| ApiError::internal(format!("{at} does not decode: {e}")))?;
    decoded.insert(key, (rv.to_string(), Arc::new(k.clone())));
    Ok(k)
}
