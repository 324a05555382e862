//! The install in `config/`: kustomizations that build, least-privilege RBAC that still covers
//! everything the controller does, a Deployment that runs non-root with a read-only root
//! filesystem, the CRDs in sync with `crds/`, and samples that raygate and the real upstream
//! CRDs both accept. Around it: the Dockerfile agrees with the Deployment, `hack/release.sh`
//! renders exactly `config/default`, and the Helm chart renders the same objects (its defaults)
//! or their documented variants (its values), each valid for its Kubernetes type.
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
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
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
            // scenario files (raygate-demo's format, `demo/src/scenario/format.rs`) are not manifests
            if path == config().join("scenarios") {
                continue;
            }
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

/// The object of `kind` called `name`.
fn named<'a>(objects: &'a [Doc], kind: &str, name: &str) -> &'a Doc {
    objects
        .iter()
        .find(|d| d.kind == kind && d.value["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
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
    on_path("kubectl")
}

/// `program` on PATH, when installed.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
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
        "config/crd-raygate",
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
        cluster("ClusterRole", "raygate-viewer"),
        cluster("ClusterRole", "raygate-editor"),
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
    want.insert(cluster(
        "CustomResourceDefinition",
        "noderollouts.raygate.io",
    ));
    assert_eq!(got, want);
}

#[test]
fn kueue_mode_is_the_default_install_without_crds_admitting_with_kueue() {
    let default = default_build();
    let kueue = build(&config().join("kueue-mode"));
    // raygate's own CRDs stay: only Kueue's are left to Kueue
    let without_crds: BTreeSet<Id> = ids(&default.objects)
        .into_iter()
        .filter(|(kind, _, name)| {
            kind != "CustomResourceDefinition" || !name.ends_with(".kueue.x-k8s.io")
        })
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
    // builtin admission charges LimitRange defaults and RuntimeClass overhead, as Kueue does
    ("", "limitranges", &["get", "list", "watch"]),
    ("node.k8s.io", "runtimeclasses", &["get", "list", "watch"]),
    // NodeRollouts (#12): cordon/taint/label nodes, evict pods through the Eviction API only,
    // watch the budgets.
    ("", "nodes", &["get", "list", "watch", "patch"]),
    ("", "pods", &["get", "list", "watch"]),
    ("", "pods/eviction", &["create"]),
    ("policy", "poddisruptionbudgets", &["get", "list", "watch"]),
    ("apps", "daemonsets", &["get", "list", "watch"]),
    (
        "raygate.io",
        "noderollouts",
        &["get", "list", "watch", "patch"],
    ),
    (
        "raygate.io",
        "noderollouts/status",
        &["get", "patch", "update"],
    ),
    ("events.k8s.io", "events", &["create", "patch"]),
    ("", "events", &["create", "patch"]),
    (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        &["get"],
    ),
];

/// What the controller does in its own namespace: the elector reads its Lease, creates it, and
/// writes it with PUT (never a patch).
const NAMESPACE_PERMISSIONS: &[(&str, &str, &[&str])] = &[(
    "coordination.k8s.io",
    "leases",
    &["get", "create", "update"],
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
    let role: ClusterRole = typed(named(&objects, "ClusterRole", "raygate"));
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
    let role: ClusterRole = typed(named(&objects, "ClusterRole", "raygate"));
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
    let cluster_role: ClusterRole = typed(named(&objects, "ClusterRole", "raygate"));
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
    let cluster_role = named(&objects, "ClusterRole", "raygate");
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
    let listed = |dir: &str| -> BTreeSet<String> {
        kustomization(&config().join(dir))["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().trim_start_matches("bases/").to_string())
            .collect()
    };
    let (kueue, own): (BTreeSet<String>, BTreeSet<String>) = names(&generated)
        .into_iter()
        .partition(|n| n.ends_with(".kueue.x-k8s.io.yaml"));
    assert_eq!(listed("crd"), kueue, "config/crd installs every Kueue CRD");
    assert_eq!(
        listed("crd-raygate"),
        own,
        "config/crd-raygate installs raygate's own CRDs"
    );
    for name in own {
        let a = std::fs::read(generated.join(&name)).unwrap();
        let b = std::fs::read(config().join("crd-raygate").join(&name)).unwrap();
        assert!(
            a == b,
            "config/crd-raygate/{name} is stale: run `cp crds/*.raygate.io.yaml config/crd-raygate/`"
        );
    }
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

// ---------------------------------------------------------------------------------------------
// HA: one identity per replica
// ---------------------------------------------------------------------------------------------

/// The env var `name` of the controller container is the downward-API field `field_path`.
fn assert_env_from_field(deployment: &Deployment, name: &str, field_path: &str, whose: &str) {
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod template");
    let env = pod.containers[0].env.clone().unwrap_or_default();
    let var = env
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{whose}: the controller has no {name} env var"));
    assert_eq!(var.value, None, "{whose}: {name} is not a constant");
    let field = var
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .unwrap_or_else(|| panic!("{whose}: {name} comes from a fieldRef"));
    assert_eq!(field.field_path, field_path, "{whose}: {name}");
}

/// Leader election's identity is `$POD_NAME` (cli/src/main.rs); without it every replica would be
/// `raygate-<pid>`, the same pid 1 in every container, and two replicas would both lead.
#[test]
fn every_replica_has_its_own_identity_from_the_downward_api() {
    let main_rs = std::fs::read_to_string(repo().join("cli/src/main.rs")).expect("cli/src/main.rs");
    assert!(
        main_rs.contains(r#"std::env::var("POD_NAME")"#),
        "cli/src/main.rs derives the leader identity from POD_NAME"
    );
    for dir in ["default", "kueue-mode"] {
        let objects = build(&config().join(dir)).objects;
        let deployment: Deployment = typed(one(&objects, "Deployment"));
        let whose = format!("config/{dir}");
        assert_env_from_field(&deployment, "POD_NAME", "metadata.name", &whose);
        assert_env_from_field(&deployment, "POD_NAMESPACE", "metadata.namespace", &whose);
    }
}

// ---------------------------------------------------------------------------------------------
// The image (Dockerfile), checked statically: no docker daemon in CI
// ---------------------------------------------------------------------------------------------

/// One Dockerfile instruction: keyword (upper-cased) and its arguments, continuations joined.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

/// The Dockerfile's build stages, each a list of instructions starting with its FROM.
fn dockerfile_stages() -> Vec<Vec<Instruction>> {
    let path = repo().join("Dockerfile");
    let text = std::fs::read_to_string(&path).expect("a Dockerfile at the repository root");
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(trimmed);
            logical.push(std::mem::take(&mut current));
        }
    }
    assert!(current.is_empty(), "Dockerfile ends in a line continuation");
    let mut stages: Vec<Vec<Instruction>> = Vec::new();
    for line in logical {
        let (keyword, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
        let instruction = Instruction {
            keyword: keyword.to_ascii_uppercase(),
            args: args.trim().to_string(),
        };
        if instruction.keyword == "FROM" {
            stages.push(vec![instruction]);
        } else {
            stages
                .last_mut()
                .unwrap_or_else(|| panic!("Dockerfile: {line:?} before the first FROM"))
                .push(instruction);
        }
    }
    stages
}

fn instruction<'a>(stage: &'a [Instruction], keyword: &str) -> Option<&'a str> {
    let found: Vec<&Instruction> = stage.iter().filter(|i| i.keyword == keyword).collect();
    assert!(found.len() <= 1, "one {keyword} per stage: {found:?}");
    found.first().map(|i| i.args.as_str())
}

/// The exec form (`["a", "b"]`) of an ENTRYPOINT or CMD.
fn exec_form(args: &str) -> Vec<String> {
    serde_json::from_str(args).unwrap_or_else(|e| panic!("{args} is not in exec form: {e}"))
}

/// What a Deployment's pod runs as, for comparison with the image.
struct PodRuntime {
    user: i64,
    group: i64,
    command: Option<Vec<String>>,
    args: Vec<String>,
    read_only_root: bool,
}

fn pod_runtime(deployment: &Deployment) -> PodRuntime {
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod template");
    let pod_sc = pod.security_context.clone().unwrap_or_default();
    let c = &pod.containers[0];
    let sc = c.security_context.clone().unwrap_or_default();
    let user = sc.run_as_user.or(pod_sc.run_as_user).expect("runAsUser");
    let group = sc.run_as_group.or(pod_sc.run_as_group).expect("runAsGroup");
    PodRuntime {
        user,
        group,
        command: c.command.clone(),
        args: c.args.clone().unwrap_or_default(),
        read_only_root: sc.read_only_root_filesystem == Some(true),
    }
}

/// The image agrees with the Deployment `deployment` (from `whose`): the same unprivileged user,
/// its ENTRYPOINT not overridden, its default command the one the Deployment runs.
fn assert_image_fits(deployment: &Deployment, whose: &str) {
    let stages = dockerfile_stages();
    let runtime = stages.last().expect("a stage");
    let user = instruction(runtime, "USER").expect("the runtime stage sets USER");
    let cmd = exec_form(instruction(runtime, "CMD").expect("a CMD"));
    let pod = pod_runtime(deployment);
    assert_eq!(
        user,
        format!("{}:{}", pod.user, pod.group),
        "{whose}: runAsUser/runAsGroup are the image's USER"
    );
    assert_eq!(
        pod.command, None,
        "{whose}: the container keeps the image's ENTRYPOINT"
    );
    assert_eq!(
        pod.args.first(),
        cmd.first(),
        "{whose}: the Deployment runs the image's default subcommand"
    );
    assert!(pod.read_only_root, "{whose}: read-only root filesystem");
}

#[test]
fn the_image_is_a_static_binary_on_distroless_as_user_65532() {
    let stages = dockerfile_stages();
    assert!(stages.len() >= 2, "a multi-stage build: {stages:?}");

    // The builder is the toolchain the crate asks for (Cargo.toml's rust-version).
    let cargo_toml = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let rust_version = cargo_toml
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("a rust-version")
        .trim_matches('"');
    let builder = instruction(&stages[0], "FROM").expect("FROM");
    assert!(
        builder.starts_with(&format!("rust:{rust_version}-alpine ")),
        "the builder is rust:{rust_version}-alpine (musl, static): {builder}"
    );
    let build_name = builder
        .split_whitespace()
        .last()
        .expect("the builder stage is named");

    // The controller build: the simulator's commands stay out of the image (hack/build-image.sh
    // builds the same way).
    let build_run = stages[0]
        .iter()
        .filter(|i| i.keyword == "RUN")
        .find(|i| i.args.contains("cargo build"))
        .expect("the builder runs cargo build");
    assert!(
        build_run
            .args
            .contains("-p raygate-cli --no-default-features --bin raygate"),
        "{build_run:?}"
    );

    let runtime = stages.last().expect("a runtime stage");
    let base = instruction(runtime, "FROM").expect("FROM");
    assert!(
        base.starts_with("gcr.io/distroless/static") && base.ends_with(":nonroot"),
        "the runtime is distroless/static (no libc, no shell): {base}"
    );
    // distroless has no shell: nothing can RUN in the runtime stage.
    assert!(runtime.iter().all(|i| i.keyword != "RUN"), "{runtime:?}");
    assert_eq!(instruction(runtime, "USER"), Some("65532:65532"));
    let entrypoint = exec_form(instruction(runtime, "ENTRYPOINT").expect("an ENTRYPOINT"));
    assert_eq!(entrypoint, ["/raygate"]);
    assert_eq!(
        instruction(runtime, "COPY"),
        Some(format!("--from={build_name} /raygate /raygate").as_str()),
        "the entrypoint is the binary built in the first stage"
    );
    assert_eq!(
        exec_form(instruction(runtime, "CMD").expect("a CMD")),
        ["controller"]
    );

    // The build context keeps what `cargo build --locked` reads (Cargo.toml declares the
    // benches and tests too) and leaves out the large or irrelevant.
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).expect(".dockerignore");
    let patterns: BTreeSet<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/'))
        .collect();
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "src",
        "types",
        "testing",
        "sim",
        "cli",
        "benches",
        "tests",
    ] {
        assert!(!patterns.contains(needed), ".dockerignore keeps {needed}");
    }
    for dropped in ["target", ".git"] {
        assert!(patterns.contains(dropped), ".dockerignore drops {dropped}");
    }

    for dir in ["default", "kueue-mode"] {
        let objects = build(&config().join(dir)).objects;
        let deployment: Deployment = typed(one(&objects, "Deployment"));
        assert_image_fits(&deployment, &format!("config/{dir}"));
    }
}

