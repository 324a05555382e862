//! raygate's vendored types checked against the real upstream data in `../shared`: the KubeRay
//! v1.7.0 and Kueue v0.19.2 sample manifests must parse, ray objects must round-trip losslessly,
//! what we serialize must satisfy the upstream CRD schemas, and the CRDs raygate generates must be
//! structural subsets of Kueue's own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::api::ObjectMeta;
use raygate::manifest::{Doc, ManifestError, read_documents};
use raygate::types::{kueue, ray};
use raygate_testing::upstream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Samples
// ---------------------------------------------------------------------------------------------

/// One object from an upstream sample file.
struct Sample {
    /// File name relative to its sample directory's parent, e.g. `kueue-v0.19.2/admin__minimal-cq.yaml`.
    file: String,
    doc: Doc,
}

impl Sample {
    /// Where the object comes from, for failure messages.
    fn origin(&self) -> String {
        format!(
            "{} document {} ({})",
            self.file,
            self.doc.index,
            self.doc.object()
        )
    }
}

/// Every object of every sample file, and the number of files read.
///
/// A file that is not valid multi-document YAML is a failure of the data, not a skip.
fn load_samples() -> (usize, Vec<Sample>) {
    let files = upstream::sample_files();
    let root = upstream::dir().join("upstream-samples");
    let mut samples = Vec::new();
    let mut unreadable = Vec::new();
    for path in &files {
        let file = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                unreadable.push(format!("{file}: {e}"));
                continue;
            }
        };
        match read_documents(&text) {
            Ok(docs) => samples.extend(docs.into_iter().map(|doc| Sample {
                file: file.clone(),
                doc,
            })),
            Err(e) => unreadable.push(format!("{file}: {e}")),
        }
    }
    assert!(
        unreadable.is_empty(),
        "unreadable sample files:\n  {}",
        unreadable.join("\n  ")
    );
    (files.len(), samples)
}

/// The upstream kinds raygate models; variant names are the upstream `kind`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    RayService,
    RayCluster,
    ResourceFlavor,
    ClusterQueue,
    LocalQueue,
    Cohort,
    Workload,
    WorkloadPriorityClass,
}

impl Kind {
    const ALL: [Kind; 8] = [
        Kind::RayService,
        Kind::RayCluster,
        Kind::ResourceFlavor,
        Kind::ClusterQueue,
        Kind::LocalQueue,
        Kind::Cohort,
        Kind::Workload,
        Kind::WorkloadPriorityClass,
    ];

    /// The modelled kind of a document, by its `kind` alone (the `apiVersion` is checked when parsing).
    fn of(doc: &Doc) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| format!("{k:?}") == doc.kind)
    }

    fn is_ray(self) -> bool {
        matches!(self, Kind::RayService | Kind::RayCluster)
    }

    fn api_version(self) -> &'static str {
        if self.is_ray() {
            "ray.io/v1"
        } else {
            "kueue.x-k8s.io/v1beta2"
        }
    }

    /// The upstream CRD file and version whose schema objects of this kind must satisfy.
    fn upstream_crd(self) -> (&'static str, &'static str) {
        let file = match self {
            Kind::RayService => "ray.io_rayservices.yaml",
            Kind::RayCluster => "ray.io_rayclusters.yaml",
            Kind::ResourceFlavor => "kueue.x-k8s.io_resourceflavors.yaml",
            Kind::ClusterQueue => "kueue.x-k8s.io_clusterqueues.yaml",
            Kind::LocalQueue => "kueue.x-k8s.io_localqueues.yaml",
            Kind::Cohort => "kueue.x-k8s.io_cohorts.yaml",
            Kind::Workload => "kueue.x-k8s.io_workloads.yaml",
            Kind::WorkloadPriorityClass => "kueue.x-k8s.io_workloadpriorityclasses.yaml",
        };
        (
            file,
            self.api_version().rsplit('/').next().unwrap_or_default(),
        )
    }

    /// Parses the document into the vendored type and serializes it back.
    fn round_trip(self, doc: &Doc) -> Result<Value, String> {
        let api_version = doc.value["apiVersion"].as_str().unwrap_or_default();
        if api_version != self.api_version() {
            return Err(format!(
                "apiVersion {api_version}, the vendored types model {}",
                self.api_version()
            ));
        }
        match self {
            Kind::RayService => via::<ray::RayService>(doc),
            Kind::RayCluster => via::<ray::RayCluster>(doc),
            Kind::ResourceFlavor => via::<kueue::ResourceFlavor>(doc),
            Kind::ClusterQueue => via::<kueue::ClusterQueue>(doc),
            Kind::LocalQueue => via::<kueue::LocalQueue>(doc),
            Kind::Cohort => via::<kueue::Cohort>(doc),
            Kind::Workload => via::<kueue::Workload>(doc),
            Kind::WorkloadPriorityClass => via::<kueue::WorkloadPriorityClass>(doc),
        }
    }
}

