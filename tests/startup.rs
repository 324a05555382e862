//! Startup checks (`raygate::compat`, `controller::startup`): the installed CRDs are read before
//! anything is watched or written. On the real CRD API server: a RayService CRD without KubeRay
//! v1.7's top-level `spec.suspend` keeps the controller not ready with a message naming it, and it
//! starts once the CRD is fixed. Also: the CRDs raygate ships and the upstream ones pass.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use raygate::admission::AdmissionMode;
use raygate::compat::check;
use raygate::controller::{Config, run};
use raygate::types::ray::RayService;
use raygate_testing::apiserver::{TestServer, eventually, namespace};
use serde_json::json;

fn crds_in(dir: &std::path::Path, names: &[&str]) -> Vec<CustomResourceDefinition> {
    names
        .iter()
        .map(|f| {
            let path = dir.join(f);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            raygate::manifest::from_yaml(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

fn upstream_ray() -> Vec<CustomResourceDefinition> {
    crds_in(
        &raygate_testing::upstream::dir().join("upstream-crds"),
        &["ray.io_rayservices.yaml", "ray.io_rayclusters.yaml"],
    )
}

const KUEUE_KINDS: [&str; 6] = [
    "clusterqueues",
    "cohorts",
    "localqueues",
    "resourceflavors",
    "workloadpriorityclasses",
    "workloads",
];

/// Kueue v0.19's CRDs as its source tree ships them (no conversion patched in).
fn upstream_kueue() -> Vec<CustomResourceDefinition> {
    let files: Vec<String> = KUEUE_KINDS
        .iter()
        .map(|k| format!("kueue.x-k8s.io_{k}.yaml"))
        .collect();
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    crds_in(
        &raygate_testing::upstream::dir().join("upstream-crds"),
        &names,
    )
}

#[test]
fn kuberay_1_7_with_kueue_0_19_passes_in_both_modes() {
    let mut crds = upstream_ray();
    crds.extend(upstream_kueue());
    assert_eq!(check(&crds, AdmissionMode::Builtin), Vec::<String>::new());
    assert_eq!(check(&crds, AdmissionMode::Kueue), Vec::<String>::new());
}

/// Kueue v0.19.2's own install: its kustomization patches a conversion webhook on its webhook
/// service into these CRDs (`config/components/crd/patches/webhook_in_*.yaml`; `namePrefix:
/// kueue-`, `namespace: kueue-system`). A Kueue manager serves them: builtin admission refuses
/// to run beside it and names the way out; kueue mode takes them.
#[test]
fn kueue_0_19_s_own_install_refuses_builtin_mode_and_passes_kueue_mode() {
    let mut crds = upstream_ray();
    let mut kueue = upstream_kueue();
    for crd in &mut kueue {
        let name = crd.metadata.name.clone().unwrap_or_default();
        if [
            "localqueues",
            "clusterqueues",
            "cohorts",
            "workloads",
            "resourceflavors",
        ]
        .iter()
        .any(|k| name.starts_with(&format!("{k}.")))
        {
            crd.spec.conversion = Some(
                serde_json::from_value(json!({"strategy": "Webhook", "webhook": {
                    "clientConfig": {"service": {"namespace": "kueue-system",
                        "name": "kueue-webhook-service", "path": "/convert"}},
                    "conversionReviewVersions": ["v1"]}}))
                .unwrap(),
            );
        }
    }
    crds.extend(kueue);
    let builtin = check(&crds, AdmissionMode::Builtin);
    assert_eq!(builtin.len(), 1, "{builtin:#?}");
    assert!(
        builtin[0].starts_with("a Kueue manager serves the kueue.x-k8s.io API here (clusterqueues"),
        "{}",
        builtin[0]
    );
    assert!(builtin[0].contains("webhook kueue-system/kueue-webhook-service"));
    assert!(builtin[0].contains("--admission=kueue"));
    assert_eq!(check(&crds, AdmissionMode::Kueue), Vec::<String>::new());
}

#[test]
fn kuberay_1_7_with_raygates_own_crds_passes_builtin_mode() {
    let mut crds = upstream_ray();
    let files: Vec<String> = KUEUE_KINDS
        .iter()
        .map(|k| format!("{k}.kueue.x-k8s.io.yaml"))
        .collect();
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    crds.extend(crds_in(
        &raygate_testing::workspace_root().join("crds"),
        &names,
    ));
    assert_eq!(check(&crds, AdmissionMode::Builtin), Vec::<String>::new());
}

#[test]
fn without_queue_crds_both_modes_name_every_missing_one() {
    let crds = upstream_ray();
    let builtin = check(&crds, AdmissionMode::Builtin);
    assert_eq!(builtin.len(), 6, "{builtin:#?}");
    assert_eq!(
        builtin[0],
        "CRD workloads.kueue.x-k8s.io is not installed (install raygate's crds/ (config/default))"
    );
    assert!(
        check(&crds, AdmissionMode::Kueue)
            .iter()
            .all(|p| p.ends_with("(install Kueue v0.19)"))
    );
}

/// The JSON pointer of `spec.properties.suspend` in the RayService CRD's `v1` schema.
fn suspend_pointer(crd: &CustomResourceDefinition) -> String {
    let v1 = crd
        .spec
        .versions
        .iter()
        .position(|v| v.name == "v1")
        .expect("the RayService CRD serves v1");
    format!("/spec/versions/{v1}/schema/openAPIV3Schema/properties/spec/properties/suspend")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rayservice_crd_without_spec_suspend_keeps_the_controller_not_ready_until_fixed() {
    raygate_testing::apiserver::init_logs();
    let server = TestServer::get();
    let client = server.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let original = crds.get("rayservices.ray.io").await.unwrap();
    let pointer = suspend_pointer(&original);
    let suspend_schema = {
        let v = serde_json::to_value(&original).unwrap();
        v.pointer(&pointer)
            .cloned()
            .expect("KubeRay v1.7's CRD has spec.suspend")
    };
    // a KubeRay older than v1.7: no top-level suspend
    crds.patch(
        "rayservices.ray.io",
        &PatchParams::default(),
        &Patch::<()>::Json(
            serde_json::from_value(json!([{"op": "remove", "path": pointer}])).unwrap(),
        ),
    )
    .await
    .unwrap();

    let ns = namespace("startup");
    let pod = json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray", "resources": {"requests": {"cpu": "1"}}}]}});
    let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "svc", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"rayClusterConfig": {"headGroupSpec": {"rayStartParams": {}, "template": pod}}}});
    let services: Api<RayService> = Api::namespaced(client.clone(), &ns);
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = Config {
        metrics_addr: Some(format!("127.0.0.1:{port}").parse().unwrap()),
        check_crds: true,
        check_crds_retry: Duration::from_millis(500),
        ..Default::default()
    };
    let controller = tokio::spawn(run(client.clone(), config, async move {
        let _ = stopped.await;
    }));
    let body = eventually(
        Duration::from_secs(20),
        "/readyz fails naming spec.suspend",
        || async {
            http_get(port, "/readyz")
                .await
                .filter(|(code, _)| *code == 503)
                .map(|(_, body)| body)
        },
    )
    .await;
    assert!(
        body.contains(
            "CRD rayservices.ray.io version v1 has no field spec.suspend: raygate stops an evicted \
             RayService with it (KubeRay v1.7's top-level suspend) (install KubeRay v1.7 or later)"
        ),
        "{body}"
    );
    let (healthz, _) = http_get(port, "/healthz").await.expect("/healthz answers");
    assert_eq!(healthz, 200, "alive while not ready");
    // nothing is written while the check fails: the opted-in RayService is not gated
    tokio::time::sleep(Duration::from_secs(2)).await;
    let svc = services.get("svc").await.unwrap();
    assert_eq!(
        svc.spec.ray_cluster_config.suspend, None,
        "raygate wrote while its startup check failed"
    );

    // KubeRay upgraded: the CRD has spec.suspend again
    crds.patch(
        "rayservices.ray.io",
        &PatchParams::default(),
        &Patch::<()>::Json(
            serde_json::from_value(
                json!([{"op": "add", "path": pointer, "value": suspend_schema}]),
            )
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(30),
        "/readyz once the CRD is fixed",
        || async {
            http_get(port, "/readyz")
                .await
                .filter(|(code, _)| *code == 200)
        },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the RayService template is gated",
        || async {
            let s = services.get("svc").await.ok()?;
            (s.spec.ray_cluster_config.suspend == Some(true)).then_some(())
        },
    )
    .await;

    // visibility: a child KubeRay created suspended is held (no slice is admitted: the
    // LocalQueue does not exist), and /metrics says so per RayService, in OpenMetrics text
    services
        .patch_status(
            "svc",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"status": {"pendingServiceStatus": {"rayClusterName": "svc-a"}}}),
            ),
        )
        .await
        .unwrap();
    let child = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "svc-a", "namespace": ns,
            "labels": {"ray.io/originated-from-cr-name": "svc", "ray.io/originated-from-crd": "RayService"}},
        "spec": {"suspend": true, "headGroupSpec": {"rayStartParams": {}, "template": pod}}});
    Api::<raygate::types::ray::RayCluster>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(child).unwrap(),
        )
        .await
        .unwrap();
    let held = format!(
        "raygate_held_children{{namespace=\"{ns}\",rayservice=\"svc\",local_queue=\"lq\",cluster_queue=\"\"}} 1"
    );
    let metrics = eventually(
        Duration::from_secs(30),
        "the held child on /metrics",
        || async {
            http_get(port, "/metrics")
                .await
                .filter(|(code, body)| *code == 200 && body.contains(&held))
                .map(|(_, body)| body)
        },
    )
    .await;
    assert!(
        metrics
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{metrics}"
    );
    for line in [
        "raygate_is_leader 1".to_string(),
        format!(
            "raygate_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ),
        format!(
            "raygate_held_resources{{namespace=\"{ns}\",rayservice=\"svc\",local_queue=\"lq\",cluster_queue=\"\",resource=\"cpu\"}} 1.0"
        ),
        "raygate_cluster_queue_held_rayservices{cluster_queue=\"\"} 1".to_string(),
        "# EOF".to_string(),
    ] {
        assert!(
            metrics.contains(&line),
            "{line} missing from /metrics:\n{metrics}"
        );
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), controller).await;
}

/// A plain HTTP/1.1 GET on loopback: (status, body).
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out))
}
