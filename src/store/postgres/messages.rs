//! Messages in the PostgreSQL store: scheduling (one, a batch with
//! idempotency keys, many) and reading messages and their attempts.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::{map_err, ordering, rows::*, PgStore};
use crate::{
    domain::{ids::AccountId, message::Message},
    store::{
        ordering::distinct_keys,
        sql::{self, Backend},
        *,
    },
};

#[async_trait]
impl MessageStore for PgStore {
    async fn insert_message(
        &self,
        m: &Message,
        idem: Option<&IdempotencyInput>,
    ) -> StoreResult<InsertOutcome> {
        let mut tx = self.begin().await?;
        if let Some(idem) = idem {
            let expired_before = key_live_since(m, idem);
            let claimed: Option<(bool,)> = sqlx::query_as(
                "INSERT INTO idempotency_keys (account, key, request_hash, status, response, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (account, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, \
                   status = EXCLUDED.status, response = EXCLUDED.response, created_at = EXCLUDED.created_at \
                 WHERE idempotency_keys.created_at < $7 \
                 RETURNING true",
            )
            .bind(&m.account)
            .bind(&idem.key)
            .bind(&idem.request_hash)
            .bind(i32::from(idem.status))
            .bind(idem.response.to_string())
            .bind(m.created_at)
            .bind(expired_before)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
            if claimed.is_none() {
                let (hash, status, response): (Vec<u8>, i32, String) = sqlx::query_as(
                    "SELECT request_hash, status, response FROM idempotency_keys WHERE account = $1 AND key = $2",
                )
                .bind(&m.account)
                .bind(&idem.key)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
                return if hash == idem.request_hash {
                    replayed(i64::from(status), &response)
                } else {
                    Ok(InsertOutcome::KeyConflict)
                };
            }
        }
        // A message with an orderingKey starts held; settling the key
        // (under its lock, taken before any row) makes it the head if it is
        // the first of its order.
        let keys = distinct_keys(m.ordering_key.as_deref().map(|k| (m.target_id.as_str(), k)));
        ordering::lock_keys(&mut tx, &keys).await?;
        // KEY SHARE on the target orders this insert against a concurrent
        // enable/disable (which takes FOR UPDATE), so `paused` is always right.
        let inserted = sqlx::query(
            "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, next_attempt_at, \
               claim_at, paused, gated, pull, created_at, updated_at, ordering_key, held) \
             SELECT $1, $2, t.id, 'Scheduled', $4, $5, $5, $5, NOT t.enabled, t.gated, t.kind = 'pull', $6, $6, $7, $7 IS NOT NULL \
             FROM targets t WHERE t.id = $3 AND t.account = $2 FOR KEY SHARE",
        )
        .bind(m.id.0)
        .bind(&m.account)
        .bind(m.target_id.as_str())
        .bind(m.payload.as_str().as_bytes())
        .bind(m.delivery_time)
        .bind(m.created_at)
        .bind(m.ordering_key.as_deref())
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if inserted == 0 {
            return Ok(InsertOutcome::UnknownTarget);
        }
        ordering::settle_keys(&mut tx, &keys).await?;
        self.notify_if_soon(&mut tx, m.delivery_time, m.created_at)
            .await?;
        tx.commit().await.map_err(map_err)?;
        Ok(InsertOutcome::Created(Box::new(m.clone())))
    }

