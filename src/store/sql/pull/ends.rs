//! The ends of messages nobody acknowledged: dead letters after the last
//! allowed receive, and after the target's retention.

use super::*;
use crate::store::sql::{
    dead::record_dead,
    events::{tell_rows, told_columns, ToldRow},
};

/// Makes dead letters of those of `ids` whose last allowed receive's
/// visibility has run out by `now`, and enters each in its history. Their
/// keys must be locked.
pub(super) async fn end_received<B: Own>(
    store: &B,
    tx: &mut Tx,
    ids_: &[Uuid],
    now: DateTime<Utc>,
) -> StoreResult<Vec<(MessageId, TargetId)>> {
    if ids_.is_empty() {
        return Ok(Vec::new());
    }
    let d = tx.conn().dialect();
    let mut stmt = tx
        .sql(format!(
            "UPDATE messages SET state = 'DeadLetter', dead_lettered_at = $1, \
           last_error = 'not acknowledged after ' || CAST(ladder_attempts AS TEXT) || ' receives', \
           claim_at = NULL, lease_token = NULL, held = false, updated_at = $1 \
         WHERE {} AND claim_at <= $1 AND id IN (SELECT id FROM ",
            last_received(d)
        ))
        .bind(At(now));
    ids(ids_).push_from(&mut stmt, "p");
    stmt.push(&format!(") RETURNING {}", told_columns()));
    let rows: Vec<ToldRow> = stmt.fetch_all().await?;
    let dead: Vec<(Uid, String)> = rows.iter().map(|r| (r.id, r.target_id.clone())).collect();
    record_dead(tx, &dead, now).await?;
    tell_rows(store, tx, &rows, false, now).await?;
    Ok(dead
        .into_iter()
        .map(|(id, t)| (MessageId(id.0), TargetId::from_trusted(t)))
        .collect())
}

/// One pull target's messages not received within its retention.
pub(super) async fn expire_target<B: Own>(
    store: &B,
    target: &str,
    config: &PullConfig,
    now: DateTime<Utc>,
    limit: u32,
) -> StoreResult<u64> {
    let db = store.db();
    let d = db.dialect();
    let pull = match d {
        Dialect::Postgres => "pull",
        Dialect::Sqlite => "pull = 1",
    };
    let cutoff = now - config.retention.delta();
    let found: Vec<(Uid, Option<String>)> = db
        .read(format!(
            "SELECT id, ordering_key FROM messages WHERE target_id = $1 AND state = 'Scheduled' \
             AND {pull} AND delivery_time <= $2 AND (lease_token IS NULL OR claim_at <= $4) LIMIT $3"
        ))
        .bind(target)
        .bind(At(cutoff))
        .bind(i64::from(limit))
        .bind(At(now))
        .fetch_all()
        .await?;
    if found.is_empty() {
        return Ok(0);
    }
    let keys = distinct_keys(
        found
            .iter()
            .filter_map(|(_, k)| k.as_deref().map(|k| (target, k))),
    );
    let found: Vec<Uuid> = found.into_iter().map(|(id, _)| id.0).collect();
    let mut tx = db.begin().await?;
    store.lock_keys(&mut tx, &keys).await?;
    lock_rows(&mut tx, &found).await?;
    let mut stmt = tx.sql(format!(
        "UPDATE messages SET state = 'DeadLetter', dead_lettered_at = $1, last_error = $2, \
           next_attempt_at = NULL, claim_at = NULL, lease_token = NULL, held = false, updated_at = $1 \
         WHERE target_id = $3 AND state = 'Scheduled' AND {pull} AND delivery_time <= $4 \
           AND (lease_token IS NULL OR claim_at <= $1) \
           AND id IN (SELECT id FROM "
    ))
        .bind(At(now))
        .bind(format!("not received within {}", config.retention.as_str()))
        .bind(target)
        .bind(At(cutoff));
    ids(&found).push_from(&mut stmt, "p");
    stmt.push(&format!(") RETURNING {}", told_columns()));
    let rows: Vec<ToldRow> = stmt.fetch_all().await?;
    let dead: Vec<(Uid, String)> = rows.iter().map(|r| (r.id, r.target_id.clone())).collect();
    record_dead(&mut tx, &dead, now).await?;
    tell_rows(store, &mut tx, &rows, false, now).await?;
    store.settle_keys(&mut tx, &keys).await?;
    if !keys.is_empty() {
        store.notify_if_soon(&mut tx, now, now).await?;
    }
    tx.commit().await?;
    Ok(dead.len() as u64)
}
