//! Manual actions in the PostgreSQL store: cancel, reschedule and redrive,
//! each recorded in the message's history.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{map_err, ordering, rows::*, PgStore};
use crate::{
    domain::message::State,
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

#[async_trait]
impl ActionStore for PgStore {
    async fn cancel_held(
        &self,
        account: &str,
        id: &MessageId,
        now: DateTime<Utc>,
        held: Option<Uuid>,
    ) -> StoreResult<Transition> {
        let mut tx = self.begin().await?;
        let keys = ordering::keys_of(&mut tx, &[id.0]).await?;
        ordering::lock_keys(&mut tx, &keys).await?;
        let from = state_for_update(&mut tx, account, id).await?;
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "UPDATE messages SET state = 'Cancelled', cancelled_at = $3, next_attempt_at = NULL, claim_at = NULL, \
               lease_token = NULL, held = false, updated_at = $3 \
             WHERE id = $1 AND account = $2 AND state IN ('Scheduled', 'DeadLetter') \
               AND (lease_token IS NULL OR claim_at <= $3 OR lease_token = $4) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id.0)
        .bind(account)
        .bind(now)
        .bind(held)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        match (row, from) {
            (Some(row), Some(from)) => {
                insert_event(&mut tx, id, EventKind::Cancelled, from, None, now).await?;
                // The next message of its key goes now.
                ordering::settle_keys(&mut tx, &keys).await?;
                tx.commit().await.map_err(map_err)?;
                Ok(Transition::Done(Box::new(row.try_into()?)))
            }
            _ => {
                drop(tx);
                refusal(self, account, id, now).await
            }
        }
    }

    async fn reschedule_held(
        &self,
        account: &str,
        id: &MessageId,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        held: Option<Uuid>,
    ) -> StoreResult<Transition> {
        let mut tx = self.begin().await?;
        // The key first (as every writer of a key locks it), then the target.
        let keys = ordering::keys_of(&mut tx, &[id.0]).await?;
        ordering::lock_keys(&mut tx, &keys).await?;
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
               paused = NOT (SELECT enabled FROM targets t WHERE t.id = m.target_id), \
               gated = (SELECT gated FROM targets t WHERE t.id = m.target_id), \
               held = m.ordering_key IS NOT NULL \
             WHERE id = $1 AND account = $2 AND state IN ('Scheduled', 'DeadLetter') \
               AND (lease_token IS NULL OR claim_at <= $4 OR lease_token = $5) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id.0)
        .bind(account)
        .bind(at)
        .bind(now)
        .bind(held)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let (Some(row), Some(from)) = (row, from) else {
            drop(tx);
            return refusal(self, account, id, now).await;
        };
        insert_event(&mut tx, id, EventKind::Rescheduled, from, Some(at), now).await?;
        // Its new place in its key's order.
        ordering::settle_keys(&mut tx, &keys).await?;
        self.notify_if_soon(&mut tx, at, now).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(Transition::Done(Box::new(row.try_into()?)))
    }

    async fn bulk_count(
        &self,
        account: &str,
        bulk: &Bulk,
        cap: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        self.count_bulk(account, bulk, cap, now).await
    }

    async fn bulk_batch(
        &self,
        account: &str,
        bulk: &Bulk,
        after: Option<&MessageId>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<BulkBatch> {
        self.apply_bulk(account, bulk, after, limit, now).await
    }
}

/// What a cancel or reschedule that changed nothing answers, from the
/// message as it is now (read after the action's transaction ended).
async fn refusal(
    store: &PgStore,
    account: &str,
    id: &MessageId,
    now: DateTime<Utc>,
) -> StoreResult<Transition> {
    let row: Option<(String, Option<Uuid>, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT state, lease_token, claim_at FROM messages WHERE id = $1 AND account = $2",
    )
    .bind(id.0)
    .bind(account)
    .fetch_optional(&store.pool)
    .await
    .map_err(map_err)?;
    let found = match row {
        None => None,
        Some((state, token, claim_at)) => Some((state_from_str(&state)?, token.and(claim_at))),
    };
    Ok(refused_transition(found, now))
}

/// Records a manual action in the message's history, inside the action's transaction.
async fn insert_event(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    id: &MessageId,
    kind: EventKind,
    from: State,
    delivery_time: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time, account) \
         SELECT $1, $2, $3, $4, $5, account FROM messages WHERE id = $1",
    )
    .bind(id.0)
    .bind(now)
    .bind(kind.as_str())
    .bind(from.as_str())
    .bind(delivery_time)
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}
