//! What a backend keeps beside its database, for the bodies written once
//! that need it: the sealer of secrets, and the wake-up of other instances.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{Backend, Tx};
use crate::{domain::limits::Limits, sealing::Sealer, store::StoreResult};

#[async_trait]
pub(crate) trait Keeps: Backend {
    /// Seals target secrets and signing keys when an encryption key is set.
    fn sealer(&self) -> Option<&Sealer>;

    /// What one account may hold (`sql::limits` counts against it).
    fn limits(&self) -> &Limits;

    /// Inside `tx`: tells the sweepers of other instances that something
    /// falls due at `at`, when that is soon after `now`. Only PostgreSQL
    /// is shared by instances (its `NOTIFY`, sent at commit); SQLite's one
    /// process wakes its own sweeper, so by default nothing is sent.
    async fn notify_if_soon(
        &self,
        _tx: &mut Tx,
        _at: DateTime<Utc>,
        _now: DateTime<Utc>,
    ) -> StoreResult<()> {
        Ok(())
    }
}
