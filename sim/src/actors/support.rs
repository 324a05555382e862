//! Plumbing shared by the actors: wake-ups from watches, core/v1 Events stamped with the sim's
//! clock, and a RESTMapper over the sim's discovery.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::Duration;

use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResourceList, ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::Clock;

/// Wake-ups: one item per watch event (or watch error) of any of the watched resources.
pub struct Wake {
    streams: SelectAll<BoxStream<'static, ()>>,
}

impl Default for Wake {
    fn default() -> Self {
        Wake {
            streams: SelectAll::new(),
        }
    }
}

impl Wake {
    /// Also wakes on every change of `api`'s objects.
    pub fn watch<K>(mut self, api: Api<K>) -> Self
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        self.streams.push(
            watcher(api, watcher::Config::default())
                .default_backoff()
                .map(|_| ())
                .boxed(),
        );
        self
    }

    /// Waits for the next change, then for `lag` (the controller's reaction lag), and swallows
    /// the changes that came in meanwhile: the sync that follows reads them all. `false` when
    /// every watch ended.
    pub async fn next(&mut self, lag: Duration) -> bool {
        if self.streams.next().await.is_none() {
            return false;
        }
        if !lag.is_zero() {
            tokio::time::sleep(lag).await;
        }
        while let Some(Some(())) = self.streams.next().now_or_never() {}
        true
    }
}

/// The object reference of `obj` (for Events).
pub fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    let meta = obj.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}

/// Writes core/v1 Events on the sim's clock, each (object, reason, message) once.
pub struct Recorder {
    client: Client,
    clock: Clock,
    component: String,
    sent: BTreeSet<(String, String, String, String)>,
}

impl Recorder {
    pub fn new(client: Client, clock: Clock, component: &str) -> Self {
        Recorder {
            client,
            clock,
            component: component.into(),
            sent: BTreeSet::new(),
        }
    }

    pub async fn publish(&mut self, on: ObjectReference, type_: &str, reason: &str, message: &str) {
        let key = (
            on.uid.clone().unwrap_or_default(),
            on.name.clone().unwrap_or_default(),
            reason.to_string(),
            message.to_string(),
        );
        if !self.sent.insert(key) {
            return;
        }
        let ns = on.namespace.clone().unwrap_or_else(|| "default".into());
        let now = Time(self.clock.now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", on.name.clone().unwrap_or_default())),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: on,
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                ..Default::default()
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(%reason, error = %e, "sim actor: event not written");
        }
    }
}

/// The group-version's resources from discovery (`/api/v1`, `/apis/{group}/{version}`).
pub async fn resources(client: &Client, api_version: &str) -> Result<APIResourceList, kube::Error> {
    if api_version.contains('/') {
        client.list_api_group_resources(api_version).await
    } else {
        client.list_core_api_resources(api_version).await
    }
}

/// `RESTMapping`: the plural and scope of `kind` in `api_version`, or the mapper's
/// `no matches for kind "K" in version "G/V"`.
pub async fn rest_mapping(
    client: &Client,
    api_version: &str,
    kind: &str,
) -> Result<(String, bool), String> {
    let no_match = || format!("no matches for kind \"{kind}\" in version \"{api_version}\"");
    let list = resources(client, api_version)
        .await
        .map_err(|_| no_match())?;
    list.resources
        .iter()
        .find(|r| r.kind == kind && !r.name.contains('/'))
        .map(|r| (r.name.clone(), r.namespaced))
        .ok_or_else(no_match)
}
