//! Recurring schedules (docs/api.md#recurring-schedules): a target, a payload and a rule of runs.
//! Each run becomes one ordinary message, created a little ahead of its
//! instant by the materialiser (`service::schedules::runner`), and then
//! delivered and retried like any other.
//!
//! The schedule keeps a cursor, `next_run_at`: the first run whose message
//! is not yet created. Creating runs advances it; starting, resuming and
//! changing the rule set it to the first run at or after that moment, so
//! runs missed while paused are never made up. Runs missed while no
//! instance ran are made up when they are younger than `schedules.catch_up`
//! (`Schedule::plan`).

pub mod rule;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

pub use rule::{parse_zone, CronExpr, Every, InvalidRule, Recurrence, Rule};

use super::{
    ids::{AccountId, ScheduleId, TargetId},
    message::OrderingKey,
    payload::Payload,
};

#[derive(Debug, Clone)]
pub struct Schedule {
    pub id: ScheduleId,
    pub account: AccountId,
    pub target_id: TargetId,
    pub name: String,
    pub recurrence: Recurrence,
    pub zone: Tz,
    pub payload: Payload,
    pub ordering_key: Option<OrderingKey>,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub paused: bool,
    /// The first run whose message is not yet created; None while paused
    /// and when no run is left.
    pub next_run_at: Option<DateTime<Utc>>,
    /// The latest run whose message was created, at or before the instant
    /// the schedule was read.
    pub last_run_at: Option<DateTime<Utc>>,
    /// Counts the changes a person made (create, patch, pause, resume): a
    /// change saves only over the revision it was made from.
    pub revision: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The runs a materialiser pass creates for one schedule, and where its
/// cursor goes after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    pub runs: Vec<DateTime<Utc>>,
    pub next: Option<DateTime<Utc>>,
}

impl Schedule {
    pub fn rule(&self) -> Rule {
        Rule {
            recurrence: self.recurrence.clone(),
            zone: self.zone,
            anchor: self.start_at.unwrap_or(self.created_at),
            end_at: self.end_at,
        }
    }

    /// `nextRunAt`: the first run at or after `now`; None while paused or
    /// when no run is left.
    pub fn next_run(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.paused {
            None
        } else {
            self.rule().first_from(now)
        }
    }

    /// Runs from `now` on: the cursor after a create, a resume or a change.
    pub fn restart_at(&mut self, now: DateTime<Utc>) {
        self.next_run_at = self.next_run(now);
    }

    /// The runs from the cursor up to `until` (the materialiser's horizon),
    /// at most `budget` of them; runs before `catch_up_from` are skipped.
    pub fn plan(
        &self,
        until: DateTime<Utc>,
        catch_up_from: DateTime<Utc>,
        budget: usize,
    ) -> RunPlan {
        let rule = self.rule();
        let mut next = match self.next_run_at {
            Some(c) if c < catch_up_from => rule.first_from(catch_up_from),
            other => other,
        };
        let mut runs = Vec::new();
        while let Some(at) = next {
            if at > until || runs.len() >= budget {
                break;
            }
            runs.push(at);
            next = rule.after(at);
        }
        RunPlan { runs, next }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn every_second(created: DateTime<Utc>) -> Schedule {
        Schedule {
            id: ScheduleId::new(),
            account: AccountId::from_trusted("acme"),
            target_id: TargetId::new(),
            name: String::new(),
            recurrence: Recurrence::Every("1s".parse().unwrap()),
            zone: Tz::UTC,
            payload: Payload::parse("x".into()).unwrap(),
            ordering_key: None,
            start_at: None,
            end_at: None,
            paused: false,
            next_run_at: None,
            last_run_at: None,
            revision: 0,
            created_at: created,
            updated_at: created,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_new_schedule_runs_from_its_creation_and_a_plan_stops_at_the_horizon() {
        let t0 = at("2026-01-01T00:00:00Z");
        let mut s = every_second(t0);
        s.restart_at(t0);
        assert_eq!(s.next_run_at, Some(t0));
        let plan = s.plan(t0 + TimeDelta::milliseconds(2_500), t0, 100);
        assert_eq!(
            plan.runs,
            [t0, t0 + TimeDelta::seconds(1), t0 + TimeDelta::seconds(2)]
        );
        assert_eq!(plan.next, Some(t0 + TimeDelta::seconds(3)));
        let plan = s.plan(t0 + TimeDelta::seconds(60), t0, 5);
        assert_eq!(plan.runs.len(), 5, "the budget bounds a pass");
        assert_eq!(plan.next, Some(t0 + TimeDelta::seconds(5)));
    }

    #[test]
    fn runs_older_than_the_catch_up_window_are_skipped_younger_ones_made_up() {
        let t0 = at("2026-01-01T00:00:00Z");
        let mut s = every_second(t0);
        s.next_run_at = Some(t0);
        // Back after 100 s with a catch-up window of 10 s.
        let now = t0 + TimeDelta::seconds(100);
        let plan = s.plan(now, now - TimeDelta::seconds(10), 1_000);
        assert_eq!(plan.runs.first(), Some(&(t0 + TimeDelta::seconds(90))));
        assert_eq!(plan.runs.last(), Some(&now));
        assert_eq!(plan.runs.len(), 11);
    }

    #[test]
    fn paused_schedules_have_no_next_run_and_resume_from_the_resume() {
        let t0 = at("2026-01-01T00:00:00Z");
        let mut s = every_second(t0);
        s.paused = true;
        s.restart_at(t0 + TimeDelta::seconds(5));
        assert_eq!(s.next_run_at, None);
        s.paused = false;
        s.restart_at(t0 + TimeDelta::milliseconds(5_500));
        assert_eq!(s.next_run_at, Some(t0 + TimeDelta::seconds(6)));
    }

    #[test]
    fn start_and_end_bound_the_runs() {
        let t0 = at("2026-01-01T00:00:00Z");
        let mut s = every_second(t0);
        s.start_at = Some(t0 + TimeDelta::seconds(10));
        s.end_at = Some(t0 + TimeDelta::seconds(12));
        s.restart_at(t0);
        assert_eq!(s.next_run_at, Some(t0 + TimeDelta::seconds(10)));
        let plan = s.plan(t0 + TimeDelta::seconds(60), t0, 100);
        assert_eq!(plan.runs.len(), 3);
        assert_eq!(plan.next, None);
        s.restart_at(t0 + TimeDelta::milliseconds(12_001));
        assert_eq!(s.next_run_at, None);
    }
}
