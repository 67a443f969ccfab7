//! Pure types and rules: no I/O, no async.

pub mod event;
pub mod ids;
pub mod lateness;
pub mod limits;
pub mod message;
pub mod payload;
pub mod receipt;
pub mod retry;
pub mod schedule;
pub mod scope;
pub mod target;
pub mod time;
pub mod told;