/// Whether `.dockerignore`'s `lines` leave `path` (relative to the repository, `/`-separated)
/// out of the build context: the last line that matches decides (`!` keeps), and a line matches
/// the path or one of its parent directories, `*` within one path element (Docker's
/// `patternmatcher` with `filepath.Match`).
fn docker_ignored(lines: &[&str], path: &str) -> bool {
    fn glob(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
            (Some(a), Some(b)) if a == b || *a == b'?' => glob(&p[1..], &s[1..]),
            _ => false,
        }
    }
    let parts: Vec<&str> = path.split('/').collect();
    let mut ignored = false;
    for line in lines {
        let (keep, pattern) = match line.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, *line),
        };
        let pattern: Vec<&str> = pattern.trim_end_matches('/').split('/').collect();
        let matches = pattern.len() <= parts.len()
            && pattern
                .iter()
                .zip(&parts)
                .all(|(p, s)| glob(p.as_bytes(), s.as_bytes()));
        if matches {
            ignored = !keep;
        }
    }
    ignored
}

/// `docker build .` compiles every file the binary's crates embed (`include_str!`,
/// `include_bytes!` outside their test modules): each is in the build context.
#[test]
fn the_build_context_holds_every_file_the_binary_embeds() {
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).expect(".dockerignore");
    let lines: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(docker_ignored(&lines, "target/release/raygate"));
    assert!(docker_ignored(&lines, "README.md"));
    assert!(!docker_ignored(&lines, "src/lib.rs"));
    let mut embedded = Vec::new();
    let mut dirs: Vec<PathBuf> = ["src", "types/src", "sim/src", "demo/src", "cli/src"]
        .iter()
        .map(|d| repo().join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !name.ends_with(".rs") || name.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // test modules sit at the end of a file
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for m in ["include_str!(\"", "include_bytes!(\""] {
                for (at, _) in code.match_indices(m) {
                    let rest = &code[at + m.len()..];
                    let file = &rest[..rest.find('"').unwrap()];
                    let full = path.parent().unwrap().join(file).canonicalize().unwrap();
                    let relative = full.strip_prefix(repo().canonicalize().unwrap()).unwrap();
                    embedded.push(relative.to_string_lossy().replace('\\', "/"));
                }
            }
        }
    }
    assert!(
        embedded.iter().any(|f| f == "config/scenarios/demo.yaml"),
        "the demo's scenario is embedded: {embedded:?}"
    );
    let left_out: Vec<&String> = embedded
        .iter()
        .filter(|f| docker_ignored(&lines, f))
        .collect();
    assert!(
        left_out.is_empty(),
        ".dockerignore leaves out files the binary embeds: {left_out:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The release manifest (hack/release.sh)
// ---------------------------------------------------------------------------------------------

/// A fresh, empty directory under the system's temp dir.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("raygate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// `to` as a path relative to the directory `from` (both absolute).
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let from = from.canonicalize().expect("from resolves");
    let to = to.canonicalize().expect("to resolves");
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    out.extend(to.components().skip(common));
    out
}

fn release(version: &str, image: &str, dist: &Path) -> std::process::Output {
    Command::new("bash")
        .arg(repo().join("hack/release.sh"))
        .arg(version)
        .env("IMAGE", image)
        .env("DIST_DIR", dist)
        // the image's release build takes tens of minutes; hack/test.sh builds and boots it
        .env("RAYGATE_RELEASE_IMAGE", "0")
        .output()
        .expect("running bash hack/release.sh")
}

fn deployment_image(objects: &[Doc]) -> String {
    let deployment: Deployment = typed(one(objects, "Deployment"));
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .expect("a pod template");
    pod.containers[0].image.clone().expect("an image")
}