fn via<T: DeserializeOwned + Serialize>(doc: &Doc) -> Result<Value, String> {
    let typed: T = doc.parse().map_err(|e| match e {
        // The caller names the document already; keep the field path and the reason.
        ManifestError::Field { path, reason, .. } => format!("{path}: {reason}"),
        e => e.to_string(),
    })?;
    serde_json::to_value(&typed).map_err(|e| format!("cannot serialize back: {e}"))
}

/// Panics with every entry of `failures`, one per line, when there are any.
fn assert_none(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} {what}:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

#[test]
fn every_upstream_sample_parses_into_raygates_types() {
    let (files, samples) = load_samples();
    let mut parsed: BTreeMap<Kind, usize> = BTreeMap::new();
    let mut other: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for sample in &samples {
        match Kind::of(&sample.doc) {
            Some(kind) => match kind.round_trip(&sample.doc) {
                Ok(_) => *parsed.entry(kind).or_default() += 1,
                Err(e) => failures.push(format!("{}: {e}", sample.origin())),
            },
            None => *other.entry(sample.doc.kind.as_str()).or_default() += 1,
        }
    }

    println!("{files} sample files, {} objects", samples.len());
    for (kind, n) in &parsed {
        println!("  parsed {kind:?}: {n}");
    }
    println!(
        "  other kinds (not modelled): {} {other:?}",
        other.values().sum::<usize>()
    );

    assert_none(
        "sample objects of modelled kinds failed to parse",
        &failures,
    );
    let ray: usize = parsed
        .iter()
        .filter(|(k, _)| k.is_ray())
        .map(|(_, n)| n)
        .sum();
    let kueue: usize = parsed
        .iter()
        .filter(|(k, _)| !k.is_ray())
        .map(|(_, n)| n)
        .sum();
    assert!(
        ray > 0,
        "no RayService or RayCluster among the samples: is shared/ complete?"
    );
    assert!(
        kueue > 0,
        "no Kueue object among the samples: is shared/ complete?"
    );
}

// ---------------------------------------------------------------------------------------------
// Lossless round trip of ray objects
// ---------------------------------------------------------------------------------------------

/// Map keys whose values are all quantities (`resources.limits`, `status.admission...resourceUsage`).
const QUANTITY_MAPS: [&str; 6] = [
    "limits",
    "requests",
    "overhead",
    "resourceUsage",
    "capacity",
    "allocatable",
];
/// Fields that hold one quantity.
const QUANTITY_FIELDS: [&str; 10] = [
    "sizeLimit",
    "nominalQuota",
    "borrowingLimit",
    "lendingLimit",
    "total",
    "borrowed",
    "desiredCPU",
    "desiredMemory",
    "desiredGPU",
    "desiredTPU",
];

/// A JSON path as segments: object keys, or `[i]` for array items.
#[derive(Clone, Default)]
struct JsonPath(Vec<String>);

impl JsonPath {
    fn key(&self, key: &str) -> JsonPath {
        let mut p = self.clone();
        p.0.push(key.to_string());
        p
    }

    fn index(&self, i: usize) -> JsonPath {
        let mut p = self.clone();
        p.0.push(format!("[{i}]"));
        p
    }

    /// A quantity leaf: k8s-openapi's `Quantity` turns a YAML number into its string form.
    fn is_quantity(&self) -> bool {
        let n = self.0.len();
        let last = n.checked_sub(1).map(|i| self.0[i].as_str());
        let parent = n.checked_sub(2).map(|i| self.0[i].as_str());
        last.is_some_and(|k| QUANTITY_FIELDS.contains(&k))
            || parent.is_some_and(|k| QUANTITY_MAPS.contains(&k))
    }
}

impl std::fmt::Display for JsonPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(root)");
        }
        for (i, seg) in self.0.iter().enumerate() {
            if i > 0 && !seg.starts_with('[') {
                f.write_str(".")?;
            }
            f.write_str(seg)?;
        }
        Ok(())
    }
}

