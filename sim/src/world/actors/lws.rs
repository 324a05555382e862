//! A LeaderWorkerSet-like controller on the real LWS CRD (`leaderworkerset.x-k8s.io/v1`), after
//! kubernetes-sigs/lws (`api/leaderworkerset/v1/leaderworkerset_types.go`,
//! `pkg/controllers/pod_controller.go`, `pkg/webhooks/pod_webhook.go`), without StatefulSets:
//!
//! - `spec.replicas` groups; group `i` is the leader `<lws>-<i>` (from `leaderTemplate`, else
//!   `workerTemplate`) and workers `<lws>-<i>-<j>`, `j` in `1..size`.
//! - Labels as LWS sets them: `leaderworkerset.sigs.k8s.io/name`, `/group-index`, `/worker-index`
//!   (0 for the leader), `/group-key` (`sha1("<namespace>/<leader name>")`, the webhook's
//!   `genGroupUniqueKey`); annotations `/size` on every pod and `/leader-name` on workers.
//! - The LWS annotation `leaderworkerset.sigs.k8s.io/exclusive-topology: <key>` gives every pod
//!   LWS's `SetExclusiveAffinities`: required podAffinity to its group key and podAntiAffinity to
//!   other groups' keys on that topology (one group per domain, the group packed into it).
//! - `startupPolicy: LeaderReady` creates workers only once the leader is Ready.
//! - `restartPolicy: RecreateGroupOnPodRestart` (the default): when any pod of a group is deleted
//!   (`deletionTimestamp`), failed, or has a restarted container, the whole group is deleted and
//!   then created again (LWS deletes the leader; its worker StatefulSet and so the workers follow).
//!   `None`/`Default`: only the failed pod is replaced.
//! - The leader is owned by the LWS, workers by their leader Pod (LWS: worker StatefulSet owned by
//!   the leader): a worker of an older leader (same name, other uid) is deleted, never adopted.
//! - Status: `replicas` (groups with a live leader), `readyReplicas` (groups whose pods are all
//!   Ready), `hpaPodSelector`, `observedGeneration`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

pub const NAME: &str = "leaderworkerset.sigs.k8s.io/name";
pub const GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
pub const WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
pub const GROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/group-key";
pub const SIZE: &str = "leaderworkerset.sigs.k8s.io/size";
pub const LEADER_NAME: &str = "leaderworkerset.sigs.k8s.io/leader-name";
pub const EXCLUSIVE_TOPOLOGY: &str = "leaderworkerset.sigs.k8s.io/exclusive-topology";

/// The controller's writes.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Create(Value),
    Delete { name: String, uid: String },
    Status(Value),
}

/// SHA-1 as 40 hex characters (for the group key).
pub fn sha1_hex(data: &[u8]) -> String {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, b) in chunk.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    h.iter().map(|x| format!("{x:08x}")).collect()
}

