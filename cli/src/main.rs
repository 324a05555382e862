//! raygate's command line: a thin front over the library (and, with the default `sim` feature,
//! `raygate-sim`/`raygate-demo` for `raygate demo`, `simulate` and `dev`).

#[cfg(feature = "sim")]
mod dev;
mod drain;
mod drain_run;
mod rollout;
#[cfg(feature = "sim")]
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use raygate::cli::{self, Output};

/// mimalloc, for `raygate demo`/`simulate` (allocation-bound: glibc malloc was about 30% of the
/// sweep's profile) and the controller alike (musl's allocator is slower still).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "raygate",
    version,
    about = "Quota gate for KubeRay RayService upgrades on fixed capacity"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Play raygate's story on a simulated cluster, nothing installed: 4 upgrade domains × 4 GPU
    /// nodes, a ClusterQueue, a RayService with a multi-host worker group and LeaderWorkerSet
    /// groups. Act 1: an upgrade that does not fit is held until quota is freed, then released
    /// and promoted. Act 2: a new node generation rolled out domain by domain through a
    /// NodeRollout. raygate's real controller does it all; the invariants are checked from the
    /// cluster's history. Exits 1 if any broke.
    #[cfg(feature = "sim")]
    Demo(simulate::DemoArgs),
    /// Run a scenario file on the simulated cluster (the demo's runner) and print its report;
    /// exits 1 when an expectation fails, 2 when the file is bad (line and field named).
    #[cfg(feature = "sim")]
    Simulate(simulate::SimulateArgs),
    /// Print the PodSets (pods × per-pod requests) a RayService needs now, from a manifest file
    /// holding one RayService and any of its child RayClusters.
    Podsets {
        /// Multi-document YAML file ("-" for standard input).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Default: a table on a terminal, JSON when piped.
        #[arg(short = 'o', long = "output", value_enum)]
        output: Option<Output>,
    },
    /// Run admission cycles on a file of Kueue objects (ResourceFlavor, Cohort, ClusterQueue,
    /// LocalQueue, WorkloadPriorityClass, Workload) until nothing changes; print each Workload's
    /// outcome and each ClusterQueue's usage.
    Admit {
        /// Multi-document YAML file ("-" for standard input).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Default: a table on a terminal, JSON when piped.
        #[arg(short = 'o', long = "output", value_enum)]
        output: Option<Output>,
    },
    /// Run the controller: gate opted-in RayServices' children on admitted workload slices.
    Controller(ControllerArgs),
    /// Write the CRDs raygate installs (NodeRollout, and the kueue.x-k8s.io kinds for clusters
    /// without Kueue) into a directory.
    Crdgen {
        #[arg(long, default_value = "crds")]
        out: PathBuf,
    },
    /// What raygate sees of a RayService (children, slices, what is held and why, the shortfall)
    /// or a ClusterQueue (quota against usage, pending Workloads), read from a live cluster.
    /// Also `kubectl raygate status ...` when installed as `kubectl-raygate`.
    Status(StatusArgs),
    /// Upgrade-domain aware drains, read from a live cluster: `plan` (what would be drained,
    /// domain by domain) and `check` (the group contract that makes it safe).
    Drain(drain::DrainArgs),
    /// Remove raygate's pod scheduling gate (`raygate.io/quota`) from every RayService's and
    /// RayCluster's pod templates and from every Ray pod, for an uninstall of `--pod-gate`: run it
    /// after deleting the `raygate-pod-gate` policies (they let only raygate lift the gate), with
    /// pods list/patch. Passes repeat until one finds nothing; prints what was changed.
    RemovePodGate {
        /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context (default: the current one).
        #[arg(long)]
        context: Option<String>,
    },
    /// A NodeRollout on a live cluster: `get` (phase, domain, conditions), `watch` (a line per
    /// change until it ends), `pause` (spec.paused), `resume` (spec.paused and the engine's
    /// pause).
    Rollout(rollout::RolloutArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to standard output.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Development helpers for the dev cluster (hack/dev-cluster.sh): the KubeRay v1.7
    /// emulator, and apply/get without API discovery.
    #[cfg(feature = "sim")]
    Dev(dev::DevArgs),
}

