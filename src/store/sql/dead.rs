//! Dead letters made outside the ladder, once for both databases: entered
//! in their messages' history, and those of rows the sweeper claimed but
//! could not read.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    events::{tell_rows, told_columns, ToldRow},
    ordering,
    own::Own,
    table::{Col, Table},
    At, Tx, Uid,
};
use crate::store::StoreResult;

/// Enters new dead letters in their messages' history (the portal's
/// overview counts them there).
pub(crate) async fn record_dead(
    tx: &mut Tx,
    dead: &[(Uid, String)],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    if dead.is_empty() {
        return Ok(());
    }
    let mut stmt = tx
        .sql(
            "INSERT INTO message_events (message_id, at, kind, from_state, account, detail) \
         SELECT id, $1, 'DeadLettered', 'Scheduled', account, last_error FROM messages \
         WHERE id IN (SELECT id FROM ",
        )
        .bind(At(now));
    let ids: Vec<Uuid> = dead.iter().map(|(id, _)| id.0).collect();
    Table::new(vec![("id", Col::Uuid(ids))]).push_from(&mut stmt, "p");
    stmt.push(")");
    stmt.execute().await?;
    Ok(())
}

/// Dead-letters claimed messages whose stored row cannot be read (each with
/// the reason), while the claim's lease (`token`) still holds them: a row
/// that cannot be read cannot be delivered, and would otherwise hold its
/// lease forever. Enters each in its history, hands its key to the next
/// message and tells a subscribed account, as every other dead letter.
pub(crate) async fn dead_letter_unreadable<B: Own>(
    store: &B,
    tx: &mut Tx,
    unreadable: &[(Uuid, String)],
    token: Uuid,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    if unreadable.is_empty() {
        return Ok(());
    }
    tracing::error!(
        count = unreadable.len(),
        "dead-lettering messages whose stored data is unreadable"
    );
    let ids: Vec<Uid> = unreadable.iter().map(|(id, _)| Uid(*id)).collect();
    let keys = ordering::keys_of(tx.conn(), &ids).await?;
    ordering::lock_keys(tx.conn(), &keys).await?;
    // One statement a row: each has its own reason, and such rows are rare.
    let mut rows: Vec<ToldRow> = Vec::with_capacity(unreadable.len());
    for (id, reason) in unreadable {
        let found: Vec<ToldRow> = tx
            .sql(format!(
                "UPDATE messages SET state = 'DeadLetter', dead_lettered_at = $1, next_attempt_at = NULL, \
                   claim_at = NULL, lease_token = NULL, last_error = $2, updated_at = $1 \
                 WHERE id = $3 AND lease_token = $4 RETURNING {}",
                told_columns()
            ))
            .bind(At(now))
            .bind(reason.as_str())
            .bind(Uid(*id))
            .bind(Uid(token))
            .fetch_all()
            .await?;
        rows.extend(found);
    }
    let dead: Vec<(Uid, String)> = rows.iter().map(|r| (r.id, r.target_id.clone())).collect();
    record_dead(tx, &dead, now).await?;
    ordering::settle_keys(tx.conn(), &keys).await?;
    tell_rows(store, tx, &rows, false, now).await?;
    Ok(())
}