#[test]
fn the_release_manifest_is_config_default_with_the_image_tag() {
    let dist = scratch_dir("release");
    let image = "registry.example.com/team/raygate";
    let out = release("v9.8.7-rc.1", image, &dist);
    assert!(
        out.status.success(),
        "hack/release.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let released = read_file(&dist.join("raygate.yaml"));

    // Every object of config/default, each exactly as there, but for the image tag.
    let default = default_build().objects;
    assert_eq!(ids(&released), ids(&default));
    assert_eq!(deployment_image(&released), format!("{image}:v9.8.7-rc.1"));
    for doc in &released {
        let original = default.iter().find(|d| id(d) == id(doc)).expect("listed");
        let mut want = original.value.clone();
        if doc.kind == "Deployment" {
            want["spec"]["template"]["spec"]["containers"][0]["image"] =
                json!(format!("{image}:v9.8.7-rc.1"));
        }
        assert_eq!(doc.value, want, "{}", doc.object());
    }

    // One `kubectl apply -f` pass: the Namespace, then the CRDs, before anything that needs them.
    let kinds: Vec<&str> = released.iter().map(|d| d.kind.as_str()).collect();
    assert_eq!(kinds[0], "Namespace");
    let crds = kinds
        .iter()
        .filter(|k| **k == "CustomResourceDefinition")
        .count();
    // six Kueue kinds and raygate's NodeRollout
    assert_eq!(crds, 7);
    assert!(
        kinds[1..=crds]
            .iter()
            .all(|k| *k == "CustomResourceDefinition")
    );

    // The same objects, in the same order, as kustomize with the image overridden.
    if let Some(kubectl) = kubectl() {
        // kustomize takes no absolute path to a base: the overlay names it relative to itself.
        let overlay = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("release-overlay-{}", std::process::id()));
        std::fs::create_dir_all(&overlay).expect("creating the overlay");
        std::fs::write(
            overlay.join("kustomization.yaml"),
            format!(
                "resources:\n- {}\nimages:\n- name: ghcr.io/raygate/raygate\n  newName: {image}\n  newTag: v9.8.7-rc.1\n",
                relative_path(&overlay, &config().join("default")).display()
            ),
        )
        .expect("writing the overlay");
        let built = kubectl_kustomize(&kubectl, &overlay);
        let order = |docs: &[Doc]| docs.iter().map(id).collect::<Vec<_>>();
        assert_eq!(order(&released), order(&built));
        for (a, b) in released.iter().zip(&built) {
            assert_eq!(a.value, b.value, "{}", a.object());
        }
        let _ = std::fs::remove_dir_all(&overlay);
    } else {
        eprintln!("kubectl is not on PATH: release.sh was not compared with kustomize");
    }

    // The packaged chart: charts/raygate with the release's version and image tag.
    let chart = Command::new("tar")
        .arg("-xzOf")
        .arg(dist.join("raygate-9.8.7-rc.1.tgz"))
        .arg("raygate/Chart.yaml")
        .output()
        .expect("tar");
    assert!(
        chart.status.success(),
        "the chart archive holds raygate/Chart.yaml"
    );
    let chart_yaml = String::from_utf8_lossy(&chart.stdout);
    assert!(
        chart_yaml.contains("\nversion: 9.8.7-rc.1\n"),
        "{chart_yaml}"
    );
    assert!(
        chart_yaml.contains("\nappVersion: v9.8.7-rc.1\n"),
        "{chart_yaml}"
    );
    assert_eq!(
        Command::new("tar")
            .arg("-tzf")
            .arg(dist.join("raygate-9.8.7-rc.1.tgz"))
            .arg("raygate/values.schema.json")
            .output()
            .map(|o| o.status.success())
            .ok(),
        Some(true)
    );

    // Nothing half-written on bad input.
    for (version, image) in [
        ("latest", image),
        ("v1.0.0", "registry.example.com/raygate:v1"),
    ] {
        let bad = scratch_dir("release-bad");
        let out = release(version, image, &bad);
        assert!(!out.status.success(), "{version} {image} is refused");
        assert!(!bad.join("raygate.yaml").exists());
        let _ = std::fs::remove_dir_all(&bad);
    }
    let _ = std::fs::remove_dir_all(&dist);
}

// ---------------------------------------------------------------------------------------------
// The Helm chart (charts/raygate), rendered by Helm's own engine: Helm v4's library from PyPI's
// helm-python-sdk (hack/install-helm.sh; no registry here ships the `helm` binary), driven by
// hack/helm-template.py. Helm checks values.schema.json on every rendering; the tests check it
// too (jsonschema, draft 7) and check every rendered object against its Kubernetes type.
// ---------------------------------------------------------------------------------------------

fn chart() -> PathBuf {
    repo().join("charts/raygate")
}

/// Labels and annotations only the chart adds (Helm's conventions); everything else must be
/// config/'s.
const HELM_LABELS: [&str; 3] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
];
const HELM_ANNOTATIONS: [&str; 1] = ["helm.sh/resource-policy"];

fn yaml_value(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", rel(path)));
    raygate::manifest::from_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", rel(path)))
}

/// Helm's `-f` merge: maps merge key by key, anything else replaces, null deletes.
fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(existing) = b.get_mut(k) {
                    merge(existing, v);
                } else {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// values.yaml with `overrides` merged in, checked against values.schema.json as Helm does.
fn chart_values(overrides: &Value) -> Result<Value, Vec<String>> {
    let mut values = yaml_value(&chart().join("values.yaml"));
    merge(&mut values, overrides);
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("values.schema.json")).expect("values.schema.json"),
    )
    .expect("values.schema.json is JSON");
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .build(&schema)
        .unwrap_or_else(|e| panic!("values.schema.json is not a usable schema: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(&values)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(values)
    } else {
        Err(errors)
    }
}

/// The image repository the tests install: the chart has none by default (see values.yaml), so
/// every rendering names config/'s.
fn config_image_repository() -> String {
    let image = deployment_image(&default_build().objects);
    let (repository, _tag) = image.rsplit_once(':').expect("config/ tags its image");
    repository.to_string()
}

/// The `-f` file the tests pass: `overrides`, with config/'s image repository unless they set
/// it (null passes through: Helm then deletes the default).
fn with_image(overrides: &Value) -> Value {
    let mut values = overrides.clone();
    let image = values
        .as_object_mut()
        .expect("values are a map")
        .entry("image")
        .or_insert_with(|| json!({}));
    if let Some(image) = image.as_object_mut() {
        image
            .entry("repository")
            .or_insert_with(|| json!(config_image_repository()));
    }
    values
}

/// The virtualenv's Python that carries Helm's library (hack/install-helm.sh).
fn helm_python() -> PathBuf {
    let venv = std::env::var_os("RAYGATE_HELM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/raygate/helm-python")
        });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run hack/install-helm.sh (hack/test.sh does)",
        python.display()
    );
    python
}

/// `hack/helm-template.py ARGS < VALUES`.
fn helm_py(args: &[&str], values: &Value) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(helm_python())
        .arg(repo().join("hack/helm-template.py"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running hack/helm-template.py");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(values.to_string().as_bytes())
        .expect("writing the values");
    child.wait_with_output().expect("hack/helm-template.py")
}

/// `helm template raygate charts/raygate -n NAMESPACE -f VALUES`: every rendered file by its
/// template path (NOTES.txt included), or Helm's refusal (schema, `required`, `fail`).
fn helm_template(namespace: &str, values: &Value) -> Result<BTreeMap<String, String>, String> {
    let chart = chart().display().to_string();
    let out = helm_py(&[&chart, "raygate", namespace], values);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => Ok(serde_json::from_slice(&out.stdout).expect("helm-template.py prints JSON")),
        Some(2) => Err(stderr),
        _ => panic!("hack/helm-template.py failed ({}): {stderr}", out.status),
    }
}

/// The chart's objects with `overrides` (and config/'s image), or Helm's refusal.
fn try_render_chart(namespace: &str, overrides: &Value) -> Result<Vec<Doc>, String> {
    let files = helm_template(namespace, &with_image(overrides))?;
    let mut out = String::new();
    for (path, text) in &files {
        if !path.ends_with("NOTES.txt") && !text.trim().is_empty() {
            out.push_str(&format!("---\n# Source: {path}\n{text}\n"));
        }
    }
    Ok(read_documents(&out).unwrap_or_else(|e| panic!("the chart with {overrides}: {e}\n{out}")))
}

/// `helm template` with `overrides`, which both schema checks (Helm's and draft 7's) accept.
fn render_chart(namespace: &str, overrides: Value) -> Vec<Doc> {
    if let Err(e) = chart_values(&with_image(&overrides)) {
        panic!("values {overrides} fail values.schema.json: {e:#?}");
    }
    try_render_chart(namespace, &overrides)
        .unwrap_or_else(|e| panic!("helm refuses {overrides}: {e}"))
}

/// `value` without what only the chart adds.
fn without_helm_metadata(value: &Value) -> Value {
    let mut v = value.clone();
    for (field, keys) in [
        ("labels", &HELM_LABELS[..]),
        ("annotations", &HELM_ANNOTATIONS[..]),
    ] {
        let Some(metadata) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(map) = metadata.get_mut(field).and_then(Value::as_object_mut) {
            for k in keys {
                map.remove(*k);
            }
            if map.is_empty() {
                metadata.remove(field);
            }
        }
    }
    v
}

