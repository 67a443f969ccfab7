//! When a recurring schedule runs (docs/api.md#recurring-schedules): a five-field cron
//! expression read as wall-clock times in an IANA zone, or a fixed interval
//! from an anchor, between an optional start and end.
//!
//! Cron fields are matched against wall-clock times (croner searches the
//! local calendar as if it had no offsets), and each matching wall-clock
//! time becomes an instant here, where daylight saving is decided:
//! - a wall-clock time that does not exist that day (the hour skipped when
//!   clocks go forward) runs at the first instant after the gap: 02:30 on a
//!   spring-forward night in Berlin runs at 03:00 CEST; every skipped time
//!   of the gap lands on that one instant, which runs once;
//! - a wall-clock time that happens twice (the hour repeated when clocks go
//!   back) runs once, at its first occurrence.
//!
//! Runs are strictly increasing instants, so "the first run after t" is the
//! whole of what the materialiser needs. Where both day fields are
//! restricted, a day matching either runs (as in Vixie cron).

use std::{str::FromStr, time::Duration};

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::{
    parser::{CronParser, Seconds, Year},
    Cron,
};

/// A cron expression: five fields, minute hour day-of-month month
/// day-of-week, with names, ranges, lists and steps.
#[derive(Debug, Clone)]
pub struct CronExpr {
    text: String,
    /// Boxed: a parsed pattern is some 300 bytes.
    cron: Box<Cron>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRule(pub String);

impl FromStr for CronExpr {
    type Err = InvalidRule;

