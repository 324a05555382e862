//! A request as the handlers see it (method, path, query, body), its route, and its reply; the
//! request helpers every verb shares (body, `dryRun`, field manager).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::server::fields::{Scope, Shape};
use crate::server::kinds::{Registry, ResourceType};
use crate::server::status::ApiError;
use crate::server::store::{Encoded, ResKey};

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

    pub(super) fn shape(&self) -> Shape<'_> {
        Shape {
            rt: &self.rt,
            version: &self.version,
        }
    }

    pub(super) fn scope(&self) -> Scope {
        match self.subresource.as_deref() {
            Some("status") => Scope::Status,
            _ => Scope::Main {
                status_separate: self.rt.status_subresource,
            },
        }
    }

    pub(super) fn not_found(&self, name: &str) -> ApiError {
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

pub(crate) fn dry_run(q: &HashMap<String, String>) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "Invalid dryRun value: {other}: supported values: \"All\""
        ))),
    }
}

/// The field manager of a non-apply write: `fieldManager`, else the User-Agent's prefix (as the
/// server derives it).
pub(super) fn manager_of(req: &ApiRequest) -> String {
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
