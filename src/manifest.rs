//! Reading multi-document YAML manifests into typed objects, with errors that name the document,
//! its line, the object and the field path.
//!
//! YAML is read as Kubernetes reads it (`kubectl` and the API server use a YAML 1.1 reader): a
//! plain `0755` is the octal integer 493 and `yes`/`no`/`on`/`off` are booleans. raygate reads
//! it with serde-saphyr (what kube itself uses) with its legacy-octal option on, so an octal is
//! an integer when the text is parsed, wherever it is, never a string repaired afterwards.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// serde-saphyr's options for reading YAML as Kubernetes does: YAML 1.1 octals (`0755` = 493)
/// and booleans, and one-line errors (the caller names the file and document).
pub fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        legacy_octal_numbers: true,
        with_snippet: false,
    }
}

/// One YAML document read as Kubernetes reads it (see [`yaml_options`]).
pub fn from_yaml<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, yaml_options())
}

/// `value` as YAML text.
pub fn to_yaml<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(value)
}

/// A YAML error as one line, its location counted from line `first_line` of the whole text.
pub fn yaml_error_line(e: &serde_saphyr::Error, first_line: usize) -> String {
    e.render_with_options(serde_saphyr::render_options! {
        snippets: serde_saphyr::SnippetMode::Off,
        line_offset: u64::try_from(first_line.saturating_sub(1)).unwrap_or_default(),
    })
}

/// One document of a multi-document YAML text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// 1-based index of the document.
    pub index: usize,
    /// 1-based line of the text where the document starts.
    pub line: usize,
    pub text: &'a str,
}

/// Splits a multi-document text where `kubectl` does (k8s.io/apimachinery's YAMLReader): at
/// lines that are `---` followed by nothing but whitespace. Empty documents keep their index; a
/// text before the first separator that holds only blanks and comments is no document.
pub fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut start_line = 1usize;
    let mut offset = 0usize;
    let mut seen_separator = false;
    for (line_no, line) in (1usize..).zip(text.split_inclusive('\n')) {
        let is_separator = line.starts_with("---") && line[3..].trim_end().is_empty();
        if is_separator {
            let body = &text[start..offset];
            if seen_separator || !is_blank(body) {
                out.push(Chunk {
                    index: out.len() + 1,
                    line: start_line,
                    text: body,
                });
            }
            seen_separator = true;
            start = offset + line.len();
            start_line = line_no + 1;
        }
        offset += line.len();
    }
    let body = &text[start..];
    if !is_blank(body) || (seen_separator && out.is_empty()) {
        out.push(Chunk {
            index: out.len() + 1,
            line: start_line,
            text: body,
        });
    }
    out
}

impl Chunk<'_> {
    /// The document as JSON (`null` when it holds only blanks and comments), or why it is not
    /// valid YAML, with the line (of the whole text) the error points at.
    pub fn value(&self) -> Result<Value, String> {
        if is_blank(self.text) {
            return Ok(Value::Null);
        }
        from_yaml(self.text).map_err(|e| yaml_error_line(&e, self.line))
    }
}

/// Only blank lines and comments.
fn is_blank(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#')
    })
}

/// One object from a manifest file.
#[derive(Clone, Debug)]
pub struct Doc {
    /// 1-based index of the YAML document (items of a `List` share their document's index).
    pub index: usize,
    /// 1-based line where the document starts.
    pub line: usize,
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

