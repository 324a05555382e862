//! Fault injection: the failures a real API server shows its clients, seeded and deterministic.
//!
//! A [`Faults`](crate::Faults) value holds rules per verb / resource / client (User-Agent prefix):
//! error rates (409, 429, 500, 503 with the real server's response shapes) and added latency
//! (cluster time, so free under tokio's paused clock), plus watch disconnects and 410 Gone on
//! re-watch. Each (verb, resource) pair draws from its own splitmix64 stream seeded from the sim's
//! seed, so the faults one resource sees do not depend on the traffic to another: for a seed and a
//! sequence of requests per verb and resource, the same requests fail.
//!
//! Errors are decided before the request touches the store: an injected failure never writes
//! (the real server can also fail *after* a write; that is not modelled).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use crate::server::status::{ApiError, qualified};

/// A Kubernetes API verb, as the server's request info names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    /// Every PATCH, server-side apply included.
    Patch,
    Delete,
}

impl Verb {
    /// The writes: create, update, patch, delete.
    pub const WRITES: [Verb; 4] = [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete];
    /// The reads: get, list, watch.
    pub const READS: [Verb; 3] = [Verb::Get, Verb::List, Verb::Watch];

    /// The verb of a request: its method, whether it names an object, whether it is a watch.
    pub fn of(method: &str, named: bool, watch: bool) -> Option<Verb> {
        Some(match (method, named) {
            ("GET", _) if watch => Verb::Watch,
            ("GET", true) => Verb::Get,
            ("GET", false) => Verb::List,
            ("POST", _) => Verb::Create,
            ("PUT", _) => Verb::Update,
            ("PATCH", _) => Verb::Patch,
            ("DELETE", _) => Verb::Delete,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// What a request is, for matching rules.
#[derive(Clone, Debug)]
pub struct RequestInfo<'a> {
    pub verb: Verb,
    /// API group (`""` for core).
    pub group: &'a str,
    /// Resource plural (`pods`, `workloads`).
    pub resource: &'a str,
    /// Object name (from the URL; for a create, from the body when known).
    pub name: &'a str,
    pub user_agent: &'a str,
}

/// One rule: which requests it applies to, what they suffer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultRule {
    verbs: Vec<Verb>,
    resources: Vec<String>,
    user_agent: Option<String>,
    errors: Vec<(u16, f64)>,
    latency: Duration,
}

impl FaultRule {
    /// A rule matching every request, doing nothing until given errors or latency.
    pub fn any() -> Self {
        FaultRule::default()
    }

    /// A rule matching create, update, patch and delete.
    pub fn writes() -> Self {
        FaultRule::any().verbs(&Verb::WRITES)
    }

    /// Only these verbs.
    pub fn verbs(mut self, verbs: &[Verb]) -> Self {
        self.verbs = verbs.to_vec();
        self
    }

    /// Only this resource: a plural (`workloads`) or `plural.group` (`workloads.kueue.x-k8s.io`).
    /// Call again to add resources.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resources.push(resource.into());
        self
    }

    /// Only requests whose User-Agent starts with `prefix` (see [`crate::Sim::client_as`]).
    pub fn user_agent(mut self, prefix: impl Into<String>) -> Self {
        self.user_agent = Some(prefix.into());
        self
    }

    /// Fails this share (0..=1) of matching requests with `code`: 409, 429, 500 or 503 (other
    /// codes are answered as a generic `Status` of that code).
    pub fn error(mut self, code: u16, rate: f64) -> Self {
        self.errors.push((code, rate.clamp(0.0, 1.0)));
        self
    }

    /// Delays every matching request by `latency` of cluster time.
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    fn matches(&self, r: &RequestInfo<'_>) -> bool {
        (self.verbs.is_empty() || self.verbs.contains(&r.verb))
            && (self.resources.is_empty()
                || self
                    .resources
                    .iter()
                    .any(|x| x == r.resource || *x == qualified(r.group, r.resource)))
            && self
                .user_agent
                .as_ref()
                .is_none_or(|p| r.user_agent.starts_with(p.as_str()))
    }
}

/// The faults a sim injects. `Faults::default()` injects nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    rules: Vec<FaultRule>,
    watch_drop_every: Option<Duration>,
    rewatch_gone_rate: f64,
    watch_user_agent: Option<String>,
}

