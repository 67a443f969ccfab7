//! The embedded store: SQLite in WAL mode with a single writer connection,
//! for one process. Where PostgreSQL uses `SKIP LOCKED` and `NOTIFY`, this
//! store relies on its one writer serialising claims and on the in-process
//! wake-up; a lock file keeps a second serving process away. The admin
//! commands (clients, users, targets, secrets) open the same file without
//! the lock, beside a running server: SQLite's own locking orders their few
//! short writes with the server's.

mod clients;
mod delivery;
mod filter;
mod messages;
mod open;
mod portal;
mod rows;
mod secrets;
mod targets;

use std::{
    fs::File,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Sqlite, SqlitePool, Transaction};

use self::rows::*;
use super::*;
use crate::auth::sealing::Sealer;

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
            "SELECT client_id, account, name, secret_hash, scopes FROM clients WHERE client_id = ? AND revoked_at IS NULL",
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

    async fn replace_client_secret_hash(
        &self,
        client_id: &str,
        old: &str,
        new: &str,
    ) -> StoreResult<bool> {
        self.replace_secret_hash(client_id, old, new).await
    }

    async fn list_clients(&self, account: &str) -> StoreResult<Vec<ClientSummary>> {
        self.clients_of(account).await
    }

    async fn revoke_client(
        &self,
        client_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<ClientSummary>> {
        self.revoke(client_id, now).await
    }

    async fn clients_revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>> {
        self.revoked_since(since).await
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
        self.load_signing_keys().await
    }

    async fn reseal_targets(&self, after: Option<&str>, limit: u32) -> StoreResult<ResealPage> {
        self.reseal_target_page(after, limit).await
    }

    async fn reseal_signing_keys(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<ResealPage> {
        self.reseal_key_page(after, limit).await
    }

    async fn insert_target(&self, t: &Target) -> StoreResult<bool> {
        self.store_target(t).await
    }

    async fn get_target(&self, account: &str, id: &TargetId) -> StoreResult<Option<Target>> {
        self.load_target(account, id).await
    }

    async fn list_targets(
        &self,
        account: &str,
        after: Option<&TargetCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Target>> {
        self.load_targets(account, after, limit).await
    }

    async fn update_target(&self, t: &Target) -> StoreResult<Option<Target>> {
        self.save_target(t).await
    }

    async fn set_target_enabled(
        &self,
        account: &str,
        id: &TargetId,
        enabled: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Target>> {
        self.switch_target(account, id, enabled, now).await
    }

    async fn delete_target(&self, account: &str, id: &TargetId) -> StoreResult<DeleteTarget> {
        self.remove_target(account, id).await
    }

    async fn insert_message(
        &self,
        m: &Message,
        idem: Option<&IdempotencyInput>,
    ) -> StoreResult<InsertOutcome> {
        self.insert_one(m, idem).await
    }

    async fn insert_batch(&self, items: &[BatchItem]) -> StoreResult<Vec<InsertOutcome>> {
        self.insert_each(items).await
    }

    async fn insert_messages(
        &self,
        account: &str,
        messages: &[Message],
    ) -> StoreResult<Vec<MessageId>> {
        self.insert_many(account, messages).await
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
        let head = format!("SELECT {MESSAGE_COLUMNS} FROM messages");
        let mut q = filter::filtered(&head, account, filter);
        // UUIDv7 ids are creation-ordered, so "newest first" is "id descending".
        if let Some(m) = before {
            q.push(" AND id < ").push_bind(id_text(m));
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit));
        let rows: Vec<MessageRow> = q
            .build_query_as()
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
        self.cancel_message(account, id, now).await
    }

    async fn reschedule(
        &self,
        account: &str,
        id: &MessageId,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        self.reschedule_message(account, id, at, now).await
    }

    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> StoreResult<Vec<Claimed>> {
        self.claim(now, limit, lease).await
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
        self.record_results(results, now).await
    }

    async fn purge_expired(&self, c: &Cutoffs, batch: u32) -> StoreResult<Purged> {
        self.purge(c, batch).await
    }

    async fn create_user(&self, user: &crate::store::portal::UserRecord) -> StoreResult<bool> {
        self.insert_user(user).await
    }

    async fn find_user(
        &self,
        email: &str,
    ) -> StoreResult<Option<crate::store::portal::UserRecord>> {
        self.select_user(email).await
    }

    async fn create_session(
        &self,
        session: &crate::store::portal::SessionRecord,
    ) -> StoreResult<()> {
        self.insert_session(session).await
    }

    async fn find_session(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<crate::store::portal::SessionRecord>> {
        self.select_session(token_hash, now).await
    }

    async fn delete_session(&self, token_hash: &[u8]) -> StoreResult<()> {
        self.remove_session(token_hash).await
    }

    async fn overview(
        &self,
        account: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<crate::store::portal::Overview> {
        self.select_overview(account, since, now).await
    }

    async fn count_messages(&self, account: &str, filter: &MessageFilter) -> StoreResult<u64> {
        self.count_filtered(account, filter).await
    }

    async fn list_events(
        &self,
        account: &str,
        id: &MessageId,
    ) -> StoreResult<Vec<crate::store::portal::MessageEvent>> {
        self.select_events(account, id).await
    }

    async fn redrive(
        &self,
        account: &str,
        filter: &MessageFilter,
        ids: Option<&[MessageId]>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        self.redrive_dead_letters(account, filter, ids, at, now)
            .await
    }
}
