//! Admission throughput on the shape of Kueue's scheduler performance test
//! (`test/performance/scheduler`): cohorts of ClusterQueues (nominal 20 CPU each, borrowing limit
//! 100, `reclaimWithinCohort: Any`, `withinClusterQueue: LowerPriority`) and Workloads of 1, 5 and
//! 20 CPU (priorities 50, 100, 200; 70/20/10 % of the count). Runtime is simulated in cycles: after
//! each cycle, every Workload admitted in the previous cycle finishes, until all have run.
//!
//! Prints what can be set beside Kueue's own figures for the same shape: cycles, admissions,
//! preemptions (and both per Workload), wall time for the whole workload, completed Workloads per
//! second, cycle time p50/p99 and peak memory (VmHWM). Never asserts a time.
//!
//!   cargo bench --bench admission            # both shapes
//!   cargo bench --bench admission -- small   # only the 30-ClusterQueue shape
//!
//! Beside each shape it runs Kueue v0.19.2's own scheduler on the same objects when
//! `raygate-kueue-admit` is built (`hack/install-kueue.sh`; `$RAYGATE_KUEUE_ADMIT` overrides where
//! it is): the driver's `-bench` runs the whole workload the same way (one cycle, then the
//! Workloads admitted a cycle before finish) and the bench prints its figures and the ratios.
//! `$RAYGATE_BENCH_WORLDS=DIR` keeps the files written for it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use raygate::admission::{Decision, Options, Scheduler, Snapshot};
use raygate::types::kueue::*;
use raygate::workload::holds_quota;
use raygate_testing::*;

struct Shape {
    name: &'static str,
    cohorts: usize,
    queues_per_cohort: usize,
    /// Workloads per ClusterQueue: (small 1 CPU, medium 5 CPU, large 20 CPU).
    per_queue: (usize, usize, usize),
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "small: 5 cohorts x 6 ClusterQueues, 15,000 Workloads",
        cohorts: 5,
        queues_per_cohort: 6,
        per_queue: (350, 100, 50),
    },
    Shape {
        name: "large: 10 cohorts x 100 ClusterQueues, 50,000 Workloads",
        cohorts: 10,
        queues_per_cohort: 100,
        per_queue: (35, 10, 5),
    },
];

fn start() -> Timestamp {
    Timestamp::from_second(1_780_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn snapshot(shape: &Shape) -> Snapshot {
    let mut s = Snapshot {
        flavors: vec![resource_flavor("default")],
        ..Snapshot::default()
    };
    let mut created = 0i64;
    for c in 0..shape.cohorts {
        for k in 0..shape.queues_per_cohort {
            let name = format!("cohort-{c}-cq-{k}");
            let mut cq = cluster_queue(&name)
                .cohort(&format!("cohort-{c}"))
                .resource_group(resource_group(
                    &["cpu"],
                    vec![(
                        "default",
                        vec![resource_quota("cpu", "20", Some("100"), None)],
                    )],
                ));
            cq.spec.preemption = Some(ClusterQueuePreemption {
                reclaim_within_cohort: Some(ReclaimWithinCohort::Any),
                within_cluster_queue: Some(WithinClusterQueue::LowerPriority),
                borrow_within_cohort: None,
            });
            s.cluster_queues.push(cq);
            s.local_queues.push(local_queue(&name, &name));
            let (small, medium, large) = shape.per_queue;
            let classes = [
                ("small", small, "1", 50),
                ("medium", medium, "5", 100),
                ("large", large, "20", 200),
            ];
            for (class, count, cpu, priority) in classes {
                for i in 0..count {
                    created += 100; // ms: Kueue's creationIntervalMs
                    s.workloads.push(
                        workload(&format!("{name}-{class}-{i}"))
                            .queue(&name)
                            .podset(podset("main").cpu(cpu))
                            .priority(priority)
                            .created_at(start() + SignedDuration::from_millis(created)),
                    );
                }
            }
        }
    }
    s
}

/// Peak resident memory of this process in MiB (VmHWM).
fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU time this thread has run, from `/proc/thread-self/schedstat` (first field, ns): on a
/// machine shared with other jobs it is steadier than wall time.
fn cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        s.split_whitespace().next()?.parse().ok()?,
    ))
}

/// Resets VmHWM so each shape reports its own peak (Linux `clear_refs` value 5).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{cpus} CPUs ({model}); one thread used")
}

