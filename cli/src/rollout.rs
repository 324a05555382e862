//! `raygate rollout get|watch|pause|resume|abort NAME`: one read or patch of a NodeRollout
//! (cluster-scoped: no namespace), or a line per status change (`watch`), and an exit code
//! (`raygate::cli::rollout_verbs::exit`).

use std::path::PathBuf;
use std::process::ExitCode;

use raygate::cli::rollout::Ended;
use raygate::cli::rollout_verbs::{self as verbs, exit};
use raygate::cli::{self, Output};
use raygate::client::live;
use raygate::client::rollout::{self as io, VerbError};

#[derive(clap::Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    command: RolloutCommand,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long, global = true)]
    context: Option<String>,
}

#[derive(clap::Subcommand)]
enum RolloutCommand {
    /// Phase, current domain, progress, who paused it (spec.paused, or the engine: a failure
    /// with failureAction Pause, manual mode after a domain) and the Ready, Progressing and
    /// Blocked conditions with reason and message.
    /// Exit code 0: shown; 2: no such NodeRollout; 3: the cluster could not be read.
    Get {
        name: String,
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Output,
    },
    /// A line per change of its status (phase, progress, domain, why it waits) until it
    /// completes or fails; only reads (Ctrl-C stops watching, the rollout goes on).
    /// Exit code 0: completed; 1: failed; 2: no such NodeRollout; 3: the cluster could not be
    /// read; 130: interrupted.
    Watch { name: String },
    /// Set spec.paused=true: no new evictions (those already sent finish), the state is kept.
    /// Exit code 0: paused; 2: no such NodeRollout; 3: the cluster could not be written.
    Pause { name: String },
    /// Set spec.paused=false and, when the engine paused it, bump the raygate.io/resume counter
    /// to its next value (conditioned on the object as read; retried on a conflict).
    /// Exit code 0: resumed, or nothing to resume; 2: no such NodeRollout; 3: the cluster could
    /// not be written.
    Resume { name: String },
    /// Ask the controller to abort: no more evictions; the domain in progress is given back
    /// (raygate's cordon, taint and hand-off label lifted; domains not started lose raygate's
    /// taint; drained domains keep what their hand-off left) and the rollout is Failed with
    /// reason AbortedOnRequest, whatever spec.failureAction says. Sets the raygate.io/abort
    /// annotation and spec.paused=false (a paused rollout must run to abort). `rollout watch`
    /// shows it end.
    /// Exit code 0: asked, or nothing to abort (completed or failed); 2: no such NodeRollout;
    /// 3: the cluster could not be written.
    Abort { name: String },
}

pub fn run(args: RolloutArgs) -> ExitCode {
    let result = tokio::runtime::Runtime::new()
        .map_err(|e| (format!("starting the async runtime: {e}"), exit::API))
        .and_then(|rt| rt.block_on(command(args)));
    match result {
        Ok((text, code)) => {
            print!("{text}");
            ExitCode::from(code)
        }
        Err((message, code)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

/// What to print and the exit code, or the error line and its exit code.
async fn command(args: RolloutArgs) -> Result<(String, u8), (String, u8)> {
    let failed = |e: VerbError| (e.to_string(), e.exit_code());
    let client = live::client(args.kubeconfig.as_deref(), args.context.as_deref())
        .await
        .map_err(|e| (e.to_string(), exit::API))?;
    match args.command {
        RolloutCommand::Get { name, output } => {
            let o = io::get(&client, &name).await.map_err(failed)?;
            cli::render(&verbs::view(&o), output)
                .map(|text| (text, exit::OK))
                .map_err(|e| (e.to_string(), exit::API))
        }
        RolloutCommand::Watch { name } => {
            let interrupt = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            // the lines are printed as they come
            let ended = io::watch(&client, &name, |l| println!("{l}"), interrupt)
                .await
                .map_err(failed)?;
            match &ended {
                Ended::Failed(why) => Err((
                    format!("noderollout {name} failed: {why}"),
                    ended.exit_code(),
                )),
                _ => Ok((String::new(), ended.exit_code())),
            }
        }
        RolloutCommand::Pause { name } => {
            io::pause_rollout(&client, &name).await.map_err(failed)?;
            let text = format!("noderollout {name} paused: spec.paused set to true\n");
            Ok((text, exit::OK))
        }
        RolloutCommand::Resume { name } => {
            let done = io::resume_rollout(&client, &name).await.map_err(failed)?;
            Ok((done.line(&name), exit::OK))
        }
        RolloutCommand::Abort { name } => {
            let text = match io::abort_rollout(&client, &name).await.map_err(failed)? {
                Some(why) => format!("noderollout {name} {why}\n"),
                None => format!(
                    "noderollout {name}: abort asked (raygate.io/abort=true); the controller gives \
                     the drained nodes back and marks it Failed\n"
                ),
            };
            Ok((text, exit::OK))
        }
    }
}
