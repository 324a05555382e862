//! The API server's admission the simulated cluster runs on writes, through `kube::Client`: a
//! LimitRange defaulted as `SetDefaults_LimitRangeItem` does, a Pod defaulted by LimitRanger
//! and given its RuntimeClass's overhead and scheduling, and a Pod naming a RuntimeClass that
//! does not exist forbidden (the plugins of `plugin/pkg/admission/{limitranger,runtimeclass}`).

use k8s_openapi::api::core::v1::{LimitRange, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, PostParams};
use raygate_sim::Sim;
use serde_json::json;

const NS: &str = "serving";

fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn a_pod_is_defaulted_by_limit_ranges_and_given_its_runtime_class_overhead() {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let ranges: Api<LimitRange> = Api::namespaced(client.clone(), NS);
    let lr = ranges
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "limits"},
                "spec": {"limits": [{"type": "Container", "max": {"cpu": "4"},
                    "defaultRequest": {"memory": "256Mi"}}]}})),
        )
        .await
        .unwrap();
    // stored defaulted: default from max, defaultRequest from default
    let item = &lr.spec.unwrap().limits[0];
    assert_eq!(item.default.as_ref().unwrap()["cpu"].0, "4");
    let requests = item.default_request.as_ref().unwrap();
    assert_eq!(
        (requests["cpu"].0.as_str(), requests["memory"].0.as_str()),
        ("4", "256Mi")
    );
    Api::<RuntimeClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "kata"}, "handler": "kata",
                "overhead": {"podFixed": {"cpu": "250m"}}})),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = pods
        .create(
            &PostParams::default(),
            &from(
                json!({"metadata": {"name": "ray"}, "spec": {"runtimeClassName": "kata",
                "containers": [{"name": "ray", "image": "rayproject/ray",
                    "resources": {"requests": {"cpu": "1"}}}]}}),
            ),
        )
        .await
        .unwrap();
    let spec = pod.spec.unwrap();
    let res = spec.containers[0].resources.clone().unwrap();
    let requests = res.requests.unwrap();
    assert_eq!(
        (requests["cpu"].0.as_str(), requests["memory"].0.as_str()),
        ("1", "256Mi")
    );
    assert_eq!(res.limits.unwrap()["cpu"].0, "4");
    assert_eq!(spec.overhead.unwrap()["cpu"].0, "250m");
    // a RuntimeClass that does not exist: forbidden, nothing stored
    let e = pods
        .create(
            &PostParams::default(),
            &from(
                json!({"metadata": {"name": "gvisor"}, "spec": {"runtimeClassName": "gvisor",
                "containers": [{"name": "ray", "image": "rayproject/ray"}]}}),
            ),
        )
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "pods \"gvisor\" is forbidden: pod rejected: RuntimeClass \"gvisor\" not found"
            );
        }
        other => panic!("{other}"),
    }
    assert!(pods.get_opt("gvisor").await.unwrap().is_none());
}
