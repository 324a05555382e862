//! The ownerReference garbage collector, after kubernetes `pkg/controller/garbagecollector`
//! (`garbagecollector.go`: `attemptToDeleteItem`, `classifyReferences`,
//! `processDeletingDependentsItem`, `orphanDependents`):
//!
//! - **background**: an object whose owners are all gone (absent, or present with another uid) is
//!   deleted, with the propagation its own finalizers ask for (`orphan` → Orphan,
//!   `foregroundDeletion` → Foreground, else Background);
//! - **foreground**: an owner deleting with the `foregroundDeletion` finalizer keeps it until no
//!   dependent with `blockOwnerDeletion: true` is left; its dependents are deleted (in foreground
//!   when they have dependents of their own); a dependent that also has a live owner only loses
//!   its reference to the deleting one;
//! - **orphan**: an owner deleting with the `orphan` finalizer has its reference removed from
//!   every dependent (a strategic-merge `$patch: delete` by uid), then the finalizer.
//!
//! The API server's half (DELETE's `propagationPolicy` → finalizers) is in
//! `server::handler::delete`. [`plan`] is pure; [`run`] keeps a cache of the covered kinds and
//! applies the plan.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::discovery::ApiResource as Ar;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Clock;
use crate::server::handler::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation};
use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};
use raygate::runtime::SortedState;

/// One object as the collector's graph sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Index into the covered kinds.
    pub kind: usize,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    pub owners: Vec<OwnerReference>,
    pub finalizers: Vec<String>,
    pub deleting: bool,
}

impl Item {
    fn has(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// `isDeletingDependents`.
    fn deleting_dependents(&self) -> bool {
        self.deleting && self.has(FOREGROUND_FINALIZER)
    }
}

/// A covered kind: its group, kind and scope.
#[derive(Clone, Debug, PartialEq)]
pub struct Kind {
    pub group: String,
    pub kind: String,
    pub namespaced: bool,
}

/// What the collector does to one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Delete `item` (uid precondition) with this propagation. `absent_owners` are the owner
    /// references the plan found gone; they are checked once more with a live GET before the
    /// delete (`isDangling`), as the collector's graph can lag behind a new owner.
    Delete {
        item: usize,
        policy: Propagation,
        absent_owners: Vec<OwnerReference>,
    },
    /// Remove the references with these owner uids from `item`.
    RemoveOwners { item: usize, uids: Vec<String> },
    /// Remove `finalizer` from `item`.
    RemoveFinalizer {
        item: usize,
        finalizer: &'static str,
    },
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

enum OwnerState {
    Solid,
    Dangling,
    Waiting,
}

/// The owner a reference of `dependent` points to, and its state (`classifyReferences`).
/// A reference to a kind the collector does not cover counts as solid (it cannot be checked).
fn classify(items: &[Item], kinds: &[Kind], dependent: &Item, r: &OwnerReference) -> OwnerState {
    let group = group_of(&r.api_version);
    let Some(ki) = kinds
        .iter()
        .position(|k| k.group == group && k.kind == r.kind)
    else {
        return OwnerState::Solid;
    };
    let ns = if kinds[ki].namespaced {
        dependent.namespace.clone()
    } else {
        None
    };
    match items
        .iter()
        .find(|o| o.kind == ki && o.name == r.name && o.namespace == ns)
    {
        Some(o) if o.uid == r.uid => {
            if o.deleting_dependents() {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            }
        }
        _ => OwnerState::Dangling,
    }
}

fn dependents<'a>(
    items: &'a [Item],
    owner: &'a Item,
) -> impl Iterator<Item = (usize, &'a OwnerReference)> + 'a {
    items.iter().enumerate().filter_map(move |(i, d)| {
        d.owners
            .iter()
            .find(|r| r.uid == owner.uid)
            .filter(|_| d.namespace == owner.namespace || owner.namespace.is_none())
            .map(|r| (i, r))
    })
}

/// One pass of the collector over a consistent list of the covered kinds.
pub fn plan(items: &[Item], kinds: &[Kind]) -> Vec<Action> {
    let mut actions = vec![];
    for (i, item) in items.iter().enumerate() {
        if item.deleting {
            if item.has(ORPHAN_FINALIZER) {
                // orphanDependents, then removeFinalizer once no dependent refers to it
                let deps: Vec<usize> = dependents(items, item).map(|(d, _)| d).collect();
                for &d in &deps {
                    actions.push(Action::RemoveOwners {
                        item: d,
                        uids: vec![item.uid.clone()],
                    });
                }
                if deps.is_empty() {
                    actions.push(Action::RemoveFinalizer {
                        item: i,
                        finalizer: ORPHAN_FINALIZER,
                    });
                }
            } else if item.has(FOREGROUND_FINALIZER) {
                // processDeletingDependentsItem
                let blocking = dependents(items, item)
                    .filter(|(_, r)| r.block_owner_deletion == Some(true))
                    .count();
                if blocking == 0 {
                    actions.push(Action::RemoveFinalizer {
                        item: i,
                        finalizer: FOREGROUND_FINALIZER,
                    });
                }
            }
            // an object being deleted is not itself collected
            continue;
        }
        if item.owners.is_empty() {
            continue;
        }
        let (mut solid, mut dangling, mut waiting) = (vec![], vec![], vec![]);
        for r in &item.owners {
            match classify(items, kinds, item, r) {
                OwnerState::Solid => solid.push(r),
                OwnerState::Dangling => dangling.push(r),
                OwnerState::Waiting => waiting.push(r),
            }
        }
        if !solid.is_empty() {
            if !dangling.is_empty() || !waiting.is_empty() {
                actions.push(Action::RemoveOwners {
                    item: i,
                    uids: dangling
                        .iter()
                        .chain(&waiting)
                        .map(|r| r.uid.clone())
                        .collect(),
                });
            }
            continue;
        }
        let has_dependents = dependents(items, item).next().is_some();
        let policy = if !waiting.is_empty() && has_dependents {
            Propagation::Foreground
        } else if item.has(ORPHAN_FINALIZER) {
            Propagation::Orphan
        } else if item.has(FOREGROUND_FINALIZER) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        actions.push(Action::Delete {
            item: i,
            policy,
            absent_owners: dangling.into_iter().cloned().collect(),
        });
    }
    actions
}

/// The collector's knobs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The kinds whose objects are owners and dependents (the real collector discovers every
    /// deletable, listable resource; the sim has no group list, so they are named here).
    pub kinds: Vec<ApiResource>,
    /// Reaction lag after a change.
    pub lag: Duration,
}

