//! Field ownership (`metadata.managedFields`, FieldsV1) and server-side apply, after
//! `sigs.k8s.io/structured-merge-diff`: field sets of leaf paths, list-map elements keyed
//! `k:{...}`, set elements `v:...`, apply conflicts, forced takeover, and removal of fields an
//! applier stopped applying when no one else owns them.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::kinds::{ListType, ResourceType};
use crate::status::ApiError;

/// A path of FieldsV1 tokens: `f:spec`, `k:{"name":"w"}`, `v:"x"`.
pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

/// The object's shape for merging: which lists are maps, sets or atomic.
#[derive(Clone, Copy)]
pub struct Shape<'a> {
    pub rt: &'a ResourceType,
    pub version: &'a str,
}

impl Shape<'_> {
    fn list_type(&self, names: &[String]) -> ListType {
        let n: Vec<&str> = names.iter().map(String::as_str).collect();
        self.rt.list_type(self.version, &n)
    }

    fn map_is_atomic(&self, names: &[String]) -> bool {
        let n: Vec<&str> = names.iter().map(String::as_str).collect();
        self.rt.map_is_atomic(self.version, &n)
    }
}

fn key_token(item: &Value, keys: &[String]) -> Option<String> {
    let obj = item.as_object()?;
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), obj.get(k)?.clone());
    }
    Some(format!("k:{}", Value::Object(m)))
}

/// A map or keyed element with content: owned as a node (FieldsV1 `"."`) besides its fields, and
/// never "changed" by its content alone.
fn is_node(v: &Value) -> bool {
    v.as_object().is_some_and(|m| !m.is_empty())
}

fn collect(v: &Value, shape: Shape, names: &mut Vec<String>, cur: &mut Path, out: &mut FieldSet) {
    match v {
        // an atomic map is one leaf
        Value::Object(m) if !m.is_empty() && !shape.map_is_atomic(names) => {
            if !cur.is_empty() {
                out.insert(cur.clone());
            }
            for (k, child) in m {
                names.push(k.clone());
                cur.push(format!("f:{k}"));
                match child {
                    Value::Array(items) => collect_list(items, shape, names, cur, out),
                    _ => collect(child, shape, names, cur, out),
                }
                cur.pop();
                names.pop();
            }
        }
        _ => {
            out.insert(cur.clone());
        }
    }
}

fn collect_list(
    items: &[Value],
    shape: Shape,
    names: &mut Vec<String>,
    cur: &mut Path,
    out: &mut FieldSet,
) {
    if items.is_empty() {
        out.insert(cur.clone());
        return;
    }
    match shape.list_type(names) {
        ListType::Map(keys) if !keys.is_empty() => {
            let tokens: Option<Vec<String>> = items.iter().map(|i| key_token(i, &keys)).collect();
            match tokens {
                Some(tokens) => {
                    out.insert(cur.clone());
                    for (item, tok) in items.iter().zip(tokens) {
                        cur.push(tok);
                        collect(item, shape, names, cur, out);
                        cur.pop();
                    }
                }
                None => {
                    out.insert(cur.clone());
                }
            }
        }
        ListType::Set => {
            out.insert(cur.clone());
            for item in items {
                cur.push(format!("v:{item}"));
                out.insert(cur.clone());
                cur.pop();
            }
        }
        _ => {
            out.insert(cur.clone());
        }
    }
}

/// Fields the server never tracks (`stripMetaManager`).
fn stripped(p: &Path) -> bool {
    match p.as_slice() {
        [a] => a == "f:apiVersion" || a == "f:kind" || a == "f:metadata",
        [m, f, ..] if m == "f:metadata" => matches!(
            f.as_str(),
            "f:name"
                | "f:namespace"
                | "f:creationTimestamp"
                | "f:selfLink"
                | "f:uid"
                | "f:generation"
                | "f:managedFields"
                | "f:resourceVersion"
                | "f:deletionTimestamp"
                | "f:deletionGracePeriodSeconds"
        ),
        _ => false,
    }
}

/// Which part of the object a write may own: the main resource (without `status` when the
/// kind has a status subresource) or the status subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Main { status_separate: bool },
    Status,
}

impl Scope {
    fn admits(&self, p: &Path) -> bool {
        let is_status = p.first().is_some_and(|f| f == "f:status");
        match self {
            Scope::Main { status_separate } => !(is_status && *status_separate),
            Scope::Status => is_status,
        }
    }

    fn subresource(&self) -> Option<&'static str> {
        match self {
            Scope::Main { .. } => None,
            Scope::Status => Some("status"),
        }
    }
}

