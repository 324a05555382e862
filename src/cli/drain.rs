//! `raygate drain plan` and `raygate drain check`: the flags (kubectl drain's names where kubectl
//! has the flag), their mapping onto the pure plan's options, and the tables. Reading the cluster
//! is [`crate::client::live::drain_objects`]; this part is pure.

use std::collections::BTreeMap;

use serde::Serialize;

use super::status::columns;
use crate::drain::engine::Handoff;
use crate::drain::{
    CapacityCheck, DeadEnd, DomainOrder, DomainPlan, DrainRules, Exposure, Finding, Generation,
    GenerationSource, GenerationTarget, GroupContract, GroupLabels, HealthDeadEnd, NodeInfoField,
    Plan, PlanOptions, PreflightOptions, Returns, SkipReason,
};
use crate::types::rollout::{DEFAULT_UPGRADE_DOMAIN_LABEL, HandOffMode};

/// Exit codes of `raygate drain plan|check`.
pub mod exit {
    /// The plan has no blocked pod / the contract holds.
    pub const OK: u8 = 0;
    /// `plan`: a pod blocks a domain's drain, or a domain's groups have no room to recover;
    /// `check`: the contract is broken or a domain has no room to recover (findings).
    pub const PROBLEMS: u8 = 1;
    /// The flags or the cluster's objects make no plan (unknown UD label, no node matched...).
    pub const BAD_INPUT: u8 = 2;
    /// The cluster could not be read (kubeconfig, connection, permissions).
    pub const UNREADABLE: u8 = 3;
}

/// Which domain order (`--order`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    Name,
    FewestProtectedGroups,
    OldestGeneration,
    /// The order of `--domains`.
    Explicit,
}

/// A `status.nodeInfo` field (`--generation-node-info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeInfo {
    KubeletVersion,
    OsImage,
    KernelVersion,
    ContainerRuntimeVersion,
}

/// How groups are recognised (`--groups`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Groups {
    /// Both presets: LeaderWorkerSet groups and KubeRay multi-host replicas, each pod by the
    /// group label it carries.
    All,
    /// LeaderWorkerSet: `leaderworkerset.sigs.k8s.io/group-key`, the leader represents.
    Lws,
    /// KubeRay multi-host replicas: `ray.io/worker-group-replica-name`, host 0 represents.
    Kuberay,
    /// `--group-label` and `--representative`.
    Custom,
}

/// What becomes of a drained domain's nodes (`--handoff`, as `drain run`'s): whether their
/// room counts for the later domains' groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum HandoffMode {
    /// The drained nodes stay cordoned.
    #[default]
    None,
    Reboot,
    Replace,
}

impl HandoffMode {
    /// Whether the drained nodes come back for the later domains' groups.
    pub fn returns(self) -> Returns {
        Handoff::of(self.into(), Default::default()).returns()
    }
}

impl From<HandoffMode> for HandOffMode {
    fn from(mode: HandoffMode) -> HandOffMode {
        match mode {
            HandoffMode::None => HandOffMode::None,
            HandoffMode::Reboot => HandOffMode::Reboot,
            HandoffMode::Replace => HandOffMode::Replace,
        }
    }
}

/// What to drain: the flags `plan` and `check` share (kubectl drain's names for its pod flags).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct TargetFlags {
    /// Node label naming a node's upgrade domain.
    #[arg(long, default_value = DEFAULT_UPGRADE_DOMAIN_LABEL)]
    pub ud_label: String,
    /// Selector (label query) to filter nodes, as kubectl drain's.
    #[arg(short = 'l', long, default_value = "")]
    pub selector: String,
}

