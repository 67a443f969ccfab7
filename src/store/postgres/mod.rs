//! The PostgreSQL store: several instances share one database through
//! leases and `FOR UPDATE SKIP LOCKED`; `NOTIFY dispatch_wake` tells the
//! other instances' sweepers that something fell due.

pub mod listen;
mod rows;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rand::Rng;
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    PgPool, Postgres, Transaction,
};
use uuid::Uuid;

use self::rows::*;
use super::*;
use crate::domain::retry::Next;

/// The channel other instances LISTEN on.
pub const WAKE_CHANNEL: &str = "dispatch_wake";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// A scheduled message due sooner than this after now notifies other instances.
    wake_horizon: chrono::TimeDelta,
}

impl PgStore {
    pub async fn connect(
        url: &str,
        max_connections: u32,
        wake_horizon: Duration,
    ) -> StoreResult<Self> {
        let options: PgConnectOptions = url.parse().map_err(StoreError::Unavailable)?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(3))
            .connect_with(options.application_name("dispatch"))
            .await
            .map_err(map_err)?;
        Ok(Self {
            pool,
            wake_horizon: chrono::TimeDelta::from_std(wake_horizon)
                .unwrap_or(chrono::TimeDelta::seconds(5)),
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await.map_err(StoreError::Migrate)
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
            sqlx::query_as("SELECT client_id, account, name, secret_hash, scopes FROM clients WHERE client_id = $1")
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

    async fn ensure_account(&self, account: &str) -> StoreResult<()> {
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(account)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn signing_keys(&self) -> StoreResult<Vec<SigningKey>> {
        let fetch = || {
            sqlx::query_as::<_, (String, Vec<u8>)>(
                "SELECT kid, secret FROM signing_keys ORDER BY created_at DESC",
            )
            .fetch_all(&self.pool)
        };
        let mut rows = fetch().await.map_err(map_err)?;
        if rows.is_empty() {
            let secret: [u8; 32] = rand::rng().random();
            let kid = Uuid::new_v4().simple().to_string();
            // Two instances starting together may both insert; both keys are then valid.
            sqlx::query("INSERT INTO signing_keys (kid, secret) VALUES ($1, $2)")
                .bind(&kid)
                .bind(&secret[..])
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
            rows = fetch().await.map_err(map_err)?;
        }
        Ok(rows
            .into_iter()
            .map(|(kid, secret)| SigningKey { kid, secret })
            .collect())
    }

    async fn insert_target(&self, t: &Target) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&t.account)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let inserted = sqlx::query(
            "INSERT INTO targets (id, account, name, kind, enabled, config, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING",
        )
        .bind(t.id.as_str())
        .bind(&t.account)
        .bind(&t.name)
        .bind(t.config.kind())
        .bind(t.enabled)
        .bind(t.config.to_stored_json())
        .bind(t.created_at)
        .bind(t.updated_at)
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
            "SELECT {TARGET_COLUMNS} FROM targets WHERE id = $1 AND account = $2"
        ))
        .bind(id.as_str())
        .bind(account)
        .fetch_optional(&self.pool)
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
        // Newest first; the cursor is the last target of the previous page.
        let rows: Vec<TargetRow> = sqlx::query_as(&format!(
            "SELECT {TARGET_COLUMNS} FROM targets WHERE account = $1 \
             AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3)) \
             ORDER BY created_at DESC, id DESC LIMIT $4"
        ))
        .bind(account)
        .bind(after.map(|c| c.created_at))
        .bind(after.map(|c| c.id.as_str()).unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(Target::try_from).collect()
    }

