//! Which of our clients were revoked lately, as this instance knows it.
//!
//! A revoked client's tokens must be refused on every instance within
//! seconds, without a database query per request: each instance keeps the
//! ids of the clients revoked within a token's lifetime (older revocations
//! only concern tokens that have expired) and asks the store again when its
//! copy is older than `REFRESH`. One request refreshes at a time; the others
//! use the copy they have meanwhile, never older than `REFRESH` plus one query.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use crate::store::{Store, StoreResult};

/// How old this instance's copy may grow before it asks again.
pub const REFRESH: Duration = Duration::from_secs(2);

/// Revocations a little older than a token's lifetime are kept too: clocks
/// of instances differ.
const CLOCK_MARGIN: Duration = Duration::from_secs(300);

pub struct Revocations {
    store: Arc<dyn Store>,
    lookback: chrono::TimeDelta,
    revoked: RwLock<HashSet<String>>,
    fresh_until: Mutex<Instant>,
    refreshing: tokio::sync::Mutex<()>,
}

impl Revocations {
    /// Loads the revocations of the last `token_ttl`.
    pub async fn load(store: Arc<dyn Store>, token_ttl: Duration) -> StoreResult<Self> {
        let lookback = chrono::TimeDelta::from_std(token_ttl + CLOCK_MARGIN)
            .unwrap_or(chrono::TimeDelta::days(1));
        let this = Self {
            store,
            lookback,
            revoked: RwLock::new(HashSet::new()),
            fresh_until: Mutex::new(Instant::now()),
            refreshing: tokio::sync::Mutex::new(()),
        };
        this.refresh().await?;
        Ok(this)
    }

    /// Whether `client_id` was revoked (as of at most `REFRESH` ago).
    pub async fn is_revoked(&self, client_id: &str) -> bool {
        let stale = *self.fresh_until.lock().expect("revocations lock") <= Instant::now();
        if stale {
            // One refresh at a time; whoever finds one under way goes on
            // with the copy there is.
            if let Ok(_one) = self.refreshing.try_lock() {
                if *self.fresh_until.lock().expect("revocations lock") <= Instant::now() {
                    if let Err(e) = self.refresh().await {
                        tracing::warn!(error = %e, "could not refresh the revoked clients");
                    }
                }
            }
        }
        self.revoked
            .read()
            .expect("revocations lock")
            .contains(client_id)
    }

    async fn refresh(&self) -> StoreResult<()> {
        // A failed refresh is tried again after REFRESH, not at every request.
        *self.fresh_until.lock().expect("revocations lock") = Instant::now() + REFRESH;
        let since = chrono::Utc::now() - self.lookback;
        let ids = self.store.clients_revoked_since(since).await?;
        *self.revoked.write().expect("revocations lock") = ids.into_iter().collect();
        Ok(())
    }
}
