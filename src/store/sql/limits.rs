//! Account limits (`domain::limits`) counted once for both databases, in
//! the transaction that would pass them. Where writers run side by side
//! (PostgreSQL), every writer of one account's count takes the same
//! transaction-level advisory lock first, so that two requests racing past
//! a limit by one leave the account at the limit: the second counts after
//! the first has committed. SQLite's one writer serialises them already.

use async_trait::async_trait;

use chrono::{DateTime, Utc};

use super::{
    dialect::Dialect,
    events::from_matching,
    keeps::{Keeps, NAMED_TOKEN, OWNER_CHARS},
    At, Tx,
};
use crate::{
    domain::{
        ids::{AccountId, ScheduleId},
        limits::{check, Limit, OverLimit},
        schedule::{Every, Recurrence},
    },
    store::{CountStore, InstancesSeen, StoreError, StoreResult},
};

/// The advisory locks' class ("LIMT"), beside the hash of account and limit.
const LOCK_CLASS: i32 = 0x4c49_4d54;

/// Locks `limit`'s count of `account` for the rest of the transaction.
async fn lock(tx: &mut Tx, account: &AccountId, limit: Limit) -> StoreResult<()> {
    if !tx.locks_rows() {
        return Ok(());
    }
    tx.sql("SELECT pg_advisory_xact_lock($1, hashtext($2 || chr(31) || $3))")
        .bind(LOCK_CLASS)
        .bind(account)
        .bind(limit.key())
        .execute()
        .await?;
    Ok(())
}

/// What a limit of rows counts.
#[derive(Clone, Copy)]
pub(crate) enum Rows {
    Targets,
    Subscriptions,
    Schedules,
}

impl Rows {
    fn limit(self) -> Limit {
        match self {
            Rows::Targets => Limit::Targets,
            Rows::Subscriptions => Limit::Subscriptions,
            Rows::Schedules => Limit::Schedules,
        }
    }

    fn table(self) -> &'static str {
        match self {
            Rows::Targets => "targets",
            Rows::Subscriptions => "subscriptions",
            Rows::Schedules => "schedules",
        }
    }
}

/// Inside `tx`, before the write: refuses (`StoreError::Quota`) what would
/// take `account` past its limit of `rows` by `adding`, and holds the count
/// still until the transaction ends.
pub(crate) async fn room_for<B: Keeps>(
    store: &B,
    tx: &mut Tx,
    account: &AccountId,
    rows: Rows,
    adding: u64,
) -> StoreResult<()> {
    let limit = rows.limit();
    lock(tx, account, limit).await?;
    let (has,): (i64,) = tx
        .sql(format!(
            "SELECT count(*) FROM {} WHERE account = $1",
            rows.table()
        ))
        .bind(account)
        .fetch_one()
        .await?;
    check(limit, store.limits().of(limit), has.max(0) as u64, adding).map_err(StoreError::Quota)
}

/// Inside `tx`, before a schedule is saved: refuses what would take the
/// runs a minute of all of `account`'s schedules, with `rule` in place of
/// the schedule `replacing` (when it is a change), past
/// `limits.schedule_runs_per_second` times sixty; holds the schedules'
/// rules still until the transaction ends.
pub(crate) async fn room_for_runs<B: Keeps>(
    store: &B,
    tx: &mut Tx,
    account: &AccountId,
    rule: &Recurrence,
    replacing: Option<&ScheduleId>,
) -> StoreResult<()> {
    let limit = Limit::ScheduleRunsPerSecond;
    lock(tx, account, limit).await?;
    // A five-field cron runs at most once a minute; only `every` is read.
    let everies: Vec<(Option<String>,)> = tx
        .sql("SELECT every FROM schedules WHERE account = $1 AND id <> $2")
        .bind(account)
        .bind(replacing.map_or("", ScheduleId::as_str))
        .fetch_all()
        .await?;
    let has: f64 = everies
        .iter()
        .map(|(every,)| match every.as_deref().map(str::parse::<Every>) {
            Some(Ok(every)) => Recurrence::Every(every).runs_per_minute(),
            // A cron, or an `every` that no longer reads (it did when saved).
            _ => 1.0,
        })
        .sum();
    // A minute's runs against sixty times the limit, so that a limit
    // reached exactly (1,000 schedules every second: 60,000 a minute) is
    // allowed; a hair of slack absorbs the sum's rounding.
    let max = store.limits().of(limit);
    if has + rule.runs_per_minute() > max as f64 * 60.0 + 1e-6 {
        return Err(StoreError::Quota(OverLimit { limit, max }));
    }
    Ok(())
}

#[async_trait]
impl<B: Keeps> CountStore for B {
    async fn scheduled_messages(&self, account: &AccountId) -> StoreResult<u64> {
        let (n,): (i64,) = self
            .db()
            .read("SELECT CAST(COALESCE(sum(n), 0) AS bigint) FROM scheduled_counts WHERE account = $1")
            .bind(account)
            .fetch_one()
            .await?;
        Ok(n.max(0) as u64)
    }

    async fn reaching(&self, account: &AccountId, ty: &str) -> StoreResult<u64> {
        let mut stmt = self.db().read("SELECT count(DISTINCT s.target_id)");
        from_matching(&mut stmt, account, ty);
        let (n,): (i64,) = stmt.fetch_one().await?;
        Ok(n.max(0) as u64)
    }

    async fn token_failures(
        &self,
        keys: &[String],
        since_ms: i64,
    ) -> StoreResult<Vec<(u64, Option<i64>)>> {
        let mut counts = Vec::with_capacity(keys.len());
        for key in keys {
            let (n, oldest): (i64, Option<i64>) = self
                .db()
                .read(
                    "SELECT count(*), min(at_ms) FROM token_failures WHERE key = $1 AND at_ms > $2",
                )
                .bind(key.as_str())
                .bind(since_ms)
                .fetch_one()
                .await?;
            counts.push((n.max(0) as u64, oldest));
        }
        Ok(counts)
    }