/// The tracked field set of an object (within `scope`).
pub fn fields_of(v: &Value, shape: Shape, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    collect(v, shape, &mut vec![], &mut vec![], &mut out);
    out.retain(|p| !stripped(p) && scope.admits(p));
    out
}

fn parse_token(tok: &str) -> Option<(char, Value)> {
    let (kind, rest) = tok.split_at_checked(2)?;
    match kind {
        "f:" => Some(('f', Value::String(rest.to_string()))),
        "k:" | "v:" => serde_json::from_str(rest)
            .ok()
            .map(|v| (kind.as_bytes()[0] as char, v)),
        _ => None,
    }
}

fn element_matches(item: &Value, kind: char, want: &Value) -> bool {
    match kind {
        'k' => want
            .as_object()
            .is_some_and(|w| w.iter().all(|(k, v)| item.get(k) == Some(v))),
        _ => item == want,
    }
}

/// The value at `path`.
pub fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for tok in path {
        let (kind, arg) = parse_token(tok)?;
        cur = match (kind, cur) {
            ('f', Value::Object(m)) => m.get(arg.as_str()?)?,
            ('k' | 'v', Value::Array(items)) => {
                items.iter().find(|i| element_matches(i, kind, &arg))?
            }
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the field or element at `path` (no-op when absent).
pub fn remove(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for tok in parent {
        let Some((kind, arg)) = parse_token(tok) else {
            return;
        };
        let next = match (kind, cur) {
            ('f', Value::Object(m)) => arg.as_str().and_then(|k| m.get_mut(k)),
            ('k' | 'v', Value::Array(items)) => {
                items.iter_mut().find(|i| element_matches(i, kind, &arg))
            }
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (parse_token(last), cur) {
        (Some(('f', Value::String(k))), Value::Object(m)) => {
            m.remove(&k);
        }
        (Some((kind @ ('k' | 'v'), arg)), Value::Array(items)) => {
            items.retain(|i| !element_matches(i, kind, &arg));
        }
        _ => {}
    }
}

/// FieldsV1 JSON of a field set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for p in set {
        let mut cur = &mut root;
        for tok in p {
            let Value::Object(m) = cur else { break };
            cur = m.entry(tok.clone()).or_insert_with(|| json!({}));
        }
    }
    // an owned node with owned children is marked "."
    mark(&mut root, &mut vec![], set);
    root
}

fn mark(node: &mut Value, cur: &mut Path, set: &FieldSet) {
    let Value::Object(m) = node else { return };
    if !cur.is_empty() && !m.is_empty() && set.contains(cur) {
        m.insert(".".into(), json!({}));
    }
    for (tok, child) in m.iter_mut() {
        if tok == "." {
            continue;
        }
        cur.push(tok.clone());
        mark(child, cur, set);
        cur.pop();
    }
}

fn from_v1(v: &Value, cur: &mut Path, out: &mut FieldSet) {
    if let Value::Object(m) = v {
        for (tok, child) in m {
            if tok == "." {
                out.insert(cur.clone());
                continue;
            }
            cur.push(tok.clone());
            if child.as_object().is_some_and(Map::is_empty) {
                out.insert(cur.clone());
            } else {
                from_v1(child, cur, out);
            }
            cur.pop();
        }
    }
}

/// The list type at a token path (its field names).
fn shape_list(shape: Shape, p: &Path) -> ListType {
    let names: Vec<String> = p
        .iter()
        .filter_map(|t| t.strip_prefix("f:").map(String::from))
        .collect();
    shape.list_type(&names)
}

/// The field set of FieldsV1 JSON.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    from_v1(v, &mut vec![], &mut out);
    out
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, sub: Option<&str>) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.as_deref() == sub
    }
}

/// The entries of an object's `metadata.managedFields`.
pub fn entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(entry_of)
        .collect()
}

fn entry_of(e: &Value) -> Entry {
    Entry {
        manager: e["manager"].as_str().unwrap_or_default().to_string(),
        operation: e["operation"].as_str().unwrap_or("Update").to_string(),
        api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
        time: e["time"].as_str().unwrap_or_default().to_string(),
        subresource: e["subresource"].as_str().map(String::from),
        fields: from_fields_v1(&e["fieldsV1"]),
    }
}

/// [`Entry::is`] on an entry's JSON.
fn entry_is(e: &Value, manager: &str, operation: &str, sub: Option<&str>) -> bool {
    e["manager"].as_str().unwrap_or_default() == manager
        && e["operation"].as_str().unwrap_or("Update") == operation
        && e["subresource"].as_str() == sub
}

fn entry_json(e: &Entry) -> Value {
    let mut v = json!({
        "manager": e.manager,
        "operation": e.operation,
        "apiVersion": e.api_version,
        "time": e.time,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(&e.fields),
    });
    if let Some(s) = &e.subresource {
        v["subresource"] = json!(s);
    }
    v
}

