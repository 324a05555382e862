//! Workload slice chains (pure): which Workloads a RayService's current PodSets need.
//!
//! Kueue's workload slicing (`pkg/workloadslicing`) models an elastic job as a chain of Workloads:
//! a scale-up of a slice that holds quota is a *replacement* slice with the full new counts,
//! charged only its delta over the old one, which is finished once the replacement is admitted; a
//! scale-down shrinks the reserved slice in place. [`plan`] makes the same decisions from the
//! RayService's desired PodSets and its not-finished Workloads, and goes beyond Kueue in two ways:
//!
//! * PodSets are matched to the chain's PodSets by worker group and per-pod requests, not by name.
//!   Names from [`crate::podsets::of_service`] move when children come and go (after a promotion
//!   the surviving child's shape gets the plain name back); matching by shape keeps a slice from
//!   being "scaled down in place" onto a cheaper shape of the same name.
//! * A change of the PodSet set (a worker group added, removed, renamed, or split by shape) is still
//!   a replacement charged by its delta ([`ChainMode::Builtin`]). A real Kueue's flavor assigner
//!   panics on such a replacement, so with [`ChainMode::KueueCompatible`] the replacement keeps the
//!   chain's PodSet list identical (vanished groups keep count 0) and a PodSet new to the chain
//!   starts a new chain (annotated [`SUPERSEDES_ANNOTATION`]), charged in full.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest, Sha256};

use crate::admission;
use crate::podsets::{PodSet, pod_requests, shape_name};
use crate::quantity::Resources;
use crate::types::kueue::{
    self, ELASTIC_JOB_ANNOTATION, PriorityClassRef, QUEUE_NAME_LABEL,
    WORKLOAD_SLICE_NAME_ANNOTATION, WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION, Workload,
    WorkloadSpec, condition, reason,
};

/// Annotation on a Workload PodSet template naming the KubeRay worker group (`headgroup` for heads).
pub const GROUP_ANNOTATION: &str = "raygate.io/worker-group";
/// Annotation on the root of a new chain naming `<ns>/<slice>` it supersedes (Kueue-compatible mode).
pub const SUPERSEDES_ANNOTATION: &str = "raygate.io/supersedes";
/// Label on raygate's Workloads naming their RayService.
pub const RAYSERVICE_LABEL: &str = "raygate.io/rayservice";
/// `app.kubernetes.io/managed-by` value on raygate's Workloads.
pub const MANAGED_BY: &str = "raygate";

/// How a chain may change its PodSet list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ChainMode {
    /// raygate admits: a replacement may add and drop PodSets; it is charged by its delta.
    #[default]
    Builtin,
    /// A real Kueue admits: a replacement keeps the chain's PodSet list identical.
    KueueCompatible,
}

/// The RayService a chain belongs to.
#[derive(Clone, Debug, Default)]
pub struct SliceOwner {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Everything about the owner that goes into a new Workload.
#[derive(Clone, Debug, Default)]
pub struct SliceContext {
    pub owner: SliceOwner,
    /// `spec.queueName` (the owner's `kueue.x-k8s.io/queue-name` label).
    pub queue_name: String,
    pub priority_class_ref: Option<PriorityClassRef>,
    pub priority: Option<i32>,
    pub mode: ChainMode,
    /// Whether any child RayCluster still exists (an evicted slice keeps its quota until none does).
    pub children_exist: bool,
}

/// One change to the owner's Workloads.
#[derive(Clone, Debug, PartialEq)]
pub enum SliceAction {
    /// Create this Workload (server-side apply of metadata and spec).
    Create {
        workload: Box<Workload>,
        replaces: Option<String>,
    },
    /// Replace `spec.podSets` of an existing slice: a pending slice's change, or a scale-down in place.
    SetPodSets {
        name: String,
        pod_sets: Vec<kueue::PodSet>,
        why: &'static str,
    },
    /// Mark a slice `Finished=True` with this reason.
    Finish {
        name: String,
        reason: &'static str,
        message: String,
    },
}

/// The actions that bring the chain in line with the desired PodSets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlicePlan {
    pub actions: Vec<SliceAction>,
    /// The slice that covers the desired PodSets once admitted (`None` while an eviction drains).
    pub target: Option<String>,
}

