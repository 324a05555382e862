//! The HTML report (`--html FILE`): one self-contained page (inline SVG and CSS, no script, no
//! font or image fetched) that shows what the cluster's histories say, raygate's run first and
//! the baselines beside it:
//!
//! - a summary table (rollout time, evictions, disruptions, group-seconds below the floor, peak
//!   quota overrun, invariants broken) and the violations;
//! - available groups over time against each PodDisruptionBudget's floor;
//! - each RayService's serving pods over time;
//! - each ClusterQueue's use (the running pods' requests) against its quota;
//! - a Gantt per run: each upgrade domain cordoned → evicting → upgrading → recovering;
//! - raygate against the baselines as bars.
//!
//! Pure but for [`write`]: [`html`] turns plain data into text; the series it draws are derived
//! in [`series`] and drawn in [`charts`] (`plotters`' SVG backend).

pub mod charts;
pub mod series;
mod serving;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;

use crate::baselines::Outcome;
use crate::history::{History, Kind, State};
use crate::invariants::{self, Violation, Window};
use charts::{Bar, Line};
use series::{Phase, Steps};

/// LeaderWorkerSet's pod label naming a group, the default group label.
pub const LWS_GROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/group-key";

/// One run: a strategy's story on its own simulated cluster.
#[derive(Clone, Debug)]
pub struct Run {
    /// "raygate", "kubectl drain node by node", …
    pub name: String,
    pub history: History,
    /// The rollouts it drove (none in a story without one).
    pub outcomes: Vec<Outcome>,
    /// The invariants' verdict on its history.
    pub violations: Vec<Violation>,
    /// Its rollout's lower bound (`None`: not known, or no rollout), see [`crate::bound`].
    pub lower_bound: Option<std::time::Duration>,
}

impl Run {
    pub fn new(name: impl Into<String>, history: History) -> Self {
        Run {
            name: name.into(),
            history,
            outcomes: vec![],
            violations: vec![],
            lower_bound: None,
        }
    }

    /// A scenario's run: its history, its rollouts that finished and its violations.
    pub fn from_scenario(name: impl Into<String>, report: &crate::scenario::Report) -> Self {
        Run {
            name: name.into(),
            history: report.history.clone(),
            outcomes: report
                .rollouts
                .iter()
                .filter_map(|r| r.as_ref().ok().cloned())
                .collect(),
            violations: report.violations.clone(),
            lower_bound: report
                .lower_bound
                .as_ref()
                .map(crate::bound::LowerBound::total),
        }
    }

    /// From the first rollout's start to the last one's end.
    pub fn rollout(&self) -> Option<Window> {
        let from = self.outcomes.iter().map(|o| o.started).min()?;
        let to = self.outcomes.iter().map(|o| o.finished).max()?;
        Some(Window { from, to })
    }

    /// Time zero of the charts: the rollout's start, else the history's first change.
    pub fn t0(&self) -> Option<Timestamp> {
        self.rollout()
            .map(|w| w.from)
            .or_else(|| self.history.span().map(|(from, _)| from))
    }
}

/// What the report shows.
#[derive(Clone, Debug)]
pub struct Input {
    pub title: String,
    /// One line under the title (the cluster, the seed).
    pub subtitle: String,
    /// The node label naming the upgrade domain (the Gantt's rows).
    pub domain_label: String,
    /// The pod label naming a group (disruptions are counted per group); `None`: not counted.
    pub group_label: Option<String>,
    /// raygate's run first, then the baselines.
    pub runs: Vec<Run>,
}

impl Input {
    /// The scenario format's defaults: upgrade domains in `topology.raygate.io/upgrade-domain`,
    /// groups by LeaderWorkerSet's group key.
    pub fn new(title: impl Into<String>, runs: Vec<Run>) -> Self {
        Input {
            title: title.into(),
            subtitle: String::new(),
            domain_label: "topology.raygate.io/upgrade-domain".into(),
            group_label: Some(LWS_GROUP_KEY.into()),
            runs,
        }
    }
}