/// Writes `entries` into `metadata.managedFields` (dropping empty ones).
pub fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let list = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(entry_json)
        .collect();
    set_entry_values(obj, list);
}

/// Writes entries' JSON into `metadata.managedFields` in the server's order: operation, time,
/// manager, subresource.
fn set_entry_values(obj: &mut Value, mut list: Vec<Value>) {
    let key = |e: &Value| {
        (
            e["operation"].as_str().unwrap_or("Update").to_string(),
            e["time"].as_str().unwrap_or_default().to_string(),
            e["manager"].as_str().unwrap_or_default().to_string(),
            e["subresource"].as_str().map(String::from),
        )
    };
    list.sort_by_cached_key(key);
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Who is writing: manager, API version used, time, scope.
#[derive(Clone, Debug)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub time: &'a str,
    pub scope: Scope,
}

/// What a write changed and removed, path by path (the definition): `changed` are the paths of
/// the new field set whose value differs from the old one (a map or keyed element with content
/// on both sides is not changed by its content alone), `removed` the old field set's paths the
/// new one lacks.
fn changed_and_removed_by_path(
    old: Option<&Value>,
    new: &Value,
    shape: Shape,
    scope: Scope,
) -> (FieldSet, FieldSet) {
    let null = Value::Null;
    let old_fields = old.map(|o| fields_of(o, shape, scope)).unwrap_or_default();
    let new_fields = fields_of(new, shape, scope);
    let changed: FieldSet = new_fields
        .iter()
        .filter(|p| match (get(old.unwrap_or(&null), p), get(new, p)) {
            (Some(a), Some(b)) => a != b && !(is_node(a) && is_node(b)),
            (a, b) => a != b,
        })
        .cloned()
        .collect();
    let removed: FieldSet = old_fields.difference(&new_fields).cloned().collect();
    (changed, removed)
}

/// How a value was reached, which decides how [`collect`] expands it: a field or keyed element
/// (`collect`), a list (`collect_list`), or a set element (a leaf).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reached {
    Field,
    List,
    SetElement,
}

impl Reached {
    fn of_field(v: &Value) -> Reached {
        if v.is_array() {
            Reached::List
        } else {
            Reached::Field
        }
    }
}

/// How a child's token finds its counterpart in the other object (as [`get`] does: the first
/// match).
enum Lookup {
    Field,
    Keyed(Vec<String>),
    Element,
}

struct Child<'a> {
    token: String,
    value: &'a Value,
    reached: Reached,
    /// The field name the child adds to the schema path (`None` for list elements).
    name: Option<&'a str>,
}

/// A list map whose elements repeat a key: [`get`] reads the first of them only, so the
/// path-by-path definition is followed instead.
struct RepeatedKey;

/// The children [`collect`] / [`collect_list`] give `v` (reached as `reached`, at schema path
/// `names`), and how their tokens are looked up.
fn children<'a>(
    v: &'a Value,
    reached: Reached,
    shape: Shape,
    names: &[String],
) -> Result<(Vec<Child<'a>>, Lookup), RepeatedKey> {
    match (reached, v) {
        (Reached::Field, Value::Object(m)) if !m.is_empty() && !shape.map_is_atomic(names) => {
            let kids = m
                .iter()
                .map(|(k, child)| Child {
                    token: format!("f:{k}"),
                    value: child,
                    reached: Reached::of_field(child),
                    name: Some(k.as_str()),
                })
                .collect();
            Ok((kids, Lookup::Field))
        }
        (Reached::List, Value::Array(items)) if !items.is_empty() => match shape.list_type(names) {
            ListType::Map(keys) if !keys.is_empty() => {
                let tokens: Option<Vec<String>> =
                    items.iter().map(|i| key_token(i, &keys)).collect();
                let Some(tokens) = tokens else {
                    return Ok((vec![], Lookup::Element));
                };
                let distinct: BTreeSet<&String> = tokens.iter().collect();
                if distinct.len() != tokens.len() {
                    return Err(RepeatedKey);
                }
                let kids = items
                    .iter()
                    .zip(tokens)
                    .map(|(item, token)| Child {
                        token,
                        value: item,
                        reached: Reached::Field,
                        name: None,
                    })
                    .collect();
                Ok((kids, Lookup::Keyed(keys)))
            }
            ListType::Set => {
                let kids = items
                    .iter()
                    .map(|item| Child {
                        token: format!("v:{item}"),
                        value: item,
                        reached: Reached::SetElement,
                        name: None,
                    })
                    .collect();
                Ok((kids, Lookup::Element))
            }
            _ => Ok((vec![], Lookup::Element)),
        },
        _ => Ok((vec![], Lookup::Element)),
    }
}

