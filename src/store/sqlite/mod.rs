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
use crate::sealing::Sealer;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    path: PathBuf,
    /// Seals target secrets and signing keys when an encryption key is set.
    sealer: Option<Arc<Sealer>>,
    /// Held for the store's lifetime by a serving process: one per database
    /// file. None for an admin command.
    _lock: Option<File>,
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

/// Its sweeper is woken in process: nothing to notify.
impl super::sql::Keeps for SqliteStore {
    fn sealer(&self) -> Option<&Sealer> {
        self.sealer.as_deref()
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
