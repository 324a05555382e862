//! NOT COMPILED. The shrinker for `static_cohorts_do_not_churn` seeds (issue #15). To use it,
//! copy it to src/admission/proptests/scratch.rs and add `#[cfg(test)] mod scratch;` at the end of
//! src/admission/proptests.rs (a child module sees the generator's private items); it keeps cases
//! CRD-valid (a flavor keeps its resources, a Workload keeps one PodSet). Remove both before committing.
//!
//! Scratch tools (not committed): dump, trace and shrink churning seeds.
//!
//!   SEED=51152 cargo test -p raygate --lib scratch_trace_seed -- --nocapture
//!   SEED=51152 cargo test -p raygate --lib scratch_shrink_seed -- --nocapture
//!   CASE=/tmp/c.json cargo test -p raygate --lib scratch_trace_case -- --nocapture
//!   SEED=75654 cargo test -p raygate --lib scratch_trace_phase2 -- --nocapture  (the second phase)

use serde_json::{Value, json};

use super::*;

fn seed_case(seed: u64) -> Value {
    let mut rng = Rng(seed);
    let (base, _) = random_snapshot(&mut rng);
    let release = rng.chance(50);
    json!({
        "clusterQueues": base.cluster_queues,
        "cohorts": base.cohorts,
        "flavors": base.flavors,
        "localQueues": base.local_queues,
        "release": release,
        "seed": seed,
        "workloads": base.workloads,
    })
}

fn snapshot_of(case: &Value) -> Option<(Snapshot, Options)> {
    let f = |k: &str| case[k].clone();
    Some((
        Snapshot {
            flavors: serde_json::from_value(f("flavors")).ok()?,
            cohorts: serde_json::from_value(f("cohorts")).ok()?,
            cluster_queues: serde_json::from_value(f("clusterQueues")).ok()?,
            local_queues: serde_json::from_value(f("localQueues")).ok()?,
            workloads: serde_json::from_value(f("workloads")).ok()?,
            ..Snapshot::default()
        },
        Options {
            release_evicted_immediately: case["release"].as_bool()?,
        },
    ))
}

/// Some pass of 20 evicts something.
fn churns(case: &Value) -> bool {
    let Some((s, options)) = snapshot_of(case) else {
        return false;
    };
    let mut sched = Scheduler::new(s, &options);
    for pass in 0..20 {
        let r = sched.cycle();
        if r.decisions
            .iter()
            .any(|d| matches!(d, Decision::Evict { .. }))
        {
            return true;
        }
        if !sched.apply(&r, ts(100 + pass)) {
            return false;
        }
    }
    false
}

fn trace(case: &Value) {
    let (s, options) = snapshot_of(case).unwrap();
    let mut sched = Scheduler::new(s, &options);
    for pass in 0..20 {
        let r = sched.cycle();
        println!("--- pass {pass}");
        for d in &r.decisions {
            match d {
                Decision::Admit {
                    workload,
                    admission,
                } => {
                    let fl: Vec<String> = admission
                        .pod_set_assignments
                        .iter()
                        .map(|p| {
                            format!(
                                "{}x{}:{:?}/{:?}",
                                p.name,
                                p.count.unwrap_or(0),
                                p.flavors,
                                p.resource_usage
                                    .iter()
                                    .map(|(k, v)| format!("{k}={}", v.0))
                                    .collect::<Vec<_>>()
                            )
                        })
                        .collect();
                    println!("ADMIT {workload} in {} {fl:?}", admission.cluster_queue);
                }
                Decision::Pending {
                    workload, message, ..
                } => println!("pending {workload}: {message}"),
                Decision::Evict {
                    workload, message, ..
                } => println!("EVICT {workload}: {message}"),
                Decision::FinishReplaced { workload, .. } => println!("finish {workload}"),
            }
        }
        for c in &r.cluster_queues {
            let u: Vec<String> = c
                .reservation
                .iter()
                .flat_map(|f| {
                    f.resources.iter().map(move |x| {
                        format!(
                            "{}/{}={}(b{})",
                            f.name,
                            x.name,
                            x.total.as_ref().map(|q| q.0.clone()).unwrap_or_default(),
                            x.borrowed.as_ref().map(|q| q.0.clone()).unwrap_or_default()
                        )
                    })
                })
                .collect();
            println!("  {} {}", c.name, u.join(" "));
        }
        if !sched.apply(&r, ts(100 + pass)) {
            break;
        }
    }
}

