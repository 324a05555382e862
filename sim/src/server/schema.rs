//! Structural schemas of CRDs: pruning of unknown fields, `default`s, and validation with the real
//! server's field-error shapes (`Invalid value`, `Required value`, `Unsupported value`). CEL rules
//! (`x-kubernetes-validations`) are evaluated by [`crate::server::cel`] after the schema checks,
//! unless those found a blocking error (as `hasBlockingErr` in the server's strategy).

use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};

use crate::server::status::FieldCause;

/// One version's `openAPIV3Schema`, with its validators compiled once: one for the root's own
/// keywords and one per top-level property, so an update validates only the properties it
/// changed (the server ratchets errors of unchanged values, `CRDValidationRatcheting`).
#[derive(Debug)]
pub struct CompiledSchema {
    raw: Value,
    validator: Option<Validators>,
    cel: crate::server::cel::CelRules,
}

#[derive(Debug)]
struct Validators {
    root: jsonschema::Validator,
    properties: Vec<(String, jsonschema::Validator)>,
}

impl Validators {
    fn new(raw: &Value) -> Result<Self, jsonschema::ValidationError<'static>> {
        let compile = |s: &Value| {
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft4)
                .should_validate_formats(false)
                .build(&to_json_schema(s))
        };
        let mut root = raw.clone();
        let mut properties = vec![];
        if let Some(props) = root.get_mut("properties").and_then(Value::as_object_mut) {
            for (k, sub) in props.iter_mut() {
                properties.push((k.clone(), compile(sub)?));
                *sub = Value::Object(Map::new());
            }
        }
        Ok(Validators {
            root: compile(&root)?,
            properties,
        })
    }
}

/// OpenAPI v3 → JSON Schema draft 4: `nullable` adds `null` to the type; int-or-string drops it.
fn to_json_schema(s: &Value) -> Value {
    match s {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                match k.as_str() {
                    "format" | "nullable" => {}
                    "type" if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) => {}
                    "type" if m.get("nullable") == Some(&Value::Bool(true)) => {
                        out.insert(k.clone(), Value::Array(vec![v.clone(), "null".into()]));
                    }
                    "properties" | "patternProperties" | "definitions" => {
                        let inner = v
                            .as_object()
                            .map(|p| {
                                p.iter()
                                    .map(|(pk, pv)| (pk.clone(), to_json_schema(pv)))
                                    .collect::<Map<_, _>>()
                            })
                            .unwrap_or_default();
                        out.insert(k.clone(), Value::Object(inner));
                    }
                    "default" | "enum" | "example" | "x-kubernetes-list-map-keys" => {
                        out.insert(k.clone(), v.clone());
                    }
                    _ => {
                        out.insert(k.clone(), to_json_schema(v));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_json_schema).collect()),
        other => other.clone(),
    }
}

fn preserves_unknown(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

/// Where a field sits, as the server's strict decoding names it (`spec.items[0].name`).
fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Prunes `v` by `s`; the paths of the fields dropped go to `pruned`.
fn prune_value(
    v: &mut Value,
    s: &Value,
    (root, path): (bool, &str),
    old: Option<&Value>,
    pruned: &mut Vec<String>,
) {
    if old == Some(&*v) {
        return;
    }
    match v {
        Value::Object(obj) => {
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties");
            let embedded =
                root || s.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true));
            if let Some(props) = props {
                if !preserves_unknown(s) && additional.is_none() {
                    obj.retain(|k, _| {
                        let keep = props.contains_key(k)
                            || (embedded
                                && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
                        if !keep {
                            pruned.push(child_path(path, k));
                        }
                        keep
                    });
                }
                for (k, child) in obj.iter_mut() {
                    if let Some(cs) = props.get(k)
                        && !(root && k == "metadata")
                    {
                        let at = child_path(path, k);
                        prune_value(child, cs, (false, &at), old.and_then(|o| o.get(k)), pruned);
                    }
                }
            } else if let Some(a) = additional.filter(|a| a.is_object()) {
                for (k, child) in obj.iter_mut() {
                    let at = child_path(path, k);
                    prune_value(child, a, (false, &at), old.and_then(|o| o.get(k)), pruned);
                }
            } else if !preserves_unknown(s)
                && additional.is_none()
                && s.get("type") == Some(&Value::String("object".into()))
                && !embedded
            {
                pruned.extend(obj.keys().map(|k| child_path(path, k)));
                obj.clear();
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    let at = format!("{path}[{i}]");
                    prune_value(item, is, (false, &at), old.and_then(|o| o.get(i)), pruned);
                }
            }
        }
        _ => {}
    }
}

