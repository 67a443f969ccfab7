//! What a run measured, drawn as SVG beside its JSON: the lateness of each
//! delivery scenario as a distribution (its percentiles, one line a run),
//! and deliveries per second over each run (arrivals in 100 ms steps, from
//! the first message's due time).

use std::path::Path;

use plotters::prelude::*;

use super::{service::Timing, Result};

const SIZE: (u32, u32) = (720, 360);
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes `<scenario>-lateness.svg` and `<scenario>-rate.svg` into `dir` for
/// every scenario with arrivals; returns the files written.
pub(crate) fn draw_all(dir: &Path, results: &[Result]) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut names: Vec<&str> = results
        .iter()
        .filter(|r| !r.timings.is_empty())
        .map(|r| r.scenario.as_str())
        .collect();
    names.dedup();
    let mut written = Vec::new();
    for name in names {
        let runs: Vec<&Result> = results
            .iter()
            .filter(|r| r.scenario == name && !r.timings.is_empty())
            .collect();
        let file = dir.join(format!("{name}-lateness.svg"));
        lateness(&file, name, &runs)?;
        written.push(file.display().to_string());
        let file = dir.join(format!("{name}-rate.svg"));
        rate(&file, name, &runs)?;
        written.push(file.display().to_string());
    }
    Ok(written)
}

fn lateness_ms(timings: &[Timing]) -> Vec<f64> {
    super::service::lateness_ms(timings)
}

/// Lateness (ms) against the share of messages at most that late.
fn lateness(file: &Path, scenario: &str, runs: &[&Result]) -> anyhow::Result<()> {
    let curves: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| {
            let sorted = lateness_ms(&r.timings);
            let n = sorted.len().max(1) as f64;
            // At most 1,000 points a line.
            let step = (sorted.len() / 1000).max(1);
            let mut points: Vec<(f64, f64)> = sorted
                .iter()
                .enumerate()
                .step_by(step)
                .map(|(i, ms)| (100.0 * (i + 1) as f64 / n, *ms))
                .collect();
            if let Some(last) = sorted.last() {
                points.push((100.0, *last));
            }
            points
        })
        .collect();
    let chart = Chart {
        caption: format!("{scenario}: lateness of each delivery"),
        x_desc: "percent of messages delivered at most this late",
        y_desc: "lateness (ms)",
        legend: SeriesLabelPosition::UpperLeft,
    };
    chart.draw(file, runs, curves, Some(100.0), 1.05)
}

/// Deliveries per second (arrivals in 100 ms steps) over the run.
fn rate(file: &Path, scenario: &str, runs: &[&Result]) -> anyhow::Result<()> {
    let curves: Vec<Vec<(f64, f64)>> = runs.iter().map(|r| per_second(&r.timings)).collect();
    let chart = Chart {
        caption: format!("{scenario}: deliveries per second"),
        x_desc: "seconds after the first message fell due",
        y_desc: "deliveries per second",
        legend: SeriesLabelPosition::UpperRight,
    };
    chart.draw(file, runs, curves, None, 1.1)
}

/// One chart: a line per run.
struct Chart {
    caption: String,
    x_desc: &'static str,
    y_desc: &'static str,
    legend: SeriesLabelPosition,
}

impl Chart {
    /// The x axis ends at `x_max` (else at the last point); the y axis
    /// leaves `headroom` above the highest point.
    fn draw(
        self,
        file: &Path,
        runs: &[&Result],
        curves: Vec<Vec<(f64, f64)>>,
        x_max: Option<f64>,
        headroom: f64,
    ) -> anyhow::Result<()> {
        let points = || curves.iter().flatten();
        let x_max = x_max.unwrap_or_else(|| points().map(|p| p.0).fold(1.0, f64::max));
        let y_max = points().map(|p| p.1).fold(1.0, f64::max) * headroom;
        let root = SVGBackend::new(file, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(self.caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .draw()?;
        for (i, (r, points)) in runs.iter().zip(curves).enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(format!("run {}", r.run))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        chart
            .configure_series_labels()
            .position(self.legend)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
        root.present()?;
        Ok(())
    }
}

/// Arrivals counted in 100 ms steps from the earliest due time, as a rate
/// per second at the middle of each step.
fn per_second(timings: &[Timing]) -> Vec<(f64, f64)> {
    let Some(start) = timings.iter().map(|(_, due)| *due).min() else {
        return Vec::new();
    };
    let mut steps: Vec<u32> = Vec::new();
    for (at, _) in timings {
        let ms = (*at - start).num_milliseconds().max(0) as usize;
        let i = ms / 100;
        if steps.len() <= i {
            steps.resize(i + 1, 0);
        }
        steps[i] += 1;
    }
    steps
        .iter()
        .enumerate()
        .map(|(i, n)| (i as f64 / 10.0 + 0.05, f64::from(*n) * 10.0))
        .collect()
}
