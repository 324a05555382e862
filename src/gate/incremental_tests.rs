//! An incremental upgrade (`NewClusterWithIncrementalUpgrade`) over the pure core, #13 item 2:
//! the PodSets of the two live children ([`podsets::of_service`]), the slice chain
//! ([`slices::plan`]) and the pod ungater ([`pod_gate::ungate`]), driven by the emulated Ray
//! autoscaler's moves: the pending child (created by KubeRay without `replicas`) grows, the active
//! one shrinks.
//!
//! The live count of a worker group is what KubeRay v1.7.0 keeps running
//! (`GetWorkerGroupDesiredReplicas`: `replicas` unset or below `minReplicas` counts as
//! `minReplicas`, × `numOfHosts`), so the pending child is charged `minReplicas` workers at first
//! and then each `replicas` the autoscaler writes. Kueue v0.19.2 differs: `BuildPodSets`
//! (`effectiveWorkerCount`) counts an unset `replicas` as 1, and for a RayService's pending child
//! `UpdatePodSets` skips a group whose `replicas` is unset, keeping the count of
//! `rayClusterConfig` (the pending child charged its full size from the start).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

use super::pod_gate::{PodView, ungate};
use crate::admission::AdmissionMode;
use crate::podsets::{self, PodSet};
use crate::slices::{self, SliceAction, SliceContext, SliceOwner};
use crate::types::kueue::{Workload, condition};
use crate::types::ray::{RayCluster, RayClusterSpec, RayService, WorkerGroupSpec};
use crate::workload;
use raygate_testing::{
    RayClusterBuilder, WorkerGroupBuilder, admit_counts, ray_cluster, ray_cluster_spec,
    ray_service, set_condition, worker_group,
};

const GROUP: &str = "w";

fn spec(replicas: Option<i32>) -> RayClusterSpec {
    let mut g: WorkerGroupSpec = worker_group(GROUP).min_max(0, 8);
    g.replicas = replicas;
    let mut s = ray_cluster_spec();
    s.worker_group_specs = Some(vec![g]);
    s
}

fn child(name: &str, created: i64, replicas: Option<i32>) -> RayCluster {
    let mut c = ray_cluster(name).child_of("svc").spec(spec(replicas));
    c.metadata.creation_timestamp = Some(Time(at(created)));
    c
}

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + s).unwrap()
}

fn ctx() -> SliceContext {
    SliceContext {
        owner: SliceOwner {
            namespace: "default".into(),
            name: "svc".into(),
            uid: "uid-1".into(),
        },
        queue_name: "lq".into(),
        mode: AdmissionMode::Builtin,
        children_exist: true,
        ..Default::default()
    }
}

fn pods_of(w: &Workload) -> i32 {
    w.spec.pod_sets.iter().map(|p| p.count).sum()
}

fn desired_pods(podsets: &[PodSet]) -> i32 {
    podsets.iter().map(|p| p.count).sum()
}

/// The world the decisions see: two children, their pods, the slices, and a quota in pods (every
/// pod asks for 1 CPU).
struct World {
    service: RayService,
    active: RayCluster,
    pending: RayCluster,
    pods: Vec<PodView>,
    slices: Vec<Workload>,
    quota: i32,
    clock: i64,
}

impl World {
    /// The active child runs `workers` ungated workers under an admitted slice; KubeRay just
    /// created the pending child without `replicas` and its head is gated.
    fn new(workers: i32, quota: i32) -> World {
        let mut w = World {
            service: ray_service("svc"),
            active: child("svc-a", 0, Some(workers)),
            pending: child("svc-p", 1, None),
            pods: Vec::new(),
            slices: Vec::new(),
            quota,
            clock: 10,
        };
        w.add_pods("svc-a", "headgroup", 1, false);
        w.add_pods("svc-a", GROUP, workers, false);
        let before = podsets::of_cluster(&w.active.spec, None, "a", "spec").unwrap();
        let plan = slices::plan(&ctx(), &before, &[]);
        w.apply(&plan.actions);
        for s in &mut w.slices {
            admit_counts(s);
        }
        w.add_pods("svc-p", "headgroup", 1, true);
        w
    }

    fn add_pods(&mut self, cluster: &str, group: &str, n: i32, gated: bool) {
        for _ in 0..n {
            self.clock += 1;
            self.pods.push(PodView {
                name: format!("{cluster}-{group}-{}", self.clock),
                group: group.to_string(),
                requests: podsets::of_cluster(&spec(Some(1)), None, "t", "spec").unwrap()[1]
                    .requests
                    .clone(),
                created: at(self.clock),
                gated,
                finished: false,
                deleted_at: None,
            });
        }
    }

