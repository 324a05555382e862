//! Starting a NodeRollout (IO around the pure checks): its spec and selection checked, its
//! stored state resumed, or a plan made on a fresh read of the cluster, checked for room and for
//! nodes another rollout holds, and claimed.

use std::collections::BTreeSet;

use kube::ResourceExt;
use std::sync::Arc;
use tokio::sync::watch;

use super::rollout::{
    NO_CAPACITY, NO_CAPACITY_RETRY, Next, RolloutError, SKIP_CAPACITY_CHECK_ANNOTATION, Worker,
};
use crate::drain::engine::{Options, State};
use crate::drain::lifecycle::{self, SelectionCheck};
use crate::drain::rollout::{self as pure, NotReady};
use crate::drain::{
    CapacityCheck, Cluster, DrainError, Returns, auto_taint, outdated_taint, rollout_options,
};
use crate::runtime::SortedState;
use crate::types::rollout::{NodeRollout, NodeRolloutStatus, RolloutSelection};

impl Worker {
    pub(super) async fn step(
        &mut self,
        nro: &NodeRollout,
        obj: &mut watch::Receiver<Option<Arc<NodeRollout>>>,
    ) -> Result<Next, RolloutError> {
        let mut prev = self.current_status(nro);
        let prev_state: Option<State> = prev
            .as_ref()
            .and_then(|s| s.engine.as_deref())
            .and_then(|e| serde_json::from_str(e).ok());
        if let Some(next) = self.own(nro, prev_state.as_ref()).await? {
            return Ok(next);
        }
        if prev_state.as_ref().is_some_and(State::is_finished) {
            self.sh.claims.lock().await.forget(self.name.as_str());
            return Ok(Next::WaitChange);
        }
        if self.selection_changed(nro, &mut prev).await? {
            return Ok(Next::WaitChange);
        }
        let options = match rollout_options(&nro.spec) {
            Ok(o) => o,
            Err(e) => {
                let why = NotReady {
                    reason: "InvalidSpec",
                    message: e.to_string(),
                };
                self.not_running(nro, prev.as_ref(), Some(&why), false)
                    .await?;
                return Ok(Next::WaitChange);
            }
        };
        self.preflight = options.preflight.clone();
        if options.paused {
            self.not_running(nro, prev.as_ref(), None, true).await?;
            return Ok(Next::WaitChange);
        }
        let mut engine = pure::engine_options(&options);
        engine.rollout = self.name.clone();
        let auto = options.taint_auto;
        let (state, base) = match prev_state {
            Some(state) => {
                let state = self.resumed(nro, prev.as_ref(), state).await;
                self.sh
                    .claims
                    .lock()
                    .await
                    .assume(self.name.clone(), state.nodes().map(String::from).collect());
                (state, prev)
            }
            None => match self.plan(nro, &engine, auto).await? {
                Ok((state, planned)) => {
                    // held before the first state is stored, so before any node is touched
                    if !self.set_finalizer(true).await? {
                        return Ok(Next::Retry);
                    }
                    if let Some(note) = pure::tolerating_note(&planned) {
                        self.publish(nro, true, pure::TOLERATE_CORDON, &note).await;
                    }
                    if let Some(note) = pure::serving_note(&planned) {
                        self.publish(nro, true, pure::SERVING_AT_RISK, &note).await;
                    }
                    (state, Some(planned))
                }
                Err(why) => {
                    self.not_running(nro, prev.as_ref(), Some(&why), false)
                        .await?;
                    if why.reason == NO_CAPACITY {
                        return Ok(Next::RetryAfter(NO_CAPACITY_RETRY));
                    }
                    return Ok(Next::Retry);
                }
            },
        };
        if auto {
            engine.plan.taint = (state.taint_outdated == Some(true)).then(outdated_taint);
        }
        self.execute(nro, state, base, engine, obj).await
    }