// ------------------------------------------------------------------------------------------------
// Reading Workload state
// ------------------------------------------------------------------------------------------------

/// Whether condition `type_` is `True`.
pub fn condition_true(w: &Workload, type_: &str) -> bool {
    admission::condition_true(w.status.as_ref(), type_)
}

pub fn is_finished(w: &Workload) -> bool {
    admission::is_finished(w.status.as_ref())
}

/// Holds quota: `QuotaReserved=True` with an admission, not finished.
pub fn is_reserved(w: &Workload) -> bool {
    admission::holds_quota(w.status.as_ref())
}

/// Reserved and `Admitted=True`: its pods may run.
pub fn is_admitted(w: &Workload) -> bool {
    is_reserved(w) && condition_true(w, condition::ADMITTED)
}

pub fn is_evicted(w: &Workload) -> bool {
    admission::is_evicted(w.status.as_ref())
}

fn annotation<'a>(w: &'a Workload, key: &str) -> Option<&'a str> {
    w.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// `<ns>/<name>` of the slice `w` replaces (Kueue's replacement or raygate's new chain).
pub fn replaces(w: &Workload) -> Option<&str> {
    annotation(w, WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION)
        .or_else(|| annotation(w, SUPERSEDES_ANNOTATION))
}

fn key(w: &Workload) -> String {
    format!(
        "{}/{}",
        w.metadata.namespace.as_deref().unwrap_or_default(),
        w.metadata.name.as_deref().unwrap_or_default()
    )
}

fn name(w: &Workload) -> String {
    w.metadata.name.clone().unwrap_or_default()
}

/// How many replacement links lead from `w` back to a slice with none, through `all`.
fn chain_depth(w: &Workload, all: &[Workload]) -> usize {
    let mut depth = 0;
    let mut at = w;
    // A link cycle cannot be written by raygate; the bound keeps a hand-made one finite.
    while depth <= all.len() {
        let Some(prev) = replaces(at).and_then(|k| all.iter().find(|o| key(o) == k)) else {
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

/// Group and per-pod requests of a Workload PodSet (`None` when its template cannot be read).
fn shape(ps: &kueue::PodSet) -> Option<(String, Resources)> {
    let group = ps
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(GROUP_ANNOTATION))
        .cloned()
        .unwrap_or_else(|| ps.name.clone());
    let requests = match &ps.template.spec {
        Some(spec) => pod_requests(spec, "template.spec", &ps.name).ok()?,
        None => Resources::new(),
    };
    Some((group, requests))
}

/// Count a slice grants a PodSet: the admitted count capped by the spec count; 0 when unassigned.
fn granted(w: &Workload, ps: &kueue::PodSet) -> i32 {
    let admitted = w
        .status
        .as_ref()
        .and_then(|s| s.admission.as_ref())
        .and_then(|a| a.pod_set_assignments.iter().find(|p| p.name == ps.name))
        // An assignment without a count (older Kueue) grants the spec count; a PodSet with no
        // assignment, or a slice with no admission, grants nothing.
        .map(|p| p.count.unwrap_or(ps.count))
        .unwrap_or(0);
    admitted.min(ps.count)
}

// ------------------------------------------------------------------------------------------------
// Aligning desired PodSets with a chain
// ------------------------------------------------------------------------------------------------

/// A Workload PodSet for a desired PodSet: its template with metadata cut to labels and
/// annotations (all Kueue accepts there) plus the group annotation.
fn workload_podset(p: &PodSet, name: &str) -> kueue::PodSet {
    let meta = p.template.metadata.clone().unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(GROUP_ANNOTATION.to_string(), p.group.clone());
    kueue::PodSet {
        name: name.to_string(),
        count: p.count,
        min_count: None,
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: meta.labels,
                annotations: Some(annotations),
                ..Default::default()
            }),
            spec: p.template.spec.clone(),
        },
    }
}

