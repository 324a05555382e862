//! The report's serving section: each RayService's serving pods over time, one line per run.

use super::charts::{self, Line};
use super::{Input, chart, line_width, markers, section as html_section, series};

/// Each RayService's serving pods, per run (see [`series::serving`]).
pub(super) fn section(input: &Input) -> String {
    let per_run: Vec<Vec<series::ServingSeries>> = input
        .runs
        .iter()
        .map(|r| {
            r.t0()
                .map_or_else(Vec::new, |t0| series::serving(&r.history, t0))
        })
        .collect();
    let mut names: Vec<&str> = per_run
        .iter()
        .flatten()
        .map(|s| s.service.as_str())
        .collect();
    names.sort();
    names.dedup();
    let mut body = String::from(
        r#"<p class="note">The pods each RayService serves from, per run: Ready, not being deleted, labelled <code>ray.io/serve=true</code>, in the cluster its status names active (what KubeRay counts as serve endpoints). A line at 0 after the service first served is an outage.</p>"#,
    );
    if names.is_empty() {
        body.push_str(r#"<p class="note">No RayService in these histories.</p>"#);
    }
    for name in names {
        let lines: Vec<Line<'_>> = per_run
            .iter()
            .enumerate()
            .filter_map(|(i, ss)| Some((i, ss.iter().find(|s| s.service == name)?)))
            .map(|(i, s)| Line {
                label: input.runs[i].name.clone(),
                colour: charts::run_colour(i),
                width: line_width(i),
                dashed: false,
                steps: &s.pods,
            })
            .collect();
        body.push_str(&chart(charts::time_chart(
            &format!("RayService {name}: serving pods"),
            "pods",
            260,
            &lines,
            None,
        )));
    }
    html_section(
        "serving",
        markers::SERVING,
        "Serving pods of each RayService",
        &body,
    )
}
