//! A schedule's row: its columns as read, reading one into a `Schedule`,
//! and binding the columns that insert and save both write.

use crate::{
    domain::{
        ids::{AccountId, ScheduleId, TargetId},
        message::OrderingKey,
        schedule::Schedule,
    },
    store::{
        recurrence_from_row,
        sql::{rows::payload, At, Stmt, Text},
        zone_from_row, StoreError, StoreResult,
    },
};

/// The columns of a schedule, `last_run_at` as of the bind parameter `$N`
/// given: the latest run created at or before then.
pub(super) fn columns(now: usize) -> String {
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
pub(super) struct ScheduleRow {
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

/// Binds the columns insert and save both write, in their order ($1 to
/// $14: id to revision); each then binds its times.
pub(super) fn bind_columns<'q, 'a>(q: Stmt<'q, 'a>, s: &'q Schedule) -> Stmt<'q, 'a> {
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
