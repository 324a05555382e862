//! Every `kubectl drain` pod rule, on the simulated cluster through `kube::Client`, as raygate's
//! drain executor (`raygate::controller::drain::run`) applies them. Each test names the kubectl
//! function it follows, in `staging/src/k8s.io/kubectl/pkg/drain/` at kubectl v0.36.3
//! (Kubernetes 1.36.3): `filters.go` (`makeFilters`: `skipDeletedFilter`, `daemonSetFilter`,
//! `mirrorPodFilter`, `localStorageFilter`, `unreplicatedFilter`) and `drain.go`
//! (`GetPodsForDeletion`, `DeleteOrEvictPods`, `makeDeleteOptions`, `waitForDelete`).
//!
//! One target node `old-0` (upgrade domain `ud-0`, `pool=old`), one spare node; a scheduler,
//! a kubelet per node and the disruption controller, on the paused clock.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use raygate::controller::drain::{self as executor, Run};
use raygate::drain::engine::{Options, Phase, State};
use raygate::drain::{DrainRules, PlanOptions};
use raygate_sim::Sim;
use raygate_sim::world::actors::{disruption, kubelet};
use raygate_sim::world::{Running, World};
use raygate_testing::core::{self, NodeExt, PdbExt, PodExt, int};
use serde_json::json;
use tokio::sync::watch;

const NS: &str = "rules";
const UD: &str = "topology.raygate.io/upgrade-domain";
const TARGET: &str = "old-0";

/// The cluster: `old-0` (the target) and `new-0`, their kubelets (containers stop on SIGTERM
/// after `stop_after`; `None`: the whole grace period), the scheduler and the disruption
/// controller.
async fn cluster(stop_after: Option<Duration>) -> (Sim, Running) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let sim = Sim::builder().namespace(NS).build();
    let client = sim.client();
    for (name, ud, pool) in [(TARGET, "ud-0", "old"), ("new-0", "ud-1", "new")] {
        let node = core::node(name, "")
            .label(UD, ud)
            .label("pool", pool)
            .label("kubernetes.io/hostname", name)
            .allocatable(&[("cpu", "64"), ("memory", "256Gi"), ("pods", "110")])
            .ready();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    let kubelets = kubelet::Config {
        stop_after,
        ..kubelet::Config::default()
    };
    let world = World::on(&sim)
        .scheduler(Default::default())
        .kubelets(kubelets)
        .disruption(disruption::Config {
            lag: Duration::from_secs(1),
        })
        .start();
    (sim, world)
}

/// Pod `rules/name` bound to `old-0`, labelled `app=<name>`, 5 s grace, controlled by
/// ReplicaSet `web` (`.unowned()`: a bare pod; `.owned_by(..)`: another controller).
fn on_target(name: &str) -> Pod {
    core::pod(&format!("{NS}/{name}"), TARGET)
        .label("app", name)
        .grace_period(5)
        .owned_by("apps/v1", "ReplicaSet", "web")
}

async fn create(client: &Client, pods: Vec<Pod>) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    for p in pods {
        api.create(&PostParams::default(), &p).await.unwrap();
    }
    eventually("the pods running", || async {
        let ps = api.list(&Default::default()).await.unwrap().items;
        ps.iter()
            .all(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                matches!(phase, Some("Running" | "Succeeded" | "Failed"))
            })
            .then_some(())
    })
    .await;
}

async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    raygate_sim::world::fixtures::eventually_within(
        Duration::from_secs(1800),
        Duration::from_secs(1),
        what,
        check,
    )
    .await
}

/// What happened to the pods, from a watch: evictions (the Eviction API's `DisruptionTarget`)
/// and deletions, with the cluster time.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Evicted,
    Gone,
}

type History = Arc<Mutex<Vec<(Timestamp, String, Seen)>>>;

fn record(sim: &Sim) -> History {
    let history: History = Arc::default();
    let (client, clock, out) = (sim.client(), sim.clock().clone(), history.clone());
    tokio::spawn(async move {
        let mut evicted: BTreeMap<String, bool> = BTreeMap::new();
        let stream = watcher(
            Api::<Pod>::namespaced(client, NS),
            watcher::Config::default(),
        );
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(event)) = stream.next().await {
            let (p, gone) = match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => (p, false),
                watcher::Event::Delete(p) => (p, true),
                _ => continue,
            };
            let mut h = out.lock().unwrap();
            if gone {
                h.push((clock.now(), p.name_any(), Seen::Gone));
                continue;
            }
            let now = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_ == "DisruptionTarget"
                            && c.reason.as_deref() == Some("EvictionByEvictionAPI")
                    })
                });
            if now && !evicted.insert(p.name_any(), true).unwrap_or(false) {
                h.push((clock.now(), p.name_any(), Seen::Evicted));
            }
        }
    });
    history
}