    async fn update_target(&self, t: &Target) -> StoreResult<Option<Target>> {
        let row: Option<TargetRow> = sqlx::query_as(&format!(
            "UPDATE targets SET name = $3, config = $4, updated_at = $5 WHERE id = $1 AND account = $2 \
             RETURNING {TARGET_COLUMNS}"
        ))
        .bind(t.id.as_str())
        .bind(&t.account)
        .bind(&t.name)
        .bind(t.config.to_stored_json())
        .bind(t.updated_at)
        .fetch_optional(&self.pool)
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
        // FOR UPDATE conflicts with the KEY SHARE lock a concurrent schedule
        // takes, so a message scheduled meanwhile is paused (or not) correctly.
        let locked: Option<(bool,)> =
            sqlx::query_as("SELECT enabled FROM targets WHERE id = $1 AND account = $2 FOR UPDATE")
                .bind(id.as_str())
                .bind(account)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
        let Some((was_enabled,)) = locked else {
            return Ok(None);
        };
        let row: TargetRow = sqlx::query_as(&format!(
            "UPDATE targets SET enabled = $2, updated_at = CASE WHEN enabled = $2 THEN updated_at ELSE $3 END \
             WHERE id = $1 RETURNING {TARGET_COLUMNS}"
        ))
        .bind(id.as_str())
        .bind(enabled)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        if was_enabled != enabled {
            sqlx::query("UPDATE messages SET paused = $2 WHERE target_id = $1 AND state = 'Scheduled' AND paused <> $2")
                .bind(id.as_str())
                .bind(!enabled)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            if enabled {
                self.notify_if_soon(&mut tx, now, now).await?;
            }
        }
        tx.commit().await.map_err(map_err)?;
        Target::try_from(row).map(Some)
    }

