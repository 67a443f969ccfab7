//! What the subscription and event stores take and answer
//! (docs/api.md#events-and-subscriptions), beside the `SubscriptionStore`
//! and `EventStore` capabilities.

use chrono::{DateTime, Utc};

use super::{PageCursor, ResponseJson};
use crate::domain::{
    event::{Event, Pattern, Reached, Subscription},
    ids::{EventId, SubscriptionId},
};

/// Where a page of subscriptions (newest first) continues.
pub type SubscriptionCursor = PageCursor<SubscriptionId>;

impl SubscriptionCursor {
    pub fn after(s: &Subscription) -> Self {
        Self {
            created_at: s.created_at,
            id: s.id.clone(),
        }
    }
}

/// Where a page of events (newest first) continues.
pub type EventCursor = PageCursor<EventId>;

impl EventCursor {
    pub fn after(e: &Event) -> Self {
        Self {
            created_at: e.created_at,
            id: e.id,
        }
    }
}

/// Which events a list shows: of a type, created in [`from`, `to`).
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub ty: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// The events a replay takes: created in [`from`, `to`), of a type one of
/// `patterns` matches.
#[derive(Debug, Clone)]
pub struct EventRange {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub patterns: Vec<Pattern>,
}

/// What one transaction of a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayBatch {
    /// Messages made.
    pub made: u64,
    /// Events read (fewer than asked: the range is done).
    pub scanned: u32,
    /// Where the next batch goes on.
    pub last: Option<EventCursor>,
}

/// An event with the messages it made.
#[derive(Debug, Clone, PartialEq)]
pub struct EventView {
    pub event: Event,
    pub messages: Vec<Reached>,
}

/// One event to publish, with the idempotency key it came with.
#[derive(Debug, Clone)]
pub struct PublishItem {
    pub event: Event,
    pub key: Option<super::IdempotencyInput>,
}

/// What makes the answer an idempotency key keeps of a published event.
pub type Render = dyn for<'v> Fn(&'v EventView) -> ResponseJson + Send + Sync;

/// What a publish did.
#[derive(Debug)]
pub enum Published {
    /// The event, and one message per matching target (maybe none).
    Created(EventView),
    /// Its idempotency key named the same request before: that answer.
    Replayed { status: u16, response: ResponseJson },
    /// Its idempotency key named another request.
    KeyConflict,
}
