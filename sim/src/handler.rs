//! Request handling: the URL's route, then one function per verb over the store, with the
//! registry's strategies (status subresource, generation, graceful deletion, finalizers, CRD
//! schemas) and field ownership. Plain functions over data; the tower Service is a thin shell.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::fields::{self, Scope, Shape, Writer};
use crate::kinds::{Registry, ResourceType};
use crate::patch::{self, PatchType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, FieldCause};
use crate::store::{ChangeType, Encoded, ResKey, Store, WatchFilter};

/// A parsed request, without IO.
#[derive(Clone, Debug, Default)]
pub struct ApiRequest {
    pub method: String,
    pub path: String,
    pub query: HashMap<String, String>,
    pub content_type: String,
    pub user_agent: String,
    pub body: Vec<u8>,
}

/// Where a request goes.
#[derive(Clone, Debug)]
pub struct Route {
    pub rt: Arc<ResourceType>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Route {
    pub fn key(&self) -> ResKey {
        Arc::from(format!("{}/{}", self.rt.group, self.rt.plural))
    }

    fn shape(&self) -> Shape<'_> {
        Shape {
            rt: &self.rt,
            version: &self.version,
        }
    }

    fn scope(&self) -> Scope {
        match self.subresource.as_deref() {
            Some("status") => Scope::Status,
            _ => Scope::Main {
                status_separate: self.rt.status_subresource,
            },
        }
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.rt.group, &self.rt.plural, name)
    }
}

/// Parses `/api/v1/...` and `/apis/{group}/{version}/...`.
pub fn route(registry: &Registry, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route()),
    };
    let namespaced_resource = |r: &str| registry.find(group, version, r).filter(|t| t.namespaced);
    let (namespace, plural, tail) = match rest {
        ["namespaces", ns, r, tail @ ..] if namespaced_resource(r).is_some() => {
            (Some(*ns), *r, tail)
        }
        [r, tail @ ..] => (None, *r, tail),
        [] => return Err(ApiError::no_route()),
    };
    let rt = registry
        .find(group, version, plural)
        .ok_or_else(ApiError::no_route)?;
    let (name, subresource) = match tail {
        [] => (None, None),
        [n] => (Some(*n), None),
        [n, s] => (Some(*n), Some(*s)),
        _ => return Err(ApiError::no_route()),
    };
    if let Some(s) = subresource {
        let served = (s == "status" && rt.status_subresource)
            || (s == "scale" && rt.scale_subresource)
            || (matches!(s, "eviction" | "binding")
                && rt.builtin
                && rt.group.is_empty()
                && rt.kind == "Pod");
        if !served {
            return Err(ApiError::no_route());
        }
    }
    if name.is_some() && rt.namespaced != namespace.is_some() {
        return Err(ApiError::no_route());
    }
    if !rt.namespaced && namespace.is_some() {
        return Err(ApiError::no_route());
    }
    if name.is_some_and(str::is_empty) || namespace.is_some_and(str::is_empty) {
        return Err(ApiError::no_route());
    }
    Ok(Route {
        version: version.to_string(),
        namespace: namespace.map(String::from),
        name: name.map(String::from),
        subresource: subresource.map(String::from),
        rt,
    })
}

/// The outcome of a non-watch request.
pub type Reply = Result<(u16, Body), ApiError>;

/// A reply's object: built for the reply, or a stored object sent as it is stored (no copy; its
/// JSON encoded once for the reply and the watch events of the write that stored it).
#[derive(Clone, Debug)]
pub enum Body {
    Built(Value),
    Stored(Encoded),
}

impl From<Value> for Body {
    fn from(v: Value) -> Self {
        Body::Built(v)
    }
}

impl Body {
    /// The JSON the reply sends.
    pub fn json(&self) -> bytes::Bytes {
        match self {
            Body::Built(v) => bytes::Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
            Body::Stored(e) => e.json(),
        }
    }

    /// The object (for callers that read the reply in-process).
    pub fn value(&self) -> &Value {
        match self {
            Body::Built(v) => v,
            Body::Stored(e) => &e.object,
        }
    }
}

/// The mutable cluster state the handlers work on.
pub struct State {
    pub store: Store,
    pub registry: Arc<Registry>,
    seed: u64,
    counter: u64,
}

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// The request body as a JSON object, or the decoder's 400.
pub(crate) fn parse_body(kind: &str, body: &[u8]) -> Result<Value, ApiError> {
    let unrecognized = |why: String| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: {why} ({})",
            String::from_utf8_lossy(body)
        ))
    };
    let v: Value = serde_json::from_slice(body).map_err(|e| unrecognized(e.to_string()))?;
    if !v.is_object() {
        return Err(unrecognized("expected a JSON object".into()));
    }
    Ok(v)
}

/// An apply patch's body: YAML, or JSON (what clients such as kube send), which is YAML too and
/// reads as the same object, so it is read by the faster JSON reader. Only printable ASCII goes
/// that way: the YAML reader refuses some characters JSON carries raw (C1 controls), and the
/// server's reader refuses them too. What is not JSON goes to the YAML reader.
fn apply_body(body: &[u8]) -> Result<Value, ApiError> {
    let plain = body
        .iter()
        .all(|b| matches!(b, b' '..=b'~' | b'\n' | b'\r' | b'\t'));
    if plain && let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the body of the request is not UTF-8"))?;
    raygate::manifest::from_yaml(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

pub(crate) fn dry_run(q: &HashMap<String, String>) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "Invalid dryRun value: {other}: supported values: \"All\""
        ))),
    }
}

