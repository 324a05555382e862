//! CEL validation rules (`x-kubernetes-validations`) of CRD schemas, evaluated as
//! apiextensions-apiserver does (`pkg/apiserver/schema/cel/validation.go`, Kubernetes 1.36):
//! rules at every schema level (properties, `additionalProperties`, list items, `allOf`), `self`
//! typed by the schema, transition rules (`oldSelf`) only where an old value correlates (map keys,
//! `x-kubernetes-list-type: map` items by key) unless `optionalOldSelf`, `message`,
//! `messageExpression`, `reason`, `fieldPath`, and ratcheting (an error of a rule without
//! `oldSelf` on a value equal to its old value is dropped, `CRDValidationRatcheting`).
//!
//! The engine is the `cel` crate with its standard library and the `strings`, `lists` and `math`
//! extensions; Kubernetes' own libraries (quantity, url, ip, cidr, format, authz, semver, …) are
//! not there. A rule the crate cannot parse, or that calls a function it does not know, is *not
//! enforced* (fail open) with a logged warning: a named divergence (README). No cost budget.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::objects::{Key, OptionalValue};
use cel::{Context, Env, ExecutionError, Program, Value as Cel};
use serde_json::{Map, Value};

use crate::server::status::FieldCause;

/// One `x-kubernetes-validations` entry, compiled.
struct Rule {
    rule: String,
    message: String,
    reason: Option<String>,
    /// `fieldPath` normalized as `field.Path` prints it (`a.b`, `a[k]`), empty when unset.
    field_path: String,
    optional_old_self: bool,
    uses_old_self: bool,
    /// `None`: the crate cannot run it (fail open).
    program: Option<Program>,
    message_expression: Option<Program>,
}

/// The schema tree, kept only where rules are (a subtree without rules is dropped).
#[derive(Default)]
struct Node {
    rules: Vec<Rule>,
    all_of: Vec<Node>,
    properties: Vec<(String, Node)>,
    additional: Option<Box<Node>>,
    items: Option<Box<Node>>,
    /// `x-kubernetes-map-type` (`granular` when unset).
    map_type: Option<String>,
    /// `x-kubernetes-list-type`, `x-kubernetes-list-map-keys`.
    list_type: Option<String>,
    list_keys: Vec<String>,
    /// The schema's `number`s, for converting values (`None`: there are none).
    shape: Option<Shape>,
    /// The schema's `type` (`object` and `array` values are omitted from field errors).
    typ: String,
    /// A transition rule (one reading `oldSelf`) here or below: the only rules that run on a
    /// value equal to the stored one.
    transition: bool,
}

/// What CEL needs to type a value beyond its JSON: a `number` is a double even when written as
/// an integer. Kept only along the paths that lead to a `number` (most schemas have none).
#[derive(Clone, Default)]
struct Shape {
    number: bool,
    properties: HashMap<String, Shape>,
    additional: Option<Box<Shape>>,
    items: Option<Box<Shape>>,
}

impl Shape {
    /// `None` when nothing at or below `s` is a `number`.
    fn of(s: &Value) -> Option<Shape> {
        let child = |k: &str| {
            s.get(k)
                .filter(|c| c.is_object())
                .and_then(Shape::of)
                .map(Box::new)
        };
        let shape = Shape {
            number: s["type"] == "number",
            properties: s["properties"]
                .as_object()
                .map(|p| {
                    p.iter()
                        .filter_map(|(k, v)| Some((k.clone(), Shape::of(v)?)))
                        .collect()
                })
                .unwrap_or_default(),
            additional: child("additionalProperties"),
            items: child("items"),
        };
        (shape.number
            || !shape.properties.is_empty()
            || shape.additional.is_some()
            || shape.items.is_some())
        .then_some(shape)
    }

