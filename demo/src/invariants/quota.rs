//! The quota family: running pods never over their ClusterQueue's quota, and by how much and how
//! long they were over when they were.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use raygate::quantity::{Quantity, Resources};

use super::owners::{pods, queue_of_pod};
use super::violation::{Invariant, Violation, intervals};
use crate::history::{History, Key, Kind, State};

/// **ClusterQueue quota never exceeded by running pods.** Per ClusterQueue and covered
/// resource, the requests of the pods charged to it (through their RayService's queue, or their
/// own queue label) that hold resources (bound, not terminal: a terminating pod still holds its
/// GPUs) never exceed the nominal quota, plus the borrowing limit when the queue is in a cohort
/// (a resource that may borrow without limit is not checked).
pub fn quota_never_exceeded(h: &History) -> Vec<Violation> {
    intervals(h, Invariant::QuotaExceeded, |_, states| {
        over_quota(states)
            .into_iter()
            .map(|o| {
                let message = format!(
                    "{}: running pods request {}, quota {} ({} pods)",
                    o.resource,
                    o.requested,
                    o.quota,
                    o.objects.len() - 1
                );
                (
                    format!("{}/{}", o.cluster_queue, o.resource),
                    (o.objects, message),
                )
            })
            .collect()
    })
}

/// One ClusterQueue resource over its quota at one instant.
struct Over {
    cluster_queue: String,
    resource: String,
    requested: Quantity,
    quota: Quantity,
    /// The queue, then the pods charged to it.
    objects: Vec<String>,
}

/// What is over quota in `states` (see [`quota_never_exceeded`]).
fn over_quota(states: &BTreeMap<Key, State>) -> Vec<Over> {
    let mut usage: BTreeMap<String, (Resources, Vec<String>)> = BTreeMap::new();
    for (k, p) in pods(states).filter(|(_, p)| p.holds_resources()) {
        if let Some(cq) = queue_of_pod(states, k, p) {
            let e = usage.entry(cq).or_default();
            e.0.add(&p.requests);
            e.1.push(k.to_string());
        }
    }
    let mut out = vec![];
    for (cq, (used, holders)) in usage {
        let Some(State::ClusterQueue(q)) = states.get(&Key::new(Kind::ClusterQueue, "", &cq))
        else {
            continue;
        };
        for (resource, nominal) in q.nominal.iter() {
            let mut limit = Resources::new();
            limit.set(resource, *nominal);
            if q.cohort.is_some() {
                if q.unlimited_borrowing.iter().any(|r| r == resource) {
                    continue;
                }
                let mut borrow = Resources::new();
                borrow.set(resource, q.borrowing_limit.get(resource));
                limit.add(&borrow);
            }
            let (have, max) = (used.get(resource), limit.get(resource));
            if have.nanos() > max.nanos() {
                let mut objects = vec![format!("ClusterQueue/{cq}")];
                objects.extend(holders.iter().cloned());
                out.push(Over {
                    cluster_queue: cq.clone(),
                    resource: resource.to_string(),
                    requested: have,
                    quota: max,
                    objects,
                });
            }
        }
    }
    out
}

/// How far and how long running pods went over a ClusterQueue resource's quota: the measure of
/// [`quota_never_exceeded`]'s violations (KubeRay without the gate overruns; raygate must not).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuotaOverrun {
    /// The largest excess seen: requests of the running pods minus the quota.
    pub peak: Quantity,
    /// The requests at that peak, and the quota.
    pub requested: Quantity,
    pub quota: Quantity,
    /// Cluster seconds spent over the quota.
    pub seconds: f64,
}

/// The overrun per `ClusterQueue/resource` over the history (an empty map: the quota held).
/// Time over quota runs from a change that puts the queue over to the next change (the last
/// one counts until the end of the history).
pub fn quota_overrun(h: &History) -> BTreeMap<String, QuotaOverrun> {
    let mut out: BTreeMap<String, QuotaOverrun> = BTreeMap::new();
    let mut open: Vec<(String, Timestamp)> = vec![];
    let mut replay = h.replay();
    let mut last = None;
    while let Some((at, states)) = replay.step() {
        for (id, since) in open.drain(..) {
            if let Some(o) = out.get_mut(&id) {
                o.seconds += at.duration_since(since).as_secs_f64();
            }
        }
        for o in over_quota(states) {
            let id = format!("{}/{}", o.cluster_queue, o.resource);
            let excess = o.requested - o.quota;
            let e = out.entry(id.clone()).or_default();
            if excess > e.peak {
                e.peak = excess;
                e.requested = o.requested;
                e.quota = o.quota;
            }
            open.push((id, at));
        }
        last = Some(at);
    }
    if let (Some((_, end)), Some(_)) = (h.span(), last) {
        for (id, since) in open {
            if let Some(o) = out.get_mut(&id) {
                o.seconds += end.duration_since(since).as_secs_f64();
            }
        }
    }
    out
}
