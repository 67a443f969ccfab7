//! The messages list's quick ranges ("last hour", "today", …) and its
//! total: links that fill the due-time filter, keeping the other filters.

use chrono::{DateTime, NaiveTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use maud::{html, Markup};

use super::{layout, list_query::ListQuery};

/// `from`/`to` as the filter's local date-times in `tz`.
fn local(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// The ranges, each as the list's query: the current filters with the due
/// time replaced. "Today" is the person's day (their chosen zone, else UTC).
pub fn ranges(q: &ListQuery, now: DateTime<Utc>, zone: Option<&str>) -> Markup {
    let tz: Tz = zone.and_then(|z| z.parse().ok()).unwrap_or(Tz::UTC);
    let midnight = now.with_timezone(&tz).date_naive().and_time(NaiveTime::MIN);
    let today = tz
        .from_local_datetime(&midnight)
        .earliest()
        .map_or(now, |t| t.with_timezone(&Utc));
    let ranges: [(&str, DateTime<Utc>, DateTime<Utc>); 4] = [
        ("Last hour", now - TimeDelta::hours(1), now),
        ("Last 24 hours", now - TimeDelta::hours(24), now),
        ("Today", today, today + TimeDelta::days(1)),
        ("Next hour", now, now + TimeDelta::hours(1)),
    ];
    let keep: Vec<String> = [
        ("state", &q.state),
        ("target", &q.target),
        ("key", &q.key),
        ("schedule", &q.schedule),
    ]
    .into_iter()
    .filter(|(_, v)| !v.trim().is_empty())
    .map(|(k, v)| format!("{k}={}", layout::encode(v.trim())))
    .collect();
    html! {
        nav.quick aria-label="Quick ranges of due time" {
            span.label { "Due:" }
            @for (label, from, to) in ranges {
                @let query = {
                    let mut parts = keep.clone();
                    parts.push(format!("from={}", layout::encode(&local(from, tz))));
                    parts.push(format!("to={}", layout::encode(&local(to, tz))));
                    parts.push(format!("tz={}", layout::encode(tz.name())));
                    parts.join("&")
                };
                a href={ "/portal/messages?" (query) } data-range=(label) { (label) }
            }
        }
    }
}

/// How far the list's total is counted: beyond it the list says "more than".
pub const COUNTED: u64 = 10_000;

/// "1,234 messages match" (the filters' total, of which a page shows 50);
/// "More than 10,000" past what is counted.
/// The most messages one payload search looks at: each page of results
/// scans at most this many, newest first, below the page before it.
pub const SEARCHED: u32 = 10_000;

/// The longest text a payload search takes.
pub const SEARCH_CHARS: usize = 200;

/// What the search field's hint says of the bound.
pub fn searched_words() -> String {
    format!(
        "Exact text, case and all. Each page searches at most {} messages, newest first.",
        group(u64::from(SEARCHED))
    )
}

/// What a payload search looked at: the bounded scan, said plainly, and
/// where to go on.
pub fn search_scope(text: &str, found: usize, stopped_short: bool, later_page: bool) -> Markup {
    let among = match (stopped_short, later_page) {
        (true, false) => format!("among the newest {} messages", group(u64::from(SEARCHED))),
        (true, true) => format!("among the next {} messages", group(u64::from(SEARCHED))),
        (false, false) => "among every message".into(),
        (false, true) => "among every older message".into(),
    };
    html! {
        p #search-scope role="status" {
            @if found == 0 { "No payload holds " } @else { "Payloads holding " }
            q { (text) } ", " (among) " the filters select."
            @if stopped_short { " Older ones are searched with the link below." }
        }
    }
}

pub fn total(n: u64) -> Markup {
    let words = if n == 1 {
        "message matches"
    } else {
        "messages match"
    };
    html! {
        @if n > COUNTED {
            p #total data-total=(n) { "More than " (group(COUNTED)) " " (words) }
        } @else {
            p #total data-total=(n) { (group(n)) " " (words) }
        }
    }
}

/// 1234567 as `1,234,567`.
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_total_past_what_is_counted_says_more_than() {
        assert!(total(10_000)
            .into_string()
            .contains(">10,000 messages match<"));
        assert!(total(10_001)
            .into_string()
            .contains(">More than 10,000 messages match<"));
        assert!(total(1).into_string().contains(">1 message matches<"));
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1_000), "1,000");
        assert_eq!(group(1_234_567), "1,234,567");
    }
}
