//! The store's capabilities, one trait each, so that a caller names what it
//! uses and a backend implements each in the file that owns it. `Store`
//! combines them: every backend is one (`Arc<dyn Store>`), and any type with
//! every capability is a `Store` (the blanket impl below). A method called on
//! a `dyn Store` needs its capability trait in scope: `use
//! crate::store::prelude::*;` brings them all.

mod access;
mod delivery;
mod events;
mod messages;
mod pull;

use async_trait::async_trait;

pub use super::portal_reads::PortalReads;
use super::StoreResult;
pub use access::*;
pub use delivery::*;
pub use events::*;
pub use messages::*;
pub use pull::*;

/// Whether the database answers (the readiness probe).
#[async_trait]
pub trait HealthCheck: Send + Sync + 'static {
    async fn ping(&self) -> StoreResult<()>;
}

/// Every capability: what a backend is, and what the service holds
/// (`Arc<dyn Store>`).
pub trait Store:
    HealthCheck
    + IdentityStore
    + PeopleStore
    + SecretStore
    + TargetStore
    + ScheduleStore
    + MessageStore
    + CountStore
    + ActionStore
    + DeliveryStore
    + GateStore
    + PortalReads
    + SubscriptionStore
    + EventStore
    + PullStore
{
}

impl<T> Store for T where
    T: HealthCheck
        + IdentityStore
        + PeopleStore
        + SecretStore
        + TargetStore
        + ScheduleStore
        + MessageStore
        + CountStore
        + ActionStore
        + DeliveryStore
        + GateStore
        + PortalReads
        + SubscriptionStore
        + EventStore
        + PullStore
{
}
