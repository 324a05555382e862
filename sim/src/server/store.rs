//! The object store: objects per resource, one global revision (etcd's), a bounded history of
//! changes for watches from a resourceVersion, and the open watches.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use crate::server::selector::{FieldSelector, LabelSelector};
use crate::server::status::ApiError;

/// Resource key: `group/plural`.
pub type ResKey = Arc<str>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One committed change.
#[derive(Clone, Debug)]
pub struct Change {
    pub rv: u64,
    pub res: ResKey,
    pub typ: ChangeType,
    pub object: Arc<Value>,
    pub old: Option<Arc<Value>>,
    /// `object`'s JSON, encoded once for the write's reply and every watch sent the object.
    json: JsonCell,
}

/// An object's JSON encoding, made on first use and shared by its holders.
type JsonCell = Arc<std::sync::OnceLock<bytes::Bytes>>;

fn encode(cell: &JsonCell, object: &Value) -> bytes::Bytes {
    cell.get_or_init(|| bytes::Bytes::from(serde_json::to_vec(object).unwrap_or_default()))
        .clone()
}

/// A stored object as a reply sends it: the object and its JSON, encoded once for the reply
/// and the watch events of the change that stored it.
#[derive(Clone, Debug)]
pub struct Encoded {
    pub object: Arc<Value>,
    json: JsonCell,
}

impl Encoded {
    /// An object whose JSON is not shared with anything yet.
    pub fn new(object: Arc<Value>) -> Self {
        Encoded {
            object,
            json: Arc::default(),
        }
    }

    /// The object's JSON (`serde_json::to_vec`).
    pub fn json(&self) -> bytes::Bytes {
        encode(&self.json, &self.object)
    }
}

/// A watch event as sent on the wire (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`).
/// One change's event is built and encoded once and shared by every watch it goes to (the
/// object behind an `Arc`, its wire line encoded on first use): the fan-out to a dozen watches
/// costs a pointer each, not a deep copy and a serialization each.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub typ: &'static str,
    pub object: Arc<Value>,
    /// The object's JSON (shared with the reply of the write that stored it).
    json: JsonCell,
    line: Arc<std::sync::OnceLock<bytes::Bytes>>,
}

impl PartialEq for WatchEvent {
    fn eq(&self, other: &Self) -> bool {
        self.typ == other.typ && self.object == other.object
    }
}

impl WatchEvent {
    pub fn new(typ: &'static str, object: Value) -> Self {
        WatchEvent::shared(typ, Arc::new(object), Arc::default())
    }

    fn shared(typ: &'static str, object: Arc<Value>, json: JsonCell) -> Self {
        WatchEvent {
            typ,
            object,
            json,
            line: Arc::default(),
        }
    }

    /// The newline-terminated JSON line a watch stream sends (`{"type": …, "object": …}`),
    /// encoded once for every watch sharing the event. `type` comes first, as the API server
    /// writes it (`metav1.WatchEvent`'s field order): a client decoding the adjacently tagged
    /// event then decodes the object straight into its type; with `object` first, serde buffers
    /// the whole object as generic content and decodes it a second time (a sixth of the
    /// reliability sweep's CPU).
    pub fn line(&self) -> bytes::Bytes {
        self.line
            .get_or_init(|| {
                let object = encode(&self.json, &self.object);
                let mut v = Vec::with_capacity(object.len() + 32);
                v.extend_from_slice(b"{\"type\":");
                let _ = serde_json::to_writer(&mut v, self.typ);
                v.extend_from_slice(b",\"object\":");
                v.extend_from_slice(&object);
                v.extend_from_slice(b"}\n");
                bytes::Bytes::from(v)
            })
            .clone()
    }
}

/// Where a watch's event for a change comes from: the change's object, or (an object leaving
/// the selection) the previous content at the change's resourceVersion.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    New,
    OldAtNewVersion,
}

