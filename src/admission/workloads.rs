//! One Workload as admission sees it ([`WorkloadEntry`]), derived once per Workload change: its
//! key, queue, priority, queue order time, per-PodSet requests, the slice it replaces, and the
//! quota it holds.
//!
//! Decides what an admitted Workload is charged: per PodSet `resourceUsage / admitted count`
//! (rounded up) × `min(spec count, admitted count) − reclaimable pods`, so an in-place scale-down
//! releases at once; and when a Workload is pending (waiting for quota), holding, or finished.
//! A bad template becomes the reason the Workload cannot be admitted, never an error.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::jiff::Timestamp;

use super::PendingMessage;
use super::ids::{CqIx, FlavorIx, FrIx, LqIx, ResourceIx};
use super::queues::{Queues, Target};
use super::quota::Charges;

/// The end of a preemptor's `QuotaReserved=False` message (written by `cycle`).
pub(crate) const PREEMPTOR_MARK: &str = ". Pending the preemption of ";
use crate::podsets::pod_requests;
use crate::quantity::{Format, Quantity};
use crate::types::kueue::{self, PodSetAssignment, Workload, WorkloadSpec, condition};
use crate::{conditions, meta, workload};

/// One request of a PodSet: the total over its pods (non-zero entries only).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ResourceRequest {
    /// `None`: no ClusterQueue or Cohort has quota for this resource.
    pub res: Option<ResourceIx>,
    pub name: String,
    pub total: Quantity,
}

/// A PodSet's needs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PodSetRequests {
    pub name: String,
    pub count: i32,
    pub requests: Vec<ResourceRequest>,
    pub node_selector: BTreeMap<String, String>,
}

/// Quota a Workload holds.
#[derive(Clone, Debug)]
pub(crate) struct HeldQuota {
    /// `None`: its ClusterQueue does not exist (it is counted nowhere).
    pub cq: Option<CqIx>,
    /// Per (flavor, resource), aggregated and sorted.
    pub usage: Charges,
    /// PodSet name → (resource name → flavor), for sticky flavors of a replacement.
    pub flavors: Vec<(String, Vec<(String, FlavorIx)>)>,
    pub admitted_at: Timestamp,
}

/// A Workload as admission sees it.
#[derive(Clone, Debug)]
pub(crate) struct WorkloadEntry {
    pub key: String,
    pub namespace: String,
    pub priority: i32,
    pub active: bool,
    pub target: Result<Target, String>,
    pub lq: Option<LqIx>,
    pub podsets: Result<Vec<PodSetRequests>, String>,
    /// Key of the slice it replaces (same namespace only).
    pub replaces: Option<String>,
    /// Reason of `Finished=True`.
    pub finished: Option<String>,
    pub held: Option<HeldQuota>,
    pub evicted: bool,
    /// Queue order time: the creation time, or the eviction time of a Workload requeued after
    /// one of [`REQUEUED_AT_EVICTION`].
    pub order_time: Timestamp,
    /// Pending, and preempted others for its quota in an earlier pass (its `QuotaReserved=False`
    /// message says so): it goes first in its round.
    pub preemptor: bool,
    /// A second object with the same key: ignored.
    pub duplicate: bool,
    /// Its PodSets' shape: Workloads with equal PodSets share it ([`NO_SHAPE`] for invalid
    /// PodSets), assigned by the index.
    pub shape: u32,
    /// The `QuotaReserved=False` it shows for its current generation, if it shows one: a pass
    /// leaves a Pending decision that would change nothing out of its result.
    pub shown: Option<Shown>,
}

/// The reason and message of a `QuotaReserved=False` condition a Workload shows.
#[derive(Clone, Debug)]
pub(crate) struct Shown {
    pub reason: Box<str>,
    pub message: PendingMessage,
}

impl Shown {
    /// Whether a Pending decision with `reason` and `message` would leave it as it is.
    pub fn is(&self, reason: &str, message: &PendingMessage) -> bool {
        *self.reason == *reason && self.message.reads_as(message)
    }
}

/// The shape of Workloads whose PodSets are invalid: like no other.
pub(crate) const NO_SHAPE: u32 = u32::MAX;

/// A hash of PodSets (names, counts, requests, node selectors): equal PodSets hash equal.
pub(crate) fn shape_hash(podsets: &[PodSetRequests]) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = foldhash::fast::FixedState::default().build_hasher();
    for ps in podsets {
        ps.name.hash(&mut h);
        ps.count.hash(&mut h);
        for r in &ps.requests {
            r.res.hash(&mut h);
            r.name.hash(&mut h);
            r.total.nanos().hash(&mut h);
        }
        ps.node_selector.hash(&mut h);
    }
    h.finish()
}