#[derive(clap::Args)]
struct StatusArgs {
    /// rayservice/NAME, rayservices (every opted-in one) or clusterqueue/NAME (also cq/).
    target: raygate::client::live::Target,
    /// Namespace of a RayService (default: the kubeconfig context's, else "default").
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// With `rayservices`: every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    context: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: Output,
}

#[derive(clap::Args)]
struct ControllerArgs {
    /// Who admits Workloads: raygate's built-in loop, or a real Kueue (raygate only reads).
    #[arg(long, value_enum, default_value = "builtin")]
    admission: raygate::admission::AdmissionMode,
    /// Contend for a Lease; only the holder writes (every replica keeps its caches warm).
    #[arg(long)]
    leader_elect: bool,
    #[arg(long, default_value = "raygate")]
    lease_name: String,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else raygate-system).
    #[arg(long, env = "POD_NAMESPACE", default_value = "raygate-system")]
    lease_namespace: String,
    /// Serve /metrics, /healthz and /readyz here ("" to disable).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: String,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Delete a finished slice this many seconds after it finished (0: keep finished slices).
    #[arg(long, default_value_t = 3600)]
    finished_slice_retention_seconds: u64,
    /// The pod-level gate: put the `raygate.io/quota` scheduling gate on opted-in RayServices'
    /// pod templates and lift it from pods the newest admitted slice grants (needs pods
    /// get/list/watch/patch).
    #[arg(long)]
    pod_gate: bool,
    /// Keep the newest this many finished slices of each RayService whatever their age (for
    /// debugging).
    #[arg(long, default_value_t = 3)]
    finished_slices_kept: usize,
    /// Run NodeRollouts (upgrade-domain aware drains) on the leader (needs the drain RBAC:
    /// nodes patch, pods/eviction create, noderollouts/status patch). `--node-rollouts=false`
    /// turns it off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    node_rollouts: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `try_init`: a second call (none today) keeps the first subscriber
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

async fn run_controller(args: ControllerArgs) -> anyhow::Result<()> {
    init_tracing(args.log_format);
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
    let metrics_addr = match args.metrics_addr.as_str() {
        "" => None,
        a => Some(a.parse().with_context(|| format!("--metrics-addr {a}"))?),
    };
    let identity =
        std::env::var("POD_NAME").unwrap_or_else(|_| format!("raygate-{}", std::process::id()));
    let config = raygate::controller::Config {
        admission: args.admission,
        leader_elect: args.leader_elect,
        lease_name: args.lease_name,
        lease_namespace: args.lease_namespace,
        identity,
        metrics_addr,
        check_crds: true,
        pod_gate: args.pod_gate,
        node_rollouts: args.node_rollouts,
        finished_slice_retention: (args.finished_slice_retention_seconds > 0).then_some(
            raygate::slices::Retention {
                after_finished: std::time::Duration::from_secs(
                    args.finished_slice_retention_seconds,
                ),
                keep_newest: args.finished_slices_kept,
            },
        ),
        ..Default::default()
    };
    raygate::controller::run(client, config, shutdown_signal()).await?;
    Ok(())
}

/// `-o` when not given: a table for a person at a terminal, JSON for a pipe or a file.
fn stdout_default() -> Output {
    use std::io::IsTerminal;
    cli::default_output(std::io::stdout().is_terminal())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutdown signal received");
}

pub(crate) fn read_input(path: &PathBuf) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// The command name: `kubectl raygate` when run as the kubectl plugin `kubectl-raygate`.
fn command_name() -> &'static str {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let file = std::path::Path::new(&argv0)
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    if file.starts_with("kubectl-raygate") {
        "kubectl raygate"
    } else {
        "raygate"
    }
}

fn main() -> ExitCode {
    let matches = Args::command().bin_name(command_name()).get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code_of(&e))
        }
    }
}

