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
//!
//! `rows` reads and binds a schedule's row, `withdraw` takes back the runs
//! made ahead when a schedule changes, `materialise` is the pass.

mod materialise;
mod rows;
mod withdraw;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    limits::{room_for, room_for_runs, Rows},
    own::Own,
    At,
};
use crate::{
    domain::{
        ids::{AccountId, ScheduleId, TargetId},
        schedule::{RunPlan, Schedule},
    },
    store::{Materialised, SaveSchedule, ScheduleCursor, ScheduleStore, StoreResult},
};
use rows::{bind_columns, columns, ScheduleRow};
use withdraw::withdraw_runs_ahead;

#[async_trait]
impl<B: Own> ScheduleStore for B {
    async fn insert_schedule(&self, s: &Schedule) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        room_for(self, &mut tx, &s.account, Rows::Schedules, 1).await?;
        room_for_runs(self, &mut tx, &s.account, &s.recurrence, None).await?;
        let inserted = bind_columns(
            tx.sql(
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
        tx.commit().await?;
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
            // Only a change of rule changes the runs a minute.
            room_for_runs(self, &mut tx, &s.account, &s.recurrence, Some(&s.id)).await?;
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
        materialise::materialise_runs(self, until, limit, now, plan).await
    }
}
