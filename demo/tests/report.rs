//! The HTML report in a real browser: three scenarios run on the simulated cluster (raygate's
//! rollout, the naive UD-by-UD rollout, the quota-held RayService upgrade), their report written
//! to a file, rendered by Debian's Chromium headless to a PNG, and the screenshot checked: each
//! chart's section is there, in order, and shows its series in their colours.
//!
//! Chromium is installed by `hack/install-chromium.sh` (`hack/test.sh` runs it first); without it
//! this test fails, it is never skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plotters::style::RGBColor;
use raygate_demo::report::{self, Input, Run, charts, markers, series::Phase};
use raygate_demo::scenario;
use raygate_sim::Sim;

const CHROMIUM: &str = "/usr/bin/chromium";
const WIDTH: usize = 1400;
const HEIGHT: usize = 2400;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// KubeRay's, Kueue's and LWS's upstream CRDs, and raygate's NodeRollout.
fn sim(seed: u64) -> Sim {
    Sim::builder()
        .crds_dir(root().join("../shared/upstream-crds"))
        .expect("../shared/upstream-crds")
        .crds_yaml(
            &std::fs::read_to_string(root().join("crds/noderollouts.raygate.io.yaml")).unwrap(),
        )
        .unwrap()
        .seed(seed)
        .build()
}

/// A scenario run to its end on its own runtime, on the paused clock.
fn run(file: &str, name: &str) -> Run {
    let wall = Instant::now();
    let text = std::fs::read_to_string(root().join("config/scenarios").join(file)).unwrap();
    let checked = scenario::parse(&text, file).unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let report = rt
        .block_on(scenario::run(sim(checked.scenario.seed), &checked))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    assert!(report.passed(), "{file}: {:#?}", report.failures);
    eprintln!(
        "{file}: {} changes in {:.1} s wall",
        report.history.changes.len(),
        wall.elapsed().as_secs_f64()
    );
    Run::from_scenario(name, &report)
}

/// Runs Chromium headless on `page`, writes the screenshot to `png` (fails after 3 minutes).
fn screenshot(page: &Path, png: &Path, profile: &Path) {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run hack/install-chromium.sh (hack/test.sh does)"
    );
    let started = Instant::now();
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={WIDTH},{HEIGHT}"))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("chromium did not finish within 3 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(status.success(), "chromium failed ({status}): {stderr}");
    assert!(png.exists(), "no screenshot written: {stderr}");
    eprintln!(
        "chromium rendered the report in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// An RGB image.
struct Image {
    width: usize,
    height: usize,
    rgb: Vec<[u8; 3]>,
}

impl Image {
    fn decode(path: &Path) -> Image {
        let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
        let mut decoder = png::Decoder::new(file);
        decoder.set_transformations(png::Transformations::normalize_to_color8());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = match info.color_type {
            png::ColorType::Rgb => 3,
            png::ColorType::Rgba => 4,
            other => panic!("unexpected colour type {other:?}"),
        };
        let rgb = buf[..info.buffer_size()]
            .chunks_exact(channels)
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        Image {
            width: info.width as usize,
            height: info.height as usize,
            rgb,
        }
    }

    fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.rgb[y * self.width + x]
    }

    /// Pixels within `tolerance` of `colour` (per channel) in rows `rows`.
    fn count(&self, colour: RGBColor, rows: std::ops::Range<usize>, tolerance: u8) -> usize {
        rows.flat_map(|y| (0..self.width).map(move |x| (x, y)))
            .filter(|&(x, y)| close(self.at(x, y), colour, tolerance))
            .count()
    }
}

fn close(p: [u8; 3], c: RGBColor, tolerance: u8) -> bool {
    p[0].abs_diff(c.0) <= tolerance
        && p[1].abs_diff(c.1) <= tolerance
        && p[2].abs_diff(c.2) <= tolerance
}

fn rgb(hex: &str) -> RGBColor {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap();
    RGBColor((v >> 16) as u8, (v >> 8) as u8, v as u8)
}

/// The rows of a section: where its marker colour (its left border) is, left of x = 80.
fn section_rows(img: &Image, marker: &str) -> std::ops::Range<usize> {
    let c = rgb(marker);
    let rows: Vec<usize> = (0..img.height)
        .filter(|&y| (0..80).any(|x| close(img.at(x, y), c, 2)))
        .collect();
    assert!(
        !rows.is_empty(),
        "no section with the marker {marker} in the screenshot"
    );
    rows[0]..rows[rows.len() - 1] + 1
}

