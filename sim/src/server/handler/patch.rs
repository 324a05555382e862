//! PATCH: merge, JSON and strategic merge patches (server-side apply goes to [`super::apply`]).

use serde_json::Value;

use super::request::{ApiRequest, Reply, Route, dry_run, meta_str};
use super::state::State;
use crate::server::patch::{self, PatchType};
use crate::server::status::ApiError;

impl State {
    /// PATCH: merge, JSON, strategic merge, or server-side apply.
    pub fn patch(&mut self, route: &Route, req: &ApiRequest, now: &str) -> Reply {
        let kind = PatchType::from_content_type(&req.content_type).ok_or_else(|| {
            ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
                if route.rt.builtin { ", application/strategic-merge-patch+json" } else { "" }
            ))
        })?;
        if kind == PatchType::Strategic && !route.rt.builtin {
            return Err(ApiError::unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let dry = dry_run(&req.query)?;
        if kind == PatchType::Apply {
            return self.apply(route, req, now, dry);
        }
        let patch_body: Value = serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let old = self.existing(route)?;
        let mut doc = (*old).clone();
        patch::apply(kind, &mut doc, &patch_body, route.shape())?;
        if !doc.is_object() {
            return Err(ApiError::bad_request("the patch produced a non-object"));
        }
        if let Some(rv) = meta_str(&doc, "resourceVersion")
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(self.conflict(route));
        }
        self.check_type_meta(route, &doc)?;
        self.write_update(route, req, now, (&old, doc), dry)
    }
}
