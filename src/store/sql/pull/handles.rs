//! Acks and nacks by receipt handle: the handles as rows, the messages they
//! name locked (keys first, then rows in id order), and which handles did.

use super::*;
use crate::store::sql::events::{subscribes, tell_rows, told_columns, ToldRow};

/// The messages the handles name are Scheduled messages of this target
/// (`$target`) and account (`$account`); `$ids` is the handles' first
/// column as bound (`hid`). On PostgreSQL the rows are found by their key
/// alone, whatever the statistics say: right after a bulk insert, before
/// the table is analyzed, the planner took the target's index and read
/// every message of the target for each ack (50 ms for 100 handles among
/// 50,000 messages; 3 ms this way). The target's conditions are written so
/// that no index can take them (`IS NOT DISTINCT FROM`, which means `=`
/// here: none of them is NULL), and the key is given as an array.
pub(super) fn of_target(d: Dialect, target: usize, account: usize, ids: usize) -> String {
    match d {
        Dialect::Postgres => format!(
            "id = ANY(${ids}) AND (state, pull, target_id, account) \
             IS NOT DISTINCT FROM ('Scheduled', true, ${target}, ${account})"
        ),
        Dialect::Sqlite => format!(
            "state = 'Scheduled' AND pull = 1 AND target_id = ${target} AND account = ${account}"
        ),
    }
}

/// The handles as rows `(hid, htoken)`: named apart from the messages'
/// columns, so that a statement joining them names each without a table.
pub(super) fn handles(handles: &[ReceiptHandle]) -> Table {
    Table::new(vec![
        (
            "hid",
            Col::Uuid(handles.iter().map(|h| h.message.0).collect()),
        ),
        (
            "htoken",
            Col::Uuid(handles.iter().map(|h| h.token).collect()),
        ),
    ])
}

/// A transaction over the handles' messages: their keys locked, then their
/// rows (`locked_keys`), and where one message is named by several handles,
/// its current token (`tokens_if_repeated`).
pub(super) struct OnHandles {
    pub(super) tx: Tx,
    pub(super) d: Dialect,
    pub(super) keys: Vec<crate::store::ordering::Key>,
    pub(super) current: Vec<(Uid, Option<Uid>)>,
}

pub(super) async fn on_handles<B: Own>(
    store: &B,
    given: &[ReceiptHandle],
) -> StoreResult<OnHandles> {
    let mut tx = store.db().begin().await?;
    let d = tx.conn().dialect();
    let keys = locked_keys(store, &mut tx, given).await?;
    let current = tokens_if_repeated(&mut tx, given).await?;
    Ok(OnHandles {
        tx,
        d,
        keys,
        current,
    })
}

/// Acks the handles the long way: the keys of their messages locked first
/// (a message's key hands on to its next message), then their rows.
pub(super) async fn ack_each<B: Own>(
    store: &B,
    account: &AccountId,
    target: &TargetId,
    given: &[ReceiptHandle],
    now: DateTime<Utc>,
) -> StoreResult<Vec<bool>> {
    if given.is_empty() {
        return Ok(Vec::new());
    }
    let OnHandles {
        mut tx,
        d,
        keys,
        current,
    } = on_handles(store, given).await?;
    let mut stmt = tx
        .sql(
            "UPDATE messages SET state = 'Delivered', delivered_at = $1, claim_at = NULL, \
               next_attempt_at = NULL, lease_token = NULL, held = false, updated_at = $1 \
             FROM ",
        )
        .bind(At(now))
        .bind(target.as_str())
        .bind(account);
    // A join from the handles: each message found by its key, however
    // many the target holds.
    handles(given).push_from(&mut stmt, "h");
    stmt.push(" WHERE id = hid AND lease_token = htoken AND ")
        .push(&of_target(d, 2, 3, 4))
        .push(&format!(" RETURNING {}", told_columns()));
    let rows: Vec<ToldRow> = stmt.fetch_all().await?;
    let done: Vec<(Uid,)> = rows.iter().map(|r| (r.id,)).collect();
    store.settle_keys(&mut tx, &keys).await?;
    tell_rows(store, &mut tx, &rows, true, now).await?;
    if !keys.is_empty() {
        // The next message of a key may be receivable now, on any instance.
        store.notify_if_soon(&mut tx, now, now).await?;
    }
    tx.commit().await?;
    Ok(matched(given, &done, &current))
}

