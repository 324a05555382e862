//! Test support shared by every integration test binary: one real Kubernetes API server
//! (`k8s.io/apiextensions-apiserver` + etcd, built by `hack/install-test-apiserver.sh`) per test
//! process, with the real upstream CRDs installed, and a namespace per test.
//!
//! The server processes die with the test process: `PR_SET_PDEATHSIG` covers panics, aborts and
//! signals; an `atexit` hook kills them and removes the temporary directory on a normal exit.
//! Ports are free loopback ports chosen by the kernel, so parallel test binaries never collide.
//! A missing server binary fails the test with the command that installs it: never a skip.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Which CRDs a test binary's server gets for `kueue.x-k8s.io`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KueueCrds {
    /// Kueue v0.19.2's own (from `../shared/upstream-crds`).
    Upstream,
    /// raygate's generated `crds/`.
    Raygate,
}

/// A running API server.
pub struct TestServer {
    pub url: String,
    pub kubeconfig: PathBuf,
    pub dir: PathBuf,
    pub started_in: Duration,
}

static SERVER: OnceLock<TestServer> = OnceLock::new();
static CHILDREN: Mutex<Vec<Child>> = Mutex::new(Vec::new());
static TMP: Mutex<Option<PathBuf>> = Mutex::new(None);
static NAMESPACE: AtomicUsize = AtomicUsize::new(0);

fn bin_dir() -> PathBuf {
    crate::tools::cache_dir().join("test-apiserver/bin")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

extern "C" fn cleanup() {
    if let Ok(mut children) = CHILDREN.lock() {
        for child in children.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    if let Ok(Some(dir)) = TMP.lock().map(|t| t.clone()) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn spawn(cmd: &mut Command, log: &Path) {
    let out = std::fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGKILL the child when this
    // (long-lived) thread's process goes away.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    CHILDREN.lock().expect("children").push(child);
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// CA, serving and client certificates (X.509 v3: rustls rejects v1).
fn make_certs(dir: &Path) {
    openssl(
        dir,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            "ca.key",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-subj",
            "/CN=raygate-test-ca",
            "-days",
            "3",
            "-out",
            "ca.crt",
        ],
    );
    std::fs::write(dir.join("server.ext"), "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n").expect("write");
    std::fs::write(dir.join("client.ext"), "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n").expect("write");
    for (who, subj) in [
        ("server", "/CN=127.0.0.1"),
        ("admin", "/O=system:masters/CN=admin"),
    ] {
        openssl(
            dir,
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                &format!("{who}.ec"),
            ],
        );
        openssl(
            dir,
            &[
                "pkcs8",
                "-topk8",
                "-nocrypt",
                "-in",
                &format!("{who}.ec"),
                "-out",
                &format!("{who}.key"),
            ],
        );
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-key",
                &format!("{who}.key"),
                "-subj",
                subj,
                "-out",
                &format!("{who}.csr"),
            ],
        );
        let ext = if who == "server" {
            "server.ext"
        } else {
            "client.ext"
        };
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "3",
                "-extfile",
                ext,
                "-out",
                &format!("{who}.crt"),
            ],
        );
    }
}

fn write_kubeconfig(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority: {d}/ca.crt\nusers:\n- name: admin\n  user:\n    client-certificate: {d}/admin.crt\n    client-key: {d}/admin.key\ncontexts:\n- name: test\n  context: {{cluster: test, user: admin}}\ncurrent-context: test\n",
        d = dir.display()
    );
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .expect("kubeconfig");
    path
}

