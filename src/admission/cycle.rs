//! One admission pass over an [`Index`]: evictions that do not depend on quota (deactivated,
//! stopped queues), then every pending Workload of every ClusterQueue in one global queue order,
//! each against the usage left by the ones before it; then the usage and counts per queue as they
//! stand once the decisions are applied.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::flavors::{self, Assignment, Mode, Replacing};
use super::preemption::{self, Exclusions, Preemptor};
use super::quota::Usage;
use super::snapshot::{Index, PodSetReq, Queues, WlInfo};
use super::status::{PREEMPTED_IN_CLUSTER_QUEUE, PREEMPTED_IN_COHORT};
use super::{ClusterQueueUsage, CycleResult, Decision, LocalQueueUsage, Options};
use crate::quantity::Quantity;
use crate::types::kueue::{
    Admission, FlavorUsage, LocalQueueFlavorUsage, LocalQueueResourceUsage, PodSetAssignment,
    QueueingStrategy, ResourceUsage, StopPolicy, reason,
};

/// Usage per (flavor, resource) id.
type Charges = Vec<(usize, Quantity)>;

fn pending(w: &WlInfo, reason: &str, message: String) -> Decision {
    Decision::Pending {
        workload: w.key.clone(),
        reason: reason.to_string(),
        message,
    }
}

fn admission(q: &Queues, cq: usize, podsets: &[PodSetReq], a: &Assignment) -> Admission {
    Admission {
        cluster_queue: q.cqs[cq].name.clone(),
        pod_set_assignments: podsets
            .iter()
            .zip(&a.flavors)
            .map(|(ps, chosen)| PodSetAssignment {
                name: ps.name.clone(),
                flavors: chosen
                    .iter()
                    .map(|&(ri, f)| (ps.requests[ri].name.clone(), q.flavors[f].name.clone()))
                    .collect(),
                resource_usage: chosen
                    .iter()
                    .map(|&(ri, _)| (ps.requests[ri].name.clone(), ps.requests[ri].total.to_k8s()))
                    .collect(),
                count: Some(ps.count),
            })
            .collect(),
    }
}

fn charge(q: &Queues, usage: &mut Usage, cq: usize, items: &[(usize, Quantity)], add: bool) {
    for &(fr, v) in items {
        if add {
            q.tree.add_usage(usage, cq, fr, v);
        } else {
            q.tree.remove_usage(usage, cq, fr, v);
        }
    }
}

