//! The date-time picker's input: a local date-time (`<input type=datetime-local>`)
//! and the time zone it is in, resolved to one UTC instant.

use chrono::{DateTime, Datelike, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use maud::{html, Markup};

/// The instant a picker's fields name; empty `at` is `now`.
pub fn resolve(at: &str, tz: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let at = at.trim();
    if at.is_empty() {
        return Ok(now);
    }
    let local = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(at, f).ok())
        .ok_or_else(|| format!("`{at}` is not a date and time such as 2026-12-01T09:30"))?;
    let tz_name = tz.trim();
    let zone: Tz = if tz_name.is_empty() {
        Tz::UTC
    } else {
        tz_name
            .parse()
            .map_err(|_| format!("`{tz_name}` is not a time zone such as Europe/Berlin or UTC"))?
    };
    let t = match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => t,
        // The hour that repeats when clocks go back: the first of the two.
        LocalResult::Ambiguous(first, _) => first,
        LocalResult::None => {
            return Err(format!(
                "{at} does not exist in {zone}: the clocks skip it (a daylight saving change)"
            ))
        }
    };
    let utc = t.with_timezone(&Utc);
    if !(1..=9999).contains(&local.year()) || !(1..=9999).contains(&utc.year()) {
        return Err(format!("{at} is not in the years 0001 to 9999"));
    }
    if local.nanosecond() >= 1_000_000_000 {
        return Err(format!("{at} is a leap second: seconds go from 00 to 59"));
    }
    Ok(crate::domain::time::truncate_ms(utc))
}

/// The picker: date-time, time zone (the browser's, filled in by script;
/// UTC without it) and, with script, the UTC instant they resolve to.
pub fn picker(id: &str, label: &str, hint: &str) -> Markup {
    picker_at(id, label, hint, None)
}

/// The picker, filled in with `at` (and then required: it never stands for
/// "now" by being left empty). It shows `at` in UTC; the script shows it in
/// the reader's zone, the same instant.
pub fn picker_at(id: &str, label: &str, hint: &str, at: Option<DateTime<Utc>>) -> Markup {
    let tz_id = format!("{id}-tz");
    let out_id = format!("{id}-utc");
    let value = at.map(|t| t.format("%Y-%m-%dT%H:%M:%S").to_string());
    let instant = at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    html! {
        div.picker data-picker {
            div.field {
                label for=(id) { (label) }
                input id=(id) name="at" type="datetime-local" step="1" data-at aria-describedby=(out_id)
                    value=[value] data-instant=[instant] required[at.is_some()];
                small { (hint) }
            }
            div.field {
                label for=(tz_id) { "Time zone" }
                input id=(tz_id) name="tz" type="text" value="UTC" list="time-zones" data-tz autocomplete="off" spellcheck="false";
                datalist #time-zones {
                    option value="UTC" {}
                    @for zone in COMMON_ZONES { option value=(zone) {} }
                }
            }
            p.resolved { "In UTC: " output id=(out_id) for={ (id) " " (tz_id) } data-utc { "—" } }
        }
    }
}

const COMMON_ZONES: &[&str] = &[
    "Europe/London",
    "Europe/Berlin",
    "Europe/Paris",
    "Europe/Helsinki",
    "Europe/Stockholm",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Asia/Tokyo",
    "Asia/Shanghai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Australia/Sydney",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-11-30T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_local_time_in_a_zone_resolves_to_utc() {
        let t = resolve("2026-12-01T09:30", "Europe/Berlin", now()).unwrap();
        assert_eq!(t.to_rfc3339(), "2026-12-01T08:30:00+00:00");
        let t = resolve("2026-07-01T09:30:15", "Europe/Berlin", now()).unwrap();
        assert_eq!(t.to_rfc3339(), "2026-07-01T07:30:15+00:00");
        assert_eq!(
            resolve("2026-12-01T09:30", "", now()).unwrap().to_rfc3339(),
            "2026-12-01T09:30:00+00:00"
        );
    }

    #[test]
    fn years_outside_0001_to_9999_and_leap_seconds_are_refused() {
        let e = resolve("+10000-01-01T00:00", "UTC", now()).unwrap_err();
        assert!(e.contains("0001 to 9999"), "{e}");
        let e = resolve("0001-01-01T00:30", "Europe/Berlin", now()).unwrap_err();
        assert!(e.contains("0001 to 9999"), "{e}");
        let e = resolve("2026-06-30T23:59:60", "UTC", now()).unwrap_err();
        assert!(e.contains("leap second"), "{e}");
    }

    #[test]
    fn empty_means_now_and_nonsense_is_named() {
        assert_eq!(resolve("", "Europe/Berlin", now()).unwrap(), now());
        assert!(resolve("tomorrow", "UTC", now())
            .unwrap_err()
            .contains("tomorrow"));
        assert!(resolve("2026-12-01T09:30", "Mars/Olympus", now())
            .unwrap_err()
            .contains("Mars/Olympus"));
    }

    #[test]
    fn a_time_the_clocks_skip_is_refused_and_a_repeated_one_takes_the_first() {
        assert!(resolve("2026-03-29T02:30", "Europe/Berlin", now())
            .unwrap_err()
            .contains("skip"));
        let t = resolve("2026-10-25T02:30", "Europe/Berlin", now()).unwrap();
        assert_eq!(t.to_rfc3339(), "2026-10-25T00:30:00+00:00");
    }
}