fn wait_healthy(url: &str, dir: &Path, deadline: Instant) {
    loop {
        let ok = Command::new("curl")
            .args([
                "-sf",
                "--cacert",
                "ca.crt",
                "--cert",
                "admin.crt",
                "--key",
                "admin.key",
                &format!("{url}/healthz"),
            ])
            .current_dir(dir)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the test API server did not become ready; see {}/apiserver.log",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start(crds: KueueCrds) -> TestServer {
    let t0 = Instant::now();
    let bins = bin_dir();
    let apiserver = bins.join("apiextensions-apiserver");
    let etcd = bins.join("etcd");
    assert!(
        apiserver.is_file() && etcd.is_file(),
        "{} and {} are missing: run hack/install-test-apiserver.sh (hack/test.sh does)",
        apiserver.display(),
        etcd.display()
    );
    let dir = std::env::temp_dir().join(format!("raygate-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    *TMP.lock().expect("tmp") = Some(dir.clone());
    // SAFETY: registering a plain extern "C" fn with atexit.
    unsafe {
        libc::atexit(cleanup);
    }
    make_certs(&dir);

    let (client_port, peer_port, api_port) = (free_port(), free_port(), free_port());
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    spawn(
        Command::new(&etcd)
            .arg("--data-dir")
            .arg(dir.join("etcd"))
            .args([
                "--listen-client-urls",
                &etcd_url,
                "--advertise-client-urls",
                &etcd_url,
            ])
            .args([
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args([
                "--initial-cluster",
                &format!("default=http://127.0.0.1:{peer_port}"),
            ])
            .args(["--unsafe-no-fsync", "--log-level", "warn"]),
        &dir.join("etcd.log"),
    );
    let url = format!("https://127.0.0.1:{api_port}");
    let kubeconfig = write_kubeconfig(&dir, &url);
    spawn(
        Command::new(&apiserver)
            .args(["--etcd-servers", &etcd_url, "--bind-address", "127.0.0.1", "--secure-port", &api_port.to_string()])
            .arg("--cert-dir")
            .arg(dir.join("certs"))
            .arg("--tls-cert-file")
            .arg(dir.join("server.crt"))
            .arg("--tls-private-key-file")
            .arg(dir.join("server.key"))
            .arg("--client-ca-file")
            .arg(dir.join("ca.crt"))
            .arg("--authentication-kubeconfig")
            .arg(&kubeconfig)
            .arg("--authorization-kubeconfig")
            .arg(&kubeconfig)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--authentication-skip-lookup", "--enable-priority-and-fairness=false"])
            .args(["--disable-admission-plugins=NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,MutatingAdmissionPolicy"]),
        &dir.join("apiserver.log"),
    );
    wait_healthy(&url, &dir, Instant::now() + Duration::from_secs(60));
    let server = TestServer {
        url,
        kubeconfig,
        dir,
        started_in: Duration::ZERO,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(install_crds(&server, crds));
    TestServer {
        started_in: t0.elapsed(),
        ..server
    }
}

/// The CRD files a server gets.
pub(crate) fn crd_files(crds: KueueCrds) -> Vec<PathBuf> {
    let up = crate::upstream::dir().join("upstream-crds");
    let mut files = vec![
        up.join("ray.io_rayservices.yaml"),
        up.join("ray.io_rayclusters.yaml"),
    ];
    match crds {
        KueueCrds::Upstream => {
            for kind in [
                "clusterqueues",
                "cohorts",
                "localqueues",
                "resourceflavors",
                "workloadpriorityclasses",
                "workloads",
            ] {
                files.push(up.join(format!("kueue.x-k8s.io_{kind}.yaml")));
            }
        }
        KueueCrds::Raygate => {
            let mut own: Vec<PathBuf> = std::fs::read_dir(crate::workspace_root().join("crds"))
                .expect("crds/")
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            own.sort();
            files.extend(own);
        }
    }
    files
}

async fn install_crds(server: &TestServer, crds: KueueCrds) {
    let client = server.client().await;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let mut names = Vec::new();
    for file in crd_files(crds) {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str_with_options(&text, crate::yaml_options())
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // created, never client-side applied: these are ~1 MB
        api.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("creating CRD from {}: {e}", file.display()));
        names.push(crd.metadata.name.unwrap_or_default());
    }
    for name in names {
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(30), established)
            .await
            .expect("CRD established in time")
            .expect("CRD watch");
    }
    // the discovery cache of the server needs a moment after Established before the new
    // resources serve every verb
    tokio::time::sleep(Duration::from_millis(200)).await;
}

impl TestServer {
    /// The server of this test binary (Kueue's CRDs), started on first use.
    pub fn get() -> &'static TestServer {
        Self::get_with(KueueCrds::Upstream)
    }

    /// The server of this test binary with the given Kueue CRDs (all calls in one binary must agree).
    pub fn get_with(crds: KueueCrds) -> &'static TestServer {
        SERVER.get_or_init(|| {
            // a long-lived thread owns the processes (PDEATHSIG fires when the spawning thread exits)
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let started = std::panic::catch_unwind(|| start(crds));
                let _ = tx.send(started);
                loop {
                    std::thread::park();
                }
            });
            match rx.recv() {
                Ok(Ok(server)) => {
                    eprintln!(
                        "test API server {} ready in {:?}",
                        server.url, server.started_in
                    );
                    server
                }
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                Err(_) => panic!("the test API server thread died"),
            }
        })
    }

    /// A client for this server (one per test: clients are bound to their tokio runtime).
    pub async fn client(&self) -> Client {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let kc = Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig loads");
        Client::try_from(config).expect("client")
    }
}

/// A fresh namespace name for one test (namespaced custom resources need no Namespace object).
pub fn namespace(test: &str) -> String {
    let n = NAMESPACE.fetch_add(1, Ordering::Relaxed);
    let mut base: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(40);
    format!(
        "{}-{n}-{}",
        base.trim_matches('-'),
        std::process::id() % 100000
    )
}

/// Polls `check` every 20 ms until it returns `Some`, or panics with `what` after `timeout`, both
/// in tokio time (cluster time under a paused clock).
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    // tokio's clock: wall time on a running runtime, cluster time on a paused one
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Routes `tracing` output to the test's captured output (`RUST_LOG`, default `raygate=debug`).
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("raygate=debug"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}
