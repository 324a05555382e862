//! The `raygate-child-suspend` ValidatingAdmissionPolicy in `config/policy/`, evaluated with a CEL
//! engine (the `cel` crate) against admission requests: only raygate releases a held child, every
//! child of an opted-in RayService is born suspended, and nothing else is ever blocked.
//!
//! The API server is emulated only as far as the policy needs: `matchConstraints` (operations,
//! resources, the objectSelector matched against the old or the new object), then every
//! `matchConditions` expression, then `variables` in order (bound as the map `variables`), then
//! `validations`. Kubernetes evaluates variables lazily and this harness eagerly, so every
//! variable must evaluate without error on every request; any CEL error fails the test, because
//! under `failurePolicy: Fail` an error would deny the request.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use cel::objects::Key;
use cel::{Context, Program, Value as Cel};
use raygate::manifest::read_documents;
use raygate_testing::core::{self, PodExt};
use serde_json::{Value, json};

const RAYGATE: &str = "system:serviceaccount:raygate-system:raygate";
const KUBERAY: &str = "system:serviceaccount:ray-system:kuberay-operator";
const RELEASE_MESSAGE: &str = "only raygate may release a RayService child held for quota: raygate unsuspends it once an admitted workload slice covers it";

// ---------------------------------------------------------------------------------------------
// The policy and a minimal admission evaluator
// ---------------------------------------------------------------------------------------------

struct Named {
    name: String,
    source: String,
    program: Program,
}

struct Validation {
    source: String,
    program: Program,
    message: String,
    reason: String,
}

struct Policy {
    spec: Value,
    match_conditions: Vec<Named>,
    variables: Vec<Named>,
    validations: Vec<Validation>,
}

/// What the API server would do with a request.
#[derive(Debug, PartialEq)]
enum Decision {
    /// `matchConstraints` (operation, resource or objectSelector) exclude the request.
    NotMatched,
    /// A `matchConditions` expression is false: the policy does not apply.
    ConditionFalse(String),
    Allowed,
    /// The messages of the failing validations.
    Denied(Vec<String>),
}

fn compile(what: &str, source: &str) -> Program {
    Program::compile(source).unwrap_or_else(|e| panic!("{what}: `{source}` does not compile: {e}"))
}

fn str_field<'a>(v: &'a Value, key: &str, what: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{what} has no string `{key}`: {v}"))
}

fn policy_docs() -> Vec<raygate::manifest::Doc> {
    policy_docs_in("config/policy")
}

fn policy_docs_in(dir: &str) -> Vec<raygate::manifest::Doc> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            read_documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|d| d.kind != "Kustomization")
        .collect()
}

fn load_policy() -> Policy {
    load_policy_from(policy_docs(), "config/policy")
}

fn load_policy_from(docs: Vec<raygate::manifest::Doc>, dir: &str) -> Policy {
    let policies: Vec<_> = docs
        .iter()
        .filter(|d| d.kind == "ValidatingAdmissionPolicy")
        .collect();
    assert_eq!(policies.len(), 1, "{dir} holds one policy");
    let spec = policies[0].value["spec"].clone();
    let named = |list: &str| -> Vec<Named> {
        spec[list]
            .as_array()
            .unwrap_or_else(|| panic!("spec.{list} is missing"))
            .iter()
            .map(|item| {
                let name = str_field(item, "name", list).to_string();
                let source = str_field(item, "expression", list).to_string();
                let program = compile(&format!("{list} {name}"), &source);
                Named {
                    name,
                    source,
                    program,
                }
            })
            .collect()
    };
    let match_conditions = named("matchConditions");
    let variables = named("variables");
    let validations = spec["validations"]
        .as_array()
        .expect("spec.validations")
        .iter()
        .map(|v| {
            let source = str_field(v, "expression", "validation").to_string();
            Validation {
                program: compile("validation", &source),
                source,
                message: str_field(v, "message", "validation").to_string(),
                reason: str_field(v, "reason", "validation").to_string(),
            }
        })
        .collect();
    Policy {
        spec,
        match_conditions,
        variables,
        validations,
    }
}

/// JSON as CEL sees a decoded Kubernetes object: integers are `int`.
fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().expect("a JSON number is an f64")),
        },
        Value::String(s) => Cel::from(s.as_str()),
        Value::Array(items) => Cel::from(items.iter().map(to_cel).collect::<Vec<_>>()),
        Value::Object(map) => Cel::from(
            map.iter()
                .map(|(k, v)| (Key::from(k.as_str()), to_cel(v)))
                .collect::<HashMap<_, _>>(),
        ),
    }
}

/// An admission request for a RayCluster.
#[derive(Clone, Debug)]
struct Request {
    operation: &'static str,
    username: &'static str,
    object: Value,
    old_object: Value,
    /// (group, resource, kind): a RayCluster unless built by [`Request::pod_update`].
    target: (&'static str, &'static str, &'static str),
}

const RAYCLUSTERS: (&str, &str, &str) = ("ray.io", "rayclusters", "RayCluster");

impl Request {
    fn create(username: &'static str, object: Value) -> Request {
        Request {
            operation: "CREATE",
            username,
            object,
            old_object: Value::Null,
            target: RAYCLUSTERS,
        }
    }

    fn update(username: &'static str, old_object: Value, object: Value) -> Request {
        Request {
            operation: "UPDATE",
            username,
            object,
            old_object,
            target: RAYCLUSTERS,
        }
    }

