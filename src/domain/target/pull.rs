//! A pull target's configuration (docs/api.md#pull-targets): how long a
//! received message stays hidden, how many receives it is allowed, and how
//! long it may wait to be received at all.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration as the client wrote it (`60s`, `14d`), with its milliseconds.
/// The text is kept so that a target shows what its owner sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    text: String,
    ms: u64,
}

impl Span {
    /// A whole number (up to 9 digits, no leading zero) and a unit: `ms`,
    /// `s`, `m`, `h` or `d`.
    pub fn parse(s: &str) -> Option<Span> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (n, unit) = s.split_at(digits);
        if !(1..=9).contains(&digits) || (digits > 1 && n.starts_with('0')) {
            return None;
        }
        let n: u64 = n.parse().ok()?;
        let per = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        Some(Span {
            text: s.to_string(),
            ms: n.checked_mul(per)?,
        })
    }

    pub fn ms(&self) -> u64 {
        self.ms
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn delta(&self) -> chrono::TimeDelta {
        chrono::TimeDelta::milliseconds(i64::try_from(self.ms).unwrap_or(i64::MAX))
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Span::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("`{s}` is not a duration")))
    }
}

/// The largest number `Span::parse` reads before its unit.
pub const MAX_SPAN_NUMBER: u64 = 999_999_999;

/// A visibility timeout: 1 s to 12 h (a `visibility` call may also say 0).
pub const VISIBILITY_MS: std::ops::RangeInclusive<u64> = 1_000..=43_200_000;
/// Receives without an ack before a message is dead.
pub const MAX_RECEIVE_COUNT: std::ops::RangeInclusive<u32> = 1..=1_000;
/// How long a message may wait to be received: 1 min to 14 d.
pub const RETENTION_MS: std::ops::RangeInclusive<u64> = 60_000..=1_209_600_000;

pub const DEFAULT_VISIBILITY: &str = "60s";
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 5;
pub const DEFAULT_RETENTION: &str = "14d";

/// A receive answers at most this many messages, and 10 unless asked.
pub const MAX_RECEIVE: u32 = 100;
pub const DEFAULT_RECEIVE: u32 = 10;
/// A receive waits at most this long for a message.
pub const MAX_WAIT_MS: u64 = 20_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PullConfig {
    pub visibility_timeout: Span,
    pub max_receive_count: u32,
    pub retention: Span,
}

impl Default for PullConfig {
    fn default() -> Self {
        Self {
            visibility_timeout: Span::parse(DEFAULT_VISIBILITY).expect("a duration"),
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            retention: Span::parse(DEFAULT_RETENTION).expect("a duration"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_keep_their_text_and_count_milliseconds() {
        for (s, ms) in [
            ("0s", 0),
            ("60s", 60_000),
            ("1m", 60_000),
            ("12h", 43_200_000),
            ("14d", 1_209_600_000),
            ("250ms", 250),
        ] {
            let span = Span::parse(s).unwrap();
            assert_eq!((span.as_str(), span.ms()), (s, ms));
        }
        for bad in [
            "",
            "s",
            "60",
            "1.5s",
            "-1s",
            "1w",
            "60 s",
            "1234567890s",
            "1S",
        ] {
            assert!(Span::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn the_defaults_are_within_the_limits() {
        let c = PullConfig::default();
        assert!(VISIBILITY_MS.contains(&c.visibility_timeout.ms()));
        assert!(MAX_RECEIVE_COUNT.contains(&c.max_receive_count));
        assert!(RETENTION_MS.contains(&c.retention.ms()));
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::json!({"visibilityTimeout": "60s", "maxReceiveCount": 5, "retention": "14d"})
        );
    }
}
