//! What the API answered to the evictions sent since the last step (pure): an accepted one is
//! recorded; a budget's 429 pauses the domain ([`Refusal`]); the API server's throttling waits
//! its `Retry-After`; any other failure is retried after [`super::Options::eviction_retry`] and
//! shown as the domain's block until an eviction of it succeeds. A dry run records every answer.

use k8s_openapi::jiff::SignedDuration;

use super::{EventType, EvictTarget, Evicted, EvictionResult, Hold, Refusal, Stepper, human};

/// The `Blocked` reason while a domain's evictions fail other than with a 429.
pub const EVICTION_FAILED: &str = "EvictionFailed";

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