    fn pod_update(username: &'static str, old_object: Value, object: Value) -> Request {
        Request {
            target: ("", "pods", "Pod"),
            ..Request::update(username, old_object, object)
        }
    }

    fn delete(username: &'static str, old_object: Value) -> Request {
        Request {
            operation: "DELETE",
            username,
            object: Value::Null,
            old_object,
            target: RAYCLUSTERS,
        }
    }

    fn cel_request(&self) -> Value {
        let name = if self.object.is_null() {
            &self.old_object
        } else {
            &self.object
        }["metadata"]["name"]
            .clone();
        let (group, resource, kind) = self.target;
        let version = "v1";
        json!({
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "name": name,
            "namespace": "serving",
            "operation": self.operation,
            "userInfo": {"username": self.username, "groups": ["system:authenticated"]},
            "dryRun": false,
        })
    }
}

fn labels_match_selector(labels: &Value, selector: &Value) -> bool {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let match_labels_ok = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let expressions_ok = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = str_field(e, "key", "matchExpression");
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match str_field(e, "operator", "matchExpression") {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                op => panic!("unknown selector operator {op}"),
            }
        });
    match_labels_ok && expressions_ok
}

impl Policy {
    /// `matchConstraints`: operation and resource rules, and the objectSelector, which matches
    /// when either the old or the new object matches it.
    fn constraints_match(&self, req: &Request) -> bool {
        let constraints = &self.spec["matchConstraints"];
        let rule_matches = constraints["resourceRules"]
            .as_array()
            .expect("matchConstraints.resourceRules")
            .iter()
            .any(|rule| {
                let has = |field: &str, want: &str| {
                    rule[field]
                        .as_array()
                        .is_some_and(|l| l.iter().any(|v| v == want || v == "*"))
                };
                has("apiGroups", req.target.0)
                    && has("apiVersions", "v1")
                    && has("resources", req.target.1)
                    && has("operations", req.operation)
            });
        let selector = &constraints["objectSelector"];
        let selected = selector.is_null()
            || [&req.object, &req.old_object]
                .into_iter()
                .any(|o| !o.is_null() && labels_match_selector(&o["metadata"]["labels"], selector));
        rule_matches && selected
    }

    fn eval_bool(&self, what: &str, source: &str, program: &Program, ctx: &Context) -> bool {
        match program.execute(ctx) {
            Ok(Cel::Bool(b)) => b,
            other => panic!("{what} `{source}` did not evaluate to a bool: {other:?}"),
        }
    }

    fn base_context(&self, req: &Request) -> Context<'static, 'static> {
        let mut ctx = Context::default();
        ctx.add_variable_from_value("object", to_cel(&req.object));
        ctx.add_variable_from_value("oldObject", to_cel(&req.old_object));
        ctx.add_variable_from_value("request", to_cel(&req.cel_request()));
        ctx
    }

    /// Only the matchConditions, assuming the constraints matched.
    fn conditions(&self, req: &Request) -> Result<(), String> {
        let ctx = self.base_context(req);
        for c in &self.match_conditions {
            if !self.eval_bool("matchCondition", &c.source, &c.program, &ctx) {
                return Err(c.name.clone());
            }
        }
        Ok(())
    }

