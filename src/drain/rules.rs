//! `kubectl drain`'s pod rules and flags (`k8s.io/kubectl/pkg/drain/filters.go` at kubectl
//! v0.36.3, the filters `skipDeletedFilter`, `daemonSetFilter`, `mirrorPodFilter`,
//! `localStorageFilter`, `unreplicatedFilter`, in that order; `--pod-selector` is the list's label
//! selector in `drain.go`'s `GetPodsForDeletion`), for one pod. The flags keep kubectl's names; `--disable-eviction` is not offered (raygate only
//! evicts, so a PodDisruptionBudget is always honoured).
//!
//! Differences from kubectl, on purpose (docs/decisions.md):
//! finished pods are skipped rather than evicted (they hold no capacity and their logs stay), and
//! a pod blocked both by local storage and by having no controller reports both at once, so one
//! plan tells the operator every flag it needs.

use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::{controller_of, is_finished};
use crate::labels::Selector;

/// The taint the scheduler reads a cordon as (`NodeUnschedulable` admits a pod tolerating it).
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// `kubernetes.io/config.mirror`: the kubelet's annotation on a static pod's mirror.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// kubectl's messages for a pod that stops the drain (`filters.go`; `errors()` prefixes
/// "cannot delete ").
pub const DAEMON_SET_FATAL: &str = "DaemonSet-managed Pods (use --ignore-daemonsets to ignore)";
pub const LOCAL_STORAGE_FATAL: &str =
    "Pods with local storage (use --delete-emptydir-data to override)";
pub const UNMANAGED_FATAL: &str = "Pods that declare no controller (use --force to override)";
/// kubectl's warnings for pods a flag let through (or, for DaemonSets, skipped).
pub const DAEMON_SET_WARNING: &str = "ignoring DaemonSet-managed Pods";
pub const LOCAL_STORAGE_WARNING: &str = "deleting Pods with local storage";
pub const UNMANAGED_WARNING: &str = "deleting Pods that declare no controller";

/// `kubectl drain`'s flags that decide which pods are drained, and how (same names, same
/// defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainRules {
    /// `--ignore-daemonsets`: skip DaemonSet-managed pods instead of refusing to drain.
    pub ignore_daemonsets: bool,
    /// `--delete-emptydir-data`: evict pods with `emptyDir` volumes (their data is lost).
    pub delete_emptydir_data: bool,
    /// `--force`: evict pods that declare no controller, and pods of a DaemonSet that is gone.
    pub force: bool,
    /// `--pod-selector`: only pods matching this label query are drained ("" = all).
    pub pod_selector: String,
    /// `--skip-wait-for-delete-timeout`: skip pods deleting for longer than this many seconds
    /// (0 = never skip).
    pub skip_wait_for_delete_timeout_seconds: u64,
    /// `--grace-period`: the seconds each evicted pod gets to terminate, sent as the Eviction's
    /// `deleteOptions.gracePeriodSeconds` (drain.go `makeDeleteOptions`). `None` (kubectl's
    /// `-1`, any negative value): none is sent, so each pod gets its own
    /// `terminationGracePeriodSeconds`. `Some(0)`: the API server deletes the pod at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<u64>,
}

/// kubectl's `--grace-period` value (`int`, `-1` by default) as [`DrainRules::grace_period_seconds`]:
/// a negative value sends none.
pub fn grace_period(seconds: i64) -> Option<u64> {
    u64::try_from(seconds).ok()
}

/// What the rules decide for one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not drained; the reason says why.
    Skip(super::SkipReason),
    /// Drained; a flag may have let it through with a warning.
    Evict(Vec<super::Warning>),
    /// Stops the drain of its domain until a flag is given or the pod changes.
    Block(Vec<super::BlockReason>),
}

/// The checked rules: `pod_selector` parsed.
pub(super) struct Rules<'a> {
    pub flags: &'a DrainRules,
    pub pod_selector: Selector,
    pub now: Timestamp,
}

