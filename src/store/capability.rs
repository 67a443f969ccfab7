//! The store's capabilities, one trait each, so that a caller names what it
//! uses and a backend implements each in the file that owns it. `Store`
//! combines them: every backend is one (`Arc<dyn Store>`), and any type with
//! every capability is a `Store` (the blanket impl below). A method called on
//! a `dyn Store` needs its capability trait in scope: `use
//! crate::store::prelude::*;` brings them all.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use super::portal_reads::PortalReads;
use super::{
    portal, BatchItem, Bulk, BulkBatch, ClaimShares, Claimed, ClientRecord, ClientSummary, Cutoffs,
    DeleteTarget, GatedClaim, IdempotencyInput, InsertOutcome, Materialised, MessageFilter, Purged,
    Recorded, ResealPage, SaveSchedule, ScheduleCursor, SigningKey, StoreResult, TargetCursor,
    Transition,
};
use super::{
    EventCursor, EventQuery, EventRange, EventView, IdempotencyInput as EventKey, PublishItem,
    Published, Render, ReplayBatch, SubscriptionCursor,
};
use crate::domain::{
    event::{Event, Subscription},
    ids::{AccountId, EventId, MessageId, ScheduleId, SubscriptionId, TargetId},
    message::{Attempt, Message},
    schedule::{RunPlan, Schedule},
    target::{gate::BreakerChange, Target},
};

/// Whether the database answers (the readiness probe).
#[async_trait]
pub trait HealthCheck: Send + Sync + 'static {
    async fn ping(&self) -> StoreResult<()>;
}

/// Who may call: API clients and their accounts, portal users and their
/// sessions.
#[async_trait]
pub trait IdentityStore: Send + Sync + 'static {
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
    async fn list_clients(&self, account: &AccountId) -> StoreResult<Vec<ClientSummary>>;

    /// Revokes a client (again: it keeps its first revocation time); None
    /// when there is no such client.
    async fn revoke_client(
        &self,
        client_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<ClientSummary>>;

    /// The ids of the clients revoked at or after `since`.
    async fn clients_revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>>;

    async fn ensure_account(&self, account: &AccountId) -> StoreResult<()>;

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
}

