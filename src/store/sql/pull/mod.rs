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

mod ends;
mod handles;
mod receive;

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use self::{ends::*, handles::*, receive::*};
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
        if ask.then_wait && (receipt.items.len() as u32) < ask.max {
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
        end_received(self, &mut tx, &done_ids, now).await?;
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
        let dead = end_received(self, &mut tx, &found, now).await?;
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
