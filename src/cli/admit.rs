//! `raygate admit`: admission cycles on a file of Kueue objects until nothing changes, and what
//! became of every Workload and ClusterQueue.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::InputError;
use crate::admission::{self, Options, Snapshot};
use crate::conditions;
use crate::manifest::{self, Doc, ManifestError};
use crate::types::kueue::condition;
use crate::workload::{self, holds_quota};

/// At most this many cycles (a preemption ping-pong would otherwise never settle).
pub const MAX_CYCLES: usize = 1000;

/// `raygate admit` output.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmitReport {
    pub workloads: Vec<WorkloadRow>,
    pub cluster_queues: Vec<ClusterQueueRow>,
}

/// What became of one Workload.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRow {
    /// `<namespace>/<name>`.
    pub name: String,
    pub admitted: bool,
    /// Where it holds quota, or where it waits.
    pub cluster_queue: Option<String>,
    /// PodSet → resource → flavor, when admitted.
    pub flavors: BTreeMap<String, BTreeMap<String, String>>,
    /// Why it is not admitted (`QuotaReserved=False`).
    pub reason: Option<String>,
    pub message: Option<String>,
    pub preempted: bool,
    /// Reason of `Finished=True`.
    pub finished: Option<String>,
}

/// A ClusterQueue's usage once admission settled.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueRow {
    pub name: String,
    /// Flavor → resource → quantity in use.
    pub usage: BTreeMap<String, BTreeMap<String, String>>,
    /// Flavor → resource → quantity borrowed from the cohort.
    pub borrowed: BTreeMap<String, BTreeMap<String, String>>,
    pub pending: i32,
    pub admitted: i32,
}

const KUEUE_GROUP: &str = "kueue.x-k8s.io/";
const KUEUE_VERSION: &str = "kueue.x-k8s.io/v1beta2";

fn api_version(doc: &Doc) -> &str {
    doc.value["apiVersion"].as_str().unwrap_or_default()
}

/// Parses a Kueue object, requiring `v1beta2` and a name.
fn parse_kueue<T: DeserializeOwned>(doc: &Doc) -> Result<T, ManifestError> {
    if api_version(doc) != KUEUE_VERSION {
        return Err(ManifestError::Field {
            index: doc.index,
            line: doc.line,
            object: doc.object(),
            path: "apiVersion".into(),
            reason: format!(
                "{} is not supported; write {KUEUE_VERSION} objects",
                api_version(doc)
            ),
        });
    }
    if doc.value["metadata"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        return Err(ManifestError::Field {
            index: doc.index,
            line: doc.line,
            object: doc.object(),
            path: "metadata.name".into(),
            reason: "required".into(),
        });
    }
    doc.parse()
}

/// The snapshot in `text`, and the time to stamp changes with (the newest creation time seen,
/// so the output does not depend on the clock).
pub fn read_snapshot(text: &str) -> Result<(Snapshot, Timestamp), InputError> {
    let mut docs = manifest::read_documents(text)?;
    let mut s = Snapshot::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut now = Timestamp::UNIX_EPOCH;
    for doc in &mut docs {
        let kueue_kind = api_version(doc).starts_with(KUEUE_GROUP);
        let namespaced = matches!(doc.kind.as_str(), "Workload" | "LocalQueue");
        if kueue_kind && namespaced {
            manifest::default_namespace(doc);
        }
        let modelled = kueue_kind
            && matches!(
                doc.kind.as_str(),
                "ResourceFlavor"
                    | "Cohort"
                    | "ClusterQueue"
                    | "LocalQueue"
                    | "WorkloadPriorityClass"
                    | "Workload"
            );
        if modelled {
            let object = if namespaced {
                doc.object()
            } else {
                format!(
                    "{} {}",
                    doc.kind,
                    doc.value["metadata"]["name"].as_str().unwrap_or_default()
                )
            };
            if let Some(first) = seen.insert(object.clone(), doc.index) {
                return Err(ManifestError::Content(format!(
                    "documents {first} and {}: {object} appears twice",
                    doc.index
                ))
                .into());
            }
        }
        match (kueue_kind, doc.kind.as_str()) {
            (true, "ResourceFlavor") => s.flavors.push(parse_kueue(doc)?),
            (true, "Cohort") => s.cohorts.push(parse_kueue(doc)?),
            (true, "ClusterQueue") => s.cluster_queues.push(parse_kueue(doc)?),
            (true, "LocalQueue") => s.local_queues.push(parse_kueue(doc)?),
            (true, "WorkloadPriorityClass") => s.priority_classes.push(parse_kueue(doc)?),
            (true, "Workload") => {
                let w: crate::types::kueue::Workload = parse_kueue(doc)?;
                if let Some(t) = &w.metadata.creation_timestamp {
                    now = now.max(t.0);
                }
                s.workloads.push(w);
            }
            (false, "Namespace") if api_version(doc) == "v1" => {
                let ns: Namespace = doc.parse()?;
                if let Some(name) = ns.metadata.name {
                    s.namespace_labels
                        .insert(name, ns.metadata.labels.unwrap_or_default());
                }
            }
            _ => {} // other kinds: not admission's business
        }
    }
    Ok((s, now))
}