    /// The emulated autoscaler's scale-down: never-started (gated) pods first, then the newest.
    fn remove_workers(&mut self, cluster: &str, n: i32) {
        let prefix = format!("{cluster}-{GROUP}-");
        for _ in 0..n {
            let victim = self
                .pods
                .iter()
                .enumerate()
                .filter(|(_, p)| p.name.starts_with(&prefix))
                .max_by_key(|(_, p)| (p.gated, p.created))
                .map(|(i, _)| i);
            if let Some(i) = victim {
                self.pods.remove(i);
            }
        }
    }

    fn replicas(c: &RayCluster) -> i32 {
        c.spec.worker_group_specs.as_ref().unwrap()[0]
            .replicas
            .unwrap_or(0)
    }

    fn set_replicas(c: &mut RayCluster, n: i32) {
        c.spec.worker_group_specs.as_mut().unwrap()[0].replicas = Some(n);
    }

    fn apply(&mut self, actions: &[SliceAction]) {
        for a in actions {
            match a {
                SliceAction::Create { workload, .. } => {
                    let mut w = (**workload).clone();
                    self.clock += 1;
                    w.metadata.creation_timestamp = Some(Time(at(self.clock)));
                    self.slices.push(w);
                }
                SliceAction::SetPodSets { name, pod_sets, .. } => {
                    if let Some(w) = self
                        .slices
                        .iter_mut()
                        .find(|w| w.metadata.name.as_deref() == Some(name))
                    {
                        w.spec.pod_sets = pod_sets.clone();
                    }
                }
                SliceAction::Finish { name, reason, .. } => {
                    if let Some(w) = self
                        .slices
                        .iter_mut()
                        .find(|w| w.metadata.name.as_deref() == Some(name))
                    {
                        set_condition(w, condition::FINISHED, "True", reason, "");
                    }
                }
                SliceAction::SetPriority { .. } => {}
            }
        }
    }

    fn desired(&self) -> Vec<PodSet> {
        podsets::of_service(&self.service, &[&self.active, &self.pending])
            .unwrap()
            .podsets
    }

    fn reserved(&self) -> Vec<&Workload> {
        self.slices
            .iter()
            .filter(|w| {
                workload::holds_quota(w.status.as_ref())
                    && !workload::is_finished(w.status.as_ref())
            })
            .collect()
    }

