//! The overview's charts: an account's deliveries (with their lateness),
//! failed attempts and dead letters per hour, and per target, once for both
//! databases; each query walks one window once. The database counts the
//! window's first-attempt deliveries per lateness bucket, and the
//! percentiles are ranked here (`delivered_hours`).

use chrono::{DateTime, Utc};

use super::{At, Db};
use crate::{
    domain::ids::{AccountId, TargetId},
    store::{portal::*, StoreResult},
};

/// Deliveries per (hour, lateness bucket or None after a retry).
type DeliveredHours = Vec<(DateTime<Utc>, Option<i64>, u64)>;

/// PostgreSQL's count of deliveries per grouping: whether per target, the
/// hour, the bucket, the target, the count.
type GroupedRow = (bool, Option<i64>, Option<i64>, Option<String>, i64);

/// The hour (UTC) a stored time falls in, as hours since the epoch: from
/// `timestamptz` in PostgreSQL (in floating point: cheaper per row than
/// numeric `extract` or a time zone conversion), from milliseconds in
/// SQLite.
fn hour_of(db: Db<'_>, column: &str) -> String {
    match db {
        Db::Postgres(_) => format!("floor(date_part('epoch', {column}) / 3600)::bigint"),
        Db::Sqlite { .. } => format!("{column} / 3600000"),
    }
}

/// The start of the `n`-th hour since the epoch.
fn hour_start(n: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(n * 3600, 0).unwrap_or_default()
}

/// How late each first-attempt delivery was, bucketed: from the later of
/// its delivery time and its creation (the row keeps no later reschedule).
fn lateness_bucket(db: Db<'_>) -> String {
    let instants = match db {
        Db::Postgres(_) => Instants::Timestamptz,
        Db::Sqlite { .. } => Instants::EpochMs,
    };
    lateness_bucket_sql(&lateness_ms_sql(
        instants,
        "delivered_at",
        "delivery_time",
        "created_at",
    ))
}

pub(super) async fn read(
    db: Db<'_>,
    account: &AccountId,
    since: DateTime<Utc>,
) -> StoreResult<Activity> {
    let per_hour = |sql: String| {
        db.read(sql)
            .bind(account)
            .bind(At(since))
            .replanned()
            .fetch_all::<(i64, i64)>()
    };
    let failed = per_hour(format!(
        "SELECT {}, count(*) FROM attempts \
         WHERE account = $1 AND outcome NOT IN ('Success', 'Received') AND finished_at >= $2 GROUP BY 1",
        hour_of(db, "finished_at")
    ));
    let dead = per_hour(format!(
        "SELECT {}, count(*) FROM message_events \
         WHERE kind = 'DeadLettered' AND account = $1 AND at >= $2 GROUP BY 1",
        hour_of(db, "at")
    ));
    let target_failed = db
        .read(
            "SELECT target_id, count(*) FROM attempts \
             WHERE account = $1 AND outcome NOT IN ('Success', 'Received') AND finished_at >= $2 GROUP BY 1",
        )
        .bind(account)
        .bind(At(since))
        .replanned()
        .fetch_all::<(String, i64)>();
    let ((delivered, target_delivered), failed, dead, target_failed) =
        tokio::try_join!(delivered(db, account, since), failed, dead, target_failed)?;

    let hours = |rows: Vec<(i64, i64)>| {
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
        delivered_hours(delivered),
        hours(failed),
        hours(dead),
        by(target_delivered),
        by(target_failed),
    ))
}

/// The window's deliveries counted by the database per (hour, lateness
/// bucket) and per target: no row is ranked or sent. PostgreSQL counts both
/// in one scan (`GROUPING SETS`); SQLite has no grouping sets and scans the
/// window twice, at once, told to read the index of deliveries (it would
/// rather walk the account's messages by state).
async fn delivered(
    db: Db<'_>,
    account: &AccountId,
    since: DateTime<Utc>,
) -> StoreResult<(DeliveredHours, Vec<(String, i64)>)> {
    let (hour, bucket) = (hour_of(db, "delivered_at"), lateness_bucket(db));
    let stmt = |sql: String| db.read(sql).bind(account).bind(At(since)).replanned();
    match db {
        Db::Postgres(_) => {
            let rows: Vec<GroupedRow> = stmt(format!(
                "SELECT GROUPING(target_id) = 0, hour, bucket, target_id, count(*) FROM ( \
                   SELECT target_id, {hour} AS hour, \
                     CASE WHEN attempt_count = 1 THEN {bucket} END AS bucket \
                   FROM messages WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1) d \
                 GROUP BY GROUPING SETS ((hour, bucket), (target_id))"
            ))
            .fetch_all()
            .await?;
            let (mut hours, mut by_target) = (Vec::new(), Vec::new());
            for (per_target, hour, bucket, target, n) in rows {
                match (per_target, hour, target) {
                    (true, _, Some(t)) => by_target.push((t, n)),
                    (false, Some(h), _) => hours.push((hour_start(h), bucket, n as u64)),
                    _ => {}
                }
            }
            Ok((hours, by_target))
        }
        Db::Sqlite { .. } => {
            let index = db.dialect().indexed_by("messages_delivered");
            let hours = stmt(format!(
                "SELECT {hour} AS hour, CASE WHEN attempt_count = 1 THEN {bucket} END AS bucket, \
                   count(*) \
                 FROM messages{index} \
                 WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1 GROUP BY 1, 2"
            ))
            .fetch_all::<(i64, Option<i64>, i64)>();
            let by_target = stmt(format!(
                "SELECT target_id, count(*) FROM messages{index} \
                 WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1 GROUP BY 1"
            ))
            .fetch_all::<(String, i64)>();
            let (hours, by_target) = tokio::try_join!(hours, by_target)?;
            let hours = hours
                .into_iter()
                .map(|(h, bucket, n)| (hour_start(h), bucket, n as u64))
                .collect();
            Ok((hours, by_target))
        }
    }
}
