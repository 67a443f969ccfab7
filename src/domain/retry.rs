//! The retry ladder of docs/api.md#the-ladder, as a pure function.
//!
//! A *round* is one attempt plus `immediate_retries` immediate retries. A
//! *cycle* is `minute_rounds` rounds, each next round starting `minute_delay`
//! after the previous one failed. After the last round of a cycle the next
//! cycle starts `hour_delay` later. When `hour_cycles` cycles have failed the
//! message is a dead letter. Non-retryable failures dead-letter at once.

use std::time::Duration;

use chrono::{DateTime, Utc};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub immediate_retries: u32,
    pub minute_rounds: u32,
    pub hour_cycles: u32,
    pub minute_delay: Duration,
    pub hour_delay: Duration,
    /// The longest wait a receiver may ask for (Retry-After).
    pub max_retry_after: Duration,
}

/// What an attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Success,
    RetryableFailure,
    NonRetryableFailure,
    /// A consumer of a pull target received the message (docs/api.md#pull-targets).
    Received,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "Success",
            Self::RetryableFailure => "RetryableFailure",
            Self::NonRetryableFailure => "NonRetryableFailure",
            Self::Received => "Received",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Success" => Some(Self::Success),
            "RetryableFailure" => Some(Self::RetryableFailure),
            "NonRetryableFailure" => Some(Self::NonRetryableFailure),
            "Received" => Some(Self::Received),
            _ => None,
        }
    }
}

/// What happens to the message after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Delivered,
    /// Attempt again at this instant.
    Retry(DateTime<Utc>),
    DeadLetter,
}

impl RetryPolicy {
    pub fn attempts_per_round(&self) -> u32 {
        self.immediate_retries + 1
    }

    pub fn attempts_per_cycle(&self) -> u32 {
        self.attempts_per_round() * self.minute_rounds
    }

    /// All attempts the ladder allows: 2 × 5 × 24 = 240 by default.
    pub fn max_attempts(&self) -> u32 {
        self.attempts_per_cycle() * self.hour_cycles
    }

    /// The decision after attempt number `attempt` of the current ladder
    /// (1-based, counted since the last schedule or reschedule) ended with
    /// `outcome` at `finished_at`.
    pub fn next(&self, attempt: u32, outcome: AttemptOutcome, finished_at: DateTime<Utc>) -> Next {
        match outcome {
            // A receive is never judged by the ladder (an ack ends it); the
            // consumer has the message.
            AttemptOutcome::Success | AttemptOutcome::Received => Next::Delivered,
            AttemptOutcome::NonRetryableFailure => Next::DeadLetter,
            AttemptOutcome::RetryableFailure => match self.delay_after(attempt) {
                Some(delay) => Next::Retry(finished_at + delay),
                None => Next::DeadLetter,
            },
        }
    }

    /// As `next`, when the receiver asked for `retry_after` (a 429 or 503
    /// with Retry-After): a retry is no earlier than that wait, capped at
    /// `max_retry_after`, and an immediate retry becomes a wait; the ladder
    /// advances as usual. Also returns the wait applied (after the cap),
    /// when there is a retry to apply it to.
    pub fn next_honouring(
        &self,
        attempt: u32,
        outcome: AttemptOutcome,
        finished_at: DateTime<Utc>,
        retry_after: Option<Duration>,
    ) -> (Next, Option<Duration>) {
        match (self.next(attempt, outcome, finished_at), retry_after) {
            (Next::Retry(at), Some(asked)) => {
                let wait = asked.min(self.max_retry_after);
                (Next::Retry(at.max(finished_at + wait)), Some(wait))
            }
            (next, _) => (next, None),
        }
    }

    /// The wait after failed attempt `attempt`, or None when the ladder is exhausted.
    pub fn delay_after(&self, attempt: u32) -> Option<Duration> {
        let attempt = attempt.max(1);
        if attempt >= self.max_attempts() {
            None
        } else if attempt.is_multiple_of(self.attempts_per_cycle()) {
            Some(self.hour_delay)
        } else if attempt.is_multiple_of(self.attempts_per_round()) {
            Some(self.minute_delay)
        } else {
            Some(Duration::ZERO)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn default_policy() -> RetryPolicy {
        RetryPolicy {
            immediate_retries: 1,
            minute_rounds: 5,
            hour_cycles: 24,
            minute_delay: Duration::from_secs(60),
            hour_delay: Duration::from_secs(3600),
            max_retry_after: Duration::from_secs(3600),
        }
    }

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2020, 7, 1, 12, 34, 0).unwrap()
    }

    #[test]
    fn success_delivers_and_non_retryable_dead_letters_at_any_position() {
        let p = default_policy();
        for attempt in [1, 2, 3, 10, 11, 239, 240] {
            assert_eq!(
                p.next(attempt, AttemptOutcome::Success, t0()),
                Next::Delivered
            );
            assert_eq!(
                p.next(attempt, AttemptOutcome::NonRetryableFailure, t0()),
                Next::DeadLetter
            );
        }
    }

