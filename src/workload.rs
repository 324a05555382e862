//! Workload state and Kueue's slice annotations, read one way for admission, slices and the gate.
//!
//! The predicates read a Workload's status as Kueue v0.19 writes it (`QuotaReserved`, `Admitted`,
//! `Evicted`, `Finished`); [`replacement_for`] parses `kueue.x-k8s.io/workload-slice-replacement-for`
//! (Kueue writes the old slice's `namespace/name` key; a bare name is read as the Workload's own
//! namespace, another namespace is ignored, as Kueue does); [`slice_name`] names a new slice and
//! [`sort_chain_order`] orders a chain oldest first along its links.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::conditions;
use crate::meta;
use crate::types::kueue::{
    self, WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION, Workload, WorkloadStatus, condition,
};

/// Annotation on the root of a new chain naming `<ns>/<slice>` it supersedes (Kueue-compatible
/// mode: a chain whose PodSet list changed starts anew and links back with this).
pub const SUPERSEDES_ANNOTATION: &str = "raygate.io/supersedes";

/// Whether condition `type_` is `True`.
pub fn condition_true(status: Option<&WorkloadStatus>, type_: &str) -> bool {
    status.is_some_and(|s| conditions::is_true(&s.conditions, type_))
}

/// `Finished=True`.
pub fn is_finished(status: Option<&WorkloadStatus>) -> bool {
    condition_true(status, condition::FINISHED)
}

/// Holds quota: `QuotaReserved=True` with `status.admission`, not finished (Kueue calls this
/// "quota reserved"; `Admitted` also needs admission checks, which raygate has none of).
pub fn holds_quota(status: Option<&WorkloadStatus>) -> bool {
    !is_finished(status)
        && condition_true(status, condition::QUOTA_RESERVED)
        && status.is_some_and(|s| s.admission.is_some())
}

/// Holds quota and `Admitted=True`: its pods may run.
pub fn is_admitted(status: Option<&WorkloadStatus>) -> bool {
    holds_quota(status) && condition_true(status, condition::ADMITTED)
}

/// `Evicted=True`.
pub fn is_evicted(status: Option<&WorkloadStatus>) -> bool {
    condition_true(status, condition::EVICTED)
}

/// A `namespace/name` reference read in `namespace`: a bare name is in `namespace`; a key in
/// another namespace (or an empty one) is `None`.
fn key_in(value: &str, namespace: &str) -> Option<String> {
    match value.split_once('/') {
        Some((ns, n)) if ns == namespace && !n.is_empty() => Some(meta::key_of(ns, n)),
        Some(_) => None,
        None if !value.is_empty() => Some(meta::key_of(namespace, value)),
        None => None,
    }
}

/// Key (`namespace/name`) of the slice `w` (in `namespace`) replaces, by Kueue's
/// `workload-slice-replacement-for` (`namespace/name` as Kueue writes it, or a bare name).
pub fn replacement_for(w: &Workload, namespace: &str) -> Option<String> {
    key_in(
        meta::annotation(&w.metadata, WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION)?,
        namespace,
    )
}

/// Key of the slice `w` follows in its chain: the one it replaces (Kueue's annotation) or the one
/// its new chain supersedes (raygate's [`SUPERSEDES_ANNOTATION`]).
pub fn predecessor(w: &Workload) -> Option<String> {
    let ns = w.metadata.namespace.as_deref().unwrap_or_default();
    replacement_for(w, ns)
        .or_else(|| key_in(meta::annotation(&w.metadata, SUPERSEDES_ANNOTATION)?, ns))
}

/// How many predecessor links lead from `w` back to a slice with none, through `all`.
fn chain_depth(w: &Workload, all: &[Workload]) -> usize {
    let mut depth = 0;
    let mut at = w;
    // A link cycle cannot be written by raygate; the bound keeps a hand-made one finite.
    while depth <= all.len() {
        let Some(prev) =
            predecessor(at).and_then(|k| all.iter().find(|o| meta::key(&o.metadata) == k))
        else {
            break;
        };
        depth += 1;
        at = prev;
    }
    depth
}

