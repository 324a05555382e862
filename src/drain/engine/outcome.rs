//! What the API answered to the evictions sent since the last step (pure): an accepted one is
//! recorded; a budget's 429 pauses the domain ([`Refusal`]); the API server's throttling waits
//! its `Retry-After`; any other failure is retried after [`super::Options::eviction_retry`] and
//! shown as the domain's block until an eviction of it succeeds. A dry run records every answer.
//! A refusal whose budget's status never catches up with its spec (the disruption controller is
//! down, or cannot compute the budget) is named as such after [`BUDGET_SYNC_WAIT`].

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::SignedDuration;

use super::{EvictTarget, Evicted, EvictionResult, Hold, Refusal, Stepper, human};
use crate::events::EventType;

/// The `Blocked` reason while a domain's evictions fail other than with a 429.
pub const EVICTION_FAILED: &str = "EvictionFailed";
/// The `Blocked` reason (and the Event's) while a refusing budget's status lags its spec.
pub const BUDGET_NOT_SYNCED: &str = "BudgetNotSynced";
/// How long a refusing budget may lag its spec before the domain says so: the disruption
/// controller syncs a budget within seconds of a change, and the Eviction API asks to retry a
/// budget "still being processed" after 10 s.
pub const BUDGET_SYNC_WAIT: SignedDuration = SignedDuration::from_mins(1);

/// Why `pdb`'s status is not current, if it is not: no status, or an `observedGeneration` behind
/// `metadata.generation` (with the disruption controller's `SyncFailed` message, if any).
fn not_synced(pdb: &PodDisruptionBudget) -> Option<String> {
    let generation = pdb.metadata.generation;
    let Some(status) = &pdb.status else {
        return Some("it has no status".into());
    };
    if status.observed_generation == generation {
        return None;
    }
    let failed = crate::drain::pdb::sync_failed(pdb)
        .map(|m| format!("; the disruption controller failed on it (SyncFailed: {m})"))
        .unwrap_or_default();
    Some(format!(
        "its status is at generation {} of {}{failed}",
        status.observed_generation.unwrap_or(0),
        generation.unwrap_or(0)
    ))
}

