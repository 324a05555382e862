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
    /// A scenario file (see docs/simulations.md, "Scenario files"; "-" for standard input).
    #[arg(
        short = 'f',
        long = "filename",
        required_unless_present = "seeds",
        conflicts_with = "seeds"
    )]
    file: Option<PathBuf>,
    /// Instead of a file: the reliability sweep over N generated seeds (random clusters and
    /// timelines), raygate and each baseline on every seed; prints the violations per invariant
    /// and exits 1 if raygate broke one.
    #[arg(long, value_name = "N", conflicts_with_all = ["output", "html", "history"])]
    seeds: Option<u64>,
    /// With --seeds: the first seed (default 0).
    #[arg(long, value_name = "S", requires = "seeds", default_value_t = 0)]
    first: u64,
    /// With --seeds: threads running seeds at once (default 2).
    #[arg(long, value_name = "T", requires = "seeds", default_value_t = 2)]
    threads: usize,
    /// Default: the table on a terminal, JSON when piped.
    #[arg(short = 'o', long = "output", value_enum)]
    output: Option<SimOutput>,
    /// Also write the run as one self-contained HTML page (charts, no network) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write the recorded history of raygate's run to FILE as JSON lines, one per change
    /// (docs/simulations.md, "History lines").
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// Also run the story's baselines, each on a cluster of its own with the same shape and seed
    /// (KubeRay without the gate for a gated RayService; kubectl drain node by node, random drains
    /// of 2 nodes and UD by UD for a rollout), and show raygate beside them.
    #[arg(long)]
    baselines: bool,
}

/// `raygate demo`'s options.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Also write the run as one self-contained HTML page (charts, no network) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write the recorded history of raygate's run to FILE as JSON lines, one per change
    /// (docs/simulations.md, "History lines").
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
}

/// The files a run also writes.
#[derive(Clone, Copy, Default)]
struct Files<'a> {
    html: Option<&'a std::path::Path>,
    history: Option<&'a std::path::Path>,
}

/// Exit 0 when every invariant held and every expectation was met, 1 otherwise.
pub fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let checked = story::demo().context("the embedded demo story")?;
    // the demo always shows raygate beside its baselines (issue #14: the same run, cluster, seed)
    let files = Files {
        html: args.html.as_deref(),
        history: args.history.as_deref(),
    };
    play(&checked, SimOutput::Table, files, true)
}

/// Exit 2 on a bad scenario file (line and field named), else as [`demo`].
pub fn simulate(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let file = match (&args.file, args.seeds) {
        (_, Some(n)) => return seeds(args.first, n, args.threads),
        (Some(f), None) => f,
        (None, None) => anyhow::bail!("give a scenario file (-f FILE) or --seeds N"),
    };
    let text = crate::read_input(file)?;
    let source = file.display().to_string();
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
    let files = Files {
        html: args.html.as_deref(),
        history: args.history.as_deref(),
    };
    play(&checked, output, files, args.baselines)
}

/// On a terminal, one line on standard error kept current: seeds done, stalled, elapsed and
/// an estimate of what is left; elsewhere nothing (a log or a pipe gets the summary only).
fn progress_line(
    started: std::time::Instant,
) -> std::sync::Arc<dyn Fn(raygate_demo::sweep::Progress) + Send + Sync> {
    if !std::io::stderr().is_terminal() {
        return std::sync::Arc::new(|_| {});
    }
    std::sync::Arc::new(move |p: raygate_demo::sweep::Progress| {
        eprint!("\r\x1b[2K{}", sweep_progress(p, started.elapsed()));
    })
}

/// `seeds 37/300 · 0 stalled · 41 s, about 4 min 51 s left`.
fn sweep_progress(p: raygate_demo::sweep::Progress, elapsed: std::time::Duration) -> String {
    let secs = elapsed.as_secs();
    let left = (p.done > 0).then(|| {
        let per_seed = elapsed.as_secs_f64() / p.done as f64;
        (per_seed * p.total.saturating_sub(p.done) as f64).round() as u64
    });
    let clock = |s: u64| match s {
        0..60 => format!("{s} s"),
        _ => format!("{} min {} s", s / 60, s % 60),
    };
    let left = left.map_or(String::new(), |l| format!(", about {} left", clock(l)));
    format!(
        "seeds {}/{} · {} stalled · {}{left}",
        p.done,
        p.total,
        p.stalled,
        clock(secs)
    )
}

