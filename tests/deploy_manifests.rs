//! The install in `config/`: kustomizations that build, least-privilege RBAC that still covers
//! everything the controller does, a Deployment that runs non-root with a read-only root
//! filesystem, the CRDs in sync with `crds/`, and samples that raygate and the real upstream
//! CRDs both accept.
//!
//! The kustomize tree is resolved here by a minimal reader (resources and patches must exist,
//! nothing may point outside `config/`). When `kubectl` is on PATH, `kubectl kustomize` builds
//! every entry point as well and must produce the same objects; CI has only the Rust toolchain,
//! so there it is the minimal reader alone (the test says so on stderr).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use raygate::manifest::{Doc, read_documents};
use raygate::types::{kueue, ray};
use raygate_testing::upstream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const NAMESPACE: &str = "raygate-system";
const SERVICE_ACCOUNT: &str = "raygate";

// ---------------------------------------------------------------------------------------------
// Reading config/
// ---------------------------------------------------------------------------------------------

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn config() -> PathBuf {
    repo().join("config")
}

/// Every `.yaml` file under `dir`, recursively, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            out.extend(yaml_files(&path));
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn read_file(path: &Path) -> Vec<Doc> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    read_documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rel(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `(kind, namespace, name)` of an object.
type Id = (String, String, String);

fn id(doc: &Doc) -> Id {
    let meta = &doc.value["metadata"];
    (
        doc.kind.clone(),
        meta["namespace"].as_str().unwrap_or("").to_string(),
        meta["name"].as_str().unwrap_or("").to_string(),
    )
}

/// The keys a kustomization here may use; anything else would need the real kustomize to check.
const KUSTOMIZATION_KEYS: [&str; 4] = ["apiVersion", "kind", "resources", "patches"];

/// A kustomization resolved without kustomize: its objects (patches not applied) and the patch
/// documents it would apply.
#[derive(Default)]
struct Build {
    objects: Vec<Doc>,
    patches: Vec<Doc>,
}

fn kustomization(dir: &Path) -> Value {
    let path = dir.join("kustomization.yaml");
    let docs = read_file(&path);
    assert_eq!(docs.len(), 1, "{}: one document", rel(&path));
    assert_eq!(docs[0].kind, "Kustomization", "{}", rel(&path));
    docs[0].value.clone()
}

/// Resolves `dir`'s kustomization: every resource and patch must exist and stay in `config/`.
fn build(dir: &Path) -> Build {
    let k = kustomization(dir);
    let here = rel(&dir.join("kustomization.yaml"));
    for key in k.as_object().expect("a mapping").keys() {
        assert!(
            KUSTOMIZATION_KEYS.contains(&key.as_str()),
            "{here}: unexpected key {key}"
        );
    }
    let root = config()
        .canonicalize()
        .expect("config/ resolves to a directory");
    let resolve = |entry: &str| -> PathBuf {
        let path = dir.join(entry);
        let real = path
            .canonicalize()
            .unwrap_or_else(|e| panic!("{here}: {entry} does not exist: {e}"));
        // kustomize refuses files outside the kustomization root's tree; config/ is that tree
        // for `kubectl apply -k config/default`.
        assert!(
            real.starts_with(&root),
            "{here}: {entry} is outside config/"
        );
        real
    };
    let mut out = Build::default();
    for entry in k["resources"].as_array().into_iter().flatten() {
        let entry = entry.as_str().expect("resources are paths");
        let path = resolve(entry);
        if path.is_dir() {
            let sub = build(&path);
            out.objects.extend(sub.objects);
            out.patches.extend(sub.patches);
        } else {
            out.objects.extend(read_file(&path));
        }
    }
    for patch in k["patches"].as_array().into_iter().flatten() {
        let entry = patch["path"].as_str().expect("patches are given by path");
        out.patches.extend(read_file(&resolve(entry)));
    }
    out
}

fn ids(objects: &[Doc]) -> BTreeSet<Id> {
    let ids: Vec<Id> = objects.iter().map(id).collect();
    let set: BTreeSet<Id> = ids.iter().cloned().collect();
    assert_eq!(set.len(), ids.len(), "no object is listed twice: {ids:?}");
    set
}

fn one<'a>(objects: &'a [Doc], kind: &str) -> &'a Doc {
    let found: Vec<&Doc> = objects.iter().filter(|d| d.kind == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found[0]
}

