//! Field ownership (`metadata.managedFields`, FieldsV1) and server-side apply, after
//! `sigs.k8s.io/structured-merge-diff`: field sets of leaf paths, list-map elements keyed
//! `k:{...}`, set elements `v:...`, apply conflicts, forced takeover, and removal of fields an
//! applier stopped applying when no one else owns them.

/// Merging applied objects, apply conflicts and removal of fields no longer applied.
mod apply;
/// What a write changed and removed.
mod diff;
/// `metadata.managedFields` entries.
mod entries;
/// Field sets of objects, and values at a path.
mod paths;
/// Ownership after a non-apply write.
mod update;
/// FieldsV1 JSON.
mod v1;

use std::collections::BTreeSet;

use crate::server::kinds::{ListType, ResourceType};

pub use apply::apply;
pub use entries::{Entry, entries, set_entries};
pub use paths::{fields_of, get, remove};
pub use update::record_update;
pub use v1::{from_fields_v1, to_fields_v1};

/// A path of FieldsV1 tokens: `f:spec`, `k:{"name":"w"}`, `v:"x"`.
pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

/// The object's shape for merging: which lists are maps, sets or atomic.
#[derive(Clone, Copy)]
pub struct Shape<'a> {
    pub rt: &'a ResourceType,
    pub version: &'a str,
}

impl Shape<'_> {
    fn list_type(&self, names: &[String]) -> ListType {
        let n: Vec<&str> = names.iter().map(String::as_str).collect();
        self.rt.list_type(self.version, &n)
    }

    fn map_is_atomic(&self, names: &[String]) -> bool {
        let n: Vec<&str> = names.iter().map(String::as_str).collect();
        self.rt.map_is_atomic(self.version, &n)
    }
}

/// Which part of the object a write may own: the main resource (without `status` when the
/// kind has a status subresource) or the status subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Main { status_separate: bool },
    Status,
}

impl Scope {
    fn admits(&self, p: &Path) -> bool {
        let is_status = p.first().is_some_and(|f| f == "f:status");
        match self {
            Scope::Main { status_separate } => !(is_status && *status_separate),
            Scope::Status => is_status,
        }
    }

    fn subresource(&self) -> Option<&'static str> {
        match self {
            Scope::Main { .. } => None,
            Scope::Status => Some("status"),
        }
    }
}

/// Who is writing: manager, API version used, time, scope.
#[derive(Clone, Debug)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub time: &'a str,
    pub scope: Scope,
}

#[cfg(test)]
mod tests;
