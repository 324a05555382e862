//! PodDisruptionBudgets: which budgets select a pod (as the Eviction API finds them), and what a
//! budget tolerates (as the disruption controller computes it).
//!
//! The index keeps, per namespace, each budget under one of its `matchLabels` pairs (or, with
//! none, under each value of one `In` requirement), so a pod is checked only against the budgets
//! that could select it (no scan of every budget per pod), and then only against the rest of the
//! selector (the pair it was found by already holds). Its maps hash with foldhash: a pod's every
//! label pair is looked up, and SipHash over those strings was the plan's largest cost at 100,000
//! pods.

use super::FastMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::namespace;
use crate::labels::Selector;

/// `DisruptionAllowed=False` with this reason: the disruption controller could not compute the
/// budget (e.g. no scale subresource) and set `disruptionsAllowed` to 0.
pub const SYNC_FAILED: &str = "SyncFailed";

pub(super) struct IndexedPdb<'a> {
    pub pdb: &'a PodDisruptionBudget,
    /// The whole selector, for a budget found without its index key (unkeyed).
    selector: Selector,
    /// The selector without the requirement its index key already satisfies.
    rest: Selector,
}

impl<'a> IndexedPdb<'a> {
    pub fn name(&self) -> &'a str {
        super::name(&self.pdb.metadata)
    }
}

#[derive(Default)]
struct NamespacePdbs<'a> {
    by_label: FastMap<(&'a str, &'a str), Vec<usize>>,
    unkeyed: Vec<usize>,
}

/// Budgets by namespace and by one of their `matchLabels` pairs.
pub(super) struct PdbIndex<'a> {
    pdbs: Vec<IndexedPdb<'a>>,
    namespaces: FastMap<&'a str, NamespacePdbs<'a>>,
    /// Budgets whose selector does not parse (the Eviction API skips them): `ns/name`.
    pub invalid: Vec<String>,
}

impl<'a> PdbIndex<'a> {
    pub fn new(pdbs: &'a [PodDisruptionBudget]) -> Self {
        let mut index = PdbIndex {
            pdbs: Vec::with_capacity(pdbs.len()),
            namespaces: FastMap::default(),
            invalid: Vec::new(),
        };
        for pdb in pdbs {
            index.add(pdb);
        }
        index
    }

    fn add(&mut self, pdb: &'a PodDisruptionBudget) {
        // A nil selector selects nothing (policy/v1); such a budget can be left out.
        let Some(spec_selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            return;
        };
        let Ok(selector) = Selector::from_label_selector(spec_selector, "spec.selector") else {
            self.invalid.push(crate::meta::key(&pdb.metadata));
            return;
        };
        let slot = self.pdbs.len();
        let ns = self.namespaces.entry(namespace(&pdb.metadata)).or_default();
        // a pod found under (key, value) has that label: the rest of the selector decides
        let mut rest = spec_selector.clone();
        if let Some((k, v)) = spec_selector.match_labels.iter().flatten().next() {
            ns.by_label.entry((k, v)).or_default().push(slot);
            rest.match_labels.iter_mut().for_each(|m| {
                m.remove(k);
            });
        } else if let Some((i, e)) = spec_selector
            .match_expressions
            .iter()
            .flatten()
            .enumerate()
            .find(|(_, e)| e.operator == "In")
        {
            let values: std::collections::BTreeSet<&str> =
                e.values.iter().flatten().map(String::as_str).collect();
            for v in values {
                ns.by_label.entry((&e.key, v)).or_default().push(slot);
            }
            if let Some(es) = rest.match_expressions.as_mut() {
                es.remove(i);
            }
        } else {
            ns.unkeyed.push(slot);
        }
        // the rest parses: it is the checked selector less one requirement
        let rest = Selector::from_label_selector(&rest, "spec.selector")
            .unwrap_or_else(|_| selector.clone());
        self.pdbs.push(IndexedPdb {
            pdb,
            selector,
            rest,
        });
    }

