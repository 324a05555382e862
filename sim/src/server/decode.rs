//! Decoding a stored object for the sim's own actors without its `metadata.managedFields`, as
//! controllers that never read them strip them from their informers (client-go's
//! `TransformStripManagedFields`).
//!
//! Why: field ownership is most of an object's metadata (a FieldsV1 tree per writer), and every
//! typed copy an actor's cache decoded, cloned and dropped carried it; no actor reads it, and the
//! server ignores the `managedFields` of a write's body that came from a cache (an update keeps
//! the stored ones, a patch is applied to the stored object), so what the actors write is the
//! same without them.

use serde::de::value::MapDeserializer;
use serde::de::{Deserialize, Deserializer, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Value;

/// `object` as `K`, without `metadata.managedFields`.
pub fn without_managed_fields<K: for<'de> Deserialize<'de>>(
    object: &Value,
) -> Result<K, serde_json::Error> {
    K::deserialize(Stripped {
        value: object,
        level: Level::Object,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The object: its `metadata` is read as [`Level::Metadata`].
    Object,
    /// Its metadata: `managedFields` is left out.
    Metadata,
}

/// A JSON value read as `serde_json`'s `&Value` reads it, but for the one key left out.
struct Stripped<'a> {
    value: &'a Value,
    level: Level,
}

/// Inside the object and its metadata the values are read as they are.
enum Inner<'a> {
    Stripped(Stripped<'a>),
    Plain(&'a Value),
}

impl<'de> Deserializer<'de> for Stripped<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        let Value::Object(map) = self.value else {
            return self.value.deserialize_any(visitor);
        };
        let level = self.level;
        let entries = map
            .iter()
            .filter_map(move |(k, v)| match (level, k.as_str()) {
                (Level::Metadata, "managedFields") => None,
                (Level::Object, "metadata") => Some((
                    k.as_str(),
                    Inner::Stripped(Stripped {
                        value: v,
                        level: Level::Metadata,
                    }),
                )),
                _ => Some((k.as_str(), Inner::Plain(v))),
            });
        visitor.visit_map(MapDeserializer::new(entries))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

impl<'de> Deserializer<'de> for Inner<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self {
            Inner::Stripped(s) => s.deserialize_any(visitor),
            Inner::Plain(v) => v.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self {
            Inner::Stripped(s) => s.deserialize_option(visitor),
            Inner::Plain(v) => v.deserialize_option(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self {
            Inner::Stripped(s) => s.deserialize_any(visitor),
            Inner::Plain(v) => v.deserialize_enum(name, variants, visitor),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self {
            Inner::Stripped(s) => s.deserialize_any(visitor),
            Inner::Plain(v) => v.deserialize_newtype_struct(name, visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, serde_json::Error> for Inner<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::DynamicObject;
    use serde_json::json;

    fn stored() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "resourceVersion": "7",
                "labels": {"app": "x"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ReplicaSet", "name": "rs", "uid": "u"}],
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        })
    }

    #[test]
    fn a_pod_decodes_as_serde_json_decodes_it_but_for_its_managed_fields() {
        let mut expected = Pod::deserialize(&stored()).unwrap();
        assert!(expected.metadata.managed_fields.is_some());
        expected.metadata.managed_fields = None;
        let pod: Pod = without_managed_fields(&stored()).unwrap();
        assert_eq!(pod, expected);
    }

    #[test]
    fn a_dynamic_object_keeps_everything_else() {
        let obj: DynamicObject = without_managed_fields(&stored()).unwrap();
        assert_eq!(obj.metadata.managed_fields, None);
        assert_eq!(obj.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(obj.data["status"]["phase"], "Running");
        assert_eq!(obj.data["spec"]["nodeName"], "n1");
    }

    #[test]
    fn a_wrong_type_is_still_an_error() {
        let mut bad = stored();
        bad["spec"]["containers"] = json!("not a list");
        assert!(without_managed_fields::<Pod>(&bad).is_err());
    }
}
