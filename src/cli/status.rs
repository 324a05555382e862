//! `raygate status`: what raygate sees of one RayService or one ClusterQueue, summarised from the
//! objects read off a live cluster (the reading is `crate::client::live`; this part is pure).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::conditions;
use crate::gate::{ERROR_ANNOTATION, RELEASED_ANNOTATION, SUSPENDED_BY_ANNOTATION};
use crate::meta;
use crate::podsets;
use crate::quantity::{Quantity, Resources};
use crate::types::kueue::{ClusterQueue, LocalQueue, QUEUE_NAME_LABEL, Workload, condition};
use crate::types::ray::{RayCluster, RayService};
use crate::workload;

/// One child RayCluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildRow {
    pub name: String,
    /// `active`, `pending` (KubeRay's status names it so) or `other` (e.g. dangling).
    pub role: String,
    pub suspended: bool,
    /// Suspended and never released by raygate: raygate holds it.
    pub held: bool,
    pub deleting: bool,
    /// Pods × per-pod requests of this child, summed.
    pub requests: BTreeMap<String, String>,
}

/// One Workload slice.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceRow {
    pub name: String,
    /// `Finished`, `Evicted`, `Admitted`, `QuotaReserved` or `Pending`.
    pub state: String,
    pub cluster_queue: Option<String>,
    /// PodSet name → count.
    pub podsets: BTreeMap<String, i32>,
    /// Why it is pending, evicted or finished (the condition's message).
    pub message: Option<String>,
}

/// A RayService as raygate sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReport {
    pub namespace: String,
    pub name: String,
    /// The LocalQueue it is opted in to (`None`: raygate leaves it alone).
    pub queue: Option<String>,
    /// `spec.suspend` is true: by whom.
    pub suspended: Option<String>,
    /// raygate's `raygate.io/error` annotation (bad input).
    pub error: Option<String>,
    pub children: Vec<ChildRow>,
    /// Oldest first along the chain.
    pub slices: Vec<SliceRow>,
    /// Held children and why.
    pub held: BTreeMap<String, String>,
    /// What the live children need now.
    pub needed: BTreeMap<String, String>,
    /// What the newest admitted slice grants.
    pub granted: BTreeMap<String, String>,
    /// `needed − granted`, positive entries only: what quota must still cover.
    pub shortfall: BTreeMap<String, String>,
}

fn strings(r: &Resources) -> BTreeMap<String, String> {
    r.iter()
        .filter(|(_, q)| !q.is_zero())
        .map(|(k, q)| (k.to_string(), q.to_string()))
        .collect()
}

fn slice_state(w: &Workload) -> &'static str {
    let st = w.status.as_ref();
    if workload::is_finished(st) {
        "Finished"
    } else if workload::is_evicted(st) {
        "Evicted"
    } else if workload::is_admitted(st) {
        "Admitted"
    } else if workload::holds_quota(st) {
        "QuotaReserved"
    } else {
        "Pending"
    }
}

fn slice_message(w: &Workload) -> Option<String> {
    let conds = w
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let pick = |t: &str| conditions::find(conds, t).map(|c| c.message.clone());
    let msg = match slice_state(w) {
        "Finished" => pick(condition::FINISHED),
        "Evicted" => conditions::find_true(conds, condition::EVICTED).map(|c| c.message.clone()),
        "Pending" => pick(condition::QUOTA_RESERVED),
        _ => None,
    };
    msg.filter(|m| !m.is_empty())
}

/// What a Workload's PodSets request in total: count (the admitted count where admission set one)
/// × the template's per-pod requests.
fn slice_total(w: &Workload) -> Resources {
    let admitted: BTreeMap<&str, i32> = w
        .status
        .as_ref()
        .and_then(|s| s.admission.as_ref())
        .map(|a| {
            a.pod_set_assignments
                .iter()
                .filter_map(|p| p.count.map(|c| (p.name.as_str(), c)))
                .collect()
        })
        .unwrap_or_default();
    let mut total = Resources::new();
    for ps in &w.spec.pod_sets {
        let Some(spec) = ps.template.spec.as_ref() else {
            continue;
        };
        let Ok(per_pod) = podsets::pod_requests(spec, "template", &ps.name) else {
            continue;
        };
        let count = admitted.get(ps.name.as_str()).copied().unwrap_or(ps.count);
        total.add(&per_pod.times(i64::from(count)));
    }
    total
}

