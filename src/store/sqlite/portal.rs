//! What the portal reads from SQLite beyond messages: the overview, counts
//! and a message's history.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, rows::*, SqliteStore};
use crate::{
    domain::ids::{MessageId, TargetId},
    store::{portal::*, state_from_str, MessageFilter, PortalReads, StoreError, StoreResult},
};

#[async_trait]
impl PortalReads for SqliteStore {
    /// Five small queries at once, each answered from an index: counts per
    /// target and state (index-only, per target), the window's deliveries,
    /// dead letters and failed attempts, and the oldest due message. (SQLite
    /// would rather walk the account's messages by state than the window's
    /// partial index; `INDEXED BY` tells it which is smaller.)
    async fn overview(
        &self,
        account: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Overview> {
        let counts = sqlx::query_as::<_, (String, String, i64)>(
            "SELECT t.id, s.state, (SELECT count(*) FROM messages m WHERE m.target_id = t.id AND m.state = s.state) \
             FROM targets t CROSS JOIN (SELECT 'Scheduled' AS state UNION ALL SELECT 'Delivered' \
               UNION ALL SELECT 'Cancelled' UNION ALL SELECT 'DeadLetter') AS s \
             WHERE t.account = ?1",
        )
        .bind(account)
        .fetch_all(&self.reader);
        let window = |sql: &'static str| {
            sqlx::query_as::<_, (i64,)>(sql)
                .bind(account)
                .bind(ms(since))
                .fetch_one(&self.reader)
        };
        let delivered = window(
            "SELECT count(*) FROM messages INDEXED BY messages_delivered WHERE state = 'Delivered' AND delivered_at >= ?2 AND account = ?1",
        );
        let dead = window(
            "SELECT count(*) FROM message_events WHERE kind = 'DeadLettered' AND account = ?1 AND at >= ?2",
        );
        let failed = window(
            "SELECT count(*) FROM attempts WHERE account = ?1 AND outcome <> 'Success' AND finished_at >= ?2",
        );
        let oldest = sqlx::query_as::<_, (String, i64)>(
            "SELECT id, next_attempt_at FROM messages \
             WHERE state = 'Scheduled' AND NOT paused AND claim_at <= ?2 AND account = ?1 \
             ORDER BY claim_at LIMIT 1",
        )
        .bind(account)
        .bind(ms(now))
        .fetch_optional(&self.reader);
        let (counts, (delivered,), (dead,), (failed,), oldest) =
            tokio::try_join!(counts, delivered, dead, failed, oldest).map_err(map_err)?;
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
        overview.oldest_due = oldest
            .map(|(id, at)| Ok::<_, StoreError>((parse_id(&id)?, from_ms(at))))
            .transpose()?;
        Ok(overview)
    }

    async fn count_messages(&self, account: &str, f: &MessageFilter) -> StoreResult<u64> {
        let (n,): (i64,) = super::filter::filtered("SELECT count(*) FROM messages", account, f)
            .build_query_as()
            .fetch_one(&self.reader)
            .await
            .map_err(map_err)?;
        Ok(n as u64)
    }

    async fn count_messages_upto(
        &self,
        account: &str,
        f: &MessageFilter,
        cap: u64,
    ) -> StoreResult<u64> {
        let mut q =
            super::filter::filtered("SELECT count(*) FROM (SELECT 1 FROM messages", account, f);
        q.push(" LIMIT ")
            .push_bind(i64::try_from(cap).unwrap_or(i64::MAX))
            .push(") capped");
        let (n,): (i64,) = q
            .build_query_as()
            .fetch_one(&self.reader)
            .await
            .map_err(map_err)?;
        Ok(n as u64)
    }

    /// Two statements on the account's index of ids: where the scan of
    /// `scan` messages ends, then the matches above that end.
    async fn search_payloads(
        &self,
        account: &str,
        f: &MessageFilter,
        before: Option<&MessageId>,
        text: &str,
        scan: u32,
        limit: u32,
    ) -> StoreResult<Searched> {
        let mut edge = super::filter::filtered("SELECT id FROM messages", account, f);
        if let Some(m) = before {
            edge.push(" AND id < ").push_bind(id_text(m));
        }
        // The last message the scan may look at, and whether one lies below it.
        edge.push(" ORDER BY id DESC LIMIT 2 OFFSET ")
            .push_bind(i64::from(scan.max(1) - 1));
        let mut edge: Vec<(String,)> = edge
            .build_query_as()
            .fetch_all(&self.reader)
            .await
            .map_err(map_err)?;
        let scanned_to = (edge.len() == 2).then(|| edge.swap_remove(0));
        let head = format!("SELECT {MESSAGE_COLUMNS} FROM messages");
        let mut q = super::filter::filtered(&head, account, f);
        if let Some(m) = before {
            q.push(" AND id < ").push_bind(id_text(m));
        }
        if let Some((edge,)) = &scanned_to {
            q.push(" AND id >= ").push_bind(edge.clone());
        }
        q.push(" AND instr(payload, ")
            .push_bind(text)
            .push(") > 0 ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit));
        let rows: Vec<MessageRow> = q
            .build_query_as()
            .fetch_all(&self.reader)
            .await
            .map_err(map_err)?;
        let scanned_to = scanned_to.map(|(id,)| parse_id(&id)).transpose()?;
        Ok(Searched {
            messages: rows
                .into_iter()
                .map(crate::domain::message::Message::try_from)
                .collect::<StoreResult<_>>()?,
            scanned_to,
        })
    }

    /// From the partial index of heads (`messages_key_head`).
    async fn key_head(
        &self,
        account: &str,
        target: &TargetId,
        key: &str,
    ) -> StoreResult<Option<MessageId>> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT id FROM messages WHERE target_id = ? AND ordering_key = ? AND account = ? \
             AND state = 'Scheduled' AND held = 0 LIMIT 1",
        )
        .bind(target.as_str())
        .bind(key)
        .bind(account)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        row.map(|(id,)| parse_id(&id)).transpose()
    }

    async fn activity(&self, account: &str, since: DateTime<Utc>) -> StoreResult<Activity> {
        self.read_activity(account, since).await
    }

    async fn list_events(&self, account: &str, id: &MessageId) -> StoreResult<Vec<MessageEvent>> {
        let rows: Vec<(i64, String, String, Option<i64>, Option<String>)> = sqlx::query_as(
            "SELECT e.at, e.kind, e.from_state, e.delivery_time, e.detail FROM message_events e \
             JOIN messages m ON m.id = e.message_id \
             WHERE e.message_id = ? AND m.account = ? ORDER BY e.at, e.seq",
        )
        .bind(id_text(id))
        .bind(account)
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(|(at, kind, from, delivery_time, detail)| {
                Ok(MessageEvent {
                    at: from_ms(at),
                    kind: EventKind::parse(&kind)
                        .ok_or_else(|| StoreError::Corrupt(format!("unknown event {kind}")))?,
                    from: state_from_str(&from)?,
                    delivery_time: opt_from_ms(delivery_time),
                    detail,
                })
            })
            .collect()
    }
}
