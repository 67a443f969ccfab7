//! The use cases, one function each, under every door: the REST API, the
//! portal and the CLI parse their input, call a use case here and render
//! what it answers. A use case owns what lies beyond parsing: the rules that
//! need the store (a target exists in the account, an idempotency key names
//! one request), the outbound policy, the wake-up of the sweeper, the metrics
//! and the group commit.
//!
//! It may import the domain, the store, the outbound policy, the sweeper's
//! buffer of messages claimed ahead (`Held`, handed to it at start) and the
//! wire types it remembers for idempotent replays; never `api` or `portal`.

pub mod access;
pub mod bulk;
pub mod coalesce;
mod counts;
pub mod events;
mod failures;
mod idempotency;
pub mod identities;
pub mod messages;
pub mod people;
pub mod pull;
mod reads;
pub mod schedules;
pub mod sessions;
pub mod targets;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::{
    clock::{Clock, SystemClock},
    config::Config,
    domain::{limits::OverLimit, message::State, target::FieldError},
    store::{Store, StoreError},
    sweeper::ahead::Held,
    wake::Wake,
};

pub use access::{Actor, Permission, Refusal};
pub use coalesce::{Coalescer, GroupCommits};
pub use idempotency::{insert_once, IdempotencyKey};
pub use reads::Reads;

/// What every use case needs; cheap to clone.
#[derive(Clone)]
pub struct Service {
    store: Arc<dyn Store>,
    config: Arc<Config>,
    wake: Arc<Wake>,
    /// The sweeper's messages claimed ahead of their time: a cancel or
    /// reschedule on this instance takes them back first.
    held: Arc<Held>,
    /// Single schedule requests and publishes go through the group commits
    /// when there are.
    commits: Option<Arc<GroupCommits>>,
    clock: Arc<dyn Clock>,
    /// Consumers waiting on pull targets, and the ends of last receives.
    pull: Arc<pull::PullWatch>,
    /// Accounts' scheduled messages, counted lately (`limits.scheduled_messages`).
    scheduled: Arc<counts::ScheduledCounts>,
}

impl Service {
    pub fn new(
        store: Arc<dyn Store>,
        config: Arc<Config>,
        wake: Arc<Wake>,
        held: Arc<Held>,
        commits: Option<Arc<GroupCommits>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            config,
            wake,
            held,
            commits,
            clock,
            pull: Arc::default(),
            scheduled: Arc::default(),
        }
    }

    /// The watch of consumers waiting on pull targets: `app` runs its tasks.
    pub fn pull_watch(&self) -> &Arc<pull::PullWatch> {
        &self.pull
    }

    /// For the admin commands: the system clock, no group commit, and no
    /// sweeper of this process to wake (a serving instance finds the work
    /// with its own poll).
    pub fn admin(store: Arc<dyn Store>, config: Arc<Config>) -> Self {
        Self::new(
            store,
            config,
            Arc::new(Wake::default()),
            Arc::new(Held::default()),
            None,
            Arc::new(SystemClock),
        )
    }

    /// Whether the actor may do what needs `permission`, before a door
    /// reads the rest of its request: a refusal comes before a complaint
    /// about the input. The use case decides again, on its own.
    pub fn check(&self, actor: &Actor, permission: Permission) -> ServiceResult<()> {
        actor.allow(permission).map(|_| ())
    }

    /// What the actor may read of its account, and nothing it may change.
    pub fn reads<'a>(&'a self, actor: &'a Actor) -> Reads<'a> {
        Reads::new(self.store.as_ref(), actor)
    }

    /// Whether the database answers: what the readiness probe asks.
    pub async fn ping(&self) -> ServiceResult<()> {
        Ok(self.store.ping().await?)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }
}

/// Why a use case refused.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The input breaks a rule; each error names its field.
    #[error("invalid request")]
    Invalid(Vec<FieldError>),
    /// The actor may not do this; nothing changed.
    #[error("{0}")]
    Forbidden(Refusal),
    /// Unknown, or another account's.
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Conflict(Conflict),
    /// The account is at one of its limits; nothing changed.
    #[error("{0}")]
    Quota(OverLimit),
    #[error(transparent)]
    Store(StoreError),
    /// Every fresh id collided (astronomically unlikely).
    #[error("no free id could be found")]
    IdsExhausted,
}

/// A limit the store found the account at is a refusal like any other;
/// every other store error stays one.
impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Quota(over) => ServiceError::Quota(over),
            // The last line of "no input makes a 5xx": a character the
            // checks before let through and the database refuses.
            e if e.is_invalid_text() => ServiceError::field(
                "",
                "a value holds a character that cannot be stored (U+0000)",
            ),
            other => ServiceError::Store(other),
        }
    }
}

impl ServiceError {
    pub fn field(field: &str, message: impl Into<String>) -> Self {
        Self::Invalid(vec![FieldError::new(field, message)])
    }
}

/// The state of things forbids the action; each door words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    #[error("this idempotency key was used with a different request within the last 24 hours")]
    KeyReused,
    /// The message is in a state the action does not apply to.
    #[error("a {} message cannot be {action}", state.as_str())]
    WrongState { state: State, action: &'static str },
    /// An attempt holds the message's lease.
    #[error(
        "an attempt to deliver this message is under way; it cannot be {action} until it ends"
    )]
    InFlight { action: &'static str },
    #[error(
        "the target still has Scheduled or DeadLetter messages; cancel them first \
         (and pause or delete its schedules, whose next runs are made a few seconds ahead)"
    )]
    TargetInUse,
    /// Only a webhook signs its deliveries.
    #[error("only a webhook target has a signing secret; this one is an SQS or SNS target")]
    NoSigningSecret,
    #[error("a portal user with this email exists already")]
    EmailTaken,
    /// The change would leave the account without an admin.
    #[error("the account would have no admin left; make another person an admin first")]
    LastAdmin,
    /// Other changes kept landing between a change's read and its write.
    #[error(
        "the schedule was being changed by other requests at the same time; send the change again"
    )]
    ChangedMeanwhile,
    /// Receive, ack, nack and visibility are a pull target's.
    #[error("this target is not a pull target: Dispatch delivers its messages itself")]
    NotPull,
    /// The receipt handle is not the message's latest receive.
    #[error(
        "the receipt handle is stale: the message was received again, acked, nacked, \
         cancelled or rescheduled since, or it is not this target's"
    )]
    StaleHandle,
}

pub type ServiceResult<T> = Result<T, ServiceError>;
