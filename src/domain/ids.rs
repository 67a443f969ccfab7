//! Prefixed identifiers: `DI-M-<uuidv7>` for messages, `DI-T-<10 hex>` for
//! targets, `DI-S-<10 hex>` for schedules; and the time-ordered UUIDs that
//! message ids and people's ids are made of, for the time the caller's
//! clock gives.

use std::{fmt, str::FromStr, sync::Mutex};

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::{timestamp::context::ContextV7, timestamp::ClockSequence, Timestamp, Uuid};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub Uuid);

/// An account: every row and every request belongs to one. Given by the
/// operator (`--account`), carried in tokens and sessions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountId(String);

impl AccountId {
    pub const MAX_CHARS: usize = 200;

    /// An account name an operator typed: trimmed, 1 to 200 characters.
    pub fn parse(s: &str) -> Result<Self, InvalidId> {
        let s = s.trim();
        if s.is_empty() || s.chars().count() > Self::MAX_CHARS || s.chars().any(char::is_control) {
            return Err(InvalidId("account"));
        }
        Ok(Self(s.to_string()))
    }

    /// An account read back from where Dispatch wrote it (a token it
    /// signed, a session, a row).
    pub fn from_trusted(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for AccountId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// As its name (the CLI prints accounts in JSON); there is no `Deserialize`:
/// an account read from outside goes through `parse`.
impl Serialize for AccountId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid {0} id")]
pub struct InvalidId(&'static str);

const MESSAGE_PREFIX: &str = "DI-M-";
const TARGET_PREFIX: &str = "DI-T-";
const SCHEDULE_PREFIX: &str = "DI-S-";
const SUBSCRIPTION_PREFIX: &str = "DI-U-";
const EVENT_PREFIX: &str = "DI-E-";

/// An event (docs/api.md#events-and-subscriptions): `DI-E-<uuidv7>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub Uuid);

impl EventId {
    /// A new time-ordered id, for the caller's time (as `MessageId::at`).
    pub fn at(now: DateTime<Utc>) -> Self {
        Self(uuid_v7_at(now))
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{EVENT_PREFIX}{}", self.0.hyphenated())
    }
}

impl FromStr for EventId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, InvalidId> {
        let rest = s.strip_prefix(EVENT_PREFIX).ok_or(InvalidId("event"))?;
        if rest.len() != 36 || rest.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(InvalidId("event"));
        }
        Uuid::parse_str(rest)
            .map(Self)
            .map_err(|_| InvalidId("event"))
    }
}

impl MessageId {
    /// A new time-ordered id for a message made at `now` (see `uuid_v7_at`).
    pub fn at(now: DateTime<Utc>) -> Self {
        Self(uuid_v7_at(now))
    }
}

/// The one counter behind every time-ordered id of this process, so that
/// they increase in the order they are made, whatever clock gave the time.
static V7_CONTEXT: Mutex<ContextV7> = Mutex::new(ContextV7::new());

/// A new UUIDv7 for `at` (to the millisecond), strictly greater than every
/// one this process made before: ids of one millisecond, as a clock held
/// still gives, count up from a random start; and a time earlier than one
/// already used (a clock set back) takes that later time instead.
pub fn uuid_v7_at(at: DateTime<Utc>) -> Uuid {
    v7_in(&V7_CONTEXT, at)
}

fn v7_in(context: &impl ClockSequence<Output = u64>, at: DateTime<Utc>) -> Uuid {
    // Before 1970 a UUIDv7 has no time; such a clock counts from its start.
    let seconds = u64::try_from(at.timestamp()).unwrap_or(0);
    Uuid::new_v7(Timestamp::from_unix(
        context,
        seconds,
        at.timestamp_subsec_nanos(),
    ))
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{MESSAGE_PREFIX}{}", self.0.hyphenated())
    }
}

impl FromStr for MessageId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, InvalidId> {
        let rest = s.strip_prefix(MESSAGE_PREFIX).ok_or(InvalidId("message"))?;
        // Only the canonical lower-case hyphenated form is an id.
        if rest.len() != 36 || rest.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(InvalidId("message"));
        }
        Uuid::parse_str(rest)
            .map(Self)
            .map_err(|_| InvalidId("message"))
    }
}

/// A short id: a prefix and 10 random lower-case hex characters.
macro_rules! short_id {
    ($t:ident, $prefix:expr, $what:expr) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $t(String);

        impl $t {
            pub fn new() -> Self {
                let bytes: [u8; 5] = rand::rng().random();
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                Self(format!("{}{hex}", $prefix))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// For ids read back from the store, which only holds valid ones.
            pub fn from_trusted(s: String) -> Self {
                Self(s)
            }
        }

        impl Default for $t {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $t {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                let rest = s.strip_prefix($prefix).ok_or(InvalidId($what))?;
                if rest.len() == 10 && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                    Ok(Self(s.to_string()))
                } else {
                    Err(InvalidId($what))
                }
            }
        }
    };
}

