//! Messages and the state transitions of docs/api.md#states.
//!
//! | state | what moves a message there |
//! | --- | --- |
//! | Scheduled | creation; a reschedule of a Scheduled or DeadLetter message |
//! | Delivered | a successful attempt |
//! | DeadLetter | a non-retryable failure, or the retry ladder exhausted |
//! | Cancelled | a cancel of a Scheduled or DeadLetter message |

use chrono::{DateTime, Utc};

use super::{
    ids::{AccountId, EventId, MessageId, ScheduleId, TargetId},
    payload::Payload,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Scheduled,
    Delivered,
    Cancelled,
    DeadLetter,
}

impl State {
    pub const ALL: [State; 4] = [
        State::Scheduled,
        State::Delivered,
        State::Cancelled,
        State::DeadLetter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Scheduled => "Scheduled",
            State::Delivered => "Delivered",
            State::Cancelled => "Cancelled",
            State::DeadLetter => "DeadLetter",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Cancel and reschedule apply to Scheduled and DeadLetter messages only.
    pub fn can_cancel_or_reschedule(self) -> bool {
        matches!(self, State::Scheduled | State::DeadLetter)
    }
}

/// An orderingKey (docs/api.md#ordering-keys): messages of one target and
/// key go one at a time, in order. 1 to 255 characters, none of them a
/// control character (it travels in an HTTP header).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrderingKey(String);

impl OrderingKey {
    pub const MAX_CHARS: usize = 255;

    /// A key a caller sent, as it was sent (no trimming); the error is the
    /// rule it broke (`ORDERING_KEY_RULE`), for the field's problem.
    pub fn parse(s: String) -> Result<Self, &'static str> {
        let n = s.chars().count();
        if n == 0 || n > Self::MAX_CHARS || s.chars().any(char::is_control) {
            return Err(ORDERING_KEY_RULE);
        }
        Ok(Self(s))
    }

    /// A key read back from where Dispatch wrote it (a row).
    pub fn from_trusted(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for OrderingKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for OrderingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub const ORDERING_KEY_RULE: &str = "must be 1 to 255 characters, none of them a control character";

/// A message as the store holds it.
#[derive(Debug, Clone)]
pub struct Message {
    pub id: MessageId,
    pub account: AccountId,
    pub target_id: TargetId,
    pub state: State,
    pub delivery_time: DateTime<Utc>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub attempt_count: u32,
    pub delivered_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub dead_lettered_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// docs/api.md#ordering-keys: messages of one target and key go one at a time, in order.
    pub ordering_key: Option<OrderingKey>,
    /// docs/api.md#recurring-schedules: the schedule whose run made this message.
    pub schedule_id: Option<ScheduleId>,
    /// docs/api.md#events-and-subscriptions: the event that made this message, and its type.
    pub event_id: Option<EventId>,
    pub event_type: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub payload: Payload,
}

impl Message {
    /// A new message, Scheduled for `delivery_time` and not yet attempted:
    /// the one way every door and the benchmarks make one.
    pub fn scheduled(
        account: &AccountId,
        target_id: TargetId,
        delivery_time: DateTime<Utc>,
        payload: Payload,
        now: DateTime<Utc>,
    ) -> Self {
        let delivery_time = crate::domain::time::truncate_ms(delivery_time);
        Self {
            id: MessageId::at(now),
            account: account.clone(),
            target_id,
            state: State::Scheduled,
            delivery_time,
            next_attempt_at: Some(delivery_time),
            attempt_count: 0,
            delivered_at: None,
            cancelled_at: None,
            dead_lettered_at: None,
            last_error: None,
            ordering_key: None,
            schedule_id: None,
            event_id: None,
            event_type: None,
            created_at: now,
            updated_at: now,
            payload,
        }
    }
}

/// One attempt as recorded.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub duration_ms: u64,
    pub outcome: super::retry::AttemptOutcome,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub response_body: Option<String>,
    /// The wait before the next attempt that the receiver asked for
    /// (Retry-After), as applied: after the cap.
    pub retry_after_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scheduled_and_dead_letters_can_be_cancelled_or_rescheduled() {
        assert!(State::Scheduled.can_cancel_or_reschedule());
        assert!(State::DeadLetter.can_cancel_or_reschedule());
        assert!(!State::Delivered.can_cancel_or_reschedule());
        assert!(!State::Cancelled.can_cancel_or_reschedule());
    }

    #[test]
    fn ordering_keys_are_one_to_255_characters_without_controls() {
        let parse = OrderingKey::parse;
        assert_eq!(parse("order-17".into()).unwrap().as_str(), "order-17");
        assert_eq!(parse(" spaced ".into()).unwrap().as_str(), " spaced ");
        assert!(parse("é".repeat(255)).is_ok());
        assert_eq!(parse("é".repeat(256)).unwrap_err(), ORDERING_KEY_RULE);
        assert!(parse(String::new()).is_err());
        assert!(parse("a\nb".into()).is_err());
        assert!(parse("a\u{85}b".into()).is_err());
    }

    #[test]
    fn states_round_trip_and_unknown_ones_are_refused() {
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(s));
        }
        assert_eq!(State::parse("scheduled"), None);
        assert_eq!(State::parse("Pending"), None);
    }
}