/// The group key LWS gives a leader's group.
pub fn group_key(namespace: &str, leader: &str) -> String {
    sha1_hex(format!("{namespace}/{leader}").as_bytes())
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// LWS's restart triggers: deleted (`PodDeleted`), a restarted container
/// (`ContainerRestarted`), or failed (the StatefulSet would replace it).
fn restarted(pod: &Pod) -> bool {
    let s = pod.status.as_ref();
    pod.metadata.deletion_timestamp.is_some()
        || s.and_then(|s| s.phase.as_deref()) == Some("Failed")
        || s.and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .chain(
                s.and_then(|s| s.init_container_statuses.as_ref())
                    .into_iter()
                    .flatten(),
            )
            .any(|c| c.restart_count > 0)
}

fn owner_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

fn exclusive_affinity(spec: &mut Value, key: &str, topology: &str) {
    if !spec["affinity"].is_object() {
        spec["affinity"] = json!({});
    }
    let aff = &mut spec["affinity"];
    let add = |v: &mut Value, field: &str, term: Value| {
        if !v[field].is_object() {
            v[field] = json!({});
        }
        let list = &mut v[field]["requiredDuringSchedulingIgnoredDuringExecution"];
        if !list.is_array() {
            *list = json!([]);
        }
        if let Some(l) = list.as_array_mut() {
            l.push(term);
        }
    };
    add(
        aff,
        "podAffinity",
        json!({"labelSelector": {"matchExpressions": [
            {"key": GROUP_KEY, "operator": "In", "values": [key]}]}, "topologyKey": topology}),
    );
    add(
        aff,
        "podAntiAffinity",
        json!({"labelSelector": {"matchExpressions": [
            {"key": GROUP_KEY, "operator": "Exists"},
            {"key": GROUP_KEY, "operator": "NotIn", "values": [key]}]}, "topologyKey": topology}),
    );
}

/// One pod of group `group` (`worker` 0 is the leader).
fn pod_for(lws: &Value, group: i64, worker: i64, leader_uid: Option<&str>) -> Value {
    let name = lws["metadata"]["name"].as_str().unwrap_or_default();
    let ns = lws["metadata"]["namespace"].as_str().unwrap_or_default();
    let tpl = &lws["spec"]["leaderWorkerTemplate"];
    let size = tpl["size"].as_i64().unwrap_or(1);
    let template = if worker == 0 && tpl["leaderTemplate"].is_object() {
        &tpl["leaderTemplate"]
    } else {
        &tpl["workerTemplate"]
    };
    let leader = format!("{name}-{group}");
    let pod_name = if worker == 0 {
        leader.clone()
    } else {
        format!("{leader}-{worker}")
    };
    let key = group_key(ns, &leader);
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels[NAME] = json!(name);
    labels[GROUP_INDEX] = json!(group.to_string());
    labels[WORKER_INDEX] = json!(worker.to_string());
    labels[GROUP_KEY] = json!(key);
    let mut annotations = template["metadata"]["annotations"].clone();
    if !annotations.is_object() {
        annotations = json!({});
    }
    annotations[SIZE] = json!(size.to_string());
    if worker > 0 {
        annotations[LEADER_NAME] = json!(leader);
    }
    let mut spec = template["spec"].clone();
    if let Some(topology) = lws["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY].as_str() {
        annotations[EXCLUSIVE_TOPOLOGY] = json!(topology);
        exclusive_affinity(&mut spec, &key, topology);
    }
    let owner = match leader_uid {
        None => json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "name": name, "uid": lws["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}),
        Some(uid) => json!({"apiVersion": "v1", "kind": "Pod", "name": leader, "uid": uid,
            "controller": true, "blockOwnerDeletion": true}),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": ns, "labels": labels,
            "annotations": annotations, "ownerReferences": [owner]},
        "spec": spec,
    })
}

/// What the controller does for `lws` given its pods (those labelled with its name).
pub fn reconcile(lws: &Value, pods: &[Arc<Pod>]) -> Vec<Action> {
    let set = Set::of(lws, pods);
    let mut actions = vec![];
    let mut live_groups = 0;
    let mut ready_groups = 0;
    for i in group_indices(set.replicas, pods) {
        let (live, ready) = set.group(i, &mut actions);
        live_groups += i64::from(live);
        ready_groups += i64::from(ready);
    }
    actions.extend(status_update(lws, set.name, live_groups, ready_groups));
    actions
}

/// The delete of `p`, unless it is already deleting.
fn delete(p: &Pod) -> Option<Action> {
    p.metadata
        .deletion_timestamp
        .is_none()
        .then(|| Action::Delete {
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
        })
}

/// The groups to reconcile: those to keep, then any group index beyond `replicas` a pod has.
fn group_indices(replicas: i64, pods: &[Arc<Pod>]) -> Vec<i64> {
    let mut indices: Vec<i64> = (0..replicas).collect();
    for p in pods {
        if let Some(i) = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(GROUP_INDEX))
            .and_then(|i| i.parse::<i64>().ok())
            && !indices.contains(&i)
        {
            indices.push(i);
        }
    }
    indices
}