fn run(shape: &Shape) -> Figures {
    let peak_reset = reset_peak();
    let build = Instant::now();
    let s = snapshot(shape);
    let total = s.workloads.len();
    let options = Options {
        release_evicted_immediately: true,
    };
    let mut sched = Scheduler::new(s, &options);
    let build = build.elapsed();

    let (mut admits, mut evictions, mut cycles) = (0usize, 0usize, 0usize);
    let (mut in_cycle, mut in_apply) = (Duration::ZERO, Duration::ZERO);
    let mut cycle_times: Vec<Duration> = Vec::new();
    let mut running: Vec<String> = Vec::new();
    let wall = Instant::now();
    let cpu = cpu_time();
    let mut now = start() + SignedDuration::from_secs(3600);
    loop {
        cycles += 1;
        now += SignedDuration::from_secs(1);
        let t = Instant::now();
        let r = sched.cycle();
        let took = t.elapsed();
        in_cycle += took;
        cycle_times.push(took);
        let t = Instant::now();
        sched.apply(&r, now);
        // the ones admitted a cycle ago have run: they finish
        for k in running.drain(..) {
            sched.update_status(&k, |w| {
                holds_quota(w.status.as_ref()).then(|| {
                    raygate::admission::finish(
                        w.status.as_ref(),
                        w.metadata.generation,
                        "Succeeded",
                        "done",
                        now,
                    )
                })
            });
        }
        in_apply += t.elapsed();
        for d in &r.decisions {
            match d {
                Decision::Admit { workload, .. } => {
                    admits += 1;
                    running.push(workload.clone());
                }
                Decision::Evict { .. } => evictions += 1,
                // a pass reports a Pending decision only where a status changes
                Decision::Pending { .. } | Decision::FinishReplaced { .. } => {}
            }
        }
        // still pending once this pass's decisions are applied
        let pending: i32 = r.cluster_queues.iter().map(|c| c.pending).sum();
        if pending == 0 && running.is_empty() {
            break;
        }
        if cycles > 100_000 {
            println!("  gave up after {cycles} cycles");
            break;
        }
    }
    let wall = wall.elapsed();
    let cpu = cpu.zip(cpu_time()).map(|(a, b)| b.saturating_sub(a));
    let finished = sched
        .snapshot()
        .workloads
        .iter()
        .filter(|w| raygate::workload::is_finished(w.status.as_ref()))
        .count();
    let secs = wall.as_secs_f64();
    cycle_times.sort_unstable();
    let pct = |p: f64| {
        let i = ((cycle_times.len() as f64 * p).ceil() as usize).clamp(1, cycle_times.len());
        cycle_times[i - 1].as_secs_f64() * 1000.0
    };
    let per = |n: usize| n as f64 / total.max(1) as f64;
    println!("{}", shape.name);
    println!("  snapshot + index build   {:>10.3} s", build.as_secs_f64());
    println!(
        "  whole workload wall time {:>10.3} s  (cycles {:.3} s, applying decisions + finishing {:.3} s)",
        secs,
        in_cycle.as_secs_f64(),
        in_apply.as_secs_f64()
    );
    match cpu {
        Some(cpu) => println!(
            "  whole workload CPU time  {:>10.3} s  (this thread on a CPU)",
            cpu.as_secs_f64()
        ),
        None => println!("  whole workload CPU time  unavailable"),
    }
    println!("  cycles                   {cycles:>10}");
    println!(
        "  cycle time p50 / p99     {:>10.3} ms / {:.3} ms",
        pct(0.50),
        pct(0.99)
    );
    println!(
        "  admissions               {admits:>10}  ({:.2} per Workload)",
        per(admits)
    );
    println!(
        "  preemptions              {evictions:>10}  ({:.2} per Workload)",
        per(evictions)
    );
    println!(
        "  completed / total        {finished:>10} / {total}  -> {:.0} completed Workloads/s",
        finished as f64 / secs
    );
    match peak_mib() {
        Some(mib) => println!(
            "  peak memory (VmHWM)      {mib:>10.1} MiB{}",
            if peak_reset {
                ""
            } else {
                " (process peak; clear_refs unavailable)"
            }
        ),
        None => println!("  peak memory              unavailable"),
    }
    Figures {
        cycle_secs: in_cycle.as_secs_f64(),
        peak_mib: peak_mib().filter(|_| peak_reset),
    }
}

/// raygate's figures for one shape, to set beside Kueue's.
struct Figures {
    cycle_secs: f64,
    peak_mib: Option<f64>,
}

/// The shape as the file `raygate admit` and the driver read: one JSON document per object,
/// with the fields Kueue's API server would default written out (the driver's fake client
/// defaults nothing).
fn world_file(s: &Snapshot) -> String {
    let mut docs = vec![
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
    ];
    docs.extend(s.flavors.iter().map(value));
    for cq in &s.cluster_queues {
        let mut v = value(cq);
        let spec = &mut v["spec"];
        spec["queueingStrategy"] = "BestEffortFIFO".into();
        spec["stopPolicy"] = "None".into();
        spec["flavorFungibility"] = serde_json::json!({"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"});
        spec["preemption"]["borrowWithinCohort"] = serde_json::json!({"policy": "Never"});
        docs.push(v);
    }
    docs.extend(s.local_queues.iter().map(value));
    for w in &s.workloads {
        let mut v = value(w);
        v["spec"]["active"] = true.into();
        docs.push(v);
    }
    let text: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
    text.join("\n---\n")
}

