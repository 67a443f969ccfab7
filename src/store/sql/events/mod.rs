//! Subscriptions and events (docs/api.md#events-and-subscriptions), once for
//! both databases.
//!
//! Matching is a lookup, not a scan: each distinct pattern of a subscription
//! is a row of `subscription_patterns`, and an event of type `a.b.c` looks up
//! the few texts that match it (`a.b.c`, `a.*`, `a.b.*`, `*`) in the index
//! on (account, pattern). The publish's cost grows with the targets it
//! reaches, not with the subscriptions it does not.
//!
//! A publish is one transaction: its idempotency key, the event, one message
//! per matching target (each target once, however many of its subscriptions
//! match), and the event's list of them. Its messages are made as every
//! message is: under their ordering key's lock, the target's row KEY SHARE
//! locked on PostgreSQL against a concurrent enable or disable (so `paused`
//! is right), other instances told when one falls due soon.

mod archive;
mod publish;
mod subscriptions;
mod told;

pub(crate) use subscriptions::from_matching;
pub(crate) use told::{
    publish_told, subscribes, subscribes_to, tell, tell_rows, told_columns, ToldRow,
};