/// The status write, when the groups counted differ from the status (a missing count is 0).
fn status_update(lws: &Value, name: &str, live_groups: i64, ready_groups: i64) -> Option<Action> {
    let status = json!({
        "replicas": live_groups,
        "readyReplicas": ready_groups,
        "hpaPodSelector": format!("{NAME}={name},{WORKER_INDEX}=0"),
        "observedGeneration": lws["metadata"]["generation"],
    });
    let current = &lws["status"];
    let same = [
        "replicas",
        "readyReplicas",
        "hpaPodSelector",
        "observedGeneration",
    ]
    .iter()
    .all(|k| current[*k] == status[*k] || (current[*k].is_null() && status[*k] == json!(0)));
    (!same).then_some(Action::Status(status))
}

/// One reconcile's view of an LWS: its settings and its pods by name.
struct Set<'a> {
    lws: &'a Value,
    pods: &'a [Arc<Pod>],
    by_name: BTreeMap<&'a str, &'a Pod>,
    name: &'a str,
    replicas: i64,
    size: i64,
    recreate_group: bool,
    leader_ready_first: bool,
}

impl<'a> Set<'a> {
    fn of(lws: &'a Value, pods: &'a [Arc<Pod>]) -> Self {
        let tpl = &lws["spec"]["leaderWorkerTemplate"];
        Set {
            lws,
            pods,
            by_name: pods
                .iter()
                .filter_map(|p| p.metadata.name.as_deref().map(|n| (n, &**p)))
                .collect(),
            name: lws["metadata"]["name"].as_str().unwrap_or_default(),
            replicas: lws["spec"]["replicas"].as_i64().unwrap_or(1).max(0),
            size: tpl["size"].as_i64().unwrap_or(1).max(1),
            recreate_group: matches!(
                tpl["restartPolicy"].as_str(),
                None | Some("RecreateGroupOnPodRestart")
            ),
            leader_ready_first: lws["spec"]["startupPolicy"].as_str() == Some("LeaderReady"),
        }
    }

    /// Group `i`'s writes, added to `actions`: stale workers go; a group beyond `replicas` goes
    /// whole; a missing leader is created; a restarted group is deleted to be created again;
    /// missing workers are created (once the leader is Ready under `LeaderReady`). Returns
    /// whether the group counts as live (its leader there, not deleting) and as ready.
    fn group(&self, i: i64, actions: &mut Vec<Action>) -> (bool, bool) {
        let leader_name = format!("{}-{i}", self.name);
        let leader = self.by_name.get(leader_name.as_str()).copied();
        let leader_uid = leader.and_then(|l| l.metadata.uid.as_deref());
        let (ours, stale) = self.workers(i, &leader_name, leader_uid);
        actions.extend(stale.iter().filter_map(|p| delete(p)));
        if i >= self.replicas {
            actions.extend(leader.and_then(delete));
            actions.extend(ours.iter().filter_map(|p| delete(p)));
            return (false, false);
        }
        let Some(leader) = leader else {
            actions.push(Action::Create(pod_for(self.lws, i, 0, None)));
            return (false, false);
        };
        if leader.metadata.deletion_timestamp.is_some() {
            actions.extend(ours.iter().filter_map(|p| delete(p)));
            return (false, false);
        }
        let group_restarted = restarted(leader) || ours.iter().any(|p| restarted(p));
        if self.recreate_group && group_restarted {
            actions.extend(delete(leader));
            actions.extend(ours.iter().filter_map(|p| delete(p)));
            return (true, false);
        }
        if !self.recreate_group {
            actions.extend(
                ours.iter()
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
                    })
                    .filter_map(|p| delete(p)),
            );
        }
        let all_ready = is_ready(leader)
            && ours.len() as i64 == self.size - 1
            && ours.iter().all(|p| is_ready(p));
        if self.leader_ready_first && !is_ready(leader) {
            return (true, all_ready);
        }
        for j in 1..self.size {
            let wname = format!("{leader_name}-{j}");
            // a worker name still held by an older pod is created once that one is gone
            if !self.by_name.contains_key(wname.as_str()) {
                actions.push(Action::Create(pod_for(self.lws, i, j, leader_uid)));
            }
        }
        (true, all_ready)
    }

    /// Group `i`'s workers: (ours, stale). A worker is ours when it has a worker name of the
    /// group within the size and the leader `leader_uid` owns it; workers beyond the size, or
    /// of another leader, are stale.
    fn workers(
        &self,
        i: i64,
        leader_name: &str,
        leader_uid: Option<&str>,
    ) -> (Vec<&'a Pod>, Vec<&'a Pod>) {
        let workers: Vec<&Pod> = (1..self.size.max(1))
            .filter_map(|j| {
                self.by_name
                    .get(format!("{leader_name}-{j}").as_str())
                    .copied()
            })
            .collect();
        self.pods
            .iter()
            .map(|p| &**p)
            .filter(|p| {
                p.metadata.labels.as_ref().and_then(|l| l.get(GROUP_INDEX)) == Some(&i.to_string())
                    && p.metadata.labels.as_ref().and_then(|l| l.get(WORKER_INDEX))
                        != Some(&"0".to_string())
            })
            .partition(|p| {
                leader_uid.is_some_and(|u| owner_uid(p) == Some(u))
                    && workers.iter().any(|w| std::ptr::eq(*w, *p))
            })
    }
}