/// `raygate drain plan`'s flags.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct PlanFlags {
    #[command(flatten)]
    pub target: TargetFlags,
    /// Drain only outdated nodes: their generation is this node label's value.
    #[arg(long, conflicts_with = "generation_node_info")]
    pub generation_label: Option<String>,
    /// Drain only outdated nodes: their generation is this status.nodeInfo field.
    #[arg(long, value_enum)]
    pub generation_node_info: Option<NodeInfo>,
    /// The current generation (with a generation flag); default: the newest among the
    /// selected nodes.
    #[arg(long)]
    pub target_generation: Option<String>,
    /// The order in which domains are drained.
    #[arg(long, value_enum, default_value = "name")]
    pub order: Order,
    /// With `--order explicit`: every domain to drain, in order (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub domains: Vec<String>,
    /// Taint each target node raygate.io/outdated:NoSchedule (then the domains whose groups
    /// would have no room to recover are reported).
    #[arg(long)]
    pub taint_outdated: bool,
    /// The drain's hand-off (with --taint-outdated: whether drained domains take the later
    /// domains' groups; none, with --group-label: the domains whose health check cannot pass
    /// for want of room are reported).
    #[arg(long, value_enum, default_value = "none")]
    pub handoff: HandoffMode,
    /// Pod label naming a group, to count protected groups per domain (default: each
    /// protected pod counts); with --handoff none, the groups the health check waits for.
    /// Repeat it (or separate by commas) for several kinds of groups: a pod belongs to the
    /// group of the first label it carries.
    #[arg(long, value_delimiter = ',')]
    pub group_label: Vec<String>,
    /// Ignore DaemonSet-managed pods (kubectl drain's flag).
    #[arg(long)]
    pub ignore_daemonsets: bool,
    /// Evict pods using emptyDir (kubectl drain's flag; their data is lost).
    #[arg(long)]
    pub delete_emptydir_data: bool,
    /// Evict pods that declare no controller (kubectl drain's flag).
    #[arg(long)]
    pub force: bool,
    /// Label selector to filter pods on the nodes (kubectl drain's flag).
    #[arg(long, default_value = "")]
    pub pod_selector: String,
    /// Skip pods deleting for longer than this many seconds (kubectl drain's flag; 0: never).
    #[arg(long, default_value_t = 0)]
    pub skip_wait_for_delete_timeout: u64,
}

/// `raygate drain check`'s flags.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct CheckFlags {
    /// Node label naming a node's upgrade domain.
    #[arg(long, default_value = DEFAULT_UPGRADE_DOMAIN_LABEL)]
    pub ud_label: String,
    /// How groups and their representatives are recognised.
    #[arg(long, value_enum, default_value = "all")]
    pub groups: Groups,
    /// With `--groups custom`: the pod label naming a group.
    #[arg(long)]
    pub group_label: Option<String>,
    /// With `--groups custom`: a label query selecting each group's representative.
    #[arg(long)]
    pub representative: Option<String>,
    /// Also check the room to recover of a drain that taints the outdated nodes
    /// (raygate.io/outdated:NoSchedule): a domain whose groups would have nowhere to run is a
    /// finding.
    #[arg(long)]
    pub taint_outdated: bool,
    /// With --taint-outdated: the nodes to drain (a label query, as kubectl drain's).
    #[arg(short = 'l', long, default_value = "")]
    pub selector: String,
    /// The drain's hand-off: given (or with --taint-outdated, default none), the room to recover
    /// is checked too; with none, a domain whose health check cannot pass for want of room outside
    /// the drained domains is a finding.
    #[arg(long, value_enum)]
    pub handoff: Option<HandoffMode>,
}

