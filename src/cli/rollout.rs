//! `raygate drain run` without `--local` (pure half): the flags become a `NodeRollout` spec the
//! controller runs, and its status one line for the operator. The IO half (create, follow, pause
//! on Ctrl-C) is [`crate::client::rollout`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::drain::rollout as pure;
use crate::types::rollout::{
    DrainFlags, FailureActionSpec, GenerationSpec, GroupPreset, GroupsSpec, HandOffMode,
    HandOffSpec, NodeRolloutSpec, NodeRolloutStatus,
};

/// What `drain run` was asked for, as the NodeRollout's spec takes it.
#[derive(Clone, Debug, Default)]
pub struct RolloutRequest {
    pub domain_label: String,
    /// kubectl's `--selector` (a label query; "" = every node).
    pub selector: String,
    /// The pod labels naming groups: the presets' (LeaderWorkerSet's group key, KubeRay's
    /// replica name) or one other.
    pub group_label: Vec<String>,
    /// With a `group_label` other than a preset's: the label query picking a group's
    /// representative.
    pub representative: Option<String>,
    pub generation_label: Option<String>,
    pub generation_target: Option<String>,
    pub handoff: HandOffMode,
    pub health_check_wait_seconds: i64,
    pub health_check_stable_seconds: Option<i64>,
    pub health_check_retry_timeout_seconds: i64,
    pub domain_timeout_seconds: Option<i64>,
    pub rollout_timeout_seconds: Option<i64>,
    pub failure_action: FailureActionSpec,
    pub max_unavailable_domains: usize,
    pub manual: bool,
    pub ignore_daemonsets: bool,
    pub delete_emptydir_data: bool,
    pub force: bool,
    /// kubectl's `--grace-period` (`None`: each pod's own).
    pub grace_period_seconds: Option<i64>,
}

impl RolloutRequest {
    /// The NodeRollout spec; an error names the flag.
    pub fn spec(&self) -> Result<NodeRolloutSpec, String> {
        let secs = |s: i64| format!("{s}s");
        let groups = self.groups()?;
        Ok(NodeRolloutSpec {
            node_selector: Some(label_selector(&self.selector)?),
            generation: self.generation_label.as_ref().map(|k| GenerationSpec {
                label: Some(k.clone()),
                node_info: None,
                target_value: self.generation_target.clone(),
            }),
            ud_label: self.domain_label.clone(),
            hand_off: HandOffSpec {
                mode: self.handoff,
                ..HandOffSpec::default()
            },
            drain: DrainFlags {
                ignore_daemonsets: self.ignore_daemonsets,
                delete_emptydir_data: self.delete_emptydir_data,
                force: self.force,
                grace_period_seconds: self.grace_period_seconds.filter(|s| *s >= 0),
                ..DrainFlags::default()
            },
            groups,
            health_check_wait: Some(secs(self.health_check_wait_seconds)),
            health_check_stable: self.health_check_stable_seconds.map(secs),
            health_check_retry_timeout: Some(secs(self.health_check_retry_timeout_seconds)),
            domain_timeout: self.domain_timeout_seconds.map(secs),
            rollout_timeout: self.rollout_timeout_seconds.map(secs),
            failure_action: self.failure_action,
            max_unavailable_domains: i32::try_from(self.max_unavailable_domains)
                .map_err(|_| "--max-unavailable-domains is too large".to_string())?,
            manual: self.manual,
            ..NodeRolloutSpec::default()
        })
    }