/// The counterpart of `child` (a child of the new object) in `other` (the old object's value at
/// the parent path), as [`get`] finds it.
fn counterpart<'a>(other: Option<&'a Value>, lookup: &Lookup, child: &Child) -> Option<&'a Value> {
    let other = other?;
    match (lookup, child.name) {
        (Lookup::Field, Some(name)) => other.as_object()?.get(name),
        (Lookup::Keyed(keys), _) => other
            .as_array()?
            .iter()
            .find(|i| keys.iter().all(|k| i.get(k) == child.value.get(k))),
        _ => other.as_array()?.iter().find(|i| *i == child.value),
    }
}

/// A path the field sets never hold (stripped or outside the scope).
fn excluded(p: &Path, scope: Scope) -> bool {
    stripped(p) || !scope.admits(p)
}

/// A path none of whose descendants the field sets hold either.
fn excluded_below(p: &Path, scope: Scope) -> bool {
    !scope.admits(p) || (p.len() >= 2 && stripped(p))
}

struct Diff<'s> {
    shape: Shape<'s>,
    scope: Scope,
    changed: FieldSet,
    removed: FieldSet,
}

impl Diff<'_> {
    /// `new` (reached as `reached`) at path `cur` against `old`, the old object's value at the
    /// same path as [`get`] finds it; `old_reached`: how the old field set reached it (`None`:
    /// the old field set does not hold the path).
    fn walk(
        &mut self,
        old: Option<&Value>,
        old_reached: Option<Reached>,
        new: &Value,
        reached: Reached,
        names: &mut Vec<String>,
        cur: &mut Path,
    ) -> Result<(), RepeatedKey> {
        // equal values: every path below reads the same on both sides, and both field sets
        // hold the same paths below (or the old one none)
        if old == Some(new) {
            return Ok(());
        }
        let both_nodes = old.is_some_and(is_node) && is_node(new);
        if !cur.is_empty() && !both_nodes && !excluded(cur, self.scope) {
            self.changed.insert(cur.clone());
        }
        let (kids, lookup) = children(new, reached, self.shape, names)?;
        let old_kids = match (old, old_reached) {
            (Some(o), Some(r)) => children(o, r, self.shape, names)?.0,
            _ => vec![],
        };
        for kid in &kids {
            cur.push(kid.token.clone());
            if !excluded_below(cur, self.scope) {
                let other = counterpart(old, &lookup, kid);
                let other_reached = old_kids
                    .iter()
                    .find(|o| o.token == kid.token)
                    .map(|o| o.reached);
                if let Some(n) = kid.name {
                    names.push(n.to_string());
                }
                self.walk(other, other_reached, kid.value, kid.reached, names, cur)?;
                if kid.name.is_some() {
                    names.pop();
                }
            }
            cur.pop();
        }
        for gone in old_kids
            .iter()
            .filter(|o| !kids.iter().any(|k| k.token == o.token))
        {
            cur.push(gone.token.clone());
            if !excluded_below(cur, self.scope) {
                if let Some(n) = gone.name {
                    names.push(n.to_string());
                }
                let mut below = FieldSet::new();
                match (gone.reached, gone.value) {
                    (Reached::List, Value::Array(items)) => {
                        collect_list(items, self.shape, names, cur, &mut below)
                    }
                    (Reached::SetElement, _) => {
                        below.insert(cur.clone());
                    }
                    (_, v) => collect(v, self.shape, names, cur, &mut below),
                }
                below.retain(|p| !excluded(p, self.scope));
                self.removed.extend(below);
                if gone.name.is_some() {
                    names.pop();
                }
            }
            cur.pop();
        }
        Ok(())
    }
}

/// [`changed_and_removed_by_path`], walking only the subtrees where the objects differ (a pod's
/// status write compares its status, not every field of the pod path by path).
fn changed_and_removed(
    old: Option<&Value>,
    new: &Value,
    shape: Shape,
    scope: Scope,
) -> (FieldSet, FieldSet) {
    // the root itself is a field only when it is not an object with fields
    let root_object = |v: &Value| v.as_object().is_some_and(|m| !m.is_empty());
    if !root_object(new) || !old.is_none_or(root_object) {
        return changed_and_removed_by_path(old, new, shape, scope);
    }
    let mut d = Diff {
        shape,
        scope,
        changed: FieldSet::new(),
        removed: FieldSet::new(),
    };
    match d.walk(
        old,
        old.map(|_| Reached::Field),
        new,
        Reached::Field,
        &mut vec![],
        &mut vec![],
    ) {
        Ok(()) => (d.changed, d.removed),
        Err(RepeatedKey) => changed_and_removed_by_path(old, new, shape, scope),
    }
}