/// Summarises `service` from its children and Workloads (any objects may be passed; the ones
/// that are not its own are ignored).
pub fn service_report(
    service: &RayService,
    clusters: &[RayCluster],
    workloads: &[Workload],
) -> ServiceReport {
    let ns = service
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = service.metadata.name.clone().unwrap_or_default();
    let children = podsets::children_of(service, clusters);
    let chain = own_chain(service, workloads, &ns, &name);
    let slices: Vec<SliceRow> = chain.iter().map(slice_row).collect();
    let live: Vec<&Workload> = chain
        .iter()
        .filter(|w| !workload::is_finished(w.status.as_ref()))
        .collect();
    let newest_admitted = live.iter().rev().find(|w| {
        workload::is_admitted(w.status.as_ref()) && !workload::is_evicted(w.status.as_ref())
    });
    let granted = newest_admitted.map(|w| slice_total(w)).unwrap_or_default();
    let (rows, held, needed) = child_rows(service, &children, live.last().copied());
    let mut shortfall = needed.clone();
    shortfall.sub(&granted);
    let shortfall = shortfall.clamp_non_negative();
    ServiceReport {
        queue: crate::gate::queue_name(service).map(str::to_string),
        error: meta::annotation(&service.metadata, ERROR_ANNOTATION).map(str::to_string),
        namespace: ns,
        name,
        suspended: suspended(service),
        children: rows,
        slices,
        held,
        needed: strings(&needed),
        granted: strings(&granted),
        shortfall: strings(&shortfall),
    }
}

/// The Workloads `service` owns, in chain order.
fn own_chain(service: &RayService, workloads: &[Workload], ns: &str, name: &str) -> Vec<Workload> {
    let uid = service.metadata.uid.as_deref();
    let own: Vec<Workload> = workloads
        .iter()
        .filter(|w| {
            w.metadata.namespace.as_deref() == Some(ns)
                && w.metadata.owner_references.iter().flatten().any(|o| {
                    o.kind == "RayService" && o.name == name && uid.is_none_or(|u| u == o.uid)
                })
        })
        .cloned()
        .collect();
    let mut chain: Vec<&Workload> = own.iter().collect();
    workload::sort_chain_order(&mut chain, &own);
    chain.into_iter().cloned().collect()
}

fn slice_row(w: &Workload) -> SliceRow {
    SliceRow {
        name: w.metadata.name.clone().unwrap_or_default(),
        state: slice_state(w).to_string(),
        cluster_queue: w
            .status
            .as_ref()
            .and_then(|s| s.admission.as_ref())
            .map(|a| a.cluster_queue.clone()),
        podsets: w
            .spec
            .pod_sets
            .iter()
            .map(|p| (p.name.clone(), p.count))
            .collect(),
        message: slice_message(w),
    }
}

/// Why the RayService is suspended, and by whom (`None`: it is not).
fn suspended(service: &RayService) -> Option<String> {
    let suspended_by_raygate =
        meta::annotation(&service.metadata, SUSPENDED_BY_ANNOTATION).is_some();
    (service.spec.suspend == Some(true)).then(|| {
        if suspended_by_raygate {
            "by raygate: its slice was evicted or deactivated; resumed when a slice is admitted again"
                .to_string()
        } else {
            "by its owner (raygate never clears it)".to_string()
        }
    })
}