/// Oldest first along the chain: a slice comes after every slice it (transitively) replaces,
/// whatever their creation times (one-second resolution, so a replacement created in the same
/// second as its predecessor would otherwise sort by name); unrelated slices by creation time,
/// then name. `all` is every Workload of the owner, finished ones included (links pass through them).
pub fn sort_chain_order(ws: &mut [&Workload], all: &[Workload]) {
    ws.sort_by_cached_key(|w| {
        (
            chain_depth(w, all),
            w.metadata.creation_timestamp.as_ref().map(|t| t.0),
            w.metadata.name.clone(),
        )
    });
}

/// Deterministic name of a new slice of RayService `owner` (UID `uid`):
/// `rayservice-<name>-<hash>` over the UID, the slice it replaces and its PodSets, salted until it
/// differs from every name in `taken`.
pub fn slice_name(
    owner: &str,
    uid: &str,
    replaces: Option<&str>,
    pod_sets: &[kueue::PodSet],
    taken: &BTreeSet<String>,
) -> String {
    const HASH: usize = 10;
    let prefix_max = 63 - HASH - 1;
    let mut prefix = format!("rayservice-{owner}");
    prefix.truncate(prefix_max);
    let prefix = prefix.trim_end_matches(['-', '.']).to_string();
    for salt in 0u32.. {
        let mut h = Sha256::new();
        h.update(uid.as_bytes());
        h.update(b"|");
        h.update(replaces.unwrap_or("root").as_bytes());
        for p in pod_sets {
            h.update(format!("|{}={}", p.name, p.count).as_bytes());
        }
        h.update(format!("|{salt}").as_bytes());
        let hex: String = h
            .finalize()
            .iter()
            .take(HASH / 2)
            .map(|b| format!("{b:02x}"))
            .collect();
        let candidate = format!("{prefix}-{hex}");
        if !taken.contains(&candidate) {
            return candidate;
        }
    }
    unreachable!("u32 salts exhausted") // 2^32 distinct hashes cannot all be taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::kueue::WorkloadSpec;

    fn wl(ns: &str, name: &str, replacement_for: Option<&str>) -> Workload {
        let mut w = Workload::new(name, WorkloadSpec::default());
        w.metadata.namespace = Some(ns.into());
        if let Some(v) = replacement_for {
            w.metadata.annotations = Some(
                [(
                    WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION.to_string(),
                    v.to_string(),
                )]
                .into(),
            );
        }
        w
    }

    #[test]
    fn replacement_for_reads_kueues_key_and_a_bare_name() {
        assert_eq!(
            replacement_for(&wl("ns", "new", Some("ns/old")), "ns"),
            Some("ns/old".into())
        );
        assert_eq!(
            replacement_for(&wl("ns", "new", Some("old")), "ns"),
            Some("ns/old".into())
        );
        assert_eq!(
            replacement_for(&wl("ns", "new", Some("other/old")), "ns"),
            None
        );
        assert_eq!(replacement_for(&wl("ns", "new", Some("")), "ns"), None);
        assert_eq!(replacement_for(&wl("ns", "new", Some("ns/")), "ns"), None);
        assert_eq!(replacement_for(&wl("ns", "new", None), "ns"), None);
    }

    #[test]
    fn chain_order_follows_bare_name_links_too() {
        let all = vec![
            wl("ns", "b-new", Some("z-old")),
            wl("ns", "z-old", None),
            wl("ns", "c-newest", Some("ns/b-new")),
        ];
        let mut ws: Vec<&Workload> = all.iter().collect();
        sort_chain_order(&mut ws, &all);
        let names: Vec<_> = ws
            .iter()
            .map(|w| w.metadata.name.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(names, ["z-old", "b-new", "c-newest"]);
    }
}
