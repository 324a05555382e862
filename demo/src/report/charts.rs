//! The report's charts, drawn by `plotters` as inline SVG (pure: series in, SVG text out). Text is
//! emitted as SVG `<text>` in a generic family, so no font file is read: the browser sets it.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::series::{DomainRow, Phase, Steps};

/// Every chart's width in pixels (the page is laid out for a 1400 px wide window).
pub const WIDTH: u32 = 1300;

/// A run's colour: raygate first, then the baselines.
pub const RUNS: [RGBColor; 6] = [
    RGBColor(0x25, 0x63, 0xeb),
    RGBColor(0xea, 0x58, 0x0c),
    RGBColor(0x7c, 0x3a, 0xed),
    RGBColor(0x0d, 0x94, 0x88),
    RGBColor(0xbe, 0x18, 0x5d),
    RGBColor(0x4b, 0x55, 0x63),
];
/// A budget's floor (dashed).
pub const FLOOR: RGBColor = RGBColor(0xdc, 0x26, 0x26);
/// A queue's quota (dashed).
pub const QUOTA: RGBColor = RGBColor(0x11, 0x18, 0x27);
/// The background band of a time chart (a RayCluster held for quota).
pub const BAND: RGBColor = RGBColor(0xfe, 0xf0, 0x8a);

pub fn run_colour(i: usize) -> RGBColor {
    RUNS[i % RUNS.len()]
}

pub fn phase_colour(p: Phase) -> RGBColor {
    match p {
        Phase::Cordoned => RGBColor(0xfa, 0xcc, 0x15),
        Phase::Evicting => RGBColor(0xf4, 0x3f, 0x5e),
        Phase::Upgrading => RGBColor(0x94, 0xa3, 0xb8),
        Phase::Recovering => RGBColor(0x22, 0xc5, 0x5e),
    }
}

/// `#rrggbb`.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

const GRID: RGBColor = RGBColor(0xe5, 0xe7, 0xeb);
const FONT: &str = "sans-serif";
// plotters' SVG backend writes a font size of `size / 1.24`: the sizes below are ~1.24× the
// pixels wanted

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// An axis value: whole numbers without decimals, others with one.
fn tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Draws on a fresh SVG of `width` × `height` and returns its text.
fn svg(
    width: u32,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// A step series as a polyline: each value held until the next point.
pub fn staircase(steps: &Steps) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(steps.len() * 2);
    for (i, &(t, v)) in steps.iter().enumerate() {
        if i > 0
            && let Some(&(_, prev)) = out.last()
        {
            out.push((t, prev));
        }
        out.push((t, v));
    }
    out
}

/// One line of a time chart.
pub struct Line<'a> {
    pub label: String,
    pub colour: RGBColor,
    pub width: u32,
    pub dashed: bool,
    pub steps: &'a Steps,
}

/// The x range of a set of step series (a second at least).
pub fn time_range<'a>(series: impl IntoIterator<Item = &'a Steps>) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for s in series {
        for &(t, _) in s {
            lo = lo.min(t);
            hi = hi.max(t);
        }
    }
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    (lo, hi.max(lo + 1.0))
}

/// Intervals shaded behind a time chart's lines, under one legend label.
pub struct Bands<'a> {
    pub label: &'a str,
    pub spans: &'a [(f64, f64)],
}

