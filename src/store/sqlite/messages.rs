//! Messages in the SQLite store: scheduling (one, a batch with idempotency
//! keys, many) and reading messages and their attempts.

use async_trait::async_trait;

use super::{map_err, ordering, rows::*, SqliteStore};
use crate::{
    domain::{ids::AccountId, message::Message},
    store::{
        ordering::distinct_keys,
        sql::{self, Backend},
        *,
    },
};

#[async_trait]
impl MessageStore for SqliteStore {
    async fn insert_message(
        &self,
        m: &Message,
        idem: Option<&IdempotencyInput>,
    ) -> StoreResult<InsertOutcome> {
        let mut tx = self.begin().await?;
        let outcome = insert_in(&mut tx, m, idem).await?;
        if matches!(outcome, InsertOutcome::Created(_)) {
            tx.commit().await.map_err(map_err)?;
        }
        Ok(outcome)
    }

    /// Each item as `insert_message` would, in one transaction. `insert_in`
    /// writes nothing for an item it does not create, so no item needs a
    /// savepoint of its own; items without a key go in many rows a statement.
    async fn insert_batch(&self, items: &[BatchItem]) -> StoreResult<Vec<InsertOutcome>> {
        let mut tx = self.begin().await?;
        let plain: Vec<&Message> = items
            .iter()
            .filter(|i| i.idempotency.is_none())
            .map(|i| &i.message)
            .collect();
        let mut created = std::collections::HashSet::new();
        for chunk in plain.chunks(ROWS_PER_INSERT) {
            created.extend(insert_rows(&mut tx, None, chunk).await?);
        }
        let mut outcomes = Vec::with_capacity(items.len());
        for item in items {
            let Some(idem) = &item.idempotency else {
                outcomes.push(if created.contains(&id_text(&item.message.id)) {
                    InsertOutcome::Created(Box::new(item.message.clone()))
                } else {
                    InsertOutcome::UnknownTarget
                });
                continue;
            };
            outcomes.push(insert_in(&mut tx, &item.message, Some(idem)).await?);
        }
        tx.commit().await.map_err(map_err)?;
        Ok(outcomes)
    }

    async fn insert_messages(
        &self,
        account: &AccountId,
        messages: &[Message],
    ) -> StoreResult<Vec<MessageId>> {
        let mut tx = self.begin().await?;
        let all: Vec<&Message> = messages.iter().collect();
        let mut created = std::collections::HashSet::new();
        for chunk in all.chunks(ROWS_PER_INSERT) {
            created.extend(insert_rows(&mut tx, Some(account), chunk).await?);
        }
        let inserted: Vec<MessageId> = messages
            .iter()
            .filter(|m| created.contains(&id_text(&m.id)))
            .map(|m| m.id)
            .collect();
        tx.commit().await.map_err(map_err)?;
        Ok(inserted)
    }

    async fn get_message(
        &self,
        account: &AccountId,
        id: &MessageId,
    ) -> StoreResult<Option<Message>> {
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
        account: &AccountId,
        filter: &MessageFilter,
        before: Option<&MessageId>,
        limit: u32,
    ) -> StoreResult<Vec<Message>> {
        sql::filter::list_messages(self.db(), account, filter, before, limit).await
    }

    async fn list_attempts(
        &self,
        account: &AccountId,
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
}

/// Messages inserted by one statement; SQLite allows 32,766 bound values.
const ROWS_PER_INSERT: usize = 500;

/// Messages in one statement, each if its target exists in its account (or
/// in `account`, when given), paused when the target is disabled: the ids of
/// those inserted.
async fn insert_rows(
    tx: &mut sqlx::SqliteConnection,
    account: Option<&AccountId>,
    messages: &[&Message],
) -> StoreResult<Vec<String>> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let mut q = sqlx::QueryBuilder::new(
        "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, \
         next_attempt_at, claim_at, paused, gated, pull, created_at, updated_at, ordering_key, held) \
         SELECT v.column1, v.column2, t.id, 'Scheduled', v.column4, v.column5, v.column5, v.column5, \
         NOT t.enabled, t.gated, t.kind = 'pull', v.column6, v.column6, v.column7, v.column7 IS NOT NULL FROM (",
    );
    q.push_values(messages, |mut row, m| {
        row.push_bind(id_text(&m.id))
            .push_bind(account.unwrap_or(&m.account).as_str())
            .push_bind(m.target_id.as_str())
            .push_bind(m.payload.as_str())
            .push_bind(ms(m.delivery_time))
            .push_bind(ms(m.created_at))
            .push_bind(m.ordering_key.as_deref());
    });
    q.push(") AS v JOIN targets t ON t.id = v.column3 AND t.account = v.column2 RETURNING id");
    let rows: Vec<(String,)> = q
        .build_query_as()
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
    // A message with an orderingKey went in held; it becomes its key's head
    // if it is the first of the key's order.
    let keys = distinct_keys(
        messages
            .iter()
            .filter_map(|m| m.ordering_key.as_deref().map(|k| (m.target_id.as_str(), k))),
    );
    ordering::settle_keys(&mut *tx, &keys).await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// One message and its key on `tx`. Nothing is written unless the outcome is
/// `Created`: the message goes in first, and its key only once it is in.
async fn insert_in(
    tx: &mut sqlx::SqliteConnection,
    m: &Message,
    idem: Option<&IdempotencyInput>,
) -> StoreResult<InsertOutcome> {
    {
        if let Some(idem) = idem {
            let expired_before = key_live_since(m, idem);
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
                    return replayed(status, &response);
                }
            }
        }
        if insert_rows(&mut *tx, None, &[m]).await?.is_empty() {
            return Ok(InsertOutcome::UnknownTarget);
        }
        if let Some(idem) = idem {
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
        Ok(InsertOutcome::Created(Box::new(m.clone())))
    }
}
