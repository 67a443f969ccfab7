//! The overview's charts from SQLite: an account's deliveries (with their
//! lateness), failed attempts and dead letters per hour, and per target.
//! SQLite has no percentile aggregate: the lateness of the window's
//! first-attempt deliveries is read and ranked here.

use std::collections::BTreeMap;

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
        let delivered = sqlx::query_as::<_, (i64, i64, i64)>(
            "SELECT delivered_at / 3600000, delivered_at - delivery_time, attempt_count \
             FROM messages INDEXED BY messages_delivered \
             WHERE state = 'Delivered' AND delivered_at >= ?2 AND account = ?1",
        )
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
            "SELECT m.target_id, count(*) FROM attempts a JOIN messages m ON m.id = a.message_id \
             WHERE a.account = ?1 AND a.outcome <> 'Success' AND a.finished_at >= ?2 GROUP BY 1",
        );
        let (delivered, failed, dead, target_delivered, target_failed) =
            tokio::try_join!(delivered, failed, dead, target_delivered, target_failed)
                .map_err(map_err)?;

        // Per hour: how many, and the lateness of the first-attempt ones.
        let mut by_hour: BTreeMap<i64, (u64, Vec<i64>)> = BTreeMap::new();
        for (h, late, attempts) in delivered {
            let (n, lates) = by_hour.entry(h).or_default();
            *n += 1;
            if attempts == 1 {
                lates.push(late);
            }
        }
        let delivered = by_hour
            .into_iter()
            .map(|(h, (n, mut lates))| {
                lates.sort_unstable();
                (
                    from_ms(h * HOUR_MS),
                    n,
                    percentile_disc(&lates, 0.5),
                    percentile_disc(&lates, 0.99),
                )
            })
            .collect();
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
