//! Calendar instants computed from the clock a test runs on: "the next
//! spring-forward night in Berlin", "the next 29 February", rather than
//! dates written into the test, which the calendar overtakes. Daylight
//! saving comes from chrono-tz, the zone database the server uses.

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, Offset, TimeDelta, TimeZone, Utc, Weekday};
use chrono_tz::Tz;

/// Midnight UTC of `day`.
pub fn midnight(day: NaiveDate) -> DateTime<Utc> {
    day.and_time(NaiveTime::MIN).and_utc()
}

/// `day` at `h:m` UTC.
pub fn utc(day: NaiveDate, h: u32, m: u32) -> DateTime<Utc> {
    day.and_hms_opt(h, m, 0).expect("a valid time").and_utc()
}

/// `day` at the wall-clock time `h:m` in `zone`, where that time occurs
/// exactly once.
pub fn wall(zone: Tz, day: NaiveDate, h: u32, m: u32) -> DateTime<Utc> {
    zone.from_local_datetime(&day.and_hms_opt(h, m, 0).expect("a valid time"))
        .single()
        .unwrap_or_else(|| panic!("{day} {h:02}:{m:02} does not occur exactly once in {zone}"))
        .with_timezone(&Utc)
}

/// The first day after `after`'s (UTC) date that is a `weekday`.
pub fn next_weekday(after: DateTime<Utc>, weekday: Weekday) -> NaiveDate {
    let mut day = after.date_naive().succ_opt().expect("a next day");
    while day.weekday() != weekday {
        day = day.succ_opt().expect("a next day");
    }
    day
}

/// The year `years` after the test clock's: instants in it are far ahead of
/// anything a test makes fall due, and stay so whatever today is.
pub fn years_ahead(years: i32) -> i32 {
    Utc::now().year() + years
}

/// 1 January 00:00 of `years_ahead(years)`, as a form or the API takes it
/// without its zone (`2031-01-01T00:00:00`; add `Z` for UTC).
pub fn new_year_ahead(years: i32) -> String {
    format!("{}-01-01T00:00:00", years_ahead(years))
}

/// The first 1 January after `after`.
pub fn next_new_year(after: DateTime<Utc>) -> DateTime<Utc> {
    midnight(NaiveDate::from_ymd_opt(after.year() + 1, 1, 1).expect("a valid date"))
}

/// The first `month`/`day` (00:00 UTC) strictly after `after`.
pub fn next_date(after: DateTime<Utc>, month: u32, day: u32) -> NaiveDate {
    (after.year()..)
        .filter_map(|y| NaiveDate::from_ymd_opt(y, month, day))
        .find(|d| midnight(*d) > after)
        .expect("a next date")
}

pub fn is_leap(year: i32) -> bool {
    NaiveDate::from_ymd_opt(year, 2, 29).is_some()
}

/// A change of `zone`'s offset: the instant it happens and the local day
/// (in the zone) it happens on.
#[derive(Debug, Clone, Copy)]
pub struct OffsetChange {
    pub at: DateTime<Utc>,
    pub day: NaiveDate,
}

/// The next instant after `after` at which `zone`'s offset from UTC grows
/// (clocks go forward: a spring-forward night).
pub fn next_spring_forward(zone: Tz, after: DateTime<Utc>) -> OffsetChange {
    next_offset_change(zone, after, |before, now| now > before)
}

/// The next instant after `after` at which `zone`'s offset from UTC shrinks
/// (clocks go back: an hour happens twice).
pub fn next_fall_back(zone: Tz, after: DateTime<Utc>) -> OffsetChange {
    next_offset_change(zone, after, |before, now| now < before)
}

fn offset_at(zone: Tz, t: DateTime<Utc>) -> i32 {
    zone.offset_from_utc_datetime(&t.naive_utc())
        .fix()
        .local_minus_utc()
}

fn next_offset_change(
    zone: Tz,
    after: DateTime<Utc>,
    wanted: impl Fn(i32, i32) -> bool,
) -> OffsetChange {
    // Day by day to the change, then to the second by halving.
    let mut from = after;
    for _ in 0..3 * 366 {
        let to = from + TimeDelta::days(1);
        let (before, then) = (offset_at(zone, from), offset_at(zone, to));
        if before != then && wanted(before, then) {
            let (mut lo, mut hi) = (from, to);
            while hi - lo > TimeDelta::seconds(1) {
                let mid = lo + (hi - lo) / 2;
                if offset_at(zone, mid) == before {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let at = hi - TimeDelta::nanoseconds(hi.timestamp_subsec_nanos().into());
            return OffsetChange {
                at,
                day: at.with_timezone(&zone).date_naive(),
            };
        }
        from = to;
    }
    panic!("{zone} changes its offset that way in no three years after {after}");
}
