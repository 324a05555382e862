//! Development helpers for the dev cluster (`hack/dev-cluster.sh`), whose API server has no
//! discovery (so no `kubectl`): [`apply`] creates or server-side applies every document of a
//! multi-document YAML; [`get`] prints objects as YAML. Both know the kinds raygate works with
//! ([`KINDS`]), mapped by hand to their API resources. The KubeRay v1.7 emulator the dev cluster
//! runs lives in `raygate-sim` (`raygate_sim::world::kuberay`).

use std::path::Path;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use kube::{Client, Config};
use serde_json::Value;

/// Field manager of `raygate dev apply`.
pub const DEV_MANAGER: &str = "raygate-dev";

/// A kind `raygate dev` knows.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    pub group: &'static str,
    /// The version `get` reads (`apply` uses the document's own apiVersion).
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// Other names accepted on the command line (singular and short names).
    pub aliases: &'static [&'static str],
}

/// Every kind `raygate dev apply`/`get` handles.
pub const KINDS: &[Kind] = &[
    Kind {
        group: "ray.io",
        version: "v1",
        kind: "RayService",
        plural: "rayservices",
        namespaced: true,
        aliases: &["rayservice", "rs"],
    },
    Kind {
        group: "ray.io",
        version: "v1",
        kind: "RayCluster",
        plural: "rayclusters",
        namespaced: true,
        aliases: &["raycluster", "rc"],
    },
    Kind {
        group: "kueue.x-k8s.io",
        version: "v1beta2",
        kind: "ResourceFlavor",
        plural: "resourceflavors",
        namespaced: false,
        aliases: &["resourceflavor", "flavor", "flavors", "rf"],
    },
    Kind {
        group: "kueue.x-k8s.io",
        version: "v1beta2",
        kind: "ClusterQueue",
        plural: "clusterqueues",
        namespaced: false,
        aliases: &["clusterqueue", "cq"],
    },
    Kind {
        group: "kueue.x-k8s.io",
        version: "v1beta2",
        kind: "Cohort",
        plural: "cohorts",
        namespaced: false,
        aliases: &["cohort", "co"],
    },
    Kind {
        group: "kueue.x-k8s.io",
        version: "v1beta2",
        kind: "LocalQueue",
        plural: "localqueues",
        namespaced: true,
        aliases: &["localqueue", "queue", "queues", "lq"],
    },
    Kind {
        group: "kueue.x-k8s.io",
        version: "v1beta2",
        kind: "Workload",
        plural: "workloads",
        namespaced: true,
        aliases: &["workload", "wl", "kwl"],
    },
    Kind {
        group: "kueue.x-k8s.io",
        version: "v1beta2",
        kind: "WorkloadPriorityClass",
        plural: "workloadpriorityclasses",
        namespaced: false,
        aliases: &["workloadpriorityclass", "wpc"],
    },
    Kind {
        group: "apiextensions.k8s.io",
        version: "v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        namespaced: false,
        aliases: &["customresourcedefinition", "crd", "crds"],
    },
    Kind {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        aliases: &["namespace", "ns"],
    },
];

/// Why a `raygate dev` command failed.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("loading kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("{what}: invalid YAML: {reason}")]
    Yaml { what: String, reason: String },
    #[error("{what}: {reason}")]
    Document { what: String, reason: String },
    #[error("{what}: raygate dev does not know kind {kind} ({api_version}); known: {known}")]
    UnknownKind {
        what: String,
        api_version: String,
        kind: String,
        known: String,
    },
    #[error("unknown resource type {name:?}; known: {known}")]
    UnknownResource { name: String, known: String },
    /// `message` is the server's (or the client's) error, on one line.
    #[error("{what}: {message}")]
    Api { what: String, message: String },
    #[error("{what}: the server does not serve {resource} (is its CRD installed?)")]
    NotServed { what: String, resource: String },
}

/// A 404 for a whole resource type: the server answers with its path list, not a `Status`.
fn not_served(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 0 || (s.code == 404 && s.details.is_none()))
}

fn api_error(what: String, kind: &Kind, version: &str, source: kube::Error) -> DevError {
    if not_served(&source) {
        DevError::NotServed {
            what,
            resource: format!(
                "{}/{}",
                api_resource(kind, version).api_version,
                kind.plural
            ),
        }
    } else {
        let message = match &source {
            kube::Error::Api(s) => format!("{} ({}, HTTP {})", s.message, s.reason, s.code),
            other => other.to_string(),
        };
        DevError::Api { what, message }
    }
}

