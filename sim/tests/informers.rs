//! The shared in-process informers (`raygate_sim::world::informers`) against what they replace: a
//! kube-runtime reflector over a JSON watch of the same collection and selectors must hold the
//! same objects after every kind of change (an object entering and leaving a selector, a delete),
//! and actors in one `informers::in_process` scope share one informer per kind and selector. The
//! in-process copies leave `metadata.managedFields` out (no actor reads it; see
//! `raygate_sim::server::decode`); everything else is the same.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use raygate_sim::Sim;
use raygate_sim::world::actors::support::Caches;
use raygate_sim::world::informers::{in_process, informer};
use raygate_testing::core::{self, PodExt};
use serde_json::json;

const NS: &str = "t";

/// Pod `t/name` labelled `app=<app>` on `node`, no owner.
fn app_pod(name: &str, app: &str, node: &str) -> Pod {
    core::pod(&format!("{NS}/{name}"), node)
        .label("app", app)
        .unowned()
}

/// A sim with pods a (app=x, on n1), b (app=y, n2) and c (app=x, n2).
async fn three_pods() -> (Sim, Client, Api<Pod>) {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (n, app, node) in [("a", "x", "n1"), ("b", "y", "n2"), ("c", "x", "n2")] {
        pods.create(&PostParams::default(), &app_pod(n, app, node))
            .await
            .unwrap();
    }
    (sim, client, pods)
}

/// A kube-runtime reflector over a JSON watch (what the actors used before).
fn json_store(client: &Client, config: watcher::Config) -> Store<Pod> {
    let (reader, writer) = reflector::store();
    let stream = watcher(Api::<Pod>::all(client.clone()), config).reflect(writer);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while futures::StreamExt::next(&mut stream).await.is_some() {}
    });
    reader
}

/// (name, resourceVersion, the object as JSON) in name order.
/// `object` without `metadata.managedFields`, and whether it had any.
fn without_managed_fields(mut object: serde_json::Value) -> (serde_json::Value, bool) {
    let had = object["metadata"]
        .as_object_mut()
        .and_then(|m| m.remove("managedFields"))
        .is_some();
    (object, had)
}

