//! Deletes what has expired (docs/api.md#retention), in batches, on an interval.
//! Safe on several instances at once: each batch skips rows another holds.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    clock::Clock,
    config::RetentionConfig,
    metrics as m,
    store::{Cutoffs, Purged, Store, StoreResult},
};

/// How long an `Idempotency-Key` is remembered.
pub const IDEMPOTENCY_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

pub fn cutoffs(config: &RetentionConfig, now: chrono::DateTime<chrono::Utc>) -> Cutoffs {
    let ago = |d: std::time::Duration| {
        now - chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
    };
    Cutoffs {
        delivered_before: ago(config.delivered),
        cancelled_before: ago(config.cancelled),
        dead_letters_before: ago(config.dead_letters),
        failed_attempts_before: ago(config.failed_attempts),
        idempotency_before: ago(IDEMPOTENCY_TTL),
    }
}

/// Purges what has expired by `clock`, until nothing expired is left;
/// returns the totals.
pub async fn purge_as_of(
    store: &dyn Store,
    config: &RetentionConfig,
    clock: &dyn Clock,
) -> StoreResult<Purged> {
    let mut total = Purged::default();
    // Pull targets' messages not received within their target's retention
    // are dead letters (docs/api.md#pull-targets).
    loop {
        let expired = store
            .expire_unreceived(clock.now(), config.batch_size)
            .await?;
        if expired == 0 {
            break;
        }
        metrics::counter!(m::DEAD_LETTERED).increment(expired);
    }
    loop {
        let now = clock.now();
        let mut p = store
            .purge_expired(&cutoffs(config, now), config.batch_size)
            .await?;
        let events_before =
            now - chrono::TimeDelta::from_std(config.events).unwrap_or(chrono::TimeDelta::MAX);
        p.events = store.purge_events(events_before, config.batch_size).await?;
        total.messages += p.messages;
        total.attempts += p.attempts;
        total.idempotency_keys += p.idempotency_keys;
        total.events += p.events;
        if p == Purged::default() {
            return Ok(total);
        }
    }
}

/// How often the rows that count an account's scheduled messages are folded
/// into one (each statement that moves messages appends one on PostgreSQL):
/// reading a count sums no more than a second's worth of them.
const FOLD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn run(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    config: RetentionConfig,
    token_window: std::time::Duration,
    shutdown: CancellationToken,
) {
    let mut interval = tokio::time::interval(config.interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut fold = tokio::time::interval(FOLD_EVERY);
    fold.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = fold.tick() => {
                if let Err(e) = store.fold_counts().await {
                    warn!(error = %e, "folding the accounts' counts failed; will try again");
                }
                continue;
            }
            _ = shutdown.cancelled() => return,
        }
        // What an instance that stopped while enabling or disabling a target
        // left: that target's messages follow its flag now.
        match store.align_targets(clock.now()).await {
            Ok(0) => {}
            Ok(n) => info!(
                targets = n,
                "messages brought in line with their targets' enabled"
            ),
            Err(e) => warn!(error = %e, "aligning targets failed; will try again"),
        }
        // Failed token requests older than their window count no more.
        let window_ms = i64::try_from(token_window.as_millis()).unwrap_or(i64::MAX);
        let before = clock.now().timestamp_millis().saturating_sub(window_ms);
        if let Err(e) = store.purge_token_failures(before).await {
            warn!(error = %e, "forgetting old failed token requests failed; will try again");
        }
        match purge_as_of(store.as_ref(), &config, clock.as_ref()).await {
            Ok(p) if p != Purged::default() => {
                metrics::counter!(m::PURGED, "kind" => "messages").increment(p.messages);
                metrics::counter!(m::PURGED, "kind" => "attempts").increment(p.attempts);
                metrics::counter!(m::PURGED, "kind" => "events").increment(p.events);
                info!(
                    messages = p.messages,
                    attempts = p.attempts,
                    keys = p.idempotency_keys,
                    events = p.events,
                    "retention purged"
                );
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "retention failed; will try again"),
        }
    }
}
