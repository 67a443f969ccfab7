//! Messages in the postgres store: scheduling (with idempotency keys),
//! cancel and reschedule.

use chrono::{DateTime, Utc};

use super::{map_err, portal::insert_event, rows::*, PgStore};
use crate::{
    domain::message::{Message, State},
    store::{portal::EventKind, *},
};

/// The state a message is in, locked until the transaction ends.
async fn state_for_update(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    account: &str,
    id: &MessageId,
) -> StoreResult<Option<State>> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT state FROM messages WHERE id = $1 AND account = $2 FOR UPDATE")
            .bind(id.0)
            .bind(account)
            .fetch_optional(&mut **tx)
            .await
            .map_err(map_err)?;
    row.map(|(s,)| state_from_str(&s)).transpose()
}

impl PgStore {
    pub(super) async fn insert_one(
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

    pub(super) async fn insert_many(
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

    pub(super) async fn cancel_message(
        &self,
        account: &str,
        id: &MessageId,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        let mut tx = self.begin().await?;
        let from = state_for_update(&mut tx, account, id).await?;
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
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        match (row, from) {
            (Some(row), Some(from)) => {
                insert_event(&mut tx, id, EventKind::Cancelled, from, None, now).await?;
                tx.commit().await.map_err(map_err)?;
                Ok(Transition::Done(Box::new(row.try_into()?)))
            }
            _ => {
                drop(tx);
                self.transition_failure(account, id, now).await
            }
        }
    }

    pub(super) async fn reschedule_message(
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
        let from = state_for_update(&mut tx, account, id).await?;
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
        let (Some(row), Some(from)) = (row, from) else {
            drop(tx);
            return self.transition_failure(account, id, now).await;
        };
        insert_event(&mut tx, id, EventKind::Rescheduled, from, Some(at), now).await?;
        self.notify_if_soon(&mut tx, at, now).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(Transition::Done(Box::new(row.try_into()?)))
    }
}
