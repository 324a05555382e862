//! Placement: where a PodSet's pods may run (`nodeSelector`, `tolerations`), part of its shape.
//!
//! Two groups that differ only in placement (an upgrade moving a worker group to another GPU
//! pool) must be charged to different flavors, so they are different PodSets. raygate itself
//! adds the admitted flavors' node labels and tolerations to a child before releasing it
//! (`gate::flavors`) and records what it added in [`INJECTED_PLACEMENT_ANNOTATION`]; a child's
//! PodSets are computed on its templates minus that record ([`of_child`]), so a released child
//! has the same PodSets as before its release.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PodTemplateSpec, Toleration};

use super::{PodSet, PodSetError, of_cluster};
use crate::types::ray::RayCluster;

/// Annotation on a child RayCluster: per KubeRay group (`headgroup` or a worker `groupName`), the
/// node selector entries and tolerations raygate added to that group's template, as JSON
/// `{"<group>": {"nodeSelector": {..}, "tolerations": [..]}}`.
pub const INJECTED_PLACEMENT_ANNOTATION: &str = "raygate.io/injected-placement";

/// The placement of a pod template, in a canonical form (tolerations as a set, order ignored).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Placement {
    pub node_selector: BTreeMap<String, String>,
    /// Each toleration as its JSON text (a total order; `Toleration` has none).
    pub tolerations: BTreeSet<String>,
}

impl Placement {
    /// The placement of `template`.
    pub fn of(template: &PodTemplateSpec) -> Placement {
        let spec = template.spec.as_ref();
        Placement {
            node_selector: spec
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default(),
            tolerations: spec
                .and_then(|s| s.tolerations.as_ref())
                .into_iter()
                .flatten()
                .map(toleration_key)
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.tolerations.is_empty()
    }
}

fn toleration_key(t: &Toleration) -> String {
    // Serializing a plain struct of strings and an integer cannot fail; an empty key would only
    // merge two tolerations' identities, never split one.
    serde_json::to_string(t).unwrap_or_default()
}

/// What raygate added to one group's template.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Injected {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

impl Injected {
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.tolerations.is_empty()
    }

    /// Adds `other`'s entries (a later injection into the same group).
    pub fn extend(&mut self, other: &Injected) {
        for (k, v) in &other.node_selector {
            self.node_selector.insert(k.clone(), v.clone());
        }
        for t in &other.tolerations {
            if !self.tolerations.contains(t) {
                self.tolerations.push(t.clone());
            }
        }
    }
}

/// Per KubeRay group, what raygate injected into a child (see [`INJECTED_PLACEMENT_ANNOTATION`]).
pub type InjectedRecord = BTreeMap<String, Injected>;

