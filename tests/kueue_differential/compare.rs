//! Running both sides and comparing their outcomes.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::world::World;

/// `raygate-kueue-admit`: `$RAYGATE_KUEUE_ADMIT`, else where `hack/install-kueue.sh` puts it.
/// The test fails without it (it is not skipped).
pub fn driver() -> PathBuf {
    let p = raygate_testing::tools::kueue_admit();
    assert!(
        p.is_file(),
        "{} is missing: run hack/install-kueue.sh (hack/test.sh does)",
        p.display()
    );
    p
}

/// What Kueue's scheduler made of one file (the driver's JSON line).
#[derive(Debug, Clone)]
pub struct KueueRun {
    pub error: Option<String>,
    /// "quiet" (no head left), "steady" (heads retried, admissions unchanged) or "loops".
    pub settled: String,
    /// When steady: the ClusterQueues whose heads Kueue retries every cycle without end.
    pub retrying: Vec<String>,
    pub workloads: Vec<Row>,
}

/// One Workload's outcome, on either side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    pub admitted: bool,
    pub cluster_queue: Option<String>,
    pub flavors: BTreeMap<String, BTreeMap<String, String>>,
    pub evictions: u64,
    /// raygate's side only: the ClusterQueue a pending Workload waits in.
    pub waits_in: Option<String>,
}

fn rows(v: &Value) -> Vec<Row> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|w| Row {
            name: w["name"].as_str().unwrap_or_default().to_string(),
            admitted: w["admitted"].as_bool().unwrap_or(false),
            cluster_queue: w["clusterQueue"].as_str().map(str::to_string),
            flavors: serde_json::from_value(w["flavors"].clone()).unwrap_or_default(),
            evictions: w["evictions"].as_u64().unwrap_or(0),
            waits_in: None,
        })
        .collect()
}

fn parse_run(line: &str) -> KueueRun {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("driver line {line}: {e}"));
    KueueRun {
        error: v["error"].as_str().map(str::to_string),
        settled: v["settled"].as_str().unwrap_or_default().to_string(),
        retrying: serde_json::from_value(v["retrying"].clone()).unwrap_or_default(),
        workloads: rows(&v["workloads"]),
    }
}

/// Runs the driver on `files`, in two processes (one per core), in order.
pub fn run_kueue(files: &[PathBuf]) -> Vec<KueueRun> {
    let half = files.len().div_ceil(2).max(1);
    let children: Vec<_> = files
        .chunks(half)
        .map(|chunk| {
            Command::new(driver())
                .args(chunk)
                .output()
                .expect("run raygate-kueue-admit")
        })
        .collect();
    let mut out = Vec::new();
    for c in children {
        assert!(
            c.status.success(),
            "raygate-kueue-admit failed: {}",
            String::from_utf8_lossy(&c.stderr)
        );
        out.extend(String::from_utf8_lossy(&c.stdout).lines().map(parse_run));
    }
    assert_eq!(out.len(), files.len(), "one result per file");
    out
}

/// Runs the driver on one world's text.
pub fn run_kueue_text(text: &str) -> KueueRun {
    let dir = tempfile::tempdir().expect("tempdir");
    let p: &Path = &dir.path().join("world.yaml");
    std::fs::write(p, text).expect("write");
    run_kueue(&[p.to_path_buf()]).remove(0)
}