    /// `spec.groups` from the group labels: the presets' labels (one preset, or `All` for
    /// both), or one other label with its representative (`Custom`).
    fn groups(&self) -> Result<Option<GroupsSpec>, String> {
        use crate::drain::{KUBERAY_REPLICA_NAME, LWS_GROUP_KEY};
        let preset = |preset| {
            Ok(Some(GroupsSpec {
                preset,
                ..GroupsSpec::default()
            }))
        };
        let labels: Vec<&str> = self.group_label.iter().map(String::as_str).collect();
        let custom: Vec<&str> = labels
            .iter()
            .copied()
            .filter(|l| ![LWS_GROUP_KEY, KUBERAY_REPLICA_NAME].contains(l))
            .collect();
        match (&labels[..], &custom[..], &self.representative) {
            ([], _, _) => Ok(None),
            ([LWS_GROUP_KEY], [], _) => preset(GroupPreset::LeaderWorkerSet),
            ([KUBERAY_REPLICA_NAME], [], _) => preset(GroupPreset::KubeRay),
            (_, [], _) => preset(GroupPreset::All),
            ([k], [_], Some(r)) => Ok(Some(GroupsSpec {
                preset: GroupPreset::Custom,
                group_label: Some(k.to_string()),
                representative: Some(r.clone()),
            })),
            ([k], [_], None) => Err(format!(
                "--group-label {k} needs --representative QUERY (the label query picking a \
                 group's representative) for a NodeRollout"
            )),
            (_, _, _) => Err(format!(
                "--group-label {}: a NodeRollout takes the presets' group labels ({LWS_GROUP_KEY}, \
                 {KUBERAY_REPLICA_NAME}) or one other label, not both",
                labels.join(",")
            )),
        }
    }
}

/// A label query (`a=b,c!=d,e in (f,g),h,!i`) as a `LabelSelector`.
pub fn label_selector(query: &str) -> Result<LabelSelector, String> {
    crate::labels::Selector::parse_query(query)
        .map_err(|e| format!("--selector {query:?}: {e}"))?;
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in query.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&query[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&query[start..]);
    let mut out = LabelSelector::default();
    let req = |key: &str, operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
        key: key.trim().to_string(),
        operator: operator.to_string(),
        values,
    };
    let list = |v: &str| {
        v.trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .map(|s| s.trim().to_string())
            .collect::<Vec<_>>()
    };
    let mut exprs = Vec::new();
    for t in terms.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        if let Some((k, v)) = t.split_once(" notin ") {
            exprs.push(req(k, "NotIn", Some(list(v))));
        } else if let Some((k, v)) = t.split_once(" in ") {
            exprs.push(req(k, "In", Some(list(v))));
        } else if let Some((k, v)) = t.split_once("!=") {
            exprs.push(req(k, "NotIn", Some(vec![v.trim().to_string()])));
        } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
            out.match_labels
                .get_or_insert_with(Default::default)
                .insert(k.trim().to_string(), v.trim().to_string());
        } else if let Some(k) = t.strip_prefix('!') {
            exprs.push(req(k, "DoesNotExist", None));
        } else {
            exprs.push(req(t, "Exists", None));
        }
    }
    if !exprs.is_empty() {
        out.match_expressions = Some(exprs);
    }
    Ok(out)
}

/// How following a rollout ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    Completed,
    Failed(String),
    /// The controller cannot run it (a bad spec, a plan the cluster does not allow).
    BadInput(String),
    /// Ctrl-C: the rollout was paused.
    Interrupted,
}

impl Ended {
    /// `drain run`'s exit codes: 0 completed, 1 failed, 2 bad options, 130 interrupted.
    pub fn exit_code(&self) -> u8 {
        match self {
            Ended::Completed => 0,
            Ended::Failed(_) => 1,
            Ended::BadInput(_) => 2,
            Ended::Interrupted => 130,
        }
    }
}

