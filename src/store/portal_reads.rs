//! The capability the portal reads with beyond messages (`PortalReads`),
//! apart from the others in `capability` for its size.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{portal, MessageFilter, StoreResult};
use crate::domain::{
    ids::{AccountId, MessageId, TargetId},
    message::OrderingKey,
};

/// What the portal shows beyond messages: the overview, counts and a
/// message's history.
#[async_trait]
pub trait PortalReads: Send + Sync + 'static {
    /// Counts by target and state; what was delivered, failed and dead-lettered since `since`.
    async fn overview(
        &self,
        account: &AccountId,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<portal::Overview>;

    async fn count_messages(&self, account: &AccountId, filter: &MessageFilter)
        -> StoreResult<u64>;

    /// As `count_messages`, but counting no further than `cap`: the work is
    /// bounded however many match.
    async fn count_messages_upto(
        &self,
        account: &AccountId,
        filter: &MessageFilter,
        cap: u64,
    ) -> StoreResult<u64>;

    /// Messages whose payload holds `text` (exactly, case and all), newest
    /// first, found among at most `scan` messages the filter selects below
    /// `before`: the work is bounded however large the account is.
    /// `scanned_to` is the last message scanned when older ones remain.
    async fn search_payloads(
        &self,
        account: &AccountId,
        filter: &MessageFilter,
        before: Option<&MessageId>,
        text: &str,
        scan: u32,
        limit: u32,
    ) -> StoreResult<portal::Searched>;

    /// The head of a (target, orderingKey): the one Scheduled message of the
    /// key that may be attempted (or is in flight), which the key's other
    /// Scheduled messages wait for. None when the key has none Scheduled.
    async fn key_head(
        &self,
        account: &AccountId,
        target: &TargetId,
        key: &OrderingKey,
    ) -> StoreResult<Option<MessageId>>;

    /// What happened in the account per hour since `since` (rounded down to
    /// the hour), and per target: the overview's charts.
    async fn activity(
        &self,
        account: &AccountId,
        since: DateTime<Utc>,
    ) -> StoreResult<portal::Activity>;

    /// The manual actions on a message, oldest first (empty for an unknown message).
    async fn list_events(
        &self,
        account: &AccountId,
        id: &MessageId,
    ) -> StoreResult<Vec<portal::MessageEvent>>;
}