/// The people of an account: their roles, removal, passwords and
/// invitations. Every change that could leave an account without an admin
/// is refused as a whole (`PeopleChange::LastAdmin`), under a lock on the
/// account so that two admins demoting each other cannot both succeed.
#[async_trait]
pub trait PeopleStore: Send + Sync + 'static {
    /// The account's people, oldest first.
    async fn list_users(&self, account: &AccountId) -> StoreResult<Vec<portal::UserRecord>>;

    async fn set_user_role(
        &self,
        account: &AccountId,
        user_id: &str,
        role: portal::Role,
    ) -> StoreResult<portal::PeopleChange>;

    /// Removes the person and ends their sessions.
    async fn remove_user(
        &self,
        account: &AccountId,
        user_id: &str,
    ) -> StoreResult<portal::PeopleChange>;

    /// A new password hash; every session of the person but `keep` ends.
    /// False when there is no such person.
    async fn set_password(
        &self,
        user_id: &str,
        password_hash: &str,
        keep: &[u8],
    ) -> StoreResult<bool>;

    /// The zone the person's times are shown in (None: the browser's).
    async fn set_time_zone(&self, user_id: &str, zone: Option<&str>) -> StoreResult<()>;

    async fn create_invitation(&self, invitation: &portal::InvitationRecord) -> StoreResult<()>;

    /// The account's invitations that have not expired, oldest first.
    async fn list_invitations(
        &self,
        account: &AccountId,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<portal::InvitationRecord>>;

    /// A live invitation by its token's hash.
    async fn find_invitation(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<portal::InvitationRecord>>;

    /// False when the account has no such invitation.
    async fn revoke_invitation(&self, account: &AccountId, id: &str) -> StoreResult<bool>;

    /// Creates the invited person (the invitation's account, email and role,
    /// with this id and password hash) and deletes the invitation, in one
    /// transaction.
    async fn accept_invitation(
        &self,
        token_hash: &[u8],
        user_id: &str,
        password_hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<portal::Acceptance>;
}

/// Secrets at rest: the token-signing keys, and re-sealing stored secrets
/// under the current key.
#[async_trait]
pub trait SecretStore: Send + Sync + 'static {
    /// The keys tokens are signed with, newest first (keys made at one
    /// instant by kid); none until `ensure_signing_key` made the first.
    async fn signing_keys(&self) -> StoreResult<Vec<SigningKey>>;

    /// Makes the first signing key, created at `now`, when there is none;
    /// whether it made one. Instances starting together on one database
    /// may each make one; every key made stays valid.
    async fn ensure_signing_key(&self, now: DateTime<Utc>) -> StoreResult<bool>;

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
}

/// Where messages go: an account's targets.
#[async_trait]
pub trait TargetStore: Send + Sync + 'static {
    async fn insert_target(&self, target: &Target) -> StoreResult<bool>;

    async fn get_target(&self, account: &AccountId, id: &TargetId) -> StoreResult<Option<Target>>;

    async fn list_targets(
        &self,
        account: &AccountId,
        after: Option<&TargetCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Target>>;

    async fn update_target(&self, target: &Target) -> StoreResult<Option<Target>>;

    async fn set_target_enabled(
        &self,
        account: &AccountId,
        id: &TargetId,
        enabled: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Target>>;

    async fn delete_target(&self, account: &AccountId, id: &TargetId) -> StoreResult<DeleteTarget>;
}

/// Recurring schedules (docs/api.md#recurring-schedules) and the messages of their runs.
#[async_trait]
pub trait ScheduleStore: Send + Sync + 'static {
    /// False when the target is not one of the account's.
    async fn insert_schedule(&self, s: &Schedule) -> StoreResult<bool>;

    /// With `last_run_at` as of `now`.
    async fn get_schedule(
        &self,
        account: &AccountId,
        id: &ScheduleId,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Schedule>>;

    /// Newest first, of one target when given.
    async fn list_schedules(
        &self,
        account: &AccountId,
        target: Option<&TargetId>,
        after: Option<&ScheduleCursor>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Schedule>>;

    /// A person's change (patch, pause, resume), saved only over
    /// `s.revision - 1`: every field a person sets, `paused` and
    /// `updated_at`. With `restart` (the change decides the runs anew) the
    /// cursor becomes `s.next_run_at`, and the runs created ahead of their
    /// time that have not yet fallen due (after `now`) are withdrawn: each is
    /// cancelled as a cancel does and stays listed under the schedule, and
    /// the schedule as saved makes its own message for each of its instants.
    /// Without it the cursor and the runs made stay as they are.
    async fn save_schedule(
        &self,
        s: &Schedule,
        restart: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<SaveSchedule>;

    /// False when unknown in the account. Its runs' messages stay; those
    /// made ahead of their time that have not yet fallen due are cancelled.
    async fn delete_schedule(
        &self,
        account: &AccountId,
        id: &ScheduleId,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;

    /// Creates the messages of the runs due up to `until` of up to `limit`
    /// unpaused schedules whose cursor is at or before it, in one
    /// transaction: `plan` says which runs each gets and where its cursor
    /// goes. A schedule another caller is working on is passed over; a run
    /// that already has its message gets no second one.
    async fn materialise_runs(
        &self,
        until: DateTime<Utc>,
        limit: u32,
        now: DateTime<Utc>,
        plan: &mut (dyn for<'s> FnMut(&'s Schedule) -> RunPlan + Send),
    ) -> StoreResult<Materialised>;
}

/// Scheduling messages (one, a batch, many) and reading them and their
/// attempts.
#[async_trait]
pub trait MessageStore: Send + Sync + 'static {
    async fn insert_message(
        &self,
        new: &Message,
        idempotency: Option<&IdempotencyInput>,
    ) -> StoreResult<InsertOutcome>;

    /// Schedules each item as `insert_message` would, in one transaction (one
    /// commit for all): outcomes in the items' order. Items may belong to
    /// different accounts; no two items carry the same account and key (the
    /// service answers repeats itself: `service::idempotency::insert_once`).
    async fn insert_batch(&self, items: &[BatchItem]) -> StoreResult<Vec<InsertOutcome>>;

    /// Inserts many messages of one account in one statement; returns the ids
    /// inserted (messages whose target is unknown in the account are skipped).
    async fn insert_messages(
        &self,
        account: &AccountId,
        messages: &[Message],
    ) -> StoreResult<Vec<MessageId>>;

    async fn get_message(
        &self,
        account: &AccountId,
        id: &MessageId,
    ) -> StoreResult<Option<Message>>;

    async fn list_messages(
        &self,
        account: &AccountId,
        filter: &MessageFilter,
        before: Option<&MessageId>,
        limit: u32,
    ) -> StoreResult<Vec<Message>>;

    /// None when the message is unknown in this account.
    async fn list_attempts(
        &self,
        account: &AccountId,
        id: &MessageId,
        after: Option<u32>,
        limit: u32,
    ) -> StoreResult<Option<Vec<Attempt>>>;
}

/// The manual actions on messages: each changes a message a caller names
/// and leaves an event in its history (`PortalReads::list_events`).
#[async_trait]
pub trait ActionStore: Send + Sync + 'static {
    async fn cancel(
        &self,
        account: &AccountId,
        id: &MessageId,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        self.cancel_held(account, id, now, None).await
    }

    /// As `cancel`, by the holder of the message's lease `held` (the
    /// sweeper gave up a message it claimed ahead of its time): that lease
    /// does not make it in flight.
    async fn cancel_held(
        &self,
        account: &AccountId,
        id: &MessageId,
        now: DateTime<Utc>,
        held: Option<uuid::Uuid>,
    ) -> StoreResult<Transition>;

    async fn reschedule(
        &self,
        account: &AccountId,
        id: &MessageId,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        self.reschedule_held(account, id, at, now, None).await
    }

    /// As `reschedule`, by the holder of the lease `held` (see `cancel_held`).
    async fn reschedule_held(
        &self,
        account: &AccountId,
        id: &MessageId,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        held: Option<uuid::Uuid>,
    ) -> StoreResult<Transition>;

    /// How many messages a bulk action matches now, counting up to `cap`.
    async fn bulk_count(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        cap: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;

    /// Applies a bulk action, in one transaction, to up to `limit` of the
    /// messages it matches whose id follows `after` (in id order), each
    /// only if it is still as it was read, and records each in the
    /// message's history. Messages with an orderingKey take their new
    /// place in their key's order.
    async fn bulk_batch(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        after: Option<&MessageId>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<BulkBatch>;
}

/// The sweeper's side: claiming due messages, recording what their attempts
/// did, and retention.
#[async_trait]
pub trait DeliveryStore: Send + Sync + 'static {
    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> StoreResult<Vec<Claimed>>;

    /// As `claim_due`, fairly across targets: round robin over the targets
    /// among the oldest due messages (`CLAIM_WINDOW` claims' worth), the
    /// oldest due after those and the newest (one claim's worth each: a
    /// backlog due at one instant does not make what falls due after it
    /// wait for all of it, and what falls due after it goes in order), each
    /// taking at most its share (`ClaimShares`); a full target's messages
    /// are left for later.
    async fn claim_due_shared(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: &ClaimShares,
    ) -> StoreResult<Vec<Claimed>>;

    /// Claims messages that fall due after `now` and no later than `until`,
    /// for the sweeper to hold and attempt at their instant: oldest due
    /// first, round robin over the targets among the oldest `CLAIM_WINDOW`
    /// claims' worth, none of a target in `full`; never a gated message or
    /// one with an orderingKey (a message of its key scheduled later for an
    /// earlier time must still go first). Each is leased from its due time for `lease` (a cancel
    /// meets the lease, as it would an attempt under way) and carries its
    /// due time in `due_at`.
    async fn claim_ahead(
        &self,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        full: &[TargetId],
    ) -> StoreResult<Vec<Claimed>>;

    /// The earliest `claim_at` among claimable messages.
    async fn next_due(&self) -> StoreResult<Option<DateTime<Utc>>>;

    /// The earliest `claim_at` among claimable messages of the targets not in `full`.
    async fn next_due_except(&self, full: &[TargetId]) -> StoreResult<Option<DateTime<Utc>>>;

    /// Applies attempt results whose lease still holds; returns the attempt rows written.
    async fn record(&self, results: &[Recorded], now: DateTime<Utc>) -> StoreResult<u64>;

    /// Gives claimed messages back unattempted, where the claim's lease
    /// (`token`) still holds them: claimable again at once by any instance,
    /// as due as before the claim. Returns how many were given back.
    async fn release(&self, leases: &[(MessageId, uuid::Uuid)]) -> StoreResult<u64>;

    async fn purge_expired(&self, cutoffs: &Cutoffs, batch: u32) -> StoreResult<Purged>;
}

/// Gated targets (docs/api.md#flow-control-and-fairness: `flowControl`, `circuitBreaker`): their
/// messages are claimed apart from the others, one target at a time under a
/// lock on its row, as many as its gate admits; the breaker learns from the
/// attempts' outcomes.
#[async_trait]
pub trait GateStore: Send + Sync + 'static {
    /// Claims due messages of gated targets, oldest first within a target:
    /// per target what its gate admits (counting the attempts in flight on
    /// every instance) and `shares` allows, at most `limit` in all; records
    /// the starts in the gate.
    async fn claim_gated(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: &ClaimShares,
    ) -> StoreResult<GatedClaim>;

    /// Applies ended attempts to their targets' breakers, in order:
    /// `Some(true)` a success, `Some(false)` a retryable failure, `None` a
    /// final answer from the receiver.
    async fn record_health(
        &self,
        ended: &[(TargetId, Option<bool>)],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<(TargetId, BreakerChange)>>;

    /// Closes a target's breaker by hand; None when the target is unknown
    /// in the account.
    async fn reset_health(
        &self,
        account: &AccountId,
        id: &TargetId,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(Target, Option<BreakerChange>)>>;
}

/// Every capability: what a backend is, and what the service holds
/// (`Arc<dyn Store>`).
/// Subscriptions (docs/api.md#events-and-subscriptions): which targets get
/// the events of which types.
#[async_trait]
pub trait SubscriptionStore: Send + Sync + 'static {
    /// False when its target is not one of the account's.
    async fn insert_subscription(&self, s: &Subscription) -> StoreResult<bool>;

    async fn get_subscription(
        &self,
        account: &AccountId,
        id: &SubscriptionId,
    ) -> StoreResult<Option<Subscription>>;

    /// Newest first; of one target when `target` is given.
    async fn list_subscriptions(
        &self,
        account: &AccountId,
        target: Option<&TargetId>,
        after: Option<&SubscriptionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Subscription>>;

    /// Saves its name, types, `enabled` and `updatedAt`; false when it is
    /// gone.
    async fn update_subscription(&self, s: &Subscription) -> StoreResult<bool>;

    /// False when there was none.
    async fn delete_subscription(
        &self,
        account: &AccountId,
        id: &SubscriptionId,
    ) -> StoreResult<bool>;
}

/// Events (docs/api.md#events-and-subscriptions): publishing fans out to the
/// targets whose enabled subscriptions match, in one transaction; the
/// archive keeps events for replay.
#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Stores each event and makes one message per target with an enabled
    /// subscription that matches its type (each target once), all in one
    /// transaction (a group commit): one answer per item, in order. With a
    /// key, the answer `render` makes of the event is kept with it; a key
    /// already held, or held by an earlier item of the same call, answers as
    /// that request did (or as a conflict, for another request).
    async fn publish_events(
        &self,
        items: &[PublishItem],
        render: &Render,
    ) -> StoreResult<Vec<Published>>;

    /// `publish_events` for one event.
    async fn publish_event(
        &self,
        event: &Event,
        key: Option<&EventKey>,
        render: &Render,
    ) -> StoreResult<Published> {
        let item = PublishItem {
            event: event.clone(),
            key: key.cloned(),
        };
        let mut answers = self.publish_events(&[item], render).await?;
        Ok(answers.pop().expect("one answer per item"))
    }

    async fn get_event(&self, account: &AccountId, id: &EventId) -> StoreResult<Option<EventView>>;

    /// Newest first.
    async fn list_published_events(
        &self,
        account: &AccountId,
        query: &EventQuery,
        after: Option<&EventCursor>,
        limit: u32,
    ) -> StoreResult<Vec<EventView>>;

    /// How many of the account's events lie in `range`, counting up to
    /// `limit`.
    async fn count_events(
        &self,
        account: &AccountId,
        range: &EventRange,
        limit: u64,
    ) -> StoreResult<u64>;

    /// Makes the next `limit` events of `range` (oldest first, after
    /// `after`) into one new message each to `target`, due at `at`, in one
    /// transaction; each is listed among its event's messages.
    #[allow(clippy::too_many_arguments)]
    async fn replay_batch(
        &self,
        account: &AccountId,
        target: &TargetId,
        range: &EventRange,
        after: Option<&EventCursor>,
        limit: u32,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<ReplayBatch>;

    /// Forgets events created before `before` (their messages stay).
    async fn purge_events(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64>;
}

pub trait Store:
    HealthCheck
    + IdentityStore
    + PeopleStore
    + SecretStore
    + TargetStore
    + ScheduleStore
    + MessageStore
    + ActionStore
    + DeliveryStore
    + GateStore
    + PortalReads
    + SubscriptionStore
    + EventStore
{
}

impl<T> Store for T where
    T: HealthCheck
        + IdentityStore
        + PeopleStore
        + SecretStore
        + TargetStore
        + ScheduleStore
        + MessageStore
        + ActionStore
        + DeliveryStore
        + GateStore
        + PortalReads
        + SubscriptionStore
        + EventStore
{
}
