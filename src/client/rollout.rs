//! `raygate drain run` without `--local` (IO): creates the `NodeRollout` and follows its status
//! while the controller runs it; Ctrl-C pauses it (`spec.paused=true`) instead of leaving it
//! running unattended. The spec and the lines are [`crate::cli::rollout`]'s. Also `raygate
//! rollout get|watch|pause|resume NAME` (their pure half: [`crate::cli::rollout_verbs`]).

use std::future::Future;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cli::rollout::{Ended, line};
use crate::cli::rollout_verbs::{self as verbs, exit};
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

/// `raygate rollout watch NAME`: a line per change of the rollout's status until it completes
/// or fails, or `interrupt` resolves. Only reads: a rollout that cannot run is shown, not
/// paused, and one left unfinished keeps running.
pub async fn watch(
    client: &Client,
    name: &str,
    mut out: impl FnMut(&str),
    interrupt: impl Future<Output = ()>,
) -> Result<Ended, VerbError> {
    let api: Api<NodeRollout> = Api::all(client.clone());
    let mut interrupt = std::pin::pin!(interrupt);
    let mut last = String::new();
    loop {
        let o = api.get(name).await.map_err(|e| VerbError::of(name, e))?;
        let s = o.status.clone().unwrap_or_default();
        let l = line(&s);
        if l != last {
            out(&l);
            last = l;
        }
        if o.metadata.generation == s.observed_generation {
            match s.phase.as_deref() {
                Some(pure::COMPLETED) => return Ok(Ended::Completed),
                Some(pure::FAILED_PHASE) => return Ok(Ended::Failed(last)),
                _ => {}
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = &mut interrupt => return Ok(Ended::Interrupted),
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

/// Why `raygate rollout get|pause|resume` failed.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    #[error("noderollout {name:?} not found")]
    NotFound { name: String },
    #[error("noderollout {name}: {source}")]
    Api { name: String, source: kube::Error },
    #[error("noderollout {name}: changed by someone else {tries} times in a row; try again")]
    Conflicts { name: String, tries: usize },
}

impl VerbError {
    fn of(name: &str, e: kube::Error) -> Self {
        match &e {
            kube::Error::Api(s) if s.code == 404 => VerbError::NotFound { name: name.into() },
            _ => VerbError::Api {
                name: name.into(),
                source: e,
            },
        }
    }

    /// The exit code ([`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            VerbError::NotFound { .. } => exit::NOT_FOUND,
            VerbError::Api { .. } | VerbError::Conflicts { .. } => exit::API,
        }
    }
}

/// How many times `resume` reads again after a 409 before giving up.
const RESUME_TRIES: usize = 5;

/// `raygate rollout get NAME`.
pub async fn get(client: &Client, name: &str) -> Result<NodeRollout, VerbError> {
    let api: Api<NodeRollout> = Api::all(client.clone());
    api.get(name).await.map_err(|e| VerbError::of(name, e))
}

/// `raygate rollout pause NAME`: `spec.paused=true` (a merge patch: nothing else is touched).
pub async fn pause_rollout(client: &Client, name: &str) -> Result<NodeRollout, VerbError> {
    let api: Api<NodeRollout> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(verbs::pause_patch()),
    )
    .await
    .map_err(|e| VerbError::of(name, e))
}

/// `raygate rollout abort NAME`: asks the controller to abort (the abort annotation, and
/// `spec.paused=false` so that it acts on it); `Ok(Some(why))` when there is nothing to abort.
pub async fn abort_rollout(client: &Client, name: &str) -> Result<Option<String>, VerbError> {
    let api: Api<NodeRollout> = Api::all(client.clone());
    let o = api.get(name).await.map_err(|e| VerbError::of(name, e))?;
    if let Some(why) = verbs::abort_noop(&o) {
        return Ok(Some(why));
    }
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(verbs::abort_patch()),
    )
    .await
    .map_err(|e| VerbError::of(name, e))?;
    Ok(None)
}

/// `raygate rollout resume NAME`: `spec.paused=false` and, when the engine paused it, the resume
/// counter's next value, in one patch conditioned on the object as read; a 409 (someone else
/// wrote in between, maybe the same bump) reads again and decides again.
pub async fn resume_rollout(client: &Client, name: &str) -> Result<verbs::Resume, VerbError> {
    let api: Api<NodeRollout> = Api::all(client.clone());
    for _ in 0..RESUME_TRIES {
        let o = api.get(name).await.map_err(|e| VerbError::of(name, e))?;
        let plan = verbs::resume(&o);
        if plan.is_noop() {
            return Ok(plan);
        }
        let patch = plan.patch(o.metadata.resource_version.as_deref());
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(plan),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(VerbError::of(name, e)),
        }
    }
    Err(VerbError::Conflicts {
        name: name.into(),
        tries: RESUME_TRIES,
    })
}