fn seen(h: &History, what: Seen) -> Vec<String> {
    h.lock()
        .unwrap()
        .iter()
        .filter(|e| e.2 == what)
        .map(|e| e.1.clone())
        .collect()
}

fn when(h: &History, pod: &str, what: Seen) -> Option<Timestamp> {
    h.lock()
        .unwrap()
        .iter()
        .find(|e| e.1 == pod && e.2 == what)
        .map(|e| e.0)
}

fn options(rules: DrainRules) -> Options {
    Options {
        plan: PlanOptions {
            domain_label: UD.into(),
            node_selector: "pool=old".into(),
            rules,
            ..PlanOptions::default()
        },
        health_check_stable: Some(SignedDuration::ZERO),
        ..Options::default()
    }
}

struct Drain {
    states: Arc<Mutex<Vec<State>>>,
    handle: tokio::task::JoinHandle<Result<State, executor::DrainRunError>>,
    stop: watch::Sender<bool>,
}

fn start(sim: &Sim, options: Options) -> Drain {
    let states: Arc<Mutex<Vec<State>>> = Arc::default();
    let (stop, mut stopped) = watch::channel(false);
    let out = states.clone();
    let handle = tokio::spawn(executor::run(
        sim.client_as("raygate-drain"),
        Arc::new(sim.clock().clone()),
        Run::new(options),
        move |s: &State| out.lock().unwrap().push(s.clone()),
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        },
    ));
    Drain {
        states,
        handle,
        stop,
    }
}

impl Drain {
    /// Runs until the drain ends (it must, within an hour of cluster time).
    async fn finish(self) -> State {
        tokio::time::timeout(Duration::from_secs(3600), self.handle)
            .await
            .expect("the drain ends")
            .unwrap()
            .unwrap()
    }

    /// Lets it run for `d` of cluster time, then stops it: the last state.
    async fn run_for(self, d: Duration) -> State {
        tokio::time::sleep(d).await;
        self.stop.send(true).unwrap();
        let end = self.finish().await;
        assert_eq!(end.phase, Phase::Running, "{}", end.waiting);
        end
    }

    fn last(&self) -> Option<State> {
        self.states.lock().unwrap().last().cloned()
    }
}

async fn names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    names.sort();
    names
}

/// An `apps/v1` DaemonSet named `name` (no controller acts on it in the sim).
async fn daemon_set(client: &Client, name: &str) {
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    Api::<DaemonSet>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
}

/// filters.go `daemonSetFilter`: a pod controlled by an `apps/v1` DaemonSet stops the drain
/// with `daemonSetFatal` unless `--ignore-daemonsets`, which skips it (`daemonSetWarning`) and
/// leaves it running; the node's other pods go.
#[tokio::test(start_paused = true)]
async fn daemon_set_filter_daemonset_pods_block_without_ignore_daemonsets_and_stay_with_it() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    daemon_set(&client, "agent").await;
    create(
        &client,
        vec![
            on_target("agent").owned_by("apps/v1", "DaemonSet", "agent"),
            on_target("web"),
        ],
    )
    .await;
    let history = record(&sim);
    let blocked = start(&sim, options(DrainRules::default()))
        .run_for(Duration::from_secs(60))
        .await;
    assert!(
        blocked.waiting.contains(
            "blocked (nothing evicted): cannot delete DaemonSet-managed Pods (use \
             --ignore-daemonsets to ignore): rules/agent"
        ),
        "{}",
        blocked.waiting
    );
    assert!(seen(&history, Seen::Evicted).is_empty(), "nothing evicted");
    let end = start(
        &sim,
        options(DrainRules {
            ignore_daemonsets: true,
            ..DrainRules::default()
        }),
    )
    .finish()
    .await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    assert_eq!(seen(&history, Seen::Evicted), ["web"]);
    assert_eq!(names(&client).await, ["agent"], "the DaemonSet pod stays");
}

