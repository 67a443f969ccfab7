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

mod batch;
mod clients;
mod delivery;
mod filter;
pub mod listen;
mod messages;
mod open;
mod portal;
mod rows;
mod secrets;
mod targets;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use self::rows::*;
use super::*;
use crate::auth::sealing::Sealer;

/// The channel other instances LISTEN on.
pub const WAKE_CHANNEL: &str = "dispatch_wake";

#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// A scheduled message due sooner than this after now notifies other instances.
    wake_horizon: chrono::TimeDelta,
    /// Seals target secrets and signing keys when an encryption key is set.
    sealer: Option<Arc<Sealer>>,
}

impl PgStore {
    fn sealer(&self) -> Option<&Sealer> {
        self.sealer.as_deref()
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
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

    async fn transition_failure(
        &self,
        account: &str,
        id: &MessageId,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        let row: Option<(String, Option<Uuid>, Option<DateTime<Utc>>)> = sqlx::query_as(
            "SELECT state, lease_token, claim_at FROM messages WHERE id = $1 AND account = $2",
        )
        .bind(id.0)
        .bind(account)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(match row {
            None => Transition::NotFound,
            Some((state, token, claim_at)) => {
                let state = state_from_str(&state)?;
                if !state.can_cancel_or_reschedule() {
                    Transition::WrongState(state)
                } else if token.is_some() && claim_at.is_some_and(|c| c > now) {
                    Transition::InFlight
                } else {
                    // It changed between the two statements; report what it is now.
                    Transition::WrongState(state)
                }
            }
        })
    }
}

/// Maps driver errors once: lost connections mean "not ready", the rest is internal.
pub(crate) fn map_err(e: sqlx::Error) -> StoreError {
    match &e {
        // A connection lost mid-conversation shows as I/O or as a protocol
        // error (the stream ended where a message was expected).
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e),
        sqlx::Error::Database(db)
            if db.code().is_some_and(|c| {
                c.starts_with("08") || c == "57P01" || c == "57P02" || c == "57P03"
            }) =>
        {
            StoreError::Unavailable(e)
        }
        _ => StoreError::Database(e),
    }
}

fn millis_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for PgStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn create_client(&self, c: &ClientRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&c.account)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query("INSERT INTO clients (client_id, account, name, secret_hash, scopes) VALUES ($1, $2, $3, $4, $5)")
            .bind(&c.client_id)
            .bind(&c.account)
            .bind(&c.name)
            .bind(&c.secret_hash)
            .bind(&c.scopes)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)
    }

    async fn find_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>> {
        let row: Option<(String, String, String, String, Vec<String>)> =
            sqlx::query_as("SELECT client_id, account, name, secret_hash, scopes FROM clients WHERE client_id = $1 AND revoked_at IS NULL")
                .bind(client_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?;
        Ok(row.map(
            |(client_id, account, name, secret_hash, scopes)| ClientRecord {
                client_id,
                account,
                name,
                secret_hash,
                scopes,
            },
        ))
    }

    async fn count_clients(&self) -> StoreResult<u64> {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM clients")
            .fetch_one(&self.pool)
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
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(account)
            .execute(&self.pool)
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
        self.insert_set(items).await
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
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = $1 AND account = $2"
        ))
        .bind(id.0)
        .bind(account)
        .fetch_optional(&self.pool)
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
            q.push(" AND id < ").push_bind(m.0);
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit));
        let rows: Vec<MessageRow> = q
            .build_query_as()
            .persistent(false)
            .fetch_all(&self.pool)
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
        let exists: Option<(Uuid,)> =
            sqlx::query_as("SELECT id FROM messages WHERE id = $1 AND account = $2")
                .bind(id.0)
                .bind(account)
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows: Vec<AttemptRow> = sqlx::query_as(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE message_id = $1 AND attempt > $2 ORDER BY attempt LIMIT $3"
        ))
        .bind(id.0)
        .bind(after.map_or(0, |a| a as i32))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
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
        let row: Option<(DateTime<Utc>,)> = sqlx::query_as(
            "SELECT claim_at FROM messages WHERE state = 'Scheduled' AND NOT paused AND claim_at IS NOT NULL \
             ORDER BY claim_at LIMIT 1",
        )
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(|r| r.0))
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
