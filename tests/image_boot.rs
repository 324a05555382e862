//! The image boots: hack/test.sh builds it (hack/build-image.sh), unpacks the archive
//! (hack/unpack-image.sh) and names the unpacked directory in `RAYGATE_IMAGE_DIR`; the binary then
//! runs from the image's root filesystem alone (chroot, as the image's user 65532): `--version`,
//! and `controller` against the test API server until `/readyz` answers 200, then SIGTERM.
//! Without `RAYGATE_IMAGE_DIR` (a plain `cargo test`) the test says so and passes.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use raygate_testing::apiserver::TestServer;

fn image_dir() -> Option<PathBuf> {
    std::env::var_os("RAYGATE_IMAGE_DIR").map(PathBuf::from)
}

/// `program`'s path on this machine's PATH (the child's environment is cleared).
fn on_path(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} is not on PATH"))
}

/// `/raygate ARGS` inside `rootfs` as 65532:65532, with the image's environment only (as root:
/// chroot's --userspec; otherwise in a user namespace, where chroot is allowed).
fn in_image(rootfs: &Path, args: &[&str]) -> Command {
    let uid = Command::new("id").arg("-u").output().expect("id -u");
    let mut cmd = if String::from_utf8_lossy(&uid.stdout).trim() == "0" {
        let mut c = Command::new(on_path("chroot"));
        c.arg("--userspec=65532:65532");
        c
    } else {
        let mut c = Command::new(on_path("unshare"));
        c.arg("--map-root-user").arg(on_path("chroot"));
        c
    };
    cmd.arg(rootfs)
        .arg("/raygate")
        .args(args)
        .env_clear()
        .env("PATH", "/");
    cmd
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out))
}

/// The test server's kubeconfig and its certificates, copied into the image's /tmp (readable by
/// 65532); returns the kubeconfig's path inside the image.
fn kubeconfig_in(rootfs: &Path, server: &TestServer) -> String {
    let inside = format!("/tmp/raygate-boot-{}", std::process::id());
    let dir = rootfs.join(inside.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).expect("a directory in the image's /tmp");
    for file in ["ca.crt", "admin.crt", "admin.key"] {
        std::fs::copy(server.dir.join(file), dir.join(file)).expect(file);
    }
    let text = std::fs::read_to_string(&server.kubeconfig).expect("kubeconfig");
    let text = text.replace(&server.dir.display().to_string(), &inside);
    std::fs::write(dir.join("kubeconfig"), text).expect("kubeconfig");
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&dir)
        .status()
        .expect("chmod");
    format!("{inside}/kubeconfig")
}

#[test]
fn the_images_binary_prints_its_version_and_starts_the_controller() {
    let Some(dir) = image_dir() else {
        eprintln!("RAYGATE_IMAGE_DIR is not set: hack/test.sh builds and boots the image");
        return;
    };
    let rootfs = dir.join("rootfs");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).expect("config.json"))
            .expect("the image config parses");
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/raygate"])
    );
    assert_eq!(config["config"]["Cmd"], serde_json::json!(["controller"]));

    let version = in_image(&rootfs, &["--version"]).output().expect("chroot");
    let stdout = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.status.success() && stdout.starts_with("raygate "),
        "/raygate --version: {stdout} {}",
        String::from_utf8_lossy(&version.stderr)
    );
    // the controller build: no simulator commands
    let demo = in_image(&rootfs, &["demo"]).output().expect("chroot");
    assert!(!demo.status.success(), "the image's binary has no `demo`");

    let server = TestServer::get();
    let kubeconfig = kubeconfig_in(&rootfs, server);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let log = dir.join("controller.log");
    let addr = format!("127.0.0.1:{port}");
    let mut controller = in_image(
        &rootfs,
        &[
            "controller",
            "--metrics-addr",
            &addr,
            "--node-rollouts=false",
        ],
    )
    .env("KUBECONFIG", &kubeconfig)
    .env("POD_NAMESPACE", "raygate-system")
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("controller.log"))
    .spawn()
    .expect("starting the controller in the image");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        if let Some((200, _)) = http_get(port, "/readyz") {
            break true;
        }
        if Instant::now() > deadline || controller.try_wait().ok().flatten().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if !ready {
        let _ = controller.kill();
        panic!("the image's controller never got ready:\n{}", read_log());
    }
    assert!(
        read_log().contains("raygate controller started"),
        "{}",
        read_log()
    );

    let pid = controller.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = controller.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = controller.kill();
            panic!("the controller did not stop on SIGTERM:\n{}", read_log());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}: {}", read_log());
    assert!(
        read_log().contains("raygate controller stopped"),
        "{}",
        read_log()
    );
}
