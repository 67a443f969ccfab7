//! The store's capability traits, for `use crate::store::prelude::*;`: a
//! method called on a `dyn Store` needs its trait in scope.

pub use super::capability::{
    ActionStore, DeliveryStore, EventStore, GateStore, HealthCheck, IdentityStore, MessageStore,
    PeopleStore, PortalReads, PullStore, ScheduleStore, SecretStore, Store, SubscriptionStore,
    TargetStore,
};
