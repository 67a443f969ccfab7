//! Recording attempts on SQLite (`DeliveryStore::record`): under its one
//! writer, each result updates its message if it still holds the lease,
//! enters a dead letter in its history and inserts its attempts; what
//! happened to messages of accounts that subscribe to Dispatch's own events
//! is told in the same transaction.

use chrono::{DateTime, Utc};

use super::{map_err, ordering, rows::*, SqliteStore};
use crate::{
    domain::{
        ids::{AccountId, TargetId},
        told,
    },
    store::{
        last_error, ordering::distinct_keys, state_after, storable_text, Recorded, StoreResult,
    },
};

impl SqliteStore {
    /// `DeliveryStore::record`.
    pub(super) async fn record_results(
        &self,
        results: &[Recorded],
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        if results.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin().await?;
        let mut written = 0;
        let mut told = Vec::new();
        for r in results {
            let last = r.last();
            let (state, at) = state_after(&r.next);
            let at = at.map(ms);
            let last_error = last_error(r);
            let update = sqlx::query_as::<_, Updated>(
                "UPDATE messages SET state = ?3, next_attempt_at = ?4, claim_at = ?4, lease_token = NULL, \
                   attempt_count = max(attempt_count, ?5), ladder_attempts = ?6, \
                   delivered_at = CASE WHEN ?3 = 'Delivered' THEN ?7 ELSE delivered_at END, \
                   dead_lettered_at = CASE WHEN ?3 = 'DeadLetter' THEN ?7 ELSE dead_lettered_at END, \
                   last_error = COALESCE(?8, last_error), updated_at = ?9 \
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'Scheduled' \
                 RETURNING account, target_id, event_id, event_type, ordering_key, last_error, \
                   EXISTS (SELECT 1 FROM subscription_patterns p JOIN subscriptions s ON s.id = p.subscription_id \
                     WHERE p.account = messages.account AND s.enabled = 1 \
                     AND p.pattern IN (?10, ?11, ?12, ?13, ?14)) AS told",
            )
            .bind(id_text(&r.id))
            .bind(r.lease_token.to_string())
            .bind(state)
            .bind(at)
            .bind(i64::from(last.attempt))
            .bind(i64::from(r.ladder_attempts))
            .bind(ms(last.finished_at))
            .bind(last_error)
            .bind(ms(now));
            let updated = told::MESSAGE_PATTERNS
                .iter()
                .fold(update, |q, p| q.bind(*p))
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
            let Some(Updated {
                account,
                target_id,
                event_id,
                event_type,
                ordering_key,
                last_error: kept_error,
                told: tells,
            }) = updated
            else {
                continue; // the lease was lost: drop the stale result whole
            };
            if tells {
                let about = told::About {
                    account: AccountId::from_trusted(account.clone()),
                    message: r.id,
                    target: TargetId::from_trusted(target_id.clone()),
                    event: match (event_id, event_type) {
                        (Some(id), Some(ty)) => Some((parse_event_id(&id)?, ty)),
                        _ => None,
                    },
                    ordering_key,
                };
                told.extend(crate::store::rules::happenings(r, &about, kept_error));
            }
            if state == "DeadLetter" {
                sqlx::query(
                    "INSERT INTO message_events (message_id, at, kind, from_state, account, detail) \
                     SELECT id, dead_lettered_at, 'DeadLettered', 'Scheduled', account, last_error \
                     FROM messages WHERE id = ?",
                )
                .bind(id_text(&r.id))
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            }
            for a in &r.attempts {
                written += sqlx::query(
                    "INSERT INTO attempts (message_id, attempt, started_at, finished_at, duration_ms, outcome, \
                       status_code, error, response_body, account, retry_after_ms, target_id) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (message_id, attempt) DO NOTHING",
                )
                .bind(id_text(&r.id))
                .bind(i64::from(a.attempt))
                .bind(ms(a.started_at))
                .bind(ms(a.finished_at))
                .bind(a.duration_ms as i64)
                .bind(a.outcome.as_str())
                .bind(a.status_code.map(i64::from))
                .bind(a.error.as_deref().map(storable_text))
                .bind(a.response_body.as_deref().map(storable_text))
                .bind(&account)
                .bind(a.retry_after_ms.map(|ms| ms as i64))
                .bind(&target_id)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .rows_affected();
            }
        }
        // A result for a message with an orderingKey may hand its key on.
        let keys = distinct_keys(
            results
                .iter()
                .filter_map(|r| r.key.as_ref().map(|(t, k)| (t.as_str(), k.as_str()))),
        );
        ordering::settle_keys(&mut tx, &keys).await?;
        if told.is_empty() {
            tx.commit().await.map_err(map_err)?;
            return Ok(written);
        }
        // What happened to the messages of accounts that subscribe to
        // Dispatch's own events, published in this same transaction.
        let mut tx = crate::store::sql::Tx::Sqlite(tx);
        crate::store::sql::events::tell(self, &mut tx, &told, now).await?;
        tx.commit().await?;
        Ok(written)
    }
}

/// A message `record` changed: what Dispatch's own events about it name,
/// and whether its account subscribes to them (`told`).
#[derive(sqlx::FromRow)]
struct Updated {
    account: String,
    target_id: String,
    event_id: Option<String>,
    event_type: Option<String>,
    ordering_key: Option<String>,
    last_error: Option<String>,
    told: bool,
}
