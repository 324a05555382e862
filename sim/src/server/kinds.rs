//! The resources the sim serves: built-in core kinds and CustomResourceDefinitions loaded from
//! their YAML (scope, served versions, subresources, schemas, selectable fields).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::server::schema::CompiledSchema;

/// One served resource (all of its versions).
#[derive(Debug)]
pub struct ResourceType {
    pub group: String,
    /// Served versions; the first is the storage version.
    pub versions: Vec<String>,
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    pub status_subresource: bool,
    pub scale_subresource: bool,
    /// Where the `scale` subresource reads and writes (`.spec.replicas`, `.status.replicas`,
    /// the label selector), when served.
    pub scale: Option<ScalePaths>,
    /// Built in (core kinds): no schema; updates without a `resourceVersion` are allowed and
    /// strategic merge patch is accepted.
    pub builtin: bool,
    /// Field selector labels this resource supports.
    pub field_selectors: Vec<String>,
    /// `openAPIV3Schema` per version (CRDs only).
    pub schemas: BTreeMap<String, Value>,
    /// Short names and categories (`spec.names` of a CRD; kube-apiserver's for built-ins).
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// `additionalPrinterColumns` per version (CRDs only).
    pub printer_columns: BTreeMap<String, Value>,
    /// The CustomResourceDefinition it was read from (CRDs only).
    pub definition: Option<Value>,
    compiled: BTreeMap<String, OnceLock<Arc<CompiledSchema>>>,
}

/// The JSON paths of a `scale` subresource (a CRD's `subresources.scale`; for apps/v1 kinds
/// `.spec.replicas`, `.status.replicas` and the structured `.spec.selector`).
#[derive(Clone, Debug, PartialEq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    /// `None`: the selector is `.spec.selector` as a `metav1.LabelSelector` (apps/v1 kinds).
    pub label_selector: Option<String>,
}

impl ScalePaths {
    fn apps() -> Self {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        }
    }

    fn of_crd(scale: &Value) -> Option<Self> {
        let spec = scale.get("specReplicasPath")?.as_str()?;
        Some(ScalePaths {
            spec_replicas: spec.into(),
            status_replicas: scale["statusReplicasPath"]
                .as_str()
                .unwrap_or_default()
                .into(),
            label_selector: Some(
                scale["labelSelectorPath"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            ),
        })
    }
}

/// How a list merges under server-side apply and strategic merge patch.
#[derive(Clone, Debug, PartialEq)]
pub enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

impl ResourceType {
    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
        extra_fields: &[&str],
    ) -> Self {
        let mut fields = vec!["metadata.name".to_string()];
        if namespaced {
            fields.push("metadata.namespace".into());
        }
        fields.extend(extra_fields.iter().map(|s| s.to_string()));
        let (short_names, categories) = builtin_names(group, plural);
        ResourceType {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource: status,
            scale_subresource: false,
            scale: None,
            builtin: true,
            field_selectors: fields,
            schemas: BTreeMap::new(),
            short_names: short_names.iter().map(|s| s.to_string()).collect(),
            categories: categories.iter().map(|s| s.to_string()).collect(),
            printer_columns: BTreeMap::new(),
            definition: None,
            compiled: BTreeMap::new(),
        }
    }

    /// `apiVersion` for `version`.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    pub fn field_selectors(&self) -> Vec<&str> {
        self.field_selectors.iter().map(String::as_str).collect()
    }

    /// The compiled schema of `version` (CRDs), built on first use.
    pub fn schema(&self, version: &str) -> Option<Arc<CompiledSchema>> {
        let raw = self.schemas.get(version)?;
        let cell = self.compiled.get(version)?;
        Some(
            cell.get_or_init(|| Arc::new(CompiledSchema::new(raw.clone())))
                .clone(),
        )
    }

    /// Whether the map at `path` is `x-kubernetes-map-type: atomic` (owned and applied whole).
    pub fn map_is_atomic(&self, version: &str, path: &[&str]) -> bool {
        if path.is_empty() || path.first() == Some(&"metadata") || self.builtin {
            return false;
        }
        let Some(mut s) = self.schemas.get(version) else {
            return false;
        };
        for field in path {
            while let Some(items) = s.get("items") {
                s = items;
            }
            s = match s
                .get("properties")
                .and_then(|p| p.get(*field))
                .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
            {
                Some(next) => next,
                None => return false,
            };
        }
        s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
    }

    /// How the list at `path` (field names from the object root) merges.
    pub fn list_type(&self, version: &str, path: &[&str]) -> ListType {
        if path.first() == Some(&"metadata") || self.builtin {
            return builtin_list_type(path);
        }
        let Some(mut s) = self.schemas.get(version) else {
            return ListType::Atomic;
        };
        for field in path {
            // walk through array items to the next object
            while let Some(items) = s.get("items") {
                s = items;
            }
            s = match s
                .get("properties")
                .and_then(|p| p.get(*field))
                .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
            {
                Some(next) => next,
                None => return ListType::Atomic,
            };
        }
        list_type_of(s)
    }
}

