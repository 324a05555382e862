use super::diff::{changed_and_removed, changed_and_removed_by_path};
use super::*;
use crate::server::kinds::Registry;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

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
