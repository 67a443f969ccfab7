//! The sweeper's side: claiming, recording, retention, and the gated
//! targets claimed apart.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{
    ids::{AccountId, MessageId, TargetId},
    target::{gate::BreakerChange, Target},
};
use crate::store::{ClaimShares, Claimed, Cutoffs, GatedClaim, Purged, Recorded, StoreResult};

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
    /// taking at most its share (`ClaimShares`), handed out round robin over
    /// the accounts first, each account taking at most its share; a full
    /// target's or account's messages are left for later.
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
    /// claims' worth, none of a target in `full` nor of an account in
    /// `fenced` (`sweeper::ahead::Fence`); never a gated message or
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
        fenced: &[AccountId],
    ) -> StoreResult<Vec<Claimed>>;

    /// The earliest `claim_at` among claimable messages.
    async fn next_due(&self) -> StoreResult<Option<DateTime<Utc>>>;

    /// The earliest `claim_at` among claimable messages of the targets not
    /// in `full` and the accounts not in `full_accounts`.
    async fn next_due_except(
        &self,
        full: &[TargetId],
        full_accounts: &[AccountId],
    ) -> StoreResult<Option<DateTime<Utc>>>;

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
