//! The usage and counts per queue once a pass's decisions are applied: each ClusterQueue's
//! reservation per flavor and resource (and what of it is borrowed), each LocalQueue's, and
//! their pending and reserving Workloads.

use std::collections::BTreeMap;

use super::pass::{Pass, charge};
use crate::admission::ids::{CqIx, FrIx, LqIx, TiVec, WorkloadIx};
use crate::admission::queues::{LocalQueueEntry, Queues};
use crate::admission::quota::Usage;
use crate::admission::{ClusterQueueUsage, LocalQueueUsage, Options};
use crate::quantity::Quantity;
use crate::types::kueue::{
    FlavorUsage, LocalQueueFlavorUsage, LocalQueueResourceUsage, ResourceUsage, StopPolicy,
};

/// Where each Workload's quota stands once a pass's decisions are applied.
struct Settled<'p> {
    /// `Some(cq)`: holds quota (in `cq`, `None` if that ClusterQueue does not exist).
    held_in: TiVec<WorkloadIx, Option<Option<CqIx>>>,
    usage_of: TiVec<WorkloadIx, &'p [(FrIx, Quantity)]>,
    usage: Usage,
}

fn settle<'p>(pass: &'p Pass, release_evicted: bool) -> Settled<'p> {
    let ix = pass.ix;
    let q = &ix.q;
    let n = ix.workloads.len();
    let mut s = Settled {
        held_in: TiVec::from(vec![None; n]),
        usage_of: TiVec::from(vec![&[][..]; n]),
        usage: Usage::new(&q.tree),
    };
    for &i in &ix.sorted {
        let w = &ix.workloads[i];
        if let Some(h) = &w.held
            && !pass.gone[i]
            && !(release_evicted && pass.evicted_now[i])
        {
            s.held_in[i] = Some(h.cq);
            s.usage_of[i] = &h.usage;
            if let Some(c) = h.cq {
                charge(q, &mut s.usage, c, &h.usage, true);
            }
        }
    }
    for (i, c, totals) in &pass.newly {
        s.held_in[*i] = Some(Some(*c));
        s.usage_of[*i] = totals;
        charge(q, &mut s.usage, *c, totals, true);
    }
    s
}

/// (pending, reserving) per ClusterQueue and LocalQueue, and each LocalQueue's usage.
struct Counts {
    cq: TiVec<CqIx, (i32, i32)>,
    lq: TiVec<LqIx, (i32, i32)>,
    lq_usage: TiVec<LqIx, BTreeMap<FrIx, Quantity>>,
}

fn count(pass: &Pass, settled: &Settled) -> Counts {
    let ix = pass.ix;
    let q = &ix.q;
    let mut n = Counts {
        cq: TiVec::from(vec![(0, 0); q.cqs.len()]),
        lq: TiVec::from(vec![(0, 0); q.lqs.len()]),
        lq_usage: TiVec::from(vec![BTreeMap::new(); q.lqs.len()]),
    };
    for &i in &ix.sorted {
        let w = &ix.workloads[i];
        if w.finished.is_some() || pass.gone[i] {
            continue;
        }
        match settled.held_in[i] {
            Some(c) => {
                if let Some(c) = c {
                    n.cq[c].1 += 1;
                }
                if let Some(l) = w.lq {
                    n.lq[l].1 += 1;
                    for &(fr, v) in settled.usage_of[i] {
                        *n.lq_usage[l].entry(fr).or_insert(Quantity::ZERO) += v;
                    }
                }
            }
            None if w.active => {
                if let Ok(t) = &w.target {
                    n.cq[t.cq].0 += 1;
                }
                if let Some(l) = w.lq {
                    n.lq[l].0 += 1;
                }
            }
            None => {}
        }
    }
    n
}

/// Usage and counts per queue as they stand once the decisions are applied.
pub(super) fn report_usage(
    pass: &Pass,
    options: &Options,
) -> (Vec<ClusterQueueUsage>, Vec<LocalQueueUsage>) {
    let q = &pass.ix.q;
    let settled = settle(pass, options.release_evicted_immediately);
    let counts = count(pass, &settled);
    let cluster_queues = q
        .cqs
        .keys()
        .map(|c| cluster_queue_usage(q, c, &settled.usage, counts.cq[c]))
        .collect();
    let local_queues = q
        .lqs
        .keys()
        .map(|l| local_queue_usage(q, l, &counts.lq_usage[l], counts.lq[l]))
        .collect();
    (cluster_queues, local_queues)
}

