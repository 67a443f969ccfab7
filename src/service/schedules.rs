//! Recurring schedules (docs/api.md#recurring-schedules): create, change, pause, resume, delete.
//! The runs themselves are made by `crate::schedules` (the materialiser).

use serde_json::Value;

use super::{Conflict, Service, ServiceError, ServiceResult};
use crate::{
    domain::{
        ids::{AccountId, ScheduleId},
        schedule::Schedule,
        time::truncate_ms,
    },
    store::SaveSchedule,
    wire::schedule::{self as wire, ScheduleSpec},
};

/// How many times a change is tried again when another change landed
/// between its read and its write.
const SAVE_TRIES: usize = 5;

impl Service {
    pub async fn create_schedule(
        &self,
        account: &AccountId,
        spec: ScheduleSpec,
    ) -> ServiceResult<Schedule> {
        // Milliseconds, as every store keeps them: `every` counts from here.
        let now = truncate_ms(self.now());
        let mut s = spec.into_schedule(ScheduleId::new(), account.to_string(), now);
        s.restart_at(now);
        if !self.store.insert_schedule(&s).await? {
            return Err(ServiceError::field("targetId", "is not a known target"));
        }
        self.wake.schedules();
        Ok(s)
    }

    /// A JSON merge patch (RFC 7396) on the schedule's document (see
    /// `wire::schedule::merge`). Runs go on from now under the new rule:
    /// those created ahead of their time are made again.
    pub async fn update_schedule(
        &self,
        account: &AccountId,
        id: &ScheduleId,
        patch: &Value,
    ) -> ServiceResult<Schedule> {
        self.change_schedule(account, id, |current| {
            let spec = wire::parse(&wire::merge(current, patch)).map_err(ServiceError::Invalid)?;
            // `change_schedule` sets what a save sets beyond the document.
            Ok(spec.into_schedule(
                current.id.clone(),
                current.account.clone(),
                current.created_at,
            ))
        })
        .await
    }

    /// Pause: no runs until resumed. Resume: runs from now on; those missed
    /// while paused are not made up. Either, again, changes nothing.
    pub async fn set_schedule_paused(
        &self,
        account: &AccountId,
        id: &ScheduleId,
        paused: bool,
    ) -> ServiceResult<Schedule> {
        self.change_schedule(account, id, |current| {
            Ok(Schedule {
                paused,
                ..current.clone()
            })
        })
        .await
    }

    pub async fn delete_schedule(&self, account: &AccountId, id: &ScheduleId) -> ServiceResult<()> {
        if self.store.delete_schedule(account, id, self.now()).await? {
            Ok(())
        } else {
            Err(ServiceError::NotFound)
        }
    }

    async fn change_schedule(
        &self,
        account: &AccountId,
        id: &ScheduleId,
        change: impl Fn(&Schedule) -> ServiceResult<Schedule>,
    ) -> ServiceResult<Schedule> {
        // `change` decides the fields a person sets (and `paused`); the
        // revision, `updatedAt`, the cursor and the last run are set here.
        for _ in 0..SAVE_TRIES {
            let now = self.now();
            let current = self
                .store
                .get_schedule(account, id, now)
                .await?
                .ok_or(ServiceError::NotFound)?;
            let mut changed = change(&current)?;
            if same_schedule(&changed, &current) {
                return Ok(current);
            }
            changed.revision = current.revision + 1;
            changed.updated_at = truncate_ms(now);
            changed.restart_at(now);
            match self.store.save_schedule(&changed, now).await? {
                SaveSchedule::Saved => {
                    self.wake.schedules();
                    // The last run as of now: runs ahead of now are gone.
                    changed.last_run_at = current.last_run_at;
                    return Ok(changed);
                }
                SaveSchedule::NotFound => return Err(ServiceError::NotFound),
                SaveSchedule::UnknownTarget => {
                    return Err(ServiceError::field("targetId", "is not a known target"))
                }
                SaveSchedule::Stale => continue,
            }
        }
        Err(ServiceError::Conflict(Conflict::ChangedMeanwhile))
    }
}

/// Nothing a person sets differs.
fn same_schedule(a: &Schedule, b: &Schedule) -> bool {
    wire::document(a) == wire::document(b)
}
