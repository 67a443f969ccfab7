//! What the portal keeps and reads beyond the API's resources: its users,
//! their sessions, the account overview and each message's history of
//! manual actions.

use chrono::{DateTime, Utc};

use crate::domain::{ids::TargetId, message::State};

/// A person who signs in to the portal. Only an argon2 hash of the password is kept.
#[derive(Debug, Clone)]
pub struct UserRecord {
    pub id: String,
    pub account: String,
    /// Lower-cased; unique across accounts.
    pub email: String,
    pub password_hash: String,
    pub created_at: DateTime<Utc>,
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
