//! `raygate drain run`: creates a NodeRollout from the flags and follows it while the controller
//! runs it (`raygate::cli::rollout`); `--local` runs the drain engine in this process instead
//! (`raygate::controller::drain::run`, the loop the NodeRollout controller runs too).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use raygate::cli::drain::HandoffMode;
use raygate::cli::rollout::{Ended, RolloutRequest};
use raygate::client::rollout;
use raygate::controller::drain::{self, Run};
use raygate::drain::engine::{
    FailureAction, Handoff, Options, Phase, SignedDuration, UPGRADE_LABEL,
};
use raygate::drain::{
    CapacityCheck, DrainRules, Generation, GenerationSource, GenerationTarget, GroupLabels,
    PlanOptions,
};
use raygate::runtime::SystemClock;
use raygate::types::rollout::{DEFAULT_UPGRADE_DOMAIN_LABEL, FailureActionSpec};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FailureArg {
    Pause,
    Abort,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Run the engine in this process instead of creating a NodeRollout for the controller.
    #[arg(long)]
    local: bool,
    /// The NodeRollout's name (default: generated, `drain-xxxxx`).
    #[arg(long, conflicts_with = "local")]
    name: Option<String>,
    /// With --group-label other than a preset's (LeaderWorkerSet's group key, KubeRay's replica
    /// name): the label query picking a group's representative (e.g. role=leader).
    #[arg(long, conflicts_with = "local")]
    representative: Option<String>,
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    #[arg(long)]
    context: Option<String>,
    /// The node label naming a node's upgrade domain (as `drain plan|check`; `--domain-label`
    /// is accepted too).
    #[arg(long = "ud-label", alias = "domain-label", default_value = DEFAULT_UPGRADE_DOMAIN_LABEL)]
    domain_label: String,
    /// Nodes to drain (a label query, as kubectl's --selector; default all).
    #[arg(short = 'l', long = "selector", default_value = "")]
    selector: String,
    /// The pod label naming a group (e.g. leaderworkerset.sigs.k8s.io/group-key); repeat it
    /// (or separate by commas) for several kinds of groups.
    #[arg(long, value_delimiter = ',')]
    group_label: Vec<String>,
    /// Drain only nodes whose label KEY is not at --target-generation.
    #[arg(long)]
    generation_label: Option<String>,
    /// The generation nodes are brought to (as `drain plan`; `--generation-target` is accepted
    /// too).
    #[arg(
        long = "target-generation",
        alias = "generation-target",
        requires = "generation_label"
    )]
    generation_target: Option<String>,
    #[arg(long, value_enum, default_value = "none")]
    handoff: HandoffMode,
    #[arg(long, default_value_t = 0)]
    health_check_wait_seconds: i64,
    /// Default: the representatives' readiness probes plus the disruption controller's lag.
    #[arg(long)]
    health_check_stable_seconds: Option<i64>,
    #[arg(long, default_value_t = 600)]
    health_check_retry_timeout_seconds: i64,
    #[arg(long)]
    domain_timeout_seconds: Option<i64>,
    #[arg(long)]
    rollout_timeout_seconds: Option<i64>,
    #[arg(long, value_enum, default_value = "pause")]
    failure_action: FailureArg,
    #[arg(long, default_value_t = 1)]
    max_unavailable_domains: usize,
    /// Pause after each domain; press Enter to go on.
    #[arg(long)]
    manual: bool,
    /// With --local: evictions in flight at once (the controller's NodeRollouts use its own).
    #[arg(long, default_value_t = 10, requires = "local")]
    eviction_concurrency: usize,
    /// With --local: server-side dry-run evictions only (nothing is cordoned or evicted).
    /// Otherwise: a server-side dry-run create of the NodeRollout, and the plan printed.
    #[arg(long)]
    dry_run: bool,
    #[arg(long)]
    ignore_daemonsets: bool,
    #[arg(long)]
    delete_emptydir_data: bool,
    #[arg(long)]
    force: bool,
    /// With --local: taint each target node raygate.io/outdated:NoSchedule (as a NodeRollout's
    /// spec.taintOutdated).
    #[arg(long, requires = "local")]
    taint_outdated: bool,
    /// With --local: start even when a domain's groups would have no room to recover, or (with
    /// hand-off none) no room for its health check (as the NodeRollout annotation
    /// raygate.io/skip-room-check=true).
    #[arg(long, requires = "local")]
    skip_room_check: bool,
    /// Seconds each evicted pod gets to terminate (kubectl drain's flag); negative: the pod's
    /// own terminationGracePeriodSeconds.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    grace_period: i64,
}