#[test]
fn the_report_renders_every_chart_in_a_headless_browser() {
    let runs = vec![
        run("rollout-raygate.yaml", "raygate"),
        run(
            "rollout-domain-by-domain.yaml",
            "UD by UD, no protected-first",
        ),
        run(
            "quota-held-upgrade.yaml",
            "raygate: an upgrade held for quota",
        ),
    ];
    // the data the charts draw: four groups behind the budget, each moved once by raygate,
    // below the floor under the naive drain, the held upgrade's CPUs within the quota
    let healthy_max = |r: &Run| {
        let t0 = r.t0().unwrap();
        report::series::budgets(&r.history, t0)
            .iter()
            .flat_map(|b| b.healthy.iter().map(|(_, v)| *v))
            .fold(0.0, f64::max)
    };
    assert_eq!(
        healthy_max(&runs[0]),
        4.0,
        "four groups available before the rollout"
    );
    let m: Vec<report::Metrics> = runs
        .iter()
        .map(|r| report::metrics(r, Some(report::LWS_GROUP_KEY)))
        .collect();
    assert_eq!(m[0].disruptions, Some(4), "raygate moves each group once");
    assert_eq!(m[0].group_seconds_below_floor, Some(0.0));
    assert!(m[1].group_seconds_below_floor.unwrap() > 0.0, "{:?}", m[1]);
    assert_eq!(m[2].peak_quota_overrun, Some(0.0));
    assert_eq!(
        m[2].serving_seconds_lost,
        Some(0.0),
        "served through its upgrade"
    );
    assert_eq!(
        m[0].serving_seconds_lost, None,
        "no RayService in the rollout"
    );
    let held = report::series::held(&runs[2].history, runs[2].t0().unwrap());
    assert!(
        held.iter().any(|h| h.to - h.from >= 300.0),
        "the upgrade's child held for minutes: {held:?}"
    );
    let mut input = Input::new("raygate: the rollout and the held upgrade", runs);
    input.subtitle = "2 upgrade domains × 2 nodes, 4 LeaderWorkerSet groups, PDB minAvailable 2; \
                      a RayService upgrade held until the quota is raised"
        .into();
    let dir = std::env::temp_dir().join(format!("raygate-report-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    let png = dir.join("report.png");
    report::write(&page, &input).unwrap();
    screenshot(&page, &png, &dir.join("profile"));
    if let Ok(keep) = std::env::var("RAYGATE_REPORT_KEEP") {
        std::fs::copy(&page, Path::new(&keep).with_extension("html")).unwrap();
        std::fs::copy(&png, Path::new(&keep).with_extension("png")).unwrap();
    }
    let img = Image::decode(&png);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((img.width, img.height), (WIDTH, HEIGHT));

    // not blank: the page background, white cards, and a good share of ink
    let background = img.count(RGBColor(0xf1, 0xf5, 0xf9), 0..img.height, 1);
    let white = img.count(RGBColor(0xff, 0xff, 0xff), 0..img.height, 1);
    let ink = img.width * img.height - background - white;
    eprintln!("background {background} px, white {white} px, other {ink} px");
    assert!(white > img.width * img.height / 4, "the cards are drawn");
    assert!(
        ink > img.width * img.height / 50,
        "the page is not blank: {ink} px"
    );

    let availability = section_rows(&img, markers::AVAILABILITY);
    let serving = section_rows(&img, markers::SERVING);
    let quota = section_rows(&img, markers::QUOTA);
    let gantt = section_rows(&img, markers::GANTT);
    let bars = section_rows(&img, markers::BARS);
    eprintln!(
        "sections: availability {availability:?}, serving {serving:?}, quota {quota:?}, gantt {gantt:?}, bars {bars:?}"
    );
    assert!(
        availability.end <= serving.start
            && serving.end <= quota.start
            && quota.end <= gantt.start
            && gantt.end <= bars.start,
        "the sections in order, apart"
    );
    assert!(
        bars.end <= HEIGHT - 10,
        "the whole page fits the window: {bars:?}"
    );

    // a colour's pixels in a section, well beyond its legend swatch (12 × 12 px)
    let expect = |what: &str, colour: RGBColor, rows: &std::ops::Range<usize>, at_least: usize| {
        let n = img.count(colour, rows.clone(), 12);
        eprintln!("{what}: {n} px of {}", charts::hex(colour));
        assert!(
            n >= at_least,
            "{what}: {n} px of {} (≥ {at_least})",
            charts::hex(colour)
        );
    };
    // both rollouts' available leaders, and the budget's floor
    expect(
        "raygate's available groups",
        charts::run_colour(0),
        &availability,
        1000,
    );
    expect(
        "UD by UD's available groups",
        charts::run_colour(1),
        &availability,
        1000,
    );
    expect("the budget's floor", charts::FLOOR, &availability, 500);
    // the held upgrade's RayService keeps serving through its upgrade
    expect(
        "the RayService's serving pods",
        charts::run_colour(2),
        &serving,
        1000,
    );
    // the held upgrade's CPUs against the queue's quota
    expect(
        "the held upgrade's CPUs",
        charts::run_colour(2),
        &quota,
        1000,
    );
    expect("the quota", charts::QUOTA, &quota, 500);
    expect("the held child's band", charts::BAND, &quota, 5000);
    // the rollouts' phases: evictions, reboots and recoveries in both Gantts
    for p in [Phase::Evicting, Phase::Upgrading, Phase::Recovering] {
        expect(p.name(), charts::phase_colour(p), &gantt, 400);
    }
    let cordoned = img.count(charts::phase_colour(Phase::Cordoned), gantt.clone(), 12);
    eprintln!("cordoned: {cordoned} px");
    // the bars of the two rollouts (the held upgrade has no rollout, but its overrun bar is 0)
    expect("raygate's bars", charts::run_colour(0), &bars, 3000);
    expect("UD by UD's bars", charts::run_colour(1), &bars, 3000);
}
