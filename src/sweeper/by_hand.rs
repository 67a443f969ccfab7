//! Delivering by hand: what tests and tools use to drive the sweeper
//! without its loop.

use tokio::time::Instant;
use tracing::warn;

use super::{
    record::{count_breaker_changes, record, Done},
    Sweeper,
};

impl Sweeper {
    /// Claims and delivers everything due now, waiting for the results to be
    /// recorded. For tests and tools that drive the sweeper by hand.
    pub async fn deliver_due_now(&self) -> usize {
        let mut total = 0;
        loop {
            let claimed_at = Instant::now();
            let now = self.clock.now();
            let claimed = match self
                .store
                .claim_due(now, self.config.batch_size, self.config.lease)
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "claim failed");
                    return total;
                }
            };
            let claimed = match self
                .store
                .claim_gated(
                    now,
                    self.config.batch_size,
                    self.config.lease,
                    &crate::store::ClaimShares::open(self.config.target_concurrency),
                )
                .await
            {
                Ok(gated) => {
                    count_breaker_changes(&gated.changes);
                    claimed.into_iter().chain(gated.claimed).collect::<Vec<_>>()
                }
                Err(e) => {
                    warn!(error = %e, "claim failed");
                    return total;
                }
            };
            if claimed.is_empty() {
                return total;
            }
            total += claimed.len();
            let results = futures::future::join_all(claimed.into_iter().map(|c| async move {
                let gate = c.gated.then(|| c.target_id.clone());
                self.attempt_group(vec![c], claimed_at)
                    .await
                    .into_iter()
                    .map(move |recorded| Done {
                        recorded,
                        gate: gate.clone(),
                        place: None,
                    })
            }))
            .await
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
            record(self.store.as_ref(), results, self.clock.now()).await;
        }
    }
}