/// One run's numbers, as the summary table and the bars show them.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    /// `None`: no rollout in this run.
    pub rollout_seconds: Option<f64>,
    /// The rollout's lower bound ([`crate::bound`]); `None`: not known or no rollout.
    pub lower_bound_seconds: Option<f64>,
    pub evictions: usize,
    /// 429s received.
    pub refusals: usize,
    /// Groups going from up to down in the rollout (the whole history without one); `None`: no
    /// pod carries the group label.
    pub disruptions: Option<usize>,
    pub disrupted_twice: Option<usize>,
    /// `None`: no PodDisruptionBudget in the history.
    pub group_seconds_below_floor: Option<f64>,
    /// Σ over the RayServices that served of the seconds each had no serving pod; `None`: no
    /// RayService served.
    pub serving_seconds_lost: Option<f64>,
    /// The largest overrun of any ClusterQueue's quota by running pods, as a share of it;
    /// `None`: no ClusterQueue in the history.
    pub peak_quota_overrun: Option<f64>,
    pub violations: usize,
}

impl Metrics {
    /// The rollout's time over its lower bound.
    pub fn ratio_to_lower_bound(&self) -> Option<f64> {
        match (self.rollout_seconds, self.lower_bound_seconds) {
            (Some(took), Some(bound)) if bound > 0.0 => Some(took / bound),
            _ => None,
        }
    }
}

/// A run's [`Metrics`], read from its history (and its rollouts' own account for the time and
/// the evictions).
pub fn metrics(run: &Run, group_label: Option<&str>) -> Metrics {
    let window = run
        .rollout()
        .or_else(|| run.history.span().map(|(from, to)| Window { from, to }));
    let grouped = |label: &str| {
        run.history
            .changes
            .iter()
            .any(|c| matches!(&c.state, Some(State::Pod(p)) if p.labels.contains_key(label)))
    };
    let by_group = match (group_label, window) {
        (Some(label), Some(window)) if grouped(label) => {
            Some(invariants::group_disruptions(&run.history, label, window))
        }
        _ => None,
    };
    let queues = run
        .t0()
        .map(|t0| series::queues(&run.history, t0))
        .unwrap_or_default();
    let budgets = run
        .history
        .changes
        .iter()
        .any(|c| c.key.kind == Kind::PodDisruptionBudget);
    Metrics {
        rollout_seconds: run
            .rollout()
            .map(|w| w.to.duration_since(w.from).as_secs_f64()),
        lower_bound_seconds: run.rollout().and(run.lower_bound).map(|b| b.as_secs_f64()),
        evictions: run.outcomes.iter().map(|o| o.evictions).sum(),
        refusals: run.outcomes.iter().map(|o| o.refusals).sum(),
        disruptions: by_group.as_ref().map(|g| g.values().map(Vec::len).sum()),
        disrupted_twice: by_group
            .as_ref()
            .map(|g| g.values().filter(|t| t.len() > 1).count()),
        group_seconds_below_floor: budgets
            .then(|| invariants::seconds_below_pdb_floor(&run.history)),
        serving_seconds_lost: {
            let lost = invariants::serving_seconds_lost(&run.history);
            (!lost.is_empty()).then(|| lost.values().sum())
        },
        peak_quota_overrun: (!queues.is_empty())
            .then(|| queues.iter().map(|q| q.peak_overrun).fold(0.0, f64::max)),
        violations: run.violations.len(),
    }
}

