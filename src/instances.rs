//! The instances serving on one database. Each notes itself every second
//! (`CountStore::instance_seen`); one not seen for three seconds is taken
//! for dead, and the leases it held on messages it had not attempted yet
//! (claimed ahead, or waiting for a slot) are given back at once, so that
//! another instance attempts them within seconds of a crash instead of when
//! the lease would have ended (`sweeper.lease`, 30 s). The count of
//! instances serving also gives each its part of `api.rate_limit`.

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::{
    clock::Clock,
    limits::ApiLimits,
    store::{InstancesSeen, Store, StoreResult},
    wake::Wake,
};

/// How often an instance notes itself.
pub const BEAT: Duration = Duration::from_secs(1);
/// An instance not noted for this long is dead: three beats missed.
pub const STALE: Duration = Duration::from_secs(3);

/// What a note needs: the store, and how far ahead of now a lease may run
/// (a due claim's lease, or one taken ahead of its message's time).
#[derive(Clone)]
pub struct Instances {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub leases_reach: Duration,
}

impl Instances {
    /// Notes this instance once; `first` also gives back what no instance
    /// serving holds (a predecessor killed before it was ever noted).
    pub async fn note(&self, first: bool) -> StoreResult<InstancesSeen> {
        let now = self.clock.now();
        let reach =
            chrono::TimeDelta::from_std(self.leases_reach).unwrap_or(chrono::TimeDelta::days(1));
        let seen = self
            .store
            .instance_seen(now, STALE, now + reach, first)
            .await?;
        if seen.given_back > 0 {
            tracing::warn!(
                count = seen.given_back,
                "an instance stopped serving: the messages it held are claimable again"
            );
        }
        Ok(seen)
    }

    /// Notes this instance every `BEAT` until `shutdown`, telling `limits`
    /// how many serve and waking the sweeper when leases were given back.
    pub async fn run(self, limits: Arc<ApiLimits>, wake: Arc<Wake>, shutdown: CancellationToken) {
        let mut every = tokio::time::interval(BEAT);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            match self.note(false).await {
                Ok(seen) => {
                    limits.set_instances(seen.serving);
                    if seen.given_back > 0 {
                        wake.now();
                    }
                }
                Err(e) => tracing::warn!(error = %e, "noting this instance as serving failed"),
            }
        }
    }
}
