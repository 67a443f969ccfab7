//! What the portal reads from PostgreSQL beyond messages: the overview,
//! counts and a message's history.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, PgStore};
use crate::{
    domain::ids::{MessageId, TargetId},
    store::{portal::*, state_from_str, MessageFilter, PortalReads, StoreError, StoreResult},
};

type EventRow = (
    DateTime<Utc>,
    String,
    String,
    Option<DateTime<Utc>>,
    Option<String>,
);

#[async_trait]
impl PortalReads for PgStore {
    /// Five small queries at once, each answered from an index: counts per
    /// target and state (index-only, per target), the window's deliveries,
    /// dead letters and failed attempts, and the oldest due message.
    async fn overview(
        &self,
        account: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Overview> {
        let counts = sqlx::query_as::<_, (String, String, i64)>(
            "SELECT t.id, s.state, (SELECT count(*) FROM messages m WHERE m.target_id = t.id AND m.state = s.state) \
             FROM targets t CROSS JOIN (VALUES ('Scheduled'), ('Delivered'), ('Cancelled'), ('DeadLetter')) AS s(state) \
             WHERE t.account = $1",
        )
        .bind(account)
        .persistent(false)
        .fetch_all(&self.pool);
        let window = |sql: &'static str| {
            sqlx::query_as::<_, (i64,)>(sql)
                .bind(account)
                .bind(since)
                .persistent(false)
                .fetch_one(&self.pool)
        };
        let delivered = window(
            "SELECT count(*) FROM messages WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1",
        );
        let dead = window(
            "SELECT count(*) FROM message_events WHERE kind = 'DeadLettered' AND account = $1 AND at >= $2",
        );
        let failed = window(
            "SELECT count(*) FROM attempts WHERE account = $1 AND outcome <> 'Success' AND finished_at >= $2",
        );
        let oldest = sqlx::query_as::<_, (uuid::Uuid, DateTime<Utc>)>(
            "SELECT id, next_attempt_at FROM messages \
             WHERE state = 'Scheduled' AND NOT paused AND claim_at <= $2 AND account = $1 \
             ORDER BY claim_at LIMIT 1",
        )
        .bind(account)
        .bind(now)
        .persistent(false)
        .fetch_optional(&self.pool);
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
            .map(|(id, at)| Ok::<_, StoreError>((MessageId(id), at)))
            .transpose()?;
        Ok(overview)
    }

    async fn count_messages(&self, account: &str, f: &MessageFilter) -> StoreResult<u64> {
        let (n,): (i64,) = super::filter::filtered("SELECT count(*) FROM messages", account, f)
            .build_query_as()
            .persistent(false)
            .fetch_one(&self.pool)
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
            .persistent(false)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(n as u64)
    }

    /// Two statements on the indexes that end in ids (`filter::newest_first`):
    /// where the scan of `scan` messages ends, then the matches above that
    /// end.
    async fn search_payloads(
        &self,
        account: &str,
        f: &MessageFilter,
        before: Option<&MessageId>,
        text: &str,
        scan: u32,
        limit: u32,
    ) -> StoreResult<Searched> {
        // The last message the scan may look at, and whether one lies below it.
        let edge: Vec<(uuid::Uuid,)> = super::filter::newest_first(
            "id",
            account,
            f,
            before,
            |_| {},
            i64::from(scan.max(1) - 1),
            2,
        )
        .build_query_as()
        .persistent(false)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        let scanned_to = (edge.len() == 2).then(|| edge[0]);
        let mut q = super::filter::newest_first(
            super::rows::MESSAGE_COLUMNS,
            account,
            f,
            before,
            |q| {
                if let Some((edge,)) = scanned_to {
                    q.push(" AND id >= ").push_bind(edge);
                }
                // Payloads are UTF-8 in bytea (text refuses U+0000): a byte
                // search of the UTF-8 text finds exactly the text.
                q.push(" AND position(")
                    .push_bind(text.as_bytes())
                    .push(" IN payload) > 0");
            },
            0,
            i64::from(limit),
        );
        let rows: Vec<super::rows::MessageRow> = q
            .build_query_as()
            .persistent(false)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(Searched {
            messages: rows
                .into_iter()
                .map(crate::domain::message::Message::try_from)
                .collect::<StoreResult<_>>()?,
            scanned_to: scanned_to.map(|(id,)| MessageId(id)),
        })
    }

    /// From the partial index of heads (`messages_key_head`).
    async fn key_head(
        &self,
        account: &str,
        target: &TargetId,
        key: &str,
    ) -> StoreResult<Option<MessageId>> {
        let row: Option<(uuid::Uuid,)> = sqlx::query_as(
            "SELECT id FROM messages WHERE target_id = $1 AND ordering_key = $2 AND account = $3 \
             AND state = 'Scheduled' AND NOT held LIMIT 1",
        )
        .bind(target.as_str())
        .bind(key)
        .bind(account)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(|(id,)| MessageId(id)))
    }

    async fn activity(&self, account: &str, since: DateTime<Utc>) -> StoreResult<Activity> {
        self.read_activity(account, since).await
    }

    async fn list_events(&self, account: &str, id: &MessageId) -> StoreResult<Vec<MessageEvent>> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT e.at, e.kind, e.from_state, e.delivery_time, e.detail FROM message_events e \
             JOIN messages m ON m.id = e.message_id \
             WHERE e.message_id = $1 AND m.account = $2 ORDER BY e.at, e.seq",
        )
        .bind(id.0)
        .bind(account)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(|(at, kind, from, delivery_time, detail)| {
                Ok(MessageEvent {
                    at,
                    kind: EventKind::parse(&kind)
                        .ok_or_else(|| StoreError::Corrupt(format!("unknown event {kind}")))?,
                    from: state_from_str(&from)?,
                    delivery_time,
                    detail,
                })
            })
            .collect()
    }
}
