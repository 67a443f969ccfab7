//! Account limits (docs/api.md#account-limits): what one account may hold,
//! so that no account fills the database others share. Each is counted in
//! the transaction that would pass it, under a lock per account and limit
//! (`store::sql::limits`), so that requests racing past a limit by one
//! leave the account at the limit.

use serde::{Deserialize, Serialize};

/// One of the limits, as a refusal names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Targets,
    Subscriptions,
    Schedules,
    ScheduledMessages,
    ScheduleRunsPerSecond,
    WaitingReceives,
}

impl Limit {
    /// The configuration key, which a refusal names.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Targets => "limits.targets",
            Limit::Subscriptions => "limits.subscriptions",
            Limit::Schedules => "limits.schedules",
            Limit::ScheduledMessages => "limits.scheduled_messages",
            Limit::ScheduleRunsPerSecond => "limits.schedule_runs_per_second",
            Limit::WaitingReceives => "limits.waiting_receives",
        }
    }

    /// What it counts, in a sentence.
    pub fn counts(self) -> &'static str {
        match self {
            Limit::Targets => "targets",
            Limit::Subscriptions => "subscriptions",
            Limit::Schedules => "schedules",
            Limit::ScheduledMessages => "messages in state Scheduled",
            Limit::ScheduleRunsPerSecond => "schedule runs a second",
            Limit::WaitingReceives => "receives waiting at once on one instance",
        }
    }
}

/// The limits in force, per account (`[limits]` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub targets: u64,
    pub subscriptions: u64,
    pub schedules: u64,
    /// Messages in state Scheduled (schedules' runs count, and are made
    /// whatever the count).
    pub scheduled_messages: u64,
    /// Runs a second that all the account's schedules make, summed over a
    /// minute.
    pub schedule_runs_per_second: u64,
    /// Receives (long polls) of pull targets waiting at once, per instance:
    /// each holds a connection, and the connections are the server's.
    pub waiting_receives: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            targets: 1_000,
            subscriptions: 1_000,
            schedules: 10_000,
            scheduled_messages: 10_000_000,
            schedule_runs_per_second: 1_000,
            waiting_receives: 1_000,
        }
    }
}

impl Limits {
    /// The most an account may have of `limit`.
    pub fn of(&self, limit: Limit) -> u64 {
        match limit {
            Limit::Targets => self.targets,
            Limit::Subscriptions => self.subscriptions,
            Limit::Schedules => self.schedules,
            Limit::ScheduledMessages => self.scheduled_messages,
            Limit::ScheduleRunsPerSecond => self.schedule_runs_per_second,
            Limit::WaitingReceives => self.waiting_receives,
        }
    }
}

/// An account at a limit: the request would take it past `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the account may have at most {max} {} ({}); this request would pass it", .limit.counts(), .limit.key())]
pub struct OverLimit {
    pub limit: Limit,
    pub max: u64,
}

/// Refuses what would take an account holding `has` past its `max` of
/// `limit` by `adding`; reaching the limit exactly is allowed.
pub fn check(limit: Limit, max: u64, has: u64, adding: u64) -> Result<(), OverLimit> {
    if has.checked_add(adding).is_none_or(|total| total > max) {
        Err(OverLimit { limit, max })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaching_a_limit_is_allowed_and_passing_it_by_one_is_not() {
        assert!(check(Limit::Targets, 3, 2, 1).is_ok());
        assert!(check(Limit::Targets, 3, 3, 0).is_ok());
        let refused = check(Limit::Targets, 3, 3, 1).unwrap_err();
        assert_eq!(
            refused,
            OverLimit {
                limit: Limit::Targets,
                max: 3
            }
        );
        assert_eq!(
            refused.to_string(),
            "the account may have at most 3 targets (limits.targets); this request would pass it"
        );
        // Counts near the top of the range do not wrap.
        assert!(check(Limit::Schedules, u64::MAX, u64::MAX, 1).is_err());
    }

    #[test]
    fn every_limit_is_named_by_its_configuration_key() {
        let limits = Limits::default();
        for (limit, key, max) in [
            (Limit::Targets, "limits.targets", 1_000),
            (Limit::Subscriptions, "limits.subscriptions", 1_000),
            (Limit::Schedules, "limits.schedules", 10_000),
            (
                Limit::ScheduledMessages,
                "limits.scheduled_messages",
                10_000_000,
            ),
            (
                Limit::ScheduleRunsPerSecond,
                "limits.schedule_runs_per_second",
                1_000,
            ),
            (Limit::WaitingReceives, "limits.waiting_receives", 1_000),
        ] {
            assert_eq!(limit.key(), key);
            assert_eq!(limits.of(limit), max);
        }
    }
}