    /// Whether the spec's selection differs from the one the started rollout runs on: then the
    /// rollout is held (its status says which field). A rollout started without a record gets
    /// the spec's in `prev`, written with its next status.
    async fn selection_changed(
        &mut self,
        nro: &NodeRollout,
        prev: &mut Option<NodeRolloutStatus>,
    ) -> Result<bool, RolloutError> {
        match lifecycle::check_selection(&nro.spec, prev.as_ref()) {
            SelectionCheck::Changed(why) => {
                tracing::warn!(rollout = %self.name, reason = why.reason, "{}", why.message);
                self.not_running(nro, prev.as_ref(), Some(&why), false)
                    .await?;
                return Ok(true);
            }
            SelectionCheck::Unrecorded(selection) => {
                if let Some(p) = prev.as_mut() {
                    p.selection = Some(selection);
                }
            }
            SelectionCheck::Free | SelectionCheck::Same => {}
        }
        Ok(false)
    }

    /// The stored `state` of a started rollout going on after a pause that stopped the drain loop
    /// (`spec.paused`, or a changed selection): its timers shifted over the pause, and an Event
    /// saying it goes on.
    async fn resumed(
        &self,
        nro: &NodeRollout,
        prev: Option<&NodeRolloutStatus>,
        state: State,
    ) -> State {
        let now = self.sh.clock.now();
        let by_spec = prev
            .and_then(|s| crate::conditions::find(&s.conditions, pure::PROGRESSING))
            .filter(|c| c.reason == "PausedBySpec")
            .map(|c| c.last_transition_time.0);
        if let Some(at) = by_spec {
            self.publish(nro, false, "Resumed", "spec.paused is false: going on")
                .await;
            return pure::after_spec_pause(&state, at, now);
        }
        if let Some(at) = lifecycle::selection_paused_at(prev) {
            let message = "the spec selects what the rollout started with again: going on";
            tracing::info!(rollout = %self.name, "{message}");
            self.publish(nro, false, lifecycle::SELECTION_RESTORED, message)
                .await;
            return pure::after_spec_pause(&state, at, now);
        }
        state
    }