fn typed<T: DeserializeOwned>(doc: &Doc) -> T {
    doc.parse()
        .unwrap_or_else(|e| panic!("{}: {e}", doc.object()))
}

fn default_build() -> Build {
    build(&config().join("default"))
}

/// `kubectl`, when installed.
fn kubectl() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("kubectl"))
            .find(|p| p.is_file())
    })
}

fn kubectl_kustomize(kubectl: &Path, dir: &Path) -> Vec<Doc> {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        rel(dir),
        String::from_utf8_lossy(&out.stderr)
    );
    read_documents(&String::from_utf8(out.stdout).expect("UTF-8 output"))
        .unwrap_or_else(|e| panic!("kubectl kustomize {}: {e}", rel(dir)))
}

fn args(deployment: &Deployment) -> Vec<String> {
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod template");
    pod.containers[0].args.clone().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Kustomize
// ---------------------------------------------------------------------------------------------

#[test]
fn every_yaml_file_in_config_parses() {
    let files = yaml_files(&config());
    assert!(files.len() >= 20, "config/ holds the install: {files:?}");
    for path in files {
        assert!(!read_file(&path).is_empty(), "{} is empty", rel(&path));
    }
}

#[test]
fn every_kustomization_resolves_inside_config() {
    let dirs: Vec<PathBuf> = yaml_files(&config())
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "kustomization.yaml"))
        .map(|p| p.parent().expect("a directory").to_path_buf())
        .collect();
    let names: BTreeSet<String> = dirs.iter().map(|d| rel(d)).collect();
    for want in [
        "config/default",
        "config/kueue-mode",
        "config/crd",
        "config/rbac",
        "config/manager",
        "config/policy",
        "config/samples",
    ] {
        assert!(names.contains(want), "{want}/kustomization.yaml exists");
    }
    for dir in dirs {
        let built = build(&dir);
        assert!(!built.objects.is_empty(), "{} builds nothing", rel(&dir));
        ids(&built.objects);
    }
}

#[test]
fn the_default_install_is_everything() {
    let objects = default_build().objects;
    let got = ids(&objects);
    let ns = |kind: &str, name: &str| (kind.to_string(), NAMESPACE.to_string(), name.to_string());
    let cluster = |kind: &str, name: &str| (kind.to_string(), String::new(), name.to_string());
    let mut want: BTreeSet<Id> = [
        cluster("Namespace", NAMESPACE),
        ns("ServiceAccount", SERVICE_ACCOUNT),
        cluster("ClusterRole", "raygate"),
        cluster("ClusterRoleBinding", "raygate"),
        ns("Role", "raygate-leader-election"),
        ns("RoleBinding", "raygate-leader-election"),
        ns("Deployment", "raygate"),
        ns("Service", "raygate-metrics"),
        cluster("ValidatingAdmissionPolicy", "raygate-child-suspend"),
        cluster("ValidatingAdmissionPolicyBinding", "raygate-child-suspend"),
    ]
    .into();
    for kind in [
        "clusterqueues",
        "cohorts",
        "localqueues",
        "resourceflavors",
        "workloadpriorityclasses",
        "workloads",
    ] {
        want.insert(cluster(
            "CustomResourceDefinition",
            &format!("{kind}.kueue.x-k8s.io"),
        ));
    }
    assert_eq!(got, want);
}