impl Default for Config {
    /// Pods and the apps/v1 workloads.
    fn default() -> Self {
        use k8s_openapi::api::{apps::v1 as apps, core::v1 as core};
        Config {
            kinds: vec![
                Ar::erase::<core::Pod>(&()),
                Ar::erase::<apps::ReplicaSet>(&()),
                Ar::erase::<apps::Deployment>(&()),
                Ar::erase::<apps::StatefulSet>(&()),
            ],
            lag: Duration::ZERO,
        }
    }
}

impl Config {
    /// Also covers `kind` (e.g. a CRD: `ApiResource::from_gvk_with_plural`).
    pub fn cover(mut self, kind: ApiResource) -> Self {
        self.kinds.push(kind);
        self
    }
}

/// The collector's failing steps (none yet: a failed write is logged and retried by the next
/// pass, which sees the newer state).
#[derive(Debug, thiserror::Error)]
pub enum Error {}

/// Runs the collector until `shutdown`.
pub async fn run(
    client: Client,
    clock: Clock,
    config: Config,
    shutdown: impl Into<Shutdown>,
) -> Result<(), Error> {
    let mut c = Caches::default();
    let stores = config
        .kinds
        .iter()
        .map(|ar| {
            c.reflect_with(
                Api::all_with(client.clone(), ar),
                ar.clone(),
                Default::default(),
            )
        })
        .collect();
    let lag = config.lag;
    let scopes = vec![];
    let actor = Collector {
        client,
        config,
        stores,
        scopes,
    };
    support::run(actor, c, clock, lag, shutdown).await
}