    /// Plans the rollout from a fresh read of the cluster (and checks the group contract on
    /// it) and claims its nodes.
    async fn plan(
        &mut self,
        nro: &NodeRollout,
        options: &Options,
        taint_auto: bool,
    ) -> Result<Result<(State, NodeRolloutStatus), NotReady>, RolloutError> {
        let objects = super::read::drain_objects(&self.sh.client)
            .await
            .map_err(|source| RolloutError::Read {
                name: self.name.clone(),
                source,
            })?;
        self.check_contract(nro, &objects).await;
        let now = self.sh.clock.now();
        let cluster = objects.cluster();
        let returns = options.handoff.returns();
        let mut options = options.clone();
        if taint_auto {
            match self.auto_taint(nro, &cluster, &options, now, returns).await {
                Ok(taint) => options.plan.taint = taint,
                Err(why) => return Ok(Err(why)),
            }
        }
        let (plan, found) = match plan_and_check(&cluster, &options, now, returns) {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        let mut state = match State::new(&plan, &options) {
            Ok(s) => s,
            Err(e) => {
                return Ok(Err(NotReady {
                    reason: "InvalidSpec",
                    message: e.to_string(),
                }));
            }
        };
        if taint_auto {
            state.taint_outdated = Some(options.plan.taint.is_some());
        }
        let skip = crate::meta::annotation(&nro.metadata, SKIP_CAPACITY_CHECK_ANNOTATION);
        if let Some(why) = no_capacity(&found, skip == Some("true")) {
            return Ok(Err(why));
        }
        if !found.is_empty() {
            tracing::warn!(rollout = %self.name, domains = found.domains(),
                "NodeRollout started without room for its groups ({SKIP_CAPACITY_CHECK_ANNOTATION}=true)");
        }
        if let Err(why) = self.claim(&state).await {
            return Ok(Err(why));
        }
        for d in &plan.domains {
            tracing::info!(rollout = %self.name, domain = %d.name, nodes = d.nodes.len(),
                protected = d.phase1.len(), unprotected = d.phase2.len(), "NodeRollout planned");
        }
        let exposed = crate::drain::exposures(&cluster, &plan);
        let mut planned = pure::planned(&plan, &exposed);
        planned.selection = Some(RolloutSelection::of(&nro.spec));
        Ok(Ok((state, planned)))
    }

    /// The taint the rollout puts on its nodes when `spec.taint` is `Auto`: the outdated taint
    /// unless some nodes carry a taint already (an Event says which).
    async fn auto_taint(
        &self,
        nro: &NodeRollout,
        cluster: &Cluster<'_>,
        options: &Options,
        now: k8s_openapi::jiff::Timestamp,
        returns: Returns,
    ) -> Result<Option<k8s_openapi::api::core::v1::Taint>, NotReady> {
        let auto = auto_taint(cluster, &options.plan, now, returns).map_err(|e| NotReady {
            reason: plan_reason(&e),
            message: plan_message(&e),
        })?;
        if let Some(tainted) = &auto.skipped {
            let message = pure::taint_skipped(tainted);
            self.publish(nro, true, pure::TAINT_SKIPPED, &message).await;
        }
        Ok(auto.taint.then(outdated_taint))
    }

    /// Claims `state`'s nodes for this rollout, unless another active rollout holds some.
    async fn claim(&self, state: &State) -> Result<(), NotReady> {
        let mine: BTreeSet<String> = state.nodes().map(String::from).collect();
        let mut claims = self.sh.claims.lock().await;
        let others: Vec<(String, BTreeSet<String>)> = self
            .sh
            .store
            .sorted_state()
            .iter()
            .filter(|o| o.name_any() != self.name)
            .filter_map(|o| Some((o.name_any(), pure::claimed_nodes(o.status.as_ref())?)))
            .chain(
                claims
                    .iter()
                    .filter(|(k, _)| **k != self.name)
                    .map(|(k, v)| (k.clone(), v.clone())),
            )
            .collect();
        if let Some((other, nodes)) = pure::conflict(&mine, &others) {
            return Err(NotReady {
                reason: "NodeConflict",
                message: format!(
                    "node(s) {} are drained by NodeRollout {other}, which is still active: this \
                     rollout waits until {other} completes or fails (or is deleted)",
                    nodes.join(", ")
                ),
            });
        }
        claims.assume(self.name.clone(), mine);
        Ok(())
    }
}

/// The plan of `options` on `cluster` and its dead ends (nothing is decided on them here).
fn plan_and_check<'a>(
    cluster: &Cluster<'a>,
    options: &Options,
    now: k8s_openapi::jiff::Timestamp,
    returns: Returns,
) -> Result<(crate::drain::Plan<'a>, CapacityCheck), NotReady> {
    let plan = crate::drain::plan(cluster, &options.plan, now).map_err(|e| NotReady {
        reason: plan_reason(&e),
        message: plan_message(&e),
    })?;
    let found = CapacityCheck::check(cluster, &plan, &options.plan, returns);
    Ok((plan, found))
}

/// Why a rollout whose plan cannot finish is not started (`None`: it can, or the operator said
/// to start anyway).
fn no_capacity(found: &CapacityCheck, skip: bool) -> Option<NotReady> {
    let start_anyway = format!(
        "the plan is checked again every minute (or when the rollout changes); to start anyway \
         (e.g. an autoscaler adds nodes for pending pods), annotate the rollout \
         {SKIP_CAPACITY_CHECK_ANNOTATION}=true"
    );
    Some(NotReady {
        reason: NO_CAPACITY,
        message: found.refusal(skip, &start_anyway)?,
    })
}

/// The `Ready=False` reason for a plan the cluster does not allow.
fn plan_reason(e: &DrainError) -> &'static str {
    match e {
        DrainError::UnknownDomainLabel { .. } => "UnknownDomainLabel",
        DrainError::NodesWithoutDomain { .. } => "NodesWithoutDomain",
        DrainError::NoNodesMatched { .. } => "NoNodesMatched",
        DrainError::NoGeneration { .. } => "NoGeneration",
        DrainError::UnknownDomain { .. } | DrainError::DomainsNotListed { .. } => {
            "ExplicitOrderMismatch"
        }
        _ => "InvalidSpec",
    }
}