    fn from_str(s: &str) -> Result<Self, InvalidRule> {
        let text = s.split_whitespace().collect::<Vec<_>>();
        if text.len() != 5 {
            return Err(InvalidRule(format!(
                "must have five fields (minute hour day-of-month month day-of-week), not {}",
                text.len()
            )));
        }
        let text = text.join(" ");
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(&text)
            .map_err(|e| InvalidRule(format!("is not a valid cron expression: {e}")))?;
        let expr = Self {
            text,
            cron: Box::new(cron),
        };
        // A pattern that can never match (30 February) is refused here
        // rather than found out by the materialiser.
        let epoch = DateTime::<Utc>::from_timestamp(0, 0).expect("the epoch");
        if expr.next_wall_time(epoch.naive_utc()).is_none() {
            return Err(InvalidRule("never matches a date".into()));
        }
        Ok(expr)
    }
}

impl CronExpr {
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first matching wall-clock time strictly after `after`.
    fn next_wall_time(&self, after: NaiveDateTime) -> Option<NaiveDateTime> {
        // Wall-clock times are searched as UTC instants: no offsets, no gaps.
        let next = self
            .cron
            .find_next_occurrence(&Utc.from_utc_datetime(&after), false)
            .ok()?;
        Some(next.naive_utc())
    }
}

/// The first instant at which `zone`'s clocks read `wall` or later.
fn wall_to_instant(zone: Tz, wall: NaiveDateTime) -> DateTime<Utc> {
    match zone.from_local_datetime(&wall) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
        LocalResult::None => {
            // In a gap: the instant the clocks jumped. The gap lies between
            // `wall` read with the largest offset the zone uses nearby and
            // with the smallest; search it for the first instant whose local
            // time is past `wall`.
            let mut lo = Utc.from_utc_datetime(&wall) - TimeDelta::hours(26);
            let mut hi = Utc.from_utc_datetime(&wall) + TimeDelta::hours(26);
            while hi - lo > TimeDelta::seconds(1) {
                let mid = lo + (hi - lo) / 2;
                if mid.with_timezone(&zone).naive_local() > wall {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            // Transitions fall on whole seconds.
            DateTime::from_timestamp(hi.timestamp(), 0).expect("in range")
        }
    }
}

#[derive(Debug, Clone)]
pub enum Recurrence {
    Cron(CronExpr),
    Every(Every),
}

impl Recurrence {
    /// `cron`, as stored and shown.
    pub fn cron(&self) -> Option<&str> {
        match self {
            Recurrence::Cron(c) => Some(c.as_str()),
            Recurrence::Every(_) => None,
        }
    }

    /// `every`, as it was given.
    pub fn every(&self) -> Option<&str> {
        match self {
            Recurrence::Every(e) => Some(&e.text),
            Recurrence::Cron(_) => None,
        }
    }

    /// The most runs it makes in a minute (`limits.schedule_runs_per_second`
    /// sums them): a five-field cron at most one; `every` sixty seconds
    /// over its period (60 for `1s`, 0.5 for `2m`).
    pub fn runs_per_minute(&self) -> f64 {
        match self {
            Recurrence::Cron(_) => 1.0,
            Recurrence::Every(e) => 60.0 / e.period.as_secs_f64(),
        }
    }
}

/// `every`: a duration such as `30s`, `15m`, `1h 30m` or `1500ms`, at least
/// a second; kept as it was given.
#[derive(Debug, Clone)]
pub struct Every {
    text: String,
    period: Duration,
}

impl Every {
    pub fn period(&self) -> Duration {
        self.period
    }
}

impl FromStr for Every {
    type Err = InvalidRule;

    fn from_str(s: &str) -> Result<Self, InvalidRule> {
        let text = s.trim();
        let period = humantime::parse_duration(text)
            .map_err(|_| InvalidRule("is not a duration such as 30s, 15m, 1h or 1h 30m".into()))?;
        if period < Duration::from_secs(1) {
            return Err(InvalidRule("must be at least 1s".into()));
        }
        if period > Duration::from_secs(100 * 366 * 24 * 3600) {
            return Err(InvalidRule("must be at most 100 years".into()));
        }
        Ok(Self {
            text: text.to_string(),
            period,
        })
    }
}

/// A schedule's runs.
#[derive(Debug, Clone)]
pub struct Rule {
    pub recurrence: Recurrence,
    pub zone: Tz,
    /// `startAt`, or the creation instant: intervals count from here, and
    /// no run is before it.
    pub anchor: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
}

impl Rule {
    /// The first run at or after `t`.
    pub fn first_from(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.after(t - TimeDelta::milliseconds(1))
    }

    /// The runs at or after `t`, in order, until the end.
    pub fn runs_from(&self, t: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.first_from(t), move |&run| self.after(run))
    }

    /// The first run strictly after `t`, if there is one before the end.
    pub fn after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Nothing before the anchor.
        let t = t.max(self.anchor - TimeDelta::milliseconds(1));
        let next = match &self.recurrence {
            Recurrence::Every(every) => {
                let every = i64::try_from(every.period.as_millis()).ok()?.max(1);
                let since = (t - self.anchor).num_milliseconds();
                // The smallest k >= 0 with anchor + k·every > t.
                let k = if since < 0 { 0 } else { since / every + 1 };
                self.anchor + TimeDelta::milliseconds(k.checked_mul(every)?)
            }
            Recurrence::Cron(expr) => {
                let mut wall = t.with_timezone(&self.zone).naive_local();
                // A few steps at most: only the times of a repeated hour's
                // second pass come out at or before `t`.
                let mut guard = 0;
                loop {
                    wall = expr.next_wall_time(wall)?;
                    let at = wall_to_instant(self.zone, wall);
                    if at > t {
                        break at;
                    }
                    guard += 1;
                    if guard > 10_000 {
                        return None;
                    }
                }
            }
        };
        match self.end_at {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }
}

/// `timeZone`: an IANA name.
pub fn parse_zone(s: &str) -> Result<Tz, InvalidRule> {
    s.parse::<Tz>()
        .map_err(|_| InvalidRule("is not an IANA time zone name such as Europe/Stockholm".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn cron(expr: &str, zone: &str, from: &str) -> Rule {
        Rule {
            recurrence: Recurrence::Cron(expr.parse().unwrap()),
            zone: parse_zone(zone).unwrap(),
            anchor: at(from),
            end_at: None,
        }
    }

    fn runs(rule: &Rule, from: &str, n: usize) -> Vec<String> {
        // Strictly after `from`: times are whole milliseconds.
        rule.runs_from(at(from) + TimeDelta::milliseconds(1))
            .take(n)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .collect()
    }

    #[test]
    fn tokyo_weekdays() {
        let r = cron("30 9 * * MON-FRI", "Asia/Tokyo", "2026-01-01T00:00:00Z");
        // 2026-01-02 is a Friday.
        assert_eq!(
            runs(&r, "2026-01-01T00:00:00Z", 3),
            [
                "2026-01-01T00:30:00Z",
                "2026-01-02T00:30:00Z",
                "2026-01-05T00:30:00Z"
            ]
        );
    }

    #[test]
    fn berlin_spring_forward() {
        // 2026-03-29: 02:00 CET -> 03:00 CEST (01:00 UTC).
        let r = cron("30 2 * * *", "Europe/Berlin", "2026-03-27T00:00:00Z");
        assert_eq!(
            runs(&r, "2026-03-27T00:00:00Z", 4),
            [
                "2026-03-27T01:30:00Z",
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z"
            ]
        );
        let r = cron("*/20 2 * * *", "Europe/Berlin", "2026-03-28T23:00:00Z");
        assert_eq!(
            runs(&r, "2026-03-28T23:00:00Z", 2),
            ["2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"]
        );
    }

    #[test]
    fn berlin_fall_back() {
        // 2026-10-25: 03:00 CEST -> 02:00 CET (01:00 UTC).
        let r = cron("30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z");
        assert_eq!(
            runs(&r, "2026-10-24T00:00:00Z", 3),
            [
                "2026-10-24T00:30:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-26T01:30:00Z"
            ]
        );
        let r = cron("0,30 * * * *", "Europe/Berlin", "2026-10-24T23:45:00Z");
        assert_eq!(
            runs(&r, "2026-10-24T23:45:00Z", 6),
            [
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T02:00:00Z",
                "2026-10-25T02:30:00Z",
                "2026-10-25T03:00:00Z",
                "2026-10-25T03:30:00Z"
            ]
        );
    }

    #[test]
    fn leap_days() {
        let r = cron("0 0 29 2 *", "UTC", "2025-01-01T00:00:00Z");
        assert_eq!(
            runs(&r, "2025-01-01T00:00:00Z", 2),
            ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]
        );
        assert!("0 0 30 2 *".parse::<CronExpr>().is_err());
        assert!("0 0 31 4 *".parse::<CronExpr>().is_err());
    }

    #[test]
    fn month_ends() {
        let r = cron("0 12 31 * *", "UTC", "2026-01-01T00:00:00Z");
        assert_eq!(
            runs(&r, "2026-01-01T00:00:00Z", 3),
            [
                "2026-01-31T12:00:00Z",
                "2026-03-31T12:00:00Z",
                "2026-05-31T12:00:00Z"
            ]
        );
    }

    #[test]
    fn bad() {
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "61 * * * *",
            "* 24 * * *",
            "* * * * FOO",
            "*/0 * * * *",
            "nope",
        ] {
            assert!(bad.parse::<CronExpr>().is_err(), "{bad}");
        }
        for good in [
            "*/15 9-17 * * MON-FRI",
            "0 0 1 JAN,JUL *",
            "5 4 * * sun",
            "0 22 * * 1-5",
            "0 0 * * 7",
        ] {
            assert!(good.parse::<CronExpr>().is_ok(), "{good}");
        }
    }

    #[test]
    fn every() {
        let r = Rule {
            recurrence: Recurrence::Every("15m".parse().unwrap()),
            zone: Tz::UTC,
            anchor: at("2026-01-01T00:00:00.500Z"),
            end_at: Some(at("2026-01-01T00:30:00.500Z")),
        };
        assert_eq!(
            r.first_from(at("2025-01-01T00:00:00Z")),
            Some(at("2026-01-01T00:00:00.500Z"))
        );
        assert_eq!(
            r.first_from(at("2026-01-01T00:00:00.500Z")),
            Some(at("2026-01-01T00:00:00.500Z"))
        );
        assert_eq!(
            r.after(at("2026-01-01T00:00:00.500Z")),
            Some(at("2026-01-01T00:15:00.500Z"))
        );
        assert_eq!(
            r.after(at("2026-01-01T00:15:00.500Z")),
            Some(at("2026-01-01T00:30:00.500Z"))
        );
        assert_eq!(r.after(at("2026-01-01T00:30:00.500Z")), None);
        for bad in ["999ms", "abc", "", "-1s", "0s"] {
            assert!(bad.parse::<Every>().is_err(), "{bad}");
        }
        for good in ["1s", "1500ms", "15m", "1h 30m", "1h30m", "7d"] {
            assert!(good.parse::<Every>().is_ok(), "{good}");
        }
        assert_eq!(" 15m ".parse::<Every>().unwrap().text, "15m");
    }
}