    /// A JSON value as the server's `UnstructuredToVal` gives it to CEL.
    fn to_cel(&self, v: &Value) -> Cel {
        match v {
            Value::Null => Cel::Null,
            Value::Bool(b) => Cel::Bool(*b),
            Value::Number(n) => match (self.number, n.as_i64()) {
                (true, _) | (_, None) => Cel::Float(n.as_f64().unwrap_or_default()),
                (false, Some(i)) => Cel::Int(i),
            },
            Value::String(s) => Cel::from(s.as_str()),
            Value::Array(items) => {
                let empty = Shape::default();
                let is = self.items.as_deref().unwrap_or(&empty);
                Cel::from(items.iter().map(|i| is.to_cel(i)).collect::<Vec<_>>())
            }
            Value::Object(m) => {
                let empty = Shape::default();
                Cel::from(
                    m.iter()
                        .map(|(k, v)| {
                            let s = self
                                .properties
                                .get(k)
                                .or(self.additional.as_deref())
                                .unwrap_or(&empty);
                            (Key::from(k.as_str()), s.to_cel(v))
                        })
                        .collect::<HashMap<_, _>>(),
                )
            }
        }
    }
}

fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        for ext in [
            cel::extensions::strings as fn(&mut Env) -> _,
            cel::extensions::lists,
            cel::extensions::math,
        ] {
            if let Err(e) = env.add_extension(ext) {
                tracing::warn!(error = %e, "a CEL extension could not be added");
            }
        }
        Arc::new(env)
    })
    .clone()
}

fn compile(what: &str, source: &str) -> Option<Program> {
    match env().compile(source) {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(rule = source, error = %e, "the sim cannot evaluate this CRD {what}: it is not enforced");
            None
        }
    }
}

/// `fieldPath` (`.a.b`, `.a['k.x']`) as `field.Path` prints it: `a.b`, `a[k.x]`.
fn normalize_field_path(p: &str) -> String {
    let mut out = String::new();
    let mut rest = p.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").unwrap_or(r.len());
            out.push_str(&format!("[{}]", &r[..end]));
            rest = r.get(end + 2..).unwrap_or("");
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&r[..end]);
            rest = &r[end..];
        } else {
            // not a path the CRD validation would accept: keep it as written
            out.push_str(rest);
            break;
        }
    }
    out
}

impl Rule {
    fn of(v: &Value) -> Option<Rule> {
        let rule = v["rule"].as_str()?.to_string();
        let program = compile("validation rule", &rule);
        let uses_old_self = program
            .as_ref()
            .is_some_and(|p| p.references().has_variable("oldSelf"))
            || (program.is_none() && rule.contains("oldSelf"));
        let message_expression = v["messageExpression"]
            .as_str()
            .filter(|m| !m.is_empty())
            .and_then(|m| compile("messageExpression", m));
        Some(Rule {
            message: v["message"].as_str().unwrap_or_default().to_string(),
            reason: v["reason"].as_str().map(str::to_string),
            field_path: v["fieldPath"]
                .as_str()
                .map(normalize_field_path)
                .unwrap_or_default(),
            optional_old_self: v["optionalOldSelf"] == Value::Bool(true),
            uses_old_self,
            program,
            message_expression,
            rule,
        })
    }

    /// `ruleErrorString`: the message if any, else the rule.
    fn error_string(&self) -> &str {
        match self.message.trim() {
            "" => self.rule.trim(),
            m => m,
        }
    }

    /// `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        match self.message.trim() {
            "" => format!("failed rule: {}", self.rule.trim()),
            m => m.to_string(),
        }
    }

    /// Whether the rule runs on this value: a ratcheted value runs only the rules that read
    /// `oldSelf`, and those need an old value to compare with unless `optionalOldSelf`.
    fn runs(&self, ratchet: bool, has_old: bool) -> bool {
        if ratchet && !self.uses_old_self {
            return false;
        }
        // transition rules run only against a comparable old value
        !(self.uses_old_self && !has_old && !self.optional_old_self)
    }
}

impl Node {
    fn of(schema: &Value) -> Option<Node> {
        let s = schema.as_object()?;
        let rules: Vec<Rule> = s
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Rule::of).collect())
            .unwrap_or_default();
        let all_of: Vec<Node> = s
            .get("allOf")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Node::of).collect())
            .unwrap_or_default();
        let properties: Vec<(String, Node)> = s
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .filter_map(|(k, v)| Some((k.clone(), Node::of(v)?)))
                    .collect()
            })
            .unwrap_or_default();
        let additional = s
            .get("additionalProperties")
            .and_then(Node::of)
            .map(Box::new);
        let items = s.get("items").and_then(Node::of).map(Box::new);
        let rules_here = !rules.is_empty();
        let transition = rules.iter().any(|r| r.uses_old_self)
            || all_of.iter().any(|n| n.transition)
            || properties.iter().any(|(_, n)| n.transition)
            || additional.as_ref().is_some_and(|n| n.transition)
            || items.as_ref().is_some_and(|n| n.transition);
        if rules.is_empty()
            && all_of.is_empty()
            && properties.is_empty()
            && additional.is_none()
            && items.is_none()
        {
            return None;
        }
        Some(Node {
            rules,
            all_of,
            properties,
            additional,
            items,
            map_type: s
                .get("x-kubernetes-map-type")
                .and_then(Value::as_str)
                .map(str::to_string),
            list_type: s
                .get("x-kubernetes-list-type")
                .and_then(Value::as_str)
                .map(str::to_string),
            list_keys: s
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            shape: if rules_here { Shape::of(schema) } else { None },
            typ: s
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            transition,
        })
    }
}

