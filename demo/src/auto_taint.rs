//! The in-process raygate rollout's default `taintOutdated`, decided on a fresh read as the
//! NodeRollout controller decides it (`raygate::drain::auto_taint`: taint when the cluster has
//! room for the evicted groups outside the outdated nodes).

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use raygate::drain::{
    Generation, GenerationSource, GenerationTarget, PlanOptions, Returns, auto_taint,
};

/// Whether to taint the outdated nodes of a rollout to `target` (reboot hand-off: drained nodes
/// come back as room).
pub async fn decide(
    client: &Client,
    now: Timestamp,
    upgrade: &crate::baselines::Upgrade,
) -> Result<bool, String> {
    let objects = raygate::client::live::drain_objects(client)
        .await
        .map_err(|e| format!("reading the cluster for taintOutdated's default: {e}"))?;
    let options = PlanOptions {
        domain_label: upgrade.domain_label.clone(),
        generation: Some(Generation {
            source: GenerationSource::Label(upgrade.generation_label.clone()),
            target: GenerationTarget::Value(upgrade.target.clone()),
        }),
        groups: raygate::drain::GroupLabels::of_labels(upgrade.group_label.as_slice()),
        ..PlanOptions::default()
    };
    auto_taint(&objects.cluster(), &options, now, Returns::AfterHandOff)
        .map(|a| a.taint)
        .map_err(|e| format!("planning for taintOutdated's default: {e}"))
}
