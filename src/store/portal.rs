//! What the portal keeps and reads beyond the API's resources: its users,
//! their sessions, the account overview and each message's history of
//! manual actions.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use crate::domain::{
    ids::{AccountId, MessageId, TargetId},
    message::State,
};

/// What a person may do in the portal; each role may do what the one
/// before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads everything of the account.
    Viewer,
    /// Also cancels, reschedules, redrives and replays messages, sends test
    /// messages, resets a target's breaker and manages schedules.
    Operator,
    /// Also manages targets and people.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// A role read back from a row.
    pub fn from_stored(s: &str) -> crate::store::StoreResult<Self> {
        Self::parse(s).ok_or_else(|| crate::store::StoreError::Corrupt(format!("unknown role {s}")))
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A person who signs in to the portal. Only an argon2 hash of the password is kept.
#[derive(Debug, Clone)]
pub struct UserRecord {
    pub id: String,
    pub account: AccountId,
    /// Lower-cased; unique across accounts.
    pub email: String,
    pub password_hash: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

/// An admin's invitation to join the account: the link holds a random
/// token; only its SHA-256 is kept. Accepting it deletes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvitationRecord {
    pub id: String,
    pub token_hash: Vec<u8>,
    pub account: AccountId,
    /// Lower-cased: the only email the link signs up.
    pub email: String,
    pub role: Role,
    /// The inviting admin's email.
    pub invited_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// What became of a change to a person (a new role, a removal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeopleChange {
    Done,
    /// No such person in the account.
    NotFound,
    /// The change would leave the account without an admin.
    LastAdmin,
}

/// What became of an accepted invitation.
#[derive(Debug, Clone)]
pub enum Acceptance {
    /// The person exists now, with the invitation's role; the invitation is gone.
    Joined(UserRecord),
    /// No live invitation has this token (never, used, revoked or expired).
    Gone,
    /// A person with the invitation's email exists already.
    EmailTaken,
}

/// A signed-in browser. The cookie holds a random token; only its SHA-256 is kept.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    pub token_hash: Vec<u8>,
    pub user_id: String,
    pub account: AccountId,
    pub email: String,
    /// The token every form of this session carries.
    pub csrf: String,
    /// The person's role as it is now (read with the session, not stored
    /// in it: a changed role applies at the next request).
    pub role: Role,
    /// The zone the person chose for times (None: the browser's), read
    /// with the session as the role is.
    pub time_zone: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Messages of one target in one state, with what happened in the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCount {
    pub target_id: TargetId,
    pub state: State,
    pub count: u64,
}

/// The account at a glance.
#[derive(Debug, Clone, Default)]
pub struct Overview {
    pub counts: Vec<StateCount>,
    /// Since the window start.
    pub delivered: u64,
    pub failed_attempts: u64,
    pub dead_lettered: u64,
    /// The oldest Scheduled message that is already due and not paused, and
    /// when it fell due: how far behind delivery is.
    pub oldest_due: Option<(crate::domain::ids::MessageId, DateTime<Utc>)>,
}

impl Overview {
    pub fn total(&self, state: State) -> u64 {
        self.counts
            .iter()
            .filter(|c| c.state == state)
            .map(|c| c.count)
            .sum()
    }

    pub fn count(&self, target: &TargetId, state: State) -> u64 {
        self.counts
            .iter()
            .find(|c| &c.target_id == target && c.state == state)
            .map_or(0, |c| c.count)
    }
}

/// What happened to a message beside its attempts (a cancel, a reschedule,
/// dead-lettering), kept for its history and the overview's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageEvent {
    pub at: DateTime<Utc>,
    pub kind: EventKind,
    /// The state the message left.
    pub from: State,
    /// For a reschedule: the new delivery time.
    pub delivery_time: Option<DateTime<Utc>>,
    /// For dead-lettering: why, as the message's last error said then.
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Cancelled,
    Rescheduled,
    DeadLettered,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Cancelled => "Cancelled",
            EventKind::Rescheduled => "Rescheduled",
            EventKind::DeadLettered => "DeadLettered",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Cancelled" => Some(EventKind::Cancelled),
            "Rescheduled" => Some(EventKind::Rescheduled),
            "DeadLettered" => Some(EventKind::DeadLettered),
            _ => None,
        }
    }
}