fn describe(case: &Value) {
    println!("release: {}", case["release"]);
    for c in case["cohorts"].as_array().unwrap() {
        println!("cohort {}", serde_json::to_string(c).unwrap());
    }
    for c in case["clusterQueues"].as_array().unwrap() {
        println!(
            "CQ {} cohort={} strat={} preempt={} rg={}",
            c["metadata"]["name"],
            c["spec"]["cohortName"],
            c["spec"]["queueingStrategy"],
            c["spec"]["preemption"],
            c["spec"]["resourceGroups"]
        );
    }
    for w in case["workloads"].as_array().unwrap() {
        let ps: Vec<String> = w["spec"]["podSets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                format!(
                    "{}x{} {}",
                    p["name"], p["count"], p["template"]["spec"]["containers"][0]["resources"]
                )
            })
            .collect();
        println!(
            "WL {} q={} prio={} t={} {ps:?}",
            w["metadata"]["name"],
            w["spec"]["queueName"],
            w["spec"]["priority"],
            w["metadata"]["creationTimestamp"],
        );
    }
}

fn arr<'a>(v: &'a mut Value, k: &str) -> &'a mut Vec<Value> {
    v[k].as_array_mut().unwrap()
}

/// Leading integer of a quantity string and its suffix.
fn split_q(s: &str) -> Option<(i64, String)> {
    let n: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((n.parse().ok()?, s[n.len()..].to_string()))
}

/// Every smaller variant of `case` (one change each).
fn candidates(case: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    drop_objects(case, &mut out);
    loosen_cohorts(case, &mut out);
    drop_flavors(case, &mut out);
    drop_memory(case, &mut out);
    drop_pod_sets(case, &mut out);
    smaller_numbers(case, &mut out);
    simpler_policies(case, &mut out);
    out
}

/// The ClusterQueues' and cohorts' quota, as text: what a ResourceFlavor or a resource is
/// looked up in.
fn quota_text(case: &Value) -> String {
    serde_json::to_string(&json!([case["clusterQueues"], case["cohorts"]])).unwrap()
}

/// Variants with one Workload, one ClusterQueue (with its LocalQueues and Workloads) or one
/// cohort object dropped.
fn drop_objects(case: &Value, out: &mut Vec<Value>) {
    // drop a Workload
    for i in 0..case["workloads"].as_array().unwrap().len() {
        let mut c = case.clone();
        arr(&mut c, "workloads").remove(i);
        out.push(c);
    }
    // drop a ClusterQueue, its LocalQueue and its Workloads
    for i in 0..case["clusterQueues"].as_array().unwrap().len() {
        let mut c = case.clone();
        let name = arr(&mut c, "clusterQueues").remove(i)["metadata"]["name"].clone();
        arr(&mut c, "localQueues").retain(|l| l["spec"]["clusterQueue"] != name);
        arr(&mut c, "workloads").retain(|w| w["spec"]["queueName"] != name);
        out.push(c);
    }
    // drop a cohort object
    for i in 0..case["cohorts"].as_array().unwrap().len() {
        let mut c = case.clone();
        arr(&mut c, "cohorts").remove(i);
        out.push(c);
    }
}

/// Variants with a cohort's quota or parent dropped, or a ClusterQueue out of its cohort.
fn loosen_cohorts(case: &Value, out: &mut Vec<Value>) {
    // drop a cohort's quota / parent
    for i in 0..case["cohorts"].as_array().unwrap().len() {
        for k in ["resourceGroups", "parentName"] {
            let mut c = case.clone();
            if let Some(o) = arr(&mut c, "cohorts")[i]["spec"].as_object_mut()
                && o.remove(k).is_some()
            {
                out.push(c);
            }
        }
    }
    // a ClusterQueue out of its cohort
    for i in 0..case["clusterQueues"].as_array().unwrap().len() {
        let mut c = case.clone();
        if let Some(o) = arr(&mut c, "clusterQueues")[i]["spec"].as_object_mut()
            && o.remove("cohortName").is_some()
        {
            out.push(c);
        }
    }
}

/// Variants with one flavor dropped from a ClusterQueue or cohort that has several, or one
/// ResourceFlavor no quota names dropped.
fn drop_flavors(case: &Value, out: &mut Vec<Value>) {
    // drop a flavor from a ClusterQueue or cohort (keep one)
    for list in ["clusterQueues", "cohorts"] {
        for i in 0..case[list].as_array().unwrap().len() {
            let n = case[list][i]["spec"]["resourceGroups"][0]["flavors"]
                .as_array()
                .map_or(0, |a| a.len());
            if n < 2 {
                continue;
            }
            for k in 0..n {
                let mut c = case.clone();
                arr(&mut c, list)[i]["spec"]["resourceGroups"][0]["flavors"]
                    .as_array_mut()
                    .unwrap()
                    .remove(k);
                out.push(c);
            }
        }
    }
    // drop an unreferenced ResourceFlavor
    let text = quota_text(case);
    for i in 0..case["flavors"].as_array().unwrap().len() {
        let name = case["flavors"][i]["metadata"]["name"].as_str().unwrap();
        if !text.contains(&format!("\"name\":\"{name}\",\"resources\"")) {
            let mut c = case.clone();
            arr(&mut c, "flavors").remove(i);
            out.push(c);
        }
    }
}

