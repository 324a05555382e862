//! A `NodeRollout`'s spec → the drain's options (the plan's, the preflight's and the rollout's
//! knobs), checked field by field. The CRD's schema and CEL rules reject most bad specs at the
//! API server already; this check repeats them (a server without CEL, or the simulated cluster,
//! lets them through) and adds what a schema cannot say (label queries that do not parse).
//! Every error names the field.

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::SignedDuration;
use serde::Serialize;

use super::engine::{DEFAULT_HANDOFF_TIMEOUT, DEFAULT_MOVE_TIMEOUT, MoveOptions};
use super::preflight::{GroupContract, PreflightOptions};
use super::{DomainOrder, DrainRules, Generation, GenerationSource, GenerationTarget};
use super::{NodeInfoField, PlanOptions};
use crate::labels::Selector;
use crate::types::rollout::{
    DomainOrderSpec, FailureActionSpec, GenerationSpec, GroupPreset, GroupsSpec, HandOffMode,
    HandOffSpec, NodeInfoFieldSpec, NodeRolloutSpec, OUTDATED_TAINT_KEY, WhenMoveHeld,
};

/// The default `healthCheckRetryTimeout` (Service Fabric's `HealthCheckRetryTimeout` default).
pub const DEFAULT_HEALTH_CHECK_RETRY_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);

/// One field of a spec that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SpecError {
    /// The field's path, e.g. `spec.healthCheckWait`.
    pub field: String,
    pub problem: String,
}

/// Every field of a spec that cannot be used (all at once, so one condition lists them all).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid NodeRollout spec: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct InvalidSpec(pub Vec<SpecError>);

/// What a `NodeRollout` asks for, checked and typed.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutOptions {
    pub plan: PlanOptions,
    /// `None`: the spec names no group contract, so no preflight.
    pub preflight: Option<PreflightOptions>,
    pub health_check_wait: SignedDuration,
    /// `None`: computed from the representatives' readiness probes.
    pub health_check_stable: Option<SignedDuration>,
    pub health_check_retry_timeout: SignedDuration,
    /// `None`: no limit.
    pub domain_timeout: Option<SignedDuration>,
    /// From cordon until the domain's last pod is gone; `None`: no limit.
    pub drain_timeout: Option<SignedDuration>,
    /// `None`: no limit.
    pub rollout_timeout: Option<SignedDuration>,
    pub failure_action: FailureActionSpec,
    /// At least 1.
    pub max_unavailable_domains: usize,
    pub manual: bool,
    pub paused: bool,
    pub hand_off: HandOffSpec,
    /// `taintOutdated` absent: the controller decides at planning, by the room check.
    pub taint_auto: bool,
    /// `spec.rayServices`.
    pub moves: MoveOptions,
    /// `spec.handOff.timeout`; `None`: no limit.
    pub handoff_timeout: Option<SignedDuration>,
}

/// `spec.drainTimeout`'s default: the managed node pools' (AKS's drain timeout is 30 minutes).
pub const DEFAULT_DRAIN_TIMEOUT: SignedDuration = SignedDuration::from_mins(30);

/// The taint `taintOutdated` puts on the target nodes.
pub fn outdated_taint() -> Taint {
    Taint {
        key: OUTDATED_TAINT_KEY.to_string(),
        effect: "NoSchedule".to_string(),
        ..Taint::default()
    }
}

/// Collects the errors of one spec.
#[derive(Default)]
struct Check(Vec<SpecError>);

impl Check {
    fn fail(&mut self, field: &str, problem: impl Into<String>) {
        self.0.push(SpecError {
            field: field.to_string(),
            problem: problem.into(),
        });
    }

    fn duration(&mut self, field: &str, value: Option<&str>) -> Option<SignedDuration> {
        let value = value?;
        match parse_duration(value) {
            Ok(d) => Some(d),
            Err(problem) => {
                self.fail(field, problem);
                None
            }
        }
    }

    fn query(&mut self, field: &str, query: &str) {
        if let Err(e) = Selector::parse_query(query) {
            self.fail(field, e.to_string());
        }
    }
}

