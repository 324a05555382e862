//! API errors as `metav1.Status` bodies with the real server's `reason`, `code` and message shapes
//! (`k8s.io/apimachinery/pkg/api/errors`).

use serde_json::{Value, json};

/// A failed request, rendered as a `Status` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Value,
    /// Answered as Go's mux answers an unknown path: `404 page not found`, plain text.
    pub plain_text: bool,
}

/// `group/resource` as the errors name it: `rayclusters.ray.io`, or `pods` for the core group.
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String, details: Value) -> Self {
        ApiError {
            code,
            reason,
            message,
            details,
            plain_text: false,
        }
    }

    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
            json!({"name": name, "group": group, "kind": plural}),
        )
    }

    /// The route itself is unknown (no such resource served).
    pub fn no_route() -> Self {
        ApiError {
            plain_text: true,
            ..Self::new(404, "NotFound", "404 page not found".into(), json!({}))
        }
    }

    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
            json!({"name": name, "group": group, "kind": plural}),
        )
    }

    /// A write with a stale `resourceVersion` (optimistic concurrency).
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, plural)
            ),
            json!({"name": name, "group": group, "kind": plural}),
        )
    }

    /// `errors.NewConflict(resource, name, err)`: "Operation cannot be fulfilled on ...: why".
    pub fn conflict_because(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
            json!({"name": name, "group": group, "kind": resource}),
        )
    }

    /// Server-side apply conflicts (`NewApplyConflict`).
    pub fn apply_conflict(message: String, causes: Vec<Value>) -> Self {
        Self::new(409, "Conflict", message, json!({"causes": causes}))
    }

    /// 422 with `causes`, message `Kind.group "name" is invalid: ...`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<FieldCause>) -> Self {
        let gk = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let msgs: Vec<String> = causes.iter().map(FieldCause::render).collect();
        let joined = match msgs.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Self::new(
            422,
            "Invalid",
            format!("{gk} \"{name}\" is invalid: {joined}"),
            json!({
                "name": name, "group": group, "kind": kind,
                "causes": causes.iter().map(|c| json!({
                    "reason": c.reason, "message": c.detail_message(), "field": c.field,
                })).collect::<Vec<_>>(),
            }),
        )
    }

    /// Watch from a compacted resourceVersion (`NewResourceExpired`).
    pub fn expired(message: String) -> Self {
        Self::new(410, "Expired", message, json!({}))
    }

    /// A JSON patch that cannot be applied (`errors.NewGenericServerResponse(422, ...)`).
    pub fn invalid_patch(message: String) -> Self {
        Self::new(422, "Invalid", message, json!({}))
    }

    /// `NewInternalError(err)`: "Internal error occurred: err", the error as the one cause.
    pub fn internal_error(err: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {err}"),
            json!({"causes": [{"message": err}]}),
        )
    }

    /// `NewServiceUnavailable(reason)`.
    pub fn service_unavailable(reason: &str) -> Self {
        Self::new(503, "ServiceUnavailable", reason.to_string(), json!({}))
    }

    /// The max-in-flight / priority-and-fairness filters' 429: plain text (Go's `http.Error`)
    /// with `Retry-After: 1`, no `Status` body.
    pub fn throttled() -> Self {
        ApiError {
            plain_text: true,
            ..Self::new(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.".into(),
                json!({"retryAfterSeconds": 1}),
            )
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message.into(), json!({}))
    }

    /// 429 (`NewTooManyRequests`); `retry_after` > 0 is also sent as the `Retry-After` header.
    pub fn too_many_requests(message: String, retry_after: u64, causes: Vec<Value>) -> Self {
        let mut details = json!({"causes": causes});
        if retry_after > 0 {
            details["retryAfterSeconds"] = json!(retry_after);
        }
        Self::new(429, "TooManyRequests", message, details)
    }

    /// 403 (`NewForbidden`): `resource.group "name" is forbidden: why`.
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: {why}",
                qualified(group, resource)
            ),
            json!({"name": name, "group": group, "kind": resource}),
        )
    }

    /// A failure `Status` a handler returned as its result (code set, reason empty).
    pub fn plain_failure(code: u16, message: impl Into<String>) -> Self {
        Self::new(code, "", message.into(), json!({}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), json!({}))
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message.into(), json!({}))
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message.into(), json!({}))
    }

    /// The `Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // an empty `details` is omitted, as Go's `omitempty` does
        if self.details.as_object().is_some_and(|d| !d.is_empty()) {
            s["details"] = self.details.clone();
        }
        s
    }
}