/// The events of one change, built once per (type, apiVersion, source) for all its watches.
#[derive(Default)]
struct Memo {
    built: Vec<(&'static str, String, Source, WatchEvent)>,
}

/// What a watch selects.
#[derive(Clone, Debug)]
pub struct WatchFilter {
    pub res: ResKey,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// The apiVersion objects are sent as.
    pub api_version: String,
}

impl WatchFilter {
    pub fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self
            .namespace
            .as_deref()
            .is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns));
        ns_ok && self.labels.matches(obj["metadata"].get("labels")) && self.fields.matches(obj)
    }

    /// The event carrying `obj` (its JSON shared through `json` when it goes out as it is).
    fn event(&self, typ: &'static str, obj: &Arc<Value>, json: &JsonCell) -> WatchEvent {
        if obj["apiVersion"].as_str() == Some(self.api_version.as_str()) {
            return WatchEvent::shared(typ, obj.clone(), json.clone());
        }
        let mut object = (**obj).clone();
        object["apiVersion"] = json!(self.api_version);
        WatchEvent::new(typ, object)
    }

    /// What this watch sees for `change` (the event's type and where its object comes from),
    /// with label/field transitions as the server's watch cache: an object leaving the
    /// selection is DELETED, one entering it is ADDED.
    fn select(&self, c: &Change) -> Option<(&'static str, Source)> {
        if c.res != self.res {
            return None;
        }
        let now = self.matches(&c.object);
        match c.typ {
            ChangeType::Added => now.then_some(("ADDED", Source::New)),
            ChangeType::Deleted => now.then_some(("DELETED", Source::New)),
            ChangeType::Modified => {
                let before = c.old.as_deref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => Some(("MODIFIED", Source::New)),
                    (false, true) => Some(("ADDED", Source::New)),
                    // the previous content at the new resourceVersion, as the watch cache and
                    // etcd3 watcher send it (`cacheWatcher.convertToWatchEvent`)
                    (true, false) => Some(("DELETED", Source::OldAtNewVersion)),
                    (false, false) => None,
                }
            }
        }
    }

    fn build(&self, c: &Change, typ: &'static str, source: Source) -> WatchEvent {
        match (source, c.old.as_ref()) {
            (Source::OldAtNewVersion, Some(old)) => {
                let mut object = (**old).clone();
                object["apiVersion"] = json!(self.api_version);
                object["metadata"]["resourceVersion"] =
                    c.object["metadata"]["resourceVersion"].clone();
                WatchEvent::new(typ, object)
            }
            _ => self.event(typ, &c.object, &c.json),
        }
    }

    /// The event this watch sees for `change` ([`WatchFilter::select`]).
    fn translate(&self, c: &Change) -> Option<WatchEvent> {
        self.select(c)
            .map(|(typ, source)| self.build(c, typ, source))
    }

    /// [`WatchFilter::translate`], sharing the event with the change's other watches.
    fn translate_shared(&self, c: &Change, memo: &mut Memo) -> Option<WatchEvent> {
        let (typ, source) = self.select(c)?;
        if let Some((.., ev)) = memo
            .built
            .iter()
            .find(|(t, a, s, _)| *t == typ && *a == self.api_version && *s == source)
        {
            return Some(ev.clone());
        }
        let ev = self.build(c, typ, source);
        memo.built
            .push((typ, self.api_version.clone(), source, ev.clone()));
        Some(ev)
    }
}

struct Watcher {
    filter: WatchFilter,
    tx: UnboundedSender<WatchEvent>,
}

/// All objects and their history.
pub struct Store {
    revision: u64,
    objects: BTreeMap<ResKey, BTreeMap<(String, String), Arc<Value>>>,
    history: VecDeque<Change>,
    history_limit: usize,
    /// Changes up to and including this revision are no longer in `history`.
    compacted: u64,
    watchers: Vec<Watcher>,
}