    fn admit(&self, req: &Request) -> Decision {
        if !self.constraints_match(req) {
            return Decision::NotMatched;
        }
        if let Err(name) = self.conditions(req) {
            return Decision::ConditionFalse(name);
        }
        let mut values: HashMap<Key, Cel> = HashMap::new();
        for v in &self.variables {
            let mut ctx = self.base_context(req);
            ctx.add_variable_from_value("variables", values.clone());
            let value = v.program.execute(&ctx).unwrap_or_else(|e| {
                panic!("variable {} `{}` failed on {req:?}: {e}", v.name, v.source)
            });
            values.insert(Key::from(v.name.as_str()), value);
        }
        let mut ctx = self.base_context(req);
        ctx.add_variable_from_value("variables", values);
        let denied: Vec<String> = self
            .validations
            .iter()
            .filter(|v| !self.eval_bool("validation", &v.source, &v.program, &ctx))
            .map(|v| v.message.clone())
            .collect();
        if denied.is_empty() {
            Decision::Allowed
        } else {
            Decision::Denied(denied)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// The labels KubeRay puts on a child of RayService `svc-llm` that is opted in to queue team-a.
fn opted_in() -> Vec<(&'static str, &'static str)> {
    vec![
        ("ray.io/originated-from-cr-name", "svc-llm"),
        ("ray.io/originated-from-crd", "RayService"),
        ("kueue.x-k8s.io/queue-name", "team-a"),
    ]
}

/// The labels of the same child when its RayService opts in with raygate's own label.
fn opted_in_by_raygate_label() -> Vec<(&'static str, &'static str)> {
    vec![
        ("ray.io/originated-from-cr-name", "svc-llm"),
        ("ray.io/originated-from-crd", "RayService"),
        ("raygate.io/queue-name", "team-a"),
    ]
}

/// A child of a RayService that is not opted in: no queue label.
fn not_opted_in() -> Vec<(&'static str, &'static str)> {
    vec![
        ("ray.io/originated-from-cr-name", "svc-llm"),
        ("ray.io/originated-from-crd", "RayService"),
    ]
}

/// A RayCluster with `labels` and `spec.suspend` set to `suspend` (absent when `None`).
fn raycluster(labels: &[(&str, &str)], suspend: Option<bool>) -> Value {
    let mut cluster = json!({
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "svc-llm-9fq4d",
            "namespace": "serving",
            "annotations": {"ray.io/kuberay-version": "v1.7.0"},
        },
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                {"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}}},
            "workerGroupSpecs": [{
                "groupName": "gpu-workers", "replicas": 2, "minReplicas": 1, "maxReplicas": 4,
                "rayStartParams": {},
                "template": {"spec": {"containers": [
                    {"name": "ray-worker", "image": "rayproject/ray:2.52.0"}]}},
            }],
        },
    });
    if !labels.is_empty() {
        cluster["metadata"]["labels"] = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), Value::from(*v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if let Some(s) = suspend {
        cluster["spec"]["suspend"] = Value::Bool(s);
    }
    cluster
}

fn held() -> Value {
    raycluster(&opted_in(), Some(true))
}

fn released() -> Value {
    raycluster(&opted_in(), Some(false))
}

fn denied_with(message: &str) -> Decision {
    Decision::Denied(vec![message.to_string()])
}

// ---------------------------------------------------------------------------------------------
// Structure
// ---------------------------------------------------------------------------------------------

#[test]
fn every_expression_compiles_and_every_validation_explains_itself() {
    let policy = load_policy();
    assert_eq!(policy.match_conditions.len(), 1);
    assert!(
        policy
            .variables
            .iter()
            .any(|v| v.source.contains(&format!("'{RAYGATE}'"))),
        "a variable names raygate's ServiceAccount"
    );
    assert_eq!(policy.validations.len(), 3);
    for v in &policy.validations {
        assert!(
            v.message.len() > 40,
            "validation `{}` needs a message",
            v.source
        );
        assert!(
            v.message.contains("raygate"),
            "message says who may do it: {}",
            v.message
        );
        assert_eq!(v.reason, "Forbidden");
        // The API server rejects a policy whose message has a line break.
        assert!(
            !v.message.contains('\n'),
            "one-line message: {:?}",
            v.message
        );
    }
    assert!(
        policy
            .validations
            .iter()
            .any(|v| v.message == RELEASE_MESSAGE),
        "the release rule keeps its documented message"
    );
    assert_eq!(policy.spec["failurePolicy"], "Fail");
}

#[test]
fn the_policy_applies_to_raycluster_create_and_update_only_never_status_or_delete() {
    let policy = load_policy();
    let rules = policy.spec["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap();
    for rule in rules {
        assert_eq!(rule["apiGroups"], json!(["ray.io"]));
        assert_eq!(rule["resources"], json!(["rayclusters"]), "no /status");
        assert_eq!(rule["operations"], json!(["CREATE", "UPDATE"]));
    }
    assert_eq!(
        policy.admit(&Request::delete(KUBERAY, held())),
        Decision::NotMatched
    );
    assert_eq!(
        policy.admit(&Request::delete("alice", held())),
        Decision::NotMatched
    );
}

#[test]
fn the_binding_denies_with_this_policy() {
    let docs = policy_docs();
    let bindings: Vec<_> = docs
        .iter()
        .filter(|d| d.kind == "ValidatingAdmissionPolicyBinding")
        .collect();
    assert_eq!(bindings.len(), 1);
    let spec = &bindings[0].value["spec"];
    assert_eq!(spec["policyName"], "raygate-child-suspend");
    assert_eq!(spec["validationActions"], json!(["Deny"]));
    assert!(docs.iter().any(|d| d.kind == "ValidatingAdmissionPolicy"
        && d.value["metadata"]["name"] == "raygate-child-suspend"));
}

#[test]
fn the_cel_engine_agrees_with_kubernetes_on_the_constructs_the_policy_relies_on() {
    // Guards only work if `&&` stops at a false left side, as Kubernetes' cel-go does.
    let run = |src: &str, ctx: &Context| compile("probe", src).execute(ctx);
    let mut ctx = Context::default();
    ctx.add_variable_from_value("oldObject", Cel::Null);
    ctx.add_variable_from_value("o", to_cel(&json!({"spec": {"suspend": null}})));
    assert_eq!(
        run("false && has(oldObject.spec.suspend)", &ctx),
        Ok(Cel::Bool(false))
    );
    assert_eq!(
        run("true || has(oldObject.spec.suspend)", &ctx),
        Ok(Cel::Bool(true))
    );
    assert_eq!(run("o.spec.suspend == true", &ctx), Ok(Cel::Bool(false)));
    assert_eq!(run("has(o.spec.replicas)", &ctx), Ok(Cel::Bool(false)));
    assert_eq!(run("'suspend' in o.spec", &ctx), Ok(Cel::Bool(true)));
    // What the policy must not do: touch a field of a missing object without a guard.
    assert!(run("has(oldObject.spec)", &ctx).is_err());
}

// ---------------------------------------------------------------------------------------------
// Behaviour
// ---------------------------------------------------------------------------------------------

#[test]
fn raygate_may_release_a_held_child() {
    let policy = load_policy();
    assert_eq!(
        policy.admit(&Request::update(RAYGATE, held(), released())),
        Decision::Allowed
    );
    let unset = raycluster(&opted_in(), None);
    assert_eq!(
        policy.admit(&Request::update(RAYGATE, held(), unset)),
        Decision::Allowed
    );
}

#[test]
fn nobody_else_may_release_a_held_child() {
    let policy = load_policy();
    for user in [
        KUBERAY,
        "alice",
        "system:serviceaccount:serving:raygate",
        "system:serviceaccount:raygate-system:default",
        "system:admin",
    ] {
        for new in [released(), raycluster(&opted_in(), None)] {
            assert_eq!(
                policy.admit(&Request::update(user, held(), new)),
                denied_with(RELEASE_MESSAGE),
                "{user}"
            );
        }
        let mut no_spec = held();
        no_spec.as_object_mut().unwrap().remove("spec");
        assert_eq!(
            policy.admit(&Request::update(user, held(), no_spec)),
            denied_with(RELEASE_MESSAGE),
            "{user}: dropping spec"
        );
        let mut null_suspend = held();
        null_suspend["spec"]["suspend"] = Value::Null;
        assert_eq!(
            policy.admit(&Request::update(user, held(), null_suspend)),
            denied_with(RELEASE_MESSAGE),
            "{user}: suspend: null"
        );
    }
}

#[test]
fn updates_that_keep_a_child_held_pass() {
    let policy = load_policy();
    let mut relabelled = held();
    relabelled["metadata"]["labels"]["team"] = json!("search");
    let mut scaled = held();
    scaled["spec"]["workerGroupSpecs"][0]["replicas"] = json!(4);
    let mut annotated = held();
    annotated["metadata"]["annotations"]["ray.io/kuberay-version"] = json!("v1.7.1");
    let mut queue_changed = held();
    queue_changed["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("team-b");
    let mut finalizer_gone = held();
    finalizer_gone["metadata"]["deletionTimestamp"] = json!("2026-11-01T08:00:00Z");
    for user in [KUBERAY, "alice", RAYGATE] {
        for new in [
            held(),
            relabelled.clone(),
            scaled.clone(),
            annotated.clone(),
            queue_changed.clone(),
            finalizer_gone.clone(),
        ] {
            assert_eq!(
                policy.admit(&Request::update(user, held(), new)),
                Decision::Allowed,
                "{user}"
            );
        }
    }
}

#[test]
fn anyone_may_suspend_a_running_child_again() {
    let policy = load_policy();
    for user in [KUBERAY, "alice"] {
        assert_eq!(
            policy.admit(&Request::update(user, released(), held())),
            Decision::Allowed
        );
        assert_eq!(
            policy.admit(&Request::update(
                user,
                raycluster(&opted_in(), None),
                held()
            )),
            Decision::Allowed
        );
    }
}

#[test]
fn a_child_released_earlier_may_be_updated_by_anyone() {
    let policy = load_policy();
    let mut scaled = released();
    scaled["spec"]["workerGroupSpecs"][0]["replicas"] = json!(3);
    let unset = raycluster(&opted_in(), None);
    let mut unset_scaled = unset.clone();
    unset_scaled["spec"]["workerGroupSpecs"][0]["replicas"] = json!(3);
    for user in [KUBERAY, "alice"] {
        assert_eq!(
            policy.admit(&Request::update(user, released(), scaled.clone())),
            Decision::Allowed
        );
        assert_eq!(
            policy.admit(&Request::update(user, released(), unset.clone())),
            Decision::Allowed
        );
        assert_eq!(
            policy.admit(&Request::update(user, unset.clone(), unset_scaled.clone())),
            Decision::Allowed
        );
    }
}

#[test]
fn children_of_rayservices_without_a_queue_are_not_matched() {
    let policy = load_policy();
    let old = raycluster(&not_opted_in(), Some(true));
    let new = raycluster(&not_opted_in(), Some(false));
    for req in [
        Request::update(KUBERAY, old.clone(), new.clone()),
        Request::create(KUBERAY, raycluster(&not_opted_in(), None)),
    ] {
        assert_eq!(
            policy.conditions(&req),
            Err("opted-in-rayservice-child".into())
        );
        // a selector cannot say "either opt-in label": the objectSelector narrows to RayService
        // children, the match condition to opted-in ones
        assert!(policy.constraints_match(&req), "{req:?}");
        assert_eq!(
            policy.admit(&req),
            Decision::ConditionFalse("opted-in-rayservice-child".into())
        );
    }
}

#[test]
fn plain_rayclusters_and_rayjob_children_are_not_matched() {
    let policy = load_policy();
    let rayjob_child = [
        ("ray.io/originated-from-cr-name", "train"),
        ("ray.io/originated-from-crd", "RayJob"),
        ("kueue.x-k8s.io/queue-name", "team-a"),
    ];
    let queued_plain = [("kueue.x-k8s.io/queue-name", "team-a")];
    for labels in [
        &[][..],
        &[("app", "x")][..],
        &rayjob_child[..],
        &queued_plain[..],
    ] {
        let create = Request::create(KUBERAY, raycluster(labels, None));
        let update = Request::update(
            "alice",
            raycluster(labels, Some(true)),
            raycluster(labels, Some(false)),
        );
        for req in [create, update] {
            assert!(policy.conditions(&req).is_err(), "{labels:?}");
            assert_eq!(policy.admit(&req), Decision::NotMatched, "{labels:?}");
        }
    }
}

#[test]
fn children_are_born_suspended() {
    let policy = load_policy();
    let create_message = &policy.validations[0].message;
    for user in [KUBERAY, "alice"] {
        for suspend in [None, Some(false)] {
            assert_eq!(
                policy.admit(&Request::create(user, raycluster(&opted_in(), suspend))),
                denied_with(create_message),
                "{user} {suspend:?}"
            );
        }
        assert_eq!(
            policy.admit(&Request::create(user, held())),
            Decision::Allowed
        );
    }
    assert_eq!(
        policy.admit(&Request::create(RAYGATE, released())),
        Decision::Allowed
    );
}

#[test]
fn dropping_the_opt_in_labels_does_not_escape_the_policy() {
    let policy = load_policy();
    let label_message = &policy.validations[2].message;
    // Unsuspending while removing the queue label in the same update: matched through oldObject.
    let escaped = raycluster(&not_opted_in(), Some(false));
    let req = Request::update("alice", held(), escaped.clone());
    assert_eq!(policy.conditions(&req), Ok(()));
    assert!(policy.constraints_match(&req));
    assert_eq!(
        policy.admit(&req),
        Decision::Denied(vec![RELEASE_MESSAGE.to_string(), label_message.clone()])
    );
    // Removing the labels first, to unsuspend unmatched later: the first step is denied.
    for labels in [
        not_opted_in(),
        vec![],
        vec![("ray.io/originated-from-crd", "RayJob")],
    ] {
        assert_eq!(
            policy.admit(&Request::update(
                "alice",
                held(),
                raycluster(&labels, Some(true))
            )),
            denied_with(label_message),
            "{labels:?}"
        );
    }
    // Relabelling is fine once a child runs, and for raygate.
    assert_eq!(
        policy.admit(&Request::update(
            "alice",
            released(),
            raycluster(&not_opted_in(), Some(false))
        )),
        Decision::Allowed
    );
    assert_eq!(
        policy.admit(&Request::update(RAYGATE, held(), escaped)),
        Decision::Allowed
    );
}

/// raygate's own opt-in label puts a child under the policy as Kueue's does: a child held under it
/// cannot be released by anyone else, nor lose it; trading one opt-in label for the other while
/// held keeps the child under the policy and is allowed.
#[test]
fn raygate_s_own_opt_in_label_protects_a_held_child_like_kueue_s() {
    let policy = load_policy();
    let label_message = &policy.validations[2].message;
    let held = raycluster(&opted_in_by_raygate_label(), Some(true));
    let released = raycluster(&opted_in_by_raygate_label(), Some(false));
    assert_eq!(
        policy.admit(&Request::update("alice", held.clone(), released.clone())),
        denied_with(RELEASE_MESSAGE)
    );
    assert_eq!(
        policy.admit(&Request::update(RAYGATE, held.clone(), released)),
        Decision::Allowed
    );
    assert_eq!(
        policy.admit(&Request::create(
            KUBERAY,
            raycluster(&opted_in_by_raygate_label(), None)
        )),
        Decision::Denied(vec![policy.validations[0].message.clone()])
    );
    assert_eq!(
        policy.admit(&Request::update(
            "alice",
            held.clone(),
            raycluster(&not_opted_in(), Some(true))
        )),
        denied_with(label_message)
    );
    assert_eq!(
        policy.admit(&Request::update("alice", held, held_child_by_kueue_label())),
        Decision::Allowed
    );
}

fn held_child_by_kueue_label() -> Value {
    raycluster(&opted_in(), Some(true))
}

/// Every combination of operation, user, labels and `spec.suspend` before and after, against
/// the rules written out in plain Rust.
#[test]
fn the_policy_is_exactly_its_rules_on_every_combination() {
    let policy = load_policy();
    let label_sets: BTreeMap<&str, Vec<(&str, &str)>> = [
        ("opted-in", opted_in()),
        ("opted-in-raygate", opted_in_by_raygate_label()),
        ("no-queue", not_opted_in()),
        ("none", vec![]),
    ]
    .into();
    let suspends = [None, Some(false), Some(true)];
    let mut checked = 0;
    for user in [RAYGATE, KUBERAY, "alice"] {
        for (new_labels_name, new_labels) in &label_sets {
            for new_suspend in suspends {
                let new = raycluster(new_labels, new_suspend);
                let new_opted_in = new_labels_name.starts_with("opted-in");
                // CREATE
                let expected = if !new_opted_in {
                    Decision::NotMatched
                } else if user == RAYGATE || new_suspend == Some(true) {
                    Decision::Allowed
                } else {
                    Decision::Denied(vec![])
                };
                let got = policy.admit(&Request::create(user, new.clone()));
                assert_same_outcome(&got, &expected, &format!("CREATE {user} {new}"));
                checked += 1;
                // UPDATE
                for (old_labels_name, old_labels) in &label_sets {
                    for old_suspend in suspends {
                        let old = raycluster(old_labels, old_suspend);
                        let old_opted_in = old_labels_name.starts_with("opted-in");
                        let held = old_suspend == Some(true);
                        let expected = if !new_opted_in && !old_opted_in {
                            Decision::NotMatched
                        } else if user == RAYGATE
                            || !held
                            || (new_suspend == Some(true) && new_opted_in)
                        {
                            Decision::Allowed
                        } else {
                            Decision::Denied(vec![])
                        };
                        let got = policy.admit(&Request::update(user, old.clone(), new.clone()));
                        assert_same_outcome(
                            &got,
                            &expected,
                            &format!("UPDATE {user}\n old {old}\n new {new}"),
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 3 * 4 * 3 * (1 + 4 * 3));
}

fn assert_same_outcome(got: &Decision, expected: &Decision, what: &str) {
    let same = match (got, expected) {
        (Decision::Denied(messages), Decision::Denied(_)) => !messages.is_empty(),
        (Decision::NotMatched | Decision::ConditionFalse(_), Decision::NotMatched) => true,
        (a, b) => a == b,
    };
    assert!(same, "{what}: got {got:?}, expected {expected:?}");
}

/// Opting out (the RayService's queue label removed): raygate's one patch per child drops the
/// queue label and unsuspends it; from then on the policy leaves the user alone with that child.
#[test]
fn after_raygate_opts_a_child_out_the_policy_no_longer_blocks_the_user() {
    let policy = load_policy();
    let opted_out = raycluster(&not_opted_in(), Some(false));
    assert_eq!(
        policy.admit(&Request::update(RAYGATE, held(), opted_out.clone())),
        Decision::Allowed
    );
    // the user stops and restarts it
    let stopped = raycluster(&not_opted_in(), Some(true));
    let req = Request::update("alice", opted_out, stopped.clone());
    assert!(policy.conditions(&req).is_err(), "not matched");
    let req = Request::update("alice", stopped, raycluster(&not_opted_in(), Some(false)));
    assert!(policy.conditions(&req).is_err(), "not matched");
}

// ---------------------------------------------------------------------------------------------
// raygate-pod-gate (config/pod-gate): only raygate removes the raygate.io/quota scheduling gate
// ---------------------------------------------------------------------------------------------

const POD_GATE_MESSAGE: &str = "only raygate may remove the raygate.io/quota scheduling gate: raygate lifts it once an admitted workload slice grants the pod";
const POD_LABELS_MESSAGE: &str = "the labels ray.io/cluster, ray.io/group and ray.io/node-type and the annotation raygate.io/granted-by of a Ray pod raygate holds or granted may not change: raygate counts the pod against its RayService's quota by them";

fn pod_gate_policy() -> Policy {
    pod_gate_dir_policy("raygate-pod-gate")
}

/// The policy (and its binding) named `name` in config/pod-gate.
fn pod_gate_dir_policy(name: &str) -> Policy {
    let docs: Vec<_> = policy_docs_in("config/pod-gate")
        .into_iter()
        .filter(|d| d.kind.starts_with("ValidatingAdmissionPolicy"))
        .filter(|d| d.value["metadata"]["name"] == name)
        .collect();
    load_policy_from(docs, "config/pod-gate")
}

/// A Ray pod with these scheduling gates (`None`: no `schedulingGates` field).
fn ray_pod(node_type: Option<&str>, gates: Option<&[&str]>) -> Value {
    let mut pod = core::pod("serving/svc-abcde-w-worker-x2f4k", "")
        .unowned()
        .label("ray.io/cluster", "svc-abcde");
    if let Some(t) = node_type {
        pod = pod.label("ray.io/node-type", t);
    }
    if let Some(gates) = gates {
        pod.spec.get_or_insert_default().scheduling_gates = Some(vec![]);
        pod = gates.iter().fold(pod, |p, g| p.scheduling_gate(g));
    }
    serde_json::to_value(pod).unwrap()
}

#[test]
fn the_pod_gate_policy_compiles_and_binds() {
    let policy = pod_gate_policy();
    assert_eq!(policy.validations.len(), 2);
    assert!(policy.validations.iter().all(|v| v.reason == "Forbidden"));
    assert_eq!(policy.validations[0].message, POD_GATE_MESSAGE);
    assert_eq!(policy.validations[1].message, POD_LABELS_MESSAGE);
    let binding = policy_docs_in("config/pod-gate")
        .into_iter()
        .find(|d| d.kind == "ValidatingAdmissionPolicyBinding")
        .expect("a binding");
    assert_eq!(binding.value["spec"]["policyName"], "raygate-pod-gate");
    assert_eq!(binding.value["spec"]["validationActions"], json!(["Deny"]));
}

#[test]
fn nobody_but_raygate_removes_the_quota_gate_from_a_ray_pod() {
    let policy = pod_gate_policy();
    let gated = ray_pod(Some("worker"), Some(&["raygate.io/quota"]));
    let with_other = ray_pod(
        Some("worker"),
        Some(&["example.com/other", "raygate.io/quota"]),
    );
    let removals = [
        ray_pod(Some("worker"), None),
        ray_pod(Some("worker"), Some(&[])),
        // dropping the label in the same update does not escape (the old object matches)
        ray_pod(None, None),
    ];
    for user in [KUBERAY, "alice"] {
        for new in &removals {
            let mut messages = vec![POD_GATE_MESSAGE.to_string()];
            if new["metadata"]["labels"].get("ray.io/node-type").is_none() {
                messages.push(POD_LABELS_MESSAGE.into());
            }
            assert_eq!(
                policy.admit(&Request::pod_update(user, gated.clone(), new.clone())),
                Decision::Denied(messages),
                "{user}: {new}"
            );
        }
        let other_only = ray_pod(Some("worker"), Some(&["example.com/other"]));
        assert_eq!(
            policy.admit(&Request::pod_update(user, with_other.clone(), other_only)),
            Decision::Denied(vec![POD_GATE_MESSAGE.into()])
        );
    }
    for new in &removals {
        assert_eq!(
            policy.admit(&Request::pod_update(RAYGATE, gated.clone(), new.clone())),
            Decision::Allowed
        );
    }
}

#[test]
fn the_pod_gate_policy_lets_everything_else_through() {
    let policy = pod_gate_policy();
    let gated = ray_pod(Some("head"), Some(&["raygate.io/quota"]));
    // another gate removed, ours kept
    let with_other = ray_pod(
        Some("head"),
        Some(&["example.com/other", "raygate.io/quota"]),
    );
    assert_eq!(
        policy.admit(&Request::pod_update("alice", with_other, gated.clone())),
        Decision::Allowed
    );
    // any other update of a gated pod (labels, annotations)
    let mut relabelled = gated.clone();
    relabelled["metadata"]["labels"]["team"] = json!("a");
    assert_eq!(
        policy.admit(&Request::pod_update(KUBERAY, gated.clone(), relabelled)),
        Decision::Allowed
    );
    // a pod that was never gated by raygate
    let ungated = ray_pod(Some("worker"), None);
    assert_eq!(
        policy.admit(&Request::pod_update("alice", ungated.clone(), ungated)),
        Decision::ConditionFalse("gated-or-granted-by-raygate".into())
    );
    let foreign = ray_pod(Some("worker"), Some(&["example.com/other"]));
    assert_eq!(
        policy.admit(&Request::pod_update(
            "alice",
            foreign,
            ray_pod(Some("worker"), None)
        )),
        Decision::ConditionFalse("gated-or-granted-by-raygate".into())
    );
    // not a Ray pod: not matched at all
    let plain = ray_pod(None, Some(&["raygate.io/quota"]));
    assert_eq!(
        policy.admit(&Request::pod_update(
            "alice",
            plain.clone(),
            ray_pod(None, None)
        )),
        Decision::NotMatched
    );
    // creates and deletes are not matched
    let mut create = Request::pod_update("alice", Value::Null, gated.clone());
    create.operation = "CREATE";
    assert_eq!(policy.admit(&create), Decision::NotMatched);
    let mut delete = Request::pod_update("alice", gated, Value::Null);
    delete.operation = "DELETE";
    assert_eq!(policy.admit(&delete), Decision::NotMatched);
}

/// `pod` with `key` set to `value` in `metadata.<field>` (`None`: removed).
fn with_meta(mut pod: Value, field: &str, key: &str, value: Option<&str>) -> Value {
    if value.is_none() && pod["metadata"].get(field).is_none() {
        return pod;
    }
    let map = &mut pod["metadata"][field];
    if !map.is_object() {
        *map = json!({});
    }
    let map = map.as_object_mut().unwrap();
    match value {
        Some(v) => map.insert(key.into(), json!(v)),
        None => map.remove(key),
    };
    pod
}

#[test]
fn nobody_but_raygate_relabels_a_held_or_granted_ray_pod() {
    let policy = pod_gate_policy();
    let gated = with_meta(
        ray_pod(Some("worker"), Some(&["raygate.io/quota"])),
        "labels",
        "ray.io/group",
        Some("w"),
    );
    let granted = with_meta(
        with_meta(
            gated.clone(),
            "annotations",
            "raygate.io/granted-by",
            Some("svc-x1"),
        ),
        "labels",
        "team",
        Some("a"),
    );
    let granted = {
        let mut p = granted;
        p["spec"]["schedulingGates"] = json!([]);
        p
    };
    let edits = |pod: &Value| {
        vec![
            with_meta(pod.clone(), "labels", "ray.io/group", Some("other")),
            with_meta(pod.clone(), "labels", "ray.io/group", None),
            with_meta(pod.clone(), "labels", "ray.io/cluster", Some("elsewhere")),
            with_meta(pod.clone(), "labels", "ray.io/cluster", None),
            with_meta(pod.clone(), "labels", "ray.io/node-type", Some("head")),
            with_meta(pod.clone(), "annotations", "raygate.io/granted-by", None),
            with_meta(
                pod.clone(),
                "annotations",
                "raygate.io/granted-by",
                Some("x"),
            ),
        ]
    };
    for old in [&gated, &granted] {
        for new in edits(old).into_iter().filter(|new| new != old) {
            for user in [KUBERAY, "alice"] {
                assert_eq!(
                    policy.admit(&Request::pod_update(user, old.clone(), new.clone())),
                    Decision::Denied(vec![POD_LABELS_MESSAGE.into()]),
                    "{user}: {new}"
                );
            }
            assert_eq!(
                policy.admit(&Request::pod_update(RAYGATE, old.clone(), new)),
                Decision::Allowed
            );
        }
        // KubeRay's serve label, and any other label or annotation, may change
        for new in [
            with_meta(old.clone(), "labels", "ray.io/serve", Some("true")),
            with_meta(old.clone(), "labels", "team", None),
            with_meta(old.clone(), "annotations", "note", Some("hi")),
        ] {
            assert_eq!(
                policy.admit(&Request::pod_update(KUBERAY, old.clone(), new)),
                Decision::Allowed
            );
        }
    }
    // a granted pod is matched by its annotation alone (no gate left)
    let relabelled = with_meta(granted.clone(), "labels", "ray.io/group", Some("other"));
    assert!(
        policy
            .conditions(&Request::pod_update("alice", granted, relabelled))
            .is_ok()
    );
}

// ---------------------------------------------------------------------------------------------
// raygate-pod-gate-templates (config/pod-gate): a child's pod templates stay gated
// ---------------------------------------------------------------------------------------------

const TEMPLATES_MESSAGE: &str = "every pod template of a child of an opted-in RayService must carry the raygate.io/quota scheduling gate (raygate puts it on spec.rayClusterConfig; KubeRay retries)";

/// `cluster` with the raygate.io/quota gate on its head and on the first `workers` worker groups.
fn gated(mut cluster: Value, head: bool, workers: usize) -> Value {
    let gate = json!([{"name": "raygate.io/quota"}]);
    if head {
        cluster["spec"]["headGroupSpec"]["template"]["spec"]["schedulingGates"] = gate.clone();
    }
    for g in cluster["spec"]["workerGroupSpecs"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .take(workers)
    {
        g["template"]["spec"]["schedulingGates"] = gate.clone();
    }
    cluster
}

/// `cluster` with a worker group `g2` appended (KubeRay's in-place update), gated or not.
fn appended(mut cluster: Value, gate: bool) -> Value {
    let mut spec =
        json!({"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0"}]});
    if gate {
        spec["schedulingGates"] = json!([{"name": "raygate.io/quota"}]);
    }
    cluster["spec"]["workerGroupSpecs"]
        .as_array_mut()
        .unwrap()
        .push(
            json!({"groupName": "g2", "replicas": 1, "rayStartParams": {},
            "template": {"spec": spec}}),
        );
    cluster
}

#[test]
fn the_templates_policy_compiles_and_binds() {
    let policy = pod_gate_dir_policy("raygate-pod-gate-templates");
    assert_eq!(policy.validations.len(), 1);
    assert_eq!(policy.validations[0].reason, "Forbidden");
    assert_eq!(policy.validations[0].message, TEMPLATES_MESSAGE);
    let binding = policy_docs_in("config/pod-gate")
        .into_iter()
        .find(|d| {
            d.kind == "ValidatingAdmissionPolicyBinding"
                && d.value["metadata"]["name"] == "raygate-pod-gate-templates"
        })
        .expect("a binding");
    assert_eq!(
        binding.value["spec"]["policyName"],
        "raygate-pod-gate-templates"
    );
    assert_eq!(binding.value["spec"]["validationActions"], json!(["Deny"]));
}

#[test]
fn kuberay_cannot_append_an_ungated_worker_group_to_an_opted_in_child() {
    let policy = pod_gate_dir_policy("raygate-pod-gate-templates");
    let running = gated(released(), true, 1);
    // KubeRay's in-place update with the user's ungated group: refused, KubeRay retries
    assert_eq!(
        policy.admit(&Request::update(
            KUBERAY,
            running.clone(),
            appended(running.clone(), false)
        )),
        denied_with(TEMPLATES_MESSAGE)
    );
    // once raygate gated spec.rayClusterConfig, the copied group carries the gate
    assert_eq!(
        policy.admit(&Request::update(
            KUBERAY,
            running.clone(),
            appended(running.clone(), true)
        )),
        Decision::Allowed
    );
    // a child created from an ungated rayClusterConfig: refused; gated: allowed
    assert_eq!(
        policy.admit(&Request::create(KUBERAY, gated(held(), true, 0))),
        denied_with(TEMPLATES_MESSAGE)
    );
    assert_eq!(
        policy.admit(&Request::create(KUBERAY, gated(held(), false, 1))),
        denied_with(TEMPLATES_MESSAGE)
    );
    assert_eq!(
        policy.admit(&Request::create(KUBERAY, gated(held(), true, 1))),
        Decision::Allowed
    );
    // an update dropping the gate from a running child's template
    assert_eq!(
        policy.admit(&Request::update(
            "alice",
            running.clone(),
            gated(released(), true, 0)
        )),
        denied_with(TEMPLATES_MESSAGE)
    );
}

#[test]
fn the_templates_policy_lets_raygate_metadata_and_other_services_through() {
    let policy = pod_gate_dir_policy("raygate-pod-gate-templates");
    // raygate gates a child that ran before the pod gate was on (and patches its flavors)
    let old = released();
    assert_eq!(
        policy.admit(&Request::update(
            RAYGATE,
            old.clone(),
            gated(old.clone(), true, 1)
        )),
        Decision::Allowed
    );
    assert_eq!(
        policy.admit(&Request::update(
            RAYGATE,
            old.clone(),
            appended(old.clone(), false)
        )),
        Decision::Allowed
    );
    // a metadata-only update of an ungated child (a finalizer removed, a label added)
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"]["team"] = json!("a");
    assert_eq!(
        policy.admit(&Request::update(KUBERAY, old.clone(), relabelled)),
        Decision::Allowed
    );
    // not opted in: not this policy's business
    let free = raycluster(&not_opted_in(), None);
    assert_eq!(
        policy.admit(&Request::create(KUBERAY, free)),
        Decision::ConditionFalse("opted-in-rayservice-child".into())
    );
    // deletes are not matched
    assert_eq!(
        policy.admit(&Request::delete(KUBERAY, old)),
        Decision::NotMatched
    );
}