/// A Go `time.ParseDuration` string (`30s`, `1h30m`, `0`), not negative.
pub fn parse_duration(value: &str) -> Result<SignedDuration, String> {
    let parsed = crate::duration::parse_go(value)?;
    SignedDuration::try_from(parsed).map_err(|_| format!("{value:?} is too long"))
}

/// Checks `spec` and turns it into the drain's options; every unusable field is reported.
pub fn rollout_options(spec: &NodeRolloutSpec) -> Result<RolloutOptions, InvalidSpec> {
    let mut check = Check::default();
    if spec.ud_label.is_empty() {
        check.fail("spec.udLabel", "must name a node label");
    }
    if spec.node_selector.is_none() && spec.generation.is_none() {
        check.fail(
            "spec",
            "say which nodes to roll: nodeSelector ({} for every node), generation, or both",
        );
    }
    let node_selector = spec
        .node_selector
        .as_ref()
        .and_then(|s| selector_query(s, &mut check))
        .unwrap_or_default();
    let generation = spec
        .generation
        .as_ref()
        .and_then(|g| generation(g, &mut check));
    let order = domain_order(spec, &mut check);
    check_hand_off(spec, &mut check);
    check.query("spec.drain.podSelector", &spec.drain.pod_selector);
    let skip_wait = spec.drain.skip_wait_for_delete_timeout_seconds;
    if skip_wait < 0 {
        check.fail(
            "spec.drain.skipWaitForDeleteTimeoutSeconds",
            format!("{skip_wait} is negative"),
        );
    }
    let contracts = spec
        .groups
        .as_ref()
        .map(|g| contracts(g, &mut check))
        .unwrap_or_default();
    let timeouts = timeouts(spec, &mut check);
    let max_unavailable_domains = max_unavailable_domains(spec, &mut check);
    if !check.0.is_empty() {
        return Err(InvalidSpec(check.0));
    }
    let preflight = (!contracts.is_empty()).then(|| PreflightOptions {
        domain_label: spec.ud_label.clone(),
        contracts,
    });
    let plan = PlanOptions {
        domain_label: spec.ud_label.clone(),
        node_selector,
        generation,
        order,
        taint: (spec.taint_outdated == Some(true)).then(outdated_taint),
        groups: preflight
            .as_ref()
            .map(PreflightOptions::group_labels)
            .unwrap_or_default(),
        rules: drain_rules(spec),
    };
    Ok(RolloutOptions {
        preflight,
        plan,
        health_check_wait: timeouts.health_check_wait.unwrap_or(SignedDuration::ZERO),
        health_check_stable: timeouts.health_check_stable,
        health_check_retry_timeout: timeouts
            .health_check_retry_timeout
            .unwrap_or(DEFAULT_HEALTH_CHECK_RETRY_TIMEOUT),
        domain_timeout: timeouts.domain,
        drain_timeout: timeouts.drain,
        rollout_timeout: timeouts.rollout,
        failure_action: spec.failure_action,
        max_unavailable_domains,
        manual: spec.manual,
        paused: spec.paused,
        hand_off: spec.hand_off.clone(),
        taint_auto: spec.taint_outdated.is_none(),
        moves: timeouts.moves,
        handoff_timeout: timeouts.handoff,
    })
}

/// `spec.maxUnavailableDomains`, at least 1 (1, with the fault noted, when less).
fn max_unavailable_domains(spec: &NodeRolloutSpec, check: &mut Check) -> usize {
    match usize::try_from(spec.max_unavailable_domains) {
        Ok(n) if n >= 1 => n,
        _ => {
            check.fail(
                "spec.maxUnavailableDomains",
                format!("{} is less than 1", spec.max_unavailable_domains),
            );
            1
        }
    }
}

/// `spec.generation` as the plan reads it (`None`, with its faults noted, when unusable).
fn generation(g: &GenerationSpec, check: &mut Check) -> Option<Generation> {
    let source = match (&g.label, g.node_info) {
        (Some(label), None) if !label.is_empty() => GenerationSource::Label(label.clone()),
        (Some(_), None) => {
            check.fail("spec.generation.label", "must name a node label");
            return None;
        }
        (None, Some(field)) => GenerationSource::NodeInfo(node_info(field)),
        _ => {
            check.fail("spec.generation", "set exactly one of label or nodeInfo");
            return None;
        }
    };
    let target = match &g.target_value {
        Some(v) if v.is_empty() => {
            check.fail(
                "spec.generation.targetValue",
                "must not be empty (omit it to target the newest generation)",
            );
            return None;
        }
        Some(v) => GenerationTarget::Value(v.clone()),
        None => GenerationTarget::Newest,
    };
    Some(Generation { source, target })
}