/// controller-runtime's expectations: writes made but not yet seen through the watch, so a pass
/// that runs before the watch caught up does not repeat them.
#[derive(Debug, Default)]
pub struct Expectations {
    creates: std::collections::HashSet<(String, String)>,
    deletes: std::collections::HashSet<String>,
}

impl Expectations {
    /// Forgets what the store now shows: created names present, deleted uids gone or deleting.
    pub fn observe(&mut self, pods: &[Arc<Pod>]) {
        let key = |p: &Pod| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            )
        };
        let names: std::collections::HashSet<_> = pods.iter().map(|p| key(p)).collect();
        self.creates.retain(|k| !names.contains(k));
        let live: std::collections::HashSet<&str> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        self.deletes.retain(|u| live.contains(u.as_str()));
    }

    /// Whether `action` still has to be done (and records it as done).
    pub fn admit(&mut self, namespace: &str, action: &Action) -> bool {
        match action {
            Action::Create(p) => self.creates.insert((
                namespace.to_string(),
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )),
            Action::Delete { uid, .. } => self.deletes.insert(uid.clone()),
            Action::Status(_) => true,
        }
    }

    /// Forgets everything (a periodic resync trusts the store again).
    pub fn clear(&mut self) {
        self.creates.clear();
        self.deletes.clear();
    }
}

pub use io::run;

mod io {
    use raygate::runtime::SortedState;
    use std::sync::Arc;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::{
        Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams,
        Preconditions,
    };
    use kube::runtime::reflector::Store;
    use kube::runtime::watcher;

    use super::{Action, Expectations, NAME, reconcile};
    use crate::Clock;
    use crate::world::actors::support::{self, Actor, Caches, Expect, Pass, Shutdown};

    /// The LWS resource.
    pub fn resource() -> ApiResource {
        ApiResource {
            group: "leaderworkerset.x-k8s.io".into(),
            version: "v1".into(),
            api_version: "leaderworkerset.x-k8s.io/v1".into(),
            kind: "LeaderWorkerSet".into(),
            plural: "leaderworkersets".into(),
        }
    }

    /// Runs the controller until `shutdown` (`resync`: a periodic pass besides watch events,
    /// which also forgets the expectations).
    pub async fn run(
        client: kube::Client,
        clock: Clock,
        resync: Duration,
        shutdown: impl Into<Shutdown>,
    ) {
        let mut caches = Caches::default();
        let ar = resource();
        let actor = Controller {
            sets: caches.reflect_with(
                Api::all_with(client.clone(), &ar),
                ar.clone(),
                watcher::Config::default(),
            ),
            pods: caches.reflect(
                Api::all(client.clone()),
                watcher::Config::default().labels(NAME),
            ),
            client,
            ar,
            resync,
            resync_at: None,
            expectations: Expectations::default(),
            encoded: Vec::new(),
        };
        support::drive(actor, caches, clock, Duration::ZERO, shutdown.into()).await;
    }

