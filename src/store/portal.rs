//! What the portal keeps and reads beyond the API's resources: its users,
//! their sessions, the account overview and each message's history of
//! manual actions.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use crate::domain::{
    ids::{MessageId, TargetId},
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
    pub account: String,
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
    pub account: String,
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
    pub account: String,
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
    /// milliseconds; None when there were none.
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

/// The `q`-quantile of sorted values (nearest rank), as PostgreSQL's
/// `percentile_disc` gives it.
pub fn percentile_disc(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}
