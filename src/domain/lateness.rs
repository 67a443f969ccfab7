//! How late a message was: one rule for the `dispatch_delivery_lateness_seconds`
//! histogram and the portal's lateness chart (docs/operations.md#metrics).

use chrono::{DateTime, TimeDelta, Utc};

/// When a message is due, for lateness: the later of its `deliveryTime` and
/// the moment it was scheduled. A message scheduled for an instant already
/// past is due when it is scheduled, and late only from then: a backfill of
/// last year's messages, delivered at once, is not a year late.
/// (`store::portal::lateness_ms_sql` is this rule in SQL.)
pub fn due(delivery_time: DateTime<Utc>, scheduled_at: DateTime<Utc>) -> DateTime<Utc> {
    delivery_time.max(scheduled_at)
}

/// How late something that happened at `at` (an attempt's start, a
/// delivery) was: `at` minus [`due`], never below zero.
pub fn lateness(
    delivery_time: DateTime<Utc>,
    scheduled_at: DateTime<Utc>,
    at: DateTime<Utc>,
) -> TimeDelta {
    (at - due(delivery_time, scheduled_at)).max(TimeDelta::zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_late_from_its_delivery_time_or_from_when_it_was_scheduled_if_later() {
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let (hour, ms) = (TimeDelta::hours(1), TimeDelta::milliseconds);
        // Scheduled ahead: late from its delivery time.
        assert_eq!(lateness(t, t - hour, t + ms(40)), ms(40));
        // Scheduled for an hour ago: late from when it was scheduled.
        assert_eq!(lateness(t - hour, t, t + ms(40)), ms(40));
        // Early is not negative.
        assert_eq!(lateness(t, t - hour, t - ms(5)), TimeDelta::zero());
        assert_eq!(due(t - hour, t), t);
    }
}