/// `raygate admit`: runs admission on the objects in `text` until nothing changes.
pub fn admit(text: &str) -> Result<AdmitReport, InputError> {
    let (snapshot, now) = read_snapshot(text)?;
    let options = Options {
        release_evicted_immediately: true,
    };
    let (after, results) = admission::run_until_stable(snapshot, &options, now, MAX_CYCLES);
    let last = match results.last() {
        Some(r) => r.clone(),
        None => admission::cycle(&after, &options),
    };

    let mut workloads: Vec<WorkloadRow> = after
        .workloads
        .iter()
        .map(|w| workload_row(&after, w))
        .collect();
    workloads.sort_by(|a, b| a.name.cmp(&b.name));
    let mut cluster_queues: Vec<ClusterQueueRow> =
        last.cluster_queues.iter().map(cluster_queue_row).collect();
    cluster_queues.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(AdmitReport {
        workloads,
        cluster_queues,
    })
}

/// The ClusterQueue a Workload would go to through its LocalQueue (`None`: either is missing).
fn queue_of(after: &Snapshot, ns: &str, queue: Option<&str>) -> Option<String> {
    let lq = after.local_queues.iter().find(|l| {
        l.metadata.namespace.as_deref() == Some(ns) && l.metadata.name.as_deref() == queue
    })?;
    let cq = lq.spec.cluster_queue.as_deref()?;
    after
        .cluster_queues
        .iter()
        .any(|c| c.metadata.name.as_deref() == Some(cq))
        .then(|| cq.to_string())
}

fn workload_row(after: &Snapshot, w: &crate::types::kueue::Workload) -> WorkloadRow {
    let ns = w.metadata.namespace.as_deref().unwrap_or("default");
    let status = w.status.as_ref();
    let admitted = holds_quota(status);
    let admission = status
        .and_then(|s| s.admission.as_ref())
        .filter(|_| admitted);
    let finished = status
        .and_then(|s| conditions::find(&s.conditions, condition::FINISHED))
        .filter(|c| c.status == "True")
        .map(|c| c.reason.clone());
    let waiting = status
        .and_then(|s| conditions::find(&s.conditions, condition::QUOTA_RESERVED))
        .filter(|c| c.status == "False" && !admitted && finished.is_none());
    WorkloadRow {
        name: format!("{ns}/{}", w.metadata.name.as_deref().unwrap_or_default()),
        admitted,
        cluster_queue: match admission {
            Some(a) => Some(a.cluster_queue.clone()),
            None => queue_of(after, ns, w.spec.queue_name.as_deref()),
        },
        flavors: admission
            .map(|a| {
                a.pod_set_assignments
                    .iter()
                    .map(|p| (p.name.clone(), p.flavors.clone()))
                    .collect()
            })
            .unwrap_or_default(),
        reason: waiting.map(|c| c.reason.clone()),
        message: waiting.map(|c| c.message.clone()),
        preempted: workload::condition_true(status, condition::PREEMPTED),
        finished,
    }
}

