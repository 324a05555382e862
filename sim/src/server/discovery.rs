//! API discovery as kube-apiserver serves it to clients that resolve kinds and resources
//! (kubectl, client-go's RESTMapper, controller-runtime): `/version`, the legacy `/api`
//! (`APIVersions`), `/apis` (`APIGroupList`), `/apis/{group}` (`APIGroup`) and one
//! group-version's `APIResourceList` (`/api/v1`, `/apis/{group}/{version}`: resources with their
//! short names, categories, verbs and subresources). The aggregated discovery document
//! (`apidiscovery.k8s.io/v2`) is not served: client-go asks for it first and, answered with a
//! plain `application/json` `APIGroupList`, falls back to these per-group-version lists
//! (`k8s.io/client-go/discovery/discovery_client.go`, `downloadAPIs`).

use std::cmp::Ordering;

use serde_json::{Value, json};

use crate::server::kinds::Registry;

/// The Kubernetes version the sim reports: the API it copies (`k8s-openapi`'s `v1_36`).
pub const MAJOR: &str = "1";
pub const MINOR: &str = "36";

/// The discovery document at `path` (GET), or `None` when `path` is not a discovery path.
pub fn document(registry: &Registry, path: &str) -> Option<Value> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["version"] => Some(version()),
        ["api"] => Some(json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": []})),
        ["apis"] => Some(group_list(registry)),
        ["apis", g] => group(registry, g),
        ["api", v] => resource_list(registry, "", v),
        ["apis", g, v] => resource_list(registry, g, v),
        _ => None,
    }
}

fn version() -> Value {
    json!({"major": MAJOR, "minor": MINOR, "gitVersion": format!("v{MAJOR}.{MINOR}.0-raygate-sim"),
        "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "", "compiler": "raygate-sim", "platform": "linux/amd64"})
}

/// kube-apiserver's group order (`pkg/controlplane/apiserver` and `pkg/controlplane`'s
/// `DefaultGenericAPIServicePriorities`): built-in groups first, then the CRD groups by name.
fn group_rank(group: &str) -> usize {
    const ORDER: &[&str] = &[
        "apps",
        "events.k8s.io",
        "autoscaling",
        "batch",
        "policy",
        "coordination.k8s.io",
        "node.k8s.io",
    ];
    ORDER
        .iter()
        .position(|g| *g == group)
        .unwrap_or(ORDER.len())
}

/// Versions ordered as `k8s.io/apimachinery/pkg/version.CompareKubeAwareVersionStrings` ranks
/// them (GA, then beta, then alpha, higher first; others last, by name).
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn key(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (rank, minor) = if tail.is_empty() {
            (0, 0)
        } else if let Some(m) = tail.strip_prefix("beta") {
            (1, m.parse().ok()?)
        } else if let Some(m) = tail.strip_prefix("alpha") {
            (2, m.parse().ok()?)
        } else {
            return None;
        };
        Some((rank, u64::MAX - major, u64::MAX - minor))
    }
    match (key(a), key(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// A group's served versions, preferred first.
fn versions_of(registry: &Registry, group: &str) -> Vec<String> {
    let mut versions: Vec<String> = registry
        .types()
        .iter()
        .filter(|t| t.group == group)
        .flat_map(|t| t.versions.iter().cloned())
        .collect();
    versions.sort_by(|a, b| compare_versions(a, b));
    versions.dedup();
    versions
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let gv = |v: &String| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({"name": group, "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(gv)})
}

fn group_list(registry: &Registry) -> Value {
    let mut groups: Vec<&str> = registry
        .types()
        .iter()
        .map(|t| t.group.as_str())
        .filter(|g| !g.is_empty())
        .collect();
    groups.sort_by(|a, b| group_rank(a).cmp(&group_rank(b)).then(a.cmp(b)));
    groups.dedup();
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|g| group_json(g, &versions_of(registry, g)))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn group(registry: &Registry, group: &str) -> Option<Value> {
    let versions = versions_of(registry, group);
    if versions.is_empty() {
        return None;
    }
    let mut g = group_json(group, &versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

/// One group-version's resources, as clients use them for a RESTMapper and to ask whether a
/// resource implements `scale` (the disruption controller's `implementsScale`).
fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    if !registry.serves_group_version(group, version) {
        return None;
    }
    let mut resources = vec![];
    for t in registry
        .types()
        .iter()
        .filter(|t| t.group == group && t.serves(version))
    {
        let singular = t.kind.to_lowercase();
        let mut r = json!({"name": t.plural, "singularName": singular, "namespaced": t.namespaced,
            "kind": t.kind, "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]});
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if t.status_subresource {
            resources.push(
                json!({"name": format!("{}/status", t.plural), "singularName": "",
                "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
        if t.scale.is_some() {
            resources.push(json!({"name": format!("{}/scale", t.plural), "singularName": "",
                "namespaced": t.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"]}));
        }
        if t.builtin && t.group.is_empty() && t.kind == "Pod" {
            for (sub, group, kind) in [
                ("binding", "", "Binding"),
                ("eviction", "policy", "Eviction"),
            ] {
                resources.push(json!({"name": format!("pods/{sub}"), "singularName": "",
                    "namespaced": true, "group": group, "version": "v1", "kind": kind,
                    "verbs": ["create"]}));
            }
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_rank_as_kube_aware_strings() {
        let mut v = vec![
            "v1alpha1",
            "v1beta1",
            "v2",
            "foo",
            "v1",
            "v1beta2",
            "v10",
            "v11alpha2",
        ];
        v.sort_by(|a, b| compare_versions(a, b));
        // the example of `CompareKubeAwareVersionStrings`' doc comment, in its order
        assert_eq!(
            v,
            [
                "v10",
                "v2",
                "v1",
                "v1beta2",
                "v1beta1",
                "v11alpha2",
                "v1alpha1",
                "foo"
            ]
        );
    }

    #[test]
    fn groups_list_built_ins_first_with_their_preferred_version() {
        let r = crate::server::upstream::registry().unwrap();
        let list = document(&r, "/apis").unwrap();
        let names: Vec<&str> = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[0], "apps");
        assert!(names.contains(&"ray.io") && names.contains(&"kueue.x-k8s.io"));
        let kueue = document(&r, "/apis/kueue.x-k8s.io").unwrap();
        assert_eq!(kueue["kind"], "APIGroup");
        let preferred = kueue["preferredVersion"]["version"].as_str().unwrap();
        let first = kueue["versions"][0]["version"].as_str().unwrap();
        assert_eq!(preferred, first);
        assert!(document(&r, "/apis/nothing.example").is_none());
    }

    #[test]
    fn resources_carry_short_names_and_categories() {
        let r = crate::server::upstream::registry().unwrap();
        let resource = |path: &str, name: &str| {
            let list = document(&r, path).unwrap();
            let found = list["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == name);
            found.cloned().unwrap()
        };
        let pods = resource("/api/v1", "pods");
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        let rc = resource("/apis/ray.io/v1", "rayclusters");
        assert_eq!(rc["categories"], json!(["all"]));
    }
}