/// filters.go `daemonSetFilter`: the pod's DaemonSet is looked up (kubectl GETs it; raygate's
/// executor watches DaemonSets). A pod whose DaemonSet is not found (deleted with
/// `--cascade=orphan`) is an error without `--force` ("daemonsets.apps \"gone\" not found"),
/// even under `--ignore-daemonsets`, and is evicted with `--force` (with the not-found warning),
/// while the pods of a DaemonSet that exists stay.
#[tokio::test(start_paused = true)]
async fn daemon_set_filter_a_pod_whose_daemonset_is_gone_blocks_without_force_and_goes_with_it() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    daemon_set(&client, "agent").await;
    create(
        &client,
        vec![
            on_target("agent-old-0").owned_by("apps/v1", "DaemonSet", "agent"),
            on_target("orphan-old-0").owned_by("apps/v1", "DaemonSet", "gone"),
            on_target("web"),
        ],
    )
    .await;
    let history = record(&sim);
    let ignore = DrainRules {
        ignore_daemonsets: true,
        ..DrainRules::default()
    };
    let blocked = start(&sim, options(ignore.clone()))
        .run_for(Duration::from_secs(60))
        .await;
    assert!(
        blocked.waiting.contains(
            "blocked (nothing evicted): cannot delete daemonsets.apps \"gone\" not found (use \
             --force to override): rules/orphan-old-0"
        ),
        "{}",
        blocked.waiting
    );
    assert!(seen(&history, Seen::Evicted).is_empty(), "nothing evicted");
    let end = start(
        &sim,
        options(DrainRules {
            force: true,
            ..ignore
        }),
    )
    .finish()
    .await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let mut evicted = seen(&history, Seen::Evicted);
    evicted.sort();
    assert_eq!(evicted, ["orphan-old-0", "web"]);
    assert_eq!(
        names(&client).await,
        ["agent-old-0"],
        "the DaemonSet's pod stays"
    );
}

/// filters.go `isControllerRefDaemonSet` (kubectl v0.36.3): only an `apps/v1` DaemonSet counts;
/// a pod of another API's `DaemonSet` kind (OpenKruise's `apps.kruise.io/v1alpha1`) is drained
/// like any controlled pod, without `--ignore-daemonsets`.
#[tokio::test(start_paused = true)]
async fn is_controller_ref_daemon_set_another_api_s_daemonset_is_an_ordinary_controller() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    let kruise =
        on_target("kruise-agent").owned_by("apps.kruise.io/v1alpha1", "DaemonSet", "agent");
    create(&client, vec![kruise]).await;
    let history = record(&sim);
    let end = start(&sim, options(DrainRules::default())).finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    assert_eq!(seen(&history, Seen::Evicted), ["kruise-agent"]);
}

/// filters.go `mirrorPodFilter`: a static pod's mirror (annotation `kubernetes.io/config.mirror`;
/// the kubelet makes the Node its controller) is skipped whatever the flags, never evicted.
#[tokio::test(start_paused = true)]
async fn mirror_pod_filter_mirror_pods_are_skipped_and_never_evicted() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    create(
        &client,
        vec![
            on_target("etcd-old-0")
                .mirror()
                .owned_by("v1", "Node", TARGET),
            on_target("static-bare").mirror().unowned(),
            on_target("web"),
        ],
    )
    .await;
    let history = record(&sim);
    let end = start(&sim, options(DrainRules::default())).finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    assert_eq!(seen(&history, Seen::Evicted), ["web"]);
    assert_eq!(names(&client).await, ["etcd-old-0", "static-bare"]);
}

/// filters.go `daemonSetFilter`, `localStorageFilter`, `unreplicatedFilter`: "any finished pod
/// can be removed", so kubectl evicts Succeeded and Failed pods without any flag. raygate agrees
/// that they never block (a finished bare pod with `emptyDir` does not stop the drain), but
/// skips them instead of evicting them: they hold no capacity and their logs stay
/// (docs/decisions.md).
#[tokio::test(start_paused = true)]
async fn finished_pods_never_block_the_drain_and_are_left_in_place() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    create(
        &client,
        vec![
            on_target("job-done").empty_dir().unowned(),
            on_target("job-failed").empty_dir().unowned(),
            on_target("web"),
        ],
    )
    .await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (name, phase) in [("job-done", "Succeeded"), ("job-failed", "Failed")] {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
    }
    let history = record(&sim);
    let end = start(&sim, options(DrainRules::default())).finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    assert_eq!(seen(&history, Seen::Evicted), ["web"]);
    assert_eq!(names(&client).await, ["job-done", "job-failed"]);
}