fn options(a: &RunArgs) -> Options {
    let secs = SignedDuration::from_secs;
    let mark = || (UPGRADE_LABEL.to_string(), "requested".to_string());
    Options {
        plan: PlanOptions {
            domain_label: a.domain_label.clone(),
            node_selector: a.selector.clone(),
            generation: a.generation_label.as_ref().map(|key| Generation {
                source: GenerationSource::Label(key.clone()),
                target: a
                    .generation_target
                    .clone()
                    .map_or(GenerationTarget::Newest, GenerationTarget::Value),
            }),
            groups: GroupLabels::of_labels(&a.group_label),
            taint: a.taint_outdated.then(raygate::drain::outdated_taint),
            rules: DrainRules {
                ignore_daemonsets: a.ignore_daemonsets,
                delete_emptydir_data: a.delete_emptydir_data,
                force: a.force,
                grace_period_seconds: raygate::drain::rules::grace_period(a.grace_period),
                ..DrainRules::default()
            },
            ..PlanOptions::default()
        },
        health_check_wait: secs(a.health_check_wait_seconds),
        health_check_stable: a.health_check_stable_seconds.map(secs),
        health_check_retry_timeout: secs(a.health_check_retry_timeout_seconds),
        domain_timeout: a.domain_timeout_seconds.map(secs),
        rollout_timeout: a.rollout_timeout_seconds.map(secs),
        failure_action: match a.failure_action {
            FailureArg::Pause => FailureAction::Pause,
            FailureArg::Abort => FailureAction::Abort,
        },
        max_unavailable_domains: a.max_unavailable_domains,
        manual: a.manual,
        eviction_concurrency: a.eviction_concurrency,
        handoff: Handoff::of(a.handoff.into(), mark()),
        dry_run: a.dry_run,
        ..Options::default()
    }
}

fn request(a: &RunArgs) -> RolloutRequest {
    RolloutRequest {
        domain_label: a.domain_label.clone(),
        selector: a.selector.clone(),
        group_label: a.group_label.clone(),
        representative: a.representative.clone(),
        generation_label: a.generation_label.clone(),
        generation_target: a.generation_target.clone(),
        handoff: a.handoff.into(),
        health_check_wait_seconds: a.health_check_wait_seconds,
        health_check_stable_seconds: a.health_check_stable_seconds,
        health_check_retry_timeout_seconds: a.health_check_retry_timeout_seconds,
        domain_timeout_seconds: a.domain_timeout_seconds,
        rollout_timeout_seconds: a.rollout_timeout_seconds,
        failure_action: match a.failure_action {
            FailureArg::Pause => FailureActionSpec::Pause,
            FailureArg::Abort => FailureActionSpec::Abort,
        },
        max_unavailable_domains: a.max_unavailable_domains,
        manual: a.manual,
        ignore_daemonsets: a.ignore_daemonsets,
        delete_emptydir_data: a.delete_emptydir_data,
        force: a.force,
        grace_period_seconds: Some(a.grace_period),
    }
}

/// Exit codes: 0 completed, 1 failed (aborted), 2 bad options (the server or the controller
/// refused the rollout; with --local, also a plan whose groups would have no room to recover,
/// unless --skip-room-check), 130 interrupted (Ctrl-C: the NodeRollout is paused; with --local the
/// nodes stay as they are).
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    if args.local {
        return run_local(args);
    }
    let spec = match request(&args).spec() {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let client =
            raygate::client::live::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
        let created = match rollout::create(&client, args.name.as_deref(), spec.clone(), args.dry_run)
            .await
        {
            Ok(o) => o,
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => {
                eprintln!("error: the NodeRollout was refused: {}", s.message);
                return Ok(ExitCode::from(2));
            }
            Err(e) => return Err(anyhow::Error::from(e).context("creating the NodeRollout")),
        };
        let name = created.metadata.name.clone().unwrap_or_default();
        if args.dry_run {
            return dry_run(&client, &spec).await;
        }
        eprintln!("NodeRollout {name} created; following it (Ctrl-C pauses it)");
        let ended = rollout::follow(
            &client,
            &name,
            |l| println!("{l}"),
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await
        .context("following the NodeRollout")?;
        match &ended {
            Ended::Completed => println!("NodeRollout {name} completed"),
            Ended::Failed(why) => eprintln!("NodeRollout {name} failed: {why}"),
            Ended::BadInput(why) => eprintln!(
                "error: NodeRollout {name} cannot run: {why}. It is paused (spec.paused=true), so \
                 it does not start later unwatched: fix the cause and go on with kubectl patch \
                 nro {name} --type merge -p '{{\"spec\":{{\"paused\":false}}}}', or delete it"
            ),
            Ended::Interrupted => eprintln!(
                "interrupted: NodeRollout {name} is paused (spec.paused=true); evictions already \
                 sent finish, nothing new starts. Go on with: kubectl patch nro {name} --type merge \
                 -p '{{\"spec\":{{\"paused\":false}}}}'"
            ),
        }
        Ok(ExitCode::from(ended.exit_code()))
    })
}

/// `--dry-run`: the server accepted the spec (a dry-run create); print the plan it would run.
async fn dry_run(
    client: &kube::Client,
    spec: &raygate::types::rollout::NodeRolloutSpec,
) -> anyhow::Result<ExitCode> {
    let options = match raygate::drain::rollout_options(spec) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let objects = raygate::client::live::drain_objects(client).await?;
    let now = raygate::types::k8s_openapi::jiff::Timestamp::now();
    let plan = match raygate::drain::plan(&objects.cluster(), &options.plan, now) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    println!("dry run: the server accepts this NodeRollout; it would drain:");
    print!("{}", raygate::cli::drain::plan_table(&plan));
    Ok(ExitCode::SUCCESS)
}

