//! `kueue_object!`: root types for Kueue kinds.
//!
//! kube's `CustomResource` derive makes `spec` a required field, but Kueue's CRDs require no spec
//! (`kind: ResourceFlavor` with only a name is a real, common object). One such object would fail
//! a whole LIST and stall a watch, so the roots are written here with a defaulted `spec`. They
//! serialize `apiVersion`/`kind` like derived roots, implement `Resource` and `CustomResourceExt`,
//! and generate their schema with the same schemars pipeline kube-derive uses.

/// Defines a Kueue root type. Forms:
/// `kueue_object!(Name, Spec, Status, "plural", Cluster|Namespaced)`,
/// `kueue_object!(Name, Spec, no_status, ...)`, and `kueue_object!(Name, Fields, flat, ...)` for
/// kinds whose fields sit at the top level (WorkloadPriorityClass).
#[macro_export]
macro_rules! kueue_object {
    ($(#[$doc:meta])* $root:ident, $spec:ty, no_status, $plural:literal, $scope:ident) => {
        $(#[$doc])*
        #[derive(::serde::Deserialize, Clone, Debug, Default, PartialEq, ::schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $root {
            #[schemars(skip)]
            #[serde(default)]
            pub metadata: ::kube::api::ObjectMeta,
            #[serde(default)]
            pub spec: $spec,
        }
        impl $root {
            pub fn new(name: &str, spec: $spec) -> Self {
                Self { metadata: ::kube::api::ObjectMeta { name: Some(name.to_string()), ..Default::default() }, spec }
            }
        }
        impl ::serde::Serialize for $root {
            fn serialize<S: ::serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                use ::serde::ser::SerializeStruct;
                let mut o = ser.serialize_struct(stringify!($root), 4)?;
                o.serialize_field("apiVersion", $crate::object::API_VERSION)?;
                o.serialize_field("kind", stringify!($root))?;
                o.serialize_field("metadata", &self.metadata)?;
                o.serialize_field("spec", &self.spec)?;
                o.end()
            }
        }
        $crate::kueue_object!(@resource $root, $plural, $scope, false);
    };
    ($(#[$doc:meta])* $root:ident, $fields:ty, flat, $plural:literal, $scope:ident) => {
        $(#[$doc])*
        #[derive(::serde::Deserialize, Clone, Debug, Default, PartialEq, ::schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $root {
            #[schemars(skip)]
            #[serde(default)]
            pub metadata: ::kube::api::ObjectMeta,
            #[serde(flatten)]
            pub spec: $fields,
        }
        impl $root {
            pub fn new(name: &str, spec: $fields) -> Self {
                Self { metadata: ::kube::api::ObjectMeta { name: Some(name.to_string()), ..Default::default() }, spec }
            }
        }
        impl ::serde::Serialize for $root {
            fn serialize<S: ::serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                #[derive(::serde::Serialize)]
                #[serde(rename_all = "camelCase")]
                struct Repr<'a> {
                    api_version: &'a str,
                    kind: &'a str,
                    metadata: &'a ::kube::api::ObjectMeta,
                    #[serde(flatten)]
                    spec: &'a $fields,
                }
                Repr { api_version: $crate::object::API_VERSION, kind: stringify!($root), metadata: &self.metadata, spec: &self.spec }
                    .serialize(ser)
            }
        }
        $crate::kueue_object!(@resource $root, $plural, $scope, false);
    };
    ($(#[$doc:meta])* $root:ident, $spec:ty, $status:ty, $plural:literal, $scope:ident) => {
        $(#[$doc])*
        #[derive(::serde::Deserialize, Clone, Debug, Default, PartialEq, ::schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $root {
            #[schemars(skip)]
            #[serde(default)]
            pub metadata: ::kube::api::ObjectMeta,
            #[serde(default)]
            pub spec: $spec,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<$status>,
        }
        impl $root {
            pub fn new(name: &str, spec: $spec) -> Self {
                Self {
                    metadata: ::kube::api::ObjectMeta { name: Some(name.to_string()), ..Default::default() },
                    spec,
                    status: None,
                }
            }
        }
        impl ::serde::Serialize for $root {
            fn serialize<S: ::serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                use ::serde::ser::SerializeStruct;
                let mut o = ser.serialize_struct(stringify!($root), 5)?;
                o.serialize_field("apiVersion", $crate::object::API_VERSION)?;
                o.serialize_field("kind", stringify!($root))?;
                o.serialize_field("metadata", &self.metadata)?;
                o.serialize_field("spec", &self.spec)?;
                if let Some(status) = &self.status {
                    o.serialize_field("status", status)?;
                }
                o.end()
            }
        }
        $crate::kueue_object!(@resource $root, $plural, $scope, true);
    };
    (@resource $root:ident, $plural:literal, $scope:ident, $has_status:expr) => {
        impl ::kube::Resource for $root {
            type DynamicType = ();
            type Scope = $crate::kueue_object!(@scope $scope);
            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                stringify!($root).into()
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                $crate::object::GROUP.into()
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                $crate::object::VERSION.into()
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &::kube::api::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ::kube::api::ObjectMeta {
                &mut self.metadata
            }
        }
        impl ::kube::CustomResourceExt for $root {
            fn crd() -> ::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
                $crate::object::crd::<$root>(stringify!($root), $plural, stringify!($scope), $has_status)
            }
            fn crd_name() -> &'static str {
                concat!($plural, ".kueue.x-k8s.io")
            }
            fn api_resource() -> ::kube::core::dynamic::ApiResource {
                ::kube::core::dynamic::ApiResource::erase::<Self>(&())
            }
            fn shortnames() -> &'static [&'static str] {
                &[]
            }
        }
    };
    (@scope Cluster) => { ::kube::core::ClusterResourceScope };
    (@scope Namespaced) => { ::kube::core::NamespaceResourceScope };
}

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceSubresourceStatus, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps,
};

pub const GROUP: &str = "kueue.x-k8s.io";
pub const VERSION: &str = "v1beta2";
pub const API_VERSION: &str = "kueue.x-k8s.io/v1beta2";

/// The CRD of a Kueue root type, its schema generated as kube-derive does.
pub fn crd<T: schemars::JsonSchema>(
    kind: &str,
    plural: &str,
    scope: &str,
    has_status: bool,
) -> CustomResourceDefinition {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
        .into_generator();
    // A schemars schema of a derived struct is always a valid JSONSchemaProps object.
    let schema: Option<JSONSchemaProps> =
        serde_json::to_value(generator.into_root_schema_for::<T>())
            .and_then(serde_json::from_value)
            .ok();
    CustomResourceDefinition {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{plural}.{GROUP}")),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: kind.into(),
                plural: plural.into(),
                singular: Some(kind.to_lowercase()),
                ..Default::default()
            },
            scope: scope.into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: schema,
                }),
                subresources: has_status.then(|| CustomResourceSubresources {
                    status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    }
}