    /// A batch with a handful of set-based statements in one transaction:
    /// claim the idempotency keys, read the ones held by earlier requests,
    /// insert the messages, give back the keys of messages whose target is
    /// unknown.
    async fn insert_batch(&self, items: &[BatchItem]) -> StoreResult<Vec<InsertOutcome>> {
        let n = items.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        debug_assert!(
            each_key_once(items),
            "the service sends each key once a batch"
        );
        let keyed = keyed_in_lock_order(items);
        let mut outcomes: Vec<Option<InsertOutcome>> = (0..n).map(|_| None).collect();
        let mut tx = self.begin().await?;
        let claimed = claim_keys(&mut tx, items, &keyed).await?;
        answer_held_keys(&mut tx, items, &keyed, &claimed, &mut outcomes).await?;

        let to_insert: Vec<usize> = (0..n).filter(|&i| outcomes[i].is_none()).collect();
        let keys = distinct_keys(to_insert.iter().filter_map(|&i| {
            let m = &items[i].message;
            m.ordering_key.as_deref().map(|k| (m.target_id.as_str(), k))
        }));
        ordering::lock_keys(&mut tx, &keys).await?;
        let inserted = insert_items(&mut tx, items, &to_insert).await?;
        ordering::settle_keys(&mut tx, &keys).await?;
        let give_back = answer_inserted(items, &to_insert, &inserted, &claimed, &mut outcomes);
        give_back_keys(&mut tx, items, &give_back).await?;
        if let Some(at) = earliest_inserted(items, &to_insert, &inserted) {
            let now = items
                .iter()
                .map(|i| i.message.created_at)
                .max()
                .unwrap_or(at);
            self.notify_if_soon(&mut tx, at, now).await?;
        }
        tx.commit().await.map_err(map_err)?;

        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("every item answered"))
            .collect())
    }

    async fn insert_messages(
        &self,
        account: &AccountId,
        messages: &[Message],
    ) -> StoreResult<Vec<MessageId>> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = messages.iter().map(|m| m.id.0).collect();
        let targets: Vec<&str> = messages.iter().map(|m| m.target_id.as_str()).collect();
        let payloads: Vec<&[u8]> = messages
            .iter()
            .map(|m| m.payload.as_str().as_bytes())
            .collect();
        let times: Vec<DateTime<Utc>> = messages.iter().map(|m| m.delivery_time).collect();
        let now = messages
            .iter()
            .map(|m| m.created_at)
            .max()
            .unwrap_or_else(Utc::now);
        let earliest = times.iter().min().copied().unwrap_or(now);
        let okeys: Vec<Option<&str>> = messages.iter().map(|m| m.ordering_key.as_deref()).collect();
        let keys = distinct_keys(
            messages
                .iter()
                .filter_map(|m| m.ordering_key.as_deref().map(|k| (m.target_id.as_str(), k))),
        );
        let mut tx = self.begin().await?;
        ordering::lock_keys(&mut tx, &keys).await?;
        let inserted: Vec<(Uuid,)> = sqlx::query_as(
            "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, next_attempt_at, \
               claim_at, paused, gated, pull, created_at, updated_at, ordering_key, held) \
             SELECT i.id, $1, t.id, 'Scheduled', i.payload, i.at, i.at, i.at, NOT t.enabled, t.gated, t.kind = 'pull', $6, $6, \
               i.okey, i.okey IS NOT NULL \
             FROM unnest($2::uuid[], $3::text[], $4::bytea[], $5::timestamptz[], $7::text[]) \
               AS i(id, target_id, payload, at, okey) \
             JOIN targets t ON t.id = i.target_id AND t.account = $1 \
             FOR KEY SHARE OF t \
             RETURNING id",
        )
        .bind(account)
        .bind(&ids)
        .bind(&targets)
        .bind(&payloads)
        .bind(&times)
        .bind(now)
        .bind(&okeys)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        ordering::settle_keys(&mut tx, &keys).await?;
        self.notify_if_soon(&mut tx, earliest, now).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(inserted.into_iter().map(|(id,)| MessageId(id)).collect())
    }

    async fn get_message(
        &self,
        account: &AccountId,
        id: &MessageId,
    ) -> StoreResult<Option<Message>> {
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = $1 AND account = $2"
        ))
        .bind(id.0)
        .bind(account)
        .fetch_optional(&self.pool)
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
        let exists: Option<(Uuid,)> =
            sqlx::query_as("SELECT id FROM messages WHERE id = $1 AND account = $2")
                .bind(id.0)
                .bind(account)
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows: Vec<AttemptRow> = sqlx::query_as(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE message_id = $1 AND attempt > $2 ORDER BY attempt LIMIT $3"
        ))
        .bind(id.0)
        .bind(after.map_or(0, |a| a as i32))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(Attempt::try_from)
            .collect::<StoreResult<Vec<_>>>()
            .map(Some)
    }
}

/// The account and idempotency key of a batch item, if it has a key.
fn key_of(item: &BatchItem) -> Option<(&str, &str)> {
    item.idempotency
        .as_ref()
        .map(|k| (item.message.account.as_str(), k.key.as_str()))
}

/// The idempotency key of an item known to have one.
fn idem(item: &BatchItem) -> &IdempotencyInput {
    item.idempotency.as_ref().expect("keyed")
}

fn each_key_once(items: &[BatchItem]) -> bool {
    let keys: HashSet<_> = items.iter().filter_map(key_of).collect();
    keys.len() == items.iter().filter_map(key_of).count()
}

