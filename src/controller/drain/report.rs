//! A NodeRollout's status as the drain loop's sink (IO): each state the loop reports is written
//! as the rollout's status (`drain::rollout::status`, a merge patch guarded by the
//! `resourceVersion` of the last write), before the step's evictions are sent when it sends
//! any; the Events and metrics of the change between two states; the group contract checked over
//! the loop's stores.

use std::ops::ControlFlow;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::read::DrainObjects;
use super::rollout::{
    CONTRACT_EVERY, Next, ROLLOUT_MANAGER, RolloutError, STATUS_EVERY, Worker, Written,
};
use super::{Run, Sink};
use crate::controller::peers::{Peers, StoredDisruptions};
use crate::drain::Cluster;
use crate::drain::engine::{Options, State};
use crate::drain::rollout::status::{self, ContractCondition, Observation, Run as Observed};
use crate::drain::rollout::{self as pure, NotReady};
use crate::runtime::Monotonic;
use crate::types::rollout::{NodeRollout, NodeRolloutStatus};

/// A rollout's object as the controller hands it to its worker.
pub(super) type Object = watch::Receiver<Option<Arc<NodeRollout>>>;

/// A running rollout's sink: its status, Events and metrics.
struct Reporter<'w> {
    worker: &'w mut Worker,
    obj: &'w mut Object,
    obj_open: bool,
    /// The object the status is written on (the newest handed over).
    current: Arc<NodeRollout>,
    /// The state of the last status written.
    last: State,
    last_write: Monotonic,
    looked: Option<Monotonic>,
    /// Why the sink ended the loop.
    failed: Option<RolloutError>,
}

