//! The mutable cluster state the verbs work on: the store, the registry, the seeded names and
//! uids, and the checks and conversions every verb shares.

use std::sync::Arc;

use serde_json::{Value, json};

use super::request::{ApiRequest, Body, Route, meta_str};
use crate::server::kinds::Registry;
use crate::server::status::{ApiError, FieldCause};
use crate::server::store::{Encoded, ResKey, Store};

/// The mutable cluster state the handlers work on.
pub struct State {
    pub store: Store,
    pub registry: Arc<Registry>,
    seed: u64,
    counter: u64,
}

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

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

    pub(super) fn new_uid(&mut self) -> String {
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

    pub(super) fn name_suffix(&mut self) -> String {
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
    pub(super) fn stored_out(&self, route: &Route, stored: Encoded) -> Body {
        if Self::stored_as_served(route, &stored.object) {
            return Body::Stored(stored);
        }
        let o = &stored.object;
        Body::Built(self.object_out(route, o))
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
    pub(super) fn stored_as_served(route: &Route, o: &Value) -> bool {
        o["apiVersion"].as_str() == Some(route.rt.api_version(&route.version).as_str())
            && o["kind"].as_str() == Some(route.rt.kind.as_str())
    }

    pub(super) fn check_namespace(&self, route: &Route) -> Result<(), ApiError> {
        let Some(ns) = &route.namespace else {
            return Ok(());
        };
        let key: ResKey = Arc::from("/namespaces");
        match self.store.get(&key, "", ns) {
            Some(_) => Ok(()),
            None => Err(ApiError::not_found("", "namespaces", ns)),
        }
    }

    /// Schema pruning (refusing unknown fields under `fieldValidation=Strict`), defaults and
    /// validation (CRDs), CEL rules included (transition rules
    /// against `old`, the stored object, on an update).
    pub(super) fn admit_schema(
        &self,
        route: &Route,
        obj: &mut Value,
        old: Option<&Value>,
        strict: Option<Strict>,
    ) -> Result<(), ApiError> {
        if let Some(schema) = route.rt.schema(&route.version) {
            let sent = strict.is_some().then(|| obj.clone());
            let pruned = schema.prune(obj, old);
            if let (Some(strict), Some(sent), false) = (strict, sent, pruned.is_empty()) {
                return Err(strict_decoding(route, strict, &sent, &pruned));
            }
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

    pub(super) fn check_type_meta(&self, route: &Route, obj: &Value) -> Result<(), ApiError> {
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

    pub(super) fn check_namespace_in_body(
        &self,
        route: &Route,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
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

    pub(super) fn conflict(&self, route: &Route) -> ApiError {
        ApiError::conflict(
            &route.rt.group,
            &route.rt.plural,
            route.name.as_deref().unwrap_or_default(),
        )
    }
}

/// Which handler refuses unknown fields under `fieldValidation=Strict`: a create or update
/// decodes the body (`transformDecodeError`), a patch decodes the patched object.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strict {
    Decode,
    Patch,
}

impl Strict {
    /// How `req` wants unknown fields refused: `None` without `fieldValidation=Strict`, and for
    /// server-side apply (which reports undeclared fields its own way: not modelled, pruned).
    pub(super) fn of(req: &ApiRequest) -> Option<Strict> {
        let strict = req.query.get("fieldValidation").map(String::as_str) == Some("Strict");
        match req.method.as_str() {
            _ if !strict || req.content_type.starts_with("application/apply-patch") => None,
            "PATCH" => Some(Strict::Patch),
            _ => Some(Strict::Decode),
        }
    }
}

/// The server's answer to unknown fields under `fieldValidation=Strict`
/// (`apiextensions-apiserver`'s strict decoding of a custom resource): a create's or update's
/// `400 BadRequest` "cannot be handled as", a patch's `422 Invalid` on the field `patch`,
/// quoting the patched object.
fn strict_decoding(route: &Route, strict: Strict, sent: &Value, pruned: &[String]) -> ApiError {
    let fields: Vec<String> = pruned
        .iter()
        .map(|p| format!("unknown field \"{p}\""))
        .collect();
    let error = format!("strict decoding error: {}", fields.join(", "));
    match strict {
        Strict::Decode => ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: {error}",
            kind = route.rt.kind,
            v = route.version
        )),
        Strict::Patch => {
            let quoted = serde_json::to_string(&sent.to_string()).unwrap_or_default();
            ApiError::invalid(
                "",
                "",
                "",
                vec![FieldCause::invalid("patch", &quoted, &error)],
            )
        }
    }
}
