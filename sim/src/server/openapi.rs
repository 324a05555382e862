//! OpenAPI v3 as kube-apiserver publishes it (`/openapi/v3`: one document per group-version),
//! for the clients that read it: `kubectl explain`, and `kubectl apply`/`create`/`replace`, which
//! look in it for the `fieldValidation` parameter of a kind's PATCH before sending
//! `fieldValidation=Strict` (`k8s.io/cli-runtime/pkg/resource/query_param_verifier_v3.go`) and
//! otherwise fail with "failed to download openapi". Built-in kinds' schemas are k8s-openapi's
//! (`schemars`, the API's own descriptions); a CRD's is its `openAPIV3Schema` with `metadata` as
//! `ObjectMeta`, named as kube-apiserver names it (`io.ray.v1.RayCluster`). Paths carry the
//! operations with `x-kubernetes-action` and `x-kubernetes-group-version-kind`. OpenAPI v2
//! (`/openapi/v2`, protobuf) is not served.

use k8s_openapi::api::{
    apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
    events::v1 as events, node::v1 as node, policy::v1 as policy, scheduling::v1 as scheduling,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::server::kinds::{Registry, ResourceType};

/// The document at `path` (GET): the index at `/openapi/v3`, a group-version's document at
/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`; `None` for other paths.
pub fn document(registry: &Registry, path: &str) -> Option<Value> {
    let rest = path.strip_prefix("/openapi/v3")?;
    let segs: Vec<&str> = rest.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        [""] => Some(index(registry)),
        ["api", v] => group_version(registry, "", v),
        ["apis", g, v] => group_version(registry, g, v),
        _ => None,
    }
}

fn index(registry: &Registry) -> Value {
    let mut gvs: Vec<(String, String)> = registry
        .types()
        .iter()
        .flat_map(|t| t.versions.iter().map(|v| (t.group.clone(), v.clone())))
        .collect();
    gvs.sort();
    gvs.dedup();
    let mut paths = Map::new();
    for (g, v) in gvs {
        let key = if g.is_empty() {
            format!("api/{v}")
        } else {
            format!("apis/{g}/{v}")
        };
        let hash = group_version(registry, &g, &v)
            .map(|d| hex(&Sha256::digest(d.to_string().as_bytes())))
            .unwrap_or_default();
        let url = format!("/openapi/v3/{key}?hash={hash}");
        paths.insert(key, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// kube-apiserver's definition name of a CRD's kind: the group reversed, the version, the kind
/// (`k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder`).
fn crd_schema_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// A built-in kind's schema, registered in `generator`; its definition name.
fn builtin_schema(generator: &mut SchemaGenerator, group: &str, kind: &str) -> Option<String> {
    fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> Option<String> {
        generator.subschema_for::<T>();
        Some(T::schema_name().into_owned())
    }
    match (group, kind) {
        ("", "Pod") => add::<core::Pod>(generator),
        ("", "Node") => add::<core::Node>(generator),
        ("", "Namespace") => add::<core::Namespace>(generator),
        ("", "Event") => add::<core::Event>(generator),
        ("", "LimitRange") => add::<core::LimitRange>(generator),
        ("", "Secret") => add::<core::Secret>(generator),
        ("", "ConfigMap") => add::<core::ConfigMap>(generator),
        ("", "Service") => add::<core::Service>(generator),
        ("", "ServiceAccount") => add::<core::ServiceAccount>(generator),
        ("", "ResourceQuota") => add::<core::ResourceQuota>(generator),
        ("scheduling.k8s.io", "PriorityClass") => add::<scheduling::PriorityClass>(generator),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            add::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(generator)
        }
        ("events.k8s.io", "Event") => add::<events::Event>(generator),
        ("node.k8s.io", "RuntimeClass") => add::<node::RuntimeClass>(generator),
        ("policy", "PodDisruptionBudget") => add::<policy::PodDisruptionBudget>(generator),
        ("coordination.k8s.io", "Lease") => add::<coordination::Lease>(generator),
        ("apps", "ReplicaSet") => add::<apps::ReplicaSet>(generator),
        ("apps", "Deployment") => add::<apps::Deployment>(generator),
        ("apps", "StatefulSet") => add::<apps::StatefulSet>(generator),
        ("apps", "DaemonSet") => add::<apps::DaemonSet>(generator),
        ("batch", "Job") => add::<batch::Job>(generator),
        _ => None,
    }
}

/// A CRD version's schema with kube-apiserver's additions, registered in `generator`.
fn crd_schema(generator: &mut SchemaGenerator, t: &ResourceType, version: &str) -> String {
    let name = crd_schema_name(&t.group, version, &t.kind);
    let mut schema = t
        .schemas
        .get(version)
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    let object_meta = generator.subschema_for::<meta::ObjectMeta>();
    if let Value::Object(s) = &mut schema {
        let props = s.entry("properties").or_insert_with(|| json!({}));
        props["metadata"] = json!({"allOf": [object_meta], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"});
        props["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"});
        props["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"});
    }
    generator.definitions_mut().insert(name.clone(), schema);
    name
}

fn group_version(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = registry
        .types()
        .iter()
        .filter(|t| t.group == group && t.serves(version))
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut paths = Map::new();
    let mut kinds = vec![];
    for t in &types {
        let name = if t.builtin {
            builtin_schema(&mut generator, group, &t.kind)
        } else {
            Some(crd_schema(&mut generator, t, version))
        };
        let Some(name) = name else { continue };
        kinds.push((name.clone(), t.kind.clone()));
        add_paths(&mut paths, t, version, &name);
    }
    let mut schemas = generator.take_definitions(true);
    for (name, kind) in kinds {
        if let Some(Value::Object(s)) = schemas.get_mut(&name) {
            s.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "version": version, "kind": kind}]),
            );
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{}.{}.0", super::discovery::MAJOR, super::discovery::MINOR)},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

/// The query parameters of a write: `dryRun`, `fieldManager`, `fieldValidation` (and `force`
/// for a patch).
fn write_parameters(patch: bool) -> Vec<Value> {
    let mut p = vec![
        query(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ),
        query(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
        ),
    ];
    if patch {
        p.push(json!({"name": "force", "in": "query", "description": "Force is going to \"force\" Apply requests.", "schema": {"type": "boolean", "uniqueItems": true}}));
    }
    p
}

/// The collection, item and `status` paths of `t` with their operations.
fn add_paths(paths: &mut Map<String, Value>, t: &ResourceType, version: &str, schema: &str) {
    let prefix = if t.group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{}/{version}", t.group)
    };
    let ns = if t.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let gvk = json!({"group": t.group, "version": version, "kind": t.kind});
    let reference = json!({"$ref": format!("#/components/schemas/{schema}")});
    let op = |action: &str, parameters: Vec<Value>| {
        json!({"operationId": format!("{action}{}", t.kind), "parameters": parameters,
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
            "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk})
    };
    paths.insert(
        format!("{prefix}{ns}/{}", t.plural),
        json!({"get": op("list", vec![]), "post": op("post", write_parameters(false))}),
    );
    let item = json!({"get": op("get", vec![]), "put": op("put", write_parameters(false)),
        "patch": op("patch", write_parameters(true)), "delete": op("delete", vec![])});
    paths.insert(format!("{prefix}{ns}/{}/{{name}}", t.plural), item);
    if t.status_subresource {
        let status = json!({"get": op("get", vec![]), "put": op("put", write_parameters(false)),
            "patch": op("patch", write_parameters(true))});
        paths.insert(format!("{prefix}{ns}/{}/{{name}}/status", t.plural), status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        crate::server::upstream::registry().unwrap()
    }

    #[test]
    fn the_index_names_every_group_version_with_a_hash() {
        let r = registry();
        let index = document(&r, "/openapi/v3").unwrap();
        let url = index["paths"]["apis/ray.io/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/apis/ray.io/v1?hash="), "{url}");
        assert!(index["paths"]["api/v1"].is_object());
    }

    #[test]
    fn a_kind_s_patch_takes_field_validation_and_its_schema_carries_its_gvk() {
        let r = registry();
        let doc = document(&r, "/openapi/v3/apis/ray.io/v1").unwrap();
        let patch =
            &doc["paths"]["/apis/ray.io/v1/namespaces/{namespace}/rayservices/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "RayService"
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        let schema = &doc["components"]["schemas"]["io.ray.v1.RayService"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"],
            json!([{"group": "ray.io", "version": "v1", "kind": "RayService"}])
        );
        assert!(schema["properties"]["spec"].is_object());
        // the reference resolves in the same document
        assert!(
            doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
                .is_object()
        );
    }

    #[test]
    fn built_in_kinds_have_the_api_s_schemas() {
        let r = registry();
        let doc = document(&r, "/openapi/v3/api/v1").unwrap();
        let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"][0]["kind"],
            json!("Pod")
        );
        assert!(
            doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
                .is_object()
        );
        assert!(doc["paths"]["/api/v1/nodes/{name}/status"]["patch"].is_object());
        assert!(document(&r, "/openapi/v3/apis/nothing.example/v1").is_none());
        assert!(document(&r, "/openapi/v2").is_none());
    }
}
