//! The thin tower shell: `http::Request` in, `http::Response` out, over [`crate::server::handler`].
//! Watches stream newline-delimited JSON events from the store, with BOOKMARKs on the virtual
//! clock and the `timeoutSeconds` the client asked for.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::time::Instant;

use crate::Sim;
use crate::server::faults::{Decision, RequestInfo, Verb};
use crate::server::handler::{self, ApiRequest};
use crate::server::status::ApiError;
use crate::server::store::WatchEvent;
use crate::server::{protobuf, table};

pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// A `tower::Service` serving the sim to `kube::Client::new`.
#[derive(Clone)]
pub struct SimService {
    sim: Sim,
    user_agent: Option<http::HeaderValue>,
}

impl SimService {
    pub fn new(sim: Sim) -> Self {
        SimService {
            sim,
            user_agent: None,
        }
    }

    /// Sends `User-Agent: agent` on requests that carry none.
    pub fn with_user_agent(mut self, agent: &str) -> Self {
        self.user_agent = http::HeaderValue::from_str(agent).ok();
        self
    }
}

impl Sim {
    /// A `kube::Client` talking to this cluster in-process (default namespace `default`).
    /// Call it inside a tokio runtime: the client's request buffer is a spawned task.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(SimService::new(self.clone()), "default")
    }

    /// A client whose requests carry `User-Agent: user_agent` (as each real client's do), so fault
    /// rules can single it out ([`FaultRule::user_agent`](super::faults::FaultRule::user_agent))
    /// and field managers default to it.
    pub fn client_as(&self, user_agent: &str) -> kube::Client {
        kube::Client::new(
            SimService::new(self.clone()).with_user_agent(user_agent),
            "default",
        )
    }
}

fn json_response(code: u16, body: &Value) -> Response<ResponseBody> {
    json_bytes_response(
        code,
        Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    )
}

fn json_bytes_response(code: u16, bytes: Bytes) -> Response<ResponseBody> {
    let mut resp = Response::new(Full::new(bytes).boxed_unsync());
    *resp.status_mut() =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error_response(e: &ApiError) -> Response<ResponseBody> {
    let mut resp = if e.plain_text {
        let mut resp =
            Response::new(Full::new(Bytes::from(format!("{}\n", e.message))).boxed_unsync());
        *resp.status_mut() =
            http::StatusCode::from_u16(e.code).unwrap_or(http::StatusCode::NOT_FOUND);
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp
    } else {
        json_response(e.code, &e.to_status())
    };
    // client-go resends a 429 or 5xx that carries Retry-After
    if let Some(secs) = e.details["retryAfterSeconds"].as_u64().filter(|s| *s > 0)
        && let Ok(v) = http::HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(http::header::RETRY_AFTER, v);
    }
    resp
}

/// A GET's reply as a `Table` of its resource (discovery and OpenAPI documents as they are).
fn as_table(
    state: &handler::State,
    req: &ApiRequest,
    body: &Value,
    now: k8s_openapi::jiff::Timestamp,
) -> handler::Body {
    match handler::route(&state.registry, &req.path) {
        Ok(route) if route.subresource.is_none() => {
            let include = table::Include::parse(req.query.get("includeObject").map(String::as_str));
            table::to_table(&route.rt, &route.version, body, now, include).into()
        }
        _ => body.clone().into(),
    }
}

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A protobuf body read into JSON ([`protobuf::to_json`]); a kind it does not know is the 415 a
/// server answers for a media type it cannot decode.
fn protobuf_as_json(req: &mut ApiRequest) -> Result<(), ApiError> {
    let obj = protobuf::to_json(&req.body).map_err(|e| match e {
        protobuf::DecodeError::Unknown { .. } => ApiError::unsupported_media_type(e.to_string()),
        _ => ApiError::bad_request(e.to_string()),
    })?;
    req.body = serde_json::to_vec(&obj).unwrap_or_default();
    req.content_type = "application/json".into();
    Ok(())
}

fn line(ev: &WatchEvent) -> Bytes {
    ev.line()
}

struct WatchStream {
    sim: Sim,
    rx: UnboundedReceiver<WatchEvent>,
    bookmarks: bool,
    next_bookmark: Instant,
    deadline: Instant,
    /// The deadline is an injected drop, not the client's `timeoutSeconds`.
    dropped_at_deadline: bool,
    api_version: String,
    kind: String,
    /// Events as `Table` rows (`kubectl get -w`): the resource, version, what rows carry, and
    /// whether the column definitions went out with an earlier event.
    table: Option<TableWatch>,
}

