//! Pull targets' consumers (docs/api.md#pull-targets): receive (waiting up
//! to `wait` for something receivable), ack, nack and visibility.

mod watch;

use std::time::Duration;

use chrono::TimeDelta;

pub use watch::PullWatch;

use super::{
    access::{Actor, Permission},
    Conflict, Service, ServiceError, ServiceResult,
};
use crate::{
    domain::{
        ids::{AccountId, TargetId},
        limits::Limit,
        receipt::ReceiptHandle,
        target::pull::PullConfig,
    },
    metrics as m,
    store::{
        pull::{Depth, ReceiveAsk, ReceivedItem},
        StoreResult,
    },
    wire::pull::ReceiveRequest,
};

/// What an ack or nack did: how many it changed, and the handles that
/// named no message's latest receive, as they were sent.
#[derive(Debug, Clone, Default)]
pub struct Settled {
    pub done: u64,
    pub stale: Vec<String>,
}

impl Service {
    /// The account's target as a pull target: 404 when unknown or
    /// another account's, 409 when it is not a pull target.
    ///
    /// A pull target's config is read again at most every `CONFIG_TTL` (5 s)
    /// on an instance: consumers polling in a loop cost the database nothing
    /// for it. A change of the config reaches receives within that time;
    /// every statement that acts still names the target and the account.
    async fn pull_target(&self, account: &AccountId, id: &TargetId) -> ServiceResult<PullConfig> {
        let now = self.now();
        if let Some(config) = self.pull.config(account, id, now) {
            return Ok(config);
        }
        let target = self
            .store
            .get_target(account, id)
            .await?
            .ok_or(ServiceError::NotFound)?;
        let config = target
            .config
            .pull()
            .cloned()
            .ok_or(ServiceError::Conflict(Conflict::NotPull))?;
        self.pull.remember_config(account, id, &config, now);
        Ok(config)
    }

    /// Receives up to `max` messages, waiting up to `wait` for one.
    pub async fn receive(
        &self,
        actor: &Actor,
        target: &TargetId,
        req: ReceiveRequest,
    ) -> ServiceResult<Vec<ReceivedItem>> {
        let account = actor.allow(Permission::ReceiveMessages)?;
        let config = self.pull_target(account, target).await?;
        let ask = ReceiveAsk {
            max: req.max,
            visibility: req.visibility.unwrap_or(config.visibility_timeout).delta(),
            max_receives: config.max_receive_count,
            then_wait: !req.wait.is_zero(),
        };
        let start = self.now();
        let deadline = start + TimeDelta::from_std(req.wait).unwrap_or_default();
        // Each waiting receive holds a connection: an account has at most
        // `limits.waiting_receives` of them on an instance.
        let max_waiting = self.config.limits.of(Limit::WaitingReceives);
        let waiting = if req.wait.is_zero() {
            None
        } else {
            Some(
                self.pull
                    .enter(account, target, start, max_waiting)
                    .map_err(ServiceError::Quota)?,
            )
        };
        // A target known to have nothing receivable is not asked again.
        let mut ask_store = !waiting.as_ref().is_some_and(|w| w.known_empty);
        loop {
            if ask_store {
                let receipt = self.store.receive(account, target, ask, self.now()).await?;
                if let Some(until) = receipt.last_until {
                    self.pull.last_receive_ends(until);
                }
                if let Some(w) = &waiting {
                    if receipt.items.len() as u32 == ask.max {
                        // More may be left: another waiting consumer looks.
                        w.wake_another();
                    } else {
                        w.learned(receipt.next_at, self.now());
                    }
                }
                if !receipt.items.is_empty() {
                    metrics::counter!(m::PULL_RECEIVED).increment(receipt.items.len() as u64);
                    return Ok(receipt.items);
                }
            }
            ask_store = true;
            let Some(w) = &waiting else {
                return Ok(Vec::new());
            };
            let Ok(left) = (deadline - self.now()).to_std() else {
                return Ok(Vec::new());
            };
            tokio::select! {
                _ = w.notified() => {}
                _ = tokio::time::sleep(left) => return Ok(Vec::new()),
            }
        }
    }

