//! Opening the embedded store: to serve it (one process, held by a lock
//! file) or for an admin command beside a serving process (no lock).

use std::{
    fs::File,
    path::{Path, PathBuf},
    time::Duration,
};

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::{map_err, SqliteStore, MIGRATOR};
use crate::domain::limits::Limits;
use crate::store::{StoreError, StoreResult};

impl SqliteStore {
    /// The lock that keeps a second serving process away.
    fn lock(path: &Path) -> StoreResult<File> {
        let lock_path = PathBuf::from(format!("{}.lock", path.display()));
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::Locked(format!("cannot open {}: {e}", lock_path.display())))?;
        if lock.try_lock().is_err() {
            return Err(StoreError::Locked(format!(
                "another Dispatch process is serving {} (it holds {}). The embedded store serves one process; \
                 to run several instances, use PostgreSQL: DATABASE_URL=postgres://user@host/dispatch",
                path.display(),
                lock_path.display()
            )));
        }
        Ok(lock)
    }

    /// Opens (creating if needed) the database at `path` to serve it: takes
    /// its lock and applies the migrations.
    pub async fn open(path: &Path) -> StoreResult<Self> {
        Self::open_as(path, true).await
    }

    /// Opens the database beside a process that may be serving it, for a
    /// short admin command: no lock is taken.
    pub async fn open_admin(path: &Path) -> StoreResult<Self> {
        Self::open_as(path, false).await
    }

    async fn open_as(path: &Path, exclusive: bool) -> StoreResult<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Locked(format!("cannot create {}: {e}", dir.display())))?;
        }
        let lock = if exclusive {
            Some(Self::lock(path)?)
        } else {
            None
        };
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        // Migrations run with foreign keys off: SQLite changes a table's
        // constraints by building the table anew, and dropping the old one
        // with foreign keys on would delete every row that refers to it
        // (`ON DELETE CASCADE`). What a migration copies is copied whole.
        let migrating = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone().foreign_keys(false))
            .await
            .map_err(map_err)?;
        MIGRATOR
            .run(&migrating)
            .await
            .map_err(StoreError::Migrate)?;
        migrating.close().await;
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .map_err(map_err)?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.read_only(true))
            .await
            .map_err(map_err)?;
        Ok(Self {
            writer,
            reader,
            path: path.to_path_buf(),
            sealer: None,
            limits: Limits::default(),
            instance: crate::store::sql::keeps::new_instance(),
            _lock: lock,
            wake: std::sync::OnceLock::new(),
        })
    }
}
