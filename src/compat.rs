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
        AdmissionMode::Builtin => "raygate's crds/ (config/default)",
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
    if mode == AdmissionMode::Builtin {
        problems.extend(kueue_serves(found));
    }
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

/// The kueue.x-k8s.io CRDs a Kueue manager serves: Kueue installs them with a conversion webhook
/// on its own webhook service (`config/components/crd/patches/webhook_in_*.yaml` in Kueue
/// v0.19.2), which raygate's CRDs never have. Builtin admission beside it would make two
/// admission loops admit the same Workloads, so it is a problem naming the way out.
fn kueue_serves(found: &[CustomResourceDefinition]) -> Option<String> {
    let served: Vec<String> = found
        .iter()
        .filter(|c| c.spec.group == "kueue.x-k8s.io")
        .filter_map(|c| {
            let conversion = c.spec.conversion.as_ref()?;
            let service = conversion
                .webhook
                .as_ref()?
                .client_config
                .as_ref()?
                .service
                .as_ref()?;
            (conversion.strategy == "Webhook").then(|| {
                format!(
                    "{} (webhook {}/{})",
                    c.metadata.name.as_deref().unwrap_or_default(),
                    service.namespace,
                    service.name
                )
            })
        })
        .collect();
    (!served.is_empty()).then(|| {
        format!(
            "a Kueue manager serves the kueue.x-k8s.io API here ({} convert through its \
             webhook): raygate's builtin admission beside it would admit the same Workloads a \
             second time; run raygate with --admission=kueue (config/kueue-mode, or the chart's \
             admission.mode=kueue), or remove Kueue and install raygate's crds/",
            served.join(", ")
        )
    })
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
                 (config/default))"
            ]
        );
        assert_eq!(
            check(&crds, AdmissionMode::Kueue),
            vec!["CRD clusterqueues.kueue.x-k8s.io is not installed (install Kueue v0.19)"]
        );
    }

    /// Kueue v0.19.2 installs its Workload CRD with a conversion webhook on its webhook service
    /// (`config/components/crd/patches/webhook_in_workloads.yaml`, namespace and name prefixed
    /// by its kustomization): builtin admission refuses to run beside it; kueue mode is what
    /// runs there.
    #[test]
    fn builtin_admission_refuses_crds_a_kueue_manager_serves_and_kueue_mode_takes_them() {
        let mut crds = all_good();
        let workloads = crds
            .iter_mut()
            .find(|c| c.metadata.name.as_deref() == Some("workloads.kueue.x-k8s.io"))
            .unwrap();
        workloads.spec.conversion = Some(
            serde_json::from_value(serde_json::json!({
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"service": {"namespace": "kueue-system",
                    "name": "kueue-webhook-service", "path": "/convert"}},
                    "conversionReviewVersions": ["v1"]},
            }))
            .unwrap(),
        );
        let problems = check(&crds, AdmissionMode::Builtin);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "a Kueue manager serves the kueue.x-k8s.io API here (workloads.kueue.x-k8s.io \
                 (webhook kueue-system/kueue-webhook-service) convert through its webhook)"
            ),
            "{}",
            problems[0]
        );
        assert!(problems[0].contains("--admission=kueue"));
        assert_eq!(check(&crds, AdmissionMode::Kueue), Vec::<String>::new());
        // a conversion that is no webhook is not Kueue's
        crds.iter_mut()
            .find(|c| c.metadata.name.as_deref() == Some("workloads.kueue.x-k8s.io"))
            .unwrap()
            .spec
            .conversion =
            Some(serde_json::from_value(serde_json::json!({"strategy": "None"})).unwrap());
        assert_eq!(check(&crds, AdmissionMode::Builtin), Vec::<String>::new());
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
                 crds/ (config/default))",
                "CRD clusterqueues.kueue.x-k8s.io version v1beta2 is not served (install raygate's \
                 crds/ (config/default))",
                "CRD localqueues.kueue.x-k8s.io version v1beta2 has no status subresource: raygate \
                 writes status (install raygate's crds/ (config/default))",
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
