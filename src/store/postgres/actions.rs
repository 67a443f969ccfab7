//! Manual actions in the PostgreSQL store: cancel, reschedule and redrive,
//! each recorded in the message's history.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{map_err, rows::*, PgStore};
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
    async fn cancel(
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
                refusal(self, account, id, now).await
            }
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
            return refusal(self, account, id, now).await;
        };
        insert_event(&mut tx, id, EventKind::Rescheduled, from, Some(at), now).await?;
        self.notify_if_soon(&mut tx, at, now).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(Transition::Done(Box::new(row.try_into()?)))
    }

    /// Reschedules the dead letters that match, all in one statement.
    async fn redrive(
        &self,
        account: &str,
        f: &MessageFilter,
        ids: Option<&[MessageId]>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let ids: Option<Vec<uuid::Uuid>> = ids.map(|ids| ids.iter().map(|m| m.0).collect());
        let mut tx = self.begin().await?;
        // As in reschedule: KEY SHARE orders this against enable/disable, so `paused` is right.
        sqlx::query(
            "SELECT 1 FROM targets WHERE account = $1 AND ($2::text IS NULL OR id = $2) FOR KEY SHARE",
        )
        .bind(account)
        .bind(f.target_id.as_ref().map(|t| t.as_str()))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        let moved = sqlx::query(
            "WITH moved AS ( \
               UPDATE messages m SET state = 'Scheduled', delivery_time = $6, next_attempt_at = $6, \
                 claim_at = $6, lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, \
                 updated_at = $7, paused = NOT t.enabled \
               FROM targets t \
               WHERE t.id = m.target_id AND m.account = $1 AND m.state = 'DeadLetter' \
                 AND ($2::text IS NULL OR m.target_id = $2) \
                 AND ($3::uuid[] IS NULL OR m.id = ANY($3)) \
                 AND ($4::timestamptz IS NULL OR m.delivery_time >= $4) \
                 AND ($5::timestamptz IS NULL OR m.delivery_time < $5) \
               RETURNING m.id) \
             INSERT INTO message_events (message_id, at, kind, from_state, delivery_time) \
             SELECT id, $7, 'Rescheduled', 'DeadLetter', $6 FROM moved",
        )
        .bind(account)
        .bind(f.target_id.as_ref().map(|t| t.as_str()))
        .bind(ids)
        .bind(f.delivery_from)
        .bind(f.delivery_to)
        .bind(at)
        .bind(now)
        .persistent(false)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if moved > 0 {
            self.notify_if_soon(&mut tx, at, now).await?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(moved)
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
        "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time) VALUES ($1, $2, $3, $4, $5)",
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
