//! The sweeper's and retention's side of the SQLite store: claims (its one
//! writer serialises them), recording, purges.

use std::{collections::HashMap, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{QueryBuilder, Sqlite};
use uuid::Uuid;

use super::{map_err, ordering, rows::*, SqliteStore};
use crate::{
    domain::{
        ids::{MessageId, TargetId},
        target::TargetConfig,
    },
    store::{sql::dead::dead_letter_unreadable, *},
};

#[async_trait]
impl DeliveryStore for SqliteStore {
    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> StoreResult<Vec<Claimed>> {
        self.claim(now, limit, lease, None).await
    }

    async fn claim_due_shared(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: &ClaimShares,
    ) -> StoreResult<Vec<Claimed>> {
        self.claim(now, limit, lease, Some(shares)).await
    }

    async fn claim_ahead(
        &self,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        full: &[TargetId],
        fenced: &[AccountId],
    ) -> StoreResult<Vec<Claimed>> {
        if limit == 0 || until <= now {
            return Ok(Vec::new());
        }
        let fenced: Vec<&str> = fenced.iter().map(AccountId::as_str).collect();
        let token = self.lease_token();
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 4);
        let full: Vec<&str> = full.iter().map(TargetId::as_str).collect();
        let mut tx = self.begin().await?;
        // The lease runs from the due time (see the PostgreSQL store).
        let rows: Vec<ClaimRow> = sqlx::query_as(
            "UPDATE messages SET claim_at = claim_at + ?2, lease_token = ?3 WHERE id IN ( \
               SELECT id FROM ( \
                 SELECT id, claim_at, row_number() OVER (PARTITION BY target_id ORDER BY claim_at) AS rn \
                 FROM (SELECT id, target_id, claim_at FROM messages \
                   WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0 AND pull = 0 AND lease_token IS NULL \
                     AND ordering_key IS NULL AND claim_at > ?1 AND claim_at <= ?5 \
                     AND target_id NOT IN (SELECT value FROM json_each(?6)) \
                     AND account NOT IN (SELECT value FROM json_each(?8)) \
                   ORDER BY claim_at LIMIT ?7)) \
               ORDER BY rn, claim_at LIMIT ?4) \
             RETURNING id, account, target_id, payload, delivery_time, attempt_count, \
               ladder_attempts, updated_at AS scheduled_at, gated, ordering_key, event_id, event_type, claim_at - ?2 AS due_at",
        )
        .bind(ms(now))
        .bind(lease_ms)
        .bind(token.to_string())
        .bind(i64::from(limit))
        .bind(ms(until))
        .bind(serde_json::to_string(&full).expect("ids serialize"))
        .bind(i64::from(limit.saturating_mul(CLAIM_WINDOW)))
        .bind(serde_json::to_string(&fenced).expect("ids serialize"))
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        self.open_claimed(tx, rows, token, now).await
    }

    async fn next_due_except(
        &self,
        full: &[TargetId],
        full_accounts: &[AccountId],
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let full: Vec<&str> = full.iter().map(TargetId::as_str).collect();
        let full_accounts: Vec<&str> = full_accounts.iter().map(AccountId::as_str).collect();
        let (next,): (Option<i64>,) = sqlx::query_as(
            "SELECT min(claim_at) FROM messages WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0 AND pull = 0 \
               AND target_id NOT IN (SELECT value FROM json_each(?1)) \
               AND account NOT IN (SELECT value FROM json_each(?2))",
        )
        .bind(serde_json::to_string(&full).expect("ids serialize"))
        .bind(serde_json::to_string(&full_accounts).expect("ids serialize"))
        .fetch_one(&self.reader)
        .await
        .map_err(map_err)?;
        Ok(opt_from_ms(next))
    }

    async fn next_due(&self) -> StoreResult<Option<DateTime<Utc>>> {
        let (next,): (Option<i64>,) = sqlx::query_as(
            "SELECT min(claim_at) FROM messages WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0 AND pull = 0",
        )
        .fetch_one(&self.reader)
        .await
        .map_err(map_err)?;
        Ok(opt_from_ms(next))
    }

    async fn record(&self, results: &[Recorded], now: DateTime<Utc>) -> StoreResult<u64> {
        self.record_results(results, now).await
    }

    async fn release(&self, leases: &[(MessageId, Uuid)]) -> StoreResult<u64> {
        if leases.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin().await?;
        let mut released = 0;
        for (id, token) in leases {
            released += sqlx::query(
                "UPDATE messages SET claim_at = COALESCE(next_attempt_at, delivery_time), lease_token = NULL \
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'Scheduled'",
            )
            .bind(id_text(id))
            .bind(token.to_string())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        }
        tx.commit().await.map_err(map_err)?;
        Ok(released)
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
             WHERE outcome NOT IN ('Success', 'Received') AND finished_at < ? LIMIT ?)",
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
            events: 0,
        })
    }
}

