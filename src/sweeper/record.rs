//! Recording what attempts did: results in batches, and what the gated
//! targets' circuit breakers learn from them, before the results make any
//! retry claimable.

use std::{sync::Arc, time::Duration};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::{
    clock::Clock,
    domain::{
        ids::TargetId,
        retry::{AttemptOutcome, Next},
        target::gate::BreakerChange,
    },
    metrics as m,
    store::{Recorded, Store},
    wake::Wake,
};

const RECORD_BATCH: usize = 1000;

/// Records results in batches: whatever has arrived while the previous batch
/// was being written goes into the next statement.
pub(super) async fn record_loop(
    store: Arc<dyn Store>,
    wake: Arc<Wake>,
    clock: Arc<dyn Clock>,
    mut rx: mpsc::UnboundedReceiver<Done>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    let mut ended = Vec::new();
    while let Some(first) = rx.recv().await {
        first.take(&mut batch, &mut ended);
        while batch.len() < RECORD_BATCH {
            match rx.try_recv() {
                Ok(done) => done.take(&mut batch, &mut ended),
                Err(_) => break,
            }
        }
        // The breakers learn first: a retry becomes claimable only once its
        // result is recorded, and by then an opened breaker holds it.
        let gated = !ended.is_empty();
        if gated {
            record_health(store.as_ref(), &ended, clock.now()).await;
            ended.clear();
        }
        let mut failures = 0u32;
        loop {
            match store.record(&batch, clock.now()).await {
                Ok(_) => break,
                Err(e) => {
                    failures += 1;
                    // Leases make unrecorded attempts claimable again, so
                    // giving up at shutdown loses nothing (it may redeliver).
                    if shutdown.is_cancelled() && failures >= 3 {
                        warn!(error = %e, count = batch.len(), "giving up recording at shutdown");
                        break;
                    }
                    warn!(error = %e, count = batch.len(), "recording results failed; retrying");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
        let mut next_retry = None;
        for r in &batch {
            match r.next {
                Next::Delivered => metrics::counter!(m::DELIVERED).increment(1),
                Next::DeadLetter => metrics::counter!(m::DEAD_LETTERED).increment(1),
                Next::Retry(at) => {
                    next_retry =
                        Some(next_retry.map_or(at, |n: chrono::DateTime<chrono::Utc>| n.min(at)))
                }
            }
            for a in r
                .attempts
                .iter()
                .filter(|a| a.outcome != AttemptOutcome::Success)
            {
                metrics::counter!(m::FAILED, "outcome" => a.outcome.as_str()).increment(1);
            }
        }
        // A gated target may have room again, and a key whose message
        // ended hands on to its next one: they may go now.
        if gated || batch.iter().any(|r| r.key.is_some()) {
            wake.now();
        }
        batch.clear();
        if let Some(at) = next_retry {
            wake.due(at);
        }
    }
}

/// What one claim's attempts did, and the gated target they went to.
pub(super) struct Done {
    pub recorded: Recorded,
    pub gate: Option<TargetId>,
}

impl Done {
    /// Into a batch to record, and its outcomes into what the breakers learn.
    fn take(self, batch: &mut Vec<Recorded>, ended: &mut Vec<(TargetId, Option<bool>)>) {
        if let Some(target) = self.gate {
            ended.extend(
                self.recorded
                    .attempts
                    .iter()
                    .map(|a| (target.clone(), breaker_outcome(a.outcome))),
            );
        }
        batch.push(self.recorded);
    }
}

/// What an attempt tells a breaker: success, a retryable failure, or a
/// receiver that answered for good.
fn breaker_outcome(outcome: AttemptOutcome) -> Option<bool> {
    match outcome {
        AttemptOutcome::Success => Some(true),
        AttemptOutcome::RetryableFailure => Some(false),
        _ => None,
    }
}

/// Records by hand (`deliver_due_now`): results, then what the breakers learn.
pub(super) async fn record(store: &dyn Store, done: Vec<Done>, now: chrono::DateTime<chrono::Utc>) {
    let mut batch = Vec::with_capacity(done.len());
    let mut ended = Vec::new();
    for d in done {
        d.take(&mut batch, &mut ended);
    }
    record_health(store, &ended, now).await;
    if let Err(e) = store.record(&batch, now).await {
        warn!(error = %e, "record failed");
    }
}

async fn record_health(
    store: &dyn Store,
    ended: &[(TargetId, Option<bool>)],
    now: chrono::DateTime<chrono::Utc>,
) {
    if ended.is_empty() {
        return;
    }
    match store.record_health(ended, now).await {
        Ok(changes) => count_breaker_changes(&changes),
        // A lost count delays a breaker's opening; it never loses a message.
        Err(e) => warn!(error = %e, "recording circuit breaker outcomes failed"),
    }
}

pub(super) fn count_breaker_changes(changes: &[(TargetId, BreakerChange)]) {
    for (target, change) in changes {
        tracing::info!(target_id = %target, from = change.from.as_str(), to = change.to.as_str(), "circuit breaker");
        metrics::counter!(m::BREAKER, "state" => change.to.as_str()).increment(1);
    }
}