/// Ownership after a non-apply write (create, update, patch): the writer takes every field it
/// changed; fields that disappeared leave every owner. A write that changes no owned field
/// leaves `managedFields` as they were (stored objects hold them as [`set_entries`] wrote them).
pub fn record_update(old: Option<&Value>, new: &mut Value, shape: Shape, w: &Writer) {
    let (changed, removed) = changed_and_removed(old, new, shape, w.scope);
    if changed.is_empty() && removed.is_empty() {
        let kept = old
            .and_then(|o| o["metadata"].get("managedFields"))
            .filter(|m| m.as_array().is_some_and(|l| !l.is_empty()));
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            match kept {
                Some(mf) if meta.get("managedFields") != Some(mf) => {
                    meta.insert("managedFields".into(), mf.clone());
                }
                Some(_) => {}
                None => {
                    meta.remove("managedFields");
                }
            }
        }
        return;
    }
    let sub = w.scope.subresource();
    let olds = old
        .and_then(|o| o["metadata"]["managedFields"].as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    // entries the write does not touch keep their JSON as stored: only the writer's entry and
    // those losing a field are decoded and encoded again
    let mut kept: Vec<Value> = Vec::with_capacity(olds.len() + 1);
    let mut mine: Option<Entry> = None;
    for raw in olds {
        let writers = entry_is(raw, w.manager, "Update", sub);
        let loses = |p: &Path| v1_contains(&raw["fieldsV1"], p);
        let touched = removed.iter().any(loses) || (!writers && changed.iter().any(loses));
        // the writer's first entry is decoded to take the changed fields
        let takes = writers && mine.is_none();
        if !(touched || takes) {
            kept.push(raw.clone());
            continue;
        }
        let mut e = entry_of(raw);
        e.fields.retain(|p| !removed.contains(p));
        if !writers {
            e.fields.retain(|p| !changed.contains(p));
        }
        match (writers, &mine) {
            (true, None) => mine = Some(e),
            _ if !e.fields.is_empty() => kept.push(entry_json(&e)),
            _ => {}
        }
    }
    if !changed.is_empty() {
        match mine.as_mut() {
            Some(e) => {
                e.fields.extend(changed);
                e.time = w.time.to_string();
                e.api_version = w.api_version.to_string();
            }
            None => {
                mine = Some(Entry {
                    manager: w.manager.to_string(),
                    operation: "Update".into(),
                    api_version: w.api_version.to_string(),
                    time: w.time.to_string(),
                    subresource: sub.map(String::from),
                    fields: changed,
                })
            }
        }
    }
    if let Some(e) = mine.filter(|e| !e.fields.is_empty()) {
        kept.push(entry_json(&e));
    }
    set_entry_values(new, kept);
}

/// Whether FieldsV1 JSON holds `p` (as a leaf `{}` or a node marked `"."`), without decoding it.
fn v1_contains(v1: &Value, p: &Path) -> bool {
    let mut node = v1;
    for tok in p {
        match node.get(tok) {
            Some(n) => node = n,
            None => return false,
        }
    }
    node.as_object()
        .is_some_and(|m| m.is_empty() || m.contains_key("."))
}