impl Reporter<'_> {
    fn refresh(&mut self) {
        if let Some(o) = self.obj.borrow().clone() {
            self.current = o;
        }
    }

    async fn write(&mut self, state: State) -> Result<(), RolloutError> {
        self.refresh();
        let current = self.current.clone();
        self.worker.report(&current, &mut self.last, state).await?;
        self.last_write = self.worker.sh.clock.monotonic();
        Ok(())
    }

    /// Writes the status for `state`; a failed write ends the loop.
    async fn report(&mut self, state: State) -> ControlFlow<()> {
        match self.write(state).await {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.failed = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

impl Sink for Reporter<'_> {
    fn resumes(&mut self) -> u64 {
        self.refresh();
        resume_count(&self.current)
    }

    fn abort_asked(&mut self) -> bool {
        self.refresh();
        pure::abort_asked(crate::meta::annotation(
            &self.current.metadata,
            pure::ABORT_ANNOTATION,
        ))
    }

    async fn resumed(&mut self) {
        match self.obj_open {
            true => self.obj_open = self.obj.changed().await.is_ok(),
            false => std::future::pending().await,
        }
    }

    async fn ahead(&mut self, state: &State) -> ControlFlow<(), bool> {
        self.report(state.clone()).await?;
        ControlFlow::Continue(true)
    }

    async fn progress(&mut self, state: &State) -> ControlFlow<()> {
        if state.is_finished() {
            // written once, when the loop returns it
            return ControlFlow::Continue(());
        }
        let clock = &self.worker.sh.clock;
        let due = clock.monotonic().saturating_since(self.last_write) >= STATUS_EVERY;
        if pure::needs_write_now(&self.last, state) || due {
            return self.report(state.clone()).await;
        }
        ControlFlow::Continue(())
    }

    /// The group contract over the loop's stores, once they are synced and then every
    /// [`CONTRACT_EVERY`]; the status is written again when its condition turns.
    async fn look(&mut self, cluster: &Cluster<'_>, state: &State) -> ControlFlow<()> {
        let Some(preflight) = self.worker.preflight.clone() else {
            return ControlFlow::Continue(());
        };
        let at = self.worker.sh.clock.monotonic();
        if (self.looked).is_some_and(|l| at.saturating_since(l) < CONTRACT_EVERY) {
            return ControlFlow::Continue(());
        }
        self.looked = Some(at);
        let findings = crate::drain::preflight(cluster, &preflight);
        let before = self.worker.contract.clone();
        self.refresh();
        let current = self.current.clone();
        let new = pure::contract(findings.as_deref());
        self.worker.take_contract(&current, new).await;
        if self.worker.contract != before {
            return self.report(state.clone()).await;
        }
        ControlFlow::Continue(())
    }
}

/// How many times the operator asked the rollout to resume (its annotation's counter).
fn resume_count(o: &NodeRollout) -> u64 {
    pure::resumes(crate::meta::annotation(
        &o.metadata,
        pure::RESUME_ANNOTATION,
    ))
}

impl Worker {
    /// Runs the drain loop from `state` until it finishes or the object changes generation (or
    /// goes, or this replica stops leading), writing the status on the way.
    pub(super) async fn execute(
        &mut self,
        nro: &NodeRollout,
        state: State,
        base: Option<NodeRolloutStatus>,
        options: Options,
        obj: &mut Object,
    ) -> Result<Next, RolloutError> {
        let generation = nro.metadata.generation;
        let first = status::next(base.as_ref(), &self.observed(nro, Observed::Engine(&state)));
        self.write(nro, first).await?;
        let mut stop = obj.clone();
        let stopped = async move {
            let _ = stop
                .wait_for(|o| {
                    o.as_ref().is_none_or(|o| {
                        o.metadata.generation != generation
                            || o.metadata.deletion_timestamp.is_some()
                    })
                })
                .await;
        };
        // held until the rollout stops: the last one to stop stops the watches
        let watches = self.sh.watches().await;
        let run = Run {
            state: Some(state.clone()),
            tick: self.sh.tick,
            peers: Some(self.peers()),
            stores: Some(watches.stores.clone()),
            ..Run::new(options)
        };
        let (client, clock) = (self.sh.client.clone(), self.sh.clock.clone());
        let mut sink = Reporter {
            last_write: clock.monotonic(),
            worker: self,
            obj,
            obj_open: true,
            current: Arc::new(nro.clone()),
            last: state,
            looked: None,
            failed: None,
        };
        let end = super::run_with(client, clock, run, &mut sink, stopped).await;
        let end = match (sink.failed.take(), end) {
            (Some(e), _) => return Err(e),
            (None, end) => end.map_err(|source| RolloutError::Executor {
                name: sink.worker.name.clone(),
                source,
            })?,
        };
        let finished = end.is_finished();
        sink.write(end).await?;
        if finished {
            self.sh.claims.lock().await.forget(self.name.as_str());
            return Ok(Next::WaitChange);
        }
        // stopped by a spec change (e.g. paused), a deleted object or lost leadership
        Ok(Next::Again)
    }

    /// This rollout's place among the others the leader runs (see [`Run::peers`]).
    fn peers(&self) -> Peers {
        let store = self.sh.store.clone();
        let cache = std::sync::Mutex::new(StoredDisruptions::default());
        Peers {
            board: self.sh.board.clone(),
            name: self.name.clone(),
            stored: Box::new(move || {
                let mut cache = cache
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                cache.read(&store)
            }),
        }
    }

    /// Writes the status for `state`, publishes the Events of the change from `last` and counts it.
    pub(super) async fn report(
        &mut self,
        nro: &NodeRollout,
        last: &mut State,
        state: State,
    ) -> Result<(), RolloutError> {
        let obs = self.observed(nro, Observed::Engine(&state));
        let now = obs.now;
        let next = status::next(self.current_status(nro).as_ref(), &obs);
        self.write(nro, next).await?;
        let (notes, counts) = pure::changes(last, &state, now);
        self.sh.metrics.count_rollout(&counts);
        for n in notes {
            self.publish(nro, n.warning, n.reason, &n.message).await;
        }
        *last = state;
        Ok(())
    }

    /// The status of a rollout that does not run (bad spec, plan not possible, conflict,
    /// paused), with an Event when it says something new.
    pub(super) async fn not_running(
        &mut self,
        nro: &NodeRollout,
        prev: Option<&NodeRolloutStatus>,
        why: Option<&NotReady>,
        paused: bool,
    ) -> Result<(), RolloutError> {
        let status = status::next(prev, &self.observed(nro, Observed::Waiting { why, paused }));
        let condition = |s: Option<&NodeRolloutStatus>, t: &str| {
            s.and_then(|s| crate::conditions::find(&s.conditions, t))
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let news = condition(prev, pure::READY) != condition(Some(&status), pure::READY)
            || condition(prev, pure::PROGRESSING) != condition(Some(&status), pure::PROGRESSING);
        if prev == Some(&status) {
            return Ok(());
        }
        self.write(nro, status).await?;
        if news {
            match (why, paused) {
                (Some(why), _) => self.publish(nro, true, why.reason, &why.message).await,
                (None, true) => {
                    self.publish(
                        nro,
                        false,
                        "Paused",
                        "spec.paused is true: no new evictions; those already sent finish",
                    )
                    .await
                }
                (None, false) => {}
            }
        }
        Ok(())
    }

    /// Runs the group contract's preflight on the plan's read and keeps its condition; an Event
    /// when it turns.
    pub(super) async fn check_contract(&mut self, nro: &NodeRollout, objects: &DrainObjects) {
        let Some(preflight) = self.preflight.clone() else {
            self.contract = None;
            return;
        };
        let findings = crate::drain::preflight(&objects.cluster(), &preflight);
        self.take_contract(nro, pure::contract(findings.as_deref()))
            .await;
    }

    /// Keeps `new` as the contract's condition; an Event when it turns.
    async fn take_contract(&mut self, nro: &NodeRollout, new: pure::Contract) {
        // a new worker (a new leader) knows the condition from the status
        let old = self.contract.clone().or_else(|| {
            let status = self.current_status(nro)?;
            let c = crate::conditions::find(&status.conditions, pure::CONTRACT_SATISFIED)?;
            Some(pure::Contract {
                status: match c.status.as_str() {
                    "True" => "True",
                    "False" => "False",
                    _ => "Unknown",
                },
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
        });
        if let Some(note) = pure::contract_note(old.as_ref(), &new) {
            tracing::info!(rollout = %self.name, reason = note.reason, "{}", note.message);
            self.publish(nro, note.warning, note.reason, &note.message)
                .await;
        }
        self.contract = Some(new);
    }

    /// What the status is made from now: `run`, and the contract's condition (none when the
    /// spec has no `groups`).
    fn observed<'a>(&'a self, nro: &NodeRollout, run: Observed<'a>) -> Observation<'a> {
        Observation {
            generation: nro.metadata.generation,
            now: self.sh.clock.now(),
            run,
            contract: match (&self.preflight, &self.contract) {
                (None, _) => ContractCondition::Unset,
                (Some(_), Some(c)) => ContractCondition::Checked(c),
                (Some(_), None) => ContractCondition::Unchecked,
            },
        }
    }

    /// A merge patch of the whole status, guarded by the `resourceVersion` of this worker's last
    /// write (or of the object it read): a 409 re-reads, and goes on only if the status there is
    /// still the one this worker knows.
    async fn write(
        &mut self,
        nro: &NodeRollout,
        status: NodeRolloutStatus,
    ) -> Result<(), RolloutError> {
        if !self.sh.may_write() {
            return Err(RolloutError::NotLeader {
                name: self.name.clone(),
            });
        }
        let api: Api<NodeRollout> = Api::all(self.sh.client.clone());
        let mut rv = match &self.written {
            Some(w) => w.resource_version.clone(),
            None => nro.metadata.resource_version.clone(),
        };
        let known = self.current_status(nro);
        for attempt in 0..2 {
            let body =
                json!({"metadata": {"resourceVersion": rv}, "status": status_patch(&status)});
            match api
                .patch_status(
                    &self.name,
                    &crate::controller::merge_params(ROLLOUT_MANAGER),
                    &Patch::Merge(&body),
                )
                .await
            {
                Ok(o) => {
                    self.written = Some(Written {
                        status,
                        resource_version: o.metadata.resource_version,
                    });
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {
                    let fresh =
                        api.get(&self.name)
                            .await
                            .map_err(|source| RolloutError::Reread {
                                name: self.name.clone(),
                                source,
                            })?;
                    let engine = |s: Option<&NodeRolloutStatus>| s.and_then(|s| s.engine.clone());
                    if engine(fresh.status.as_ref()) != engine(known.as_ref()) {
                        self.written = None;
                        return Err(RolloutError::Superseded {
                            name: self.name.clone(),
                        });
                    }
                    rv = fresh.metadata.resource_version;
                }
                Err(source) => {
                    return Err(RolloutError::WriteStatus {
                        name: self.name.clone(),
                        source,
                    });
                }
            }
        }
        Err(RolloutError::Superseded {
            name: self.name.clone(),
        })
    }

    pub(super) async fn publish(
        &self,
        nro: &NodeRollout,
        warning: bool,
        reason: &'static str,
        message: &str,
    ) {
        if !self.sh.may_write() {
            return;
        }
        let on = ObjectReference {
            api_version: Some("raygate.io/v1alpha1".into()),
            kind: Some("NodeRollout".into()),
            name: Some(self.name.clone()),
            uid: nro.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let event = crate::events::Event {
            type_: if warning {
                crate::events::EventType::Warning
            } else {
                crate::events::EventType::Normal
            },
            reason,
            message: message.to_string(),
            child: None,
        };
        self.sh.events.publish(&on, &event).await;
    }
}

/// The status as a merge patch: fields that are unset now are removed (`null`), lists replaced.
fn status_patch(status: &NodeRolloutStatus) -> Value {
    let mut v = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(map) = v.as_object_mut() {
        for key in [
            "phase",
            "currentDomain",
            "progress",
            "targetGeneration",
            "observedGeneration",
            "selection",
            "engine",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
        for key in ["domains", "conditions"] {
            map.entry(key).or_insert(json!([]));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_patch_clears_what_is_no_longer_set() {
        let s = NodeRolloutStatus {
            phase: Some("Completed".into()),
            ..NodeRolloutStatus::default()
        };
        let v = status_patch(&s);
        assert_eq!(v["phase"], "Completed");
        assert_eq!(v["currentDomain"], Value::Null);
        assert!(v.get("currentDomain").is_some());
        assert_eq!(v["domains"], json!([]));
    }
}
