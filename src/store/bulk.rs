//! Bulk actions (docs/api.md#bulk-redrive-cancel-and-replay): redrive, cancel
//! and replay over many messages, each applied one batch (one transaction) at
//! a time, so that deliveries never wait behind a long one.

use chrono::{DateTime, Utc};

use crate::domain::{
    ids::{MessageId, TargetId},
    message::State,
};

/// What a bulk action does to each message it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// DeadLetter → Scheduled for `at`, the ladder starting over.
    Redrive { at: DateTime<Utc> },
    /// Scheduled or DeadLetter (or only `only`) → Cancelled; an attempt in
    /// flight keeps its message.
    Cancel { only: Option<State> },
    /// Delivered → Scheduled for `at`, same messageId, attempts kept.
    Replay { at: DateTime<Utc> },
}

impl BulkAction {
    /// The states a message must be in for the action to apply.
    pub fn states(&self) -> &'static [State] {
        match self {
            BulkAction::Redrive { .. } => &[State::DeadLetter],
            BulkAction::Cancel {
                only: Some(State::Scheduled),
            } => &[State::Scheduled],
            BulkAction::Cancel {
                only: Some(State::DeadLetter),
            } => &[State::DeadLetter],
            BulkAction::Cancel { .. } => &[State::Scheduled, State::DeadLetter],
            BulkAction::Replay { .. } => &[State::Delivered],
        }
    }

    /// The state a matched message goes to.
    pub fn to_state(&self) -> State {
        match self {
            BulkAction::Cancel { .. } => State::Cancelled,
            _ => State::Scheduled,
        }
    }

    /// When a message goes back to Scheduled, for when.
    pub fn at(&self) -> Option<DateTime<Utc>> {
        match self {
            BulkAction::Redrive { at } | BulkAction::Replay { at } => Some(*at),
            BulkAction::Cancel { .. } => None,
        }
    }
}

/// The time a bulk action's range [from, to) is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOn {
    DeliveryTime,
    DeadLetteredAt,
    DeliveredAt,
}

impl RangeOn {
    pub fn column(self) -> &'static str {
        match self {
            RangeOn::DeliveryTime => "delivery_time",
            RangeOn::DeadLetteredAt => "dead_lettered_at",
            RangeOn::DeliveredAt => "delivered_at",
        }
    }
}

/// A bulk action and the messages of one account it applies to: those in
/// one of the action's states, of `target_id` and among `ids` when given,
/// with `range_on` in [from, to).
#[derive(Debug, Clone)]
pub struct Bulk {
    pub action: BulkAction,
    pub target_id: Option<TargetId>,
    pub ids: Option<Vec<MessageId>>,
    pub range_on: RangeOn,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// What one batch did.
#[derive(Debug, Clone, Default)]
pub struct BulkBatch {
    /// Messages changed.
    pub changed: u64,
    /// Messages that matched when the batch was read (some may have changed
    /// since, and were left alone).
    pub scanned: u32,
    /// Where the next batch starts (after this id).
    pub last: Option<MessageId>,
}
