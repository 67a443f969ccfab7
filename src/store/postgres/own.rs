//! This store's own parts that the shared bodies (`store::sql`) call: its
//! ordering keys' advisory locks and heads, its NOTIFY and its bulk actions.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::{ordering, PgStore};
use crate::{
    domain::ids::{AccountId, MessageId},
    store::{
        ordering::Key,
        sql::{own::Own, Tx},
        Bulk, BulkBatch, StoreResult,
    },
};

/// The transaction a shared body began on this store's pool: always
/// PostgreSQL's.
fn pg(tx: &mut Tx) -> &mut Transaction<'static, Postgres> {
    match tx {
        Tx::Postgres(tx) => tx,
        Tx::Sqlite(_) => unreachable!("a PostgreSQL store begins PostgreSQL transactions"),
    }
}

#[async_trait]
impl Own for PgStore {
    async fn lock_keys(&self, tx: &mut Tx, keys: &[Key]) -> StoreResult<()> {
        ordering::lock_keys(pg(tx), keys).await
    }

    async fn keys_of(&self, tx: &mut Tx, ids: &[MessageId]) -> StoreResult<Vec<Key>> {
        let ids: Vec<_> = ids.iter().map(|id| id.0).collect();
        ordering::keys_of(pg(tx), &ids).await
    }

    async fn settle_keys(&self, tx: &mut Tx, keys: &[Key]) -> StoreResult<()> {
        ordering::settle_keys(pg(tx), keys).await
    }

    async fn count_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        cap: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        PgStore::count_bulk(self, account, bulk, cap, now).await
    }

    async fn apply_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        after: Option<&MessageId>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<BulkBatch> {
        PgStore::apply_bulk(self, account, bulk, after, limit, now).await
    }
}
