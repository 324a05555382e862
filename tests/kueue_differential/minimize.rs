//! Shrinks a disagreeing world: takes parts away, one at a time, while raygate and Kueue still
//! disagree (delta debugging by single removals, repeated until nothing more can go).

use crate::compare::{self, Outcome};
use crate::world::World;

fn disagrees(w: &World) -> bool {
    let text = w.documents();
    compare::judge(&text, &compare::run_kueue_text(&text)).outcome == Outcome::Disagree
}

/// The candidates one step smaller than `w`.
fn smaller(w: &World) -> Vec<World> {
    let mut out = Vec::new();
    for i in 0..w.workloads.len() {
        let mut c = w.clone();
        c.workloads.remove(i);
        out.push(c);
    }
    for i in 0..w.cluster_queues.len() {
        let mut c = w.clone();
        let cq = c.cluster_queues.remove(i);
        let lq = format!("lq-{}", cq.name);
        c.workloads.retain(|wl| wl.queue != lq);
        out.push(c);
    }
    for i in 0..w.cohorts.len() {
        let mut c = w.clone();
        let gone = c.cohorts.remove(i).name;
        for co in &mut c.cohorts {
            if co.parent.as_deref() == Some(gone.as_str()) {
                co.parent = None;
            }
        }
        out.push(c);
    }
    for i in 0..w.workloads.len() {
        if w.workloads[i].held.is_some() {
            let mut c = w.clone();
            c.workloads[i].held = None;
            out.push(c);
        }
        for p in 0..w.workloads[i].pod_sets.len() {
            if w.workloads[i].pod_sets[p].count > 1 {
                let mut c = w.clone();
                c.workloads[i].pod_sets[p].count -= 1;
                c.workloads[i].held = None;
                out.push(c);
            }
        }
    }
    for i in 0..w.cluster_queues.len() {
        let cq = &w.cluster_queues[i];
        if cq.borrow_within.is_some() {
            let mut c = w.clone();
            c.cluster_queues[i].borrow_within = None;
            out.push(c);
        }
        if cq.preference.is_some() {
            let mut c = w.clone();
            c.cluster_queues[i].preference = None;
            out.push(c);
        }
        if cq.strategy != "BestEffortFIFO" {
            let mut c = w.clone();
            c.cluster_queues[i].strategy = "BestEffortFIFO";
            out.push(c);
        }
        for (g, group) in cq.groups.iter().enumerate() {
            if group.flavors.len() > 1 {
                for f in 0..group.flavors.len() {
                    let mut c = w.clone();
                    let gone = c.cluster_queues[i].groups[g].flavors.remove(f).0;
                    unhold_flavor(&mut c, &cq.name, &gone);
                    out.push(c);
                }
            }
        }
    }
    out
}

/// Workloads held in a flavor the queue no longer lists are made pending.
fn unhold_flavor(w: &mut World, cq: &str, flavor: &str) {
    for wl in &mut w.workloads {
        let uses = wl.held.as_ref().is_some_and(|h| {
            h.cluster_queue == cq && h.flavors.iter().flatten().any(|(_, f)| f == flavor)
        });
        if uses {
            wl.held = None;
        }
    }
}

pub fn minimize(w: &World) -> World {
    let mut best = w.clone();
    'outer: loop {
        for c in smaller(&best) {
            if disagrees(&c) {
                best = c;
                continue 'outer;
            }
        }
        return best;
    }
}
