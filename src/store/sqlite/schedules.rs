//! Recurring schedules in the embedded store (docs/api.md#recurring-schedules). Its one writer
//! serialises the materialiser's passes with people's changes; the unique
//! (schedule_id, schedule_run) still makes one message per run a property
//! of the data, and each run's message goes in `ON CONFLICT DO NOTHING`.
//! A change withdraws the runs made ahead as the PostgreSQL store does.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, ordering, rows::*, SqliteStore};
use crate::{
    domain::{
        ids::MessageId,
        payload::Payload,
        schedule::{RunPlan, Schedule},
    },
    store::{ordering::distinct_keys, *},
};

/// The columns of a schedule, `last_run_at` as of the bind parameter `?N`.
fn columns(now: usize) -> String {
    format!(
        "s.id, s.account, s.target_id, s.name, s.cron, s.every, s.time_zone, s.payload, s.ordering_key, \
         s.start_at, s.end_at, s.paused, s.next_run_at, \
         CASE WHEN s.last_run_at <= ?{now} THEN s.last_run_at \
           ELSE (SELECT max(m.schedule_run) FROM messages m WHERE m.schedule_id = s.id AND m.schedule_run <= ?{now}) \
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
    payload: String,
    ordering_key: Option<String>,
    start_at: Option<i64>,
    end_at: Option<i64>,
    paused: bool,
    next_run_at: Option<i64>,
    last_run_at: Option<i64>,
    revision: i64,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<ScheduleRow> for Schedule {
    type Error = StoreError;

    fn try_from(r: ScheduleRow) -> StoreResult<Schedule> {
        Ok(Schedule {
            recurrence: recurrence_from_row(&r.id, r.cron.as_deref(), r.every.as_deref())?,
            zone: zone_from_row(&r.id, &r.time_zone)?,
            payload: Payload::parse(r.payload).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            id: ScheduleId::from_trusted(r.id),
            account: r.account,
            target_id: TargetId::from_trusted(r.target_id),
            name: r.name,
            ordering_key: r.ordering_key,
            start_at: opt_from_ms(r.start_at),
            end_at: opt_from_ms(r.end_at),
            paused: r.paused,
            next_run_at: opt_from_ms(r.next_run_at),
            last_run_at: opt_from_ms(r.last_run_at),
            revision: r.revision,
            created_at: from_ms(r.created_at),
            updated_at: from_ms(r.updated_at),
        })
    }
}

/// Which of a schedule's messages (`?1`) a change at `?2` withdraws: its
/// runs after then, Scheduled, never attempted and under no lease.
const WITHDRAWN: &str = "schedule_id = ?1 AND schedule_run > ?2 AND state = 'Scheduled' \
     AND attempt_count = 0 AND (lease_token IS NULL OR claim_at <= ?2)";

/// Withdraws the schedule's runs made ahead of their instant: cancelled as
/// a cancel does, still listed, giving up their instant to the schedule as
/// it is now, as its runs after `now` cancelled before do; the last run goes
/// back to the latest left (see the PostgreSQL store). `key` is the target
/// and orderingKey its runs were made with.
async fn withdraw_runs_ahead(
    conn: &mut sqlx::SqliteConnection,
    id: &str,
    key: Option<(&str, &str)>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    for statement in [
        "UPDATE messages SET schedule_run = NULL \
         WHERE schedule_id = ?1 AND schedule_run > ?2 AND state = 'Cancelled'"
            .to_string(),
        format!(
            "INSERT INTO message_events (message_id, at, kind, from_state, account) \
             SELECT id, ?2, 'Cancelled', 'Scheduled', account FROM messages WHERE {WITHDRAWN}"
        ),
        format!(
            "UPDATE messages SET state = 'Cancelled', cancelled_at = ?2, next_attempt_at = NULL, \
               claim_at = NULL, lease_token = NULL, held = 0, updated_at = ?2, schedule_run = NULL \
             WHERE {WITHDRAWN}"
        ),
        "UPDATE schedules SET last_run_at = COALESCE( \
           (SELECT max(m.schedule_run) FROM messages m WHERE m.schedule_id = ?1 AND m.schedule_run > ?2), \
           CASE WHEN last_run_at <= ?2 THEN last_run_at \
             ELSE (SELECT max(m.schedule_run) FROM messages m \
                   WHERE m.schedule_id = ?1 AND m.schedule_run <= ?2) END) \
         WHERE id = ?1"
            .to_string(),
    ] {
        sqlx::query(&statement)
            .bind(id)
            .bind(ms(now))
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
    }
    ordering::settle_keys(conn, &distinct_keys(key)).await
}

/// Rows per INSERT: SQLite binds at most 32,766 parameters.
const RUNS_PER_INSERT: usize = 500;

/// Binds the columns insert and save both write, in their order (?1 to
/// ?14: id to revision); each then binds its times.
fn bind_columns<'q>(
    q: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    s: &'q Schedule,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    q.bind(s.id.as_str())
        .bind(&s.account)
        .bind(s.target_id.as_str())
        .bind(&s.name)
        .bind(s.recurrence.cron())
        .bind(s.recurrence.every())
        .bind(s.zone.name())
        .bind(s.payload.as_str())
        .bind(s.ordering_key.as_deref())
        .bind(s.start_at.map(ms))
        .bind(s.end_at.map(ms))
        .bind(s.paused)
        .bind(s.next_run_at.map(ms))
        .bind(s.revision)
}

#[async_trait]
impl ScheduleStore for SqliteStore {
    async fn insert_schedule(&self, s: &Schedule) -> StoreResult<bool> {
        let inserted = bind_columns(
            sqlx::query(
                "INSERT INTO schedules (id, account, target_id, name, cron, every, time_zone, payload, ordering_key, \
                   start_at, end_at, paused, next_run_at, revision, created_at, updated_at) \
                 SELECT ?1, ?2, t.id, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16 \
                 FROM targets t WHERE t.id = ?3 AND t.account = ?2",
            ),
            s,
        )
        .bind(ms(s.created_at))
        .bind(ms(s.updated_at))
        .execute(&self.writer)
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
            "SELECT {} FROM schedules s WHERE s.id = ?1 AND s.account = ?2",
            columns(3)
        ))
        .bind(id.as_str())
        .bind(account)
        .bind(ms(now))
        .fetch_optional(&self.reader)
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
            "SELECT {} FROM schedules s WHERE s.account = ?1 \
             AND (?2 IS NULL OR s.target_id = ?2) \
             AND (?3 IS NULL OR s.created_at < ?3 OR (s.created_at = ?3 AND s.id < ?4)) \
             ORDER BY s.created_at DESC, s.id DESC LIMIT ?5",
            columns(6)
        ))
        .bind(account)
        .bind(target.map(TargetId::as_str))
        .bind(after.map(|c| ms(c.created_at)))
        .bind(after.map(|c| c.id.as_str()).unwrap_or(""))
        .bind(i64::from(limit))
        .bind(ms(now))
        .fetch_all(&self.reader)
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
            "SELECT revision, target_id, ordering_key FROM schedules WHERE id = ? AND account = ?",
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
        let known: Option<(String,)> =
            sqlx::query_as("SELECT id FROM targets WHERE id = ? AND account = ?")
                .bind(s.target_id.as_str())
                .bind(&s.account)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
        if known.is_none() {
            return Ok(SaveSchedule::UnknownTarget);
        }
        if restart {
            withdraw_runs_ahead(
                &mut tx,
                s.id.as_str(),
                key.as_deref().map(|k| (target.as_str(), k)),
                now,
            )
            .await?;
        }
        bind_columns(
            sqlx::query(
                "UPDATE schedules SET target_id = ?3, name = ?4, cron = ?5, every = ?6, time_zone = ?7, \
                   payload = ?8, ordering_key = ?9, start_at = ?10, end_at = ?11, paused = ?12, \
                   next_run_at = CASE WHEN ?16 THEN ?13 ELSE next_run_at END, revision = ?14, \
                   updated_at = ?15 \
                 WHERE id = ?1 AND account = ?2",
            ),
            s,
        )
        .bind(ms(s.updated_at))
        .bind(restart)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
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
            "SELECT target_id, ordering_key FROM schedules WHERE id = ? AND account = ?",
        )
        .bind(id.as_str())
        .bind(account)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some((target, key)) = current else {
            return Ok(false);
        };
        withdraw_runs_ahead(
            &mut tx,
            id.as_str(),
            key.as_deref().map(|k| (target.as_str(), k)),
            now,
        )
        .await?;
        sqlx::query("DELETE FROM schedules WHERE id = ?")
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
        let rows: Vec<ScheduleRow> = sqlx::query_as(
            "SELECT s.id, s.account, s.target_id, s.name, s.cron, s.every, s.time_zone, s.payload, \
               s.ordering_key, s.start_at, s.end_at, s.paused, s.next_run_at, s.last_run_at, s.revision, \
               s.created_at, s.updated_at \
             FROM schedules s WHERE s.paused = 0 AND s.next_run_at IS NOT NULL AND s.next_run_at <= ? \
             ORDER BY s.next_run_at LIMIT ?",
        )
        .bind(ms(until))
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
        let mut runs: Vec<(&Schedule, DateTime<Utc>)> = Vec::new();
        let mut moves = Vec::new();
        for s in &schedules {
            let p = plan(s);
            runs.extend(p.runs.iter().map(|&at| (s, at)));
            moves.push((s.id.as_str(), p.next, p.runs.last().copied()));
        }
        let mut created = 0u64;
        let mut earliest: Option<DateTime<Utc>> = None;
        for chunk in runs.chunks(RUNS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, \
                 next_attempt_at, claim_at, paused, gated, created_at, updated_at, ordering_key, held, \
                 schedule_id, schedule_run) \
                 SELECT v.column1, v.column2, t.id, 'Scheduled', v.column4, v.column5, v.column5, v.column5, \
                 NOT t.enabled, t.gated, v.column6, v.column6, v.column7, v.column7 IS NOT NULL, \
                 v.column8, v.column5 FROM (",
            );
            q.push_values(chunk, |mut row, (s, at)| {
                row.push_bind(id_text(&MessageId::new()))
                    .push_bind(s.account.as_str())
                    .push_bind(s.target_id.as_str())
                    .push_bind(s.payload.as_str())
                    .push_bind(ms(*at))
                    .push_bind(ms(now))
                    .push_bind(s.ordering_key.as_deref())
                    .push_bind(s.id.as_str());
            });
            q.push(
                ") AS v JOIN targets t ON t.id = v.column3 AND t.account = v.column2 WHERE true \
                 ON CONFLICT (schedule_id, schedule_run) WHERE schedule_id IS NOT NULL DO NOTHING \
                 RETURNING delivery_time",
            );
            let made: Vec<(i64,)> = q
                .build_query_as()
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            created += made.len() as u64;
            if let Some(first) = made.iter().map(|r| from_ms(r.0)).min() {
                earliest = Some(earliest.map_or(first, |e| e.min(first)));
            }
        }
        let keys = distinct_keys(
            schedules
                .iter()
                .filter_map(|s| s.ordering_key.as_deref().map(|k| (s.target_id.as_str(), k))),
        );
        ordering::settle_keys(&mut tx, &keys).await?;
        for (id, next, last) in &moves {
            sqlx::query(
                "UPDATE schedules SET next_run_at = ?2, \
                   last_run_at = CASE WHEN last_run_at IS NULL OR ?3 > last_run_at THEN ?3 ELSE last_run_at END \
                 WHERE id = ?1",
            )
            .bind(*id)
            .bind(next.map(ms))
            .bind(last.map(ms))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(Materialised {
            schedules: moves.len(),
            created,
            earliest,
        })
    }
}