/// Whether `a` and `b` agree on everything but `metadata` (and `status` when it is a separate
/// subresource): the spec part whose change bumps the generation. Compared in place (copying
/// both objects to compare them was a tenth of a patch's cost).
fn same_spec_part(a: &Value, b: &Value, drop_status: bool) -> bool {
    let (Some(x), Some(y)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |k: &String| k != "metadata" && !(drop_status && k == "status");
    x.keys().filter(|k| kept(k)).count() == y.keys().filter(|k| kept(k)).count()
        && x.iter()
            .filter(|(k, _)| kept(k))
            .all(|(k, v)| y.get(k) == Some(v))
}

fn tracks_generation(rt: &ResourceType) -> bool {
    !rt.builtin || matches!(rt.group.as_str(), "apps" | "policy")
}

impl State {
    pub fn new(registry: Arc<Registry>, seed: u64, history: usize) -> Self {
        State {
            store: Store::new(history),
            registry,
            seed,
            counter: 0,
        }
    }

    /// A deterministic pseudo-random number (splitmix64 over seed and a counter).
    fn next_random(&mut self) -> u64 {
        self.counter += 1;
        let mut z = self
            .seed
            .wrapping_add(self.counter.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn new_uid(&mut self) -> String {
        let a = self.next_random();
        let b = self.next_random();
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        )
    }

    fn name_suffix(&mut self) -> String {
        let mut r = self.next_random();
        (0..5)
            .map(|_| {
                let c = NAME_CHARS[(r % NAME_CHARS.len() as u64) as usize] as char;
                r /= NAME_CHARS.len() as u64;
                c
            })
            .collect()
    }

    pub(crate) fn object_out(&self, route: &Route, obj: &Value) -> Value {
        let mut o = obj.clone();
        o["apiVersion"] = json!(route.rt.api_version(&route.version));
        o["kind"] = json!(route.rt.kind);
        o
    }

    /// [`State::object_out`] of a stored object: the object itself when it is stored as the
    /// route's apiVersion and kind (no copy).
    fn stored_out(&self, route: &Route, stored: Encoded) -> Body {
        if Self::stored_as_served(route, &stored.object) {
            return Body::Stored(stored);
        }
        let o = &stored.object;
        Body::Built(self.object_out(route, o))
    }

    pub fn get(&self, route: &Route) -> Reply {
        let name = route.name.as_deref().unwrap_or_default();
        let obj = self
            .store
            .get(
                &route.key(),
                route.namespace.as_deref().unwrap_or_default(),
                name,
            )
            .ok_or_else(|| route.not_found(name))?;
        Ok((200, self.stored_out(route, Encoded::new(obj))))
    }

    /// A stored object as `route` serves it: itself when stored at the route's apiVersion and
    /// kind, else a copy with those.
    pub(crate) fn served(&self, route: &Route, o: Arc<Value>) -> Arc<Value> {
        if Self::stored_as_served(route, &o) {
            return o;
        }
        Arc::new(self.object_out(route, &o))
    }

    /// Whether `o` is stored at the apiVersion and kind `route` serves (no copy needed).
    fn stored_as_served(route: &Route, o: &Value) -> bool {
        o["apiVersion"].as_str() == Some(route.rt.api_version(&route.version).as_str())
            && o["kind"].as_str() == Some(route.rt.kind.as_str())
    }

    /// A LIST's `labelSelector` and `fieldSelector`.
    fn selectors(
        route: &Route,
        q: &HashMap<String, String>,
    ) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels =
            LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?;
        let fields = FieldSelector::parse(
            q.get("fieldSelector").map(String::as_str).unwrap_or(""),
            &route.rt.field_selectors(),
        )?;
        Ok((labels, fields))
    }

    /// The stored objects a LIST of `route` with `q`'s selectors returns, in its order (every
    /// page at once).
    pub(crate) fn selected(
        &self,
        route: &Route,
        q: &HashMap<String, String>,
    ) -> Result<Vec<Arc<Value>>, ApiError> {
        let (labels, fields) = Self::selectors(route, q)?;
        Ok(self
            .store
            .list(&route.key(), route.namespace.as_deref())
            .into_iter()
            .filter(|o| labels.matches(o["metadata"].get("labels")) && fields.matches(o))
            .collect())
    }

    pub fn list(&self, route: &Route, q: &HashMap<String, String>) -> Reply {
        let (labels, fields) = Self::selectors(route, q)?;
        let limit: usize = match q.get("limit") {
            Some(l) => l
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?,
            None => 0,
        };
        let after = q.get("continue").filter(|c| !c.is_empty());
        // A page is cut before any object is copied: a first page of 500 out of 100,000 Pods
        // copied every match (8.5 s in `benches/api_throughput.rs`).
        let take = if limit > 0 { limit + 1 } else { usize::MAX };
        let mut page: Vec<(String, Arc<Value>)> = self
            .store
            .list(&route.key(), route.namespace.as_deref())
            .into_iter()
            .filter(|o| labels.matches(o["metadata"].get("labels")) && fields.matches(o))
            .map(|o| {
                let key = format!(
                    "{}/{}",
                    meta_str(&o, "namespace").unwrap_or_default(),
                    meta_str(&o, "name").unwrap_or_default()
                );
                (key, o)
            })
            .filter(|(k, _)| after.is_none_or(|a| k.as_str() > a.as_str()))
            .take(take)
            .collect();
        let mut metadata = json!({"resourceVersion": self.store.revision().to_string()});
        if limit > 0 && page.len() > limit {
            page.truncate(limit);
            if let Some((last, _)) = page.last() {
                metadata["continue"] = json!(last);
            }
        }
        let items: Vec<(String, Value)> = page
            .into_iter()
            .map(|(k, o)| (k, self.object_out(route, &o)))
            .collect();
        Ok((
            200,
            Body::Built(json!({
                "apiVersion": route.rt.api_version(&route.version),
                "kind": format!("{}List", route.rt.kind),
                "metadata": metadata,
                "items": items.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
            })),
        ))
    }

    /// Parses watch parameters and registers the watch.
    pub fn watch(
        &mut self,
        route: &Route,
        q: &HashMap<String, String>,
        tx: tokio::sync::mpsc::UnboundedSender<crate::store::WatchEvent>,
    ) -> Result<(), ApiError> {
        let labels =
            LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?;
        let mut fields = FieldSelector::parse(
            q.get("fieldSelector").map(String::as_str).unwrap_or(""),
            &route.rt.field_selectors(),
        )?;
        if let Some(name) = &route.name {
            fields = FieldSelector::parse(&format!("metadata.name={name}"), &["metadata.name"])?;
        }
        let from =
            match q.get("resourceVersion").map(String::as_str) {
                None | Some("") | Some("0") => None,
                Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {rv}"))
                })?),
            };
        let filter = WatchFilter {
            res: route.key(),
            namespace: route.namespace.clone(),
            labels,
            fields,
            api_version: route.rt.api_version(&route.version),
        };
        self.store.watch(filter, from, tx)
    }

    fn check_namespace(&self, route: &Route) -> Result<(), ApiError> {
        let Some(ns) = &route.namespace else {
            return Ok(());
        };
        let key: ResKey = Arc::from("/namespaces");
        match self.store.get(&key, "", ns) {
            Some(_) => Ok(()),
            None => Err(ApiError::not_found("", "namespaces", ns)),
        }
    }

    /// Schema pruning, defaults and validation (CRDs), CEL rules included (transition rules
    /// against `old`, the stored object, on an update).
    fn admit_schema(
        &self,
        route: &Route,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if let Some(schema) = route.rt.schema(&route.version) {
            schema.prune(obj, old);
            schema.default(obj, old);
            let errs = schema.validate(obj, old);
            if !errs.is_empty() {
                let name = meta_str(obj, "name").unwrap_or_default().to_string();
                return Err(ApiError::invalid(
                    &route.rt.group,
                    &route.rt.kind,
                    &name,
                    errs,
                ));
            }
        }
        Ok(())
    }

    fn check_type_meta(&self, route: &Route, obj: &Value) -> Result<(), ApiError> {
        let want = route.rt.api_version(&route.version);
        if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
            && av != want
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want})"
            )));
        }
        if let Some(k) = obj.get("kind").and_then(Value::as_str)
            && k != route.rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                route.rt.kind
            )));
        }
        Ok(())
    }

    fn check_namespace_in_body(&self, route: &Route, obj: &mut Value) -> Result<(), ApiError> {
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        match (&route.namespace, meta_str(obj, "namespace")) {
            (Some(url), Some(body)) if !body.is_empty() && body != url => {
                Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            (Some(url), _) => {
                obj["metadata"]["namespace"] = json!(url);
                Ok(())
            }
            (None, _) => {
                if let Some(m) = obj["metadata"].as_object_mut() {
                    m.remove("namespace");
                }
                Ok(())
            }
        }
    }

    /// POST: create.
    pub fn create(&mut self, route: &Route, req: &ApiRequest, now: &str) -> Reply {
        let mut obj = parse_body(&route.rt.kind, &req.body)?;
        self.check_type_meta(route, &obj)?;
        self.check_namespace_in_body(route, &mut obj)?;
        let manager = manager_of(req);
        let dry = dry_run(&req.query)?;
        let w = Writer {
            manager: &manager,
            api_version: &route.rt.api_version(&route.version),
            time: now,
            scope: route.scope(),
        };
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        let mut obj = self.prepare_create(route, obj, now)?;
        fields::record_update(None, &mut obj, route.shape(), &w);
        self.finish_create(route, obj, dry)
    }

    fn prepare_create(
        &mut self,
        route: &Route,
        mut obj: Value,
        now: &str,
    ) -> Result<Value, ApiError> {
        if meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(g)) if !g.is_empty() => format!("{g}{}", self.name_suffix()),
            _ => {
                let mut causes = vec![FieldCause::required(
                    "metadata.name",
                    "name or generateName is required",
                )];
                if route.rt.schema(&route.version).is_some_and(|s| s.has_cel()) {
                    causes.push(crate::schema::cel_skipped());
                }
                return Err(ApiError::invalid(
                    &route.rt.group,
                    &route.rt.kind,
                    "",
                    causes,
                ));
            }
        };
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.insert("name".into(), json!(name));
            m.insert("uid".into(), json!(self.new_uid()));
            m.insert("creationTimestamp".into(), json!(now));
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("resourceVersion");
            m.remove("generation");
            if tracks_generation(&route.rt) {
                m.insert("generation".into(), json!(1));
            }
        }
        obj["apiVersion"] = json!(route.rt.api_version(&route.version));
        obj["kind"] = json!(route.rt.kind);
        let obj_spec = obj.get("spec").cloned().unwrap_or(Value::Null);
        if route.rt.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            match (route.rt.group.as_str(), route.rt.kind.as_str()) {
                ("", "Node") => {}
                ("", "Pod") => {
                    m.insert(
                        "status".into(),
                        crate::binding::created_pod_status(&obj_spec),
                    );
                    if let Some(spec) = m.get_mut("spec") {
                        crate::admission::default_toleration_seconds(spec);
                    }
                }
                ("", "Namespace") => {
                    m.insert("status".into(), json!({"phase": "Active"}));
                }
                _ => {
                    m.remove("status");
                }
            }
        }
        if (route.rt.group.as_str(), route.rt.kind.as_str()) == ("", "Namespace") {
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
        }
        self.admit_schema(route, &mut obj, None)?;
        Ok(obj)
    }

    fn finish_create(&mut self, route: &Route, obj: Value, dry: bool) -> Reply {
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let ns = route.namespace.clone().unwrap_or_default();
        if self.store.get(&route.key(), &ns, &name).is_some() {
            return Err(ApiError::already_exists(
                &route.rt.group,
                &route.rt.plural,
                &name,
            ));
        }
        if route.rt.kind != "Namespace" || !route.rt.group.is_empty() {
            self.check_namespace(route)?;
        }
        if dry {
            return Ok((201, self.object_out(route, &obj).into()));
        }
        let stored = self
            .store
            .commit_encoded(&route.key(), ChangeType::Added, obj);
        Ok((201, self.stored_out(route, stored)))
    }

    /// The update strategy shared by PUT, PATCH and apply: subresource scoping, immutable
    /// metadata, schema, generation, then commit (or no write when nothing changed).
    fn update_existing(
        &mut self,
        route: &Route,
        old: &Arc<Value>,
        mut new: Value,
        dry: bool,
    ) -> Reply {
        let name = route.name.clone().unwrap_or_default();
        match meta_str(&new, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        if route.subresource.as_deref() == Some("status") {
            new = status_write(old, new);
        } else if route.rt.status_subresource {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ] {
            match old["metadata"].get(f) {
                Some(v) => new["metadata"][f] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(f);
                    }
                }
            }
        }
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        new["apiVersion"] = json!(route.rt.api_version(&route.version));
        new["kind"] = json!(route.rt.kind);
        self.admit_schema(route, &mut new, Some(old))?;
        if tracks_generation(&route.rt) {
            let drop_status = route.rt.status_subresource;
            if !same_spec_part(&new, old, drop_status) {
                let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
                new["metadata"]["generation"] = json!(g + 1);
            }
        }
        if same_but_type_meta(&new, old) {
            return Ok((200, self.stored_out(route, Encoded::new(old.clone()))));
        }
        // `ShouldDeleteDuringUpdate`: no finalizers left and a deletion grace period of 0 (a
        // pod still in its grace period stays for its kubelet)
        let finalized = old["metadata"].get("deletionTimestamp").is_some()
            && new["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty)
            && new["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .is_none_or(|g| g == 0);
        if dry {
            return Ok((200, self.object_out(route, &new).into()));
        }
        let typ = if finalized {
            ChangeType::Deleted
        } else {
            ChangeType::Modified
        };
        let stored = self.store.commit_encoded(&route.key(), typ, new);
        Ok((200, self.stored_out(route, stored)))
    }

    pub(crate) fn existing(&self, route: &Route) -> Result<Arc<Value>, ApiError> {
        let name = route.name.as_deref().unwrap_or_default();
        self.store
            .get(
                &route.key(),
                route.namespace.as_deref().unwrap_or_default(),
                name,
            )
            .ok_or_else(|| route.not_found(name))
    }

    fn conflict(&self, route: &Route) -> ApiError {
        ApiError::conflict(
            &route.rt.group,
            &route.rt.plural,
            route.name.as_deref().unwrap_or_default(),
        )
    }

    /// PUT: update (replace), with optimistic concurrency on `resourceVersion`.
    pub fn replace(&mut self, route: &Route, req: &ApiRequest, now: &str) -> Reply {
        let mut new = parse_body(&route.rt.kind, &req.body)?;
        self.check_type_meta(route, &new)?;
        self.check_namespace_in_body(route, &mut new)?;
        let dry = dry_run(&req.query)?;
        let old = self.existing(route)?;
        let name = route.name.as_deref().unwrap_or_default();
        if let Some(n) = meta_str(&new, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        match meta_str(&new, "resourceVersion") {
            Some(rv) if !rv.is_empty() && Some(rv) != meta_str(&old, "resourceVersion") => {
                return Err(self.conflict(route));
            }
            Some(rv) if !rv.is_empty() => {}
            _ if !route.rt.builtin => {
                // named by group-resource here, as the server's update precondition does
                return Err(ApiError::invalid(
                    &route.rt.group,
                    &route.rt.plural,
                    route.name.as_deref().unwrap_or_default(),
                    vec![FieldCause::invalid(
                        "metadata.resourceVersion",
                        "0",
                        "must be specified for an update",
                    )],
                ));
            }
            _ => {}
        }
        let manager = manager_of(req);
        let w = Writer {
            manager: &manager,
            api_version: &route.rt.api_version(&route.version),
            time: now,
            scope: route.scope(),
        };
        let mut new = self.scoped(route, &old, new);
        new["metadata"]["managedFields"] = old["metadata"]
            .get("managedFields")
            .cloned()
            .unwrap_or(Value::Null);
        fields::record_update(Some(&old), &mut new, route.shape(), &w);
        self.update_existing(route, &old, new, dry)
    }

    /// The object a write would produce before ownership: status writes keep everything but
    /// status; main writes keep the old status (where it is a subresource).
    fn scoped(&self, route: &Route, old: &Value, mut new: Value) -> Value {
        if route.subresource.as_deref() == Some("status") {
            let mut next = new;
            match (next.as_object_mut(), old.as_object()) {
                (Some(n), Some(o)) => restore(n, o, &["status"]),
                _ => return with_status_of(old, &next),
            }
            next
        } else {
            if route.rt.status_subresource {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            new
        }
    }

    /// PATCH: merge, JSON, strategic merge, or server-side apply.
    pub fn patch(&mut self, route: &Route, req: &ApiRequest, now: &str) -> Reply {
        let kind = PatchType::from_content_type(&req.content_type).ok_or_else(|| {
            ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
                if route.rt.builtin { ", application/strategic-merge-patch+json" } else { "" }
            ))
        })?;
        if kind == PatchType::Strategic && !route.rt.builtin {
            return Err(ApiError::unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let dry = dry_run(&req.query)?;
        let api_version = route.rt.api_version(&route.version);
        if kind == PatchType::Apply {
            return self.apply(route, req, now, dry);
        }
        let patch_body: Value = serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let old = self.existing(route)?;
        let mut doc = (*old).clone();
        patch::apply(kind, &mut doc, &patch_body, route.shape())?;
        if !doc.is_object() {
            return Err(ApiError::bad_request("the patch produced a non-object"));
        }
        if let Some(rv) = meta_str(&doc, "resourceVersion")
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(self.conflict(route));
        }
        self.check_type_meta(route, &doc)?;
        let manager = manager_of(req);
        let w = Writer {
            manager: &manager,
            api_version: &api_version,
            time: now,
            scope: route.scope(),
        };
        let mut new = self.scoped(route, &old, doc);
        new["metadata"]["managedFields"] = old["metadata"]
            .get("managedFields")
            .cloned()
            .unwrap_or(Value::Null);
        fields::record_update(Some(&old), &mut new, route.shape(), &w);
        self.update_existing(route, &old, new, dry)
    }

    fn apply(&mut self, route: &Route, req: &ApiRequest, now: &str, dry: bool) -> Reply {
        let manager = req
            .query
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .cloned()
            .ok_or_else(|| {
                ApiError::invalid(
                    "meta.k8s.io",
                    "PatchOptions",
                    "",
                    vec![FieldCause::required(
                        "fieldManager",
                        "is required for apply patch",
                    )],
                )
            })?;
        let force = match req.query.get("force").map(String::as_str) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "invalid force value: {other}"
                )));
            }
        };
        let mut applied = apply_body(&req.body)?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "error decoding YAML: expected an object",
            ));
        }
        self.check_type_meta(route, &applied)?;
        if applied.get("apiVersion").is_none() || applied.get("kind").is_none() {
            return Err(ApiError::bad_request("invalid object type: /, Kind="));
        }
        self.check_namespace_in_body(route, &mut applied)?;
        let name = route.name.clone().unwrap_or_default();
        match meta_str(&applied, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => applied["metadata"]["name"] = json!(name),
        }
        // only the subresource's part counts
        let scope = route.scope();
        if let Some(m) = applied.as_object_mut() {
            match scope {
                Scope::Status => m.retain(|k, _| {
                    matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                }),
                Scope::Main {
                    status_separate: true,
                } => {
                    m.remove("status");
                }
                Scope::Main { .. } => {}
            }
        }
        let api_version = route.rt.api_version(&route.version);
        let w = Writer {
            manager: &manager,
            api_version: &api_version,
            time: now,
            scope,
        };
        let live = self.store.get(
            &route.key(),
            route.namespace.as_deref().unwrap_or_default(),
            &name,
        );
        if let Some(rv) = meta_str(&applied, "resourceVersion")
            && live.as_deref().and_then(|l| meta_str(l, "resourceVersion")) != Some(rv)
        {
            return Err(self.conflict(route));
        }
        match live {
            None => {
                if route.subresource.is_some() {
                    return Err(route.not_found(&name));
                }
                let merged = fields::apply(None, &applied, force, route.shape(), &w)?;
                let obj = self.prepare_create(route, merged, now)?;
                self.finish_create(route, obj, dry)
            }
            Some(old) => {
                let merged = fields::apply(Some(&old), &applied, force, route.shape(), &w)?;
                self.update_existing(route, &old, merged, dry)
            }
        }
    }

    /// DELETE: finalizers keep the object (with `deletionTimestamp`) until they are gone; a
    /// scheduled, running pod is deleted gracefully (its kubelet finishes it).
    pub fn delete(
        &mut self,
        route: &Route,
        req: &ApiRequest,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Reply {
        let opts: Value = if req.body.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(&req.body).map_err(|e| {
                ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
            })?
        };
        let dry = dry_run(&req.query)?
            || opts["dryRun"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == "All"));
        let old = self.existing(route)?;
        if let Some(uid) = opts["preconditions"]["uid"].as_str()
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::apply_conflict(
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
                vec![],
            ));
        }
        if let Some(rv) = opts["preconditions"]["resourceVersion"].as_str()
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::apply_conflict(
                format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or_default()
                ),
                vec![],
            ));
        }
        let grace_param = req
            .query
            .get("gracePeriodSeconds")
            .and_then(|g| g.parse::<i64>().ok())
            .or_else(|| opts["gracePeriodSeconds"].as_i64());
        let is_pod = route.rt.builtin && route.rt.group.is_empty() && route.rt.kind == "Pod";
        let grace = if is_pod {
            let unscheduled = old["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
            let terminal = matches!(
                old["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
            if unscheduled || terminal {
                0
            } else {
                grace_param
                    .or_else(|| old["spec"]["terminationGracePeriodSeconds"].as_i64())
                    .unwrap_or(30)
                    .max(0)
            }
        } else {
            0
        };
        let propagation = propagation(&opts, &req.query)?;
        let old_finalizers = finalizers(&old);
        let new_finalizers = gc_finalizers(&old_finalizers, propagation);
        if grace > 0 || !new_finalizers.is_empty() {
            let mut next = (*old).clone();
            if new_finalizers != old_finalizers {
                next["metadata"]["finalizers"] = json!(new_finalizers);
            }
            let at = now
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(grace))
                .unwrap_or(now);
            let at = crate::clock::seconds(at);
            let earlier = meta_str(&old, "deletionTimestamp").is_none_or(|t| at.as_str() < t);
            if earlier {
                next["metadata"]["deletionTimestamp"] = json!(at);
                next["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            }
            // setting deletionTimestamp bumps the generation (`BeforeDelete`)
            if meta_str(&old, "deletionTimestamp").is_none()
                && let Some(g) = old["metadata"]["generation"].as_i64()
            {
                next["metadata"]["generation"] = json!(g + 1);
            }
            if next == *old {
                return Ok((200, self.stored_out(route, Encoded::new(old))));
            }
            if dry {
                return Ok((200, self.object_out(route, &next).into()));
            }
            let stored = self
                .store
                .commit_encoded(&route.key(), ChangeType::Modified, next);
            return Ok((200, self.stored_out(route, stored)));
        }
        if dry {
            return Ok((200, self.deleted_reply(route, Encoded::new(old))));
        }
        let stored = self
            .store
            .commit_encoded(&route.key(), ChangeType::Deleted, (*old).clone());
        Ok((200, self.deleted_reply(route, stored)))
    }

    /// Pods answer an immediate delete with the object (`ReturnDeletedObject`), others with a
    /// success `Status`.
    fn deleted_reply(&self, route: &Route, stored: Encoded) -> Body {
        if route.rt.builtin && route.rt.group.is_empty() && route.rt.kind == "Pod" {
            return self.stored_out(route, stored);
        }
        let obj = &stored.object;
        Body::Built(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {
                "name": meta_str(obj, "name").unwrap_or_default(),
                "group": route.rt.group,
                "kind": route.rt.plural,
                "uid": meta_str(obj, "uid").unwrap_or_default(),
            },
        }))
    }

    /// Handles every non-watch request.
    pub fn handle(&mut self, req: &ApiRequest, now: k8s_openapi::jiff::Timestamp) -> Reply {
        if req.method == "GET"
            && let Some(list) = crate::scale::discovery(&self.registry, &req.path)
        {
            return Ok((200, list.into()));
        }
        let route = route(&self.registry, &req.path)?;
        if route.subresource.as_deref() == Some("scale") {
            return self.scale(&route, req);
        }
        let stamp = crate::clock::seconds(now);
        if route.subresource.as_deref() == Some("eviction") {
            return match req.method.as_str() {
                "POST" => self.evict(&route, req, now),
                m => Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({m})"
                ))),
            };
        }
        if route.subresource.as_deref() == Some("binding") {
            return match req.method.as_str() {
                "POST" => self.bind(&route, req, &stamp),
                m => Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({m})"
                ))),
            };
        }
        match (req.method.as_str(), route.name.is_some()) {
            ("GET", true) => self.get(&route),
            ("GET", false) => self.list(&route, &req.query),
            ("POST", false) => self.create(&route, req, &stamp),
            ("PUT", true) => self.replace(&route, req, &stamp),
            ("PATCH", true) => self.patch(&route, req, &stamp),
            ("DELETE", true) if route.subresource.is_none() => self.delete(&route, req, now),
            (m, _) => Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({m})"
            ))),
        }
    }
}

