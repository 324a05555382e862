//! A domain's drain (pure): cordon (and taint) its nodes, then phase 1 (the pods a budget
//! protects, through the Eviction API, a 429 pausing the domain), then phase 2 (the rest), at
//! most `eviction_concurrency` terminating at once, each target let through by the engine's own
//! consent first ([`super::consent`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::outcome::BUDGET_NOT_SYNCED;
use super::{
    Action, Baseline, DomainPlan, EvictTarget, Evicted, PodRef, Refusal, Step, Stepper, human,
    pod_serving, replan,
};
use crate::drain::{DrainError, is_finished, namespace};
use crate::events::EventType;

/// How long a pod terminating on an unreachable node is waited for (Cluster API's drain sets
/// `SkipWaitForDeleteTimeoutSeconds` to 5 minutes for such a node).
pub const UNREACHABLE_SKIP: SignedDuration = SignedDuration::from_mins(5);
/// The hold's reason meanwhile.
pub const UNREACHABLE_NODE: &str = "UnreachableNode";
/// The hold's reason while a node of the domain carries another domain's label, or none.
pub const DOMAIN_LABEL_CHANGED: &str = "DomainLabelChanged";

impl<'a> Stepper<'a> {
    /// The domain's plan as its nodes are now: `Ok(None)` once every node is gone. An error
    /// names what no longer fits the rollout (a node's domain label changed or removed): the
    /// domain is not drained, and never handed off, on a plan it cannot make.
    pub(super) fn domain_plan(&self, i: usize) -> Result<Option<DomainPlan<'a>>, String> {
        let d = &self.s.domains[i];
        let nodes: BTreeSet<&str> = d.nodes.iter().map(String::as_str).collect();
        let plan = match replan(self.obs, &nodes, &self.o.plan, self.now) {
            Ok(plan) => plan,
            Err(DrainError::NoNodesMatched { .. }) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        if let Some(other) = plan.domains.iter().find(|p| p.name != d.name) {
            let moved: Vec<&str> = other.nodes.iter().map(|n| n.name.as_str()).collect();
            return Err(format!(
                "node(s) {} of upgrade domain {} now carry {}={}",
                moved.join(", "),
                d.name,
                self.o.plan.domain_label,
                other.name
            ));
        }
        Ok(plan.domains.into_iter().next())
    }

