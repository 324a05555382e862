//! Condition removal and minimal status patches (conditions are set with `raygate::conditions::set`
//! at the emulator's clock).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{Map, Value};

pub(crate) fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`; `None` when they are equal.
pub(crate) fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, ov) in o {
                match n.get(k) {
                    None => {
                        patch.insert(k.clone(), Value::Null);
                    }
                    Some(nv) => {
                        if let Some(d) = merge_diff(ov, nv) {
                            patch.insert(k.clone(), d);
                        }
                    }
                }
            }
            for (k, nv) in n {
                if !o.contains_key(k) {
                    patch.insert(k.clone(), nv.clone());
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use raygate::conditions::{is_true, set as set_condition};
    use serde_json::json;

    #[test]
    fn merge_diff_nulls_removed_keys_and_keeps_equal_ones_out() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1]});
        let new = json!({"b": {"c": 2, "d": 4, "e": 5}, "l": [1, 2]});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"a": null, "b": {"d": 4, "e": 5}, "l": [1, 2]}))
        );
        assert_eq!(merge_diff(&new, &new), None);
    }

    #[test]
    fn set_condition_moves_the_transition_time_only_on_a_status_change() {
        let at = |s: i64| Timestamp::from_second(1_767_225_600 + s).unwrap();
        let mut cs = Vec::new();
        set_condition(
            &mut cs,
            "Ready",
            "False",
            "Initializing",
            "m",
            Some(1),
            at(0),
        );
        set_condition(&mut cs, "Ready", "False", "Other", "m2", Some(2), at(5));
        assert_eq!(cs[0].last_transition_time.0, at(0));
        assert_eq!(cs[0].reason, "Other");
        set_condition(&mut cs, "Ready", "True", "Ok", "", Some(2), at(9));
        assert_eq!(cs[0].last_transition_time.0, at(9));
        assert!(is_true(&cs, "Ready"));
        remove_condition(&mut cs, "Ready");
        assert!(cs.is_empty());
    }
}
