//! Recurring schedules in the PostgreSQL store (docs/api.md#recurring-schedules). The
//! materialiser takes due schedules `FOR UPDATE SKIP LOCKED`, so two
//! instances work on different schedules, and inserts each run's message
//! `ON CONFLICT DO NOTHING` on the unique (schedule_id, schedule_run): one
//! message per run holds even if a cursor were ever read stale. A person's
//! change locks the schedule's row too, so it waits for a pass under way and
//! then withdraws what that pass created ahead of its time: those messages
//! are cancelled, never removed (nothing the API has shown vanishes but by
//! retention), and give up their run's instant to the schedule as it is now.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{map_err, ordering, rows::payload_from_bytes, PgStore};
use crate::{
    domain::{
        ids::MessageId,
        schedule::{RunPlan, Schedule},
    },
    store::{ordering::distinct_keys, *},
};

/// The columns of a schedule, `last_run_at` as of the bind parameter `$N`
/// given: the latest run created at or before then.
fn columns(now: usize) -> String {
    format!(
        "s.id, s.account, s.target_id, s.name, s.cron, s.every, s.time_zone, s.payload, s.ordering_key, \
         s.start_at, s.end_at, s.paused, s.next_run_at, \
         CASE WHEN s.last_run_at <= ${now} THEN s.last_run_at \
           ELSE (SELECT max(m.schedule_run) FROM messages m WHERE m.schedule_id = s.id AND m.schedule_run <= ${now}) \
         END AS last_run_at, \
         s.revision, s.created_at, s.updated_at"
    )
}