/// The outcome of comparing an original manifest value with its re-serialization.
#[derive(Default)]
struct Comparison {
    /// Real differences, as `path: what`.
    differences: Vec<String>,
    /// Tolerated: keys whose original value was an explicit `null` (typed `Option`s drop them; the
    /// API server treats null as unset).
    nulls_dropped: usize,
    /// Tolerated: a number that became its own string form at a quantity leaf (k8s-openapi's
    /// `Quantity` is a string; the API server stores both forms as the same quantity).
    quantities_stringified: usize,
}

impl Comparison {
    fn of(original: &Value, ours: &Value) -> Comparison {
        let mut c = Comparison::default();
        c.compare(original, ours, &JsonPath::default());
        c
    }

    fn compare(&mut self, original: &Value, ours: &Value, path: &JsonPath) {
        match (original, ours) {
            (Value::Object(o), Value::Object(n)) => {
                for (key, ov) in o {
                    match n.get(key) {
                        Some(nv) => self.compare(ov, nv, &path.key(key)),
                        None if ov.is_null() => self.nulls_dropped += 1,
                        None => self
                            .differences
                            .push(format!("{}: dropped (was {ov})", path.key(key))),
                    }
                }
                for (key, nv) in n.iter().filter(|(k, _)| !o.contains_key(*k)) {
                    self.differences
                        .push(format!("{}: added {nv}", path.key(key)));
                }
            }
            (Value::Array(o), Value::Array(n)) if o.len() == n.len() => {
                for (i, (ov, nv)) in o.iter().zip(n).enumerate() {
                    self.compare(ov, nv, &path.index(i));
                }
            }
            (Value::Number(num), Value::String(s))
                if path.is_quantity() && num.to_string() == *s =>
            {
                self.quantities_stringified += 1;
            }
            _ if original == ours => {}
            _ => self
                .differences
                .push(format!("{path}: {original} became {ours}")),
        }
    }
}

#[test]
fn ray_samples_round_trip_losslessly() {
    let (_, samples) = load_samples();
    let (mut checked, mut nulls, mut quantities) = (0, 0, 0);
    let mut failures = Vec::new();
    for sample in &samples {
        let Some(kind) = Kind::of(&sample.doc).filter(|k| k.is_ray()) else {
            continue;
        };
        match kind.round_trip(&sample.doc) {
            Ok(ours) => {
                let c = Comparison::of(&sample.doc.value, &ours);
                failures.extend(
                    c.differences
                        .into_iter()
                        .map(|d| format!("{}: {d}", sample.origin())),
                );
                (nulls, quantities) = (
                    nulls + c.nulls_dropped,
                    quantities + c.quantities_stringified,
                );
                checked += 1;
            }
            // Not comparable at all: a parse failure is a round-trip failure too.
            Err(e) => failures.push(format!("{}: not parsed: {e}", sample.origin())),
        }
    }
    println!(
        "{checked} ray objects round-tripped ({nulls} explicit nulls dropped, {quantities} numeric quantities stringified)"
    );
    assert_none("round-trip differences", &failures);
    assert!(checked > 0, "no ray objects among the samples");
}