fn chart_deployment(objects: &[Doc]) -> Deployment {
    typed(one(objects, "Deployment"))
}

/// A kustomize strategic-merge patch as config/kueue-mode uses it: the container's args replaced.
fn with_patched_args(deployment: &Value, patch: &Value) -> Value {
    let mut out = deployment.clone();
    out["spec"]["template"]["spec"]["containers"][0]["args"] =
        patch["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    out
}

#[test]
fn the_chart_renders_config_default_by_default() {
    let rendered = render_chart(NAMESPACE, json!({"namespace": {"create": true}}));
    let default = default_build().objects;
    assert_eq!(ids(&rendered), ids(&default));
    for doc in &rendered {
        let labels = &doc.value["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/managed-by"],
            "Helm",
            "{}",
            doc.object()
        );
        let original = default.iter().find(|d| id(d) == id(doc)).expect("listed");
        assert_eq!(
            without_helm_metadata(&doc.value),
            original.value,
            "{} differs from config/",
            doc.object()
        );
    }
    // With `helm install --create-namespace`, the chart leaves the Namespace to Helm.
    let plain = render_chart(NAMESPACE, json!({}));
    let mut want = ids(&default);
    want.retain(|(kind, _, _)| kind != "Namespace");
    assert_eq!(ids(&plain), want);
}

#[test]
fn the_chart_in_kueue_mode_is_config_kueue_mode() {
    let rendered = render_chart(
        NAMESPACE,
        json!({"admission": {"mode": "kueue"}, "namespace": {"create": true}}),
    );
    let kueue = build(&config().join("kueue-mode"));
    assert_eq!(ids(&rendered), ids(&kueue.objects), "no CRDs in kueue mode");
    for doc in &rendered {
        let original = kueue.objects.iter().find(|d| id(d) == id(doc)).unwrap();
        let want = if doc.kind == "Deployment" {
            with_patched_args(&original.value, &kueue.patches[0].value)
        } else {
            original.value.clone()
        };
        assert_eq!(without_helm_metadata(&doc.value), want, "{}", doc.object());
    }
    assert!(args(&chart_deployment(&rendered)).contains(&"--admission=kueue".to_string()));
}

#[test]
fn the_chart_without_leader_election_runs_one_replica_without_a_lease() {
    let rendered = render_chart(NAMESPACE, json!({"leaderElection": {"enabled": false}}));
    let kinds: Vec<&str> = rendered.iter().map(|d| d.kind.as_str()).collect();
    assert!(!kinds.contains(&"Role") && !kinds.contains(&"RoleBinding"));
    let deployment = chart_deployment(&rendered);
    assert!(!args(&deployment).contains(&"--leader-elect".to_string()));
    assert_eq!(deployment.spec.as_ref().unwrap().replicas, Some(1));
    // Still one identity per pod: harmless without a Lease, and the same pod spec either way.
    assert_env_from_field(&deployment, "POD_NAME", "metadata.name", "the chart");

    // Two writers with no Lease would fight: the chart refuses it, and allows it with a Lease.
    let refused = chart_values(&json!({"replicas": 2, "leaderElection": {"enabled": false}}));
    assert!(refused.is_err(), "replicas 2 without leader election");
    let ha = render_chart(NAMESPACE, json!({"replicas": 2}));
    let deployment = chart_deployment(&ha);
    assert_eq!(deployment.spec.as_ref().unwrap().replicas, Some(2));
    assert!(args(&deployment).contains(&"--leader-elect".to_string()));
    assert_eq!(
        ha.iter().filter(|d| d.kind == "Role").count(),
        1,
        "the Lease's Role"
    );
}

#[test]
fn the_chart_values_are_checked_by_its_schema() {
    assert!(chart_values(&with_image(&json!({}))).is_ok());
    // A subchart's values carry the umbrella's `global`.
    render_chart(
        NAMESPACE,
        json!({"global": {"imageRegistry": "registry.example.com"}}),
    );
    for bad in [
        json!({"admission": {"mode": "volcano"}}),
        json!({"logFormat": "xml"}),
        json!({"image": {"pullPolicy": "Sometimes"}}),
        json!({"metrics": {"port": 0}}),
        json!({"finishedSlices": {"retentionSeconds": -1}}),
        json!({"leaderElect": true}),
        json!({"nodeRollouts": {"enabled": "no"}}),
        json!({"imagePullSecrets": ["regcred"]}),
        json!({"extraArgs": ["controller"]}),
        json!({"extraEnv": [{"name": "POD_NAME", "value": "x"}]}),
        json!({"podLabels": {"team": 1}}),
        json!({"podDisruptionBudget": {"enabled": true, "maxUnavailable": 0}}),
        json!({"networkPolicy": {"enabled": true, "apiServerCIDRs": ["10.0.0.1"]}}),
        json!({"metrics": {"prometheusRule": {"enabled": true, "noLeaderFor": "five minutes"}}}),
        json!({"metrics": {"serviceMonitor": {"enabled": true, "honorLabels": "yes"}}}),
        json!({"rbac": {"aggregateToDefaultRoles": true, "viewer": true}}),
    ] {
        assert!(chart_values(&with_image(&bad)).is_err(), "{bad} is refused");
        let helm = try_render_chart(NAMESPACE, &bad);
        assert!(helm.is_err(), "helm refuses {bad} too");
    }
}