short_id!(TargetId, TARGET_PREFIX, "target");
short_id!(ScheduleId, SCHEDULE_PREFIX, "schedule");
short_id!(SubscriptionId, SUBSCRIPTION_PREFIX, "subscription");

macro_rules! serde_via_str {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_via_str!(MessageId);
serde_via_str!(TargetId);
serde_via_str!(ScheduleId);
serde_via_str!(SubscriptionId);
serde_via_str!(EventId);

#[cfg(test)]
mod tests {
    use super::*;

    /// The millisecond a UUIDv7 carries.
    fn millis(id: Uuid) -> u64 {
        let (seconds, nanos) = id.get_timestamp().unwrap().to_unix();
        seconds * 1000 + u64::from(nanos) / 1_000_000
    }

    #[test]
    fn message_ids_round_trip_and_are_uuid_v7() {
        let id = MessageId::at(Utc::now());
        let s = id.to_string();
        assert!(s.starts_with("DI-M-"));
        assert_eq!(s.len(), 5 + 36);
        assert_eq!(id.0.get_version_num(), 7);
        assert_eq!(s.parse::<MessageId>().unwrap(), id);
    }

    #[test]
    fn an_id_carries_the_time_it_was_made_for() {
        let context = Mutex::new(ContextV7::new());
        let t = Utc::now();
        let id = v7_in(&context, t);
        assert_eq!(millis(id), t.timestamp_millis() as u64);
        let later = t + chrono::TimeDelta::milliseconds(5);
        assert_eq!(
            millis(v7_in(&context, later)),
            later.timestamp_millis() as u64
        );
    }

    #[test]
    fn ids_made_at_one_instant_are_distinct_and_increase() {
        let context = Mutex::new(ContextV7::new());
        let t = Utc::now();
        let ids: Vec<Uuid> = (0..1000).map(|_| v7_in(&context, t)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids
            .iter()
            .all(|&id| millis(id) == t.timestamp_millis() as u64));

        // The process's own counter too, whatever other tests make meanwhile.
        let ids: Vec<MessageId> = (0..1000).map(|_| MessageId::at(t)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn ids_still_increase_when_the_clock_is_set_back() {
        let context = Mutex::new(ContextV7::new());
        let t = Utc::now();
        let first = v7_in(&context, t);
        let earlier = v7_in(&context, t - chrono::TimeDelta::seconds(10));
        assert!(first < earlier);
        assert_eq!(millis(earlier), t.timestamp_millis() as u64);
        let later = v7_in(&context, t + chrono::TimeDelta::seconds(1));
        assert!(earlier < later);
    }

    #[test]
    fn message_ids_are_time_ordered() {
        let t = Utc::now();
        let a = MessageId::at(t);
        let b = MessageId::at(t + chrono::TimeDelta::milliseconds(2));
        assert!(a < b);
    }

    #[test]
    fn malformed_message_ids_are_refused() {
        for bad in [
            "",
            "DI-M-",
            "DI-T-11111111-2222-3333-4444-555555555555",
            "DI-M-11111111222233334444555555555555",
            "DI-M-11111111-2222-3333-4444-55555555555G",
            "DI-M-AAAAAAAA-2222-3333-4444-555555555555",
        ] {
            assert!(bad.parse::<MessageId>().is_err(), "{bad}");
        }
        assert!("DI-M-11111111-2222-3333-4444-555555555555"
            .parse::<MessageId>()
            .is_ok());
    }

    #[test]
    fn target_ids_are_ten_lower_hex() {
        let id = TargetId::new();
        assert_eq!(id.as_str().len(), 15);
        assert_eq!(id.as_str().parse::<TargetId>().unwrap(), id);
        assert!("DI-T-aabbcc1122".parse::<TargetId>().is_ok());
        for bad in [
            "DI-T-AABBCC1122",
            "DI-T-aabbcc112",
            "DI-T-aabbcc11223",
            "DI-M-aabbcc1122",
            "DI-T-aabbcc112g",
        ] {
            assert!(bad.parse::<TargetId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn schedule_ids_are_ten_lower_hex() {
        let id = ScheduleId::new();
        assert!(id.as_str().starts_with("DI-S-"));
        assert_eq!(id.as_str().parse::<ScheduleId>().unwrap(), id);
        for bad in [
            "DI-S-AABBCC1122",
            "DI-T-aabbcc1122",
            "DI-S-aabbcc112",
            "DI-S-aabbcc112g",
        ] {
            assert!(bad.parse::<ScheduleId>().is_err(), "{bad}");
        }
    }
}
