//! The materialiser of recurring schedules (docs/api.md#recurring-schedules): it creates each
//! run's message `schedules.ahead` before the run's instant, so that runs
//! are delivered as punctually as any message, and moves each schedule's
//! cursor past the runs it made. Runs older than `schedules.catch_up`
//! (missed while no instance ran) are skipped; younger ones are made up at
//! once. Safe on several instances: a pass takes schedules `FOR UPDATE SKIP
//! LOCKED`, and a run already made is never made again (the database holds
//! one message per schedule and run instant).

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, TimeDelta, Utc};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::{
    clock::Clock,
    config::SchedulesConfig,
    domain::schedule::Schedule,
    metrics as m,
    store::{Materialised, Store, StoreResult},
    wake::Wake,
};

/// Runs one schedule gets in one pass; a schedule with more due (a long
/// catch-up) gets the rest in the next passes.
const RUNS_PER_PASS: usize = 1_000;

/// Creates the messages of every run due up to `now + ahead`.
pub async fn materialise(
    store: &dyn Store,
    now: DateTime<Utc>,
    config: &SchedulesConfig,
) -> StoreResult<Materialised> {
    let ago = |d: Duration| TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
    let until = now + ago(config.ahead);
    let catch_up_from = now - ago(config.catch_up);
    let mut total = Materialised::default();
    loop {
        let mut plan = |s: &Schedule| s.plan(until, catch_up_from, RUNS_PER_PASS);
        let pass = store
            .materialise_runs(until, config.batch_size.max(1), now, &mut plan)
            .await?;
        total.schedules += pass.schedules;
        total.created += pass.created;
        total.earliest = match (total.earliest, pass.earliest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if pass.schedules < config.batch_size.max(1) as usize {
            return Ok(total);
        }
    }
}

pub async fn run(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    wake: Arc<Wake>,
    config: SchedulesConfig,
    shutdown: CancellationToken,
) {
    // A pass every half the lead (at most a second): a run's message exists
    // about that long before it. A pass that takes longer than that is
    // followed by the next at once, not after a further wait.
    let every = (config.ahead / 2).clamp(Duration::from_millis(20), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = wake.schedules_changed() => {}
            _ = shutdown.cancelled() => return,
        }
        match materialise(store.as_ref(), clock.now(), &config).await {
            Ok(done) => {
                if done.created > 0 {
                    metrics::counter!(m::SCHEDULE_RUNS).increment(done.created);
                }
                if let Some(at) = done.earliest {
                    wake.due(at);
                }
            }
            Err(e) if e.is_unavailable() => warn!(error = %e, "schedules: database unavailable"),
            Err(e) => warn!(error = ?e, "schedules: a pass failed"),
        }
    }
}