#[test]
fn helm_lint_strict_finds_nothing_to_fix() {
    let chart = chart().display().to_string();
    for overrides in [json!({}), every_option()] {
        let out = helm_py(&["--lint", &chart, NAMESPACE], &with_image(&overrides));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
        // severity 1 is INFO (e.g. "icon is recommended"); 2 WARNING, 4 ERROR
        let findings: Vec<&Value> = report["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["severity"].as_i64() != Some(1))
            .collect();
        assert!(
            findings.is_empty(),
            "helm lint --strict with {overrides}: {findings:#?}"
        );
        assert_eq!(report["errors"], json!([]), "{report}");
    }
}

#[test]
fn the_chart_requires_an_image_repository() {
    // Left at its default, `required` says why; deleted (`--set image.repository=null`), the
    // schema names the missing field.
    for (missing, says) in [
        (
            json!({"image": {"repository": ""}}),
            "image.repository is required: raygate publishes no image",
        ),
        (
            json!({"image": {"repository": null}}),
            "missing property 'repository'",
        ),
    ] {
        let refused = try_render_chart(NAMESPACE, &missing).expect_err("no image, no install");
        assert!(refused.contains(says), "{missing}: {refused}");
    }
    let values = yaml_value(&chart().join("values.yaml"));
    assert_eq!(
        values["image"]["repository"], "",
        "no default that could resolve"
    );
}

/// Every rendered object parses as its Kubernetes type with nothing dropped; a ServiceMonitor
/// (prometheus-operator's CRD is not vendored here) is checked for what raygate relies on.
fn check_rendered(objects: &[Doc]) {
    let mut failures = Vec::new();
    for doc in objects {
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
            "PodDisruptionBudget" => round_trips::<PodDisruptionBudget>(doc),
            "NetworkPolicy" => round_trips::<NetworkPolicy>(doc),
            "ConfigMap" => round_trips::<ConfigMap>(doc),
            "PrometheusRule" => check_prometheus_rule(doc),
            "ServiceMonitor" => {
                let service: Service = typed(one(objects, "Service"));
                let spec = service.spec.unwrap_or_default();
                let v = &doc.value;
                let selector: BTreeMap<String, String> =
                    serde_json::from_value(v["spec"]["selector"]["matchLabels"].clone())
                        .unwrap_or_default();
                let service_labels = service.metadata.labels.unwrap_or_default();
                let port = spec.ports.unwrap_or_default()[0].name.clone();
                if v["apiVersion"] != "monitoring.coreos.com/v1" {
                    Err(format!("{}: apiVersion", doc.object()))
                } else if selector.is_empty()
                    || !selector
                        .iter()
                        .all(|(k, val)| service_labels.get(k) == Some(val))
                {
                    Err(format!("{}: selects no raygate Service", doc.object()))
                } else if v["spec"]["endpoints"][0]["port"].as_str() != port.as_deref() {
                    Err(format!("{}: not the metrics port", doc.object()))
                } else if !v["spec"]["endpoints"][0]["honorLabels"].is_boolean() {
                    Err(format!("{}: honorLabels", doc.object()))
                } else {
                    Ok(())
                }
            }
            other => Err(format!("{}: no check for kind {other}", doc.object())),
        };
        if let Err(e) = result {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_chart_rendering_validates_against_the_kubernetes_schemas() {
    let customised = json!({
        "image": {"repository": "registry.example.com/raygate", "tag": "v0.2.0", "pullPolicy": "Always"},
        "replicas": 3,
        "metrics": {"port": 9090, "serviceMonitor": {"enabled": true, "interval": "15s",
                                                     "labels": {"release": "prometheus"}}},
        "logFormat": "text",
        "finishedSlices": {"retentionSeconds": 2_592_000, "kept": 0},
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                         "effect": "NoSchedule"}],
        "affinity": null,
        "namespace": {"create": true},
    });
    for overrides in [
        json!({}),
        json!({"admission": {"mode": "kueue"}}),
        json!({"leaderElection": {"enabled": false}}),
        json!({"resources": null, "affinity": null}),
        json!({"nodeRollouts": {"enabled": false}, "rbac": {"aggregateToDefaultRoles": false}}),
        json!({"podGate": {"enabled": true}, "networkPolicy": {"enabled": true}}),
        customised.clone(),
        every_option(),
    ] {
        check_rendered(&render_chart("platform", overrides));
    }

    // The values land where they should.
    let rendered = render_chart("platform", customised);
    let deployment = chart_deployment(&rendered);
    let spec = deployment.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let pod = spec.template.spec.unwrap();
    let c = &pod.containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example.com/raygate:v0.2.0")
    );
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(
        args(&deployment),
        [
            "controller",
            "--admission=builtin",
            "--leader-elect",
            "--metrics-addr=0.0.0.0:9090",
            "--log-format=text",
            // Not 2.592e+06, as Helm would print the float64 without int64.
            "--finished-slice-retention-seconds=2592000",
            "--finished-slices-kept=0",
        ]
    );
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 9090);
    let service: Service = typed(one(&rendered, "Service"));
    assert_eq!(service.spec.unwrap().ports.unwrap()[0].port, 9090);
    let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "1Gi");
    assert_eq!(
        pod.node_selector.unwrap()["node-role.kubernetes.io/control-plane"],
        ""
    );
    assert_eq!(
        pod.tolerations.unwrap()[0].effect.as_deref(),
        Some("NoSchedule")
    );
    assert!(pod.affinity.is_none());
    let monitor = one(&rendered, "ServiceMonitor");
    assert_eq!(monitor.value["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(monitor.value["spec"]["endpoints"][0]["interval"], "15s");
    assert!(
        !render_chart(NAMESPACE, json!({}))
            .iter()
            .any(|d| d.kind == "ServiceMonitor"),
        "no ServiceMonitor unless asked for (its CRD may be absent)"
    );
}

#[test]
fn the_chart_follows_its_release_namespace() {
    let rendered = render_chart("platform", json!({"namespace": {"create": true}}));
    for doc in &rendered {
        if let Some(ns) = doc.value["metadata"]["namespace"].as_str() {
            assert_eq!(ns, "platform", "{}", doc.object());
        }
    }
    let ns: Namespace = typed(one(&rendered, "Namespace"));
    assert_eq!(ns.metadata.name.as_deref(), Some("platform"));
    let binding: ClusterRoleBinding = typed(one(&rendered, "ClusterRoleBinding"));
    assert_eq!(
        binding.subjects.unwrap()[0].namespace.as_deref(),
        Some("platform")
    );
    // The admission policy lets raygate's ServiceAccount, in this namespace, release children.
    let policy = &one(&rendered, "ValidatingAdmissionPolicy").value;
    let is_raygate = policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "isRaygate")
        .expect("the isRaygate variable");
    assert_eq!(
        is_raygate["expression"],
        "request.userInfo.username == 'system:serviceaccount:platform:raygate'"
    );
}

