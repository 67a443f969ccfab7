//! Pull targets (docs/api.md#pull-targets): their consumers receive, ack,
//! nack and hide messages; nothing of theirs is ever claimed by the sweeper.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::{
    domain::{
        ids::{AccountId, MessageId, TargetId},
        receipt::ReceiptHandle,
    },
    store::{
        pull::{Depth, Receipt, ReceiveAsk},
        StoreResult,
    },
};

#[async_trait]
pub trait PullStore: Send + Sync + 'static {
    /// Takes up to `ask.max` receivable messages of the account's pull
    /// target, earliest due first (by `claim_at`, then id), none that
    /// another receive holds (on any instance): each is hidden until `now`
    /// plus the visibility under a new token, counts one more receive and
    /// attempt, and gets an attempt record (`Received`). A message whose
    /// last allowed receive has run out is not taken (`dead_letter_unacked`
    /// ends it). Messages of a key come one at a time: only a key's head is
    /// receivable, and a received head holds its key until acked or dead.
    async fn receive(
        &self,
        account: &AccountId,
        target: &TargetId,
        ask: ReceiveAsk,
        now: DateTime<Utc>,
    ) -> StoreResult<Receipt>;

    /// Makes Delivered (at `now`) each message whose latest receive is the
    /// handle's; answers, for each handle in order, whether it did.
    async fn ack(
        &self,
        account: &AccountId,
        target: &TargetId,
        handles: &[ReceiptHandle],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<bool>>;

    /// Ends the visibility of each message whose latest receive is the
    /// handle's: receivable again at `until` (the handle goes stale); one
    /// that had its last allowed receive is a dead letter now. Answers, for
    /// each handle in order, whether it did.
    async fn nack(
        &self,
        account: &AccountId,
        target: &TargetId,
        handles: &[ReceiptHandle],
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<bool>>;

    /// Hides the message of the handle's receive until `until` (`now`:
    /// visible at once); false when the handle is not its latest receive.
    async fn set_visibility(
        &self,
        account: &AccountId,
        target: &TargetId,
        handle: &ReceiptHandle,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;

    /// For each of these targets that has a message waiting to be received
    /// (due later, hidden, or receivable now), the earliest instant one is
    /// receivable: one statement for them all.
    async fn next_receivable(
        &self,
        targets: &[TargetId],
    ) -> StoreResult<Vec<(TargetId, DateTime<Utc>)>>;

    /// Makes dead letters of up to `limit` messages whose last allowed
    /// receive's visibility ran out by `now` ("not acknowledged after N
    /// receives"); returns them with their targets.
    async fn dead_letter_unacked(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<(MessageId, TargetId)>>;

    /// When the earliest last allowed receive's visibility runs out.
    async fn next_unacked_end(&self) -> StoreResult<Option<DateTime<Utc>>>;

    /// Makes dead letters of the messages of pull targets still Scheduled
    /// their target's `retention` after their delivery time ("not received
    /// within 14d"), up to `limit` a target; returns how many.
    async fn expire_unreceived(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<u64>;

    /// The account's pull target's queue as it is at `now`.
    async fn depth(
        &self,
        account: &AccountId,
        target: &TargetId,
        now: DateTime<Utc>,
    ) -> StoreResult<Depth>;

    /// Messages receivable now and hidden, over every pull target (the
    /// `dispatch_pull_depth` gauge).
    async fn depth_totals(&self, now: DateTime<Utc>) -> StoreResult<(u64, u64)>;
}