fn default_value(v: &mut Value, s: &Value, old: Option<&Value>) {
    if old == Some(&*v) {
        return;
    }
    match v {
        Value::Object(obj) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, cs) in props {
                    if !obj.contains_key(k)
                        && let Some(d) = cs.get("default")
                    {
                        obj.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = obj.get_mut(k) {
                        default_value(child, cs, old.and_then(|o| o.get(k)));
                    }
                }
            } else if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, child) in obj.iter_mut() {
                    default_value(child, a, old.and_then(|o| o.get(k)));
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    default_value(item, is, old.and_then(|o| o.get(i)));
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `spec.workerGroupSpecs[0].replicas` from `/spec/workerGroupSpecs/0/replicas`.
fn field_path(loc: &jsonschema::paths::Location) -> String {
    let mut out = String::new();
    for seg in loc.segments() {
        match seg {
            jsonschema::paths::LocationSegment::Property(p) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&p);
            }
            jsonschema::paths::LocationSegment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn quoted(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// The cause the server adds when schema errors kept it from evaluating CEL rules.
pub fn cel_skipped() -> FieldCause {
    FieldCause::invalid(
        "<nil>",
        "null",
        "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
    )
}

impl CompiledSchema {
    pub fn new(raw: Value) -> Self {
        let validator = Validators::new(&raw);
        if let Err(e) = &validator {
            tracing::warn!(error = %e, "a CRD schema could not be compiled; objects of it are not validated");
        }
        CompiledSchema {
            cel: crate::server::cel::CelRules::new(&raw),
            raw,
            validator: validator.ok(),
        }
    }

    /// Whether the schema carries CEL rules (`x-kubernetes-validations`).
    pub fn has_cel(&self) -> bool {
        self.cel.any()
    }

    /// Drops fields the schema does not declare (unless it preserves unknown fields). `old`, the
    /// stored object on an update: values equal to it where they sit are pruned already.
    /// Drops the fields the schema does not declare; returns their paths (`spec.foo`), which a
    /// request with `fieldValidation=Strict` is refused for.
    pub fn prune(&self, obj: &mut Value, old: Option<&Value>) -> Vec<String> {
        let mut pruned = vec![];
        prune_value(obj, &self.raw, (true, ""), old, &mut pruned);
        pruned
    }

    /// Fills in `default`s, parents before children (values equal to `old`'s where they sit
    /// are defaulted already).
    pub fn default(&self, obj: &mut Value, old: Option<&Value>) {
        default_value(obj, &self.raw, old);
    }

    /// The field errors of `obj` (empty when valid): the schema's, then its CEL rules' (with
    /// `old`, the stored object, on an update) unless a schema error blocks them. On an update a
    /// top-level property equal to the stored one is not validated again (ratcheted).
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldCause> {
        let mut out = self.validate_schema(obj, old);
        if !self.cel.any() {
            return out;
        }
        // `hasBlockingErr`: these types keep the server from running the rules
        let blocking = out.iter().any(|e| {
            matches!(
                e.reason,
                "FieldValueNotSupported"
                    | "FieldValueRequired"
                    | "FieldValueTooLong"
                    | "FieldValueTooMany"
                    | "FieldValueTypeInvalid"
            )
        });
        if blocking {
            out.push(cel_skipped());
        } else {
            out.extend(self.cel.validate(obj, old));
        }
        out
    }

    fn validate_schema(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldCause> {
        let Some(v) = &self.validator else {
            return vec![];
        };
        let mut out = field_causes(v.root.iter_errors(obj), None);
        for (k, validator) in &v.properties {
            let Some(value) = obj.get(k) else { continue };
            if old.and_then(|o| o.get(k)) == Some(value) {
                continue;
            }
            out.extend(field_causes(validator.iter_errors(value), Some(k)));
        }
        out.sort_by(|a, b| a.field.cmp(&b.field));
        out.dedup();
        out
    }
}

/// The server's field errors for a validator's errors (`under`: the top-level property the
/// validated value sits at).
fn field_causes<'a>(
    errors: impl Iterator<Item = jsonschema::ValidationError<'a>>,
    under: Option<&str>,
) -> Vec<FieldCause> {
    errors
        .map(|e| {
            let path = match (under, field_path(e.instance_path())) {
                (Some(k), p) if p.is_empty() => k.to_string(),
                (Some(k), p) if p.starts_with('[') => format!("{k}{p}"),
                (Some(k), p) => format!("{k}.{p}"),
                (None, p) => p,
            };
            let inst = e.instance();
            match e.kind() {
                ValidationErrorKind::Type { kind } => {
                    let want = match kind {
                        jsonschema::error::TypeKind::Single(t) => t.to_string(),
                        jsonschema::error::TypeKind::Multiple(ts) => ts
                            .iter()
                            .map(|t| t.to_string())
                            .collect::<Vec<_>>()
                            .join("/"),
                    };
                    FieldCause::type_invalid(
                        path.clone(),
                        &format!("{:?}", type_name(inst)),
                        &format!(
                            "{path} in body must be of type {want}: {:?}",
                            type_name(inst)
                        ),
                    )
                }
                ValidationErrorKind::Required { property } => {
                    let p = property.as_str().unwrap_or_default();
                    let f = if path.is_empty() {
                        p.to_string()
                    } else {
                        format!("{path}.{p}")
                    };
                    FieldCause::required(f, "")
                }
                ValidationErrorKind::Enum { options } => {
                    let supported: Vec<String> = options
                        .as_array()
                        .map(|o| o.iter().map(quoted).collect())
                        .unwrap_or_default();
                    FieldCause::not_supported(path, &quoted(inst), &supported)
                }
                _ => FieldCause::invalid(path, &quoted(inst), &e.to_string()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> CompiledSchema {
        CompiledSchema::new(json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                "spec": {"type": "object", "required": ["count"], "properties": {
                    "count": {"type": "integer", "format": "int32"},
                    "mode": {"type": "string", "default": "Fast", "enum": ["Fast", "Slow"]},
                    "size": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "opt": {"type": "string", "nullable": true},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                }}
            }
        }))
    }

    #[test]
    fn unknown_fields_are_pruned_and_preserved_regions_kept() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a", "labels": {"k": "v"}},
            "spec": {"count": 1, "bogus": 2, "free": {"anything": [1]}, "labels": {"a": "b"}}, "extra": true});
        let mut pruned = schema().prune(&mut o, None);
        pruned.sort();
        // the paths `fieldValidation=Strict` names
        assert_eq!(pruned, ["extra", "spec.bogus"]);
        assert_eq!(
            o,
            json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a", "labels": {"k": "v"}},
            "spec": {"count": 1, "free": {"anything": [1]}, "labels": {"a": "b"}}})
        );
    }

    #[test]
    fn defaults_fill_missing_fields() {
        let mut o = json!({"spec": {"count": 1}});
        schema().default(&mut o, None);
        assert_eq!(o["spec"]["mode"], "Fast");
    }

    #[test]
    fn type_required_and_enum_errors_have_the_servers_shape() {
        let s = schema();
        assert!(
            s.validate_schema(
                &json!({"spec": {"count": 1, "size": "10%", "opt": null}}),
                None
            )
            .is_empty()
        );
        let errs = s.validate_schema(&json!({"spec": {"count": "three"}}), None);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec.count");
        assert_eq!(
            errs[0].text,
            "Invalid value: \"string\": spec.count in body must be of type integer: \"string\""
        );
        let errs = s.validate_schema(&json!({"spec": {"mode": "Medium"}}), None);
        let text: Vec<_> = errs
            .iter()
            .map(|e| format!("{}: {}", e.field, e.text))
            .collect();
        assert_eq!(
            text,
            [
                "spec.count: Required value",
                "spec.mode: Unsupported value: \"Medium\": supported values: \"Fast\", \"Slow\""
            ]
        );
    }

    #[test]
    fn an_update_ratchets_the_errors_of_unchanged_top_level_properties() {
        let s = schema();
        let stored = json!({"spec": {"count": "three"}, "status": {}});
        // a status write: the invalid spec it did not touch is not reported again
        let status_write = json!({"spec": {"count": "three"}, "status": {"seen": 1}});
        assert!(s.validate(&status_write, Some(&stored)).is_empty());
        // a write that changes the spec is validated in full
        let spec_write = json!({"spec": {"count": "four"}, "status": {}});
        let errs = s.validate(&spec_write, Some(&stored));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec.count");
        // the root's own keywords hold on every write
        let root = CompiledSchema::new(json!({"type": "object", "required": ["spec"],
            "properties": {"spec": {"type": "object"}, "status": {"type": "object"}}}));
        let errs = root.validate(&json!({"status": {"a": 1}}), Some(&json!({"status": {}})));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec");
    }

    #[test]
    fn an_update_prunes_and_defaults_the_values_it_changed() {
        let stored = json!({"spec": {"count": 1, "mode": "Fast"}});
        let mut o = json!({"spec": {"count": 2, "bogus": 1}, "extra": 1});
        schema().prune(&mut o, Some(&stored));
        schema().default(&mut o, Some(&stored));
        assert_eq!(o, json!({"spec": {"count": 2, "mode": "Fast"}}));
        // a list item equal to the stored one at its index is left as it is; a changed one is not
        let s = CompiledSchema::new(
            json!({"type": "object", "properties": {"items": {"type": "array",
            "items": {"type": "object", "properties": {"a": {"type": "integer", "default": 0}}}}}}),
        );
        let stored = json!({"items": [{"a": 1}]});
        let mut o = json!({"items": [{"a": 1}, {"b": 2}]});
        s.prune(&mut o, Some(&stored));
        s.default(&mut o, Some(&stored));
        assert_eq!(o, json!({"items": [{"a": 1}, {"a": 0}]}));
    }
}
