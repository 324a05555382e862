//! Bad input never panics the sim and never writes: random methods, paths, query strings,
//! content types and bodies (random bytes, random JSON, valid objects with random fields
//! replaced) get a 4xx/5xx with a `Status` body (or Go's plain-text 404), and a failed request
//! leaves the store's revision where it was.

use proptest::prelude::*;
use raygate_sim::Sim;
use raygate_sim::http;
use serde_json::{Value, json};

fn sim() -> Sim {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    Sim::builder()
        .crds_dir(root.join("crds"))
        .unwrap()
        .namespace("t")
        .build()
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z:./$-]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("metadata".to_string()),
                    Just("spec".to_string()),
                    Just("status".to_string()),
                    Just("name".to_string()),
                    Just("apiVersion".to_string()),
                    Just("kind".to_string()),
                    Just("$patch".to_string()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn valid_workload() -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w", "namespace": "t"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}]}})
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        (
            json_value(),
            prop::sample::select(vec!["metadata", "spec", "status", "apiVersion", "kind"])
        )
            .prop_map(|(v, field)| {
                let mut w = valid_workload();
                w[field] = v;
                serde_json::to_vec(&w).unwrap_or_default()
            }),
        json_value().prop_map(|v| {
            let mut w = valid_workload();
            w["metadata"]["name"] = v;
            serde_json::to_vec(&w).unwrap_or_default()
        }),
    ]
}

fn path() -> impl Strategy<Value = String> {
    let base = prop::sample::select(vec![
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/t/workloads",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/t/workloads/w",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/t/workloads/w/status",
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq",
        "/api/v1/namespaces/t/pods",
        "/api/v1/namespaces/t/pods/p/eviction",
        "/api/v1/namespaces",
        "/apis",
        "/",
    ]);
    (base, "(/[a-z%0-9.-]{0,8}){0,2}").prop_map(|(b, extra)| format!("{b}{extra}"))
}

fn query() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            prop::sample::select(vec![
                "dryRun",
                "fieldManager",
                "force",
                "labelSelector",
                "fieldSelector",
                "limit",
                "continue",
                "resourceVersion",
                "gracePeriodSeconds",
                "watch",
            ]),
            "[a-z=!,() %0-9]{0,10}",
        ),
        0..3,
    )
    .prop_map(|kv| {
        kv.into_iter()
            .filter(|(k, _)| *k != "watch")
            .map(|(k, v)| format!("{k}={}", v.replace(' ', "%20")))
            .collect::<Vec<_>>()
            .join("&")
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn bad_requests_never_panic_and_never_write(
        method in prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
        path in path(),
        query in query(),
        content_type in prop::sample::select(vec![
            "application/json", "application/merge-patch+json", "application/json-patch+json",
            "application/strategic-merge-patch+json", "application/apply-patch+yaml", "text/plain", "",
        ]),
        body in body(),
    ) {
        let sim = sim();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _guard = rt.enter();
        let uri = if query.is_empty() { path.clone() } else { format!("{path}?{query}") };
        let Ok(req) = http::Request::builder().method(method).uri(&uri).header("content-type", content_type).body(()) else {
            return Ok(());
        };
        let (parts, ()) = req.into_parts();
        let before = sim.revision();
        let resp = sim.serve(parts, body.into());
        let code = resp.status().as_u16();
        prop_assert!((200..600).contains(&code));
        if code >= 400 {
            prop_assert_eq!(sim.revision(), before, "a failed {} {} wrote", method, uri);
        }
    }
}