/// One hour of an account's activity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hour {
    /// When the hour starts (UTC, on the hour).
    pub start: DateTime<Utc>,
    /// Messages delivered in the hour.
    pub delivered: u64,
    /// Attempts that failed in the hour.
    pub failed: u64,
    /// Messages dead-lettered in the hour.
    pub dead_lettered: u64,
    /// How late the messages delivered in the hour at their first attempt
    /// arrived (delivered minus due), median and 99th percentile, in
    /// milliseconds (exact below a second, then to three significant
    /// digits: see `lateness_bucket`); None when there were none.
    pub late_p50_ms: Option<i64>,
    pub late_p99_ms: Option<i64>,
}

/// A target's deliveries and failed attempts in the window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetActivity {
    pub delivered: u64,
    pub failed: u64,
}

impl TargetActivity {
    /// Of the attempts that ended in the window, the share that delivered.
    pub fn success_rate(&self) -> Option<f64> {
        let all = self.delivered + self.failed;
        (all > 0).then(|| self.delivered as f64 / all as f64)
    }
}

/// A bounded payload search: the matches, and where the scan stopped when
/// it stopped short of the account's oldest message (a next search goes on
/// below it).
#[derive(Debug, Clone, Default)]
pub struct Searched {
    pub messages: Vec<crate::domain::message::Message>,
    pub scanned_to: Option<MessageId>,
}

/// What happened in the account per hour (only hours with something in
/// them, oldest first) and per target.
#[derive(Debug, Clone, Default)]
pub struct Activity {
    pub hours: Vec<Hour>,
    pub by_target: HashMap<TargetId, TargetActivity>,
}

/// Per hour: its start, the messages delivered, and their lateness (p50, p99).
pub type DeliveredHour = (DateTime<Utc>, u64, Option<i64>, Option<i64>);

impl Activity {
    /// Puts the counts each store reads together.
    pub fn assemble(
        delivered: Vec<DeliveredHour>,
        failed: Vec<(DateTime<Utc>, u64)>,
        dead: Vec<(DateTime<Utc>, u64)>,
        target_delivered: Vec<(TargetId, u64)>,
        target_failed: Vec<(TargetId, u64)>,
    ) -> Self {
        fn at(hours: &mut BTreeMap<DateTime<Utc>, Hour>, start: DateTime<Utc>) -> &mut Hour {
            hours.entry(start).or_insert_with(|| Hour {
                start,
                ..Hour::default()
            })
        }
        let mut hours = BTreeMap::new();
        for (start, n, p50, p99) in delivered {
            let h = at(&mut hours, start);
            h.delivered = n;
            h.late_p50_ms = p50;
            h.late_p99_ms = p99;
        }
        for (start, n) in failed {
            at(&mut hours, start).failed = n;
        }
        for (start, n) in dead {
            at(&mut hours, start).dead_lettered = n;
        }
        let mut by_target: HashMap<TargetId, TargetActivity> = HashMap::new();
        for (t, n) in target_delivered {
            by_target.entry(t).or_default().delivered = n;
        }
        for (t, n) in target_failed {
            by_target.entry(t).or_default().failed = n;
        }
        Activity {
            hours: hours.into_values().collect(),
            by_target,
        }
    }
}

/// How a store writes instants: what `lateness_ms_sql` must turn into milliseconds.
#[derive(Debug, Clone, Copy)]
pub enum Instants {
    /// PostgreSQL's `timestamptz`.
    Timestamptz,
    /// SQLite's integers, milliseconds since the epoch.
    EpochMs,
}

/// The lateness rule of `domain::lateness` in SQL, in whole milliseconds and
/// never below 0: `at` minus the later of `delivery_time` and `scheduled_at`
/// (a message scheduled for an instant already past is late only from when
/// it was scheduled). Each argument is a column or expression of the store.
pub fn lateness_ms_sql(
    instants: Instants,
    at: &str,
    delivery_time: &str,
    scheduled_at: &str,
) -> String {
    match instants {
        Instants::Timestamptz => format!(
            "greatest(((date_part('epoch', {at}) \
             - date_part('epoch', greatest({delivery_time}, {scheduled_at}))) * 1000)::bigint, 0)"
        ),
        Instants::EpochMs => format!("max({at} - max({delivery_time}, {scheduled_at}), 0)"),
    }
}

