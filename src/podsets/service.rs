//! PodSets of a RayService: the union of its live children.

use sha2::{Digest, Sha256};

use super::{MAX_PODSETS, PodSet, PodSetError, of_child, of_cluster};
use crate::meta;
use crate::types::ray::{RayCluster, RayService};

/// Where a RayService's PodSets came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Its live child RayClusters.
    Children,
    /// `spec.rayClusterConfig`: no child exists yet (bootstrap).
    Template,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Children => "children",
            Source::Template => "template",
        })
    }
}

/// The PodSets of one RayService and what they were computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct ServicePodSets {
    pub source: Source,
    /// Child names, oldest first.
    pub children: Vec<String>,
    pub podsets: Vec<PodSet>,
}

/// The children of `service` among `clusters`: same namespace, labelled
/// `ray.io/originated-from-cr-name=<name>` and `ray.io/originated-from-crd=RayService`.
/// Oldest first (creation time, then the active child, then name).
pub fn children_of<'a>(
    service: &RayService,
    clusters: impl IntoIterator<Item = &'a RayCluster>,
) -> Vec<&'a RayCluster> {
    let ns = service.metadata.namespace.as_deref();
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let active = service
        .status
        .as_ref()
        .and_then(|s| s.active_service_status.as_ref())
        .and_then(|a| a.ray_cluster_name.as_deref());
    let mut out: Vec<&RayCluster> = clusters
        .into_iter()
        .filter(|c| {
            c.metadata.namespace.as_deref() == ns
                && meta::owning_rayservice(&c.metadata) == Some(name)
        })
        .collect();
    out.sort_by_key(|c| {
        let n = c.metadata.name.as_deref().unwrap_or_default();
        (
            c.metadata.creation_timestamp.as_ref().map(|t| t.0),
            Some(n) != active,
            n.to_string(),
        )
    });
    out
}