impl Store {
    /// A store keeping the last `history_limit` changes for watches.
    pub fn new(history_limit: usize) -> Self {
        Store {
            revision: 1,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 1,
            watchers: vec![],
        }
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn get(&self, res: &ResKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(res)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of `res` (in `ns` if given), in key order (namespace, name) as etcd lists them.
    pub fn list(&self, res: &ResKey, ns: Option<&str>) -> Vec<Arc<Value>> {
        let Some(m) = self.objects.get(res) else {
            return vec![];
        };
        match ns {
            Some(ns) => m
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => m.values().cloned().collect(),
        }
    }

    /// Commits a change at the next revision, stamping `metadata.resourceVersion`; returns the
    /// stored object.
    pub fn commit(&mut self, res: &ResKey, typ: ChangeType, obj: Value) -> Arc<Value> {
        self.commit_encoded(res, typ, obj).object
    }

    /// [`Store::commit`], returning the stored object with its JSON as the change's watch
    /// events send it (encoded once for both).
    pub fn commit_encoded(&mut self, res: &ResKey, typ: ChangeType, mut obj: Value) -> Encoded {
        self.revision += 1;
        let rv = self.revision;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let obj = Arc::new(obj);
        let objects = self.objects.entry(res.clone()).or_default();
        let old = match typ {
            ChangeType::Deleted => objects.remove(&(ns, name)),
            _ => objects.insert((ns, name), obj.clone()),
        };
        let change = Change {
            rv,
            res: res.clone(),
            typ,
            object: obj.clone(),
            old,
            json: Arc::default(),
        };
        let mut memo = Memo::default();
        self.watchers
            .retain(|w| match w.filter.translate_shared(&change, &mut memo) {
                Some(ev) => w.tx.send(ev).is_ok(),
                None => !w.tx.is_closed(),
            });
        drop(memo);
        let encoded = Encoded {
            object: obj,
            json: change.json.clone(),
        };
        self.history.push_back(change);
        while self.history.len() > self.history_limit {
            if let Some(c) = self.history.pop_front() {
                self.compacted = c.rv;
            }
        }
        encoded
    }

    /// Opens a watch. `from`: `None` starts with a synthetic ADDED per current object (the
    /// server's behaviour for an unset or `"0"` resourceVersion); `Some(rv)` replays the changes
    /// after `rv`, or fails with 410 Expired when they were compacted away.
    pub fn watch(
        &mut self,
        filter: WatchFilter,
        from: Option<u64>,
        tx: UnboundedSender<WatchEvent>,
    ) -> Result<(), ApiError> {
        match from {
            None => {
                for obj in self.list(&filter.res, filter.namespace.as_deref()) {
                    if filter.matches(&obj) {
                        let _ = tx.send(filter.event("ADDED", &obj, &Arc::default()));
                    }
                }
            }
            Some(rv) if rv < self.compacted => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {rv} ({})",
                    self.compacted
                )));
            }
            Some(rv) => {
                for c in self.history.iter().filter(|c| c.rv > rv) {
                    if let Some(ev) = filter.translate(c) {
                        let _ = tx.send(ev);
                    }
                }
            }
        }
        self.watchers.push(Watcher { filter, tx });
        Ok(())
    }

    /// Open watches (for tests and metrics).
    pub fn watch_count(&self) -> usize {
        self.watchers.iter().filter(|w| !w.tx.is_closed()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    fn obj(name: &str, label: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "labels": {"pick": label}}})
    }

    fn filter(sel: &str) -> WatchFilter {
        WatchFilter {
            res: Arc::from("x/things"),
            namespace: Some("ns".into()),
            labels: LabelSelector::parse(sel).unwrap(),
            fields: FieldSelector::default(),
            api_version: "x/v1".into(),
        }
    }

    #[test]
    fn revisions_are_global_and_watches_replay_from_a_version() {
        let mut s = Store::new(100);
        let res: ResKey = Arc::from("x/things");
        let a = s.commit(&res, ChangeType::Added, obj("a", "me"));
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        s.commit(&res, ChangeType::Added, obj("b", "me"));
        let (tx, mut rx) = unbounded_channel();
        s.watch(filter(""), Some(2), tx).unwrap();
        assert_eq!(rx.try_recv().unwrap().object["metadata"]["name"], "b");
        assert!(rx.try_recv().is_err());
        s.commit(&res, ChangeType::Deleted, obj("a", "me"));
        let ev = rx.try_recv().unwrap();
        assert_eq!(
            (ev.typ, ev.object["metadata"]["resourceVersion"].as_str()),
            ("DELETED", Some("4"))
        );
    }

    #[test]
    fn leaving_and_entering_a_selection_are_deleted_and_added() {
        let mut s = Store::new(100);
        let res: ResKey = Arc::from("x/things");
        s.commit(&res, ChangeType::Added, obj("a", "me"));
        let (tx, mut rx) = unbounded_channel();
        s.watch(filter("pick=me"), None, tx).unwrap();
        assert_eq!(rx.try_recv().unwrap().typ, "ADDED");
        let left = s.commit(&res, ChangeType::Modified, obj("a", "not-me"));
        let ev = rx.try_recv().unwrap();
        assert_eq!(ev.typ, "DELETED");
        // the object as it was when it still matched, at the change's resourceVersion
        assert_eq!(ev.object["metadata"]["labels"]["pick"], "me");
        assert_eq!(
            ev.object["metadata"]["resourceVersion"],
            left["metadata"]["resourceVersion"]
        );
        s.commit(&res, ChangeType::Modified, obj("a", "not-me"));
        assert!(rx.try_recv().is_err());
        s.commit(&res, ChangeType::Modified, obj("a", "me"));
        assert_eq!(rx.try_recv().unwrap().typ, "ADDED");
    }

    #[test]
    fn a_watch_line_is_type_then_object_as_the_server_writes_it() {
        let ev = WatchEvent::new("ADDED", json!({"metadata": {"name": "a"}}));
        assert_eq!(
            &ev.line()[..],
            b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"
        );
    }

    #[test]
    fn a_watch_older_than_the_history_window_is_gone() {
        let mut s = Store::new(2);
        let res: ResKey = Arc::from("x/things");
        for n in ["a", "b", "c", "d"] {
            s.commit(&res, ChangeType::Added, obj(n, "me"));
        }
        // revisions 2..=5; the window keeps 4 and 5
        let (tx, _rx) = unbounded_channel();
        let e = s.watch(filter(""), Some(2), tx).unwrap_err();
        assert_eq!((e.code, e.reason), (410, "Expired"));
        assert_eq!(e.message, "too old resource version: 2 (3)");
        let (tx, mut rx) = unbounded_channel();
        s.watch(filter(""), Some(3), tx).unwrap();
        assert_eq!(rx.try_recv().unwrap().object["metadata"]["name"], "c");
    }
}