struct TableWatch {
    route: handler::Route,
    include: table::Include,
    headers_sent: bool,
}

impl TableWatch {
    /// An event's line with its object as a one-row Table; the column definitions only in the
    /// first (the server's `NoHeaders` on later events). BOOKMARK and ERROR events as they are.
    fn line(&mut self, ev: &WatchEvent, now: k8s_openapi::jiff::Timestamp) -> Bytes {
        if !matches!(ev.typ, "ADDED" | "MODIFIED" | "DELETED") {
            return line(ev);
        }
        let mut t = table::to_table(
            &self.route.rt,
            &self.route.version,
            &ev.object,
            now,
            self.include,
        );
        if self.headers_sent {
            t["columnDefinitions"] = Value::Null;
        }
        self.headers_sent = true;
        let mut out = serde_json::to_vec(&json!({"type": ev.typ, "object": t})).unwrap_or_default();
        out.push(b'\n');
        Bytes::from(out)
    }
}

impl WatchStream {
    fn encode(&mut self, ev: &WatchEvent) -> Bytes {
        let now = self.sim.clock().now();
        match &mut self.table {
            Some(t) => t.line(ev, now),
            None => line(ev),
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        tokio::select! {
            biased;
            ev = self.rx.recv() => ev.map(|e| self.encode(&e)),
            _ = tokio::time::sleep_until(self.next_bookmark), if self.bookmarks => {
                self.next_bookmark += self.sim.bookmark_interval();
                // under the lock no event of this watch is in flight: the bookmark never
                // overtakes an event
                let state = self.sim.lock();
                if let Ok(ev) = self.rx.try_recv() {
                    drop(state);
                    return Some(self.encode(&ev));
                }
                let rv = state.store.revision();
                drop(state);
                Some(line(&WatchEvent::new(
                    "BOOKMARK",
                    json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": {"resourceVersion": rv.to_string()}}),
                )))
            }
            _ = tokio::time::sleep_until(self.deadline) => {
                if self.dropped_at_deadline {
                    self.sim.injector().count_drop();
                }
                None
            }
        }
    }
}

/// A watch's response: its events as they come, newline-delimited JSON.
fn streamed(st: WatchStream) -> Response<ResponseBody> {
    let stream =
        futures::stream::unfold(st, |mut st| async move { st.next().await.map(|b| (b, st)) })
            .map(|b| Ok::<_, Infallible>(http_body::Frame::data(b)));
    let mut resp = Response::new(StreamBody::new(stream).boxed_unsync());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

impl Sim {
    fn watch(&self, req: &ApiRequest, accept: &str) -> Response<ResponseBody> {
        let (tx, rx) = unbounded_channel();
        let mut state = self.lock();
        let route = match handler::route(&state.registry, &req.path) {
            Ok(r) => r,
            Err(e) => return error_response(&e),
        };
        let api_version = route.rt.api_version(&route.version);
        let kind = route.rt.kind.clone();
        let table = table::wants_table(accept).then(|| TableWatch {
            route: route.clone(),
            include: table::Include::parse(req.query.get("includeObject").map(String::as_str)),
            headers_sent: false,
        });
        let from = req
            .query
            .get("resourceVersion")
            .filter(|rv| !rv.is_empty() && *rv != "0");
        let fault = self.injector().decide_watch(
            &RequestInfo {
                verb: Verb::Watch,
                group: &route.rt.group,
                resource: &route.rt.plural,
                name: route.name.as_deref().unwrap_or_default(),
                user_agent: &req.user_agent,
            },
            from.is_some(),
        );
        if let (true, Some(rv)) = (fault.gone, from) {
            let e = ApiError::expired(format!(
                "too old resource version: {rv} ({})",
                state.store.revision()
            ));
            let _ = tx.send(WatchEvent::new("ERROR", e.to_status()));
        } else if let Err(e) = state.watch(&route, &req.query, tx.clone()) {
            if e.code != 410 {
                return error_response(&e);
            }
            let _ = tx.send(WatchEvent::new("ERROR", e.to_status()));
        } else if req.query.get("sendInitialEvents").map(String::as_str) == Some("true") {
            let _ = tx.send(WatchEvent::new(
                "BOOKMARK",
                json!({"kind": kind, "apiVersion": api_version, "metadata": {
                    "resourceVersion": state.store.revision().to_string(),
                    "annotations": {"k8s.io/initial-events-end": "true"}}}),
            ));
        }
        drop(state);
        drop(tx);
        let timeout = req
            .query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(1800);
        let now = Instant::now();
        let st = WatchStream {
            sim: self.clone(),
            rx,
            bookmarks: req.query.get("allowWatchBookmarks").map(String::as_str) == Some("true"),
            next_bookmark: now + self.bookmark_interval(),
            deadline: now
                + fault
                    .drop_after
                    .map_or(std::time::Duration::from_secs(timeout), |d| {
                        d.min(std::time::Duration::from_secs(timeout))
                    }),
            dropped_at_deadline: fault
                .drop_after
                .is_some_and(|d| d < std::time::Duration::from_secs(timeout)),
            api_version,
            kind,
            table,
        };
        streamed(st)
    }

    /// The injected fate of a request (nothing for a request that does not route: it fails on
    /// its own).
    fn fault(&self, parts: &http::request::Parts, body: &[u8]) -> Decision {
        let watch = parts.uri.query().is_some_and(|q| {
            form_urlencoded::parse(q.as_bytes())
                .any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
        });
        let route = {
            let state = self.lock();
            match handler::route(&state.registry, parts.uri.path()) {
                Ok(r) => r,
                Err(_) => return Decision::default(),
            }
        };
        let Some(verb) = Verb::of(parts.method.as_str(), route.name.is_some(), watch) else {
            return Decision::default();
        };
        let body_name = || {
            serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v["metadata"]["name"].as_str().map(String::from))
        };
        let name = route.name.clone().or_else(body_name).unwrap_or_default();
        let user_agent = parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        self.injector().decide(&RequestInfo {
            verb,
            group: &route.rt.group,
            resource: &route.rt.plural,
            name: &name,
            user_agent,
        })
    }

    /// Answers one request as a client over the network sees it: the injected faults first (a
    /// latency, an error), then [`Sim::serve`].
    pub async fn respond(
        &self,
        parts: http::request::Parts,
        body: Bytes,
    ) -> Response<ResponseBody> {
        let fault = self.fault(&parts, &body);
        if !fault.latency.is_zero() {
            tokio::time::sleep(fault.latency).await;
        }
        if let Some(e) = fault.error {
            tracing::debug!(method = %parts.method, path = %parts.uri.path(), code = e.code, "sim: injected fault");
            return error_response(&e);
        }
        self.serve(parts, body)
    }

    /// Serves one request (the Service's body, also usable directly).
    pub fn serve(&self, parts: http::request::Parts, body: Bytes) -> Response<ResponseBody> {
        let query: HashMap<String, String> = parts
            .uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let header = |h: http::header::HeaderName| {
            parts
                .headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let mut req = ApiRequest {
            method: parts.method.as_str().to_string(),
            path: parts.uri.path().to_string(),
            content_type: header(http::header::CONTENT_TYPE),
            user_agent: header(http::header::USER_AGENT),
            body: body.to_vec(),
            query,
        };
        if req.content_type.starts_with(PROTOBUF)
            && let Err(e) = protobuf_as_json(&mut req)
        {
            return error_response(&e);
        }
        let watch = matches!(
            req.query.get("watch").map(String::as_str),
            Some("true" | "1")
        );
        let accept = header(http::header::ACCEPT);
        if req.method == "GET" && watch {
            return self.watch(&req, &accept);
        }
        let now = self.clock().now();
        let result = {
            let state = &mut *self.lock();
            let reply = state.handle(&req, now);
            match reply {
                Ok((200, body)) if req.method == "GET" && table::wants_table(&accept) => {
                    Ok((200, as_table(state, &req, body.value(), now)))
                }
                other => other,
            }
        };
        match result {
            Ok((code, body)) => json_bytes_response(code, body.json()),
            Err(e) => {
                tracing::debug!(method = %req.method, path = %req.path, code = e.code, message = %e.message, "sim: request failed");
                error_response(&e)
            }
        }
    }
}

impl tower_service::Service<Request<kube::client::Body>> for SimService {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<kube::client::Body>) -> Self::Future {
        let sim = self.sim.clone();
        if let Some(agent) = &self.user_agent {
            req.headers_mut()
                .entry(http::header::USER_AGENT)
                .or_insert_with(|| agent.clone());
        }
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = match body.collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    return Ok(error_response(&ApiError::bad_request(format!(
                        "reading the request body: {e}"
                    ))));
                }
            };
            Ok(sim.respond(parts, body).await)
        })
    }
}
