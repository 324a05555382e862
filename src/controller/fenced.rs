//! One leader-fenced writer: the client every controller task uses refuses a write (any request
//! but GET and HEAD) unless this replica may write at that instant — it leads, and its write
//! deadline ([`super::Fence`]) has not passed. The tasks still check before they decide, to skip
//! the work; this makes a write that slips past them impossible. The Lease's own renewals go
//! through the unfenced client (a replica must write its Lease to lead at all).

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
#[error("not the leader (any more): {method} {path} refused by the write fence")]
pub struct Fenced {
    pub method: Method,
    pub path: String,
}

/// `client` with every write checked against `may_write` right before it is sent.
pub(crate) fn fenced(client: Client, may_write: Arc<dyn Fn() -> bool + Send + Sync>) -> Client {
    let ns = client.default_namespace().to_string();
    Client::new(FencedService { client, may_write }, ns)
}

#[derive(Clone)]
struct FencedService {
    client: Client,
    may_write: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl tower::Service<Request<Body>> for FencedService {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let write = !matches!(*request.method(), Method::GET | Method::HEAD);
        if write && !(self.may_write)() {
            let refused = Fenced {
                method: request.method().clone(),
                path: request.uri().path().to_string(),
            };
            return Box::pin(std::future::ready(Err(kube::Error::Service(Box::new(
                refused,
            )))));
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    use super::*;

    /// A server that counts what reaches it and answers every request 404 (a unit test's
    /// `kube::Client` without a cluster).
    #[derive(Clone, Default)]
    pub(crate) struct Counting(pub(crate) Arc<AtomicU32>);

    impl tower::Service<Request<Body>> for Counting {
        type Response = Response<Body>;
        type Error = std::io::Error;
        type Future = std::future::Ready<Result<Response<Body>, std::io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<Body>) -> Self::Future {
            self.0.fetch_add(1, Ordering::SeqCst);
            let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#;
            let response = Response::builder()
                .status(404)
                .body(Body::from(status.to_vec()))
                .map_err(std::io::Error::other);
            std::future::ready(response)
        }
    }

    #[tokio::test]
    async fn writes_reach_the_server_only_while_the_replica_may_write_and_reads_always() {
        let server = Counting::default();
        let leading = Arc::new(AtomicBool::new(true));
        let may_write = {
            let leading = leading.clone();
            Arc::new(move || leading.load(Ordering::SeqCst))
        };
        let client = fenced(Client::new(server.clone(), "default"), may_write);
        let api = Api::<ConfigMap>::namespaced(client, "default");
        let reached = || server.0.load(Ordering::SeqCst);
        let _ = api.get_opt("c").await;
        let _ = api
            .create(&PostParams::default(), &ConfigMap::default())
            .await;
        assert_eq!(reached(), 2);
        leading.store(false, Ordering::SeqCst);
        let _ = api.get_opt("c").await;
        assert_eq!(reached(), 3);
        let refused = api
            .create(&PostParams::default(), &ConfigMap::default())
            .await;
        let deleted = api.delete("c", &Default::default()).await;
        assert_eq!(reached(), 3);
        let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("refused by the write fence"), "{message}");
        assert!(deleted.is_err());
    }
}
