//! Status conditions (`metav1.Condition`) as apimachinery's `meta` package handles them:
//! [`find`] (`FindStatusCondition`), [`is_true`] (`IsStatusConditionTrue`) and [`set`]
//! (`SetStatusCondition`: `lastTransitionTime` moves only when the status changes; the time of
//! the change comes in as a value).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The condition of type `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// The condition `type_` when it is `True`.
pub fn find_true<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    find(conditions, type_).filter(|c| c.status == "True")
}

/// `meta.SetStatusCondition`: adds the condition, or refreshes reason, message and
/// `observedGeneration` in place; `lastTransitionTime` becomes `now` only when the status changes.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status.to_string();
                c.last_transition_time = Time(now);
            }
            if c.reason != reason {
                c.reason = reason.to_string();
            }
            if c.message != message {
                c.message = message.to_string();
            }
            c.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            observed_generation,
            last_transition_time: Time(now),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn set_moves_the_transition_time_only_when_the_status_changes() {
        let mut c = Vec::new();
        set(&mut c, "Ready", "False", "Waiting", "a", Some(1), t(10));
        set(&mut c, "Ready", "False", "Waiting", "b", Some(2), t(20));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].last_transition_time, Time(t(10)));
        assert_eq!(c[0].message, "b");
        assert_eq!(c[0].observed_generation, Some(2));
        assert!(!is_true(&c, "Ready"));
        set(&mut c, "Ready", "True", "Up", "c", Some(2), t(30));
        assert_eq!(c[0].last_transition_time, Time(t(30)));
        assert_eq!(c[0].reason, "Up");
        assert!(is_true(&c, "Ready"));
        assert_eq!(
            find_true(&c, "Ready").map(|c| c.message.as_str()),
            Some("c")
        );
        assert!(find(&c, "Other").is_none());
    }
}
