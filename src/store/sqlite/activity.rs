//! The overview's charts from SQLite: an account's deliveries (with their
//! lateness), failed attempts and dead letters per hour, and per target.
//! SQLite has no percentile aggregate: it counts the window's first-attempt
//! deliveries per lateness bucket, and the percentiles are ranked here.

use chrono::{DateTime, Utc};

use super::{
    map_err,
    rows::{from_ms, ms},
    SqliteStore,
};
use crate::{
    domain::ids::TargetId,
    store::{portal::*, StoreResult},
};

const HOUR_MS: i64 = 3_600_000;

impl SqliteStore {
    pub(super) async fn read_activity(
        &self,
        account: &str,
        since: DateTime<Utc>,
    ) -> StoreResult<Activity> {
        // Counted by SQLite per (hour, lateness bucket): no row is ranked
        // or sent here. Lateness runs from the later of the delivery time
        // and the creation (the row keeps no later reschedule).
        let delivered_sql = format!(
            "SELECT delivered_at / 3600000 AS hour, \
               CASE WHEN attempt_count = 1 THEN {} END AS bucket, count(*) \
             FROM messages INDEXED BY messages_delivered \
             WHERE state = 'Delivered' AND delivered_at >= ?2 AND account = ?1 GROUP BY 1, 2",
            lateness_bucket_sql(&lateness_ms_sql(
                Instants::EpochMs,
                "delivered_at",
                "delivery_time",
                "created_at"
            )),
        );
        let delivered = sqlx::query_as::<_, (i64, Option<i64>, i64)>(&delivered_sql)
            .bind(account)
            .bind(ms(since))
            .fetch_all(&self.reader);
        let per_hour = |sql: &'static str| {
            sqlx::query_as::<_, (i64, i64)>(sql)
                .bind(account)
                .bind(ms(since))
                .fetch_all(&self.reader)
        };
        let failed = per_hour(
            "SELECT finished_at / 3600000, count(*) FROM attempts \
             WHERE account = ?1 AND outcome <> 'Success' AND finished_at >= ?2 GROUP BY 1",
        );
        let dead = per_hour(
            "SELECT at / 3600000, count(*) FROM message_events \
             WHERE kind = 'DeadLettered' AND account = ?1 AND at >= ?2 GROUP BY 1",
        );
        let per_target = |sql: &'static str| {
            sqlx::query_as::<_, (String, i64)>(sql)
                .bind(account)
                .bind(ms(since))
                .fetch_all(&self.reader)
        };
        let target_delivered = per_target(
            "SELECT target_id, count(*) FROM messages INDEXED BY messages_delivered \
             WHERE state = 'Delivered' AND delivered_at >= ?2 AND account = ?1 GROUP BY 1",
        );
        let target_failed = per_target(
            "SELECT target_id, count(*) FROM attempts \
             WHERE account = ?1 AND outcome <> 'Success' AND finished_at >= ?2 GROUP BY 1",
        );
        let (delivered, failed, dead, target_delivered, target_failed) =
            tokio::try_join!(delivered, failed, dead, target_delivered, target_failed)
                .map_err(map_err)?;

        let delivered = delivered_hours(
            delivered
                .into_iter()
                .map(|(h, bucket, n)| (from_ms(h * HOUR_MS), bucket, n as u64))
                .collect(),
        );
        let hours = |rows: Vec<(i64, i64)>| {
            rows.into_iter()
                .map(|(h, n)| (from_ms(h * HOUR_MS), n as u64))
                .collect()
        };
        let by = |rows: Vec<(String, i64)>| {
            rows.into_iter()
                .map(|(t, n)| (TargetId::from_trusted(t), n as u64))
                .collect()
        };
        Ok(Activity::assemble(
            delivered,
            hours(failed),
            hours(dead),
            by(target_delivered),
            by(target_failed),
        ))
    }
}