    /// The domain's plan, or `None` holding the domain over why it cannot be made (a node's
    /// domain label changed or removed): nothing more of it is evicted or handed off until the
    /// label is back, for at most the drain timeout; the hold lifts by itself then.
    pub(super) fn domain_plan_or_hold(&mut self, i: usize) -> Option<Option<DomainPlan<'a>>> {
        match self.domain_plan(i) {
            Ok(plan) => {
                let d = &mut self.s.domains[i];
                if d.hold
                    .as_ref()
                    .is_some_and(|h| h.reason == DOMAIN_LABEL_CHANGED)
                {
                    d.hold = None;
                }
                Some(plan)
            }
            Err(why) => {
                let before = self.s.domains[i].hold.clone();
                let line = format!(
                    "upgrade domain {} cannot be planned again: {why}; nothing more of it is \
                     evicted or handed off until the label is restored (at most drainTimeout)",
                    self.s.domains[i].name
                );
                self.s.domains[i].message = line.clone();
                self.set_hold(i, DOMAIN_LABEL_CHANGED, vec![line]);
                self.announce_hold(i, before.as_ref());
                None
            }
        }
    }

    pub(super) fn pod<S: AsRef<str>>(&self, p: &PodRef<S>) -> Option<&'a Pod> {
        let key = (p.namespace.as_ref(), p.name.as_ref());
        self.pods.get(&key).copied()
    }

    pub(super) fn target(
        &self,
        pod: &PodRef<&str>,
        pdb: Option<&str>,
        group: Option<String>,
    ) -> EvictTarget {
        EvictTarget {
            pod: pod.owned(),
            uid: self.pod(pod).and_then(|p| p.metadata.uid.clone()),
            pdb: pdb.map(|b| format!("{}/{b}", pod.namespace)),
            group,
            grace_period_seconds: self.o.plan.rules.grace_period_seconds,
        }
    }

    pub(super) fn group_of(&self, pod: &PodRef<&str>) -> Option<String> {
        self.o.plan.groups.group(self.pod(pod)?).map(str::to_string)
    }

    pub(super) fn drain(&mut self, i: usize) {
        self.take_tolerating(i);
        let Some(plan) = self.domain_plan_or_hold(i) else {
            return;
        };
        let Some(plan) = plan else {
            // every node of the domain is gone: nothing left to drain
            self.drained(i);
            return;
        };
        // a domain blocked before raygate cordoned any of it is not cordoned: nothing of it
        // could be drained
        let mine = self.s.domains[i].cordoned.as_ref();
        let untouched = mine.is_some_and(BTreeSet::is_empty);
        if !(plan.is_blocked() && untouched) && self.cordoning(i, &plan) {
            return;
        }
        if plan.is_blocked() {
            self.s.domains[i].message =
                format!("blocked (nothing evicted): {}", plan.errors().join("; "));
            return;
        }
        self.note_returned(i, &plan);
        if self.moving(i) {
            return;
        }
        if self.evictions_wait(i) {
            return;
        }
        self.evict(i, &plan);
    }

    /// Step 1: cordon (and taint) the domain's nodes; `true` until that shows (and the later
    /// domains' taints too) and nothing may be evicted yet.
    fn cordoning(&mut self, i: usize, plan: &DomainPlan<'a>) -> bool {
        let mut cordoning = 0;
        for n in &plan.nodes {
            if n.cordon {
                self.actions.push(Action::Cordon {
                    node: n.name.clone(),
                });
                if let Some(mine) = self.s.domains[i].cordoned.as_mut() {
                    mine.insert(n.name.clone());
                }
            }
            let tainting = |a: &Action| matches!(a, Action::Taint { node, .. } if *node == n.name);
            if let Some(taint) = &n.taint
                && !self.actions.iter().any(tainting)
            {
                self.actions.push(Action::Taint {
                    node: n.name.clone(),
                    taint: taint.clone(),
                });
            }
            cordoning += usize::from(n.cordon || n.taint.is_some());
        }
        if cordoning > 0 {
            self.s.domains[i].message = format!("cordoning {cordoning} node(s)");
            return true;
        }
        if self.untainted > 0 {
            self.s.domains[i].message = format!(
                "tainting {} node(s) of later domains before evicting",
                self.untainted
            );
            return true;
        }
        false
    }

    /// Step 2: whether the domain waits, for a budget's refusal until the budget allows a
    /// disruption again, a failed eviction's retry, the API server's throttling.
    fn evictions_wait(&mut self, i: usize) -> bool {
        if let Some(refusal) = self.s.domains[i].refusal.clone() {
            match self.refusal_lifted(&refusal) {
                Ok(()) => self.refusal_ends(i, &refusal),
                Err(why) => {
                    self.s.domains[i].message = format!(
                        "paused: PodDisruptionBudget {} refused evicting {}: {} ({why})",
                        refusal.pdb, refusal.pod, refusal.message
                    );
                    self.hold_for_sync(i, &refusal);
                    return true;
                }
            }
        }
        let d = &mut self.s.domains[i];
        if let Some(at) = d.retry_at {
            if at > self.now {
                return true;
            }
            d.retry_at = None;
        }
        if let Some(at) = d.throttled_until {
            if at > self.now {
                d.message = format!("the API server throttles evictions (429): next try at {at}");
                return true;
            }
            d.throttled_until = None;
        }
        false
    }

    fn refusal_ends(&mut self, i: usize, refusal: &Refusal) {
        let node = self.s.domains[i].nodes.first().cloned().unwrap_or_default();
        self.report(
            &node,
            EventType::Normal,
            "EvictionResumed",
            format!(
                "PodDisruptionBudget {} allows a disruption again after {}",
                refusal.pdb,
                human(self.now.duration_since(refusal.since))
            ),
        );
        self.s.domains[i].refusal = None;
        let d = &mut self.s.domains[i];
        if d.hold
            .as_ref()
            .is_some_and(|h| h.reason == BUDGET_NOT_SYNCED)
        {
            d.hold = None;
        }
        // the groups that came back must stay available for the window first
        let name = self.s.domains[i].name.clone();
        self.s.memory.windowed.remove(&name);
        if let Some(w) = self.s.memory.windows.get_mut(&refusal.pdb) {
            w.since = self.now;
        }
    }

    /// Step 3: phase 1, then phase 2, at most `eviction_concurrency` terminating at once, each
    /// target let through by the engine's consent.
    fn evict(&mut self, i: usize, plan: &DomainPlan<'a>) {
        let before = self.s.domains[i].hold.clone();
        self.evict_or_hold(i, plan);
        self.announce_hold(i, before.as_ref());
    }

    fn evict_or_hold(&mut self, i: usize, plan: &DomainPlan<'a>) {
        let terminating = plan
            .phase1
            .iter()
            .map(|p| &p.pod)
            .chain(&plan.phase2)
            .filter(|p| self.is_terminating(p) && !self.left_alone(i, p))
            .count();
        let room = self
            .o
            .eviction_concurrency
            .max(1)
            .saturating_sub(terminating);
        let (targets, what, left) = self.phase_targets(i, plan);
        if left == 0 {
            self.drained(i);
            return;
        }
        let targets = self.not_accepted(i, targets);
        let targets = if plan.phase1.is_empty() {
            let (mut members, representatives) = self.consented_members(i, targets);
            let representatives = self.not_accepted(i, representatives);
            if !representatives.is_empty()
                && let Some(representatives) = self.consented_phase1(i, representatives)
            {
                members.extend(representatives);
            }
            members
        } else {
            match self.consented_phase1(i, targets) {
                Some(targets) => targets,
                None => return,
            }
        };
        let targets: Vec<EvictTarget> = targets.into_iter().take(room).collect();
        if targets.is_empty() {
            self.hold_for_unreachable(i, plan);
        }
        if targets.is_empty()
            && let Some(hold) = &self.s.domains[i].hold
        {
            self.s.domains[i].message = hold.message.clone();
            return;
        }
        self.send(i, targets);
        self.s.domains[i].message = format!(
            "evicting {what} pods: {left} left on the domain's nodes ({terminating} terminating)"
        );
    }

    /// A pod the domain does not wait for: abandoned on an unreachable node, or a replacement
    /// that came back onto a cordoned node.
    fn left_alone(&self, i: usize, p: &PodRef<&str>) -> bool {
        self.abandoned(p) || self.returned(i, p)
    }

    /// The phase's targets not terminating yet, its name and how many pods it has left (see
    /// [`Stepper::left_alone`] for those not waited for).
    fn phase_targets(
        &self,
        i: usize,
        plan: &DomainPlan<'a>,
    ) -> (Vec<EvictTarget>, &'static str, usize) {
        let phase1 = plan.phase1.iter().filter(|p| !self.left_alone(i, &p.pod));
        if phase1.clone().next().is_some() {
            let targets = phase1
                .clone()
                .filter(|p| !self.is_terminating(&p.pod))
                .map(|p| self.target(&p.pod, Some(p.pdb), self.group_of(&p.pod)))
                .collect();
            return (targets, "protected", phase1.count());
        }
        let phase2 = plan.phase2.iter().filter(|p| !self.left_alone(i, p));
        let targets = phase2
            .clone()
            .filter(|p| !self.is_terminating(p))
            .map(|p| self.target(p, None, self.group_of(p)))
            .collect();
        (targets, "unprotected", phase2.count())
    }

    /// Cluster API's rule for an unreachable node (Ready `Unknown`, `IsNodeUnreachable`): a pod
    /// terminating there for [`UNREACHABLE_SKIP`] is not waited for any more (its kubelet cannot
    /// confirm it gone; the node lifecycle controller or an out-of-service taint will).
    fn abandoned(&self, p: &PodRef<&str>) -> bool {
        self.terminating_on_unreachable(p)
            .is_some_and(|since| self.now.duration_since(since) >= UNREACHABLE_SKIP)
    }

    /// Since when `p` has been terminating, if its node is unreachable.
    fn terminating_on_unreachable(&self, p: &PodRef<&str>) -> Option<Timestamp> {
        let since = self.pod(p)?.metadata.deletion_timestamp.as_ref()?.0;
        let node = self.node(p.node)?;
        let unknown = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Ready" && c.status == "Unknown")
            });
        unknown.then_some(since)
    }

    /// With nothing to send: holds the domain (`UnreachableNode`) while pods wait out
    /// [`UNREACHABLE_SKIP`] terminating on unreachable nodes, unless another hold says more.
    fn hold_for_unreachable(&mut self, i: usize, plan: &DomainPlan<'a>) {
        let stuck: Vec<String> = plan
            .phase1
            .iter()
            .map(|p| &p.pod)
            .chain(&plan.phase2)
            .filter(|p| self.terminating_on_unreachable(p).is_some() && !self.abandoned(p))
            .map(|p| format!("{p} on {}", p.node))
            .collect();
        if stuck.is_empty() || self.s.domains[i].hold.is_some() {
            return;
        }
        let line = format!(
            "{} pod(s) terminating on unreachable node(s) ({}): waited for up to {} after their \
             deletion, then left to the node lifecycle controller",
            stuck.len(),
            stuck.join(", "),
            human(UNREACHABLE_SKIP)
        );
        self.set_hold(i, UNREACHABLE_NODE, vec![line]);
    }

    /// Drops the targets whose eviction was accepted although the stores do not show the pod
    /// terminating yet: they are not sent again.
    fn not_accepted(&self, i: usize, targets: Vec<EvictTarget>) -> Vec<EvictTarget> {
        let accepted: HashSet<(String, Option<&str>)> = self.s.domains[i]
            .evicted
            .iter()
            .filter(|e| e.refused.is_none())
            .map(|e| (e.pod.clone(), e.uid.as_deref()))
            .collect();
        targets
            .into_iter()
            .filter(|t| !accepted.contains(&(t.pod.to_string(), t.uid.as_deref())))
            .collect()
    }

    /// Records each eviction's intent (and its workload's baseline) before the actions go out.
    fn send(&mut self, i: usize, targets: Vec<EvictTarget>) {
        for t in &targets {
            self.note_baseline(i, t);
            let intent = Evicted {
                pod: t.pod.to_string(),
                uid: t.uid.clone(),
                pdb: t.pdb.clone(),
                group: t.group.clone(),
                at: self.now,
                refused: None,
            };
            self.s.domains[i].sending.push(intent);
        }
        for target in targets {
            self.actions.push(Action::Evict {
                target,
                dry_run: false,
            });
        }
    }

    /// Before `t`'s group is first evicted: its workload's Ready groups now, kept for the health
    /// check.
    pub(super) fn note_baseline(&mut self, i: usize, t: &EvictTarget) {
        let (Some(group), Some(pod)) = (&t.group, self.pod(&t.pod)) else {
            return;
        };
        let Some(workload) = self.workload_of(pod) else {
            return;
        };
        if !self.s.domains[i].workloads.contains_key(&workload.key) {
            let (ready_groups, group_size) = self.ready_groups(&workload, None);
            let baseline = Baseline {
                ready_groups,
                group_size,
                ..Baseline::default()
            };
            self.s.domains[i]
                .workloads
                .insert(workload.key.clone(), baseline);
        }
        if let Some(b) = self.s.domains[i].workloads.get_mut(&workload.key) {
            b.groups.insert(group.clone());
        }
    }

    /// The workload of a grouped pod: its namespace and its values of the workload labels (all
    /// of them present), if the options name any.
    pub(super) fn workload_of(&self, pod: &Pod) -> Option<GangWorkload> {
        let labels = pod.metadata.labels.as_ref();
        let (kind, _) = self.o.plan.groups.kind_of(labels)?;
        if !kind.by_workload() {
            return None;
        }
        let labels = labels?;
        let values = kind
            .workload_labels
            .iter()
            .map(|k| Some((k.clone(), labels.get(k)?.clone())))
            .collect::<Option<Vec<_>>>()?;
        let ns = namespace(&pod.metadata).to_string();
        let key = format!(
            "{ns}/{}",
            values
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        Some(GangWorkload {
            key,
            namespace: ns,
            labels: values,
        })
    }

    /// The workload's groups that are Ready (every pod Ready and not terminating, at least
    /// `size` pods; `None`: the largest group's size), and that size.
    pub(super) fn ready_groups(&self, w: &GangWorkload, size: Option<usize>) -> (usize, usize) {
        let groups = self.group_tallies(w);
        let size = size.unwrap_or_else(|| groups.values().map(|g| g.pods).max().unwrap_or(0));
        let ready = groups.values().filter(|g| g.ready(size)).count();
        (ready, size)
    }

    /// The workload's groups (by group label value) as their unfinished pods show them.
    pub(super) fn group_tallies(&self, w: &GangWorkload) -> BTreeMap<&str, GroupTally<'_>> {
        let mut groups: BTreeMap<&str, GroupTally> = BTreeMap::new();
        for p in self.obs.pods {
            if namespace(&p.metadata) != w.namespace || is_finished(p) {
                continue;
            }
            let Some(labels) = p.metadata.labels.as_ref() else {
                continue;
            };
            if !w.labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                continue;
            }
            let Some(group) = self.o.plan.groups.group(p) else {
                continue;
            };
            let g = groups.entry(group).or_insert(GroupTally {
                pods: 0,
                serving: true,
                nodes: Vec::new(),
            });
            g.pods += 1;
            g.serving &= pod_serving(p);
            g.nodes
                .extend(p.spec.as_ref().and_then(|s| s.node_name.as_deref()));
        }
        groups
    }

    pub(super) fn is_terminating(&self, p: &PodRef<&str>) -> bool {
        self.pod(p)
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    }

    /// Whether a 429 no longer holds: `Retry-After` passed and the observed budget is current
    /// and allows a disruption.
    pub(super) fn refusal_lifted(&self, r: &Refusal) -> Result<(), String> {
        if let Some(at) = r.retry_after
            && at > self.now
        {
            return Err(format!("Retry-After until {at}"));
        }
        let Some(pdb) = self
            .obs
            .pdbs
            .iter()
            .find(|b| crate::meta::key(&b.metadata) == r.pdb)
        else {
            // the budget is gone: nothing refuses any more
            return Ok(());
        };
        let status = pdb.status.as_ref();
        let observed = status.and_then(|s| s.observed_generation);
        if observed != pdb.metadata.generation {
            return Err("the budget's status is not current".into());
        }
        let allowed = status.and_then(|s| s.disruptions_allowed).unwrap_or(0);
        if allowed <= 0 {
            return Err(format!(
                "{} disruptions allowed; needs {} healthy, has {}",
                allowed.max(0),
                status.and_then(|s| s.desired_healthy).unwrap_or(0),
                status.and_then(|s| s.current_healthy).unwrap_or(0)
            ));
        }
        Ok(())
    }

    pub(super) fn drained(&mut self, i: usize) {
        let d = &mut self.s.domains[i];
        d.step = Step::HandingOff;
        d.drained_at = Some(self.now);
        d.message = "drained".into();
        d.hold = None;
        d.failed = None;
        let (node, message) = (
            d.nodes.first().cloned().unwrap_or_default(),
            format!("upgrade domain {} drained ({} pod(s) evicted)", d.name, {
                let (protected, other) = d.evicted_counts();
                protected + other
            }),
        );
        self.report(&node, EventType::Normal, "DomainDrained", message);
        self.hand_off(i);
    }

    pub(super) fn dry_run(&mut self, i: usize) {
        let Some(plan) = self.domain_plan_or_hold(i) else {
            return;
        };
        let Some(plan) = plan else {
            self.s.domains[i].step = Step::Done;
            return;
        };
        let tried: BTreeSet<String> = self.s.domains[i]
            .evicted
            .iter()
            .map(|e| e.pod.clone())
            .collect();
        let targets: Vec<EvictTarget> = plan
            .phase1
            .iter()
            .map(|p| self.target(&p.pod, Some(p.pdb), self.group_of(&p.pod)))
            .chain(
                plan.phase2
                    .iter()
                    .map(|p| self.target(p, None, self.group_of(p))),
            )
            .filter(|t| !tried.contains(&t.pod.to_string()))
            .collect();
        if targets.is_empty() {
            let d = &mut self.s.domains[i];
            d.step = Step::Done;
            let refused = d.evicted.iter().filter(|e| e.refused.is_some()).count();
            d.message = format!(
                "dry run: {} eviction(s) sent, {refused} refused",
                d.evicted.len()
            );
            return;
        }
        for target in targets {
            self.actions.push(Action::Evict {
                target,
                dry_run: true,
            });
        }
        self.s.domains[i].message = "dry run: evicting".into();
    }
}

/// One group of a workload, counted from its unfinished pods.
pub(super) struct GroupTally<'a> {
    pub pods: usize,
    /// Every pod Ready and not terminating.
    pub serving: bool,
    /// The nodes its pods are on.
    pub nodes: Vec<&'a str>,
}

impl GroupTally<'_> {
    /// Ready as a group: every pod serving, and at least `size` of them.
    pub fn ready(&self, size: usize) -> bool {
        self.serving && self.pods >= size
    }
}

/// A group's gang workload (not Kueue's Workload): the namespace and the workload labels'
/// values.
pub(super) struct GangWorkload {
    /// `namespace/k1=v1,k2=v2`.
    pub key: String,
    pub namespace: String,
    pub labels: Vec<(String, String)>,
}

impl GangWorkload {
    /// The inverse of the key [`Stepper::workload_of`] writes (label keys and values hold no `,`
    /// or `=`; a namespace no `/`).
    pub(super) fn parse(key: &str) -> Option<GangWorkload> {
        let (ns, rest) = key.split_once('/')?;
        let labels = rest
            .split(',')
            .map(|kv| {
                let (k, v) = kv.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(GangWorkload {
            key: key.to_string(),
            namespace: ns.to_string(),
            labels,
        })
    }
}