/// A delete's propagation: `propagationPolicy` (body or query) or the deprecated
/// `orphanDependents`, validated as `ValidateDeleteOptions` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Foreground,
    Background,
    Orphan,
}

/// `new == old` but for `apiVersion` and `kind` (an update that changes nothing else writes
/// nothing), without copying `old`.
fn same_but_type_meta(new: &Value, old: &Value) -> bool {
    let (Some(n), Some(o)) = (new.as_object(), old.as_object()) else {
        return new == old;
    };
    let kept = |k: &String| k != "apiVersion" && k != "kind";
    n.keys().filter(|k| kept(k)).count() == o.keys().filter(|k| kept(k)).count()
        && n.iter()
            .filter(|(k, _)| kept(k))
            .all(|(k, v)| o.get(k) == Some(v))
}

/// `new` made equal to `old` but for the top-level fields in `keep` (which stay as `new` has
/// them, absent included). Built in place: a status write's object agrees with the stored one
/// nearly everywhere, and comparing costs far less than copying the stored object.
fn restore(
    new: &mut serde_json::Map<String, Value>,
    old: &serde_json::Map<String, Value>,
    keep: &[&str],
) {
    new.retain(|k, _| keep.contains(&k.as_str()) || old.contains_key(k));
    for (k, v) in old {
        if !keep.contains(&k.as_str()) && new.get(k) != Some(v) {
            new.insert(k.clone(), v.clone());
        }
    }
}

