//! `raygate drain run` without `--local` (IO): creates the `NodeRollout` and follows its status
//! while the controller runs it; Ctrl-C pauses it (`spec.paused=true`) instead of leaving it
//! running unattended. The spec and the lines are [`crate::cli::rollout`]'s.

use std::future::Future;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cli::rollout::{Ended, line};
use crate::drain::rollout as pure;
use crate::types::rollout::{NodeRollout, NodeRolloutSpec};

/// Creates the rollout (`generateName: drain-` without a name). A 422 (the server's schema or
/// CEL rules) is an `Err` with the server's message.
pub async fn create(
    client: &Client,
    name: Option<&str>,
    spec: NodeRolloutSpec,
    dry_run: bool,
) -> Result<NodeRollout, kube::Error> {
    let mut o = NodeRollout::new(name.unwrap_or_default(), spec);
    if name.is_none() {
        o.metadata.name = None;
        o.metadata.generate_name = Some("drain-".into());
    }
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    Api::<NodeRollout>::all(client.clone())
        .create(&params, &o)
        .await
}

/// Follows rollout `name` until it completes, fails or cannot run, or `interrupt` resolves. A
/// rollout it stops following unfinished (interrupted, or one the controller cannot run yet) is
/// paused (`spec.paused=true`): the controller would otherwise start it later, the cause fixed,
/// with nobody watching. `out` gets one line per change.
pub async fn follow(
    client: &Client,
    name: &str,
    mut out: impl FnMut(&str),
    interrupt: impl Future<Output = ()>,
) -> Result<Ended, kube::Error> {
    let api: Api<NodeRollout> = Api::all(client.clone());
    let mut interrupt = std::pin::pin!(interrupt);
    let mut last = String::new();
    loop {
        let o = api.get(name).await?;
        let s = o.status.clone().unwrap_or_default();
        let current = (o.metadata.generation == s.observed_generation).then_some(&s);
        if let Some(s) = current {
            let l = line(s);
            if l != last {
                out(&l);
                last = l;
            }
            let ready = crate::conditions::find(&s.conditions, pure::READY);
            match s.phase.as_deref() {
                Some(pure::COMPLETED) => return Ok(Ended::Completed),
                Some(pure::FAILED_PHASE) => return Ok(Ended::Failed(last)),
                _ => {}
            }
            if let Some(c) = ready.filter(|c| c.status == "False" && c.reason != "NodeConflict") {
                pause(&api, &o.name_any()).await?;
                return Ok(Ended::BadInput(format!("{}: {}", c.reason, c.message)));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = &mut interrupt => {
                pause(&api, &o.name_any()).await?;
                return Ok(Ended::Interrupted);
            }
        }
    }
}

async fn pause(api: &Api<NodeRollout>, name: &str) -> Result<(), kube::Error> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": true}})),
    )
    .await
    .map(|_| ())
}
