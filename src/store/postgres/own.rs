//! This store's own parts that the shared bodies (`store::sql`) call: its
//! ordering keys' advisory locks and heads and its NOTIFY.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::{ordering, PgStore};
use crate::store::{
    ordering::Key,
    sql::{own::Own, Tx},
    StoreResult,
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

    async fn settle_keys(&self, tx: &mut Tx, keys: &[Key]) -> StoreResult<()> {
        ordering::settle_keys(pg(tx), keys).await
    }

    async fn notify_if_soon(
        &self,
        tx: &mut Tx,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        PgStore::notify_if_soon(self, pg(tx), at, now).await
    }
}
