//! Attempting what a claim took: messages alone or SQS batches of one
//! target, each attempt against the lease's deadline, the retries a
//! receiver's answer allows at once, the ladder applied to the result, and
//! the lateness and duration histograms.

use std::{collections::HashMap, time::Duration};

use tokio::time::Instant;
use tracing::{debug, Instrument};

use super::{Sweeper, LEASE_MARGIN};
use crate::{
    delivery::{Delivered, Outgoing, SQS_BATCH_MAX},
    domain::{
        ids::TargetId,
        lateness,
        message::Attempt,
        retry::{AttemptOutcome, Next},
    },
    metrics as m,
    store::{Claimed, Recorded},
};

impl Sweeper {
    /// Splits a claim into what is delivered together: SQS messages of one
    /// target in groups of up to ten, everything else alone.
    pub(super) fn group(&self, claimed: Vec<Claimed>) -> Vec<Vec<Claimed>> {
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

    pub(super) async fn attempt_group(
        &self,
        group: Vec<Claimed>,
        claimed_at: Instant,
    ) -> Vec<Recorded> {
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
    pub(super) fn lease_deadline(&self, claimed_at: Instant) -> Instant {
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
            told: c
                .event_type
                .as_deref()
                .is_some_and(crate::domain::told::is_own),
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
            event_id: c.event_id.as_ref(),
            event_type: c.event_type.as_deref(),
        }
    }
}

fn cut_off() -> Delivered {
    Delivered::failure(
        AttemptOutcome::RetryableFailure,
        "attempt cut off at the end of its lease",
    )
}