/// Step lines over time: the available groups against a floor, a queue's use against its quota.
pub fn time_chart(
    caption: &str,
    y_desc: &str,
    height: u32,
    lines: &[Line<'_>],
    bands: Option<Bands<'_>>,
) -> Result<String, String> {
    let (x0, x1) = time_range(lines.iter().map(|l| l.steps));
    let y_max = lines
        .iter()
        .flat_map(|l| l.steps.iter().map(|(_, v)| *v))
        .fold(0.0_f64, f64::max);
    let y_top = (y_max * 1.15).max(y_max + 1.0);
    svg(WIDTH, height, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, (FONT, 24))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0..y_top)
            .map_err(err)?;
        // under the grid and the lines
        if let Some(bands) = bands.filter(|b| !b.spans.is_empty()) {
            chart
                .draw_series(bands.spans.iter().map(|&(from, to)| {
                    Rectangle::new([(from.max(x0), 0.0), (to.min(x1), y_top)], BAND.filled())
                }))
                .map_err(err)?
                .label(bands.label)
                .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 24, y + 6)], BAND.filled()));
        }
        chart
            .configure_mesh()
            .light_line_style(GRID)
            .bold_line_style(GRID)
            .x_desc("seconds since the rollout started (a story without one: since its start)")
            .y_desc(y_desc)
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .x_label_formatter(&|x| format!("{x:.0}"))
            // whole units while they are few (pods, GPUs)
            .y_labels((y_top.ceil() as usize + 1).clamp(2, 11))
            .y_label_formatter(&|y| tick(*y))
            .draw()
            .map_err(err)?;
        for line in lines {
            let style = line.colour.stroke_width(line.width);
            let points = staircase(line.steps);
            let colour = line.colour;
            let width = line.width;
            let drawn = if line.dashed {
                chart.draw_series(DashedLineSeries::new(points, 10, 6, style))
            } else {
                chart.draw_series(LineSeries::new(points, style))
            }
            .map_err(err)?;
            drawn.label(line.label.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], colour.stroke_width(width))
            });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 17))
            .background_style(WHITE.mix(0.9))
            .border_style(GRID)
            .draw()
            .map_err(err)
    })
}

/// One run's rollout as a Gantt: a row per upgrade domain, a bar per phase, on `x_range`.
pub fn gantt(caption: &str, rows: &[DomainRow], x_range: (f64, f64)) -> Result<String, String> {
    let n = rows.len().max(1);
    let height = 70 + 34 * u32::try_from(n).unwrap_or(u32::MAX / 64).min(64);
    svg(WIDTH, height, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, (FONT, 21))
            .margin(8)
            .x_label_area_size(26)
            .y_label_area_size(90)
            .build_cartesian_2d(x_range.0..x_range.1, 0.0..n as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .light_line_style(GRID)
            .bold_line_style(GRID)
            .label_style((FONT, 16))
            .x_label_formatter(&|x| format!("{x:.0} s"))
            .draw()
            .map_err(err)?;
        let bars = rows.iter().enumerate().flat_map(|(i, row)| {
            // the first domain on top
            let y = (n - 1 - i) as f64;
            row.spans.iter().map(move |s| {
                Rectangle::new(
                    [(s.from, y + 0.15), (s.to, y + 0.85)],
                    phase_colour(s.phase).filled(),
                )
            })
        });
        chart.draw_series(bars).map_err(err)?;
        let label = (FONT, 18)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Right, VPos::Center));
        for (i, row) in rows.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(x_range.0, (n - 1 - i) as f64 + 0.5));
            root.draw_text(&row.domain, &label, (px - 8, py))
                .map_err(err)?;
        }
        Ok(())
    })
}

/// One bar per run, its value written above it.
pub struct Bar {
    pub colour: RGBColor,
    /// `None`: not measured for this run (no bar, a dash).
    pub value: Option<f64>,
}

