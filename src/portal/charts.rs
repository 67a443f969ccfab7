//! The overview's pictures, drawn on the server as inline SVG (no script,
//! nothing fetched): a bar per hour of the last 24 for deliveries, failed
//! attempts and dead letters, and the hourly lateness (p50 and p99) as two
//! lines. Each has a text summary for screen readers and a title per hour.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use maud::{html, Markup};

use crate::store::portal::Hour;

/// The hours a chart shows: the 24 that end with the current one.
pub const HOURS: i64 = 24;

const W: f64 = 480.0;
const H: f64 = 150.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 24.0;

/// When the first charted hour starts: the window the store is asked for.
pub fn window_start(now: DateTime<Utc>) -> DateTime<Utc> {
    now.duration_trunc(TimeDelta::hours(1)).unwrap_or(now) - TimeDelta::hours(HOURS - 1)
}

/// One value per charted hour, oldest first (hours with nothing are 0 or None).
fn series<T: Copy>(
    hours: &[Hour],
    start: DateTime<Utc>,
    value: impl Fn(&Hour) -> T,
    none: T,
) -> Vec<(DateTime<Utc>, T)> {
    (0..HOURS)
        .map(|i| {
            let at = start + TimeDelta::hours(i);
            let v = hours.iter().find(|h| h.start == at).map_or(none, &value);
            (at, v)
        })
        .collect()
}

/// A round upper bound for the axis: 1, 2 or 5 times a power of ten.
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|c| *c >= max)
        .unwrap_or(10.0 * p)
}

/// A coordinate, to a tenth of a unit.
fn f(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

fn slot_width() -> f64 {
    (W - LEFT - RIGHT) / HOURS as f64
}

fn y_of(v: f64, max: f64) -> f64 {
    TOP + (H - TOP - BOTTOM) * (1.0 - v / max)
}

/// The frame every chart shares: the axis' top and zero, and a label
/// every six hours (UTC).
fn frame(max_label: &str, start: DateTime<Utc>) -> Markup {
    html! {
        line.axis x1=(f(LEFT)) y1=(f(H - BOTTOM)) x2=(f(W - RIGHT)) y2=(f(H - BOTTOM)) {}
        line.grid x1=(f(LEFT)) y1=(f(TOP)) x2=(f(W - RIGHT)) y2=(f(TOP)) {}
        text.tick x=(f(LEFT - 4.0)) y=(f(TOP + 4.0)) text-anchor="end" { (max_label) }
        text.tick x=(f(LEFT - 4.0)) y=(f(H - BOTTOM + 4.0)) text-anchor="end" { "0" }
        @for i in (0..HOURS).step_by(6) {
            text.tick x=(f(LEFT + slot_width() * (i as f64 + 0.5))) y=(f(H - 6.0)) text-anchor="middle" {
                ((start + TimeDelta::hours(i)).format("%H:00"))
            }
        }
    }
}

/// Bars of a count per hour.
pub fn bars(
    id: &str,
    title: &str,
    noun: &str,
    class: &str,
    hours: &[Hour],
    now: DateTime<Utc>,
    value: fn(&Hour) -> u64,
) -> Markup {
    let start = window_start(now);
    let points = series(hours, start, value, 0);
    let total: u64 = points.iter().map(|p| p.1).sum();
    let peak = points.iter().max_by_key(|p| p.1).filter(|p| p.1 > 0);
    let max = nice_max(peak.map_or(0, |p| p.1) as f64);
    let summary = match peak {
        Some((at, n)) => format!(
            "{total} {noun} in the last 24 hours; the most, {n}, in the hour from {} UTC.",
            at.format("%H:00")
        ),
        None => format!("No {noun} in the last 24 hours."),
    };
    let w = slot_width();
    html! {
        figure.chart #(id) data-total=(total) {
            figcaption { (title) " " span.total { (total) } }
            svg viewBox={ "0 0 " (W) " " (H) } role="img" aria-labelledby={ (id) "-desc" } preserveAspectRatio="none" {
                desc id={ (id) "-desc" } { (summary) }
                (frame(&format!("{max}"), start))
                @for (i, (at, n)) in points.iter().enumerate() {
                    @if *n > 0 {
                        @let y = y_of(*n as f64, max);
                        rect class=(class) x=(f(LEFT + w * i as f64 + 1.0)) y=(f(y)) width=(f(w - 2.0)) height=(f(H - BOTTOM - y)) data-hour=(at.format("%H")) data-value=(n) {
                            title { (at.format("%H:00")) " UTC: " (n) " " (noun) }
                        }
                    }
                }
            }
        }
    }
}