/// A `Reboot` or `Replace` hand-off needs a target generation and a label to mark nodes with.
fn check_hand_off(spec: &NodeRolloutSpec, check: &mut Check) {
    if spec.hand_off.mode == HandOffMode::None {
        return;
    }
    if spec.generation.is_none() {
        check.fail(
            "spec.handOff.mode",
            "Reboot and Replace wait for nodes at the target generation: set spec.generation",
        );
    }
    if spec.hand_off.label.is_empty() {
        check.fail("spec.handOff.label", "must name a node label");
    }
}

/// The spec's waits and timeouts, parsed (`None`: not set, or unusable and noted).
struct Timeouts {
    health_check_wait: Option<SignedDuration>,
    health_check_stable: Option<SignedDuration>,
    health_check_retry_timeout: Option<SignedDuration>,
    moves: MoveOptions,
    handoff: Option<SignedDuration>,
    domain: Option<SignedDuration>,
    drain: Option<SignedDuration>,
    rollout: Option<SignedDuration>,
}

fn timeouts(spec: &NodeRolloutSpec, check: &mut Check) -> Timeouts {
    let health_check_wait =
        check.duration("spec.healthCheckWait", spec.health_check_wait.as_deref());
    let health_check_stable = check.duration(
        "spec.healthCheckStable",
        spec.health_check_stable.as_deref(),
    );
    let health_check_retry_timeout = check.duration(
        "spec.healthCheckRetryTimeout",
        spec.health_check_retry_timeout.as_deref(),
    );
    let domain = check.duration("spec.domainTimeout", spec.domain_timeout.as_deref());
    let drain = match spec.drain_timeout.as_deref() {
        None => Some(DEFAULT_DRAIN_TIMEOUT),
        Some(v) => check
            .duration("spec.drainTimeout", Some(v))
            .filter(|d| !d.is_zero()),
    };
    let rollout = check.duration("spec.rolloutTimeout", spec.rollout_timeout.as_deref());
    let handoff = match spec.hand_off.timeout.as_deref() {
        None => Some(DEFAULT_HANDOFF_TIMEOUT),
        Some(v) => check
            .duration("spec.handOff.timeout", Some(v))
            .filter(|d| !d.is_zero()),
    };
    Timeouts {
        moves: move_options(spec, check),
        handoff,
        health_check_wait,
        health_check_stable,
        health_check_retry_timeout,
        domain,
        drain,
        rollout,
    }
}

/// `spec.rayServices`.
fn move_options(spec: &NodeRolloutSpec, check: &mut Check) -> MoveOptions {
    let r = &spec.ray_services;
    MoveOptions {
        enabled: r.r#move,
        interrupt_when_held: r.when_move_held == WhenMoveHeld::Interrupt,
        timeout: match r.move_timeout.as_deref() {
            None => Some(DEFAULT_MOVE_TIMEOUT),
            Some(v) => check
                .duration("spec.rayServices.moveTimeout", Some(v))
                .filter(|d| !d.is_zero()),
        },
    }
}

/// `spec.drain`: kubectl drain's flags.
fn drain_rules(spec: &NodeRolloutSpec) -> DrainRules {
    DrainRules {
        ignore_daemonsets: spec.drain.ignore_daemonsets,
        delete_emptydir_data: spec.drain.delete_emptydir_data,
        force: spec.drain.force,
        pod_selector: spec.drain.pod_selector.clone(),
        skip_wait_for_delete_timeout_seconds: spec
            .drain
            .skip_wait_for_delete_timeout_seconds
            .unsigned_abs(),
        grace_period_seconds: spec
            .drain
            .grace_period_seconds
            .and_then(super::rules::grace_period),
    }
}