/// Why a held child waits, from the newest live slice.
fn hold_reason(newest: Option<&Workload>) -> String {
    match newest {
        None => "no slice yet".to_string(),
        Some(w) if !workload::is_admitted(w.status.as_ref()) => {
            let n = w.metadata.name.as_deref().unwrap_or_default();
            match slice_message(w) {
                Some(m) => format!("slice {n} pending: {m}"),
                None => format!("slice {n} pending"),
            }
        }
        Some(w) => format!(
            "slice {} admitted; release follows (or it does not cover this child yet)",
            w.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// One row per child, the held ones with why they wait, and what the children request.
fn child_rows(
    service: &RayService,
    children: &[&RayCluster],
    newest: Option<&Workload>,
) -> (Vec<ChildRow>, BTreeMap<String, String>, Resources) {
    let status = service.status.as_ref();
    let active = status
        .and_then(|s| s.active_service_status.as_ref())
        .and_then(|a| a.ray_cluster_name.clone());
    let pending = status
        .and_then(|s| s.pending_service_status.as_ref())
        .and_then(|a| a.ray_cluster_name.clone());
    let released: Vec<&str> = meta::annotation(&service.metadata, RELEASED_ANNOTATION)
        .map(|a| {
            a.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let mut needed = Resources::new();
    let mut rows = Vec::new();
    let mut held = BTreeMap::new();
    for c in children {
        let cname = c.metadata.name.clone().unwrap_or_default();
        let mut requests = Resources::new();
        if let Ok(ps) =
            podsets::of_cluster(&c.spec, c.metadata.annotations.as_ref(), &cname, "spec")
        {
            requests = podsets::total(&ps);
        }
        needed.add(&requests);
        let suspended = c.spec.suspend == Some(true);
        let is_held = suspended && !released.contains(&cname.as_str());
        if is_held {
            held.insert(cname.clone(), hold_reason(newest));
        }
        rows.push(ChildRow {
            role: if active.as_deref() == Some(cname.as_str()) {
                "active"
            } else if pending.as_deref() == Some(cname.as_str()) {
                "pending"
            } else {
                "other"
            }
            .to_string(),
            name: cname,
            suspended,
            held: is_held,
            deleting: c.metadata.deletion_timestamp.is_some(),
            requests: strings(&requests),
        });
    }
    (rows, held, needed)
}

/// One flavor × resource of a ClusterQueue.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaRow {
    pub flavor: String,
    pub resource: String,
    pub nominal: String,
    pub borrowing_limit: Option<String>,
    pub usage: String,
    pub borrowed: String,
    /// `nominal − usage`, or 0 when over (borrowing).
    pub free: String,
}

/// A Workload waiting in the ClusterQueue.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRow {
    /// `namespace/name`.
    pub workload: String,
    pub local_queue: String,
    pub message: Option<String>,
}

/// A ClusterQueue as raygate (or Kueue) last wrote its status, with its pending Workloads.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueReport {
    pub name: String,
    pub cohort: Option<String>,
    /// The `Active` condition: `True`, or the reason it is not.
    pub active: String,
    pub quota: Vec<QuotaRow>,
    pub admitted: i32,
    pub pending: Vec<PendingRow>,
}

/// Summarises `queue`: quota per flavor and resource against its status' usage, and the
/// Workloads (of `workloads`, submitted through `local_queues` pointing at it) not yet admitted.
pub fn queue_report(
    queue: &ClusterQueue,
    local_queues: &[LocalQueue],
    workloads: &[Workload],
) -> QueueReport {
    let name = queue.metadata.name.clone().unwrap_or_default();
    let status = queue.status.as_ref();
    let quota = quota_rows(queue);
    let pending = pending_rows(&name, local_queues, workloads);
    let conds = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let active = match conditions::find(conds, "Active") {
        Some(c) if c.status == "True" => "True".to_string(),
        Some(c) => format!("{}: {}", c.reason, c.message),
        None => "unknown (no status yet)".to_string(),
    };
    QueueReport {
        name,
        cohort: queue.spec.cohort_name.clone(),
        active,
        quota,
        admitted: status
            .and_then(|s| s.admitted_workloads)
            .unwrap_or_default(),
        pending,
    }
}

/// Per (flavor, resource): the queue's usage and what it borrows, from its reservations (else
/// its usage).
fn queue_usage(queue: &ClusterQueue) -> BTreeMap<(String, String), (Quantity, Quantity)> {
    queue
        .status
        .as_ref()
        .map(|s| {
            s.flavors_reservation
                .iter()
                .chain(if s.flavors_reservation.is_empty() {
                    &s.flavors_usage[..]
                } else {
                    &[]
                })
                .flat_map(|f| {
                    f.resources.iter().map(move |r| {
                        let q = |v: &Option<
                            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
                        >| {
                            v.as_ref()
                                .and_then(|v| Quantity::try_from(v).ok())
                                .unwrap_or_default()
                        };
                        (
                            (f.name.clone(), r.name.clone()),
                            (q(&r.total), q(&r.borrowed)),
                        )
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One row per flavor × resource of the queue.
fn quota_rows(queue: &ClusterQueue) -> Vec<QuotaRow> {
    let usage = queue_usage(queue);
    let mut quota = Vec::new();
    for group in &queue.spec.resource_groups {
        for flavor in &group.flavors {
            for r in &flavor.resources {
                let parse =
                    |v: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
                        v.as_ref().and_then(|v| Quantity::try_from(v).ok())
                    };
                let nominal = parse(&r.nominal_quota).unwrap_or_default();
                let (used, borrowed) = usage
                    .get(&(flavor.name.clone(), r.name.clone()))
                    .copied()
                    .unwrap_or_default();
                let free = if used < nominal {
                    nominal - used
                } else {
                    Quantity::default()
                };
                quota.push(QuotaRow {
                    flavor: flavor.name.clone(),
                    resource: r.name.clone(),
                    nominal: nominal.to_string(),
                    borrowing_limit: parse(&r.borrowing_limit).map(|q| q.to_string()),
                    usage: used.to_string(),
                    borrowed: borrowed.to_string(),
                    free: free.to_string(),
                });
            }
        }
    }
    quota
}

/// The Workloads waiting in ClusterQueue `name` (through the LocalQueues feeding it), by key.
fn pending_rows(
    name: &str,
    local_queues: &[LocalQueue],
    workloads: &[Workload],
) -> Vec<PendingRow> {
    let feeding: Vec<(&str, &str)> = local_queues
        .iter()
        .filter(|lq| lq.spec.cluster_queue.as_deref() == Some(name))
        .filter_map(|lq| {
            Some((
                lq.metadata.namespace.as_deref()?,
                lq.metadata.name.as_deref()?,
            ))
        })
        .collect();
    let mut pending: Vec<PendingRow> = workloads
        .iter()
        .filter(|w| {
            let st = w.status.as_ref();
            !workload::is_finished(st) && !workload::holds_quota(st)
        })
        .filter_map(|w| {
            let ns = w.metadata.namespace.as_deref()?;
            let lq = w
                .spec
                .queue_name
                .as_deref()
                .or_else(|| meta::label(&w.metadata, QUEUE_NAME_LABEL))?;
            feeding.contains(&(ns, lq)).then(|| PendingRow {
                workload: meta::key(&w.metadata),
                local_queue: lq.to_string(),
                message: slice_message(w),
            })
        })
        .collect();
    pending.sort_by(|a, b| a.workload.cmp(&b.workload));
    pending
}

fn kv(m: &BTreeMap<String, String>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Left-aligned columns, two spaces apart.
pub(super) fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The table form of a RayService report.
impl super::View for ServiceReport {
    fn table(&self) -> String {
        service_table(self)
    }

    fn names(&self) -> Vec<String> {
        vec![super::object_name("rayservice.ray.io", &self.name)]
    }
}

impl super::View for QueueReport {
    fn table(&self) -> String {
        queue_table(self)
    }

    fn names(&self) -> Vec<String> {
        vec![super::object_name(
            "clusterqueue.kueue.x-k8s.io",
            &self.name,
        )]
    }
}

pub fn service_table(r: &ServiceReport) -> String {
    let mut s = format!(
        "RayService {}/{}  queue: {}\n",
        r.namespace,
        r.name,
        r.queue.as_deref().unwrap_or("(none: not opted in)")
    );
    if let Some(why) = &r.suspended {
        s.push_str(&format!("suspended {why}\n"));
    }
    if let Some(e) = &r.error {
        s.push_str(&format!("error: {e}\n"));
    }
    s.push('\n');
    let mut rows = vec![vec![
        "CHILD".into(),
        "ROLE".into(),
        "SUSPENDED".into(),
        "HELD".into(),
        "REQUESTS".into(),
    ]];
    for c in &r.children {
        let held = if c.held {
            r.held.get(&c.name).cloned().unwrap_or_else(|| "yes".into())
        } else {
            "no".into()
        };
        let role = if c.deleting {
            format!("{} (deleting)", c.role)
        } else {
            c.role.clone()
        };
        rows.push(vec![
            c.name.clone(),
            role,
            yes_no(c.suspended),
            held,
            kv(&c.requests),
        ]);
    }
    if r.children.is_empty() {
        rows.push(vec!["(no child yet)".into()]);
    }
    s.push_str(&columns(&rows));
    s.push('\n');
    let mut rows = vec![vec![
        "SLICE".into(),
        "STATE".into(),
        "CLUSTERQUEUE".into(),
        "PODSETS".into(),
        "MESSAGE".into(),
    ]];
    for w in &r.slices {
        let podsets = w
            .podsets
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        rows.push(vec![
            w.name.clone(),
            w.state.clone(),
            w.cluster_queue.clone().unwrap_or_else(|| "-".into()),
            podsets,
            w.message.clone().unwrap_or_default(),
        ]);
    }
    if r.slices.is_empty() {
        rows.push(vec!["(no slice)".into()]);
    }
    s.push_str(&columns(&rows));
    s.push('\n');
    s.push_str(&columns(&[
        vec!["NEEDED".into(), kv(&r.needed)],
        vec!["GRANTED".into(), kv(&r.granted)],
        vec!["SHORTFALL".into(), kv(&r.shortfall)],
    ]));
    s
}

/// The table form of a ClusterQueue report.
pub fn queue_table(r: &QueueReport) -> String {
    let mut s = format!(
        "ClusterQueue {}  cohort: {}  active: {}  admitted: {}  pending: {}\n\n",
        r.name,
        r.cohort.as_deref().unwrap_or("-"),
        r.active,
        r.admitted,
        r.pending.len()
    );
    let mut rows = vec![vec![
        "FLAVOR".into(),
        "RESOURCE".into(),
        "NOMINAL".into(),
        "USAGE".into(),
        "BORROWED".into(),
        "FREE".into(),
        "BORROWING LIMIT".into(),
    ]];
    for q in &r.quota {
        rows.push(vec![
            q.flavor.clone(),
            q.resource.clone(),
            q.nominal.clone(),
            q.usage.clone(),
            q.borrowed.clone(),
            q.free.clone(),
            q.borrowing_limit.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    s.push_str(&columns(&rows));
    if !r.pending.is_empty() {
        s.push('\n');
        let mut rows = vec![vec![
            "PENDING WORKLOAD".into(),
            "LOCALQUEUE".into(),
            "MESSAGE".into(),
        ]];
        for p in &r.pending {
            rows.push(vec![
                p.workload.clone(),
                p.local_queue.clone(),
                p.message.clone().unwrap_or_default(),
            ]);
        }
        s.push_str(&columns(&rows));
    }
    s
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

#[cfg(test)]
mod tests {
    use raygate_testing::ray_pod;
    use serde_json::{Value, json};

    use super::*;

    fn cluster_spec(workers: i32, suspend: bool) -> Value {
        json!({"suspend": suspend, "headGroupSpec": {"rayStartParams": {}, "template": ray_pod("1")},
            "workerGroupSpecs": [{"groupName": "w", "replicas": workers, "minReplicas": 0, "maxReplicas": 8,
                "rayStartParams": {}, "template": ray_pod("1")}]})
    }

    fn service(extra: Value) -> RayService {
        let mut v = json!({"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "namespace": "serving", "uid": "u1",
                "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                "annotations": {"raygate.io/released-children": "svc-a"}},
            "spec": {"rayClusterConfig": cluster_spec(2, true)},
            "status": {"activeServiceStatus": {"rayClusterName": "svc-a"},
                "pendingServiceStatus": {"rayClusterName": "svc-b"}}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(into: &mut Value, from: Value) {
        match (into, from) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn child(name: &str, created: &str, suspend: bool) -> RayCluster {
        serde_json::from_value(json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": "serving", "creationTimestamp": created,
                "labels": {"ray.io/originated-from-cr-name": "svc", "ray.io/originated-from-crd": "RayService"}},
            "spec": cluster_spec(2, suspend)}))
        .unwrap()
    }

    fn slice(name: &str, created: &str, head: i32, w: i32, status: Value) -> Workload {
        serde_json::from_value(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "serving", "creationTimestamp": created,
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": "svc", "uid": "u1"}]},
            "spec": {"queueName": "lq", "podSets": [
                {"name": "head", "count": head, "template": ray_pod("1")},
                {"name": "w", "count": w, "template": ray_pod("1")}]},
            "status": status}))
        .unwrap()
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    const PENDING: &str = "couldn't assign flavors to pod set w: insufficient unused quota for cpu in flavor default, 3 more needed";

    fn upgrade() -> (Vec<RayCluster>, Vec<Workload>) {
        let admitted = json!({"admission": {"clusterQueue": "team", "podSetAssignments": [
                {"name": "head", "count": 1}, {"name": "w", "count": 2}]},
            "conditions": [cond("QuotaReserved", "True", "QuotaReserved", ""), cond("Admitted", "True", "Admitted", "")]});
        let pending = json!({"conditions": [cond("QuotaReserved", "False", "Pending", PENDING)]});
        (
            vec![
                child("svc-b", "2026-01-01T00:10:00Z", true),
                child("svc-a", "2026-01-01T00:00:00Z", false),
            ],
            vec![
                slice("svc-2", "2026-01-01T00:10:01Z", 2, 4, pending),
                slice("svc-1", "2026-01-01T00:00:01Z", 1, 2, admitted),
            ],
        )
    }

    #[test]
    fn a_held_upgrade_shows_the_pending_slice_message_and_the_shortfall() {
        let (clusters, workloads) = upgrade();
        let r = service_report(&service(json!({})), &clusters, &workloads);
        assert_eq!(r.queue.as_deref(), Some("lq"));
        let children: Vec<(&str, &str, bool, bool)> = r
            .children
            .iter()
            .map(|c| (c.name.as_str(), c.role.as_str(), c.suspended, c.held))
            .collect();
        assert_eq!(
            children,
            vec![
                ("svc-a", "active", false, false),
                ("svc-b", "pending", true, true)
            ]
        );
        let slices: Vec<(&str, &str)> = r
            .slices
            .iter()
            .map(|s| (s.name.as_str(), s.state.as_str()))
            .collect();
        assert_eq!(slices, vec![("svc-1", "Admitted"), ("svc-2", "Pending")]);
        assert_eq!(r.slices[0].cluster_queue.as_deref(), Some("team"));
        assert_eq!(r.held["svc-b"], format!("slice svc-2 pending: {PENDING}"));
        // each child: head 1 cpu + 2 workers of 1 cpu
        assert_eq!(
            r.needed,
            BTreeMap::from([("cpu".to_string(), "6".to_string())])
        );
        assert_eq!(
            r.granted,
            BTreeMap::from([("cpu".to_string(), "3".to_string())])
        );
        assert_eq!(
            r.shortfall,
            BTreeMap::from([("cpu".to_string(), "3".to_string())])
        );
        let table = service_table(&r);
        assert!(
            table.contains("svc-b  pending  yes        slice svc-2 pending: couldn't assign"),
            "{table}"
        );
        assert!(table.contains("SHORTFALL  cpu=3"), "{table}");
    }

    #[test]
    fn once_the_replacement_is_admitted_nothing_is_short() {
        let (clusters, mut workloads) = upgrade();
        let st = workloads[0].status.get_or_insert_with(Default::default);
        st.conditions.clear();
        st.admission =
            serde_json::from_value(json!({"clusterQueue": "team", "podSetAssignments": [
            {"name": "head", "count": 2}, {"name": "w", "count": 4}]}))
            .unwrap();
        for t in ["QuotaReserved", "Admitted"] {
            st.conditions
                .push(serde_json::from_value(cond(t, "True", t, "")).unwrap());
        }
        let r = service_report(&service(json!({})), &clusters, &workloads);
        assert_eq!(
            r.granted,
            BTreeMap::from([("cpu".to_string(), "6".to_string())])
        );
        assert!(r.shortfall.is_empty());
        assert_eq!(
            r.held["svc-b"],
            "slice svc-2 admitted; release follows (or it does not cover this child yet)"
        );
    }

    #[test]
    fn a_new_service_without_slices_or_children_says_so_and_who_suspended_it() {
        let svc = service(json!({"spec": {"suspend": true}, "status": null}));
        let r = service_report(&svc, &[], &[]);
        assert!(r.children.is_empty() && r.slices.is_empty());
        assert_eq!(
            r.suspended.as_deref(),
            Some("by its owner (raygate never clears it)")
        );
        let svc = service(json!({"spec": {"suspend": true},
            "metadata": {"annotations": {"raygate.io/suspended-by-raygate": "true"}}}));
        let r = service_report(&svc, &[child("svc-b", "2026-01-01T00:10:00Z", true)], &[]);
        assert!(
            r.suspended
                .as_deref()
                .unwrap_or_default()
                .starts_with("by raygate")
        );
        assert_eq!(r.held["svc-b"], "no slice yet");
        assert!(service_table(&r).contains("(no slice)"));
    }

    #[test]
    fn workloads_of_another_service_or_namespace_are_not_counted() {
        let (clusters, mut workloads) = upgrade();
        let mut other = workloads[1].clone();
        other.metadata.namespace = Some("elsewhere".into());
        let mut stranger = workloads[1].clone();
        stranger.metadata.name = Some("x-1".into());
        stranger.metadata.owner_references.as_mut().unwrap()[0].uid = "u-old".into();
        workloads.extend([other, stranger]);
        let r = service_report(&service(json!({})), &clusters, &workloads);
        assert_eq!(r.slices.len(), 2);
    }

    #[test]
    fn a_cluster_queue_shows_quota_against_usage_and_its_pending_workloads() {
        let cq: ClusterQueue = serde_json::from_value(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "team"},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": "default", "resources": [
                {"name": "cpu", "nominalQuota": "4", "borrowingLimit": "2"}, {"name": "memory", "nominalQuota": "8Gi"}]}]}]},
            "status": {"admittedWorkloads": 1, "flavorsReservation": [{"name": "default", "resources": [
                {"name": "cpu", "total": "5", "borrowed": "1"}]}],
                "conditions": [cond("Active", "True", "Ready", "")]}}))
        .unwrap();
        let lq = |ns: &str, cq: &str| -> LocalQueue {
            serde_json::from_value(
                json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}}),
            )
            .unwrap()
        };
        let (_, workloads) = upgrade();
        let mut elsewhere = workloads[0].clone();
        elsewhere.metadata.namespace = Some("other-team".into());
        let r = queue_report(
            &cq,
            &[lq("serving", "team"), lq("other-team", "other")],
            &[workloads[0].clone(), workloads[1].clone(), elsewhere],
        );
        assert_eq!(r.active, "True");
        assert_eq!(r.admitted, 1);
        let rows: Vec<(&str, &str, &str, &str, &str)> = r
            .quota
            .iter()
            .map(|q| {
                (
                    q.resource.as_str(),
                    q.nominal.as_str(),
                    q.usage.as_str(),
                    q.borrowed.as_str(),
                    q.free.as_str(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("cpu", "4", "5", "1", "0"),
                ("memory", "8Gi", "0", "0", "8Gi")
            ]
        );
        assert_eq!(r.quota[0].borrowing_limit.as_deref(), Some("2"));
        assert_eq!(r.pending.len(), 1);
        assert_eq!(r.pending[0].workload, "serving/svc-2");
        assert_eq!(r.pending[0].message.as_deref(), Some(PENDING));
        let table = queue_table(&r);
        assert!(
            table.contains("default  cpu       4        5      1         0     2"),
            "{table}"
        );
        assert!(table.contains("serving/svc-2     lq"), "{table}");
    }
}