/// `12 ms`, `1.4 s`, `3.2 min`.
pub fn short_ms(ms: i64) -> String {
    match ms {
        ..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{:.1} min", ms as f64 / 60_000.0),
    }
}

/// The hourly lateness of first-attempt deliveries: p50 and p99 as lines.
pub fn lateness(hours: &[Hour], now: DateTime<Utc>) -> Markup {
    let start = window_start(now);
    let p50 = series(hours, start, |h| h.late_p50_ms, None);
    let p99 = series(hours, start, |h| h.late_p99_ms, None);
    let worst = p99.iter().filter_map(|p| p.1).max();
    let max = nice_max(worst.unwrap_or(0).max(1) as f64);
    let summary = match worst {
        Some(w) => format!(
            "The slowest hour's p99 lateness was {}; the median hour's p50 {}.",
            short_ms(w),
            short_ms(median(p50.iter().filter_map(|p| p.1).collect()))
        ),
        None => "Nothing was delivered at its first attempt in the last 24 hours.".to_string(),
    };
    let w = slot_width();
    let line = |points: &[(DateTime<Utc>, Option<i64>)], class: &str, label: &str| {
        html! {
            @for (i, (at, v)) in points.iter().enumerate() {
                @if let Some(v) = v {
                    circle class=(class) cx=(f(LEFT + w * (i as f64 + 0.5))) cy=(f(y_of((*v).max(0) as f64, max))) r="2.5" data-hour=(at.format("%H")) data-value=(v) {
                        title { (at.format("%H:00")) " UTC: " (label) " " (short_ms(*v)) }
                    }
                }
            }
            polyline class=(class) points=(polyline(points, max)) {}
        }
    };
    html! {
        figure.chart #lateness-chart {
            figcaption {
                "Lateness of first attempts, per hour: "
                span.legend.p50 { "p50" } " and " span.legend.p99 { "p99" }
            }
            svg viewBox={ "0 0 " (W) " " (H) } role="img" aria-labelledby="lateness-chart-desc" preserveAspectRatio="none" {
                desc #lateness-chart-desc { (summary) }
                (frame(&short_ms(max as i64), start))
                (line(&p99, "p99", "p99"))
                (line(&p50, "p50", "p50"))
            }
        }
    }
}

fn polyline(points: &[(DateTime<Utc>, Option<i64>)], max: f64) -> String {
    let w = slot_width();
    points
        .iter()
        .enumerate()
        .filter_map(|(i, (_, v))| {
            v.map(|v| {
                format!(
                    "{:.1},{:.1}",
                    LEFT + w * (i as f64 + 0.5),
                    y_of(v.max(0) as f64, max)
                )
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_bounds_are_round() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(1.0), 1.0);
        assert_eq!(nice_max(3.0), 5.0);
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(101.0), 200.0);
        assert_eq!(nice_max(4_999.0), 5_000.0);
    }

    #[test]
    fn the_window_is_the_24_hours_ending_with_the_current_one() {
        let now = "2026-12-03T17:42:10Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(
            window_start(now),
            "2026-12-02T18:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        let hours = vec![Hour {
            start: "2026-12-03T17:00:00Z".parse().unwrap(),
            delivered: 5,
            ..Hour::default()
        }];
        let s = series(&hours, window_start(now), |h| h.delivered, 0);
        assert_eq!(s.len(), 24);
        assert_eq!(s[23].1, 5, "the current hour is the last bar");
        assert!(s[..23].iter().all(|p| p.1 == 0));
    }
}
