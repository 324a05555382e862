//! `raygate podsets`: the PodSets a RayService needs now.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::InputError;
use crate::manifest::{self, Doc, ManifestError};
use crate::podsets::{self, ServicePodSets, Source};
use crate::quantity::Resources;
use crate::types::ray::{RayCluster, RayService};

/// `raygate podsets` output.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PodSetsReport {
    pub ray_service: String,
    pub source: Source,
    pub children: Vec<String>,
    pub pod_sets: Vec<PodSetRow>,
    pub total: Resources,
}

/// One PodSet in the report.
#[derive(Serialize, Debug)]
pub struct PodSetRow {
    pub name: String,
    pub group: String,
    pub count: i32,
    pub requests: Resources,
}

impl PodSetsReport {
    fn new(service: &RayService, p: ServicePodSets) -> Self {
        PodSetsReport {
            ray_service: format!(
                "{}/{}",
                service.metadata.namespace.as_deref().unwrap_or_default(),
                service.metadata.name.as_deref().unwrap_or_default()
            ),
            source: p.source,
            children: p.children,
            total: podsets::total(&p.podsets),
            pod_sets: p
                .podsets
                .into_iter()
                .map(|p| PodSetRow {
                    name: p.name,
                    group: p.group,
                    count: p.count,
                    requests: p.requests,
                })
                .collect(),
        }
    }
}

/// `raygate podsets`: the PodSets of the one RayService in `text`, from the RayClusters beside it.
pub fn podsets(text: &str) -> Result<PodSetsReport, InputError> {
    let mut docs = manifest::read_documents(text)?;
    docs.iter_mut().for_each(manifest::default_namespace);
    let services: Vec<&Doc> = docs.iter().filter(|d| d.kind == "RayService").collect();
    let service_doc = match services.as_slice() {
        [one] => *one,
        [] => {
            return Err(ManifestError::Content(
                "no RayService in the input (expected exactly one)".into(),
            )
            .into());
        }
        [a, b, ..] => {
            return Err(ManifestError::Content(format!(
                "documents {} and {}: two RayServices ({} and {}); give one per file",
                a.index,
                b.index,
                a.object(),
                b.object()
            ))
            .into());
        }
    };
    let service: RayService = service_doc.parse()?;
    let mut clusters = Vec::new();
    let mut index_of = BTreeMap::new();
    for d in docs.iter().filter(|d| d.kind == "RayCluster") {
        let c: RayCluster = d.parse()?;
        index_of.insert(
            (
                c.metadata.namespace.clone().unwrap_or_default(),
                c.metadata.name.clone().unwrap_or_default(),
            ),
            d.index,
        );
        clusters.push(c);
    }
    let children = podsets::children_of(&service, &clusters);
    let result = podsets::of_service(&service, &children).map_err(|source| {
        // name the document of the child whose field failed, else the RayService's
        let index = children
            .iter()
            .find(|c| {
                source.to_string().starts_with(&format!(
                    "RayCluster {}/{}:",
                    c.metadata.namespace.as_deref().unwrap_or_default(),
                    c.metadata.name.as_deref().unwrap_or_default()
                ))
            })
            .and_then(|c| {
                index_of
                    .get(&(
                        c.metadata.namespace.clone().unwrap_or_default(),
                        c.metadata.name.clone().unwrap_or_default(),
                    ))
                    .copied()
            })
            .unwrap_or(service_doc.index);
        InputError::PodSets { index, source }
    })?;
    Ok(PodSetsReport::new(&service, result))
}

fn fmt_resources(r: &Resources) -> String {
    r.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The table form of a PodSets report.
impl super::View for PodSetsReport {
    fn table(&self) -> String {
        podsets_table(self)
    }

    /// The RayService read.
    fn names(&self) -> Vec<String> {
        vec![super::object_name("rayservice.ray.io", &self.ray_service)]
    }
}

pub fn podsets_table(r: &PodSetsReport) -> String {
    let mut s = String::new();
    let from = if r.children.is_empty() {
        "spec.rayClusterConfig, no child yet".to_string()
    } else {
        format!("children: {}", r.children.join(", "))
    };
    let _ = writeln!(s, "RayService {} (from {from})", r.ray_service);
    let width = r
        .pod_sets
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let gwidth = r
        .pod_sets
        .iter()
        .map(|p| p.group.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(
        s,
        "{:width$}  {:gwidth$}  {:>5}  REQUESTS (per pod)",
        "PODSET", "GROUP", "COUNT"
    );
    for p in &r.pod_sets {
        let _ = writeln!(
            s,
            "{:width$}  {:gwidth$}  {:>5}  {}",
            p.name,
            p.group,
            p.count,
            fmt_resources(&p.requests)
        );
    }
    let _ = writeln!(s, "TOTAL  {}", fmt_resources(&r.total));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC: &str = "apiVersion: ray.io/v1\nkind: RayService\nmetadata: {name: s}\nspec:\n  rayClusterConfig:\n    headGroupSpec: {template: {spec: {containers: [{name: h, resources: {requests: {cpu: '1'}}}]}}}\n";

    fn child(name: &str, replicas: &str) -> String {
        format!(
            "---\napiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {{name: {name}, labels: {{ray.io/originated-from-cr-name: s, ray.io/originated-from-crd: RayService}}}}\nspec:\n  headGroupSpec: {{template: {{spec: {{containers: [{{name: h, resources: {{requests: {{cpu: '1'}}}}}}]}}}}}}\n  workerGroupSpecs:\n  - {{groupName: w, replicas: {replicas}, minReplicas: 0, maxReplicas: 10, template: {{spec: {{containers: [{{name: w, resources: {{requests: {{cpu: 500m}}}}}}]}}}}}}\n"
        )
    }

    #[test]
    fn reports_children_and_totals() {
        let r = podsets(&format!("{SVC}{}", child("s-a", "3"))).unwrap();
        assert_eq!(r.ray_service, "default/s");
        assert_eq!(r.children, ["s-a"]);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["source"], "children");
        assert_eq!(j["podSets"][1]["count"], 3);
        assert_eq!(j["total"]["cpu"], "2500m");
    }

    #[test]
    fn input_errors_name_document_object_and_field() {
        let cases = [
            (
                String::from("apiVersion: v1\nkind: ConfigMap\n"),
                "no RayService",
            ),
            (
                format!("{SVC}---\n{SVC}"),
                "documents 1 and 2: two RayServices",
            ),
            (
                format!("{SVC}{}", child("s-a", "-2")),
                "document 2: RayCluster default/s-a: spec.workerGroupSpecs[0].replicas: must not be negative",
            ),
            (
                format!("{SVC}{}", child("s-a", "3").replace("500m", "5x")),
                "document 2: RayCluster default/s-a: spec.workerGroupSpecs[0].template.spec.containers[0].resources.requests[cpu]: invalid quantity",
            ),
            (String::from("{{{"), "document 1: not valid YAML"),
        ];
        for (input, want) in cases {
            let e = podsets(&input).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} should contain {want:?}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
    }
}
