//! Persistence behind one trait, so the sweeper, the API and retention never
//! see SQL. Contract, for every implementation:
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

pub mod portal;
pub mod postgres;
mod sealed;
pub mod sqlite;

pub use sealed::{reseal_all, ResealPage, Resealed};

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{
    ids::{MessageId, TargetId},
    message::{Attempt, Message, State},
    retry::{AttemptOutcome, Next},
    target::{Target, TargetConfig},
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
    #[error("migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// The service is stopping and takes no more writes.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// One failure answered to every request of a group commit.
    #[error(transparent)]
    Shared(std::sync::Arc<StoreError>),
    /// A stored secret does not open with the configured keys. `row` names
    /// the row (`target DI-T-…`, `signing key …`), never a secret.
    #[error("the secrets of {row} cannot be read")]
    Sealing {
        row: String,
        #[source]
        source: crate::auth::sealing::SealError,
    },
    /// Re-sealing needs `secrets.encryption_key`.
    #[error("no encryption key is configured (secrets.encryption_key)")]
    NoEncryptionKey,
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
    pub account: String,
    pub name: String,
    pub secret_hash: String,
    pub scopes: Vec<String>,
}

/// A client as `clients list` shows it: no secret hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSummary {
    pub client_id: String,
    pub account: String,
    pub name: String,
    pub scopes: Vec<String>,
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
    pub response: Value,
    /// Keys older than this are forgotten.
    pub ttl: Duration,
}

/// One message of a batch, with its own idempotency key.
#[derive(Debug, Clone)]
pub struct BatchItem {
    pub message: Message,
    pub idempotency: Option<IdempotencyInput>,
}

#[derive(Debug)]
pub enum InsertOutcome {
    Created(Box<Message>),
    /// The key was seen with the same request: the first response again.
    Replayed {
        status: u16,
        response: Value,
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

/// Where a page of targets (newest first) continues: after this creation
/// time and id. It needs no lookup, so a deleted target does not end the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetCursor {
    pub created_at: DateTime<Utc>,
    pub id: TargetId,
}

impl TargetCursor {
    pub fn after(t: &Target) -> Self {
        Self {
            created_at: t.created_at,
            id: t.id.clone(),
        }
    }