impl Faults {
    pub fn none() -> Self {
        Faults::default()
    }

    pub fn rule(mut self, rule: FaultRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Every watch stream ends after `every` of cluster time, as a dropped connection does
    /// (the client sees the body end and watches again from its last resourceVersion).
    pub fn watch_drops(mut self, every: Duration) -> Self {
        self.watch_drop_every = Some(every);
        self
    }

    /// This share of watches that start from a resourceVersion answer at once with an `ERROR`
    /// event `410 Expired` ("too old resource version"), as after an etcd compaction: the client
    /// must list again.
    pub fn rewatch_gone(mut self, rate: f64) -> Self {
        self.rewatch_gone_rate = rate.clamp(0.0, 1.0);
        self
    }

    /// Watch drops and 410s only for clients whose User-Agent starts with `prefix`.
    pub fn watch_user_agent(mut self, prefix: impl Into<String>) -> Self {
        self.watch_user_agent = Some(prefix.into());
        self
    }

    fn watch_applies(&self, user_agent: &str) -> bool {
        self.watch_user_agent
            .as_ref()
            .is_none_or(|p| user_agent.starts_with(p.as_str()))
    }
}

/// What happens to one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Cluster time to wait before answering.
    pub latency: Duration,
    /// The answer instead of the real one.
    pub error: Option<ApiError>,
}

/// What happens to one watch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchDecision {
    /// The stream ends after this much cluster time.
    pub drop_after: Option<Duration>,
    /// The watch answers 410 Expired at once.
    pub gone: bool,
}

/// What was injected so far (a test under faults checks that they happened).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Injected error answers by status code.
    pub errors: std::collections::BTreeMap<u16, u64>,
    /// Requests delayed by a latency rule.
    pub delayed: u64,
    /// Watch streams ended by [`Faults::watch_drops`].
    pub watches_dropped: u64,
    /// Watches answered 410 by [`Faults::rewatch_gone`].
    pub watches_gone: u64,
}

/// Faults plus their random streams: the sim's fault state.
#[derive(Clone, Debug, Default)]
pub struct Injector {
    faults: Faults,
    seed: u64,
    streams: HashMap<String, u64>,
    stats: FaultStats,
}

impl Injector {
    pub fn new(faults: Faults, seed: u64) -> Self {
        Injector {
            faults,
            seed,
            streams: HashMap::new(),
            stats: FaultStats::default(),
        }
    }

    pub fn stats(&self) -> &FaultStats {
        &self.stats
    }

    /// Counts a watch stream ended by a drop.
    pub fn count_drop(&mut self) {
        self.stats.watches_dropped += 1;
    }