/// Where a value sits: `field.Path` printing (`a.b`, `a[k]`, `a[0]`), `None` for the root.
#[derive(Clone)]
struct FieldPath(Option<String>);

impl FieldPath {
    fn child(&self, name: &str) -> FieldPath {
        FieldPath(Some(match &self.0 {
            None => name.to_string(),
            Some(p) => format!("{p}.{name}"),
        }))
    }

    fn subscript(&self, k: &str) -> FieldPath {
        FieldPath(Some(format!("{}[{k}]", self.0.as_deref().unwrap_or(""))))
    }

    /// `Child(normalized fieldPath)`.
    fn rule_child(&self, normalized: &str) -> FieldPath {
        if normalized.is_empty() {
            self.clone()
        } else if normalized.starts_with('[') {
            FieldPath(Some(format!(
                "{}{normalized}",
                self.0.as_deref().unwrap_or("")
            )))
        } else {
            self.child(normalized)
        }
    }

    fn render(&self) -> String {
        self.0.clone().unwrap_or_else(|| "<nil>".into())
    }
}

/// A field error's bad value as `field.Error.ErrorBody` prints it.
fn bad_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// cel-go's wording for the evaluation errors a rule can meet at runtime.
fn eval_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {}", cel_text(i)),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        other => other.to_string(),
    }
}

fn cel_text(v: &Cel) -> String {
    match v {
        Cel::Int(i) => i.to_string(),
        Cel::UInt(u) => u.to_string(),
        other => format!("{other:?}"),
    }
}

/// Whether an evaluation error means the crate lacks what the rule calls (fail open).
fn unsupported(e: &ExecutionError) -> bool {
    matches!(
        e,
        ExecutionError::UndeclaredReference(_) | ExecutionError::NotSupportedAsMethod { .. }
    )
}

/// The validation rules of one CRD version's schema.
pub struct CelRules {
    root: Option<Node>,
}

impl std::fmt::Debug for CelRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CelRules")
            .field("any", &self.root.is_some())
            .finish()
    }
}

impl CelRules {
    /// The rules of an `openAPIV3Schema`, compiled once.
    pub fn new(schema: &Value) -> Self {
        CelRules {
            root: Node::of(schema),
        }
    }

    /// Whether the schema has any rule.
    pub fn any(&self) -> bool {
        self.root.is_some()
    }

    /// Every rule of the schema (its source), and whether the crate could compile it (a rule it
    /// cannot compile is not enforced).
    pub fn rules(&self) -> Vec<(String, bool)> {
        fn walk(n: &Node, out: &mut Vec<(String, bool)>) {
            out.extend(
                n.rules
                    .iter()
                    .map(|r| (r.rule.clone(), r.program.is_some())),
            );
            n.all_of.iter().for_each(|a| walk(a, out));
            n.properties.iter().for_each(|(_, p)| walk(p, out));
            n.additional
                .iter()
                .chain(n.items.iter())
                .for_each(|c| walk(c, out));
        }
        let mut out = vec![];
        if let Some(r) = &self.root {
            walk(r, &mut out);
        }
        out
    }

