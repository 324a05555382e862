//! Pods that come back (pure). A pod that tolerates the cordon (the scheduler's
//! `node.kubernetes.io/unschedulable:NoSchedule`; a toleration `operator: Exists` without a key
//! tolerates every taint) and the rollout's taint is scheduled back onto a cordoned node when its
//! controller replaces it. Each such pod on a domain's nodes when the domain started is evicted
//! once; one found there later is a replacement that came back: it is left alone, as `kubectl
//! drain` leaves DaemonSet pods, the domain does not wait for it, and a Warning Event
//! ([`POD_RETURNED`]) names it once.

use std::collections::BTreeSet;

use super::super::rules::tolerates_cordon;
use super::super::{is_finished, name, namespace};
use super::{DomainPlan, PodRef, Stepper};
use crate::events::EventType;
use k8s_openapi::api::core::v1::Pod;

/// The Event's reason for a replacement left on a cordoned node.
pub const POD_RETURNED: &str = "PodReturned";

/// What a pod is known by in [`super::DomainState::tolerating`]: its uid (its name without one).
fn key(pod: &Pod) -> String {
    match &pod.metadata.uid {
        Some(uid) => uid.clone(),
        None => format!("{}/{}", namespace(&pod.metadata), name(&pod.metadata)),
    }
}

impl Stepper<'_> {
    /// Once, when the domain starts: the pods on its nodes that tolerate the cordon.
    pub(super) fn take_tolerating(&mut self, i: usize) {
        if self.s.domains[i].tolerating.is_some() {
            return;
        }
        let nodes: BTreeSet<&str> = self.s.domains[i].nodes.iter().map(String::as_str).collect();
        let taint = self.o.plan.taint.as_ref();
        let present = self
            .obs
            .pods
            .iter()
            .filter(|p| !is_finished(p) && tolerates_cordon(p, taint))
            .filter(|p| {
                let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                node.is_some_and(|n| nodes.contains(n))
            })
            .map(key)
            .collect();
        self.s.domains[i].tolerating = Some(present);
    }

    /// Whether `p` came back: it tolerates the cordon and was not on the domain's nodes when
    /// the domain started.
    pub(super) fn returned(&self, i: usize, p: &PodRef<&str>) -> bool {
        let (Some(known), Some(pod)) = (&self.s.domains[i].tolerating, self.pod(p)) else {
            return false;
        };
        tolerates_cordon(pod, self.o.plan.taint.as_ref()) && !known.contains(&key(pod))
    }

    /// Records the domain's pods that came back, with a Warning Event for each new one.
    pub(super) fn note_returned(&mut self, i: usize, plan: &DomainPlan<'_>) {
        let back: Vec<PodRef<&str>> = plan
            .phase1
            .iter()
            .map(|p| &p.pod)
            .chain(&plan.phase2)
            .filter(|p| self.returned(i, p))
            .cloned()
            .collect();
        for p in back {
            if !self.s.domains[i].returned.insert(p.to_string()) {
                continue;
            }
            let message = format!(
                "{p} tolerates the cordon and was scheduled back onto cordoned node {} after \
                 upgrade domain {} started: it is left there and not waited for (as kubectl \
                 drain leaves DaemonSet pods); evicting it again would only bring it back",
                p.node, self.s.domains[i].name
            );
            self.report(p.node, EventType::Warning, POD_RETURNED, message);
        }
    }
}
