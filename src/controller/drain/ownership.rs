//! The finalizer of an active NodeRollout (IO): added before the rollout's first state is stored
//! (so before any node is touched), removed once it finishes; on deletion, the nodes are given
//! back first ([`crate::drain::engine::give_back`], decided again on freshly read nodes until
//! nothing is left to do), then the finalizer goes. What to do is decided by
//! [`lifecycle::finalizer_step`].

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use serde_json::json;

use super::rollout::{Next, ROLLOUT_MANAGER, RolloutError, Worker};
use crate::drain::engine::{State, give_back};
use crate::drain::lifecycle::{self, FINALIZER, FinalizerStep, GIVING_BACK};
use crate::drain::outdated_taint;
use crate::types::rollout::{HandOffMode, NodeRollout};

/// How soon a deleted rollout looks at its nodes again after giving them back.
const GIVE_BACK_AGAIN: Duration = Duration::from_secs(1);

/// Whether the object carries raygate's finalizer.
pub(super) fn holds_finalizer(nro: &NodeRollout) -> bool {
    nro.finalizers().iter().any(|f| f == FINALIZER)
}

impl Worker {
    /// The finalizer's step for the object and its engine `state`; `Some(next)` when the step
    /// ends here (the object is being deleted).
    pub(super) async fn own(
        &mut self,
        nro: &NodeRollout,
        state: Option<&State>,
    ) -> Result<Option<Next>, RolloutError> {
        let deleting = nro.metadata.deletion_timestamp.is_some();
        match lifecycle::finalizer_step(deleting, holds_finalizer(nro), state) {
            FinalizerStep::Keep => {}
            FinalizerStep::Add => {
                if !self.set_finalizer(true).await? {
                    // deleted meanwhile: the next step sees it
                    return Ok(Some(Next::Retry));
                }
            }
            FinalizerStep::Remove => {
                self.set_finalizer(false).await?;
            }
            FinalizerStep::Gone => {}
            FinalizerStep::GiveBack => {
                if let Some(state) = state {
                    return self.give_back(nro, state).await.map(Some);
                }
            }
        }
        if deleting {
            self.sh.claims.lock().await.forget(self.name.as_str());
            return Ok(Some(Next::WaitChange));
        }
        Ok(None)
    }

    /// Gives the nodes of a deleted active rollout back; once they show nothing left to do,
    /// removes the finalizer (the object then goes).
    async fn give_back(&mut self, nro: &NodeRollout, state: &State) -> Result<Next, RolloutError> {
        let nodes = self.read_nodes(state).await?;
        let mark = match nro.spec.hand_off.mode {
            HandOffMode::None => None,
            HandOffMode::Reboot | HandOffMode::Replace => Some(nro.spec.hand_off.label.as_str()),
        };
        let taint = outdated_taint();
        let actions = give_back(state, &nodes, Some(&taint), mark);
        if actions.is_empty() {
            tracing::info!(rollout = %self.name,
                "NodeRollout deleted: its nodes are given back; removing its finalizer");
            self.set_finalizer(false).await?;
            self.sh.claims.lock().await.forget(self.name.as_str());
            return Ok(Next::WaitChange);
        }
        let note = lifecycle::give_back_note(state, &nodes, &actions);
        if self.given_back.as_deref() != Some(note.as_str()) {
            tracing::info!(rollout = %self.name, "NodeRollout {note}");
            self.publish(nro, false, GIVING_BACK, &note).await;
            self.given_back = Some(note);
        }
        if !self.sh.may_write() {
            return Err(RolloutError::NotLeader {
                name: self.name.clone(),
            });
        }
        super::apply_node_actions(
            self.sh.client.clone(),
            self.sh.clock.clone(),
            &actions,
            &nodes,
        )
        .await;
        Ok(Next::RetryAfter(GIVE_BACK_AGAIN))
    }

    /// The rollout's nodes as the API server has them now (a node gone is left out).
    async fn read_nodes(&self, state: &State) -> Result<Vec<Node>, RolloutError> {
        let api: Api<Node> = Api::all(self.sh.client.clone());
        let mut nodes = Vec::new();
        for n in state.nodes() {
            let node = api
                .get_opt(n)
                .await
                .map_err(|source| RolloutError::ReadNode {
                    name: self.name.clone(),
                    node: n.to_string(),
                    source,
                })?;
            nodes.extend(node);
        }
        Ok(nodes)
    }

    /// Adds (`hold`) or removes raygate's finalizer on the object as the server has it now,
    /// guarded by its `resourceVersion` (another writer's finalizers are kept). Returns whether
    /// the object may be acted on: `false` when it is being deleted and the finalizer was not
    /// there to add to.
    pub(super) async fn set_finalizer(&mut self, hold: bool) -> Result<bool, RolloutError> {
        if !self.sh.may_write() {
            return Err(RolloutError::NotLeader {
                name: self.name.clone(),
            });
        }
        let api: Api<NodeRollout> = Api::all(self.sh.client.clone());
        let failed = |source| RolloutError::Finalizer {
            name: self.name.clone(),
            source,
        };
        for _ in 0..3 {
            let Some(fresh) = api.get_opt(&self.name).await.map_err(failed)? else {
                return Ok(false);
            };
            let holds = holds_finalizer(&fresh);
            if holds == hold {
                return Ok(true);
            }
            if hold && fresh.metadata.deletion_timestamp.is_some() {
                return Ok(false);
            }
            let mut finalizers: Vec<String> = fresh
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER)
                .cloned()
                .collect();
            if hold {
                finalizers.push(FINALIZER.to_string());
            }
            let rv = fresh.metadata.resource_version.clone();
            let body = json!({"metadata": {"resourceVersion": rv, "finalizers": finalizers}});
            match api
                .patch(
                    &self.name,
                    &crate::controller::merge_params(ROLLOUT_MANAGER),
                    &Patch::Merge(&body),
                )
                .await
            {
                Ok(o) => {
                    tracing::info!(rollout = %self.name, finalizer = FINALIZER,
                        "NodeRollout finalizer {}", if hold { "added" } else { "removed" });
                    self.after_metadata_write(&fresh, &o);
                    return Ok(true);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
                Err(source) => return Err(failed(source)),
            }
        }
        Err(RolloutError::Superseded {
            name: self.name.clone(),
        })
    }

    /// A metadata write moved the object's `resourceVersion` on from `before` to `after`'s: the
    /// next status write is guarded by the new one when this worker's last status write was the
    /// last change before it (otherwise that write re-reads, as after any conflict).
    fn after_metadata_write(&mut self, before: &NodeRollout, after: &NodeRollout) {
        if let Some(w) = self.written.as_mut()
            && w.resource_version == before.metadata.resource_version
        {
            w.resource_version = after.metadata.resource_version.clone();
        }
    }
}