    /// The field errors of `obj` (an update when `old` is given), in the server's shapes.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldCause> {
        let Some(root) = &self.root else {
            return vec![];
        };
        // at the resource root `self` sees apiVersion, kind and metadata.name/generateName
        // (`model.WithTypeAndObjectMeta`)
        let trim = |o: &Value| -> Value {
            let mut o = o.clone();
            if let Some(m) = o.get("metadata").and_then(Value::as_object) {
                let kept: Map<String, Value> = m
                    .iter()
                    .filter(|(k, _)| matches!(k.as_str(), "name" | "generateName"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                o["metadata"] = Value::Object(kept);
            }
            o
        };
        let mut errs = vec![];
        if !root.transition && old.is_some_and(|o| o == obj) {
            // every rule ratcheted
            return errs;
        }
        if root.rules.is_empty() && root.all_of.is_empty() {
            // no rule sees the root: no copy of the objects
            let ratchet = old.is_some_and(|o| o == obj);
            validate_node(root, &FieldPath(None), obj, old, ratchet, &mut errs);
            return errs;
        }
        // on an update the root correlates (the whole objects, metadata included); a create has
        // nothing to ratchet against
        let ratchet = old.is_some_and(|o| o == obj);
        let obj = trim(obj);
        let old = old.map(trim);
        validate_node(
            root,
            &FieldPath(None),
            &obj,
            old.as_ref(),
            ratchet,
            &mut errs,
        );
        errs
    }
}

fn validate_node(
    node: &Node,
    path: &FieldPath,
    obj: &Value,
    old: Option<&Value>,
    ratchet: bool,
    errs: &mut Vec<FieldCause>,
) {
    // on a value equal to the stored one every rule without `oldSelf` is ratcheted, here and
    // below: such a rule is a function of `self` alone, and the stored value passed it when it
    // was written (CRD schemas do not change under a running sim), so it is not evaluated
    if obj.is_null() || (ratchet && !node.transition) {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    validate_rules(node, path, obj, old, ratchet, errs);
    for a in &node.all_of {
        validate_node(a, path, obj, old, ratchet, errs);
    }
    match obj {
        Value::Object(m) => {
            let correlatable =
                matches!(node.map_type.as_deref(), None | Some("granular" | "atomic"));
            let old_map = old.and_then(Value::as_object).filter(|_| correlatable);
            // the child's ratchet flag: its own equality when it correlates, else the parent's
            let child = |k: &str, v: &Value| {
                let o = old_map.and_then(|om| om.get(k));
                let r = match o {
                    Some(o) => o == v,
                    // an uncorrelated node ratchets with its nearest correlated ancestor
                    None => ratchet,
                };
                (o, r)
            };
            if let Some(a) = &node.additional {
                for (k, v) in m {
                    let (o, r) = child(k, v);
                    validate_node(a, &path.subscript(k), v, o, r, errs);
                }
            }
            for (k, sub) in &node.properties {
                if let Some(v) = m.get(k) {
                    let (o, r) = child(k, v);
                    validate_node(sub, &path.child(k), v, o, r, errs);
                }
            }
        }
        Value::Array(items) => {
            let Some(is) = &node.items else { return };
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                // only map-type lists correlate items (by their keys)
                let o = match (node.list_type.as_deref(), old_items) {
                    (Some("map"), Some(olds)) if !node.list_keys.is_empty() => olds
                        .iter()
                        .find(|o| node.list_keys.iter().all(|k| o.get(k) == item.get(k))),
                    _ => None,
                };
                let r = match o {
                    Some(o) => o == item,
                    // an uncorrelated node ratchets with its nearest correlated ancestor
                    None => ratchet,
                };
                validate_node(is, &path.subscript(&i.to_string()), item, o, r, errs);
            }
        }
        _ => {}
    }
}

/// A rule's variables: `self`, and `oldSelf` as the value or, for `optionalOldSelf`, as an
/// optional.
fn context(self_val: &Cel, old_val: Option<&Cel>, optional: bool) -> Context<'static, 'static> {
    let mut ctx = Context::with_env(env());
    ctx.add_variable_from_value("self", self_val.clone());
    if optional {
        let o = match old_val {
            Some(v) => OptionalValue::of(v.clone()),
            None => OptionalValue::none(),
        };
        ctx.add_variable_from_value("oldSelf", Cel::Opaque(Arc::new(o)));
    } else if let Some(o) = old_val {
        ctx.add_variable_from_value("oldSelf", o.clone());
    }
    ctx
}

fn validate_rules(
    node: &Node,
    path: &FieldPath,
    obj: &Value,
    old: Option<&Value>,
    ratchet: bool,
    errs: &mut Vec<FieldCause>,
) {
    if node.rules.is_empty() {
        return;
    }
    let plain = Shape::default();
    let shape = node.shape.as_ref().unwrap_or(&plain);
    let self_val = shape.to_cel(obj);
    let old_val = old.map(|o| shape.to_cel(o));
    let mut contexts: [Option<Context>; 2] = [None, None];
    for rule in &node.rules {
        let Some(program) = &rule.program else {
            continue;
        };
        if !rule.runs(ratchet, old_val.is_some()) {
            continue;
        }
        // binding a variable copies its value in full: one context per way of binding
        // `oldSelf`, shared by the node's rules
        let optional = rule.optional_old_self;
        let ctx = &*contexts[usize::from(optional)]
            .get_or_insert_with(|| context(&self_val, old_val.as_ref(), optional));
        match holds(node, rule, program, ctx, path) {
            Ok(true) => {}
            Ok(false) => errs.push(violation(node, rule, path, obj, ctx)),
            Err(cause) => errs.push(cause),
        }
    }
}

/// Runs `rule`'s `program`: whether it holds (a rule that does not give a bool, or that the
/// sim cannot evaluate, is not enforced: it holds), or the error its evaluation gave.
fn holds(
    node: &Node,
    rule: &Rule,
    program: &Program,
    ctx: &Context,
    path: &FieldPath,
) -> Result<bool, FieldCause> {
    match program.execute(ctx) {
        Ok(Cel::Bool(true)) => Ok(true),
        Ok(Cel::Bool(false)) => Ok(false),
        Ok(other) => {
            tracing::warn!(rule = rule.rule, result = ?other, "a CRD validation rule did not evaluate to a bool: not enforced");
            Ok(true)
        }
        Err(e) if unsupported(&e) => {
            tracing::warn!(rule = rule.rule, error = %e, "the sim cannot evaluate this CRD validation rule: not enforced");
            Ok(true)
        }
        Err(e) => {
            let ty = format!("{:?}", node.typ);
            Err(FieldCause::invalid(
                path.render(),
                &ty,
                &format!(
                    "{} evaluating rule: {}",
                    eval_error(&e),
                    rule.error_string()
                ),
            ))
        }
    }
}

/// The error for a failed `rule`: at its `fieldPath`, with its `messageExpression`'s text
/// (one non-empty line) or else its message, of the kind its `reason` names.
fn violation(node: &Node, rule: &Rule, path: &FieldPath, obj: &Value, ctx: &Context) -> FieldCause {
    let value_text = || match node.typ.as_str() {
        "object" | "array" => None,
        _ => Some(bad_value(obj)),
    };
    let at = path.rule_child(&rule.field_path).render();
    let detail = rule
        .message_expression
        .as_ref()
        .and_then(|m| match m.execute(ctx) {
            Ok(Cel::String(s)) => {
                let t = s.trim();
                (!t.is_empty() && !t.contains('\n')).then(|| t.to_string())
            }
            _ => None,
        })
        .unwrap_or_else(|| rule.message_or_default());
    match rule.reason.as_deref() {
        Some("FieldValueForbidden") => FieldCause::forbidden(at, &detail),
        Some("FieldValueRequired") => FieldCause::required(at, &detail),
        Some("FieldValueDuplicate") => FieldCause::duplicate(at, value_text().as_deref()),
        _ => FieldCause::invalid_omitting(at, value_text().as_deref(), &detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(errs: &[FieldCause]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.text))
            .collect()
    }

    fn schema() -> CelRules {
        CelRules::new(&json!({
            "type": "object",
            "x-kubernetes-validations": [{"rule": "!has(self.spec) || self.spec.size < 10", "message": "too big"}],
            "properties": {"spec": {"type": "object",
                "x-kubernetes-validations": [
                    {"rule": "!has(self.min) || self.min <= self.size", "message": "min above size", "fieldPath": ".min"},
                    {"rule": "self.size != 3", "messageExpression": "'size ' + string(self.size) + ' is unlucky'"},
                    {"rule": "self.size != 4", "reason": "FieldValueForbidden", "message": "no fours"},
                ],
                "properties": {
                    "size": {"type": "integer"}, "min": {"type": "integer"},
                    "mode": {"type": "string", "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "mode is immutable"},
                        {"rule": "self in ['a', 'b']"},
                    ]},
                    "labels": {"type": "object", "additionalProperties": {"type": "string",
                        "x-kubernetes-validations": [{"rule": "self.size() <= 3", "message": "long label"}]}},
                    "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
                        "x-kubernetes-validations": [
                            {"rule": "self.n >= 0", "message": "negative"},
                            {"rule": "self.n >= oldSelf.n", "message": "n only grows"},
                        ]}},
                    "wants": {"type": "object", "x-kubernetes-validations": [
                        {"rule": "!has(oldSelf.x) || has(self.x)", "optionalOldSelf": true, "message": "x stays"},
                        {"rule": "oldSelf.hasValue() || self.x == 1", "optionalOldSelf": true, "message": "x starts at 1"},
                    ], "properties": {"x": {"type": "integer"}}},
                    "odd": {"type": "string", "x-kubernetes-validations": [{"rule": "self.quantityNotInTheCrate()"}]},
                }}
            }
        }))
    }

    #[test]
    fn rules_at_every_level_give_the_servers_field_errors() {
        let s = schema();
        assert!(s.any());
        assert_eq!(
            texts(&s.validate(&json!({"spec": {"size": 1, "mode": "a"}}), None)),
            Vec::<String>::new()
        );
        assert_eq!(
            texts(&s.validate(&json!({"spec": {"size": 12, "min": 13}}), None)),
            [
                "<nil>: Invalid value: too big",
                "spec.min: Invalid value: min above size"
            ]
        );
        assert_eq!(
            texts(&s.validate(&json!({"spec": {"size": 3, "mode": "c"}}), None)),
            [
                "spec: Invalid value: size 3 is unlucky",
                "spec.mode: Invalid value: \"c\": failed rule: self in ['a', 'b']"
            ]
        );
        assert_eq!(
            texts(&s.validate(&json!({"spec": {"size": 4, "labels": {"k": "long"}}}), None)),
            [
                "spec: Forbidden: no fours",
                "spec.labels[k]: Invalid value: \"long\": long label"
            ]
        );
    }

    #[test]
    fn list_items_are_checked_and_map_list_items_correlate_with_their_old_selves() {
        let s = schema();
        let old = json!({"spec": {"size": 1, "items": [{"name": "a", "n": 5}]}});
        let new =
            json!({"spec": {"size": 1, "items": [{"name": "b", "n": 1}, {"name": "a", "n": 4}]}});
        assert_eq!(
            texts(&s.validate(&new, Some(&old))),
            ["spec.items[1]: Invalid value: n only grows"]
        );
        let errs = s.validate(
            &json!({"spec": {"size": 1, "items": [{"name": "a", "n": -1}]}}),
            None,
        );
        assert_eq!(texts(&errs), ["spec.items[0]: Invalid value: negative"]);
    }

    #[test]
    fn transition_rules_run_only_with_an_old_value_unless_optional() {
        let s = schema();
        // no old value: `self == oldSelf` is skipped, the optional rule sees `oldSelf` as none
        assert_eq!(
            texts(&s.validate(
                &json!({"spec": {"size": 1, "mode": "a", "wants": {"x": 2}}}),
                None
            )),
            ["spec.wants: Invalid value: x starts at 1"]
        );
        let old = json!({"spec": {"size": 1, "mode": "a", "wants": {"x": 2}}});
        assert_eq!(
            texts(&s.validate(
                &json!({"spec": {"size": 1, "mode": "b", "wants": {}}}),
                Some(&old)
            )),
            [
                "spec.mode: Invalid value: \"b\": mode is immutable",
                "spec.wants: Invalid value: x stays"
            ]
        );
    }

    #[test]
    fn an_unchanged_invalid_value_is_ratcheted_and_a_changed_one_is_not() {
        let s = schema();
        let old = json!({"spec": {"size": 3, "mode": "a"}});
        assert!(s.validate(&old.clone(), Some(&old)).is_empty());
        let changed = json!({"spec": {"size": 3, "mode": "a", "min": 1}});
        assert_eq!(
            texts(&s.validate(&changed, Some(&old))),
            ["spec: Invalid value: size 3 is unlucky"]
        );
    }

    #[test]
    fn a_transition_rule_still_runs_on_an_unchanged_value_below_a_changed_one() {
        let s = CelRules::new(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "epoch": {"type": "integer", "x-kubernetes-validations": [
                    {"rule": "self != oldSelf", "message": "must move on"}]},
                "size": {"type": "integer", "x-kubernetes-validations": [
                    {"rule": "self < 3", "message": "too big"}]}}},
            "status": {"type": "object"}}}));
        let old = json!({"spec": {"epoch": 1, "size": 5}, "status": {}});
        let new = json!({"spec": {"epoch": 1, "size": 5}, "status": {"seen": true}});
        // the unchanged `size` is ratcheted, the transition rule on the unchanged `epoch` is not
        assert_eq!(
            texts(&s.validate(&new, Some(&old))),
            ["spec.epoch: Invalid value: 1: must move on"]
        );
    }

    #[test]
    fn a_root_rule_ratchets_only_on_an_unchanged_object_metadata_included() {
        let s = schema();
        let old = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"size": 12}});
        assert!(s.validate(&old.clone(), Some(&old)).is_empty());
        let relabelled =
            json!({"metadata": {"name": "a", "labels": {"x": "2"}}, "spec": {"size": 12}});
        assert_eq!(
            texts(&s.validate(&relabelled, Some(&old))),
            ["<nil>: Invalid value: too big"]
        );
    }

    #[test]
    fn a_rule_the_crate_cannot_run_fails_open() {
        let s = schema();
        assert!(
            s.validate(&json!({"spec": {"size": 1, "odd": "1Gi"}}), None)
                .is_empty()
        );
    }

    #[test]
    fn an_evaluation_error_names_the_rule() {
        let s = schema();
        assert_eq!(
            texts(&s.validate(&json!({"spec": {"mode": "a"}}), None)),
            [
                "<nil>: Invalid value: \"object\": no such key: size evaluating rule: too big",
                "spec: Invalid value: \"object\": no such key: size evaluating rule: self.size != 3",
                "spec: Invalid value: \"object\": no such key: size evaluating rule: no fours",
            ]
        );
    }

    #[test]
    fn the_installed_crds_expression_forms_run() {
        // forms the Kueue CRDs use: `size()` as a method on maps and lists, `filter` then
        // `size()`, `in` a list literal, `exists` over conditions, ternaries, map equality
        let s = CelRules::new(
            &json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "!has(self.topologyName) || self.nodeLabels.size() >= 1", "message": "labels"},
                {"rule": "[has(self.a),has(self.b)].filter(x,x==true).size() == 1", "message": "one of"},
                {"rule": "!has(self.effect) || self.effect in ['NoSchedule', 'NoExecute']", "message": "effect"},
                {"rule": "has(self.conds) && self.conds.exists(c, c.type == 'Q' && c.status == 'True') ? self.n == 1 : true", "message": "q"},
                {"rule": "!has(self.topologyName) || (has(self.nodeLabels) == has(oldSelf.nodeLabels) && (!has(self.nodeLabels) || self.nodeLabels == oldSelf.nodeLabels))", "message": "immutable"},
            ],
            "properties": {"topologyName": {"type": "string"}, "nodeLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                "a": {"type": "string"}, "b": {"type": "string"}, "effect": {"type": "string"}, "n": {"type": "integer"},
                "conds": {"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}}}}),
        );
        assert!(s.rules().iter().all(|(_, compiled)| *compiled));
        let ok = json!({"spec": {"topologyName": "t", "nodeLabels": {"k": "v"}, "a": "x", "effect": "NoSchedule",
            "conds": [{"type": "Q", "status": "True"}], "n": 1}});
        assert!(
            s.validate(&ok, None).is_empty(),
            "{:?}",
            s.validate(&ok, None)
        );
        let bad = json!({"spec": {"topologyName": "t", "nodeLabels": {}, "a": "x", "b": "y", "effect": "Sometimes",
            "conds": [{"type": "Q", "status": "True"}], "n": 2}});
        assert_eq!(
            texts(&s.validate(&bad, None)),
            [
                "spec: Invalid value: labels",
                "spec: Invalid value: one of",
                "spec: Invalid value: effect",
                "spec: Invalid value: q"
            ]
        );
        let mut moved = ok.clone();
        moved["spec"]["nodeLabels"] = json!({"k": "w"});
        assert_eq!(
            texts(&s.validate(&moved, Some(&ok))),
            ["spec: Invalid value: immutable"]
        );
    }

    #[test]
    fn field_paths_normalize_as_field_path_prints_them() {
        assert_eq!(normalize_field_path(".a.b"), "a.b");
        assert_eq!(normalize_field_path(".a['x.y']"), "a[x.y]");
    }
}
