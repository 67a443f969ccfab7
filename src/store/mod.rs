//! Persistence behind capability traits (`capability`: one per kind of
//! caller, combined as `Store`), so the sweeper, the API and retention never
//! see SQL. Rules that are not SQL live in `rules`, once for every backend.
//! Contract, for every implementation:
//!
//! - Each method is one transaction; none is held across a network call.
//! - `claim_due` hands out Scheduled, unpaused messages whose `claim_at` has
//!   passed, oldest due first, and leases them: until the lease ends no other
//!   caller gets them. A claim whose lease expired is claimable again.
//! - `record` applies an attempt's result only while the claim's lease token
//!   still matches; a stale result (the lease expired and someone else took
//!   the message, or it was cancelled/rescheduled) is dropped whole.
//! - `cancel`/`reschedule` refuse (Conflict) while an attempt holds a live lease.
//! - Another account's rows are invisible: they answer `None`/NotFound.
//! - Given a sealer (`with_sealer`), target secrets and signing keys are
//!   written encrypted and read back plain; a secret no configured key opens
//!   is an error naming its row, and a claim leaves its messages leased
//!   rather than dead-lettered (see `sealed`).

mod bulk;
mod capability;
mod events;
mod gates;
pub(crate) mod ordering;
pub mod portal;
mod portal_reads;
pub mod postgres;
pub mod prelude;
pub mod pull;
mod rules;
mod schedules;
mod sealed;
mod sql;
pub mod sqlite;

pub use bulk::*;
pub use capability::*;
pub use events::*;
pub(crate) use gates::{
    closed_from, health_from_row, learn, outcomes_by_target, plan, reopening, starts_to_text,
    GateRow, RESET_HEALTH,
};
pub use rules::insert_new_target;
pub(crate) use rules::{
    error_chain, key_live_since, last_error, outcome_from_str, refused_transition, replayed,
    report_left_leased, state_after, state_from_str, storable_text,
};
pub(crate) use schedules::{recurrence_from_row, zone_from_row};
pub use schedules::{Materialised, SaveSchedule, ScheduleCursor};
pub use sealed::{reseal_all, ResealPage, Resealed};

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{
    ids::{AccountId, EventId, MessageId, ScheduleId, TargetId},
    message::{Attempt, Message, OrderingKey, State},
    retry::Next,
    scope::Scope,
    target::{gate::BreakerChange, Target, TargetConfig},
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached: the service is not ready.
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    #[error("database error")]
    Database(#[source] sqlx::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The embedded store's file is in use by another process, or unusable.
    #[error("{0}")]
    Locked(String),
    /// The store cannot be opened as configured; the text says what to do.
    #[error("{0}")]
    Setup(String),
    #[error("migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// The service is stopping and takes no more writes.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// One failure answered to every request of a group commit.
    #[error(transparent)]
    Shared(std::sync::Arc<StoreError>),
    /// The write would take the account past one of its limits; nothing
    /// was written.
    #[error(transparent)]
    Quota(crate::domain::limits::OverLimit),
    /// A stored secret does not open with the configured keys. `row` names
    /// the row (`target DI-T-…`, `signing key …`), never a secret.
    #[error("the secrets of {row} cannot be read")]
    Sealing {
        row: String,
        #[source]
        source: crate::sealing::SealError,
    },
    /// Re-sealing needs `secrets.encryption_key`.
    #[error("no encryption key is configured (secrets.encryption_key)")]
    NoEncryptionKey,
    /// A value the database cannot hold (PostgreSQL's text refuses U+0000):
    /// the input is at fault, and nothing was written.
    #[error("a value holds a character the database cannot store")]
    InvalidText(#[source] sqlx::Error),
}

impl StoreError {
    /// The database cannot be reached (directly or for a group of requests).
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable(_) | StoreError::ShuttingDown => true,
            StoreError::Shared(e) => e.is_unavailable(),
            _ => false,
        }
    }

    /// A value the input carried that the database cannot hold.
    pub fn is_invalid_text(&self) -> bool {
        match self {
            StoreError::InvalidText(_) => true,
            StoreError::Shared(e) => e.is_invalid_text(),
            _ => false,
        }
    }

    /// A secret sealed under a key this instance is not configured with:
    /// the row may be fine, and readable by an instance that has the key.
    pub fn is_unknown_key(&self) -> bool {
        match self {
            StoreError::Sealing { source, .. } => source.is_unknown_key(),
            StoreError::Shared(e) => e.is_unknown_key(),
            _ => false,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, Clone)]
pub struct ClientRecord {
    pub client_id: String,
    pub account: AccountId,
    pub name: String,
    pub secret_hash: String,
    pub scopes: Vec<Scope>,
}

/// A client as `clients list` shows it: no secret hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSummary {
    pub client_id: String,
    pub account: AccountId,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone)]