/// Why the report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("writing the report to {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writes [`html`] to `path`.
pub fn write(path: &Path, input: &Input) -> Result<(), ReportError> {
    std::fs::write(path, html(input)).map_err(|source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The left border of each chart's section: a colour of its own, so a screenshot can be cut
/// into the sections (the browser test does).
pub mod markers {
    pub const AVAILABILITY: &str = "#0e7490";
    pub const SERVING: &str = "#be185d";
    pub const QUOTA: &str = "#a21caf";
    pub const GANTT: &str = "#854d0e";
    pub const BARS: &str = "#166534";
}

const CSS: &str = "\
body{font-family:sans-serif;margin:0;padding:14px 24px;color:#111827;background:#f1f5f9}\
h1{font-size:24px;margin:0 0 2px}\
.sub{color:#475569;margin:0 0 6px;font-size:14px}\
section{background:#fff;margin:12px 0;padding:8px 14px 10px 14px;border-left:10px solid #cbd5e1;border-radius:4px}\
h2{font-size:17px;margin:2px 0 4px}\
p.note{font-size:13px;color:#475569;margin:2px 0 6px}\
table{border-collapse:collapse;font-size:13px}\
td,th{padding:3px 10px;border-bottom:1px solid #e5e7eb;text-align:right}\
td:first-child,th:first-child{text-align:left}\
.swatch{display:inline-block;width:12px;height:12px;margin:0 5px -1px 0;border-radius:2px}\
.legend span.item{margin-right:16px;font-size:13px}\
.row{display:flex;gap:8px;flex-wrap:nowrap}\
svg{display:block;max-width:100%;height:auto}\
details{font-size:13px;margin-top:6px}\
.bad{color:#b91c1c;font-weight:bold}\
.error{color:#b91c1c}";

/// HTML text escaped.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn swatch(colour: &str) -> String {
    format!(r#"<span class="swatch" style="background:{colour}"></span>"#)
}

fn legend(items: &[(String, String)]) -> String {
    let mut out = String::from(r#"<p class="legend">"#);
    for (colour, label) in items {
        let _ = write!(
            out,
            r#"<span class="item">{}{}</span>"#,
            swatch(colour),
            esc(label)
        );
    }
    out.push_str("</p>");
    out
}

/// A chart, or why it could not be drawn.
pub(super) fn chart(result: Result<String, String>) -> String {
    result.unwrap_or_else(|e| format!(r#"<p class="error">chart not drawn: {}</p>"#, esc(&e)))
}

pub(super) fn section(id: &str, marker: &str, title: &str, body: &str) -> String {
    format!(
        r#"<section id="{id}" style="border-left-color:{marker}"><h2>{}</h2>{body}</section>"#,
        esc(title)
    )
}

fn seconds(v: f64) -> String {
    format!("{v:.0} s")
}

fn summary(input: &Input, metrics: &[Metrics]) -> String {
    let mut out = String::from(
        "<table><tr><th>run</th><th>rollout</th><th>lower bound</th><th>ratio</th>\
         <th>evictions</th><th>429s</th>\
         <th>group disruptions</th><th>groups disrupted twice</th>\
         <th>group-seconds below floor</th><th>serving-seconds lost</th><th>peak quota overrun</th>\
         <th>invariants broken</th></tr>",
    );
    for (i, (run, m)) in input.runs.iter().zip(metrics).enumerate() {
        // a number, red when it shows a broken promise; a dash when not measured
        let cell = |v: Option<f64>, text: &dyn Fn(f64) -> String| match v {
            Some(v) if v > 0.0 => format!(r#"<span class="bad">{}</span>"#, text(v)),
            Some(v) => text(v),
            None => "—".into(),
        };
        let count = |v: f64| format!("{v:.0}");
        let _ = write!(
            out,
            "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            swatch(&charts::hex(charts::run_colour(i))),
            esc(&run.name),
            m.rollout_seconds.map_or_else(|| "—".into(), seconds),
            m.lower_bound_seconds.map_or_else(|| "—".into(), seconds),
            m.ratio_to_lower_bound()
                .map_or_else(|| "—".into(), |r| format!("{r:.2}")),
            m.evictions,
            m.refusals,
            m.disruptions.map_or_else(|| "—".into(), |d| d.to_string()),
            cell(m.disrupted_twice.map(|d| d as f64), &count),
            cell(m.group_seconds_below_floor, &count),
            cell(m.serving_seconds_lost, &count),
            cell(m.peak_quota_overrun, &|v| format!("{:.0}%", v * 100.0)),
            cell(Some(m.violations as f64), &count),
        );
    }
    out.push_str("</table>");
    if metrics.iter().any(|m| m.lower_bound_seconds.is_some()) {
        out.push_str(
            r#"<p class="note">Lower bound: Σ over the upgrade domains of evict + hand-off + recovery, from the cluster's configured durations (pods stopping, a node's reboot, pods starting and passing their readiness probe), the same for every run; ratio: the rollout's time over it.</p>"#,
        );
    }
    for run in input.runs.iter().filter(|r| !r.violations.is_empty()) {
        let _ = write!(
            out,
            "<details><summary>{}: {} invariant violations</summary><ul>",
            esc(&run.name),
            run.violations.len()
        );
        for v in &run.violations {
            let _ = write!(out, "<li>{}</li>", esc(&v.to_string()));
        }
        out.push_str("</ul></details>");
    }
    out
}

fn run_legend(input: &Input) -> String {
    let items: Vec<(String, String)> = input
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| (charts::hex(charts::run_colour(i)), r.name.clone()))
        .collect();
    legend(&items)
}

/// The line width of run `i`: raygate's (the first) wider, so the baselines drawn over it do not
/// hide it where they agree.
pub(super) fn line_width(i: usize) -> u32 {
    if i == 0 { 6 } else { 2 }
}

/// Dashed reference lines (floors, quotas): one line across every run's time when all runs
/// hold the same constant value (the common case: one budget, one quota), else one per run.
fn references(input: &Input, per_run: &[(usize, &Steps)], what: &str) -> Vec<(String, Steps)> {
    let constant = |s: &Steps| -> Option<f64> {
        let v = s.first()?.1;
        s.iter().all(|(_, w)| *w == v).then_some(v)
    };
    let values: Vec<Option<f64>> = per_run.iter().map(|(_, s)| constant(s)).collect();
    if let Some(Some(v)) = values.first()
        && values.iter().all(|w| *w == Some(*v))
    {
        let (from, to) = charts::time_range(per_run.iter().map(|(_, s)| *s));
        return vec![(what.to_string(), vec![(from, *v), (to, *v)])];
    }
    per_run
        .iter()
        .map(|(i, s)| (format!("{what} ({})", input.runs[*i].name), (*s).clone()))
        .collect()
}

fn availability(input: &Input) -> String {
    let per_run: Vec<Vec<series::BudgetSeries>> = input
        .runs
        .iter()
        .map(|r| {
            r.t0()
                .map_or_else(Vec::new, |t0| series::budgets(&r.history, t0))
        })
        .collect();
    let mut names: Vec<&str> = per_run
        .iter()
        .flatten()
        .map(|b| b.budget.as_str())
        .collect();
    names.sort();
    names.dedup();
    let mut body = String::from(
        r#"<p class="note">The pods each PodDisruptionBudget selects that are Ready and not being deleted, per run (with a budget on the groups' leaders and delegated readiness: the available groups), against the budget's floor (dashed). Each second under the floor costs a group-second per missing group.</p>"#,
    );
    if names.is_empty() {
        body.push_str(r#"<p class="note">No PodDisruptionBudget in these histories.</p>"#);
    }
    for name in names {
        let found: Vec<(usize, &series::BudgetSeries)> = per_run
            .iter()
            .enumerate()
            .filter_map(|(i, bs)| Some((i, bs.iter().find(|b| b.budget == name)?)))
            .collect();
        let mut lines: Vec<Line<'_>> = found
            .iter()
            .map(|(i, b)| Line {
                label: input.runs[*i].name.clone(),
                colour: charts::run_colour(*i),
                width: line_width(*i),
                dashed: false,
                steps: &b.healthy,
            })
            .collect();
        let floors: Vec<(usize, &Steps)> = found.iter().map(|(i, b)| (*i, &b.floor)).collect();
        let floors = references(input, &floors, "floor");
        for (label, steps) in &floors {
            lines.push(Line {
                label: label.clone(),
                colour: charts::FLOOR,
                width: 2,
                dashed: true,
                steps,
            });
        }
        body.push_str(&chart(charts::time_chart(
            &format!("PodDisruptionBudget {name}: healthy pods it selects"),
            "available",
            320,
            &lines,
            None,
        )));
    }
    section(
        "availability",
        markers::AVAILABILITY,
        "Available groups against each budget's floor",
        &body,
    )
}

fn quota(input: &Input) -> String {
    let per_run: Vec<Vec<series::QueueSeries>> = input
        .runs
        .iter()
        .map(|r| {
            r.t0()
                .map_or_else(Vec::new, |t0| series::queues(&r.history, t0))
        })
        .collect();
    // the held children of the runs charged to a queue: what waited for quota
    let held: Vec<(f64, f64)> = input
        .runs
        .iter()
        .zip(&per_run)
        .filter(|(_, qs)| !qs.is_empty())
        .filter_map(|(r, _)| Some(series::held(&r.history, r.t0()?)))
        .flatten()
        .map(|h| (h.from, h.to))
        .collect();
    let mut names: Vec<(&str, &str)> = per_run
        .iter()
        .flatten()
        .map(|q| (q.queue.as_str(), q.resource.as_str()))
        .collect();
    names.sort();
    names.dedup();
    let mut body = String::from(
        r#"<p class="note">The requests of the pods charged to each ClusterQueue that hold their resources (bound, not finished: a terminating pod still holds its GPUs), per run, against the quota (dashed: nominal, plus the borrowing limit in a cohort). Shaded: a RayCluster held (suspended), e.g. an upgrade's child waiting for quota.</p>"#,
    );
    if names.is_empty() {
        body.push_str(r#"<p class="note">No ClusterQueue in these histories.</p>"#);
    }
    for (queue, resource) in names {
        body.push_str(&queue_chart(input, &per_run, queue, resource, &held));
    }
    section(
        "quota",
        markers::QUOTA,
        "ClusterQueue usage against quota",
        &body,
    )
}

/// One ClusterQueue resource's chart: each run's usage against its quota, the held children
/// shaded.
fn queue_chart(
    input: &Input,
    per_run: &[Vec<series::QueueSeries>],
    queue: &str,
    resource: &str,
    held: &[(f64, f64)],
) -> String {
    let found: Vec<(usize, &series::QueueSeries)> = per_run
        .iter()
        .enumerate()
        .filter_map(|(i, qs)| {
            Some((
                i,
                qs.iter()
                    .find(|q| q.queue == queue && q.resource == resource)?,
            ))
        })
        .collect();
    // a quota that may borrow without limit has no line while it may
    let limits: Vec<Steps> = found
        .iter()
        .map(|(_, q)| {
            q.limit
                .iter()
                .filter_map(|(t, l)| Some((*t, (*l)?)))
                .collect()
        })
        .collect();
    let mut lines: Vec<Line<'_>> = found
        .iter()
        .map(|(i, q)| Line {
            label: input.runs[*i].name.clone(),
            colour: charts::run_colour(*i),
            width: line_width(*i),
            dashed: false,
            steps: &q.used,
        })
        .collect();
    let quotas: Vec<(usize, &Steps)> = found
        .iter()
        .zip(&limits)
        .filter(|(_, l)| !l.is_empty())
        .map(|((i, _), l)| (*i, l))
        .collect();
    let quotas = references(input, &quotas, "quota");
    for (label, steps) in &quotas {
        lines.push(Line {
            label: label.clone(),
            colour: charts::QUOTA,
            width: 2,
            dashed: true,
            steps,
        });
    }
    chart(charts::time_chart(
        &format!("ClusterQueue {queue}: {resource} requested by running pods"),
        resource,
        300,
        &lines,
        Some(charts::Bands {
            label: "a RayCluster held (suspended)",
            spans: held,
        }),
    ))
}

fn gantts(input: &Input, metrics: &[Metrics]) -> String {
    let rows: Vec<(usize, Vec<series::DomainRow>)> = input
        .runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let w = r.rollout()?;
            Some((
                i,
                series::domain_phases(&r.history, &input.domain_label, w.from, w.from),
            ))
        })
        .collect();
    let mut body = legend(
        &Phase::ALL
            .iter()
            .map(|p| (charts::hex(charts::phase_colour(*p)), p.name().to_string()))
            .collect::<Vec<_>>(),
    );
    body.push_str(
        r#"<p class="note">Per upgrade domain, from its nodes and pods: <b>cordoned</b> with pods still on it (a drain waiting), <b>evicting</b>, <b>upgrading</b> (empty, handed to the upgrade agent, rebooting), <b>recovering</b> (back, the pods that ran on it not all healthy again).</p>"#,
    );
    if rows.is_empty() {
        body.push_str(r#"<p class="note">No rollout in these runs.</p>"#);
    }
    let end = rows
        .iter()
        .flat_map(|(_, rs)| rs.iter().flat_map(|r| r.spans.iter().map(|s| s.to)))
        .fold(1.0_f64, f64::max);
    for (i, rs) in &rows {
        let took = metrics[*i]
            .rollout_seconds
            .map_or_else(String::new, |s| format!(": rollout {}", seconds(s)));
        body.push_str(&chart(charts::gantt(
            &format!("{}{took}", input.runs[*i].name),
            rs,
            (0.0, end),
        )));
    }
    section(
        "gantt",
        markers::GANTT,
        "The rollout per upgrade domain",
        &body,
    )
}

fn comparison(input: &Input, metrics: &[Metrics]) -> String {
    let metric = |f: &dyn Fn(&Metrics) -> Option<f64>| -> Vec<Bar> {
        metrics
            .iter()
            .enumerate()
            .map(|(i, m)| Bar {
                colour: charts::run_colour(i),
                value: f(m),
            })
            .collect()
    };
    let width = 318;
    let mut body = run_legend(input);
    body.push_str(r#"<div class="row">"#);
    let panels: [(&str, &str, Vec<Bar>); 4] = [
        (
            "rollout time",
            " s",
            metric(&|m: &Metrics| m.rollout_seconds),
        ),
        (
            "group disruptions",
            "",
            metric(&|m: &Metrics| m.disruptions.map(|d| d as f64)),
        ),
        (
            "group-seconds below the floor",
            "",
            metric(&|m: &Metrics| m.group_seconds_below_floor),
        ),
        (
            "peak quota overrun",
            "%",
            metric(&|m: &Metrics| m.peak_quota_overrun.map(|o| o * 100.0)),
        ),
    ];
    for (caption, unit, bars) in &panels {
        body.push_str(&chart(charts::bars(caption, unit, bars, width)));
    }
    body.push_str("</div>");
    section(
        "comparison",
        markers::BARS,
        "raygate against the baselines",
        &body,
    )
}

/// The report: one HTML page, everything inline.
pub fn html(input: &Input) -> String {
    let metrics: Vec<Metrics> = input
        .runs
        .iter()
        .map(|r| metrics(r, input.group_label.as_deref()))
        .collect();
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{}</title><style>{CSS}</style></head><body>\
         <h1>{}</h1><p class=\"sub\">{}</p>",
        esc(&input.title),
        esc(&input.title),
        esc(&input.subtitle),
    );
    out.push_str(&section(
        "summary",
        "#cbd5e1",
        "Summary (from the cluster's own history)",
        &summary(input, &metrics),
    ));
    out.push_str(&availability(input));
    out.push_str(&serving::section(input));
    out.push_str(&quota(input));
    out.push_str(&gantts(input, &metrics));
    out.push_str(&comparison(input, &metrics));
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests;
