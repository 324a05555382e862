//! Label selectors (pure): a Kubernetes `LabelSelector` or a `labelSelector` query string turned
//! into a [`Selector`] that decides whether a set of labels is selected.
//!
//! Semantics follow apimachinery: `metav1.LabelSelectorAsSelector` for the structured form
//! (`matchLabels` and `matchExpressions` are ANDed; an empty selector selects everything, a nil one
//! nothing — see [`Selector::from_optional`]; `In`/`NotIn` need values, `Exists`/`DoesNotExist`
//! must have none) and `labels.Parse` for the query-string form (`a=b,c!=d,e in (x,y),f notin
//! (z),g,!h`). `NotIn` and `!=` select objects that lack the key, as Kubernetes does. Label keys
//! and values are not validated for syntax (the API server did that when the object was stored).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a selector cannot be used; the message names the offending field (or query term).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{field}.matchExpressions[{index}].operator: unknown operator {operator:?}")]
    UnknownOperator {
        field: String,
        index: usize,
        operator: String,
    },
    #[error("{field}.matchExpressions[{index}].values: must not be empty for operator {operator}")]
    MissingValues {
        field: String,
        index: usize,
        operator: String,
    },
    #[error("{field}.matchExpressions[{index}].values: must be empty for operator {operator}")]
    UnexpectedValues {
        field: String,
        index: usize,
        operator: String,
    },
    #[error("label selector {query:?}: {reason}")]
    Query { query: String, reason: String },
}

/// A requirement's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Operator {
    fn parse(name: &str) -> Option<Operator> {
        match name {
            "In" => Some(Operator::In),
            "NotIn" => Some(Operator::NotIn),
            "Exists" => Some(Operator::Exists),
            "DoesNotExist" => Some(Operator::DoesNotExist),
            _ => None,
        }
    }

    fn needs_values(self) -> bool {
        matches!(self, Operator::In | Operator::NotIn)
    }
}

/// One `key op values` requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, value: Option<&String>) -> bool {
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// A checked label selector. `Default` selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// `matchLabels` (and `key=value` terms): each must be present with that value.
    labels: Vec<(String, String)>,
    requirements: Vec<Requirement>,
    /// A nil selector: selects nothing.
    nothing: bool,
}

impl Selector {
    /// Selects every set of labels (`labels.Everything()`, an empty `LabelSelector`).
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Selects nothing (`labels.Nothing()`, what a nil `LabelSelector` converts to).
    pub fn nothing() -> Selector {
        Selector {
            nothing: true,
            ..Selector::default()
        }
    }

    /// `metav1.LabelSelectorAsSelector`: `None` selects nothing, `Some({})` everything. Callers
    /// whose API documents a different default for an unset field decide that themselves.
    pub fn from_optional(
        selector: Option<&LabelSelector>,
        field: &str,
    ) -> Result<Selector, SelectorError> {
        match selector {
            None => Ok(Selector::nothing()),
            Some(s) => Selector::from_label_selector(s, field),
        }
    }

    /// Checks the operators and values of a `LabelSelector`; `field` is its path in the object
    /// (e.g. `spec.namespaceSelector`), used in errors.
    pub fn from_label_selector(
        selector: &LabelSelector,
        field: &str,
    ) -> Result<Selector, SelectorError> {
        let labels = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut requirements = Vec::new();
        for (index, e) in selector.match_expressions.iter().flatten().enumerate() {
            let values = e.values.clone().unwrap_or_default();
            let Some(operator) = Operator::parse(&e.operator) else {
                return Err(SelectorError::UnknownOperator {
                    field: field.to_string(),
                    index,
                    operator: e.operator.clone(),
                });
            };
            if operator.needs_values() == values.is_empty() {
                let (field, operator) = (field.to_string(), e.operator.clone());
                return Err(if values.is_empty() {
                    SelectorError::MissingValues {
                        field,
                        index,
                        operator,
                    }
                } else {
                    SelectorError::UnexpectedValues {
                        field,
                        index,
                        operator,
                    }
                });
            }
            requirements.push(Requirement {
                key: e.key.clone(),
                operator,
                values,
            });
        }
        Ok(Selector {
            labels,
            requirements,
            nothing: false,
        })
    }