    /// Acknowledges received messages: each becomes Delivered.
    pub async fn ack(
        &self,
        actor: &Actor,
        target: &TargetId,
        handles: &[String],
    ) -> ServiceResult<Settled> {
        let account = actor.allow(Permission::ReceiveMessages)?;
        self.pull_target(account, target).await?;
        let now = self.now();
        let settled = settle(handles, |parsed| async move {
            self.store.ack(account, target, &parsed, now).await
        })
        .await?;
        metrics::counter!(m::PULL_ACKED).increment(settled.done);
        metrics::counter!(m::DELIVERED).increment(settled.done);
        if settled.done > 0 {
            // The next message of a key may be receivable now (by a
            // consumer: the sweeper has nothing to do with it).
            self.wake.receivable_now();
        }
        Ok(settled)
    }

    /// Gives received messages back: receivable again after `delay`.
    pub async fn nack(
        &self,
        actor: &Actor,
        target: &TargetId,
        handles: &[String],
        delay: Duration,
    ) -> ServiceResult<Settled> {
        let account = actor.allow(Permission::ReceiveMessages)?;
        self.pull_target(account, target).await?;
        let now = self.now();
        let until = now + TimeDelta::from_std(delay).unwrap_or_default();
        let settled = settle(handles, |parsed| async move {
            self.store.nack(account, target, &parsed, until, now).await
        })
        .await?;
        if settled.done > 0 {
            self.wake.receivable_at(until);
            // A nack of a last allowed receive ends its last visibility then.
            self.pull.last_receive_ends(until);
        }
        Ok(settled)
    }

    /// Sets a received message's remaining visibility (zero: visible now).
    pub async fn change_visibility(
        &self,
        actor: &Actor,
        target: &TargetId,
        handle: &str,
        visibility: Duration,
    ) -> ServiceResult<()> {
        let account = actor.allow(Permission::ReceiveMessages)?;
        self.pull_target(account, target).await?;
        let handle =
            ReceiptHandle::parse(handle).ok_or(ServiceError::Conflict(Conflict::StaleHandle))?;
        let now = self.now();
        let until = now + TimeDelta::from_std(visibility).unwrap_or_default();
        if !self
            .store
            .set_visibility(account, target, &handle, until, now)
            .await?
        {
            return Err(ServiceError::Conflict(Conflict::StaleHandle));
        }
        self.wake.receivable_at(until);
        // Were it the last allowed receive, it ends then.
        self.pull.last_receive_ends(until);
        Ok(())
    }

    /// Sets the `dispatch_pull_depth` gauges from the store, over every
    /// pull target; left as they were when the database does not answer.
    pub async fn measure_pull_depth(&self) {
        match self.store.depth_totals(self.now()).await {
            Ok((due, hidden)) => {
                metrics::gauge!(m::PULL_DEPTH, "state" => "due").set(due as f64);
                metrics::gauge!(m::PULL_DEPTH, "state" => "hidden").set(hidden as f64);
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the pull targets' depth"),
        }
    }

    /// The queue of the account's pull target at a glance.
    pub async fn pull_depth(&self, actor: &Actor, target: &TargetId) -> ServiceResult<Depth> {
        let account = actor.allow(Permission::ReadTargets)?;
        self.pull_target(account, target).await?;
        Ok(self.store.depth(account, target, self.now()).await?)
    }
}

/// Runs `apply` on the handles that parse (a handle this server did not
/// make is stale unread) and sorts what it answered.
async fn settle<F, Fut>(handles: &[String], apply: F) -> ServiceResult<Settled>
where
    F: FnOnce(Vec<ReceiptHandle>) -> Fut,
    Fut: std::future::Future<Output = StoreResult<Vec<bool>>>,
{
    let parsed: Vec<(usize, ReceiptHandle)> = handles
        .iter()
        .enumerate()
        .filter_map(|(i, h)| ReceiptHandle::parse(h).map(|h| (i, h)))
        .collect();
    // The store answers for these, in order.
    let done = apply(parsed.iter().map(|(_, h)| *h).collect()).await?;
    let mut settled = Settled::default();
    let mut ok = vec![false; handles.len()];
    for ((i, _), d) in parsed.iter().zip(done) {
        ok[*i] = d;
    }
    // A handle sent twice counts once.
    let mut seen = std::collections::HashSet::new();
    for (h, ok) in handles.iter().zip(ok) {
        if !seen.insert(h.as_str()) {
            continue;
        }
        if ok {
            settled.done += 1;
        } else {
            settled.stale.push(h.clone());
        }
    }
    Ok(settled)
}