fn merge_into(live: &mut Value, applied: &Value, shape: Shape, names: &mut Vec<String>) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) if !shape.map_is_atomic(names) => {
            for (k, av) in a {
                names.push(k.clone());
                match l.get_mut(k) {
                    Some(lv) => merge_into(lv, av, shape, names),
                    None => {
                        l.insert(k.clone(), av.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(l), Value::Array(a)) => match shape.list_type(names) {
            ListType::Map(keys) if !keys.is_empty() => {
                for item in a {
                    let tok = key_token(item, &keys);
                    let found = tok.as_ref().and_then(|t| {
                        l.iter_mut()
                            .find(|li| key_token(li, &keys).as_ref() == Some(t))
                    });
                    match found {
                        Some(li) => merge_into(li, item, shape, names),
                        None => l.push(item.clone()),
                    }
                }
            }
            ListType::Set => {
                for item in a {
                    if !l.contains(item) {
                        l.push(item.clone());
                    }
                }
            }
            _ => *l = a.clone(),
        },
        (l, a) => *l = a.clone(),
    }
}

fn path_string(p: &Path) -> String {
    let mut s = String::new();
    for tok in p {
        match parse_token(tok) {
            Some(('f', Value::String(f))) => {
                s.push('.');
                s.push_str(&f);
            }
            Some(('k', Value::Object(m))) => {
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            Some((_, v)) => s.push_str(&format!("[={v}]")),
            None => s.push_str(tok),
        }
    }
    s
}

fn print_manager(e: &Entry) -> String {
    let mut m = format!("{:?}", e.manager);
    if let Some(s) = &e.subresource {
        m = format!("{m} with subresource {s:?}");
    }
    if e.operation == "Update" {
        m = format!("{m} using {}", e.api_version);
    }
    m
}

/// Server-side apply of `applied` (already scoped) over `live` (`None`: create).
///
/// Returns the merged object with updated `managedFields`, or the 409 conflict error.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    force: bool,
    shape: Shape,
    w: &Writer,
) -> Result<Value, ApiError> {
    let mut list = live.map(entries).unwrap_or_default();
    // an applier owns what it set: leaves and list elements, not the maps and merged lists
    // around them (an Update owns those too: `"."` in its FieldsV1)
    let applied_fields: FieldSet = fields_of(applied, shape, w.scope)
        .into_iter()
        .filter(|p| {
            if p.last()
                .is_some_and(|t| t.starts_with("k:") || t.starts_with("v:"))
            {
                return true;
            }
            match get(applied, p) {
                Some(v) if is_node(v) => false,
                Some(Value::Array(items)) if !items.is_empty() => {
                    shape_list(shape, p) == ListType::Atomic
                }
                _ => true,
            }
        })
        .collect();
    let sub = w.scope.subresource();
    let mut conflicts: Vec<(usize, Path)> = vec![];
    if let Some(live) = live {
        for p in &applied_fields {
            let Some(lv) = get(live, p) else { continue };
            let av = get(applied, p);
            if av == Some(lv) || (is_node(lv) && av.is_some_and(is_node)) {
                continue;
            }
            for (i, e) in list.iter().enumerate() {
                if e.manager != w.manager && e.fields.contains(p) {
                    conflicts.push((i, p.clone()));
                }
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let causes = conflicts
            .iter()
            .map(|(i, p)| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", print_manager(&list[*i])), "field": path_string(p)})
            })
            .collect();
        let message = if conflicts.len() == 1 {
            let (i, p) = &conflicts[0];
            format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                print_manager(&list[*i]),
                path_string(p)
            )
        } else {
            let mut by: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            for (i, p) in &conflicts {
                by.entry(print_manager(&list[*i]))
                    .or_default()
                    .push(path_string(p));
            }
            let mut lines = vec![];
            for (m, paths) in by {
                lines.push(format!("conflicts with {m}:"));
                lines.extend(paths.into_iter().map(|p| format!("- {p}")));
            }
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        };
        return Err(ApiError::apply_conflict(message, causes));
    }
    for (i, p) in &conflicts {
        list[*i].fields.remove(p);
    }
    let mut merged = live.cloned().unwrap_or_else(|| json!({}));
    merge_into(&mut merged, applied, shape, &mut vec![]);
    let previously: FieldSet = list
        .iter()
        .find(|e| e.is(w.manager, "Apply", sub))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: Vec<&Entry> = list
        .iter()
        .filter(|e| !e.is(w.manager, "Apply", sub))
        .collect();
    let mut dropped: Vec<&Path> = previously
        .difference(&applied_fields)
        .filter(|p| {
            !others
                .iter()
                .any(|e| e.fields.iter().any(|q| q.starts_with(p)))
        })
        .collect();
    // a removed element takes its fields with it (removing them first would lose its key)
    let all: Vec<&Path> = dropped.clone();
    dropped.retain(|p| !all.iter().any(|q| q.len() < p.len() && p.starts_with(q)));
    for p in dropped {
        remove(&mut merged, p);
    }
    match list.iter_mut().find(|e| e.is(w.manager, "Apply", sub)) {
        Some(e) => {
            e.fields = applied_fields;
            e.time = w.time.to_string();
            e.api_version = w.api_version.to_string();
        }
        None => list.push(Entry {
            manager: w.manager.to_string(),
            operation: "Apply".into(),
            api_version: w.api_version.to_string(),
            time: w.time.to_string(),
            subresource: sub.map(String::from),
            fields: applied_fields,
        }),
    }
    // fields that vanished from the object leave every owner
    let present = fields_of(&merged, shape, w.scope);
    for e in list.iter_mut() {
        if e.subresource.as_deref() == sub {
            e.fields.retain(|p| present.contains(p));
        }
    }
    if merged.get("metadata").is_none() {
        merged["metadata"] = json!({});
    }
    set_entries(&mut merged, &list);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Registry;
    use proptest::prelude::*;

    const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.io}
spec:
  group: example.io
  scope: Namespaced
  names: {plural: widgets, kind: Widget, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              items:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                  properties:
                    name: {type: string}
                    ports:
                      type: array
                      x-kubernetes-list-type: set
                      items: {type: integer}
              sealed:
                type: object
                x-kubernetes-map-type: atomic
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              conditions:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [type]
                items: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!(1)),
            Just(json!(2)),
            Just(json!("a")),
            Just(json!({})),
            Just(json!([])),
            Just(json!({"x": 1})),
            Just(json!([1, 2])),
        ]
    }

    /// An object field: absent (`None`) or a value.
    fn maybe<T: std::fmt::Debug>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
        proptest::option::of(s)
    }

    fn item() -> impl Strategy<Value = Value> {
        (
            maybe(prop_oneof![
                Just(json!("a")),
                Just(json!("b")),
                Just(json!("c"))
            ]),
            maybe(proptest::collection::vec(0..3i64, 0..4).prop_map(|v| json!(v))),
            maybe(leaf()),
        )
            .prop_map(|(name, ports, x)| {
                let mut m = Map::new();
                for (k, v) in [("name", name), ("ports", ports), ("x", x)] {
                    if let Some(v) = v {
                        m.insert(k.into(), v);
                    }
                }
                Value::Object(m)
            })
    }

    fn object() -> impl Strategy<Value = Value> {
        let spec = (
            maybe(proptest::collection::vec(item(), 0..4).prop_map(Value::Array)),
            maybe(leaf()),
            maybe(leaf()),
            maybe((leaf(), leaf()).prop_map(|(a, b)| json!({"a": a, "b": {"c": b}}))),
            maybe(proptest::collection::vec(item(), 0..3).prop_map(Value::Array)),
        );
        let status = (
            maybe(
                proptest::collection::vec(
                    (
                        prop_oneof![Just("A"), Just("B")],
                        prop_oneof![Just("True"), Just("False")],
                    )
                        .prop_map(|(t, s)| json!({"type": t, "status": s})),
                    0..3,
                )
                .prop_map(Value::Array),
            ),
            maybe(leaf()),
        );
        let meta = (
            maybe(leaf()),
            maybe(proptest::collection::vec(
                prop_oneof![Just("f"), Just("g")],
                0..3,
            )),
            prop_oneof![Just("1"), Just("2")],
        );
        (spec, maybe(status), meta).prop_map(
            |((items, sealed, plain, nested, containers), status, (labels, fins, rv))| {
                let mut spec = Map::new();
                for (k, v) in [
                    ("items", items),
                    ("sealed", sealed),
                    ("plain", plain),
                    ("nested", nested),
                    ("containers", containers),
                ] {
                    if let Some(v) = v {
                        spec.insert(k.into(), v);
                    }
                }
                let mut o = json!({"apiVersion": "example.io/v1", "kind": "Widget",
                    "metadata": {"name": "w", "resourceVersion": rv}, "spec": spec});
                if let Some(l) = labels {
                    o["metadata"]["labels"] = json!({"l": l});
                }
                if let Some(f) = fins {
                    o["metadata"]["finalizers"] = json!(f);
                }
                if let Some((conditions, phase)) = status {
                    o["status"] = json!({});
                    if let Some(c) = conditions {
                        o["status"]["conditions"] = c;
                    }
                    if let Some(p) = phase {
                        o["status"]["phase"] = p;
                    }
                }
                o
            },
        )
    }

    fn registry() -> Registry {
        let mut r = Registry::with_builtins();
        r.add_crds_yaml(CRD).unwrap();
        r
    }

    proptest! {
        /// The walk over the differing subtrees gives the path-by-path definition's sets, on a
        /// CRD (list maps, sets, an atomic map, repeated keys) and on Pods (the built-in merge
        /// keys), in every scope, for creates and updates.
        #[test]
        fn the_subtree_walk_finds_what_the_path_by_path_comparison_finds(
            old in object(),
            new in object(),
            create in any::<bool>(),
        ) {
            let r = registry();
            let widgets = r.find("example.io", "v1", "widgets").unwrap();
            let pods = r.find("", "v1", "pods").unwrap();
            for rt in [&widgets, &pods] {
                let shape = Shape { rt, version: "v1" };
                for scope in [
                    Scope::Main { status_separate: true },
                    Scope::Main { status_separate: false },
                    Scope::Status,
                ] {
                    let old = (!create).then_some(&old);
                    prop_assert_eq!(
                        changed_and_removed(old, &new, shape, scope),
                        changed_and_removed_by_path(old, &new, shape, scope)
                    );
                }
            }
        }
    }

    /// Ownership after a write as the definition gives it: every entry decoded, the rules
    /// applied, every entry encoded again.
    fn record_update_decoding_every_entry(
        old: Option<&Value>,
        new: &mut Value,
        shape: Shape,
        w: &Writer,
    ) {
        let (changed, removed) = changed_and_removed(old, new, shape, w.scope);
        if changed.is_empty() && removed.is_empty() {
            return record_update(old, new, shape, w);
        }
        let mut list = old.map(entries).unwrap_or_default();
        let sub = w.scope.subresource();
        for e in list.iter_mut() {
            e.fields.retain(|p| !removed.contains(p));
            if !e.is(w.manager, "Update", sub) {
                e.fields.retain(|p| !changed.contains(p));
            }
        }
        match list.iter_mut().find(|e| e.is(w.manager, "Update", sub)) {
            Some(e) if !changed.is_empty() => {
                e.fields.extend(changed);
                e.time = w.time.to_string();
                e.api_version = w.api_version.to_string();
            }
            Some(_) => {}
            None if !changed.is_empty() => list.push(Entry {
                manager: w.manager.to_string(),
                operation: "Update".into(),
                api_version: w.api_version.to_string(),
                time: w.time.to_string(),
                subresource: sub.map(String::from),
                fields: changed,
            }),
            None => {}
        }
        set_entries(new, &list);
    }

    proptest! {
        /// Keeping the JSON of the entries a write does not touch gives what decoding and
        /// encoding every entry gives, over a run of writes by three managers in both scopes.
        #[test]
        fn untouched_entries_kept_as_stored_match_the_decoded_rules(
            writes in proptest::collection::vec((object(), 0..3usize, any::<bool>()), 1..6),
        ) {
            let r = registry();
            let widgets = r.find("example.io", "v1", "widgets").unwrap();
            let shape = Shape { rt: &widgets, version: "v1" };
            let mut stored: Option<Value> = None;
            for (i, (object, who, status)) in writes.into_iter().enumerate() {
                let time = format!("2026-01-01T00:00:0{i}Z");
                let w = Writer {
                    manager: ["a", "b", "c"][who],
                    api_version: "example.io/v1",
                    time: &time,
                    scope: if status { Scope::Status } else { Scope::Main { status_separate: false } },
                };
                let mut fast = object.clone();
                let mut reference = object;
                for o in [&mut fast, &mut reference] {
                    o["metadata"]["managedFields"] = stored
                        .as_ref()
                        .map(|s| s["metadata"]["managedFields"].clone())
                        .unwrap_or(Value::Null);
                }
                record_update(stored.as_ref(), &mut fast, shape, &w);
                record_update_decoding_every_entry(stored.as_ref(), &mut reference, shape, &w);
                prop_assert_eq!(
                    &fast["metadata"].get("managedFields"),
                    &reference["metadata"].get("managedFields")
                );
                stored = Some(fast);
            }
        }
    }

    #[test]
    fn a_write_that_changes_no_owned_field_keeps_managed_fields_as_they_were() {
        let r = registry();
        let widgets = r.find("example.io", "v1", "widgets").unwrap();
        let shape = Shape {
            rt: &widgets,
            version: "v1",
        };
        let w = |manager| Writer {
            manager,
            api_version: "example.io/v1",
            time: "2026-01-01T00:00:00Z",
            scope: Scope::Main {
                status_separate: true,
            },
        };
        let mut created = json!({"metadata": {"name": "w"}, "spec": {"plain": 1}});
        record_update(None, &mut created, shape, &w("a"));
        let owned = created["metadata"]["managedFields"].clone();
        assert_eq!(
            owned[0]["fieldsV1"],
            json!({"f:spec": {".": {}, "f:plain": {}}})
        );
        // a status change, out of the main scope, and a resourceVersion: nothing owned changes
        let mut next = created.clone();
        next["status"] = json!({"phase": "x"});
        next["metadata"]["resourceVersion"] = json!("9");
        next["metadata"]["managedFields"] = Value::Null;
        record_update(Some(&created), &mut next, shape, &w("b"));
        assert_eq!(next["metadata"]["managedFields"], owned);
        // without entries before, none after
        let bare = json!({"metadata": {"name": "w"}, "spec": {"plain": 1}});
        let mut same = bare.clone();
        same["metadata"]["managedFields"] = Value::Null;
        record_update(Some(&bare), &mut same, shape, &w("b"));
        assert!(same["metadata"].get("managedFields").is_none());
        // a change is recorded as before
        let mut changed = created.clone();
        changed["spec"]["plain"] = json!(2);
        record_update(Some(&created), &mut changed, shape, &w("b"));
        let plain: Path = vec!["f:spec".into(), "f:plain".into()];
        let owners: Vec<String> = entries(&changed)
            .into_iter()
            .filter(|e| e.fields.contains(&plain))
            .map(|e| e.manager)
            .collect();
        assert_eq!(owners, ["b"]);
    }
}