impl WorkloadEntry {
    /// True when it is waiting for quota (not holding any, not finished).
    pub fn is_pending(&self) -> bool {
        !self.duplicate && self.finished.is_none() && self.held.is_none()
    }
}

/// A quantity of `nanos` nano-units printed in the family of `like`.
pub(crate) fn quantity_from_nanos(nanos: i128, like: Quantity) -> Quantity {
    const NANO: i128 = 1_000_000_000;
    if like.format() == Format::BinarySI
        && nanos % NANO == 0
        && let Ok(units) = i64::try_from(nanos / NANO)
    {
        return Quantity::from_bytes(units);
    }
    let text = if like.format() == Format::DecimalExponent {
        format!("{nanos}e-9")
    } else {
        format!("{nanos}n")
    };
    Quantity::parse(&text).unwrap_or(like)
}

/// Eviction reasons after which a Workload queues at its eviction time; after any other
/// (preemption among them) it queues at its creation time. Kueue v0.19.2's
/// `Ordering.GetQueueOrderTimestamp` (`pkg/workload/workload.go`): a `waitForPodsReady` timeout
/// (with `requeuingStrategy.timestamp: Eviction`, the default) and an admission check; its third
/// case, a reclaim while borrowing, only when `PrioritySortingWithinCohort` (beta, on) is off.
pub const REQUEUED_AT_EVICTION: [&str; 2] = ["PodsReadyTimeout", "AdmissionCheck"];

/// Largest request total accepted (2^100 nano-units, about 10^21 units): sums of many stay far
/// from overflowing the 128-bit arithmetic.
const MAX_REQUEST_NANOS: i128 = 1 << 100;

/// Per pod, `resourceUsage` is for `admitted` pods; the Workload is charged for `charged` of them.
struct PodCounts {
    admitted: i64,
    charged: i64,
}

impl PodCounts {
    /// `min(spec count, admitted count) − reclaimable pods`, at least 0.
    fn of(w: &Workload, psa: &PodSetAssignment) -> PodCounts {
        let spec_count = w
            .spec
            .pod_sets
            .iter()
            .find(|p| p.name == psa.name)
            .map(|p| p.count);
        let admitted = i64::from(psa.count.or(spec_count).unwrap_or(0).max(0));
        let reclaimable = w
            .status
            .as_ref()
            .and_then(|s| s.reclaimable_pods.iter().find(|r| r.name == psa.name))
            .map_or(0, |r| i64::from(r.count.max(0)));
        let charged =
            (i64::from(spec_count.unwrap_or(i32::MAX).max(0)).min(admitted) - reclaimable).max(0);
        PodCounts { admitted, charged }
    }

    /// `total` (for `admitted` pods) scaled to `charged` pods, per pod rounded up.
    fn scale(&self, total: Quantity) -> Quantity {
        if self.charged == self.admitted {
            return total;
        }
        let n = i128::from(self.admitted);
        let per_pod = (total.nanos() + n - 1) / n;
        quantity_from_nanos(per_pod * i128::from(self.charged), total)
    }
}

/// A Workload's namespace (`default` when unset, as everywhere in admission).
fn namespace_of(w: &Workload) -> &str {
    w.metadata.namespace.as_deref().unwrap_or("default")
}

impl Queues {
    /// Everything admission needs to know about one Workload.
    pub fn derive(&self, w: &Workload) -> WorkloadEntry {
        let namespace = w.metadata.namespace.as_deref().unwrap_or("default");
        let name = w.metadata.name.as_deref().unwrap_or_default();
        let key = meta::key_of(namespace, name);
        let (lq, target) = self.resolve_queue(namespace, w.spec.queue_name.as_deref());
        let mut entry = WorkloadEntry {
            podsets: self.podset_requests(w, &key),
            key,
            namespace: namespace.to_string(),
            priority: self.priority(&w.spec),
            active: w.spec.active != Some(false),
            target,
            lq,
            replaces: workload::replacement_for(w, namespace),
            finished: None,
            held: None,
            evicted: false,
            order_time: Timestamp::UNIX_EPOCH,
            preemptor: false,
            duplicate: false,
            shape: NO_SHAPE,
            shown: None,
        };
        self.derive_status(w, &mut entry);
        entry
    }