#[test]
fn kueue_mode_is_the_default_install_without_crds_admitting_with_kueue() {
    let default = default_build();
    let kueue = build(&config().join("kueue-mode"));
    let without_crds: BTreeSet<Id> = ids(&default.objects)
        .into_iter()
        .filter(|(kind, _, _)| kind != "CustomResourceDefinition")
        .collect();
    assert_eq!(ids(&kueue.objects), without_crds);
    assert!(default.patches.is_empty());

    // The patch replaces the controller's arguments; only the admission mode may differ.
    assert_eq!(kueue.patches.len(), 1);
    let patch = &kueue.patches[0];
    assert_eq!(
        id(patch),
        ("Deployment".into(), NAMESPACE.into(), "raygate".into())
    );
    let container = &patch.value["spec"]["template"]["spec"]["containers"][0];
    let deployment: Deployment = typed(one(&default.objects, "Deployment"));
    let base = &deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(container["name"], base.name.as_str());
    let patched: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    let swap = |a: &String| a.replace("--admission=builtin", "--admission=kueue");
    assert_eq!(
        patched,
        args(&deployment).iter().map(swap).collect::<Vec<_>>()
    );
    assert!(patched.contains(&"--admission=kueue".to_string()));
}

#[test]
fn kubectl_kustomize_builds_the_same_objects_when_kubectl_is_installed() {
    let Some(kubectl) = kubectl() else {
        eprintln!(
            "kubectl is not on PATH: kustomize itself was not run; the kustomizations were \
             checked by this test's own reader only"
        );
        return;
    };
    for dir in [
        "default",
        "kueue-mode",
        "crd",
        "rbac",
        "manager",
        "policy",
        "samples",
    ] {
        let dir = config().join(dir);
        let built = kubectl_kustomize(&kubectl, &dir);
        assert_eq!(ids(&built), ids(&build(&dir).objects), "{}", rel(&dir));
    }
    let admission = |dir: &str| {
        let built = kubectl_kustomize(&kubectl, &config().join(dir));
        let deployment: Deployment = typed(one(&built, "Deployment"));
        args(&deployment)
            .into_iter()
            .filter(|a| a.starts_with("--admission"))
            .collect::<Vec<_>>()
    };
    assert_eq!(admission("default"), ["--admission=builtin"]);
    assert_eq!(admission("kueue-mode"), ["--admission=kueue"]);
}

// ---------------------------------------------------------------------------------------------
// Every built-in object is well-formed
// ---------------------------------------------------------------------------------------------

/// Parses `doc` as `T` and back: a field that does not survive is one the API server would drop
/// or reject (a typo, a wrong level).
fn round_trips<T: DeserializeOwned + Serialize>(doc: &Doc) -> Result<(), String> {
    let parsed: T = doc.parse().map_err(|e| e.to_string())?;
    let back = serde_json::to_value(parsed).map_err(|e| e.to_string())?;
    let lost = lost_fields(&doc.value, &back, "");
    if lost.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: unknown fields {lost:?}", doc.object()))
    }
}

fn lost_fields(original: &Value, back: &Value, path: &str) -> Vec<String> {
    match (original, back) {
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .flat_map(|(k, v)| match b.get(k) {
                Some(w) => lost_fields(v, w, &format!("{path}.{k}")),
                None => vec![format!("{path}.{k}")],
            })
            .collect(),
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .flat_map(|(i, (v, w))| lost_fields(v, w, &format!("{path}[{i}]")))
            .collect(),
        _ => vec![],
    }
}

