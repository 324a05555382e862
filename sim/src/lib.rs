//! raygate-sim: an embedded simulated Kubernetes cluster. An in-memory object store with the
//! API server's semantics, served to `kube::Client` as a tower `Service` (no sockets), on a
//! virtual clock, and the actors that run on it (today the KubeRay v1.7 emulator, [`kuberay`]).
//!
//! ```no_run
//! # async fn demo() {
//! let sim = raygate_sim::Sim::builder().build();
//! let client = sim.client();
//! # }
//! ```

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// Actors: the core controllers (disruption, GC, ReplicaSet, node lifecycle), the scheduler,
/// kubelets and the LWS-like controller (IO loops over pure decisions).
pub mod actors;
/// Mutating admission on Pods: DefaultTolerationSeconds (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod admission;
/// CEL validation rules (`x-kubernetes-validations`) of CRD schemas (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod cel;
/// The virtual clock.
pub mod clock;
/// Typed copies of stored objects without their `managedFields`, for the sim's actors (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod decode;
/// A change signal waking several waiters in a fixed order (for reproducible runs).
pub mod fanout;
/// Fault injection: error rates, latency, watch drops and 410s, seeded (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod faults;
/// Field ownership and server-side apply (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod fields;
/// The gang world shared by the drain and NodeRollout tests, the demo's baselines and its story
/// (test fixtures: they panic on a broken cluster).
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod fixtures;
/// Routing, the verbs over the store and the Pod and `scale` subresources (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod handler;
/// Shared in-process informers for the sim's own actors.
pub mod informers;
/// Served resources: built-in kinds and CRDs (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod kinds;
/// Actor: the KubeRay v1.7 emulator (RayService and RayCluster controllers, pods by time), on the
/// injected clock (the wall clock is denied in it).
#[deny(clippy::disallowed_methods)]
pub mod kuberay;
/// Merge, JSON and strategic merge patches (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod patch;
/// CRD structural schemas: pruning, defaults, validation (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod schema;
/// Label and field selectors (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod selector;
/// The tower Service shell and watch streams (IO).
pub mod service;
/// `metav1.Status` errors (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod status;
/// Objects, revisions, history and watches (pure).
#[deny(clippy::disallowed_methods, clippy::disallowed_types)]
pub mod store;
/// The upstream CRDs (KubeRay, Kueue, LWS) embedded in the binary, and raygate's NodeRollout.
pub mod upstream;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use clock::Clock;
pub use faults::{FaultRule, Faults, Verb};
/// The `http` crate the Service speaks (for raw requests in tests).
pub use http;
pub use kinds::{CrdError, Registry};

use handler::State;

/// How a [`Sim`] is built.
pub struct SimBuilder {
    registry: Registry,
    seed: u64,
    history: usize,
    bookmark_interval: Duration,
    clock: Option<Clock>,
    namespaces: Vec<String>,
    faults: Faults,
}

impl SimBuilder {
    /// Adds the CRDs of a (multi-document) YAML string.
    pub fn crds_yaml(mut self, yaml: &str) -> Result<Self, CrdError> {
        self.registry.add_crds_yaml(yaml)?;
        Ok(self)
    }

    /// Serves `registry` (e.g. a clone of one built once for many sims) instead of the one
    /// built so far.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// Adds the CRDs of every `.yaml` file in `dir`.
    pub fn crds_dir(mut self, dir: impl AsRef<std::path::Path>) -> Result<Self, CrdError> {
        let mut paths: Vec<_> = std::fs::read_dir(dir.as_ref())
            .map_err(|e| CrdError::Io(dir.as_ref().display().to_string(), e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        paths.sort();
        for p in paths {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| CrdError::Io(p.display().to_string(), e))?;
            self.registry.add_crds_yaml(&text)?;
        }
        Ok(self)
    }

    /// Seed of generated names and uids.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How many changes stay available to watches from a resourceVersion (older ones get 410).
    pub fn history(mut self, changes: usize) -> Self {
        self.history = changes;
        self
    }

    /// How often an idle watch with `allowWatchBookmarks` gets a BOOKMARK (cluster time).
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = every;
        self
    }

