//! Recurring schedules (docs/api.md#recurring-schedules): create, change, pause, resume, delete.
//! The runs themselves are made by `crate::schedules` (the materialiser).

use serde_json::Value;

use super::{
    access::{Actor, Permission},
    Conflict, Service, ServiceError, ServiceResult,
};
use crate::{
    domain::{
        ids::{AccountId, ScheduleId},
        schedule::Schedule,
        time::truncate_ms,
    },
    store::SaveSchedule,
    sweeper::ahead::{Fence, Fenced},
    wire::schedule::{self as wire, ScheduleSpec},
};

/// How many times a change is tried again when another change landed
/// between its read and its write.
const SAVE_TRIES: usize = 5;

impl Service {
    pub async fn create_schedule(
        &self,
        actor: &Actor,
        spec: ScheduleSpec,
    ) -> ServiceResult<Schedule> {
        let account = actor.allow(Permission::ChangeMessages)?;
        // Milliseconds, as every store keeps them: `every` counts from here.
        let now = truncate_ms(self.now());
        let mut s = spec.into_schedule(ScheduleId::new(), account.clone(), now);
        s.restart_at(now);
        // Its runs are never refused: a schedule whose next run would pass
        // the account's limit of scheduled messages is, now.
        if !s.paused {
            self.room_for_scheduled(account, 1).await?;
        }
        if !self.store.insert_schedule(&s).await? {
            return Err(ServiceError::field("targetId", "is not a known target"));
        }
        self.wake.schedules();
        Ok(s)
    }

    /// A JSON merge patch (RFC 7396) on the schedule's document (see
    /// `wire::schedule::merge`). A change of what its runs are (`RUN_FIELDS`)
    /// makes them go on from now under the new rule: those created ahead of
    /// their time are cancelled and made again. A change of its name alone
    /// leaves its runs as they are.
    pub async fn update_schedule(
        &self,
        actor: &Actor,
        id: &ScheduleId,
        patch: &Value,
    ) -> ServiceResult<Schedule> {
        let account = actor.allow(Permission::ChangeMessages)?;
        // A change of its runs (not of its name alone, nor one that pauses
        // it) needs room for its next run.
        let touches_runs = patch
            .as_object()
            .is_some_and(|p| p.keys().any(|k| RUN_FIELDS.contains(&k.as_str())));
        if touches_runs && patch.get("paused") != Some(&Value::Bool(true)) {
            self.room_for_scheduled(account, 1).await?;
        }
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
        actor: &Actor,
        id: &ScheduleId,
        paused: bool,
    ) -> ServiceResult<Schedule> {
        let account = actor.allow(Permission::ChangeMessages)?;
        if !paused {
            self.room_for_scheduled(account, 1).await?;
        }
        self.change_schedule(account, id, |current| {
            Ok(Schedule {
                paused,
                ..current.clone()
            })
        })
        .await
    }

    /// Its runs made ahead of their time are cancelled; the messages of
    /// those that fell due stay as they are.
    pub async fn delete_schedule(&self, actor: &Actor, id: &ScheduleId) -> ServiceResult<()> {
        let account = actor.allow(Permission::ChangeMessages)?;
        let current = self
            .store
            .get_schedule(account, id, self.now())
            .await?
            .ok_or(ServiceError::NotFound)?;
        let deleted = {
            let _fence = self.take_back_held(&current).await?;
            self.store.delete_schedule(account, id, self.now()).await?
        };
        if !deleted {
            return Err(ServiceError::NotFound);
        }
        self.after_withdrawal(&current);
        Ok(())
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
            let restart = changes_runs(&changed, &current);
            let saved = if restart {
                // What this instance claimed ahead goes back first, so the
                // runs it holds are cancelled too (as a cancel takes a held
                // message back), and nothing is claimed ahead meanwhile.
                let _fence = self.take_back_held(&current).await?;
                let now = self.now();
                changed.updated_at = truncate_ms(now);
                changed.restart_at(now);
                self.store.save_schedule(&changed, true, now).await?
            } else {
                changed.updated_at = truncate_ms(now);
                changed.next_run_at = current.next_run_at;
                self.store.save_schedule(&changed, false, now).await?
            };
            match saved {
                SaveSchedule::Saved => {
                    if restart {
                        self.after_withdrawal(&current);
                        self.wake.schedules();
                    }
                    // The last run as of now: runs ahead of now are not runs yet.
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

    /// The messages this instance claimed ahead of their time for the
    /// schedule's target go back to the store, due as before, so that a
    /// withdrawal that follows cancels the schedule's among them; the others
    /// are claimed again. Nothing of the target is held ahead while the
    /// answer, a fence on it, is kept.
    async fn take_back_held(&self, s: &Schedule) -> ServiceResult<Fenced<'_>> {
        let (fence, held) = self.held.fence(Fence::Target(s.target_id.clone())).await;
        let back: Vec<_> = held.into_iter().map(|c| (c.id, c.lease_token)).collect();
        self.give_back(&back).await?;
        Ok(fence)
    }

    /// After runs were withdrawn (cancelled): as after a cancel, the next
    /// message of their orderingKey may go now.
    fn after_withdrawal(&self, withdrawn_from: &Schedule) {
        if withdrawn_from.ordering_key.is_some() {
            self.wake.now();
        }
    }
}

/// The fields of a schedule's document that decide its runs: a change of
/// any makes the runs go on from now, and withdraws those made ahead of
/// their time. Its name decides nothing of them.
const RUN_FIELDS: [&str; 9] = [
    "cron",
    "every",
    "timeZone",
    "startAt",
    "endAt",
    "targetId",
    "payload",
    "orderingKey",
    "paused",
];

/// Nothing a person sets differs.
fn same_schedule(a: &Schedule, b: &Schedule) -> bool {
    wire::document(a) == wire::document(b)
}

/// A field that decides the runs differs.
fn changes_runs(a: &Schedule, b: &Schedule) -> bool {
    let (a, b) = (wire::document(a), wire::document(b));
    RUN_FIELDS.iter().any(|f| a[f] != b[f])
}