    /// Refreshes what an entry takes from its Workload's status (and the quota that status
    /// holds), the spec being unchanged: applying a decision or finishing a Workload changes
    /// only its status, and parsing its PodSets again would change nothing.
    pub fn derive_status(&self, w: &Workload, entry: &mut WorkloadEntry) {
        let created = w
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let conds = w
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let finished = conditions::find_true(conds, condition::FINISHED).map(|c| c.reason.clone());
        let evicted_cond = conditions::find_true(conds, condition::EVICTED);
        let evicted = evicted_cond.is_some();
        let held = self.held_by(w, finished.is_none(), evicted);
        let not_reserved =
            conditions::find(conds, condition::QUOTA_RESERVED).filter(|c| c.status == "False");
        entry.preemptor =
            held.is_none() && not_reserved.is_some_and(|c| c.message.contains(PREEMPTOR_MARK));
        entry.shown = not_reserved
            .filter(|c| c.observed_generation == w.metadata.generation)
            .map(|c| Shown {
                reason: c.reason.as_str().into(),
                message: PendingMessage::from(c.message.as_str()),
            });
        entry.order_time = match (evicted_cond, &held) {
            (Some(e), None) if REQUEUED_AT_EVICTION.contains(&e.reason.as_str()) => {
                e.last_transition_time.0
            }
            _ => created,
        };
        entry.finished = finished;
        entry.held = held;
        entry.evicted = evicted;
    }

    /// The WorkloadPriorityClass's value, else `spec.priority`, else 0.
    fn priority(&self, spec: &WorkloadSpec) -> i32 {
        match &spec.priority_class_ref {
            Some(r) if r.kind == "WorkloadPriorityClass" => self
                .priorities
                .get(&r.name)
                .copied()
                .or(spec.priority)
                .unwrap_or(0),
            _ => spec.priority.unwrap_or(0),
        }
    }

    /// The quota `w` holds: `QuotaReserved=True` with `status.admission`, not finished, and not
    /// evicted when evicted Workloads release at once.
    fn held_by(&self, w: &Workload, unfinished: bool, evicted: bool) -> Option<HeldQuota> {
        let status = w.status.as_ref()?;
        let reserved = conditions::find_true(&status.conditions, condition::QUOTA_RESERVED)?;
        let adm = status.admission.as_ref()?;
        (unfinished && !(evicted && self.release_evicted))
            .then(|| self.held(w, adm, reserved.last_transition_time.0))
    }