    async fn add_token_failure(&self, keys: &[String], at_ms: i64) -> StoreResult<()> {
        let mut tx = self.db().begin().await?;
        for key in keys {
            tx.sql("INSERT INTO token_failures (key, at_ms) VALUES ($1, $2)")
                .bind(key.as_str())
                .bind(at_ms)
                .execute()
                .await?;
        }
        tx.commit().await
    }

    async fn purge_token_failures(&self, before_ms: i64) -> StoreResult<u64> {
        self.db()
            .write("DELETE FROM token_failures WHERE at_ms < $1")
            .bind(before_ms)
            .execute()
            .await
    }

    async fn instance_seen(
        &self,
        now: DateTime<Utc>,
        stale: std::time::Duration,
        reach: std::time::Duration,
        first: bool,
    ) -> StoreResult<InstancesSeen> {
        let id = self.instance().to_string();
        let stale_ms = i64::try_from(stale.as_millis()).unwrap_or(i64::MAX / 4);
        let reach_ms = i64::try_from(reach.as_millis()).unwrap_or(i64::MAX / 4);
        let mut tx = self.db().begin().await?;
        // The database's clock where instances share one: theirs may differ.
        let now_ms = if tx.locks_rows() {
            "(extract(epoch from clock_timestamp()) * 1000)::bigint".to_string()
        } else {
            now.timestamp_millis().to_string()
        };
        // An update that finds no row: another instance forgot this one.
        let noted = tx
            .sql(format!(
                "UPDATE instances SET seen_ms = {now_ms}, reach_ms = $2 WHERE id = $1"
            ))
            .bind(&id)
            .bind(reach_ms)
            .execute()
            .await?;
        if noted == 0 {
            tx.sql(format!(
                "INSERT INTO instances (id, seen_ms, reach_ms) VALUES ($1, {now_ms}, $2) \
                 ON CONFLICT (id) DO UPDATE SET seen_ms = excluded.seen_ms, reach_ms = excluded.reach_ms"
            ))
            .bind(&id)
            .bind(reach_ms)
            .execute()
            .await?;
        }
        // How far ahead the leases of any instance, the forgotten among
        // them, may run: each notes its own (its lease and how far ahead it
        // claims), which may differ from this one's.
        let (widest,): (Option<i64>,) = tx
            .sql("SELECT max(reach_ms) FROM instances")
            .fetch_one()
            .await?;
        let leased_until = chrono::TimeDelta::try_milliseconds(widest.unwrap_or(0).max(reach_ms))
            .and_then(|reach| now.checked_add_signed(reach))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let forgotten = tx
            .sql(format!(
                "DELETE FROM instances WHERE seen_ms < {now_ms} - $1"
            ))
            .bind(stale_ms)
            .execute()
            .await?;
        let mut given_back = 0;
        if forgotten > 0 || first {
            // Leases still running whose token names no instance serving:
            // messages due or claimed ahead (their due index), and gated ones
            // (counted as in flight until then).
            // Only tokens that name their instance: an earlier version's
            // (random) are left to end with their leases.
            let unowned = format!(
                "lease_token IS NOT NULL AND claim_at > $1 AND {NAMED_TOKEN} \
                 AND substr(CAST(lease_token AS TEXT), 1, {OWNER_CHARS}) NOT IN \
                   (SELECT substr(id, 1, {OWNER_CHARS}) FROM instances)"
            );
            for which in [
                "NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at <= $2",
                "gated",
            ] {
                given_back += tx
                    .sql(format!(
                        "UPDATE messages SET claim_at = COALESCE(next_attempt_at, delivery_time), \
                           lease_token = NULL \
                         WHERE state = 'Scheduled' AND {which} AND {unowned}"
                    ))
                    .bind(At(now))
                    .bind(At(leased_until))
                    .execute()
                    .await?;
            }
            if given_back > 0 {
                self.notify_if_soon(&mut tx, now, now).await?;
            }
        }
        let (n, oldest): (i64, Option<i64>) = tx
            .sql(format!(
                "SELECT count(*), min(seen_ms) FILTER (WHERE id <> $1) - {now_ms} FROM instances"
            ))
            .bind(&id)
            .fetch_one()
            .await?;
        tx.commit().await?;
        Ok(InstancesSeen {
            serving: u32::try_from(n.max(1)).unwrap_or(u32::MAX),
            given_back,
            was_forgotten: noted == 0 && !first,
            // `oldest` is how long ago (negative) it was noted.
            next_stale_in: oldest
                .map(|ago| u64::try_from(stale_ms + ago).unwrap_or(0))
                .map(std::time::Duration::from_millis),
        })
    }

    async fn fold_counts(&self) -> StoreResult<u64> {
        if !matches!(self.db().dialect(), Dialect::Postgres) {
            return Ok(0);
        }
        // The rows it deletes are those committed when it began: appends of
        // statements still running stay, and are folded next time; a
        // janitor on another instance folding at once skips the rows this
        // one took.
        self.db()
            .write(
                "WITH folded AS (DELETE FROM scheduled_counts RETURNING account, n), \
                 kept AS (INSERT INTO scheduled_counts (account, n) \
                   SELECT account, sum(n) FROM folded GROUP BY account HAVING sum(n) <> 0) \
                 SELECT count(*) FROM folded",
            )
            .fetch_one::<(i64,)>()
            .await
            .map(|(n,)| n.max(0) as u64)
    }
}
