//! Targets, schedules, messages and the actions people take on them.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{
    ids::{AccountId, MessageId, ScheduleId, TargetId},
    message::{Attempt, Message},
    schedule::{RunPlan, Schedule},
    target::Target,
};
use crate::store::{
    BatchItem, Bulk, BulkBatch, DeleteTarget, IdempotencyInput, InsertOutcome, Materialised,
    MessageFilter, SaveSchedule, ScheduleCursor, StoreResult, TargetCursor, Transition,
};

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

    /// Finishes bringing messages in line with their target's `enabled`
    /// where an instance that flipped it stopped before its batches ended
    /// (PostgreSQL; SQLite does it in the flip's transaction). Answers how
    /// many targets it finished.
    async fn align_targets(&self, now: DateTime<Utc>) -> StoreResult<u64>;

    async fn delete_target(&self, account: &AccountId, id: &TargetId) -> StoreResult<DeleteTarget>;
}

/// What an account holds, counted for its limits beyond the rows of one
/// table (docs/api.md#account-limits).
#[async_trait]
pub trait CountStore: Send + Sync + 'static {
    /// How many messages of the account are in state Scheduled, as every
    /// statement committed so far left them (triggers count them).
    async fn scheduled_messages(&self, account: &AccountId) -> StoreResult<u64>;

    /// How many targets an event of type `ty` would reach now: the messages
    /// its publication would make.
    async fn reaching(&self, account: &AccountId, ty: &str) -> StoreResult<u64>;

    /// Folds the counts' rows into one per account (PostgreSQL appends one
    /// per statement); answers how many rows it folded.
    async fn fold_counts(&self) -> StoreResult<u64>;

    /// For each of `keys` (hashed client ids and addresses), how many failed
    /// token requests were counted after `since_ms` (epoch milliseconds),
    /// and the time of the oldest of them.
    async fn token_failures(
        &self,
        keys: &[String],
        since_ms: i64,
    ) -> StoreResult<Vec<(u64, Option<i64>)>>;

    /// Counts one failed token request under each of `keys`.
    async fn add_token_failure(&self, keys: &[String], at_ms: i64) -> StoreResult<()>;

    /// Forgets the failed token requests counted before `before_ms`.
    async fn purge_token_failures(&self, before_ms: i64) -> StoreResult<u64>;

    /// Notes this instance as serving (at the database's time where there
    /// is one), with how far past a note its leases may run (`reach`: its
    /// lease and how far ahead it claims), forgets the instances not seen
    /// for `stale`, and gives back the leases that no instance still
    /// serving took on messages leased until after `now` and at most the
    /// widest reach noted by any instance: what a killed instance held but
    /// had not attempted is claimable again at once. It looks for
    /// them only when an instance was forgotten, and at this instance's
    /// `first` note (a predecessor killed before it was ever noted).
    /// Says whether this instance had been forgotten itself.
    async fn instance_seen(
        &self,
        now: DateTime<Utc>,
        stale: std::time::Duration,
        reach: std::time::Duration,
        first: bool,
    ) -> StoreResult<InstancesSeen>;
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

/// What an instance's note of itself found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstancesSeen {
    /// Instances serving, this one among them.
    pub serving: u32,
    /// Messages whose leases were given back.
    pub given_back: u64,
    /// This instance had been taken for dead: another forgot it (and gave
    /// back its leases) while it did not note itself. Never at its first
    /// note.
    pub was_forgotten: bool,
    /// When the instance noted longest ago (another than this one) will be
    /// forgotten if it does not note itself before: the next note looks
    /// then, not a whole beat later.
    pub next_stale_in: Option<std::time::Duration>,
}
