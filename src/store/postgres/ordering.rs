//! Ordering keys in the PostgreSQL store (docs/api.md#ordering-keys). A key's head changes
//! only under a transaction-level advisory lock on the key, which every
//! writer takes before it touches a row of the key (so two writers never
//! wait for each other's rows in opposite orders). Claims take no such lock:
//! they only ever see the head. The one race left, a claim taking the head
//! while a writer moves the head to an earlier message, is closed by
//! reading the current head `FOR UPDATE`: the writer waits for the claim and
//! then sees the lease, and keeps the head where it is.

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::map_err;
use crate::store::{
    ordering::{settle, Current, Key},
    StoreResult,
};

/// The advisory locks' class ("DISP"), beside the key's hash.
const LOCK_CLASS: i32 = 0x4449_5350;

/// Locks the keys for the rest of the transaction, in one order for every
/// caller (by hash), so that writers with several keys never deadlock.
pub(super) async fn lock_keys(
    tx: &mut Transaction<'static, Postgres>,
    keys: &[Key],
) -> StoreResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let (targets, names): (Vec<&str>, Vec<&str>) =
        keys.iter().map(|(t, k)| (t.as_str(), k.as_str())).unzip();
    sqlx::query(
        "SELECT pg_advisory_xact_lock($3, h) FROM ( \
           SELECT DISTINCT hashtext(t || chr(31) || k) AS h FROM unnest($1::text[], $2::text[]) AS u(t, k) \
           ORDER BY 1) s",
    )
    .bind(&targets)
    .bind(&names)
    .bind(LOCK_CLASS)
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}

/// The keys of these messages (those that have one).
pub(super) async fn keys_of(
    tx: &mut Transaction<'static, Postgres>,
    ids: &[Uuid],
) -> StoreResult<Vec<Key>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "SELECT DISTINCT target_id, ordering_key FROM messages WHERE id = ANY($1) AND ordering_key IS NOT NULL",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)
}

/// Makes each key's head the first of its order (see `ordering::settle`).
/// The keys must be locked (`lock_keys`) in this transaction.
pub(super) async fn settle_keys(
    tx: &mut Transaction<'static, Postgres>,
    keys: &[Key],
) -> StoreResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let (targets, names): (Vec<&str>, Vec<&str>) =
        keys.iter().map(|(t, k)| (t.as_str(), k.as_str())).unzip();
    let current: Vec<(String, String, Uuid, bool)> = sqlx::query_as(
        "SELECT m.target_id, m.ordering_key, m.id, m.lease_token IS NOT NULL \
         FROM unnest($1::text[], $2::text[]) AS u(t, k) \
         JOIN messages m ON m.target_id = u.t AND m.ordering_key = u.k \
         WHERE m.state = 'Scheduled' AND m.ordering_key IS NOT NULL AND NOT m.held \
         FOR UPDATE OF m",
    )
    .bind(&targets)
    .bind(&names)
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)?;
    let wanted: Vec<(String, String, Uuid)> = sqlx::query_as(
        "SELECT u.t, u.k, w.id FROM unnest($1::text[], $2::text[]) AS u(t, k) \
         CROSS JOIN LATERAL (SELECT m.id FROM messages m \
           WHERE m.target_id = u.t AND m.ordering_key = u.k AND m.state = 'Scheduled' \
           ORDER BY m.delivery_time, m.id LIMIT 1) w",
    )
    .bind(&targets)
    .bind(&names)
    .persistent(false)
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)?;
    let current: Vec<Current<Uuid>> = current
        .into_iter()
        .map(|(t, k, id, leased)| Current {
            key: (t, k),
            id,
            leased,
        })
        .collect();
    let wanted: Vec<(Key, Uuid)> = wanted.into_iter().map(|(t, k, id)| ((t, k), id)).collect();
    let (release, hold) = settle(&current, &wanted);
    if release.is_empty() && hold.is_empty() {
        return Ok(());
    }
    sqlx::query("UPDATE messages SET held = NOT (id = ANY($1)) WHERE id = ANY($1) OR id = ANY($2)")
        .bind(&release)
        .bind(&hold)
        .execute(&mut **tx)
        .await
        .map_err(map_err)?;
    Ok(())
}