impl Rules<'_> {
    /// kubectl's filter chain for one pod. `daemon_set_exists` answers for the pod's DaemonSet
    /// controller (`None`: not observed, taken to exist).
    pub fn verdict(&self, pod: &Pod, daemon_set_exists: impl Fn(&str) -> bool) -> Verdict {
        use super::{BlockReason, SkipReason, Warning};
        if !self.pod_selector.matches(pod.metadata.labels.as_ref()) {
            return Verdict::Skip(SkipReason::NotSelected);
        }
        if self.deleting_too_long(pod) {
            return Verdict::Skip(SkipReason::DeletingTooLong);
        }
        if is_finished(pod) {
            return Verdict::Skip(SkipReason::Finished);
        }
        let mut warnings = Vec::new();
        let controller = controller_of(pod);
        if let Some(owner) = controller.filter(|o| is_daemon_set(o)) {
            if !daemon_set_exists(&owner.name) {
                if !self.flags.force {
                    return Verdict::Block(vec![BlockReason::DaemonSetMissing {
                        name: owner.name.clone(),
                    }]);
                }
                warnings.push(Warning::DaemonSetMissing {
                    name: owner.name.clone(),
                });
            } else if self.flags.ignore_daemonsets {
                return Verdict::Skip(SkipReason::DaemonSet);
            } else {
                return Verdict::Block(vec![BlockReason::DaemonSet]);
            }
        }
        if is_mirror(pod) {
            return Verdict::Skip(SkipReason::Mirror);
        }
        let mut blocks = Vec::new();
        if has_local_storage(pod) {
            match self.flags.delete_emptydir_data {
                true => warnings.push(Warning::LocalStorage),
                false => blocks.push(BlockReason::LocalStorage),
            }
        }
        if controller.is_none() {
            match self.flags.force {
                true => warnings.push(Warning::Unmanaged),
                false => blocks.push(BlockReason::Unmanaged),
            }
        }
        match blocks.is_empty() {
            true => Verdict::Evict(warnings),
            false => Verdict::Block(blocks),
        }
    }

    /// `skipDeletedFilter`: deleting for longer than `--skip-wait-for-delete-timeout` (whole
    /// seconds, strictly greater, as kubectl compares).
    fn deleting_too_long(&self, pod: &Pod) -> bool {
        let timeout = self.flags.skip_wait_for_delete_timeout_seconds;
        let Some(deleted) = pod.metadata.deletion_timestamp.as_ref() else {
            return false;
        };
        let elapsed = self.now.duration_since(deleted.0).as_secs();
        timeout > 0 && elapsed > 0 && elapsed as u64 > timeout
    }
}

/// `isControllerRefDaemonSet`: an `apps/v1` DaemonSet. Another API's `DaemonSet` kind (e.g.
/// OpenKruise's `apps.kruise.io` one) is an ordinary controller to kubectl.
fn is_daemon_set(owner: &OwnerReference) -> bool {
    owner.kind == "DaemonSet" && owner.api_version == "apps/v1"
}

/// A static pod's mirror (the API server cannot delete it for good).
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
}

/// Any `emptyDir` volume (kubectl's `hasLocalStorage`).
pub fn has_local_storage(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| v.empty_dir.is_some())
}

/// `v1.Toleration.ToleratesTaint`.
pub(super) fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref() {
        Some("Exists") => true,
        // Equal (the default): the key must be named
        _ => {
            !key.is_empty()
                && t.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
    }
}

/// Whether a copy of `pod` may be scheduled onto a cordoned node carrying `taint`: it tolerates
/// the cordon (the scheduler's `NodeUnschedulable` filter) and the taint, when that keeps pods
/// away (`NoSchedule`, `NoExecute`). A toleration `operator: Exists` without a key tolerates
/// both. Evicting such a pod may only bring its replacement back onto the same node.
pub fn tolerates_cordon(pod: &Pod, taint: Option<&Taint>) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let cordon = Taint {
        key: UNSCHEDULABLE_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    let keeps_away = |t: &&Taint| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute");
    std::iter::once(&cordon)
        .chain(taint.filter(keeps_away))
        .all(|t| tolerations.iter().any(|x| tolerates(x, t)))
}