/// `old` with the `status` of `new` (none when `new` has none).
fn with_status_of(old: &Value, new: &Value) -> Value {
    let mut next = old.clone();
    match new.get("status") {
        Some(s) => next["status"] = s.clone(),
        None => {
            if let Some(m) = next.as_object_mut() {
                m.remove("status");
            }
        }
    }
    next
}

/// What a status write stores: `old` with the `status` and `metadata.managedFields` of `new`.
fn status_write(old: &Value, mut new: Value) -> Value {
    if let (Some(n), Some(o)) = (new.as_object_mut(), old.as_object()) {
        restore(n, o, &["status", "metadata"]);
        let om = o.get("metadata").and_then(Value::as_object);
        if let (Some(nm), Some(om)) = (n.get_mut("metadata").and_then(Value::as_object_mut), om) {
            restore(nm, om, &["managedFields"]);
            return new;
        }
    }
    let managed = new["metadata"]
        .as_object_mut()
        .and_then(|m| m.remove("managedFields"));
    let mut next = with_status_of(old, &new);
    match managed {
        Some(mf) => next["metadata"]["managedFields"] = mf,
        None => {
            if let Some(m) = next["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
        }
    }
    next
}

fn propagation(
    opts: &Value,
    query: &HashMap<String, String>,
) -> Result<Option<Propagation>, ApiError> {
    let policy = opts["propagationPolicy"]
        .as_str()
        .map(String::from)
        .or_else(|| query.get("propagationPolicy").cloned());
    let orphan = opts["orphanDependents"].as_bool().or_else(|| {
        query
            .get("orphanDependents")
            .and_then(|o| o.parse::<bool>().ok())
    });
    let invalid = |cause| ApiError::invalid("meta.k8s.io", "DeleteOptions", "", vec![cause]);
    if let (Some(p), Some(_)) = (&policy, orphan) {
        return Err(invalid(FieldCause::invalid(
            "propagationPolicy",
            &format!("\"{p}\""),
            "orphanDependents and deletionPropagation cannot be both set",
        )));
    }
    match (policy.as_deref(), orphan) {
        (Some("Foreground"), _) => Ok(Some(Propagation::Foreground)),
        (Some("Background"), _) => Ok(Some(Propagation::Background)),
        (Some("Orphan"), _) | (None, Some(true)) => Ok(Some(Propagation::Orphan)),
        (None, Some(false)) => Ok(Some(Propagation::Background)),
        (None, None) => Ok(None),
        (Some(other), _) => Err(invalid(FieldCause::not_supported(
            "propagationPolicy",
            &format!("\"{other}\""),
            &["\"Foreground\"", "\"Background\"", "\"Orphan\"", "\"nil\""].map(String::from),
        ))),
    }
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .collect()
}

/// The finalizers a delete leaves (`deletionFinalizersForGarbageCollection`): `orphan` and
/// `foregroundDeletion` are removed and added back as the policy says; without a policy an
/// existing one of them stands; every kind served here defaults to background deletion.
pub fn gc_finalizers(existing: &[String], policy: Option<Propagation>) -> Vec<String> {
    let has = |f: &str| existing.iter().any(|e| e == f);
    let (orphan, foreground) = match policy {
        Some(Propagation::Orphan) => (true, false),
        Some(Propagation::Foreground) => (false, true),
        Some(Propagation::Background) => (false, false),
        // shouldOrphanDependents reads the finalizers in order; shouldDeleteDependents any
        None => {
            let first = existing
                .iter()
                .find(|f| *f == ORPHAN_FINALIZER || *f == FOREGROUND_FINALIZER);
            (
                first.is_some_and(|f| f == ORPHAN_FINALIZER),
                has(FOREGROUND_FINALIZER),
            )
        }
    };
    let mut out: Vec<String> = existing
        .iter()
        .filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER)
        .cloned()
        .collect();
    if orphan {
        out.push(ORPHAN_FINALIZER.into());
    }
    if foreground {
        out.push(FOREGROUND_FINALIZER.into());
    }
    let same = out.len() == existing.len() && out.iter().all(|f| has(f));
    if same { existing.to_vec() } else { out }
}