/// The items with an idempotency key, in (account, key) order: two batches
/// with the same keys in another order wait for each other, not deadlock.
fn keyed_in_lock_order(items: &[BatchItem]) -> Vec<usize> {
    let mut keyed: Vec<usize> = (0..items.len())
        .filter(|&i| key_of(&items[i]).is_some())
        .collect();
    keyed.sort_by_key(|&i| key_of(&items[i]));
    keyed
}

/// Claims the keys of the `keyed` items, one statement per key lifetime
/// (the API uses one): an expired key is taken over, a live one is left to
/// its request. Answers the items whose key this batch now holds.
async fn claim_keys(
    tx: &mut Transaction<'static, Postgres>,
    items: &[BatchItem],
    keyed: &[usize],
) -> StoreResult<HashSet<usize>> {
    let mut ttls: Vec<u128> = keyed
        .iter()
        .map(|&i| idem(&items[i]).ttl.as_millis())
        .collect();
    ttls.sort_unstable();
    ttls.dedup();
    let mut rows: Vec<(String, String)> = Vec::new();
    for ttl in ttls {
        let group: Vec<usize> = keyed
            .iter()
            .copied()
            .filter(|&i| idem(&items[i]).ttl.as_millis() == ttl)
            .collect();
        rows.extend(claim_keys_living(tx, items, &group, ttl).await?);
    }
    let got: HashSet<(String, String)> = rows.into_iter().collect();
    Ok(keyed
        .iter()
        .copied()
        .filter(|&i| {
            let (a, k) = key_of(&items[i]).expect("keyed");
            got.contains(&(a.to_string(), k.to_string()))
        })
        .collect())
}

/// Claims the keys of `keyed`, all of one lifetime (`ttl` in ms); answers
/// the (account, key) of those claimed.
async fn claim_keys_living(
    tx: &mut Transaction<'static, Postgres>,
    items: &[BatchItem],
    keyed: &[usize],
    ttl: u128,
) -> StoreResult<Vec<(String, String)>> {
    let ttl_ms = i64::try_from(ttl).unwrap_or(i64::MAX);
    sqlx::query_as(
        "INSERT INTO idempotency_keys (account, key, request_hash, status, response, created_at) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int[], $5::text[], $6::timestamptz[]) \
         ON CONFLICT (account, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, \
           status = EXCLUDED.status, response = EXCLUDED.response, created_at = EXCLUDED.created_at \
         WHERE idempotency_keys.created_at < EXCLUDED.created_at - $7 * interval '1 millisecond' \
         RETURNING account, key",
    )
    .bind(keyed.iter().map(|&i| items[i].message.account.as_str()).collect::<Vec<_>>())
    .bind(keyed.iter().map(|&i| idem(&items[i]).key.as_str()).collect::<Vec<_>>())
    .bind(keyed.iter().map(|&i| idem(&items[i]).request_hash.as_slice()).collect::<Vec<_>>())
    .bind(keyed.iter().map(|&i| i32::from(idem(&items[i]).status)).collect::<Vec<_>>())
    .bind(keyed.iter().map(|&i| idem(&items[i]).response.to_string()).collect::<Vec<_>>())
    .bind(keyed.iter().map(|&i| items[i].message.created_at).collect::<Vec<_>>())
    .bind(ttl_ms)
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)
}

/// Answers the keyed items whose key an earlier request holds: its response
/// replayed for the same request, a conflict for another.
async fn answer_held_keys(
    tx: &mut Transaction<'static, Postgres>,
    items: &[BatchItem],
    keyed: &[usize],
    claimed: &HashSet<usize>,
    outcomes: &mut [Option<InsertOutcome>],
) -> StoreResult<()> {
    let held: Vec<usize> = keyed
        .iter()
        .copied()
        .filter(|i| !claimed.contains(i))
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    let rows: Vec<(String, String, Vec<u8>, i32, String)> = sqlx::query_as(
        "SELECT k.account, k.key, k.request_hash, k.status, k.response FROM idempotency_keys k \
         JOIN unnest($1::text[], $2::text[]) AS i(account, key) ON k.account = i.account AND k.key = i.key",
    )
    .bind(held.iter().map(|&i| items[i].message.account.as_str()).collect::<Vec<_>>())
    .bind(held.iter().map(|&i| idem(&items[i]).key.as_str()).collect::<Vec<_>>())
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)?;
    let by_key: HashMap<(String, String), (Vec<u8>, i32, String)> = rows
        .into_iter()
        .map(|(a, k, h, s, r)| ((a, k), (h, s, r)))
        .collect();
    for &i in &held {
        let (a, k) = key_of(&items[i]).expect("keyed");
        let Some((hash, status, response)) = by_key.get(&(a.to_string(), k.to_string())) else {
            return Err(StoreError::Corrupt(format!("idempotency key {k} vanished")));
        };
        outcomes[i] = Some(if *hash == idem(&items[i]).request_hash {
            replayed(i64::from(*status), response)?
        } else {
            InsertOutcome::KeyConflict
        });
    }
    Ok(())
}