impl PlanFlags {
    /// The plan's options; an error names the flag.
    pub fn options(&self) -> Result<PlanOptions, String> {
        let source = match (&self.generation_label, self.generation_node_info) {
            (Some(label), _) => Some(GenerationSource::Label(label.clone())),
            (None, Some(field)) => Some(GenerationSource::NodeInfo(match field {
                NodeInfo::KubeletVersion => NodeInfoField::KubeletVersion,
                NodeInfo::OsImage => NodeInfoField::OsImage,
                NodeInfo::KernelVersion => NodeInfoField::KernelVersion,
                NodeInfo::ContainerRuntimeVersion => NodeInfoField::ContainerRuntimeVersion,
            })),
            (None, None) => None,
        };
        if source.is_none() && self.target_generation.is_some() {
            return Err(
                "--target-generation needs --generation-label or --generation-node-info".into(),
            );
        }
        let generation = source.map(|source| Generation {
            source,
            target: match &self.target_generation {
                Some(v) => GenerationTarget::Value(v.clone()),
                None => GenerationTarget::Newest,
            },
        });
        let order = match self.order {
            Order::Explicit if self.domains.is_empty() => {
                return Err("--order explicit needs --domains (every domain, in order)".into());
            }
            Order::Explicit => DomainOrder::Explicit(self.domains.clone()),
            _ if !self.domains.is_empty() => {
                return Err("--domains is only read with --order explicit".into());
            }
            Order::Name => DomainOrder::Name,
            Order::FewestProtectedGroups => DomainOrder::FewestProtectedGroups,
            Order::OldestGeneration => DomainOrder::OldestGeneration,
        };
        Ok(PlanOptions {
            domain_label: self.target.ud_label.clone(),
            node_selector: self.target.selector.clone(),
            generation,
            order,
            taint: self.taint_outdated.then(crate::drain::outdated_taint),
            groups: GroupLabels::of_labels(&self.group_label),
            rules: DrainRules {
                ignore_daemonsets: self.ignore_daemonsets,
                delete_emptydir_data: self.delete_emptydir_data,
                force: self.force,
                pod_selector: self.pod_selector.clone(),
                skip_wait_for_delete_timeout_seconds: self.skip_wait_for_delete_timeout,
                // how pods terminate is no part of a plan
                grace_period_seconds: None,
            },
        })
    }
}

impl CheckFlags {
    /// The preflight's options; an error names the flag.
    pub fn options(&self) -> Result<PreflightOptions, String> {
        let contracts = match self.groups {
            Groups::All => GroupContract::presets(),
            Groups::Lws => vec![GroupContract::leader_worker_set()],
            Groups::Kuberay => vec![GroupContract::kuberay()],
            Groups::Custom => match (&self.group_label, &self.representative) {
                (Some(label), Some(rep)) => vec![GroupContract::custom(label, rep)],
                _ => {
                    return Err("--groups custom needs --group-label and --representative".into());
                }
            },
        };
        Ok(PreflightOptions {
            domain_label: self.ud_label.clone(),
            contracts,
        })
    }

    /// With `--taint-outdated` or `--handoff`: the plan whose room to recover is checked
    /// (groups by the contract's group label).
    pub fn plan_options(&self, preflight: &PreflightOptions) -> Option<PlanOptions> {
        (self.taint_outdated || self.handoff.is_some()).then(|| PlanOptions {
            domain_label: self.ud_label.clone(),
            node_selector: self.selector.clone(),
            taint: self.taint_outdated.then(crate::drain::outdated_taint),
            groups: preflight.group_labels(),
            ..PlanOptions::default()
        })
    }

    /// The hand-off the room check assumes (`--handoff`, default none).
    pub fn returns(&self) -> Returns {
        self.handoff.unwrap_or(HandoffMode::None).returns()
    }
}

/// `raygate drain plan`'s output: the plan and the domains that cannot finish for want of room
/// (`deadEnds`, [`crate::drain::dead_ends`]) or whose health check cannot pass for want of room
/// (`healthDeadEnds`, [`crate::drain::health_dead_ends`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport<'a> {
    #[serde(flatten)]
    pub plan: Plan<'a>,
    pub dead_ends: Vec<DeadEnd>,
    pub health_dead_ends: Vec<HealthDeadEnd>,
    /// Workloads whose whole serving capacity one domain's drain takes, unprotected
    /// ([`crate::drain::exposures`]): warnings, not errors.
    pub exposed: Vec<Exposure>,
}

impl PlanReport<'_> {
    /// [`exit::PROBLEMS`] when a pod blocks some domain or a domain has no room to recover.
    pub fn exit_code(&self) -> u8 {
        match self.dead_ends.is_empty() && self.health_dead_ends.is_empty() {
            true => plan_exit_code(&self.plan),
            false => exit::PROBLEMS,
        }
    }
}

/// The plan's table, then each domain without room to recover (the controller's
/// `NoRoomToRecover` text: domain, budget, groups, room, the fixes).
/// The nodes a plan drains, domain by domain.
fn node_names(plan: &Plan) -> Vec<String> {
    plan.domains
        .iter()
        .flat_map(|d| &d.nodes)
        .map(|n| super::object_name("node", &n.name))
        .collect()
}

