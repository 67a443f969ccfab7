//! Times on the wire: RFC 3339 with an offset in, UTC with `Z` and at most
//! millisecond precision out.

use chrono::{DateTime, DurationRound, SecondsFormat, TimeDelta, Timelike, Utc};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("must be an RFC 3339 date-time with an offset, such as 2020-07-01T12:34:00Z or 2020-07-01T14:34:00+02:00")]
    Malformed,
}

/// Parses an RFC 3339 time that carries an explicit offset; a time without an
/// offset is ambiguous and refused. The result is truncated to milliseconds,
/// the precision Dispatch stores and answers with.
pub fn parse_rfc3339(s: &str) -> Result<DateTime<Utc>, TimeError> {
    let t = DateTime::parse_from_rfc3339(s.trim()).map_err(|_| TimeError::Malformed)?;
    Ok(truncate_ms(t.with_timezone(&Utc)))
}

pub fn truncate_ms(t: DateTime<Utc>) -> DateTime<Utc> {
    // Times are truncated when they come in, so most are whole milliseconds
    // already when they go out (and `duration_trunc` is not cheap: 2 % of
    // the service's time on a batch, five times per message).
    if t.nanosecond().is_multiple_of(1_000_000) {
        return t;
    }
    t.duration_trunc(TimeDelta::milliseconds(1)).unwrap_or(t)
}

/// `2020-07-01T12:34:00Z`, or `2020-07-01T12:34:56.123Z` when there are milliseconds.
pub fn format(t: &DateTime<Utc>) -> String {
    let t = truncate_ms(*t);
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// serde helpers for `DateTime<Utc>` fields on the wire.
pub mod serde_ts {
    use super::*;
    use serde::Serializer;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(t))
    }

    pub mod option {
        use super::*;
        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&format(t)),
                None => s.serialize_none(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ] {
            assert_eq!(truncate_ms(at(t)), at(cut), "{t}");
        }
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
