//! What the portal reads beyond messages, once for both databases: the
//! overview, counts, the payload search, a key's head, the charts
//! (`activity`) and a message's history.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    activity,
    filter::{filtered, newest_first},
    rows::{MessageRow, MESSAGE_COLUMNS},
    At, Backend, Db, Stmt, Text, Uid,
};
use crate::{
    domain::{
        ids::{AccountId, MessageId, TargetId},
        message::{Message, OrderingKey},
    },
    store::{portal::*, state_from_str, MessageFilter, PortalReads, StoreError, StoreResult},
};

type EventRow = (At, String, String, Option<At>, Option<String>);

/// ` AND` the payload holds `text`. PostgreSQL keeps payloads as their
/// UTF-8 bytes (`bytea`: text refuses U+0000), and a byte search of the
/// UTF-8 text finds exactly the text (`position`); SQLite keeps text and
/// searches it with `instr`. Neither database has the other's function.
fn payload_holds<'q>(db: Db<'_>, q: &mut Stmt<'q, '_>, text: &'q str) {
    let text = Text(text.to_string());
    match db {
        Db::Postgres(_) => q
            .push(" AND position(")
            .push_bind(text)
            .push(" IN payload) > 0"),
        Db::Sqlite { .. } => q.push(" AND instr(payload, ").push_bind(text).push(") > 0"),
    };
}