/// Desired PodSets renamed onto `chain`'s PodSets by (group, per-pod requests), in the chain's
/// order; chain PodSets nothing matches follow with count 0; desired PodSets new to the chain come
/// last, under their own name or a shape-suffixed one when the chain uses that name already.
fn align(desired: &[PodSet], chain: &[kueue::PodSet]) -> Aligned {
    let chain_shapes: Vec<Option<(String, Resources)>> = chain.iter().map(shape).collect();
    let mut matched: Vec<Option<&PodSet>> = vec![None; chain.len()];
    let mut unmatched: Vec<&PodSet> = Vec::new();
    for d in desired {
        let slot = (0..chain.len()).find(|&i| {
            matched[i].is_none()
                && chain_shapes[i]
                    .as_ref()
                    .is_some_and(|(g, r)| *g == d.group && *r == d.requests)
        });
        match slot {
            Some(i) => matched[i] = Some(d),
            None => unmatched.push(d),
        }
    }
    let mut out: Vec<kueue::PodSet> = chain
        .iter()
        .zip(&matched)
        .map(|(c, m)| match m {
            Some(d) => workload_podset(d, &c.name),
            None => kueue::PodSet {
                count: 0,
                ..c.clone()
            },
        })
        .collect();
    let leftover: Vec<bool> = matched.iter().map(Option::is_none).collect();
    let new = unmatched.len();
    for d in unmatched {
        let mut candidate = d.name.clone();
        for hex_len in [8, 16, 64] {
            if !out.iter().any(|o| o.name == candidate) {
                break;
            }
            candidate = shape_name(&d.name, d, hex_len);
        }
        out.push(workload_podset(d, &candidate));
    }
    Aligned {
        list: out,
        leftover,
        new,
    }
}

/// Desired PodSets laid onto a chain's list (see [`align`]).
struct Aligned {
    list: Vec<kueue::PodSet>,
    /// Per chain PodSet (a prefix of `list`): nothing desired matched it; it stays at count 0.
    leftover: Vec<bool>,
    /// How many entries at the end of `list` are new to the chain.
    new: usize,
}

impl Aligned {
    /// The list without the chain's leftovers (for slices whose PodSet list may change).
    fn without_leftovers(self) -> Vec<kueue::PodSet> {
        let leftover = self.leftover;
        self.list
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !leftover.get(*i).copied().unwrap_or(false))
            .map(|(_, p)| p)
            .collect()
    }
}

#[cfg(test)]
fn counts(list: &[kueue::PodSet]) -> Vec<(&str, i32)> {
    list.iter().map(|p| (p.name.as_str(), p.count)).collect()
}

/// `stored` with each PodSet's count taken from `counts` (same order and length), nothing else
/// changed.
fn scaled_down(stored: &[kueue::PodSet], counts: &[kueue::PodSet]) -> Vec<kueue::PodSet> {
    stored
        .iter()
        .zip(counts)
        .map(|(s, c)| kueue::PodSet {
            count: c.count.min(s.count),
            ..s.clone()
        })
        .collect()
}

/// Same names, counts and shapes (group and per-pod requests), in order.
fn same_podsets(a: &[kueue::PodSet], b: &[kueue::PodSet]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.name == y.name && x.count == y.count && shape(x) == shape(y))
}

/// Whether `w`, once admitted, grants every desired pod: each desired PodSet matches one of its
/// PodSets by group and per-pod requests with a granted count at least as large. This is the
/// gate's shape-exact race guard.
pub fn covers(w: &Workload, desired: &[PodSet]) -> bool {
    let aligned = align(desired, &w.spec.pod_sets);
    aligned.new == 0
        && aligned
            .list
            .iter()
            .zip(&w.spec.pod_sets)
            .all(|(a, have)| a.count <= granted(w, have))
}

// ------------------------------------------------------------------------------------------------
// Planning
// ------------------------------------------------------------------------------------------------

