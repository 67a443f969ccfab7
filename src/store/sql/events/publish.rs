//! The steps of a publish: the messages it makes, the list of them, the
//! idempotency key it holds.

use chrono::{DateTime, Utc};

use crate::store::sql::{At, Tx, Uid};
use crate::{
    domain::ids::{AccountId, EventId, MessageId},
    store::{IdempotencyInput, Published, ResponseJson, StoreError, StoreResult},
};

/// Rows per INSERT: well within SQLite's 32,766 bound values.
pub(super) const ROWS_PER_INSERT: usize = 1000;

/// A message made of an event: its new id, the event and the target.
type Made = (MessageId, EventId, String);

/// Makes one message per (event, target) pair, Scheduled for `at`, of the
/// event's payload, orderingKey and type (read from its row); a target that
/// is no longer the account's gets none. Returns the messages made. The
/// caller holds their ordering keys' locks, and made the pairs in the order
/// their messages are to keep (ids rise with it).
pub(super) async fn make_messages(
    tx: &mut Tx,
    account: &AccountId,
    pairs: &[(EventId, &str)],
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<Made>> {
    let lock = if tx.locks_rows() {
        " FOR KEY SHARE OF t"
    } else {
        ""
    };
    let mut out = Vec::with_capacity(pairs.len());
    for chunk in pairs.chunks(ROWS_PER_INSERT) {
        // The new rows' ids, events and targets as a list of values, named
        // by a common table expression both databases read.
        let mut stmt = tx.sql("WITH v (id, event_id, target_id) AS (VALUES ");
        for (i, (event, target)) in chunk.iter().enumerate() {
            stmt.push(if i == 0 { "(" } else { ", (" })
                .push_bind(Uid(MessageId::at(now).0))
                .push(", ")
                .push_bind(Uid(event.0))
                .push(", ")
                .push_bind(target.to_string())
                .push(")");
        }
        stmt.push(
            ") INSERT INTO messages (id, account, target_id, state, payload, delivery_time, \
               next_attempt_at, claim_at, paused, gated, created_at, updated_at, ordering_key, held, \
               event_id, event_type) \
             SELECT v.id, t.account, t.id, 'Scheduled', e.payload, ",
        )
        .push_bind(At(at))
        .push(", ")
        .push_bind(At(at))
        .push(", ")
        .push_bind(At(at))
        .push(", NOT t.enabled, t.gated, ")
        .push_bind(At(now))
        .push(", ")
        .push_bind(At(now))
        .push(
            ", e.ordering_key, e.ordering_key IS NOT NULL, e.id, e.type \
             FROM v JOIN events e ON e.id = v.event_id \
             JOIN targets t ON t.id = v.target_id AND t.account = ",
        )
        .push_bind(account.to_string())
        .push(" ORDER BY v.id")
        .push(lock)
        .push(" RETURNING id, event_id, target_id");
        let rows: Vec<(Uid, Uid, String)> = stmt.fetch_all().await?;
        out.extend(
            rows.into_iter()
                .map(|(id, event, t)| (MessageId(id.0), EventId(event.0), t)),
        );
    }
    out.sort_by_key(|m| m.0);
    Ok(out)
}

/// Remembers which message each target got of which event.
pub(super) async fn list_made(tx: &mut Tx, made: &[Made]) -> StoreResult<()> {
    for chunk in made.chunks(ROWS_PER_INSERT) {
        let mut stmt =
            tx.sql("INSERT INTO event_messages (event_id, message_id, target_id) VALUES ");
        for (i, (id, event, target)) in chunk.iter().enumerate() {
            stmt.push(if i == 0 { "(" } else { ", (" })
                .push_bind(Uid(event.0))
                .push(", ")
                .push_bind(Uid(id.0))
                .push(", ")
                .push_bind(target.clone())
                .push(")");
        }
        stmt.execute().await?;
    }
    Ok(())
}

/// A key held by an earlier request, if one is (and not yet forgotten).
pub(super) async fn held_key(
    tx: &mut Tx,
    account: &AccountId,
    key: &IdempotencyInput,
    now: DateTime<Utc>,
) -> StoreResult<Option<Published>> {
    let live_since = now - chrono::TimeDelta::from_std(key.ttl).unwrap_or_default();
    let held: Option<(Vec<u8>, i32, String)> = tx
        .sql(
            "SELECT request_hash, status, response FROM idempotency_keys \
             WHERE account = $1 AND key = $2 AND created_at >= $3",
        )
        .bind(account)
        .bind(&key.key)
        .bind(At(live_since))
        .fetch_optional()
        .await?;
    let Some((hash, status, response)) = held else {
        return Ok(None);
    };
    if hash != key.request_hash {
        return Ok(Some(Published::KeyConflict));
    }
    Ok(Some(Published::Replayed {
        status: u16::try_from(status).unwrap_or(201),
        response: serde_json::value::RawValue::from_string(response)
            .map_err(|e| StoreError::Corrupt(format!("idempotent response: {e}")))?,
    }))
}

/// Keeps the key with its answer; false when another request took it
/// meanwhile (the caller rolls back and answers as that request did).
pub(super) async fn keep_key(
    tx: &mut Tx,
    account: &AccountId,
    key: &IdempotencyInput,
    response: &ResponseJson,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let live_since = now - chrono::TimeDelta::from_std(key.ttl).unwrap_or_default();
    let kept: Option<(bool,)> = tx
        .sql(
            "INSERT INTO idempotency_keys (account, key, request_hash, status, response, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (account, key) DO UPDATE SET request_hash = excluded.request_hash, \
               status = excluded.status, response = excluded.response, created_at = excluded.created_at \
             WHERE idempotency_keys.created_at < $7 \
             RETURNING true",
        )
        .bind(account)
        .bind(&key.key)
        .bind(key.request_hash.clone())
        .bind(i32::from(key.status))
        .bind(response.get().to_string())
        .bind(At(now))
        .bind(At(live_since))
        .fetch_optional()
        .await?;
    Ok(kept.is_some())
}

/// How many times a publish is tried again when a concurrent request with
/// its key won the race.
pub(super) const PUBLISH_TRIES: usize = 3;
