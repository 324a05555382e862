//! PUT: replace, with optimistic concurrency on `resourceVersion`.

use super::request::{ApiRequest, Reply, Route, dry_run, meta_str, parse_body};
use super::state::State;
use crate::server::status::{ApiError, FieldCause};

impl State {
    /// PUT: update (replace), with optimistic concurrency on `resourceVersion`.
    pub fn replace(&mut self, route: &Route, req: &ApiRequest, now: &str) -> Reply {
        let mut new = parse_body(&route.rt.kind, &req.body)?;
        self.check_type_meta(route, &new)?;
        self.check_namespace_in_body(route, &mut new)?;
        let dry = dry_run(&req.query)?;
        let old = self.existing(route)?;
        let name = route.name.as_deref().unwrap_or_default();
        if let Some(n) = meta_str(&new, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        match meta_str(&new, "resourceVersion") {
            Some(rv) if !rv.is_empty() && Some(rv) != meta_str(&old, "resourceVersion") => {
                return Err(self.conflict(route));
            }
            Some(rv) if !rv.is_empty() => {}
            _ if !route.rt.builtin => {
                // named by group-resource here, as the server's update precondition does
                return Err(ApiError::invalid(
                    &route.rt.group,
                    &route.rt.plural,
                    route.name.as_deref().unwrap_or_default(),
                    vec![FieldCause::invalid(
                        "metadata.resourceVersion",
                        "0",
                        "must be specified for an update",
                    )],
                ));
            }
            _ => {}
        }
        self.write_update(route, req, now, (&old, new), dry)
    }
}