#[test]
fn built_in_objects_have_no_unknown_fields() {
    let mut objects = default_build().objects;
    objects.extend(build(&config().join("samples")).objects);
    let mut failures = Vec::new();
    for doc in &objects {
        let result = match doc.kind.as_str() {
            "Namespace" => round_trips::<Namespace>(doc),
            "ServiceAccount" => round_trips::<ServiceAccount>(doc),
            "ClusterRole" => round_trips::<ClusterRole>(doc),
            "ClusterRoleBinding" => round_trips::<ClusterRoleBinding>(doc),
            "Role" => round_trips::<Role>(doc),
            "RoleBinding" => round_trips::<RoleBinding>(doc),
            "Deployment" => round_trips::<Deployment>(doc),
            "Service" => round_trips::<Service>(doc),
            "ValidatingAdmissionPolicy" => round_trips::<ValidatingAdmissionPolicy>(doc),
            "ValidatingAdmissionPolicyBinding" => {
                round_trips::<ValidatingAdmissionPolicyBinding>(doc)
            }
            "CustomResourceDefinition" => round_trips::<CustomResourceDefinition>(doc),
            // Custom resources are checked against their CRDs below.
            "RayService" | "ResourceFlavor" | "ClusterQueue" | "LocalQueue" => Ok(()),
            other => Err(format!("{}: no check for kind {other}", doc.object())),
        };
        if let Err(e) = result {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// ---------------------------------------------------------------------------------------------
// RBAC
// ---------------------------------------------------------------------------------------------

/// What the controller does across the cluster: (API group, resource, verbs).
const CLUSTER_PERMISSIONS: &[(&str, &str, &[&str])] = &[
    ("ray.io", "rayservices", &["get", "list", "watch", "patch"]),
    ("ray.io", "rayclusters", &["get", "list", "watch", "patch"]),
    // Setting a blockOwnerDeletion ownerReference to a RayService on a Workload, where the
    // OwnerReferencesPermissionEnforcement admission plugin runs.
    ("ray.io", "rayservices/finalizers", &["update"]),
    (
        "kueue.x-k8s.io",
        "workloads",
        &[
            "get", "list", "watch", "create", "patch", "update", "delete",
        ],
    ),
    (
        "kueue.x-k8s.io",
        "workloads/status",
        &["get", "patch", "update"],
    ),
    ("kueue.x-k8s.io", "clusterqueues", &["get", "list", "watch"]),
    (
        "kueue.x-k8s.io",
        "clusterqueues/status",
        &["get", "patch", "update"],
    ),
    ("kueue.x-k8s.io", "localqueues", &["get", "list", "watch"]),
    (
        "kueue.x-k8s.io",
        "localqueues/status",
        &["get", "patch", "update"],
    ),
    (
        "kueue.x-k8s.io",
        "resourceflavors",
        &["get", "list", "watch"],
    ),
    ("kueue.x-k8s.io", "cohorts", &["get", "list", "watch"]),
    (
        "kueue.x-k8s.io",
        "workloadpriorityclasses",
        &["get", "list", "watch"],
    ),
    ("", "namespaces", &["get", "list", "watch"]),
    ("events.k8s.io", "events", &["create", "patch"]),
    ("", "events", &["create", "patch"]),
];

/// What the controller does in its own namespace.
const NAMESPACE_PERMISSIONS: &[(&str, &str, &[&str])] = &[(
    "coordination.k8s.io",
    "leases",
    &["get", "create", "update", "patch"],
)];

/// Every (group, resource, verb) the rules grant.
fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        assert!(
            rule.non_resource_urls.is_none() && rule.resource_names.is_none(),
            "plain resource rules only: {rule:?}"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

fn table(permissions: &[(&str, &str, &[&str])]) -> BTreeSet<(String, String, String)> {
    permissions
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(|verb| (group.to_string(), resource.to_string(), verb.to_string()))
        })
        .collect()
}

#[test]
fn the_cluster_role_has_no_wildcards_and_no_secrets() {
    let objects = default_build().objects;
    let role: ClusterRole = typed(one(&objects, "ClusterRole"));
    assert!(role.aggregation_rule.is_none());
    for (group, resource, verb) in grants(role.rules.as_deref().unwrap_or_default()) {
        for field in [&group, &resource, &verb] {
            assert!(
                !field.contains('*'),
                "wildcard in {group}/{resource} {verb}"
            );
        }
        assert!(
            !resource.starts_with("secrets"),
            "raygate reads no secrets: {group}/{resource} {verb}"
        );
    }
}

#[test]
fn the_cluster_role_grants_exactly_what_the_controller_does() {
    let objects = default_build().objects;
    let role: ClusterRole = typed(one(&objects, "ClusterRole"));
    let granted = grants(role.rules.as_deref().unwrap_or_default());
    let needed = table(CLUSTER_PERMISSIONS);
    let missing: Vec<_> = needed.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&needed).collect();
    assert!(missing.is_empty(), "missing: {missing:?}");
    assert!(extra.is_empty(), "more than needed: {extra:?}");
}

#[test]
fn leases_are_granted_only_in_raygates_namespace() {
    let objects = default_build().objects;
    let role_doc = one(&objects, "Role");
    assert_eq!(role_doc.value["metadata"]["namespace"], NAMESPACE);
    let role: Role = typed(role_doc);
    assert_eq!(
        grants(role.rules.as_deref().unwrap_or_default()),
        table(NAMESPACE_PERMISSIONS)
    );
    let cluster_role: ClusterRole = typed(one(&objects, "ClusterRole"));
    assert!(
        grants(cluster_role.rules.as_deref().unwrap_or_default())
            .iter()
            .all(|(_, resource, _)| resource != "leases")
    );
}

#[test]
fn the_bindings_and_the_admission_policy_name_the_same_service_account() {
    let objects = default_build().objects;
    let sa = one(&objects, "ServiceAccount");
    assert_eq!(
        id(sa),
        (
            "ServiceAccount".into(),
            NAMESPACE.into(),
            SERVICE_ACCOUNT.into()
        )
    );
    let subject =
        json!([{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]);

    let crb: ClusterRoleBinding = typed(one(&objects, "ClusterRoleBinding"));
    let cluster_role = one(&objects, "ClusterRole");
    assert_eq!(crb.role_ref.kind, "ClusterRole");
    assert_eq!(crb.role_ref.name, cluster_role.value["metadata"]["name"]);
    assert_eq!(serde_json::to_value(&crb.subjects).unwrap(), subject);

    let rb: RoleBinding = typed(one(&objects, "RoleBinding"));
    let role = one(&objects, "Role");
    assert_eq!(rb.role_ref.kind, "Role");
    assert_eq!(rb.role_ref.name, role.value["metadata"]["name"]);
    assert_eq!(rb.metadata.namespace.as_deref(), Some(NAMESPACE));
    assert_eq!(serde_json::to_value(&rb.subjects).unwrap(), subject);

    let deployment: Deployment = typed(one(&objects, "Deployment"));
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));

    let username = format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}");
    let policy = one(&objects, "ValidatingAdmissionPolicy");
    let text = serde_json::to_string(&policy.value["spec"]).unwrap();
    assert!(
        text.contains(&format!("'{username}'")),
        "the policy exempts {username}"
    );
    assert_eq!(
        text.matches("system:serviceaccount:").count(),
        1,
        "and no other account"
    );
}