/// A schema node's `x-kubernetes-list-type`.
pub fn list_type_of(schema: &Value) -> ListType {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => ListType::Map(
            schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| k.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        Some("set") => ListType::Set,
        _ => ListType::Atomic,
    }
}

/// List merge keys of the core types' Go struct tags (`+listType`, `+listMapKey`,
/// `patchMergeKey`) for the lists the sim's clients touch.
fn builtin_list_type(path: &[&str]) -> ListType {
    let keys = |k: &[&str]| ListType::Map(k.iter().map(|s| s.to_string()).collect());
    match path {
        ["metadata", "ownerReferences"] => keys(&["uid"]),
        ["metadata", "finalizers"] => ListType::Set,
        [.., "containers" | "initContainers" | "ephemeralContainers"] => keys(&["name"]),
        [.., "containers" | "initContainers", "ports"] => keys(&["containerPort", "protocol"]),
        [.., "env"] => keys(&["name"]),
        [.., "volumeMounts"] => keys(&["mountPath"]),
        ["spec", "volumes"] | [.., "spec", "volumes"] => keys(&["name"]),
        [.., "imagePullSecrets"] => keys(&["name"]),
        ["status", "conditions"] => keys(&["type"]),
        ["status", "containerStatuses" | "initContainerStatuses"] => keys(&["name"]),
        ["status", "addresses"] => keys(&["type"]),
        _ => ListType::Atomic,
    }
}

/// The built-in core/v1 kinds: Pods, Nodes, Namespaces, Events.
/// kube-apiserver's short names and categories of the built-in kinds served
/// (`pkg/registry/*/*/storage`: `ShortNames()`, `Categories()`).
fn builtin_names(group: &str, plural: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match (group, plural) {
        ("", "pods") => (&["po"], &["all"]),
        ("", "nodes") => (&["no"], &[]),
        ("", "namespaces") => (&["ns"], &[]),
        ("", "events") | ("events.k8s.io", "events") => (&["ev"], &[]),
        ("", "limitranges") => (&["limits"], &[]),
        ("policy", "poddisruptionbudgets") => (&["pdb"], &[]),
        ("apps", "replicasets") => (&["rs"], &["all"]),
        ("apps", "deployments") => (&["deploy"], &["all"]),
        ("apps", "statefulsets") => (&["sts"], &["all"]),
        ("apps", "daemonsets") => (&["ds"], &["all"]),
        ("batch", "jobs") => (&[], &["all"]),
        ("", "configmaps") => (&["cm"], &[]),
        ("", "services") => (&["svc"], &["all"]),
        ("", "serviceaccounts") => (&["sa"], &[]),
        ("", "resourcequotas") => (&["quota"], &[]),
        ("scheduling.k8s.io", "priorityclasses") => (&["pc"], &[]),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            (&["crd", "crds"], &["api-extensions"])
        }
        _ => (&[], &[]),
    }
}

fn core_v1() -> Vec<ResourceType> {
    let b = ResourceType::builtin;
    let pods_fields = [
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ];
    vec![
        b("", "v1", "pods", "Pod", true, true, &pods_fields),
        b(
            "",
            "v1",
            "nodes",
            "Node",
            false,
            true,
            &["spec.unschedulable"],
        ),
        b(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            true,
            &["status.phase"],
        ),
        b(
            "",
            "v1",
            "events",
            "Event",
            true,
            false,
            &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "reason",
                "type",
            ],
        ),
    ]
}

/// The built-in kinds of events.k8s.io/v1, policy/v1, coordination.k8s.io/v1 and node.k8s.io/v1,
/// and core/v1 LimitRanges (stored and served; no admission plugin applies them to pods).
fn other_builtins() -> Vec<ResourceType> {
    let b = ResourceType::builtin;
    vec![
        b("events.k8s.io", "v1", "events", "Event", true, false, &[]),
        b("", "v1", "limitranges", "LimitRange", true, false, &[]),
        b(
            "node.k8s.io",
            "v1",
            "runtimeclasses",
            "RuntimeClass",
            false,
            false,
            &[],
        ),
        b(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            true,
            &[],
        ),
        b(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            false,
            &[],
        ),
    ]
}

