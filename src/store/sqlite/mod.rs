//! The embedded store: SQLite in WAL mode with a single writer connection,
//! for one process. Where PostgreSQL uses `SKIP LOCKED` and `NOTIFY`, this
//! store relies on its one writer serialising claims and on the in-process
//! wake-up; a lock file keeps a second process away.

mod rows;

use std::{
    collections::HashMap,
    fs::File,
    path::{Path, PathBuf},
    time::Duration,
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rand::Rng;
use sqlx::{
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
    QueryBuilder, Sqlite, SqlitePool, Transaction,
};
use uuid::Uuid;

use self::rows::*;
use super::*;
use crate::domain::retry::Next;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Inserts one message if its target exists in the account; paused when the
/// target is disabled. Binds: id, account, target id, payload, due, now.
const INSERT_MESSAGE: &str =
    "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, \
     next_attempt_at, claim_at, paused, created_at, updated_at) \
     SELECT ?1, ?2, t.id, 'Scheduled', ?4, ?5, ?5, ?5, NOT t.enabled, ?6, ?6 \
     FROM targets t WHERE t.id = ?3 AND t.account = ?2";

pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    path: PathBuf,
    /// Held for the store's lifetime: one process per database file.
    _lock: File,
}

fn map_err(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e),
        _ => StoreError::Database(e),
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, takes its lock and
    /// applies the migrations.
    pub async fn open(path: &Path) -> StoreResult<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Locked(format!("cannot create {}: {e}", dir.display())))?;
        }
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
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .map_err(map_err)?;
        MIGRATOR.run(&writer).await.map_err(StoreError::Migrate)?;
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
            _lock: lock,
        })
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

    async fn transition_failure(
        &self,
        account: &str,
        id: &MessageId,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        let row: Option<(String, Option<String>, Option<i64>)> = sqlx::query_as(
            "SELECT state, lease_token, claim_at FROM messages WHERE id = ? AND account = ?",
        )
        .bind(id_text(id))
        .bind(account)
        .fetch_optional(&self.writer)
        .await
        .map_err(map_err)?;
        Ok(match row {
            None => Transition::NotFound,
            Some((state, token, claim_at)) => {
                let state = state_from_str(&state)?;
                if state.can_cancel_or_reschedule()
                    && token.is_some()
                    && claim_at.is_some_and(|c| c > ms(now))
                {
                    Transition::InFlight
                } else {
                    Transition::WrongState(state)
                }
            }
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.reader)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn create_client(&self, c: &ClientRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let now = ms(Utc::now());
        sqlx::query("INSERT INTO accounts (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING")
            .bind(&c.account)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query(
            "INSERT INTO clients (client_id, account, name, secret_hash, scopes, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(&c.client_id)
        .bind(&c.account)
        .bind(&c.name)
        .bind(&c.secret_hash)
        .bind(serde_json::to_string(&c.scopes).expect("scopes serialize"))
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)
    }

    async fn find_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>> {
        let row: Option<(String, String, String, String, String)> = sqlx::query_as(
            "SELECT client_id, account, name, secret_hash, scopes FROM clients WHERE client_id = ?",
        )
        .bind(client_id)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        row.map(|(client_id, account, name, secret_hash, scopes)| {
            let scopes = serde_json::from_str(&scopes)
                .map_err(|e| StoreError::Corrupt(format!("scopes: {e}")))?;
            Ok(ClientRecord {
                client_id,
                account,
                name,
                secret_hash,
                scopes,
            })
        })
        .transpose()
    }

    async fn count_clients(&self) -> StoreResult<u64> {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM clients")
            .fetch_one(&self.reader)
            .await
            .map_err(map_err)?;
        Ok(n.max(0) as u64)
    }

    async fn ensure_account(&self, account: &str) -> StoreResult<()> {
        sqlx::query("INSERT INTO accounts (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING")
            .bind(account)
            .bind(ms(Utc::now()))
            .execute(&self.writer)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn signing_keys(&self) -> StoreResult<Vec<SigningKey>> {
        let mut tx = self.begin().await?;
        let mut rows: Vec<(String, Vec<u8>)> =
            sqlx::query_as("SELECT kid, secret FROM signing_keys ORDER BY created_at DESC, kid")
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
        if rows.is_empty() {
            let secret: [u8; 32] = rand::rng().random();
            let kid = Uuid::new_v4().simple().to_string();
            sqlx::query("INSERT INTO signing_keys (kid, secret, created_at) VALUES (?, ?, ?)")
                .bind(&kid)
                .bind(&secret[..])
                .bind(ms(Utc::now()))
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            rows.push((kid, secret.to_vec()));
        }
        tx.commit().await.map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(|(kid, secret)| SigningKey { kid, secret })
            .collect())
    }

    async fn insert_target(&self, t: &Target) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING")
            .bind(&t.account)
            .bind(ms(t.created_at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let inserted = sqlx::query(
            "INSERT INTO targets (id, account, name, kind, enabled, config, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
        )
        .bind(t.id.as_str())
        .bind(&t.account)
        .bind(&t.name)
        .bind(t.config.kind())
        .bind(t.enabled)
        .bind(t.config.to_stored_json().to_string())
        .bind(ms(t.created_at))
        .bind(ms(t.updated_at))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected()
            == 1;
        tx.commit().await.map_err(map_err)?;
        Ok(inserted)
    }

    async fn get_target(&self, account: &str, id: &TargetId) -> StoreResult<Option<Target>> {
        let row: Option<TargetRow> = sqlx::query_as(&format!(
            "SELECT {TARGET_COLUMNS} FROM targets WHERE id = ? AND account = ?"
        ))
        .bind(id.as_str())
        .bind(account)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        row.map(Target::try_from).transpose()
    }

    async fn list_targets(
        &self,
        account: &str,
        after: Option<&TargetCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Target>> {
        let rows: Vec<TargetRow> = sqlx::query_as(&format!(
            "SELECT {TARGET_COLUMNS} FROM targets WHERE account = ?1 \
             AND (?2 IS NULL OR (created_at, id) < (?2, ?3)) \
             ORDER BY created_at DESC, id DESC LIMIT ?4"
        ))
        .bind(account)
        .bind(after.map(|c| ms(c.created_at)))
        .bind(after.map(|c| c.id.as_str()).unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(Target::try_from).collect()
    }

    async fn update_target(&self, t: &Target) -> StoreResult<Option<Target>> {
        let row: Option<TargetRow> = sqlx::query_as(&format!(
            "UPDATE targets SET name = ?3, config = ?4, updated_at = ?5 WHERE id = ?1 AND account = ?2 \
             RETURNING {TARGET_COLUMNS}"
        ))
        .bind(t.id.as_str())
        .bind(&t.account)
        .bind(&t.name)
        .bind(t.config.to_stored_json().to_string())
        .bind(ms(t.updated_at))
        .fetch_optional(&self.writer)
        .await
        .map_err(map_err)?;
        row.map(Target::try_from).transpose()
    }

    async fn set_target_enabled(
        &self,
        account: &str,
        id: &TargetId,
        enabled: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Target>> {
        let mut tx = self.begin().await?;
        let before: Option<(bool,)> =
            sqlx::query_as("SELECT enabled FROM targets WHERE id = ? AND account = ?")
                .bind(id.as_str())
                .bind(account)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
        let Some((was_enabled,)) = before else {
            return Ok(None);
        };
        let row: TargetRow = sqlx::query_as(&format!(
            "UPDATE targets SET enabled = ?2, updated_at = CASE WHEN enabled = ?2 THEN updated_at ELSE ?3 END \
             WHERE id = ?1 RETURNING {TARGET_COLUMNS}"
        ))
        .bind(id.as_str())
        .bind(enabled)
        .bind(ms(now))
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        if was_enabled != enabled {
            sqlx::query("UPDATE messages SET paused = ?2 WHERE target_id = ?1 AND state = 'Scheduled' AND paused <> ?2")
                .bind(id.as_str())
                .bind(!enabled)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        tx.commit().await.map_err(map_err)?;
        Target::try_from(row).map(Some)
    }

    async fn delete_target(&self, account: &str, id: &TargetId) -> StoreResult<DeleteTarget> {
        let mut tx = self.begin().await?;
        let exists: Option<(String,)> =
            sqlx::query_as("SELECT id FROM targets WHERE id = ? AND account = ?")
                .bind(id.as_str())
                .bind(account)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
        if exists.is_none() {
            return Ok(DeleteTarget::NotFound);
        }
        let (pending,): (bool,) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE target_id = ? AND state IN ('Scheduled', 'DeadLetter'))",
        )
        .bind(id.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        if pending {
            return Ok(DeleteTarget::HasPending);
        }
        sqlx::query("DELETE FROM targets WHERE id = ?")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(DeleteTarget::Deleted)
    }

    async fn insert_message(
        &self,
        m: &Message,
        idem: Option<&IdempotencyInput>,
    ) -> StoreResult<InsertOutcome> {
        let mut tx = self.begin().await?;
        if let Some(idem) = idem {
            let expired_before =
                m.created_at - chrono::TimeDelta::from_std(idem.ttl).unwrap_or_default();
            let existing: Option<(Vec<u8>, i64, String, i64)> = sqlx::query_as(
                "SELECT request_hash, status, response, created_at FROM idempotency_keys WHERE account = ? AND key = ?",
            )
            .bind(&m.account)
            .bind(&idem.key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
            if let Some((hash, status, response, created_at)) = existing {
                if created_at >= ms(expired_before) {
                    if hash != idem.request_hash {
                        return Ok(InsertOutcome::KeyConflict);
                    }
                    let response = serde_json::from_str(&response)
                        .map_err(|e| StoreError::Corrupt(format!("idempotent response: {e}")))?;
                    return Ok(InsertOutcome::Replayed {
                        status: u16::try_from(status).unwrap_or(201),
                        response,
                    });
                }
            }
            sqlx::query(
                "INSERT INTO idempotency_keys (account, key, request_hash, status, response, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (account, key) DO UPDATE SET \
                 request_hash = excluded.request_hash, status = excluded.status, response = excluded.response, \
                 created_at = excluded.created_at",
            )
            .bind(&m.account)
            .bind(&idem.key)
            .bind(&idem.request_hash)
            .bind(i64::from(idem.status))
            .bind(idem.response.to_string())
            .bind(ms(m.created_at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        let inserted = sqlx::query(INSERT_MESSAGE)
            .bind(id_text(&m.id))
            .bind(&m.account)
            .bind(m.target_id.as_str())
            .bind(m.payload.as_str())
            .bind(ms(m.delivery_time))
            .bind(ms(m.created_at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        if inserted == 0 {
            return Ok(InsertOutcome::UnknownTarget);
        }
        tx.commit().await.map_err(map_err)?;
        Ok(InsertOutcome::Created(Box::new(m.clone())))
    }

    async fn insert_messages(
        &self,
        account: &str,
        messages: &[Message],
    ) -> StoreResult<Vec<MessageId>> {
        let mut tx = self.begin().await?;
        let mut inserted = Vec::with_capacity(messages.len());
        for m in messages {
            let n = sqlx::query(INSERT_MESSAGE)
                .bind(id_text(&m.id))
                .bind(account)
                .bind(m.target_id.as_str())
                .bind(m.payload.as_str())
                .bind(ms(m.delivery_time))
                .bind(ms(m.created_at))
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .rows_affected();
            if n == 1 {
                inserted.push(m.id);
            }
        }
        tx.commit().await.map_err(map_err)?;
        Ok(inserted)
    }

    async fn get_message(&self, account: &str, id: &MessageId) -> StoreResult<Option<Message>> {
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ? AND account = ?"
        ))
        .bind(id_text(id))
        .bind(account)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        row.map(Message::try_from).transpose()
    }

    async fn list_messages(
        &self,
        account: &str,
        filter: &MessageFilter,
        before: Option<&MessageId>,
        limit: u32,
    ) -> StoreResult<Vec<Message>> {
        let rows: Vec<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE account = ?1 \
             AND (?2 IS NULL OR target_id = ?2) AND (?3 IS NULL OR state = ?3) \
             AND (?4 IS NULL OR id < ?4) ORDER BY id DESC LIMIT ?5"
        ))
        .bind(account)
        .bind(filter.target_id.as_ref().map(|t| t.as_str()))
        .bind(filter.state.map(|s| s.as_str()))
        .bind(before.map(id_text))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(Message::try_from).collect()
    }

    async fn list_attempts(
        &self,
        account: &str,
        id: &MessageId,
        after: Option<u32>,
        limit: u32,
    ) -> StoreResult<Option<Vec<Attempt>>> {
        let exists: Option<(String,)> =
            sqlx::query_as("SELECT id FROM messages WHERE id = ? AND account = ?")
                .bind(id_text(id))
                .bind(account)
                .fetch_optional(&self.reader)
                .await
                .map_err(map_err)?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows: Vec<AttemptRow> = sqlx::query_as(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE message_id = ? AND attempt > ? ORDER BY attempt LIMIT ?"
        ))
        .bind(id_text(id))
        .bind(i64::from(after.unwrap_or(0)))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(Attempt::try_from)
            .collect::<StoreResult<Vec<_>>>()
            .map(Some)
    }

    async fn cancel(
        &self,
        account: &str,
        id: &MessageId,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "UPDATE messages SET state = 'Cancelled', cancelled_at = ?3, next_attempt_at = NULL, claim_at = NULL, \
               lease_token = NULL, updated_at = ?3 \
             WHERE id = ?1 AND account = ?2 AND state IN ('Scheduled', 'DeadLetter') \
               AND (lease_token IS NULL OR claim_at <= ?3) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id_text(id))
        .bind(account)
        .bind(ms(now))
        .fetch_optional(&self.writer)
        .await
        .map_err(map_err)?;
        match row {
            Some(row) => Ok(Transition::Done(Box::new(row.try_into()?))),
            None => self.transition_failure(account, id, now).await,
        }
    }

    async fn reschedule(
        &self,
        account: &str,
        id: &MessageId,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "UPDATE messages SET state = 'Scheduled', delivery_time = ?3, next_attempt_at = ?3, claim_at = ?3, \
               lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, updated_at = ?4, \
               paused = NOT (SELECT enabled FROM targets t WHERE t.id = messages.target_id) \
             WHERE id = ?1 AND account = ?2 AND state IN ('Scheduled', 'DeadLetter') \
               AND (lease_token IS NULL OR claim_at <= ?4) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id_text(id))
        .bind(account)
        .bind(ms(at))
        .bind(ms(now))
        .fetch_optional(&self.writer)
        .await
        .map_err(map_err)?;
        match row {
            Some(row) => Ok(Transition::Done(Box::new(row.try_into()?))),
            None => self.transition_failure(account, id, now).await,
        }
    }

    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> StoreResult<Vec<Claimed>> {
        let token = Uuid::new_v4();
        let lease_end = ms(now) + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        let mut tx = self.begin().await?;
        // The one writer serialises claims: no two callers get the same row.
        let rows: Vec<ClaimRow> = sqlx::query_as(
            "UPDATE messages SET claim_at = ?2, lease_token = ?3 \
             WHERE id IN (SELECT id FROM messages WHERE state = 'Scheduled' AND paused = 0 AND claim_at <= ?1 \
                          ORDER BY claim_at LIMIT ?4) \
             RETURNING id, target_id, payload, delivery_time, attempt_count, \
               ladder_attempts",
        )
        .bind(ms(now))
        .bind(lease_end)
        .bind(token.to_string())
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        let mut targets: HashMap<String, StoreResult<TargetConfig>> = HashMap::new();
        if !rows.is_empty() {
            let mut ids: Vec<&str> = rows.iter().map(|r| r.target_id.as_str()).collect();
            ids.sort_unstable();
            ids.dedup();
            let mut q =
                QueryBuilder::<Sqlite>::new("SELECT id, kind, config FROM targets WHERE id IN (");
            let mut list = q.separated(", ");
            for id in &ids {
                list.push_bind(*id);
            }
            q.push(")");
            let found: Vec<(String, String, String)> = q
                .build_query_as()
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            for (id, kind, config) in found {
                targets.insert(id, config_from_row(&kind, &config));
            }
        }
        let mut claimed: Vec<(i64, Claimed)> = Vec::with_capacity(rows.len());
        for r in rows {
            let read = match targets.get(&r.target_id) {
                Some(Ok(target)) => parse_id(&r.id).map(|id| (id, target.clone())),
                Some(Err(e)) => Err(StoreError::Corrupt(e.to_string())),
                None => Err(StoreError::Corrupt(format!(
                    "message without target {}",
                    r.target_id
                ))),
            };
            match read {
                Ok((id, target)) => claimed.push((
                    r.delivery_time,
                    Claimed {
                        id,
                        target_id: TargetId::from_trusted(r.target_id),
                        target,
                        payload: r.payload,
                        delivery_time: from_ms(r.delivery_time),
                        attempt_count: r.attempt_count.max(0) as u32,
                        ladder_attempts: r.ladder_attempts.max(0) as u32,
                        lease_token: token,
                    },
                )),
                Err(e) => {
                    // A row that cannot be read cannot be delivered: dead-letter
                    // it, saying why, rather than fail every claim after it.
                    tracing::error!(message_id = %r.id, error = %e, "dead-lettering an unreadable message");
                    sqlx::query(
                        "UPDATE messages SET state = 'DeadLetter', dead_lettered_at = ?2, next_attempt_at = NULL, \
                           claim_at = NULL, lease_token = NULL, last_error = ?3, updated_at = ?2 WHERE id = ?1",
                    )
                    .bind(&r.id)
                    .bind(ms(now))
                    .bind(e.to_string())
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                }
            }
        }
        tx.commit().await.map_err(map_err)?;
        // RETURNING has no order; hand out the oldest due first.
        claimed.sort_by_key(|(due, _)| *due);
        Ok(claimed.into_iter().map(|(_, c)| c).collect())
    }

    async fn next_due(&self) -> StoreResult<Option<DateTime<Utc>>> {
        let (next,): (Option<i64>,) = sqlx::query_as(
            "SELECT min(claim_at) FROM messages WHERE state = 'Scheduled' AND paused = 0",
        )
        .fetch_one(&self.reader)
        .await
        .map_err(map_err)?;
        Ok(opt_from_ms(next))
    }

    async fn record(&self, results: &[Recorded], now: DateTime<Utc>) -> StoreResult<u64> {
        if results.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin().await?;
        let mut written = 0;
        for r in results {
            let last = r.last();
            let (state, at) = match r.next {
                Next::Delivered => ("Delivered", None),
                Next::Retry(at) => ("Scheduled", Some(ms(at))),
                Next::DeadLetter => ("DeadLetter", None),
            };
            let last_error = r
                .attempts
                .iter()
                .rev()
                .find_map(|a| a.error.as_deref().map(|e| storable_text(e).into_owned()));
            let updated = sqlx::query(
                "UPDATE messages SET state = ?3, next_attempt_at = ?4, claim_at = ?4, lease_token = NULL, \
                   attempt_count = max(attempt_count, ?5), ladder_attempts = ?6, \
                   delivered_at = CASE WHEN ?3 = 'Delivered' THEN ?7 ELSE delivered_at END, \
                   dead_lettered_at = CASE WHEN ?3 = 'DeadLetter' THEN ?7 ELSE dead_lettered_at END, \
                   last_error = COALESCE(?8, last_error), updated_at = ?9 \
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'Scheduled'",
            )
            .bind(id_text(&r.id))
            .bind(r.lease_token.to_string())
            .bind(state)
            .bind(at)
            .bind(i64::from(last.attempt))
            .bind(i64::from(r.ladder_attempts))
            .bind(ms(last.finished_at))
            .bind(last_error)
            .bind(ms(now))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
            if updated == 0 {
                continue; // the lease was lost: drop the stale result whole
            }
            for a in &r.attempts {
                written += sqlx::query(
                    "INSERT INTO attempts (message_id, attempt, started_at, finished_at, duration_ms, outcome, \
                       status_code, error, response_body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (message_id, attempt) DO NOTHING",
                )
                .bind(id_text(&r.id))
                .bind(i64::from(a.attempt))
                .bind(ms(a.started_at))
                .bind(ms(a.finished_at))
                .bind(a.duration_ms as i64)
                .bind(a.outcome.as_str())
                .bind(a.status_code.map(i64::from))
                .bind(a.error.as_deref().map(storable_text))
                .bind(a.response_body.as_deref().map(storable_text))
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .rows_affected();
            }
        }
        tx.commit().await.map_err(map_err)?;
        Ok(written)
    }

    async fn purge_expired(&self, c: &Cutoffs, batch: u32) -> StoreResult<Purged> {
        let batch = i64::from(batch);
        let mut tx = self.begin().await?;
        let mut messages = 0;
        for (state, column, cutoff) in [
            ("Delivered", "delivered_at", c.delivered_before),
            ("Cancelled", "cancelled_at", c.cancelled_before),
            ("DeadLetter", "dead_lettered_at", c.dead_letters_before),
        ] {
            messages += sqlx::query(&format!(
                "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE state = '{state}' \
                 AND {column} < ? LIMIT ?)"
            ))
            .bind(ms(cutoff))
            .bind(batch)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        }
        let attempts = sqlx::query(
            "DELETE FROM attempts WHERE (message_id, attempt) IN (SELECT message_id, attempt FROM attempts \
             WHERE outcome <> 'Success' AND finished_at < ? LIMIT ?)",
        )
        .bind(ms(c.failed_attempts_before))
        .bind(batch)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        let idempotency_keys = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (account, key) IN (SELECT account, key FROM idempotency_keys \
             WHERE created_at < ? LIMIT ?)",
        )
        .bind(ms(c.idempotency_before))
        .bind(batch)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        tx.commit().await.map_err(map_err)?;
        Ok(Purged {
            messages,
            attempts,
            idempotency_keys,
        })
    }
}
