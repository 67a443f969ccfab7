//! The materialiser's pass: take the due schedules, make the message of
//! each run their plans give, move their cursors on. The runs' messages go
//! in as each database inserts many (arrays on PostgreSQL, chunks of rows
//! of values on SQLite), the cursors likewise.

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Sqlite, Transaction};
use uuid::Uuid;

use super::rows::ScheduleRow;
use crate::{
    domain::{
        ids::MessageId,
        schedule::{RunPlan, Schedule},
    },
    store::{
        ordering::distinct_keys,
        sql::{own::Own, pg_err, sqlite_err, At, Tx, Uid},
        Materialised, StoreResult,
    },
};

/// `ScheduleStore::materialise_runs`: one pass in one transaction.
pub(super) async fn materialise_runs<B: Own>(
    store: &B,
    until: DateTime<Utc>,
    limit: u32,
    now: DateTime<Utc>,
    plan: &mut (dyn for<'s> FnMut(&'s Schedule) -> RunPlan + Send),
) -> StoreResult<Materialised> {
    let mut tx = store.db().begin().await?;
    let schedules = take_due(&mut tx, until, limit).await?;
    if schedules.is_empty() {
        return Ok(Materialised::default());
    }
    let (runs, moves) = plan_runs(&schedules, plan);
    let keys = distinct_keys(
        schedules
            .iter()
            .filter_map(|s| s.ordering_key.as_deref().map(|k| (s.target_id.as_str(), k))),
    );
    store.lock_keys(&mut tx, &keys).await?;
    let (created, earliest) = match &mut tx {
        Tx::Postgres(t) => insert_runs_postgres(t, &runs, now).await?,
        Tx::Sqlite(t) => insert_runs_sqlite(t, &runs, now).await?,
    };
    store.settle_keys(&mut tx, &keys).await?;
    match &mut tx {
        Tx::Postgres(t) => move_cursors_postgres(t, &moves).await?,
        Tx::Sqlite(t) => move_cursors_sqlite(t, &moves).await?,
    }
    if let Some(at) = earliest {
        store.notify_if_soon(&mut tx, at, now).await?;
    }
    tx.commit().await?;
    Ok(Materialised {
        schedules: moves.len(),
        created,
        earliest,
    })
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

/// Takes the schedules due by `until` that are not paused, the earliest due
/// first, at most `limit`. Two instances' passes take different schedules
/// where rows are locked.
async fn take_due(tx: &mut Tx, until: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Schedule>> {
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
            not_paused(tx)
        ))
        .bind(At(until))
        .bind(i64::from(limit))
        .fetch_all()
        .await?;
    rows.into_iter().map(Schedule::try_from).collect()
}

/// A run to make: its schedule and its instant.
type Run<'a> = (&'a Schedule, DateTime<Utc>);

/// Asks each schedule's plan for its runs; answers them all, and where each
/// schedule's cursor moves.
fn plan_runs<'a>(
    schedules: &'a [Schedule],
    plan: &mut (dyn for<'s> FnMut(&'s Schedule) -> RunPlan + Send),
) -> (Vec<Run<'a>>, Vec<Move<'a>>) {
    let mut runs: Vec<Run> = Vec::new();
    let mut moves: Vec<Move> = Vec::new();
    for s in schedules {
        let p = plan(s);
        runs.extend(p.runs.iter().map(|&at| (s, at)));
        moves.push((s.id.as_str(), p.next, p.runs.last().copied()));
    }
    (runs, moves)
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
    runs: &[Run<'_>],
    now: DateTime<Utc>,
) -> StoreResult<(u64, Option<DateTime<Utc>>)> {
    let ids: Vec<Uuid> = runs.iter().map(|_| MessageId::at(now).0).collect();
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
           claim_at, paused, gated, pull, created_at, updated_at, ordering_key, held, schedule_id, schedule_run) \
         SELECT i.id, i.account, t.id, 'Scheduled', i.payload, i.at, i.at, i.at, NOT t.enabled, t.gated, t.kind = 'pull', \
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
    runs: &[Run<'_>],
    now: DateTime<Utc>,
) -> StoreResult<(u64, Option<DateTime<Utc>>)> {
    let mut created = 0u64;
    let mut earliest: Option<DateTime<Utc>> = None;
    for chunk in runs.chunks(RUNS_PER_INSERT) {
        let mut q = sqlx::QueryBuilder::new(
            "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, \
             next_attempt_at, claim_at, paused, gated, pull, created_at, updated_at, ordering_key, held, \
             schedule_id, schedule_run) \
             SELECT v.column1, v.column2, t.id, 'Scheduled', v.column4, v.column5, v.column5, v.column5, \
             NOT t.enabled, t.gated, t.kind = 'pull', v.column6, v.column6, v.column7, v.column7 IS NOT NULL, \
             v.column8, v.column5 FROM (",
        );
        q.push_values(chunk, |mut row, (s, at)| {
            row.push_bind(Uid(MessageId::at(now).0))
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