    /// `<created-at ms>.<target id>` on the wire (then base64url).
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
}

/// A message handed to the sweeper with its target's configuration.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: MessageId,
    pub target_id: TargetId,
    pub target: TargetConfig,
    pub payload: String,
    pub delivery_time: DateTime<Utc>,
    pub attempt_count: u32,
    pub ladder_attempts: u32,
    pub lease_token: Uuid,
}

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
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn ping(&self) -> StoreResult<()>;

    async fn create_client(&self, client: &ClientRecord) -> StoreResult<()>;
    /// A client that has not been revoked.
    async fn find_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>>;
    async fn count_clients(&self) -> StoreResult<u64>;
    /// Stores `new` as the client's secret hash if it is still `old` and the
    /// client is not revoked; false otherwise.
    async fn replace_client_secret_hash(
        &self,
        client_id: &str,
        old: &str,
        new: &str,
    ) -> StoreResult<bool>;
    /// The clients of `account`, revoked ones too, oldest first.
    async fn list_clients(&self, account: &str) -> StoreResult<Vec<ClientSummary>>;
    /// Revokes a client (again: it keeps its first revocation time); None
    /// when there is no such client.
    async fn revoke_client(
        &self,
        client_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<ClientSummary>>;
    /// The ids of the clients revoked at or after `since`.
    async fn clients_revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>>;
    async fn ensure_account(&self, account: &str) -> StoreResult<()>;
    /// The keys tokens are signed with, newest first; one is created when there is none.
    async fn signing_keys(&self) -> StoreResult<Vec<SigningKey>>;

    /// Rotation (`dispatch secrets rotate`): seals again, under the current
    /// key, the secrets of up to `limit` targets whose id follows `after`
    /// and that are stored plain or under another key, in one short
    /// transaction, each row only if it is unchanged since it was read. A row
    /// sealed under a key this store does not have fails the call, naming
    /// the row. Without a key: `NoEncryptionKey`.
    async fn reseal_targets(&self, after: Option<&str>, limit: u32) -> StoreResult<ResealPage>;
    /// As `reseal_targets`, for the token-signing keys (by kid).
    async fn reseal_signing_keys(&self, after: Option<&str>, limit: u32)
        -> StoreResult<ResealPage>;

    async fn insert_target(&self, target: &Target) -> StoreResult<bool>;
    async fn get_target(&self, account: &str, id: &TargetId) -> StoreResult<Option<Target>>;
    async fn list_targets(
        &self,
        account: &str,
        after: Option<&TargetCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Target>>;
    async fn update_target(&self, target: &Target) -> StoreResult<Option<Target>>;
    async fn set_target_enabled(
        &self,
        account: &str,
        id: &TargetId,
        enabled: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Target>>;
    async fn delete_target(&self, account: &str, id: &TargetId) -> StoreResult<DeleteTarget>;

    async fn insert_message(
        &self,
        new: &Message,
        idempotency: Option<&IdempotencyInput>,
    ) -> StoreResult<InsertOutcome>;
    /// Schedules each item as `insert_message` would, in one transaction (one
    /// commit for all): outcomes in the items' order. Items may belong to
    /// different accounts; two items with the same account and key: the
    /// second is answered as a replay of (or a conflict with) the first.
    async fn insert_batch(&self, items: &[BatchItem]) -> StoreResult<Vec<InsertOutcome>>;
    /// Inserts many messages of one account in one statement; returns the ids
    /// inserted (messages whose target is unknown in the account are skipped).
    async fn insert_messages(
        &self,
        account: &str,
        messages: &[Message],
    ) -> StoreResult<Vec<MessageId>>;
    async fn get_message(&self, account: &str, id: &MessageId) -> StoreResult<Option<Message>>;
    async fn list_messages(
        &self,
        account: &str,
        filter: &MessageFilter,
        before: Option<&MessageId>,
        limit: u32,
    ) -> StoreResult<Vec<Message>>;
    /// None when the message is unknown in this account.
    async fn list_attempts(
        &self,
        account: &str,
        id: &MessageId,
        after: Option<u32>,
        limit: u32,
    ) -> StoreResult<Option<Vec<Attempt>>>;
    async fn cancel(
        &self,
        account: &str,
        id: &MessageId,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition>;
    async fn reschedule(
        &self,
        account: &str,
        id: &MessageId,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition>;

    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> StoreResult<Vec<Claimed>>;
    /// The earliest `claim_at` among claimable messages.
    async fn next_due(&self) -> StoreResult<Option<DateTime<Utc>>>;
    /// Applies attempt results whose lease still holds; returns the attempt rows written.
    async fn record(&self, results: &[Recorded], now: DateTime<Utc>) -> StoreResult<u64>;

    async fn purge_expired(&self, cutoffs: &Cutoffs, batch: u32) -> StoreResult<Purged>;

    // The portal.
    /// False when the email is taken.
    async fn create_user(&self, user: &portal::UserRecord) -> StoreResult<bool>;
    async fn find_user(&self, email: &str) -> StoreResult<Option<portal::UserRecord>>;
    /// Also forgets sessions that have expired.
    async fn create_session(&self, session: &portal::SessionRecord) -> StoreResult<()>;
    /// A session that has not expired.
    async fn find_session(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<portal::SessionRecord>>;
    async fn delete_session(&self, token_hash: &[u8]) -> StoreResult<()>;
    /// Counts by target and state; what was delivered, failed and dead-lettered since `since`.
    async fn overview(
        &self,
        account: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<portal::Overview>;
    async fn count_messages(&self, account: &str, filter: &MessageFilter) -> StoreResult<u64>;
    /// The manual actions on a message, oldest first (empty for an unknown message).
    async fn list_events(
        &self,
        account: &str,
        id: &MessageId,
    ) -> StoreResult<Vec<portal::MessageEvent>>;
    /// Reschedules, in one transaction, the dead letters that match the filter
    /// (and are among `ids`, when given); returns how many.
    async fn redrive(
        &self,
        account: &str,
        filter: &MessageFilter,
        ids: Option<&[MessageId]>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;
}

/// Stores a new target of `account` under a fresh id (a few tries, should
/// ids ever collide); None when every try collided.
pub async fn insert_new_target(
    store: &dyn Store,
    account: &str,
    spec: &crate::domain::target::TargetSpec,
    now: DateTime<Utc>,
) -> StoreResult<Option<Target>> {
    for _ in 0..5 {
        let t = Target {
            id: TargetId::new(),
            account: account.to_string(),
            name: spec.name.clone(),
            enabled: spec.enabled,
            config: spec.config.clone(),
            created_at: now,
            updated_at: now,
        };
        if store.insert_target(&t).await? {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

/// An error and its sources, as one line (for a dead letter's reason).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Attempt texts (errors, response excerpts) are kept with U+0000 replaced
/// by U+FFFD on every backend: PostgreSQL text cannot hold it.
pub(crate) fn storable_text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') {
        std::borrow::Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Conversions shared by the backends.
pub(crate) fn outcome_from_str(s: &str) -> StoreResult<AttemptOutcome> {
    AttemptOutcome::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown outcome {s}")))
}

pub(crate) fn state_from_str(s: &str) -> StoreResult<State> {
    State::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown state {s}")))
}