#[async_trait]
impl<B: Backend> PortalReads for B {
    /// Five small queries at once, each answered from an index: counts per
    /// target and state (index-only, per target), the window's deliveries,
    /// dead letters and failed attempts, and the oldest due message. (SQLite
    /// would rather walk the account's messages by state than the window's
    /// partial index; `INDEXED BY` tells it which is smaller.)
    async fn overview(
        &self,
        account: &AccountId,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Overview> {
        let db = self.db();
        let counts = db
            .read(
                "SELECT t.id, s.column1, (SELECT count(*) FROM messages m \
                   WHERE m.target_id = t.id AND m.state = s.column1) \
                 FROM targets t \
                 CROSS JOIN (VALUES ('Scheduled'), ('Delivered'), ('Cancelled'), ('DeadLetter')) AS s \
                 WHERE t.account = $1",
            )
            .bind(account)
            .replanned()
            .fetch_all::<(String, String, i64)>();
        let window = |sql: String| {
            db.read(sql)
                .bind(account)
                .bind(At(since))
                .replanned()
                .fetch_one::<(i64,)>()
        };
        let delivered = window(format!(
            "SELECT count(*) FROM messages{} \
             WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1",
            db.dialect().indexed_by("messages_delivered")
        ));
        let dead = window(
            "SELECT count(*) FROM message_events WHERE kind = 'DeadLettered' AND account = $1 AND at >= $2"
                .into(),
        );
        let failed = window(
            "SELECT count(*) FROM attempts WHERE account = $1 AND outcome NOT IN ('Success', 'Received') AND finished_at >= $2"
                .into(),
        );
        let oldest = db
            .read(
                "SELECT id, next_attempt_at FROM messages \
                 WHERE state = 'Scheduled' AND NOT paused AND claim_at <= $2 AND account = $1 \
                 ORDER BY claim_at LIMIT 1",
            )
            .bind(account)
            .bind(At(now))
            .replanned()
            .fetch_optional::<(Uid, At)>();
        let (counts, (delivered,), (dead,), (failed,), oldest) =
            tokio::try_join!(counts, delivered, dead, failed, oldest)?;
        let mut overview = Overview {
            delivered: delivered as u64,
            dead_lettered: dead as u64,
            failed_attempts: failed as u64,
            ..Overview::default()
        };
        for (target, state, count) in counts.into_iter().filter(|c| c.2 > 0) {
            overview.counts.push(StateCount {
                target_id: TargetId::from_trusted(target),
                state: state_from_str(&state)?,
                count: count as u64,
            });
        }
        overview.oldest_due = oldest.map(|(id, at)| (MessageId(id.0), at.into()));
        Ok(overview)
    }

    async fn count_messages(&self, account: &AccountId, f: &MessageFilter) -> StoreResult<u64> {
        let (n,): (i64,) = filtered(self.db(), "SELECT count(*) FROM messages", account, f)
            .fetch_one()
            .await?;
        Ok(n as u64)
    }

    async fn count_messages_upto(
        &self,
        account: &AccountId,
        f: &MessageFilter,
        cap: u64,
    ) -> StoreResult<u64> {
        let mut q = filtered(
            self.db(),
            "SELECT count(*) FROM (SELECT 1 FROM messages",
            account,
            f,
        );
        q.push(" LIMIT ")
            .push_bind(i64::try_from(cap).unwrap_or(i64::MAX))
            .push(") capped");
        let (n,): (i64,) = q.fetch_one().await?;
        Ok(n as u64)
    }

    /// Two statements on the indexes that end in ids (`filter::newest_first`):
    /// where the scan of `scan` messages ends, then the matches above that
    /// end.
    async fn search_payloads(
        &self,
        account: &AccountId,
        f: &MessageFilter,
        before: Option<&MessageId>,
        text: &str,
        scan: u32,
        limit: u32,
    ) -> StoreResult<Searched> {
        let db = self.db();
        // The last message the scan may look at, and whether one lies below it.
        let edge: Vec<(Uid,)> = newest_first(
            db,
            "id",
            account,
            f,
            before,
            |_| {},
            i64::from(scan.max(1) - 1),
            2,
        )
        .fetch_all()
        .await?;
        let scanned_to = (edge.len() == 2).then(|| edge[0].0);
        let rows: Vec<MessageRow> = newest_first(
            db,
            MESSAGE_COLUMNS,
            account,
            f,
            before,
            |q| {
                if let Some(edge) = scanned_to {
                    q.push(" AND id >= ").push_bind(edge);
                }
                payload_holds(db, q, text);
            },
            0,
            i64::from(limit),
        )
        .fetch_all()
        .await?;
        Ok(Searched {
            messages: rows
                .into_iter()
                .map(Message::try_from)
                .collect::<StoreResult<_>>()?,
            scanned_to: scanned_to.map(|id| MessageId(id.0)),
        })
    }

    /// From the partial index of heads (`messages_key_head`).
    async fn key_head(
        &self,
        account: &AccountId,
        target: &TargetId,
        key: &OrderingKey,
    ) -> StoreResult<Option<MessageId>> {
        let db = self.db();
        let row: Option<(Uid,)> = db
            .read(format!(
                "SELECT id FROM messages WHERE target_id = $1 AND ordering_key = $2 AND account = $3 \
                 AND state = 'Scheduled' AND {} LIMIT 1",
                db.dialect().is_false("held")
            ))
            .bind(target.as_str())
            .bind(key)
            .bind(account)
            .fetch_optional()
            .await?;
        Ok(row.map(|(id,)| MessageId(id.0)))
    }

    async fn activity(&self, account: &AccountId, since: DateTime<Utc>) -> StoreResult<Activity> {
        activity::read(self.db(), account, since).await
    }

    async fn list_events(
        &self,
        account: &AccountId,
        id: &MessageId,
    ) -> StoreResult<Vec<MessageEvent>> {
        let rows: Vec<EventRow> = self
            .db()
            .read(
                "SELECT e.at, e.kind, e.from_state, e.delivery_time, e.detail FROM message_events e \
                 JOIN messages m ON m.id = e.message_id \
                 WHERE e.message_id = $1 AND m.account = $2 ORDER BY e.at, e.seq",
            )
            .bind(Uid(id.0))
            .bind(account)
            .fetch_all()
            .await?;
        rows.into_iter()
            .map(|(at, kind, from, delivery_time, detail)| {
                Ok(MessageEvent {
                    at: at.into(),
                    kind: EventKind::parse(&kind)
                        .ok_or_else(|| StoreError::Corrupt(format!("unknown event {kind}")))?,
                    from: state_from_str(&from)?,
                    delivery_time: delivery_time.map(Into::into),
                    detail,
                })
            })
            .collect()
    }
}
