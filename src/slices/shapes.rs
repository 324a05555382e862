//! PodSets by shape (KubeRay group, per-pod requests, placement): what a slice grants, desired
//! PodSets aligned with a chain's, and whether a slice covers them.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::GROUP_ANNOTATION;
use crate::podsets::{Placement, PodSet, pod_requests, shape_name};
use crate::quantity::Resources;
use crate::types::kueue::{self, Workload};

/// What makes PodSets the same for quota: KubeRay group, per-pod requests and placement (node
/// selector, tolerations), whatever the name.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Shape {
    pub group: String,
    pub requests: Resources,
    pub placement: Placement,
}

impl Shape {
    /// Whether the desired PodSet `p` has this shape.
    pub(crate) fn fits(&self, p: &PodSet) -> bool {
        self.group == p.group && self.requests == p.requests && self.placement == p.placement()
    }
}

/// The shape of a Workload PodSet (`None` when its template cannot be read). The template is the
/// user's (desired PodSets leave out what raygate injected, see [`crate::podsets::of_child`]).
pub(crate) fn shape(ps: &kueue::PodSet) -> Option<Shape> {
    let group = ps
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(GROUP_ANNOTATION))
        .cloned()
        .unwrap_or_else(|| ps.name.clone());
    let requests = match &ps.template.spec {
        Some(spec) => pod_requests(spec, "template.spec", &ps.name).ok()?,
        None => Resources::new(),
    };
    Some(Shape {
        group,
        requests,
        placement: Placement::of(&ps.template),
    })
}

/// What a slice grants one shape: `count` pods of KubeRay group `group`, each `requests`.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    pub group: String,
    pub requests: Resources,
    pub count: i32,
}

/// What an admitted slice grants, PodSet by PodSet: KubeRay group, per-pod requests and granted
/// count (for the pod ungater; a PodSet whose template cannot be read grants nothing).
pub fn grants(w: &Workload) -> Vec<Grant> {
    w.spec
        .pod_sets
        .iter()
        .filter_map(|ps| {
            shape(ps).map(|s| Grant {
                group: s.group,
                requests: s.requests,
                count: granted(w, ps),
            })
        })
        .collect()
}

/// Count a slice grants a PodSet: the admitted count capped by the spec count; 0 when unassigned.
fn granted(w: &Workload, ps: &kueue::PodSet) -> i32 {
    let admitted = w
        .status
        .as_ref()
        .and_then(|s| s.admission.as_ref())
        .and_then(|a| a.pod_set_assignments.iter().find(|p| p.name == ps.name))
        // An assignment without a count (older Kueue) grants the spec count; a PodSet with no
        // assignment, or a slice with no admission, grants nothing.
        .map(|p| p.count.unwrap_or(ps.count))
        .unwrap_or(0);
    admitted.min(ps.count)
}

/// A Workload PodSet for a desired PodSet: its template with metadata cut to labels and
/// annotations (all Kueue accepts there) plus the group annotation.
pub(super) fn workload_podset(p: &PodSet, name: &str) -> kueue::PodSet {
    let meta = p.template.metadata.clone().unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(GROUP_ANNOTATION.to_string(), p.group.clone());
    kueue::PodSet {
        name: name.to_string(),
        count: p.count,
        min_count: None,
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: meta.labels,
                annotations: Some(annotations),
                ..Default::default()
            }),
            spec: p.template.spec.clone(),
        },
    }
}

/// Desired PodSets renamed onto `chain`'s PodSets by shape (group, per-pod requests, placement),
/// in the chain's order; chain PodSets nothing matches follow with count 0; desired PodSets new
/// to the chain come last, under their own name or a shape-suffixed one when the chain uses that
/// name already.
pub(super) fn align(desired: &[PodSet], chain: &[kueue::PodSet]) -> Aligned {
    let chain_shapes: Vec<Option<Shape>> = chain.iter().map(shape).collect();
    let mut matched: Vec<Option<&PodSet>> = vec![None; chain.len()];
    let mut unmatched: Vec<&PodSet> = Vec::new();
    for d in desired {
        let slot = (0..chain.len())
            .find(|&i| matched[i].is_none() && chain_shapes[i].as_ref().is_some_and(|s| s.fits(d)));
        match slot {
            Some(i) => matched[i] = Some(d),
            None => unmatched.push(d),
        }
    }
    let mut out: Vec<kueue::PodSet> = chain
        .iter()
        .zip(&matched)
        .map(|(c, m)| match m {
            Some(d) => workload_podset(d, &c.name),
            None => kueue::PodSet {
                count: 0,
                ..c.clone()
            },
        })
        .collect();
    let leftover: Vec<bool> = matched.iter().map(Option::is_none).collect();
    let new = unmatched.len();
    for d in unmatched {
        let mut candidate = d.name.clone();
        for hex_len in [8, 16, 64] {
            if !out.iter().any(|o| o.name == candidate) {
                break;
            }
            candidate = shape_name(&d.name, d, hex_len);
        }
        out.push(workload_podset(d, &candidate));
    }
    Aligned {
        list: out,
        leftover,
        new,
    }
}

/// Desired PodSets laid onto a chain's list (see [`align`]).
pub(super) struct Aligned {
    pub(super) list: Vec<kueue::PodSet>,
    /// Per chain PodSet (a prefix of `list`): nothing desired matched it; it stays at count 0.
    pub(super) leftover: Vec<bool>,
    /// How many entries at the end of `list` are new to the chain.
    pub(super) new: usize,
}

impl Aligned {
    /// The list without the chain's leftovers (for slices whose PodSet list may change).
    pub(super) fn without_leftovers(self) -> Vec<kueue::PodSet> {
        let leftover = self.leftover;
        self.list
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !leftover.get(*i).copied().unwrap_or(false))
            .map(|(_, p)| p)
            .collect()
    }
}

#[cfg(test)]
pub(super) fn counts(list: &[kueue::PodSet]) -> Vec<(&str, i32)> {
    list.iter().map(|p| (p.name.as_str(), p.count)).collect()
}

/// `stored` with each PodSet's count taken from `counts` (same order and length), nothing else
/// changed.
pub(super) fn scaled_down(
    stored: &[kueue::PodSet],
    counts: &[kueue::PodSet],
) -> Vec<kueue::PodSet> {
    stored
        .iter()
        .zip(counts)
        .map(|(s, c)| kueue::PodSet {
            count: c.count.min(s.count),
            ..s.clone()
        })
        .collect()
}

/// Same names, counts and shapes (group, per-pod requests, placement), in order.
pub(super) fn same_podsets(a: &[kueue::PodSet], b: &[kueue::PodSet]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.name == y.name && x.count == y.count && shape(x) == shape(y))
}

/// Whether `w`, once admitted, grants every desired pod: each desired PodSet matches one of its
/// PodSets by shape (group, per-pod requests, placement) with a granted count at least as large. This is the
/// gate's shape-exact race guard.
pub fn covers(w: &Workload, desired: &[PodSet]) -> bool {
    let aligned = align(desired, &w.spec.pod_sets);
    aligned.new == 0
        && aligned
            .list
            .iter()
            .zip(&w.spec.pod_sets)
            .all(|(a, have)| a.count <= granted(w, have))
}