pub struct SigningKey {
    pub kid: String,
    pub secret: Vec<u8>,
}

/// A message to insert.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub message: Message,
}

/// An `Idempotency-Key` with the hash of the request it came with and the
/// response to store for replays.
#[derive(Debug, Clone)]
pub struct IdempotencyInput {
    pub key: String,
    pub request_hash: Vec<u8>,
    pub status: u16,
    pub response: ResponseJson,
    /// Keys older than this are forgotten.
    pub ttl: Duration,
}

/// One message of a batch, with its own idempotency key.
#[derive(Debug, Clone)]
pub struct BatchItem {
    pub message: Message,
    pub idempotency: Option<IdempotencyInput>,
}

/// A response body as JSON text, written once: a batch answers a thousand
/// of them, and building each as a JSON tree cost more than the insert.
pub type ResponseJson = Box<serde_json::value::RawValue>;

#[derive(Debug)]
pub enum InsertOutcome {
    Created(Box<Message>),
    /// The key was seen with the same request: the first response again.
    Replayed {
        status: u16,
        response: ResponseJson,
    },
    /// The key was seen with another request.
    KeyConflict,
    /// The target does not exist in this account.
    UnknownTarget,
}

#[derive(Debug)]
pub enum Transition {
    Done(Box<Message>),
    NotFound,
    /// The message is in a state the action does not apply to.
    WrongState(State),
    /// An attempt is under way and holds the lease.
    InFlight,
}

#[derive(Debug)]
pub enum DeleteTarget {
    Deleted,
    NotFound,
    /// It still has Scheduled or DeadLetter messages.
    HasPending,
}

/// Where a page of targets or schedules (newest first) continues: after
/// this creation time and id. It needs no lookup, so a deleted row does not
/// end the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor<Id> {
    pub created_at: DateTime<Utc>,
    pub id: Id,
}

pub type TargetCursor = PageCursor<TargetId>;

impl TargetCursor {
    pub fn after(t: &Target) -> Self {
        Self {
            created_at: t.created_at,
            id: t.id.clone(),
        }
    }
}

impl<Id: std::fmt::Display + std::str::FromStr> PageCursor<Id> {
    /// `<created-at ms>.<id>` on the wire (then base64url).
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at.timestamp_millis(), self.id)
    }

    pub fn decode(s: &str) -> Option<Self> {
        let (ms, id) = s.split_once('.')?;
        let created_at = DateTime::<Utc>::from_timestamp_millis(ms.parse().ok()?)?;
        Some(Self {
            created_at,
            id: id.parse().ok()?,
        })
    }
}

#[derive(Debug, Clone, Default)]
pub struct MessageFilter {
    pub target_id: Option<TargetId>,
    pub state: Option<State>,
    /// Delivery time at or after.
    pub delivery_from: Option<DateTime<Utc>>,
    /// Delivery time before.
    pub delivery_to: Option<DateTime<Utc>>,
    /// Messages with this orderingKey. Text as a caller filters by it, not
    /// an `OrderingKey`: text that could be no message's key (empty, too
    /// long) is no error, it matches nothing.
    pub ordering_key: Option<String>,
    pub schedule_id: Option<ScheduleId>,
    pub event_id: Option<EventId>,
    pub event_type: Option<String>,
}

