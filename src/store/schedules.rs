//! What the schedule store takes and answers (docs/api.md#recurring-schedules), beside the
//! `ScheduleStore` capability.

use chrono::{DateTime, Utc};

use crate::domain::{
    ids::ScheduleId,
    schedule::{CronExpr, Recurrence, Schedule},
};

use super::{StoreError, StoreResult};

/// Where a page of schedules (newest first) continues.
pub type ScheduleCursor = super::PageCursor<ScheduleId>;

impl ScheduleCursor {
    pub fn after(s: &Schedule) -> Self {
        Self {
            created_at: s.created_at,
            id: s.id.clone(),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum SaveSchedule {
    Saved,
    NotFound,
    /// Someone changed it since it was read: read it again.
    Stale,
    /// Its (new) target is not one of the account's.
    UnknownTarget,
}

/// What one materialiser pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Materialised {
    /// Schedules whose cursor moved.
    pub schedules: usize,
    /// Messages created (a run already made is never made again).
    pub created: u64,
    /// The earliest run created.
    pub earliest: Option<DateTime<Utc>>,
}

/// A schedule's rule as stored: `cron` or `every` text, and a zone name.
pub(crate) fn recurrence_from_row(
    id: &str,
    cron: Option<&str>,
    every: Option<&str>,
) -> StoreResult<Recurrence> {
    let bad = |e: String| StoreError::Corrupt(format!("schedule {id}: {e}"));
    match (cron, every) {
        (Some(c), None) => c
            .parse::<CronExpr>()
            .map(Recurrence::Cron)
            .map_err(|e| bad(e.0)),
        (None, Some(e)) => e.parse().map(Recurrence::Every).map_err(|e| bad(e.0)),
        _ => Err(bad("neither or both of cron and every".into())),
    }
}

pub(crate) fn zone_from_row(id: &str, zone: &str) -> StoreResult<chrono_tz::Tz> {
    crate::domain::schedule::parse_zone(zone)
        .map_err(|_| StoreError::Corrupt(format!("schedule {id}: time zone {zone}")))
}