    #[test]
    fn the_default_ladder_is_240_attempts() {
        assert_eq!(default_policy().max_attempts(), 240);
    }

    #[test]
    fn every_transition_of_the_default_ladder() {
        let p = default_policy();
        let mut immediate = 0;
        let mut minute = 0;
        let mut hour = 0;
        for attempt in 1..=240u32 {
            let next = p.next(attempt, AttemptOutcome::RetryableFailure, t0());
            let expected = if attempt == 240 {
                Next::DeadLetter
            } else if attempt % 10 == 0 {
                hour += 1;
                Next::Retry(t0() + Duration::from_secs(3600))
            } else if attempt % 2 == 0 {
                minute += 1;
                Next::Retry(t0() + Duration::from_secs(60))
            } else {
                immediate += 1;
                Next::Retry(t0())
            };
            assert_eq!(next, expected, "attempt {attempt}");
        }
        // 120 rounds, each with one immediate retry; 4 minute waits per cycle
        // across 24 cycles; 23 hour waits between the cycles.
        assert_eq!(immediate, 120);
        assert_eq!(minute, 24 * 4);
        assert_eq!(hour, 23);
    }

    #[test]
    fn the_default_ladder_spans_about_a_day() {
        let p = default_policy();
        let total: Duration = (1..240).map(|a| p.delay_after(a).unwrap()).sum();
        assert_eq!(total, Duration::from_secs(23 * 3600 + 96 * 60));
    }

    #[test]
    fn zero_immediate_retries_makes_every_round_one_attempt() {
        let p = RetryPolicy {
            immediate_retries: 0,
            minute_rounds: 2,
            hour_cycles: 2,
            ..default_policy()
        };
        assert_eq!(p.max_attempts(), 4);
        assert_eq!(p.delay_after(1), Some(Duration::from_secs(60)));
        assert_eq!(p.delay_after(2), Some(Duration::from_secs(3600)));
        assert_eq!(p.delay_after(3), Some(Duration::from_secs(60)));
        assert_eq!(p.delay_after(4), None);
    }

    #[test]
    fn several_immediate_retries_wait_only_after_the_round() {
        let p = RetryPolicy {
            immediate_retries: 2,
            minute_rounds: 1,
            hour_cycles: 2,
            ..default_policy()
        };
        assert_eq!(p.max_attempts(), 6);
        let delays: Vec<_> = (1..=6).map(|a| p.delay_after(a)).collect();
        let z = Some(Duration::ZERO);
        let h = Some(Duration::from_secs(3600));
        assert_eq!(delays, vec![z, z, h, z, z, None]);
    }

    #[test]
    fn sub_second_delays_are_kept_to_the_millisecond() {
        let p = RetryPolicy {
            minute_delay: Duration::from_millis(150),
            hour_delay: Duration::from_millis(700),
            ..default_policy()
        };
        let t = t0();
        assert_eq!(
            p.next(2, AttemptOutcome::RetryableFailure, t),
            Next::Retry(t + Duration::from_millis(150))
        );
        assert_eq!(
            p.next(10, AttemptOutcome::RetryableFailure, t),
            Next::Retry(t + Duration::from_millis(700))
        );
    }

    #[test]
    fn outcomes_round_trip_as_strings() {
        for o in [
            AttemptOutcome::Success,
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::NonRetryableFailure,
            AttemptOutcome::Received,
        ] {
            assert_eq!(AttemptOutcome::parse(o.as_str()), Some(o));
        }
    }

    #[test]
    fn a_receivers_retry_after_delays_the_retry_up_to_the_cap() {
        let p = RetryPolicy {
            max_retry_after: Duration::from_secs(600),
            ..default_policy()
        };
        let t = t0();
        let retryable = AttemptOutcome::RetryableFailure;
        // An immediate retry becomes a wait of what was asked.
        assert_eq!(
            p.next_honouring(1, retryable, t, Some(Duration::from_secs(30))),
            (
                Next::Retry(t + Duration::from_secs(30)),
                Some(Duration::from_secs(30))
            )
        );
        // A longer wish is cut to the cap.
        assert_eq!(
            p.next_honouring(1, retryable, t, Some(Duration::from_secs(7200))),
            (
                Next::Retry(t + Duration::from_secs(600)),
                Some(Duration::from_secs(600))
            )
        );
        // The ladder's own wait wins when it is longer.
        assert_eq!(
            p.next_honouring(2, retryable, t, Some(Duration::from_secs(5))),
            (
                Next::Retry(t + Duration::from_secs(60)),
                Some(Duration::from_secs(5))
            )
        );
        // Without a wish, or without a retry, nothing changes.
        assert_eq!(
            p.next_honouring(1, retryable, t, None),
            (Next::Retry(t), None)
        );
        assert_eq!(
            p.next_honouring(240, retryable, t, Some(Duration::from_secs(5))),
            (Next::DeadLetter, None)
        );
    }
}