struct Collector {
    client: Client,
    config: Config,
    stores: Vec<Store<DynamicObject>>,
    /// Whether each covered kind is namespaced (from discovery, once).
    scopes: Vec<bool>,
}

struct Scope {
    kinds: Vec<Kind>,
    items: Vec<Item>,
    objects: Vec<Arc<DynamicObject>>,
}

impl Collector {
    async fn observe(&mut self) -> Scope {
        if self.scopes.len() != self.config.kinds.len() {
            self.scopes.clear();
            for ar in &self.config.kinds {
                let namespaced = support::rest_mapping(&self.client, &ar.api_version, &ar.kind)
                    .await
                    .map(|(_, namespaced)| namespaced)
                    .unwrap_or(true);
                self.scopes.push(namespaced);
            }
        }
        let mut scope = Scope {
            kinds: vec![],
            items: vec![],
            objects: vec![],
        };
        for (k, (ar, store)) in self.config.kinds.iter().zip(&self.stores).enumerate() {
            scope.kinds.push(Kind {
                group: ar.group.clone(),
                kind: ar.kind.clone(),
                namespaced: self.scopes[k],
            });
            for o in store.sorted_state() {
                scope.items.push(Item {
                    kind: k,
                    namespace: o.metadata.namespace.clone(),
                    name: o.name_any(),
                    uid: o.metadata.uid.clone().unwrap_or_default(),
                    owners: o.metadata.owner_references.clone().unwrap_or_default(),
                    finalizers: o.metadata.finalizers.clone().unwrap_or_default(),
                    deleting: o.metadata.deletion_timestamp.is_some(),
                });
                scope.objects.push(o);
            }
        }
        scope
    }
}