    /// Calls `f` with every budget selecting `pod`, unordered: the namespace's budgets keyed by
    /// one of the pod's label pairs (checked against the rest of their selector), then the
    /// unkeyed ones.
    fn each_selecting<'s>(&'s self, pod: &Pod, mut f: impl FnMut(&'s IndexedPdb<'a>)) {
        let Some(ns) = self.namespaces.get(namespace(&pod.metadata)) else {
            return;
        };
        let labels = pod.metadata.labels.as_ref();
        for (k, v) in labels.into_iter().flatten() {
            for &slot in ns
                .by_label
                .get(&(k.as_str(), v.as_str()))
                .into_iter()
                .flatten()
            {
                let p = &self.pdbs[slot];
                if p.rest.matches(labels) {
                    f(p);
                }
            }
        }
        for &slot in &ns.unkeyed {
            let p = &self.pdbs[slot];
            if p.selector.matches(labels) {
                f(p);
            }
        }
    }

    /// The first budget selecting `pod` (by name) and how many do: the plan's common case, with
    /// no list built.
    pub fn first_matching(&self, pod: &Pod) -> (Option<&IndexedPdb<'a>>, usize) {
        let mut first: Option<&IndexedPdb<'a>> = None;
        let mut count = 0;
        self.each_selecting(pod, |p| {
            count += 1;
            if first.is_none_or(|f| p.name() < f.name()) {
                first = Some(p);
            }
        });
        (first, count)
    }

    /// The budgets selecting `pod`, by name.
    pub fn matching(&self, pod: &Pod) -> Vec<&IndexedPdb<'a>> {
        let mut found: Vec<&IndexedPdb> = Vec::new();
        self.each_selecting(pod, |p| found.push(p));
        if found.len() > 1 {
            found.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        }
        found
    }
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`; `None` for a malformed
/// percentage.
pub(super) fn scaled(value: &IntOrString, total: i64) -> Option<i64> {
    match value {
        IntOrString::Int(n) => Some(i64::from(*n)),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * total + 99).div_euclid(100))
        }
    }
}

/// Whether the budget's expected count comes from the pods' controllers' scale (so a controller
/// without a scale subresource makes the controller fail): `maxUnavailable`, or a percentage
/// `minAvailable`.
pub(super) fn needs_scale(pdb: &PodDisruptionBudget) -> bool {
    let Some(spec) = pdb.spec.as_ref() else {
        return false;
    };
    spec.max_unavailable.is_some() || matches!(spec.min_available, Some(IntOrString::String(_)))
}

/// `(expectedPods, desiredHealthy)` as the disruption controller computes them when every
/// selected pod's controller scale equals its pods (`pods` selected, all managed). A budget with
/// neither field expects 0 pods, so it never allows a disruption.
pub(super) fn expected_and_desired(pdb: &PodDisruptionBudget, pods: i64) -> Option<(i64, i64)> {
    let spec = pdb.spec.as_ref()?;
    if let Some(max) = &spec.max_unavailable {
        return Some((pods, (pods - scaled(max, pods)?).max(0)));
    }
    match &spec.min_available {
        Some(min) => Some((pods, scaled(min, pods)?)),
        None => Some((0, 0)),
    }
}

/// The observed status when the disruption controller has processed the current spec and did
/// not fail: `(expectedPods, desiredHealthy)`.
pub(super) fn observed(pdb: &PodDisruptionBudget) -> Option<(i64, i64)> {
    let status = pdb.status.as_ref()?;
    let current = status.observed_generation.is_some()
        && status.observed_generation == pdb.metadata.generation;
    (current && sync_failed(pdb).is_none()).then(|| {
        (
            i64::from(status.expected_pods.unwrap_or_default()),
            i64::from(status.desired_healthy.unwrap_or_default()),
        )
    })
}

/// The message of a `DisruptionAllowed=False/SyncFailed` condition.
pub(super) fn sync_failed(pdb: &PodDisruptionBudget) -> Option<&str> {
    pdb.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed" && c.status == "False" && c.reason == SYNC_FAILED)
        .map(|c| c.message.as_str())
}

/// How many selected pods may be disrupted at once when all are healthy: expected − desired,
/// from the observed status when current, else from the spec over `pods` selected pods.
pub(super) fn tolerated(pdb: &PodDisruptionBudget, pods: i64) -> Option<i64> {
    let (expected, desired) = observed(pdb).or_else(|| expected_and_desired(pdb, pods))?;
    Some(if expected <= 0 {
        0
    } else {
        (expected - desired).max(0)
    })
}

/// The budget's spec in kubectl's words (`minAvailable: 2`, `maxUnavailable: 10%`).
pub(super) fn describe_spec(pdb: &PodDisruptionBudget) -> String {
    let show = |v: &IntOrString| match v {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    let spec = pdb.spec.as_ref();
    match (
        spec.and_then(|s| s.min_available.as_ref()),
        spec.and_then(|s| s.max_unavailable.as_ref()),
    ) {
        (_, Some(max)) => format!("maxUnavailable: {}", show(max)),
        (Some(min), None) => format!("minAvailable: {}", show(min)),
        (None, None) => "neither minAvailable nor maxUnavailable".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use raygate_testing::core::{PdbExt, PodExt, pdb, pod};

    #[test]
    fn a_budget_found_by_its_index_key_still_checks_the_rest_of_its_selector() {
        let expr = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let pdbs = [
            pdb("ns/leaders", &[("app", "x"), ("role", "leader")]),
            pdb("ns/by-expr", &[]).selector(Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![
                    expr("app", "In", &["y", "z", "y"]),
                    expr("tier", "NotIn", &["cache"]),
                ]),
            })),
        ];
        let index = PdbIndex::new(&pdbs);
        let names = |p: &Pod| {
            let (first, count) = index.first_matching(p);
            let all: Vec<&str> = index.matching(p).iter().map(|b| b.name()).collect();
            assert_eq!(count, all.len());
            assert_eq!(first.map(|b| b.name()), all.first().copied());
            all
        };
        let p = |labels: &[(&str, &str)]| {
            labels
                .iter()
                .fold(pod("ns/p", "n1"), |p, (k, v)| p.label(k, v))
        };
        assert_eq!(names(&p(&[("app", "x"), ("role", "leader")])), ["leaders"]);
        assert!(names(&p(&[("app", "x"), ("role", "worker")])).is_empty());
        assert!(names(&p(&[("role", "leader")])).is_empty());
        assert_eq!(
            names(&p(&[("app", "y")])),
            ["by-expr"],
            "once, not per listed value"
        );
        assert_eq!(names(&p(&[("app", "z"), ("tier", "web")])), ["by-expr"]);
        assert!(names(&p(&[("app", "z"), ("tier", "cache")])).is_empty());
        assert!(names(&p(&[("app", "w")])).is_empty());
    }

    #[test]
    fn percentages_round_up_as_the_disruption_controller_does() {
        let pct = |s: &str| IntOrString::String(s.to_string());
        assert_eq!(scaled(&pct("50%"), 3), Some(2));
        assert_eq!(scaled(&pct("10%"), 3), Some(1));
        assert_eq!(scaled(&pct("0%"), 3), Some(0));
        assert_eq!(scaled(&pct("100%"), 3), Some(3));
        assert_eq!(scaled(&IntOrString::Int(2), 3), Some(2));
        assert_eq!(scaled(&pct("half"), 3), None);
    }
}
