//! Pull targets (docs/api.md#pull-targets), once for both databases.
//!
//! A pull target's message is never claimed by the sweeper (`pull` keeps it
//! out of the sweeper's index). A receive is a claim with the consumer's
//! lease: the message stays Scheduled, hidden until `claim_at`, and
//! `lease_token` holds the receive's token, which the receipt handle
//! carries beside the message id. `ladder_attempts` counts the receives
//! since the ladder last started; after the last allowed one
//! `next_attempt_at` is NULL (there is no next receive), and when that
//! visibility runs out the message is a dead letter.
//!
//! Receives lock rows without waiting (`SKIP LOCKED`) and take no key lock:
//! like the sweeper's claims, they only ever see a key's head. Everything
//! that ends a message (ack, dead letter) or moves it in its key's order
//! locks its key first, as every writer of a key does (`sql::ordering`).

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    dialect::Dialect,
    own::Own,
    rows::{MessageRow, MESSAGE_COLUMNS},
    table::{Col, Table},
    At, Tx, Uid,
};
use crate::{
    domain::{
        ids::{AccountId, MessageId, TargetId},
        message::Message,
        receipt::ReceiptHandle,
        target::{pull::PullConfig, TargetConfig},
    },
    store::{
        ordering::distinct_keys,
        pull::{Depth, Receipt, ReceiveAsk, ReceivedItem},
        PullStore, StoreResult,
    },
};

/// The terms of `messages_pull`'s predicate, as each database's statements
/// must state them to use it: receivable when `claim_at` has come.
fn waiting(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "state = 'Scheduled' AND NOT paused AND NOT held AND pull",
        Dialect::Sqlite => "state = 'Scheduled' AND paused = 0 AND held = 0 AND pull = 1",
    }
}

/// Not a message whose last allowed receive ran out (a dead letter to be).
const RECEIVES_LEFT: &str = "(lease_token IS NULL OR next_attempt_at IS NOT NULL)";

/// `messages_pull_last`'s predicate: received for the last time.
fn last_received(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => {
            "state = 'Scheduled' AND pull AND lease_token IS NOT NULL AND next_attempt_at IS NULL"
        }
        Dialect::Sqlite => {
            "state = 'Scheduled' AND pull = 1 AND lease_token IS NOT NULL AND next_attempt_at IS NULL"
        }
    }
}

fn ids(ids: &[Uuid]) -> Table {
    Table::new(vec![("id", Col::Uuid(ids.to_vec()))])
}