impl super::View for PlanReport<'_> {
    fn table(&self) -> String {
        plan_report_table(self)
    }

    /// The nodes drained, in order.
    fn names(&self) -> Vec<String> {
        node_names(&self.plan)
    }
}

impl super::View for Plan<'_> {
    fn table(&self) -> String {
        plan_table(self)
    }

    /// The nodes drained, in order.
    fn names(&self) -> Vec<String> {
        node_names(self)
    }
}

impl super::View for CheckReport {
    fn table(&self) -> String {
        check_table(self)
    }

    /// The objects at fault (a Pod or a PodDisruptionBudget; a group is no object), each once.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .findings
            .iter()
            .filter_map(|f| {
                let (kind, key) = f.object.split_once(' ')?;
                let kind_group = match kind {
                    "Pod" => "pod",
                    "PodDisruptionBudget" => "poddisruptionbudget.policy",
                    _ => return None,
                };
                Some(super::object_name(kind_group, key))
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        names.retain(|n| seen.insert(n.clone()));
        names
    }
}

pub fn plan_report_table(report: &PlanReport) -> String {
    let mut out = plan_table(&report.plan);
    if !report.dead_ends.is_empty() {
        out.push_str(&format!(
            "
no room to recover: {} domain(s) cannot be drained, their groups would have \
             nowhere to run:\n",
            report.dead_ends.len()
        ));
        for d in &report.dead_ends {
            out.push_str(&format!(
                "  domain {}: {}\n    fix: {}\n",
                d.domain,
                d.problem(),
                d.fix()
            ));
        }
    }
    if !report.health_dead_ends.is_empty() {
        out.push_str(&format!(
            "\nno room for the health check: {} domain(s) would fail their health check, their \
             groups would have nowhere to run again:\n",
            report.health_dead_ends.len()
        ));
        for d in &report.health_dead_ends {
            out.push_str(&format!(
                "  domain {}: {}\n    fix: {}\n",
                d.domain,
                d.problem(),
                d.fix()
            ));
        }
    }
    out.push_str(&exposed_lines(&report.exposed));
    out
}

/// The serving-at-risk warning lines (empty without exposures).
fn exposed_lines(exposed: &[Exposure]) -> String {
    if exposed.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\nserving at risk: {} workload(s) stop serving while a domain drains (every serving pod \
         in that domain, no budget keeping one running):\n",
        exposed.len()
    );
    for e in exposed {
        out.push_str(&format!("  {e}\n"));
    }
    out.push_str(
        "  fix: spread the pods over domains (topology spread constraints on the domain label), \
         or add a PodDisruptionBudget that keeps one running (e.g. maxUnavailable: 1 with 2 \
         replicas)\n",
    );
    out
}

/// `drain run --local`'s room check: the refusal (the controller's `NoRoomToRecover` text) when a
/// domain has no room to recover (`dead`) or no room for its health check (`gate`), unless `skip`
/// (`--skip-room-check`).
pub fn capacity_check(found: &CapacityCheck, skip: bool) -> Result<(), String> {
    let start_anyway =
        "to start anyway (e.g. an autoscaler adds nodes for pending pods), pass --skip-room-check";
    found.refusal(skip, start_anyway).map_or(Ok(()), Err)
}

/// What `raygate drain check` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    pub nodes: usize,
    pub pods: usize,
    pub findings: Vec<Finding>,
    /// With `--taint-outdated`: the domains whose groups would have no room to recover (error
    /// findings, `NoRoomToRecover`).
    #[serde(rename = "deadEnds")]
    pub dead_ends: Vec<DeadEnd>,
    /// With `--handoff none` (or `--taint-outdated` alone): the domains whose health check cannot
    /// pass for want of room (error findings, `NoRoomToRecover`).
    #[serde(rename = "healthDeadEnds")]
    pub health_dead_ends: Vec<HealthDeadEnd>,
    /// With a plan (`--taint-outdated` or `--handoff`): workloads whose whole serving capacity
    /// one domain's drain takes ([`crate::drain::exposures`]); warnings, not errors.
    pub exposed: Vec<Exposure>,
}