#[derive(sqlx::FromRow)]
struct ScheduleRow {
    id: String,
    account: String,
    target_id: String,
    name: String,
    cron: Option<String>,
    every: Option<String>,
    time_zone: String,
    payload: Vec<u8>,
    ordering_key: Option<String>,
    start_at: Option<DateTime<Utc>>,
    end_at: Option<DateTime<Utc>>,
    paused: bool,
    next_run_at: Option<DateTime<Utc>>,
    last_run_at: Option<DateTime<Utc>>,
    revision: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<ScheduleRow> for Schedule {
    type Error = StoreError;

    fn try_from(r: ScheduleRow) -> StoreResult<Schedule> {
        Ok(Schedule {
            recurrence: recurrence_from_row(&r.id, r.cron.as_deref(), r.every.as_deref())?,
            zone: zone_from_row(&r.id, &r.time_zone)?,
            id: ScheduleId::from_trusted(r.id),
            account: r.account,
            target_id: TargetId::from_trusted(r.target_id),
            name: r.name,
            payload: payload_from_bytes(r.payload)?,
            ordering_key: r.ordering_key,
            start_at: r.start_at,
            end_at: r.end_at,
            paused: r.paused,
            next_run_at: r.next_run_at,
            last_run_at: r.last_run_at,
            revision: r.revision,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

impl PgStore {
    /// Withdraws the schedule's runs made ahead of their instant: those
    /// after `now` still Scheduled, never attempted and under no lease are
    /// cancelled as a cancel does (`cancelled_at`, an entry in
    /// their history, their key's order settled). They stay the schedule's
    /// messages, listed under it, but give up their run's instant (their
    /// `schedule_run` is cleared), as do its runs after `now` that were
    /// cancelled before: the schedule as it is now makes its own message for
    /// each of its instants, one live message per run. A run held under
    /// another instance's lease (claimed ahead) keeps its instant and is
    /// delivered, as a cancel meeting that lease answers 409. The stored last
    /// run goes back to the latest run left. The schedule's row must be locked
    /// in `tx`; `key` is the target and orderingKey its runs were made with.
    async fn withdraw_runs_ahead(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        id: &str,
        key: Option<(&str, &str)>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let keys = distinct_keys(key);
        ordering::lock_keys(tx, &keys).await?;
        for statement in [
            "UPDATE messages SET schedule_run = NULL \
             WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Cancelled'",
            "WITH withdrawn AS ( \
               UPDATE messages SET state = 'Cancelled', cancelled_at = $2, next_attempt_at = NULL, \
                 claim_at = NULL, lease_token = NULL, held = false, updated_at = $2, schedule_run = NULL \
               WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Scheduled' AND attempt_count = 0 \
                 AND (lease_token IS NULL OR claim_at <= $2) \
               RETURNING id, account) \
             INSERT INTO message_events (message_id, at, kind, from_state, account) \
             SELECT id, $2, 'Cancelled', 'Scheduled', account FROM withdrawn",
            "UPDATE schedules s SET last_run_at = COALESCE( \
               (SELECT max(m.schedule_run) FROM messages m WHERE m.schedule_id = s.id AND m.schedule_run > $2), \
               CASE WHEN s.last_run_at <= $2 THEN s.last_run_at \
                 ELSE (SELECT max(m.schedule_run) FROM messages m \
                       WHERE m.schedule_id = s.id AND m.schedule_run <= $2) END) \
             WHERE s.id = $1",
        ] {
            sqlx::query(statement)
                .bind(id)
                .bind(now)
                .execute(&mut **tx)
                .await
                .map_err(map_err)?;
        }
        ordering::settle_keys(tx, &keys).await
    }
}

/// Binds the columns insert and save both write, in their order ($1 to
/// $14: id to revision); each then binds its times.
fn bind_columns<'q>(
    q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    s: &'q Schedule,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    q.bind(s.id.as_str())
        .bind(&s.account)
        .bind(s.target_id.as_str())
        .bind(&s.name)
        .bind(s.recurrence.cron())
        .bind(s.recurrence.every())
        .bind(s.zone.name())
        .bind(s.payload.as_str().as_bytes())
        .bind(s.ordering_key.as_deref())
        .bind(s.start_at)
        .bind(s.end_at)
        .bind(s.paused)
        .bind(s.next_run_at)
        .bind(s.revision)
}

#[async_trait]
impl ScheduleStore for PgStore {
    async fn insert_schedule(&self, s: &Schedule) -> StoreResult<bool> {
        let inserted = bind_columns(
            sqlx::query(
                "INSERT INTO schedules (id, account, target_id, name, cron, every, time_zone, payload, ordering_key, \
                   start_at, end_at, paused, next_run_at, revision, created_at, updated_at) \
                 SELECT $1, $2, t.id, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16 \
                 FROM targets t WHERE t.id = $3 AND t.account = $2",
            ),
            s,
        )
        .bind(s.created_at)
        .bind(s.updated_at)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(inserted == 1)
    }

    async fn get_schedule(
        &self,
        account: &str,
        id: &ScheduleId,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Schedule>> {
        let row: Option<ScheduleRow> = sqlx::query_as(&format!(
            "SELECT {} FROM schedules s WHERE s.id = $1 AND s.account = $2",
            columns(3)
        ))
        .bind(id.as_str())
        .bind(account)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(Schedule::try_from).transpose()
    }

    async fn list_schedules(
        &self,
        account: &str,
        target: Option<&TargetId>,
        after: Option<&ScheduleCursor>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Schedule>> {
        let rows: Vec<ScheduleRow> = sqlx::query_as(&format!(
            "SELECT {} FROM schedules s WHERE s.account = $1 \
             AND ($2::text IS NULL OR s.target_id = $2) \
             AND ($3::timestamptz IS NULL OR (s.created_at, s.id) < ($3, $4)) \
             ORDER BY s.created_at DESC, s.id DESC LIMIT $5",
            columns(6)
        ))
        .bind(account)
        .bind(target.map(TargetId::as_str))
        .bind(after.map(|c| c.created_at))
        .bind(after.map(|c| c.id.as_str()).unwrap_or(""))
        .bind(i64::from(limit))
        .bind(now)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(Schedule::try_from).collect()
    }

    async fn save_schedule(
        &self,
        s: &Schedule,
        restart: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<SaveSchedule> {
        let mut tx = self.begin().await?;
        let current: Option<(i64, String, Option<String>)> = sqlx::query_as(
            "SELECT revision, target_id, ordering_key FROM schedules WHERE id = $1 AND account = $2 FOR UPDATE",
        )
        .bind(s.id.as_str())
        .bind(&s.account)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some((revision, target, key)) = current else {
            return Ok(SaveSchedule::NotFound);
        };
        if revision != s.revision - 1 {
            return Ok(SaveSchedule::Stale);
        }
        if restart {
            self.withdraw_runs_ahead(
                &mut tx,
                s.id.as_str(),
                key.as_deref().map(|k| (target.as_str(), k)),
                now,
            )
            .await?;
        }
        let saved = bind_columns(
            sqlx::query(
                "UPDATE schedules SET target_id = t.id, name = $4, cron = $5, every = $6, time_zone = $7, \
                   payload = $8, ordering_key = $9, start_at = $10, end_at = $11, paused = $12, \
                   next_run_at = CASE WHEN $16 THEN $13 ELSE schedules.next_run_at END, \
                   revision = $14, updated_at = $15 \
                 FROM targets t WHERE schedules.id = $1 AND t.id = $3 AND t.account = $2",
            ),
            s,
        )
        .bind(s.updated_at)
        .bind(restart)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if saved == 0 {
            return Ok(SaveSchedule::UnknownTarget);
        }
        tx.commit().await.map_err(map_err)?;
        Ok(SaveSchedule::Saved)
    }

    async fn delete_schedule(
        &self,
        account: &str,
        id: &ScheduleId,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let current: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT target_id, ordering_key FROM schedules WHERE id = $1 AND account = $2 FOR UPDATE",
        )
        .bind(id.as_str())
        .bind(account)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some((target, key)) = current else {
            return Ok(false);
        };
        self.withdraw_runs_ahead(
            &mut tx,
            id.as_str(),
            key.as_deref().map(|k| (target.as_str(), k)),
            now,
        )
        .await?;
        sqlx::query("DELETE FROM schedules WHERE id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(true)
    }

    async fn materialise_runs(
        &self,
        until: DateTime<Utc>,
        limit: u32,
        now: DateTime<Utc>,
        plan: &mut (dyn for<'s> FnMut(&'s Schedule) -> RunPlan + Send),
    ) -> StoreResult<Materialised> {
        let mut tx = self.begin().await?;
        // The stored last run, not as of now: the pass only moves it forward.
        let rows: Vec<ScheduleRow> = sqlx::query_as(
            "SELECT s.id, s.account, s.target_id, s.name, s.cron, s.every, s.time_zone, s.payload, \
               s.ordering_key, s.start_at, s.end_at, s.paused, s.next_run_at, s.last_run_at, s.revision, \
               s.created_at, s.updated_at \
             FROM schedules s WHERE NOT s.paused AND s.next_run_at IS NOT NULL AND s.next_run_at <= $1 \
             ORDER BY s.next_run_at LIMIT $2 FOR UPDATE SKIP LOCKED",
        )
        .bind(until)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        if rows.is_empty() {
            return Ok(Materialised::default());
        }
        let schedules: Vec<Schedule> = rows
            .into_iter()
            .map(Schedule::try_from)
            .collect::<StoreResult<_>>()?;
        let mut ids = Vec::new();
        let mut accounts = Vec::new();
        let mut targets = Vec::new();
        let mut payloads = Vec::new();
        let mut times = Vec::new();
        let mut okeys = Vec::new();
        let mut sids = Vec::new();
        let (mut moved, mut nexts, mut lasts) = (Vec::new(), Vec::new(), Vec::new());
        for s in &schedules {
            let p = plan(s);
            for &at in &p.runs {
                ids.push(MessageId::new().0);
                accounts.push(s.account.as_str());
                targets.push(s.target_id.as_str());
                payloads.push(s.payload.as_str().as_bytes());
                times.push(at);
                okeys.push(s.ordering_key.as_deref());
                sids.push(s.id.as_str());
            }
            moved.push(s.id.as_str());
            nexts.push(p.next);
            lasts.push(p.runs.last().copied());
        }
        let keys = distinct_keys(
            schedules
                .iter()
                .filter_map(|s| s.ordering_key.as_deref().map(|k| (s.target_id.as_str(), k))),
        );
        ordering::lock_keys(&mut tx, &keys).await?;
        let created: Vec<(Uuid,)> = sqlx::query_as(
            "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, next_attempt_at, \
               claim_at, paused, gated, created_at, updated_at, ordering_key, held, schedule_id, schedule_run) \
             SELECT i.id, i.account, t.id, 'Scheduled', i.payload, i.at, i.at, i.at, NOT t.enabled, t.gated, \
               $8, $8, i.okey, i.okey IS NOT NULL, i.sid, i.at \
             FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::timestamptz[], $6::text[], $7::text[]) \
               AS i(id, account, target_id, payload, at, okey, sid) \
             JOIN targets t ON t.id = i.target_id AND t.account = i.account \
             FOR KEY SHARE OF t \
             ON CONFLICT (schedule_id, schedule_run) WHERE schedule_id IS NOT NULL DO NOTHING \
             RETURNING id",
        )
        .bind(&ids)
        .bind(&accounts)
        .bind(&targets)
        .bind(&payloads)
        .bind(&times)
        .bind(&okeys)
        .bind(&sids)
        .bind(now)
        .persistent(false)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        ordering::settle_keys(&mut tx, &keys).await?;
        sqlx::query(
            "UPDATE schedules s SET next_run_at = u.next, last_run_at = GREATEST(s.last_run_at, u.last) \
             FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS u(id, next, last) \
             WHERE s.id = u.id",
        )
        .bind(&moved)
        .bind(&nexts)
        .bind(&lasts)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        let earliest = times.iter().min().copied();
        if let Some(at) = earliest.filter(|_| !created.is_empty()) {
            self.notify_if_soon(&mut tx, at, now).await?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(Materialised {
            schedules: moved.len(),
            created: created.len() as u64,
            earliest: earliest.filter(|_| !created.is_empty()),
        })
    }
}