fn node_info(field: NodeInfoFieldSpec) -> NodeInfoField {
    match field {
        NodeInfoFieldSpec::KubeletVersion => NodeInfoField::KubeletVersion,
        NodeInfoFieldSpec::OsImage => NodeInfoField::OsImage,
        NodeInfoFieldSpec::KernelVersion => NodeInfoField::KernelVersion,
        NodeInfoFieldSpec::ContainerRuntimeVersion => NodeInfoField::ContainerRuntimeVersion,
    }
}

fn domain_order(spec: &NodeRolloutSpec, check: &mut Check) -> DomainOrder {
    let listed = !spec.explicit_order.is_empty();
    match spec.domain_order {
        DomainOrderSpec::Explicit if !listed => {
            check.fail(
                "spec.explicitOrder",
                "domainOrder Explicit needs the upgrade domains in the order to drain them",
            );
        }
        DomainOrderSpec::Explicit => return DomainOrder::Explicit(spec.explicit_order.clone()),
        _ if listed => check.fail(
            "spec.explicitOrder",
            "is only read with domainOrder: Explicit",
        ),
        DomainOrderSpec::OldestGeneration if spec.generation.is_none() => check.fail(
            "spec.domainOrder",
            "OldestGeneration needs spec.generation (where a node's generation is read)",
        ),
        _ => {}
    }
    match spec.domain_order {
        DomainOrderSpec::FewestProtectedGroups => DomainOrder::FewestProtectedGroups,
        DomainOrderSpec::OldestGeneration => DomainOrder::OldestGeneration,
        DomainOrderSpec::Name | DomainOrderSpec::Explicit => DomainOrder::Name,
    }
}

/// The contracts `spec.groups` names (none when it is invalid: `check` says why).
fn contracts(groups: &GroupsSpec, check: &mut Check) -> Vec<GroupContract> {
    match groups.preset {
        GroupPreset::All => GroupContract::presets(),
        GroupPreset::LeaderWorkerSet => vec![GroupContract::leader_worker_set()],
        GroupPreset::KubeRay => vec![GroupContract::kuberay()],
        GroupPreset::Custom => {
            let label = groups.group_label.as_deref().unwrap_or_default();
            let representative = groups.representative.as_deref().unwrap_or_default();
            if label.is_empty() {
                check.fail(
                    "spec.groups.groupLabel",
                    "preset Custom needs the pod label naming a group",
                );
            }
            if representative.is_empty() {
                check.fail(
                    "spec.groups.representative",
                    "preset Custom needs a label query selecting each group's representative",
                );
            }
            check.query("spec.groups.representative", representative);
            (!label.is_empty() && !representative.is_empty())
                .then(|| GroupContract::custom(label, representative))
                .into_iter()
                .collect()
        }
    }
}

