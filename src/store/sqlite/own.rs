//! This store's own parts that the shared bodies (`store::sql`) call: its
//! ordering keys' heads and its bulk actions. Its one writer needs no key
//! locks, and its one process wakes its own sweeper, so those are nothing.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::SqliteConnection;

use super::{ordering, rows::id_text, SqliteStore};
use crate::{
    domain::ids::{AccountId, MessageId},
    store::{
        ordering::Key,
        sql::{own::Own, Tx},
        Bulk, BulkBatch, StoreResult,
    },
};

/// The transaction a shared body began on this store's writer: always
/// SQLite's.
fn conn(tx: &mut Tx) -> &mut SqliteConnection {
    match tx {
        Tx::Sqlite(tx) => tx,
        Tx::Postgres(_) => unreachable!("a SQLite store begins SQLite transactions"),
    }
}

#[async_trait]
impl Own for SqliteStore {
    async fn lock_keys(&self, _: &mut Tx, _: &[Key]) -> StoreResult<()> {
        Ok(())
    }

    async fn keys_of(&self, tx: &mut Tx, ids: &[MessageId]) -> StoreResult<Vec<Key>> {
        let ids: Vec<_> = ids.iter().map(id_text).collect();
        ordering::keys_of(conn(tx), &ids).await
    }

    async fn settle_keys(&self, tx: &mut Tx, keys: &[Key]) -> StoreResult<()> {
        ordering::settle_keys(conn(tx), keys).await
    }

    async fn count_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        cap: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        SqliteStore::count_bulk(self, account, bulk, cap, now).await
    }

    async fn apply_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        after: Option<&MessageId>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<BulkBatch> {
        SqliteStore::apply_bulk(self, account, bulk, after, limit, now).await
    }
}
