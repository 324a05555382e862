//! The CRDs raygate installs when no Kueue is present: the `kueue.x-k8s.io/v1beta2` kinds it
//! reads and writes, generated from `vendored-types` (`raygate crdgen`). Each is a structural
//! subset of Kueue v0.19's own CRD, so installing Kueue later replaces them without conversion.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceValidation, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;
use kube::api::ObjectMeta;

use crate::types::kueue::{ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload};

/// Every generated CRD with the file name it is written to.
pub fn crds() -> Vec<(String, CustomResourceDefinition)> {
    let mut out = vec![
        ClusterQueue::crd(),
        Cohort::crd(),
        LocalQueue::crd(),
        ResourceFlavor::crd(),
        workload_priority_class_crd(),
        Workload::crd(),
    ];
    for crd in &mut out {
        let labels = crd.metadata.labels.get_or_insert_with(Default::default);
        labels.insert("app.kubernetes.io/part-of".into(), "raygate".into());
        for v in &mut crd.spec.versions {
            if let Some(schema) = v
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                strip_nullable(schema);
            }
        }
    }
    out.into_iter()
        .map(|crd| {
            (
                format!("{}.yaml", crd.metadata.name.clone().unwrap_or_default()),
                crd,
            )
        })
        .collect()
}

/// Kueue's CRDs declare no `nullable`; raygate never writes nulls (unset fields are omitted), so
/// its CRDs match Kueue's there too.
fn strip_nullable(schema: &mut JSONSchemaProps) {
    schema.nullable = None;
    schema
        .properties
        .iter_mut()
        .flat_map(|p| p.values_mut())
        .for_each(strip_nullable);
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = schema.items.as_mut() {
        strip_nullable(items);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        strip_nullable(extra);
    }
    for list in [&mut schema.any_of, &mut schema.all_of, &mut schema.one_of]
        .into_iter()
        .flatten()
    {
        list.iter_mut().for_each(strip_nullable);
    }
}

/// `WorkloadPriorityClass` keeps `value` at the top level (no spec), which the derive cannot express.
fn workload_priority_class_crd() -> CustomResourceDefinition {
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)] // only its schema is used
    struct Fields {
        /// The priority of Workloads that refer to this class.
        value: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    }
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::RemoveRefSiblings::default())
        .into_generator();
    let mut schema =
        serde_json::to_value(generator.into_root_schema_for::<Fields>()).unwrap_or_default();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("title");
        let props = obj
            .entry("properties")
            .or_insert_with(|| serde_json::json!({}));
        props["apiVersion"] = serde_json::json!({"type": "string"});
        props["kind"] = serde_json::json!({"type": "string"});
        props["metadata"] = serde_json::json!({"type": "object"});
    }
    let props: JSONSchemaProps = serde_json::from_value(schema).unwrap_or_default();
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some("workloadpriorityclasses.kueue.x-k8s.io".into()),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: "kueue.x-k8s.io".into(),
            names: CustomResourceDefinitionNames {
                kind: "WorkloadPriorityClass".into(),
                plural: "workloadpriorityclasses".into(),
                singular: Some("workloadpriorityclass".into()),
                short_names: None,
                categories: None,
                list_kind: None,
            },
            scope: "Cluster".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: "v1beta2".into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(props),
                }),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    }
}

/// YAML of one CRD as written to `crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    Ok(format!(
        "# Generated by `raygate crdgen` from vendored-types; do not edit.\n{}",
        serde_yaml::to_string(crd)?
    ))
}
