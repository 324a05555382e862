//! Request handling: the URL's route, then one function per verb over the store, with the
//! registry's strategies (status subresource, generation, graceful deletion, finalizers, CRD
//! schemas) and field ownership, and the Pod `binding` and `eviction` and the `scale`
//! subresources. Plain functions over data; the tower Service is a thin shell.

/// Server-side apply.
mod apply;
/// The Pod binding subresource and the pod status the server writes on create.
pub mod binding;
/// POST.
mod create;
/// DELETE, finalizers and propagation.
mod delete;
/// The Pod eviction subresource.
pub mod eviction;
/// PATCH (but apply).
mod patch;
/// GET, LIST and WATCH.
mod read;
/// PUT.
mod replace;
/// Requests, routes and replies.
mod request;
/// The `scale` subresource.
pub mod scale;
/// The state the verbs work on.
mod state;
/// The update strategy of PUT, PATCH and apply.
mod update;

pub use delete::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, gc_finalizers};
pub use request::{ApiRequest, Body, Reply, Route, route};
pub use state::State;

use crate::server::status::ApiError;

impl State {
    /// Handles every non-watch request.
    pub fn handle(&mut self, req: &ApiRequest, now: k8s_openapi::jiff::Timestamp) -> Reply {
        if req.method == "GET"
            && let Some(list) = crate::server::discovery::document(&self.registry, &req.path)
        {
            return Ok((200, list.into()));
        }
        if req.method == "GET"
            && let Some(doc) = crate::server::openapi::document(&self.registry, &req.path)
        {
            return Ok((200, doc.into()));
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