impl Stepper<'_> {
    pub(super) fn take_outcomes(&mut self) {
        for outcome in self.obs.outcomes {
            let t = &outcome.target;
            let Some(i) = self.domain_of_node(&t.pod.node) else {
                continue;
            };
            let pod = t.pod.to_string();
            self.s.domains[i]
                .sending
                .retain(|e| !(e.pod == pod && e.uid == t.uid));
            let refused = match &outcome.result {
                EvictionResult::Evicted | EvictionResult::Gone => None,
                EvictionResult::Throttled { .. } => Some("429: throttled by the API server".into()),
                EvictionResult::TooManyRequests { message, .. } => Some(format!("429: {message}")),
                EvictionResult::Failed { code, message } => Some(format!("{code}: {message}")),
            };
            if self.o.dry_run && refused.is_some() {
                let r = self.record(t, refused);
                self.s.domains[i].evicted.push(r);
                continue;
            }
            match &outcome.result {
                EvictionResult::Evicted | EvictionResult::Gone => {
                    let r = self.record(t, None);
                    let d = &mut self.s.domains[i];
                    d.failed = None;
                    if !d.evicted.iter().any(|e| e.pod == r.pod && e.uid == r.uid) {
                        d.evicted.push(r);
                    }
                }
                EvictionResult::Throttled { retry_after } => self.throttled(i, t, *retry_after),
                EvictionResult::TooManyRequests {
                    message,
                    retry_after,
                } => self.refused(i, t, message, *retry_after),
                EvictionResult::Failed { code, message } => self.failed(i, t, *code, message),
            }
        }
    }

    /// While a budget's refusal holds domain `i`: once the budget has lagged its spec for
    /// [`BUDGET_SYNC_WAIT`] since the refusal, the domain holds as [`BUDGET_NOT_SYNCED`] (a
    /// Warning Event when that begins), which its drain timeout bounds; a current budget lifts
    /// that hold.
    pub(super) fn hold_for_sync(&mut self, i: usize, refusal: &Refusal) {
        let pdb = self
            .obs
            .pdbs
            .iter()
            .find(|b| crate::meta::key(&b.metadata) == refusal.pdb);
        let waited = self.now.duration_since(refusal.since);
        let why = pdb
            .and_then(not_synced)
            .filter(|_| waited >= BUDGET_SYNC_WAIT);
        let before = self.s.domains[i].hold.clone();
        let Some(why) = why else {
            if before.is_some_and(|h| h.reason == BUDGET_NOT_SYNCED) {
                self.s.domains[i].hold = None;
            }
            return;
        };
        let bound = match self.o.drain_timeout {
            Some(t) => format!(
                "the domain waits for it up to its drain timeout ({})",
                human(t)
            ),
            None => "the domain waits for it (no drain timeout)".into(),
        };
        let line = format!(
            "PodDisruptionBudget {} has not synced for over {} (refusing since {}): {why}, so \
             the Eviction API refuses every eviction it guards (\"still being processed\"); \
             check that kube-controller-manager's disruption controller runs and can count the \
             budget's pods (an integer minAvailable needs no scale subresource); {bound}",
            refusal.pdb,
            human(BUDGET_SYNC_WAIT),
            refusal.since
        );
        self.set_hold(i, BUDGET_NOT_SYNCED, vec![line]);
        let d = &mut self.s.domains[i];
        if let Some(hold) = &d.hold {
            d.message = hold.message.clone();
        }
        if before.map(|h| h.reason) != Some(BUDGET_NOT_SYNCED.to_string()) {
            let (node, message) = (
                d.nodes.first().cloned().unwrap_or_default(),
                format!("upgrade domain {}: {}", d.name, d.message),
            );
            self.report(&node, EventType::Warning, BUDGET_NOT_SYNCED, message);
        }
    }

    fn record(&self, t: &EvictTarget, refused: Option<String>) -> Evicted {
        Evicted {
            pod: t.pod.to_string(),
            uid: t.uid.clone(),
            pdb: t.pdb.clone(),
            group: t.group.clone(),
            at: self.now,
            refused,
        }
    }

    fn throttled(&mut self, i: usize, t: &EvictTarget, retry_after: Option<SignedDuration>) {
        let wait = retry_after.unwrap_or(SignedDuration::from_secs(1));
        let until = self.now.checked_add(wait).unwrap_or(self.now);
        let d = &mut self.s.domains[i];
        let first = d.throttled_until.is_none_or(|u| u <= self.now);
        d.throttled_until = Some(d.throttled_until.map_or(until, |u| u.max(until)));
        if first {
            self.report(
                &t.pod.node,
                EventType::Normal,
                "EvictionThrottled",
                format!(
                    "evicting {} was throttled by the API server (429, Retry-After {}); no \
                     budget refused it; the domain tries again then",
                    t.pod,
                    human(wait)
                ),
            );
        }
    }

    fn refused(
        &mut self,
        i: usize,
        t: &EvictTarget,
        message: &str,
        retry_after: Option<SignedDuration>,
    ) {
        let pdb = t.pdb.clone().unwrap_or_default();
        let retry_after = retry_after.and_then(|d| self.now.checked_add(d).ok());
        self.report(
            &t.pod.node,
            EventType::Warning,
            "EvictionRefused",
            format!(
                "evicting {} refused by PodDisruptionBudget {pdb}: {message}; the domain waits \
                 until the budget allows a disruption again",
                t.pod
            ),
        );
        self.s.domains[i].refusal = Some(Refusal {
            pdb,
            pod: t.pod.to_string(),
            message: message.to_string(),
            since: self.now,
            retry_after,
        });
    }

    fn failed(&mut self, i: usize, t: &EvictTarget, code: u16, message: &str) {
        let retry = self.now.checked_add(self.o.eviction_retry).ok();
        let what = format!("evicting {} failed ({code}): {message}", t.pod);
        self.report(
            &t.pod.node,
            EventType::Warning,
            EVICTION_FAILED,
            what.clone(),
        );
        let d = &mut self.s.domains[i];
        d.retry_at = retry;
        d.message = what.clone();
        d.failed = Some(Hold {
            reason: EVICTION_FAILED.into(),
            message: format!("{what}; retried every {}", human(self.o.eviction_retry)),
        });
    }

    /// Evictions decided before whose answer never came (the caller stopped, or died, between
    /// sending them and the next step): a pod that is gone, replaced (another uid) or terminating
    /// was evicted (its group is waited for, it is counted); one still running was not (it is a
    /// target again).
    pub(super) fn settle_unanswered(&mut self) {
        for i in 0..self.s.domains.len() {
            for e in std::mem::take(&mut self.s.domains[i].sending) {
                let (ns, name) = e.pod.split_once('/').unwrap_or(("", e.pod.as_str()));
                let live = self.pods.get(&(ns, name)).copied();
                let evicted = match live {
                    None => true,
                    Some(p) => p.metadata.uid != e.uid || p.metadata.deletion_timestamp.is_some(),
                };
                let d = &mut self.s.domains[i];
                if evicted && !d.evicted.iter().any(|x| x.pod == e.pod && x.uid == e.uid) {
                    d.evicted.push(e);
                }
            }
        }
    }
}