/// Built-in kinds served as stored objects, with no controller acting on them: what clients
/// built elsewhere (Kueue's manager, kubectl) read or write beside the kinds above.
fn stored_builtins() -> Vec<ResourceType> {
    let b = ResourceType::builtin;
    [
        ("", "secrets", "Secret", true, false),
        ("", "configmaps", "ConfigMap", true, false),
        ("", "services", "Service", true, true),
        ("", "serviceaccounts", "ServiceAccount", true, false),
        ("", "resourcequotas", "ResourceQuota", true, true),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
        ),
        (
            "scheduling.k8s.io",
            "priorityclasses",
            "PriorityClass",
            false,
            false,
        ),
    ]
    .into_iter()
    .map(|(group, plural, kind, namespaced, status)| {
        b(group, "v1", plural, kind, namespaced, status, &[])
    })
    .collect()
}

/// The built-in apps/v1 workloads; all but DaemonSets serve `scale`
/// (pkg/registry/apps/*/storage).
fn apps_v1() -> Vec<ResourceType> {
    let b = ResourceType::builtin;
    let mut types = vec![
        b(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            true,
            true,
            &["status.replicas"],
        ),
        b("apps", "v1", "deployments", "Deployment", true, true, &[]),
        b("apps", "v1", "statefulsets", "StatefulSet", true, true, &[]),
        b("apps", "v1", "daemonsets", "DaemonSet", true, true, &[]),
    ];
    for t in &mut types {
        if t.kind != "DaemonSet" {
            t.scale_subresource = true;
            t.scale = Some(ScalePaths::apps());
        }
    }
    types
}

/// The built-in batch/v1 Jobs, with `status` (pkg/registry/batch/job/storage).
///
/// Conformance: the object is Kubernetes' `batch/v1` `Job` (`k8s.io/api/batch/v1/types.go`,
/// k8s-openapi's `api::batch::v1::Job`), stored as sent, its `generation` kept as for apps/v1.
/// Left out of the registry's strategy (`pkg/registry/batch/job/strategy.go`): no defaulting
/// (`backoffLimit`, `completions`, `parallelism`, `completionMode`, `podReplacementPolicy`), no
/// generated `spec.selector` nor `batch.kubernetes.io/controller-uid` / `job-name` template
/// labels (`generateSelector`), no validation, and no `status.successful` field selector. The
/// simulated Job controller finds a Job's pods by their controller ownerReference.
fn batch_v1() -> Vec<ResourceType> {
    vec![ResourceType::builtin(
        "batch",
        "v1",
        "jobs",
        "Job",
        true,
        true,
        &[],
    )]
}

/// A JSON list of strings (a CRD's `shortNames`, `categories`).
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

/// Every resource the sim serves. Clones share their resource types (and the CRD schemas
/// compiled on first use), so one registry read from YAML can serve many sims.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    types: Vec<Arc<ResourceType>>,
}

/// A CRD that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("reading CRD YAML: document {index}: {reason}")]
    Yaml { index: usize, reason: String },
    #[error("reading {0}: {1}")]
    Io(String, std::io::Error),
    #[error("CRD {name}: missing {field}")]
    Missing { name: String, field: &'static str },
}

impl Registry {
    /// The built-in kinds: core/v1 Pods, Nodes, Namespaces, Events; events.k8s.io/v1 Events;
    /// policy/v1 PodDisruptionBudgets; coordination.k8s.io/v1 Leases; apps/v1 ReplicaSets, Deployments and StatefulSets (with `scale`), and DaemonSets (without: a DaemonSet has no
    /// scale subresource); batch/v1 Jobs ([`batch_v1`]). Only the actors a world starts act on
    /// them; `kubectl drain`'s rules read them.
    pub fn with_builtins() -> Self {
        let types = [
            core_v1(),
            other_builtins(),
            apps_v1(),
            batch_v1(),
            stored_builtins(),
        ];
        Registry {
            types: types.into_iter().flatten().map(Arc::new).collect(),
        }
    }