fn api_for(client: &Client, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// `isDangling` with a live read: the owner is absent, or present with another uid.
async fn still_absent(
    client: &Client,
    config: &Config,
    scope: &Scope,
    item: &Item,
    r: &OwnerReference,
) -> bool {
    let group = group_of(&r.api_version);
    let Some(ki) = scope
        .kinds
        .iter()
        .position(|k| k.group == group && k.kind == r.kind)
    else {
        return false;
    };
    let ns = scope.kinds[ki]
        .namespaced
        .then_some(item.namespace.as_deref())
        .flatten();
    match api_for(client, &config.kinds[ki], ns)
        .get_opt(&r.name)
        .await
    {
        Ok(Some(o)) => o.metadata.uid.as_deref() != Some(r.uid.as_str()),
        Ok(None) => true,
        Err(_) => false,
    }
}

impl Actor for Collector {
    type Error = Error;

    async fn pass(&mut self, _now: Timestamp, expect: &mut Expect) -> Pass<Error> {
        let scope = self.observe().await;
        for action in plan(&scope.items, &scope.kinds) {
            let (i, result) = match &action {
                Action::Delete {
                    item,
                    policy,
                    absent_owners,
                } => {
                    if !self.confirmed(&scope, *item, absent_owners).await {
                        continue;
                    }
                    (*item, self.delete(&scope, *item, *policy, expect).await)
                }
                Action::RemoveOwners { item, uids } => {
                    (*item, self.remove_owners(&scope, *item, uids, expect).await)
                }
                Action::RemoveFinalizer { item, finalizer } => (
                    *item,
                    self.remove_finalizer(&scope, *item, finalizer, expect)
                        .await,
                ),
            };
            if let Err(e) = result {
                // a conflict or a vanished object: the next pass sees the newer state
                tracing::debug!(item = %scope.items[i].name, error = %e, "garbage collector: action failed");
            }
        }
        Ok(None)
    }
}

impl Collector {
    /// Whether every owner the plan found gone is still gone on a live read (each one is read).
    async fn confirmed(
        &self,
        scope: &Scope,
        item: usize,
        absent_owners: &[OwnerReference],
    ) -> bool {
        let it = &scope.items[item];
        let mut confirmed = true;
        for r in absent_owners {
            confirmed &= still_absent(&self.client, &self.config, scope, it, r).await;
        }
        confirmed
    }

    /// Deletes item `item` (uid precondition) with `policy`; the delete is expected in the cache.
    async fn delete(
        &self,
        scope: &Scope,
        item: usize,
        policy: Propagation,
        expect: &mut Expect,
    ) -> Result<(), kube::Error> {
        let (client, config) = (&self.client, &self.config);
        let it = &scope.items[item];
        let dp = DeleteParams {
            propagation_policy: Some(match policy {
                Propagation::Foreground => PropagationPolicy::Foreground,
                Propagation::Background => PropagationPolicy::Background,
                Propagation::Orphan => PropagationPolicy::Orphan,
            }),
            preconditions: Some(Preconditions {
                uid: Some(it.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let api = api_for(client, &config.kinds[it.kind], it.namespace.as_deref());
        tracing::info!(kind = %config.kinds[it.kind].kind, name = %it.name, ?policy, "garbage collector: deleting an object whose owners are gone");
        let result = api.delete(&it.name, &dp).await.map(|_| ());
        if result.is_ok() {
            let key = ObjectRef::new_with(&it.name, config.kinds[it.kind].clone());
            let key = match &it.namespace {
                Some(ns) => key.within(ns),
                None => key,
            };
            expect.deleted(&self.stores[it.kind], key, Some(it.uid.clone()));
        }
        result
    }

    /// Removes the owner references with `uids` from item `item`: a strategic-merge `$patch:
    /// delete` for built-in kinds, a JSON merge patch of the remaining references for CRDs.
    async fn remove_owners(
        &self,
        scope: &Scope,
        item: usize,
        uids: &[String],
        expect: &mut Expect,
    ) -> Result<(), kube::Error> {
        let (client, config) = (&self.client, &self.config);
        let it = &scope.items[item];
        let refs: Vec<_> = uids
            .iter()
            .map(|u| json!({"$patch": "delete", "uid": u}))
            .collect();
        let body = json!({"metadata": {"ownerReferences": refs, "uid": it.uid}});
        let api = api_for(client, &config.kinds[it.kind], it.namespace.as_deref());
        tracing::info!(kind = %config.kinds[it.kind].kind, name = %it.name, ?uids, "garbage collector: removing owner references");
        let patch = if config.kinds[it.kind].group.is_empty()
            || ["apps", "policy", "batch"].contains(&config.kinds[it.kind].group.as_str())
        {
            api.patch(&it.name, &PatchParams::default(), &Patch::Strategic(body))
                .await
        } else {
            // CRDs take no strategic merge patch: the collector falls back to a JSON
            // merge patch of the remaining references (`deleteOwnerRefJSONMergePatch`)
            let rest: Vec<_> = it
                .owners
                .iter()
                .filter(|r| !uids.contains(&r.uid))
                .collect();
            let body = json!({"metadata": {"ownerReferences": rest, "uid": it.uid,
            "resourceVersion": scope.objects[item].metadata.resource_version}});
            api.patch(&it.name, &PatchParams::default(), &Patch::Merge(body))
                .await
        };
        if let Ok(o) = &patch {
            expect.written_with(&self.stores[it.kind], o, config.kinds[it.kind].clone());
        }
        patch.map(|_| ())
    }

    /// Removes `finalizer` from item `item` (a merge patch at its resourceVersion).
    async fn remove_finalizer(
        &self,
        scope: &Scope,
        item: usize,
        finalizer: &str,
        expect: &mut Expect,
    ) -> Result<(), kube::Error> {
        let (client, config) = (&self.client, &self.config);
        let it = &scope.items[item];
        let rest: Vec<&String> = it.finalizers.iter().filter(|f| f != &finalizer).collect();
        let body = json!({"metadata": {"finalizers": rest,
        "resourceVersion": scope.objects[item].metadata.resource_version}});
        let api = api_for(client, &config.kinds[it.kind], it.namespace.as_deref());
        tracing::info!(kind = %config.kinds[it.kind].kind, name = %it.name, %finalizer, "garbage collector: removing finalizer");
        let patch = api
            .patch(&it.name, &PatchParams::default(), &Patch::Merge(body))
            .await;
        if let Ok(o) = &patch {
            expect.written_with(&self.stores[it.kind], o, config.kinds[it.kind].clone());
        }
        patch.map(|_| ())
    }
}

#[cfg(test)]
mod tests;
