//! raygate's own `crds/` on a real API server (in place of Kueue's): every write the controller
//! makes (Workload spec and status, ClusterQueue and LocalQueue status) passes their schemas. The
//! test plays KubeRay by hand: it creates the child RayCluster itself.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use raygate::controller::{Config, run};
use raygate::types::kueue::{ClusterQueue, LocalQueue, Workload};
use raygate::types::ray::{RayCluster, RayService};
use raygate_testing::apiserver::{KueueCrds, TestServer, eventually, namespace};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_runs_on_raygates_own_crds() {
    raygate_testing::apiserver::init_logs();
    let server = TestServer::get_with(KueueCrds::Raygate);
    let client = server.client().await;
    let ns = namespace("own-crds");
    let pod = json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray", "resources": {"requests": {"cpu": "1"}}}]}});
    // a ResourceFlavor without spec, as Kueue's samples write it
    let rf = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}});
    Api::<raygate::types::kueue::ResourceFlavor>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(rf).unwrap())
        .await
        .unwrap();
    let cq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}});
    Api::<ClusterQueue>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(cq).unwrap())
        .await
        .unwrap();
    let lq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": "team"}});
    Api::<LocalQueue>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &serde_json::from_value(lq).unwrap())
        .await
        .unwrap();
    let svc = json!({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "svc", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"rayClusterConfig": {"headGroupSpec": {"rayStartParams": {}, "template": pod},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "minReplicas": 0, "maxReplicas": 4, "rayStartParams": {}, "template": pod}]}}});
    let services: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let created = services
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
    let config = Config {
        admission_resync: Duration::from_millis(500),
        metrics_addr,
        ..Default::default()
    };
    let controller = tokio::spawn(run(client.clone(), config, async move {
        let _ = stopped.await;
    }));
    eventually(Duration::from_secs(20), "/healthz answers", || async {
        http_get(port, "/healthz")
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "/readyz once the caches synced",
        || async {
            http_get(port, "/readyz")
                .await
                .filter(|(code, _)| *code == 200)
        },
    )
    .await;

    // raygate gates the template
    eventually(
        Duration::from_secs(20),
        "rayClusterConfig.suspend=true",
        || async {
            (services
                .get("svc")
                .await
                .ok()?
                .spec
                .ray_cluster_config
                .suspend
                == Some(true))
            .then_some(())
        },
    )
    .await;
    // "KubeRay" names the pending child in the status, then creates it, born suspended
    services
        .patch_status(
            "svc",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"status": {"pendingServiceStatus": {"rayClusterName": "svc-abcde"}}}),
            ),
        )
        .await
        .unwrap();
    let child = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "svc-abcde", "namespace": ns,
            "labels": {"ray.io/originated-from-cr-name": "svc", "ray.io/originated-from-crd": "RayService"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": "svc", "uid": created.metadata.uid, "controller": true}]},
        "spec": {"suspend": true, "headGroupSpec": {"rayStartParams": {}, "template": pod},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "minReplicas": 0, "maxReplicas": 4, "rayStartParams": {}, "template": pod}]}});
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(child).unwrap(),
        )
        .await
        .unwrap();

    eventually(
        Duration::from_secs(20),
        "the child is released once its slice is admitted",
        || async {
            (clusters.get("svc-abcde").await.ok()?.spec.suspend == Some(false)).then_some(())
        },
    )
    .await;
    let workloads: Api<Workload> = Api::namespaced(client.clone(), &ns);
    let wl = workloads.list(&Default::default()).await.unwrap().items;
    assert_eq!(wl.len(), 1);
    assert!(raygate::workload::is_admitted(wl[0].status.as_ref()));
    let admission = wl[0].status.as_ref().unwrap().admission.as_ref().unwrap();
    assert_eq!(admission.cluster_queue, "team");
    assert_eq!(admission.pod_set_assignments.len(), 2);
    eventually(
        Duration::from_secs(20),
        "ClusterQueue and LocalQueue status",
        || async {
            let cq = Api::<ClusterQueue>::all(client.clone())
                .get("team")
                .await
                .ok()?;
            let st = cq.status?;
            let cpu = st
                .flavors_reservation
                .first()?
                .resources
                .iter()
                .find(|r| r.name == "cpu")?
                .total
                .clone()?;
            let lq = Api::<LocalQueue>::namespaced(client.clone(), &ns)
                .get("lq")
                .await
                .ok()?;
            (cpu.0 == "3"
                && st.admitted_workloads == Some(1)
                && lq.status?.admitted_workloads == Some(1))
            .then_some(())
        },
    )
    .await;
    // a scale-down of the child shrinks the slice in place and releases quota at once
    clusters
        .patch("svc-abcde", &PatchParams::default(), &Patch::Merge(json!({"spec": {"workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 4, "rayStartParams": {}, "template": pod}]}})))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "2 CPU after the in-place scale-down",
        || async {
            let cq = Api::<ClusterQueue>::all(client.clone())
                .get("team")
                .await
                .ok()?;
            let cpu = cq
                .status?
                .flavors_reservation
                .first()?
                .resources
                .iter()
                .find(|r| r.name == "cpu")?
                .total
                .clone()?;
            (cpu.0 == "2").then_some(())
        },
    )
    .await;
    // the gauges follow the admission loop's own cycle, which may come a moment after the
    // ClusterQueue's status shows the scale-down
    let wanted = [
        "raygate_reconciles_total",
        "raygate_gate_latency_seconds_count",
        "raygate_admission_cycles_total",
        // Kueue's per-ClusterQueue series, under raygate's prefix
        r#"raygate_cluster_queue_resource_reservation{cohort="",cluster_queue="team",flavor="default",resource="cpu"} 2.0"#,
        r#"raygate_cluster_queue_resource_usage{cohort="",cluster_queue="team",flavor="default",resource="cpu"} 2.0"#,
        r#"raygate_cluster_queue_nominal_quota{cohort="",cluster_queue="team",flavor="default",resource="cpu"} 4.0"#,
        r#"raygate_admitted_active_workloads{cluster_queue="team"} 1"#,
        r#"raygate_reserving_active_workloads{cluster_queue="team"} 1"#,
        r#"raygate_pending_workloads{cluster_queue="team",status="active"} 0"#,
        r#"raygate_cluster_queue_status{cluster_queue="team",status="active"} 1"#,
        r#"raygate_admitted_workloads_total{cluster_queue="team"} 1"#,
        r#"raygate_admission_wait_time_seconds_count{cluster_queue="team"} 1"#,
    ];
    let metrics = eventually(
        Duration::from_secs(20),
        "the scale-down in /metrics",
        || async {
            let (code, metrics) = http_get(port, "/metrics").await?;
            (code == 200 && wanted.iter().all(|name| metrics.contains(name))).then_some(metrics)
        },
    )
    .await;
    assert!(
        metrics.contains("raygate_gate_latency_seconds_count 1"),
        "one release was timed:\n{metrics}"
    );
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

/// raygate's `NodeRollout` CRD (`crds/noderollouts.raygate.io.yaml`) on the real server: a full
/// spec and status are stored as written, the printer columns read the status, and each bad spec
/// is refused with a 422 naming the field (schema patterns and minimums, and the CEL rules).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_rollout_crd_accepts_a_rollout_and_refuses_bad_specs_by_field() {
    use kube::api::{ApiResource, DeleteParams, DynamicObject};
    use raygate::types::rollout::NodeRollout;

    raygate_testing::apiserver::init_logs();
    let server = TestServer::get_with(KueueCrds::Raygate);
    let client = server.client().await;
    let resource = ApiResource::erase::<NodeRollout>(&());
    let raw: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let object = |name: &str, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(
            json!({"apiVersion": "raygate.io/v1alpha1", "kind": "NodeRollout",
            "metadata": {"name": name}, "spec": spec}),
        )
        .unwrap()
    };

    let valid = json!({
        "nodeSelector": {"matchLabels": {"pool": "gpu"}},
        "generation": {"nodeInfo": "kubeletVersion", "targetValue": "v1.31.1"},
        "udLabel": "topology.example.com/upgrade-domain",
        "domainOrder": "Explicit", "explicitOrder": ["ud-b", "ud-a"],
        "taintOutdated": true,
        "handOff": {"mode": "Reboot", "label": "example.com/reboot", "value": "now", "timeout": "2h"},
        "drain": {"ignoreDaemonsets": true, "deleteEmptydirData": false, "force": false,
                  "podSelector": "app!=agent", "skipWaitForDeleteTimeoutSeconds": 60},
        "groups": {"preset": "Custom", "groupLabel": "group", "representative": "role=leader"},
        "healthCheckWait": "30s", "healthCheckStable": "2m", "healthCheckRetryTimeout": "10m",
        "domainTimeout": "1h", "rolloutTimeout": "12h",
        "failureAction": "Abort", "maxUnavailableDomains": 2, "manual": true, "paused": false,
        "rayServices": {"move": true, "whenMoveHeld": "Interrupt", "moveTimeout": "5m"},
    });
    let rollouts: Api<NodeRollout> = Api::all(client.clone());
    let _ = rollouts.delete("gpu-pool", &DeleteParams::default()).await;
    raw.create(&PostParams::default(), &object("gpu-pool", valid.clone()))
        .await
        .unwrap();
    let stored = rollouts.get("gpu-pool").await.unwrap();
    assert_eq!(serde_json::to_value(&stored.spec).unwrap(), valid);
    let options = raygate::drain::rollout_options(&stored.spec).unwrap();
    assert_eq!(options.max_unavailable_domains, 2);
    assert!(options.moves.enabled && options.moves.interrupt_when_held);
    assert_eq!(options.moves.timeout.map(|t| t.as_secs()), Some(300));
    assert_eq!(options.handoff_timeout.map(|t| t.as_secs()), Some(7200));

    // defaults: the server fills them in from the schema
    let _ = rollouts.delete("defaults", &DeleteParams::default()).await;
    raw.create(
        &PostParams::default(),
        &object("defaults", json!({"nodeSelector": {}})),
    )
    .await
    .unwrap();
    let spec = &raw.get("defaults").await.unwrap().data["spec"];
    assert_eq!(spec["udLabel"], "raygate.io/upgrade-domain", "{spec}");
    assert_eq!(spec["maxUnavailableDomains"], 1, "{spec}");
    assert_eq!(spec["failureAction"], "Pause", "{spec}");
    assert_eq!(spec["domainOrder"], "Name", "{spec}");
    assert_eq!(spec["handOff"]["mode"], "None", "{spec}");
    assert_eq!(
        spec["rayServices"],
        json!({"move": true, "whenMoveHeld": "Wait"}),
        "{spec}"
    );

    // status: the subresource takes the controller's shape
    let status = json!({"status": {"phase": "Running", "currentDomain": "ud-b", "progress": "1/2",
        "targetGeneration": "v1.31.1",
        "domains": [
            {"name": "ud-b", "phase": "Done", "nodes": ["n1"], "protectedEvicted": 2, "protectedTotal": 2,
             "otherEvicted": 8, "otherTotal": 8, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:10:00Z"},
            {"name": "ud-a", "phase": "Draining", "nodes": ["n2"], "protectedEvicted": 0, "protectedTotal": 3,
             "otherEvicted": 0, "otherTotal": 9,
             "blockedBy": "PodDisruptionBudget ns/leaders: Cannot evict pod as it would violate the pod's disruption budget. The disruption budget leaders needs 3 healthy pods and has 3 currently",
             "startedAt": "2026-01-01T00:10:00Z"}],
        "conditions": [{"type": "Progressing", "status": "True", "reason": "Draining",
            "message": "draining ud-a", "lastTransitionTime": "2026-01-01T00:10:00Z", "observedGeneration": 1}],
        "observedGeneration": 1}});
    rollouts
        .patch_status("gpu-pool", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let stored = rollouts.get("gpu-pool").await.unwrap();
    let got = stored.status.unwrap();
    assert_eq!(got.progress.as_deref(), Some("1/2"));
    assert_eq!(got.domains[1].protected_total, 3);
    assert!(
        got.domains[1]
            .blocked_by
            .as_deref()
            .unwrap()
            .contains("needs 3 healthy pods")
    );

    // refused, each with the server's own message naming the field
    let refused = [
        (
            json!({"nodeSelector": {}, "maxUnavailableDomains": 0}),
            "spec.maxUnavailableDomains: Invalid value: 0: maxUnavailableDomains must be at least 1",
        ),
        (
            json!({"nodeSelector": {}, "healthCheckWait": "30 seconds"}),
            "spec.healthCheckWait: Invalid value: \"30 seconds\": spec.healthCheckWait in body should match",
        ),
        (
            json!({"nodeSelector": {}, "rayServices": {"whenMoveHeld": "Later"}}),
            "spec.rayServices.whenMoveHeld: Unsupported value: \"Later\"",
        ),
        (
            json!({"nodeSelector": {}, "domainTimeout": "-5m"}),
            "spec.domainTimeout: Invalid value: \"-5m\": spec.domainTimeout in body should match",
        ),
        (
            json!({"nodeSelector": {}, "failureAction": "Rollback"}),
            "spec.failureAction: Unsupported value: \"Rollback\": supported values: \"Pause\", \"Abort\"",
        ),
        (
            json!({"nodeSelector": {}, "domainOrder": "Explicit"}),
            "domainOrder Explicit needs explicitOrder",
        ),
        (
            json!({"nodeSelector": {}, "explicitOrder": ["a"]}),
            "explicitOrder is only read with domainOrder: Explicit",
        ),
        (
            json!({"nodeSelector": {}, "domainOrder": "OldestGeneration"}),
            "domainOrder OldestGeneration needs generation",
        ),
        (
            json!({"nodeSelector": {}, "handOff": {"mode": "Replace"}}),
            "handOff Reboot and Replace wait for nodes at the target generation",
        ),
        (json!({}), "say which nodes to roll"),
        (
            json!({"generation": {"label": "gen", "nodeInfo": "osImage"}}),
            "spec.generation: Invalid value: set exactly one of label or nodeInfo",
        ),
        (
            json!({"nodeSelector": {}, "groups": {"preset": "Custom"}}),
            "preset Custom needs groupLabel and representative",
        ),
        (
            json!({"nodeSelector": {}, "udLabel": ""}),
            "udLabel must name a node label",
        ),
        (
            json!({"nodeSelector": {}, "drain": {"skipWaitForDeleteTimeoutSeconds": -1}}),
            "spec.drain.skipWaitForDeleteTimeoutSeconds: Invalid value: -1: skipWaitForDeleteTimeoutSeconds must not be negative",
        ),
    ];
    for (i, (spec, message)) in refused.into_iter().enumerate() {
        let err = raw
            .create(
                &PostParams::default(),
                &object(&format!("bad-{i}"), spec.clone()),
            )
            .await
            .expect_err(&format!("{spec} is refused"));
        match err {
            kube::Error::Api(ref s) => {
                assert_eq!(s.code, 422, "{spec}: {s:?}");
                assert!(s.message.contains(message), "{spec}: {}", s.message);
            }
            other => panic!("{spec}: {other}"),
        }
    }
}

/// The selection a `NodeRollout` started with is fixed on the real server (the CRD's transition
/// rules, within the API server's CEL cost budget): before the rollout starts every field may
/// change; once its status records the selection and its phase is Running or Paused, a change of
/// `udLabel`, `nodeSelector` (a label or an expression) or `generation` is refused with a 422
/// naming the field, and other fields still change; a finished rollout's selection may change
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_rollout_crd_refuses_a_selection_change_while_the_rollout_is_active() {
    use kube::api::DeleteParams;
    use raygate::types::rollout::NodeRollout;

    raygate_testing::apiserver::init_logs();
    let server = TestServer::get_with(KueueCrds::Raygate);
    let client = server.client().await;
    let rollouts: Api<NodeRollout> = Api::all(client.clone());
    let _ = rollouts.delete("fixed", &DeleteParams::default()).await;
    let spec = json!({
        "nodeSelector": {"matchLabels": {"pool": "gpu"},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
        "generation": {"label": "example.com/generation", "targetValue": "v2"},
        "udLabel": "topology.example.com/upgrade-domain",
    });
    let object: NodeRollout = serde_json::from_value(json!({"apiVersion": "raygate.io/v1alpha1",
        "kind": "NodeRollout", "metadata": {"name": "fixed"}, "spec": spec}))
    .unwrap();
    rollouts
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let patch_spec = |change: serde_json::Value| {
        let rollouts = rollouts.clone();
        async move {
            rollouts
                .patch(
                    "fixed",
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": change })),
                )
                .await
        }
    };
    let set_status = |status: serde_json::Value| {
        let rollouts = rollouts.clone();
        async move {
            rollouts
                .patch_status(
                    "fixed",
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": status })),
                )
                .await
                .unwrap();
        }
    };
    // not started (Pending, then paused before its start): every field may change
    patch_spec(json!({"udLabel": "topology.example.com/rack"}))
        .await
        .expect("a pending rollout's udLabel changes");
    set_status(json!({"phase": "Paused"})).await;
    patch_spec(json!({"udLabel": "topology.example.com/upgrade-domain"}))
        .await
        .expect("a rollout paused before its start changes");
    // started: the status records the selection
    let stored = rollouts.get("fixed").await.unwrap();
    let selection = raygate::types::rollout::RolloutSelection::of(&stored.spec);
    set_status(json!({"phase": "Running", "selection": selection})).await;
    let refused = [
        (
            json!({"udLabel": "topology.example.com/rack"}),
            "spec.udLabel",
        ),
        (
            json!({"nodeSelector": {"matchLabels": {"pool": "cpu"}}}),
            "spec.nodeSelector",
        ),
        (
            json!({"nodeSelector": {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b", "c"]}]}}),
            "spec.nodeSelector",
        ),
        (
            json!({"generation": {"targetValue": "v3"}}),
            "spec.generation",
        ),
        (
            json!({"generation": {"label": null, "nodeInfo": "kubeletVersion"}}),
            "spec.generation",
        ),
    ];
    for phase in ["Running", "Paused"] {
        set_status(json!({"phase": phase})).await;
        for (change, field) in &refused {
            let err = patch_spec(change.clone())
                .await
                .expect_err(&format!("{phase}: {change} is refused"));
            let kube::Error::Api(s) = err else {
                panic!("{phase}: {change}: {err}")
            };
            assert_eq!(s.code, 422, "{phase}: {change}: {s:?}");
            let name = field.trim_start_matches("spec.");
            let says =
                format!("{field}: Invalid value: {name} cannot change while the rollout is active");
            assert!(
                s.message.contains(&says),
                "{phase}: {change}: {}",
                s.message
            );
        }
    }
    let kept = rollouts.get("fixed").await.unwrap();
    assert_eq!(
        raygate::types::rollout::RolloutSelection::of(&kept.spec),
        selection,
        "nothing of a refused change was stored"
    );
    // what does not select nodes still changes while active
    patch_spec(json!({"paused": true, "healthCheckStable": "1m"}))
        .await
        .expect("a running rollout's other fields change");
    // finished: the selection may change again
    set_status(json!({"phase": "Completed"})).await;
    patch_spec(json!({"udLabel": "topology.example.com/rack",
        "nodeSelector": {"matchLabels": {"pool": "cpu"}}, "generation": {"targetValue": "v3"}}))
    .await
    .expect("a completed rollout's selection changes");
    rollouts
        .delete("fixed", &DeleteParams::default())
        .await
        .unwrap();
}

/// The builtin Workload CRD keeps a reserved Workload's PodSets as Kueue's webhook does
/// (`validateImmutablePodSets`): a change of a PodSet's template (its requests) is refused while
/// it has quota reserved, a lower count passes, and before the reservation anything goes. The
/// same steps on the real API server and on the sim (which installs the same generated CRD).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_workload_s_pod_sets_are_fixed_but_for_a_lower_count_on_both_servers() {
    raygate_testing::apiserver::init_logs();
    let server = TestServer::get_with(KueueCrds::Raygate);
    let real = server.client().await;
    let ns = namespace("wl-fixed");
    let yaml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/workloads.kueue.x-k8s.io.yaml"),
    )
    .unwrap();
    let sim = raygate_sim::Sim::builder()
        .crds_yaml(&yaml)
        .unwrap()
        .namespace(&ns)
        .build();
    for (server, client) in [("the real API server", real), ("the sim", sim.client())] {
        podsets_fixed_while_reserved(Api::namespaced(client, &ns))
            .await
            .unwrap_or_else(|e| panic!("on {server}: {e}"));
    }
}

async fn podsets_fixed_while_reserved(api: Api<Workload>) -> Result<(), String> {
    let podset = |cpu: &str, count: i32| {
        json!({"name": "workers", "count": count, "template": {"spec": {"containers": [
            {"name": "ray", "image": "rayproject/ray", "resources": {"requests": {"cpu": cpu}}}]}}})
    };
    let wl = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "slice"}, "spec": {"queueName": "lq", "podSets": [podset("1", 3)]}});
    api.create(&PostParams::default(), &serde_json::from_value(wl).unwrap())
        .await
        .map_err(|e| format!("create: {e}"))?;
    let set_pod_sets = |p: serde_json::Value| {
        let api = api.clone();
        async move {
            api.patch(
                "slice",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"podSets": [p]}})),
            )
            .await
        }
    };
    set_pod_sets(podset("2", 3))
        .await
        .map_err(|e| format!("before the reservation a template changes: {e}"))?;
    let reserved = json!({"status": {"conditions": [{"type": "QuotaReserved", "status": "True",
        "reason": "QuotaReserved", "message": "reserved", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    api.patch_status("slice", &PatchParams::default(), &Patch::Merge(&reserved))
        .await
        .map_err(|e| format!("reserve: {e}"))?;
    for (change, what) in [
        (podset("4", 3), "its requests"),
        (podset("2", 4), "a higher count"),
    ] {
        match set_pod_sets(change).await {
            Err(kube::Error::Api(s))
                if s.code == 422 && s.message.contains(raygate::crdgen::PODSETS_FIXED_MESSAGE) => {}
            other => return Err(format!("changing {what} while reserved: {other:?}")),
        }
    }
    set_pod_sets(podset("2", 2))
        .await
        .map_err(|e| format!("a lower count while reserved: {e}"))?;
    let stored = api.get("slice").await.map_err(|e| e.to_string())?;
    let ps = &stored.spec.pod_sets[0];
    assert_eq!(ps.count, 2);
    Ok(())
}

/// `raygate remove-pod-gate` (and the controller without `--pod-gate`) on a server that serves
/// no Pods: nothing to remove from pods, said once, not an error retried forever (the server
/// answers the pods path with a plain-text 404, which reaches kube without a status code).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_pod_gate_on_a_server_without_pods_finds_nothing_to_do() {
    let server = TestServer::get_with(KueueCrds::Raygate);
    let client = server.client().await;
    let removed = raygate::controller::remove_pod_gates(&client)
        .await
        .expect("no error on a server without Pods");
    assert_eq!(removed.pods, 0);
    assert!(!removed.pods_forbidden);
}