/// `metav1.FinalizerOrphanDependents`.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// `metav1.FinalizerDeleteDependents`.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// The field manager of a non-apply write: `fieldManager`, else the User-Agent's prefix (as the
/// server derives it).
fn manager_of(req: &ApiRequest) -> String {
    if let Some(m) = req.query.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let ua = req.user_agent.split('/').next().unwrap_or_default();
    if ua.is_empty() {
        "unknown".into()
    } else {
        ua.chars().take(128).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1.0e6f64..1.0e6).prop_map(Value::from),
            prop_oneof![
                Just("yes".to_string()),
                Just("0755".to_string()),
                Just("1e5".to_string()),
                Just("~".to_string()),
                Just("null".to_string()),
                Just("- a: b".to_string()),
                ".*",
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(".*", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// An apply body in JSON (as kube sends it) reads as the same object through the JSON
        /// reader as through the YAML reader.
        #[test]
        fn a_json_apply_body_reads_as_the_yaml_reader_reads_it(v in json_value()) {
            let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod", "spec": v})).unwrap();
            let yaml = raygate::manifest::from_yaml::<Value>(std::str::from_utf8(&body).unwrap());
            match (apply_body(&body), yaml) {
                (Ok(read), Ok(yaml)) => prop_assert_eq!(read, yaml),
                (Err(_), Err(_)) => {}
                (read, yaml) => prop_assert!(false, "{read:?} but the YAML reader: {yaml:?}"),
            }
        }
    }

    #[test]
    fn an_apply_body_in_yaml_is_read_as_yaml() {
        let body = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  mode: 0755\n";
        assert_eq!(
            apply_body(body).unwrap(),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"mode": 493}})
        );
        assert_eq!(apply_body(b"a: [").unwrap_err().code, 400);
    }

    #[test]
    fn a_status_write_keeps_all_but_the_status_and_managed_fields_of_the_stored_object() {
        let old = json!({"metadata": {"name": "a", "managedFields": [1], "labels": {"l": "1"}},
            "spec": {"x": 1}, "status": {"s": 1}, "data": 1});
        let new = json!({"metadata": {"name": "b", "managedFields": [2]},
            "spec": {"x": 2}, "status": {"s": 2}, "extra": 1});
        let want = json!({"metadata": {"name": "a", "managedFields": [2], "labels": {"l": "1"}},
            "spec": {"x": 1}, "status": {"s": 2}, "data": 1});
        assert_eq!(status_write(&old, new.clone()), want);
        let bare = json!({"metadata": {"name": "b"}, "spec": {"x": 2}});
        let want =
            json!({"metadata": {"name": "a", "labels": {"l": "1"}}, "spec": {"x": 1}, "data": 1});
        assert_eq!(status_write(&old, bare), want);
        let mut n = new.as_object().cloned().unwrap_or_default();
        restore(
            &mut n,
            old.as_object().unwrap_or(&serde_json::Map::new()),
            &["status"],
        );
        assert_eq!(Value::Object(n), with_status_of(&old, &new));
    }

    #[test]
    fn the_spec_part_ignores_metadata_and_a_separate_status_only() {
        let a = json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"s": 1}});
        let meta = json!({"metadata": {"name": "b"}, "spec": {"x": 1}, "status": {"s": 1}});
        let status = json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"s": 2}});
        let no_status = json!({"metadata": {"name": "a"}, "spec": {"x": 1}});
        let spec = json!({"metadata": {"name": "a"}, "spec": {"x": 2}, "status": {"s": 1}});
        let extra = json!({"metadata": {}, "spec": {"x": 1}, "status": {"s": 1}, "data": 1});
        assert!(same_spec_part(&a, &meta, false));
        assert!(same_spec_part(&a, &status, true) && same_spec_part(&a, &no_status, true));
        assert!(!same_spec_part(&a, &status, false) && !same_spec_part(&a, &no_status, false));
        assert!(!same_spec_part(&a, &spec, true) && !same_spec_part(&a, &extra, true));
        assert!(!same_spec_part(&extra, &a, true));
        assert!(same_spec_part(&json!(1), &json!(1), true) && !same_spec_part(&json!(1), &a, true));
    }
}
