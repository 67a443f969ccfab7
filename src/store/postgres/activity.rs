//! The overview's charts from PostgreSQL: an account's deliveries (with
//! their lateness), failed attempts and dead letters per hour, and per
//! target; each query walks one window once.

use chrono::{DateTime, Utc};

use super::{map_err, PgStore};
use crate::{
    domain::ids::TargetId,
    store::{portal::*, StoreResult},
};

/// The hour (UTC) a delivery falls in.
/// (Hours since the epoch, in floating point: cheaper per row than numeric
/// `extract` or a time zone conversion.)
fn hour_of(column: &str) -> String {
    format!("floor(date_part('epoch', {column}) / 3600)::bigint")
}

/// The start of the `n`-th hour since the epoch.
fn hour_start(n: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(n * 3600, 0).unwrap_or_default()
}

impl PgStore {
    pub(super) async fn read_activity(
        &self,
        account: &str,
        since: DateTime<Utc>,
    ) -> StoreResult<Activity> {
        // One scan of the window's deliveries, counted by the database per
        // (hour, lateness bucket) and per target: no row is ranked or sent.
        // How late each first-attempt delivery was: from the later of its
        // delivery time and its creation (the row keeps no later reschedule).
        let late = lateness_ms_sql(
            Instants::Timestamptz,
            "delivered_at",
            "delivery_time",
            "created_at",
        );
        let delivered_sql = format!(
            "SELECT GROUPING(target_id) = 0, hour, bucket, target_id, count(*) FROM ( \
               SELECT target_id, {hour} AS hour, \
                 CASE WHEN attempt_count = 1 THEN {bucket} END AS bucket \
               FROM messages WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1) d \
             GROUP BY GROUPING SETS ((hour, bucket), (target_id))",
            hour = hour_of("delivered_at"),
            bucket = lateness_bucket_sql(&late),
        );
        let delivered = sqlx::query_as::<_, (bool, Option<i64>, Option<i64>, Option<String>, i64)>(
            &delivered_sql,
        )
        .bind(account)
        .bind(since)
        .persistent(false)
        .fetch_all(&self.pool);
        let per_hour = |sql: String| async move {
            sqlx::query_as::<_, (i64, i64)>(&sql)
                .bind(account)
                .bind(since)
                .persistent(false)
                .fetch_all(&self.pool)
                .await
        };
        let failed = per_hour(format!(
            "SELECT {}, count(*) FROM attempts \
             WHERE account = $1 AND outcome <> 'Success' AND finished_at >= $2 GROUP BY 1",
            hour_of("finished_at")
        ));
        let dead = per_hour(format!(
            "SELECT {}, count(*) FROM message_events \
             WHERE kind = 'DeadLettered' AND account = $1 AND at >= $2 GROUP BY 1",
            hour_of("at")
        ));
        let per_target = |sql: &'static str| {
            sqlx::query_as::<_, (String, i64)>(sql)
                .bind(account)
                .bind(since)
                .persistent(false)
                .fetch_all(&self.pool)
        };
        let target_failed = per_target(
            "SELECT target_id, count(*) FROM attempts \
             WHERE account = $1 AND outcome <> 'Success' AND finished_at >= $2 GROUP BY 1",
        );
        let (delivered, failed, dead, target_failed) =
            tokio::try_join!(delivered, failed, dead, target_failed).map_err(map_err)?;
        let (mut hours, mut target_delivered) = (Vec::new(), Vec::new());
        for (per_target, hour, bucket, target, n) in delivered {
            match (per_target, hour, target) {
                (true, _, Some(t)) => target_delivered.push((t, n)),
                (false, Some(h), _) => hours.push((hour_start(h), bucket, n as u64)),
                _ => {}
            }
        }

        let wide = |rows: Vec<(i64, i64)>| {
            rows.into_iter()
                .map(|(h, n)| (hour_start(h), n as u64))
                .collect()
        };
        let by = |rows: Vec<(String, i64)>| {
            rows.into_iter()
                .map(|(t, n)| (TargetId::from_trusted(t), n as u64))
                .collect()
        };
        Ok(Activity::assemble(
            delivered_hours(hours),
            wide(failed),
            wide(dead),
            by(target_delivered),
            by(target_failed),
        ))
    }
}
