//! Recurring schedules (docs/api.md#recurring-schedules), once for both
//! databases. Each run's message goes in `ON CONFLICT DO NOTHING` on the
//! unique (schedule_id, schedule_run): one message per run holds even if a
//! cursor were ever read stale.
//!
//! On PostgreSQL the materialiser takes due schedules `FOR UPDATE SKIP
//! LOCKED`, so two instances work on different schedules, and a person's
//! change locks the schedule's row too, so it waits for a pass under way;
//! SQLite's one writer runs passes and changes one after another. A change
//! then withdraws what a pass created ahead of its time: those messages are
//! cancelled, never removed (nothing the API has shown vanishes but by
//! retention), and give up their run's instant to the schedule as it is now.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Sqlite, Transaction};
use uuid::Uuid;

use super::{own::Own, pg_err, rows::payload, sqlite_err, At, Stmt, Text, Tx, Uid};
use crate::{
    domain::{
        ids::{AccountId, MessageId, ScheduleId, TargetId},
        message::OrderingKey,
        schedule::{RunPlan, Schedule},
    },
    store::{
        ordering::distinct_keys, recurrence_from_row, zone_from_row, Materialised, SaveSchedule,
        ScheduleCursor, ScheduleStore, StoreError, StoreResult,
    },
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
    account: AccountId,
    target_id: String,
    name: String,
    cron: Option<String>,
    every: Option<String>,
    time_zone: String,
    payload: Text,
    ordering_key: Option<OrderingKey>,
    start_at: Option<At>,
    end_at: Option<At>,
    paused: bool,
    next_run_at: Option<At>,
    last_run_at: Option<At>,
    revision: i64,
    created_at: At,
    updated_at: At,
}

impl TryFrom<ScheduleRow> for Schedule {
    type Error = StoreError;

    fn try_from(r: ScheduleRow) -> StoreResult<Schedule> {
        Ok(Schedule {
            recurrence: recurrence_from_row(&r.id, r.cron.as_deref(), r.every.as_deref())?,
            zone: zone_from_row(&r.id, &r.time_zone)?,
            payload: payload(r.payload)?,
            id: ScheduleId::from_trusted(r.id),
            account: r.account,
            target_id: TargetId::from_trusted(r.target_id),
            name: r.name,
            ordering_key: r.ordering_key,
            start_at: r.start_at.map(Into::into),
            end_at: r.end_at.map(Into::into),
            paused: r.paused,
            next_run_at: r.next_run_at.map(Into::into),
            last_run_at: r.last_run_at.map(Into::into),
            revision: r.revision,
            created_at: r.created_at.into(),
            updated_at: r.updated_at.into(),
        })
    }
}

