//! A receive: on PostgreSQL one statement, on SQLite a transaction under
//! its one writer.

use super::*;

#[derive(sqlx::FromRow)]
pub(super) struct ReceivedRow {
    #[sqlx(flatten)]
    pub(super) message: MessageRow,
    pub(super) ladder_attempts: i32,
    /// The message's id again, for ordering before the row is converted.
    #[sqlx(rename = "id")]
    key: Uid,
}

/// The columns a receive sets on the messages it takes (`$v` the end of the
/// visibility, `$t` the receive's token, `$m` the receives allowed, `$n` now).
pub(super) fn received_set(v: usize, t: usize, m: usize, n: usize) -> String {
    format!(
        "claim_at = ${v}, lease_token = ${t}, ladder_attempts = ladder_attempts + 1, \
         attempt_count = attempt_count + 1, \
         next_attempt_at = CASE WHEN ladder_attempts + 1 >= ${m} THEN NULL ELSE ${v} END, \
         updated_at = ${n}"
    )
}

/// PostgreSQL: the receive is one statement (no transaction around it):
/// it takes the rows no other receive holds (`SKIP LOCKED`), hides them and
/// records their attempts, earliest due first.
pub(super) async fn receive_pg<B: Own>(
    store: &B,
    account: &AccountId,
    target: &TargetId,
    ask: ReceiveAsk,
    now: DateTime<Utc>,
    token: Uuid,
) -> StoreResult<Vec<ReceivedRow>> {
    let db = store.db();
    db.write(format!(
        "WITH picked AS ( \
           SELECT id AS pid, claim_at AS pat FROM messages \
           WHERE target_id = $1 AND {waiting} AND claim_at <= $2 AND {RECEIVES_LEFT} AND account = $3 \
             AND EXISTS (SELECT 1 FROM targets t WHERE t.id = $1 AND t.enabled) \
           ORDER BY claim_at, id LIMIT $4 FOR UPDATE SKIP LOCKED), \
         received AS ( \
           UPDATE messages SET {set} FROM picked WHERE id = pid \
           RETURNING {MESSAGE_COLUMNS}, ladder_attempts, pat), \
         attempted AS ( \
           INSERT INTO attempts (message_id, attempt, started_at, finished_at, duration_ms, \
             outcome, account, target_id) \
           SELECT id, attempt_count, $2, $2, 0, 'Received', account, target_id FROM received \
           ON CONFLICT (message_id, attempt) DO NOTHING) \
         SELECT * FROM received ORDER BY pat, id",
        waiting = waiting(Dialect::Postgres),
        set = received_set(5, 6, 7, 2),
    ))
    .bind(target.as_str())
    .bind(At(now))
    .bind(account)
    .bind(i64::from(ask.max))
    .bind(At(now + ask.visibility))
    .bind(Uid(token))
    .bind(i64::from(ask.max_receives))
    .fetch_all()
    .await
}

/// SQLite: under its one writer, the messages are read, then changed and
/// their attempts recorded, in one transaction.
pub(super) async fn receive_sqlite<B: Own>(
    store: &B,
    account: &AccountId,
    target: &TargetId,
    ask: ReceiveAsk,
    now: DateTime<Utc>,
    token: Uuid,
) -> StoreResult<Vec<ReceivedRow>> {
    let mut tx = store.db().begin().await?;
    let picked: Vec<(Uid,)> = tx
        .sql(format!(
            "SELECT id FROM messages WHERE target_id = $1 AND {} AND claim_at <= $2 \
             AND {RECEIVES_LEFT} AND account = $3 ORDER BY claim_at, id LIMIT $4",
            waiting(Dialect::Sqlite)
        ))
        .bind(target.as_str())
        .bind(At(now))
        .bind(account)
        .bind(i64::from(ask.max))
        .fetch_all()
        .await?;
    if picked.is_empty() {
        return Ok(Vec::new());
    }
    let picked: Vec<Uuid> = picked.into_iter().map(|(id,)| id.0).collect();
    let mut stmt = tx
        .sql(format!(
            "UPDATE messages SET {} WHERE id IN (SELECT id FROM ",
            received_set(1, 2, 3, 4)
        ))
        .bind(At(now + ask.visibility))
        .bind(Uid(token))
        .bind(i64::from(ask.max_receives))
        .bind(At(now));
    ids(&picked).push_from(&mut stmt, "p");
    stmt.push(&format!(") RETURNING {MESSAGE_COLUMNS}, ladder_attempts"));
    let mut rows: Vec<ReceivedRow> = stmt.fetch_all().await?;
    let mut stmt = tx
        .sql(
            "INSERT INTO attempts (message_id, attempt, started_at, finished_at, duration_ms, \
               outcome, account, target_id) \
             SELECT id, attempt_count, $1, $1, 0, 'Received', account, target_id FROM messages \
             WHERE id IN (SELECT id FROM ",
        )
        .bind(At(now));
    ids(&picked).push_from(&mut stmt, "p");
    stmt.push(") ON CONFLICT (message_id, attempt) DO NOTHING");
    stmt.execute().await?;
    tx.commit().await?;
    // Earliest due first, as they were picked.
    let order: HashMap<Uuid, usize> = picked.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    rows.sort_by_key(|r| order.get(&r.key.0).copied());
    Ok(rows)
}
