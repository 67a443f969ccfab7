//! Manual actions in the SQLite store: cancel, reschedule and redrive,
//! each recorded in the message's history.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, ordering, rows::*, SqliteStore};
use crate::{
    domain::message::State,
    store::{portal::EventKind, *},
};

/// The state a message is in (the single writer connection keeps it so).
async fn state_of(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    account: &str,
    id: &MessageId,
) -> StoreResult<Option<State>> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT state FROM messages WHERE id = ? AND account = ?")
            .bind(id_text(id))
            .bind(account)
            .fetch_optional(&mut **tx)
            .await
            .map_err(map_err)?;
    row.map(|(s,)| state_from_str(&s)).transpose()
}

#[async_trait]
impl ActionStore for SqliteStore {
    async fn cancel_held(
        &self,
        account: &str,
        id: &MessageId,
        now: DateTime<Utc>,
        held: Option<uuid::Uuid>,
    ) -> StoreResult<Transition> {
        let mut tx = self.begin().await?;
        let from = state_of(&mut tx, account, id).await?;
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "UPDATE messages SET state = 'Cancelled', cancelled_at = ?3, next_attempt_at = NULL, claim_at = NULL, \
               lease_token = NULL, held = 0, updated_at = ?3 \
             WHERE id = ?1 AND account = ?2 AND state IN ('Scheduled', 'DeadLetter') \
               AND (lease_token IS NULL OR claim_at <= ?3 OR lease_token = ?4) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id_text(id))
        .bind(account)
        .bind(ms(now))
        .bind(held.map(|t| t.to_string()))
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        match (row, from) {
            (Some(row), Some(from)) => {
                insert_event(&mut tx, id, EventKind::Cancelled, from, None, now).await?;
                // The next message of its key goes now.
                let keys = ordering::keys_of(&mut tx, &[id_text(id)]).await?;
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
        held: Option<uuid::Uuid>,
    ) -> StoreResult<Transition> {
        let mut tx = self.begin().await?;
        let from = state_of(&mut tx, account, id).await?;
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "UPDATE messages SET state = 'Scheduled', delivery_time = ?3, next_attempt_at = ?3, claim_at = ?3, \
               lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, updated_at = ?4, \
               paused = NOT (SELECT enabled FROM targets t WHERE t.id = messages.target_id), \
               gated = (SELECT gated FROM targets t WHERE t.id = messages.target_id), \
               held = ordering_key IS NOT NULL \
             WHERE id = ?1 AND account = ?2 AND state IN ('Scheduled', 'DeadLetter') \
               AND (lease_token IS NULL OR claim_at <= ?4 OR lease_token = ?5) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id_text(id))
        .bind(account)
        .bind(ms(at))
        .bind(ms(now))
        .bind(held.map(|t| t.to_string()))
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        match (row, from) {
            (Some(row), Some(from)) => {
                insert_event(&mut tx, id, EventKind::Rescheduled, from, Some(at), now).await?;
                // Its new place in its key's order.
                let keys = ordering::keys_of(&mut tx, &[id_text(id)]).await?;
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
    store: &SqliteStore,
    account: &str,
    id: &MessageId,
    now: DateTime<Utc>,
) -> StoreResult<Transition> {
    let row: Option<(String, Option<String>, Option<i64>)> = sqlx::query_as(
        "SELECT state, lease_token, claim_at FROM messages WHERE id = ? AND account = ?",
    )
    .bind(id_text(id))
    .bind(account)
    .fetch_optional(&store.writer)
    .await
    .map_err(map_err)?;
    let found = match row {
        None => None,
        Some((state, token, claim_at)) => {
            Some((state_from_str(&state)?, token.and(claim_at).map(from_ms)))
        }
    };
    Ok(refused_transition(found, now))
}

/// Records a manual action in the message's history, inside the action's transaction.
async fn insert_event(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    id: &MessageId,
    kind: EventKind,
    from: State,
    delivery_time: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time, account) \
         SELECT ?1, ?2, ?3, ?4, ?5, account FROM messages WHERE id = ?1",
    )
    .bind(id_text(id))
    .bind(ms(now))
    .bind(kind.as_str())
    .bind(from.as_str())
    .bind(delivery_time.map(ms))
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}
