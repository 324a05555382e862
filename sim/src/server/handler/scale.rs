//! The `scale` subresource (`autoscaling/v1` `Scale`) of apps/v1 workloads and of CRDs that
//! declare `subresources.scale`.

use serde_json::{Value, json};

use super::request::{ApiRequest, Reply, Route, dry_run, meta_str, parse_body};
use super::state::State;
use crate::server::kinds::ScalePaths;
use crate::server::patch::{self, PatchType};
use crate::server::status::{ApiError, FieldCause};
use crate::server::store::ChangeType;

fn path_segments(path: &str) -> Vec<&str> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .collect()
}

fn read_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path_segments(path)
        .into_iter()
        .try_fold(obj, |v, seg| v.get(seg))
}

fn write_path(obj: &mut Value, path: &str, value: Value) {
    let segs = path_segments(path);
    let mut cur = obj;
    for seg in &segs[..segs.len().saturating_sub(1)] {
        if !cur[*seg].is_object() {
            cur[*seg] = json!({});
        }
        cur = &mut cur[*seg];
    }
    if let Some(last) = segs.last() {
        cur[*last] = value;
    }
}

/// `metav1.FormatLabelSelector`: requirements sorted by key, `k=v`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k`.
pub fn format_label_selector(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = vec![];
    for (k, v) in sel["matchLabels"].as_object().into_iter().flatten() {
        reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default().to_string();
        let mut values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let text = match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key, text));
    }
    reqs.sort();
    reqs.into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(",")
}

/// The `Scale` of `obj`.
pub fn scale_of(obj: &Value, paths: &ScalePaths) -> Value {
    let int = |p: &str| read_path(obj, p).and_then(Value::as_i64).unwrap_or(0);
    let mut status = json!({"replicas": int(&paths.status_replicas)});
    let selector = match &paths.label_selector {
        None => obj["spec"]
            .get("selector")
            .map(format_label_selector)
            .filter(|s| !s.is_empty()),
        Some(p) => read_path(obj, p).and_then(Value::as_str).map(String::from),
    };
    if let Some(s) = selector {
        status["selector"] = json!(s);
    }
    let meta = &obj["metadata"];
    let mut metadata = json!({});
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(f) {
            metadata[f] = v.clone();
        }
    }
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": metadata,
        "spec": {"replicas": int(&paths.spec_replicas)}, "status": status})
}

impl State {
    /// GET, PUT and PATCH (merge, JSON) on `{resource}/{name}/scale`: reads and writes
    /// `spec.replicas` of the object, with the Scale's `resourceVersion` as a precondition.
    pub fn scale(&mut self, route: &Route, req: &ApiRequest) -> Reply {
        let Some(paths) = route.rt.scale.clone() else {
            return Err(ApiError::no_route());
        };
        let main = Route {
            subresource: None,
            ..route.clone()
        };
        let old = self.existing(&main)?;
        let current = scale_of(&old, &paths);
        let wanted = match req.method.as_str() {
            "GET" => return Ok((200, current.into())),
            "PUT" => parse_body("Scale", &req.body)?,
            "PATCH" => {
                let kind = PatchType::from_content_type(&req.content_type)
                    .filter(|k| *k != PatchType::Apply)
                    .ok_or_else(|| {
                        ApiError::unsupported_media_type(
                            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
                        )
                    })?;
                let body: Value = serde_json::from_slice(&req.body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
                let mut doc = current.clone();
                patch::apply(
                    kind,
                    &mut doc,
                    &body,
                    crate::server::fields::Shape {
                        rt: &route.rt,
                        version: &route.version,
                    },
                )?;
                doc
            }
            m => {
                return Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({m})"
                )));
            }
        };
        let dry = dry_run(&req.query)?;
        if let Some(rv) = meta_str(&wanted, "resourceVersion").filter(|rv| !rv.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &route.rt.group,
                &route.rt.plural,
                route.name.as_deref().unwrap_or_default(),
            ));
        }
        let replicas = match &wanted["spec"]["replicas"] {
            Value::Null => 0,
            v => v.as_i64().filter(|r| *r >= 0).ok_or_else(|| {
                ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    route.name.as_deref().unwrap_or_default(),
                    vec![FieldCause::invalid(
                        "spec.replicas",
                        &v.to_string(),
                        "must be greater than or equal to 0",
                    )],
                )
            })?,
        };
        let mut next = (*old).clone();
        write_path(&mut next, &paths.spec_replicas, json!(replicas));
        if next == *old || dry {
            return Ok((200, scale_of(&next, &paths).into()));
        }
        let g = next["metadata"]["generation"].as_i64().unwrap_or(0);
        next["metadata"]["generation"] = json!(g + 1);
        let stored = self.store.commit(&main.key(), ChangeType::Modified, next);
        Ok((200, scale_of(&stored, &paths).into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_format_as_metav1_does() {
        let sel = json!({"matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]},
                                 {"key": "d", "operator": "DoesNotExist"}]});
        assert_eq!(format_label_selector(&sel), "a=1,b=2,c in (x,y),!d");
    }

    #[test]
    fn a_crd_scale_reads_its_declared_paths() {
        let paths = ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".status.hpaPodSelector".into()),
        };
        let obj = json!({"metadata": {"name": "w", "namespace": "t", "uid": "u1", "resourceVersion": "7"},
            "spec": {"replicas": 3}, "status": {"replicas": 2, "hpaPodSelector": "role=leader"}});
        let s = scale_of(&obj, &paths);
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(
            s["status"],
            json!({"replicas": 2, "selector": "role=leader"})
        );
        assert_eq!(s["metadata"]["uid"], "u1");
    }
}
