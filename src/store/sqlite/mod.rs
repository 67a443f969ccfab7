//! The embedded store: SQLite in WAL mode with a single writer connection,
//! for one process. Where PostgreSQL uses `SKIP LOCKED` and `NOTIFY`, this
//! store relies on its one writer serialising claims and on the in-process
//! wake-up; a lock file keeps a second serving process away. The admin
//! commands (clients, users, targets, secrets) open the same file without
//! the lock, beside a running server: SQLite's own locking orders their few
//! short writes with the server's.

mod bulk;
mod claim_gated;
mod delivery;
mod messages;
mod open;
mod ordering;
mod own;
mod record;
mod rows;

use std::{
    fs::File,
    path::{Path, PathBuf},
    sync::Arc,
};

use async_trait::async_trait;
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::sql::sqlite_err as map_err;
use super::*;
use crate::{domain::limits::Limits, sealing::Sealer};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    path: PathBuf,
    /// Seals target secrets and signing keys when an encryption key is set.
    sealer: Option<Arc<Sealer>>,
    /// What one account may hold.
    limits: Limits,
    /// This instance, as its lease tokens name it (`sql::keeps::lease_token`).
    instance: uuid::Uuid,
    /// Held for the store's lifetime by a serving process: one per database
    /// file. None for an admin command.
    _lock: Option<File>,
    /// The serving process's wake-up (`wakes`): what the store itself makes
    /// due (Dispatch's own events) wakes the sweeper.
    wake: std::sync::OnceLock<Arc<crate::wake::Wake>>,
}

impl SqliteStore {
    /// Secrets written from now on are sealed with `sealer`'s current key;
    /// secrets sealed under it or its previous keys read.
    pub fn with_sealer(mut self, sealer: Sealer) -> Self {
        self.sealer = Some(Arc::new(sealer));
        self
    }

    fn sealer(&self) -> Option<&Sealer> {
        self.sealer.as_deref()
    }

    /// A lease token of this instance.
    fn lease_token(&self) -> uuid::Uuid {
        super::sql::keeps::lease_token(self.instance)
    }

    /// Refuses writes that would take an account past `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The serving process's wake-up: messages the store makes due soon
    /// (Dispatch's own events, a key handed on) wake its sweeper.
    pub fn wakes(&self, wake: Arc<crate::wake::Wake>) {
        let _ = self.wake.set(wake);
    }

    /// `sqlite://PATH` (or `sqlite:PATH`) to a path.
    pub fn path_from_url(url: &str) -> Option<PathBuf> {
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))?;
        let rest = rest.split('?').next().unwrap_or(rest);
        (!rest.is_empty()).then(|| PathBuf::from(rest))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn begin(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        self.writer.begin().await.map_err(map_err)
    }
}

impl super::sql::Backend for SqliteStore {
    fn db(&self) -> super::sql::Db<'_> {
        super::sql::Db::Sqlite {
            writer: &self.writer,
            reader: &self.reader,
        }
    }
}

/// Its sweeper is woken in process. Woken before the commit: its claim
/// goes through the one writer, so it reads what this transaction wrote.
#[async_trait::async_trait]
impl super::sql::Keeps for SqliteStore {
    fn sealer(&self) -> Option<&Sealer> {
        self.sealer.as_deref()
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn instance(&self) -> uuid::Uuid {
        self.instance
    }

    async fn notify_if_soon(
        &self,
        _tx: &mut super::sql::Tx,
        at: chrono::DateTime<chrono::Utc>,
        _now: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<()> {
        if let Some(w) = self.wake.get() {
            w.due(at);
        }
        Ok(())
    }
}

#[async_trait]
impl HealthCheck for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.reader)
            .await
            .map_err(map_err)?;
        Ok(())
    }
}
