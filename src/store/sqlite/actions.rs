//! Manual actions in the SQLite store: cancel, reschedule and redrive,
//! each recorded in the message's history.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, rows::*, SqliteStore};
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
    async fn cancel(
        &self,
        account: &str,
        id: &MessageId,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        let mut tx = self.begin().await?;
        let from = state_of(&mut tx, account, id).await?;
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
        let from = state_of(&mut tx, account, id).await?;
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
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        match (row, from) {
            (Some(row), Some(from)) => {
                insert_event(&mut tx, id, EventKind::Rescheduled, from, Some(at), now).await?;
                tx.commit().await.map_err(map_err)?;
                Ok(Transition::Done(Box::new(row.try_into()?)))
            }
            _ => {
                drop(tx);
                refusal(self, account, id, now).await
            }
        }
    }

    /// Reschedules the dead letters that match in one transaction.
    async fn redrive(
        &self,
        account: &str,
        f: &MessageFilter,
        ids: Option<&[MessageId]>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let ids = ids.map(|ids| {
            serde_json::Value::from(ids.iter().map(id_text).collect::<Vec<_>>()).to_string()
        });
        let mut tx = self.begin().await?;
        let moved: Vec<(String,)> = sqlx::query_as(
            "UPDATE messages SET state = 'Scheduled', delivery_time = ?6, next_attempt_at = ?6, \
               claim_at = ?6, lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, \
               updated_at = ?7, paused = NOT (SELECT enabled FROM targets t WHERE t.id = messages.target_id) \
             WHERE account = ?1 AND state = 'DeadLetter' \
               AND (?2 IS NULL OR target_id = ?2) \
               AND (?3 IS NULL OR id IN (SELECT value FROM json_each(?3))) \
               AND (?4 IS NULL OR delivery_time >= ?4) AND (?5 IS NULL OR delivery_time < ?5) \
             RETURNING id",
        )
        .bind(account)
        .bind(f.target_id.as_ref().map(|t| t.as_str()))
        .bind(ids)
        .bind(f.delivery_from.map(ms))
        .bind(f.delivery_to.map(ms))
        .bind(ms(at))
        .bind(ms(now))
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        for (id,) in &moved {
            sqlx::query(
                "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time) \
                 VALUES (?, ?, 'Rescheduled', 'DeadLetter', ?)",
            )
            .bind(id)
            .bind(ms(now))
            .bind(ms(at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(moved.len() as u64)
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
        "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time) VALUES (?, ?, ?, ?, ?)",
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