    /// Deserializes into `T`, reporting the failing field's path. YAML 1.1 octals are already
    /// integers here (see the module header).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ManifestError> {
        serde_path_to_error::deserialize::<_, T>(&self.value).map_err(|err| ManifestError::Field {
            index: self.index,
            line: self.line,
            object: self.object(),
            path: err.path().to_string(),
            reason: err.into_inner().to_string(),
        })
    }
}

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("document {index}: not valid YAML: {reason}")]
    Yaml { index: usize, reason: String },
    #[error(
        "document {index} (line {line}): not a Kubernetes object (a mapping with apiVersion and kind)"
    )]
    NotAnObject { index: usize, line: usize },
    #[error("document {index} (line {line}, {object}): {path}: {reason}")]
    Field {
        index: usize,
        line: usize,
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
    for chunk in split_documents(text) {
        let (index, line) = (chunk.index, chunk.line);
        let value = chunk
            .value()
            .map_err(|reason| ManifestError::Yaml { index, reason })?;
        if value.is_null() {
            continue;
        }
        let not_an_object = ManifestError::NotAnObject { index, line };
        let Some(kind) = value
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return Err(not_an_object);
        };
        if value.get("apiVersion").and_then(Value::as_str).is_none() {
            return Err(not_an_object);
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
                    .ok_or(ManifestError::NotAnObject { index, line })?;
                out.push(Doc {
                    index,
                    line,
                    kind: kind.to_string(),
                    value: item.clone(),
                });
            }
            continue;
        }
        out.push(Doc {
            index,
            line,
            kind,
            value,
        });
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
    fn bad_yaml_and_non_objects_name_the_document_and_line() {
        let e = read_documents("apiVersion: v1\nkind: A\n---\nkind: B\nspec: {a: 1\n").unwrap_err();
        // the line is the whole text's (the document starts at line 4)
        assert_eq!(
            e.to_string(),
            "document 2: not valid YAML: unclosed bracket '{' at line 5, column 7"
        );
        let e = read_documents("apiVersion: v1\nkind: A\n---\n\n- 1\n- 2\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "document 2 (line 4): not a Kubernetes object (a mapping with apiVersion and kind)"
        );
    }

    #[test]
    fn documents_split_where_kubectl_splits_them() {
        let text = "# header\n---\na: 1\n---   \n---\n# only a comment\n---\nb: |\n  --- not a separator\n";
        let chunks = split_documents(text);
        assert_eq!(
            chunks
                .iter()
                .map(|c| (c.index, c.line, c.text))
                .collect::<Vec<_>>(),
            [
                (1, 3, "a: 1\n"),
                (2, 5, ""),
                (3, 6, "# only a comment\n"),
                (4, 8, "b: |\n  --- not a separator\n"),
            ]
        );
        assert_eq!(chunks[3].value().unwrap()["b"], "--- not a separator\n");
        assert_eq!(chunks[2].value().unwrap(), Value::Null);
        assert_eq!(split_documents("a: 1").len(), 1);
        assert!(split_documents("").is_empty());
    }

    /// Kubernetes reads YAML 1.1: a plain `0777` is octal (511), as `kubectl apply` stores it.
    /// serde_yaml (YAML 1.2) read it as the string "0777", which raygate then repaired by matching
    /// serde's "expected i32" error text; serde-saphyr's legacy-octal option reads it as 511 when
    /// the text is parsed, in every position (typed field or untyped value), with no error text
    /// matched.
    #[test]
    fn yaml_1_1_octal_integers_read_as_kubernetes_reads_them() {
        let docs = read_documents(
            "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: c}\nspec:\n  headGroupSpec:\n    template:\n      spec:\n        containers: [{name: h}]\n        volumes: [{name: v, configMap: {name: m, defaultMode: 0777}}, {name: w, configMap: {name: m, defaultMode: 0644}}]\n",
        )
        .unwrap();
        // already an integer in the untyped value, before any typed parse
        let untyped = &docs[0].value["spec"]["headGroupSpec"]["template"]["spec"]["volumes"];
        assert_eq!(untyped[0]["configMap"]["defaultMode"], 511);
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

        let v: Value = from_yaml(
            "octal: 0755\nsigned: -010\nexplicit: 0o755\nquoted: \"0755\"\ndecimal: 755\nzero: 0\nnot_octal: 0980\n",
        )
        .unwrap();
        assert_eq!(v["octal"], 493);
        assert_eq!(v["signed"], -8);
        assert_eq!(v["explicit"], 493);
        assert_eq!(v["quoted"], "0755");
        assert_eq!(v["decimal"], 755);
        assert_eq!(v["zero"], 0);
        // not octal digits: YAML 1.1 (go-yaml) reads a float, neither a string nor an error
        assert_eq!(v["not_octal"].as_f64(), Some(980.0));

        // YAML 1.1 booleans too, as kubectl reads them (a plain `n` is `false`: quote it)
        let v: Value = from_yaml("a: yes\nb: off\nc: n\nd: \"n\"\n").unwrap();
        assert_eq!(
            (&v["a"], &v["b"], &v["c"], &v["d"]),
            (
                &Value::Bool(true),
                &Value::Bool(false),
                &Value::Bool(false),
                &Value::from("n")
            )
        );

        // a quoted string is a string: an integer field rejects it, naming the field
        let docs = read_documents(
            "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: c}\nspec:\n  headGroupSpec:\n    template:\n      spec:\n        containers: [{name: h}]\n        volumes: [{name: v, configMap: {name: m, defaultMode: '0777'}}]\n",
        )
        .unwrap();
        let e = docs[0]
            .parse::<crate::types::ray::RayCluster>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("volumes[0].configMap.defaultMode"), "{e}");
    }

    #[test]
    fn a_type_error_names_the_document_its_line_and_the_field_path() {
        let docs = read_documents(
            "apiVersion: v1\nkind: A\n---\n# the cluster\napiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: c, namespace: ns}\nspec:\n  headGroupSpec: {template: {}}\n  workerGroupSpecs:\n  - {groupName: g, replicas: many, template: {}}\n",
        )
        .unwrap();
        let e = docs[1]
            .parse::<crate::types::ray::RayCluster>()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "document 2 (line 4, RayCluster ns/c): spec.workerGroupSpecs[0].replicas"
            ),
            "{e}"
        );
    }
}