    struct Controller {
        client: kube::Client,
        ar: ApiResource,
        sets: Store<DynamicObject>,
        pods: Store<Pod>,
        resync: Duration,
        /// When the next resync is due (a pass at or after it trusts the store again).
        resync_at: Option<Timestamp>,
        expectations: Expectations,
        /// Each set's JSON with the cached object it was encoded from: a pass runs on every
        /// change of a set's pods, and the reflector replaces a set's `Arc` only when the set
        /// changed, so an unchanged set is not encoded again.
        encoded: Vec<(Arc<DynamicObject>, serde_json::Value)>,
    }

    impl Actor for Controller {
        type Error = std::convert::Infallible;

        async fn pass(&mut self, now: Timestamp, _expect: &mut Expect) -> Pass<Self::Error> {
            if self.resync_at.is_some_and(|at| now >= at) {
                self.expectations.clear();
            }
            let all_pods = self.pods.sorted_state();
            self.expectations.observe(&all_pods);
            let sets = self.sets.sorted_state();
            let mut encoded = Vec::with_capacity(sets.len());
            for set in sets {
                let kept = self.encoded.iter().position(|(o, _)| Arc::ptr_eq(o, &set));
                let value = match kept {
                    Some(i) => self.encoded.swap_remove(i).1,
                    None => match serde_json::to_value(&*set) {
                        Ok(v) => v,
                        Err(_) => continue,
                    },
                };
                encoded.push((set, value));
            }
            // sets that are gone drop out with their JSON
            self.encoded = encoded;
            for (set, value) in &self.encoded {
                let name = set.metadata.name.clone().unwrap_or_default();
                let ns = set.metadata.namespace.clone().unwrap_or_default();
                let mine: Vec<Arc<Pod>> = all_pods
                    .iter()
                    .filter(|p| {
                        p.metadata.namespace.as_deref() == Some(ns.as_str())
                            && p.metadata.labels.as_ref().and_then(|l| l.get(NAME)) == Some(&name)
                    })
                    .cloned()
                    .collect();
                for action in reconcile(value, &mine) {
                    if self.expectations.admit(&ns, &action) {
                        apply(&self.client, &self.ar, &ns, &name, action).await;
                    }
                }
            }
            let at = now + self.resync;
            self.resync_at = Some(at);
            Ok(Some(at))
        }
    }