    fn podset_requests(&self, w: &Workload, key: &str) -> Result<Vec<PodSetRequests>, String> {
        let object = format!("Workload {key}");
        let empty = PodSpec::default();
        let mut out = Vec::with_capacity(w.spec.pod_sets.len());
        for (i, ps) in w.spec.pod_sets.iter().enumerate() {
            if ps.count < 0 {
                return Err(format!(
                    "{object}: spec.podSets[{i}].count: must not be negative (got {})",
                    ps.count
                ));
            }
            let spec = ps.template.spec.as_ref().unwrap_or(&empty);
            let adjusted = self.pod_defaults.adjust(namespace_of(w), spec);
            let spec = adjusted.as_ref().unwrap_or(spec);
            let field = format!("spec.podSets[{i}].template.spec");
            out.push(PodSetRequests {
                name: ps.name.clone(),
                count: ps.count,
                requests: self.requests(spec, ps.count, &field, &object)?,
                node_selector: spec.node_selector.clone().unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// A PodSet's non-zero request totals over `count` pods.
    fn requests(
        &self,
        spec: &PodSpec,
        count: i32,
        field: &str,
        object: &str,
    ) -> Result<Vec<ResourceRequest>, String> {
        let per_pod = pod_requests(spec, field, object).map_err(|e| e.to_string())?;
        let mut requests = Vec::new();
        for (name, q) in per_pod.iter() {
            if q.is_negative() {
                return Err(format!(
                    "{object}: {field}: request for {name} must not be negative (got {q})"
                ));
            }
            let total = q.times(i64::from(count));
            if total.is_zero() {
                continue;
            }
            if total.nanos() > MAX_REQUEST_NANOS {
                return Err(format!(
                    "{object}: {field}: {name} for {count} pods is too large to account ({q} each)"
                ));
            }
            requests.push(ResourceRequest {
                res: self.catalog.resource(name),
                name: name.to_string(),
                total,
            });
        }
        Ok(requests)
    }

    /// Usage of an admitted Workload, per (flavor, resource), scaled by [`PodCounts`].
    fn held(&self, w: &Workload, adm: &kueue::Admission, admitted_at: Timestamp) -> HeldQuota {
        let mut usage: BTreeMap<FrIx, Quantity> = BTreeMap::new();
        let mut flavors = Vec::new();
        for psa in &adm.pod_set_assignments {
            let counts = PodCounts::of(w, psa);
            self.charge_assigned_usage(psa, &counts, &mut usage);
            self.charge_template_requests(w, psa, &counts, &mut usage);
            flavors.push((psa.name.clone(), self.catalog.flavor_ids_of(psa)));
        }
        HeldQuota {
            cq: self.cq_ids.get(&adm.cluster_queue).copied(),
            usage: usage.into_iter().filter(|(_, q)| !q.is_zero()).collect(),
            flavors,
            admitted_at,
        }
    }

    /// The PodSet's `resourceUsage`, scaled.
    fn charge_assigned_usage(
        &self,
        psa: &PodSetAssignment,
        counts: &PodCounts,
        usage: &mut BTreeMap<FrIx, Quantity>,
    ) {
        for (res, q) in &psa.resource_usage {
            let Some(flavor) = psa.flavors.get(res) else {
                continue;
            };
            let Some(fr) = self.catalog.find_fr(flavor, res) else {
                continue;
            };
            let Ok(total) = Quantity::try_from(q) else {
                continue; // unreadable usage: the template requests stand in
            };
            if total.is_negative() || counts.admitted == 0 {
                continue;
            }
            *usage.entry(fr).or_insert(Quantity::ZERO) += counts.scale(total);
        }
    }

    /// Entries whose `resourceUsage` could not be read: the template's requests instead.
    fn charge_template_requests(
        &self,
        w: &Workload,
        psa: &PodSetAssignment,
        counts: &PodCounts,
        usage: &mut BTreeMap<FrIx, Quantity>,
    ) {
        for (res, flavor) in &psa.flavors {
            let unreadable = psa
                .resource_usage
                .get(res)
                .is_some_and(|q| Quantity::try_from(q).is_err());
            if !unreadable {
                continue;
            }
            let Some(fr) = self.catalog.find_fr(flavor, res) else {
                continue;
            };
            let Some((i, ps)) = w
                .spec
                .pod_sets
                .iter()
                .enumerate()
                .find(|(_, p)| p.name == psa.name)
            else {
                continue;
            };
            let spec = ps.template.spec.clone().unwrap_or_default();
            let spec = self
                .pod_defaults
                .adjust(namespace_of(w), &spec)
                .unwrap_or(spec);
            if let Ok(per_pod) = pod_requests(&spec, &format!("spec.podSets[{i}]"), "")
                && !per_pod.get(res).is_negative()
            {
                *usage.entry(fr).or_insert(Quantity::ZERO) +=
                    per_pod.get(res).times(counts.charged);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

    use super::*;
    use crate::admission::ids::{FrIx, WorkloadIx};
    use crate::admission::index::Index;
    use crate::admission::testing::*;
    use crate::admission::{Options, Snapshot};

    #[test]
    fn held_usage_follows_scale_down_and_reclaimable_pods() {
        // admitted: 4 workers × 1 cpu = 4; spec scaled down to 3, one more pod reclaimable → 2
        let mut w = workload("w")
            .queue("lq")
            .podset(podset("worker").count(4).cpu("1"))
            .admitted("cq", "default", ts(0));
        w.spec.pod_sets[0].count = 3;
        w.status.as_mut().unwrap().reclaimable_pods = vec![kueue::ReclaimablePod {
            name: "worker".into(),
            count: 1,
        }];
        let s = Snapshot {
            flavors: vec![resource_flavor("default")],
            cluster_queues: vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "10")])],
            local_queues: vec![local_queue("lq", "cq")],
            workloads: vec![w],
            ..Snapshot::default()
        };
        let ix = Index::build(&s, &Options::default());
        let held = ix.workloads[WorkloadIx::from(0)].held.as_ref().unwrap();
        assert_eq!(held.usage, vec![(FrIx::from(0), Quantity::from_units(2))]);
    }

    #[test]
    fn odd_per_pod_usage_rounds_up() {
        // 10 cpu over 3 pods → 3.333333334 per pod; scaled to 2 pods → 6.666666668
        let mut w = workload("w")
            .queue("lq")
            .podset(podset("worker").count(3).cpu("1"))
            .admitted("cq", "default", ts(0));
        w.status
            .as_mut()
            .unwrap()
            .admission
            .as_mut()
            .unwrap()
            .pod_set_assignments[0]
            .resource_usage
            .insert("cpu".into(), K8sQuantity("10".into()));
        w.spec.pod_sets[0].count = 2;
        let s = Snapshot {
            flavors: vec![resource_flavor("default")],
            cluster_queues: vec![cluster_queue("cq").flavor_quota("default", &[("cpu", "10")])],
            local_queues: vec![local_queue("lq", "cq")],
            workloads: vec![w],
            ..Snapshot::default()
        };
        let ix = Index::build(&s, &Options::default());
        let held = ix.workloads[WorkloadIx::from(0)].held.as_ref().unwrap();
        assert_eq!(held.usage[0].1.to_string(), "6666666668n");
    }

    #[test]
    fn quantities_keep_their_family() {
        let gi = Quantity::parse("1Gi").unwrap();
        assert_eq!(quantity_from_nanos(gi.nanos() * 3, gi).to_string(), "3Gi");
        let e = Quantity::parse("1e3").unwrap();
        assert_eq!(quantity_from_nanos(e.nanos() * 2, e).to_string(), "2e3");
        assert_eq!(
            quantity_from_nanos(1_500_000_000, Quantity::ZERO).to_string(),
            "1500m"
        );
    }
}