impl SqliteStore {
    /// Claims due messages, oldest first, or with `shares` round robin over
    /// the targets among the oldest due (as the PostgreSQL store does).
    async fn claim(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: Option<&ClaimShares>,
    ) -> StoreResult<Vec<Claimed>> {
        let token = self.lease_token();
        let lease_end = ms(now) + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        let mut tx = self.begin().await?;
        // The one writer serialises claims: no two callers get the same row.
        let update = |pick: &str| {
            format!(
                "UPDATE messages SET claim_at = ?2, lease_token = ?3 WHERE id IN ({pick}) \
                 RETURNING id, account, target_id, payload, delivery_time, attempt_count, \
                   ladder_attempts, updated_at AS scheduled_at, gated, ordering_key, event_id, event_type"
            )
        };
        let rows: Vec<ClaimRow> = match shares {
            None => sqlx::query_as(&update(
                "SELECT id FROM messages WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0 AND pull = 0 AND claim_at <= ?1 \
                 ORDER BY claim_at LIMIT ?4",
            ))
            .bind(ms(now))
            .bind(lease_end)
            .bind(token.to_string())
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?,
            Some(shares) => {
                let full: Vec<&str> = shares.full().map(TargetId::as_str).collect();
                let full_accounts: Vec<&str> =
                    shares.full_accounts().map(AccountId::as_str).collect();
                let room: serde_json::Map<String, serde_json::Value> = shares
                    .room
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(t, n)| (t.as_str().to_string(), (*n).into()))
                    .collect();
                let account_room: serde_json::Map<String, serde_json::Value> = shares
                    .accounts
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(a, n)| (a.as_str().to_string(), (*n).into()))
                    .collect();
                // Round robin over the accounts (`an`), and within an
                // account over its targets (`rn`), as the PostgreSQL claim.
                sqlx::query_as(&update(
                    "WITH oldest AS MATERIALIZED (SELECT id, account, target_id, claim_at FROM messages \
                       WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0 AND pull = 0 AND claim_at <= ?1 \
                         AND target_id NOT IN (SELECT value FROM json_each(?5)) \
                         AND account NOT IN (SELECT value FROM json_each(?9)) \
                       ORDER BY claim_at LIMIT ?7) \
                     SELECT id FROM ( \
                       SELECT k.id, k.claim_at, COALESCE(a.value, ?10) AS aroom, \
                         row_number() OVER (PARTITION BY k.account ORDER BY k.rn, k.claim_at) AS an \
                       FROM ( \
                         SELECT c.id, c.account, c.claim_at, COALESCE(r.value, ?6) AS room, \
                           row_number() OVER (PARTITION BY c.target_id ORDER BY c.claim_at) AS rn \
                         FROM (SELECT * FROM oldest \
                               UNION \
                               SELECT * FROM (SELECT id, account, target_id, claim_at FROM messages \
                               WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0 AND pull = 0 AND claim_at <= ?1 \
                                 AND target_id NOT IN (SELECT value FROM json_each(?5)) \
                                 AND account NOT IN (SELECT value FROM json_each(?9)) \
                                 AND claim_at > (SELECT max(claim_at) FROM oldest) \
                               ORDER BY claim_at LIMIT ?4) \
                               UNION \
                               SELECT * FROM (SELECT id, account, target_id, claim_at FROM messages \
                               WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0 AND pull = 0 AND claim_at <= ?1 \
                                 AND target_id NOT IN (SELECT value FROM json_each(?5)) \
                                 AND account NOT IN (SELECT value FROM json_each(?9)) \
                               ORDER BY claim_at DESC LIMIT ?4)) c \
                         LEFT JOIN json_each(?8) r ON r.key = c.target_id) k \
                       LEFT JOIN json_each(?11) a ON a.key = k.account \
                       WHERE k.rn <= k.room) \
                     WHERE an <= aroom ORDER BY an, claim_at LIMIT ?4",
                ))
                .bind(ms(now))
                .bind(lease_end)
                .bind(token.to_string())
                .bind(i64::from(limit))
                .bind(serde_json::to_string(&full).expect("ids serialize"))
                .bind(i64::from(shares.per_target))
                .bind(i64::from(limit.saturating_mul(CLAIM_WINDOW)))
                .bind(serde_json::Value::Object(room).to_string())
                .bind(serde_json::to_string(&full_accounts).expect("ids serialize"))
                .bind(i64::from(shares.per_account))
                .bind(serde_json::Value::Object(account_room).to_string())
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?
            }
        };
        self.open_claimed(tx, rows, token, now).await
    }

    /// Opens claimed rows' targets and hands out the messages, oldest due
    /// first, and commits the claim's transaction; a row that cannot be read
    /// is dead-lettered, one sealed under a key this instance lacks stays
    /// leased.
    pub(super) async fn open_claimed(
        &self,
        mut tx: sqlx::Transaction<'static, Sqlite>,
        rows: Vec<ClaimRow>,
        token: Uuid,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Claimed>> {
        let mut targets: HashMap<String, StoreResult<Arc<TargetConfig>>> = HashMap::new();
        if !rows.is_empty() {
            let mut ids: Vec<&str> = rows.iter().map(|r| r.target_id.as_str()).collect();
            ids.sort_unstable();
            ids.dedup();
            let mut q = QueryBuilder::<Sqlite>::new(
                "SELECT id, kind, config, secrets_key_id, sealed_secrets FROM targets WHERE id IN (",
            );
            let mut list = q.separated(", ");
            for id in &ids {
                list.push_bind(*id);
            }
            q.push(")");
            type Found = (String, String, String, Option<String>, Option<Vec<u8>>);
            let found: Vec<Found> = q
                .build_query_as()
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            for (id, kind, config, key_id, sealed) in found {
                let config = config_from_row(
                    self.sealer(),
                    &id,
                    &kind,
                    &config,
                    key_id.as_deref(),
                    sealed.as_deref(),
                )
                .map(Arc::new);
                targets.insert(id, config);
            }
        }
        let mut claimed: Vec<(i64, Claimed)> = Vec::with_capacity(rows.len());
        let mut unopened: Vec<String> = Vec::new();
        let mut unreadable: Vec<(Uuid, String)> = Vec::new();
        let mut unnamed: Vec<(String, String)> = Vec::new();
        for r in rows {
            let read = match targets.get(&r.target_id) {
                Some(Ok(target)) => parse_id(&r.id).and_then(|id| {
                    let event = r.event_id.as_deref().map(parse_event_id).transpose()?;
                    Ok((id, event, target.clone()))
                }),
                // Sealed under a key this instance lacks: leave the message
                // leased; it is delivered once the key is configured.
                Some(Err(e)) if e.is_unknown_key() => {
                    unopened.push(r.target_id);
                    continue;
                }
                Some(Err(e)) => Err(StoreError::Corrupt(error_chain(e))),
                None => Err(StoreError::Corrupt(format!(
                    "message without target {}",
                    r.target_id
                ))),
            };
            match read {
                Ok((id, event_id, target)) => claimed.push((
                    r.delivery_time,
                    Claimed {
                        id,
                        account: AccountId::from_trusted(r.account),
                        target_id: TargetId::from_trusted(r.target_id),
                        target,
                        payload: r.payload,
                        delivery_time: from_ms(r.delivery_time),
                        scheduled_at: from_ms(r.scheduled_at),
                        attempt_count: r.attempt_count.max(0) as u32,
                        ladder_attempts: r.ladder_attempts.max(0) as u32,
                        lease_token: token,
                        gated: r.gated,
                        ordering_key: r.ordering_key,
                        event_id,
                        event_type: r.event_type,
                        due_at: r.due_at.map(from_ms),
                    },
                )),
                Err(e) => match Uuid::parse_str(&r.id) {
                    Ok(id) => unreadable.push((id, e.to_string())),
                    // Not even its id reads: the row is ended by its text.
                    Err(_) => unnamed.push((r.id, e.to_string())),
                },
            }
        }
        report_left_leased(unopened);
        for (id, reason) in unnamed {
            tracing::error!(message_id = %id, error = %reason, "dead-lettering a message whose id is unreadable");
            sqlx::query(
                "UPDATE messages SET state = 'DeadLetter', dead_lettered_at = ?2, next_attempt_at = NULL, \
                   claim_at = NULL, lease_token = NULL, last_error = ?3, updated_at = ?2 WHERE id = ?1",
            )
            .bind(&id)
            .bind(ms(now))
            .bind(reason)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
            // Entered in its history and its key handed on, as every dead letter.
            sqlx::query(
                "INSERT INTO message_events (message_id, at, kind, from_state, account, detail) \
                 SELECT id, dead_lettered_at, 'DeadLettered', 'Scheduled', account, last_error \
                 FROM messages WHERE id = ?",
            )
            .bind(&id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
            let keys = ordering::keys_of(&mut tx, std::slice::from_ref(&id)).await?;
            ordering::settle_keys(&mut tx, &keys).await?;
        }
        let mut tx = crate::store::sql::Tx::Sqlite(tx);
        dead_letter_unreadable(self, &mut tx, &unreadable, token, now).await?;
        tx.commit().await?;
        // RETURNING has no order; hand out the oldest due first.
        claimed.sort_by_key(|(due, _)| *due);
        Ok(claimed.into_iter().map(|(_, c)| c).collect())
    }
}