    async fn apply(client: &kube::Client, ar: &ApiResource, ns: &str, lws: &str, action: Action) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let result = match action {
            Action::Create(pod) => match serde_json::from_value::<Pod>(pod) {
                Ok(p) => pods.create(&PostParams::default(), &p).await.map(|_| ()),
                Err(e) => {
                    tracing::warn!(%lws, error = %e, "pod template does not decode");
                    Ok(())
                }
            },
            Action::Delete { name, uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                pods.delete(&name, &dp).await.map(|_| ())
            }
            Action::Status(status) => {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
                api.patch_status(
                    lws,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"status": status})),
                )
                .await
                .map(|_| ())
            }
        };
        if let Err(e) = result {
            tracing::debug!(%lws, error = %e, "LWS write failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_the_standard_vectors() {
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            sha1_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
    }

    fn lws(policy: Option<&str>) -> Value {
        let mut v = json!({"metadata": {"name": "w", "namespace": "ns", "uid": "lws-uid", "generation": 1,
                "annotations": {EXCLUSIVE_TOPOLOGY: "ud"}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3,
                "workerTemplate": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "c"}]}}}}});
        if let Some(p) = policy {
            v["spec"]["leaderWorkerTemplate"]["restartPolicy"] = json!(p);
        }
        v
    }

    fn as_pod(v: &Value, uid: &str) -> Arc<Pod> {
        let mut p: Pod = serde_json::from_value(v.clone()).unwrap();
        p.metadata.uid = Some(uid.into());
        Arc::new(p)
    }

    fn created(actions: &[Action]) -> Vec<Value> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Create(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    fn deleted(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_group_is_a_leader_then_its_workers_with_lws_labels_and_exclusive_affinity() {
        let set = lws(None);
        let first = created(&reconcile(&set, &[]));
        assert_eq!(first.len(), 1, "the leader first");
        let leader = &first[0];
        assert_eq!(leader["metadata"]["name"], "w-0");
        let key = group_key("ns", "w-0");
        let labels = &leader["metadata"]["labels"];
        assert_eq!(
            (
                &labels[NAME],
                &labels[GROUP_INDEX],
                &labels[WORKER_INDEX],
                &labels[GROUP_KEY],
                &labels["app"]
            ),
            (
                &json!("w"),
                &json!("0"),
                &json!("0"),
                &json!(key),
                &json!("w")
            )
        );
        assert_eq!(leader["metadata"]["annotations"][SIZE], "3");
        // SetExclusiveAffinities: affinity to the own key, anti-affinity to other keys
        let aff = &leader["spec"]["affinity"];
        assert_eq!(
            aff["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"],
            "ud"
        );
        assert_eq!(
            aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]
                ["matchExpressions"][1],
            json!({"key": GROUP_KEY, "operator": "NotIn", "values": [key]})
        );
        let workers = created(&reconcile(&set, &[as_pod(leader, "L1")]));
        let names: Vec<_> = workers
            .iter()
            .map(|w| w["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, [json!("w-0-1"), json!("w-0-2")]);
        assert_eq!(workers[1]["metadata"]["labels"][WORKER_INDEX], "2");
        assert_eq!(workers[1]["metadata"]["annotations"][LEADER_NAME], "w-0");
        assert_eq!(workers[1]["metadata"]["ownerReferences"][0]["uid"], "L1");
    }

    fn group(set: &Value) -> Vec<Arc<Pod>> {
        let leader = created(&reconcile(set, &[])).remove(0);
        let l = as_pod(&leader, "L1");
        let mut all = vec![l.clone()];
        for (i, w) in created(&reconcile(set, &[l])).iter().enumerate() {
            all.push(as_pod(w, &format!("W{i}")));
        }
        all
    }

    #[test]
    fn recreate_group_on_pod_restart_deletes_the_whole_group_when_one_member_goes() {
        // pod_controller.go handleRestartPolicy: a deleted pod or a restarted container
        let set = lws(None);
        let mut pods = group(&set);
        assert!(deleted(&reconcile(&set, &pods)).is_empty());
        let mut w = (*pods[2]).clone();
        w.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        pods[2] = Arc::new(w);
        assert_eq!(deleted(&reconcile(&set, &pods)), ["w-0", "w-0-1"]);
        // restartPolicy None: only the failed pod is replaced (after it is gone)
        let none = lws(Some("None"));
        assert!(deleted(&reconcile(&none, &pods)).is_empty());
    }

    #[test]
    fn expectations_keep_a_pass_from_repeating_writes_the_watch_has_not_shown_yet() {
        let set = lws(None);
        let mut exp = Expectations::default();
        let first = reconcile(&set, &[]);
        assert!(exp.admit("ns", &first[0]));
        // the watch has not delivered the leader yet: the same create is not repeated
        assert!(!exp.admit("ns", &reconcile(&set, &[])[0]));
        let leader = as_pod(&created(&first)[0], "L1");
        exp.observe(&[leader]);
        assert!(
            exp.admit("ns", &reconcile(&set, &[])[0]),
            "seen, then gone: create again"
        );
        let del = Action::Delete {
            name: "w-0".into(),
            uid: "L1".into(),
        };
        assert!(exp.admit("ns", &del));
        assert!(!exp.admit("ns", &del));
    }

    #[test]
    fn a_worker_of_an_older_leader_is_deleted_not_adopted() {
        let set = lws(None);
        let mut pods = group(&set);
        let mut l = (*pods[0]).clone();
        l.metadata.uid = Some("L2".into());
        pods[0] = Arc::new(l);
        let actions = reconcile(&set, &pods);
        assert_eq!(deleted(&actions), ["w-0-1", "w-0-2"]);
        assert!(created(&actions).is_empty(), "the names are still held");
    }
}