/// The exit code of a command's error, as `drain` and `rollout` use them (docs/cli.md, "Exit
/// codes"): 2 when the input names nothing, 3 when the cluster could not be read or written, 1
/// otherwise.
fn exit_code_of(e: &anyhow::Error) -> u8 {
    use cli::drain::exit;
    use raygate::client::live;
    for cause in e.chain() {
        match cause.downcast_ref::<live::Error>() {
            Some(live::Error::NotFound { .. } | live::Error::Usage(_)) => return exit::BAD_INPUT,
            Some(live::Error::Config(_) | live::Error::Read { .. }) => return exit::UNREADABLE,
            None if cause.is::<kube::Error>() => return exit::UNREADABLE,
            None => {}
        }
    }
    1
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Podsets { file, output } => {
            let output = output.unwrap_or_else(stdout_default);
            let text = read_input(&file)?;
            let result = cli::podsets(&text).and_then(|r| cli::render(&r, output));
            Ok(print_or_exit2(result))
        }
        Command::Admit { file, output } => {
            let output = output.unwrap_or_else(stdout_default);
            let text = read_input(&file)?;
            let result = cli::admit(&text).and_then(|r| cli::render(&r, output));
            Ok(print_or_exit2(result))
        }
        Command::Controller(args) => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(run_controller(args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crdgen { out } => {
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            for (file, crd) in raygate::crdgen::crds() {
                let path = out.join(&file);
                std::fs::write(&path, raygate::crdgen::to_yaml(&crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status(args) => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let text = runtime.block_on(status(args))?;
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Command::RemovePodGate {
            kubeconfig,
            context,
        } => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            println!(
                "{}",
                runtime.block_on(remove_pod_gate(kubeconfig, context))?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            let mut cmd = Args::command();
            clap_complete::generate(shell, &mut cmd, command_name(), &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "sim")]
        Command::Dev(args) => dev::run(args),
        #[cfg(feature = "sim")]
        Command::Demo(args) => simulate::demo(args),
        #[cfg(feature = "sim")]
        Command::Simulate(args) => simulate::simulate(args),
        Command::Drain(args) => Ok(drain::run(args)),
        Command::Rollout(args) => Ok(rollout::run(args)),
    }
}

async fn remove_pod_gate(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
) -> anyhow::Result<String> {
    let client = raygate::client::live::client(kubeconfig.as_deref(), context.as_deref()).await?;
    let r = raygate::controller::remove_pod_gates(&client).await?;
    let mut text = format!(
        "removed {}: pod templates of {} RayServices and {} RayClusters, {} pods",
        raygate::gate::pod_gate::POD_GATE,
        r.services,
        r.clusters,
        r.pods
    );
    if r.pods_forbidden {
        text.push_str(
            "; pods could not be listed or patched (no RBAC for pods): gated pods keep the gate",
        );
    }
    Ok(text)
}

async fn status(args: StatusArgs) -> anyhow::Result<String> {
    use raygate::client::live::{self, Target};
    if args.all_namespaces && !matches!(args.target, Target::RayServices) {
        return Err(live::Error::Usage(
            "-A/--all-namespaces lists RayServices: use it with `rayservices`".into(),
        )
        .into());
    }
    let client = live::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let text = match &args.target {
        Target::RayService(name) => {
            let ns = live::default_namespace(&client, args.namespace.as_deref());
            let report = live::service(&client, &ns, name).await?;
            cli::render(&report, args.output)?
        }
        Target::RayServices => {
            let ns = (!args.all_namespaces)
                .then(|| live::default_namespace(&client, args.namespace.as_deref()));
            let list = live::services(&client, ns.as_deref()).await?;
            cli::render(&list, args.output)?
        }
        Target::ClusterQueue(name) => {
            let report = live::cluster_queue(&client, name).await?;
            cli::render(&report, args.output)?
        }
    };
    Ok(text)
}

/// Prints the output, or the input error on one line with exit code 2.
fn print_or_exit2(result: Result<String, cli::InputError>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