    /// Parses the query-string form (`?labelSelector=`): comma-separated terms `k=v`, `k==v`,
    /// `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` and `!k`. The empty string selects everything.
    /// `k>n` / `k<n` (numeric comparisons) are not supported and are an error.
    pub fn parse_query(query: &str) -> Result<Selector, SelectorError> {
        let fail = |reason: String| SelectorError::Query {
            query: query.to_string(),
            reason,
        };
        let mut out = Selector::everything();
        for term in split_terms(query).map_err(&fail)? {
            match parse_term(term).map_err(&fail)? {
                Term::Equals(k, v) => out.labels.push((k, v)),
                Term::Requirement(r) => out.requirements.push(r),
            }
        }
        Ok(out)
    }

    /// Whether `labels` (an object's `metadata.labels`; `None` has no labels) are selected.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        !self.nothing
            && self
                .labels
                .iter()
                .all(|(k, v)| get(k).is_some_and(|x| x == v))
            && self.requirements.iter().all(|r| r.matches(get(&r.key)))
    }
}

enum Term {
    Equals(String, String),
    Requirement(Requirement),
}

/// Splits on commas outside parentheses, trimming; an empty query has no terms.
fn split_terms(query: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, ch) in query.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "unbalanced ')'".to_string())?;
            }
            ',' if depth == 0 => {
                terms.push(query[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_string());
    }
    terms.push(query[start..].trim());
    if terms == [""] {
        return Ok(Vec::new());
    }
    match terms.iter().find(|t| t.is_empty()) {
        Some(_) => Err("empty term".to_string()),
        None => Ok(terms),
    }
}

fn parse_term(term: &str) -> Result<Term, String> {
    let requirement = |key: &str, operator, values: Vec<String>| {
        let key = checked_key(key, term)?;
        Ok(Term::Requirement(Requirement {
            key,
            operator,
            values,
        }))
    };
    if let Some(key) = term.strip_prefix('!') {
        return requirement(key, Operator::DoesNotExist, Vec::new());
    }
    if let Some((key, value)) = term.split_once("!=") {
        return requirement(key, Operator::NotIn, vec![value.trim().to_string()]);
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Term::Equals(
            checked_key(key, term)?,
            value.trim().to_string(),
        ));
    }
    if term.contains(['<', '>']) {
        return Err(format!("{term:?}: numeric comparisons are not supported"));
    }
    if let Some((key, rest)) = term.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        let (operator, list) = if let Some(list) = rest.strip_prefix("notin") {
            (Operator::NotIn, list)
        } else if let Some(list) = rest.strip_prefix("in") {
            (Operator::In, list)
        } else {
            return Err(format!("{term:?}: expected `in` or `notin` after the key"));
        };
        return requirement(key, operator, value_list(list, term)?);
    }
    requirement(term, Operator::Exists, Vec::new())
}

fn checked_key(key: &str, term: &str) -> Result<String, String> {
    let key = key.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(format!("{term:?}: invalid key {key:?}"));
    }
    Ok(key.to_string())
}