fn contents(store: &Store<Pod>) -> Vec<(String, String, serde_json::Value)> {
    let mut v: Vec<_> = store
        .state()
        .iter()
        .map(|p| {
            (
                p.name_any(),
                p.resource_version().unwrap_or_default(),
                serde_json::to_value(p.as_ref()).unwrap(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn names(store: &Store<Pod>) -> Vec<String> {
    contents(store).into_iter().map(|c| c.0).collect()
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(start_paused = true)]
async fn an_informer_holds_what_a_json_watch_with_the_same_selector_holds() {
    let (sim, client, pods) = three_pods().await;
    let configs = [
        watcher::Config::default().labels("app=x"),
        watcher::Config::default().fields("spec.nodeName=n2"),
        watcher::Config::default(),
    ];
    let shared: Vec<Store<Pod>> = configs
        .iter()
        .map(|c| informer::<Pod>(&sim, "/api/v1/pods", c, ()).unwrap().store)
        .collect();
    let watched: Vec<Store<Pod>> = configs
        .iter()
        .map(|c| json_store(&client, c.clone()))
        .collect();
    settle().await;
    // listed before it was returned
    assert_eq!(names(&shared[0]), ["a", "c"]);

    let merge = |labels: serde_json::Value| Patch::Merge(json!({"metadata": {"labels": labels}}));
    pods.patch("b", &PatchParams::default(), &merge(json!({"app": "x"})))
        .await
        .unwrap();
    pods.patch("c", &PatchParams::default(), &merge(json!({"app": "z"})))
        .await
        .unwrap();
    // at once (grace 0): a DELETED event, not a pod left terminating
    pods.delete("a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &app_pod("d", "x", "n2"))
        .await
        .unwrap();
    settle().await;

    assert_eq!(
        names(&shared[0]),
        ["b", "d"],
        "app=x after b joined, c left, a went"
    );
    assert_eq!(names(&shared[1]), ["b", "c", "d"], "on n2");
    assert_eq!(names(&shared[2]), ["b", "c", "d"], "every pod");
    for (s, w) in shared.iter().zip(&watched) {
        let watched: Vec<_> = contents(w)
            .into_iter()
            .map(|(name, version, object)| {
                let (object, had) = without_managed_fields(object);
                assert!(had, "{name}: the JSON watch shows managedFields");
                (name, version, object)
            })
            .collect();
        for (name, _, object) in contents(s) {
            assert!(
                !without_managed_fields(object).1,
                "{name}: the in-process copy leaves managedFields out"
            );
        }
        assert_eq!(
            contents(s),
            watched,
            "the same objects at the same versions"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn actors_in_one_scope_share_one_informer_per_kind_and_selector() {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let before = sim.watch_count();
    let first = informer::<Pod>(&sim, "/api/v1/pods", &watcher::Config::default(), ()).unwrap();
    let again = informer::<Pod>(&sim, "/api/v1/pods", &watcher::Config::default(), ()).unwrap();
    assert_eq!(sim.watch_count(), before + 1, "one store watch for both");
    informer::<Pod>(
        &sim,
        "/api/v1/pods",
        &watcher::Config::default().labels("app=x"),
        (),
    )
    .unwrap();
    assert_eq!(
        sim.watch_count(),
        before + 2,
        "another selector, another informer"
    );

    let in_scope = sim.clone();
    let woke = in_process(&sim, async move {
        let mut caches = Caches::default();
        let store: Store<Pod> = caches.all(&client);
        caches.wait_ready().await;
        caches.swallow();
        assert_eq!(
            in_scope.watch_count(),
            before + 2,
            "the actor's cache is the shared one"
        );
        Api::<Pod>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &app_pod("a", "x", "n1"))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(1), caches.next())
            .await
            .is_ok()
            && store
                .get(&reflector::ObjectRef::new("a").within(NS))
                .is_some()
    })
    .await;
    assert!(woke, "a change wakes the actor and is in its store");
    assert_eq!(names(&first.store), ["a"]);
    assert_eq!(names(&again.store), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn outside_a_scope_an_actor_watches_through_the_client() {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let before = sim.watch_count();
    let mut caches = Caches::default();
    let _store: Store<Pod> = caches.all(&client);
    caches.wait_ready().await;
    assert_eq!(sim.watch_count(), before + 1, "its own JSON watch");
    assert!(raygate_sim::world::informers::current().is_none());
}

#[tokio::test(start_paused = true)]
async fn an_in_process_read_answers_what_a_get_and_a_list_answer() {
    let (sim, _, pods) = three_pods().await;
    let json = |p: &Pod| without_managed_fields(serde_json::to_value(p).unwrap()).0;
    let path = |name: &str| format!("/api/v1/namespaces/{NS}/pods/{name}");
    let read = sim.read::<Pod>(&path("a")).unwrap().unwrap();
    assert!(read.metadata.managed_fields.is_none());
    assert_eq!(json(&read), json(&pods.get("a").await.unwrap()));
    assert!(
        sim.read::<Pod>(&path("zz")).unwrap().is_none(),
        "a 404 is None"
    );

    // a change is read at once, not from the decoded copy of the version before
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    let again = sim.read::<Pod>(&path("a")).unwrap().unwrap();
    assert_eq!(again.labels()["app"], "y");
    assert_eq!(json(&again), json(&pods.get("a").await.unwrap()));

    let query = |labels: &str| {
        std::collections::HashMap::from([("labelSelector".to_string(), labels.to_string())])
    };
    let listed: Vec<Pod> = sim
        .read_list(&format!("/api/v1/namespaces/{NS}/pods"), &query("app=y"))
        .unwrap();
    let got = pods
        .list(&kube::api::ListParams::default().labels("app=y"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        listed.iter().map(json).collect::<Vec<_>>(),
        got.iter().map(json).collect::<Vec<_>>()
    );
    assert_eq!(
        listed.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        ["a", "b"]
    );
}

/// On the paused clock the order in which actors wake within one instant is the order of their
/// writes, so actors sharing an informer must wake in one order every run: the order in which
/// their caches subscribed (a watch channel would wake them in an order drawn at random per
/// runtime).
#[tokio::test(start_paused = true)]
async fn actors_sharing_an_informer_wake_in_the_order_they_subscribed() {
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let actors = 16;
    let rounds = 3;
    let in_scope = (client.clone(), order.clone());
    in_process(&sim, async move {
        let (client, order) = in_scope;
        let mut tasks = vec![];
        for i in 0..actors {
            let mut caches = Caches::default();
            let _store: Store<Pod> = caches.all(&client);
            caches.wait_ready().await;
            caches.swallow();
            let order = order.clone();
            tasks.push(tokio::spawn(raygate_sim::world::informers::carry(
                async move {
                    for _ in 0..rounds {
                        caches.next().await;
                        order.lock().unwrap().push(i);
                    }
                },
            )));
        }
        let pods = Api::<Pod>::namespaced(client.clone(), NS);
        for round in 0..rounds {
            settle().await;
            pods.create(
                &PostParams::default(),
                &app_pod(&format!("p{round}"), "x", "n1"),
            )
            .await
            .unwrap();
        }
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    let expected: Vec<usize> = (0..rounds).flat_map(|_| 0..actors).collect();
    assert_eq!(*order.lock().unwrap(), expected);
}
