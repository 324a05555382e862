//! The `nodeRollout` strategy (IO): a node-generation upgrade through a `NodeRollout` object,
//! which raygate's real controller (`--node-rollouts`) plans and runs; this only creates the
//! object, plays the upgrade agent its `Reboot` hand-off asks for
//! ([`crate::baselines::reboot_agent`]) and waits for the status to say `Completed`.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use raygate::types::rollout::{NodeRollout, NodeRolloutStatus};
use raygate_sim::Clock;
use raygate_sim::world::actors::{lws, node_lifecycle};
use serde_json::json;

use crate::baselines::{Outcome, reboot_agent};

/// What the NodeRollout is asked to do.
#[derive(Clone, Debug)]
pub struct Request {
    pub name: String,
    /// The node label naming a node's upgrade domain.
    pub domain_label: String,
    /// The generation every node ends at (label [`node_lifecycle::GENERATION`]).
    pub target: String,
    /// Taint the outdated nodes `raygate.io/outdated:NoSchedule` up front (`None`: the
    /// NodeRollout's default, the controller decides by the room check).
    pub taint_outdated: Option<bool>,
    /// The pod label naming a group: LeaderWorkerSet's group key uses the `LeaderWorkerSet`
    /// preset, any other a `Custom` one whose representative is `role=leader`.
    pub group_label: String,
    /// How long a domain stays healthy before the next starts (default: from the probes).
    pub health_check_stable: Option<String>,
    /// `spec.rayServices` (`None`: its defaults).
    pub ray_services: Option<raygate::types::rollout::RayServicesSpec>,
}

/// The strategy's name in outcomes and tables.
pub const NAME: &str = "raygate (NodeRollout)";

/// The object the request becomes.
pub fn object(r: &Request) -> serde_json::Value {
    let groups = if r.group_label == lws::GROUP_KEY {
        json!({"preset": "LeaderWorkerSet"})
    } else {
        json!({"preset": "Custom", "groupLabel": r.group_label, "representative": "role=leader"})
    };
    let mut spec = json!({
        "udLabel": r.domain_label,
        "generation": {"label": node_lifecycle::GENERATION, "targetValue": r.target},
        "handOff": {"mode": "Reboot"},
        // Ray pods keep their logs in an emptyDir; a DaemonSet pod is not the rollout's business
        "drain": {"ignoreDaemonsets": true, "deleteEmptydirData": true},
        "groups": groups,
    });
    if let Some(s) = &r.health_check_stable {
        spec["healthCheckStable"] = json!(s);
    }
    if let Some(t) = r.taint_outdated {
        spec["taintOutdated"] = json!(t);
    }
    if let Some(m) = &r.ray_services {
        spec["rayServices"] = json!(m);
    }
    json!({"apiVersion": "raygate.io/v1alpha1", "kind": "NodeRollout",
        "metadata": {"name": r.name}, "spec": spec})
}

/// Evictions the status counts (protected and other, over every domain).
pub fn evictions(s: &NodeRolloutStatus) -> usize {
    s.domains
        .iter()
        .map(|d| usize::try_from(d.protected_evicted + d.other_evicted).unwrap_or(0))
        .sum()
}

/// Creates the NodeRollout and waits (cluster time, checking every second) until it is
/// `Completed`; `Failed` or an API error ends it with the reason.
pub async fn run(client: &Client, clock: &Clock, r: &Request) -> Result<Outcome, String> {
    let started: Timestamp = clock.now();
    let api: Api<NodeRollout> = Api::all(client.clone());
    let o: NodeRollout = serde_json::from_value(object(r)).map_err(|e| e.to_string())?;
    api.create(&PostParams::default(), &o)
        .await
        .map_err(|e| format!("creating NodeRollout {}: {e}", r.name))?;
    let agent = reboot_agent(
        client.clone(),
        node_lifecycle::GENERATION.into(),
        r.target.clone(),
    );
    let mut refusals = 0;
    let mut blocked: Vec<bool> = vec![];
    let end = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = match api.get_opt(&r.name).await {
            Ok(Some(o)) => o.status.unwrap_or_default(),
            Ok(None) => break Err(format!("NodeRollout {} was deleted", r.name)),
            // the API may fail (injected faults): ask again
            Err(_) => continue,
        };
        blocked.resize(s.domains.len(), false);
        for (was, d) in blocked.iter_mut().zip(&s.domains) {
            if d.blocked_by.is_some() && !*was {
                refusals += 1;
            }
            *was = d.blocked_by.is_some();
        }
        match s.phase.as_deref() {
            Some("Completed") => break Ok(s),
            Some("Failed") => {
                let why = s
                    .conditions
                    .iter()
                    .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                break Err(format!("NodeRollout {} Failed: {why}", r.name));
            }
            _ => {}
        }
    };
    agent.abort();
    let s = end?;
    Ok(Outcome {
        strategy: NAME.into(),
        started,
        finished: clock.now(),
        evictions: evictions(&s),
        refusals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(group_label: &str) -> Request {
        Request {
            name: "gen-1".into(),
            domain_label: "topology.raygate.io/upgrade-domain".into(),
            target: "1".into(),
            taint_outdated: Some(true),
            group_label: group_label.into(),
            health_check_stable: None,
            ray_services: None,
        }
    }

    #[test]
    fn the_object_parses_as_a_node_rollout_with_a_reboot_hand_off_to_the_target_generation() {
        let o: NodeRollout = serde_json::from_value(object(&request(lws::GROUP_KEY))).unwrap();
        assert_eq!(o.spec.ud_label, "topology.raygate.io/upgrade-domain");
        assert_eq!(o.spec.taint_outdated, Some(true));
        let g = o.spec.generation.unwrap();
        assert_eq!(g.label.as_deref(), Some(node_lifecycle::GENERATION));
        assert_eq!(g.target_value.as_deref(), Some("1"));
        assert_eq!(
            o.spec.hand_off.mode,
            raygate::types::rollout::HandOffMode::Reboot
        );
        assert!(o.spec.drain.delete_emptydir_data && o.spec.drain.ignore_daemonsets);
        assert_eq!(
            o.spec.groups.unwrap().preset,
            raygate::types::rollout::GroupPreset::LeaderWorkerSet
        );
    }

    #[test]
    fn another_group_label_is_a_custom_preset_led_by_role_leader() {
        let o: NodeRollout = serde_json::from_value(object(&request("app/group"))).unwrap();
        let g = o.spec.groups.unwrap();
        assert_eq!(g.preset, raygate::types::rollout::GroupPreset::Custom);
        assert_eq!(g.group_label.as_deref(), Some("app/group"));
        assert_eq!(g.representative.as_deref(), Some("role=leader"));
    }
}
