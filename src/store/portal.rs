//! What the portal keeps and reads beyond the API's resources: its users,
//! their sessions, the account overview and each message's history of
//! manual actions.

use chrono::{DateTime, Utc};

use crate::domain::{ids::TargetId, message::State};

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
