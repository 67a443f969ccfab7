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

/// Results written by one statement.
const RECORD_BATCH: usize = 1000;
/// Statements that write one batch of results at once.
const WRITERS: usize = 2;
/// While attempts are under way, results that decide nothing soon (a
/// message delivered or dead-lettered, without an orderingKey or a gated
/// target) wait up to this long, and up to `LINGER_MAX` of them, before
/// they are written, so that they go in fewer statements. A crash in that
/// time redelivers what was not recorded, as a crash mid-attempt does: so
/// it is short. With the write under way and its own, a result is written
/// well within 100 ms of its answer; the attempts that may be in flight or
/// unwritten at once are bounded too (`dispatch::unrecorded_places`).
const LINGER: Duration = Duration::from_millis(20);
const LINGER_MAX: usize = 20_000;
/// How often a lingering batch looks again whether attempts are under way.
const LINGER_STEP: Duration = Duration::from_millis(20);

/// Records results in batches: whatever has arrived while the previous batch
/// was being written goes into the next statements. `busy` says whether
/// attempts are under way.
pub(super) async fn record_loop(
    store: Arc<dyn Store>,
    wake: Arc<Wake>,
    clock: Arc<dyn Clock>,
    mut rx: mpsc::UnboundedReceiver<Done>,
    shutdown: CancellationToken,
    busy: impl Fn() -> bool + Send + 'static,
    written: impl Fn() + Send + 'static,
) {
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    let mut ended = Vec::new();
    let mut places = Vec::new();
    while let Some(first) = rx.recv().await {
        let since = tokio::time::Instant::now();
        let mut urgent = first.take(&mut batch, &mut ended, &mut places);
        loop {
            while batch.len() < LINGER_MAX {
                match rx.try_recv() {
                    Ok(done) => urgent |= done.take(&mut batch, &mut ended, &mut places),
                    Err(_) => break,
                }
            }
            let linger = !urgent
                && batch.len() < LINGER_MAX
                && since.elapsed() < LINGER
                && !shutdown.is_cancelled()
                && busy();
            if !linger {
                break;
            }
            tokio::select! {
                done = rx.recv() => match done {
                    Some(done) => urgent |= done.take(&mut batch, &mut ended, &mut places),
                    None => break,
                },
                _ = tokio::time::sleep(LINGER_STEP) => {}
            }
        }
        // The breakers learn first: a retry becomes claimable only once its
        // result is recorded, and by then an opened breaker holds it.
        let gated = !ended.is_empty();
        if gated {
            record_health(store.as_ref(), &ended, clock.now()).await;
            ended.clear();
        }
        // In `WRITERS` statements at once, on as many connections: the
        // database's cores write them side by side.
        let chunk = batch.len().div_ceil(WRITERS).clamp(1, RECORD_BATCH);
        for chunks in batch.chunks(chunk * WRITERS) {
            futures::future::join_all(
                chunks
                    .chunks(chunk)
                    .map(|c| record_chunk(store.as_ref(), clock.as_ref(), c, &shutdown)),
            )
            .await;
        }
        // Written: what waits for a place among the unrecorded may start.
        if !places.is_empty() {
            places.clear();
            written();
        }
        let mut next_retry = None;
        let (mut delivered, mut dead) = (0, 0);
        for r in &batch {
            match r.next {
                Next::Delivered => delivered += 1,
                Next::DeadLetter => dead += 1,
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
        metrics::counter!(m::DELIVERED).increment(delivered);
        metrics::counter!(m::DEAD_LETTERED).increment(dead);
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

/// Writes results, trying again until it succeeds (or, at shutdown, three
/// times: leases make unrecorded attempts claimable again, so giving up
/// then loses nothing; it may redeliver).
async fn record_chunk(
    store: &dyn Store,
    clock: &dyn Clock,
    chunk: &[Recorded],
    shutdown: &CancellationToken,
) {
    let mut failures = 0u32;
    loop {
        match store.record(chunk, clock.now()).await {
            Ok(written) => {
                // A result whose lease another claim took (it ended, or its
                // instance was taken for dead) is not written, nor are its
                // attempts (what `record` counts): that claim attempts the
                // message again.
                let attempts: usize = chunk.iter().map(|r| r.attempts.len()).sum();
                let stale = (attempts as u64).saturating_sub(written);
                if stale > 0 {
                    metrics::counter!(m::STALE_RESULTS).increment(stale);
                    warn!(count = stale, "results came after their leases were taken; their messages may be sent again");
                }
                return;
            }
            Err(e) => {
                failures += 1;
                if shutdown.is_cancelled() && failures >= 3 {
                    warn!(error = %e, count = chunk.len(), "giving up recording at shutdown");
                    return;
                }
                warn!(error = %e, count = chunk.len(), "recording results failed; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// What one claim's attempts did, and the gated target they went to.
pub(super) struct Done {
    pub recorded: Recorded,
    pub gate: Option<TargetId>,
    /// Its attempt's places among the unrecorded (`dispatch::Places`),
    /// given back once it is written.
    pub place: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Done {
    /// Into a batch to record, and its outcomes into what the breakers
    /// learn. Whether it is urgent: its record decides what happens next (a
    /// retry, the next message of its key, a gate's count).
    fn take(
        self,
        batch: &mut Vec<Recorded>,
        ended: &mut Vec<(TargetId, Option<bool>)>,
        places: &mut Vec<tokio::sync::OwnedSemaphorePermit>,
    ) -> bool {
        places.extend(self.place);
        let urgent = self.gate.is_some()
            || self.recorded.key.is_some()
            || matches!(self.recorded.next, Next::Retry(_));
        if let Some(target) = self.gate {
            ended.extend(
                self.recorded
                    .attempts
                    .iter()
                    .map(|a| (target.clone(), breaker_outcome(a.outcome))),
            );
        }
        batch.push(self.recorded);
        urgent
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
        d.take(&mut batch, &mut ended, &mut Vec::new());
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
