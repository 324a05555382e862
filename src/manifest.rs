//! Reading multi-document YAML manifests into typed objects, with errors that name the document,
//! the object and the field path.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// One object from a manifest file.
#[derive(Clone, Debug)]
pub struct Doc {
    /// 1-based index of the YAML document (items of a `List` share their document's index).
    pub index: usize,
    pub kind: String,
    pub value: Value,
}

impl Doc {
    /// `Kind namespace/name` (or `Kind name` for cluster-scoped objects).
    pub fn object(&self) -> String {
        let meta = &self.value["metadata"];
        let name = meta["name"].as_str().unwrap_or("<unnamed>");
        match meta["namespace"].as_str() {
            Some(ns) => format!("{} {ns}/{name}", self.kind),
            None => format!("{} {name}", self.kind),
        }
    }

    /// Deserializes into `T`, reporting the failing field's path.
    ///
    /// Kubernetes reads manifests as YAML 1.1, where a plain `0777` is octal (511); serde_yaml
    /// keeps it as the string `"0777"`. Where `T` wants an integer and finds such a string (as in
    /// `defaultMode: 0777` in KubeRay's samples), it is read as octal, as `kubectl` would.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ManifestError> {
        let mut value = std::borrow::Cow::Borrowed(&self.value);
        for _ in 0..64 {
            let err = match serde_path_to_error::deserialize::<_, T>(value.as_ref()) {
                Ok(t) => return Ok(t),
                Err(err) => err,
            };
            let octal = err.inner().to_string().contains("expected i")
                && at_path(value.as_ref(), err.path())
                    .and_then(Value::as_str)
                    .and_then(yaml11_octal)
                    .is_some();
            if !octal {
                return Err(ManifestError::Field {
                    index: self.index,
                    object: self.object(),
                    path: err.path().to_string(),
                    reason: err.into_inner().to_string(),
                });
            }
            let slot = at_path_mut(value.to_mut(), err.path());
            if let Some(slot) = slot {
                let n = slot.as_str().and_then(yaml11_octal).unwrap_or_default();
                *slot = Value::from(n);
            }
        }
        Err(ManifestError::Field {
            index: self.index,
            object: self.object(),
            path: String::new(),
            reason: "too many YAML 1.1 octal values".into(),
        })
    }
}

/// A YAML 1.1 octal integer (`0777`, `-010`), as Kubernetes' YAML reader takes it.
fn yaml11_octal(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let rest = digits.strip_prefix('0')?;
    if rest.is_empty() || !rest.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    let n = i64::from_str_radix(rest, 8).ok()?;
    Some(if neg { -n } else { n })
}

fn at_path<'a>(mut v: &'a Value, path: &serde_path_to_error::Path) -> Option<&'a Value> {
    for seg in path.iter() {
        v = match seg {
            serde_path_to_error::Segment::Seq { index } => v.get(*index)?,
            serde_path_to_error::Segment::Map { key } => v.get(key.as_str())?,
            _ => return None,
        };
    }
    Some(v)
}

fn at_path_mut<'a>(
    mut v: &'a mut Value,
    path: &serde_path_to_error::Path,
) -> Option<&'a mut Value> {
    for seg in path.iter() {
        v = match seg {
            serde_path_to_error::Segment::Seq { index } => v.get_mut(*index)?,
            serde_path_to_error::Segment::Map { key } => v.get_mut(key.as_str())?,
            _ => return None,
        };
    }
    Some(v)
}

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("document {index}: not valid YAML: {reason}")]
    Yaml { index: usize, reason: String },
    #[error("document {index}: not a Kubernetes object (a mapping with apiVersion and kind)")]
    NotAnObject { index: usize },
    #[error("document {index} ({object}): {path}: {reason}")]
    Field {
        index: usize,
        object: String,
        path: String,
        reason: String,
    },
    #[error("{0}")]
    Content(String),
}