/// A `LabelSelector` as the label query the plan takes (`a=b,c in (x,y),!d`), after checking its
/// operators and values.
fn selector_query(selector: &LabelSelector, check: &mut Check) -> Option<String> {
    if let Err(e) = Selector::from_label_selector(selector, "spec.nodeSelector") {
        check.fail("spec.nodeSelector", e.to_string());
        return None;
    }
    let labels = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"));
    let expressions = selector.match_expressions.iter().flatten().map(|e| {
        let values = e.values.as_deref().unwrap_or_default().join(",");
        match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        }
    });
    Some(labels.chain(expressions).collect::<Vec<_>>().join(","))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    use super::*;
    use crate::types::rollout::{DrainFlags, GenerationSpec, RayServicesSpec};

    fn spec(value: serde_json::Value) -> NodeRolloutSpec {
        serde_json::from_value(value).unwrap()
    }

    fn fields(err: InvalidSpec) -> Vec<String> {
        err.0.into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn a_full_spec_maps_onto_the_plans_options_field_by_field() {
        let s = spec(json!({
            "nodeSelector": {"matchLabels": {"pool": "gpu"}},
            "generation": {"nodeInfo": "kubeletVersion", "targetValue": "v1.31.1"},
            "udLabel": "example.com/ud",
            "domainOrder": "Explicit", "explicitOrder": ["b", "a"],
            "taintOutdated": true,
            "handOff": {"mode": "Reboot"},
            "drain": {"ignoreDaemonsets": true, "deleteEmptydirData": true, "force": true,
                      "podSelector": "app!=agent", "skipWaitForDeleteTimeoutSeconds": 30,
                      "gracePeriodSeconds": 45},
            "groups": {"preset": "KubeRay"},
            "healthCheckWait": "30s", "healthCheckStable": "2m", "healthCheckRetryTimeout": "1h30m",
            "domainTimeout": "45m", "rolloutTimeout": "12h",
            "failureAction": "Abort", "maxUnavailableDomains": 2, "manual": true, "paused": true,
            "rayServices": {"move": false, "whenMoveHeld": "Interrupt", "moveTimeout": "5m"},
        }));
        let mut s = s;
        s.hand_off.timeout = Some("0".into());
        let o = rollout_options(&s).unwrap();
        assert_eq!(o.handoff_timeout, None, "0: no limit");
        assert_eq!(
            o.moves,
            MoveOptions {
                enabled: false,
                interrupt_when_held: true,
                timeout: Some(SignedDuration::from_mins(5)),
            }
        );
        assert_eq!(o.plan.domain_label, "example.com/ud");
        assert_eq!(o.plan.node_selector, "pool=gpu");
        assert_eq!(
            o.plan.generation,
            Some(Generation {
                source: GenerationSource::NodeInfo(NodeInfoField::KubeletVersion),
                target: GenerationTarget::Value("v1.31.1".into()),
            })
        );
        assert_eq!(
            o.plan.order,
            DomainOrder::Explicit(vec!["b".into(), "a".into()])
        );
        let taint = o.plan.taint.unwrap();
        assert_eq!(
            (taint.key.as_str(), taint.effect.as_str()),
            (OUTDATED_TAINT_KEY, "NoSchedule")
        );
        assert_eq!(
            o.plan.rules,
            DrainRules {
                ignore_daemonsets: true,
                delete_emptydir_data: true,
                force: true,
                pod_selector: "app!=agent".into(),
                skip_wait_for_delete_timeout_seconds: 30,
                grace_period_seconds: Some(45),
            }
        );
        assert_eq!(
            o.plan.groups,
            crate::drain::GroupLabels::of_labels(&[super::super::preflight::KUBERAY_REPLICA_NAME])
        );
        assert_eq!(o.preflight.unwrap().contracts, [GroupContract::kuberay()]);
        assert_eq!(o.health_check_wait, SignedDuration::from_secs(30));
        assert_eq!(o.health_check_stable, Some(SignedDuration::from_secs(120)));
        assert_eq!(
            o.health_check_retry_timeout,
            SignedDuration::from_secs(5400)
        );
        assert_eq!(o.domain_timeout, Some(SignedDuration::from_mins(45)));
        assert_eq!(o.rollout_timeout, Some(SignedDuration::from_hours(12)));
        assert_eq!(o.failure_action, FailureActionSpec::Abort);
        assert_eq!(o.max_unavailable_domains, 2);
        assert!(o.manual && o.paused);
        assert!(!o.taint_auto);
        assert_eq!(o.hand_off.mode, HandOffMode::Reboot);
        assert_eq!(o.hand_off.label, "raygate.io/upgrade");
    }

    #[test]
    fn groups_without_a_preset_recognise_every_preset_s_groups() {
        use crate::drain::{GroupLabel, KUBERAY_REPLICA_NAME, LWS_GROUP_KEY};
        let o = rollout_options(&spec(json!({"nodeSelector": {}, "groups": {}}))).unwrap();
        assert_eq!(o.preflight.unwrap().contracts, GroupContract::presets());
        let kinds: Vec<&GroupLabel> = o.plan.groups.iter().collect();
        assert_eq!(
            kinds,
            [
                &GroupLabel::new(LWS_GROUP_KEY),
                &GroupLabel::new(KUBERAY_REPLICA_NAME)
            ]
        );
        let lws = spec(json!({"nodeSelector": {}, "groups": {"preset": "LeaderWorkerSet"}}));
        let o = rollout_options(&lws).unwrap();
        assert_eq!(
            o.plan.groups,
            crate::drain::GroupLabels::of_labels(&[LWS_GROUP_KEY])
        );
    }

    #[test]
    fn defaults_are_one_domain_at_a_time_pausing_on_failure_with_sf_s_retry_timeout() {
        let s = spec(json!({"nodeSelector": {}}));
        let o = rollout_options(&s).unwrap();
        assert_eq!(o.plan.domain_label, "raygate.io/upgrade-domain");
        assert_eq!(o.plan.node_selector, "");
        assert_eq!(o.plan.generation, None);
        assert_eq!(o.plan.order, DomainOrder::Name);
        assert_eq!(o.plan.taint, None);
        assert!(
            o.taint_auto,
            "absent: decided by the room check at planning"
        );
        assert_eq!(o.plan.rules, DrainRules::default());
        assert_eq!(o.preflight, None);
        assert_eq!(o.health_check_wait, SignedDuration::ZERO);
        assert_eq!(o.health_check_stable, None);
        assert_eq!(o.health_check_retry_timeout, SignedDuration::from_mins(10));
        assert_eq!((o.domain_timeout, o.rollout_timeout), (None, None));
        assert_eq!(o.drain_timeout, Some(SignedDuration::from_mins(30)));
        assert_eq!(o.moves, MoveOptions::default(), "move, wait, 20m");
        assert_eq!(o.handoff_timeout, Some(SignedDuration::from_hours(1)));
        assert_eq!(o.moves.timeout, Some(SignedDuration::from_mins(20)));
        let no_limit = spec(json!({"nodeSelector": {}, "rayServices": {"moveTimeout": "0"}}));
        assert_eq!(rollout_options(&no_limit).unwrap().moves.timeout, None);
        let unlimited = spec(json!({"nodeSelector": {}, "drainTimeout": "0"}));
        assert_eq!(rollout_options(&unlimited).unwrap().drain_timeout, None);
        assert_eq!(o.failure_action, FailureActionSpec::Pause);
        assert_eq!(o.max_unavailable_domains, 1);
        assert_eq!(o.hand_off.mode, HandOffMode::None);
        // the newest generation when no value is named
        // kubectl's --grace-period=-1: the pod's own grace period (none sent)
        let s = spec(json!({"nodeSelector": {}, "drain": {"gracePeriodSeconds": -1}}));
        assert_eq!(
            rollout_options(&s).unwrap().plan.rules.grace_period_seconds,
            None
        );
        let s = spec(json!({"nodeSelector": {}, "drain": {"gracePeriodSeconds": 0}}));
        assert_eq!(
            rollout_options(&s).unwrap().plan.rules.grace_period_seconds,
            Some(0)
        );
        let s = spec(json!({"generation": {"label": "gen"}}));
        let g = rollout_options(&s).unwrap().plan.generation.unwrap();
        assert_eq!(g.source, GenerationSource::Label("gen".into()));
        assert_eq!(g.target, GenerationTarget::Newest);
    }

    #[test]
    fn every_bad_field_is_reported_at_once_by_its_path() {
        let s = NodeRolloutSpec {
            node_selector: None,
            generation: Some(GenerationSpec {
                label: Some("gen".into()),
                node_info: Some(NodeInfoFieldSpec::OsImage),
                target_value: None,
            }),
            ud_label: String::new(),
            domain_order: DomainOrderSpec::Explicit,
            drain: DrainFlags {
                pod_selector: "app in (a".into(),
                skip_wait_for_delete_timeout_seconds: -1,
                ..DrainFlags::default()
            },
            groups: Some(GroupsSpec {
                preset: GroupPreset::Custom,
                group_label: Some("group".into()),
                representative: None,
            }),
            health_check_wait: Some("30 seconds".into()),
            health_check_stable: Some("-5s".into()),
            max_unavailable_domains: 0,
            ray_services: RayServicesSpec {
                move_timeout: Some("5 minutes".into()),
                ..RayServicesSpec::default()
            },
            ..spec(json!({"nodeSelector": {}}))
        };
        let err = rollout_options(&s).unwrap_err();
        assert_eq!(
            fields(err.clone()),
            [
                "spec.udLabel",
                "spec.generation",
                "spec.explicitOrder",
                "spec.drain.podSelector",
                "spec.drain.skipWaitForDeleteTimeoutSeconds",
                "spec.groups.representative",
                "spec.healthCheckWait",
                "spec.healthCheckStable",
                "spec.rayServices.moveTimeout",
                "spec.maxUnavailableDomains",
            ]
        );
        let text = err.to_string();
        assert!(
            text.contains("spec.healthCheckWait: \"30 seconds\" is not a duration"),
            "{text}"
        );
        assert!(
            text.contains("spec.healthCheckStable: \"-5s\" is negative"),
            "{text}"
        );
        assert!(
            text.contains("spec.maxUnavailableDomains: 0 is less than 1"),
            "{text}"
        );
    }

    #[test]
    fn cross_field_rules_name_the_field_to_change() {
        let bad = |v: serde_json::Value| fields(rollout_options(&spec(v)).unwrap_err());
        assert_eq!(bad(json!({})), ["spec"]);
        assert_eq!(
            bad(json!({"nodeSelector": {}, "domainOrder": "OldestGeneration"})),
            ["spec.domainOrder"]
        );
        assert_eq!(
            bad(json!({"nodeSelector": {}, "explicitOrder": ["a"]})),
            ["spec.explicitOrder"]
        );
        assert_eq!(
            bad(json!({"nodeSelector": {}, "handOff": {"mode": "Replace"}})),
            ["spec.handOff.mode"]
        );
        assert_eq!(
            bad(
                json!({"generation": {"label": "gen"}, "handOff": {"mode": "Reboot", "label": ""}})
            ),
            ["spec.handOff.label"]
        );
        assert_eq!(
            bad(json!({"generation": {"label": "gen", "targetValue": ""}})),
            ["spec.generation.targetValue"]
        );
        assert_eq!(
            bad(json!({"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}})),
            ["spec.nodeSelector"]
        );
    }

    #[test]
    fn a_node_selector_becomes_a_query_selecting_the_same_nodes() {
        let requirement = |key: &str, operator: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        };
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("pool".to_string(), "gpu".to_string())])),
            match_expressions: Some(vec![
                requirement("zone", "In", &["a", "b"]),
                requirement("gen", "NotIn", &["old"]),
                requirement("ud", "Exists", &[]),
                requirement("drained", "DoesNotExist", &[]),
            ]),
        };
        let mut check = Check::default();
        let query = selector_query(&selector, &mut check).unwrap();
        assert!(check.0.is_empty());
        assert_eq!(query, "pool=gpu,zone in (a,b),gen notin (old),ud,!drained");
        let structured = Selector::from_label_selector(&selector, "s").unwrap();
        let parsed = Selector::parse_query(&query).unwrap();
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        for set in [
            labels(&[("pool", "gpu"), ("zone", "a"), ("ud", "1")]),
            labels(&[("pool", "gpu"), ("zone", "b"), ("ud", "1"), ("gen", "new")]),
            labels(&[("pool", "gpu"), ("zone", "b"), ("ud", "1"), ("gen", "old")]),
            labels(&[("pool", "gpu"), ("zone", "c"), ("ud", "1")]),
            labels(&[("pool", "gpu"), ("zone", "a")]),
            labels(&[("pool", "gpu"), ("zone", "a"), ("ud", "1"), ("drained", "")]),
            labels(&[("pool", "cpu"), ("zone", "a"), ("ud", "1")]),
        ] {
            assert_eq!(
                parsed.matches(Some(&set)),
                structured.matches(Some(&set)),
                "{set:?}"
            );
        }
        assert!(parsed.matches(Some(&labels(&[
            ("pool", "gpu"),
            ("zone", "a"),
            ("ud", "1")
        ]))));
    }

    #[test]
    fn durations_take_go_s_syntax() {
        assert_eq!(parse_duration("0"), Ok(SignedDuration::ZERO));
        assert_eq!(parse_duration("1h30m"), Ok(SignedDuration::from_secs(5400)));
        assert_eq!(
            parse_duration("1.5s"),
            Ok(SignedDuration::from_millis(1500))
        );
        assert_eq!(
            parse_duration("250ms"),
            Ok(SignedDuration::from_millis(250))
        );
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("30 s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }
}
