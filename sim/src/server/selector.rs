//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `exists`, `!key`, `>`/`<`) and field selectors
//! (`=`, `==`, `!=` over the fields a kind supports), as `k8s.io/apimachinery/pkg/labels` and
//! `pkg/fields` parse and match them.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::server::status::ApiError;

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<(String, Op)>);

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn bad(s: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unable to parse requirement: {why} in label selector {s:?}"
    ))
}

fn value_set(inner: &str, whole: &str) -> Result<BTreeSet<String>, ApiError> {
    let inner = inner.trim();
    let inner = inner
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| bad(whole, "expected a parenthesised set of values"))?;
    inner
        .split(',')
        .map(|v| {
            let v = v.trim();
            if valid_value(v) {
                Ok(v.to_string())
            } else {
                Err(bad(whole, "invalid label value"))
            }
        })
        .collect()
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top_level(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(bad(s, "empty requirement"));
            }
            let (key, op) = if let Some(k) = p.strip_prefix('!') {
                (k.trim().to_string(), Op::NotExists)
            } else if let Some((k, v)) = p.split_once("!=") {
                (k.trim().to_string(), Op::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once("==") {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once('=') {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once(" notin ") {
                (k.trim().to_string(), Op::NotIn(value_set(v, s)?))
            } else if let Some((k, v)) = p.split_once(" in ") {
                (k.trim().to_string(), Op::In(value_set(v, s)?))
            } else if let Some((k, v)) = p.split_once('>') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| bad(s, "expected an integer"))?;
                (k.trim().to_string(), Op::Gt(n))
            } else if let Some((k, v)) = p.split_once('<') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| bad(s, "expected an integer"))?;
                (k.trim().to_string(), Op::Lt(n))
            } else {
                (p.to_string(), Op::Exists)
            };
            if !valid_key(&key) {
                return Err(bad(s, "invalid label key"));
            }
            if let Op::Eq(v) | Op::NotEq(v) = &op
                && !valid_value(v)
            {
                return Err(bad(s, "invalid label value"));
            }
            reqs.push((key, op));
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether `labels` (an object's `metadata.labels`, possibly absent) matches.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|(k, op)| match op {
            Op::Eq(v) => get(k) == Some(v.as_str()),
            Op::NotEq(v) => get(k) != Some(v.as_str()),
            Op::In(set) => get(k).is_some_and(|x| set.contains(x)),
            Op::NotIn(set) => get(k).is_none_or(|x| !set.contains(x)),
            Op::Exists => get(k).is_some(),
            Op::NotExists => get(k).is_none(),
            Op::Gt(n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Op::Lt(n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }
}

/// A parsed field selector over the fields one kind supports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Whether a `metav1.LabelSelector` object matches `labels`; `None` for a selector that does not
/// parse (such PDBs are skipped). A missing selector matches nothing, `{}` everything.
pub fn selector_object_matches(selector: Option<&Value>, labels: Option<&Value>) -> Option<bool> {
    let Some(sel) = selector.filter(|s| !s.is_null()) else {
        return Some(false);
    };
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    for (k, v) in sel["matchLabels"].as_object().into_iter().flatten() {
        if get(k) != Some(v.as_str()?) {
            return Some(false);
        }
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str()?;
        let values: Vec<&str> = e["values"]
            .as_array()
            .map(|vs| vs.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let ok = match e["operator"].as_str()? {
            "In" => get(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => get(key).is_some(),
            "DoesNotExist" => get(key).is_none(),
            _ => return None,
        };
        if !ok {
            return Some(false);
        }
    }
    Some(true)
}

/// The value of a selectable field: a missing field reads as the empty string.
pub fn field_value(obj: &Value, field: &str) -> String {
    let mut cur = obj;
    for part in field.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parses `s`, accepting only `supported` field names.
    pub fn parse(s: &str, supported: &[&str]) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(reqs));
        }
        for part in s.split(',') {
            let p = part.trim();
            let (field, eq, value) = if let Some((f, v)) = p.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = p.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = p.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{p}'"
                )));
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(f, eq, v)| (field_value(obj, f) == *v) == *eq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(sel: &str, labels: Value) -> bool {
        LabelSelector::parse(sel).unwrap().matches(Some(&labels))
    }

    #[test]
    fn every_label_operator_matches_as_apimachinery_does() {
        let l = json!({"app": "ray", "tier": "gpu", "n": "5"});
        assert!(m("", l.clone()));
        assert!(m("app=ray", l.clone()));
        assert!(m("app==ray", l.clone()));
        assert!(!m("app!=ray", l.clone()));
        assert!(m("missing!=x", l.clone()), "!= matches an absent key");
        assert!(m("tier in (cpu, gpu)", l.clone()));
        assert!(!m("tier notin (cpu,gpu)", l.clone()));
        assert!(
            m("missing notin (a)", l.clone()),
            "notin matches an absent key"
        );
        assert!(!m("missing in (a)", l.clone()));
        assert!(m("app", l.clone()));
        assert!(m("!missing", l.clone()));
        assert!(!m("!app", l.clone()));
        assert!(m("n>4,n<6", l.clone()));
        assert!(m("app=ray,tier in (gpu),!missing", l.clone()));
        assert!(!m("app=ray,tier=cpu", l));
        assert!(!LabelSelector::parse("app=ray").unwrap().matches(None));
    }

    #[test]
    fn malformed_label_selectors_are_bad_requests() {
        for s in ["app=ray,", "tier in gpu", "a b c=d", "x=(y"] {
            let e = LabelSelector::parse(s).unwrap_err();
            assert_eq!(e.code, 400, "{s}");
        }
    }

    #[test]
    fn field_selectors_match_supported_fields_only() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let f = [
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "status.phase",
        ];
        assert!(
            FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed", &f)
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName==n2", &f)
                .unwrap()
                .matches(&pod)
        );
        let unscheduled = json!({"metadata": {"name": "q"}});
        assert!(
            FieldSelector::parse("spec.nodeName=", &f)
                .unwrap()
                .matches(&unscheduled)
        );
        let e = FieldSelector::parse("spec.schedulerName=x", &f).unwrap_err();
        assert_eq!(e.message, "field label not supported: spec.schedulerName");
    }
}