/// The messages the handles name are Scheduled messages of this target
/// (`$target`) and account (`$account`); `$ids` is the handles' first
/// column as bound (`hid`). On PostgreSQL the rows are found by their key
/// alone, whatever the statistics say: right after a bulk insert, before
/// the table is analyzed, the planner took the target's index and read
/// every message of the target for each ack (50 ms for 100 handles among
/// 50,000 messages; 3 ms this way). The target's conditions are written so
/// that no index can take them (`IS NOT DISTINCT FROM`, which means `=`
/// here: none of them is NULL), and the key is given as an array.
fn of_target(d: Dialect, target: usize, account: usize, ids: usize) -> String {
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
fn handles(handles: &[ReceiptHandle]) -> Table {
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

#[derive(sqlx::FromRow)]
struct ReceivedRow {
    #[sqlx(flatten)]
    message: MessageRow,
    ladder_attempts: i32,
    /// The message's id again, for ordering before the row is converted.
    #[sqlx(rename = "id")]
    key: Uid,
}

#[async_trait]
impl<B: Own> PullStore for B {
    async fn receive(
        &self,
        account: &AccountId,
        target: &TargetId,
        ask: ReceiveAsk,
        now: DateTime<Utc>,
    ) -> StoreResult<Receipt> {
        let until = now + ask.visibility;
        let token = Uuid::new_v4();
        let rows = match self.db().dialect() {
            Dialect::Postgres => receive_pg(self, account, target, ask, now, token).await?,
            Dialect::Sqlite => receive_sqlite(self, account, target, ask, now, token).await?,
        };
        let mut receipt = Receipt::default();
        for r in rows {
            let message: Message = r.message.try_into()?;
            if message.next_attempt_at.is_none() {
                receipt.last_until = Some(until);
            }
            receipt.items.push(ReceivedItem {
                handle: ReceiptHandle {
                    message: message.id,
                    token,
                },
                receive_count: r.ladder_attempts.max(0) as u32,
                message,
            });
        }
        if (receipt.items.len() as u32) < ask.max {
            receipt.next_at = self
                .next_receivable(std::slice::from_ref(target))
                .await?
                .into_iter()
                .map(|(_, at)| at)
                .next();
        }
        Ok(receipt)
    }

    async fn ack(
        &self,
        account: &AccountId,
        target: &TargetId,
        given: &[ReceiptHandle],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<bool>> {
        if given.is_empty() {
            return Ok(Vec::new());
        }
        // PostgreSQL: the messages without a key, each named once, in one
        // statement; whatever is left (a message with a key, a repeated or
        // stale handle) the long way below.
        let fast = if self.db().dialect() == Dialect::Postgres {
            let done = ack_keyless_pg(self, account, target, given, now).await?;
            if done.iter().all(|d| *d) {
                return Ok(done);
            }
            Some(done)
        } else {
            None
        };
        let given_left: Vec<ReceiptHandle> = match &fast {
            Some(done) => given
                .iter()
                .zip(done)
                .filter(|(_, d)| !**d)
                .map(|(h, _)| *h)
                .collect(),
            None => given.to_vec(),
        };
        let slow = ack_each(self, account, target, &given_left, now).await?;
        Ok(match fast {
            None => slow,
            Some(done) => {
                let mut slow = slow.into_iter();
                done.into_iter()
                    .map(|d| d || slow.next().unwrap_or(false))
                    .collect()
            }
        })
    }

    async fn nack(
        &self,
        account: &AccountId,
        target: &TargetId,
        given: &[ReceiptHandle],
        until: DateTime<Utc>,
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
        } = on_handles(self, given).await?;
        // With receives left: receivable again at `until`, the handle
        // stale. After the last allowed one: its last visibility ends at
        // `until`, when it is a dead letter (a fresh token keeps the old
        // handle stale meanwhile; `until` now ends it here).
        let mut stmt = tx
            .sql(
                "UPDATE messages SET \
               claim_at = $2, \
               lease_token = CASE WHEN next_attempt_at IS NULL THEN $3 ELSE NULL END, \
               next_attempt_at = CASE WHEN next_attempt_at IS NULL THEN NULL ELSE $2 END, \
               updated_at = $1 \
             FROM ",
            )
            .bind(At(now))
            .bind(At(until))
            .bind(Uid(Uuid::new_v4()))
            .bind(target.as_str())
            .bind(account);
        handles(given).push_from(&mut stmt, "h");
        stmt.push(" WHERE id = hid AND lease_token = htoken AND ")
            .push(&of_target(d, 4, 5, 6))
            .push(" RETURNING id");
        let done: Vec<(Uid,)> = stmt.fetch_all().await?;
        let done_ids: Vec<Uuid> = done.iter().map(|(id,)| id.0).collect();
        end_received(&mut tx, &done_ids, now).await?;
        self.settle_keys(&mut tx, &keys).await?;
        self.notify_if_soon(&mut tx, until, now).await?;
        tx.commit().await?;
        Ok(matched(given, &done, &current))
    }

    async fn set_visibility(
        &self,
        account: &AccountId,
        target: &TargetId,
        handle: &ReceiptHandle,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let changed = tx
            .sql(
                "UPDATE messages SET claim_at = $1, \
                   next_attempt_at = CASE WHEN next_attempt_at IS NULL THEN NULL ELSE $1 END, \
                   updated_at = $2 \
                 WHERE id = $3 AND lease_token = $4 AND state = 'Scheduled' AND pull = true \
                   AND target_id = $5 AND account = $6",
            )
            .bind(At(until))
            .bind(At(now))
            .bind(Uid(handle.message.0))
            .bind(Uid(handle.token))
            .bind(target.as_str())
            .bind(account)
            .execute()
            .await?;
        self.notify_if_soon(&mut tx, until, now).await?;
        tx.commit().await?;
        Ok(changed > 0)
    }

    async fn next_receivable(
        &self,
        targets: &[TargetId],
    ) -> StoreResult<Vec<(TargetId, DateTime<Utc>)>> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.db();
        let d = db.dialect();
        // Each target's earliest by its own index, not a scan of them all.
        let mut stmt = db.read(
            "SELECT w.t, (SELECT min(claim_at) FROM messages \
               WHERE target_id = w.t AND ",
        );
        stmt.push(waiting(d))
            .push(" AND ")
            .push(RECEIVES_LEFT)
            .push(") FROM ");
        Table::new(vec![(
            "t",
            Col::Text(targets.iter().map(|t| t.as_str().to_string()).collect()),
        )])
        .push_from(&mut stmt, "w");
        let rows: Vec<(String, Option<At>)> = stmt.fetch_all().await?;
        Ok(rows
            .into_iter()
            .filter_map(|(t, at)| Some((TargetId::from_trusted(t), at?.into())))
            .collect())
    }

    async fn dead_letter_unacked(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<(MessageId, TargetId)>> {
        let db = self.db();
        let found: Vec<(Uid,)> = db
            .read(format!(
                "SELECT id FROM messages WHERE {} AND claim_at <= $1 ORDER BY claim_at LIMIT $2",
                last_received(db.dialect())
            ))
            .bind(At(now))
            .bind(i64::from(limit))
            .fetch_all()
            .await?;
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let found: Vec<Uuid> = found.into_iter().map(|(id,)| id.0).collect();
        let mut tx = self.db().begin().await?;
        let message_ids: Vec<MessageId> = found.iter().copied().map(MessageId).collect();
        let keys = self.keys_of(&mut tx, &message_ids).await?;
        self.lock_keys(&mut tx, &keys).await?;
        lock_rows(&mut tx, &found).await?;
        let dead = end_received(&mut tx, &found, now).await?;
        self.settle_keys(&mut tx, &keys).await?;
        if !keys.is_empty() {
            self.notify_if_soon(&mut tx, now, now).await?;
        }
        tx.commit().await?;
        Ok(dead)
    }

    async fn next_unacked_end(&self) -> StoreResult<Option<DateTime<Utc>>> {
        let db = self.db();
        let row: Option<(Option<At>,)> = db
            .read(format!(
                "SELECT min(claim_at) FROM messages WHERE {}",
                last_received(db.dialect())
            ))
            .fetch_optional()
            .await?;
        Ok(row.and_then(|(at,)| at).map(Into::into))
    }

    async fn expire_unreceived(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
        let db = self.db();
        let targets: Vec<(String, sqlx::types::Json<serde_json::Value>)> = db
            .read("SELECT id, config FROM targets WHERE kind = 'pull'")
            .fetch_all()
            .await?;
        let mut expired = 0;
        for (target, config) in targets {
            let Ok(TargetConfig::Pull(config)) = TargetConfig::from_stored_json("pull", config.0)
            else {
                continue;
            };
            expired += expire_target(self, &target, &config, now, limit).await?;
        }
        Ok(expired)
    }

    async fn depth(
        &self,
        account: &AccountId,
        target: &TargetId,
        now: DateTime<Utc>,
    ) -> StoreResult<Depth> {
        let db = self.db();
        let row: (i64, i64, i64, Option<At>, i64) = db
            .read(
                "SELECT \
                   COALESCE(sum(CASE WHEN claim_at <= $3 AND NOT (paused OR held) \
                     AND (lease_token IS NULL OR next_attempt_at IS NOT NULL) THEN 1 ELSE 0 END), 0), \
                   COALESCE(sum(CASE WHEN lease_token IS NOT NULL AND claim_at > $3 THEN 1 ELSE 0 END), 0), \
                   count(*), \
                   min(CASE WHEN claim_at <= $3 AND NOT (paused OR held) \
                     AND (lease_token IS NULL OR next_attempt_at IS NOT NULL) THEN delivery_time END), \
                   (SELECT count(*) FROM messages d WHERE d.target_id = $1 AND d.account = $2 \
                     AND d.state = 'DeadLetter') \
                 FROM messages WHERE target_id = $1 AND account = $2 AND state = 'Scheduled'",
            )
            .bind(target.as_str())
            .bind(account)
            .bind(At(now))
            .fetch_one()
            .await?;
        let (receives,): (i64,) = db
            .read(
                "SELECT count(*) FROM attempts WHERE target_id = $1 AND account = $2 \
                 AND outcome = 'Received'",
            )
            .bind(target.as_str())
            .bind(account)
            .fetch_one()
            .await?;
        let (due, hidden, scheduled, oldest, dead) = row;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(Depth {
            due: n(due),
            hidden: n(hidden),
            later: n(scheduled).saturating_sub(n(due) + n(hidden)),
            dead: n(dead),
            oldest_due: oldest.map(Into::into),
            receives: n(receives),
        })
    }

    async fn depth_totals(&self, now: DateTime<Utc>) -> StoreResult<(u64, u64)> {
        let db = self.db();
        let d = db.dialect();
        let (due,): (i64,) = db
            .read(format!(
                "SELECT count(*) FROM messages WHERE {} AND claim_at <= $1 AND {RECEIVES_LEFT}",
                waiting(d)
            ))
            .bind(At(now))
            .fetch_one()
            .await?;
        let (hidden,): (i64,) = db
            .read(format!(
                "SELECT count(*) FROM messages WHERE {} AND claim_at > $1 AND lease_token IS NOT NULL",
                waiting(d)
            ))
            .bind(At(now))
            .fetch_one()
            .await?;
        Ok((
            u64::try_from(due).unwrap_or(0),
            u64::try_from(hidden).unwrap_or(0),
        ))
    }
}

/// The columns a receive sets on the messages it takes (`$v` the end of the
/// visibility, `$t` the receive's token, `$m` the receives allowed, `$n` now).
fn received_set(v: usize, t: usize, m: usize, n: usize) -> String {
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
async fn receive_pg<B: Own>(
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
async fn receive_sqlite<B: Own>(
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

/// A transaction over the handles' messages: their keys locked, then their
/// rows (`locked_keys`), and where one message is named by several handles,
/// its current token (`tokens_if_repeated`).
struct OnHandles {
    tx: Tx,
    d: Dialect,
    keys: Vec<crate::store::ordering::Key>,
    current: Vec<(Uid, Option<Uid>)>,
}

async fn on_handles<B: Own>(store: &B, given: &[ReceiptHandle]) -> StoreResult<OnHandles> {
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
async fn ack_each<B: Own>(
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
        .push(" RETURNING id");
    let done: Vec<(Uid,)> = stmt.fetch_all().await?;
    store.settle_keys(&mut tx, &keys).await?;
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
async fn ack_keyless_pg<B: Own>(
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
         WHERE m.ordering_key IS NULL AND {} ORDER BY m.id FOR UPDATE OF m) \
         UPDATE messages SET state = 'Delivered', delivered_at = $3, claim_at = NULL, \
           next_attempt_at = NULL, lease_token = NULL, held = false, updated_at = $3 \
         FROM l WHERE id = lid RETURNING id",
        "(m.state, m.pull, m.target_id, m.account) IS NOT DISTINCT FROM ('Scheduled', true, $4, $5)"
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
async fn lock_rows(tx: &mut Tx, ids_: &[Uuid]) -> StoreResult<()> {
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
async fn locked_keys<B: Own>(
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
fn matched(given: &[ReceiptHandle], done: &[(Uid,)], current: &[(Uid, Option<Uid>)]) -> Vec<bool> {
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
async fn tokens_if_repeated(
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

/// Makes dead letters of those of `ids` whose last allowed receive's
/// visibility has run out by `now`, and enters each in its history. Their
/// keys must be locked.
async fn end_received(
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
    stmt.push(") RETURNING id, target_id");
    let dead: Vec<(Uid, String)> = stmt.fetch_all().await?;
    record_dead(tx, &dead, now).await?;
    Ok(dead
        .into_iter()
        .map(|(id, t)| (MessageId(id.0), TargetId::from_trusted(t)))
        .collect())
}

/// Enters new dead letters in their messages' history (the portal's
/// overview counts them there).
async fn record_dead(tx: &mut Tx, dead: &[(Uid, String)], now: DateTime<Utc>) -> StoreResult<()> {
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
    let ids_: Vec<Uuid> = dead.iter().map(|(id, _)| id.0).collect();
    ids(&ids_).push_from(&mut stmt, "p");
    stmt.push(")");
    stmt.execute().await?;
    Ok(())
}

/// One pull target's messages not received within its retention.
async fn expire_target<B: Own>(
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
    stmt.push(") RETURNING id, target_id");
    let dead: Vec<(Uid, String)> = stmt.fetch_all().await?;
    record_dead(&mut tx, &dead, now).await?;
    store.settle_keys(&mut tx, &keys).await?;
    if !keys.is_empty() {
        store.notify_if_soon(&mut tx, now, now).await?;
    }
    tx.commit().await?;
    Ok(dead.len() as u64)
}