/// One metric across runs.
pub fn bars(caption: &str, unit: &str, bars: &[Bar], width: u32) -> Result<String, String> {
    let max = bars.iter().filter_map(|b| b.value).fold(0.0_f64, f64::max);
    let top = if max > 0.0 { max * 1.25 } else { 1.0 };
    let n = bars.len().max(1) as f64;
    svg(width, 280, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, (FONT, 21))
            .margin(10)
            .x_label_area_size(10)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..n, 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .light_line_style(GRID)
            .bold_line_style(GRID)
            .label_style((FONT, 15))
            .y_labels(6)
            .y_label_formatter(&|y| tick(*y))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                let v = b.value?;
                let x = i as f64;
                Some(Rectangle::new(
                    [(x + 0.15, 0.0), (x + 0.85, v)],
                    b.colour.filled(),
                ))
            }))
            .map_err(err)?;
        let text = (FONT, 18)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        for (i, b) in bars.iter().enumerate() {
            let x = i as f64 + 0.5;
            let (label, y) = match b.value {
                Some(v) => (format!("{v:.0}{unit}"), v),
                None => ("—".to_string(), 0.0),
            };
            let (px, py) = chart.backend_coord(&(x, y));
            root.draw_text(&label, &text, (px, py - 4)).map_err(err)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::series::Span;

    /// The text of every `<text>` element (plotters writes it on a line of its own).
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                Some(
                    t.split_once('>')?
                        .1
                        .split_once("</text>")?
                        .0
                        .trim()
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn a_staircase_holds_each_value_until_the_next_point() {
        let steps = vec![(0.0, 4.0), (10.0, 3.0), (25.0, 3.0)];
        assert_eq!(
            staircase(&steps),
            vec![
                (0.0, 4.0),
                (10.0, 4.0),
                (10.0, 3.0),
                (25.0, 3.0),
                (25.0, 3.0)
            ]
        );
        assert!(staircase(&vec![]).is_empty());
    }

    #[test]
    fn a_time_chart_draws_each_line_in_its_colour() {
        let a = vec![(0.0, 4.0), (50.0, 2.0), (100.0, 4.0)];
        let floor = vec![(0.0, 2.0), (100.0, 2.0)];
        let svg = time_chart(
            "groups",
            "available groups",
            300,
            &[
                Line {
                    label: "raygate".into(),
                    colour: run_colour(0),
                    width: 4,
                    dashed: false,
                    steps: &a,
                },
                Line {
                    label: "floor".into(),
                    colour: FLOOR,
                    width: 2,
                    dashed: true,
                    steps: &floor,
                },
            ],
            Some(Bands {
                label: "held",
                spans: &[(20.0, 40.0)],
            }),
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        let lower = svg.to_lowercase();
        assert!(lower.contains(&format!("stroke=\"{}\"", hex(run_colour(0)))));
        assert!(lower.contains(&format!("stroke=\"{}\"", hex(FLOOR))));
        let texts = texts(&svg);
        assert!(texts.contains(&"raygate".to_string()), "{texts:?}");
        assert!(texts.contains(&"floor".to_string()), "{texts:?}");
        assert!(texts.contains(&"available groups".to_string()), "{texts:?}");
        assert!(texts.contains(&"held".to_string()), "{texts:?}");
        assert!(lower.contains(&format!("fill=\"{}\"", hex(BAND))));
    }

    #[test]
    fn a_gantt_draws_a_bar_per_span_and_names_each_domain() {
        let rows = vec![
            DomainRow {
                domain: "ud-0".into(),
                spans: vec![
                    Span {
                        phase: Phase::Evicting,
                        from: 0.0,
                        to: 10.0,
                    },
                    Span {
                        phase: Phase::Recovering,
                        from: 40.0,
                        to: 60.0,
                    },
                ],
            },
            DomainRow {
                domain: "ud-1".into(),
                spans: vec![],
            },
        ];
        let svg = gantt("raygate", &rows, (0.0, 100.0)).unwrap();
        let texts = texts(&svg);
        let svg = svg.to_lowercase();
        let fill = |p: Phase| format!(r#"fill="{}""#, hex(phase_colour(p)));
        assert_eq!(svg.matches(&fill(Phase::Evicting)).count(), 1);
        assert_eq!(svg.matches(&fill(Phase::Recovering)).count(), 1);
        assert!(!svg.contains(&fill(Phase::Cordoned)));
        assert!(texts.contains(&"ud-0".to_string()) && texts.contains(&"ud-1".to_string()));
    }

    #[test]
    fn a_bar_chart_writes_each_value_and_a_dash_for_no_value() {
        let svg = bars(
            "rollout",
            " s",
            &[
                Bar {
                    colour: run_colour(0),
                    value: Some(292.0),
                },
                Bar {
                    colour: run_colour(1),
                    value: None,
                },
            ],
            320,
        )
        .unwrap();
        let texts = texts(&svg);
        assert!(texts.contains(&"292 s".to_string()), "{texts:?}");
        assert!(texts.contains(&"—".to_string()), "{texts:?}");
    }
}
