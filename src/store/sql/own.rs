//! What a shared body still asks of its backend's own code: the ordering
//! keys (their locks and heads) and the bulk actions (the sealer and the
//! wake-up of other instances are `Keeps`, which it extends), each written per backend. A backend implements `Own` by
//! calling that code as it is; a part moves here once it is written once.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{Keeps, Tx};
use crate::{
    domain::ids::{AccountId, MessageId},
    store::{ordering::Key, Bulk, BulkBatch, StoreResult},
};

/// A backend's own parts, called inside a transaction the shared body
/// began on the backend's database (`Backend::db`).
#[async_trait]
pub(crate) trait Own: Keeps {
    /// Locks ordering keys for the rest of the transaction, before any row
    /// of theirs is touched. PostgreSQL takes an advisory lock per key;
    /// SQLite's one writer needs none.
    async fn lock_keys(&self, tx: &mut Tx, keys: &[Key]) -> StoreResult<()>;

    /// The ordering keys of these messages (those that have one).
    async fn keys_of(&self, tx: &mut Tx, ids: &[MessageId]) -> StoreResult<Vec<Key>>;

    /// Makes each key's head the first of its order (`ordering::settle`).
    async fn settle_keys(&self, tx: &mut Tx, keys: &[Key]) -> StoreResult<()>;

    /// `ActionStore::bulk_count`.
    async fn count_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        cap: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;

    /// `ActionStore::bulk_batch`.
    async fn apply_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        after: Option<&MessageId>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<BulkBatch>;
}
