//! The same story run another way, to compare raygate's run with: KubeRay without the gate, and
//! the naive drains in place of raygate's.

use super::format::{Action, Checked, StrategyName};

/// **KubeRay without the gate** (issue #14 item 3): the same story with raygate's controller
/// off and no RayService asking to be created suspended, so KubeRay (the emulator) alone runs the
/// upgrade: the pending child starts at once next to the active one, whatever the ClusterQueue
/// says. The queues stay, so the quota invariant still charges the service's pods to its
/// ClusterQueue and measures the overrun ([`crate::invariants::quota_overrun`]). Kills and
/// restarts of the controller are dropped (there is none); everything else is kept.
pub fn without_gate(checked: &Checked) -> Checked {
    let mut out = checked.clone();
    out.scenario.name = format!("{} (KubeRay without the gate)", checked.scenario.name);
    out.scenario.controller.run = false;
    out.scenario.controller.pod_gate = false;
    for o in &mut out.scenario.objects {
        ungate(o);
    }
    out.steps.retain(|(_, a, _)| {
        !matches!(a, Action::KillController | Action::RestartController)
            && !matches!(a, Action::KillControllerAfterWrites(_))
    });
    for (_, a, _) in &mut out.steps {
        if let Action::Apply(objects) = a {
            objects.iter_mut().for_each(ungate);
        }
    }
    out.scenario.expect.violations.clear();
    out.scenario.expect.objects.clear();
    out
}

/// The naive drains on the same story: each rollout the story starts is driven instead by
/// `kubectl drain` node by node, random drains of 2 nodes, and UD by UD (no taint on the outdated
/// generation: the baselines know nothing of it). (name, scenario).
pub fn drain_variants(checked: &Checked) -> Vec<(String, Checked)> {
    [
        ("kubectl drain node by node", StrategyName::NodeByNode, None),
        (
            "random drains of 2 nodes",
            StrategyName::RandomConcurrent,
            Some(2),
        ),
        ("UD by UD", StrategyName::DomainByDomain, None),
    ]
    .into_iter()
    .map(|(name, strategy, k)| {
        let mut c = checked.clone();
        c.scenario.name = format!("{} ({name})", checked.scenario.name);
        for (_, a, _) in &mut c.steps {
            if let Action::StartRollout(r) = a {
                r.strategy = strategy;
                r.k = k;
                r.taint_outdated = Some(false);
            }
        }
        (name.to_string(), c)
    })
    .collect()
}

/// A RayService or RayCluster asks KubeRay to run at once: `suspend` dropped from the cluster
/// spec (raygate's gate, like Kueue's, has users create it `suspend: true`).
fn ungate(object: &mut serde_json::Value) {
    let spec = match object["kind"].as_str() {
        Some("RayService") => object.pointer_mut("/spec/rayClusterConfig"),
        Some("RayCluster") => object.pointer_mut("/spec"),
        _ => None,
    };
    if let Some(serde_json::Value::Object(spec)) = spec {
        spec.remove("suspend");
    }
}
