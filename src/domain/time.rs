//! Times on the wire: RFC 3339 with an offset in, UTC with `Z` and at most
//! millisecond precision out.

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("must be an RFC 3339 date-time with an offset, such as 2020-07-01T12:34:00Z or 2020-07-01T14:34:00+02:00")]
    Malformed,
    #[error("must be in the years 0001 to 9999")]
    OutOfRange,
    #[error("must not be a leap second (:60): RFC 3339 times here have seconds 00 to 59")]
    LeapSecond,
}

/// Parses an RFC 3339 time that carries an explicit offset; a time without an
/// offset is ambiguous and refused. The result is truncated to milliseconds,
/// the precision Dispatch stores and answers with.
/// Years 0001 to 9999 only, as written and in UTC, and no leap second:
/// what RFC 3339 and every client's parser can read back.
pub fn parse_rfc3339(s: &str) -> Result<DateTime<Utc>, TimeError> {
    let t = DateTime::parse_from_rfc3339(s.trim()).map_err(|_| TimeError::Malformed)?;
    let utc = t.with_timezone(&Utc);
    if !(1..=9999).contains(&t.year()) || !(1..=9999).contains(&utc.year()) {
        return Err(TimeError::OutOfRange);
    }
    // chrono keeps a leap second as a nanosecond count past one second.
    if t.nanosecond() >= 1_000_000_000 {
        return Err(TimeError::LeapSecond);
    }
    Ok(truncate_ms(utc))
}

/// Cut (not rounded) to the millisecond: the nanoseconds within the second
/// lose their last six digits. (chrono's `duration_trunc` counts in
/// nanoseconds since 1970 and so fails after the year 2262, which left
/// such times uncut.)
pub fn truncate_ms(t: DateTime<Utc>) -> DateTime<Utc> {
    let nanos = t.nanosecond();
    if nanos.is_multiple_of(1_000_000) {
        return t;
    }
    t.with_nanosecond(nanos - nanos % 1_000_000).unwrap_or(t)
}

/// `2020-07-01T12:34:00Z`, or `2020-07-01T12:34:56.123Z` when there are milliseconds.
pub fn format(t: &DateTime<Utc>) -> String {
    match Text::of(t) {
        Some(text) => text.as_str().to_owned(),
        None => slow(t),
    }
}

