//! Quota freed only when pods are gone (pure, with the pod gate on).
//!
//! A child RayCluster deleted in the background (the old cluster after a promotion, a dangling
//! pending one), a scale-down (`workersToDelete`, lower `replicas`) or a suspended child leaves
//! its pods terminating for their `terminationGracePeriodSeconds`, still holding their node's
//! GPUs. The desired PodSets come from the live children's specs, so on their own they would
//! shrink (or finish) the reserved slice at once. [`needed`] raises them back: each PodSet of the
//! reserved head slice keeps, at most up to its own count, as many pods as still hold resources
//! in its KubeRay group and per-pod requests. So a scale-down in place, a replacement slice and
//! a finished chain all wait until the pods are gone.
//!
//! Pods are matched to the head's PodSets by group and per-pod requests only (a pod carries the
//! flavor placement raygate injected, which the slice's templates leave out); among PodSets of
//! one group and requests, the desired PodSets that match a head PodSet's whole shape count
//! first, and what is missing is added to the head's PodSets in their order.
//!
//! A pod *holds* resources unless it is still gated (never ungated: never scheduled) or finished
//! (Succeeded or Failed). A pod being deleted holds them until it is gone.

use crate::podsets::PodSet;
use crate::quantity::Resources;
use crate::slices::{self, Shape};
use crate::types::kueue::{self, Workload};
use crate::workload;

use super::pod_gate::PodView;

/// One head PodSet kept charged for pods that still hold resources.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldBack {
    /// The slice kept charged (the reserved head of the chain).
    pub slice: String,
    /// Its PodSet.
    pub podset: String,
    /// The KubeRay group of the pods.
    pub group: String,
    /// What the live children's specs need of that PodSet.
    pub desired: i32,
    /// What stays charged: at most the PodSet's count.
    pub kept: i32,
}

/// The desired PodSets with the pods that still hold resources counted in, and what was raised.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Needed {
    pub podsets: Vec<PodSet>,
    pub held_back: Vec<HeldBack>,
}

/// The reserved head of the chain: the newest not-finished slice holding quota.
fn head(workloads: &[Workload]) -> Option<&Workload> {
    let mut reserved: Vec<&Workload> = workloads
        .iter()
        .filter(|w| !workload::is_finished(w.status.as_ref()))
        .filter(|w| workload::holds_quota(w.status.as_ref()))
        .collect();
    workload::sort_chain_order(&mut reserved, workloads);
    reserved.last().copied()
}

/// Whether `p` holds resources on a node (or may at any moment: ungated, not finished).
pub fn holds(p: &PodView) -> bool {
    !p.gated && !p.finished
}

/// How long past the end of its grace period a pod may take to go before it is called stuck:
/// Kueue v0.19's `forcefulTerminationGracePeriod` default (`failurerecovery`).
pub const STUCK_AFTER: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_secs(60);

/// The pods still holding resources more than [`STUCK_AFTER`] past the end of their grace
/// period, by name: typically on a node that stopped answering, where the kubelet that would
/// confirm them stopped cannot. They keep their quota — the node may still run them — until the
/// pod object is gone: a node declared out of service (PodGC then deletes them) or a forced
/// delete. Kueue's failure recovery does the latter for pods that opted in.
pub fn stuck(pods: &[PodView], now: k8s_openapi::jiff::Timestamp) -> Vec<&str> {
    pods.iter()
        .filter(|p| holds(p))
        .filter(|p| {
            p.deleted_at
                .and_then(|t| t.checked_add(STUCK_AFTER).ok())
                .is_some_and(|t| t < now)
        })
        .map(|p| p.name.as_str())
        .collect()
}

/// A desired PodSet standing for a head PodSet `h` of shape `s` (its own template: the same
/// shape, so the slice planner matches it back to `h`).
fn from_head(h: &kueue::PodSet, s: &Shape, count: i32) -> PodSet {
    PodSet {
        name: h.name.clone(),
        group: s.group.clone(),
        count,
        requests: s.requests.clone(),
        template: h.template.clone(),
    }
}