fn known_kinds() -> String {
    KINDS
        .iter()
        .map(|k| k.plural)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A client from the given kubeconfig file, or from the usual inference (KUBECONFIG,
/// `~/.kube/config`, in-cluster).
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, DevError> {
    let config = match kubeconfig {
        Some(path) => {
            let err = |reason: String| DevError::Kubeconfig {
                path: path.display().to_string(),
                reason,
            };
            let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| err(e.to_string()))?
        }
        None => Config::infer().await.map_err(|e| DevError::Kubeconfig {
            path: "(inferred)".into(),
            reason: e.to_string(),
        })?,
    };
    Client::try_from(config).map_err(|e| DevError::Kubeconfig {
        path: kubeconfig.map_or("(inferred)".into(), |p| p.display().to_string()),
        reason: e.to_string(),
    })
}

/// Looks a kind up by a command-line name: plural, kind, singular or short name, any case.
pub fn kind_by_name(name: &str) -> Result<&'static Kind, DevError> {
    let n = name.to_ascii_lowercase();
    // `kind.group` (kubectl style) is accepted too
    let (n, group) = match n.split_once('.') {
        Some((k, g)) => (k.to_string(), Some(g.to_string())),
        None => (n, None),
    };
    KINDS
        .iter()
        .find(|k| {
            (k.plural == n || k.kind.eq_ignore_ascii_case(&n) || k.aliases.contains(&n.as_str()))
                && group.as_deref().is_none_or(|g| g == k.group)
        })
        .ok_or_else(|| DevError::UnknownResource {
            name: name.to_string(),
            known: known_kinds(),
        })
}

fn api_resource(kind: &Kind, version: &str) -> ApiResource {
    let api_version = if kind.group.is_empty() {
        version.to_string()
    } else {
        format!("{}/{version}", kind.group)
    };
    ApiResource {
        group: kind.group.to_string(),
        version: version.to_string(),
        api_version,
        kind: kind.kind.to_string(),
        plural: kind.plural.to_string(),
    }
}

fn dynamic_api(
    client: &Client,
    kind: &Kind,
    version: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar = api_resource(kind, version);
    match (kind.namespaced, ns) {
        (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    }
}

/// The documents of a multi-document YAML text (empty documents skipped; `kind: List` expanded).
pub fn documents(text: &str, source: &str) -> Result<Vec<(String, Value)>, DevError> {
    let mut out = Vec::new();
    for chunk in crate::manifest::split_documents(text) {
        let what = format!("{source} document {} (line {})", chunk.index, chunk.line);
        let v = chunk.value().map_err(|reason| DevError::Yaml {
            what: format!("{source} document {}", chunk.index),
            reason,
        })?;
        match v {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                for (j, item) in o
                    .get("items")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    out.push((format!("{what} item {}", j + 1), item.clone()));
                }
            }
            Value::Object(_) => out.push((what, v)),
            _ => {
                return Err(DevError::Document {
                    what,
                    reason: "not a Kubernetes object (a mapping with apiVersion and kind)".into(),
                });
            }
        }
    }
    Ok(out)
}

/// What happened to one document.
#[derive(Debug)]
pub struct Applied {
    /// `kind/name` (and namespace), kubectl style.
    pub object: String,
    pub outcome: &'static str,
}

