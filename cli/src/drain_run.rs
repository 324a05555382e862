//! `raygate drain run --local`: the drain engine in-process against the kubeconfig's cluster
//! (`raygate::controller::drain::run`, the loop the NodeRollout controller will run too).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use raygate::controller::SystemClock;
use raygate::controller::drain::{self, Run};
use raygate::drain::engine::{
    FailureAction, Handoff, Options, Phase, SignedDuration, UPGRADE_LABEL,
};
use raygate::drain::{DrainRules, Generation, GenerationSource, GenerationTarget, PlanOptions};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum HandoffArg {
    None,
    Reboot,
    Replace,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FailureArg {
    Pause,
    Abort,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Run the engine in this process (the NodeRollout controller is not there yet).
    #[arg(long, required = true)]
    local: bool,
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    #[arg(long)]
    context: Option<String>,
    /// The node label naming a node's upgrade domain.
    #[arg(long)]
    domain_label: String,
    /// Nodes to drain (a label query, as kubectl's --selector; default all).
    #[arg(short = 'l', long = "selector", default_value = "")]
    selector: String,
    /// The pod label naming a group (e.g. leaderworkerset.sigs.k8s.io/group-key).
    #[arg(long)]
    group_label: Option<String>,
    /// Drain only nodes whose label KEY is not at --generation-target.
    #[arg(long)]
    generation_label: Option<String>,
    #[arg(long, requires = "generation_label")]
    generation_target: Option<String>,
    #[arg(long, value_enum, default_value = "none")]
    handoff: HandoffArg,
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
    #[arg(long, default_value_t = 10)]
    eviction_concurrency: usize,
    /// Server-side dry-run evictions only (nothing is cordoned or evicted).
    #[arg(long)]
    dry_run: bool,
    #[arg(long)]
    ignore_daemonsets: bool,
    #[arg(long)]
    delete_emptydir_data: bool,
    #[arg(long)]
    force: bool,
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
            group_label: a.group_label.clone(),
            rules: DrainRules {
                ignore_daemonsets: a.ignore_daemonsets,
                delete_emptydir_data: a.delete_emptydir_data,
                force: a.force,
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
        handoff: match a.handoff {
            HandoffArg::None => Handoff::None,
            HandoffArg::Reboot => {
                let (label, value) = mark();
                Handoff::Reboot { label, value }
            }
            HandoffArg::Replace => {
                let (label, value) = mark();
                Handoff::Replace { label, value }
            }
        },
        dry_run: a.dry_run,
        ..Options::default()
    }
}

/// Exit codes: 0 completed, 1 failed (aborted), 2 bad options, 130 interrupted (Ctrl-C: the
/// nodes stay as they are).
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let client =
            raygate::live::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
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
            ..Run::new(options(&args))
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