/// Runs one pass.
pub(crate) fn run(ix: &Index, options: &Options) -> CycleResult {
    let q = &ix.q;
    let n = ix.workloads.len();
    let mut usage = Usage::new(&q.tree);
    let mut admitted_by_cq: Vec<Vec<usize>> = vec![Vec::new(); q.cqs.len()];
    for &i in &ix.sorted {
        if let Some(h) = &ix.workloads[i].held
            && let Some(c) = h.cq
        {
            charge(q, &mut usage, c, &h.usage, true);
            admitted_by_cq[c].push(i);
        }
    }
    let mut decisions = Vec::new();
    let mut gone = vec![false; n];
    let mut evicting: Vec<bool> = ix
        .workloads
        .iter()
        .map(|w| w.held.is_some() && w.evicted)
        .collect();
    let mut evicted_now = vec![false; n];
    // (Workload, ClusterQueue, usage per (flavor, resource)) admitted in this cycle
    let mut newly: Vec<(usize, usize, Charges)> = Vec::new();

    // 1. evictions that do not depend on quota
    for &i in &ix.sorted {
        let w = &ix.workloads[i];
        let Some(h) = &w.held else { continue };
        if w.evicted {
            continue;
        }
        let cq_stop = h.cq.map(|c| q.cqs[c].stop);
        let lq = w.lq.map(|l| &q.lqs[l]);
        let (why, message) = if !w.active {
            (
                reason::DEACTIVATED,
                "The workload is deactivated".to_string(),
            )
        } else if cq_stop == Some(StopPolicy::HoldAndDrain) {
            let name = h.cq.map_or("", |c| q.cqs[c].name.as_str());
            (
                reason::CLUSTER_QUEUE_STOPPED,
                format!("The ClusterQueue {name} is stopped"),
            )
        } else if let Some(l) = lq.filter(|l| l.stop == StopPolicy::HoldAndDrain) {
            (
                reason::LOCAL_QUEUE_STOPPED,
                format!("The LocalQueue {}/{} is stopped", l.namespace, l.name),
            )
        } else {
            continue;
        };
        decisions.push(Decision::Evict {
            workload: w.key.clone(),
            reason: why.to_string(),
            message,
        });
        evicting[i] = true;
        evicted_now[i] = true;
    }

    // 2. pending Workloads in one global queue order
    // priority first (higher first), then the queue order time, then the key (by rank)
    let mut order: Vec<_> = ix
        .sorted
        .iter()
        .filter(|&&i| ix.workloads[i].is_pending())
        .map(|&i| {
            let w = &ix.workloads[i];
            (std::cmp::Reverse(w.priority), w.order_time, ix.rank[i], i)
        })
        .collect();
    order.sort_unstable();
    let mut blocked: Vec<Option<usize>> = vec![None; q.cqs.len()];
    for (_, _, _, i) in order {
        let w = &ix.workloads[i];
        if !w.active {
            decisions.push(pending(
                w,
                reason::INADMISSIBLE,
                "the workload is deactivated".to_string(),
            ));
            continue;
        }
        let c = match &w.target {
            Ok(t) => t.cq,
            Err(m) => {
                decisions.push(pending(w, reason::INADMISSIBLE, m.clone()));
                continue;
            }
        };
        let info = &q.cqs[c];
        if let Some((_, m)) = &info.inactive {
            decisions.push(pending(w, reason::INADMISSIBLE, m.clone()));
            continue;
        }
        if info.stop != StopPolicy::None {
            decisions.push(pending(
                w,
                reason::INADMISSIBLE,
                format!("ClusterQueue {} is stopped", info.name),
            ));
            continue;
        }
        if let Some(l) =
            w.lq.map(|l| &q.lqs[l])
                .filter(|l| l.stop != StopPolicy::None)
        {
            decisions.push(pending(
                w,
                reason::INADMISSIBLE,
                format!("LocalQueue {}/{} is stopped", l.namespace, l.name),
            ));
            continue;
        }
        if !q.namespace_matches(c, &w.namespace) {
            decisions.push(pending(
                w,
                reason::INADMISSIBLE,
                format!(
                    "namespace {} doesn't match the namespaceSelector of ClusterQueue {}",
                    w.namespace, info.name
                ),
            ));
            continue;
        }
        let podsets = match &w.podsets {
            Ok(p) => p,
            Err(m) => {
                decisions.push(pending(w, reason::INADMISSIBLE, m.clone()));
                continue;
            }
        };
        if let Some(b) = blocked[c] {
            decisions.push(pending(
                w,
                reason::PENDING,
                format!(
                    "waiting behind workload {} in StrictFIFO ClusterQueue {}",
                    ix.workloads[b].key, info.name
                ),
            ));
            continue;
        }
        // a replacement slice: the slice it replaces, if that one still holds quota
        let spare = w.replaces.as_ref().and_then(|k| ix.by_key.get(k).copied());
        let old = spare.filter(|&o| {
            let ow = &ix.workloads[o];
            ow.held.is_some() && !ow.evicted && !evicting[o] && !gone[o]
        });
        let replacing = old.and_then(|o| {
            let ow = &ix.workloads[o];
            let held = ow.held.as_ref()?;
            (held.cq == Some(c)).then_some(Replacing { key: &ow.key, held })
        });
        let a = flavors::assign(q, &usage, c, podsets, replacing.as_ref());
        if a.mode == Mode::Fit {
            charge(q, &mut usage, c, &a.totals, true);
            decisions.push(Decision::Admit {
                workload: w.key.clone(),
                admission: admission(q, c, podsets, &a),
            });
            if let Some(o) = old {
                let ow = &ix.workloads[o];
                if let Some(h) = &ow.held
                    && let Some(oc) = h.cq
                {
                    charge(q, &mut usage, oc, &h.usage, false);
                }
                gone[o] = true;
                decisions.push(Decision::FinishReplaced {
                    workload: ow.key.clone(),
                    replaced_by: w.key.clone(),
                });
            }
            newly.push((i, c, a.totals));
            continue;
        }
        let mut message = a
            .failure
            .as_ref()
            .map(|f| flavors::message(q, c, f, replacing.as_ref().map(|r| r.key)))
            .unwrap_or_default();
        if a.mode == Mode::Preempt {
            let p = Preemptor {
                workload: i,
                cq: c,
                need: &a.need,
                short: &a.short,
                spare,
            };
            let ex = Exclusions {
                gone: &gone,
                evicting: &evicting,
            };
            let victims = preemption::targets(ix, &mut usage, &admitted_by_cq, &p, &ex);
            if !victims.is_empty() {
                for v in &victims {
                    if evicting[v.workload] {
                        continue;
                    }
                    let why = if v.same_queue {
                        PREEMPTED_IN_CLUSTER_QUEUE
                    } else {
                        PREEMPTED_IN_COHORT
                    };
                    decisions.push(Decision::Evict {
                        workload: ix.workloads[v.workload].key.clone(),
                        reason: reason::PREEMPTED.to_string(),
                        message: format!("Preempted to accommodate a workload ({}) {why}", w.key),
                    });
                    evicting[v.workload] = true;
                    evicted_now[v.workload] = true;
                }
                let _ = write!(
                    message,
                    ". Pending the preemption of {} workload(s)",
                    victims.len()
                );
                // keep what it needs for the rest of the cycle: the room its victims free is its
                charge(q, &mut usage, c, &a.need, true);
            }
        }
        decisions.push(pending(w, reason::PENDING, message));
        if info.strategy == QueueingStrategy::StrictFIFO {
            blocked[c] = Some(i);
        }
    }

    // 3. usage and counts once the decisions are applied
    let release = options.release_evicted_immediately;
    let mut held_in: Vec<Option<Option<usize>>> = vec![None; n];
    let mut usage_of: Vec<&[(usize, Quantity)]> = vec![&[]; n];
    let mut final_usage = Usage::new(&q.tree);
    for &i in &ix.sorted {
        let w = &ix.workloads[i];
        if let Some(h) = &w.held
            && !gone[i]
            && !(release && evicted_now[i])
        {
            held_in[i] = Some(h.cq);
            usage_of[i] = &h.usage;
            if let Some(c) = h.cq {
                charge(q, &mut final_usage, c, &h.usage, true);
            }
        }
    }
    for (i, c, totals) in &newly {
        held_in[*i] = Some(Some(*c));
        usage_of[*i] = totals;
        charge(q, &mut final_usage, *c, totals, true);
    }
    let mut cq_counts = vec![(0i32, 0i32); q.cqs.len()];
    let mut lq_counts = vec![(0i32, 0i32); q.lqs.len()];
    let mut lq_usage: Vec<BTreeMap<usize, Quantity>> = vec![BTreeMap::new(); q.lqs.len()];
    for &i in &ix.sorted {
        let w = &ix.workloads[i];
        if w.finished.is_some() || gone[i] {
            continue;
        }
        match held_in[i] {
            Some(c) => {
                if let Some(c) = c {
                    cq_counts[c].1 += 1;
                }
                if let Some(l) = w.lq {
                    lq_counts[l].1 += 1;
                    for &(fr, v) in usage_of[i] {
                        *lq_usage[l].entry(fr).or_insert(Quantity::ZERO) += v;
                    }
                }
            }
            None if w.active => {
                if let Ok(t) = &w.target {
                    cq_counts[t.cq].0 += 1;
                }
                if let Some(l) = w.lq {
                    lq_counts[l].0 += 1;
                }
            }
            None => {}
        }
    }

    let cluster_queues = q
        .cqs
        .iter()
        .enumerate()
        .map(|(c, info)| {
            let extra = (0..q.tree.n_fr)
                .filter(|fr| !final_usage.get(c, *fr).is_zero() && !info.frs.contains(fr));
            let frs: Vec<usize> = info.frs.iter().copied().chain(extra).collect();
            let nominal = |fr: usize| q.tree.nodes[c].subtree[fr];
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
                    let used = final_usage.get(c, fr);
                    let borrowed = used - nominal(fr);
                    ResourceUsage {
                        name: q.resource_name(fr).to_string(),
                        total: Some(used.to_k8s()),
                        borrowed: Some(if borrowed.is_negative() {
                            Quantity::ZERO.to_k8s()
                        } else {
                            borrowed.to_k8s()
                        }),
                    }
                }),
                pending: cq_counts[c].0,
                reserving: cq_counts[c].1,
                admitted: cq_counts[c].1,
                active,
                active_reason,
            }
        })
        .collect();

    let local_queues = q
        .lqs
        .iter()
        .enumerate()
        .map(|(l, info)| {
            let cq = info
                .cluster_queue
                .as_ref()
                .and_then(|n| q.cq_ids.get(n).copied());
            let mut frs: Vec<usize> = cq.map(|c| q.cqs[c].frs.clone()).unwrap_or_default();
            frs.extend(
                lq_usage[l]
                    .keys()
                    .filter(|fr| !frs.contains(fr))
                    .copied()
                    .collect::<Vec<_>>(),
            );
            let active = match (&info.cluster_queue, cq) {
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
            };
            LocalQueueUsage {
                namespace: info.namespace.clone(),
                name: info.name.clone(),
                reservation: flavor_rows(q, &frs, |fr| LocalQueueResourceUsage {
                    name: q.resource_name(fr).to_string(),
                    total: Some(
                        lq_usage[l]
                            .get(&fr)
                            .copied()
                            .unwrap_or(Quantity::ZERO)
                            .to_k8s(),
                    ),
                })
                .into_iter()
                .map(|(name, resources)| LocalQueueFlavorUsage { name, resources })
                .collect(),
                pending: lq_counts[l].0,
                reserving: lq_counts[l].1,
                admitted: lq_counts[l].1,
                active,
            }
        })
        .collect();

    CycleResult {
        decisions,
        cluster_queues,
        local_queues,
    }
}

/// Groups (flavor, resource) rows by flavor, keeping the order of first appearance.
fn flavor_rows<R, T>(q: &Queues, frs: &[usize], row: impl Fn(usize) -> R) -> Vec<T>
where
    T: FromFlavorRows<R>,
{
    let mut out: Vec<(String, Vec<R>)> = Vec::new();
    for &fr in frs {
        let flavor = q.flavor_name(fr);
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