/// filters.go `unreplicatedFilter`: a pod that declares no controller stops the drain with
/// "cannot delete Pods that declare no controller (use --force to override)"; with `--force` it
/// is evicted (through the Eviction API) with `unmanagedWarning`.
#[tokio::test(start_paused = true)]
async fn unreplicated_filter_a_bare_pod_blocks_without_force_and_is_evicted_with_it() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    create(&client, vec![on_target("bare").unowned(), on_target("web")]).await;
    let history = record(&sim);
    let blocked = start(&sim, options(DrainRules::default()))
        .run_for(Duration::from_secs(60))
        .await;
    assert!(
        blocked.waiting.contains(
            "blocked (nothing evicted): cannot delete Pods that declare no controller (use \
             --force to override): rules/bare"
        ),
        "{}",
        blocked.waiting
    );
    assert!(seen(&history, Seen::Evicted).is_empty());
    let end = start(
        &sim,
        options(DrainRules {
            force: true,
            ..DrainRules::default()
        }),
    )
    .finish()
    .await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let mut evicted = seen(&history, Seen::Evicted);
    evicted.sort();
    assert_eq!(evicted, ["bare", "web"]);
    assert!(names(&client).await.is_empty());
}

/// filters.go `localStorageFilter`: a pod with an `emptyDir` volume stops the drain with
/// `localStorageFatal`; `--delete-emptydir-data` evicts it (its data is lost).
#[tokio::test(start_paused = true)]
async fn local_storage_filter_an_empty_dir_pod_blocks_without_delete_emptydir_data() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    create(&client, vec![on_target("cache").empty_dir()]).await;
    let history = record(&sim);
    let blocked = start(&sim, options(DrainRules::default()))
        .run_for(Duration::from_secs(60))
        .await;
    assert!(
        blocked.waiting.contains(
            "cannot delete Pods with local storage (use --delete-emptydir-data to override): \
             rules/cache"
        ),
        "{}",
        blocked.waiting
    );
    assert!(seen(&history, Seen::Evicted).is_empty());
    let end = start(
        &sim,
        options(DrainRules {
            delete_emptydir_data: true,
            ..DrainRules::default()
        }),
    )
    .finish()
    .await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    assert_eq!(seen(&history, Seen::Evicted), ["cache"]);
}

/// drain.go `GetPodsForDeletion`: `--pod-selector` is the pod list's label selector, so only the
/// pods it selects are drained, and a pod it leaves out cannot block (here a bare pod).
#[tokio::test(start_paused = true)]
async fn get_pods_for_deletion_pod_selector_drains_only_the_selected_pods() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    create(
        &client,
        vec![
            on_target("batch-1").label("tier", "batch"),
            on_target("batch-2").label("tier", "batch"),
            on_target("serving").label("tier", "serving"),
            on_target("bare").label("tier", "serving").unowned(),
        ],
    )
    .await;
    let history = record(&sim);
    let end = start(
        &sim,
        options(DrainRules {
            pod_selector: "tier=batch".into(),
            ..DrainRules::default()
        }),
    )
    .finish()
    .await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let mut evicted = seen(&history, Seen::Evicted);
    evicted.sort();
    assert_eq!(evicted, ["batch-1", "batch-2"]);
    assert_eq!(names(&client).await, ["bare", "serving"]);
}

/// drain.go `DeleteOrEvictPods`: kubectl's `--disable-eviction` deletes pods directly, around
/// every PodDisruptionBudget. raygate does not offer it (`DrainRules` has no such flag): it only
/// evicts. A pod whose budget allows no disruption is refused (429) for as long as that holds,
/// and stays; the domain waits with the budget's words.
#[tokio::test(start_paused = true)]
async fn delete_or_evict_pods_there_is_no_disable_eviction_a_budget_that_refuses_keeps_the_pod() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    create(&client, vec![on_target("solo")]).await;
    let pdb = core::pdb(&format!("{NS}/solo"), &[("app", "solo")]).min_available(int(1));
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    eventually("the budget computed", || async {
        let s = pdbs.get("solo").await.unwrap().status?;
        (s.current_healthy == Some(1)).then_some(())
    })
    .await;
    let history = record(&sim);
    let drain = start(&sim, options(DrainRules::default()));
    tokio::time::sleep(Duration::from_secs(600)).await;
    let paused = drain.last().expect("a state");
    let refusal = paused.domains[0].refusal.clone().expect("refused (429)");
    assert_eq!(refusal.pdb, "rules/solo");
    assert!(
        refusal.message.contains("needs 1 healthy pods and has 1"),
        "{}",
        refusal.message
    );
    drain.run_for(Duration::ZERO).await;
    assert!(seen(&history, Seen::Evicted).is_empty());
    assert!(seen(&history, Seen::Gone).is_empty(), "never deleted");
    assert_eq!(names(&client).await, ["solo"]);
}

