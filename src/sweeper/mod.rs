//! The sweeper: claim what is due (committed, with a lease), deliver with
//! bounded concurrency, then record the results in batches. It knows nothing
//! of HTTP or SQL; it applies the retry ladder's answers.
//!
//! It never polls on a fixed beat: it sleeps exactly until the next due time,
//! and is woken early when a message is scheduled (in process, or by another
//! instance through the store's notifications) or a retry falls due. A slow
//! poll remains as a backstop.

use std::{ops::ControlFlow, sync::Arc, time::Duration};

use chrono::{DateTime, TimeDelta, Utc};
use tokio::{sync::mpsc, task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::{
    clock::Clock,
    config::SweeperConfig,
    delivery::Deliverer,
    domain::retry::RetryPolicy,
    metrics as m,
    store::{GatedClaim, Store, StoreResult},
    wake::Wake,
};

pub mod ahead;
mod attempts;
mod by_hand;
mod dispatch;
pub use dispatch::UNRECORDED;
mod record;
mod shares;

use ahead::Held;
use dispatch::Dispatch;
use record::{count_breaker_changes, record_loop, Done};
use shares::Full;

/// How soon a gated target that waits for attempts in flight (possibly on
/// another instance) is looked at again.
const GATE_POLL: chrono::TimeDelta = chrono::TimeDelta::milliseconds(50);
/// Kept free at the end of a lease, so that no attempt runs past it.
const LEASE_MARGIN: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct Sweeper {
    pub store: Arc<dyn Store>,
    pub deliverer: Arc<Deliverer>,
    pub policy: RetryPolicy,
    pub config: SweeperConfig,
    pub wake: Arc<Wake>,
    /// What this instance claimed ahead of its time and holds; the service
    /// is handed the same buffer, to take messages back before their attempt.
    pub held: Arc<Held>,
    /// What "now" is for claims, results and lateness.
    pub clock: Arc<dyn Clock>,
    /// Whether this instance noted itself lately (`instances`): one that
    /// others may take for dead starts no attempt.
    pub noted: Arc<crate::instances::Noted>,
}

impl Sweeper {
    /// Runs until `shutdown`; then stops claiming, lets the attempts in flight
    /// finish and records them before returning; claimed messages still
    /// waiting for a slot are given back.
    pub async fn run(self, shutdown: CancellationToken) {
        let (results_tx, results_rx) = mpsc::unbounded_channel::<Done>();
        let dispatch = Arc::new(Dispatch::new(self.clone(), results_tx));
        let recorder = self.spawn_recorder(&dispatch, results_rx, &shutdown);
        let forgotten = tokio::spawn(
            dispatch
                .clone()
                .give_back_when_forgotten(shutdown.child_token()),
        );
        let horizon = self.ahead_horizon();
        let timer = horizon.is_some().then(|| {
            tokio::spawn(ahead::fire_held(
                dispatch.clone(),
                self.clone(),
                shutdown.child_token(),
            ))
        });
        while !shutdown.is_cancelled() {
            if self.look(&dispatch, horizon, &shutdown).await.is_break() {
                break;
            }
        }
        if let Some(timer) = timer {
            let _ = timer.await;
        }
        let _ = forgotten.await;
        dispatch.stop().await;
        drop(dispatch);
        let _ = recorder.await;
    }

    /// Starts the task that records results; it counts the sweeper busy
    /// while an attempt holds a permit.
    fn spawn_recorder(
        &self,
        dispatch: &Dispatch,
        results: mpsc::UnboundedReceiver<Done>,
        shutdown: &CancellationToken,
    ) -> JoinHandle<()> {
        let in_flight = dispatch.permits.clone();
        let all_permits = self.config.concurrency as usize;
        let targets = dispatch.targets.clone();
        tokio::spawn(record_loop(
            self.store.clone(),
            self.wake.clone(),
            self.clock.clone(),
            results,
            shutdown.clone(),
            move || in_flight.available_permits() < all_permits,
            move || targets.recorded(),
        ))
    }

    /// How far ahead of their time messages are claimed and held; `None`
    /// when that is off.
    fn ahead_horizon(&self) -> Option<TimeDelta> {
        let horizon = TimeDelta::from_std(self.config.claim_ahead).unwrap_or_default();
        (horizon > TimeDelta::zero() && self.config.claim_ahead_max > 0).then_some(horizon)
    }

    /// One look: claim what is due as far as there is room, then sleep until
    /// the next look is due or something wakes the sweeper. Breaks at
    /// shutdown.
    async fn look(
        &self,
        dispatch: &Arc<Dispatch>,
        horizon: Option<TimeDelta>,
        shutdown: &CancellationToken,
    ) -> ControlFlow<()> {
        dispatch.start_waiting();
        if dispatch.permits.available_permits() == 0 {
            return wait_for_a_permit(dispatch, shutdown).await;
        }
        self.wake.awake();
        let limit = self.claim_limit(dispatch);
        let now = self.clock.now();
        let Claims {
            count,
            gated,
            ahead_full,
        } = match self.claim(dispatch, now, limit, horizon).await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "claiming due messages failed; retrying shortly");
                return match sleep_or_shutdown(Duration::from_millis(500), shutdown).await {
                    true => ControlFlow::Break(()),
                    false => ControlFlow::Continue(()),
                };
            }
        };
        count_breaker_changes(&gated.changes);
        if count > 0 {
            metrics::histogram!(m::CLAIM_BATCH).record(count as f64);
            debug!(count, "claimed");
        }
        if count as u32 == limit || ahead_full {
            return ControlFlow::Continue(()); // more may be due right now, or soon
        }
        // While more may be held, what falls due is claimed a horizon
        // ahead of its time.
        let lead = match horizon {
            Some(horizon) if self.held.room(self.config.claim_ahead_max) > 0 => horizon,
            _ => TimeDelta::zero(),
        };
        // Messages of a full target wait for one of its attempts to end,
        // not for their due time, which has passed.
        let full = dispatch.targets.full();
        let wait = self.until_next_look(now, lead, &full, &gated, count).await;
        // What is scheduled to fall due within the lead of the next look
        // wakes the sweeper.
        self.wake.sleeping_until(
            self.clock.now() + TimeDelta::from_std(wait).unwrap_or_default() + lead,
        );
        let held_out = horizon.is_some() && lead.is_zero();
        self.sleep(dispatch, wait, !full.is_empty(), held_out, shutdown)
            .await
    }

    /// How many to claim: as many as there are free permits and room for
    /// claimed messages to wait for a slot, up to a batch.
    fn claim_limit(&self, dispatch: &Dispatch) -> u32 {
        // Claimed messages that may wait for a slot, over all targets.
        let queue_cap = self.config.concurrency;
        let room = dispatch.permits.available_permits() as u32
            + queue_cap.saturating_sub(dispatch.targets.queued());
        room.min(self.config.batch_size)
    }

    /// Claims what is due, up to `limit`: of the targets without a gate
    /// (each its share), then of the gated ones, each delivered or waiting
    /// for a slot; then what falls due within the horizon, held.
    async fn claim(
        &self,
        dispatch: &Arc<Dispatch>,
        now: DateTime<Utc>,
        limit: u32,
        horizon: Option<TimeDelta>,
    ) -> StoreResult<Claims> {
        let count = self.claim_due(dispatch, now, limit).await?;
        // Gated targets (flowControl, circuitBreaker) take what is
        // left and start at once: a gate counts its starts.
        let left = (limit - count as u32).min(dispatch.permits.available_permits() as u32);
        let (gated_count, gated) = self.claim_gated(dispatch, now, left).await?;
        let ahead_full = self.claim_ahead(dispatch, now, horizon).await?;
        Ok(Claims {
            count: count + gated_count,
            gated,
            ahead_full,
        })
    }

    /// Claims due messages of targets without a gate and hands them to
    /// dispatch; answers how many.
    async fn claim_due(
        &self,
        dispatch: &Arc<Dispatch>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<usize> {
        // The lease runs from before the claim statement: attempts must end before it does.
        let claimed_at = Instant::now();
        let claimed = self
            .store
            .claim_due_shared(now, limit, self.config.lease, &dispatch.targets.shares())
            .await?;
        let count = claimed.len();
        for group in self.group(claimed) {
            dispatch.take(group, claimed_at);
        }
        Ok(count)
    }

    /// Claims what the gates admit and hands it to dispatch; answers how
    /// many, and the rest of what the gates said (their claimed messages
    /// taken out).
    async fn claim_gated(
        &self,
        dispatch: &Arc<Dispatch>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<(usize, GatedClaim)> {
        let claimed_at = Instant::now();
        let mut gated = self
            .store
            .claim_gated(
                now,
                limit,
                self.config.lease,
                &dispatch.targets.gated_shares(),
            )
            .await?;
        let count = gated.claimed.len();
        for group in self.group(std::mem::take(&mut gated.claimed)) {
            dispatch.take(group, claimed_at);
        }
        Ok((count, gated))
    }

    /// What falls due within the horizon is claimed now and held for its
    /// instant (not while a bulk cancel holds the gate). Answers whether the
    /// claim took all it asked for: more may follow soon.
    async fn claim_ahead(
        &self,
        dispatch: &Dispatch,
        now: DateTime<Utc>,
        horizon: Option<TimeDelta>,
    ) -> StoreResult<bool> {
        let held = &self.held;
        // Not while a change waits to set its fence (it waits for this).
        let (Some(horizon), Ok(_claiming)) = (horizon, held.claiming.try_read()) else {
            return Ok(false);
        };
        let limit = held
            .room(self.config.claim_ahead_max)
            .min(self.config.batch_size);
        if limit == 0 {
            return Ok(false);
        }
        // What a change fences off is left out, and what a change fenced
        // off while this claim ran goes back.
        let since = held.epoch();
        let (mut accounts, mut except) = held.fenced();
        let full = dispatch.targets.full();
        except.extend(full.targets);
        accounts.extend(full.accounts);
        let ahead = self
            .store
            .claim_ahead(
                now,
                now + horizon,
                limit,
                self.config.lease,
                &except,
                &accounts,
            )
            .await?;
        let full = ahead.len() as u32 == limit;
        if !ahead.is_empty() {
            metrics::histogram!(m::CLAIM_BATCH).record(ahead.len() as f64);
        }
        let refused = held.hold_since(ahead, since);
        if !refused.is_empty() {
            let leases: Vec<_> = refused.iter().map(|c| (c.id, c.lease_token)).collect();
            if let Err(e) = self.store.release(&leases).await {
                warn!(error = %e, count = leases.len(), "giving back fenced messages failed; their leases end on their own");
            }
        }
        Ok(full)
    }

    /// How long to sleep before the next look: until the next due time
    /// (less the lead), a gated target's reopening or the backstop poll,
    /// whichever comes first.
    async fn until_next_look(
        &self,
        now: DateTime<Utc>,
        lead: TimeDelta,
        full: &Full,
        gated: &GatedClaim,
        claimed: usize,
    ) -> Duration {
        let backstop = now + TimeDelta::from_std(self.config.poll_interval).unwrap_or_default();
        let deadline = match self
            .store
            .next_due_except(&full.targets, &full.accounts)
            .await
        {
            Ok(Some(next)) if next - lead < backstop => next - lead,
            Ok(_) => backstop,
            Err(e) => {
                warn!(error = %e, "reading the next due time failed");
                now + TimeDelta::seconds(1)
            }
        };
        // A gated target reopens at a time its gate knows, or when an
        // attempt in flight ends: here the record loop wakes the
        // sweeper; on another instance nothing does, so look again soon.
        let deadline = [Some(deadline), gated.next]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(deadline);
        let deadline = if gated.waits_for_attempts {
            deadline.min(self.clock.now() + GATE_POLL)
        } else {
            deadline
        };
        // Something due that we could not claim is locked by another
        // instance's claim in progress: look again shortly, not in a spin.
        (deadline - self.clock.now())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .max(if claimed == 0 {
                Duration::from_millis(5)
            } else {
                Duration::ZERO
            })
    }

    /// Sleeps for `wait`, or until woken: by a message scheduled, by an
    /// attempt of a full target or account ending (`full_targets`: there is
    /// one) or by
    /// room to hold more ahead (`held_out`: there was none). Breaks at
    /// shutdown.
    async fn sleep(
        &self,
        dispatch: &Arc<Dispatch>,
        wait: Duration,
        full_targets: bool,
        held_out: bool,
        shutdown: &CancellationToken,
    ) -> ControlFlow<()> {
        let sleep = tokio::time::sleep(wait);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return ControlFlow::Continue(()),
                _ = self.wake.notified() => return ControlFlow::Continue(()),
                _ = dispatch.targets.freed.notified(), if full_targets => return ControlFlow::Continue(()),
                // Room to hold more ahead again.
                _ = self.held.freed.notified(), if held_out => return ControlFlow::Continue(()),
                // Waiting messages take the permits that other
                // targets' attempts free; nothing to claim for that.
                _ = dispatch.targets.starved.notified() => dispatch.start_waiting(),
                _ = shutdown.cancelled() => return ControlFlow::Break(()),
            }
        }
    }
}

async fn sleep_or_shutdown(d: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = shutdown.cancelled() => true,
    }
}

/// What one look claimed: how many it handed to dispatch, what the gates
/// said, and whether the claim ahead was full.
struct Claims {
    count: usize,
    gated: GatedClaim,
    ahead_full: bool,
}

/// With every permit taken, waits for one to free, or for messages that
/// wait for a slot to be started by another target's attempt ending.
async fn wait_for_a_permit(dispatch: &Dispatch, shutdown: &CancellationToken) -> ControlFlow<()> {
    tokio::select! {
        permit = dispatch.permits.acquire() => drop(permit),
        _ = dispatch.targets.starved.notified() => {}
        _ = shutdown.cancelled() => return ControlFlow::Break(()),
    }
    ControlFlow::Continue(())
}
