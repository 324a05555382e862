//! The slice family: a child runs only covered by an admitted slice, and no slice outlives the
//! story's need for it.

use std::collections::BTreeMap;

use super::owners::{ORIGINATED_FROM_NAME, RAY_CLUSTER_LABEL, pods, service_of_pod};
use super::violation::{Invariant, Now, Violation, intervals};
use crate::history::{History, Key, Kind, State};

/// **No child RayCluster ran uncovered.** For each opted-in RayService (queue label), whenever
/// its children run pods (bound, not terminal, not being deleted), an admitted, unfinished slice
/// of it exists and the largest one counts at least as many pods as run.
pub fn no_child_ran_uncovered(h: &History) -> Vec<Violation> {
    intervals(h, Invariant::RanUncovered, |_, states| {
        let mut running: BTreeMap<(String, String), BTreeMap<String, usize>> = BTreeMap::new();
        for (k, p) in pods(states).filter(|(_, p)| p.running()) {
            if let Some(svc) = service_of_pod(states, k, p) {
                let opted_in = matches!(
                    states.get(&Key::new(Kind::RayService, &k.namespace, &svc)),
                    Some(State::RayService(s)) if s.queue.is_some()
                );
                if opted_in {
                    let child = p.labels.get(RAY_CLUSTER_LABEL).cloned().unwrap_or_default();
                    *running
                        .entry((k.namespace.clone(), svc))
                        .or_default()
                        .entry(child)
                        .or_default() += 1;
                }
            }
        }
        let mut now = Now::new();
        for ((ns, svc), children) in running {
            let granted = states
                .iter()
                .filter_map(|(k, s)| match s {
                    State::Workload(w)
                        if k.namespace == ns
                            && w.rayservice.as_deref() == Some(svc.as_str())
                            && w.admitted
                            && !w.finished =>
                    {
                        Some(w.pods)
                    }
                    _ => None,
                })
                .max();
            let total: usize = children.values().sum();
            let message = match granted {
                None => format!("{total} pods ran with no admitted slice"),
                Some(g) if i64::try_from(total).unwrap_or(i64::MAX) > g => {
                    format!("{total} pods ran, the admitted slice covers {g}")
                }
                Some(_) => continue,
            };
            let objects = children
                .iter()
                .map(|(c, n)| format!("RayCluster {ns}/{c} ({n} pods)"))
                .collect();
            now.insert(
                format!("{ns}/{svc}"),
                (objects, format!("RayService {ns}/{svc}: {message}")),
            );
        }
        now
    })
}

/// **No slice leaked after the story ends.** At the end of the history, an admitted, unfinished
/// slice must charge a RayService that still exists, is still opted in and still has a child;
/// and a RayService has at most one such slice (an old slice finishes when its replacement is
/// admitted).
pub fn no_slice_leaked(h: &History) -> Vec<Violation> {
    let Some((_, end)) = h.span() else {
        return vec![];
    };
    let states = h.current();
    let mut live: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut out = vec![];
    for (k, s) in states {
        let State::Workload(w) = s else { continue };
        let Some(svc) = &w.rayservice else { continue };
        if w.admitted && !w.finished {
            live.entry((k.namespace.clone(), svc.clone()))
                .or_default()
                .push(k.to_string());
        }
    }
    for ((ns, svc), slices) in live {
        let opted_in = matches!(
            states.get(&Key::new(Kind::RayService, &ns, &svc)),
            Some(State::RayService(s)) if s.queue.is_some()
        );
        let has_child = states.iter().any(|(k, s)| {
            matches!(s, State::RayCluster(rc)
                if k.namespace == ns && rc.labels.get(ORIGINATED_FROM_NAME) == Some(&svc))
        });
        let message = if !opted_in {
            format!("RayService {ns}/{svc} is gone or no longer opted in")
        } else if !has_child {
            format!("RayService {ns}/{svc} has no child left")
        } else if slices.len() > 1 {
            format!(
                "RayService {ns}/{svc} holds {} admitted slices",
                slices.len()
            )
        } else {
            continue;
        };
        out.push(Violation {
            invariant: Invariant::SliceLeaked,
            from: end,
            until: None,
            objects: slices,
            message,
        });
    }
    out
}
