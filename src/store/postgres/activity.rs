//! The overview's charts from PostgreSQL: an account's deliveries (with
//! their lateness), failed attempts and dead letters per hour, and per
//! target; each query walks one window index.

use chrono::{DateTime, Utc};

use super::{map_err, PgStore};
use crate::{
    domain::ids::TargetId,
    store::{portal::*, StoreResult},
};

impl PgStore {
    pub(super) async fn read_activity(
        &self,
        account: &str,
        since: DateTime<Utc>,
    ) -> StoreResult<Activity> {
        let late = "(extract(epoch FROM delivered_at - delivery_time) * 1000)::bigint";
        let delivered_sql = format!(
            "SELECT to_timestamp(floor(extract(epoch FROM delivered_at) / 3600) * 3600), count(*), \
               percentile_disc(0.5) WITHIN GROUP (ORDER BY {late}) FILTER (WHERE attempt_count = 1), \
               percentile_disc(0.99) WITHIN GROUP (ORDER BY {late}) FILTER (WHERE attempt_count = 1) \
             FROM messages WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1 GROUP BY 1"
        );
        let delivered =
            sqlx::query_as::<_, (DateTime<Utc>, i64, Option<i64>, Option<i64>)>(&delivered_sql)
                .bind(account)
                .bind(since)
                .persistent(false)
                .fetch_all(&self.pool);
        let per_hour = |sql: &'static str| {
            sqlx::query_as::<_, (DateTime<Utc>, i64)>(sql)
                .bind(account)
                .bind(since)
                .persistent(false)
                .fetch_all(&self.pool)
        };
        let failed = per_hour(
            "SELECT to_timestamp(floor(extract(epoch FROM finished_at) / 3600) * 3600), count(*) \
             FROM attempts WHERE account = $1 AND outcome <> 'Success' AND finished_at >= $2 GROUP BY 1",
        );
        let dead = per_hour(
            "SELECT to_timestamp(floor(extract(epoch FROM at) / 3600) * 3600), count(*) \
             FROM message_events WHERE kind = 'DeadLettered' AND account = $1 AND at >= $2 GROUP BY 1",
        );
        let per_target = |sql: &'static str| {
            sqlx::query_as::<_, (String, i64)>(sql)
                .bind(account)
                .bind(since)
                .persistent(false)
                .fetch_all(&self.pool)
        };
        let target_delivered = per_target(
            "SELECT target_id, count(*) FROM messages \
             WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1 GROUP BY 1",
        );
        let target_failed = per_target(
            "SELECT m.target_id, count(*) FROM attempts a JOIN messages m ON m.id = a.message_id \
             WHERE a.account = $1 AND a.outcome <> 'Success' AND a.finished_at >= $2 GROUP BY 1",
        );
        let (delivered, failed, dead, target_delivered, target_failed) =
            tokio::try_join!(delivered, failed, dead, target_delivered, target_failed)
                .map_err(map_err)?;

        let wide = |rows: Vec<(DateTime<Utc>, i64)>| {
            rows.into_iter().map(|(h, n)| (h, n as u64)).collect()
        };
        let by = |rows: Vec<(String, i64)>| {
            rows.into_iter()
                .map(|(t, n)| (TargetId::from_trusted(t), n as u64))
                .collect()
        };
        Ok(Activity::assemble(
            delivered
                .into_iter()
                .map(|(h, n, p50, p99)| (h, n as u64, p50, p99))
                .collect(),
            wide(failed),
            wide(dead),
            by(target_delivered),
            by(target_failed),
        ))
    }
}