/// Withdraws the schedule's runs made ahead of their instant: those after
/// `now` still Scheduled, never attempted and under no lease are cancelled
/// as a cancel does (`cancelled_at`, an entry in their history, their key's
/// order settled). They stay the schedule's messages, listed under it, but
/// give up their run's instant (their `schedule_run` is cleared), as do its
/// runs after `now` that were cancelled before: the schedule as it is now
/// makes its own message for each of its instants, one live message per
/// run. A run held under another instance's lease (claimed ahead) keeps its
/// instant and is delivered, as a cancel meeting that lease answers 409.
/// The stored last run goes back to the latest run left. The schedule's row
/// must be locked in `tx` where rows are locked; `key` is the target and
/// orderingKey its runs were made with.
async fn withdraw_runs_ahead<B: Own>(
    store: &B,
    tx: &mut Tx,
    id: &str,
    key: Option<(&str, &str)>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let keys = distinct_keys(key);
    store.lock_keys(tx, &keys).await?;
    let withdraw: &[&str] = if tx.locks_rows() {
        // Side by side with claims, the messages cancelled and the entries
        // in their history are the same rows only if one statement both
        // changes them and records them.
        &["WITH withdrawn AS ( \
             UPDATE messages SET state = 'Cancelled', cancelled_at = $2, next_attempt_at = NULL, \
               claim_at = NULL, lease_token = NULL, held = false, updated_at = $2, schedule_run = NULL \
             WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Scheduled' AND attempt_count = 0 \
               AND (lease_token IS NULL OR claim_at <= $2) \
             RETURNING id, account) \
           INSERT INTO message_events (message_id, at, kind, from_state, account) \
           SELECT id, $2, 'Cancelled', 'Scheduled', account FROM withdrawn"]
    } else {
        // SQLite has no UPDATE inside WITH; under its one writer the same
        // condition read twice finds the same messages: their entries
        // first, then the change.
        &[
            "INSERT INTO message_events (message_id, at, kind, from_state, account) \
             SELECT id, $2, 'Cancelled', 'Scheduled', account FROM messages \
             WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Scheduled' \
               AND attempt_count = 0 AND (lease_token IS NULL OR claim_at <= $2)",
            "UPDATE messages SET state = 'Cancelled', cancelled_at = $2, next_attempt_at = NULL, \
               claim_at = NULL, lease_token = NULL, held = false, updated_at = $2, schedule_run = NULL \
             WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Scheduled' \
               AND attempt_count = 0 AND (lease_token IS NULL OR claim_at <= $2)",
        ]
    };
    let before = "UPDATE messages SET schedule_run = NULL \
         WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Cancelled'";
    let after = "UPDATE schedules AS s SET last_run_at = COALESCE( \
           (SELECT max(m.schedule_run) FROM messages m WHERE m.schedule_id = s.id AND m.schedule_run > $2), \
           CASE WHEN s.last_run_at <= $2 THEN s.last_run_at \
             ELSE (SELECT max(m.schedule_run) FROM messages m \
                   WHERE m.schedule_id = s.id AND m.schedule_run <= $2) END) \
         WHERE s.id = $1";
    let mut statements = vec![before];
    statements.extend(withdraw);
    statements.push(after);
    for statement in statements {
        tx.sql(statement).bind(id).bind(At(now)).execute().await?;
    }
    store.settle_keys(tx, &keys).await
}

/// Binds the columns insert and save both write, in their order ($1 to
/// $14: id to revision); each then binds its times.
fn bind_columns<'q, 'a>(q: Stmt<'q, 'a>, s: &'q Schedule) -> Stmt<'q, 'a> {
    q.bind(s.id.as_str())
        .bind(&s.account)
        .bind(s.target_id.as_str())
        .bind(&s.name)
        .bind(s.recurrence.cron())
        .bind(s.recurrence.every())
        .bind(s.zone.name())
        .bind(Text(s.payload.as_str().to_owned()))
        .bind(s.ordering_key.as_deref())
        .bind(s.start_at.map(At))
        .bind(s.end_at.map(At))
        .bind(s.paused)
        .bind(s.next_run_at.map(At))
        .bind(s.revision)
}

/// Due schedules that are not paused, as each database's partial index
/// `schedules_due` spells it (so that the planner uses it): a boolean in
/// PostgreSQL, 0 or 1 in SQLite.
fn not_paused(tx: &Tx) -> &'static str {
    match tx {
        Tx::Postgres(_) => "NOT s.paused",
        Tx::Sqlite(_) => "s.paused = 0",
    }
}

#[async_trait]
impl<B: Own> ScheduleStore for B {
    async fn insert_schedule(&self, s: &Schedule) -> StoreResult<bool> {
        let inserted = bind_columns(
            self.db().write(
                "INSERT INTO schedules (id, account, target_id, name, cron, every, time_zone, payload, ordering_key, \
                   start_at, end_at, paused, next_run_at, revision, created_at, updated_at) \
                 SELECT $1, $2, t.id, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16 \
                 FROM targets t WHERE t.id = $3 AND t.account = $2",
            ),
            s,
        )
        .bind(At(s.created_at))
        .bind(At(s.updated_at))
        .execute()
        .await?;
        Ok(inserted == 1)
    }