/// chrono's own writing of `format`'s text, for the times `Text` leaves to
/// it (and to check `Text` against).
fn slow(t: &DateTime<Utc>) -> String {
    truncate_ms(*t).to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// `format`'s text on the stack, written digit by digit: a message's answer
/// holds up to four times, and chrono's writing (through `fmt` into a new
/// `String` each) took a tenth of the service's time on a batch. Only for
/// years 0 to 9999 and no leap second; `None` leaves the rest to chrono.
/// The test below holds it to chrono's text.
struct Text {
    bytes: [u8; 24],
    len: usize,
}

impl Text {
    fn of(t: &DateTime<Utc>) -> Option<Text> {
        let t = truncate_ms(*t);
        let (date, time) = (t.date_naive(), t.time());
        let year = u32::try_from(date.year()).ok().filter(|y| *y <= 9999)?;
        let nanos = time.nanosecond();
        if nanos >= 1_000_000_000 {
            return None;
        }
        let mut bytes = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, digits: usize, mut n: u32| {
            for i in (at..at + digits).rev() {
                bytes[i] = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, date.month());
        put(8, 2, date.day());
        put(11, 2, time.hour());
        put(14, 2, time.minute());
        put(17, 2, time.second());
        let len = if nanos == 0 {
            bytes[19] = b'Z';
            20
        } else {
            put(20, 3, nanos / 1_000_000);
            24
        };
        Some(Text { bytes, len })
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).expect("ASCII digits")
    }
}

/// serde helpers for `DateTime<Utc>` fields on the wire.
pub mod serde_ts {
    use super::*;
    use serde::Serializer;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        match Text::of(t) {
            Some(text) => s.serialize_str(text.as_str()),
            None => s.serialize_str(&slow(t)),
        }
    }

    pub mod option {
        use super::*;
        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn years_past_9999_before_0001_and_leap_seconds_are_refused() {
        // Signed and five-digit years are not RFC 3339 at all.
        assert!(parse_rfc3339("+10000-01-01T23:58:59Z").is_err());
        assert!(parse_rfc3339("-0001-12-31T00:01:00Z").is_err());
        for (s, e) in [
            ("0000-12-31T00:01:00Z", TimeError::OutOfRange),
            // Year 1 as written, year 0 in UTC.
            ("0001-01-01T00:30:00+01:00", TimeError::OutOfRange),
            // Year 9999 as written, year 10000 in UTC.
            ("9999-12-31T23:30:00-01:00", TimeError::OutOfRange),
            ("2020-06-30T23:59:60Z", TimeError::LeapSecond),
            ("2020-07-01T01:59:60.5+02:00", TimeError::LeapSecond),
        ] {
            assert_eq!(parse_rfc3339(s), Err(e), "{s}");
        }
        for s in ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z"] {
            assert_eq!(format(&parse_rfc3339(s).unwrap()), s);
        }
    }

    #[test]
    fn times_with_an_offset_are_converted_to_utc() {
        let t = parse_rfc3339("2020-07-01T14:34:00+02:00").unwrap();
        assert_eq!(format(&t), "2020-07-01T12:34:00Z");
        let t = parse_rfc3339("2020-07-01T12:34:56.123456Z").unwrap();
        assert_eq!(format(&t), "2020-07-01T12:34:56.123Z");
    }

    #[test]
    fn times_are_cut_to_the_millisecond_not_rounded_also_before_1970() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        for (t, cut) in [
            ("2020-07-01T12:34:56.123999Z", "2020-07-01T12:34:56.123Z"),
            ("2020-07-01T12:34:56.000001Z", "2020-07-01T12:34:56Z"),
            ("1969-12-31T23:59:59.999500Z", "1969-12-31T23:59:59.999Z"),
            ("2020-07-01T12:34:56.120Z", "2020-07-01T12:34:56.120Z"),
            ("2500-01-01T00:00:00.000999Z", "2500-01-01T00:00:00Z"),
            ("9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(truncate_ms(at(t)), at(cut), "{t}");
        }
    }

    #[test]
    fn the_quick_text_is_chronos_text() {
        let day = |y: i32, mo: u32, d: u32| chrono::NaiveDate::from_ymd_opt(y, mo, d).unwrap();
        let at = |date: chrono::NaiveDate, h: u32, mi: u32, s: u32, nanos: u32| {
            date.and_hms_nano_opt(h, mi, s, nanos).unwrap().and_utc()
        };
        let mut times = vec![
            at(day(0, 1, 1), 0, 0, 0, 0),
            at(day(9999, 12, 31), 23, 59, 59, 999_999_999),
            at(day(2020, 2, 29), 12, 0, 0, 1_000_000),
            at(day(2020, 7, 1), 12, 34, 56, 120_000_000),
            at(day(1969, 12, 31), 23, 59, 59, 999_500_000),
            at(day(2026, 12, 5), 9, 5, 7, 999),
            // Left to chrono: before year 0, after 9999, a leap second.
            at(day(-1, 12, 31), 23, 59, 59, 0),
            at(day(10000, 1, 1), 0, 0, 0, 5_000_000),
            at(day(2016, 12, 31), 23, 59, 59, 1_500_000_000),
        ];
        // Spread over the years 0 to 9999, with and without milliseconds
        // and below them (splitmix64, so the same times every run).
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let (first, last) = (times[0].timestamp_millis(), times[1].timestamp_millis());
        for i in 0..20_000 {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let ms = first + (z % (last - first) as u64) as i64;
            let t = DateTime::from_timestamp_millis(ms).unwrap();
            times.push(match i % 3 {
                0 => t,
                1 => t.with_nanosecond(0).unwrap(),
                _ => t + chrono::TimeDelta::nanoseconds((z >> 44) as i64 % 1_000_000),
            });
        }
        for t in &times {
            let chrono = slow(t);
            assert_eq!(format(t), chrono, "{t:?}");
            #[derive(serde::Serialize)]
            struct Wire {
                #[serde(with = "serde_ts")]
                at: DateTime<Utc>,
                #[serde(with = "serde_ts::option")]
                maybe: Option<DateTime<Utc>>,
            }
            let wire = serde_json::to_value(Wire {
                at: *t,
                maybe: Some(*t),
            })
            .unwrap();
            assert_eq!(wire, serde_json::json!({"at": chrono, "maybe": chrono}));
        }
        assert_eq!(format(&times[1]), "9999-12-31T23:59:59.999Z");
        assert_eq!(format(&times[6]), slow(&times[6]), "year -1 by chrono");
        assert!(Text::of(&times[8]).is_none(), "a leap second by chrono");
    }

    #[test]
    fn times_without_an_offset_or_malformed_are_refused() {
        for bad in [
            "2020-07-01T12:34:00",
            "2020-07-01",
            "tomorrow",
            "",
            "2020-13-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), Err(TimeError::Malformed), "{bad}");
        }
    }
}