impl CheckReport {
    pub fn exit_code(&self) -> u8 {
        match self.findings.is_empty()
            && self.dead_ends.is_empty()
            && self.health_dead_ends.is_empty()
        {
            true => exit::OK,
            false => exit::PROBLEMS,
        }
    }
}

/// `plan`'s exit code: [`exit::PROBLEMS`] when a pod blocks some domain.
pub fn plan_exit_code(plan: &Plan) -> u8 {
    match plan.domains.iter().any(DomainPlan::is_blocked) {
        true => exit::PROBLEMS,
        false => exit::OK,
    }
}

/// `a, b, c`, or the first `max` and `(+N)`.
fn first(names: impl ExactSizeIterator<Item = String>, max: usize) -> String {
    let n = names.len();
    let shown: Vec<String> = names.take(max).collect();
    match n > max {
        true => format!("{} (+{})", shown.join(","), n - max),
        false => shown.join(","),
    }
}

fn skipped(d: &DomainPlan) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &d.skipped {
        let reason = match s.reason {
            SkipReason::NotSelected => "not selected",
            SkipReason::DeletingTooLong => "deleting",
            SkipReason::Finished => "finished",
            SkipReason::DaemonSet => "DaemonSet",
            SkipReason::Mirror => "mirror",
        };
        *by.entry(reason).or_default() += 1;
    }
    match by.is_empty() {
        true => "0".into(),
        false => format!(
            "{} ({})",
            d.skipped.len(),
            by.iter()
                .map(|(r, n)| format!("{r} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The plan as a table: domains in drain order with their nodes and pod counts, then each
/// blocked domain's reasons (kubectl's messages), warnings and notes.
pub fn plan_table(plan: &Plan) -> String {
    let mut out = String::new();
    if let Some(g) = &plan.target_generation {
        out.push_str(&format!("target generation: {g}\n"));
    }
    let with_generation = plan.domains.iter().any(|d| d.generation.is_some());
    let mut header = vec!["#", "DOMAIN"];
    if with_generation {
        header.push("GENERATION");
    }
    header.extend([
        "NODES",
        "PHASE 1 (PROTECTED)",
        "GROUPS",
        "PHASE 2",
        "SKIPPED",
        "BLOCKED",
    ]);
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for (i, d) in plan.domains.iter().enumerate() {
        let mut row = vec![(i + 1).to_string(), d.name.clone()];
        if with_generation {
            row.push(d.generation.clone().unwrap_or_else(|| "-".into()));
        }
        row.extend([
            format!(
                "{} [{}]",
                d.nodes.len(),
                first(d.nodes.iter().map(|n| n.name.clone()), 3)
            ),
            d.phase1.len().to_string(),
            d.protected_groups.to_string(),
            d.phase2.len().to_string(),
            skipped(d),
            d.blocked.len().to_string(),
        ]);
        rows.push(row);
    }
    out.push_str(&columns(&rows));
    let count = |f: fn(&DomainPlan) -> usize| plan.domains.iter().map(f).sum::<usize>();
    out.push_str(&format!(
        "{} domain(s), {} node(s): phase 1 {}, phase 2 {}, skipped {}, blocked {}\n",
        plan.domains.len(),
        count(|d| d.nodes.len()),
        count(|d| d.phase1.len()),
        count(|d| d.phase2.len()),
        count(|d| d.skipped.len()),
        count(|d| d.blocked.len()),
    ));
    for d in &plan.domains {
        let errors = d.errors();
        let warnings = d.warning_lines();
        if errors.is_empty() && warnings.is_empty() {
            continue;
        }
        out.push_str(&format!("\ndomain {}:\n", d.name));
        for e in errors {
            out.push_str(&format!("  blocked: {e}\n"));
        }
        for w in warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
    }
    if !plan.notes.is_empty() {
        out.push_str("\nnotes:\n");
        for n in &plan.notes {
            out.push_str(&format!("  {n}\n"));
        }
    }
    out
}

/// The findings, each with its workload, object, problem and fix.
pub fn check_table(report: &CheckReport) -> String {
    if report.findings.is_empty()
        && report.dead_ends.is_empty()
        && report.health_dead_ends.is_empty()
    {
        return format!(
            "the group contract holds: no findings ({} nodes, {} pods checked)\n{}",
            report.nodes,
            report.pods,
            exposed_lines(&report.exposed)
        );
    }
    let mut out = format!(
        "{} finding(s) ({} nodes, {} pods checked):\n",
        report.findings.len() + report.dead_ends.len() + report.health_dead_ends.len(),
        report.nodes,
        report.pods
    );
    for f in &report.findings {
        out.push_str(&format!(
            "\n{:?}  {}  {}\n  problem: {}\n  fix: {}\n",
            f.check, f.workload, f.object, f.problem, f.fix
        ));
    }
    for d in &report.dead_ends {
        out.push_str(&format!(
            "\nNoRoomToRecover  PodDisruptionBudget {}  upgrade domain {}\n  problem: {}\n  \
             fix: {}\n",
            d.pdb,
            d.domain,
            d.problem(),
            d.fix()
        ));
    }
    for d in &report.health_dead_ends {
        out.push_str(&format!(
            "\nNoRoomToRecover  health check  upgrade domain {}\n  problem: {}\n  fix: {}\n",
            d.domain,
            d.problem(),
            d.fix()
        ));
    }
    out.push_str(&exposed_lines(&report.exposed));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        plan: PlanFlags,
    }

    fn parse(args: &[&str]) -> PlanFlags {
        let mut argv = vec!["plan"];
        argv.extend(args);
        Cmd::try_parse_from(argv).unwrap().plan
    }

    #[test]
    fn kubectl_drain_flags_map_onto_the_plan_s_rules() {
        let o = parse(&[
            "-l",
            "pool=gpu",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--pod-selector",
            "app!=agent",
            "--skip-wait-for-delete-timeout",
            "30",
            "--ud-label",
            "example.com/ud",
            "--generation-node-info",
            "kubelet-version",
            "--target-generation",
            "v1.31.1",
            "--order",
            "explicit",
            "--domains",
            "b,a",
            "--taint-outdated",
            "--group-label",
            "group",
        ])
        .options()
        .unwrap();
        assert_eq!(o.domain_label, "example.com/ud");
        assert_eq!(o.node_selector, "pool=gpu");
        assert_eq!(
            o.rules,
            DrainRules {
                ignore_daemonsets: true,
                delete_emptydir_data: true,
                force: true,
                pod_selector: "app!=agent".into(),
                skip_wait_for_delete_timeout_seconds: 30,
                grace_period_seconds: None,
            }
        );
        assert_eq!(
            o.generation,
            Some(Generation {
                source: GenerationSource::NodeInfo(NodeInfoField::KubeletVersion),
                target: GenerationTarget::Value("v1.31.1".into()),
            })
        );
        assert_eq!(o.groups, GroupLabels::of_labels(&["group"]));
        assert_eq!(
            o.taint.map(|t| t.key),
            Some(crate::types::rollout::OUTDATED_TAINT_KEY.to_string())
        );
        assert_eq!(o.groups, GroupLabels::of_labels(&["group"]));

        let defaults = parse(&[]).options().unwrap();
        assert_eq!(defaults.domain_label, DEFAULT_UPGRADE_DOMAIN_LABEL);
        assert_eq!(defaults.rules, DrainRules::default());
        assert_eq!(defaults.generation, None);
        assert_eq!(defaults.order, DomainOrder::Name);
    }

    #[test]
    fn inconsistent_flags_are_refused_naming_the_flag() {
        let err = |args: &[&str]| parse(args).options().unwrap_err();
        assert!(err(&["--order", "explicit"]).contains("--domains"));
        assert!(err(&["--domains", "a"]).contains("--order explicit"));
        assert!(err(&["--target-generation", "v1"]).contains("--generation-label"));
        let mut argv = vec!["plan", "--generation-label", "g"];
        argv.extend(["--generation-node-info", "os-image"]);
        assert!(Cmd::try_parse_from(argv).is_err());
    }
}
