//! POST: create (names, uids, generation, the status the server sets, schema).

use serde_json::{Value, json};

use super::request::{ApiRequest, Reply, Route, dry_run, manager_of, meta_str, parse_body};
use super::state::{State, Strict};
use super::update::tracks_generation;
use crate::server::fields::{self, Writer};
use crate::server::status::{ApiError, FieldCause};
use crate::server::store::{ChangeType, ResKey};

impl State {
    /// POST: create.
    pub fn create(&mut self, route: &Route, req: &ApiRequest, now: &str) -> Reply {
        let mut obj = parse_body(&route.rt.kind, &req.body)?;
        self.check_type_meta(route, &obj)?;
        self.check_namespace_in_body(route, &mut obj)?;
        let manager = manager_of(req);
        let dry = dry_run(&req.query)?;
        let w = Writer {
            manager: &manager,
            api_version: &route.rt.api_version(&route.version),
            time: now,
            scope: route.scope(),
        };
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        let mut obj = self.prepare_create(route, obj, now, Strict::of(req))?;
        fields::record_update(None, &mut obj, route.shape(), &w);
        self.finish_create(route, obj, dry)
    }

    pub(super) fn prepare_create(
        &mut self,
        route: &Route,
        mut obj: Value,
        now: &str,
        strict: Option<Strict>,
    ) -> Result<Value, ApiError> {
        super::update::drop_empty_metadata(&mut obj);
        if meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(g)) if !g.is_empty() => format!("{g}{}", self.name_suffix()),
            _ => {
                let mut causes = vec![FieldCause::required(
                    "metadata.name",
                    "name or generateName is required",
                )];
                if route.rt.schema(&route.version).is_some_and(|s| s.has_cel()) {
                    causes.push(crate::server::schema::cel_skipped());
                }
                return Err(ApiError::invalid(
                    &route.rt.group,
                    &route.rt.kind,
                    "",
                    causes,
                ));
            }
        };
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.insert("name".into(), json!(name));
            m.insert("uid".into(), json!(self.new_uid()));
            m.insert("creationTimestamp".into(), json!(now));
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("resourceVersion");
            m.remove("generation");
            if tracks_generation(&route.rt) {
                m.insert("generation".into(), json!(1));
            }
        }
        obj["apiVersion"] = json!(route.rt.api_version(&route.version));
        obj["kind"] = json!(route.rt.kind);
        let obj_spec = obj.get("spec").cloned().unwrap_or(Value::Null);
        if route.rt.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            match (route.rt.group.as_str(), route.rt.kind.as_str()) {
                ("", "Node") => {}
                ("", "Pod") => {
                    m.insert(
                        "status".into(),
                        super::binding::created_pod_status(&obj_spec),
                    );
                    if let Some(spec) = m.get_mut("spec") {
                        crate::server::admission::default_toleration_seconds(spec);
                    }
                    self.admit_pod(route, &name, &mut obj)?;
                }
                ("", "Namespace") => {
                    m.insert("status".into(), json!({"phase": "Active"}));
                }
                _ => {
                    m.remove("status");
                }
            }
        }
        if (route.rt.group.as_str(), route.rt.kind.as_str()) == ("", "Namespace") {
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
        }
        if (route.rt.group.as_str(), route.rt.kind.as_str()) == ("", "LimitRange") {
            crate::server::admission::default_limit_range(&mut obj);
        }
        self.admit_schema(route, &mut obj, None, strict)?;
        Ok(obj)
    }

    /// The LimitRanger and RuntimeClass plugins on a Pod being created ([`crate::server::admission`]),
    /// with the namespace's LimitRanges and the RuntimeClass it names from the store.
    fn admit_pod(&self, route: &Route, name: &str, pod: &mut Value) -> Result<(), ApiError> {
        let ns = route.namespace.as_deref().unwrap_or_default();
        let limit_ranges = self.store.list(&ResKey::from("/limitranges"), Some(ns));
        let ranges: Vec<&Value> = limit_ranges.iter().map(|lr| lr.as_ref()).collect();
        crate::server::admission::default_container_resources(&mut pod["spec"], &ranges);
        let Some(class) = pod["spec"]["runtimeClassName"].as_str().map(str::to_string) else {
            return Ok(());
        };
        let found = self
            .store
            .get(&ResKey::from("node.k8s.io/runtimeclasses"), "", &class);
        crate::server::admission::runtime_class(&mut pod["spec"], &class, found.as_deref())
            .map_err(|why| ApiError::forbidden("", "pods", name, &why))
    }

    pub(super) fn finish_create(&mut self, route: &Route, obj: Value, dry: bool) -> Reply {
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let ns = route.namespace.clone().unwrap_or_default();
        if self.store.get(&route.key(), &ns, &name).is_some() {
            return Err(ApiError::already_exists(
                &route.rt.group,
                &route.rt.plural,
                &name,
            ));
        }
        if route.rt.kind != "Namespace" || !route.rt.group.is_empty() {
            self.check_namespace(route)?;
        }
        if dry {
            return Ok((201, self.object_out(route, &obj).into()));
        }
        let stored = self
            .store
            .commit_encoded(&route.key(), ChangeType::Added, obj);
        Ok((201, self.stored_out(route, stored)))
    }
}
