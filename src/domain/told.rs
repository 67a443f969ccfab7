//! Dispatch's own events about messages (docs/api.md#dispatchs-own-events):
//! what happened to a message, published as an event of its account under
//! `dispatch.message.`, for the subscriptions that name such types.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use super::{
    event::{Event, EventType, OWN_PREFIX},
    ids::{AccountId, EventId, MessageId, TargetId},
    message::OrderingKey,
    payload::Payload,
    target::gate::{BreakerChange, BreakerState, Health},
};

pub const DELIVERED: &str = "dispatch.message.delivered";
pub const DEAD_LETTERED: &str = "dispatch.message.dead_lettered";
pub const ATTEMPT_FAILED: &str = "dispatch.message.attempt_failed";

/// The pattern texts (as subscriptions keep them) that match any of the
/// events about messages: an account none of whose enabled subscriptions
/// holds one of these is told nothing, and nothing is stored for it.
pub const MESSAGE_PATTERNS: [&str; 5] = [
    "dispatch.*",
    "dispatch.message.*",
    DELIVERED,
    DEAD_LETTERED,
    ATTEMPT_FAILED,
];

pub const BREAKER_OPENED: &str = "dispatch.target.breaker_opened";
pub const BREAKER_CLOSED: &str = "dispatch.target.breaker_closed";

/// The pattern texts that match the events about targets' breakers.
pub const TARGET_PATTERNS: [&str; 4] = [
    "dispatch.*",
    "dispatch.target.*",
    BREAKER_OPENED,
    BREAKER_CLOSED,
];

/// The event that tells a breaker's change, if it tells one: opening and
/// closing do; going half-open for a probe does not. Ordered per target
/// (its orderingKey is the target's id).
pub fn breaker_event(
    account: &AccountId,
    target: &TargetId,
    change: BreakerChange,
    health: &Health,
    now: DateTime<Utc>,
) -> Option<Event> {
    let ty = match change.to {
        BreakerState::Open => BREAKER_OPENED,
        BreakerState::Closed => BREAKER_CLOSED,
        BreakerState::HalfOpen => return None,
    };
    let payload = json!({
        "targetId": target.as_str(),
        "state": change.to.as_str(),
        "consecutiveFailures": health.consecutive_failures,
        "openUntil": health.open_until.map(instant),
    });
    Some(Event {
        id: EventId::at(now),
        account: account.clone(),
        ty: EventType::from_trusted(ty),
        payload: Payload::parse(payload.to_string()).expect("a short payload"),
        delivery_time: now,
        ordering_key: Some(OrderingKey::from_trusted(target.as_str())),
        created_at: now,
    })
}

/// Whether a message of this event type was made from one of Dispatch's
/// own events (and so tells nothing).
pub fn is_own(event_type: &str) -> bool {
    event_type.starts_with(OWN_PREFIX)
}

/// The message a happening is about, as every payload names it.
#[derive(Debug, Clone)]
pub struct About {
    pub account: AccountId,
    pub message: MessageId,
    pub target: TargetId,
    /// The event the message was made from, and its type.
    pub event: Option<(EventId, String)>,
    pub ordering_key: Option<String>,
}

impl About {
    /// Whether the message was itself made from one of Dispatch's own
    /// events: such a message tells nothing (no loops).
    pub fn is_told(&self) -> bool {
        self.event.as_ref().is_some_and(|(_, ty)| is_own(ty))
    }
}

/// What happened to a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Happening {
    /// An attempt failed (retried at `next_attempt_at`, or none: dead).
    AttemptFailed {
        attempt_count: u32,
        last_error: Option<String>,
        next_attempt_at: Option<DateTime<Utc>>,
    },
    Delivered {
        attempt_count: u32,
        at: DateTime<Utc>,
    },
    DeadLettered {
        attempt_count: u32,
        last_error: Option<String>,
        at: DateTime<Utc>,
    },
}

/// The most characters of an error a payload repeats.
const ERROR_MAX_CHARS: usize = 4096;