/// The plan's error with what to do about it.
fn plan_message(e: &DrainError) -> String {
    let fix = match e {
        DrainError::UnknownDomainLabel { .. } => {
            "; label the nodes with their upgrade domain, or set spec.udLabel to the label they carry"
        }
        DrainError::NodesWithoutDomain { .. } => {
            "; label those nodes with their upgrade domain, or leave them out with spec.nodeSelector"
        }
        DrainError::NoNodesMatched { .. } => {
            "; check spec.nodeSelector and spec.generation against the nodes' labels (nothing was drained)"
        }
        _ => "",
    };
    format!("{e}{fix}; nothing was cordoned or evicted")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::{DeadEnd, HealthDeadEnd};

    fn found(dead_ends: Vec<DeadEnd>, health_dead_ends: Vec<HealthDeadEnd>) -> CapacityCheck {
        CapacityCheck {
            dead_ends,
            health_dead_ends,
        }
    }

    #[test]
    fn a_plan_that_cannot_finish_holds_the_rollout_unless_the_operator_says_start() {
        let dead = DeadEnd {
            domain: "ud-0".into(),
            pdb: "serving/leaders".into(),
            groups: vec!["a".into(), "b".into()],
            tolerated: 1,
            must_move: 1,
            moved_before: 0,
            capacity: 0,
            group_requests: "nvidia.com/gpu 2, pods 2".into(),
        };
        assert_eq!(no_capacity(&found(vec![], vec![]), false), None);
        assert_eq!(no_capacity(&found(vec![dead.clone()], vec![]), true), None);
        let why = no_capacity(&found(vec![dead], vec![]), false).unwrap();
        assert_eq!(why.reason, NO_CAPACITY);
        for says in [
            "1 upgrade domain(s) cannot be drained",
            "upgrade domain ud-0 holds 2 group(s)",
            "Nothing was cordoned or evicted",
            "raygate.io/skip-room-check=true",
        ] {
            assert!(why.message.contains(says), "{}", why.message);
        }
    }

    #[test]
    fn a_health_check_without_room_holds_the_rollout_under_the_same_reason() {
        let gate = HealthDeadEnd {
            domain: "ud-1".into(),
            groups: vec!["b".into()],
            moved_before: 2,
            taint_outdated: false,
            capacity_without_taint: false,
            requests: "nvidia.com/gpu 6, pods 6".into(),
            free: "nvidia.com/gpu 4, pods 108".into(),
            short: "nvidia.com/gpu 2".into(),
            capacity: Some(2),
            group_requests: Some("nvidia.com/gpu 2, pods 2".into()),
        };
        assert_eq!(no_capacity(&found(vec![], vec![gate.clone()]), true), None);
        let why = no_capacity(&found(vec![], vec![gate]), false).unwrap();
        assert_eq!(why.reason, NO_CAPACITY);
        for says in [
            "1 upgrade domain(s) would fail their health check",
            "upgrade domain ud-1: with hand-off None its nodes stay cordoned",
            "Fix: add capacity outside the domains drained so far",
            "Nothing was cordoned or evicted",
            "raygate.io/skip-room-check=true",
        ] {
            assert!(why.message.contains(says), "{}", why.message);
        }
    }

    #[test]
    fn a_plan_error_says_what_to_fix_and_that_nothing_was_touched() {
        let e = DrainError::UnknownDomainLabel {
            key: "topology.example.com/ud".into(),
        };
        assert_eq!(plan_reason(&e), "UnknownDomainLabel");
        let m = plan_message(&e);
        assert!(
            m.starts_with("no node carries the upgrade-domain label"),
            "{m}"
        );
        assert!(m.ends_with("nothing was cordoned or evicted"), "{m}");
    }
}