    async fn get_schedule(
        &self,
        account: &AccountId,
        id: &ScheduleId,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Schedule>> {
        let row: Option<ScheduleRow> = self
            .db()
            .read(format!(
                "SELECT {} FROM schedules s WHERE s.id = $1 AND s.account = $2",
                columns(3)
            ))
            .bind(id.as_str())
            .bind(account)
            .bind(At(now))
            .fetch_optional()
            .await?;
        row.map(Schedule::try_from).transpose()
    }

    async fn list_schedules(
        &self,
        account: &AccountId,
        target: Option<&TargetId>,
        after: Option<&ScheduleCursor>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Schedule>> {
        let rows: Vec<ScheduleRow> = self
            .db()
            .read(format!(
                "SELECT {} FROM schedules s WHERE s.account = $1 \
                 AND ($2 IS NULL OR s.target_id = $2) \
                 AND ($3 IS NULL OR (s.created_at, s.id) < ($3, $4)) \
                 ORDER BY s.created_at DESC, s.id DESC LIMIT $5",
                columns(6)
            ))
            .bind(account)
            .bind(target.map(TargetId::as_str))
            .bind(after.map(|c| At(c.created_at)))
            .bind(after.map(|c| c.id.as_str()).unwrap_or(""))
            .bind(i64::from(limit))
            .bind(At(now))
            .fetch_all()
            .await?;
        rows.into_iter().map(Schedule::try_from).collect()
    }

    async fn save_schedule(
        &self,
        s: &Schedule,
        restart: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<SaveSchedule> {
        let mut tx = self.db().begin().await?;
        let lock = tx.for_update();
        let current: Option<(i64, String, Option<String>)> = tx
            .sql(format!(
                "SELECT revision, target_id, ordering_key FROM schedules WHERE id = $1 AND account = $2{lock}"
            ))
            .bind(s.id.as_str())
            .bind(&s.account)
            .fetch_optional()
            .await?;
        let Some((revision, target, key)) = current else {
            return Ok(SaveSchedule::NotFound);
        };
        if revision != s.revision - 1 {
            return Ok(SaveSchedule::Stale);
        }
        if restart {
            withdraw_runs_ahead(
                self,
                &mut tx,
                s.id.as_str(),
                key.as_deref().map(|k| (target.as_str(), k)),
                now,
            )
            .await?;
        }
        // An unknown target changes no row, and the withdrawal above goes
        // with the transaction.
        let saved = bind_columns(
            tx.sql(
                "UPDATE schedules SET target_id = t.id, name = $4, cron = $5, every = $6, time_zone = $7, \
                   payload = $8, ordering_key = $9, start_at = $10, end_at = $11, paused = $12, \
                   next_run_at = CASE WHEN $16 THEN $13 ELSE schedules.next_run_at END, \
                   revision = $14, updated_at = $15 \
                 FROM targets t WHERE schedules.id = $1 AND t.id = $3 AND t.account = $2",
            ),
            s,
        )
        .bind(At(s.updated_at))
        .bind(restart)
        .execute()
        .await?;
        if saved == 0 {
            return Ok(SaveSchedule::UnknownTarget);
        }
        tx.commit().await?;
        Ok(SaveSchedule::Saved)
    }

    async fn delete_schedule(
        &self,
        account: &AccountId,
        id: &ScheduleId,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let lock = tx.for_update();
        let current: Option<(String, Option<String>)> = tx
            .sql(format!(
                "SELECT target_id, ordering_key FROM schedules WHERE id = $1 AND account = $2{lock}"
            ))
            .bind(id.as_str())
            .bind(account)
            .fetch_optional()
            .await?;
        let Some((target, key)) = current else {
            return Ok(false);
        };
        withdraw_runs_ahead(
            self,
            &mut tx,
            id.as_str(),
            key.as_deref().map(|k| (target.as_str(), k)),
            now,
        )
        .await?;
        tx.sql("DELETE FROM schedules WHERE id = $1")
            .bind(id.as_str())
            .execute()
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn materialise_runs(
        &self,
        until: DateTime<Utc>,
        limit: u32,
        now: DateTime<Utc>,
        plan: &mut (dyn for<'s> FnMut(&'s Schedule) -> RunPlan + Send),
    ) -> StoreResult<Materialised> {
        let mut tx = self.db().begin().await?;
        // Two instances' passes take different schedules where rows are
        // locked.
        let lock = if tx.locks_rows() {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        // The stored last run, not as of now: the pass only moves it forward.
        let rows: Vec<ScheduleRow> = tx
            .sql(format!(
                "SELECT s.id, s.account, s.target_id, s.name, s.cron, s.every, s.time_zone, s.payload, \
                   s.ordering_key, s.start_at, s.end_at, s.paused, s.next_run_at, s.last_run_at, s.revision, \
                   s.created_at, s.updated_at \
                 FROM schedules s WHERE {} AND s.next_run_at IS NOT NULL AND s.next_run_at <= $1 \
                 ORDER BY s.next_run_at LIMIT $2{lock}",
                not_paused(&tx)
            ))
            .bind(At(until))
            .bind(i64::from(limit))
            .fetch_all()
            .await?;
        if rows.is_empty() {
            return Ok(Materialised::default());
        }
        let schedules: Vec<Schedule> = rows
            .into_iter()
            .map(Schedule::try_from)
            .collect::<StoreResult<_>>()?;
        let mut runs: Vec<(&Schedule, DateTime<Utc>)> = Vec::new();
        let mut moves: Vec<Move> = Vec::new();
        for s in &schedules {
            let p = plan(s);
            runs.extend(p.runs.iter().map(|&at| (s, at)));
            moves.push((s.id.as_str(), p.next, p.runs.last().copied()));
        }
        let keys = distinct_keys(
            schedules
                .iter()
                .filter_map(|s| s.ordering_key.as_deref().map(|k| (s.target_id.as_str(), k))),
        );
        self.lock_keys(&mut tx, &keys).await?;
        let (created, earliest) = match &mut tx {
            Tx::Postgres(t) => insert_runs_postgres(t, &runs, now).await?,
            Tx::Sqlite(t) => insert_runs_sqlite(t, &runs, now).await?,
        };
        self.settle_keys(&mut tx, &keys).await?;
        match &mut tx {
            Tx::Postgres(t) => move_cursors_postgres(t, &moves).await?,
            Tx::Sqlite(t) => move_cursors_sqlite(t, &moves).await?,
        }
        if let Some(at) = earliest {
            self.notify_if_soon(&mut tx, at, now).await?;
        }
        tx.commit().await?;
        Ok(Materialised {
            schedules: moves.len(),
            created,
            earliest,
        })
    }
}

/// A schedule whose cursor a pass moves: its id, next run and the last run
/// the pass made (if any).
type Move<'a> = (&'a str, Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// Inserts the runs' messages on PostgreSQL: all in one statement, whose
/// columns go in as arrays (`unnest`), the targets' rows KEY SHARE locked
/// against a concurrent enable or disable. Returns how many were created
/// and, if any was, the earliest run of the pass.
async fn insert_runs_postgres(
    tx: &mut Transaction<'static, Postgres>,
    runs: &[(&Schedule, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> StoreResult<(u64, Option<DateTime<Utc>>)> {
    let ids: Vec<Uuid> = runs.iter().map(|_| MessageId::new().0).collect();
    let accounts: Vec<&str> = runs.iter().map(|(s, _)| s.account.as_str()).collect();
    let targets: Vec<&str> = runs.iter().map(|(s, _)| s.target_id.as_str()).collect();
    let payloads: Vec<&[u8]> = runs
        .iter()
        .map(|(s, _)| s.payload.as_str().as_bytes())
        .collect();
    let times: Vec<DateTime<Utc>> = runs.iter().map(|&(_, at)| at).collect();
    let okeys: Vec<Option<&str>> = runs
        .iter()
        .map(|(s, _)| s.ordering_key.as_deref())
        .collect();
    let sids: Vec<&str> = runs.iter().map(|(s, _)| s.id.as_str()).collect();
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
    .fetch_all(&mut **tx)
    .await
    .map_err(pg_err)?;
    let earliest = times.iter().min().copied().filter(|_| !created.is_empty());
    Ok((created.len() as u64, earliest))
}

/// Rows per INSERT: SQLite binds at most 32,766 parameters.
const RUNS_PER_INSERT: usize = 500;

/// Inserts the runs' messages on SQLite, which binds no arrays: rows of
/// values, a chunk of runs a statement. Returns how many were created and
/// the earliest of those.
async fn insert_runs_sqlite(
    tx: &mut Transaction<'static, Sqlite>,
    runs: &[(&Schedule, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> StoreResult<(u64, Option<DateTime<Utc>>)> {
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
            row.push_bind(Uid(MessageId::new().0))
                .push_bind(s.account.as_str())
                .push_bind(s.target_id.as_str())
                .push_bind(s.payload.as_str())
                .push_bind(At(*at))
                .push_bind(At(now))
                .push_bind(s.ordering_key.as_deref())
                .push_bind(s.id.as_str());
        });
        q.push(
            ") AS v JOIN targets t ON t.id = v.column3 AND t.account = v.column2 WHERE true \
             ON CONFLICT (schedule_id, schedule_run) WHERE schedule_id IS NOT NULL DO NOTHING \
             RETURNING delivery_time",
        );
        let made: Vec<(At,)> = q
            .build_query_as()
            .fetch_all(&mut **tx)
            .await
            .map_err(sqlite_err)?;
        created += made.len() as u64;
        if let Some(first) = made.iter().map(|r| r.0 .0).min() {
            earliest = Some(earliest.map_or(first, |e| e.min(first)));
        }
    }
    Ok((created, earliest))
}

/// Moves the cursors on PostgreSQL: one statement, the schedules as arrays.
async fn move_cursors_postgres(
    tx: &mut Transaction<'static, Postgres>,
    moves: &[Move<'_>],
) -> StoreResult<()> {
    let ids: Vec<&str> = moves.iter().map(|m| m.0).collect();
    let nexts: Vec<Option<DateTime<Utc>>> = moves.iter().map(|m| m.1).collect();
    let lasts: Vec<Option<DateTime<Utc>>> = moves.iter().map(|m| m.2).collect();
    sqlx::query(
        "UPDATE schedules s SET next_run_at = u.next, last_run_at = GREATEST(s.last_run_at, u.last) \
         FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS u(id, next, last) \
         WHERE s.id = u.id",
    )
    .bind(&ids)
    .bind(&nexts)
    .bind(&lasts)
    .execute(&mut **tx)
    .await
    .map_err(pg_err)?;
    Ok(())
}

/// Moves the cursors on SQLite, which binds no arrays: a statement a
/// schedule.
async fn move_cursors_sqlite(
    tx: &mut Transaction<'static, Sqlite>,
    moves: &[Move<'_>],
) -> StoreResult<()> {
    for (id, next, last) in moves {
        sqlx::query(
            "UPDATE schedules SET next_run_at = $2, \
               last_run_at = CASE WHEN last_run_at IS NULL OR $3 > last_run_at THEN $3 ELSE last_run_at END \
             WHERE id = $1",
        )
        .bind(*id)
        .bind(next.map(At))
        .bind(last.map(At))
        .execute(&mut **tx)
        .await
        .map_err(sqlite_err)?;
    }
    Ok(())
}
