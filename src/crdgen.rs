//! The CRDs raygate installs, generated from the `raygate-types` crate in `types/` (`raygate
//! crdgen`): its own `raygate.io/v1alpha1` `NodeRollout` (always installed), and the
//! `kueue.x-k8s.io/v1beta2` kinds it reads and writes, installed when no Kueue is present. Each
//! Kueue one is a structural subset of Kueue v0.19's own CRD, so installing Kueue later replaces
//! them without conversion.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, ValidationRule,
};
use kube::CustomResourceExt;

use crate::types::kueue::{
    ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload, WorkloadPriorityClass,
};
use crate::types::rollout::NodeRollout;

/// Whether a generated CRD is one of the Kueue kinds (installed only without a real Kueue).
pub fn is_kueue(crd: &CustomResourceDefinition) -> bool {
    crd.spec.group == "kueue.x-k8s.io"
}

/// Every generated CRD with the file name it is written to.
pub fn crds() -> Vec<(String, CustomResourceDefinition)> {
    let mut out = vec![
        ClusterQueue::crd(),
        Cohort::crd(),
        LocalQueue::crd(),
        ResourceFlavor::crd(),
        WorkloadPriorityClass::crd(),
        workload_crd(),
    ];
    for crd in &mut out {
        let (short, columns) = kueue_names(&crd.spec.names.plural);
        crd.spec.names.short_names =
            (!short.is_empty()).then(|| short.iter().map(|s| s.to_string()).collect());
        for v in &mut crd.spec.versions {
            v.additional_printer_columns = (!columns.is_empty()).then(|| {
                columns
                    .iter()
                    .map(|(name, type_, json_path, description, priority)| {
                        CustomResourceColumnDefinition {
                            name: name.to_string(),
                            type_: type_.to_string(),
                            json_path: json_path.to_string(),
                            description: Some(description.to_string()),
                            priority: *priority,
                            format: None,
                        }
                    })
                    .collect()
            });
        }
    }
    // raygate's own kinds carry their short names and columns in their derive.
    let mut rollout = NodeRollout::crd();
    for v in &mut rollout.spec.versions {
        if let Some(schema) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            strip_null_enum_values(schema);
        }
    }
    out.push(rollout);
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

/// The message of the rules that keep a reserved Workload's PodSets.
pub const PODSETS_FIXED_MESSAGE: &str = "spec.podSets cannot change while the Workload has quota \
     reserved (QuotaReserved=True), except a PodSet's count going down";

/// Whether the stored Workload has quota reserved, in CEL.
const RESERVED_BEFORE: &str = "has(oldSelf.status) && has(oldSelf.status.conditions) && \
     oldSelf.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')";

/// Kueue's webhook (`ValidateWorkloadUpdate` → `validateImmutablePodSets` in
/// `pkg/webhooks/workload_webhook.go`, v0.19.2) refuses any change of a Workload's PodSets while
/// the stored one has quota reserved, but a lower count (elastic jobs), comparing them in order.
/// raygate's CRDs have no webhook, so the builtin Workload carries the same check as CEL
/// transition rules: otherwise a reserved slice's requests could change under the quota charged
/// for them. Three rules rather than one, each within the API server's cost budget (one rule
/// comparing templates pairwise exceeds it): the names in order, the templates in order, and
/// per PodSet no count going up and the same `minCount`.
fn podsets_fixed_while_reserved() -> [String; 3] {
    [
        "self.spec.podSets.map(p, p.name) == oldSelf.spec.podSets.map(p, p.name)",
        "self.spec.podSets.map(p, p.template) == oldSelf.spec.podSets.map(p, p.template)",
        "self.spec.podSets.all(p, oldSelf.spec.podSets.exists(o, o.name == p.name && p.count <= \
         o.count && has(p.minCount) == has(o.minCount) && (!has(p.minCount) || p.minCount == \
         o.minCount)))",
    ]
    .map(|unchanged| format!("!({RESERVED_BEFORE}) || ({unchanged})"))
}

/// The builtin Workload CRD, with Kueue's webhook check on PodSets as a rule.
fn workload_crd() -> CustomResourceDefinition {
    let mut crd = Workload::crd();
    for v in &mut crd.spec.versions {
        if let Some(schema) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let rules = schema.x_kubernetes_validations.get_or_insert_with(Vec::new);
            rules.extend(podsets_fixed_while_reserved().map(|rule| ValidationRule {
                rule,
                message: Some(PODSETS_FIXED_MESSAGE.to_string()),
                ..ValidationRule::default()
            }));
        }
    }
    crd
}

/// A printer column: name, type, JSON path, description, priority.
type Column = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<i32>,
);

/// Kueue's `Pending Workloads` column, on ClusterQueues and LocalQueues.
const PENDING: Column = (
    "Pending Workloads",
    "integer",
    ".status.pendingWorkloads",
    "Number of pending workloads",
    None,
);