/// The count each PodSet still needs: `desired` (from the live children) raised, PodSet by
/// PodSet of the reserved head slice, to the pods of its group and per-pod requests that still
/// hold resources, never past the head's own count (so pods never make a scale-up, only delay a
/// shrink). `pods` are the RayService's pods, of live and deleted children alike.
pub fn needed(desired: &[PodSet], workloads: &[Workload], pods: &[PodView]) -> Needed {
    let mut out = Needed {
        podsets: desired.to_vec(),
        held_back: vec![],
    };
    let Some(head) = head(workloads) else {
        return out;
    };
    let slice = crate::meta::name(&head.metadata);
    let shaped: Vec<(&kueue::PodSet, Shape)> = head
        .spec
        .pod_sets
        .iter()
        .filter_map(|h| slices::shape(h).map(|s| (h, s)))
        .collect();
    let mut keys: Vec<(&str, &Resources)> = Vec::new();
    for (_, s) in &shaped {
        if !keys.contains(&(s.group.as_str(), &s.requests)) {
            keys.push((s.group.as_str(), &s.requests));
        }
    }
    for (group, requests) in keys {
        let of_key: Vec<&(&kueue::PodSet, Shape)> = shaped
            .iter()
            .filter(|(_, s)| s.group == group && s.requests == *requests)
            .collect();
        let holding = pods
            .iter()
            .filter(|p| holds(p) && p.group == group && p.requests == *requests)
            .count();
        let holding = i32::try_from(holding).unwrap_or(i32::MAX);
        // what the children's specs already ask of these head PodSets, whole shape by shape
        let have: Vec<i32> = of_key
            .iter()
            .map(|(_, s)| {
                out.podsets
                    .iter()
                    .filter(|d| s.fits(d))
                    .map(|d| d.count)
                    .sum()
            })
            .collect();
        let head_count: i32 = of_key.iter().map(|(h, _)| h.count.max(0)).sum();
        let mut missing = holding.min(head_count) - have.iter().sum::<i32>();
        for ((h, s), have) in of_key.into_iter().zip(have) {
            if missing <= 0 {
                break;
            }
            let add = missing.min(h.count - have);
            if add <= 0 {
                continue;
            }
            missing -= add;
            match out.podsets.iter_mut().find(|d| s.fits(d)) {
                Some(d) => d.count += add,
                None => out.podsets.push(from_head(h, s, add)),
            }
            out.held_back.push(HeldBack {
                slice: slice.clone(),
                podset: h.name.clone(),
                group: group.to_string(),
                desired: have,
                kept: have + add,
            });
        }
    }
    out
}