fn object_name(kind: &str, meta: &kube::api::ObjectMeta) -> String {
    format!(
        "{kind} {}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// A deterministic DNS-safe name for a PodSet whose per-pod requests or placement differ from
/// the plain one's. The hash covers the requests, and the placement when there is one (so names
/// of PodSets without placement are what they were before placement was part of the shape).
pub(crate) fn shape_name(base: &str, podset: &PodSet, hex_len: usize) -> String {
    let mut h = Sha256::new();
    for (k, v) in podset.requests.iter() {
        h.update(k.as_bytes());
        h.update(b"=");
        h.update(v.nanos().to_string().as_bytes());
        h.update(b";");
    }
    let placement = podset.placement();
    if !placement.is_empty() {
        h.update(b"|nodeSelector:");
        for (k, v) in &placement.node_selector {
            h.update(k.as_bytes());
            h.update(b"=");
            h.update(v.as_bytes());
            h.update(b";");
        }
        h.update(b"|tolerations:");
        for t in &placement.tolerations {
            h.update(t.as_bytes());
            h.update(b";");
        }
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let suffix = &hex[..hex_len];
    let keep = 63 - 1 - hex_len;
    let stem = if base.len() > keep {
        base[..keep].trim_end_matches('-')
    } else {
        base
    };
    format!("{stem}-{suffix}")
}

/// The PodSets a RayService needs now, from its `children` (see [`children_of`]).
///
/// No child: the PodSets of `spec.rayClusterConfig`. Otherwise the union by PodSet name with
/// counts summed; when children give one name different per-pod requests (a resource-changing
/// upgrade) or a different placement (node selector, tolerations: a move to another pool), each
/// distinct shape gets its own PodSet: the oldest child's keeps the plain name, others get a
/// suffix from a hash of their requests and placement. A child's templates are read without
/// what raygate injected into them ([`of_child`]). Order: head, the oldest child's groups, then
/// new ones in order of appearance. A child being deleted still counts.
pub fn of_service(
    service: &RayService,
    children: &[&RayCluster],
) -> Result<ServicePodSets, PodSetError> {
    let svc = object_name("RayService", &service.metadata);
    if children.is_empty() {
        let podsets = of_cluster(
            &service.spec.ray_cluster_config,
            service.metadata.annotations.as_ref(),
            &svc,
            "spec.rayClusterConfig",
        )?;
        return Ok(ServicePodSets {
            source: Source::Template,
            children: vec![],
            podsets,
        });
    }
    let mut out: Vec<PodSet> = Vec::new();
    for child in children {
        let obj = object_name("RayCluster", &child.metadata);
        for p in of_child(child, &obj)? {
            merge_podset(&mut out, p, &svc, &obj)?;
        }
    }
    if out.len() > MAX_PODSETS {
        return Err(PodSetError::TooManyPodSets {
            object: svc,
            count: out.len(),
            max: MAX_PODSETS,
        });
    }
    Ok(ServicePodSets {
        source: Source::Children,
        children: children
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect(),
        podsets: out,
    })
}

/// Adds one child's PodSet `p` to the union `out`: summed into the PodSet of the same name and
/// shape (group, per-pod requests, placement), or under a shape-suffixed name when the name's
/// shape differs.
fn merge_podset(out: &mut Vec<PodSet>, p: PodSet, svc: &str, obj: &str) -> Result<(), PodSetError> {
    let mut name = p.name.clone();
    for hex_len in [8, 16, 64] {
        match out.iter().find(|o| o.name == name) {
            Some(o) if !o.same_shape(&p) => name = shape_name(&p.name, &p, hex_len),
            _ => break,
        }
    }
    match out.iter_mut().find(|o| o.name == name) {
        Some(o) if o.same_shape(&p) => {
            o.count = o
                .count
                .checked_add(p.count)
                .ok_or_else(|| PodSetError::CountOverflow {
                    object: svc.to_string(),
                    field: format!("podSets[{name}].count"),
                })?;
        }
        Some(_) => {
            return Err(PodSetError::InvalidGroupName {
                object: obj.to_string(),
                field: "spec.workerGroupSpecs".into(),
                name: p.group,
                reason: "its shape-suffixed PodSet name collides with another group".into(),
            });
        }
        None => out.push(PodSet { name, ..p }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podsets::total;
    use crate::quantity::{Quantity, Resources};
    use crate::types::ray::{ORIGINATED_FROM_CR_NAME_LABEL, ORIGINATED_FROM_CRD_LABEL};
    use proptest::prelude::*;
    use raygate_testing::{PodTemplateBuilder, ray_pod};
    use serde_json::json;

    fn service() -> RayService {
        serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "namespace": "ns"},
            "spec": {"rayClusterConfig": {"headGroupSpec": {"template": ray_pod("1").request("memory", "1Gi")},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 0, "maxReplicas": 4, "template": ray_pod("4").request("memory", "8Gi")}]}}
        }))
        .unwrap()
    }

    fn child(name: &str, created: &str, head_cpu: &str, groups: serde_json::Value) -> RayCluster {
        serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
                "labels": {"ray.io/originated-from-cr-name": "svc", "ray.io/originated-from-crd": "RayService"}},
            "spec": {"headGroupSpec": {"template": ray_pod(head_cpu).request("memory", "1Gi")}, "workerGroupSpecs": groups}
        }))
        .unwrap()
    }

    fn g(name: &str, replicas: i32, cpu: &str) -> serde_json::Value {
        json!({"groupName": name, "replicas": replicas, "minReplicas": 0, "maxReplicas": 100, "template": ray_pod(cpu).request("memory", "8Gi")})
    }

    #[test]
    fn no_child_bootstraps_from_the_template() {
        let s = of_service(&service(), &[]).unwrap();
        assert_eq!(s.source, Source::Template);
        assert_eq!(
            s.podsets
                .iter()
                .map(|p| (p.name.as_str(), p.count))
                .collect::<Vec<_>>(),
            [("head", 1), ("gpu", 2)]
        );
    }

    #[test]
    fn only_labelled_children_in_the_namespace_count() {
        let mine = child("svc-aaaaa", "2026-01-01T00:00:00Z", "1", json!([]));
        let mut other_ns = mine.clone();
        other_ns.metadata.namespace = Some("elsewhere".into());
        let mut other_svc = mine.clone();
        other_svc
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(ORIGINATED_FROM_CR_NAME_LABEL.into(), "svc2".into());
        let mut rayjob = mine.clone();
        rayjob
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(ORIGINATED_FROM_CRD_LABEL.into(), "RayJob".into());
        let mut unlabelled = mine.clone();
        unlabelled.metadata.labels = None;
        let all = [other_ns, mine, other_svc, rayjob, unlabelled];
        let kids = children_of(&service(), &all);
        assert_eq!(kids.len(), 1);
        assert_eq!(kids[0].metadata.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn two_children_sum_counts_by_name_oldest_first() {
        let new = child(
            "svc-bbbbb",
            "2026-01-02T00:00:00Z",
            "1",
            json!([g("gpu", 2, "4"), g("extra", 1, "1")]),
        );
        let old = child(
            "svc-aaaaa",
            "2026-01-01T00:00:00Z",
            "1",
            json!([g("gpu", 3, "4")]),
        );
        let all = [new, old];
        let kids = children_of(&service(), &all);
        let s = of_service(&service(), &kids).unwrap();
        assert_eq!(s.source, Source::Children);
        assert_eq!(s.children, ["svc-aaaaa", "svc-bbbbb"]);
        assert_eq!(
            s.podsets
                .iter()
                .map(|p| (p.name.as_str(), p.count))
                .collect::<Vec<_>>(),
            [("head", 2), ("gpu", 5), ("extra", 1)]
        );
        assert_eq!(total(&s.podsets).get("cpu"), Quantity::parse("23").unwrap());
    }

    #[test]
    fn a_resource_changing_upgrade_keeps_exact_shapes() {
        let old = child(
            "svc-aaaaa",
            "2026-01-01T00:00:00Z",
            "1",
            json!([g("gpu", 2, "4")]),
        );
        let new = child(
            "svc-bbbbb",
            "2026-01-02T00:00:00Z",
            "2",
            json!([g("gpu", 2, "8")]),
        );
        let all = [old, new];
        let kids = children_of(&service(), &all);
        let s = of_service(&service(), &kids).unwrap();
        let names: Vec<_> = s.podsets.iter().map(|p| p.name.clone()).collect();
        assert_eq!(names.len(), 4, "{names:?}");
        assert_eq!(names[0], "head");
        assert_eq!(names[1], "gpu");
        assert!(
            names[2].starts_with("head-") && names[3].starts_with("gpu-"),
            "{names:?}"
        );
        assert_eq!(s.podsets[3].group, "gpu");
        // 1 + 2×4 + 2 + 2×8 = 27 CPU, exactly
        assert_eq!(total(&s.podsets).get("cpu"), Quantity::parse("27").unwrap());
        // deterministic
        assert_eq!(of_service(&service(), &kids).unwrap(), s);
    }

    /// Issue #9 (a): an upgrade that only moves a worker group to another GPU pool (node
    /// selector, tolerations) gives a PodSet of its own; the head, unmoved, is summed.
    #[test]
    fn a_group_moved_to_another_pool_is_a_podset_of_its_own() {
        let on_pool = |pool: Option<&str>| {
            let mut v = g("gpu", 2, "4");
            if let Some(pool) = pool {
                v["template"]["spec"]["nodeSelector"] = json!({"gpu-pool": pool});
                v["template"]["spec"]["tolerations"] = json!([{"key": "gpu-pool", "operator": "Equal", "value": pool, "effect": "NoSchedule"}]);
            }
            v
        };
        let podsets = |old: Option<&str>, new: Option<&str>| {
            let all = [
                child(
                    "svc-aaaaa",
                    "2026-01-01T00:00:00Z",
                    "1",
                    json!([on_pool(old)]),
                ),
                child(
                    "svc-bbbbb",
                    "2026-01-02T00:00:00Z",
                    "1",
                    json!([on_pool(new)]),
                ),
            ];
            of_service(&service(), &children_of(&service(), &all))
                .unwrap()
                .podsets
        };
        for (old, new) in [(None, Some("b")), (Some("a"), Some("b")), (Some("a"), None)] {
            let ps = podsets(old, new);
            let names: Vec<_> = ps.iter().map(|p| (p.name.as_str(), p.count)).collect();
            assert_eq!(names.len(), 3, "{old:?} → {new:?}: {names:?}");
            assert_eq!(names[..2], [("head", 2), ("gpu", 2)]);
            assert!(
                names[2].0.starts_with("gpu-") && names[2].1 == 2,
                "{names:?}"
            );
            assert_eq!(ps[2].placement(), on_pool_placement(new));
        }
        // the same pool on both: one PodSet
        let same = podsets(Some("a"), Some("a"));
        assert_eq!(same.len(), 2);
        assert_eq!(same[1].count, 4);
        // different pools give different suffixes (the hash covers the placement)
        assert_ne!(
            podsets(None, Some("b"))[2].name,
            podsets(None, Some("c"))[2].name
        );
        // no placement: the suffix is what it was before placement counted: sha256 of
        // "cpu=8000000000;memory=8589934592000000000;" (requests only)
        let resized = [
            child(
                "svc-aaaaa",
                "2026-01-01T00:00:00Z",
                "1",
                json!([g("gpu", 1, "4")]),
            ),
            child(
                "svc-bbbbb",
                "2026-01-02T00:00:00Z",
                "1",
                json!([g("gpu", 1, "8")]),
            ),
        ];
        let s = of_service(&service(), &children_of(&service(), &resized)).unwrap();
        assert_eq!(s.podsets[2].name, "gpu-2de72b11");
    }

    fn on_pool_placement(pool: Option<&str>) -> crate::podsets::Placement {
        let mut t: k8s_openapi::api::core::v1::PodTemplateSpec =
            serde_json::from_value(json!({"spec": {"containers": []}})).unwrap();
        if let Some(pool) = pool {
            let spec = t.spec.as_mut().unwrap();
            spec.node_selector = Some([("gpu-pool".to_string(), pool.to_string())].into());
            spec.tolerations = Some(vec![serde_json::from_value(
                json!({"key": "gpu-pool", "operator": "Equal", "value": pool, "effect": "NoSchedule"}),
            ).unwrap()]);
        }
        crate::podsets::Placement::of(&t)
    }

    #[test]
    fn a_long_group_name_gets_a_dns_safe_suffix() {
        let long = "g".repeat(63);
        let old = child(
            "svc-aaaaa",
            "2026-01-01T00:00:00Z",
            "1",
            json!([g(&long, 1, "4")]),
        );
        let new = child(
            "svc-bbbbb",
            "2026-01-02T00:00:00Z",
            "1",
            json!([g(&long, 1, "8")]),
        );
        let all = [old, new];
        let s = of_service(&service(), &children_of(&service(), &all)).unwrap();
        let suffixed = &s.podsets[2].name;
        assert!(
            suffixed.len() <= 63 && crate::podsets::dns_label_error(suffixed).is_none(),
            "{suffixed}"
        );
    }

    #[test]
    fn a_child_being_deleted_still_counts() {
        let mut old = child(
            "svc-aaaaa",
            "2026-01-01T00:00:00Z",
            "1",
            json!([g("gpu", 2, "4")]),
        );
        old.metadata.deletion_timestamp = old.metadata.creation_timestamp.clone();
        let new = child(
            "svc-bbbbb",
            "2026-01-02T00:00:00Z",
            "1",
            json!([g("gpu", 2, "4")]),
        );
        let all = [old, new];
        let s = of_service(&service(), &children_of(&service(), &all)).unwrap();
        assert_eq!(s.podsets[1].count, 4);
    }

    #[test]
    fn too_many_distinct_podsets_are_rejected() {
        let old_groups: Vec<_> = (0..10).map(|i| g(&format!("g{i}"), 1, "1")).collect();
        let new_groups: Vec<_> = (0..10).map(|i| g(&format!("g{i}"), 1, "2")).collect();
        let all = [
            child("svc-aaaaa", "2026-01-01T00:00:00Z", "1", json!(old_groups)),
            child("svc-bbbbb", "2026-01-02T00:00:00Z", "1", json!(new_groups)),
        ];
        let err = of_service(&service(), &children_of(&service(), &all)).unwrap_err();
        assert!(
            matches!(err, PodSetError::TooManyPodSets { count: 21, .. }),
            "{err}"
        );
    }

    fn exact_total(c: &RayCluster) -> Resources {
        total(&of_cluster(&c.spec, None, "c", "spec").unwrap())
    }

    proptest! {
        #[test]
        fn totals_are_exact_for_any_children(
            kids in prop::collection::vec(
                (1u32..4000, prop::collection::vec((0usize..4, 0i32..5, 1u32..9000, 1i32..3), 0..4)),
                1..4)
        ) {
            let clusters: Vec<RayCluster> = kids.iter().enumerate().map(|(i, (head_milli, groups))| {
                let mut seen = std::collections::BTreeSet::new();
                let groups: Vec<_> = groups.iter().filter(|(gi, ..)| seen.insert(*gi)).map(|(gi, r, milli, hosts)| {
                    let mut v = g(&format!("grp{gi}"), *r, &format!("{milli}m"));
                    v["numOfHosts"] = json!(hosts);
                    v
                }).collect();
                child(&format!("svc-{i:05}"), &format!("2026-01-0{}T00:00:00Z", i + 1), &format!("{head_milli}m"), json!(groups))
            }).collect();
            let refs = children_of(&service(), &clusters);
            let s = of_service(&service(), &refs).unwrap();
            let mut want = Resources::new();
            for c in &clusters { want.add(&exact_total(c)); }
            let got = total(&s.podsets);
            for name in ["cpu", "memory"] {
                prop_assert_eq!(got.get(name), want.get(name));
            }
            // every PodSet name is unique and a DNS label
            let mut names = std::collections::BTreeSet::new();
            for p in &s.podsets {
                prop_assert!(names.insert(p.name.clone()));
                prop_assert!(crate::podsets::dns_label_error(&p.name).is_none());
            }
        }
    }
}