#[test]
fn namespaced_objects_live_in_raygates_namespace() {
    for doc in default_build().objects {
        let namespaced = matches!(
            doc.kind.as_str(),
            "ServiceAccount" | "Role" | "RoleBinding" | "Deployment" | "Service"
        );
        let ns = doc.value["metadata"]["namespace"].as_str();
        if namespaced {
            assert_eq!(ns, Some(NAMESPACE), "{}", doc.object());
        } else {
            assert_eq!(ns, None, "{} is cluster-scoped", doc.object());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The Deployment
// ---------------------------------------------------------------------------------------------

#[test]
fn the_controller_runs_non_root_with_a_read_only_root_filesystem() {
    let objects = default_build().objects;
    let deployment: Deployment = typed(one(&objects, "Deployment"));
    let spec = deployment.spec.expect("spec");
    assert_eq!(spec.replicas, Some(1));
    let pod = spec.template.spec.expect("pod spec");
    let pod_sc = pod.security_context.expect("pod securityContext");
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert_eq!(pod_sc.run_as_user, Some(65532));
    assert_eq!(
        pod_sc.seccomp_profile.map(|p| p.type_),
        Some("RuntimeDefault".into())
    );
    assert_eq!(pod.host_network, None);
    assert_eq!(pod.host_pid, None);
    assert_eq!(pod.containers.len(), 1);
    assert!(pod.init_containers.is_none());
    let c = &pod.containers[0];
    let sc = c
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.run_as_user, Some(65532));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.privileged, None);
    let caps = sc.capabilities.as_ref().expect("capabilities");
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert!(caps.add.is_none());
    assert_eq!(
        sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
        Some("RuntimeDefault")
    );
}

#[test]
fn the_controller_is_sized_probed_and_configured() {
    let objects = default_build().objects;
    let deployment: Deployment = typed(one(&objects, "Deployment"));
    let spec = deployment.spec.expect("spec");
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap();
    let selector = spec.selector.match_labels.clone().unwrap();
    assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    let pod = spec.template.spec.expect("pod spec");
    let c = &pod.containers[0];

    assert_eq!(c.image.as_deref(), Some("ghcr.io/raygate/raygate:v0.1.0"));
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("controller"));
    for flag in [
        "--admission=builtin",
        "--leader-elect",
        "--metrics-addr=0.0.0.0:8080",
        "--log-format=json",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }

    let res = c.resources.as_ref().expect("resources");
    let q =
        |m: &Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
         k: &str| m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone());
    assert_eq!(q(&res.requests, "cpu").as_deref(), Some("100m"));
    assert_eq!(q(&res.requests, "memory").as_deref(), Some("128Mi"));
    assert_eq!(q(&res.limits, "memory").as_deref(), Some("512Mi"));

    let ports = c.ports.as_ref().expect("ports");
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].name.as_deref(), Some("metrics"));
    assert_eq!(ports[0].container_port, 8080);
    for (probe, path) in [
        (&c.liveness_probe, "/healthz"),
        (&c.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(serde_json::to_value(&get.port).unwrap(), json!("metrics"));
    }

    let env = c.env.as_ref().expect("env");
    let pod_namespace = env
        .iter()
        .find(|e| e.name == "POD_NAMESPACE")
        .expect("POD_NAMESPACE");
    let field = pod_namespace
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .expect("from a fieldRef");
    assert_eq!(field.field_path, "metadata.namespace");

    let service: Service = typed(one(&objects, "Service"));
    let svc = service.spec.expect("service spec");
    let svc_selector = svc.selector.expect("a selector");
    assert!(
        svc_selector
            .iter()
            .all(|(k, v)| pod_labels.get(k) == Some(v))
    );
    let port = &svc.ports.expect("ports")[0];
    assert_eq!(port.name.as_deref(), Some("metrics"));
    assert_eq!(port.port, 8080);
    assert_eq!(
        serde_json::to_value(&port.target_port).unwrap(),
        json!("metrics")
    );
}