fn error(e: &Option<String>) -> serde_json::Value {
    json!(e
        .as_ref()
        .map(|e| e.chars().take(ERROR_MAX_CHARS).collect::<String>()))
}

fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl Happening {
    pub fn ty(&self) -> &'static str {
        match self {
            Happening::AttemptFailed { .. } => ATTEMPT_FAILED,
            Happening::Delivered { .. } => DELIVERED,
            Happening::DeadLettered { .. } => DEAD_LETTERED,
        }
    }

    /// The event that tells it, due at once; its orderingKey is the
    /// message's id, so that a consumer gets a message's events in order.
    pub fn event(&self, about: &About, now: DateTime<Utc>) -> Event {
        let (event_id, ty) = match &about.event {
            Some((id, ty)) => (Some(id.to_string()), Some(ty.as_str())),
            None => (None, None),
        };
        let mut payload = json!({
            "messageId": about.message.to_string(),
            "targetId": about.target.as_str(),
            "eventId": event_id,
            "type": ty,
            "orderingKey": about.ordering_key,
        });
        let fields = payload.as_object_mut().expect("an object");
        match self {
            Happening::AttemptFailed {
                attempt_count,
                last_error,
                next_attempt_at,
            } => {
                fields.insert("attemptCount".into(), json!(attempt_count));
                fields.insert("lastError".into(), error(last_error));
                fields.insert("nextAttemptAt".into(), json!(next_attempt_at.map(instant)));
            }
            Happening::Delivered { attempt_count, at } => {
                fields.insert("attemptCount".into(), json!(attempt_count));
                fields.insert("deliveredAt".into(), json!(instant(*at)));
            }
            Happening::DeadLettered {
                attempt_count,
                last_error,
                at,
            } => {
                fields.insert("attemptCount".into(), json!(attempt_count));
                fields.insert("lastError".into(), error(last_error));
                fields.insert("deadLetteredAt".into(), json!(instant(*at)));
            }
        }
        Event {
            id: EventId::at(now),
            account: about.account.clone(),
            ty: EventType::from_trusted(self.ty()),
            payload: Payload::parse(payload.to_string())
                .expect("a few hundred characters at most: within a payload's bound"),
            delivery_time: now,
            ordering_key: Some(OrderingKey::from_trusted(about.message.to_string())),
            created_at: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::{patterns_matching, Pattern};

    fn about(event: Option<(EventId, String)>) -> About {
        About {
            account: AccountId::from_trusted("acct".to_string()),
            message: MessageId::at(Utc::now()),
            target: TargetId::from_trusted("DI-T-0011223344".to_string()),
            event,
            ordering_key: Some("order-7".into()),
        }
    }

    #[test]
    fn each_happening_has_the_payload_of_its_type() {
        let now = Utc::now();
        let a = about(None);
        let failed = Happening::AttemptFailed {
            attempt_count: 2,
            last_error: Some("HTTP 503".into()),
            next_attempt_at: Some(now),
        }
        .event(&a, now);
        assert_eq!(failed.ty.as_str(), "dispatch.message.attempt_failed");
        assert_eq!(
            failed.ordering_key.as_ref().map(|k| k.as_str().to_string()),
            Some(a.message.to_string()),
            "a message's events keep its order"
        );
        let p: serde_json::Value = serde_json::from_str(failed.payload.as_str()).unwrap();
        let mut keys: Vec<&str> = p.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "attemptCount",
                "eventId",
                "lastError",
                "messageId",
                "nextAttemptAt",
                "orderingKey",
                "targetId",
                "type"
            ]
        );
        assert_eq!(p["attemptCount"], 2);
        assert_eq!(p["lastError"], "HTTP 503");
        assert_eq!(p["orderingKey"], "order-7");
        assert_eq!(p["eventId"], serde_json::Value::Null);

        let delivered = Happening::Delivered {
            attempt_count: 3,
            at: now,
        }
        .event(&a, now);
        let p: serde_json::Value = serde_json::from_str(delivered.payload.as_str()).unwrap();
        assert_eq!(p["deliveredAt"], instant(now));
        assert_eq!(p["attemptCount"], 3);
        assert!(p.get("lastError").is_none());

        let dead = Happening::DeadLettered {
            attempt_count: 240,
            last_error: None,
            at: now,
        }
        .event(&a, now);
        let p: serde_json::Value = serde_json::from_str(dead.payload.as_str()).unwrap();
        assert_eq!(p["deadLetteredAt"], instant(now));
        assert_eq!(p["lastError"], serde_json::Value::Null);
    }

    #[test]
    fn what_a_message_of_an_event_tells_names_that_event_and_a_told_one_tells_nothing() {
        let e = EventId::at(Utc::now());
        let a = about(Some((e, "order.created".into())));
        assert!(!a.is_told());
        let told = Happening::Delivered {
            attempt_count: 1,
            at: Utc::now(),
        }
        .event(&a, Utc::now());
        let p: serde_json::Value = serde_json::from_str(told.payload.as_str()).unwrap();
        assert_eq!(p["eventId"], e.to_string());
        assert_eq!(p["type"], "order.created");
        assert!(about(Some((e, DELIVERED.into()))).is_told());
    }

    #[test]
    fn a_breaker_tells_its_opening_and_closing_and_not_its_probe() {
        let now = Utc::now();
        let account = AccountId::from_trusted("acct".to_string());
        let target = TargetId::from_trusted("DI-T-0011223344".to_string());
        let open = Health {
            state: BreakerState::Open,
            consecutive_failures: 3,
            open_until: Some(now),
            cooldown_ms: 1000,
        };
        let change = |from, to| BreakerChange { from, to };
        let e = breaker_event(
            &account,
            &target,
            change(BreakerState::Closed, BreakerState::Open),
            &open,
            now,
        )
        .unwrap();
        assert_eq!(e.ty.as_str(), BREAKER_OPENED);
        assert_eq!(e.ordering_key.unwrap().as_str(), target.as_str());
        let p: serde_json::Value = serde_json::from_str(e.payload.as_str()).unwrap();
        assert_eq!(
            p,
            json!({"targetId": target.as_str(), "state": "open", "consecutiveFailures": 3,
                   "openUntil": instant(now)})
        );
        assert!(breaker_event(
            &account,
            &target,
            change(BreakerState::Open, BreakerState::HalfOpen),
            &open,
            now
        )
        .is_none());
        let closed = Health {
            state: BreakerState::Closed,
            consecutive_failures: 0,
            open_until: None,
            cooldown_ms: 1000,
        };
        let e = breaker_event(
            &account,
            &target,
            change(BreakerState::HalfOpen, BreakerState::Closed),
            &closed,
            now,
        )
        .unwrap();
        assert_eq!(e.ty.as_str(), BREAKER_CLOSED);
        for ty in [BREAKER_OPENED, BREAKER_CLOSED] {
            for text in patterns_matching(ty) {
                assert!(TARGET_PATTERNS.contains(&text.as_str()), "{text}");
            }
        }
    }

    #[test]
    fn the_patterns_that_name_events_about_messages_are_exactly_those_that_match_them() {
        for ty in [DELIVERED, DEAD_LETTERED, ATTEMPT_FAILED] {
            for text in patterns_matching(ty) {
                assert!(MESSAGE_PATTERNS.contains(&text.as_str()), "{text}");
            }
        }
        assert!(!Pattern::All.matches(DELIVERED));
        // And nothing else: each text names one of them, `*` none.
        for text in MESSAGE_PATTERNS {
            let p = Pattern::parse(text).unwrap();
            assert!(
                [DELIVERED, DEAD_LETTERED, ATTEMPT_FAILED]
                    .iter()
                    .any(|ty| p.matches(ty)),
                "{text}"
            );
        }
        assert!(!MESSAGE_PATTERNS.contains(&"*") && !TARGET_PATTERNS.contains(&"*"));
    }
}