/// How a store buckets lateness (ms, an integer expression `l` of SQL, at
/// least 0) for the overview's percentiles: exact below a second, then to
/// three significant digits (12,345 ms counts as 12,300): at most 1 % low,
/// and an hour's deliveries become a few thousand counts at most, counted
/// by the database, instead of every delivery ranked.
pub fn lateness_bucket_sql(l: &str) -> String {
    format!(
        "CASE WHEN {l} < 1000 THEN {l} WHEN {l} < 10000 THEN {l} / 10 * 10 \
         WHEN {l} < 100000 THEN {l} / 100 * 100 WHEN {l} < 1000000 THEN {l} / 1000 * 1000 \
         WHEN {l} < 10000000 THEN {l} / 10000 * 10000 ELSE {l} / 100000 * 100000 END"
    )
}

/// The lateness bucket of `late` ms, as `lateness_bucket_sql` computes it.
pub fn lateness_bucket(late: i64) -> i64 {
    let l = late.max(0);
    let step = match l {
        0..1_000 => 1,
        1_000..10_000 => 10,
        10_000..100_000 => 100,
        100_000..1_000_000 => 1_000,
        1_000_000..10_000_000 => 10_000,
        _ => 100_000,
    };
    l / step * step
}

/// Per hour, from counts of (hour, lateness bucket or None for deliveries
/// after a retry): the messages delivered, and the p50 and p99 (nearest
/// rank) of the first-attempt ones' buckets.
pub fn delivered_hours(counts: Vec<(DateTime<Utc>, Option<i64>, u64)>) -> Vec<DeliveredHour> {
    // Per hour: every delivery, and (bucket, count) of the first-attempt ones.
    type Counted = (u64, Vec<(i64, u64)>);
    let mut hours: BTreeMap<DateTime<Utc>, Counted> = BTreeMap::new();
    for (hour, bucket, n) in counts {
        let (all, buckets) = hours.entry(hour).or_default();
        *all += n;
        if let Some(b) = bucket {
            buckets.push((b, n));
        }
    }
    hours
        .into_iter()
        .map(|(hour, (all, mut buckets))| {
            buckets.sort_unstable();
            let ranked: u64 = buckets.iter().map(|(_, n)| n).sum();
            let at = |q: f64| {
                let rank = ((q * ranked as f64).ceil() as u64).clamp(1, ranked.max(1));
                let mut seen = 0;
                buckets.iter().find_map(|(b, n)| {
                    seen += n;
                    (seen >= rank).then_some(*b)
                })
            };
            (hour, all, at(0.5), at(0.99))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_is_exact_below_a_second_and_three_digits_after() {
        for (late, bucket) in [
            (-5, 0),
            (0, 0),
            (999, 999),
            (1_000, 1_000),
            (1_009, 1_000),
            (12_345, 12_300),
            (1_234_567, 1_230_000),
            (86_400_000, 86_400_000),
        ] {
            assert_eq!(lateness_bucket(late), bucket, "{late}");
        }
    }

    /// The nearest-rank percentile of the bucketed values, ranked one by one.
    fn ranked(values: &[i64], q: f64) -> Option<i64> {
        let mut sorted: Vec<i64> = values.iter().map(|v| lateness_bucket(*v)).collect();
        sorted.sort_unstable();
        let rank = (q * sorted.len() as f64).ceil() as usize;
        (!sorted.is_empty()).then(|| sorted[rank.clamp(1, sorted.len()) - 1])
    }

    #[test]
    fn percentiles_from_bucket_counts_equal_ranking_every_delivery() {
        let hour: DateTime<Utc> = "2026-12-04T10:00:00Z".parse().unwrap();
        let mut seed = 7u64;
        for n in [1usize, 2, 3, 99, 100, 101, 1_000] {
            let values: Vec<i64> = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((seed >> 33) % 50_000) as i64
                })
                .collect();
            let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
            for v in &values {
                *counts.entry(lateness_bucket(*v)).or_default() += 1;
            }
            // Two deliveries after a retry: counted, not ranked.
            let mut rows: Vec<_> = counts
                .into_iter()
                .map(|(b, c)| (hour, Some(b), c))
                .collect();
            rows.push((hour, None, 2));
            let got = delivered_hours(rows);
            assert_eq!(
                got,
                [(
                    hour,
                    n as u64 + 2,
                    ranked(&values, 0.5),
                    ranked(&values, 0.99)
                )],
                "{n} deliveries"
            );
        }
        let only_retried = delivered_hours(vec![(hour, None, 3)]);
        assert_eq!(only_retried, [(hour, 3, None, None)]);
    }
}