    /// One round of the controllers: raygate plans the chain, the queue admits a waiting slice
    /// that fits the quota (a replacement is charged its delta, and the head it replaces goes:
    /// the same as its total fitting), raygate plans again, and the ungater runs on the newest
    /// admitted slice. Checks that a replacement is charged exactly the growth.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        let desired = self.desired();
        for _ in 0..3 {
            let plan = slices::plan(&ctx(), &desired, &self.slices);
            for a in &plan.actions {
                if let SliceAction::Create {
                    workload,
                    replaces: Some(_),
                } = a
                {
                    // its delta over the admitted slice, what Kueue charges, is the growth
                    prop_assert_eq!(
                        pods_of(workload),
                        desired_pods(&desired),
                        "a replacement asks for exactly the PodSets wanted"
                    );
                }
            }
            self.apply(&plan.actions);
            let quota = self.quota;
            for w in &mut self.slices {
                let waiting = !workload::holds_quota(w.status.as_ref())
                    && !workload::is_finished(w.status.as_ref());
                if waiting && pods_of(w) <= quota {
                    admit_counts(w);
                }
            }
        }
        let reserved = self.reserved();
        prop_assert_eq!(reserved.len(), 1, "one admitted slice holds the quota");
        let head = reserved[0].clone();
        prop_assert!(pods_of(&head) <= self.quota, "never admitted past quota");
        let grants = slices::grants(&head);
        for name in ungate(&grants, &self.pods) {
            if let Some(p) = self.pods.iter_mut().find(|p| p.name == name) {
                p.gated = false;
            }
        }
        // the invariant: per KubeRay group, running pods never exceed what is admitted
        for group in ["headgroup", GROUP] {
            let running = self
                .pods
                .iter()
                .filter(|p| p.group == group && !p.gated)
                .count();
            let granted: i32 = grants
                .iter()
                .filter(|g| g.group == group)
                .map(|g| g.count)
                .sum();
            prop_assert!(
                running <= usize::try_from(granted).unwrap_or(0),
                "{} {} pods running, {} granted",
                running,
                group,
                granted
            );
        }
        // and nothing waits that fits: everything wanted within quota runs
        if desired_pods(&desired) <= self.quota {
            prop_assert!(
                self.pods.iter().all(|p| !p.gated),
                "pods gated although the quota covers them"
            );
            prop_assert_eq!(pods_of(&head), desired_pods(&desired));
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Move {
    /// The autoscaler adds workers to the pending child (born gated).
    GrowPending(i32),
    /// The autoscaler removes workers from the active child.
    ShrinkActive(i32),
}

fn moves() -> impl Strategy<Value = Move> {
    prop_oneof![
        (1i32..=2).prop_map(Move::GrowPending),
        (1i32..=2).prop_map(Move::ShrinkActive),
    ]
}

#[test]
fn a_pending_child_without_replicas_is_charged_its_min_replicas_as_kuberay_runs_it() {
    // KubeRay's CRD default stores an unset `replicas` as 0; both run `minReplicas` workers
    for replicas in [None, Some(0)] {
        let mut s = spec(replicas);
        s.worker_group_specs.as_mut().unwrap()[0].min_replicas = Some(1);
        s.worker_group_specs.as_mut().unwrap()[0].num_of_hosts = Some(2);
        let counts: Vec<i32> = podsets::of_cluster(&s, None, "p", "spec")
            .unwrap()
            .iter()
            .map(|p| p.count)
            .collect();
        assert_eq!(
            counts,
            vec![1, 2],
            "head + minReplicas × numOfHosts, not Kueue's 1"
        );
    }
}

#[test]
fn growth_past_quota_waits_gated_until_the_active_shrink_frees_it() {
    // active: head + 4 workers; quota 7 = the active child, the pending head and 1 worker
    let mut w = World::new(4, 7);
    w.settle().unwrap();
    assert!(w.pods.iter().all(|p| !p.gated), "the pending head fits");
    // the autoscaler grows the pending child one worker at a time: the first fits (a replacement
    // charged 1), the second waits
    World::set_replicas(&mut w.pending, 1);
    w.add_pods("svc-p", GROUP, 1, true);
    w.settle().unwrap();
    assert!(w.pods.iter().all(|p| !p.gated));
    World::set_replicas(&mut w.pending, 2);
    w.add_pods("svc-p", GROUP, 1, true);
    w.settle().unwrap();
    let gated: Vec<&str> = w
        .pods
        .iter()
        .filter(|p| p.gated)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(gated.len(), 1, "{gated:?}");
    let waiting: Vec<&Workload> = w
        .slices
        .iter()
        .filter(|s| {
            !workload::holds_quota(s.status.as_ref()) && !workload::is_finished(s.status.as_ref())
        })
        .collect();
    assert_eq!(waiting.len(), 1, "a replacement slice waits");
    assert_eq!(
        pods_of(waiting[0]),
        8,
        "asking for the whole need: 2 heads + 6 workers"
    );
    // the active child shrinks by one: the replacement is dropped, the admitted slice shrinks
    // in place and the gated worker runs
    World::set_replicas(&mut w.active, 3);
    w.remove_workers("svc-a", 1);
    w.settle().unwrap();
    assert!(w.pods.iter().all(|p| !p.gated));
    let reserved = w.reserved();
    assert_eq!(reserved.len(), 1);
    assert_eq!(pods_of(reserved[0]), 7);
    let waiting = w
        .slices
        .iter()
        .filter(|s| !workload::holds_quota(s.status.as_ref()))
        .all(|s| workload::is_finished(s.status.as_ref()));
    assert!(waiting, "the unneeded replacement finished");
}

proptest! {
    /// Whatever the autoscaler's moves and the quota, every step holds: one admitted slice, never
    /// past quota; a scale-up is a replacement charged exactly its growth; running pods never
    /// exceed the admitted counts; whatever fits runs.
    #[test]
    fn an_incremental_upgrade_is_charged_as_it_happens_and_capped_by_what_is_admitted(
        workers in 1i32..=5,
        extra in 1i32..=6,
        script in prop::collection::vec(moves(), 1..16),
    ) {
        // quota: the active child, the pending head, and `extra - 1` more pods of the surge
        let quota = 1 + workers + extra;
        let mut w = World::new(workers, quota);
        w.settle()?;
        for m in script {
            match m {
                Move::GrowPending(k) => {
                    let now = World::replicas(&w.pending);
                    let to = (now + k).min(8);
                    World::set_replicas(&mut w.pending, to);
                    w.add_pods("svc-p", GROUP, to - now, true);
                }
                Move::ShrinkActive(k) => {
                    let now = World::replicas(&w.active);
                    let to = (now - k).max(0);
                    World::set_replicas(&mut w.active, to);
                    w.remove_workers("svc-a", now - to);
                }
            }
            w.settle()?;
        }
    }
}