#[test]
fn the_charts_crds_are_a_current_copy_of_crds_kept_on_uninstall() {
    let rendered = render_chart(NAMESPACE, json!({}));
    let in_chart: Vec<&Doc> = rendered
        .iter()
        .filter(|d| d.kind == "CustomResourceDefinition")
        .collect();
    let generated: Vec<Doc> = yaml_files(&repo().join("crds"))
        .iter()
        .flat_map(|p| read_file(p))
        .collect();
    assert_eq!(
        in_chart.len(),
        generated.len(),
        "run hack/chart-crds.sh: the chart installs every CRD of crds/"
    );
    for crd in in_chart {
        assert_eq!(
            crd.value["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep",
            "{}: helm uninstall would delete every Workload and queue",
            crd.object()
        );
        let source = generated
            .iter()
            .find(|g| id(g) == id(crd))
            .unwrap_or_else(|| panic!("{} is not in crds/", crd.object()));
        assert!(
            without_helm_metadata(&crd.value) == source.value,
            "{} is stale: run hack/chart-crds.sh",
            crd.object()
        );
    }
}

#[test]
fn the_chart_notes_render() {
    for mode in ["builtin", "kueue"] {
        let files = helm_template(
            "platform",
            &with_image(&json!({"admission": {"mode": mode}})),
        )
        .expect("the chart renders");
        let notes = &files["raygate/templates/NOTES.txt"];
        assert!(notes.contains(&format!("(admission: {mode})")), "{notes}");
        assert!(notes.contains("deploy/raygate"), "{notes}");
    }
}

#[test]
fn the_image_and_the_identity_agree_with_the_charts_deployment() {
    for overrides in [json!({}), json!({"admission": {"mode": "kueue"}})] {
        let deployment = chart_deployment(&render_chart(NAMESPACE, overrides));
        assert_image_fits(&deployment, "charts/raygate");
        assert_env_from_field(&deployment, "POD_NAME", "metadata.name", "charts/raygate");
        assert_env_from_field(
            &deployment,
            "POD_NAMESPACE",
            "metadata.namespace",
            "charts/raygate",
        );
    }
}

/// config/pod-gate is config/default plus exactly the pod gate's needs: pods
/// get/list/watch/patch for raygate's ServiceAccount, the policy guarding the gate, and
/// `--pod-gate` on the controller.
#[test]
fn the_pod_gate_install_grows_rbac_by_exactly_pods_get_list_watch_patch() {
    let base = default_build().objects;
    let gated = build(&config().join("pod-gate")).objects;
    let cluster = |kind: &str, name: &str| (kind.to_string(), String::new(), name.to_string());
    let added: BTreeSet<Id> = ids(&gated).difference(&ids(&base)).cloned().collect();
    assert_eq!(
        added,
        [
            cluster("ClusterRole", "raygate-pod-gate"),
            cluster("ClusterRoleBinding", "raygate-pod-gate"),
            cluster("ValidatingAdmissionPolicy", "raygate-pod-gate"),
            cluster("ValidatingAdmissionPolicyBinding", "raygate-pod-gate"),
            cluster("ValidatingAdmissionPolicy", "raygate-pod-gate-templates"),
            cluster(
                "ValidatingAdmissionPolicyBinding",
                "raygate-pod-gate-templates"
            ),
        ]
        .into()
    );
    let role = gated
        .iter()
        .find(|d| id(d) == cluster("ClusterRole", "raygate-pod-gate"))
        .unwrap();
    let role: ClusterRole = typed(role);
    assert_eq!(
        grants(role.rules.as_deref().unwrap_or_default()),
        table(&[("", "pods", &["get", "list", "watch", "patch"])])
    );
    let binding = gated
        .iter()
        .find(|d| id(d) == cluster("ClusterRoleBinding", "raygate-pod-gate"))
        .unwrap();
    let binding: ClusterRoleBinding = typed(binding);
    assert_eq!(binding.role_ref.name, "raygate-pod-gate");
    assert_eq!(
        serde_json::to_value(&binding.subjects).unwrap(),
        json!([{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}])
    );
    // kustomize applies the Deployment patch (a strategic merge patch replacing the args)
    let patches = build(&config().join("pod-gate")).patches;
    let patch = one(&patches, "Deployment");
    let args: Vec<String> = serde_json::from_value(
        patch.value["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .unwrap();
    let base_deployment: Deployment = typed(one(&base, "Deployment"));
    let mut base_args = base_deployment
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap();
    base_args.insert(2, "--pod-gate".into());
    assert_eq!(args, base_args, "only --pod-gate added");
}

#[test]
fn the_chart_with_the_pod_gate_is_config_pod_gate() {
    let rendered = render_chart(
        NAMESPACE,
        json!({"podGate": {"enabled": true}, "namespace": {"create": true}}),
    );
    let pod_gate = build(&config().join("pod-gate"));
    assert_eq!(ids(&rendered), ids(&pod_gate.objects));
    for doc in &rendered {
        let original = pod_gate.objects.iter().find(|d| id(d) == id(doc)).unwrap();
        let want = if doc.kind == "Deployment" {
            with_patched_args(&original.value, &pod_gate.patches[0].value)
        } else {
            original.value.clone()
        };
        assert_eq!(without_helm_metadata(&doc.value), want, "{}", doc.object());
    }
    check_rendered(&rendered);
    // off by default: no pods RBAC, no policy, no flag
    let default = render_chart(NAMESPACE, json!({}));
    assert!(
        !default
            .iter()
            .any(|d| d.value["metadata"]["name"] == "raygate-pod-gate")
    );
    assert!(!args(&chart_deployment(&default)).contains(&"--pod-gate".to_string()));
    // in another namespace the policy and the binding follow it
    let elsewhere = render_chart("platform", json!({"podGate": {"enabled": true}}));
    let policy = elsewhere
        .iter()
        .find(|d| {
            d.kind == "ValidatingAdmissionPolicy"
                && d.value["metadata"]["name"] == "raygate-pod-gate"
        })
        .unwrap();
    assert!(
        policy.value["spec"]["variables"][0]["expression"]
            .as_str()
            .unwrap()
            .contains("system:serviceaccount:platform:raygate")
    );
    let binding = elsewhere
        .iter()
        .find(|d| {
            d.kind == "ClusterRoleBinding" && d.value["metadata"]["name"] == "raygate-pod-gate"
        })
        .unwrap();
    assert_eq!(binding.value["subjects"][0]["namespace"], "platform");
    // with a real Kueue
    let kueue = render_chart(
        NAMESPACE,
        json!({"podGate": {"enabled": true}, "admission": {"mode": "kueue"}}),
    );
    let args = args(&chart_deployment(&kueue));
    assert!(
        args.contains(&"--admission=kueue".to_string()) && args.contains(&"--pod-gate".to_string())
    );
    assert!(chart_values(&json!({"podGate": {"enabled": "yes"}})).is_err());
    assert!(chart_values(&json!({"podGate": {"on": true}})).is_err());
}

/// Every value the chart has, set away from its default.
fn every_option() -> Value {
    json!({
        "global": {"imageRegistry": "registry.example.com"},
        "nameOverride": "gate",
        "fullnameOverride": "ml-gate",
        "image": {"repository": "registry.example.com/raygate", "tag": "v0.2.0", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "replicas": 2,
        "leaderElection": {"enabled": true},
        "admission": {"mode": "kueue"},
        "nodeRollouts": {"enabled": false},
        "podGate": {"enabled": true},
        "metrics": {
            "port": 9090,
            "serviceMonitor": {"enabled": true, "interval": "15s", "labels": {"release": "prom"},
                               "honorLabels": false},
            "prometheusRule": {"enabled": true, "labels": {"release": "prom"},
                               "rolloutBlockedFor": "45m", "upgradeHeldFor": "2h", "noLeaderFor": "10m"},
            "grafanaDashboard": {"enabled": true, "namespace": "monitoring",
                                 "labels": {"grafana_dashboard": "raygate"},
                                 "annotations": {"grafana_folder": "ML platform"}},
        },
        "logFormat": "text",
        "finishedSlices": {"retentionSeconds": 600, "kept": 1},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "namespace": {"create": true},
        "extraArgs": ["--lease-namespace=platform-leases"],
        "extraEnv": [{"name": "RUST_LOG", "value": "info,raygate=debug"}],
        "podLabels": {"team": "ml-platform"},
        "podAnnotations": {"example.com/scrape": "true"},
        "priorityClassName": "system-cluster-critical",
        "podDisruptionBudget": {"enabled": true, "maxUnavailable": "50%"},
        "networkPolicy": {"enabled": true,
                          "metricsFrom": [{"namespaceSelector": {"matchLabels":
                              {"kubernetes.io/metadata.name": "monitoring"}}}],
                          "apiServerCIDRs": ["172.18.0.2/32"], "apiServerPorts": [6443]},
        "rbac": {"aggregateToDefaultRoles": true},
    })
}

/// Every value of values.yaml is set by `every_option`: each top-level key, and each key of
/// the groups values.schema.json spells out (not of free-form maps such as `resources`).
#[test]
fn every_option_is_rendered_by_a_test() {
    let defaults = yaml_value(&chart().join("values.yaml"));
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    let all = every_option();
    let mut unset: Vec<String> = Vec::new();
    for (key, default) in defaults.as_object().expect("values.yaml is a map") {
        if all.get(key).is_none() {
            unset.push(key.clone());
        }
        let spelled_out = schema["properties"][key]["properties"].is_object();
        if let (Some(d), Some(a), true) = (default.as_object(), all.get(key), spelled_out) {
            unset.extend(
                d.keys()
                    .filter(|k| a.get(k.as_str()).is_none())
                    .map(|k| format!("{key}.{k}")),
            );
        }
    }
    assert!(unset.is_empty(), "every_option() leaves {unset:?} unset");
}

#[test]
fn every_option_lands_on_the_deployment() {
    let rendered = render_chart("platform", every_option());
    let deployment = chart_deployment(&rendered);
    assert_eq!(deployment.metadata.name.as_deref(), Some("ml-gate"));
    let spec = deployment.spec.clone().unwrap();
    let pod_meta = spec.template.metadata.clone().unwrap();
    let pod_labels = pod_meta.labels.unwrap();
    assert_eq!(pod_labels["team"], "ml-platform");
    assert_eq!(pod_labels["app.kubernetes.io/name"], "gate");
    let selector = spec.selector.match_labels.clone().unwrap();
    assert!(
        selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "the selector selects the pods"
    );
    assert_eq!(pod_meta.annotations.unwrap()["example.com/scrape"], "true");
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("ml-gate"));
    assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "regcred");
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    assert!(pod.affinity.unwrap().node_affinity.is_some());
    let c = &pod.containers[0];
    assert_eq!(
        args(&deployment),
        [
            "controller",
            "--admission=kueue",
            "--pod-gate",
            "--leader-elect",
            "--lease-name=ml-gate",
            "--node-rollouts=false",
            "--metrics-addr=0.0.0.0:9090",
            "--log-format=text",
            "--finished-slice-retention-seconds=600",
            "--finished-slices-kept=1",
            "--lease-namespace=platform-leases",
        ]
    );
    let env = c.env.clone().unwrap();
    assert_eq!(env.last().unwrap().name, "RUST_LOG");
    assert_env_from_field(&deployment, "POD_NAME", "metadata.name", "the chart");
}

#[test]
fn every_option_lands_on_the_other_objects() {
    let rendered = render_chart("platform", every_option());
    let spec = chart_deployment(&rendered).spec.unwrap();
    let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
    let selector = spec.selector.match_labels.unwrap();

    // Every name follows fullnameOverride; the bindings and the policies name its account.
    for doc in &rendered {
        let name = doc.value["metadata"]["name"].as_str().unwrap_or_default();
        if doc.kind != "CustomResourceDefinition" && doc.kind != "Namespace" {
            assert!(name.starts_with("ml-gate"), "{}", doc.object());
        }
        for subject in doc.value["subjects"].as_array().into_iter().flatten() {
            assert_eq!(subject["name"], "ml-gate", "{}", doc.object());
        }
        if doc.kind == "ValidatingAdmissionPolicy" {
            let text = serde_json::to_string(&doc.value["spec"]).unwrap();
            assert!(
                text.contains("'system:serviceaccount:platform:ml-gate'"),
                "{}",
                doc.object()
            );
        }
    }
    let service: Service = typed(one(&rendered, "Service"));
    let service_selector = service.spec.unwrap().selector.unwrap();
    assert!(
        service_selector
            .iter()
            .all(|(k, v)| pod_labels.get(k) == Some(v))
    );

    let pdb: PodDisruptionBudget = typed(one(&rendered, "PodDisruptionBudget"));
    let pdb_spec = pdb.spec.unwrap();
    assert_eq!(
        serde_json::to_value(&pdb_spec.max_unavailable).unwrap(),
        "50%"
    );
    assert_eq!(pdb_spec.selector.unwrap().match_labels.unwrap(), selector);

    let policy: NetworkPolicy = typed(one(&rendered, "NetworkPolicy"));
    let policy = serde_json::to_value(policy.spec.unwrap()).unwrap();
    assert_eq!(policy["podSelector"]["matchLabels"], json!(selector));
    assert_eq!(
        policy["ingress"][0]["ports"],
        json!([{"port": "metrics", "protocol": "TCP"}])
    );
    assert_eq!(
        policy["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    assert_eq!(
        policy["egress"],
        json!([{"ports": [{"port": 6443, "protocol": "TCP"}],
                                         "to": [{"ipBlock": {"cidr": "172.18.0.2/32"}}]}])
    );

    let monitor = one(&rendered, "ServiceMonitor");
    assert_eq!(monitor.value["spec"]["endpoints"][0]["honorLabels"], false);
    let rule = one(&rendered, "PrometheusRule");
    assert_eq!(rule.value["metadata"]["labels"]["release"], "prom");
    let dashboard = one(&rendered, "ConfigMap");
    assert_eq!(dashboard.value["metadata"]["namespace"], "monitoring");
    assert_eq!(
        dashboard.value["metadata"]["labels"]["grafana_dashboard"],
        "raygate"
    );
    assert_eq!(
        dashboard.value["metadata"]["annotations"]["grafana_folder"],
        "ML platform"
    );
}

#[test]
fn the_nodeselector_tolerations_and_affinity_default_spread_replicas_by_name() {
    // The default anti-affinity selects the pods whatever nameOverride says.
    let rendered = render_chart(NAMESPACE, json!({"nameOverride": "gate", "replicas": 2}));
    let deployment = chart_deployment(&rendered);
    let template = deployment.spec.unwrap().template;
    let labels = template.metadata.unwrap().labels.unwrap();
    let affinity = serde_json::to_value(template.spec.unwrap().affinity.unwrap()).unwrap();
    let term = &affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    let wanted: BTreeMap<String, String> =
        serde_json::from_value(term["podAffinityTerm"]["labelSelector"]["matchLabels"].clone())
            .unwrap();
    assert_eq!(wanted["app.kubernetes.io/name"], "gate");
    assert!(wanted.iter().all(|(k, v)| labels.get(k) == Some(v)));
}

#[test]
fn a_budget_guards_the_controller_only_with_more_than_one_replica() {
    let kinds = |overrides: Value| -> usize {
        render_chart(NAMESPACE, overrides)
            .iter()
            .filter(|d| d.kind == "PodDisruptionBudget")
            .count()
    };
    assert_eq!(
        kinds(json!({})),
        0,
        "one replica: a budget would block every drain of its node"
    );
    assert_eq!(kinds(json!({"replicas": 2})), 1);
    assert_eq!(
        kinds(json!({"replicas": 2, "podDisruptionBudget": {"enabled": false}})),
        0
    );
    let pdb: PodDisruptionBudget = typed(one(
        &render_chart(NAMESPACE, json!({"replicas": 3})),
        "PodDisruptionBudget",
    ));
    assert_eq!(
        serde_json::to_value(pdb.spec.unwrap().max_unavailable).unwrap(),
        1
    );
}

#[test]
fn the_network_policy_lets_in_scrapes_and_probes_and_out_the_api_server() {
    assert!(
        !render_chart(NAMESPACE, json!({}))
            .iter()
            .any(|d| d.kind == "NetworkPolicy")
    );
    let rendered = render_chart(NAMESPACE, json!({"networkPolicy": {"enabled": true}}));
    let policy: NetworkPolicy = typed(one(&rendered, "NetworkPolicy"));
    let spec = serde_json::to_value(policy.spec.unwrap()).unwrap();
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    // The probes use the metrics port by name (/healthz, /readyz): the one port let in.
    let deployment = chart_deployment(&rendered);
    let c = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(
        c.ports.as_ref().unwrap()[0].name.as_deref(),
        Some("metrics")
    );
    let probe_port = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        serde_json::to_value(&p.as_ref().unwrap().http_get.as_ref().unwrap().port).unwrap()
    };
    assert_eq!(probe_port(&c.liveness_probe), "metrics");
    assert_eq!(probe_port(&c.readiness_probe), "metrics");
    assert_eq!(
        spec["ingress"],
        json!([{"ports": [{"port": "metrics", "protocol": "TCP"}]}])
    );
    assert_eq!(
        spec["egress"],
        json!([{"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}]),
        "the API server's ports, any address unless apiServerCIDRs says"
    );
}

/// The rules only NodeRollouts need.
const NODE_ROLLOUT_PERMISSIONS: &[(&str, &str, &[&str])] = &[
    ("", "nodes", &["get", "list", "watch", "patch"]),
    ("", "pods", &["get", "list", "watch"]),
    ("", "pods/eviction", &["create"]),
    ("policy", "poddisruptionbudgets", &["get", "list", "watch"]),
    ("apps", "daemonsets", &["get", "list", "watch"]),
    (
        "raygate.io",
        "noderollouts",
        &["get", "list", "watch", "patch"],
    ),
    (
        "raygate.io",
        "noderollouts/status",
        &["get", "patch", "update"],
    ),
];

#[test]
fn node_rollouts_off_drops_the_flag_and_the_drain_rights() {
    let role_grants = |objects: &[Doc]| {
        let role: ClusterRole = typed(named(objects, "ClusterRole", "raygate"));
        grants(role.rules.as_deref().unwrap_or_default())
    };
    let on = render_chart(NAMESPACE, json!({}));
    assert_eq!(role_grants(&on), table(CLUSTER_PERMISSIONS));
    assert!(
        !args(&chart_deployment(&on))
            .iter()
            .any(|a| a.starts_with("--node-rollouts"))
    );

    let off = render_chart(NAMESPACE, json!({"nodeRollouts": {"enabled": false}}));
    let want: BTreeSet<_> = table(CLUSTER_PERMISSIONS)
        .difference(&table(NODE_ROLLOUT_PERMISSIONS))
        .cloned()
        .collect();
    assert_eq!(role_grants(&off), want);
    assert!(args(&chart_deployment(&off)).contains(&"--node-rollouts=false".to_string()));
    // The pod gate's own role still grants what it needs.
    let gated = render_chart(
        NAMESPACE,
        json!({"nodeRollouts": {"enabled": false}, "podGate": {"enabled": true}}),
    );
    let gate: ClusterRole = typed(named(&gated, "ClusterRole", "raygate-pod-gate"));
    assert_eq!(
        grants(gate.rules.as_deref().unwrap_or_default()),
        table(&[("", "pods", &["get", "list", "watch", "patch"])])
    );
}

/// What people get through view, edit and admin.
const VIEWER_PERMISSIONS: &[(&str, &str, &[&str])] = &[
    ("raygate.io", "noderollouts", &["get", "list", "watch"]),
    (
        "raygate.io",
        "noderollouts/status",
        &["get", "list", "watch"],
    ),
    ("kueue.x-k8s.io", "workloads", &["get", "list", "watch"]),
    (
        "kueue.x-k8s.io",
        "workloads/status",
        &["get", "list", "watch"],
    ),
    ("kueue.x-k8s.io", "localqueues", &["get", "list", "watch"]),
    (
        "kueue.x-k8s.io",
        "localqueues/status",
        &["get", "list", "watch"],
    ),
];
const EDITOR_PERMISSIONS: &[(&str, &str, &[&str])] = &[(
    "raygate.io",
    "noderollouts",
    &["create", "update", "patch", "delete"],
)];

#[test]
fn viewer_and_editor_roles_aggregate_to_view_edit_and_admin() {
    let objects = default_build().objects;
    for (name, permissions, aggregated) in [
        (
            "raygate-viewer",
            VIEWER_PERMISSIONS,
            &["view", "edit", "admin"][..],
        ),
        ("raygate-editor", EDITOR_PERMISSIONS, &["edit", "admin"][..]),
    ] {
        let role: ClusterRole = typed(named(&objects, "ClusterRole", name));
        assert_eq!(
            grants(role.rules.as_deref().unwrap_or_default()),
            table(permissions),
            "{name}"
        );
        let labels = role.metadata.labels.unwrap_or_default();
        let to: Vec<&str> = ["view", "edit", "admin"]
            .into_iter()
            .filter(|r| {
                labels
                    .get(&format!("rbac.authorization.k8s.io/aggregate-to-{r}"))
                    .map(String::as_str)
                    == Some("true")
            })
            .collect();
        assert_eq!(to, aggregated, "{name}");
        assert!(
            !objects
                .iter()
                .any(|d| d.kind.ends_with("Binding") && d.value["roleRef"]["name"] == name),
            "{name} is bound only through the default roles"
        );
    }
    // The chart's defaults are config/'s (the_chart_renders_config_default_by_default); off:
    let off = render_chart(
        NAMESPACE,
        json!({"rbac": {"aggregateToDefaultRoles": false}}),
    );
    assert_eq!(off.iter().filter(|d| d.kind == "ClusterRole").count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Alerts and the dashboard: every query names a metric the controller exports
// ---------------------------------------------------------------------------------------------

/// The sample names `/metrics` can show, read from the controller's own registry.
fn exported_metric_names() -> BTreeSet<String> {
    raygate::controller::Metrics::default()
        .sample_names()
        .into_iter()
        .collect()
}

/// The metric names a PromQL expression reads: its identifiers outside strings, label matchers,
/// ranges and grouping clauses that are neither functions, aggregations nor keywords.
fn promql_metrics(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 7] = [
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "group_left",
        "group_right",
    ];
    const GROUPING: [&str; 4] = ["by", "without", "on", "ignoring"];
    let chars: Vec<char> = expr.chars().collect();
    let mut out = BTreeSet::new();
    let mut i = 0;
    // past the `close` that ends what opens at `from`, strings inside included
    fn skip_to(chars: &[char], from: usize, close: char) -> usize {
        let mut j = from + 1;
        while j < chars.len() && chars[j] != close {
            j = match chars[j] {
                '\\' => j + 2,
                q @ ('"' | '\'') if close != q => skip_to(chars, j, q),
                _ => j + 1,
            };
        }
        j + 1
    }
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i = skip_to(&chars, i, c);
        } else if c == '{' {
            i = skip_to(&chars, i, '}');
        } else if c == '[' {
            i = skip_to(&chars, i, ']');
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next] == ' ' {
                next += 1;
            }
            let rest: String = chars[next..].iter().collect();
            // `sum by (le) (x)`: an aggregation before its grouping clause
            let called = rest.starts_with('(')
                || GROUPING[..2]
                    .iter()
                    .any(|g| rest.starts_with(&format!("{g} (")));
            if GROUPING.contains(&word.as_str()) && called {
                i = skip_to(&chars, next, ')');
            // an exponent (`1e3`) is part of its number
            } else if !(called
                || KEYWORDS.contains(&word.as_str())
                || (start > 0 && chars[start - 1].is_ascii_digit()))
            {
                out.insert(word);
            }
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn the_promql_reader_finds_metric_names_only() {
    assert_eq!(
        promql_metrics(
            r#"histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y}"}[5m]))) / on (job) b_total > bool 1e3 or vector(0)"#
        ),
        ["a_bucket", "b_total"].map(String::from).into()
    );
}

/// Every query of `exprs` names at least one metric, and only metrics raygate exports.
fn assert_names_exported<'a>(exprs: impl IntoIterator<Item = (String, &'a str)>) {
    let exported = exported_metric_names();
    assert!(
        exported.contains("raygate_noderollout_blocked"),
        "{exported:?}"
    );
    for (what, expr) in exprs {
        let names = promql_metrics(expr);
        assert!(!names.is_empty(), "{what}: {expr} names no metric");
        let unknown: Vec<&String> = names.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{what}: {expr} names {unknown:?}, which raygate does not export"
        );
    }
}

/// A PrometheusRule's shape (prometheus-operator's CRD is not vendored here): named groups of
/// alerts, each with an expression, a duration and a severity.
fn check_prometheus_rule(doc: &Doc) -> Result<(), String> {
    let v = &doc.value;
    let rules: Vec<&Value> = v["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    let well_formed = |r: &&Value| {
        r["alert"].is_string()
            && r["expr"].is_string()
            && r["for"].is_string()
            && r["labels"]["severity"].is_string()
    };
    if v["apiVersion"] != "monitoring.coreos.com/v1" {
        Err(format!("{}: apiVersion", doc.object()))
    } else if rules.is_empty() || !rules.iter().all(well_formed) {
        Err(format!(
            "{}: alert, expr, for and severity on every rule",
            doc.object()
        ))
    } else {
        Ok(())
    }
}

#[test]
fn the_alerts_name_metrics_the_controller_exports() {
    assert!(
        !render_chart(NAMESPACE, json!({}))
            .iter()
            .any(|d| d.kind == "PrometheusRule"),
        "off by default"
    );
    let rendered = render_chart(
        NAMESPACE,
        json!({"metrics": {"prometheusRule": {"enabled": true, "rolloutBlockedFor": "45m"}}}),
    );
    let rule = one(&rendered, "PrometheusRule");
    check_prometheus_rule(rule).unwrap();
    let rules: Vec<&Value> = rule.value["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let alerts: BTreeMap<&str, &Value> = rules
        .iter()
        .map(|r| (r["alert"].as_str().unwrap(), *r))
        .collect();
    assert_eq!(
        alerts.keys().copied().collect::<Vec<_>>(),
        [
            "RaygateNoLeader",
            "RaygateNodeRolloutBlocked",
            "RaygateUpgradeHeld"
        ]
    );
    assert_eq!(alerts["RaygateNodeRolloutBlocked"]["for"], "45m");
    assert_eq!(alerts["RaygateUpgradeHeld"]["for"], "1h");
    assert!(
        alerts["RaygateNoLeader"]["expr"]
            .as_str()
            .unwrap()
            .contains(&format!("namespace=\"{NAMESPACE}\""))
    );
    assert_names_exported(
        alerts
            .iter()
            .map(|(name, r)| (name.to_string(), r["expr"].as_str().unwrap())),
    );
    promtool_check_rules("alerts", &rule.value["spec"]);
}

/// `promtool check rules` on a rule file's `groups`: Prometheus's own parser and checks.
/// Debian's prometheus package ships promtool (hack/install-promtool.sh; hack/test.sh runs it).
fn promtool_check_rules(name: &str, spec: &Value) {
    let promtool = on_path("promtool").unwrap_or_else(|| {
        panic!("promtool is missing: run hack/install-promtool.sh (hack/test.sh does)")
    });
    // JSON is YAML: promtool reads it as a rule file
    let file = scratch_dir(name).join("rules.yaml");
    std::fs::write(&file, serde_json::to_string(spec).unwrap()).unwrap();
    let out = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("running promtool");
    assert!(
        out.status.success(),
        "promtool check rules ({name}): {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_dashboard_queries_name_metrics_the_controller_exports() {
    assert!(
        !render_chart(NAMESPACE, json!({}))
            .iter()
            .any(|d| d.kind == "ConfigMap"),
        "off by default"
    );
    let rendered = render_chart(
        NAMESPACE,
        json!({"metrics": {"grafanaDashboard": {"enabled": true}}}),
    );
    let map: ConfigMap = typed(one(&rendered, "ConfigMap"));
    assert_eq!(map.metadata.namespace.as_deref(), Some(NAMESPACE));
    assert_eq!(map.metadata.labels.unwrap()["grafana_dashboard"], "1");
    let text = &map.data.unwrap()["raygate.json"];
    let shipped: Value = serde_json::from_str(text).expect("the dashboard is JSON");
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("dashboards/raygate.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        shipped, file,
        "the ConfigMap carries dashboards/raygate.json as it is"
    );
    let panels: Vec<&Value> = file["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .collect();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut exprs = Vec::new();
    for p in &panels {
        let targets = p["targets"].as_array().filter(|t| !t.is_empty());
        let targets = targets.unwrap_or_else(|| panic!("panel {} queries nothing", p["title"]));
        for t in targets {
            exprs.push((
                format!("panel {}", p["title"]),
                t["expr"].as_str().expect("a PromQL expr"),
            ));
        }
    }
    // Prometheus parses every query: each one as a recording rule's expression.
    let records: Vec<Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, (_, expr))| json!({"record": format!("raygate:dashboard_query_{i}"), "expr": expr}))
        .collect();
    promtool_check_rules(
        "dashboard",
        &json!({"groups": [{"name": "dashboard", "rules": records}]}),
    );
    assert_names_exported(exprs);
    // The rollout gauges an operator watches are on it.
    let all: String = panels.iter().map(|p| p["targets"].to_string()).collect();
    for metric in [
        "raygate_noderollout_blocked",
        "raygate_hold_duration_seconds",
        "raygate_is_leader",
    ] {
        assert!(all.contains(metric), "{metric} on the dashboard");
    }
}