#[test]
fn the_round_trip_comparison_catches_real_differences() {
    // The tolerances above must not hide a lost field or a changed value.
    let original = serde_json::json!({"a": {"cpu": 1, "n": 1, "gone": "x", "nul": null}, "requests": {"cpu": 2}});
    let ours =
        serde_json::json!({"a": {"cpu": "1", "n": "1"}, "requests": {"cpu": "2"}, "new": true});
    let c = Comparison::of(&original, &ours);
    assert_eq!(
        c.differences,
        [
            "a.cpu: 1 became \"1\"",
            "a.gone: dropped (was \"x\")",
            "a.n: 1 became \"1\"",
            "new: added true"
        ]
    );
    assert_eq!((c.nulls_dropped, c.quantities_stringified), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// Validation against the upstream schemas
// ---------------------------------------------------------------------------------------------

/// Validators for the upstream schemas, compiled once per kind (the schemas are ~1 MB each).
#[derive(Default)]
struct Validators(BTreeMap<Kind, (Value, jsonschema::Validator)>);

impl Validators {
    /// The violations of `object` against the upstream schema of `kind`, as `path: message`, after
    /// applying the schema's defaults as the API server does before it validates.
    fn violations(&mut self, kind: Kind, object: &Value) -> Vec<String> {
        let (schema, validator) = self.0.entry(kind).or_insert_with(|| {
            let (file, version) = kind.upstream_crd();
            let schema = upstream::crd_schema(file, version);
            // Kubernetes structural schemas are a subset of OpenAPI v3 that draft 4 reads the same
            // way; `x-kubernetes-*` keys are ignored as unknown keywords. Formats are checked:
            // int32/int64/byte are unknown to JSON Schema and ignored, date-time is checked.
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft4)
                .should_validate_formats(true)
                .build(&schema)
                .map(|validator| (schema, validator))
                .unwrap_or_else(|e| panic!("{file} {version}: not a usable JSON schema: {e}"))
        });
        let mut object = object.clone();
        apply_defaults(schema, &mut object);
        validator
            .iter_errors(&object)
            .map(|e| format!("{}: {}", e.instance_path(), shorten(&e.to_string())))
            .collect()
    }
}

/// Fills in `default`s from a structural schema the way the API server does before validating:
/// a missing property gets its default, and defaulting recurses into what is present. Without it,
/// KubeRay's `required` `minReplicas`/`maxReplicas` (which carry defaults) would reject valid samples.
fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(object) => {
            for (name, property) in schema["properties"].as_object().into_iter().flatten() {
                if let Some(default) = property
                    .get("default")
                    .filter(|_| !object.contains_key(name))
                {
                    object.insert(name.clone(), default.clone());
                }
                if let Some(present) = object.get_mut(name) {
                    apply_defaults(property, present);
                }
            }
            if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
                object.values_mut().for_each(|v| apply_defaults(values, v));
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                items.iter_mut().for_each(|v| apply_defaults(item, v));
            }
        }
        _ => {}
    }
}

/// A validation message cut to a readable length: the crate quotes the whole offending value.
fn shorten(message: &str) -> String {
    const MAX: usize = 200;
    match message.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message.to_string(),
    }
}

fn time(rfc3339: &str) -> Time {
    Time(rfc3339.parse().unwrap_or_else(|e| panic!("{rfc3339}: {e}")))
}

