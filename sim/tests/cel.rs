//! CEL validation rules of the installed CRDs (`../shared/upstream-crds`): every rule compiles in
//! the sim's engine, so none of them is silently not enforced (the sim fails open only on rules it
//! cannot run, listed in the README); and a rule family end to end through `kube::Client`.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use raygate_sim::Sim;
use raygate_sim::server::cel::CelRules;
use serde_json::{Value, json};

#[test]
fn every_rule_of_the_installed_crds_is_evaluated_by_the_sim() {
    let dir = raygate_testing::upstream::dir().join("upstream-crds");
    let mut rules = vec![];
    for entry in std::fs::read_dir(&dir).expect("upstream CRDs") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("CRD file");
        let crd: Value = raygate::manifest::from_yaml(&text).expect("CRD YAML");
        for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
            let schema = &v["schema"]["openAPIV3Schema"];
            for (rule, compiled) in CelRules::new(schema).rules() {
                rules.push((
                    path.file_name().map(|f| f.to_string_lossy().to_string()),
                    rule,
                    compiled,
                ));
            }
        }
    }
    let not_compiled: Vec<_> = rules.iter().filter(|(_, _, c)| !c).collect();
    assert!(
        not_compiled.is_empty(),
        "rules the sim would not enforce: {not_compiled:#?}"
    );
    // Kueue's and KubeRay's, every served version
    assert!(rules.len() >= 51, "{} rules", rules.len());
}

#[tokio::test(start_paused = true)]
async fn a_localqueue_s_cluster_queue_is_immutable_and_other_changes_pass() {
    let dir = raygate_testing::upstream::dir().join("upstream-crds");
    let yaml = std::fs::read_to_string(dir.join("kueue.x-k8s.io_localqueues.yaml")).unwrap();
    let sim = Sim::builder()
        .crds_yaml(&yaml)
        .unwrap()
        .namespace("ns")
        .build();
    let ar = ApiResource {
        group: "kueue.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "kueue.x-k8s.io/v1beta2".into(),
        kind: "LocalQueue".into(),
        plural: "localqueues".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client(), "ns", &ar);
    let lq: DynamicObject = serde_json::from_value(json!({"apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue", "metadata": {"name": "lq"}, "spec": {"clusterQueue": "a"}}))
    .unwrap();
    api.create(&PostParams::default(), &lq)
        .await
        .expect("created");
    api.patch(
        "lq",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stopPolicy": "Hold"}})),
    )
    .await
    .expect("another field changes");
    let err = api
        .patch(
            "lq",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterQueue": "b"}})),
        )
        .await
        .expect_err("clusterQueue is immutable");
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "LocalQueue.kueue.x-k8s.io \"lq\" is invalid: spec.clusterQueue: Invalid value: \"b\": field is immutable"
    );
    let stored = api.get("lq").await.unwrap();
    assert_eq!(stored.data["spec"]["clusterQueue"], "a", "nothing written");
}

/// raygate's NodeRollout CRD (generated, as the sim installs it) keeps a running rollout's
/// selection fixed on the sim as on the real server (`tests/own_crds.rs`): its root transition
/// rules read the stored status through `oldSelf`.
#[tokio::test(start_paused = true)]
async fn a_node_rollout_s_selection_is_fixed_while_it_runs_and_free_before() {
    use raygate::types::rollout::{NodeRollout, RolloutSelection};

    let sim = raygate_sim::world::fixtures::sim_with_rollouts();
    let api: Api<NodeRollout> = Api::all(sim.client());
    let o: NodeRollout = serde_json::from_value(json!({"apiVersion": "raygate.io/v1alpha1",
        "kind": "NodeRollout", "metadata": {"name": "r"},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "old"}}}}))
    .unwrap();
    api.create(&PostParams::default(), &o)
        .await
        .expect("created");
    let patch = |spec: Value| {
        let api = api.clone();
        async move {
            api.patch(
                "r",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
        }
    };
    patch(json!({"udLabel": "example.com/rack"}))
        .await
        .expect("a pending rollout's udLabel changes");
    let stored = api.get("r").await.unwrap();
    let status = json!({"status": {"phase": "Running",
        "selection": RolloutSelection::of(&stored.spec)}});
    api.patch_status("r", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let err = patch(json!({"nodeSelector": {"matchLabels": {"pool": "new"}}}))
        .await
        .expect_err("a running rollout's nodeSelector is fixed");
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains(
            "spec.nodeSelector: Invalid value: nodeSelector cannot change while the rollout is active"
        ),
        "{}",
        status.message
    );
    patch(json!({"paused": true}))
        .await
        .expect("a running rollout's other fields change");
    let kept = api.get("r").await.unwrap();
    assert_eq!(
        RolloutSelection::of(&kept.spec),
        RolloutSelection::of(&stored.spec)
    );
}
