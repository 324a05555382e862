//! Readers of a [`CycleResult`] for admission tests. The objects themselves come from the shared
//! builders in `raygate-testing` (re-exported here so a test has one import).

pub use raygate_testing::*;

use super::{CycleResult, Decision};
use crate::quantity::Quantity;

pub fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

/// The decision about `name` (`default/<name>`), if any.
pub fn decision<'a>(r: &'a CycleResult, name: &str) -> Option<&'a Decision> {
    let key = format!("default/{name}");
    r.decisions.iter().find(|d| d.workload() == key)
}

pub fn admitted_names(r: &CycleResult) -> Vec<String> {
    r.decisions
        .iter()
        .filter(|d| matches!(d, Decision::Admit { .. }))
        .map(|d| d.workload().trim_start_matches("default/").to_string())
        .collect()
}

pub fn message(r: &CycleResult, name: &str) -> String {
    match decision(r, name) {
        Some(Decision::Pending { message, .. }) => message.to_string(),
        Some(Decision::Evict { message, .. }) => message.clone(),
        other => panic!("no pending/evict decision for {name}: {other:?}"),
    }
}

/// Usage of `(flavor, resource)` in a ClusterQueue row.
pub fn usage(r: &CycleResult, cq: &str, flavor: &str, resource: &str) -> (Quantity, Quantity) {
    let row = r.cluster_queues.iter().find(|c| c.name == cq).unwrap();
    let f = row.reservation.iter().find(|f| f.name == flavor).unwrap();
    let x = f.resources.iter().find(|x| x.name == resource).unwrap();
    (
        Quantity::try_from(x.total.as_ref().unwrap()).unwrap(),
        Quantity::try_from(x.borrowed.as_ref().unwrap()).unwrap(),
    )
}