#[test]
fn the_namespace_enforces_the_restricted_pod_security_standard() {
    let objects = default_build().objects;
    let ns: Namespace = typed(one(&objects, "Namespace"));
    assert_eq!(ns.metadata.name.as_deref(), Some(NAMESPACE));
    let labels = ns.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted")
    );
}

// ---------------------------------------------------------------------------------------------
// CRDs
// ---------------------------------------------------------------------------------------------

#[test]
fn the_installed_crds_are_a_current_copy_of_crds() {
    let generated = repo().join("crds");
    let copy = config().join("crd/bases");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names(&copy),
        names(&generated),
        "config/crd/bases lists the files of crds/ (run `cargo run -- crdgen --out config/crd/bases`)"
    );
    for name in names(&generated) {
        let a = std::fs::read(generated.join(&name)).unwrap();
        let b = std::fs::read(copy.join(&name)).unwrap();
        assert!(
            a == b,
            "config/crd/bases/{name} is stale: run `cargo run -- crdgen --out config/crd/bases`"
        );
    }
    let listed: BTreeSet<String> = kustomization(&config().join("crd"))["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().trim_start_matches("bases/").to_string())
        .collect();
    assert_eq!(listed, names(&generated), "config/crd installs every CRD");
}

// ---------------------------------------------------------------------------------------------
// Samples
// ---------------------------------------------------------------------------------------------

fn samples() -> Vec<Doc> {
    build(&config().join("samples")).objects
}