fn condition(type_: &str, status: &str, reason: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: format!("{type_} is {status}"),
        last_transition_time: time("2026-01-02T03:04:05Z"),
        observed_generation: Some(1),
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

fn pod_template(container: &str, requests: &[(&str, &str)]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some([("ray.io/node-type".to_string(), container.to_string())].into()),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: container.into(),
                image: Some("rayproject/ray:2.52.0".into()),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(requests)),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

fn pod_set(name: &str, count: i32) -> kueue::PodSet {
    kueue::PodSet {
        name: name.into(),
        template: pod_template(name, &[("cpu", "1"), ("memory", "1Gi")]),
        count,
        min_count: None,
    }
}

fn assignment(name: &str, count: i32) -> kueue::PodSetAssignment {
    let flavors = ["cpu", "memory"]
        .map(|r| (r.to_string(), "default-flavor".to_string()))
        .into();
    let usage = quantities(&[
        ("cpu", &count.to_string()),
        ("memory", &format!("{count}Gi")),
    ]);
    kueue::PodSetAssignment {
        name: name.into(),
        flavors,
        resource_usage: usage,
        count: Some(count),
    }
}

/// A Workload as raygate writes one for a RayService child: head + workers, admitted.
fn admitted_workload() -> kueue::Workload {
    let mut wl = kueue::Workload::new(
        "raycluster-rayservice-sample-abc12",
        kueue::WorkloadSpec {
            pod_sets: vec![pod_set("head", 1), pod_set("worker", 3)],
            queue_name: Some("user-queue".into()),
            priority_class_ref: Some(kueue::PriorityClassRef {
                group: "kueue.x-k8s.io".into(),
                kind: "WorkloadPriorityClass".into(),
                name: "high".into(),
            }),
            priority: Some(100),
            active: Some(true),
        },
    );
    wl.metadata.namespace = Some("default".into());
    wl.metadata.labels = Some(
        [(
            kueue::QUEUE_NAME_LABEL.to_string(),
            "user-queue".to_string(),
        )]
        .into(),
    );
    wl.metadata.annotations = Some(
        [
            (kueue::ELASTIC_JOB_ANNOTATION, "true"),
            (
                kueue::WORKLOAD_SLICE_NAME_ANNOTATION,
                "raycluster-rayservice-sample-abc12",
            ),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into(),
    );
    wl.status = Some(kueue::WorkloadStatus {
        conditions: vec![
            condition(
                kueue::condition::QUOTA_RESERVED,
                "True",
                kueue::reason::QUOTA_RESERVED,
            ),
            condition(kueue::condition::ADMITTED, "True", kueue::reason::ADMITTED),
        ],
        admission: Some(kueue::Admission {
            cluster_queue: "cluster-queue".into(),
            pod_set_assignments: vec![assignment("head", 1), assignment("worker", 3)],
        }),
        reclaimable_pods: vec![kueue::ReclaimablePod {
            name: "worker".into(),
            count: 1,
        }],
        requeue_state: None,
    });
    wl
}

/// A pending replacement slice: no admission, deactivated, naming the slice it replaces.
fn pending_replacement_slice() -> kueue::Workload {
    let mut wl = admitted_workload();
    wl.metadata.name = Some("raycluster-rayservice-sample-abc12-slice-2".into());
    if let Some(annotations) = wl.metadata.annotations.as_mut() {
        annotations.insert(
            kueue::WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION.into(),
            "default/raycluster-rayservice-sample-abc12".into(),
        );
    }
    wl.spec.pod_sets[1].count = 5;
    wl.spec.active = Some(false);
    wl.status = Some(kueue::WorkloadStatus {
        conditions: vec![condition(
            kueue::condition::QUOTA_RESERVED,
            "False",
            kueue::reason::PENDING,
        )],
        ..Default::default()
    });
    wl
}

fn cluster_queue() -> kueue::ClusterQueue {
    let quota = |name: &str, nominal: &str| kueue::ResourceQuota {
        name: name.into(),
        nominal_quota: Some(Quantity(nominal.into())),
        borrowing_limit: Some(Quantity("0".into())),
        lending_limit: None,
    };
    let usage = |name: &str, total: &str| kueue::ResourceUsage {
        name: name.into(),
        total: Some(Quantity(total.into())),
        borrowed: Some(Quantity("0".into())),
    };
    let flavor_usage = || kueue::FlavorUsage {
        name: "default-flavor".into(),
        resources: vec![usage("cpu", "4"), usage("memory", "4Gi")],
    };
    let mut cq = kueue::ClusterQueue::new(
        "cluster-queue",
        kueue::ClusterQueueSpec {
            resource_groups: vec![kueue::ResourceGroup {
                covered_resources: vec!["cpu".into(), "memory".into()],
                flavors: vec![kueue::FlavorQuotas {
                    name: "default-flavor".into(),
                    resources: vec![quota("cpu", "9"), quota("memory", "36Gi")],
                }],
            }],
            cohort_name: Some("team".into()),
            queueing_strategy: Some(kueue::QueueingStrategy::BestEffortFIFO),
            namespace_selector: Some(LabelSelector::default()),
            preemption: Some(kueue::ClusterQueuePreemption {
                reclaim_within_cohort: Some(kueue::ReclaimWithinCohort::Any),
                within_cluster_queue: Some(kueue::WithinClusterQueue::LowerPriority),
                borrow_within_cohort: Some(kueue::BorrowWithinCohort {
                    policy: Some("LowerPriority".into()),
                    max_priority_threshold: Some(100),
                }),
            }),
            stop_policy: Some(kueue::StopPolicy::None),
            flavor_fungibility: None,
        },
    );
    cq.status = Some(kueue::ClusterQueueStatus {
        conditions: vec![condition("Active", "True", "Ready")],
        flavors_reservation: vec![flavor_usage()],
        flavors_usage: vec![flavor_usage()],
        pending_workloads: Some(1),
        reserving_workloads: Some(2),
        admitted_workloads: Some(2),
    });
    cq
}

fn local_queue() -> kueue::LocalQueue {
    let mut lq = kueue::LocalQueue::new(
        "user-queue",
        kueue::LocalQueueSpec {
            cluster_queue: Some("cluster-queue".into()),
            stop_policy: Some(kueue::StopPolicy::None),
        },
    );
    lq.metadata.namespace = Some("default".into());
    let usage = || kueue::LocalQueueFlavorUsage {
        name: "default-flavor".into(),
        resources: vec![kueue::LocalQueueResourceUsage {
            name: "cpu".into(),
            total: Some(Quantity("4".into())),
        }],
    };
    lq.status = Some(kueue::LocalQueueStatus {
        conditions: vec![condition("Active", "True", "Ready")],
        flavors_reservation: vec![usage()],
        flavors_usage: vec![usage()],
        pending_workloads: Some(0),
        reserving_workloads: Some(1),
        admitted_workloads: Some(1),
    });
    lq
}

fn cohort() -> kueue::Cohort {
    kueue::Cohort::new(
        "team",
        kueue::CohortSpec {
            parent_name: Some("org".into()),
            resource_groups: vec![kueue::ResourceGroup {
                covered_resources: vec!["cpu".into()],
                flavors: vec![kueue::FlavorQuotas {
                    name: "default-flavor".into(),
                    resources: vec![kueue::ResourceQuota {
                        name: "cpu".into(),
                        nominal_quota: Some(Quantity("2".into())),
                        ..Default::default()
                    }],
                }],
            }],
        },
    )
}

fn resource_flavor() -> kueue::ResourceFlavor {
    let labels = [("instance-type".to_string(), "on-demand".to_string())].into();
    kueue::ResourceFlavor::new(
        "default-flavor",
        kueue::ResourceFlavorSpec {
            node_labels: Some(labels),
            topology_name: None,
            node_taints: None,
            tolerations: None,
        },
    )
}

fn priority_class() -> kueue::WorkloadPriorityClass {
    kueue::WorkloadPriorityClass::new(
        "high",
        kueue::WorkloadPriorityClassFields {
            value: 100,
            description: Some("serving traffic".into()),
        },
    )
}

fn to_json(object: &impl Serialize) -> Value {
    serde_json::to_value(object).unwrap_or_else(|e| panic!("cannot serialize: {e}"))
}

#[test]
fn serialized_objects_validate_against_upstream_schemas() {
    let mut validators = Validators::default();
    let mut validated: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();

    // (a), (b): every sample of a modelled kind, as our types serialize it.
    let (_, samples) = load_samples();
    for sample in &samples {
        let Some(kind) = Kind::of(&sample.doc) else {
            continue;
        };
        let ours = match kind.round_trip(&sample.doc) {
            Ok(ours) => ours,
            Err(e) => {
                failures.push(format!("{}: not parsed: {e}", sample.origin()));
                continue;
            }
        };
        let violations = validators.violations(kind, &ours);
        failures.extend(
            violations
                .iter()
                .map(|v| format!("{}: {v}", sample.origin())),
        );
        *validated
            .entry(if kind.is_ray() {
                "ray samples"
            } else {
                "kueue samples"
            })
            .or_default() += 1;
    }

    // (c): objects built in code the way raygate writes them.
    let built = [
        (
            "admitted Workload",
            Kind::Workload,
            to_json(&admitted_workload()),
        ),
        (
            "pending replacement slice",
            Kind::Workload,
            to_json(&pending_replacement_slice()),
        ),
        (
            "ClusterQueue",
            Kind::ClusterQueue,
            to_json(&cluster_queue()),
        ),
        ("LocalQueue", Kind::LocalQueue, to_json(&local_queue())),
        ("Cohort", Kind::Cohort, to_json(&cohort())),
        (
            "ResourceFlavor",
            Kind::ResourceFlavor,
            to_json(&resource_flavor()),
        ),
        (
            "WorkloadPriorityClass",
            Kind::WorkloadPriorityClass,
            to_json(&priority_class()),
        ),
    ];
    for (what, kind, object) in &built {
        failures.extend(
            validators
                .violations(*kind, object)
                .iter()
                .map(|v| format!("{what}: {v}")),
        );
        *validated.entry("built in code").or_default() += 1;
    }

    println!(
        "validated against upstream schemas: {} objects {validated:?}",
        validated.values().sum::<usize>()
    );
    assert_none("schema violations", &failures);
    assert!(
        validated.get("ray samples").is_some_and(|n| *n > 0),
        "no ray sample was validated"
    );
}

#[test]
fn the_upstream_schemas_reject_invalid_objects() {
    // Negative controls: prove the validator enforces `minimum`, `maxItems` and `type` rather than
    // accepting everything (as it would if, say, the schema failed to load as a schema).
    let mut validators = Validators::default();

    let mut negative_count = admitted_workload();
    negative_count.spec.pod_sets[0].count = -1;
    let mut too_many = admitted_workload();
    too_many.spec.pod_sets = (0..19).map(|i| pod_set(&format!("group-{i}"), 1)).collect();
    too_many.status = None;

    let (_, samples) = load_samples();
    // Start from a sample as our types serialize it, so that only the mutation can be at fault.
    let mut bad_replicas = samples
        .iter()
        .filter(|s| s.doc.kind == "RayCluster")
        .filter_map(|s| Kind::RayCluster.round_trip(&s.doc).ok())
        .find(|v| v["spec"]["workerGroupSpecs"][0].is_object())
        .unwrap_or_else(|| panic!("no sample RayCluster with a worker group"));
    bad_replicas["spec"]["workerGroupSpecs"][0]["replicas"] = Value::from("x");

    let cases = [
        (
            "Workload with podSets[0].count -1",
            Kind::Workload,
            to_json(&negative_count),
            "/spec/podSets/0/count",
        ),
        (
            "Workload with 19 podSets",
            Kind::Workload,
            to_json(&too_many),
            "/spec/podSets",
        ),
        (
            "RayCluster with replicas \"x\"",
            Kind::RayCluster,
            bad_replicas,
            "/spec/workerGroupSpecs/0/replicas",
        ),
    ];
    for (what, kind, object, expected_path) in cases {
        let violations = validators.violations(kind, &object);
        println!("{what}: {violations:?}");
        assert!(
            !violations.is_empty(),
            "{what}: accepted by the upstream schema"
        );
        // Only the mutated field may be at fault, or the control proves nothing about it.
        assert!(
            violations
                .iter()
                .all(|v| v.starts_with(&format!("{expected_path}: "))),
            "{what}: expected violations at {expected_path} only, got {violations:#?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Generated CRDs vs Kueue's
// ---------------------------------------------------------------------------------------------

/// How a schema node is typed, with int-or-string as its own type: ours marks quantities
/// `x-kubernetes-int-or-string` without `type`, Kueue adds `anyOf: [integer, string]`.
fn schema_type(node: &Value) -> &str {
    if node["x-kubernetes-int-or-string"] == Value::Bool(true) {
        "int-or-string"
    } else {
        node["type"].as_str().unwrap_or("none")
    }
}

/// The list markers of a schema node, as `x-kubernetes-list-type=map keys [name]` or `none`.
///
/// An array without `x-kubernetes-list-type` is `atomic` (the documented default of the
/// apiextensions API), so `atomic` alone is reported as `none`: both merge the same way.
fn list_markers(node: &Value) -> String {
    let list_type = node
        .get("x-kubernetes-list-type")
        .and_then(Value::as_str)
        .filter(|t| *t != "atomic");
    let keys = node
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array);
    match (list_type, keys) {
        (None, None) => "none".into(),
        (list_type, keys) => {
            let mut out = format!("x-kubernetes-list-type={}", list_type.unwrap_or("unset"));
            if let Some(keys) = keys {
                let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
                out.push_str(&format!(" keys [{}]", keys.join(", ")));
            }
            out
        }
    }
}

/// Checks every path `ours` declares against `theirs`: it must exist upstream with the same type,
/// the same list markers, and no enum value upstream would reject.
fn compare_schemas(
    crd: &str,
    ours: &Value,
    theirs: &Value,
    path: &JsonPath,
    out: &mut Vec<String>,
) {
    let (our_type, their_type) = (schema_type(ours), schema_type(theirs));
    if our_type != their_type {
        out.push(format!(
            "{crd}: {path}: upstream type {their_type}, ours {our_type}"
        ));
    }
    let (our_markers, their_markers) = (list_markers(ours), list_markers(theirs));
    if our_markers != their_markers {
        out.push(format!(
            "{crd}: {path}: upstream {their_markers}, ours {our_markers}"
        ));
    }
    if let (Some(our_enum), Some(their_enum)) = (ours["enum"].as_array(), theirs["enum"].as_array())
    {
        // `null` is how schemars marks an `Option`; the API server prunes nulls of non-nullable
        // fields rather than rejecting them, and we never serialize one.
        for value in our_enum
            .iter()
            .filter(|v| !v.is_null() && !their_enum.contains(v))
        {
            out.push(format!(
                "{crd}: {path}: ours allows enum value {value}, upstream does not"
            ));
        }
    }

    for (name, sub) in ours["properties"].as_object().into_iter().flatten() {
        match theirs["properties"].get(name) {
            Some(their_sub) => compare_schemas(crd, sub, their_sub, &path.key(name), out),
            None => out.push(format!("{crd}: {}: not in upstream", path.key(name))),
        }
    }
    if let Some(items) = ours.get("items") {
        match theirs.get("items") {
            Some(their_items) => compare_schemas(crd, items, their_items, &path.key("[*]"), out),
            None => out.push(format!("{crd}: {path}: ours has items, upstream none")),
        }
    }
    if let Some(values) = ours.get("additionalProperties").filter(|v| v.is_object()) {
        match theirs.get("additionalProperties").filter(|v| v.is_object()) {
            Some(their_values) => compare_schemas(crd, values, their_values, &path.key("*"), out),
            None => out.push(format!(
                "{crd}: {path}: ours has additionalProperties, upstream none"
            )),
        }
    }
}

#[test]
fn generated_kueue_crds_are_structural_subsets_of_kueues() {
    // raygate's own CRDs (raygate.io) have no upstream to be a subset of
    let crds: Vec<_> = raygate::crdgen::crds()
        .into_iter()
        .filter(|(_, crd)| raygate::crdgen::is_kueue(crd))
        .collect();
    let mut mismatches = Vec::new();
    let mut paths = 0;
    for (file_name, crd) in &crds {
        let ours = to_json(crd);
        let spec = &ours["spec"];
        let plural = spec["names"]["plural"].as_str().unwrap_or_default();
        let group = spec["group"].as_str().unwrap_or_default();
        let theirs = upstream::crd(&format!("{group}_{plural}.yaml"));

        for field in [
            "/spec/group",
            "/spec/scope",
            "/spec/names/kind",
            "/spec/names/plural",
            "/metadata/name",
        ] {
            if ours.pointer(field) != theirs.pointer(field) {
                mismatches.push(format!(
                    "{plural}: {field}: upstream {}, ours {}",
                    theirs.pointer(field).unwrap_or(&Value::Null),
                    ours.pointer(field).unwrap_or(&Value::Null)
                ));
            }
        }

        let Some(our_schema) = upstream::version_schema(&ours, "v1beta2") else {
            mismatches.push(format!(
                "{plural} ({file_name}): no v1beta2 openAPIV3Schema"
            ));
            continue;
        };
        let their_schema = upstream::crd_schema(&format!("{group}_{plural}.yaml"), "v1beta2");
        let before = mismatches.len();
        compare_schemas(
            plural,
            &our_schema,
            &their_schema,
            &JsonPath::default(),
            &mut mismatches,
        );
        paths += count_paths(&our_schema);
        println!("{plural}: {} mismatches", mismatches.len() - before);
    }
    println!(
        "{} generated CRDs, {paths} schema paths compared",
        crds.len()
    );
    assert_eq!(
        crds.len(),
        6,
        "expected the six kueue.x-k8s.io CRDs raygate installs"
    );
    assert_none("mismatches with Kueue v0.19.2's CRDs", &mismatches);
}

/// Schema nodes below `node` (itself included), to show how much the comparison covered.
fn count_paths(node: &Value) -> usize {
    let props = node["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, v)| count_paths(v))
        .sum::<usize>();
    let items = node.get("items").map_or(0, count_paths);
    let values = node
        .get("additionalProperties")
        .filter(|v| v.is_object())
        .map_or(0, count_paths);
    1 + props + items + values
}

// ---------------------------------------------------------------------------------------------
// The shared/ locator
// ---------------------------------------------------------------------------------------------

#[test]
fn a_missing_shared_dir_fails_under_ci() {
    let missing =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/no-such-shared-dir");
    let err =
        upstream::locate(&missing, true).expect_err("a missing shared/ must be an error under CI");
    assert!(
        err.contains(&missing.display().to_string()),
        "the error must name the path: {err}"
    );
    assert!(err.contains("CI"), "the error must say why CI fails: {err}");

    // Off CI it is an error too: shared/ is on every developer machine, so never skip silently.
    let err = upstream::locate(&missing, false)
        .expect_err("a missing shared/ must be an error off CI too");
    assert!(err.contains(&missing.display().to_string()), "{err}");

    // A directory without the expected content is as unusable as none.
    let incomplete = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let err = upstream::locate(&incomplete, true)
        .expect_err("a directory without upstream data must be rejected");
    assert!(
        err.contains("lacks upstream-crds, upstream-samples"),
        "{err}"
    );

    assert!(upstream::dir().join("upstream-crds").is_dir());
}