    /// Replaces the faults (the random streams go on where they were).
    pub fn set(&mut self, faults: Faults) {
        self.faults = faults;
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// A number in [0, 1) from the stream of `key`.
    fn draw(&mut self, key: &str) -> f64 {
        let seed = self.seed ^ fnv1a(key);
        let state = self.streams.entry(key.to_string()).or_insert(seed);
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fate of one (non-watch-stream) request: latency summed over the matching rules, and
    /// the first rule whose draw falls in one of its error rates decides the error.
    pub fn decide(&mut self, r: &RequestInfo<'_>) -> Decision {
        let mut out = Decision::default();
        let rules: Vec<FaultRule> = self
            .faults
            .rules
            .iter()
            .filter(|rule| rule.matches(r))
            .cloned()
            .collect();
        if rules.is_empty() {
            return out;
        }
        let key = format!("{}/{}/{}", r.verb.name(), r.group, r.resource);
        for rule in rules {
            out.latency += rule.latency;
            if rule.errors.is_empty() || out.error.is_some() {
                continue;
            }
            let x = self.draw(&key);
            let mut acc = 0.0;
            for (code, rate) in &rule.errors {
                acc += rate;
                if x < acc {
                    out.error = Some(injected(*code, r));
                    *self.stats.errors.entry(*code).or_default() += 1;
                    break;
                }
            }
        }
        if !out.latency.is_zero() {
            self.stats.delayed += 1;
        }
        out
    }

    /// The fate of one watch stream: whether it starts from a resourceVersion decides whether a
    /// 410 can be drawn.
    pub fn decide_watch(&mut self, r: &RequestInfo<'_>, from_version: bool) -> WatchDecision {
        if !self.faults.watch_applies(r.user_agent) {
            return WatchDecision::default();
        }
        let gone = from_version
            && self.faults.rewatch_gone_rate > 0.0
            && self.draw(&format!("gone/{}/{}", r.group, r.resource))
                < self.faults.rewatch_gone_rate;
        if gone {
            self.stats.watches_gone += 1;
        }
        WatchDecision {
            drop_after: self.faults.watch_drop_every,
            gone,
        }
    }
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The answer the real server gives for `code`:
/// - 409: an optimistic-concurrency conflict (`NewConflict`), as on a stale resourceVersion;
/// - 429: the max-in-flight / priority-and-fairness filter's plain-text answer with
///   `Retry-After: 1` (`filters.tooManyRequests`);
/// - 500: `NewInternalError` (an etcd failure surfaced as "Internal error occurred: ...");
/// - 503: `NewServiceUnavailable`.
pub fn injected(code: u16, r: &RequestInfo<'_>) -> ApiError {
    match code {
        409 => ApiError::conflict(r.group, r.resource, r.name),
        429 => ApiError::throttled(),
        500 => ApiError::internal_error("etcdserver: request timed out"),
        503 => {
            ApiError::service_unavailable("the server is currently unable to handle the request")
        }
        other => {
            let mut e = ApiError::plain_failure(other, format!("injected {other}"));
            e.details = json!({});
            e
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(verb: Verb, resource: &'a str, agent: &'a str) -> RequestInfo<'a> {
        RequestInfo {
            verb,
            group: "kueue.x-k8s.io",
            resource,
            name: "w",
            user_agent: agent,
        }
    }

    fn failures(inj: &mut Injector, r: &RequestInfo<'_>, n: usize) -> Vec<Option<u16>> {
        (0..n)
            .map(|_| inj.decide(r).error.map(|e| e.code))
            .collect()
    }

    #[test]
    fn the_same_seed_fails_the_same_requests() {
        let faults = Faults::none().rule(FaultRule::writes().error(500, 0.1).error(429, 0.05));
        let r = req(Verb::Patch, "workloads", "raygate");
        let a = failures(&mut Injector::new(faults.clone(), 7), &r, 500);
        let b = failures(&mut Injector::new(faults.clone(), 7), &r, 500);
        let c = failures(&mut Injector::new(faults, 8), &r, 500);
        assert_eq!(a, b);
        assert_ne!(a, c, "another seed, other failures");
    }

    #[test]
    fn error_rates_hold_over_many_requests() {
        let faults = Faults::none().rule(FaultRule::writes().error(500, 0.10).error(409, 0.05));
        let mut inj = Injector::new(faults, 1);
        let r = req(Verb::Create, "workloads", "x");
        let out = failures(&mut inj, &r, 20_000);
        let share = |code| out.iter().filter(|c| **c == Some(code)).count() as f64 / 20_000.0;
        assert!((share(500) - 0.10).abs() < 0.01, "{}", share(500));
        assert!((share(409) - 0.05).abs() < 0.01, "{}", share(409));
    }

    #[test]
    fn rules_match_by_verb_resource_and_client() {
        let faults = Faults::none().rule(
            FaultRule::writes()
                .resource("workloads.kueue.x-k8s.io")
                .user_agent("raygate")
                .error(500, 1.0)
                .latency(Duration::from_millis(300)),
        );
        let mut inj = Injector::new(faults, 0);
        let hit = inj.decide(&req(Verb::Patch, "workloads", "raygate/0.1"));
        assert_eq!(hit.error.map(|e| e.code), Some(500));
        assert_eq!(hit.latency, Duration::from_millis(300));
        for miss in [
            req(Verb::Get, "workloads", "raygate"),
            req(Verb::Patch, "clusterqueues", "raygate"),
            req(Verb::Patch, "workloads", "test"),
        ] {
            assert_eq!(inj.decide(&miss), Decision::default(), "{miss:?}");
        }
    }

    #[test]
    fn one_resource_s_traffic_does_not_shift_another_s_faults() {
        let faults = Faults::none().rule(FaultRule::writes().error(500, 0.3));
        let w = req(Verb::Patch, "workloads", "x");
        let c = req(Verb::Patch, "clusterqueues", "x");
        let alone = failures(&mut Injector::new(faults.clone(), 3), &w, 100);
        let mut mixed = Injector::new(faults, 3);
        let interleaved: Vec<_> = (0..100)
            .map(|_| {
                mixed.decide(&c);
                mixed.decide(&w).error.map(|e| e.code)
            })
            .collect();
        assert_eq!(alone, interleaved);
    }

    #[test]
    fn injected_errors_have_the_real_server_s_shapes() {
        let r = req(Verb::Update, "workloads", "x");
        let conflict = injected(409, &r).to_status();
        assert_eq!(conflict["reason"], "Conflict");
        assert_eq!(
            conflict["message"],
            "Operation cannot be fulfilled on workloads.kueue.x-k8s.io \"w\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let throttled = injected(429, &r);
        assert!(throttled.plain_text);
        assert_eq!(
            throttled.message,
            "Too many requests, please try again later."
        );
        assert_eq!(throttled.details["retryAfterSeconds"], 1);
        let internal = injected(500, &r).to_status();
        assert_eq!(internal["reason"], "InternalError");
        assert_eq!(
            internal["message"],
            "Internal error occurred: etcdserver: request timed out"
        );
        assert_eq!(
            internal["details"]["causes"][0]["message"],
            "etcdserver: request timed out"
        );
        let unavailable = injected(503, &r).to_status();
        assert_eq!(unavailable["reason"], "ServiceUnavailable");
        assert_eq!(unavailable["code"], 503);
    }

    #[test]
    fn watches_drop_and_410_only_from_a_version_and_only_for_the_chosen_client() {
        let faults = Faults::none()
            .watch_drops(Duration::from_secs(5))
            .rewatch_gone(1.0)
            .watch_user_agent("raygate");
        let mut inj = Injector::new(faults, 0);
        let w = req(Verb::Watch, "workloads", "raygate");
        assert_eq!(
            inj.decide_watch(&w, true),
            WatchDecision {
                drop_after: Some(Duration::from_secs(5)),
                gone: true
            }
        );
        assert!(
            !inj.decide_watch(&w, false).gone,
            "a watch from now cannot be too old"
        );
        let other = req(Verb::Watch, "workloads", "test");
        assert_eq!(inj.decide_watch(&other, true), WatchDecision::default());
    }

    /// `raygate_testing::backend::FAULT_SEED` relies on this: under seed 25 the first write of
    /// a stream keyed `patch/ray.io/rayservices` fails at a 10% rate.
    #[test]
    fn seed_25_fails_the_first_rayservice_patch() {
        let faults = Faults::none().rule(FaultRule::writes().error(500, 0.1));
        let r = RequestInfo {
            group: "ray.io",
            ..req(Verb::Patch, "rayservices", "x")
        };
        assert_eq!(
            failures(&mut Injector::new(faults, 25), &r, 3),
            [Some(500), None, None]
        );
    }

    #[test]
    fn what_was_injected_is_counted() {
        let faults = Faults::none()
            .rule(
                FaultRule::writes()
                    .error(500, 1.0)
                    .latency(Duration::from_secs(1)),
            )
            .rewatch_gone(1.0);
        let mut inj = Injector::new(faults, 0);
        inj.decide(&req(Verb::Create, "workloads", "x"));
        inj.decide(&req(Verb::Get, "workloads", "x"));
        inj.decide_watch(&req(Verb::Watch, "workloads", "x"), true);
        inj.count_drop();
        let stats = inj.stats();
        assert_eq!(stats.errors.get(&500), Some(&1));
        assert_eq!(
            (stats.delayed, stats.watches_gone, stats.watches_dropped),
            (1, 1, 1)
        );
    }

    #[test]
    fn faults_change_at_runtime() {
        let mut inj = Injector::new(Faults::none(), 0);
        let r = req(Verb::Delete, "workloads", "x");
        assert!(inj.decide(&r).error.is_none());
        inj.set(Faults::none().rule(FaultRule::any().error(503, 1.0)));
        assert_eq!(inj.decide(&r).error.map(|e| e.code), Some(503));
        inj.set(Faults::none());
        assert!(inj.decide(&r).error.is_none());
    }
}