/// Inserts the messages of the items `to_insert` in one statement, each
/// target's row KEY SHARE locked against a concurrent enable or disable;
/// answers the ids inserted (a message whose target is unknown is not).
async fn insert_items(
    tx: &mut Transaction<'static, Postgres>,
    items: &[BatchItem],
    to_insert: &[usize],
) -> StoreResult<HashSet<Uuid>> {
    if to_insert.is_empty() {
        return Ok(HashSet::new());
    }
    let m = |i: usize| &items[i].message;
    let rows: Vec<(Uuid,)> = sqlx::query_as(
        "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, next_attempt_at, \
           claim_at, paused, gated, pull, created_at, updated_at, ordering_key, held) \
         SELECT i.id, i.account, t.id, 'Scheduled', i.payload, i.at, i.at, i.at, NOT t.enabled, t.gated, t.kind = 'pull', \
           i.now, i.now, i.okey, i.okey IS NOT NULL \
         FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::timestamptz[], $6::timestamptz[], \
           $7::text[]) AS i(id, account, target_id, payload, at, now, okey) \
         JOIN targets t ON t.id = i.target_id AND t.account = i.account \
         FOR KEY SHARE OF t \
         RETURNING id",
    )
    .bind(to_insert.iter().map(|&i| m(i).id.0).collect::<Vec<_>>())
    .bind(to_insert.iter().map(|&i| m(i).account.as_str()).collect::<Vec<_>>())
    .bind(to_insert.iter().map(|&i| m(i).target_id.as_str()).collect::<Vec<_>>())
    .bind(to_insert.iter().map(|&i| m(i).payload.as_str().as_bytes()).collect::<Vec<_>>())
    .bind(to_insert.iter().map(|&i| m(i).delivery_time).collect::<Vec<_>>())
    .bind(to_insert.iter().map(|&i| m(i).created_at).collect::<Vec<_>>())
    .bind(to_insert.iter().map(|&i| m(i).ordering_key.as_deref()).collect::<Vec<_>>())
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Answers the items `to_insert`: created, or their target unknown. Returns
/// those of the unknown whose key this batch claimed, to be given back.
fn answer_inserted(
    items: &[BatchItem],
    to_insert: &[usize],
    inserted: &HashSet<Uuid>,
    claimed: &HashSet<usize>,
    outcomes: &mut [Option<InsertOutcome>],
) -> Vec<usize> {
    let mut give_back: Vec<usize> = Vec::new();
    for &i in to_insert {
        outcomes[i] = Some(if inserted.contains(&items[i].message.id.0) {
            InsertOutcome::Created(Box::new(items[i].message.clone()))
        } else {
            if claimed.contains(&i) {
                give_back.push(i);
            }
            InsertOutcome::UnknownTarget
        });
    }
    give_back
}

/// Deletes the keys of the items `give_back`, which made no message.
async fn give_back_keys(
    tx: &mut Transaction<'static, Postgres>,
    items: &[BatchItem],
    give_back: &[usize],
) -> StoreResult<()> {
    if give_back.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "DELETE FROM idempotency_keys k USING unnest($1::text[], $2::text[]) AS i(account, key) \
         WHERE k.account = i.account AND k.key = i.key",
    )
    .bind(
        give_back
            .iter()
            .map(|&i| items[i].message.account.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        give_back
            .iter()
            .map(|&i| key_of(&items[i]).expect("keyed").1)
            .collect::<Vec<_>>(),
    )
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}

/// The earliest delivery time among the messages inserted.
fn earliest_inserted(
    items: &[BatchItem],
    to_insert: &[usize],
    inserted: &HashSet<Uuid>,
) -> Option<DateTime<Utc>> {
    to_insert
        .iter()
        .filter(|&&i| inserted.contains(&items[i].message.id.0))
        .map(|&i| items[i].message.delivery_time)
        .min()
}