/// Splits YAML text into objects; empty documents are skipped, `List` items are expanded.
pub fn read_documents(text: &str) -> Result<Vec<Doc>, ManifestError> {
    let mut out = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        let value: Value =
            serde::Deserialize::deserialize(de).map_err(|e| ManifestError::Yaml {
                index,
                reason: e.to_string(),
            })?;
        if value.is_null() {
            continue;
        }
        let Some(kind) = value
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return Err(ManifestError::NotAnObject { index });
        };
        if value.get("apiVersion").and_then(Value::as_str).is_none() {
            return Err(ManifestError::NotAnObject { index });
        }
        if kind == "List" {
            for item in value
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let kind = item
                    .get("kind")
                    .and_then(Value::as_str)
                    .ok_or(ManifestError::NotAnObject { index })?;
                out.push(Doc {
                    index,
                    kind: kind.to_string(),
                    value: item.clone(),
                });
            }
            continue;
        }
        out.push(Doc { index, kind, value });
    }
    Ok(out)
}

/// Sets `metadata.namespace` to `default` on namespaced objects that have none, as `kubectl` would.
pub fn default_namespace(doc: &mut Doc) {
    if let Some(meta) = doc.value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.entry("namespace")
            .or_insert_with(|| Value::String("default".into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_documents_and_skips_empty_ones() {
        let docs = read_documents("---\napiVersion: v1\nkind: A\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: B, metadata: {name: b}}\n").unwrap();
        assert_eq!(
            docs.iter()
                .map(|d| (d.index, d.kind.as_str()))
                .collect::<Vec<_>>(),
            [(1, "A"), (3, "B")]
        );
    }

    #[test]
    fn bad_yaml_and_non_objects_name_the_document() {
        let e = read_documents("apiVersion: v1\nkind: A\n---\n: : :\n  - [").unwrap_err();
        assert!(
            e.to_string().starts_with("document 2: not valid YAML"),
            "{e}"
        );
        let e = read_documents("apiVersion: v1\nkind: A\n---\n- 1\n- 2\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("document 2: not a Kubernetes object"),
            "{e}"
        );
    }

    #[test]
    fn yaml_1_1_octal_integers_read_as_kubernetes_reads_them() {
        let docs = read_documents(
            "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: c}\nspec:\n  headGroupSpec:\n    template:\n      spec:\n        containers: [{name: h}]\n        volumes: [{name: v, configMap: {name: m, defaultMode: 0777}}, {name: w, configMap: {name: m, defaultMode: 0644}}]\n",
        )
        .unwrap();
        let c = docs[0].parse::<crate::types::ray::RayCluster>().unwrap();
        let vols = c
            .spec
            .head_group_spec
            .template
            .spec
            .unwrap()
            .volumes
            .unwrap();
        assert_eq!(
            vols[0].config_map.as_ref().unwrap().default_mode,
            Some(0o777)
        );
        assert_eq!(
            vols[1].config_map.as_ref().unwrap().default_mode,
            Some(0o644)
        );
        // a string that is not octal stays an error naming the field
        let docs = read_documents(
            "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: c}\nspec:\n  headGroupSpec:\n    template:\n      spec:\n        containers: [{name: h}]\n        volumes: [{name: v, configMap: {name: m, defaultMode: '0789'}}]\n",
        )
        .unwrap();
        let e = docs[0]
            .parse::<crate::types::ray::RayCluster>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("volumes[0].configMap.defaultMode"), "{e}");
        assert_eq!(yaml11_octal("0"), None);
        assert_eq!(yaml11_octal("-010"), Some(-8));
    }

    #[test]
    fn a_type_error_names_the_field_path() {
        let docs = read_documents(
            "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: c, namespace: n}\nspec:\n  headGroupSpec: {template: {}}\n  workerGroupSpecs:\n  - {groupName: g, replicas: many, template: {}}\n",
        )
        .unwrap();
        let e = docs[0]
            .parse::<crate::types::ray::RayCluster>()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("document 1 (RayCluster n/c): spec.workerGroupSpecs[0].replicas"),
            "{e}"
        );
    }
}
