//! Bulk redrive, cancel and replay in the PostgreSQL store
//! (docs/api.md#bulk-redrive-cancel-and-replay): one batch a transaction. A
//! batch reads the ids it will change and their states without a lock, locks
//! the ordering keys among them (before any row, as every writer of a key
//! does), then changes each message only if it is still in the state it was
//! read in, and is not in flight.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{map_err, ordering, PgStore};
use crate::store::{ordering::distinct_keys, *};

/// The messages a bulk action matches, the first $8 of them (in id order
/// if `ordered`), as a FROM item of `columns`; $1 account, $2 target, $3
/// ids, $4 from, $5 to, $6 now (in flight), $7 after. Each state's part of
/// the account's `(account, state, id)` index is read on its own: an
/// action on two states (a cancel of both) reads them as a UNION ALL of
/// parts with their own order and limit, which PostgreSQL merges in id
/// order (see `sql::filter::newest_first`).
fn matching(bulk: &Bulk, columns: &str, ordered: bool) -> String {
    let order = if ordered { " ORDER BY id" } else { "" };
    let col = bulk.range_on.column();
    let branches: Vec<String> = bulk
        .action
        .states()
        .iter()
        .map(|state| {
            format!(
                "(SELECT {columns} FROM messages WHERE account = $1 AND state = '{}' \
                 AND ($2::text IS NULL OR target_id = $2) \
                 AND ($3::uuid[] IS NULL OR id = ANY($3)) \
                 AND ($4::timestamptz IS NULL OR {col} >= $4) AND ($5::timestamptz IS NULL OR {col} < $5) \
                 AND (pull OR NOT (lease_token IS NOT NULL AND claim_at > $6)) \
                 AND ($7::uuid IS NULL OR id > $7){order} LIMIT $8)",
                state.as_str()
            )
        })
        .collect();
    format!("({}) m", branches.join(" UNION ALL "))
}

fn ids(bulk: &Bulk) -> Option<Vec<Uuid>> {
    bulk.ids
        .as_ref()
        .map(|ids| ids.iter().map(|m| m.0).collect())
}

impl PgStore {
    pub(super) async fn count_bulk(
        &self,
        account: &AccountId,
        bulk: &Bulk,
        cap: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let (n,): (i64,) = sqlx::query_as(&format!(
            "SELECT count(*) FROM (SELECT 1 FROM {} LIMIT $8) s",
            matching(bulk, "1", false)
        ))
        .bind(account)
        .bind(bulk.target_id.as_ref().map(|t| t.as_str()))
        .bind(ids(bulk))
        .bind(bulk.from)
        .bind(bulk.to)
        .bind(now)
        .bind(None::<Uuid>)
        .bind(i64::try_from(cap).unwrap_or(i64::MAX))
        .persistent(false)
        .fetch_one(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(n.max(0) as u64)
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
        let found: Vec<(Uuid, String, Option<String>, String)> = sqlx::query_as(&format!(
            "SELECT id, target_id, ordering_key, state FROM {} ORDER BY id LIMIT $8",
            matching(bulk, "id, target_id, ordering_key, state", true)
        ))
        .bind(account)
        .bind(bulk.target_id.as_ref().map(|t| t.as_str()))
        .bind(ids(bulk))
        .bind(bulk.from)
        .bind(bulk.to)
        .bind(now)
        .bind(after.map(|m| m.0))
        .bind(i64::from(limit))
        .persistent(false)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        let batch = BulkBatch {
            changed: 0,
            scanned: found.len() as u32,
            last: found.last().map(|f| MessageId(f.0)),
        };
        if found.is_empty() {
            return Ok(batch);
        }
        let keys = distinct_keys(
            found
                .iter()
                .filter_map(|(_, t, k, _)| k.as_deref().map(|k| (t.as_str(), k))),
        );
        ordering::lock_keys(&mut tx, &keys).await?;
        let mut targets: Vec<&str> = found.iter().map(|f| f.1.as_str()).collect();
        targets.sort_unstable();
        targets.dedup();
        // KEY SHARE orders this against enable/disable and limit changes, so
        // `paused` and `gated` are read right.
        sqlx::query("SELECT 1 FROM targets WHERE id = ANY($1) FOR KEY SHARE")
            .bind(&targets)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let set = match bulk.action {
            BulkAction::Cancel { .. } => {
                "state = 'Cancelled', cancelled_at = $4, next_attempt_at = NULL, claim_at = NULL, \
                 lease_token = NULL, held = false, updated_at = $4"
            }
            BulkAction::Redrive { .. } => {
                "state = 'Scheduled', delivery_time = $3, next_attempt_at = $3, claim_at = $3, \
                 lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, updated_at = $4, \
                 paused = NOT t.enabled, gated = t.gated, held = m.ordering_key IS NOT NULL"
            }
            BulkAction::Replay { .. } => {
                "state = 'Scheduled', delivery_time = $3, next_attempt_at = $3, claim_at = $3, \
                 lease_token = NULL, ladder_attempts = 0, delivered_at = NULL, updated_at = $4, \
                 paused = NOT t.enabled, gated = t.gated, held = m.ordering_key IS NOT NULL"
            }
        };
        let kind = match bulk.action {
            BulkAction::Cancel { .. } => "Cancelled",
            _ => "Rescheduled",
        };
        let changed = sqlx::query(&format!(
            "WITH changed AS ( \
               UPDATE messages m SET {set} \
               FROM unnest($1::uuid[], $2::text[]) AS c(id, was), targets t \
               WHERE m.id = c.id AND m.state = c.was AND t.id = m.target_id \
                 AND (m.pull OR NOT (m.lease_token IS NOT NULL AND m.claim_at > $4)) \
               RETURNING m.id, c.was, m.account) \
             INSERT INTO message_events (message_id, at, kind, from_state, delivery_time, account) \
             SELECT id, $4, '{kind}', was, $3, account FROM changed"
        ))
        .bind(found.iter().map(|f| f.0).collect::<Vec<_>>())
        .bind(found.iter().map(|f| f.3.as_str()).collect::<Vec<_>>())
        .bind(bulk.action.at())
        .bind(now)
        .persistent(false)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        ordering::settle_keys(&mut tx, &keys).await?;
        if let Some(at) = bulk.action.at().filter(|_| changed > 0) {
            self.notify_if_soon(&mut tx, at, now).await?;
        } else if changed > 0 && !keys.is_empty() {
            // A cancel may have let the next message of a key go.
            self.notify_if_soon(&mut tx, now, now).await?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(BulkBatch { changed, ..batch })
    }
}
