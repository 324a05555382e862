//! `getExpectedPodCount`: `expectedPods` and `desiredHealthy` from `minAvailable` or
//! `maxUnavailable`, through the scale of the pods' controllers (the finders, in Kubernetes'
//! order).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{ScaleAnswer, Workloads};

pub(super) fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

pub(super) fn controller_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

fn is_kind(r: &OwnerReference, kind: &str, groups: &[&str]) -> bool {
    r.kind == kind && groups.contains(&group_of(&r.api_version))
}

/// The finders in Kubernetes' order (`finders()`): ReplicationController (not served by the
/// sim), Deployment through its ReplicaSet, a ReplicaSet no Deployment controls, StatefulSet,
/// then the `scale` subresource. `Ok(None)`: this reference resolves to no controller.
pub fn controller_scale(
    r: &OwnerReference,
    ns: &str,
    w: &Workloads,
) -> Result<Option<(String, i32)>, String> {
    let in_ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, name: &str| {
        m.namespace.as_deref() == Some(ns) && m.name.as_deref() == Some(name)
    };
    if is_kind(r, "ReplicaSet", &["apps", "extensions"])
        && let Some(rs) = w
            .replicasets
            .iter()
            .find(|rs| in_ns(&rs.metadata, &r.name) && rs.metadata.uid.as_deref() == Some(&r.uid))
    {
        let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        match controller_of(&rs.metadata) {
            // getPodDeployment
            Some(d) if is_kind(d, "Deployment", &["apps", "extensions"]) => {
                return Ok(w
                    .deployments
                    .iter()
                    .find(|x| {
                        in_ns(&x.metadata, &d.name) && x.metadata.uid.as_deref() == Some(&d.uid)
                    })
                    .map(|x| {
                        let n = x.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                        (d.uid.clone(), n)
                    }));
            }
            // getPodReplicaSet skips a ReplicaSet controlled by a Deployment of another group
            Some(d) if d.kind == "Deployment" => {}
            _ => return Ok(Some((r.uid.clone(), replicas))),
        }
    }
    if is_kind(r, "StatefulSet", &["apps"])
        && let Some(ss) = w
            .statefulsets
            .iter()
            .find(|s| in_ns(&s.metadata, &r.name) && s.metadata.uid.as_deref() == Some(&r.uid))
    {
        let n = ss.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        return Ok(Some((r.uid.clone(), n)));
    }
    match w.scales.get(&(
        ns.to_string(),
        r.api_version.clone(),
        r.kind.clone(),
        r.name.clone(),
    )) {
        Some(ScaleAnswer::Scale { uid, replicas }) if *uid == r.uid => {
            Ok(Some((uid.clone(), *replicas)))
        }
        Some(ScaleAnswer::Error(e)) => Err(e.clone()),
        _ => Ok(None),
    }
}

/// `getExpectedScale`: Σ scale over the pods' distinct controllers; pods without a controller
/// are unmanaged (returned, not an error).
pub fn expected_scale(pods: &[Pod], ns: &str, w: &Workloads) -> Result<(i32, Vec<String>), String> {
    let mut scales: BTreeMap<String, i32> = BTreeMap::new();
    let mut unmanaged = vec![];
    for pod in pods {
        let Some(r) = controller_of(&pod.metadata) else {
            unmanaged.push(pod.name_any());
            continue;
        };
        if scales.contains_key(&r.uid) {
            continue;
        }
        match controller_scale(r, ns, w)? {
            Some((uid, n)) => {
                scales.insert(uid, n);
            }
            None => return Err(format!("found no controllers for pod {:?}", pod.name_any())),
        }
    }
    Ok((scales.values().sum(), unmanaged))
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
pub fn scaled_value(v: &IntOrString, total: i32) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(num) = s.strip_suffix('%') else {
                return Err(
                    "invalid value for IntOrString: invalid type: string is not a percentage"
                        .into(),
                );
            };
            let pct: i64 = num
                .parse()
                .map_err(|e| format!("invalid value for IntOrString: invalid value {s:?}: {e}"))?;
            let scaled = (pct * i64::from(total) + 99).div_euclid(100);
            Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
        }
    }
}

/// `getExpectedPodCount`: (expectedPods, desiredHealthy, unmanaged pods).
pub fn expected_pod_count(
    pdb: &PodDisruptionBudget,
    pods: &[Pod],
    w: &Workloads,
) -> Result<(i32, i32, Vec<String>), String> {
    let ns = pdb.namespace().unwrap_or_default();
    let spec = pdb.spec.clone().unwrap_or_default();
    if let Some(max) = &spec.max_unavailable {
        let (expected, unmanaged) = expected_scale(pods, &ns, w)?;
        let max = scaled_value(max, expected)?;
        return Ok((expected, (expected - max).max(0), unmanaged));
    }
    match &spec.min_available {
        Some(IntOrString::Int(min)) => Ok((pods.len() as i32, *min, vec![])),
        Some(min @ IntOrString::String(_)) => {
            let (expected, unmanaged) = expected_scale(pods, &ns, w)?;
            Ok((expected, scaled_value(min, expected)?, unmanaged))
        }
        None => Ok((0, 0, vec![])),
    }
}
