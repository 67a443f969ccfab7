//! Manual actions, once for both databases: cancel, reschedule and redrive,
//! each recorded in the message's history. The message's ordering key is
//! locked before any row (PostgreSQL's advisory lock; nothing under
//! SQLite's one writer) and its row is read `FOR UPDATE` where rows are
//! locked; the bulk actions are each backend's own (`Own`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    own::Own,
    rows::{MessageRow, MESSAGE_COLUMNS},
    At, Tx, Uid,
};
use crate::{
    domain::{
        ids::{AccountId, MessageId},
        message::State,
    },
    store::{
        portal::EventKind, refused_transition, state_from_str, ActionStore, Bulk, BulkBatch,
        StoreResult, Transition,
    },
};

/// The state a message is in, its row locked until the transaction ends
/// where rows are locked (SQLite's one writer keeps it so).
async fn state_for_update(
    tx: &mut Tx,
    account: &AccountId,
    id: &MessageId,
) -> StoreResult<Option<State>> {
    let lock = tx.for_update();
    let row: Option<(String,)> = tx
        .sql(format!(
            "SELECT state FROM messages WHERE id = $1 AND account = $2{lock}"
        ))
        .bind(Uid(id.0))
        .bind(account)
        .fetch_optional()
        .await?;
    row.map(|(s,)| state_from_str(&s)).transpose()
}

#[async_trait]
impl<B: Own> ActionStore for B {
    async fn cancel_held(
        &self,
        account: &AccountId,
        id: &MessageId,
        now: DateTime<Utc>,
        held: Option<Uuid>,
    ) -> StoreResult<Transition> {
        let mut tx = self.db().begin().await?;
        let keys = self.keys_of(&mut tx, std::slice::from_ref(id)).await?;
        self.lock_keys(&mut tx, &keys).await?;
        let from = state_for_update(&mut tx, account, id).await?;
        let row: Option<MessageRow> = tx
            .sql(format!(
                "UPDATE messages SET state = 'Cancelled', cancelled_at = $3, next_attempt_at = NULL, \
                   claim_at = NULL, lease_token = NULL, held = false, updated_at = $3 \
                 WHERE id = $1 AND account = $2 AND state IN ('Scheduled', 'DeadLetter') \
                   AND (pull OR lease_token IS NULL OR claim_at <= $3 OR lease_token = $4) \
                 RETURNING {MESSAGE_COLUMNS}"
            ))
            .bind(Uid(id.0))
            .bind(account)
            .bind(At(now))
            .bind(held.map(Uid))
            .fetch_optional()
            .await?;
        let (Some(row), Some(from)) = (row, from) else {
            drop(tx);
            return refusal(self, account, id, now).await;
        };
        insert_event(&mut tx, id, EventKind::Cancelled, from, None, now).await?;
        // The next message of its key goes now, on whichever instance.
        self.settle_keys(&mut tx, &keys).await?;
        if !keys.is_empty() {
            self.notify_if_soon(&mut tx, now, now).await?;
        }
        tx.commit().await?;
        Ok(Transition::Done(Box::new(row.try_into()?)))
    }

    async fn reschedule_held(
        &self,
        account: &AccountId,
        id: &MessageId,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        held: Option<Uuid>,
    ) -> StoreResult<Transition> {
        let mut tx = self.db().begin().await?;
        // The key first (as every writer of a key locks it), then the target.
        let keys = self.keys_of(&mut tx, std::slice::from_ref(id)).await?;
        self.lock_keys(&mut tx, &keys).await?;
        if tx.locks_rows() {
            // As in insert_message: KEY SHARE on the target orders this
            // against a concurrent enable/disable, so `paused` below is
            // read right.
            tx.sql(
                "SELECT 1 FROM targets t JOIN messages m ON m.target_id = t.id \
                 WHERE m.id = $1 AND m.account = $2 FOR KEY SHARE OF t",
            )
            .bind(Uid(id.0))
            .bind(account)
            .execute()
            .await?;
        }
        let from = state_for_update(&mut tx, account, id).await?;
        let row: Option<MessageRow> = tx
            .sql(format!(
                "UPDATE messages AS m SET state = 'Scheduled', delivery_time = $3, next_attempt_at = $3, \
                   claim_at = $3, lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, \
                   updated_at = $4, \
                   paused = NOT (SELECT enabled FROM targets t WHERE t.id = m.target_id), \
                   gated = (SELECT gated FROM targets t WHERE t.id = m.target_id), \
                   held = m.ordering_key IS NOT NULL \
                 WHERE id = $1 AND account = $2 AND state IN ('Scheduled', 'DeadLetter') \
                   AND (pull OR lease_token IS NULL OR claim_at <= $4 OR lease_token = $5) \
                 RETURNING {MESSAGE_COLUMNS}"
            ))
            .bind(Uid(id.0))
            .bind(account)
            .bind(At(at))
            .bind(At(now))
            .bind(held.map(Uid))
            .fetch_optional()
            .await?;
        let (Some(row), Some(from)) = (row, from) else {
            drop(tx);
            return refusal(self, account, id, now).await;
        };
        insert_event(&mut tx, id, EventKind::Rescheduled, from, Some(at), now).await?;
        // Its new place in its key's order (another message of the key may
        // be first now, and due).
        self.settle_keys(&mut tx, &keys).await?;
        self.notify_if_soon(&mut tx, if keys.is_empty() { at } else { now.min(at) }, now)
            .await?;
        tx.commit().await?;
        Ok(Transition::Done(Box::new(row.try_into()?)))
    }

    async fn bulk_count(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        cap: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        self.count_bulk(account, bulk, cap, now).await
    }

    async fn bulk_batch(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        after: Option<&MessageId>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<BulkBatch> {
        self.apply_bulk(account, bulk, after, limit, now).await
    }
}

/// What a cancel or reschedule that changed nothing answers, from the
/// message as it is now (read after the action's transaction ended, on
/// SQLite's writer, which that transaction ran on).
async fn refusal<B: Own>(
    store: &B,
    account: &AccountId,
    id: &MessageId,
    now: DateTime<Utc>,
) -> StoreResult<Transition> {
    let row: Option<(String, Option<Uid>, Option<At>)> = store
        .db()
        .write("SELECT state, lease_token, claim_at FROM messages WHERE id = $1 AND account = $2")
        .bind(Uid(id.0))
        .bind(account)
        .fetch_optional()
        .await?;
    let found = match row {
        None => None,
        Some((state, token, claim_at)) => {
            Some((state_from_str(&state)?, token.and(claim_at).map(Into::into)))
        }
    };
    Ok(refused_transition(found, now))
}

/// Records a manual action in the message's history, inside the action's transaction.
async fn insert_event(
    tx: &mut Tx,
    id: &MessageId,
    kind: EventKind,
    from: State,
    delivery_time: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    tx.sql(
        "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time, account) \
         SELECT $1, $2, $3, $4, $5, account FROM messages WHERE id = $1",
    )
    .bind(Uid(id.0))
    .bind(At(now))
    .bind(kind.as_str())
    .bind(from.as_str())
    .bind(delivery_time.map(At))
    .execute()
    .await?;
    Ok(())
}
