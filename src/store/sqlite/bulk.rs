//! Bulk redrive, cancel and replay in the SQLite store
//! (docs/api.md#bulk-redrive-cancel-and-replay): one batch a transaction on
//! the single writer, each message changed only if it is still as it was read
//! and not in flight.

use chrono::{DateTime, Utc};

use super::{map_err, ordering, rows::*, SqliteStore};
use crate::store::{ordering::distinct_keys, *};

/// The WHERE clause of a bulk action's matches; ?1 account, ?2 states,
/// ?3 target, ?4 ids, ?5 from, ?6 to, ?7 now (in flight), ?8 after.
fn matching(bulk: &Bulk) -> String {
    let col = bulk.range_on.column();
    format!(
        "account = ?1 AND state IN (SELECT value FROM json_each(?2)) \
         AND (?3 IS NULL OR target_id = ?3) \
         AND (?4 IS NULL OR id IN (SELECT value FROM json_each(?4))) \
         AND (?5 IS NULL OR {col} >= ?5) AND (?6 IS NULL OR {col} < ?6) \
         AND (pull = 1 OR NOT (lease_token IS NOT NULL AND claim_at > ?7)) \
         AND (?8 IS NULL OR id > ?8)"
    )
}

fn binds<'q>(
    q: sqlx::query::QueryAs<
        'q,
        sqlx::Sqlite,
        (String, String, Option<String>, String),
        sqlx::sqlite::SqliteArguments<'q>,
    >,
    account: &'q AccountId,
    bulk: &'q Bulk,
    now: DateTime<Utc>,
    after: Option<String>,
) -> sqlx::query::QueryAs<
    'q,
    sqlx::Sqlite,
    (String, String, Option<String>, String),
    sqlx::sqlite::SqliteArguments<'q>,
> {
    let states: Vec<&str> = bulk.action.states().iter().map(|s| s.as_str()).collect();
    let ids = bulk.ids.as_ref().map(|ids| {
        serde_json::Value::from(ids.iter().map(id_text).collect::<Vec<_>>()).to_string()
    });
    q.bind(account)
        .bind(serde_json::Value::from(states).to_string())
        .bind(bulk.target_id.as_ref().map(|t| t.as_str()))
        .bind(ids)
        .bind(bulk.from.map(ms))
        .bind(bulk.to.map(ms))
        .bind(ms(now))
        .bind(after)
}

impl SqliteStore {
    pub(super) async fn count_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        cap: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let sql = format!(
            "SELECT id, target_id, ordering_key, state FROM messages WHERE {} LIMIT ?9",
            matching(bulk)
        );
        // Counted by reading ids: SQLite has no cheaper bounded count.
        let rows = binds(sqlx::query_as(&sql), account, bulk, now, None)
            .bind(i64::try_from(cap).unwrap_or(i64::MAX))
            .fetch_all(&self.reader)
            .await
            .map_err(map_err)?;
        Ok(rows.len() as u64)
    }

    pub(super) async fn apply_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        after: Option<&MessageId>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<BulkBatch> {
        let mut tx = self.begin().await?;
        let sql = format!(
            "SELECT id, target_id, ordering_key, state FROM messages WHERE {} ORDER BY id LIMIT ?9",
            matching(bulk)
        );
        let found = binds(sqlx::query_as(&sql), account, bulk, now, after.map(id_text))
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        let mut batch = BulkBatch {
            changed: 0,
            scanned: found.len() as u32,
            last: found.last().map(|f| parse_id(&f.0)).transpose()?,
        };
        let set = match bulk.action {
            BulkAction::Cancel { .. } => {
                "state = 'Cancelled', cancelled_at = ?4, next_attempt_at = NULL, claim_at = NULL, \
                 lease_token = NULL, held = 0, updated_at = ?4"
            }
            BulkAction::Redrive { .. } => {
                "state = 'Scheduled', delivery_time = ?3, next_attempt_at = ?3, claim_at = ?3, \
                 lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, updated_at = ?4, \
                 paused = NOT (SELECT enabled FROM targets t WHERE t.id = messages.target_id), \
                 gated = (SELECT gated FROM targets t WHERE t.id = messages.target_id), \
                 held = ordering_key IS NOT NULL"
            }
            BulkAction::Replay { .. } => {
                "state = 'Scheduled', delivery_time = ?3, next_attempt_at = ?3, claim_at = ?3, \
                 lease_token = NULL, ladder_attempts = 0, delivered_at = NULL, updated_at = ?4, \
                 paused = NOT (SELECT enabled FROM targets t WHERE t.id = messages.target_id), \
                 gated = (SELECT gated FROM targets t WHERE t.id = messages.target_id), \
                 held = ordering_key IS NOT NULL"
            }
        };
        let update = format!(
            "UPDATE messages SET {set} WHERE id = ?1 AND state = ?2 \
               AND (pull = 1 OR NOT (lease_token IS NOT NULL AND claim_at > ?4))"
        );
        let kind = match bulk.action {
            BulkAction::Cancel { .. } => "Cancelled",
            _ => "Rescheduled",
        };
        let at = bulk.action.at().map(ms);
        for (id, _, _, was) in &found {
            let done = sqlx::query(&update)
                .bind(id)
                .bind(was)
                .bind(at)
                .bind(ms(now))
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .rows_affected();
            if done == 0 {
                continue;
            }
            batch.changed += 1;
            sqlx::query(
                "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time, account) \
                 VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(id)
            .bind(ms(now))
            .bind(kind)
            .bind(was)
            .bind(at)
            .bind(account)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        let keys = distinct_keys(
            found
                .iter()
                .filter_map(|(_, t, k, _)| k.as_deref().map(|k| (t.as_str(), k))),
        );
        ordering::settle_keys(&mut tx, &keys).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(batch)
    }
}