/// `(a, b)` → `["a", "b"]`; at least one value.
fn value_list(list: &str, term: &str) -> Result<Vec<String>, String> {
    let inner = list
        .trim()
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(|| format!("{term:?}: expected a parenthesised value list"))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().all(String::is_empty) {
        return Err(format!("{term:?}: the value list must not be empty"));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_string(),
            operator: operator.to_string(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn selector(
        match_labels: &[(&str, &str)],
        exprs: Vec<LabelSelectorRequirement>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }
    }

    #[test]
    fn empty_selector_selects_everything_and_nil_selects_nothing() {
        let empty = Selector::from_optional(Some(&LabelSelector::default()), "s").unwrap();
        assert!(empty.matches(None));
        assert!(empty.matches(Some(&labels(&[("a", "b")]))));
        let nil = Selector::from_optional(None, "s").unwrap();
        assert!(!nil.matches(None));
        assert!(!nil.matches(Some(&labels(&[("a", "b")]))));
    }

    #[test]
    fn match_labels_and_expressions_are_anded() {
        let s = Selector::from_label_selector(
            &selector(
                &[("team", "a")],
                vec![
                    expr("tier", "In", &["gold", "silver"]),
                    expr("env", "NotIn", &["dev"]),
                    expr("gpu", "Exists", &[]),
                    expr("legacy", "DoesNotExist", &[]),
                ],
            ),
            "spec.namespaceSelector",
        )
        .unwrap();
        let base = [
            ("team", "a"),
            ("tier", "gold"),
            ("env", "prod"),
            ("gpu", ""),
        ];
        assert!(s.matches(Some(&labels(&base))));
        // NotIn selects a missing key
        assert!(s.matches(Some(&labels(&[
            ("team", "a"),
            ("tier", "silver"),
            ("gpu", "1")
        ]))));
        for broken in [
            [
                ("team", "b"),
                ("tier", "gold"),
                ("env", "prod"),
                ("gpu", ""),
            ],
            [
                ("team", "a"),
                ("tier", "bronze"),
                ("env", "prod"),
                ("gpu", ""),
            ],
            [("team", "a"), ("tier", "gold"), ("env", "dev"), ("gpu", "")],
            [
                ("team", "a"),
                ("tier", "gold"),
                ("env", "prod"),
                ("legacy", ""),
            ],
        ] {
            assert!(!s.matches(Some(&labels(&broken))), "{broken:?}");
        }
        assert!(!s.matches(None));
    }

    #[test]
    fn errors_name_the_field_and_expression() {
        let field = "spec.namespaceSelector";
        let err = |e| {
            Selector::from_label_selector(&selector(&[], vec![e]), field)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(expr("a", "Gt", &["1"])),
            "spec.namespaceSelector.matchExpressions[0].operator: unknown operator \"Gt\""
        );
        assert_eq!(
            err(expr("a", "In", &[])),
            "spec.namespaceSelector.matchExpressions[0].values: must not be empty for operator In"
        );
        assert_eq!(
            err(expr("a", "Exists", &["x"])),
            "spec.namespaceSelector.matchExpressions[0].values: must be empty for operator Exists"
        );
    }

    #[test]
    fn query_string_terms() {
        let s = Selector::parse_query("a=b, c!=d,e in (x, y),f notin (z),g,!h,i==j").unwrap();
        let ok = [("a", "b"), ("e", "y"), ("g", ""), ("i", "j")];
        assert!(s.matches(Some(&labels(&ok))));
        let with = |extra: (&'static str, &'static str)| {
            let mut l = labels(&ok);
            l.insert(extra.0.to_string(), extra.1.to_string());
            s.matches(Some(&l))
        };
        assert!(with(("c", "e")));
        assert!(!with(("c", "d")));
        assert!(!with(("e", "w")));
        assert!(!with(("f", "z")));
        assert!(with(("f", "q")));
        assert!(!with(("h", "")));
        assert!(!with(("a", "c")));
        assert!(!s.matches(Some(&labels(&[("a", "b"), ("e", "y"), ("i", "j")]))));
    }

    #[test]
    fn empty_query_selects_everything() {
        let s = Selector::parse_query("  ").unwrap();
        assert!(s.matches(None));
        assert_eq!(s, Selector::everything());
    }

    #[test]
    fn bad_queries_are_errors() {
        for q in [
            "a in (x",
            "a in ()",
            "a,,b",
            "a foo (x)",
            "a>1",
            "=b",
            "a in x",
        ] {
            assert!(Selector::parse_query(q).is_err(), "{q:?}");
        }
        assert_eq!(
            Selector::parse_query("a>1").unwrap_err().to_string(),
            "label selector \"a>1\": \"a>1\": numeric comparisons are not supported"
        );
    }
}