fn cluster_queue_row(c: &admission::ClusterQueueUsage) -> ClusterQueueRow {
    let mut usage: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut borrowed: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for f in &c.reservation {
        for r in &f.resources {
            let q = |x: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
                x.as_ref().map_or_else(|| "0".to_string(), |q| q.0.clone())
            };
            usage
                .entry(f.name.clone())
                .or_default()
                .insert(r.name.clone(), q(&r.total));
            borrowed
                .entry(f.name.clone())
                .or_default()
                .insert(r.name.clone(), q(&r.borrowed));
        }
    }
    ClusterQueueRow {
        name: c.name.clone(),
        usage,
        borrowed,
        pending: c.pending,
        admitted: c.admitted,
    }
}

fn nested(m: &BTreeMap<String, BTreeMap<String, String>>) -> String {
    let parts: Vec<String> = m
        .iter()
        .map(|(outer, inner)| {
            let v: Vec<String> = inner.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{outer}:{}", v.join(","))
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

/// The table form of an admit report.
impl super::View for AdmitReport {
    fn table(&self) -> String {
        admit_table(self)
    }

    /// The Workloads admitted.
    fn names(&self) -> Vec<String> {
        self.workloads
            .iter()
            .filter(|w| w.admitted)
            .map(|w| super::object_name("workload.kueue.x-k8s.io", &w.name))
            .collect()
    }
}

pub fn admit_table(r: &AdmitReport) -> String {
    let mut s = String::new();
    let w = r
        .workloads
        .iter()
        .map(|w| w.name.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let cw = r
        .workloads
        .iter()
        .filter_map(|w| w.cluster_queue.as_ref().map(String::len))
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(
        s,
        "{:w$}  {:8}  {:cw$}  STATUS",
        "WORKLOAD", "ADMITTED", "CLUSTERQUEUE"
    );
    for row in &r.workloads {
        let status = match (&row.finished, row.admitted, &row.reason) {
            (Some(f), _, _) => format!("Finished ({f})"),
            (None, true, _) => format!("flavors {}", nested(&row.flavors)),
            (None, false, Some(reason)) => format!(
                "{reason}{}: {}",
                if row.preempted { " (preempted)" } else { "" },
                row.message.as_deref().unwrap_or_default()
            ),
            (None, false, None) => "-".into(),
        };
        let _ = writeln!(
            s,
            "{:w$}  {:8}  {:cw$}  {status}",
            row.name,
            if row.admitted { "yes" } else { "no" },
            row.cluster_queue.as_deref().unwrap_or("-"),
        );
    }
    let _ = writeln!(s);
    cluster_queue_table(&mut s, r);
    s
}

/// The ClusterQueues' part of [`admit_table`].
fn cluster_queue_table(s: &mut String, r: &AdmitReport) {
    let cw = r
        .cluster_queues
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(
        s,
        "{:cw$}  {:>7}  {:>8}  USAGE (BORROWED)",
        "CLUSTERQUEUE", "PENDING", "ADMITTED"
    );
    for c in &r.cluster_queues {
        let usage: Vec<String> = c
            .usage
            .iter()
            .flat_map(|(f, rs)| {
                rs.iter().map(move |(res, q)| {
                    let b = c
                        .borrowed
                        .get(f)
                        .and_then(|m| m.get(res))
                        .filter(|b| *b != "0");
                    match b {
                        Some(b) => format!("{f}/{res}={q} ({b})"),
                        None => format!("{f}/{res}={q}"),
                    }
                })
            })
            .collect();
        let _ = writeln!(
            s,
            "{:cw$}  {:>7}  {:>8}  {}",
            c.name,
            c.pending,
            c.admitted,
            usage.join(" ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUEUES: &str = "\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: '3'}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a}
spec: {clusterQueue: team-a}
";

    fn workload(name: &str, cpu: &str) -> String {
        format!(
            "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: {name}, creationTimestamp: '2026-01-01T00:00:00Z'}}\nspec:\n  queueName: team-a\n  podSets:\n  - name: main\n    count: 1\n    template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}}}\n"
        )
    }

    #[test]
    fn reports_admitted_and_pending_workloads_and_usage() {
        let r = admit(&format!(
            "{QUEUES}{}{}",
            workload("a", "2"),
            workload("b", "2")
        ))
        .unwrap();
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["workloads"][0]["name"], "default/a");
        assert_eq!(j["workloads"][0]["admitted"], true);
        assert_eq!(j["workloads"][0]["flavors"]["main"]["cpu"], "default");
        assert_eq!(j["workloads"][0]["reason"], serde_json::Value::Null);
        assert_eq!(j["workloads"][1]["admitted"], false);
        assert_eq!(j["workloads"][1]["clusterQueue"], "team-a");
        assert_eq!(j["workloads"][1]["reason"], "Pending");
        assert_eq!(
            j["workloads"][1]["message"],
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default of ClusterQueue team-a: requested 2, 1 available of nominal 3 (1 more needed)"
        );
        assert_eq!(j["workloads"][1]["finished"], serde_json::Value::Null);
        assert_eq!(j["clusterQueues"][0]["usage"]["default"]["cpu"], "2");
        assert_eq!(j["clusterQueues"][0]["borrowed"]["default"]["cpu"], "0");
        assert_eq!(j["clusterQueues"][0]["pending"], 1);
        assert_eq!(j["clusterQueues"][0]["admitted"], 1);
        let table = admit_table(&r);
        assert!(
            table.contains("default/b  no        team-a        Pending: couldn't assign"),
            "{table}"
        );
        // -o name: the Workloads admitted, as kubectl names them
        assert_eq!(
            crate::cli::render(&r, crate::cli::Output::Name).unwrap(),
            "workload.kueue.x-k8s.io/a\n"
        );
    }

    #[test]
    fn bad_objects_become_reasons_and_unreadable_input_an_error() {
        // an invalid quota: the ClusterQueue's Workloads say why
        let r = admit(&format!(
            "{}{}",
            QUEUES.replace("'3'", "three"),
            workload("a", "1")
        ))
        .unwrap();
        assert!(
            r.workloads[0].message.as_deref().unwrap().starts_with(
                "ClusterQueue team-a is inactive: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: invalid quantity"
            ),
            "{:?}",
            r.workloads[0].message
        );
        let cases = [
            (
                format!(
                    "{QUEUES}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: w}}\nspec: {{podSets: [{{name: main, count: many}}]}}\n"
                ),
                "document 4 (line 21, Workload default/w): spec.podSets[0].count",
            ),
            (
                QUEUES.replace("v1beta2\nkind: ClusterQueue", "v1beta1\nkind: ClusterQueue"),
                "document 2 (line 5, ClusterQueue team-a): apiVersion: kueue.x-k8s.io/v1beta1 is not supported",
            ),
            (
                format!("{QUEUES}{}{}", workload("a", "1"), workload("a", "1")),
                "documents 4 and 5: Workload default/a appears twice",
            ),
            ("{{{".to_string(), "document 1: not valid YAML"),
        ];
        for (input, want) in cases {
            let e = admit(&input).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} should contain {want:?}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
    }

    #[test]
    fn other_kinds_are_ignored_and_namespaces_give_labels() {
        let text = format!(
            "{}{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: default, labels: {{team: a}}}}\n",
            QUEUES.replace(
                "namespaceSelector: {}",
                "namespaceSelector: {matchLabels: {team: a}}"
            ),
            workload("a", "1")
        );
        let r = admit(&text).unwrap();
        assert!(r.workloads[0].admitted, "{r:?}");
    }

    #[test]
    fn hostile_values_anywhere_never_panic() {
        let sample = include_str!("../../config/samples/admit-upgrade.yaml");
        let values = [
            "-1",
            "0",
            "1e999",
            "99999999999999999999Ei",
            "9223372036854775807",
            "\"\"",
            "[]",
            "{}",
            "null",
            "~",
            "'2147483647'",
            "-2147483648",
        ];
        let lines: Vec<&str> = sample.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some((head, _)) = line.split_once(": ") else {
                continue;
            };
            for v in values {
                let mut mutated = lines.clone();
                let replaced = format!("{head}: {v}");
                mutated[i] = &replaced;
                // any outcome but a panic: a report, or a one-line input error
                if let Err(e) = admit(&mutated.join("\n")) {
                    assert!(!e.to_string().contains('\n'), "{e}");
                }
            }
        }
    }
}