    /// Faults to inject from the start (change them later with [`Sim::set_faults`]).
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Namespaces that exist from the start (besides `default`, `kube-system`, `kube-public`
    /// and `kube-node-lease`).
    pub fn namespace(mut self, name: impl Into<String>) -> Self {
        self.namespaces.push(name.into());
        self
    }

    pub fn build(self) -> Sim {
        let clock = self.clock.unwrap_or_default();
        let sim = Sim {
            state: Arc::new(Mutex::new(State::new(
                Arc::new(self.registry),
                self.seed,
                self.history,
            ))),
            clock,
            bookmark_interval: self.bookmark_interval,
            faults: Arc::new(Mutex::new(faults::Injector::new(self.faults, self.seed))),
            informers: Arc::default(),
            decoded: Arc::default(),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"]
            .into_iter()
            .map(String::from)
            .chain(self.namespaces)
        {
            sim.ensure_namespace(&ns);
        }
        sim
    }
}

/// The simulated cluster. Cheap to clone; every clone is the same cluster.
#[derive(Clone)]
pub struct Sim {
    state: Arc<Mutex<State>>,
    clock: Clock,
    bookmark_interval: Duration,
    faults: Arc<Mutex<faults::Injector>>,
    /// The actors' shared in-process caches ([`informers`]).
    informers: Arc<std::sync::Mutex<informers::Registry>>,
    /// The last typed copy of each object an in-process read decoded ([`Sim::read`]).
    decoded: Arc<std::sync::Mutex<informers::Decoded>>,
}

impl Sim {
    pub fn builder() -> SimBuilder {
        SimBuilder {
            registry: Registry::with_builtins(),
            seed: 0,
            history: 10_000,
            bookmark_interval: Duration::from_secs(60),
            clock: None,
            namespaces: vec![],
            faults: Faults::none(),
        }
    }

    /// A `kube::Client` talking to this cluster in-process (default namespace `default`).
    /// Call it inside a tokio runtime: the client's request buffer is a spawned task.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(service::SimService::new(self.clone()), "default")
    }

    /// A client whose requests carry `User-Agent: user_agent` (as each real client's do), so
    /// fault rules can single it out ([`FaultRule::user_agent`]) and field managers default to it.
    pub fn client_as(&self, user_agent: &str) -> kube::Client {
        kube::Client::new(
            service::SimService::new(self.clone()).with_user_agent(user_agent),
            "default",
        )
    }

    /// Replaces the injected faults (takes effect from the next request or watch).
    pub fn set_faults(&self, faults: Faults) {
        self.injector().set(faults);
    }

    /// What the faults injected so far.
    pub fn fault_stats(&self) -> faults::FaultStats {
        self.injector().stats().clone()
    }

    pub(crate) fn injector(&self) -> MutexGuard<'_, faults::Injector> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The state, even if a panicking thread poisoned the lock (the store is only mutated
    /// through whole-object commits, so it is never half-written).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn bookmark_interval(&self) -> Duration {
        self.bookmark_interval
    }

    /// Creates namespace `name` if it does not exist.
    pub fn ensure_namespace(&self, name: &str) {
        let req = handler::ApiRequest {
            method: "POST".into(),
            path: "/api/v1/namespaces".into(),
            body: serde_json::to_vec(&serde_json::json!({"metadata": {"name": name}}))
                .unwrap_or_default(),
            user_agent: "raygate-sim".into(),
            ..Default::default()
        };
        let now = self.clock.now();
        let _ = self.lock().handle(&req, now);
    }

    /// The current global resourceVersion.
    pub fn revision(&self) -> u64 {
        self.lock().store.revision()
    }

    /// Open watches.
    pub fn watch_count(&self) -> usize {
        self.lock().store.watch_count()
    }

    /// Watches the collection at `path` (`/api/v1/pods`, `/apis/ray.io/v1/rayclusters`) from
    /// inside the process: every object as `ADDED` (queued before this returns), then every
    /// change, as the store's own events. No HTTP, no JSON and no injected faults: this is how
    /// an observer of the cluster's history (the demo's recorder) reads it, not a client under
    /// test. The watch ends when the receiver is dropped.
    pub fn observe(
        &self,
        path: &str,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<store::WatchEvent>, status::ApiError> {
        self.observe_query(path, &std::collections::HashMap::new())
            .map(|(rx, _)| rx)
    }

    /// [`Sim::observe`] with a watch's query (`labelSelector`, `fieldSelector`), also returning
    /// how many of the queued events are the initial `ADDED`s.
    pub fn observe_query(
        &self,
        path: &str,
        query: &std::collections::HashMap<String, String>,
    ) -> Result<
        (
            tokio::sync::mpsc::UnboundedReceiver<store::WatchEvent>,
            usize,
        ),
        status::ApiError,
    > {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut state = self.lock();
        let route = handler::route(&state.registry, path)?;
        state.watch(&route, query, tx)?;
        // under the lock no change can have been queued after the initial objects
        let listed = rx.len();
        Ok((rx, listed))
    }
}