/// The variant without memory (quotas and requests), when some quota has it.
fn drop_memory(case: &Value, out: &mut Vec<Value>) {
    if !quota_text(case).contains("memory") {
        return;
    }
    let mut c = case.clone();
    for list in ["clusterQueues", "cohorts"] {
        for q in arr(&mut c, list) {
            if let Some(rgs) = q["spec"]["resourceGroups"].as_array_mut() {
                for rg in rgs {
                    rg["coveredResources"] = json!(["cpu"]);
                    for f in rg["flavors"].as_array_mut().unwrap() {
                        f["resources"]
                            .as_array_mut()
                            .unwrap()
                            .retain(|r| r["name"] != "memory");
                    }
                }
            }
        }
    }
    for w in arr(&mut c, "workloads") {
        for p in w["spec"]["podSets"].as_array_mut().unwrap() {
            for ct in p["template"]["spec"]["containers"].as_array_mut().unwrap() {
                if let Some(o) = ct["resources"]["requests"].as_object_mut() {
                    o.remove("memory");
                }
            }
        }
    }
    out.push(c);
}

/// Variants with one PodSet dropped from a Workload that has several.
fn drop_pod_sets(case: &Value, out: &mut Vec<Value>) {
    for i in 0..case["workloads"].as_array().unwrap().len() {
        let n = case["workloads"][i]["spec"]["podSets"]
            .as_array()
            .unwrap()
            .len();
        if n < 2 {
            continue;
        }
        for k in 0..n {
            let mut c = case.clone();
            arr(&mut c, "workloads")[i]["spec"]["podSets"]
                .as_array_mut()
                .unwrap()
                .remove(k);
            out.push(c);
        }
    }
}