/// raygate's side: `raygate admit` on the same text.
pub fn run_raygate(text: &str) -> Result<Vec<Row>, String> {
    let report = raygate::cli::admit(text).map_err(|e| e.to_string())?;
    let v = serde_json::to_value(&report.workloads).map_err(|e| e.to_string())?;
    Ok(rows(&v)
        .into_iter()
        .map(|mut r| {
            if !r.admitted {
                r.waits_in = r.cluster_queue.take();
            }
            r
        })
        .collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Agree,
    Disagree,
    /// Kueue retries a head every cycle without end, and a Workload that differs is in one of
    /// the ClusterQueues it blocks: no fixed point, not comparable (docs/decisions.md, "Kueue
    /// retries a head without end").
    KueueStarves,
    /// Kueue's admissions still changed after the driver's cycles: not comparable.
    KueueLoops,
    Error,
}

#[derive(Debug, Clone)]
pub struct Verdict {
    pub outcome: Outcome,
    /// Kueue preempted something on the way.
    pub kueue_evicted: bool,
    /// Kueue ended retrying a head that never fits (a steady state, not a quiet one).
    pub kueue_steady: bool,
    pub detail: String,
}

fn show(r: &Row) -> String {
    if !r.admitted {
        return "pending".into();
    }
    let flavors: Vec<String> = r
        .flavors
        .iter()
        .map(|(ps, m)| {
            let m: Vec<String> = m.iter().map(|(res, f)| format!("{res}={f}")).collect();
            format!("{ps}[{}]", m.join(","))
        })
        .collect();
    format!(
        "{} {}",
        r.cluster_queue.as_deref().unwrap_or("?"),
        flavors.join(" ")
    )
}

/// Both hold quota in the same ClusterQueue on the same flavors, or neither does.
fn same_admission(r: &Row, k: &Row) -> bool {
    r.admitted == k.admitted
        && (!r.admitted || (r.cluster_queue == k.cluster_queue && r.flavors == k.flavors))
}

/// Compares the two sides on one world.
pub fn judge(text: &str, kueue: &KueueRun) -> Verdict {
    let kueue_evicted = kueue.workloads.iter().any(|w| w.evictions > 0);
    let kueue_steady = kueue.settled == "steady";
    let verdict = |outcome, detail: String| Verdict {
        outcome,
        kueue_evicted,
        kueue_steady,
        detail,
    };
    if let Some(e) = &kueue.error {
        return verdict(Outcome::Error, format!("kueue: {e}"));
    }
    let ours = match run_raygate(text) {
        Ok(r) => r,
        Err(e) => return verdict(Outcome::Error, format!("raygate: {e}")),
    };
    if kueue.settled == "loops" {
        return verdict(
            Outcome::KueueLoops,
            "Kueue's admissions never stop changing".into(),
        );
    }
    let theirs: BTreeMap<&str, &Row> = kueue
        .workloads
        .iter()
        .map(|r| (r.name.as_str(), r))
        .collect();
    let mut diffs = Vec::new();
    let mut starved = false;
    for r in &ours {
        let Some(k) = theirs.get(r.name.as_str()) else {
            diffs.push(format!("{}: not in Kueue's output", r.name));
            continue;
        };
        if !same_admission(r, k) {
            diffs.push(format!(
                "{}: raygate {}, Kueue {}",
                r.name,
                show(r),
                show(k)
            ));
            // a Workload of a queue whose head Kueue retries without end
            starved |= [&k.cluster_queue, &r.cluster_queue, &r.waits_in]
                .into_iter()
                .flatten()
                .any(|q| kueue.retrying.contains(q));
        }
    }
    if ours.len() != theirs.len() {
        diffs.push(format!(
            "{} Workloads in raygate's output, {} in Kueue's",
            ours.len(),
            theirs.len()
        ));
    }
    if diffs.is_empty() {
        return verdict(Outcome::Agree, String::new());
    }
    let outcome = if starved {
        Outcome::KueueStarves
    } else {
        Outcome::Disagree
    };
    verdict(outcome, diffs.join("; "))
}

/// The run's figures.
pub struct Report {
    lines: Vec<String>,
    agree: u64,
    comparable: u64,
}

impl Report {
    pub fn of(worlds: &[(u64, World)], verdicts: &BTreeMap<u64, Verdict>) -> Report {
        let mut counts: BTreeMap<Outcome, u64> = BTreeMap::new();
        // (bucket, agreed, comparable)
        let mut by_size: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        let mut by_evict: BTreeMap<bool, (u64, u64)> = BTreeMap::new();
        let mut by_steady: BTreeMap<bool, (u64, u64)> = BTreeMap::new();
        let mut lines = Vec::new();
        let mut starved = Vec::new();
        for (seed, w) in worlds {
            let v = &verdicts[seed];
            *counts.entry(v.outcome).or_default() += 1;
            if v.outcome == Outcome::KueueStarves {
                starved.push(format!(
                    "  seed {seed} (Kueue retrying a head): {}",
                    v.detail
                ));
            }
            if !matches!(v.outcome, Outcome::Agree | Outcome::Disagree) {
                continue;
            }
            let bucket = match w.workloads.len() {
                0..=8 => "2-8 Workloads",
                9..=16 => "9-16 Workloads",
                _ => "17-25 Workloads",
            };
            let agreed = u64::from(v.outcome == Outcome::Agree);
            for e in [
                by_size.entry(bucket).or_default(),
                by_evict.entry(v.kueue_evicted).or_default(),
                by_steady.entry(v.kueue_steady).or_default(),
            ] {
                e.0 += agreed;
                e.1 += 1;
            }
            if v.outcome == Outcome::Disagree {
                lines.push(format!("  seed {seed}: {}", v.detail));
            }
        }
        let agree = counts.get(&Outcome::Agree).copied().unwrap_or(0);
        let comparable = agree + counts.get(&Outcome::Disagree).copied().unwrap_or(0);
        let mut head = vec![format!(
            "admission differential: {} seeds; agree {agree} of {comparable} comparable ({:.1} %); \
             Kueue without a fixed point: retrying a head without end where they differ {}, \
             admissions never settling {}; errors {}",
            worlds.len(),
            pct(agree, comparable),
            counts.get(&Outcome::KueueStarves).copied().unwrap_or(0),
            counts.get(&Outcome::KueueLoops).copied().unwrap_or(0),
            counts.get(&Outcome::Error).copied().unwrap_or(0),
        )];
        for (b, (a, c)) in &by_size {
            head.push(format!("  {b}: {a} of {c} ({:.1} %)", pct(*a, *c)));
        }
        for (e, (a, c)) in &by_evict {
            let what = if *e {
                "Kueue preempted"
            } else {
                "Kueue preempted nothing"
            };
            head.push(format!("  {what}: {a} of {c} ({:.1} %)", pct(*a, *c)));
        }
        for (st, (a, c)) in &by_steady {
            let what = if *st {
                "Kueue steady (a head retried without end)"
            } else {
                "Kueue quiet"
            };
            head.push(format!("  {what}: {a} of {c} ({:.1} %)", pct(*a, *c)));
        }
        head.extend(lines);
        head.extend(starved);
        Report {
            lines: head,
            agree,
            comparable,
        }
    }

    pub fn agreement_per_mille(&self) -> u64 {
        (self.agree * 1000)
            .checked_div(self.comparable)
            .unwrap_or(1000)
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        100.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines.join("\n"))
    }
}
