//! This store's own parts that the shared bodies (`store::sql`) call: its
//! ordering keys' heads. Its one writer needs no key locks, and its one
//! process wakes its own sweeper, so those are nothing.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::SqliteConnection;

use super::{ordering, SqliteStore};
use crate::store::{
    ordering::Key,
    sql::{own::Own, Tx},
    StoreResult,
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

    async fn settle_keys(&self, tx: &mut Tx, keys: &[Key]) -> StoreResult<()> {
        ordering::settle_keys(conn(tx), keys).await
    }

    async fn notify_if_soon(
        &self,
        _: &mut Tx,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> StoreResult<()> {
        Ok(())
    }
}
