//! Event types, the patterns subscriptions match them with, and
//! subscriptions (docs/api.md#events-and-subscriptions).
//!
//! A type is segments of `[A-Za-z0-9_-]` joined by dots (`order.created`),
//! 1 to 255 characters. A pattern is a type (that type exactly), a type
//! followed by `.*` (every type under it, at any depth) or `*` (every type
//! but Dispatch's own, under `dispatch.`).

use std::fmt;

use chrono::{DateTime, Utc};

use super::{
    ids::{AccountId, EventId, MessageId, SubscriptionId, TargetId},
    message::{OrderingKey, State},
    payload::Payload,
};

/// The most characters a type (or a pattern) has.
pub const TYPE_MAX_CHARS: usize = 255;
/// Types under this prefix are Dispatch's own: no producer publishes them,
/// and `*` does not match them.
pub const OWN_PREFIX: &str = "dispatch.";
/// Patterns per subscription.
pub const MAX_PATTERNS: usize = 100;
/// The most characters of a subscription's name.
pub const NAME_MAX_CHARS: usize = 200;

/// Why a type or pattern was refused, in the words a 400 gives.
pub const TYPE_RULE: &str =
    "must be 1 to 255 characters: segments of letters, digits, '_' and '-' joined by dots";
pub const PATTERN_RULE: &str =
    "must be a type, a type followed by '.*', or '*' (types are segments of letters, digits, '_' and '-' joined by dots)";

fn is_type(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= TYPE_MAX_CHARS
        && s.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

/// A valid event type. Whether a producer may publish it is a separate
/// question ([`EventType::is_own`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventType(String);

impl EventType {
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        if is_type(s) {
            Ok(Self(s.to_string()))
        } else {
            Err(TYPE_RULE)
        }
    }

    /// A type read back from where Dispatch wrote it.
    pub fn from_trusted(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// One of Dispatch's own (`dispatch.…`).
    pub fn is_own(&self) -> bool {
        self.0.starts_with(OWN_PREFIX)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a subscription matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// `*`: every type but Dispatch's own.
    All,
    /// `family.*`: every type that begins with `family.` (the text kept is
    /// `family.`, with its dot).
    Family(String),
    /// A type, exactly.
    Exact(String),
}

impl Pattern {
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        if s == "*" {
            return Ok(Self::All);
        }
        if s.len() > TYPE_MAX_CHARS {
            return Err(PATTERN_RULE);
        }
        match s.strip_suffix(".*") {
            Some(family) if is_type(family) => Ok(Self::Family(format!("{family}."))),
            Some(_) => Err(PATTERN_RULE),
            None if is_type(s) => Ok(Self::Exact(s.to_string())),
            None => Err(PATTERN_RULE),
        }
    }

    pub fn matches(&self, ty: &str) -> bool {
        match self {
            Self::All => !ty.starts_with(OWN_PREFIX),
            Self::Family(prefix) => ty.starts_with(prefix.as_str()),
            Self::Exact(t) => t == ty,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("*"),
            Self::Family(prefix) => write!(f, "{prefix}*"),
            Self::Exact(t) => f.write_str(t),
        }
    }
}

/// A target's wish to receive the events whose type one of its patterns
/// matches.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub id: SubscriptionId,
    pub account: AccountId,
    pub target_id: TargetId,
    pub name: String,
    /// 1 to 100 patterns, as given (duplicates kept: the owner's list).
    pub types: Vec<Pattern>,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Subscription {
    /// Whether this subscription, enabled, takes an event of type `ty`.
    pub fn takes(&self, ty: &str) -> bool {
        self.enabled && self.types.iter().any(|p| p.matches(ty))
    }
}

/// The texts of every pattern that matches type `ty`: the type itself,
/// `f.*` for each family `f` it is under, and `*` unless it is one of
/// Dispatch's own. Publishing looks these up, so that its cost does not
/// grow with the subscriptions that do not match.
pub fn patterns_matching(ty: &str) -> Vec<String> {
    let mut texts = vec![ty.to_string()];
    texts.extend(
        ty.match_indices('.')
            .map(|(i, _)| format!("{}.*", &ty[..i])),
    );
    if !ty.starts_with(OWN_PREFIX) {
        texts.push("*".to_string());
    }
    texts
}

/// An event as published: the message each matching target gets is made of
/// its type, payload, delivery time and orderingKey.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: EventId,
    pub account: AccountId,
    pub ty: EventType,
    pub payload: Payload,
    pub delivery_time: DateTime<Utc>,
    pub ordering_key: Option<OrderingKey>,
    pub created_at: DateTime<Utc>,
}

/// A message an event made, and its state while the message exists
/// (`None` once retention removed it).
#[derive(Debug, Clone, PartialEq)]
pub struct Reached {
    pub message_id: MessageId,
    pub target_id: TargetId,
    pub state: Option<State>,
}

/// Patterns as stored: their texts.
pub fn pattern_texts(types: &[Pattern]) -> Vec<String> {
    types.iter().map(ToString::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_dotted_segments() {
        for ok in ["order", "order.created", "a-b_c.D9", &"x".repeat(255)] {
            assert!(EventType::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "order.",
            ".order",
            "order..created",
            "order created",
            "order.*",
            "*",
            "ordré",
            &"x".repeat(256),
        ] {
            assert!(EventType::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn own_types_are_under_dispatch_dot() {
        assert!(EventType::parse("dispatch.message.delivered")
            .unwrap()
            .is_own());
        assert!(!EventType::parse("dispatcher.x").unwrap().is_own());
        assert!(!EventType::parse("dispatch").unwrap().is_own());
    }

    #[test]
    fn patterns_match_exactly_by_family_or_all() {
        let exact = Pattern::parse("order.created").unwrap();
        assert!(exact.matches("order.created"));
        assert!(!exact.matches("order.created.v2"));
        assert!(!exact.matches("order"));

        let family = Pattern::parse("order.*").unwrap();
        assert!(family.matches("order.created"));
        assert!(family.matches("order.created.v2"));
        assert!(!family.matches("order"));
        assert!(!family.matches("orders.created"));

        let all = Pattern::parse("*").unwrap();
        assert!(all.matches("order.created"));
        assert!(!all.matches("dispatch.message.delivered"));
        let own = Pattern::parse("dispatch.*").unwrap();
        assert!(own.matches("dispatch.message.delivered"));
    }

    #[test]
    fn the_patterns_matching_a_type_are_few_and_each_matches_it() {
        let texts = patterns_matching("a.b.c");
        assert_eq!(texts, ["a.b.c", "a.*", "a.b.*", "*"]);
        for t in &texts {
            assert!(Pattern::parse(t).unwrap().matches("a.b.c"), "{t}");
        }
        assert_eq!(
            patterns_matching("dispatch.message.delivered"),
            [
                "dispatch.message.delivered",
                "dispatch.*",
                "dispatch.message.*"
            ]
        );
        assert_eq!(patterns_matching("order"), ["order", "*"]);
    }

    #[test]
    fn patterns_are_refused_when_not_a_type_family_or_star() {
        for bad in [
            "",
            "**",
            "order.**",
            ".*",
            "order*",
            "*.created",
            "order.*.x",
            "a b",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
        for text in ["*", "order.*", "order.created"] {
            assert_eq!(Pattern::parse(text).unwrap().to_string(), text);
        }
    }
}
