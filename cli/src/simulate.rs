//! `raygate demo` and `raygate simulate -f`: a story on the simulated cluster (raygate-demo),
//! shown live, then the timeline and the summary; the exit code says whether it held.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use raygate_demo::scenario::Checked;
use raygate_demo::story::{self, Out};
use raygate_demo::{report, show};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimOutput {
    /// The live lines, then the timeline and the summary table.
    Table,
    /// The report as one JSON document (no live lines).
    Json,
}

#[derive(clap::Args)]
pub struct SimulateArgs {
    /// A scenario file (see README, "Scenario files"; "-" for standard input).
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// Default: the table on a terminal, JSON when piped.
    #[arg(short = 'o', long = "output", value_enum)]
    output: Option<SimOutput>,
    /// Also write the run as one self-contained HTML page (charts, no network) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

/// `raygate demo`'s one option.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Also write the run as one self-contained HTML page (charts, no network) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

/// Exit 0 when every invariant held and every expectation was met, 1 otherwise.
pub fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let checked = story::demo().context("the embedded demo story")?;
    play(&checked, SimOutput::Table, args.html.as_deref())
}

/// Exit 2 on a bad scenario file (line and field named), else as [`demo`].
pub fn simulate(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let text = crate::read_input(&args.file)?;
    let source = args.file.display().to_string();
    let checked = match raygate_demo::scenario::parse(&text, &source) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let output = args.output.unwrap_or(if std::io::stdout().is_terminal() {
        SimOutput::Table
    } else {
        SimOutput::Json
    });
    play(&checked, output, args.html.as_deref())
}

fn play(
    checked: &Checked,
    output: SimOutput,
    html: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let tty = std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout();
    let mut status_shown = false;
    let mut display = |o: Out| {
        if output == SimOutput::Json {
            return;
        }
        // a terminal gets a status line rewritten in place under the lines; a pipe, lines only
        let _ = match (o, tty) {
            (Out::Line(l), true) => writeln!(stdout, "\r\x1b[2K{l}"),
            (Out::Line(l), false) => writeln!(stdout, "{l}"),
            (Out::Status(s), true) => {
                status_shown = true;
                write!(stdout, "\r\x1b[2K{s}").and_then(|()| stdout.flush())
            }
            (Out::Status(_), false) => Ok(()),
        };
    };
    // the sim is built inside the paused runtime: its clock then starts with the runtime's, so
    // the run (names, timestamps) is the same every time
    let played = story::block_on_paused(async {
        let sim = story::sim_for(checked)?;
        story::play(sim, checked, &mut display).await
    })??;
    if status_shown {
        print!("\r\x1b[2K");
    }
    match output {
        SimOutput::Table => print!(
            "{}",
            show::summary(&played.report, &played.lines, played.wall)
        ),
        SimOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&show::report_json(&played.report, played.wall))?
        ),
    }
    if let Some(path) = html {
        let run = report::Run::from_scenario("raygate", &played.report);
        let mut input = report::Input::new(played.report.name.clone(), vec![run]);
        input.subtitle = checked.scenario.description.trim().to_string();
        input.domain_label = checked.scenario.cluster.domain_label.clone();
        report::write(path, &input)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(if played.report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