/// The record on `child`; empty when absent. An unreadable record (edited by hand) is empty too:
/// then the child's placement is taken as it is, which at worst charges a replacement.
pub fn injected_record(child: &RayCluster) -> InjectedRecord {
    crate::meta::annotation(&child.metadata, INJECTED_PLACEMENT_ANNOTATION)
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// `template` without what raygate injected: node selector entries still carrying the injected
/// value, and tolerations equal to an injected one.
pub fn strip(template: &mut PodTemplateSpec, injected: &Injected) {
    let Some(spec) = template.spec.as_mut() else {
        return;
    };
    if let Some(selector) = spec.node_selector.as_mut() {
        selector.retain(|k, v| injected.node_selector.get(k) != Some(v));
        if selector.is_empty() {
            spec.node_selector = None;
        }
    }
    if let Some(tolerations) = spec.tolerations.as_mut() {
        tolerations.retain(|t| !injected.tolerations.contains(t));
        if tolerations.is_empty() {
            spec.tolerations = None;
        }
    }
}

/// The PodSets of a child RayCluster as its user made it: [`of_cluster`] on its spec, each
/// group's template without what raygate injected (see [`injected_record`]).
pub fn of_child(child: &RayCluster, object: &str) -> Result<Vec<PodSet>, PodSetError> {
    let mut podsets = of_cluster(
        &child.spec,
        child.metadata.annotations.as_ref(),
        object,
        "spec",
    )?;
    let record = injected_record(child);
    if record.is_empty() {
        return Ok(podsets);
    }
    for p in &mut podsets {
        if let Some(injected) = record.get(&p.group) {
            strip(&mut p.template, injected);
        }
    }
    Ok(podsets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn template(v: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(json!({"spec": v})).unwrap()
    }

    fn toleration(key: &str) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }
    }

    #[test]
    fn placement_ignores_toleration_order_and_sees_selector_values() {
        let a = template(json!({"containers": [], "nodeSelector": {"pool": "a"},
            "tolerations": [{"key": "x", "operator": "Exists"}, {"key": "y", "operator": "Exists"}]}));
        let b = template(json!({"containers": [], "nodeSelector": {"pool": "a"},
            "tolerations": [{"key": "y", "operator": "Exists"}, {"key": "x", "operator": "Exists"}]}));
        let c = template(json!({"containers": [], "nodeSelector": {"pool": "b"},
            "tolerations": [{"key": "y", "operator": "Exists"}, {"key": "x", "operator": "Exists"}]}));
        assert_eq!(Placement::of(&a), Placement::of(&b));
        assert_ne!(Placement::of(&a), Placement::of(&c));
        assert!(Placement::of(&template(json!({"containers": []}))).is_empty());
    }

    #[test]
    fn strip_removes_only_what_still_carries_the_injected_value() {
        let mut t = template(json!({"containers": [],
            "nodeSelector": {"pool": "h100", "zone": "z1", "team": "a"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "mine", "operator": "Exists", "effect": "NoSchedule"}]}));
        let injected = Injected {
            // the user changed zone since: it is theirs now
            node_selector: [("pool".into(), "h100".into()), ("zone".into(), "z2".into())].into(),
            tolerations: vec![toleration("gpu")],
        };
        strip(&mut t, &injected);
        let p = Placement::of(&t);
        assert_eq!(
            p.node_selector,
            [
                ("team".to_string(), "a".to_string()),
                ("zone".into(), "z1".into())
            ]
            .into()
        );
        assert_eq!(p.tolerations.len(), 1);
        assert!(p.tolerations.iter().all(|t| t.contains("mine")));
        // everything injected: the fields are gone, not empty
        let mut t = template(json!({"containers": [], "nodeSelector": {"pool": "h100"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}));
        strip(
            &mut t,
            &Injected {
                node_selector: [("pool".into(), "h100".into())].into(),
                tolerations: vec![toleration("gpu")],
            },
        );
        let spec = t.spec.unwrap();
        assert_eq!(spec.node_selector, None);
        assert_eq!(spec.tolerations, None);
    }

    fn child(annotation: Option<&str>) -> RayCluster {
        let mut c: RayCluster = serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [], "nodeSelector": {"pool": "a"}}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1,
                    "template": {"spec": {"containers": [], "nodeSelector": {"pool": "a", "user": "x"}}}}]}
        }))
        .unwrap();
        if let Some(a) = annotation {
            c.metadata.annotations =
                Some([(INJECTED_PLACEMENT_ANNOTATION.to_string(), a.to_string())].into());
        }
        c
    }

    #[test]
    fn a_child_s_podsets_leave_out_the_recorded_injection_per_group() {
        let selectors = |c: &RayCluster| -> Vec<BTreeMap<String, String>> {
            of_child(c, "RayCluster ns/c")
                .unwrap()
                .iter()
                .map(|p| p.placement().node_selector)
                .collect()
        };
        let one = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        // no record: taken as it is
        assert_eq!(
            selectors(&child(None)),
            vec![
                one("pool", "a"),
                BTreeMap::from([("pool".into(), "a".into()), ("user".into(), "x".into())])
            ]
        );
        // recorded for the worker group only
        assert_eq!(
            selectors(&child(Some(r#"{"gpu": {"nodeSelector": {"pool": "a"}}}"#))),
            vec![one("pool", "a"), one("user", "x")]
        );
        // an unreadable record is no record
        assert_eq!(selectors(&child(Some("{"))), selectors(&child(None)));
    }

    proptest! {
        /// Injecting any selector entries and tolerations the user did not set, then stripping
        /// the record, gives back the user's placement.
        #[test]
        fn strip_undoes_an_injection(
            user in proptest::collection::btree_map("[a-c]", "[a-c]", 0..3),
            user_tol in proptest::collection::btree_set("[a-c]", 0..3),
            add in proptest::collection::btree_map("[a-e]", "[a-c]", 0..4),
            add_tol in proptest::collection::btree_set("[a-e]", 0..4),
        ) {
            let mut t = template(json!({"containers": []}));
            let spec = t.spec.as_mut().unwrap();
            if !user.is_empty() {
                spec.node_selector = Some(user.clone());
            }
            if !user_tol.is_empty() {
                spec.tolerations = Some(user_tol.iter().map(|k| toleration(k)).collect());
            }
            let before = Placement::of(&t);
            // what a merge adds: only keys and tolerations the template lacks
            let mut injected = Injected::default();
            for (k, v) in &add {
                if !user.contains_key(k) {
                    injected.node_selector.insert(k.clone(), v.clone());
                }
            }
            for k in &add_tol {
                if !user_tol.contains(k) {
                    injected.tolerations.push(toleration(k));
                }
            }
            let spec = t.spec.as_mut().unwrap();
            spec.node_selector.get_or_insert_with(Default::default).extend(injected.node_selector.clone());
            spec.tolerations.get_or_insert_with(Vec::new).extend(injected.tolerations.clone());
            strip(&mut t, &injected);
            prop_assert_eq!(Placement::of(&t), before);
        }
    }
}
