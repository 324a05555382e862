//! The cluster served over HTTPS on a local port, for clients the project did not write (kubectl,
//! controllers built elsewhere): its own CA and a serving certificate for `localhost`,
//! `127.0.0.1` and `::1`, HTTP/1.1 and HTTP/2 (ALPN), and a kubeconfig naming them. Every request
//! goes through [`Sim::respond`], as the in-process client's do; nothing authenticates (every
//! client is anonymous and allowed everything).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::Sim;

/// Why the cluster could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("making the cluster's certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("configuring TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The cluster's CA and the serving certificate it signed.
struct Certificates {
    ca_pem: String,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn certificates() -> Result<Certificates, rcgen::Error> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "raygate-sim-ca");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "raygate-sim");
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Certificates {
        ca_pem: ca.pem(),
        chain: vec![cert.der().clone()],
        key: rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    })
}

/// A self-signed serving certificate and its key (PEM) for `localhost` and `127.0.0.1`: for the
/// servers that clients run beside the cluster (a Kueue manager's webhook and metrics servers).
pub fn self_signed_pem() -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn tls_config(certs: &Certificates) -> Result<rustls::ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs.chain.clone(), certs.key.clone_key())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A cluster being served; dropping it closes the port and every connection.
pub struct Https {
    addr: SocketAddr,
    ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Sim {
    /// Serves the cluster over HTTPS on `addr` (port 0: any free port), until the returned handle
    /// is dropped. Call it inside a tokio runtime.
    pub async fn serve_https(&self, addr: SocketAddr) -> Result<Https, ServeError> {
        let certs = certificates()?;
        let acceptor = TlsAcceptor::from(Arc::new(tls_config(&certs)?));
        let listen = |source| ServeError::Listen { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(listen)?;
        let addr = listener.local_addr().map_err(listen)?;
        let task = tokio::spawn(accept_loop(self.clone(), listener, acceptor));
        Ok(Https {
            addr,
            ca_pem: certs.ca_pem,
            task,
        })
    }
}

async fn accept_loop(sim: Sim, listener: TcpListener, acceptor: TlsAcceptor) {
    // dropped with the loop: every open connection (and its watches) ends with the server
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    connections.spawn(connection(sim.clone(), acceptor.clone(), tcp));
                }
                Err(e) => tracing::warn!(error = %e, "sim https: accept failed"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn connection(sim: Sim, acceptor: TlsAcceptor, tcp: tokio::net::TcpStream) {
    let tls = match acceptor.accept(tcp).await {
        Ok(tls) => tls,
        Err(e) => {
            tracing::debug!(error = %e, "sim https: TLS handshake failed");
            return;
        }
    };
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let sim = sim.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            Ok::<_, Infallible>(sim.respond(parts, body).await)
        }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
        tracing::debug!(error = %e, "sim https: connection ended");
    }
}

impl Https {
    /// `https://127.0.0.1:<port>` (the port chosen when asked for port 0).
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// A kubeconfig for this cluster: context, cluster and user all named `name`, the CA inline,
    /// namespace `default`, a bearer token (any is accepted; without credentials kubectl asks
    /// for a user name and password).
    pub fn kubeconfig(&self, name: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\ncurrent-context: {name}\nusers:\n- name: {name}\n  user:\n    token: {name}\npreferences: {{}}\n",
            url = self.url()
        )
    }
}

impl Drop for Https {
    fn drop(&mut self) {
        self.task.abort();
    }
}
