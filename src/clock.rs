//! The one source of "now". Everything that decides by time (scheduling,
//! retries, leases, retention, sessions) asks a `Clock` it was given, so a
//! test can hold time still or move it on.

use std::sync::Mutex;

use chrono::{DateTime, TimeDelta, Utc};

use crate::domain::time::truncate_ms;

pub trait Clock: Send + Sync + 'static {
    /// The current time, truncated to milliseconds.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        truncate_ms(Utc::now())
    }
}

/// A clock that stands still until it is set or advanced.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(Mutex::new(truncate_ms(at)))
    }

    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().expect("clock lock") = truncate_ms(at);
    }

    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.0.lock().expect("clock lock");
        *now = truncate_ms(*now + by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let start = DateTime::parse_from_rfc3339("2030-01-01T00:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), truncate_ms(start));
        assert_eq!(clock.now(), clock.now());
        clock.advance(TimeDelta::milliseconds(1500));
        assert_eq!(
            clock.now(),
            truncate_ms(start) + TimeDelta::milliseconds(1500)
        );
    }

    #[test]
    fn the_system_clock_has_millisecond_precision() {
        let now = SystemClock.now();
        assert_eq!(now.timestamp_subsec_nanos() % 1_000_000, 0);
    }
}
