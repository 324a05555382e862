//! The simulated cluster ([`Sim`]) and how it is built ([`SimBuilder`]). Clients reach it through
//! [`super::service`] ([`Sim::client`]), in-process readers through [`super::in_process`].

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::faults::{self, Faults};
use super::handler::{self, State};
use super::kinds::{CrdError, Registry};
use crate::Clock;

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
            extensions: Arc::default(),
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
    /// One value per type, kept for the cluster by the code that reaches it ([`Sim::extension`]).
    extensions: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
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

    /// Replaces the injected faults (takes effect from the next request or watch).
    pub fn set_faults(&self, faults: Faults) {
        self.injector().set(faults);
    }

    /// What the faults injected so far.
    pub fn fault_stats(&self) -> faults::FaultStats {
        self.injector().stats().clone()
    }

    pub(super) fn injector(&self) -> MutexGuard<'_, faults::Injector> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The state, even if a panicking thread poisoned the lock (the store is only mutated
    /// through whole-object commits, so it is never half-written).
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn bookmark_interval(&self) -> Duration {
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

    /// Stores every CRD the cluster serves as an `apiextensions.k8s.io/v1`
    /// CustomResourceDefinition, `Established` and `NamesAccepted`, for clients that read them
    /// (raygate's startup checks, `kubectl get crd`). They are a record of the registry: creating
    /// or changing one serves nothing new.
    pub fn publish_crds(&self) {
        let now = self.clock.now();
        let stamp = crate::clock::seconds(now);
        let mut state = self.lock();
        let definitions: Vec<serde_json::Value> = state
            .registry
            .types()
            .iter()
            .filter_map(|t| t.definition.clone())
            .collect();
        for mut crd in definitions {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if let Some(m) = crd["metadata"].as_object_mut() {
                m.retain(|k, _| matches!(k.as_str(), "name" | "labels" | "annotations"));
            }
            let storage: Vec<serde_json::Value> = crd["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["storage"] == serde_json::json!(true))
                .map(|v| v["name"].clone())
                .collect();
            let condition = |t: &str, reason: &str| {
                serde_json::json!({"type": t, "status": "True", "reason": reason,
                    "message": "", "lastTransitionTime": stamp})
            };
            let status = serde_json::json!({"acceptedNames": crd["spec"]["names"],
                "storedVersions": storage, "conditions": [
                    condition("NamesAccepted", "NoConflicts"), condition("Established", "InitialNamesAccepted")]});
            let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
            let create = handler::ApiRequest {
                method: "POST".into(),
                path: path.into(),
                body: serde_json::to_vec(&crd).unwrap_or_default(),
                user_agent: "raygate-sim".into(),
                ..Default::default()
            };
            let _ = state.handle(&create, now);
            let patch = handler::ApiRequest {
                method: "PATCH".into(),
                path: format!("{path}/{name}/status"),
                content_type: "application/merge-patch+json".into(),
                body: serde_json::to_vec(&serde_json::json!({"status": status}))
                    .unwrap_or_default(),
                user_agent: "raygate-sim".into(),
                ..Default::default()
            };
            let _ = state.handle(&patch, now);
        }
    }

    /// The current global resourceVersion.
    pub fn revision(&self) -> u64 {
        self.lock().store.revision()
    }

    /// Open watches.
    pub fn watch_count(&self) -> usize {
        self.lock().store.watch_count()
    }

    /// This cluster's one `T`, created on first use and shared by every clone of the sim: state
    /// kept per cluster by the code that reaches it (the in-process reads' decoded copies, the
    /// actors' shared informers).
    pub fn extension<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut extensions = self.extensions.lock().unwrap_or_else(|p| p.into_inner());
        let slot = extensions
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        match Arc::clone(slot).downcast::<T>() {
            Ok(t) => t,
            // the slot of `TypeId::of::<T>()` only ever holds a `T`
            Err(_) => Arc::new(T::default()),
        }
    }
}
