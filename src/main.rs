//! raygate's command line: a thin front over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use raygate::cli::{self, Output};

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
    /// Print the PodSets (pods × per-pod requests) a RayService needs now, from a manifest file
    /// holding one RayService and any of its child RayClusters.
    Podsets {
        /// Multi-document YAML file ("-" for standard input).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        #[arg(short = 'o', long = "output", value_enum, default_value = "json")]
        output: Output,
    },
    /// Write the kueue.x-k8s.io CRDs raygate installs (when Kueue is absent) into a directory.
    Crdgen {
        #[arg(long, default_value = "crds")]
        out: PathBuf,
    },
}

fn read_input(path: &PathBuf) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Podsets { file, output } => {
            let text = read_input(&file)?;
            let result =
                cli::podsets(&text).and_then(|r| cli::render(&r, output, cli::podsets_table));
            Ok(print_or_exit2(result))
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
    }
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
