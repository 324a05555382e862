//! `raygate dev …`: the development helpers (`raygate::client::dev`) and the KubeRay v1.7 emulator
//! (`raygate_sim::world::kuberay`) on the command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use raygate::client::dev::{apply, client, get, kind_by_name};
use raygate_sim::Clock;
use raygate_sim::world::kuberay::{EmulatorConfig, run as run_emulator};

/// `raygate dev`.
#[derive(clap::Args, Debug)]
pub struct DevArgs {
    #[command(subcommand)]
    pub command: DevCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum DevCommand {
    /// Serve a local cluster without containers until SIGTERM or Ctrl-C: the simulated cluster on
    /// the wall clock over HTTPS on localhost, with KubeRay's, Kueue's, LeaderWorkerSet's and
    /// raygate's CRDs, a scheduler, kubelets, the core controllers, the KubeRay v1.7 emulator
    /// (with pods) and GPU nodes in upgrade domains. Writes a kubeconfig for kubectl and
    /// `raygate controller`.
    Cluster(ClusterArgs),
    /// Run the KubeRay v1.7 emulator (RayService and RayCluster controllers without pods) until
    /// SIGTERM or Ctrl-C.
    KuberayEmulator {
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// How long an unsuspended RayCluster takes to become ready (emulated pod start).
        #[arg(long, default_value_t = 2000)]
        start_delay_ms: u64,
        /// Watch only this namespace (default: all).
        #[arg(long)]
        namespace: Option<String>,
        /// KubeRay version written to the ray.io/kuberay-version annotation.
        #[arg(long, default_value = "v1.7.0")]
        kuberay_version: String,
    },
    /// Create or server-side apply (field manager raygate-dev, forced) every document of a
    /// multi-document YAML file. Works without API discovery, unlike kubectl.
    Apply {
        /// YAML file ("-" for standard input); repeatable.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        /// Namespace for namespaced objects that name none (default "default").
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// Print objects of a kind as YAML (rayservices, rayclusters, workloads, clusterqueues,
    /// localqueues, resourceflavors, cohorts, workloadpriorityclasses, crds; singular and short
    /// names work too).
    Get {
        kind: String,
        name: Option<String>,
        /// Namespace of namespaced kinds (default "default").
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// All namespaces.
        #[arg(short = 'A', long, conflicts_with = "namespace")]
        all_namespaces: bool,
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
}

/// `raygate dev cluster`.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// Address to serve on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: std::net::SocketAddr,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "raygate-sim.kubeconfig")]
    pub kubeconfig_out: PathBuf,
    /// Upgrade domains.
    #[arg(long, default_value_t = 4)]
    pub domains: usize,
    /// GPU nodes per upgrade domain.
    #[arg(long, default_value_t = 4)]
    pub nodes_per_domain: usize,
    /// `nvidia.com/gpu` per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Serve the CRDs of every YAML file in this directory too (repeatable), beside the embedded
    /// KubeRay, Kueue, LeaderWorkerSet and raygate CRDs; one of the same group and plural
    /// replaces the embedded one.
    #[arg(long = "crd-dir")]
    pub crd_dirs: Vec<PathBuf>,
}

/// The YAML files of `dirs`, sorted by name.
fn read_crd_dirs(dirs: &[PathBuf]) -> anyhow::Result<Vec<String>> {
    let mut out = vec![];
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading --crd-dir {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            out.push(
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?,
            );
        }
    }
    Ok(out)
}

async fn serve_cluster(args: ClusterArgs) -> anyhow::Result<ExitCode> {
    crate::init_tracing(crate::LogFormat::Text);
    let config = raygate_sim::local::Config {
        addr: args.listen,
        domains: args.domains,
        nodes_per_domain: args.nodes_per_domain,
        gpus_per_node: args.gpus_per_node,
        extra_crds: read_crd_dirs(&args.crd_dirs)?,
    };
    let local = raygate_sim::local::Local::start(&config)
        .await
        .context("starting the local cluster")?;
    std::fs::write(&args.kubeconfig_out, local.kubeconfig())
        .with_context(|| format!("writing {}", args.kubeconfig_out.display()))?;
    let path =
        std::path::absolute(&args.kubeconfig_out).unwrap_or_else(|_| args.kubeconfig_out.clone());
    println!(
        "serving a local cluster on {} ({} nodes); Ctrl-C stops it\n\n  export KUBECONFIG={}\n  kubectl get nodes\n  raygate controller --pod-gate   # in another terminal, same KUBECONFIG",
        local.https().url(),
        config.domains * config.nodes_per_domain,
        path.display()
    );
    crate::shutdown_signal().await;
    Ok(ExitCode::SUCCESS)
}

async fn run_async(args: DevArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        DevCommand::Cluster(args) => serve_cluster(args).await,
        DevCommand::KuberayEmulator {
            kubeconfig,
            start_delay_ms,
            namespace,
            kuberay_version,
        } => {
            crate::init_tracing(crate::LogFormat::Text);
            let client = client(kubeconfig.as_deref()).await?;
            let config = EmulatorConfig {
                start_delay: Duration::from_millis(start_delay_ms),
                version: kuberay_version,
                namespace,
                // the dev cluster is the CRD-only server: pods are emulated by time
                pods: false,
                autoscaler: None,
                never_ready_image: None,
            };
            run_emulator(client, Clock::wall(), config, crate::shutdown_signal()).await?;
            Ok(ExitCode::SUCCESS)
        }
        DevCommand::Apply {
            files,
            namespace,
            kubeconfig,
        } => {
            let client = client(kubeconfig.as_deref()).await?;
            for file in &files {
                let text = crate::read_input(file)?;
                let source = if file.as_os_str() == "-" {
                    "<stdin>".to_string()
                } else {
                    file.display().to_string()
                };
                for a in apply(&client, &text, &source, namespace.as_deref()).await? {
                    println!("{} {}", a.object, a.outcome);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        DevCommand::Get {
            kind,
            name,
            namespace,
            all_namespaces,
            kubeconfig,
        } => {
            let kind = kind_by_name(&kind)?;
            let client = client(kubeconfig.as_deref()).await?;
            let ns = if all_namespaces && name.is_none() {
                None
            } else {
                Some(namespace.unwrap_or_else(|| "default".into()))
            };
            let text = get(&client, kind, name.as_deref(), ns.as_deref()).await?;
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Runs a `raygate dev` command.
pub fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}
