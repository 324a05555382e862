//! Startup compatibility checks (pure): are the CustomResourceDefinitions raygate needs installed,
//! at the versions and with the fields it writes? The controller reads the CRD objects and asks
//! [`check`]; a non-empty answer keeps it from starting (a log line, `/readyz` failing with the
//! same text) until the cluster is fixed.

use crate::admission::AdmissionMode;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, JSONSchemaProps,
};

/// One CRD raygate needs, and what it needs of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// `plural.group`, the CRD's name.
    pub crd: &'static str,
    /// The version raygate reads and writes; must be served.
    pub version: &'static str,
    /// Schema paths (from the version's root) that must exist, with why.
    pub fields: &'static [(&'static str, &'static str)],
    /// raygate writes the status subresource.
    pub status: bool,
    /// Who installs it, for the message.
    pub installed_by: &'static str,
}

const KUBERAY: &str = "KubeRay v1.7 or later";

/// The CRDs `mode` needs.
pub fn requirements(mode: AdmissionMode) -> Vec<Requirement> {
    let queues_by = match mode {
        AdmissionMode::Builtin => "raygate's crds/ (config/default) or Kueue v0.19",
        AdmissionMode::Kueue => "Kueue v0.19",
    };
    let builtin = mode == AdmissionMode::Builtin;
    let kueue = |crd, status| Requirement {
        crd,
        version: "v1beta2",
        fields: &[],
        status,
        installed_by: queues_by,
    };
    vec![
        Requirement {
            crd: "rayservices.ray.io",
            version: "v1",
            fields: &[
                (
                    "spec.suspend",
                    "raygate stops an evicted RayService with it (KubeRay v1.7's top-level suspend)",
                ),
                (
                    "spec.rayClusterConfig.suspend",
                    "raygate's template gate: children are born suspended",
                ),
            ],
            status: false,
            installed_by: KUBERAY,
        },
        Requirement {
            crd: "rayclusters.ray.io",
            version: "v1",
            fields: &[(
                "spec.suspend",
                "raygate holds and releases children with it",
            )],
            status: false,
            installed_by: KUBERAY,
        },
        Requirement {
            fields: &[
                ("spec.podSets", "a slice's PodSets"),
                (
                    "status.admission",
                    "admission writes it (builtin) or reads it",
                ),
            ],
            ..kueue("workloads.kueue.x-k8s.io", true)
        },
        kueue("clusterqueues.kueue.x-k8s.io", builtin),
        kueue("localqueues.kueue.x-k8s.io", builtin),
        kueue("resourceflavors.kueue.x-k8s.io", false),
        kueue("cohorts.kueue.x-k8s.io", false),
        kueue("workloadpriorityclasses.kueue.x-k8s.io", false),
    ]
}

/// What is wrong with the installed CRDs for `mode`, one line each (empty: all fine). `found`
/// holds the CRD objects that exist (any order; others are ignored).
pub fn check(found: &[CustomResourceDefinition], mode: AdmissionMode) -> Vec<String> {
    let mut problems = Vec::new();
    for req in requirements(mode) {
        let Some(crd) = found
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(req.crd))
        else {
            problems.push(format!(
                "CRD {} is not installed (install {})",
                req.crd, req.installed_by
            ));
            continue;
        };
        let Some(version) = crd.spec.versions.iter().find(|v| v.name == req.version) else {
            let have: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
            problems.push(format!(
                "CRD {} has no version {} (it has {}; install {})",
                req.crd,
                req.version,
                have.join(", "),
                req.installed_by
            ));
            continue;
        };
        if !version.served {
            problems.push(format!(
                "CRD {} version {} is not served (install {})",
                req.crd, req.version, req.installed_by
            ));
        }
        for (path, why) in req.fields {
            if !has_field(version, path) {
                problems.push(format!(
                    "CRD {} version {} has no field {path}: {why} (install {})",
                    req.crd, req.version, req.installed_by
                ));
            }
        }
        if req.status
            && version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_none()
        {
            problems.push(format!(
                "CRD {} version {} has no status subresource: raygate writes status (install {})",
                req.crd, req.version, req.installed_by
            ));
        }
    }
    problems
}

/// True when the version's schema declares `path` (dotted, through object properties). A schema
/// that keeps unknown fields at or above the path accepts it too.
fn has_field(version: &CustomResourceDefinitionVersion, path: &str) -> bool {
    let Some(mut schema) = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
    else {
        // no schema: nothing is pruned (only possible for apiextensions v1beta1 leftovers)
        return true;
    };
    for part in path.split('.') {
        if let Some(next) = schema.properties.as_ref().and_then(|p| p.get(part)) {
            schema = next;
        } else {
            return keeps_unknown(schema);
        }
    }
    true
}