    async fn delete_target(&self, account: &str, id: &TargetId) -> StoreResult<DeleteTarget> {
        let mut tx = self.begin().await?;
        let exists: Option<(String,)> =
            sqlx::query_as("SELECT id FROM targets WHERE id = $1 AND account = $2 FOR UPDATE")
                .bind(id.as_str())
                .bind(account)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
        if exists.is_none() {
            return Ok(DeleteTarget::NotFound);
        }
        let pending: (bool,) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE target_id = $1 AND state IN ('Scheduled', 'DeadLetter'))",
        )
        .bind(id.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        if pending.0 {
            return Ok(DeleteTarget::HasPending);
        }
        sqlx::query("DELETE FROM targets WHERE id = $1")
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
            let claimed: Option<(bool,)> = sqlx::query_as(
                "INSERT INTO idempotency_keys (account, key, request_hash, status, response, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (account, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, \
                   status = EXCLUDED.status, response = EXCLUDED.response, created_at = EXCLUDED.created_at \
                 WHERE idempotency_keys.created_at < $7 \
                 RETURNING true",
            )
            .bind(&m.account)
            .bind(&idem.key)
            .bind(&idem.request_hash)
            .bind(i32::from(idem.status))
            .bind(idem.response.to_string())
            .bind(m.created_at)
            .bind(expired_before)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
            if claimed.is_none() {
                let (hash, status, response): (Vec<u8>, i32, String) = sqlx::query_as(
                    "SELECT request_hash, status, response FROM idempotency_keys WHERE account = $1 AND key = $2",
                )
                .bind(&m.account)
                .bind(&idem.key)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
                return Ok(if hash == idem.request_hash {
                    let response = serde_json::from_str(&response)
                        .map_err(|e| StoreError::Corrupt(format!("idempotent response: {e}")))?;
                    InsertOutcome::Replayed {
                        status: u16::try_from(status).unwrap_or(201),
                        response,
                    }
                } else {
                    InsertOutcome::KeyConflict
                });
            }
        }
        // KEY SHARE on the target orders this insert against a concurrent
        // enable/disable (which takes FOR UPDATE), so `paused` is always right.
        let inserted = sqlx::query(
            "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, next_attempt_at, \
               claim_at, paused, created_at, updated_at) \
             SELECT $1, $2, t.id, 'Scheduled', $4, $5, $5, $5, NOT t.enabled, $6, $6 \
             FROM targets t WHERE t.id = $3 AND t.account = $2 FOR KEY SHARE",
        )
        .bind(m.id.0)
        .bind(&m.account)
        .bind(m.target_id.as_str())
        .bind(m.payload.as_str().as_bytes())
        .bind(m.delivery_time)
        .bind(m.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if inserted == 0 {
            return Ok(InsertOutcome::UnknownTarget);
        }
        self.notify_if_soon(&mut tx, m.delivery_time, m.created_at)
            .await?;
        tx.commit().await.map_err(map_err)?;
        Ok(InsertOutcome::Created(Box::new(m.clone())))
    }

    async fn insert_messages(
        &self,
        account: &str,
        messages: &[Message],
    ) -> StoreResult<Vec<MessageId>> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = messages.iter().map(|m| m.id.0).collect();
        let targets: Vec<&str> = messages.iter().map(|m| m.target_id.as_str()).collect();
        let payloads: Vec<&[u8]> = messages
            .iter()
            .map(|m| m.payload.as_str().as_bytes())
            .collect();
        let times: Vec<DateTime<Utc>> = messages.iter().map(|m| m.delivery_time).collect();
        let now = messages
            .iter()
            .map(|m| m.created_at)
            .max()
            .unwrap_or_else(Utc::now);
        let earliest = times.iter().min().copied().unwrap_or(now);
        let mut tx = self.begin().await?;
        let inserted: Vec<(Uuid,)> = sqlx::query_as(
            "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, next_attempt_at, \
               claim_at, paused, created_at, updated_at) \
             SELECT i.id, $1, t.id, 'Scheduled', i.payload, i.at, i.at, i.at, NOT t.enabled, $6, $6 \
             FROM unnest($2::uuid[], $3::text[], $4::bytea[], $5::timestamptz[]) AS i(id, target_id, payload, at) \
             JOIN targets t ON t.id = i.target_id AND t.account = $1 \
             FOR KEY SHARE OF t \
             RETURNING id",
        )
        .bind(account)
        .bind(&ids)
        .bind(&targets)
        .bind(&payloads)
        .bind(&times)
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        self.notify_if_soon(&mut tx, earliest, now).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(inserted.into_iter().map(|(id,)| MessageId(id)).collect())
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
        // UUIDv7 ids are creation-ordered, so "newest first" is "id descending".
        let rows: Vec<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE account = $1 \
             AND ($2::text IS NULL OR target_id = $2) AND ($3::text IS NULL OR state = $3) \
             AND ($4::uuid IS NULL OR id < $4) ORDER BY id DESC LIMIT $5"
        ))
        .bind(account)
        .bind(filter.target_id.as_ref().map(|t| t.as_str()))
        .bind(filter.state.map(|s| s.as_str()))
        .bind(before.map(|m| m.0))
        .bind(i64::from(limit))
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
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "UPDATE messages SET state = 'Cancelled', cancelled_at = $3, next_attempt_at = NULL, claim_at = NULL, \
               lease_token = NULL, updated_at = $3 \
             WHERE id = $1 AND account = $2 AND state IN ('Scheduled', 'DeadLetter') \
               AND (lease_token IS NULL OR claim_at <= $3) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id.0)
        .bind(account)
        .bind(now)
        .fetch_optional(&self.pool)
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
        let mut tx = self.begin().await?;
        // As in insert_message: KEY SHARE on the target orders this against a
        // concurrent enable/disable, so `paused` below is read right.
        sqlx::query(
            "SELECT 1 FROM targets t JOIN messages m ON m.target_id = t.id \
             WHERE m.id = $1 AND m.account = $2 FOR KEY SHARE OF t",
        )
        .bind(id.0)
        .bind(account)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "UPDATE messages m SET state = 'Scheduled', delivery_time = $3, next_attempt_at = $3, claim_at = $3, \
               lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, updated_at = $4, \
               paused = NOT (SELECT enabled FROM targets t WHERE t.id = m.target_id) \
             WHERE id = $1 AND account = $2 AND state IN ('Scheduled', 'DeadLetter') \
               AND (lease_token IS NULL OR claim_at <= $4) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id.0)
        .bind(account)
        .bind(at)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some(row) = row else {
            drop(tx);
            return self.transition_failure(account, id, now).await;
        };
        self.notify_if_soon(&mut tx, at, now).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(Transition::Done(Box::new(row.try_into()?)))
    }

    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> StoreResult<Vec<Claimed>> {
        let token = Uuid::new_v4();
        let rows: Vec<ClaimRow> = sqlx::query_as(
            "WITH due AS ( \
               SELECT id FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND claim_at <= $1 \
               ORDER BY claim_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
             UPDATE messages m SET claim_at = $1 + make_interval(secs => $3::double precision / 1000), \
               lease_token = $4 \
             FROM due, targets t WHERE m.id = due.id AND t.id = m.target_id \
             RETURNING m.id, m.target_id, t.kind, t.config, m.payload, m.delivery_time, m.attempt_count, \
               m.ladder_attempts",
        )
        .bind(now)
        .bind(i64::from(limit))
        .bind(millis_i64(lease))
        .bind(token)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        let mut claimed = Vec::with_capacity(rows.len());
        let (mut bad_ids, mut bad_reasons) = (Vec::new(), Vec::new());
        for r in rows {
            let id = r.id;
            let read = || -> StoreResult<Claimed> {
                Ok(Claimed {
                    id: MessageId(r.id),
                    target: config_from_row(&r.kind, r.config)?,
                    target_id: TargetId::from_trusted(r.target_id),
                    payload: payload_from_bytes(r.payload)?.into_inner(),
                    delivery_time: r.delivery_time,
                    attempt_count: r.attempt_count.max(0) as u32,
                    ladder_attempts: r.ladder_attempts.max(0) as u32,
                    lease_token: token,
                })
            };
            match read() {
                Ok(c) => claimed.push(c),
                Err(e) => {
                    bad_ids.push(id);
                    bad_reasons.push(e.to_string());
                }
            }
        }
        if !bad_ids.is_empty() {
            // A row that cannot be read cannot be delivered: dead-letter it,
            // saying why, rather than let it hold the batch's lease forever.
            tracing::error!(
                count = bad_ids.len(),
                "dead-lettering messages whose stored data is unreadable"
            );
            sqlx::query(
                "UPDATE messages m SET state = 'DeadLetter', dead_lettered_at = $3, next_attempt_at = NULL, \
                   claim_at = NULL, lease_token = NULL, last_error = u.reason, updated_at = $3 \
                 FROM unnest($1::uuid[], $2::text[]) AS u(id, reason) WHERE m.id = u.id AND m.lease_token = $4",
            )
            .bind(&bad_ids)
            .bind(&bad_reasons)
            .bind(now)
            .bind(token)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        }
        Ok(claimed)
    }

    async fn next_due(&self) -> StoreResult<Option<DateTime<Utc>>> {
        let row: (Option<DateTime<Utc>>,) = sqlx::query_as(
            "SELECT min(claim_at) FROM messages WHERE state = 'Scheduled' AND NOT paused",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.0)
    }

    async fn record(&self, results: &[Recorded], now: DateTime<Utc>) -> StoreResult<u64> {
        if results.is_empty() {
            return Ok(0);
        }
        // One row per message for the update…
        let n = results.len();
        let mut ids = Vec::with_capacity(n);
        let mut tokens = Vec::with_capacity(n);
        let mut counts = Vec::with_capacity(n);
        let mut states = Vec::with_capacity(n);
        let mut next_at: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(n);
        let mut ladder = Vec::with_capacity(n);
        let mut finished = Vec::with_capacity(n);
        let mut last_errors: Vec<Option<String>> = Vec::with_capacity(n);
        // …and one row per attempt for the insert.
        let mut a_ids = Vec::with_capacity(n);
        // Attempts belong to the claim that made them: a stale claim's rows
        // never land beside a fresh one's.
        let mut a_tokens = Vec::with_capacity(n);
        let mut a_numbers = Vec::with_capacity(n);
        let mut a_started = Vec::with_capacity(n);
        let mut a_finished = Vec::with_capacity(n);
        let mut a_durations = Vec::with_capacity(n);
        let mut a_outcomes = Vec::with_capacity(n);
        let mut a_codes: Vec<Option<i32>> = Vec::with_capacity(n);
        let mut a_errors: Vec<Option<std::borrow::Cow<'_, str>>> = Vec::with_capacity(n);
        let mut a_bodies: Vec<Option<std::borrow::Cow<'_, str>>> = Vec::with_capacity(n);
        for r in results {
            let last = r.last();
            ids.push(r.id.0);
            tokens.push(r.lease_token);
            counts.push(last.attempt as i32);
            let (state, at) = match r.next {
                Next::Delivered => ("Delivered", None),
                Next::Retry(at) => ("Scheduled", Some(at)),
                Next::DeadLetter => ("DeadLetter", None),
            };
            states.push(state);
            next_at.push(at);
            ladder.push(r.ladder_attempts as i32);
            finished.push(last.finished_at);
            last_errors.push(
                r.attempts
                    .iter()
                    .rev()
                    .find_map(|a| a.error.as_deref().map(|e| storable_text(e).into_owned())),
            );
            for a in &r.attempts {
                a_ids.push(r.id.0);
                a_tokens.push(r.lease_token);
                a_numbers.push(a.attempt as i32);
                a_started.push(a.started_at);
                a_finished.push(a.finished_at);
                a_durations.push(a.duration_ms as i64);
                a_outcomes.push(a.outcome.as_str());
                a_codes.push(a.status_code.map(i32::from));
                a_errors.push(a.error.as_deref().map(storable_text));
                a_bodies.push(a.response_body.as_deref().map(storable_text));
            }
        }
        let recorded = sqlx::query(
            "WITH input AS ( \
               SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[], $5::timestamptz[], \
                 $6::int[], $7::timestamptz[], $8::text[]) \
               AS i(id, token, attempt_count, new_state, next_at, ladder_attempts, finished_at, last_error)), \
             upd AS ( \
               UPDATE messages m SET state = i.new_state, next_attempt_at = i.next_at, claim_at = i.next_at, \
                 lease_token = NULL, attempt_count = GREATEST(m.attempt_count, i.attempt_count), \
                 ladder_attempts = i.ladder_attempts, \
                 delivered_at = CASE WHEN i.new_state = 'Delivered' THEN i.finished_at ELSE m.delivered_at END, \
                 dead_lettered_at = CASE WHEN i.new_state = 'DeadLetter' THEN i.finished_at \
                   ELSE m.dead_lettered_at END, \
                 last_error = COALESCE(i.last_error, m.last_error), \
                 updated_at = $18 \
               FROM input i WHERE m.id = i.id AND m.lease_token = i.token AND m.state = 'Scheduled' \
               RETURNING m.id, i.token) \
             INSERT INTO attempts (message_id, attempt, started_at, finished_at, duration_ms, outcome, \
               status_code, error, response_body) \
             SELECT a.message_id, a.attempt, a.started_at, a.finished_at, a.duration_ms, a.outcome, \
               a.status_code, a.error, a.response_body \
             FROM unnest($9::uuid[], $10::int[], $11::timestamptz[], $12::timestamptz[], \
               $13::bigint[], $14::text[], $15::int[], $16::text[], $17::text[], $19::uuid[]) \
               AS a(message_id, attempt, started_at, finished_at, duration_ms, outcome, status_code, error, \
                 response_body, token) \
             WHERE (a.message_id, a.token) IN (SELECT id, token FROM upd) \
             ON CONFLICT (message_id, attempt) DO NOTHING",
        )
        .bind(&ids)
        .bind(&tokens)
        .bind(&counts)
        .bind(&states)
        .bind(&next_at)
        .bind(&ladder)
        .bind(&finished)
        .bind(&last_errors)
        .bind(&a_ids)
        .bind(&a_numbers)
        .bind(&a_started)
        .bind(&a_finished)
        .bind(&a_durations)
        .bind(&a_outcomes)
        .bind(&a_codes)
        .bind(&a_errors)
        .bind(&a_bodies)
        .bind(now)
        .bind(&a_tokens)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(recorded)
    }

    async fn purge_expired(&self, c: &Cutoffs, batch: u32) -> StoreResult<Purged> {
        let batch = i64::from(batch);
        let mut messages = 0;
        for (state, column, cutoff) in [
            ("Delivered", "delivered_at", c.delivered_before),
            ("Cancelled", "cancelled_at", c.cancelled_before),
            ("DeadLetter", "dead_lettered_at", c.dead_letters_before),
        ] {
            messages += sqlx::query(&format!(
                "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE state = '{state}' \
                 AND {column} < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
            ))
            .bind(cutoff)
            .bind(batch)
            .execute(&self.pool)
            .await
            .map_err(map_err)?
            .rows_affected();
        }
        let attempts = sqlx::query(
            "DELETE FROM attempts WHERE (message_id, attempt) IN (SELECT message_id, attempt FROM attempts \
             WHERE outcome <> 'Success' AND finished_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(c.failed_attempts_before)
        .bind(batch)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected();
        let idempotency_keys = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (account, key) IN (SELECT account, key FROM idempotency_keys \
             WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(c.idempotency_before)
        .bind(batch)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(Purged {
            messages,
            attempts,
            idempotency_keys,
        })
    }
}