/// PostgreSQL: acks, in one statement, the handles' messages that have no
/// key (none hands on to a next message), each named by one handle, their
/// rows locked in the order of their ids; for each handle, whether it did.
pub(super) async fn ack_keyless_pg<B: Own>(
    store: &B,
    account: &AccountId,
    target: &TargetId,
    given: &[ReceiptHandle],
    now: DateTime<Utc>,
) -> StoreResult<Vec<bool>> {
    let mut seen = std::collections::HashSet::new();
    if !given.iter().all(|h| seen.insert(h.message.0)) {
        // A message named twice: which handle is its latest is read the long way.
        return Ok(vec![false; given.len()]);
    }
    let db = store.db();
    let mut stmt = db.write("WITH l AS (SELECT m.id AS lid FROM ");
    handles(given).push_from(&mut stmt, "h");
    stmt.push(&format!(
        " JOIN messages m ON m.id = hid AND m.lease_token = htoken \
         WHERE m.ordering_key IS NULL AND {} AND NOT {} ORDER BY m.id FOR UPDATE OF m) \
         UPDATE messages SET state = 'Delivered', delivered_at = $3, claim_at = NULL, \
           next_attempt_at = NULL, lease_token = NULL, held = false, updated_at = $3 \
         FROM l WHERE id = lid RETURNING id",
        "(m.state, m.pull, m.target_id, m.account) IS NOT DISTINCT FROM ('Scheduled', true, $4, $5)",
        // An account told of its acks takes the long way, in a transaction.
        subscribes("$5")
    ));
    let done: Vec<(Uid,)> = stmt
        .bind(At(now))
        .bind(target.as_str())
        .bind(account)
        .fetch_all()
        .await?;
    Ok(matched(given, &done, &[]))
}

/// Locks these messages' rows in the order of their ids, where rows are
/// locked: changes of several messages that no key orders (an ack beside
/// the end of last receives) then never wait for each other in a circle.
pub(super) async fn lock_rows(tx: &mut Tx, ids_: &[Uuid]) -> StoreResult<()> {
    if !tx.locks_rows() || ids_.len() < 2 {
        return Ok(());
    }
    let mut stmt = tx.sql("SELECT m.id FROM ");
    ids(ids_).push_from(&mut stmt, "p");
    stmt.push(" JOIN messages m ON m.id = p.id ORDER BY m.id FOR UPDATE OF m");
    stmt.execute().await?;
    Ok(())
}

/// The keys of the handles' messages, locked for the rest of `tx`, and then
/// the messages' rows.
pub(super) async fn locked_keys<B: Own>(
    store: &B,
    tx: &mut Tx,
    given: &[ReceiptHandle],
) -> StoreResult<Vec<crate::store::ordering::Key>> {
    let message_ids: Vec<MessageId> = given.iter().map(|h| h.message).collect();
    let keys = store.keys_of(tx, &message_ids).await?;
    store.lock_keys(tx, &keys).await?;
    let mut rows: Vec<Uuid> = message_ids.iter().map(|m| m.0).collect();
    rows.sort();
    rows.dedup();
    lock_rows(tx, &rows).await?;
    Ok(keys)
}

/// For each handle in order, whether its message is among `done` (and,
/// where a message was named by several handles, whether it was this one:
/// `current` holds the receive tokens read before the change).
pub(super) fn matched(
    given: &[ReceiptHandle],
    done: &[(Uid,)],
    current: &[(Uid, Option<Uid>)],
) -> Vec<bool> {
    given
        .iter()
        .map(|h| {
            done.iter().any(|(id,)| id.0 == h.message.0)
                && (current.is_empty()
                    || current
                        .iter()
                        .any(|(id, t)| id.0 == h.message.0 && t.map(|t| t.0) == Some(h.token)))
        })
        .collect()
}

/// Where one message is named by several handles, the current receive
/// token of each such message, read (locked where rows are locked) before
/// the change; otherwise nothing need be read.
pub(super) async fn tokens_if_repeated(
    tx: &mut Tx,
    given: &[ReceiptHandle],
) -> StoreResult<Vec<(Uid, Option<Uid>)>> {
    let distinct: std::collections::HashSet<Uuid> = given.iter().map(|h| h.message.0).collect();
    if distinct.len() == given.len() {
        return Ok(Vec::new());
    }
    let lock = tx.for_update();
    let distinct: Vec<Uuid> = distinct.into_iter().collect();
    let mut stmt = tx.sql("SELECT id, lease_token FROM messages WHERE id IN (SELECT id FROM ");
    ids(&distinct).push_from(&mut stmt, "p");
    stmt.push(&format!("){lock}"));
    stmt.fetch_all().await
}