/// Deterministic name of a new slice: `rayservice-<name>-<hash>` over the owner's UID, the slice
/// it replaces and its PodSets, salted until it differs from every known Workload name.
fn slice_name(
    ctx: &SliceContext,
    replaces: Option<&str>,
    pod_sets: &[kueue::PodSet],
    taken: &BTreeSet<String>,
) -> String {
    const HASH: usize = 10;
    let prefix_max = 63 - HASH - 1;
    let mut prefix = format!("rayservice-{}", ctx.owner.name);
    prefix.truncate(prefix_max);
    let prefix = prefix.trim_end_matches(['-', '.']).to_string();
    for salt in 0u32.. {
        let mut h = Sha256::new();
        h.update(ctx.owner.uid.as_bytes());
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

/// The Workload object of a new slice.
fn build(
    ctx: &SliceContext,
    name: &str,
    pod_sets: Vec<kueue::PodSet>,
    root: &str,
    replacing: Option<(&str, &str)>,
) -> Workload {
    let mut annotations = std::collections::BTreeMap::from([
        (ELASTIC_JOB_ANNOTATION.to_string(), "true".to_string()),
        (WORKLOAD_SLICE_NAME_ANNOTATION.to_string(), root.to_string()),
    ]);
    if let Some((annotation, old)) = replacing {
        annotations.insert(annotation.to_string(), old.to_string());
    }
    let labels = std::collections::BTreeMap::from([
        (QUEUE_NAME_LABEL.to_string(), ctx.queue_name.clone()),
        (RAYSERVICE_LABEL.to_string(), ctx.owner.name.clone()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            MANAGED_BY.to_string(),
        ),
    ]);
    let mut w = Workload::new(
        name,
        WorkloadSpec {
            pod_sets,
            queue_name: Some(ctx.queue_name.clone()),
            priority_class_ref: ctx.priority_class_ref.clone(),
            priority: ctx.priority,
            active: None,
        },
    );
    w.metadata = ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(ctx.owner.namespace.clone()),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: Some(vec![OwnerReference {
            api_version: "ray.io/v1".into(),
            kind: "RayService".into(),
            name: ctx.owner.name.clone(),
            uid: ctx.owner.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..Default::default()
    };
    w
}

/// Whether a slice carries the owner's current queue and priority class. A class that does not
/// resolve (label removed, or the WorkloadPriorityClass missing or not yet seen) changes nothing,
/// so a transiently missing class never recreates a slice at priority 0.
fn same_queue_and_priority(ctx: &SliceContext, w: &Workload) -> bool {
    let same_class = match &ctx.priority_class_ref {
        Some(want) => w.spec.priority_class_ref.as_ref().map(|r| &r.name) == Some(&want.name),
        None => true,
    };
    w.spec.queue_name.as_deref() == Some(ctx.queue_name.as_str()) && same_class
}

/// Plans the owner's slices for `desired` PodSets, given its Workloads (any state; finished ones
/// only reserve their names).
pub fn plan(ctx: &SliceContext, desired: &[PodSet], workloads: &[Workload]) -> SlicePlan {
    let taken: BTreeSet<String> = workloads.iter().map(name).collect();
    let mut live: Vec<&Workload> = workloads.iter().filter(|w| !is_finished(w)).collect();
    sort_chain_order(&mut live, workloads);
    let mut actions = Vec::new();

    // Evicted slices (preempted, queue stopped) keep their quota until the owner's pods are gone,
    // then finish; a deactivated one (`spec.active=false`) is the user's stop and stays.
    let (evicted, live): (Vec<&Workload>, Vec<&Workload>) = live
        .into_iter()
        .partition(|w| is_evicted(w) && w.spec.active != Some(false));
    if !evicted.is_empty() {
        if ctx.children_exist {
            return SlicePlan {
                actions,
                target: None,
            };
        }
        for e in &evicted {
            actions.push(SliceAction::Finish {
                name: name(e),
                reason: reason::OUT_OF_SYNC,
                message: "evicted and the RayService's pods are gone; a new slice is queued".into(),
            });
        }
    }

    // At most one reserved slice: the newest. Older ones were replaced (or are strays).
    let reserved: Vec<&Workload> = live.iter().copied().filter(|w| is_reserved(w)).collect();
    let head = reserved.last().copied();
    for old in reserved.iter().rev().skip(1) {
        let replaced = live.iter().any(|w| replaces(w) == Some(key(old).as_str()));
        actions.push(SliceAction::Finish {
            name: name(old),
            reason: if replaced {
                reason::WORKLOAD_SLICE_REPLACED
            } else {
                reason::OUT_OF_SYNC
            },
            message: match head {
                Some(h) if replaced => format!("replaced by {}", name(h)),
                Some(h) => format!("superseded by reserved slice {}", name(h)),
                None => String::new(),
            },
        });
    }

    // At most one pending slice: the newest that replaces the head (or, with no head, the newest).
    let pending: Vec<&Workload> = live.iter().copied().filter(|w| !is_reserved(w)).collect();
    let candidate = match head {
        Some(h) => pending
            .iter()
            .rev()
            .find(|w| replaces(w) == Some(key(h).as_str()))
            .copied(),
        None => pending.last().copied(),
    };
    for p in pending
        .iter()
        .filter(|p| !candidate.is_some_and(|c| std::ptr::eq(c, **p)))
    {
        actions.push(SliceAction::Finish {
            name: name(p),
            reason: reason::OUT_OF_SYNC,
            message: "a stale pending slice; the chain moved on".into(),
        });
    }

    let Some(head) = head else {
        // No quota held: one pending slice tracks the desired PodSets in place.
        let requeued = candidate.filter(|p| !same_queue_and_priority(ctx, p));
        let candidate = match requeued {
            // Holds no quota: a slice in the wrong queue or at the wrong priority (a fixed queue
            // label typo, a raised priority class) is recreated so it takes effect.
            Some(p) => {
                actions.push(SliceAction::Finish {
                    name: name(p),
                    reason: reason::OUT_OF_SYNC,
                    message: format!(
                        "the RayService's queue or priority class changed (LocalQueue {}, priority class {}): a new slice replaces it",
                        ctx.queue_name,
                        ctx.priority_class_ref
                            .as_ref()
                            .map(|r| r.name.as_str())
                            .unwrap_or("none")
                    ),
                });
                None
            }
            None => candidate,
        };
        return match candidate {
            Some(p) => {
                let aligned = align(desired, &p.spec.pod_sets).without_leftovers();
                if !same_podsets(&aligned, &p.spec.pod_sets) {
                    actions.push(SliceAction::SetPodSets {
                        name: name(p),
                        pod_sets: aligned,
                        why: "pending slice follows the PodSets",
                    });
                }
                SlicePlan {
                    actions,
                    target: Some(name(p)),
                }
            }
            None => {
                let pod_sets = align(desired, &[]).list;
                let n = slice_name(ctx, None, &pod_sets, &taken);
                actions.push(SliceAction::Create {
                    workload: Box::new(build(ctx, &n, pod_sets, &n, None)),
                    replaces: None,
                });
                SlicePlan {
                    actions,
                    target: Some(n),
                }
            }
        };
    };

    let aligned = align(desired, &head.spec.pod_sets);
    let within_head = aligned.new == 0
        && aligned
            .list
            .iter()
            .zip(&head.spec.pod_sets)
            .all(|(a, h)| a.count <= h.count);
    if within_head {
        // Equal or a scale-down: the head covers it; shrink in place, drop any pending replacement.
        // Kueue keeps a reserved Workload's PodSets immutable but for count decreases
        // (`validateImmutablePodSets`), so the in-place list is the head's own with new counts
        // (as Kueue's `ApplyPodSetCounts`); a template change of the same shape (an image-only
        // upgrade) is not written to a reserved slice.
        let shrunk = scaled_down(&head.spec.pod_sets, &aligned.list);
        if shrunk != head.spec.pod_sets {
            actions.push(SliceAction::SetPodSets {
                name: name(head),
                pod_sets: shrunk,
                why: "scale-down in place",
            });
        }
        if let Some(p) = candidate {
            actions.push(SliceAction::Finish {
                name: name(p),
                reason: reason::OUT_OF_SYNC,
                message: format!("no longer needed: {} covers the PodSets", name(head)),
            });
        }
        return SlicePlan {
            actions,
            target: Some(name(head)),
        };
    }

    // A scale-up of the reserved head: a replacement slice (or, Kueue-compatible with PodSets new
    // to the chain, the root of a new chain).
    let new_chain = ctx.mode == ChainMode::KueueCompatible && aligned.new > 0;
    let (pod_sets, link) = if new_chain {
        (aligned.without_leftovers(), SUPERSEDES_ANNOTATION)
    } else if ctx.mode == ChainMode::KueueCompatible {
        (aligned.list, WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION)
    } else {
        (
            aligned.without_leftovers(),
            WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION,
        )
    };
    if let Some(p) = candidate {
        let same_kind = annotation(p, link).is_some();
        if same_kind && same_podsets(&p.spec.pod_sets, &pod_sets) {
            return SlicePlan {
                actions,
                target: Some(name(p)),
            };
        }
        if same_kind {
            actions.push(SliceAction::SetPodSets {
                name: name(p),
                pod_sets,
                why: "pending replacement follows the PodSets",
            });
            return SlicePlan {
                actions,
                target: Some(name(p)),
            };
        }
        actions.push(SliceAction::Finish {
            name: name(p),
            reason: reason::OUT_OF_SYNC,
            message: "the PodSets changed shape; a new slice replaces it".into(),
        });
    }
    let head_key = key(head);
    let n = slice_name(ctx, Some(&head_key), &pod_sets, &taken);
    let root = if new_chain {
        n.clone()
    } else {
        annotation(head, WORKLOAD_SLICE_NAME_ANNOTATION)
            .map(str::to_string)
            .unwrap_or_else(|| name(head))
    };
    let workload = build(ctx, &n, pod_sets, &root, Some((link, &head_key)));
    actions.push(SliceAction::Create {
        workload: Box::new(workload),
        replaces: Some(name(head)),
    });
    SlicePlan {
        actions,
        target: Some(n),
    }
}

// ------------------------------------------------------------------------------------------------
// Retention
// ------------------------------------------------------------------------------------------------

/// How long finished slices are kept (like Kueue's `objectRetentionPolicies.workloads.afterFinished`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A finished slice older than this (since its `Finished` condition) may be deleted.
    pub after_finished: std::time::Duration,
    /// The newest this many finished slices of each chain are kept whatever their age, for debugging.
    pub keep_per_chain: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            after_finished: std::time::Duration::from_secs(3600),
            keep_per_chain: 3,
        }
    }
}

/// When `w` finished (`Finished=True`'s transition time).
fn finished_at(w: &Workload) -> Option<k8s_openapi::jiff::Timestamp> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition::FINISHED && c.status == "True")
        .map(|c| c.last_transition_time.0)
}

