//! The sweeper: claim what is due (committed, with a lease), deliver with
//! bounded concurrency, then record the results in batches. It knows nothing
//! of HTTP or SQL; it applies the retry ladder's answers.
//!
//! It never polls on a fixed beat: it sleeps exactly until the next due time,
//! and is woken early when a message is scheduled (in process, or by another
//! instance through the store's notifications) or a retry falls due. A slow
//! poll remains as a backstop.

use std::{collections::HashMap, sync::Arc, time::Duration};

use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use crate::{
    clock::Clock,
    config::SweeperConfig,
    delivery::{Delivered, Deliverer, Outgoing, SQS_BATCH_MAX},
    domain::{
        ids::TargetId,
        lateness,
        message::Attempt,
        retry::{AttemptOutcome, Next, RetryPolicy},
    },
    metrics as m,
    store::{Claimed, Recorded, Store},
    wake::Wake,
};

pub mod ahead;
mod by_hand;
mod dispatch;
mod record;
mod shares;

use ahead::Held;
use dispatch::Dispatch;
use record::{count_breaker_changes, record_loop, Done};

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
}

impl Sweeper {
    /// Runs until `shutdown`; then stops claiming, lets the attempts in flight
    /// finish and records them before returning; claimed messages still
    /// waiting for a slot are given back.
    pub async fn run(self, shutdown: CancellationToken) {
        let (results_tx, results_rx) = mpsc::unbounded_channel::<Done>();
        let dispatch = Arc::new(Dispatch::new(self.clone(), results_tx));
        let in_flight = dispatch.permits.clone();
        let all_permits = self.config.concurrency as usize;
        let recorder = tokio::spawn(record_loop(
            self.store.clone(),
            self.wake.clone(),
            self.clock.clone(),
            results_rx,
            shutdown.clone(),
            move || in_flight.available_permits() < all_permits,
        ));
        let permits = dispatch.permits.clone();
        let targets = dispatch.targets.clone();
        // Claimed messages that may wait for a slot, over all targets.
        let queue_cap = self.config.concurrency;
        let horizon = chrono::TimeDelta::from_std(self.config.claim_ahead).unwrap_or_default();
        let ahead_on = horizon > chrono::TimeDelta::zero() && self.config.claim_ahead_max > 0;
        let held = &self.held;
        let timer = ahead_on.then(|| {
            tokio::spawn(ahead::fire_held(
                dispatch.clone(),
                self.clone(),
                shutdown.child_token(),
            ))
        });

        loop {
            if shutdown.is_cancelled() {
                break;
            }
            dispatch.start_waiting();
            if permits.available_permits() == 0 {
                tokio::select! {
                    permit = permits.acquire() => drop(permit),
                    _ = targets.starved.notified() => {}
                    _ = shutdown.cancelled() => break,
                }
                continue;
            }
            self.wake.awake();
            let room =
                permits.available_permits() as u32 + queue_cap.saturating_sub(targets.queued());
            let limit = room.min(self.config.batch_size);
            let now = self.clock.now();
            let claims = async {
                // The lease runs from before the claim statement: attempts must end before it does.
                let claimed_at = Instant::now();
                let claimed = self
                    .store
                    .claim_due_shared(now, limit, self.config.lease, &targets.shares())
                    .await?;
                let count = claimed.len();
                for group in self.group(claimed) {
                    dispatch.take(group, claimed_at);
                }
                // Gated targets (flowControl, circuitBreaker) take what is
                // left and start at once: a gate counts its starts.
                let left = (limit - count as u32).min(permits.available_permits() as u32);
                let claimed_at = Instant::now();
                let mut gated = self
                    .store
                    .claim_gated(now, left, self.config.lease, &targets.gated_shares())
                    .await?;
                let count = count + gated.claimed.len();
                for group in self.group(std::mem::take(&mut gated.claimed)) {
                    dispatch.take(group, claimed_at);
                }
                // What falls due soon is claimed now and held for its instant.
                // A bulk cancel holds the gate while it runs.
                let gate = held.gate.try_read().ok();
                let ahead_limit = if ahead_on && gate.is_some() {
                    held.room(self.config.claim_ahead_max)
                        .min(self.config.batch_size)
                } else {
                    0
                };
                let mut ahead_full = false;
                if ahead_limit > 0 {
                    let ahead = self
                        .store
                        .claim_ahead(
                            now,
                            now + horizon,
                            ahead_limit,
                            self.config.lease,
                            &targets.full(),
                        )
                        .await?;
                    ahead_full = ahead.len() as u32 == ahead_limit;
                    if !ahead.is_empty() {
                        metrics::histogram!(m::CLAIM_BATCH).record(ahead.len() as f64);
                    }
                    held.hold(ahead);
                }
                drop(gate);
                Ok::<_, crate::store::StoreError>((count, gated, ahead_full))
            };
            let (count, gated, ahead_full) = match claims.await {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "claiming due messages failed; retrying shortly");
                    if sleep_or_shutdown(Duration::from_millis(500), &shutdown).await {
                        break;
                    }
                    continue;
                }
            };
            count_breaker_changes(&gated.changes);
            if count > 0 {
                metrics::histogram!(m::CLAIM_BATCH).record(count as f64);
                debug!(count, "claimed");
            }
            if count as u32 == limit || ahead_full {
                continue; // more may be due right now, or soon
            }
            // While more may be held, what falls due is claimed a horizon
            // ahead of its time.
            let lead = if ahead_on && held.room(self.config.claim_ahead_max) > 0 {
                horizon
            } else {
                chrono::TimeDelta::zero()
            };
            let backstop =
                now + chrono::TimeDelta::from_std(self.config.poll_interval).unwrap_or_default();
            // Messages of a full target wait for one of its attempts to end,
            // not for their due time, which has passed.
            let full = targets.full();
            let deadline = match self.store.next_due_except(&full).await {
                Ok(Some(next)) if next - lead < backstop => next - lead,
                Ok(_) => backstop,
                Err(e) => {
                    warn!(error = %e, "reading the next due time failed");
                    now + chrono::TimeDelta::seconds(1)
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
            let wait = (deadline - self.clock.now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .max(if count == 0 {
                    Duration::from_millis(5)
                } else {
                    Duration::ZERO
                });
            // What is scheduled to fall due within the lead of the next look
            // wakes the sweeper.
            self.wake.sleeping_until(
                self.clock.now() + chrono::TimeDelta::from_std(wait).unwrap_or_default() + lead,
            );
            let held_out = ahead_on && lead.is_zero();
            let sleep = tokio::time::sleep(wait);
            tokio::pin!(sleep);
            let stop = loop {
                tokio::select! {
                    _ = &mut sleep => break false,
                    _ = self.wake.notified() => break false,
                    _ = targets.freed.notified(), if !full.is_empty() => break false,
                    // Room to hold more ahead again.
                    _ = held.freed.notified(), if held_out => break false,
                    // Waiting messages take the permits that other
                    // targets' attempts free; nothing to claim for that.
                    _ = targets.starved.notified() => dispatch.start_waiting(),
                    _ = shutdown.cancelled() => break true,
                }
            };
            if stop {
                break;
            }
        }
        if let Some(timer) = timer {
            let _ = timer.await;
        }
        dispatch.stop().await;
        drop(dispatch);
        let _ = recorder.await;
    }

    /// Splits a claim into what is delivered together: SQS messages of one
    /// target in groups of up to ten, everything else alone.
    fn group(&self, claimed: Vec<Claimed>) -> Vec<Vec<Claimed>> {
        let mut groups: Vec<Vec<Claimed>> = Vec::new();
        let mut open: HashMap<TargetId, usize> = HashMap::new();
        for c in claimed {
            match self.deliverer.batch_key(&Outgoing::from(&c)) {
                Some(key) => match open.get(&key) {
                    Some(&i) if groups[i].len() < SQS_BATCH_MAX => groups[i].push(c),
                    _ => {
                        open.insert(key, groups.len());
                        groups.push(vec![c]);
                    }
                },
                None => groups.push(vec![c]),
            }
        }
        groups
    }

    async fn attempt_group(&self, group: Vec<Claimed>, claimed_at: Instant) -> Vec<Recorded> {
        let deadline = self.lease_deadline(claimed_at);
        if group.len() == 1 {
            let c = group.into_iter().next().expect("one");
            let first = self.attempt(&c, deadline).await;
            return vec![self.retry_immediately(&c, first, deadline).await];
        }
        let started_at = self.clock.now();
        let clock = Instant::now();
        for c in &group {
            self.observe_lateness(c, started_at);
        }
        let messages: Vec<Outgoing> = group.iter().map(Outgoing::from).collect();
        let results = match tokio::time::timeout_at(
            deadline,
            self.deliverer.deliver_batch(&messages),
        )
        .await
        {
            Ok(results) => results,
            Err(_) => vec![cut_off(); group.len()],
        };
        let elapsed = clock.elapsed();
        let mut recorded = Vec::with_capacity(group.len());
        for (c, d) in group.iter().zip(results) {
            let first = self.conclude(c, Vec::new(), c.ladder_attempts, d, started_at, elapsed);
            recorded.push(self.retry_immediately(c, first, deadline).await);
        }
        recorded
    }

    /// When the claim's lease ends, less a margin for recording.
    fn lease_deadline(&self, claimed_at: Instant) -> Instant {
        claimed_at + self.config.lease.saturating_sub(LEASE_MARGIN)
    }

    async fn attempt(&self, c: &Claimed, deadline: Instant) -> Recorded {
        let started_at = self.clock.now();
        self.observe_lateness(c, started_at);
        self.attempt_again(c, Vec::new(), c.ladder_attempts, deadline)
            .await
    }

    /// One more attempt after `earlier` ones made under this claim.
    async fn attempt_again(
        &self,
        c: &Claimed,
        earlier: Vec<Attempt>,
        ladder_before: u32,
        deadline: Instant,
    ) -> Recorded {
        let number = c.attempt_count + earlier.len() as u32 + 1;
        let span = tracing::info_span!("delivery", message_id = %c.id, target_id = %c.target_id, attempt = number);
        let started_at = self.clock.now();
        let clock = Instant::now();
        // No attempt outlives its lease: past it, another instance may take
        // the message, or a cancel may succeed. Where the client's own
        // timeout ends the attempt well before, no second timer is set.
        let message = Outgoing::from(c);
        let deliver = self.deliverer.deliver(&message).instrument(span.clone());
        let delivered = match self.deliverer.bounded_by(&message) {
            Some(bound) if clock + bound + LEASE_MARGIN < deadline => deliver.await,
            _ => match tokio::time::timeout_at(deadline, deliver).await {
                Ok(d) => d,
                Err(_) => cut_off(),
            },
        };
        span.in_scope(|| match delivered.outcome {
            AttemptOutcome::Success => debug!("delivered"),
            _ => debug!(
                error = delivered.error.as_deref().unwrap_or(""),
                "attempt failed"
            ),
        });
        self.conclude(
            c,
            earlier,
            ladder_before,
            delivered,
            started_at,
            clock.elapsed(),
        )
    }

    /// An immediate retry runs at once in this task, under the same lease,
    /// rather than waiting for a record and a new claim; only while there is
    /// lease enough left for it.
    async fn retry_immediately(
        &self,
        c: &Claimed,
        mut recorded: Recorded,
        deadline: Instant,
    ) -> Recorded {
        // A gated target's every attempt passes its gate: the retry is
        // claimed again, under the target's limits and breaker.
        if c.gated {
            return recorded;
        }
        loop {
            let Next::Retry(at) = recorded.next else {
                return recorded;
            };
            let immediate = at <= recorded.last().finished_at;
            let room =
                Instant::now() + self.deliverer.attempt_timeout(&Outgoing::from(c)) < deadline;
            if !immediate || !room {
                return recorded;
            }
            let ladder = recorded.ladder_attempts;
            recorded = self
                .attempt_again(c, std::mem::take(&mut recorded.attempts), ladder, deadline)
                .await;
        }
    }

    /// How late the first attempt of a ladder started, by the one rule of
    /// `domain::lateness` (from the later of the delivery time and the
    /// moment the message was scheduled or rescheduled).
    fn observe_lateness(&self, c: &Claimed, started_at: chrono::DateTime<chrono::Utc>) {
        if c.ladder_attempts == 0 {
            let late = lateness::lateness(c.delivery_time, c.scheduled_at, started_at);
            meters()
                .lateness
                .record(late.num_milliseconds() as f64 / 1000.0);
        }
    }

    /// Applies the ladder to an attempt's result.
    fn conclude(
        &self,
        c: &Claimed,
        mut attempts: Vec<Attempt>,
        ladder_before: u32,
        delivered: Delivered,
        started_at: chrono::DateTime<chrono::Utc>,
        elapsed: Duration,
    ) -> Recorded {
        let finished_at = started_at + chrono::TimeDelta::from_std(elapsed).unwrap_or_default();
        meters().delivery.record(elapsed.as_secs_f64());
        let ladder_attempts = ladder_before + 1;
        let (next, waited) = self.policy.next_honouring(
            ladder_attempts,
            delivered.outcome,
            finished_at,
            delivered.retry_after,
        );
        attempts.push(Attempt {
            attempt: c.attempt_count + attempts.len() as u32 + 1,
            started_at,
            finished_at,
            duration_ms: elapsed.as_millis() as u64,
            outcome: delivered.outcome,
            status_code: delivered.status_code,
            error: delivered.error,
            response_body: delivered.response_body,
            retry_after_ms: waited.map(|w| w.as_millis() as u64),
        });
        Recorded {
            id: c.id,
            lease_token: c.lease_token,
            attempts,
            ladder_attempts,
            next,
            key: c
                .ordering_key
                .as_ref()
                .map(|k| (c.target_id.clone(), k.clone())),
        }
    }
}

/// The histograms every attempt records into, looked up once (a look-up
/// hashes the name, per attempt). The recorder is installed before any
/// sweeper runs.
struct Meters {
    lateness: metrics::Histogram,
    delivery: metrics::Histogram,
}

fn meters() -> &'static Meters {
    static METERS: std::sync::OnceLock<Meters> = std::sync::OnceLock::new();
    METERS.get_or_init(|| Meters {
        lateness: metrics::histogram!(m::LATENESS),
        delivery: metrics::histogram!(m::DELIVERY_SECONDS),
    })
}

/// A claimed message as delivery reads it.
impl<'a> From<&'a Claimed> for Outgoing<'a> {
    fn from(c: &'a Claimed) -> Self {
        Outgoing {
            id: &c.id,
            target_id: &c.target_id,
            target: &c.target,
            payload: &c.payload,
            delivery_time: c.delivery_time,
            ordering_key: c.ordering_key.as_deref(),
        }
    }
}

fn cut_off() -> Delivered {
    Delivered::failure(
        AttemptOutcome::RetryableFailure,
        "attempt cut off at the end of its lease",
    )
}

async fn sleep_or_shutdown(d: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = shutdown.cancelled() => true,
    }
}