    /// Adds every CustomResourceDefinition in a (multi-document) YAML string.
    pub fn add_crds_yaml(&mut self, yaml: &str) -> Result<usize, CrdError> {
        let mut n = 0;
        for chunk in raygate::manifest::split_documents(yaml) {
            let v = chunk.value().map_err(|reason| CrdError::Yaml {
                index: chunk.index,
                reason,
            })?;
            if v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
                self.add_crd(&v)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Adds one CRD (`apiextensions.k8s.io/v1`), replacing one of the same group and plural.
    pub fn add_crd(&mut self, crd: &Value) -> Result<(), CrdError> {
        let name = crd["metadata"]["name"].as_str().unwrap_or("?").to_string();
        let missing = |field| CrdError::Missing {
            name: name.clone(),
            field,
        };
        let spec = &crd["spec"];
        let group = spec["group"]
            .as_str()
            .ok_or_else(|| missing("spec.group"))?;
        let plural = spec["names"]["plural"]
            .as_str()
            .ok_or_else(|| missing("spec.names.plural"))?;
        let kind = spec["names"]["kind"]
            .as_str()
            .ok_or_else(|| missing("spec.names.kind"))?;
        let versions = spec["versions"]
            .as_array()
            .ok_or_else(|| missing("spec.versions"))?;
        let mut served: Vec<&Value> = versions
            .iter()
            .filter(|v| v["served"].as_bool() != Some(false))
            .collect();
        // storage version first
        served.sort_by_key(|v| v["storage"].as_bool() != Some(true));
        let storage = served.first().ok_or_else(|| missing("a served version"))?;
        let mut schemas = BTreeMap::new();
        let mut compiled = BTreeMap::new();
        let mut fields = vec!["metadata.name".to_string()];
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        if namespaced {
            fields.push("metadata.namespace".into());
        }
        for f in storage["selectableFields"].as_array().into_iter().flatten() {
            if let Some(p) = f["jsonPath"].as_str() {
                fields.push(p.trim_start_matches('.').to_string());
            }
        }
        for v in &served {
            if let (Some(n), Some(s)) = (v["name"].as_str(), v["schema"].get("openAPIV3Schema")) {
                schemas.insert(n.to_string(), s.clone());
                compiled.insert(n.to_string(), OnceLock::new());
            }
        }
        let printer_columns = served
            .iter()
            .filter_map(|v| {
                Some((
                    v["name"].as_str()?.to_string(),
                    v.get("additionalPrinterColumns")?.clone(),
                ))
            })
            .collect();
        let rt = ResourceType {
            group: group.into(),
            versions: served
                .iter()
                .filter_map(|v| v["name"].as_str().map(String::from))
                .collect(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource: storage["subresources"].get("status").is_some(),
            scale_subresource: storage["subresources"].get("scale").is_some(),
            scale: ScalePaths::of_crd(&storage["subresources"]["scale"]),
            builtin: false,
            field_selectors: fields,
            schemas,
            short_names: strings(&spec["names"]["shortNames"]),
            categories: strings(&spec["names"]["categories"]),
            printer_columns,
            definition: Some(crd.clone()),
            compiled,
        };
        self.types
            .retain(|t| !(t.group == rt.group && t.plural == rt.plural));
        self.types.push(Arc::new(rt));
        Ok(())
    }

    /// The resource served at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| t.group == group && t.plural == plural && t.serves(version))
            .cloned()
    }

    /// Whether any resource is served in `group/version` (for discovery-shaped 404s).
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.types
            .iter()
            .any(|t| t.group == group && t.serves(version))
    }

    pub fn types(&self) -> &[Arc<ResourceType>] {
        &self.types
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.io}
spec:
  group: example.io
  scope: Namespaced
  names: {plural: widgets, kind: Widget, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              items:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  properties:
                    name: {type: string}
                    ports:
                      type: array
                      x-kubernetes-list-type: set
                      items: {type: integer}
"#;

    #[test]
    fn a_crd_yaml_gives_scope_subresources_and_list_markers() {
        let mut r = Registry::with_builtins();
        assert_eq!(r.add_crds_yaml(CRD).unwrap(), 1);
        let w = r.find("example.io", "v1", "widgets").unwrap();
        assert!(w.namespaced && w.status_subresource && !w.scale_subresource);
        assert_eq!(
            w.list_type("v1", &["spec", "items"]),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(
            w.list_type("v1", &["spec", "items", "ports"]),
            ListType::Set
        );
        assert_eq!(w.list_type("v1", &["spec", "other"]), ListType::Atomic);
        assert_eq!(
            w.list_type("v1", &["metadata", "ownerReferences"]),
            ListType::Map(vec!["uid".into()])
        );
        assert!(r.find("example.io", "v2", "widgets").is_none());
    }

    #[test]
    fn batch_v1_jobs_are_served_namespaced_with_status() {
        let r = Registry::with_builtins();
        let jobs = r.find("batch", "v1", "jobs").unwrap();
        assert!(jobs.namespaced && jobs.status_subresource && !jobs.scale_subresource);
        assert_eq!(jobs.kind, "Job");
    }

    #[test]
    fn the_project_and_upstream_crds_all_load() {
        let mut r = Registry::with_builtins();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut n = 0;
        for dir in [root.join("crds"), root.join("../shared/upstream-crds")] {
            for e in std::fs::read_dir(&dir).unwrap() {
                let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
                n += r.add_crds_yaml(&text).unwrap();
            }
        }
        assert!(n >= 15, "{n}");
        let rc = r.find("ray.io", "v1", "rayclusters").unwrap();
        assert!(rc.status_subresource);
        let lws = r
            .find("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
            .unwrap();
        assert!(lws.scale_subresource);
    }
}