/// A document with its kind, version and name: (what, kind, version, name, document).
type Resolved = (String, &'static Kind, String, String, Value);

/// The kind (of [`KINDS`]), version and name of a document.
fn resolve(what: String, doc: Value) -> Result<Resolved, DevError> {
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind_name = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let kind = KINDS
        .iter()
        .find(|k| k.kind == kind_name && k.group == group)
        .ok_or_else(|| DevError::UnknownKind {
            what: what.clone(),
            api_version: api_version.to_string(),
            kind: kind_name.to_string(),
            known: KINDS
                .iter()
                .map(|k| match k.group {
                    "" => format!("{} ({})", k.kind, k.version),
                    g => format!("{}.{g}", k.kind),
                })
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| DevError::Document {
            what: what.clone(),
            reason: "metadata.name is required".into(),
        })?
        .to_string();
    let version = version.to_string();
    Ok((what, kind, version, name, doc))
}

/// Server-side applies (field manager [`DEV_MANAGER`], forced) every document of `text`.
/// `namespace` is used for namespaced objects without one (default "default").
///
/// A `v1` Namespace on a server that does not serve core/v1 (the dev cluster) is skipped: namespaced
/// custom resources need no Namespace object there.
pub async fn apply(
    client: &Client,
    text: &str,
    source: &str,
    namespace: Option<&str>,
) -> Result<Vec<Applied>, DevError> {
    // resolve every kind first: an unknown kind fails before anything is written
    let resolved = documents(text, source)?
        .into_iter()
        .map(|(what, doc)| resolve(what, doc))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    for (what, kind, version, name, mut doc) in resolved {
        let ns = kind.namespaced.then(|| {
            doc.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| namespace.map(str::to_string))
                .unwrap_or_else(|| "default".into())
        });
        if let (Some(ns), Some(meta)) =
            (&ns, doc.get_mut("metadata").and_then(Value::as_object_mut))
        {
            meta.insert("namespace".into(), Value::String(ns.clone()));
        }
        let object = match &ns {
            Some(ns) => format!("{}/{name} -n {ns}", kind.plural),
            None => format!("{}/{name}", kind.plural),
        };
        let api = dynamic_api(client, kind, &version, ns.as_deref());
        let existed = match api.get_metadata_opt(&name).await {
            Ok(found) => found.is_some(),
            Err(e) if kind.group.is_empty() && not_served(&e) => {
                out.push(Applied {
                    object,
                    outcome: "skipped (this server does not serve core/v1; namespaced objects need no Namespace here)",
                });
                continue;
            }
            Err(source) => {
                return Err(api_error(
                    format!("{what} ({object})"),
                    kind,
                    &version,
                    source,
                ));
            }
        };
        api.patch(
            &name,
            &PatchParams::apply(DEV_MANAGER).force(),
            &Patch::Apply(&doc),
        )
        .await
        .map_err(|source| api_error(format!("{what} ({object})"), kind, &version, source))?;
        out.push(Applied {
            object,
            outcome: if existed { "configured" } else { "created" },
        });
    }
    Ok(out)
}

/// Objects of a kind as YAML documents: one object by name, or a list (`namespace` `None`: all
/// namespaces). managedFields are left out, as kubectl does.
pub async fn get(
    client: &Client,
    kind: &Kind,
    name: Option<&str>,
    namespace: Option<&str>,
) -> Result<String, DevError> {
    let api = dynamic_api(client, kind, kind.version, namespace);
    let what = |n: &str| format!("getting {}{n}", kind.plural);
    let mut objects = match name {
        Some(n) => vec![
            api.get(n)
                .await
                .map_err(|source| api_error(what(&format!("/{n}")), kind, kind.version, source))?,
        ],
        None => {
            api.list(&ListParams::default())
                .await
                .map_err(|source| api_error(what(""), kind, kind.version, source))?
                .items
        }
    };
    let mut out = String::new();
    for (i, o) in objects.iter_mut().enumerate() {
        o.metadata.managed_fields = None;
        if o.types.is_none() {
            o.types = Some(kube::api::TypeMeta {
                api_version: api_resource(kind, kind.version).api_version,
                kind: kind.kind.to_string(),
            });
        }
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&crate::manifest::to_yaml(o).map_err(|e| DevError::Yaml {
            what: format!("printing {}", kind.plural),
            reason: e.to_string(),
        })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_resolve_by_plural_singular_kind_and_short_name() {
        for n in [
            "rayservices",
            "RayService",
            "rayservice",
            "rayservices.ray.io",
        ] {
            assert_eq!(kind_by_name(n).unwrap().kind, "RayService", "{n}");
        }
        assert_eq!(kind_by_name("cq").unwrap().kind, "ClusterQueue");
        assert_eq!(
            kind_by_name("crds").unwrap().kind,
            "CustomResourceDefinition"
        );
        assert!(kind_by_name("pods").is_err());
    }

    #[test]
    fn documents_skip_empty_ones_and_expand_lists() {
        let text = "---\n# only a comment\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: ray.io/v1, kind: RayService, metadata: {name: a}}\n---\napiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: b}\n";
        let docs = documents(text, "f.yaml").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].1["metadata"]["name"], "a");
        assert!(docs[1].0.starts_with("f.yaml document"));
        assert!(documents("- 1\n", "x").is_err());
    }
}