/// One field error (`field.Error`): `field: Type: detail`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: &'static str,
    pub field: String,
    /// `Invalid value: "x": why` / `Required value` / ...
    pub text: String,
}

impl FieldCause {
    fn render(&self) -> String {
        format!("{}: {}", self.field, self.text)
    }

    fn detail_message(&self) -> String {
        self.text.clone()
    }

    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        FieldCause {
            reason: "FieldValueRequired",
            field: field.into(),
            text: if detail.is_empty() {
                "Required value".into()
            } else {
                format!("Required value: {detail}")
            },
        }
    }

    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        FieldCause {
            reason: "FieldValueInvalid",
            field: field.into(),
            text: format!("Invalid value: {value}: {detail}"),
        }
    }

    /// `field.Invalid` whose value may be omitted (`field.OmitValueType`, for objects and
    /// lists): `Invalid value: detail`.
    pub fn invalid_omitting(field: impl Into<String>, value: Option<&str>, detail: &str) -> Self {
        match value {
            Some(v) => Self::invalid(field, v, detail),
            None => FieldCause {
                reason: "FieldValueInvalid",
                field: field.into(),
                text: format!("Invalid value: {detail}"),
            },
        }
    }

    /// `field.Forbidden`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        FieldCause {
            reason: "FieldValueForbidden",
            field: field.into(),
            text: if detail.is_empty() {
                "Forbidden".into()
            } else {
                format!("Forbidden: {detail}")
            },
        }
    }

    /// `field.Duplicate` (no detail; the value unless omitted).
    pub fn duplicate(field: impl Into<String>, value: Option<&str>) -> Self {
        FieldCause {
            reason: "FieldValueDuplicate",
            field: field.into(),
            text: match value {
                Some(v) => format!("Duplicate value: {v}"),
                None => "Duplicate value".into(),
            },
        }
    }

    /// A value of the wrong JSON type (`field.TypeInvalid`).
    pub fn type_invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        FieldCause {
            reason: "FieldValueTypeInvalid",
            field: field.into(),
            text: format!("Invalid value: {value}: {detail}"),
        }
    }

    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[String]) -> Self {
        FieldCause {
            reason: "FieldValueNotSupported",
            field: field.into(),
            text: format!(
                "Unsupported value: {value}: supported values: {}",
                supported.join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_not_found_names_the_qualified_resource() {
        let e = ApiError::not_found("ray.io", "rayclusters", "c");
        assert_eq!(e.message, "rayclusters.ray.io \"c\" not found");
        let s = e.to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["kind"], "rayclusters");
        let parsed: kube::core::Status = serde_json::from_value(s).unwrap();
        assert_eq!(parsed.code, 404);
    }

    #[test]
    fn one_invalid_field_is_inline_and_several_are_bracketed() {
        let one = ApiError::invalid(
            "ray.io",
            "RayCluster",
            "c",
            vec![FieldCause::required("spec.x", "")],
        );
        assert_eq!(
            one.message,
            "RayCluster.ray.io \"c\" is invalid: spec.x: Required value"
        );
        let two = ApiError::invalid(
            "",
            "Pod",
            "p",
            vec![
                FieldCause::required("spec.a", ""),
                FieldCause::required("spec.b", ""),
            ],
        );
        assert_eq!(
            two.message,
            "Pod \"p\" is invalid: [spec.a: Required value, spec.b: Required value]"
        );
    }
}