/// A message handed to the sweeper with its target's configuration.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: MessageId,
    /// Its account: fairness between accounts, and the changes that fence
    /// off an account's messages from claims ahead, go by it.
    pub account: AccountId,
    pub target_id: TargetId,
    /// Shared by the messages of one claim that go to the same target.
    pub target: Arc<TargetConfig>,
    pub payload: String,
    pub delivery_time: DateTime<Utc>,
    /// When it was last scheduled or rescheduled. While a message waits for
    /// the first attempt of its ladder (`ladder_attempts == 0`) nothing else
    /// changes its row, so this is its `updatedAt`.
    pub scheduled_at: DateTime<Utc>,
    pub attempt_count: u32,
    pub ladder_attempts: u32,
    pub lease_token: Uuid,
    /// Its target is gated: each attempt goes through a claim (no immediate
    /// retry under the same lease), and its outcome feeds the breaker.
    pub gated: bool,
    /// Its orderingKey: while it is claimed, no other message of the key is.
    pub ordering_key: Option<OrderingKey>,
    /// The event that made it, and its type (docs/api.md#events-and-subscriptions).
    pub event_id: Option<EventId>,
    pub event_type: Option<String>,
    /// When it falls due, for a message claimed ahead of its time
    /// (`claim_ahead`): its lease runs from then, and it is attempted then.
    pub due_at: Option<DateTime<Utc>>,
}

/// What a fair claim may take from each target and each account
/// (`claim_due_shared`): none from a target or an account whose room is 0,
/// at most its room from one listed, at most `per_target` from any other
/// target and `per_account` from any other account. A claim hands out its
/// rows round robin over the accounts first, then over each account's
/// targets.
#[derive(Debug, Clone)]
pub struct ClaimShares {
    pub per_target: u32,
    /// Targets with attempts in flight on this instance, and how many more
    /// each may take now.
    pub room: Vec<(TargetId, u32)>,
    pub per_account: u32,
    /// Accounts with attempts in flight on this instance, and how many more
    /// each may take now.
    pub accounts: Vec<(AccountId, u32)>,
}

impl ClaimShares {
    /// Every target its share and no account bounded: what a claim may take
    /// with nothing in flight.
    pub fn open(per_target: u32) -> Self {
        Self {
            per_target,
            room: Vec::new(),
            per_account: u32::MAX,
            accounts: Vec::new(),
        }
    }

    /// The targets that may take no more.
    pub fn full(&self) -> impl Iterator<Item = &TargetId> {
        self.room.iter().filter(|(_, n)| *n == 0).map(|(t, _)| t)
    }

    /// The accounts that may take no more.
    pub fn full_accounts(&self) -> impl Iterator<Item = &AccountId> {
        self.accounts
            .iter()
            .filter(|(_, n)| *n == 0)
            .map(|(a, _)| a)
    }
}

/// What a claim from gated targets took, and when to look again.
#[derive(Debug, Default)]
pub struct GatedClaim {
    pub claimed: Vec<Claimed>,
    /// Breakers whose probe starts now (open to halfOpen).
    pub changes: Vec<(TargetId, BreakerChange)>,
    /// The earliest time at which a gated target may admit more or a gated
    /// message falls due, when time alone decides it.
    pub next: Option<DateTime<Utc>>,
    /// A gated target with due messages waits for an attempt in flight to
    /// end (its parallelism, or its probe), possibly on another instance.
    pub waits_for_attempts: bool,
}

/// A fair claim ranks the oldest `limit × CLAIM_WINDOW` due messages, the
/// oldest `limit` due after them, and the newest `limit`, round robin across
/// their targets.
pub const CLAIM_WINDOW: u32 = 4;

/// The attempts made under one claim (one, or several when immediate
/// retries ran at once) and what the ladder decided after the last.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub id: MessageId,
    pub lease_token: Uuid,
    /// In order; never empty.
    pub attempts: Vec<Attempt>,
    pub ladder_attempts: u32,
    pub next: Next,
    /// The message's target and orderingKey, when it has one: recording
    /// its result may hand the key to the next message.
    pub key: Option<(TargetId, OrderingKey)>,
    /// The message was made from one of Dispatch's own events: its result
    /// tells nothing (docs/api.md#dispatchs-own-events).
    pub told: bool,
}

impl Recorded {
    pub fn last(&self) -> &Attempt {
        self.attempts
            .last()
            .expect("a claim records at least one attempt")
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Cutoffs {
    pub delivered_before: DateTime<Utc>,
    pub cancelled_before: DateTime<Utc>,
    pub dead_letters_before: DateTime<Utc>,
    pub failed_attempts_before: DateTime<Utc>,
    pub idempotency_before: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub messages: u64,
    pub attempts: u64,
    pub idempotency_keys: u64,
    /// Events past `retention.events` (their messages are not touched).
    pub events: u64,
}