/// One line for a status: phase, progress, current domain and why it waits.
pub fn line(s: &NodeRolloutStatus) -> String {
    let phase = s.phase.as_deref().unwrap_or(pure::PENDING);
    let progress = s.progress.as_deref().unwrap_or("-");
    let why = [pure::BLOCKED, pure::PROGRESSING, pure::READY]
        .iter()
        .filter_map(|t| crate::conditions::find(&s.conditions, t))
        .find(|c| {
            (c.type_ == pure::BLOCKED && c.status == "True")
                || (c.type_ != pure::BLOCKED && !c.message.is_empty())
        })
        .map(|c| c.message.clone())
        .unwrap_or_default();
    match &s.current_domain {
        Some(d) => format!("{phase} {progress} domain {d}: {why}"),
        None => format!("{phase} {progress}: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_query_becomes_the_selector_kubectl_means() {
        let s = label_selector("pool=gpu,zone in (a, b),tier!=web,spot,!drain").unwrap();
        assert_eq!(
            s.match_labels.unwrap().get("pool").map(String::as_str),
            Some("gpu")
        );
        let e: Vec<(String, String, Option<Vec<String>>)> = s
            .match_expressions
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.operator, r.values))
            .collect();
        assert_eq!(
            e,
            vec![
                (
                    "zone".into(),
                    "In".into(),
                    Some(vec!["a".into(), "b".into()])
                ),
                ("tier".into(), "NotIn".into(), Some(vec!["web".into()])),
                ("spot".into(), "Exists".into(), None),
                ("drain".into(), "DoesNotExist".into(), None),
            ]
        );
        assert_eq!(label_selector("").unwrap(), LabelSelector::default());
        assert!(label_selector("a in (").is_err());
    }

    /// `--grace-period` as the spec's `drain.gracePeriodSeconds`.
    fn spec_grace(r: &RolloutRequest, seconds: Option<i64>) -> Option<i64> {
        let r = RolloutRequest {
            grace_period_seconds: seconds,
            ..r.clone()
        };
        r.spec().unwrap().drain.grace_period_seconds
    }

    #[test]
    fn the_flags_become_a_spec_and_a_custom_group_needs_its_representative() {
        let r = RolloutRequest {
            domain_label: "ud".into(),
            selector: "pool=old".into(),
            group_label: vec!["leaderworkerset.sigs.k8s.io/group-key".into()],
            health_check_stable_seconds: Some(30),
            health_check_retry_timeout_seconds: 600,
            max_unavailable_domains: 1,
            ..RolloutRequest::default()
        };
        let spec = r.spec().unwrap();
        assert_eq!(spec.groups.unwrap().preset, GroupPreset::LeaderWorkerSet);
        assert_eq!(spec.health_check_stable.as_deref(), Some("30s"));
        assert_eq!(spec.health_check_retry_timeout.as_deref(), Some("600s"));
        assert!(crate::drain::rollout_options(&r.spec().unwrap()).is_ok());
        assert_eq!(spec_grace(&r, None), None, "the pod's own grace period");
        assert_eq!(
            spec_grace(&r, Some(-1)),
            None,
            "kubectl's -1: the pod's own"
        );
        assert_eq!(spec_grace(&r, Some(90)), Some(90));
        let custom = RolloutRequest {
            group_label: vec!["group".into()],
            ..r.clone()
        };
        assert!(custom.spec().unwrap_err().contains("--representative"));
    }

    #[test]
    fn group_labels_become_a_preset_all_or_one_custom_label() {
        use crate::drain::{KUBERAY_REPLICA_NAME, LWS_GROUP_KEY};
        let preset = |labels: &[&str], representative: Option<&str>| {
            let r = RolloutRequest {
                group_label: labels.iter().map(|l| l.to_string()).collect(),
                representative: representative.map(str::to_string),
                ..RolloutRequest::default()
            };
            r.groups().map(|g| g.map(|g| g.preset))
        };
        assert_eq!(preset(&[], None), Ok(None));
        let lws = Some(GroupPreset::LeaderWorkerSet);
        assert_eq!(preset(&[LWS_GROUP_KEY], None), Ok(lws));
        let ray = Some(GroupPreset::KubeRay);
        assert_eq!(preset(&[KUBERAY_REPLICA_NAME], None), Ok(ray));
        let both = [KUBERAY_REPLICA_NAME, LWS_GROUP_KEY];
        assert_eq!(preset(&both, None), Ok(Some(GroupPreset::All)));
        let custom = Some(GroupPreset::Custom);
        assert_eq!(preset(&["group"], Some("role=leader")), Ok(custom));
        let mixed = preset(&[LWS_GROUP_KEY, "group"], Some("role=leader")).unwrap_err();
        assert!(mixed.contains("or one other label, not both"), "{mixed}");
    }
}
