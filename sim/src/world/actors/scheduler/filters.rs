//! kube-scheduler's filter plugins on one node, in the default profile's order:
//! NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit, PodTopologySpread,
//! InterPodAffinity.

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};

use super::{
    DomainCounts, NodeInfo, PodInfo, R_AFFINITY, R_ANTI, R_EXISTING_ANTI, R_NODE_AFFINITY,
    R_SPREAD, R_SPREAD_LABEL, R_TOO_MANY_PODS, R_UNSCHEDULABLE, Spread, Term, UNSCHEDULABLE_TAINT,
};
use crate::world::actors::resources::Resources;

/// Whether one of `tols` tolerates `taint` (`Toleration.ToleratesTaint`).
pub(crate) fn tolerates(tols: &[Toleration], taint: &Taint) -> bool {
    tols.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key = t.key.as_deref().unwrap_or_default();
        let key_ok = key.is_empty() || key == taint.key;
        let value_ok = match t.operator.as_deref() {
            Some("Exists") => true,
            None | Some("") | Some("Equal") => {
                !key.is_empty()
                    && t.value.as_deref().unwrap_or_default()
                        == taint.value.as_deref().unwrap_or_default()
            }
            _ => false,
        };
        // an empty key with `Exists` tolerates everything
        effect_ok && key_ok && value_ok
    })
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let vals = r.values.as_deref().unwrap_or_default();
    let num = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| vals.contains(v)),
        "NotIn" => value.is_none_or(|v| !vals.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => match (
            value.and_then(|v| num(v)),
            vals.first().and_then(|v| num(v)),
        ) {
            (Some(a), Some(b)) => {
                if r.operator == "Gt" {
                    a > b
                } else {
                    a < b
                }
            }
            _ => false,
        },
        _ => false,
    }
}

fn term_matches(t: &NodeSelectorTerm, node: &NodeInfo) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false; // an empty term matches no objects
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, node.labels.get(&r.key)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(&node.name)))
}

/// nodeSelector and required node affinity (`NodeAffinity` filter).
pub(super) fn node_affinity_ok(pod: &Pod, node: &NodeInfo) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    selector_ok
        && required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term_matches(t, node)))
}

pub(super) fn untolerated_taint<'a>(tols: &[Toleration], node: &'a NodeInfo) -> Option<&'a Taint> {
    node.taints
        .iter()
        .find(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerates(tols, t))
}

/// NodeUnschedulable, TaintToleration and NodeAffinity: the first one's reason when `n` fails
/// one.
pub(super) fn node_filters(n: &NodeInfo, pod: &Pod, tols: &[Toleration]) -> Option<String> {
    // NodeUnschedulable
    if n.unschedulable {
        let t = Taint {
            key: UNSCHEDULABLE_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerates(tols, &t) {
            return Some(R_UNSCHEDULABLE.into());
        }
    }
    // TaintToleration
    if let Some(t) = untolerated_taint(tols, n) {
        return Some(format!(
            "node(s) had untolerated taint {{{}: {}}}",
            t.key,
            t.value.as_deref().unwrap_or_default()
        ));
    }
    // NodeAffinity
    if !node_affinity_ok(pod, n) {
        return Some(R_NODE_AFFINITY.into());
    }
    None
}

/// NodeResourcesFit: every reason `request` does not fit `n` (the `pods` count, then each
/// resource short).
pub(super) fn insufficient_resources(n: &NodeInfo, request: &Resources) -> Vec<String> {
    let mut insufficient = vec![];
    if let Some(max) = n.allocatable.get("pods")
        && (n.pods.len() as i128 + 1) * 1_000_000_000 > *max
    {
        insufficient.push(R_TOO_MANY_PODS.to_string());
    }
    for (r, want) in request {
        if *want == 0 {
            continue;
        }
        let have =
            n.allocatable.get(r).copied().unwrap_or(0) - n.requested.get(r).copied().unwrap_or(0);
        if *want > have {
            insufficient.push(format!("Insufficient {r}"));
        }
    }
    insufficient
}

/// PodTopologySpread (`DoNotSchedule`): the reason when `n` lacks a constraint's label or would
/// exceed its skew.
pub(super) fn topology_spread(n: &NodeInfo, spreads: &[Spread]) -> Option<&'static str> {
    if spreads.iter().any(|s| !n.labels.contains_key(&s.key)) {
        return Some(R_SPREAD_LABEL);
    }
    for s in spreads {
        let global_min = if (s.counts.len() as i64) < s.min_domains {
            0
        } else {
            s.counts.values().copied().min().unwrap_or(0)
        };
        let here = s.counts.get(&n.labels[&s.key]).copied().unwrap_or(0);
        if here + s.self_match - global_min > s.max_skew {
            return Some(R_SPREAD);
        }
    }
    None
}

/// InterPodAffinity: existing pods' anti-affinity, then the pod's, then its affinity; the reason
/// when `n` fails one.
pub(super) fn inter_pod_affinity(
    n: &NodeInfo,
    affinity: &[Term],
    me: &PodInfo,
    (affinity_counts, anti_counts, existing_anti): (&DomainCounts, &DomainCounts, &DomainCounts),
    matches_own_affinity: bool,
) -> Option<&'static str> {
    if n.labels.iter().any(|(k, v)| {
        existing_anti
            .get(&(k.clone(), v.clone()))
            .is_some_and(|c| *c > 0)
    }) {
        return Some(R_EXISTING_ANTI);
    }
    for t in &me.anti {
        if let Some(v) = n.labels.get(&t.topology_key)
            && anti_counts
                .get(&(t.topology_key.clone(), v.clone()))
                .is_some_and(|c| *c > 0)
        {
            return Some(R_ANTI);
        }
    }
    let mut pods_exist = true;
    for t in affinity {
        match n.labels.get(&t.topology_key) {
            None => return Some(R_AFFINITY),
            Some(v) => {
                if affinity_counts
                    .get(&(t.topology_key.clone(), v.clone()))
                    .is_none_or(|c| *c <= 0)
                {
                    pods_exist = false;
                }
            }
        }
    }
    // the first pod of a series with affinity to itself may go anywhere
    if !(pods_exist || affinity_counts.is_empty() && matches_own_affinity) {
        return Some(R_AFFINITY);
    }
    None
}
