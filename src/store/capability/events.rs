//! Subscriptions and events.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{
    event::{Event, Subscription},
    ids::{AccountId, EventId, SubscriptionId, TargetId},
};
use crate::store::{
    EventCursor, EventQuery, EventRange, EventView, IdempotencyInput as EventKey, PublishItem,
    Published, Render, ReplayBatch, StoreResult, SubscriptionCursor,
};

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