fn run_local(args: RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let client =
            raygate::client::live::client(args.kubeconfig.as_deref(), args.context.as_deref())
                .await?;
        let options = options(&args);
        if let Some(refused) = capacity_check(&client, &options, args.skip_room_check).await? {
            eprintln!("error: {refused}");
            return Ok(ExitCode::from(2));
        }
        let (resume, resumes) = tokio::sync::watch::channel(0u64);
        // Enter resumes a paused rollout (manual mode, or a failure with --failure-action pause)
        std::thread::spawn(move || {
            let mut line = String::new();
            let mut n = 0;
            while std::io::stdin()
                .read_line(&mut line)
                .is_ok_and(|read| read > 0)
            {
                n += 1;
                if resume.send(n).is_err() {
                    break;
                }
                line.clear();
            }
        });
        let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = interrupted.clone();
        let run = Run {
            resumes,
            ..Run::new(options)
        };
        let end = drain::run(
            client,
            Arc::new(SystemClock::default()),
            run,
            |s| eprintln!("{}", s.waiting),
            async move {
                let _ = tokio::signal::ctrl_c().await;
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            },
        )
        .await;
        let end = match end {
            Ok(end) => end,
            Err(e @ drain::DrainRunError::Plan(_)) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(2));
            }
            Err(e) => return Err(e.into()),
        };
        for d in &end.domains {
            println!(
                "{}\t{:?}\t{} evicted\t{}",
                d.name,
                d.step,
                d.evicted.len(),
                d.message
            );
        }
        println!("{}", end.waiting);
        Ok(match end.phase {
            Phase::Completed => ExitCode::SUCCESS,
            _ if interrupted.load(std::sync::atomic::Ordering::Relaxed) => {
                eprintln!("interrupted: the nodes stay as they are");
                ExitCode::from(130)
            }
            _ => ExitCode::FAILURE,
        })
    })
}

/// The controller's room check before anything is touched: the refusal when a domain's groups
/// would have nowhere to run, or (hand-off none, with groups) nowhere to run again for its health
/// check (`None`: room enough, neither a taint nor hand-off none with groups, `--skip-room-check`,
/// or a plan error the engine reports itself).
async fn capacity_check(
    client: &kube::Client,
    options: &Options,
    skip: bool,
) -> anyhow::Result<Option<String>> {
    let gate = options.handoff == Handoff::None && !options.plan.groups.is_empty();
    if options.plan.taint.is_none() && !gate {
        return Ok(None);
    }
    let objects = raygate::client::live::drain_objects(client).await?;
    let world = objects.cluster();
    let now = raygate::types::k8s_openapi::jiff::Timestamp::now();
    let Ok(plan) = raygate::drain::plan(&world, &options.plan, now) else {
        return Ok(None);
    };
    let returns = options.handoff.returns();
    let found = CapacityCheck::check(&world, &plan, &options.plan, returns);
    if skip && !found.is_empty() {
        eprintln!(
            "warning: starting without room to recover (--skip-room-check): {}",
            found.message()
        );
    }
    Ok(raygate::cli::drain::capacity_check(&found, skip).err())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::RunArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    /// `drain run` takes the flag names of `drain plan|check` (`--ud-label`,
    /// `--target-generation`), and still the older ones.
    #[test]
    fn drain_run_speaks_the_flag_names_of_drain_plan() {
        let run = |args: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            (cli.run.domain_label, cli.run.generation_target)
        };
        let plan_names = [
            "--ud-label",
            "ud",
            "--generation-label",
            "g",
            "--target-generation",
            "v2",
        ];
        let older = [
            "--domain-label",
            "ud",
            "--generation-label",
            "g",
            "--generation-target",
            "v2",
        ];
        let want = ("ud".to_string(), Some("v2".to_string()));
        assert_eq!(run(&plan_names), want);
        assert_eq!(run(&older), want);
        assert_eq!(
            run(&[]).0,
            raygate::types::rollout::DEFAULT_UPGRADE_DOMAIN_LABEL,
            "the same default as drain plan"
        );
    }

    /// A flag only the in-process engine reads is refused without --local, never ignored.
    #[test]
    fn a_flag_of_the_local_engine_is_refused_for_a_node_rollout() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied())).map(|c| c.run)
        };
        for flag in [
            &["--eviction-concurrency", "3"][..],
            &["--taint-outdated"][..],
            &["--skip-room-check"][..],
        ] {
            let e = parse(flag)
                .err()
                .unwrap_or_else(|| panic!("{flag:?} was taken"));
            assert!(e.to_string().contains("--local"), "{flag:?}: {e}");
            let mut local = vec!["--local"];
            local.extend_from_slice(flag);
            assert!(parse(&local).is_ok(), "{local:?}");
        }
        assert_eq!(parse(&[]).map(|r| r.eviction_concurrency).ok(), Some(10));
    }
}