/// Whether a Ray pod labelled `ray.io/cluster=<cluster>` belongs to RayService `service`: its
/// cluster is a live child, or it is gone from the RayCluster store and named as KubeRay v1.7
/// names a RayService's clusters, `<service>-<5 random characters>` (`GenerateRayClusterName`:
/// the suffix is apimachinery's `rand.String(5)`). A RayCluster deleted in the background is gone
/// while its pods still terminate, and KubeRay copies no RayService label onto pods, so the name
/// is what is left. `known` holds every RayCluster name in the pod's namespace: a name that is
/// an existing cluster but not a child is someone else's.
pub fn belongs(
    service: &str,
    cluster: &str,
    children: &std::collections::BTreeSet<String>,
    known: &std::collections::BTreeSet<String>,
) -> bool {
    if children.contains(cluster) {
        return true;
    }
    if known.contains(cluster) {
        return false;
    }
    cluster
        .strip_prefix(service)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|suffix| {
            suffix.len() == 5
                && suffix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;
    use crate::types::kueue::{Admission, PodSetAssignment, WorkloadStatus};
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use k8s_openapi::jiff::Timestamp;
    use proptest::prelude::*;
    use serde_json::json;

    fn cpu(n: i64) -> Resources {
        let mut r = Resources::new();
        r.set("cpu", Quantity::from_units(n));
        r
    }

    fn template(cpus: i64, pool: Option<&str>) -> PodTemplateSpec {
        let mut spec = json!({"containers": [{"name": "ray",
            "resources": {"requests": {"cpu": cpus.to_string()}}}]});
        if let Some(pool) = pool {
            spec["nodeSelector"] = json!({"pool": pool});
        }
        serde_json::from_value(json!({"spec": spec})).unwrap()
    }

    fn desired(name: &str, group: &str, cpus: i64, count: i32) -> PodSet {
        PodSet {
            name: name.into(),
            group: group.into(),
            count,
            requests: cpu(cpus),
            template: template(cpus, None),
        }
    }

    /// A reserved slice with these PodSets (name, group, cpus, pool, count), all admitted.
    fn reserved(name: &str, sets: &[(&str, &str, i64, Option<&str>, i32)]) -> Workload {
        let pod_sets: Vec<kueue::PodSet> = sets
            .iter()
            .map(|(n, g, c, pool, count)| {
                let mut t = template(*c, *pool);
                t.metadata = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    annotations: Some(
                        [(slices::GROUP_ANNOTATION.to_string(), g.to_string())].into(),
                    ),
                    ..Default::default()
                });
                kueue::PodSet {
                    name: n.to_string(),
                    count: *count,
                    min_count: None,
                    template: t,
                }
            })
            .collect();
        let mut w = Workload::new(
            name,
            kueue::WorkloadSpec {
                pod_sets: pod_sets.clone(),
                ..Default::default()
            },
        );
        w.metadata.namespace = Some("ns".into());
        let now = Timestamp::from_second(1_767_225_600).unwrap();
        let mut conditions = vec![];
        for t in ["QuotaReserved", "Admitted"] {
            crate::conditions::set(&mut conditions, t, "True", t, "", None, now);
        }
        w.status = Some(WorkloadStatus {
            conditions,
            admission: Some(Admission {
                cluster_queue: "cq".into(),
                pod_set_assignments: pod_sets
                    .iter()
                    .map(|p| PodSetAssignment {
                        name: p.name.clone(),
                        count: Some(p.count),
                        ..Default::default()
                    })
                    .collect(),
            }),
            ..Default::default()
        });
        w
    }

    fn pods(group: &str, cpus: i64, n: usize, gated: bool, finished: bool) -> Vec<PodView> {
        (0..n)
            .map(|i| PodView {
                name: format!("{group}-{cpus}-{i}-{gated}-{finished}"),
                group: group.into(),
                requests: cpu(cpus),
                created: Timestamp::from_second(1_767_225_600).unwrap(),
                gated,
                finished,
                deleted_at: None,
            })
            .collect()
    }

    fn counts(n: &Needed) -> Vec<(&str, i32)> {
        n.podsets
            .iter()
            .map(|p| (p.name.as_str(), p.count))
            .collect()
    }

    #[test]
    fn a_pod_past_its_grace_period_by_more_than_a_minute_is_stuck_and_still_holds() {
        let t = |s: i64| Timestamp::from_second(1_767_225_600 + s).unwrap();
        let mut ps = pods("w", 1, 4, false, false);
        ps[0].deleted_at = Some(t(0)); // grace period ended at t(0)
        ps[1].deleted_at = Some(t(30));
        let mut gated = pods("w", 1, 1, true, false);
        gated[0].deleted_at = Some(t(0));
        let mut done = pods("w", 1, 1, false, true);
        done[0].deleted_at = Some(t(0));
        ps.extend(gated.into_iter().chain(done));
        assert!(stuck(&ps, t(60)).is_empty(), "a minute is not past");
        assert_eq!(stuck(&ps, t(61)), vec![ps[0].name.as_str()]);
        assert_eq!(
            stuck(&ps, t(91)).len(),
            2,
            "gated and finished pods hold nothing"
        );
        // stuck pods keep their quota: they still count as holding
        assert!(ps[..2].iter().all(holds));
    }

    #[test]
    fn a_promoted_service_s_old_pods_keep_the_old_shape_charged_until_they_are_gone() {
        // during the upgrade: old workers of 8 CPU, new ones of 16, both charged
        let head = reserved(
            "svc-2",
            &[
                ("head", "headgroup", 1, None, 2),
                ("w", "w", 8, None, 2),
                ("w-16", "w", 16, None, 2),
            ],
        );
        // promoted: the old child is gone; only the new one is desired
        let want = [desired("head", "headgroup", 1, 1), desired("w", "w", 16, 2)];
        // the old child's head and workers still terminate
        let mut present = pods("headgroup", 1, 2, false, false);
        present.extend(pods("w", 8, 2, false, false));
        present.extend(pods("w", 16, 2, false, false));
        let n = needed(&want, std::slice::from_ref(&head), &present);
        assert_eq!(counts(&n), [("head", 2), ("w", 2), ("w", 2)]);
        assert_eq!(
            n.podsets[2].requests,
            cpu(8),
            "the old shape, from the slice"
        );
        assert_eq!(
            n.held_back,
            [
                HeldBack {
                    slice: "svc-2".into(),
                    podset: "head".into(),
                    group: "headgroup".into(),
                    desired: 1,
                    kept: 2
                },
                HeldBack {
                    slice: "svc-2".into(),
                    podset: "w".into(),
                    group: "w".into(),
                    desired: 0,
                    kept: 2
                },
            ]
        );
        // one old worker gone, the old head gone: only what still holds stays charged
        let mut fewer = pods("headgroup", 1, 1, false, false);
        fewer.extend(pods("w", 8, 1, false, false));
        fewer.extend(pods("w", 16, 2, false, false));
        let n = needed(&want, std::slice::from_ref(&head), &fewer);
        assert_eq!(counts(&n), [("head", 1), ("w", 2), ("w", 1)]);
        // all gone: the desired PodSets as they are
        let n = needed(
            &want,
            std::slice::from_ref(&head),
            &pods("w", 16, 2, false, false),
        );
        assert_eq!(n.podsets, want);
        assert!(n.held_back.is_empty());
    }

    #[test]
    fn a_scale_down_keeps_the_terminating_workers_charged_and_never_more_than_the_slice() {
        let head = reserved(
            "svc-1",
            &[("head", "headgroup", 1, None, 1), ("w", "w", 2, None, 6)],
        );
        let want = [desired("head", "headgroup", 1, 1), desired("w", "w", 2, 4)];
        let mut present = pods("headgroup", 1, 1, false, false);
        present.extend(pods("w", 2, 6, false, false));
        let n = needed(&want, std::slice::from_ref(&head), &present);
        assert_eq!(counts(&n), [("head", 1), ("w", 6)]);
        // 9 pods ungated for a slice of 6 (tampered): still 6, pods never make a scale-up
        present.extend(pods("w", 2, 3, false, true));
        present.extend(pods("x", 2, 3, false, false));
        let mut more = present.clone();
        more.extend(pods("w", 2, 3, false, false).into_iter().map(|mut p| {
            p.name.push_str("-extra");
            p
        }));
        let n = needed(&want, std::slice::from_ref(&head), &more);
        assert_eq!(counts(&n), [("head", 1), ("w", 6)]);
    }

    #[test]
    fn gated_and_finished_pods_hold_nothing_and_without_a_reserved_slice_nothing_changes() {
        let head = reserved("svc-1", &[("w", "w", 2, None, 4)]);
        let want = [desired("w", "w", 2, 1)];
        let mut present = pods("w", 2, 2, true, false);
        present.extend(pods("w", 2, 2, false, true));
        assert_eq!(
            counts(&needed(&want, std::slice::from_ref(&head), &present)),
            [("w", 1)]
        );
        let mut pending = head.clone();
        pending.status = None;
        let running = pods("w", 2, 4, false, false);
        assert_eq!(counts(&needed(&want, &[pending], &running)), [("w", 1)]);
    }

    #[test]
    fn a_group_moved_to_another_pool_keeps_the_old_pool_s_podset_while_its_pods_terminate() {
        // the old pool's PodSet is charged; the moved group is desired at pool b
        let head = reserved("svc-1", &[("w", "w", 2, Some("a"), 2)]);
        let mut moved = desired("w", "w", 2, 2);
        moved.template = template(2, Some("b"));
        let n = needed(
            std::slice::from_ref(&moved),
            std::slice::from_ref(&head),
            &pods("w", 2, 2, false, false),
        );
        // the new pool is not counted against the old pool's terminating pods
        assert_eq!(counts(&n), [("w", 2), ("w", 2)]);
        assert_eq!(
            n.podsets[1].placement(),
            Placement::of(&template(2, Some("a")))
        );
    }

    use crate::podsets::Placement;

    #[test]
    fn pods_of_a_deleted_child_belong_by_kuberay_s_cluster_name() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        let children = set(&["svc-ab12c"]);
        let known = set(&["svc-ab12c", "svc-zzzzz", "other-ab12c"]);
        assert!(belongs("svc", "svc-ab12c", &children, &known));
        // deleted in the background: gone from the store, pods still there
        assert!(belongs("svc", "svc-x7k2p", &children, &known));
        // an existing cluster that is not a child is someone else's
        assert!(!belongs("svc", "svc-zzzzz", &children, &known));
        // another RayService's clusters, whose name starts with ours
        assert!(!belongs("svc", "svc-a-x7k2p", &children, &known));
        assert!(!belongs("svc-a", "svc-x7k2p", &children, &known));
        assert!(!belongs("svc", "svc-X7K2P", &children, &known));
    }

    proptest! {
        /// Per head PodSet: never below what the children want, never above the head's count
        /// (unless the children want more), exactly the children's counts when no pod holds, and
        /// over a group and requests at least the holding pods (up to the head's total). PodSets
        /// the head does not name are untouched.
        #[test]
        fn between_the_desired_and_the_slice_and_covering_the_holding_pods(
            head_counts in prop::collection::vec(0i32..6, 3),
            want_counts in prop::collection::vec(0i32..6, 3),
            holding in prop::collection::vec(0usize..8, 3),
            extra_gated in 0usize..4,
        ) {
            let names = ["w1", "w2", "w4"];
            let cpus = [1i64, 2, 4];
            let sets: Vec<(&str, &str, i64, Option<&str>, i32)> = (0..3)
                .map(|i| (names[i], "w", cpus[i], None, head_counts[i]))
                .collect();
            let head = reserved("svc-1", &sets);
            let want: Vec<PodSet> = (0..3).map(|i| desired(names[i], "w", cpus[i], want_counts[i])).collect();
            let mut present: Vec<PodView> = (0..3).flat_map(|i| pods("w", cpus[i], holding[i], false, false)).collect();
            present.extend(pods("w", 1, extra_gated, true, false));
            let n = needed(&want, std::slice::from_ref(&head), &present);
            prop_assert_eq!(n.podsets.len(), 3);
            for i in 0..3 {
                let got = n.podsets[i].count;
                prop_assert!(got >= want_counts[i]);
                prop_assert!(got <= want_counts[i].max(head_counts[i]));
                prop_assert!(got >= (holding[i] as i32).min(head_counts[i]));
            }
            let none = needed(&want, std::slice::from_ref(&head), &[]);
            prop_assert_eq!(none.podsets, want);
        }
    }
}