/// The finished slices to delete at `now`: finished longer than `after_finished` ago and not among
/// the newest `keep_per_chain` finished slices of their chain (`workload-slice-name`, else their
/// own name). Oldest first.
pub fn expired(
    workloads: &[Workload],
    now: k8s_openapi::jiff::Timestamp,
    retention: &Retention,
) -> Vec<String> {
    let mut by_chain: std::collections::BTreeMap<String, Vec<&Workload>> = Default::default();
    for w in workloads.iter().filter(|w| is_finished(w)) {
        let chain = annotation(w, WORKLOAD_SLICE_NAME_ANNOTATION)
            .map(str::to_string)
            .unwrap_or_else(|| name(w));
        by_chain.entry(chain).or_default().push(w);
    }
    let after = k8s_openapi::jiff::SignedDuration::try_from(retention.after_finished)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    let mut out = Vec::new();
    for mut chain in by_chain.into_values() {
        sort_chain_order(&mut chain, workloads);
        let old = chain.len().saturating_sub(retention.keep_per_chain);
        for w in &chain[..old] {
            let expired = finished_at(w).is_some_and(|at| {
                at.checked_add(after)
                    .map(|deadline| deadline <= now)
                    .unwrap_or(false)
            });
            if expired {
                out.push(name(w));
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