fn cluster_queue_usage(
    q: &Queues,
    c: CqIx,
    usage: &Usage,
    (pending, reserving): (i32, i32),
) -> ClusterQueueUsage {
    let info = &q.cqs[c];
    let extra = q
        .tree
        .frs()
        .filter(|fr| !usage.get(c, *fr).is_zero() && !info.frs.contains(fr));
    let frs: Vec<FrIx> = info.frs.iter().copied().chain(extra).collect();
    let nominal = |fr: FrIx| q.tree.node(c).subtree[fr];
    let (active, active_reason) = match (&info.inactive, info.stop) {
        (Some((r, m)), _) => (Err(m.clone()), r.to_string()),
        (None, StopPolicy::None) => (Ok(()), "Ready".to_string()),
        (None, _) => (
            Err(format!("ClusterQueue {} is stopped", info.name)),
            "Stopped".to_string(),
        ),
    };
    ClusterQueueUsage {
        name: info.name.clone(),
        reservation: flavor_rows(q, &frs, |fr| {
            let used = usage.get(c, fr);
            let borrowed = used - nominal(fr);
            ResourceUsage {
                name: q.catalog.resource_name(fr).to_string(),
                total: Some(used.to_k8s()),
                borrowed: Some(if borrowed.is_negative() {
                    Quantity::ZERO.to_k8s()
                } else {
                    borrowed.to_k8s()
                }),
            }
        }),
        pending,
        reserving,
        admitted: reserving,
        active,
        active_reason,
    }
}

fn local_queue_usage(
    q: &Queues,
    l: LqIx,
    usage: &BTreeMap<FrIx, Quantity>,
    (pending, reserving): (i32, i32),
) -> LocalQueueUsage {
    let info = &q.lqs[l];
    let cq = info
        .cluster_queue
        .as_ref()
        .and_then(|n| q.cq_ids.get(n).copied());
    let mut frs: Vec<FrIx> = cq.map(|c| q.cqs[c].frs.clone()).unwrap_or_default();
    frs.extend(
        usage
            .keys()
            .filter(|fr| !frs.contains(fr))
            .copied()
            .collect::<Vec<_>>(),
    );
    LocalQueueUsage {
        namespace: info.namespace.clone(),
        name: info.name.clone(),
        reservation: flavor_rows(q, &frs, |fr| LocalQueueResourceUsage {
            name: q.catalog.resource_name(fr).to_string(),
            total: Some(usage.get(&fr).copied().unwrap_or(Quantity::ZERO).to_k8s()),
        })
        .into_iter()
        .map(|(name, resources)| LocalQueueFlavorUsage { name, resources })
        .collect(),
        pending,
        reserving,
        admitted: reserving,
        active: local_queue_active(q, info, cq),
    }
}

/// Why Workloads submitted to a LocalQueue cannot be admitted, if they cannot.
fn local_queue_active(q: &Queues, info: &LocalQueueEntry, cq: Option<CqIx>) -> Result<(), String> {
    match (&info.cluster_queue, cq) {
        (None, _) => Err(format!(
            "LocalQueue {}/{} has no spec.clusterQueue",
            info.namespace, info.name
        )),
        (Some(name), None) => Err(format!("ClusterQueue {name} doesn't exist")),
        (Some(_), Some(c)) => match &q.cqs[c].inactive {
            Some((_, m)) => Err(m.clone()),
            None if info.stop != StopPolicy::None => Err(format!(
                "LocalQueue {}/{} is stopped",
                info.namespace, info.name
            )),
            None => Ok(()),
        },
    }
}

/// Groups (flavor, resource) rows by flavor, keeping the order of first appearance.
fn flavor_rows<R, T>(q: &Queues, frs: &[FrIx], row: impl Fn(FrIx) -> R) -> Vec<T>
where
    T: FromFlavorRows<R>,
{
    let mut out: Vec<(String, Vec<R>)> = Vec::new();
    for &fr in frs {
        let flavor = q.catalog.flavor_name(fr);
        match out.iter_mut().find(|(n, _)| n == flavor) {
            Some((_, rows)) => rows.push(row(fr)),
            None => out.push((flavor.to_string(), vec![row(fr)])),
        }
    }
    out.into_iter().map(T::from_rows).collect()
}

/// A flavor row built from its resource rows.
trait FromFlavorRows<R> {
    fn from_rows(rows: (String, Vec<R>)) -> Self;
}

impl FromFlavorRows<ResourceUsage> for FlavorUsage {
    fn from_rows((name, resources): (String, Vec<ResourceUsage>)) -> Self {
        FlavorUsage { name, resources }
    }
}

impl<R> FromFlavorRows<R> for (String, Vec<R>) {
    fn from_rows(rows: (String, Vec<R>)) -> Self {
        rows
    }
}