fn keeps_unknown(schema: &JSONSchemaProps) -> bool {
    schema.x_kubernetes_preserve_unknown_fields == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(
        name: &str,
        version: &str,
        schema: serde_json::Value,
        status: bool,
    ) -> CustomResourceDefinition {
        let mut v = serde_json::json!({
            "name": version, "served": true, "storage": true,
            "schema": {"openAPIV3Schema": schema},
        });
        if status {
            v["subresources"] = serde_json::json!({"status": {}});
        }
        let (plural, group) = name.split_once('.').unwrap_or((name, ""));
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": plural, "kind": "X"}, "versions": [v]},
        }))
        .unwrap()
    }

    fn obj(props: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": props})
    }

    fn all_good() -> Vec<CustomResourceDefinition> {
        let suspend = obj(serde_json::json!({"suspend": {"type": "boolean"}}));
        let mut crds = vec![
            crd(
                "rayservices.ray.io",
                "v1",
                obj(serde_json::json!({"spec": obj(serde_json::json!({
                    "suspend": {"type": "boolean"}, "rayClusterConfig": suspend.clone()}))})),
                true,
            ),
            crd(
                "rayclusters.ray.io",
                "v1",
                obj(serde_json::json!({"spec": suspend})),
                true,
            ),
            crd(
                "workloads.kueue.x-k8s.io",
                "v1beta2",
                obj(serde_json::json!({
                    "spec": obj(serde_json::json!({"podSets": {"type": "array"}})),
                    "status": obj(serde_json::json!({"admission": {"type": "object"}}))})),
                true,
            ),
        ];
        for kind in [
            "clusterqueues",
            "localqueues",
            "resourceflavors",
            "cohorts",
            "workloadpriorityclasses",
        ] {
            crds.push(crd(
                &format!("{kind}.kueue.x-k8s.io"),
                "v1beta2",
                obj(serde_json::json!({})),
                true,
            ));
        }
        crds
    }

    #[test]
    fn every_needed_crd_present_passes_in_both_modes() {
        assert_eq!(
            check(&all_good(), AdmissionMode::Builtin),
            Vec::<String>::new()
        );
        assert_eq!(
            check(&all_good(), AdmissionMode::Kueue),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_rayservice_crd_older_than_kuberay_1_7_names_the_missing_suspend() {
        let mut crds = all_good();
        crds[0] = crd(
            "rayservices.ray.io",
            "v1",
            obj(serde_json::json!({"spec": obj(serde_json::json!({
                "rayClusterConfig": obj(serde_json::json!({"suspend": {"type": "boolean"}}))}))})),
            true,
        );
        assert_eq!(
            check(&crds, AdmissionMode::Builtin),
            vec![
                "CRD rayservices.ray.io version v1 has no field spec.suspend: raygate stops an evicted \
                 RayService with it (KubeRay v1.7's top-level suspend) (install KubeRay v1.7 or later)"
            ]
        );
    }

    #[test]
    fn missing_queue_crds_are_named_with_who_installs_them_per_mode() {
        let crds: Vec<_> = all_good()
            .into_iter()
            .filter(|c| c.metadata.name.as_deref() != Some("clusterqueues.kueue.x-k8s.io"))
            .collect();
        assert_eq!(
            check(&crds, AdmissionMode::Builtin),
            vec![
                "CRD clusterqueues.kueue.x-k8s.io is not installed (install raygate's crds/ \
                 (config/default) or Kueue v0.19)"
            ]
        );
        assert_eq!(
            check(&crds, AdmissionMode::Kueue),
            vec!["CRD clusterqueues.kueue.x-k8s.io is not installed (install Kueue v0.19)"]
        );
    }

    #[test]
    fn an_unserved_or_absent_version_and_a_missing_status_subresource_are_problems() {
        let mut crds = all_good();
        crds[2] = crd(
            "workloads.kueue.x-k8s.io",
            "v1beta1",
            obj(serde_json::json!({})),
            true,
        );
        crds[3].spec.versions[0].served = false;
        crds[4].spec.versions[0].subresources = None;
        assert_eq!(
            check(&crds, AdmissionMode::Builtin),
            vec![
                "CRD workloads.kueue.x-k8s.io has no version v1beta2 (it has v1beta1; install raygate's \
                 crds/ (config/default) or Kueue v0.19)",
                "CRD clusterqueues.kueue.x-k8s.io version v1beta2 is not served (install raygate's \
                 crds/ (config/default) or Kueue v0.19)",
                "CRD localqueues.kueue.x-k8s.io version v1beta2 has no status subresource: raygate \
                 writes status (install raygate's crds/ (config/default) or Kueue v0.19)",
            ]
        );
        // with a real Kueue, raygate writes no LocalQueue status
        assert_eq!(check(&crds, AdmissionMode::Kueue).len(), 2);
    }

    #[test]
    fn a_schema_that_keeps_unknown_fields_accepts_any_path_below_it() {
        let mut crds = all_good();
        crds[0] = crd(
            "rayservices.ray.io",
            "v1",
            obj(
                serde_json::json!({"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}),
            ),
            true,
        );
        assert_eq!(check(&crds, AdmissionMode::Builtin), Vec::<String>::new());
    }
}