/// `raygate simulate --seeds N`: the sweep over seeds `first..first + n` (each a generated
/// story, raygate and the baselines on it), its table on standard output; exit 1 if raygate
/// broke an invariant, a rollout failed or a seed stalled (5 minutes of wall time).
fn seeds(first: u64, n: u64, threads: usize) -> anyhow::Result<ExitCode> {
    let registry = raygate_sim::server::upstream::registry().context("the embedded CRDs")?;
    let wall = std::time::Instant::now();
    let summary = raygate_demo::sweep::sweep_reporting(
        &registry,
        first..first.saturating_add(n),
        threads,
        std::time::Duration::from_secs(300),
        progress_line(wall),
    );
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
    let took = wall.elapsed().as_secs_f64();
    print!("{summary}");
    println!("wall time: {took:.1} s for {n} seeds (from seed {first}) on {threads} threads",);
    Ok(if summary.raygate_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn play(
    checked: &Checked,
    output: SimOutput,
    files: Files,
    with_baselines: bool,
) -> anyhow::Result<ExitCode> {
    let registry = raygate_sim::server::upstream::registry().context("the embedded CRDs")?;
    // the baselines run on two threads of their own while raygate's story plays on this one
    let runs = if with_baselines {
        story::baselines(checked)
    } else {
        vec![]
    };
    let baselines = (!runs.is_empty()).then(|| story::run_all(&registry, runs, 2));
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
        let sim = story::sim_with(&registry, checked);
        story::play(sim, checked, &mut display).await
    })??;
    if baselines.is_some() && output == SimOutput::Table {
        println!("(running the baselines on the same cluster and seed…)");
    }
    let baselines = match baselines {
        Some(handle) => handle
            .join()
            .map_err(|_| anyhow::anyhow!("a baseline's thread panicked"))?,
        None => vec![],
    };
    if status_shown {
        print!("\r\x1b[2K");
    }
    match output {
        SimOutput::Table => print!(
            "{}",
            show::summary(&played.report, &played.lines, played.wall, &baselines)
        ),
        SimOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&with_baselines_json(
                show::report_json(&played.report, played.wall),
                &baselines
            ))?
        ),
    }
    write_files(checked, &played.report, &baselines, files)?;
    // a baseline breaking invariants is what it shows; one that could not run is a broken demo
    let baselines_ran = baselines.iter().all(|(_, r)| r.is_ok());
    Ok(if played.report.passed() && baselines_ran {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Writes the files a run was asked for: raygate's history as JSON lines, the HTML report.
fn write_files(
    checked: &Checked,
    played: &raygate_demo::scenario::Report,
    baselines: &[raygate_demo::scenario::BaselineRun],
    files: Files,
) -> anyhow::Result<()> {
    if let Some(path) = files.history {
        let file = std::fs::File::create(path).with_context(|| format!("{}", path.display()))?;
        played
            .history
            .write_lines(played.started, std::io::BufWriter::new(file))
            .with_context(|| format!("{}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = files.html {
        let mut runs = vec![report::Run::from_scenario("raygate", played)];
        runs.extend(
            baselines.iter().filter_map(|(name, r)| {
                r.as_ref().ok().map(|r| report::Run::from_scenario(name, r))
            }),
        );
        let mut input = report::Input::new(played.name.clone(), runs);
        input.subtitle = checked.scenario.description.trim().to_string();
        input.domain_label = checked.scenario.cluster.domain_label.clone();
        report::write(path, &input)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// `report` with `baselines: [{name, report}]` (each baseline's report as `-o json` gives
/// raygate's, or `{name, error}`).
fn with_baselines_json(
    mut report: serde_json::Value,
    baselines: &[raygate_demo::scenario::BaselineRun],
) -> serde_json::Value {
    if baselines.is_empty() {
        return report;
    }
    report["baselines"] = baselines
        .iter()
        .map(|(name, r)| match r {
            Ok(r) => serde_json::json!({"name": name,
                "report": show::report_json(r, std::time::Duration::ZERO)}),
            Err(e) => serde_json::json!({"name": name, "error": e}),
        })
        .collect();
    report
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use raygate_demo::sweep::Progress;

    use super::sweep_progress;

    #[test]
    fn the_sweep_s_progress_line_counts_seeds_and_estimates_what_is_left() {
        let p = |done, stalled| Progress {
            done,
            total: 300,
            stalled,
        };
        assert_eq!(
            sweep_progress(p(0, 0), Duration::from_secs(3)),
            "seeds 0/300 · 0 stalled · 3 s"
        );
        assert_eq!(
            sweep_progress(p(30, 1), Duration::from_secs(20)),
            "seeds 30/300 · 1 stalled · 20 s, about 3 min 0 s left"
        );
    }
}