const CLUSTER_QUEUE_COLUMNS: &[Column] = &[
    (
        "Cohort",
        "string",
        ".spec.cohortName",
        "Cohort that this ClusterQueue belongs to",
        None,
    ),
    (
        "Strategy",
        "string",
        ".spec.queueingStrategy",
        "The queueing strategy used to prioritize workloads",
        Some(1),
    ),
    PENDING,
    (
        "Admitted Workloads",
        "integer",
        ".status.admittedWorkloads",
        "Number of admitted workloads that haven't finished yet",
        Some(1),
    ),
];

const LOCAL_QUEUE_COLUMNS: &[Column] = &[
    (
        "ClusterQueue",
        "string",
        ".spec.clusterQueue",
        "Backing ClusterQueue",
        None,
    ),
    PENDING,
    (
        "Admitted Workloads",
        "integer",
        ".status.admittedWorkloads",
        "Number of admitted workloads that haven't finished yet.",
        None,
    ),
];

const PRIORITY_CLASS_COLUMNS: &[Column] = &[(
    "Value",
    "integer",
    ".value",
    "Value of workloadPriorityClass's Priority",
    None,
)];

const WORKLOAD_COLUMNS: &[Column] = &[
    (
        "Queue",
        "string",
        ".spec.queueName",
        "Name of the queue this workload was submitted to",
        None,
    ),
    (
        "Reserved in",
        "string",
        ".status.admission.clusterQueue",
        "Name of the ClusterQueue where the workload is reserving quota",
        None,
    ),
    (
        "Admitted",
        "string",
        ".status.conditions[?(@.type=='Admitted')].status",
        "Admission status",
        None,
    ),
    (
        "Finished",
        "string",
        ".status.conditions[?(@.type=='Finished')].status",
        "Workload finished",
        None,
    ),
    (
        "Age",
        "date",
        ".metadata.creationTimestamp",
        "Time this workload was created",
        None,
    ),
];

/// Kueue v0.19's short names and printer columns for each kind (`kubectl get cq` works the same
/// on raygate's CRDs as on Kueue's).
fn kueue_names(plural: &str) -> (&'static [&'static str], &'static [Column]) {
    match plural {
        "clusterqueues" => (&["cq"], CLUSTER_QUEUE_COLUMNS),
        "cohorts" => (&["co"], &[]),
        "localqueues" => (&["queue", "queues", "lq"], LOCAL_QUEUE_COLUMNS),
        "resourceflavors" => (&["flavor", "flavors", "rf"], &[]),
        "workloadpriorityclasses" => (&["wpc"], PRIORITY_CLASS_COLUMNS),
        "workloads" => (
            &["kwl", "kueueworkload", "kueueworkloads"],
            WORKLOAD_COLUMNS,
        ),
        _ => (&[], &[]),
    }
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

/// Drops the `null` schemars lists among an optional enum's values: the server prunes a null
/// of a non-nullable field before validating, so it can never be seen.
fn strip_null_enum_values(schema: &mut JSONSchemaProps) {
    if let Some(values) = schema.enum_.as_mut() {
        values.retain(|v| !v.0.is_null());
    }
    schema
        .properties
        .iter_mut()
        .flat_map(|p| p.values_mut())
        .for_each(strip_null_enum_values);
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = schema.items.as_mut() {
        strip_null_enum_values(items);
    }
}

/// YAML of one CRD as written to `crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    Ok(format!(
        "# Generated by `raygate crdgen` from types/ (crate raygate-types); do not edit.\n{}",
        crate::manifest::to_yaml(crd)?
    ))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    #[test]
    fn node_rollouts_show_phase_domain_progress_and_age_under_nro() {
        let (file, crd) = super::crds()
            .into_iter()
            .find(|(_, c)| c.spec.group == "raygate.io")
            .unwrap();
        assert_eq!(file, "noderollouts.raygate.io.yaml");
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["nro".to_string()]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        let columns: Vec<(&str, &str)> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("Phase", ".status.phase"),
                ("Domain", ".status.currentDomain"),
                ("Progress", ".status.progress"),
                ("Age", ".metadata.creationTimestamp"),
            ]
        );
        assert!(version.subresources.as_ref().unwrap().status.is_some());
    }

    #[test]
    fn short_names_and_printer_columns_equal_kueues() {
        let dir = raygate_testing::upstream::dir().join("upstream-crds");
        for (_, ours) in super::crds()
            .into_iter()
            .filter(|(_, c)| super::is_kueue(c))
        {
            let plural = &ours.spec.names.plural;
            let path = dir.join(format!("kueue.x-k8s.io_{plural}.yaml"));
            let text = std::fs::read_to_string(&path).unwrap();
            let theirs: CustomResourceDefinition = crate::manifest::from_yaml(&text).unwrap();
            assert_eq!(
                ours.spec.names.short_names, theirs.spec.names.short_names,
                "{plural}"
            );
            let columns = |crd: &CustomResourceDefinition| {
                crd.spec
                    .versions
                    .iter()
                    .find(|v| v.name == "v1beta2")
                    .and_then(|v| v.additional_printer_columns.clone())
            };
            assert_eq!(columns(&ours), columns(&theirs), "{plural}");
        }
    }
}
