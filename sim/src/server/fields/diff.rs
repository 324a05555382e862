//! What a write changed and removed: by path (the definition), and by a walk of the subtrees
//! where the old and new objects differ.

use std::collections::BTreeSet;

use serde_json::Value;

use super::paths::{collect, collect_list, fields_of, get, is_node, key_token, stripped};
use super::{FieldSet, Path, Scope, Shape};
use crate::server::kinds::ListType;

/// What a write changed and removed, path by path (the definition): `changed` are the paths of
/// the new field set whose value differs from the old one (a map or keyed element with content
/// on both sides is not changed by its content alone), `removed` the old field set's paths the
/// new one lacks.
pub(super) fn changed_and_removed_by_path(
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
pub(super) fn changed_and_removed(
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
