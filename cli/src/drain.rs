//! `raygate drain plan|check`: read the cluster once, plan or check, print, exit with a code
//! that says what was found (`raygate::cli::drain::exit`).

use std::path::PathBuf;
use std::process::ExitCode;

use raygate::cli::drain::{CheckFlags, CheckReport, PlanFlags, PlanReport, exit};
use raygate::cli::{self, Output};
use raygate::client::live;
use raygate::drain::CapacityCheck;

#[derive(clap::Args)]
pub struct DrainArgs {
    // boxed: the flags make `raygate`'s command enum large (clippy::large_enum_variant)
    #[command(subcommand)]
    command: Box<DrainCommand>,
}

#[derive(clap::Subcommand)]
enum DrainCommand {
    /// The drain, upgrade domain by upgrade domain: each domain's nodes, its protected pods
    /// (phase 1, evicted first), the rest (phase 2), the pods skipped and those that block it;
    /// with --taint-outdated, the domains whose groups would have no room to recover; with
    /// --handoff none and --group-label, those whose health check cannot pass for want of room.
    /// Exit code 0: nothing blocks; 1: a pod blocks a domain, or a domain has no room to
    /// recover; 2: no plan (bad flags or input); 3: the cluster could not be read.
    Plan {
        #[command(flatten)]
        flags: PlanFlags,
        #[command(flatten)]
        cluster: ClusterFlags,
    },
    /// The group contract (groups packed in one domain, a ready-gated representative per group,
    /// one PodDisruptionBudget over the representatives): each finding with its fix; with
    /// --taint-outdated or --handoff, each domain whose groups would have no room to recover
    /// (or, with hand-off none, no room for its health check) too.
    /// Exit code 0: no finding; 1: findings; 2: bad flags or input; 3: the cluster could not be
    /// read.
    Check {
        #[command(flatten)]
        flags: CheckFlags,
        #[command(flatten)]
        cluster: ClusterFlags,
    },
    /// Drain upgrade domain by upgrade domain: cordon, evict protected pods first (429s pause),
    /// then the rest, hand off, and wait for the health check before the next domain.
    /// Exit code 0: completed; 1: failed or paused; 2: bad options; 130: interrupted.
    Run(crate::drain_run::RunArgs),
}

#[derive(clap::Args)]
struct ClusterFlags {
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    context: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: Output,
}

/// The error line and the exit code.
struct Failure(String, u8);

pub fn run(args: DrainArgs) -> ExitCode {
    let command = *args.command;
    if let DrainCommand::Run(run) = command {
        return crate::drain_run::run(run).unwrap_or_else(|e| {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        });
    }
    let result = tokio::runtime::Runtime::new()
        .map_err(|e| Failure(format!("starting the async runtime: {e}"), exit::UNREADABLE))
        .and_then(|rt| rt.block_on(self::command(command)));
    match result {
        Ok((text, code)) => {
            print!("{text}");
            ExitCode::from(code)
        }
        Err(Failure(message, code)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

async fn read(cluster: &ClusterFlags) -> Result<live::DrainObjects, Failure> {
    let unreadable = |e: live::Error| Failure(e.to_string(), exit::UNREADABLE);
    let client = live::client(cluster.kubeconfig.as_deref(), cluster.context.as_deref())
        .await
        .map_err(unreadable)?;
    live::drain_objects(&client).await.map_err(unreadable)
}

async fn command(command: DrainCommand) -> Result<(String, u8), Failure> {
    let bad = |e: String| Failure(e, exit::BAD_INPUT);
    match command {
        DrainCommand::Plan { flags, cluster } => {
            let options = flags.options().map_err(bad)?;
            let objects = read(&cluster).await?;
            let now = raygate::types::k8s_openapi::jiff::Timestamp::now();
            let world = objects.cluster();
            let plan =
                raygate::drain::plan(&world, &options, now).map_err(|e| bad(e.to_string()))?;
            let found = CapacityCheck::check(&world, &plan, &options, flags.handoff.returns());
            let exposed = raygate::drain::exposures(&world, &plan);
            let report = PlanReport {
                plan,
                dead_ends: found.dead_ends,
                health_dead_ends: found.health_dead_ends,
                exposed,
            };
            let text = cli::render(&report, cluster.output).map_err(|e| bad(e.to_string()))?;
            Ok((text, report.exit_code()))
        }
        DrainCommand::Check { flags, cluster } => {
            let options = flags.options().map_err(bad)?;
            let objects = read(&cluster).await?;
            let world = objects.cluster();
            let findings =
                raygate::drain::preflight(&world, &options).map_err(|e| bad(e.to_string()))?;
            let (found, exposed) = match flags.plan_options(&options) {
                Some(plan_options) => {
                    let now = raygate::types::k8s_openapi::jiff::Timestamp::now();
                    let plan = raygate::drain::plan(&world, &plan_options, now)
                        .map_err(|e| bad(e.to_string()))?;
                    let found = CapacityCheck::check(&world, &plan, &plan_options, flags.returns());
                    (found, raygate::drain::exposures(&world, &plan))
                }
                None => (CapacityCheck::default(), vec![]),
            };
            let report = CheckReport {
                nodes: objects.nodes.len(),
                pods: objects.pods.len(),
                findings,
                dead_ends: found.dead_ends,
                health_dead_ends: found.health_dead_ends,
                exposed,
            };
            let text = cli::render(&report, cluster.output).map_err(|e| bad(e.to_string()))?;
            Ok((text, report.exit_code()))
        }
        DrainCommand::Run(_) => Err(Failure(
            "`drain run` runs its own engine loop, not a one-shot read".into(),
            exit::BAD_INPUT,
        )),
    }
}