fn violations(schema: &Value, object: &Value) -> Vec<String> {
    // As in tests/upstream.rs: structural schemas read the same under draft 4.
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .should_validate_formats(true)
        .build(schema)
        .unwrap_or_else(|e| panic!("not a usable JSON schema: {e}"));
    validator
        .iter_errors(object)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// raygate's own CRD for `kind` (installed by config/default), as JSON.
fn own_crd_schema(plural: &str) -> Value {
    let path = config().join(format!("crd/bases/{plural}.kueue.x-k8s.io.yaml"));
    let crd = read_file(&path).remove(0).value;
    upstream::version_schema(&crd, "v1beta2")
        .unwrap_or_else(|| panic!("{} has no v1beta2 schema", rel(&path)))
}

#[test]
fn samples_parse_into_raygates_types_and_validate_against_the_upstream_crds() {
    let docs = samples();
    let kinds: BTreeSet<&str> = docs.iter().map(|d| d.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ClusterQueue",
            "LocalQueue",
            "Namespace",
            "RayService",
            "ResourceFlavor"
        ]
        .into()
    );
    let mut failures = Vec::new();
    for doc in &docs {
        let (parsed, upstream, own) = match doc.kind.as_str() {
            "RayService" => (
                doc.parse::<ray::RayService>()
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Some(("ray.io_rayservices.yaml", "v1")),
                None,
            ),
            "ClusterQueue" => (
                doc.parse::<kueue::ClusterQueue>()
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Some(("kueue.x-k8s.io_clusterqueues.yaml", "v1beta2")),
                Some("clusterqueues"),
            ),
            "LocalQueue" => (
                doc.parse::<kueue::LocalQueue>()
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Some(("kueue.x-k8s.io_localqueues.yaml", "v1beta2")),
                Some("localqueues"),
            ),
            "ResourceFlavor" => (
                doc.parse::<kueue::ResourceFlavor>()
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Some(("kueue.x-k8s.io_resourceflavors.yaml", "v1beta2")),
                Some("resourceflavors"),
            ),
            _ => (round_trips::<Namespace>(doc), None, None),
        };
        if let Err(e) = parsed {
            failures.push(format!("{}: {e}", doc.object()));
        }
        if let Some((file, version)) = upstream {
            let schema = upstream::crd_schema(file, version);
            for v in violations(&schema, &doc.value) {
                failures.push(format!("{} against upstream {file}: {v}", doc.object()));
            }
        }
        if let Some(plural) = own {
            for v in violations(&own_crd_schema(plural), &doc.value) {
                failures.push(format!("{} against raygate's CRD: {v}", doc.object()));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn the_sample_rayservice_is_opted_in_and_its_queue_chain_resolves() {
    let docs = samples();
    let rs: ray::RayService = typed(one(&docs, "RayService"));
    let lq: kueue::LocalQueue = typed(one(&docs, "LocalQueue"));
    let cq: kueue::ClusterQueue = typed(one(&docs, "ClusterQueue"));
    let rf: kueue::ResourceFlavor = typed(one(&docs, "ResourceFlavor"));
    let ns = one(&docs, "Namespace");

    let labels = rs.metadata.labels.clone().unwrap_or_default();
    let queue = labels
        .get(kueue::QUEUE_NAME_LABEL)
        .expect("opted in by its queue label");
    assert_eq!(Some(queue), lq.metadata.name.as_ref());
    assert_eq!(rs.metadata.namespace, lq.metadata.namespace);
    assert_eq!(
        rs.metadata.namespace.as_deref(),
        ns.value["metadata"]["name"].as_str()
    );
    let rs_value = &one(&docs, "RayService").value;
    assert_eq!(rs_value["spec"]["rayClusterConfig"]["suspend"], json!(true));
    let workers = rs_value["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        .as_array()
        .expect("worker groups");
    assert_eq!(workers.len(), 1);

    assert_eq!(lq.spec.cluster_queue, cq.metadata.name);
    let group = &cq.spec.resource_groups[0];
    assert_eq!(
        group.covered_resources,
        ["cpu", "memory", "nvidia.com/gpu"].map(String::from)
    );
    assert_eq!(Some(&group.flavors[0].name), rf.metadata.name.as_ref());
    assert_eq!(
        cq.spec
            .preemption
            .as_ref()
            .and_then(|p| p.within_cluster_queue),
        Some(kueue::WithinClusterQueue::LowerPriority)
    );
    assert!(
        !docs
            .iter()
            .any(|d| d.value["metadata"]["name"] == "svc-llm"),
        "the mid-upgrade snapshot rayservice-upgrade.yaml is not applied"
    );
}
