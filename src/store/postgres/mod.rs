//! The PostgreSQL store: several instances share one database through
//! leases and `FOR UPDATE SKIP LOCKED`; `NOTIFY dispatch_wake` tells the
//! other instances' sweepers that something fell due.
//!
//! Statements that scan `messages` or `attempts` by anything but a primary
//! key are planned at each execution (`.persistent(false)`): a plan cached
//! while the table was small outlives its growth until the next ANALYZE. One
//! cached when `messages` was empty made each recording of results scan the
//! whole table (over a second with a million scheduled messages) and the
//! next-due (then `min(claim_at)`) read the whole claim index (200 ms).
//! Lookups by key keep their cached plans, which cannot go wrong that way
//! and save the planning; so do the two statements the sweeper runs most,
//! whose plans start from the claim index whatever the estimates: the claim
//! (planning it each time cost a fifth of the burst rate in interleaved
//! runs; planning the recording each time cost nothing measurable) and
//! next-due, now `ORDER BY claim_at LIMIT 1`, which is planned as a read of
//! the index's first entry even on an empty table.

mod bulk;
mod claimed;
#[macro_use]
mod delivery;
mod claim_gated;
pub mod listen;
mod messages;
mod open;
mod ordering;
mod own;
mod record;
mod rows;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};

use super::sql::pg_err as map_err;
use super::*;
use crate::{domain::limits::Limits, sealing::Sealer};

/// The channel other instances LISTEN on.
pub const WAKE_CHANNEL: &str = "dispatch_wake";

#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// A scheduled message due sooner than this after now notifies other instances.
    wake_horizon: chrono::TimeDelta,
    /// Seals target secrets and signing keys when an encryption key is set.
    sealer: Option<Arc<Sealer>>,
    /// What one account may hold.
    limits: Limits,
    /// This instance, as its lease tokens name it (`sql::keeps::lease_token`).
    instance: Uuid,
}

impl PgStore {
    fn sealer(&self) -> Option<&Sealer> {
        self.sealer.as_deref()
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A lease token of this instance.
    fn lease_token(&self) -> Uuid {
        super::sql::keeps::lease_token(self.instance)
    }

    async fn begin(&self) -> StoreResult<Transaction<'static, Postgres>> {
        self.pool.begin().await.map_err(map_err)
    }

    async fn notify_if_soon(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        if at <= now + self.wake_horizon {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(WAKE_CHANNEL)
                .bind(at.timestamp_millis().to_string())
                .execute(&mut **tx)
                .await
                .map_err(map_err)?;
        }
        Ok(())
    }
}

fn millis_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl super::sql::Backend for PgStore {
    fn db(&self) -> super::sql::Db<'_> {
        super::sql::Db::Postgres(&self.pool)
    }
}

#[async_trait]
impl super::sql::Keeps for PgStore {
    fn sealer(&self) -> Option<&Sealer> {
        self.sealer.as_deref()
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn instance(&self) -> Uuid {
        self.instance
    }

    async fn notify_if_soon(
        &self,
        tx: &mut super::sql::Tx,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        match tx {
            super::sql::Tx::Postgres(tx) => PgStore::notify_if_soon(self, tx, at, now).await,
            super::sql::Tx::Sqlite(_) => Ok(()),
        }
    }
}

#[async_trait]
impl HealthCheck for PgStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }
}