/// Variants with smaller numbers (counts, requests, quotas), and without a limit or priority.
fn smaller_numbers(case: &Value, out: &mut Vec<Value>) {
    let mut paths: Vec<Vec<Value>> = Vec::new();
    collect_numbers(case, &mut Vec::new(), &mut paths);
    for p in paths {
        let v = get(case, &p);
        let last = p.last().and_then(|k| k.as_str()).unwrap_or("");
        if matches!(last, "borrowingLimit" | "lendingLimit" | "priority") {
            let mut c = case.clone();
            remove(&mut c, &p);
            out.push(c);
        }
        match v {
            Value::Number(n) => {
                let n = n.as_i64().unwrap_or(0);
                for m in [0, n / 2, n - 1] {
                    if m >= 0 && m < n {
                        let mut c = case.clone();
                        *get_mut(&mut c, &p) = json!(m);
                        out.push(c);
                    }
                }
            }
            Value::String(s) => {
                if let Some((n, suffix)) = split_q(s) {
                    for m in [0, n / 2, n - 1] {
                        if m >= 0 && m < n {
                            let mut c = case.clone();
                            *get_mut(&mut c, &p) = json!(format!("{m}{suffix}"));
                            out.push(c);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Variants with a ClusterQueue's queueing or preemption policy set to a simpler one.
fn simpler_policies(case: &Value, out: &mut Vec<Value>) {
    for i in 0..case["clusterQueues"].as_array().unwrap().len() {
        for (k, v) in [
            ("queueingStrategy", "BestEffortFIFO"),
            ("preemption.withinClusterQueue", "Never"),
            ("preemption.reclaimWithinCohort", "Never"),
            ("preemption.withinClusterQueue", "LowerPriority"),
            ("preemption.reclaimWithinCohort", "Any"),
        ] {
            let mut c = case.clone();
            let spec = &mut arr(&mut c, "clusterQueues")[i]["spec"];
            let slot = match k.split_once('.') {
                Some((a, b)) => &mut spec[a][b],
                None => &mut spec[k],
            };
            if *slot != json!(v) {
                *slot = json!(v);
                out.push(c);
            }
        }
    }
}

fn collect_numbers(v: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                if k == "metadata" || k == "seed" {
                    continue;
                }
                at.push(json!(k));
                let leaf = matches!(
                    k.as_str(),
                    "count"
                        | "priority"
                        | "nominalQuota"
                        | "borrowingLimit"
                        | "lendingLimit"
                        | "cpu"
                        | "memory"
                );
                if leaf && (x.is_number() || x.is_string()) {
                    out.push(at.clone());
                } else {
                    collect_numbers(x, at, out);
                }
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                at.push(json!(i));
                collect_numbers(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn get<'a>(v: &'a Value, p: &[Value]) -> &'a Value {
    p.iter().fold(v, |v, k| match k {
        Value::String(s) => &v[s.as_str()],
        Value::Number(n) => &v[n.as_u64().unwrap() as usize],
        _ => unreachable!(),
    })
}

fn get_mut<'a>(v: &'a mut Value, p: &[Value]) -> &'a mut Value {
    p.iter().fold(v, |v, k| match k {
        Value::String(s) => &mut v[s.as_str()],
        Value::Number(n) => &mut v[n.as_u64().unwrap() as usize],
        _ => unreachable!(),
    })
}

fn remove(v: &mut Value, p: &[Value]) {
    let (last, parent) = p.split_last().unwrap();
    if let (Some(o), Some(k)) = (get_mut(v, parent).as_object_mut(), last.as_str()) {
        o.remove(k);
    }
}

fn size(case: &Value) -> usize {
    serde_json::to_string(case).unwrap().len()
}

fn shrink(mut case: Value, still: impl Fn(&Value) -> bool) -> Value {
    loop {
        let before = size(&case);
        let mut progressed = false;
        for c in candidates(&case) {
            if size(&c) <= before && c != case && still(&c) {
                case = c;
                progressed = true;
                break;
            }
        }
        if !progressed {
            return case;
        }
    }
}

fn env_seed() -> u64 {
    std::env::var("SEED").unwrap().parse().unwrap()
}

#[test]
fn scratch_trace_seed() {
    let case = seed_case(env_seed());
    describe(&case);
    println!("phase1 churns: {}", churns(&case));
    println!("static case: {:?}", run_static_case(env_seed()));
    trace(&case);
}

#[test]
fn scratch_shrink_seed() {
    let case = seed_case(env_seed());
    assert!(churns(&case), "does not churn");
    let small = shrink(case, churns);
    println!("{}", serde_json::to_string(&small).unwrap());
    describe(&small);
    trace(&small);
}

#[test]
fn scratch_trace_case() {
    let text = std::fs::read_to_string(std::env::var("CASE").unwrap()).unwrap();
    let case: Value = serde_json::from_str(text.trim()).unwrap();
    describe(&case);
    println!("churns: {}", churns(&case));
    trace(&case);
}

/// The shrunk cases in testdata that churn now.
#[test]
fn scratch_testdata() {
    for line in include_str!("../testdata/churn.jsonl").lines() {
        let case: Value = serde_json::from_str(line).unwrap();
        println!("{} churns: {}", case["seed"], churns(&case));
    }
}

#[test]
fn scratch_trace_phase2() {
    let seed = env_seed();
    describe(&seed_case(seed));
    let mut rng = Rng(seed);
    let (base, _) = random_snapshot(&mut rng);
    let _ = rng.chance(50);
    let mut early = base.clone();
    let mut later = Vec::new();
    early.workloads.retain(|w| {
        let keep = rng.chance(50);
        if !keep {
            later.push(w.clone());
        }
        keep
    });
    let release = Options {
        release_evicted_immediately: true,
    };
    let (mut s, _) = run_until_stable(early, &release, ts(100), 50);
    let held: Vec<_> = s
        .workloads
        .iter()
        .filter(|w| holds_quota(w.status.as_ref()))
        .map(|w| w.metadata.name.clone().unwrap())
        .collect();
    println!(
        "settled holders: {held:?}; later: {:?}",
        later
            .iter()
            .map(|w| w.metadata.name.clone().unwrap())
            .collect::<Vec<_>>()
    );
    s.workloads.extend(later);
    for w in &s.workloads {
        if let Some(a) = w.status.as_ref().and_then(|x| x.admission.as_ref()) {
            println!(
                "HOLD {} in {} {:?}",
                w.metadata.name.clone().unwrap(),
                a.cluster_queue,
                a.pod_set_assignments
                    .iter()
                    .map(|p| (
                        p.flavors.clone(),
                        p.resource_usage
                            .iter()
                            .map(|(k, v)| format!("{k}={}", v.0))
                            .collect::<Vec<_>>()
                    ))
                    .collect::<Vec<_>>()
            );
        }
    }
    let mut sched = Scheduler::new(s, &release);
    for pass in 0..12 {
        let r = sched.cycle();
        println!("--- pass {pass}");
        for d in &r.decisions {
            match d {
                Decision::Admit {
                    workload,
                    admission,
                } => println!("ADMIT {workload} in {}", admission.cluster_queue),
                Decision::Evict {
                    workload, message, ..
                } => println!("EVICT {workload}: {message}"),
                Decision::Pending {
                    workload, message, ..
                } if message.is_preemptor() => println!("preempting {workload}: {message}"),
                _ => {}
            }
        }
        if !sched.apply(&r, ts(200 + pass)) {
            break;
        }
    }
}