/// filters.go `skipDeletedFilter` and drain.go `waitForDelete` (`shouldSkipPod`): with
/// `--skip-wait-for-delete-timeout=N`, a pod whose `deletionTimestamp` is more than N whole
/// seconds old is skipped, so the drain stops waiting for it; without it (0) the drain waits.
/// Here a finalizer keeps a deleted pod `Terminating` for good.
#[tokio::test(start_paused = true)]
async fn skip_deleted_filter_a_pod_deleting_longer_than_the_timeout_is_not_waited_for() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    let mut held = on_target("stuck");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    create(&client, vec![held]).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    api.delete("stuck", &DeleteParams::default()).await.unwrap();
    let deleted = api
        .get("stuck")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .expect("Terminating")
        .0;
    let waiting = start(&sim, options(DrainRules::default()))
        .run_for(Duration::from_secs(120))
        .await;
    assert!(
        waiting.domains[0].message.contains("(1 terminating)"),
        "{}",
        waiting.domains[0].message
    );
    let end = start(
        &sim,
        options(DrainRules {
            skip_wait_for_delete_timeout_seconds: 300,
            ..DrainRules::default()
        }),
    )
    .finish()
    .await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let skipped_after = sim.clock().now().duration_since(deleted);
    assert!(
        skipped_after > SignedDuration::from_secs(300)
            && skipped_after < SignedDuration::from_secs(305),
        "the drain went on {skipped_after:?} after the deletion"
    );
    assert_eq!(names(&client).await, ["stuck"], "still Terminating");
}

/// drain.go `makeDeleteOptions`: kubectl's `--grace-period` defaults to -1, which sends no
/// `gracePeriodSeconds`, so each pod gets its own `terminationGracePeriodSeconds`; the drain
/// then waits until the pod is gone (`waitForDelete`). raygate sends none either (it has no
/// `--grace-period` override): a pod whose containers use their whole 20 s grace period is gone
/// 20 s after its eviction, and only then is the domain drained.
#[tokio::test(start_paused = true)]
async fn make_delete_options_each_pod_gets_its_own_grace_period_and_the_drain_waits_it_out() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    create(&client, vec![on_target("slow").grace_period(20)]).await;
    let history = record(&sim);
    let end = start(&sim, options(DrainRules::default())).finish().await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    let evicted = when(&history, "slow", Seen::Evicted).expect("evicted");
    let gone = when(&history, "slow", Seen::Gone).expect("gone");
    // the watch sees the eviction's condition a moment after the API set it
    let grace = gone.duration_since(evicted);
    assert!(
        grace >= SignedDuration::from_secs(19) && grace < SignedDuration::from_secs(22),
        "{grace:?}"
    );
    assert!(
        sim.clock().now() >= gone,
        "drained only once the pod was gone"
    );
}

/// drain.go `makeDeleteOptions`: `--grace-period=N` (N ≥ 0) is sent as the Eviction's
/// `deleteOptions.gracePeriodSeconds`, which overrides the pod's `terminationGracePeriodSeconds`
/// (the API server's graceful delete sets `deletionTimestamp` N s on and
/// `deletionGracePeriodSeconds: N`; the kubelet kills the containers by then). A pod that would
/// take its whole 120 s is gone about 10 s after its eviction with `--grace-period 10`.
#[tokio::test(start_paused = true)]
async fn make_delete_options_grace_period_overrides_the_pod_s_own() {
    let (sim, _actors) = cluster(None).await;
    let client = sim.client();
    create(&client, vec![on_target("slow").grace_period(120)]).await;
    let history = record(&sim);
    let deleting = Arc::new(Mutex::new(None));
    let seen_grace = deleting.clone();
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let watch_api = api.clone();
    tokio::spawn(async move {
        let stream = watcher(watch_api, watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(event)) = stream.next().await {
            if let watcher::Event::Apply(p) = event
                && let Some(g) = p.metadata.deletion_grace_period_seconds
            {
                *seen_grace.lock().unwrap() = Some(g);
            }
        }
    });
    let end = start(
        &sim,
        options(DrainRules {
            grace_period_seconds: Some(10),
            ..DrainRules::default()
        }),
    )
    .finish()
    .await;
    assert_eq!(end.phase, Phase::Completed, "{}", end.waiting);
    assert_eq!(
        *deleting.lock().unwrap(),
        Some(10),
        "deletionGracePeriodSeconds"
    );
    let evicted = when(&history, "slow", Seen::Evicted).expect("evicted");
    let gone = when(&history, "slow", Seen::Gone).expect("gone");
    let grace = gone.duration_since(evicted);
    assert!(
        grace >= SignedDuration::from_secs(9) && grace < SignedDuration::from_secs(12),
        "gone {grace:?} after its eviction"
    );
}