/// A Kubernetes object as the JSON the API would return.
fn value<T: serde::Serialize>(o: &T) -> serde_json::Value {
    serde_json::to_value(o).unwrap_or_default()
}

/// Runs the same shape through Kueue's scheduler (the driver's `-bench`) and prints its figures
/// and the ratios to raygate's.
fn kueue_side(shape: &Shape, ours: &Figures) {
    let driver = raygate_testing::tools::kueue_admit();
    if !driver.is_file() {
        println!(
            "  Kueue v0.19.2 side       not run: raygate-kueue-admit is not built (hack/install-kueue.sh)"
        );
        return;
    }
    // $RAYGATE_BENCH_WORLDS keeps the file (`raygate admit -f`, or the driver with -cpuprofile)
    let keep = std::env::var_os("RAYGATE_BENCH_WORLDS").map(PathBuf::from);
    let short = shape.name.split(':').next().unwrap_or("shape");
    let file = match &keep {
        Some(dir) => dir.join(format!("admission-{short}.yaml")),
        None => std::env::temp_dir().join(format!(
            "raygate-admission-{short}-{}.yaml",
            std::process::id()
        )),
    };
    if let Err(e) = std::fs::write(&file, world_file(&snapshot(shape))) {
        println!(
            "  Kueue v0.19.2 side       not run: {}: {e}",
            file.display()
        );
        return;
    }
    let out = std::process::Command::new(&driver)
        .args(["-bench", "-max-cycles", "1000000"])
        .arg(&file)
        .output();
    if keep.is_none() {
        let _ = std::fs::remove_file(&file);
    }
    let v: serde_json::Value = match out {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).unwrap_or_default(),
        Ok(o) => {
            println!(
                "  Kueue v0.19.2 side       failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            println!(
                "  Kueue v0.19.2 side       not run: {}: {e}",
                driver.display()
            );
            return;
        }
    };
    if let Some(e) = v["error"].as_str() {
        println!("  Kueue v0.19.2 side       failed: {e}");
        return;
    }
    print_kueue(&v, ours);
}

fn print_kueue(v: &serde_json::Value, ours: &Figures) {
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    println!("  Kueue v0.19.2's scheduler on the same objects (raygate-kueue-admit -bench):");
    println!(
        "    load (parse, client, caches) {:>8.3} s",
        f("loadSeconds")
    );
    println!(
        "    time in its cycles       {:>10.3} s wall, without their status writes through the fake client ({:.3} s)",
        f("scheduleSeconds"),
        f("scheduleWriteSeconds"),
    );
    println!(
        "    the admissions' writes   {:>10.3} s; the controllers between cycles {:.3} s; CPU in the cycles, writes and GC included, {:.3} s",
        f("admissionWriteSeconds"),
        f("reactSeconds"),
        f("scheduleCpuSeconds"),
    );
    println!(
        "    cycles                   {:>10}  (p50 {:.3} ms, p99 {:.3} ms)",
        n("cycles"),
        f("cycleP50Ms"),
        f("cycleP99Ms")
    );
    println!(
        "    admissions / preemptions {:>10} / {}; completed {} / {}",
        n("admissions"),
        n("preemptions"),
        n("finished"),
        n("workloads")
    );
    println!(
        "    peak memory (VmHWM)      {:>10.1} MiB  ({:.1} MiB resident once loaded)",
        f("peakMiB"),
        f("loadedMiB")
    );
    let ratio = |kueue: f64, ours: f64| if ours > 0.0 { kueue / ours } else { f64::NAN };
    print!(
        "  Kueue / raygate          time in cycles {:.1}x (wall, neither side's writes)",
        ratio(f("scheduleSeconds"), ours.cycle_secs)
    );
    if let Some(mib) = ours.peak_mib.filter(|_| f("peakMiB") > 0.0) {
        print!(
            "; raygate's peak memory {:.2} of Kueue's",
            mib / f("peakMiB")
        );
    }
    println!();
}

fn main() {
    // `cargo bench` passes `--bench`; anything else filters shapes by name
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    println!("raygate admission benchmark on {}", machine());
    for shape in &SHAPES {
        if filters.is_empty() || filters.iter().any(|f| shape.name.contains(f.as_str())) {
            let ours = run(shape);
            kueue_side(shape, &ours);
        }
    }
}
